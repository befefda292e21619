// The progress card (bar, step, epoch, images/s, ETA, last loss) and the one place that
// redraws the page during training: at most once per animation frame.

import { $, duration, num } from "../lib/util.js";
import { appState, setStatus } from "./state.js";
import { drawCharts } from "./charts.js";
import { renderStats } from "./dashboard.js";

const dirty = { charts: false, progress: false };
let rafPending = false;

/** Redraw the charts and / or the progress card at the next animation frame. */
export function requestRender({ charts = false, progress = false } = {}) {
  dirty.charts ||= charts;
  dirty.progress ||= progress;
  if (rafPending) return;
  rafPending = true;
  requestAnimationFrame(render);
}

function render() {
  rafPending = false;
  if (dirty.progress) {
    dirty.progress = false;
    renderProgress();
  }
  if (dirty.charts) {
    dirty.charts = false;
    drawCharts();
  }
}

/** The worker's `evaluating {done, total, what}`: "Evaluating N test images… k/N" in the status
 * line, and the progress bar counts the images until the next `progress` or `done`. */
export function showEvaluating(m) {
  appState.evaluating = m;
  const n = Number(m.total).toLocaleString();
  setStatus(`Evaluating ${n} ${m.what === "validation" ? "validation" : "test"} images… ` +
    `${Number(m.done).toLocaleString()}/${n}`);
  requestRender({ progress: true });
}

export function renderProgress() {
  renderStats();
  const p = appState.progress;
  const ev = appState.evaluating;
  if (ev && appState.phase === "training") {
    $("progress").max = Math.max(1, ev.total);
    $("progress").value = ev.done;
    $("progress").textContent = `${Math.round((100 * ev.done) / Math.max(1, ev.total))}%`;
    $("eta").textContent = "–";
    return;
  }
  if (!p) {
    $("progress").value = 0;
    $("progress").max = 1;
    for (const id of ["step-text", "epoch-text", "ips", "eta", "last-loss"]) {
      $(id).textContent = "–";
    }
    return;
  }
  if (!p.total_steps) {  // started, no report yet
    $("progress").removeAttribute("value");
    $("step-text").textContent = "starting…";
    return;
  }
  const total = Math.max(1, p.total_steps || 1);
  $("progress").max = total;
  $("progress").value = Math.min(p.step, total);
  $("progress").textContent = `${Math.round((100 * p.step) / total)}%`;
  $("step-text").textContent =
    `${Number(p.step).toLocaleString()} / ${Number(total).toLocaleString()}`;
  $("epoch-text").textContent = `${p.epoch} / ${p.epochs}`;
  $("ips").textContent = p.images_per_s != null ? Math.round(p.images_per_s).toLocaleString() : "–";
  const running = appState.phase === "training" || appState.phase === "paused";
  $("eta").textContent = running ? duration(p.eta_s)
    : appState.phase === "done" && !window.lastRun?.stopped ? duration(0) : "–";
  const last = appState.steps[appState.steps.length - 1];
  $("last-loss").textContent = last ? num(last.loss) : "–";
}
