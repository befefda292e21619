// The dashboard's live charts (uPlot): training loss (raw and smoothed) and batch accuracy per
// step; the learning rate per step; train vs validation loss and accuracy against steps. Data
// arrive with the worker's `progress` (losses, lrs), `validation` (points inside an epoch on
// part of the held-out images) and `epoch` messages (all of them, at the epoch's end).
//
// The smoothed loss is an exponential moving average with Adam's bias correction: ema_t =
// 0.9 ema_(t-1) + 0.1 loss_t from ema_0 = 0, shown as ema_t / (1 - 0.9^t), so it follows the
// loss from the first step instead of lagging behind the first loss. Each validation point's
// train side is the mean loss and batch accuracy of the steps since the previous point.
//
// Zoom: drag across a chart to zoom its steps; the three charts zoom together; double-click a
// chart or press "Reset zoom" to see the whole run again.
// Test hook: window.charts = {steps, lr, val} (the uPlot instances; `.data` is what they
// draw).

import uPlot from "/vendor/uplot/uPlot.esm.js";
import { $, cssVar, num } from "../lib/util.js";
import { appState } from "./state.js";
import { refreshChartTables } from "./chart-tables.js";

const SMOOTHING = 0.9;  // the loss's moving average (debiased): ema = 0.9 ema + 0.1 loss
const charts = {};       // steps, lr, val: uPlot instances
window.charts = charts;
const ema = { value: 0, n: 0 };          // the raw average and its number of steps
const stepData = [[], [], [], []];       // step, loss, smoothed loss, batch acc (%)
const lrData = [[], []];                 // step, learning rate
let valData = [[], [], [], [], []];      // step, train loss, val loss, train acc, val acc (%)
let valCount = -1;                       // the validation points valData was made of
const zoom = { steps: null };            // [min, max] of the x axis, or null: the whole run
const GROUP = { steps: "steps", lr: "steps", val: "steps" };

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
  $("reset-zoom").hidden = !zoom.steps;
}

export function resetZoom() {
  setZoom("steps", null);
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
  // a validation series: dashed for training, solid for validation, a dot per point
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

  const elV = $("chart-val");
  const zv = zoomable("val", totalSteps);
  charts.val = new uPlot({
    ...chartSize(elV, 150, 190), cursor: zv.cursor, hooks: zv.hooks,
    scales: {
      x: { time: false, range: zv.xRange },
      loss: { auto: true, range: (u, mn, mx) => [0, mx > 0 ? mx * 1.1 : 1] },
      // accuracy lives near the top: [min rounded down to 10%, 100%]
      acc: {
        range: (u, mn) => [mn == null ? 0 : Math.max(0, Math.floor((mn - 2) / 10) * 10), 100],
      },
    },
    axes: [stepAxis, lossAxis, pctAxis],
    series: [
      { label: "step", value: (u, v) => (v == null ? "–" : v.toLocaleString()) },
      line("train loss", "loss", cLoss, true, (u, v) => num(v)),
      line("val loss", "loss", cLoss, false, (u, v) => num(v)),
      line("train acc", "acc", cAcc, true, pctValue(2)),
      line("val acc", "acc", cAcc, false, pctValue(2)),
    ],
  }, valData, elV);

  const sizes = [[charts.steps, elS, 180, 250], [charts.lr, elL, 150, 190],
    [charts.val, elV, 150, 190]];
  const ro = new ResizeObserver(() => {
    for (const [u, el, lo, hi] of sizes) u.setSize(chartSize(el, lo, hi));
  });
  for (const [, el] of sizes) ro.observe(el);
  $("reset-zoom").addEventListener("click", resetZoom);
}

export function resetCharts() {
  for (const a of [...stepData, ...lrData]) a.length = 0;
  valData = [[], [], [], [], []];
  valCount = -1;
  ema.value = ema.n = 0;
  zoom.steps = null;
  $("reset-zoom").hidden = true;
}

/** The smoothed loss after adding ``loss``: the moving average, debiased (Adam's correction
 * ema_t / (1 - SMOOTHING^t)). */
function smooth(loss) {
  ema.value = SMOOTHING * ema.value + (1 - SMOOTHING) * loss;
  ema.n += 1;
  return ema.value / (1 - SMOOTHING ** ema.n);
}

/** Append a `progress` message's [step, loss, acc (fraction)] rows and their learning rates
 * (``lrs``, one per row, or none). */
export function addSteps(rows, lrs = []) {
  rows.forEach(([step, loss, acc], i) => {
    stepData[0].push(step);
    stepData[1].push(loss);
    stepData[2].push(smooth(loss));
    stepData[3].push(acc == null ? null : acc * 100);
    if (lrs[i] != null) {
      lrData[0].push(step);
      lrData[1].push(lrs[i]);
    }
  });
}

/** The validation points, in step order: ``appState.validations`` (inside an epoch, on part
 * of the held-out images) and the epochs' ends (all of them; ``full``), each with the mean
 * train loss / batch accuracy (fractions) of the steps since the previous point (the epoch's
 * mean when those steps are not known, e.g. after a resume). */
export function validationPoints() {
  const points = [
    ...appState.validations.map((v) => ({ ...v, full: false })),
    ...appState.epochs.filter((e) => e.step != null)
      .map((e) => ({ ...e, full: true, images: null })),
  ].sort((a, b) => a.step - b.step || a.full - b.full);
  const steps = appState.steps;
  let k = 0;
  let prev = 0;
  for (const p of points) {
    let loss = 0, acc = 0, n = 0;
    while (k < steps.length && steps[k].step <= p.step) {
      if (steps[k].step > prev) {
        loss += steps[k].loss;
        acc += steps[k].acc ?? 0;
        n += 1;
      }
      k += 1;
    }
    p.train_loss = n ? loss / n : p.train_loss ?? null;
    p.train_acc = n ? acc / n : p.train_acc ?? null;
    prev = p.step;
  }
  return points;
}

function rebuildValidation() {
  const count = appState.validations.length + appState.epochs.length;
  if (count === valCount) return;
  valCount = count;
  const pct = (a) => (a == null ? null : a * 100);
  const points = validationPoints();
  valData = [points.map((p) => p.step), points.map((p) => p.train_loss),
    points.map((p) => p.val_loss ?? null), points.map((p) => pct(p.train_acc)),
    points.map((p) => pct(p.val_acc))];
}

/** Redraw the charts with their data (call from requestAnimationFrame). */
export function drawCharts() {
  rebuildValidation();
  const data = { steps: stepData, lr: lrData, val: valData };
  for (const [name, u] of Object.entries(charts)) {
    u.setData(data[name]);
    legendToLatest(u);
  }
  $("chart-steps-empty").hidden = stepData[0].length > 0;
  $("chart-lr-empty").hidden = lrData[0].length > 0;
  $("chart-val-empty").hidden = valData[0].length > 0;
  refreshChartTables();
}
