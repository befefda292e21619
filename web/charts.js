// The dashboard's live charts (uPlot): training loss (raw and smoothed) and batch accuracy per
// step; the learning rate per step; train vs validation loss and accuracy per epoch. Data
// arrive with the worker's `progress` (losses, lrs) and `epoch` messages.
//
// Zoom: drag across a chart to zoom its steps (or epochs); the loss and learning-rate charts
// zoom together; double-click a chart or press "Reset zoom" to see the whole run again.
// Test hook: window.charts = {steps, lr, epochs} (the uPlot instances; `.data` is what they
// draw).

import uPlot from "/vendor/uplot/uPlot.esm.js";
import { $, cssVar, num } from "./util.js";
import { appState } from "./state.js";
import { refreshChartTables } from "./chart-tables.js";

const SMOOTHING = 0.9;  // exponential moving average of the loss: ema = 0.9 ema + 0.1 loss
const charts = {};       // steps, lr, epochs: uPlot instances
window.charts = charts;
let emaLoss = null;
const stepData = [[], [], [], []];       // step, loss, smoothed loss, batch acc (%)
const lrData = [[], []];                 // step, learning rate
const epochData = [[], [], [], [], []];  // epoch, train loss, val loss, train acc, val acc (%)
const zoom = { steps: null, epochs: null };  // [min, max] of the x axis, or null: the whole run
const GROUP = { steps: "steps", lr: "steps", epochs: "epochs" };

function chartSize(el, lo, hi) {
  const w = Math.max(240, Math.floor(el.clientWidth));
  return { width: w, height: Math.max(lo, Math.min(hi, Math.round(w * 0.5))) };
}

/** When the cursor is not on a chart, its legend shows the latest values instead of dashes. */
function legendToLatest(u) {
  const n = u.data[0].length;
  if (n && (u.cursor.idx == null || u.cursor.left < 0)) u.setLegend({ idx: n - 1 });
}
const INT_INCRS = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 2500, 5000, 10000,
  20000, 50000, 100000];

/** Zoom the charts of ``group`` to [min, max] (null: the whole run). */
function setZoom(group, range) {
  zoom[group] = range;
  for (const [name, u] of Object.entries(charts)) {
    if (GROUP[name] === group) u.setData(u.data);  // the x range function reads `zoom`
  }
  $("reset-zoom").hidden = !zoom.steps && !zoom.epochs;
}

export function resetZoom() {
  setZoom("steps", null);
  setZoom("epochs", null);
}

/** uPlot options shared by the charts: drag-select zooms (``group``), double-click resets. */
function zoomable(name, extent) {
  const group = GROUP[name];
  return {
    cursor: { drag: { x: true, y: false, setScale: false }, bind: { dblclick: () => null },
      sync: { key: group } },
    hooks: {
      setCursor: [legendToLatest],
      setSelect: [(u) => {
        const { left, width } = u.select;
        if (width < 3) return;
        const lo = u.posToVal(left, "x");
        const hi = u.posToVal(left + width, "x");
        u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
        if (hi > lo) setZoom(group, [lo, hi]);
      }],
      ready: [(u) => u.over.addEventListener("dblclick", () => setZoom(group, null))],
    },
    xRange: (u, mn, mx) => zoom[group] ?? [0, Math.max(mx ?? 1, extent(), 1)],
  };
}

export function makeCharts() {
  const text = cssVar("--muted", "#667");
  const grid = cssVar("--grid", "rgba(0,0,0,.08)");
  const cLoss = cssVar("--c-loss", "#4f46e5");
  const cLossRaw = cssVar("--c-loss-raw", "rgba(79,70,229,.3)");
  const cAcc = cssVar("--c-acc", "#059669");
  const cLr = cssVar("--c-lr", "#b45309");
  const font = `12px ${cssVar("--font", "system-ui, sans-serif")}`;
  const axis = (extra) => ({
    stroke: text, font, labelFont: font, grid: { stroke: grid, width: 1 },
    ticks: { stroke: grid, width: 1 }, ...extra,
  });
  const pctAxis = axis({
    scale: "acc", side: 1, label: "accuracy", grid: { show: false },
    values: (u, v) => v.map((x) => `${x}%`), size: 56,
  });
  const lossAxis = axis({
    scale: "loss", label: "loss", size: 56,
    values: (u, v) => v.map((x) => (x >= 10 ? x.toFixed(0) : +x.toPrecision(3))),
  });
  const stepAxis = axis({ label: "step", incrs: INT_INCRS,
    values: (u, v) => v.map((x) => x.toLocaleString()) });
  const pctValue = (d) => (u, v) => (v == null ? "–" : `${v.toFixed(d)}%`);
  // an epoch series: dashed for training, solid for validation, a dot per epoch
  const line = (label, scale, stroke, dashed, value) => ({ label, scale, stroke, width: 2,
    dash: dashed ? [6, 4] : undefined, points: { show: true, size: 7, fill: stroke }, value });
  const totalSteps = () => appState.progress?.total_steps ?? 1;

  const elS = $("chart-steps");
  const zs = zoomable("steps", totalSteps);
  charts.steps = new uPlot({
    ...chartSize(elS, 180, 250), cursor: zs.cursor, hooks: zs.hooks,
    scales: {
      x: { time: false, range: zs.xRange },
      loss: { auto: true, range: (u, mn, mx) => [0, mx > 0 ? mx * 1.05 : 1] },
      acc: { range: (u, mn, mx) => [Math.min(mn ?? 0, 0) < 0 ? mn : 0, 100] },
    },
    axes: [stepAxis, lossAxis, pctAxis],
    series: [
      { label: "step", value: (u, v) => (v == null ? "–" : v.toLocaleString()) },
      { label: "loss", scale: "loss", stroke: cLossRaw, width: 1, value: (u, v) => num(v) },
      { label: "loss (smoothed)", scale: "loss", stroke: cLoss, width: 2, value: (u, v) => num(v) },
      { label: "batch acc", scale: "acc", stroke: cAcc, width: 1.5, value: pctValue(1) },
    ],
  }, stepData, elS);

  const elL = $("chart-lr");
  const zl = zoomable("lr", totalSteps);
  charts.lr = new uPlot({
    ...chartSize(elL, 150, 190), cursor: zl.cursor, hooks: zl.hooks,
    scales: { x: { time: false, range: zl.xRange },
      lr: { auto: true, range: (u, mn, mx) => [0, mx > 0 ? mx * 1.1 : 1] } },
    axes: [stepAxis, axis({ scale: "lr", label: "learning rate", size: 64,
      values: (u, v) => v.map((x) => +x.toPrecision(3)) })],
    series: [
      { label: "step", value: (u, v) => (v == null ? "–" : v.toLocaleString()) },
      { label: "lr", scale: "lr", stroke: cLr, width: 2,
        value: (u, v) => (v == null ? "–" : v.toPrecision(4)) },
    ],
  }, lrData, elL);

  const elE = $("chart-epochs");
  const ze = zoomable("epochs", () => appState.config?.epochs ?? 1);
  charts.epochs = new uPlot({
    ...chartSize(elE, 150, 190), cursor: ze.cursor, hooks: ze.hooks,
    scales: {
      x: { time: false, range: ze.xRange },
      loss: { auto: true, range: (u, mn, mx) => [0, mx > 0 ? mx * 1.1 : 1] },
      // accuracy lives near the top: [min rounded down to 10%, 100%]
      acc: { range: (u, mn) => [mn == null ? 0 : Math.max(0, Math.floor((mn - 2) / 10) * 10), 100] },
    },
    axes: [axis({ label: "epoch", incrs: INT_INCRS, values: (u, v) => v.map((x) => String(x)) }),
      lossAxis, pctAxis],
    series: [
      { label: "epoch", value: (u, v) => (v == null ? "–" : String(v)) },
      line("train loss", "loss", cLoss, true, (u, v) => num(v)),
      line("val loss", "loss", cLoss, false, (u, v) => num(v)),
      line("train acc", "acc", cAcc, true, pctValue(2)),
      line("val acc", "acc", cAcc, false, pctValue(2)),
    ],
  }, epochData, elE);

  const sizes = [[charts.steps, elS, 180, 250], [charts.lr, elL, 150, 190],
    [charts.epochs, elE, 150, 190]];
  const ro = new ResizeObserver(() => {
    for (const [u, el, lo, hi] of sizes) u.setSize(chartSize(el, lo, hi));
  });
  for (const [, el] of sizes) ro.observe(el);
  $("reset-zoom").addEventListener("click", resetZoom);
}

export function resetCharts() {
  for (const a of [...stepData, ...lrData, ...epochData]) a.length = 0;
  emaLoss = null;
  zoom.steps = zoom.epochs = null;
  $("reset-zoom").hidden = true;
}

/** Append a `progress` message's [step, loss, acc (fraction)] rows and their learning rates
 * (``lrs``, one per row, or none). */
export function addSteps(rows, lrs = []) {
  rows.forEach(([step, loss, acc], i) => {
    emaLoss = emaLoss == null ? loss : SMOOTHING * emaLoss + (1 - SMOOTHING) * loss;
    stepData[0].push(step);
    stepData[1].push(loss);
    stepData[2].push(emaLoss);
    stepData[3].push(acc == null ? null : acc * 100);
    if (lrs[i] != null) {
      lrData[0].push(step);
      lrData[1].push(lrs[i]);
    }
  });
}

/** Append an epoch's {epoch, train_loss, train_acc, val_loss, val_acc} (accuracies as
 * fractions). */
export function addEpoch(e) {
  const pct = (a) => (a == null ? null : a * 100);
  epochData[0].push(e.epoch);
  epochData[1].push(e.train_loss ?? null);
  epochData[2].push(e.val_loss);
  epochData[3].push(pct(e.train_acc));
  epochData[4].push(pct(e.val_acc));
}

/** Redraw the charts with their data (call from requestAnimationFrame). */
export function drawCharts() {
  const data = { steps: stepData, lr: lrData, epochs: epochData };
  for (const [name, u] of Object.entries(charts)) {
    u.setData(data[name]);
    legendToLatest(u);
  }
  $("chart-steps-empty").hidden = stepData[0].length > 0;
  $("chart-lr-empty").hidden = lrData[0].length > 0;
  $("chart-epochs-empty").hidden = epochData[0].length > 0;
  refreshChartTables();
}
