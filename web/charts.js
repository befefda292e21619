// The two live charts (uPlot): training loss and batch accuracy per step, validation loss and
// accuracy per epoch. Data arrive with the worker's `progress` and `epoch` messages.

import uPlot from "/vendor/uplot/uPlot.esm.js";
import { $, cssVar, num } from "./util.js";
import { appState } from "./state.js";

let stepChart = null;
let epochChart = null;
let emaLoss = null;
const stepData = [[], [], [], []];   // step, loss, smoothed loss, batch acc (%)
const epochData = [[], [], []];      // epoch, val loss, val acc (%)

function chartSize(el) {
  const w = Math.max(240, Math.floor(el.clientWidth));
  return { width: w, height: Math.max(200, Math.min(300, Math.round(w * 0.55))) };
}

/** When the cursor is not on a chart, its legend shows the latest values instead of dashes. */
function legendToLatest(u) {
  const n = u.data[0].length;
  if (n && (u.cursor.idx == null || u.cursor.left < 0)) u.setLegend({ idx: n - 1 });
}
const INT_INCRS = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 2500, 5000, 10000, 20000, 50000, 100000];
const latestLegendHooks = { setCursor: [legendToLatest] };

export function makeCharts() {
  const text = cssVar("--muted", "#667");
  const grid = cssVar("--grid", "rgba(0,0,0,.08)");
  const cLoss = cssVar("--c-loss", "#4f46e5");
  const cLossRaw = cssVar("--c-loss-raw", "rgba(79,70,229,.3)");
  const cAcc = cssVar("--c-acc", "#059669");
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
  const accScale = { range: (u, mn, mx) => [Math.min(mn ?? 0, 0) < 0 ? mn : 0, 100] };

  const elS = $("chart-steps");
  stepChart = new uPlot({
    ...chartSize(elS),
    cursor: { drag: { x: true, y: false } },
    hooks: latestLegendHooks,
    scales: {
      x: { time: false, range: (u, mn, mx) => [0, Math.max(mx ?? 1, appState.progress?.total_steps ?? 1, 1)] },
      loss: { auto: true, range: (u, mn, mx) => [0, mx > 0 ? mx * 1.05 : 1] },
      acc: accScale,
    },
    axes: [axis({ label: "step", incrs: INT_INCRS, values: (u, v) => v.map((x) => x.toLocaleString()) }), lossAxis, pctAxis],
    series: [
      { label: "step", value: (u, v) => (v == null ? "–" : v.toLocaleString()) },
      { label: "loss", scale: "loss", stroke: cLossRaw, width: 1, value: (u, v) => num(v) },
      { label: "loss (smoothed)", scale: "loss", stroke: cLoss, width: 2, value: (u, v) => num(v) },
      { label: "batch acc", scale: "acc", stroke: cAcc, width: 1.5, value: (u, v) => (v == null ? "–" : `${v.toFixed(1)}%`) },
    ],
  }, stepData, elS);

  const elE = $("chart-epochs");
  epochChart = new uPlot({
    ...chartSize(elE),
    cursor: { drag: { x: false, y: false } },
    hooks: latestLegendHooks,
    scales: {
      x: { time: false, range: (u, mn, mx) => [0, Math.max(mx ?? 1, appState.config?.epochs ?? 1, 1)] },
      loss: { auto: true, range: (u, mn, mx) => [0, mx > 0 ? mx * 1.1 : 1] },
      // validation accuracy lives near the top: zoom to [min rounded down to 10%, 100%]
      acc: { range: (u, mn, mx) => [mn == null ? 0 : Math.max(0, Math.floor((mn - 2) / 10) * 10), 100] },
    },
    axes: [
      axis({ label: "epoch", incrs: INT_INCRS, values: (u, v) => v.map((x) => String(x)) }),
      lossAxis, pctAxis,
    ],
    series: [
      { label: "epoch", value: (u, v) => (v == null ? "–" : String(v)) },
      { label: "val loss", scale: "loss", stroke: cLoss, width: 2, points: { show: true, size: 7, fill: cLoss }, value: (u, v) => num(v) },
      { label: "val acc", scale: "acc", stroke: cAcc, width: 2, points: { show: true, size: 7, fill: cAcc }, value: (u, v) => (v == null ? "–" : `${v.toFixed(2)}%`) },
    ],
  }, epochData, elE);

  const ro = new ResizeObserver(() => {
    stepChart.setSize(chartSize(elS));
    epochChart.setSize(chartSize(elE));
  });
  ro.observe(elS);
  ro.observe(elE);
}

export function resetCharts() {
  for (const a of stepData) a.length = 0;
  for (const a of epochData) a.length = 0;
  emaLoss = null;
}

/** Append a `progress` message's [step, loss, acc (fraction)] rows. */
export function addSteps(rows) {
  for (const [step, loss, acc] of rows) {
    emaLoss = emaLoss == null ? loss : 0.9 * emaLoss + 0.1 * loss;
    stepData[0].push(step);
    stepData[1].push(loss);
    stepData[2].push(emaLoss);
    stepData[3].push(acc == null ? null : acc * 100);
  }
}

/** Append an epoch's validation {epoch, val_loss, val_acc (fraction)}. */
export function addEpoch(e) {
  epochData[0].push(e.epoch);
  epochData[1].push(e.val_loss);
  epochData[2].push(e.val_acc == null ? null : e.val_acc * 100);
}

/** Redraw both charts with their data (call from requestAnimationFrame). */
export function drawCharts() {
  for (const u of [stepChart, epochChart]) {
    if (!u) continue;
    u.setData(u === stepChart ? stepData : epochData);
    legendToLatest(u);
  }
  $("chart-steps-empty").hidden = stepData[0].length > 0;
  $("chart-epochs-empty").hidden = epochData[0].length > 0;
}
