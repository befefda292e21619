// A run from the page's side: `start` (a new run, or the stored checkpoint's continuation),
// Pause / Resume and Stop (then Stop evaluating). The worker answers with the messages that
// app.js handles.

import { appState, hideError, log, setStatus } from "./state.js";
import { addSteps, resetCharts } from "./charts.js";
import { requestRender } from "./progress.js";
import { clearResults } from "./results.js";
import { running, setPhase, syncControls, testing } from "./controls.js";
import { post } from "./worker-link.js";

let trainStart = 0;

/** Seconds since the last `start` (null before any). */
export const runSeconds = () => (trainStart ? (performance.now() - trainStart) / 1000 : null);

/** Send `start` for ``cfg`` (checked) and ``model``; ``resume``: the stored checkpoint's
 * {epoch, step, epochs_completed, weights, optimizer, total_steps} with ``history`` (its
 * metrics {steps, epochs}), which refills appState and the charts first. */
export function beginRun(cfg, model, resume = null, history = null) {
  hideError();
  const steps = history?.steps?.slice() ?? [];
  const epochs = history?.epochs?.slice() ?? [];
  Object.assign(appState, { config: cfg, model, resuming: Boolean(resume),
    runDataset: appState.dataset, steps, epochs,
    validations: [], error: null, memoryBytes: null, evaluating: null,
    progress: { step: resume?.step ?? 0, total_steps: resume?.total_steps ?? 0,
      epoch: resume?.epoch ?? 0, epochs: cfg.epochs } });
  window.lastRun = null;
  clearResults();
  resetCharts();
  addSteps(steps.map((s) => [s.step, s.loss, s.acc]), steps.map((s) => s.lr));
  requestRender({ charts: true, progress: true });
  appState.busy.stopping = appState.busy.pausing = appState.busy.skipping = false;
  trainStart = performance.now();
  setPhase("training");
  setStatus("Starting…");
  log(`Start: ${model} on ${appState.dataset?.title ?? "MNIST"}, ${cfg.optimizer} ` +
    `lr ${cfg.lr}, batch ${cfg.batch_size}, ` +
    `${cfg.epochs} epoch(s), seed ${cfg.seed}, ${cfg.init}` +
    (cfg.scheduler && cfg.scheduler !== "none" ? `, ${cfg.scheduler} schedule` : "") +
    (cfg.max_steps ? `, max ${cfg.max_steps} steps` : ""));
  if (cfg.trainable && cfg.init === "scratch") {
    log("Note: “Train from scratch” re-initialises the frozen parameters too; choose " +
      "“Fine-tune” to keep the model’s weights in the frozen layers.", "error");
  }
  if (resume) log(`Resuming from the checkpoint of epoch ${resume.epoch} (step ${resume.step}).`);
  // config.model too: classroom mode (web/page/classroom.js) reads and pins it there
  post({ type: "start", model, config: { ...cfg, model }, resume });
}

/** Pause or Resume (the worker answers `paused`, which sets the phase). */
export function togglePause() {
  if (!running() || appState.busy.stopping || appState.busy.pausing) return;
  const pause = appState.phase === "training";
  appState.busy.pausing = true;
  post({ type: pause ? "pause" : "resume" });
  setStatus(pause ? "Pausing after the current step…" : "Resuming…");
  syncControls();
}

/** Stop: training ends after the current step, then the test images are evaluated (the pill
 * says "evaluating" at once); a second press (Stop evaluating) ends that evaluation after its
 * current chunk of images: the results cover the images evaluated so far. */
export function stopTraining() {
  if (!running() || appState.busy.skipping) return;
  if (testing()) {
    appState.busy.skipping = true;
    post({ type: "skip_test" });
    setStatus("Ending the evaluation after the current images: the results will cover " +
      "the test images evaluated so far.");
    syncControls();
    return;
  }
  appState.busy.stopping = true;
  post({ type: "stop" });
  const n = Number(appState.config?.eval_images ?? 0).toLocaleString();
  setStatus(`Stopping after the current step, then evaluating ${n} test images ` +
    "(press Stop evaluating to cut it short)…");
  log("Stop requested.");
  syncControls();
}
