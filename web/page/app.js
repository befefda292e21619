// webgpu-trainer — the page (main thread), the entry module. No framework: plain ES modules.
//
// Talks to the module worker (/lib/worker.js) with the protocol in docs/ARCHITECTURE.md:
//   main -> worker: {type: "start", model, config, resume?}, {type: "stop"}, {type: "pause"},
//                   {type: "resume"}, {type: "skip_test"} (the second Stop), prepare,
//                   snapshot, convolve
//   worker -> main: selfcheck (the GPU self-check's warning, web/selfcheck.js)
//   worker -> main: status, adapter, no_webgpu, error, ready, setup, progress, paused,
//                   evaluating, validation, epoch, done; prepared (web/prepare.js);
//                   checkpoint, snapshot, device_lost (keep your work, web/storage.js);
//                   convolved (web/kernels.js)
// The settings form is drawn from the run configuration's schema (form.js). Test hooks:
// window.appState (phase, adapter, steps, epochs, ...), window.lastRun (the last `done`
// message) and window.readFormForTests() (the config Start would send).
//
// Modules: util.js (helpers), state.js (appState, log, status, errors), form.js (settings
// from the schema), validation.js (the server's check, inline marks), models.js (model list,
// upload), summary.js (model summary, trainable parameters), charts.js, progress.js (progress
// card, redraws), results.js (results, download), tabs.js (the view tabs), dashboard.js (speed
// and machine), help.js (the (i) toggletips), share.js (share link, leave-page warning),
// kernels.js (the kernels playground), storage.js (checkpoints in IndexedDB, resume, export /
// import, reset, GPU device lost), views.js (live views inside the model), tryit.js (draw a
// digit / pick a test image), testset.js, values.js (the strict number parser, own keys).

import { $, frac, num, pct } from "../lib/util.js";
import { appState, hideError, hooks, log, setStatus, showError } from "./state.js";
import { buildForm, fieldProblems, loadSchema, readConfig, setField } from "./form.js";
import { adapterName } from "./dashboard.js";
import { enhanceHelp } from "./help.js";
import { applyLink, checkLinkModel, setupShare } from "./share.js";
import { formState, markErrors, scheduleCheck, validateNow } from "./validation.js";
import { loadModels, onModelChange, setupDropzone } from "./models.js";
import { setTrainable, trainableConfig } from "./summary.js";
import { addSteps, makeCharts, resetCharts } from "./charts.js";
import { renderProgress, requestRender, showEvaluating } from "./progress.js";
import { clearResults, downloadOnnx, showResults, VERDICT_TITLE } from "./results.js";
import { showSelfCheck } from "./selfcheck.js";
import { attachClassroom } from "./classroom.js";
import { setupTabs } from "./tabs.js";
import { setupChartTables } from "./chart-tables.js";
import { onProfile, setupProfile } from "./profile.js";
import { kernelsReady, onConvolved, setupKernels } from "./kernels.js";
import { hideResumeOffer, onCheckpoint, onDeviceLost, onRunDone, onSnapshot, setupStorage }
  from "./storage.js";
import { onInspect, setupViews } from "./views.js";
import { onPrediction, setupTryIt } from "./tryit.js";
import { own } from "./values.js";
import { forgetPrepared, onPrepared } from "./prepare.js";
import { setupLayout } from "./layout.js";

let worker = null;
let trainStart = 0;
const readyWaiters = [];  // restartWorker's promises, resolved by the next `ready`

/** The config Start sends: the form's fields and the ticked parameters (`trainable`). */
function currentConfig() {
  return { ...readConfig(), trainable: trainableConfig() };
}
window.readFormForTests = currentConfig;
hooks.currentConfig = currentConfig;
hooks.fieldProblems = fieldProblems;
hooks.formChanged = () => scheduleCheck(0);

// ------------------------------------------------------------------------------------ phase
const PHASE_LABEL = {
  booting: "starting up", ready: "ready", training: "training", paused: "paused", done: "done",
  error: "error", lost: "GPU lost",
};
const running = () => appState.phase === "training" || appState.phase === "paused";
// the final test evaluation: after Stop, or at the end of the run (Stop then skips its rest)
const testing = () => running() &&
  (appState.busy.stopping || appState.evaluating?.what === "test");
// the pill after a run: the verdict of engine/verdict.py
const DONE_LABEL = { ok: "done", diverged: "diverged", chance: "chance level", stopped: "stopped" };

function setPhase(phase) {
  appState.phase = phase;
  const pill = $("phase");
  pill.dataset.phase = phase;
  const verdict = phase === "done" ? window.lastRun?.verdict ??
    (window.lastRun?.stopped ? "stopped" : "ok") : null;
  if (verdict) pill.dataset.verdict = verdict;
  else delete pill.dataset.verdict;
  syncControls();
}

/** The phase pill: the phase, "evaluating" during the final test evaluation, the verdict. */
function syncPill() {
  const pill = $("phase");
  const verdict = pill.dataset.verdict;
  const phase = appState.phase;
  pill.textContent = appState.noWebGPU ? "no WebGPU"
    : verdict ? own(DONE_LABEL, verdict) ?? verdict
      : testing() ? "evaluating" : own(PHASE_LABEL, phase) ?? phase;
  pill.dataset.evaluating = String(testing());
}

function syncControls() {
  const training = running();
  // Disabled while the last check found a bad setting; a check on its way does not disable it
  // (leaving a field fires its change, and its check, just before the click lands): Start
  // checks the settings again itself.
  $("start").disabled = training || !appState.workerReady || appState.noWebGPU ||
    !$("model").value || !formState.valid;
  $("start").title = formState.valid ? "" : "Fix the settings marked in red first";
  // Stop, then Stop evaluating: the test evaluation ends after its current chunk
  $("stop").disabled = !training || appState.busy.skipping;
  $("stop").textContent = testing() ? "Stop evaluating" : "Stop";
  $("pause").disabled = !training || testing() || appState.busy.pausing;
  syncPill();
  $("pause").textContent = appState.phase === "paused" ? "Resume" : "Pause";
  $("settings-fields").disabled = training;
  // the model summary's trainable toggles and the upload belong to the settings too
  const toggles = "#summary-card button:not(.tip), #summary-table input";
  for (const el of document.querySelectorAll(toggles)) {
    el.disabled = training;
  }
  $("dropzone").classList.toggle("busy", training);
  for (const b of document.querySelectorAll(".preset")) b.disabled = training;
  $("profile-run").disabled = training || !appState.workerReady || appState.busy.profiling;
  $("download").disabled = training || !window.lastRun || !window.lastRun.weights ||
    appState.busy.downloading;
}
hooks.sync = syncControls;
hooks.setPhase = setPhase;
hooks.post = (msg) => worker?.postMessage(msg);

// ---------------------------------------------------------------------------------- worker
function startWorker() {
  try {
    // ?test=1: the worker accepts the test hooks (debug_lose_device)
    const test = new URLSearchParams(location.search).get("test") === "1";
    worker = new Worker(test ? "/lib/worker.js?test=1" : "/lib/worker.js", { type: "module" });
    attachClassroom(worker);  // classroom mode (?class=ID): web/classroom.js
  } catch (e) {
    showError(`Could not start the worker: ${e.message ?? e}`);
    setPhase("error");
    return;
  }
  worker.onmessage = (ev) => onWorkerMessage(ev.data);
  worker.onerror = (ev) => {
    ev.preventDefault?.();
    showError(`Worker failed: ${ev.message || "could not load /lib/worker.js"}` +
      (ev.filename ? ` (${ev.filename}:${ev.lineno})` : ""));
    appState.busy.stopping = false;
    setPhase("error");
  };
  worker.onmessageerror = () => showError("Could not read a message from the worker.");
}

/** A new worker (and so a new GPU device) in place of the current one; resolves on its
 * `ready`. */
function restartWorker() {
  worker?.terminate();
  appState.workerReady = false;
  appState.busy.stopping = appState.busy.skipping = false;
  forgetPrepared();
  setPhase("booting");
  const ready = new Promise((resolve) => readyWaiters.push(resolve));
  startWorker();
  return ready;
}
hooks.restartWorker = restartWorker;

function showAdapter(info) {
  appState.adapter = info;
  const name = adapterName(info);
  // SwiftShader and llvmpipe run WebGPU on the CPU: it works, but expect ~30 images/s.
  const software = /swiftshader|llvmpipe|software/i.test(Object.values(info).join(" "));
  $("adapter").textContent = software ? `${name} (software GPU: slow)` : name;
  $("adapter").title = Object.entries(info).map(([k, v]) => `${k}: ${v || "—"}`).join("\n");
  $("adapter-dot").dataset.state = "ok";
  log(`GPU adapter: ${name}` + (software ? " — a CPU implementation of WebGPU, expect" +
      " seconds per step; a real GPU is hundreds of times faster" : ""));
}

const handlers = {
  profile: onProfile,  // the per-kernel profile (web/profile.js)
  selfcheck: showSelfCheck,  // the GPU self-check's warning (web/selfcheck.js)
  convolved: onConvolved,  // the kernels playground (web/kernels.js)
  inspect: onInspect,        // the live views of the model (web/views.js)
  prediction: onPrediction,  // Try it (web/tryit.js)
  status(m) {
    setStatus(m.text);
    log(m.text);
  },
  adapter(m) {
    showAdapter(m.info ?? {});
    requestRender({ progress: true });  // the Speed & machine card names it too
  },
  no_webgpu(m) {
    appState.noWebGPU = true;
    if (m.message) $("no-webgpu-message").textContent = m.message;
    $("no-webgpu").hidden = false;
    $("adapter").textContent = "no WebGPU";
    $("adapter-dot").dataset.state = "bad";
    setStatus("WebGPU is not available: training needs a GPU through WebGPU.");
    log(`No WebGPU: ${m.message ?? ""}`, "error");
    setPhase("error");
  },
  error(m) {
    showError(m.message ?? "unknown error");
    if (m.fields) markErrors(m.fields);  // the worker's check of the settings
    setStatus("Stopped by an error.");
    appState.busy.stopping = appState.busy.profiling = appState.busy.skipping = false;
    setPhase("error");
  },
  ready() {
    appState.workerReady = true;
    if (!appState.adapter) $("adapter-dot").dataset.state = "ok";
    for (const resolve of readyWaiters.splice(0)) resolve();
    setStatus("Ready. Choose settings and press Start.");
    log("Engine ready.");
    if (appState.phase === "booting") setPhase("ready");
    else syncControls();
    kernelsReady();
  },
  setup(m) {
    if (!running()) return;
    appState.memoryBytes = m.memory_bytes ?? null;
    requestRender({ progress: true });
  },
  progress(m) {
    const { losses, lrs, ...rest } = m;
    appState.progress = rest;
    if (appState.evaluating) setStatus("Training…");  // a validation ended
    appState.evaluating = null;
    const rows = (losses ?? []).map(([step, loss, acc]) => [step, loss, frac(acc)]);
    rows.forEach(([step, loss, acc], i) => appState.steps.push({ step, loss, acc, lr: lrs?.[i] }));
    addSteps(rows, lrs ?? []);
    requestRender({ charts: rows.length > 0, progress: true });
  },
  paused(m) {
    appState.busy.pausing = false;
    if (!running()) return;
    setPhase(m.paused ? "paused" : "training");
    const status = m.paused ? `Paused after step ${Number(m.step).toLocaleString()}. ` +
      "Press Resume to continue." : "Training…";
    setStatus(status);
    log(m.paused ? `Paused after step ${m.step}.` : "Resumed.");
    requestRender({ progress: true });
  },
  evaluating(m) {  // {done, total, what}: the status line, the progress bar, the pill
    showEvaluating(m);
    syncControls();
  },
  validation(m) {  // a point inside an epoch on part of the held-out images
    appState.validations.push({ step: m.step, epoch: m.epoch, images: m.images,
      val_loss: m.val_loss, val_acc: frac(m.val_acc) });
    if (!appState.busy.stopping) {  // training goes on: the bar counts steps again
      appState.evaluating = null;
      setStatus("Training…");
    }
    requestRender({ charts: true, progress: true });
  },
  prepared: onPrepared,  // the model's initial weights, before any run (web/prepare.js)
  epoch(m) {
    const e = { epoch: m.epoch, step: m.step, val_loss: m.val_loss, val_acc: frac(m.val_acc),
      train_loss: m.train_loss, train_acc: frac(m.train_acc) };
    appState.epochs.push(e);
    log(`Epoch ${e.epoch}: train loss ${num(e.train_loss)}, train accuracy ` +
      `${pct(e.train_acc)}` + (e.val_loss == null ? " (no validation images)"
      : `; validation loss ${num(e.val_loss)}, validation accuracy ${pct(e.val_acc)}`));
    requestRender({ charts: true });
  },
  done(m) {
    window.lastRun = m;
    if (appState.progress && m.steps != null) appState.progress.step = m.steps;
    showResults(m, trainStart ? (performance.now() - trainStart) / 1000 : null);
    const asked = appState.evaluating?.what === "test" ? appState.evaluating.total : null;
    if (appState.busy.skipping && asked && m.eval_images < asked) {
      log(`Evaluation cut short: the results cover ${m.eval_images.toLocaleString()} of ` +
        `${asked.toLocaleString()} test images.`);
    }
    appState.evaluating = null;
    const verdict = m.verdict ?? (m.stopped ? "stopped" : "ok");
    log(`Done${m.stopped ? " (stopped)" : ""}: test accuracy ${pct(m.test_acc)}, ` +
      `test loss ${num(m.test_loss)}` + (m.reason ? `. ${m.reason}` : ""),
    verdict === "ok" || verdict === "stopped" ? "info" : "error");
    setStatus(`${own(VERDICT_TITLE, verdict) ?? verdict}: ${m.reason ?? ""}`);
    requestRender({ progress: true });
    appState.busy.stopping = appState.busy.skipping = false;
    setPhase("done");
    onRunDone(m);  // the stored checkpoint: finished, or (stopped) offered to resume
  },
  checkpoint: onCheckpoint,  // keep your work (web/storage.js)
  snapshot: onSnapshot,
  device_lost: onDeviceLost,
};

function onWorkerMessage(m) {
  if (!m || typeof m !== "object") return;
  const h = own(handlers, m.type);
  if (h) h(m);
  else console.warn("unknown worker message", m);
}

// ---------------------------------------------------------------------------- start / stop
async function startTraining() {
  if ($("start").disabled || running()) return;
  const cfg = currentConfig();
  const model = $("model").value;
  const verdict = await validateNow(cfg);  // the server's validator, on exactly this config
  if (!verdict.ok) {
    const first = markErrors(verdict.errors ?? []);
    hooks.showSettings?.();  // folded on a phone: the marked field must show
    first?.focus();
    setStatus("Fix the settings marked in red, then press Start.");
    return;
  }
  if (running()) return;
  beginRun(cfg, model);
}

/** Send `start` for ``cfg`` (checked) and ``model``; ``resume``: the stored checkpoint's
 * {epoch, step, epochs_completed, weights, optimizer, total_steps} with ``history`` (its
 * metrics {steps, epochs}), which refills appState and the charts first. */
function beginRun(cfg, model, resume = null, history = null) {
  hideError();
  hideResumeOffer();
  const steps = history?.steps?.slice() ?? [];
  const epochs = history?.epochs?.slice() ?? [];
  Object.assign(appState, { config: cfg, model, steps, epochs, validations: [], error: null,
    memoryBytes: null, evaluating: null,
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
  log(`Start: ${model}, ${cfg.optimizer} lr ${cfg.lr}, batch ${cfg.batch_size}, ` +
    `${cfg.epochs} epoch(s), seed ${cfg.seed}, ${cfg.init}` +
    (cfg.scheduler && cfg.scheduler !== "none" ? `, ${cfg.scheduler} schedule` : "") +
    (cfg.max_steps ? `, max ${cfg.max_steps} steps` : ""));
  if (cfg.trainable && cfg.init === "scratch") {
    log("Note: “Train from scratch” re-initialises the frozen parameters too; choose " +
      "“Fine-tune” to keep the model’s weights in the frozen layers.", "error");
  }
  if (resume) log(`Resuming from the checkpoint of epoch ${resume.epoch} (step ${resume.step}).`);
  // config.model too: classroom mode (web/classroom.js) reads and pins it there
  worker.postMessage({ type: "start", model, config: { ...cfg, model }, resume });
}
hooks.beginRun = beginRun;

/** Pause or Resume (the worker answers `paused`, which sets the phase). */
function togglePause() {
  if (!running() || appState.busy.stopping || appState.busy.pausing) return;
  const pause = appState.phase === "training";
  appState.busy.pausing = true;
  worker.postMessage({ type: pause ? "pause" : "resume" });
  setStatus(pause ? "Pausing after the current step…" : "Resuming…");
  syncControls();
}

/** Stop: training ends after the current step, then the test images are evaluated (the pill
 * says "evaluating" at once); a second press (Stop evaluating) ends that evaluation after its
 * current chunk of images: the results cover the images evaluated so far. */
function stopTraining() {
  if (!running() || appState.busy.skipping) return;
  if (testing()) {
    appState.busy.skipping = true;
    worker.postMessage({ type: "skip_test" });
    setStatus("Ending the evaluation after the current images: the results will cover " +
      "the test images evaluated so far.");
    syncControls();
    return;
  }
  appState.busy.stopping = true;
  worker.postMessage({ type: "stop" });
  const n = Number(appState.config?.eval_images ?? 0).toLocaleString();
  setStatus(`Stopping after the current step, then evaluating ${n} test images ` +
    "(press Stop evaluating to cut it short)…");
  log("Stop requested.");
  syncControls();
}

// ------------------------------------------------------------------------------------ boot
async function boot() {
  $("settings").addEventListener("submit", (ev) => ev.preventDefault());  // Enter never starts
  $("start").addEventListener("click", startTraining);
  $("stop").addEventListener("click", stopTraining);
  $("pause").addEventListener("click", togglePause);
  setupShare();
  enhanceHelp();
  $("download").addEventListener("click", () => downloadOnnx());
  $("error-close").addEventListener("click", hideError);
  $("model").addEventListener("change", onModelChange);
  setupDropzone();
  $("train-all").addEventListener("click", () => setTrainable(
    appState.summary.tensors.filter((t) => t.role === "param").map((t) => t.name)));
  $("train-head").addEventListener("click", () => {
    setTrainable(appState.summary.head);
    if (!$("init-finetune").checked) {
      setField("init", "finetune");
      log("Fine-tuning only the head: starting from the model’s weights.");
    }
  });
  setupTabs();
  setupLayout();
  setupChartTables();
  setupProfile();
  setupKernels((msg) => worker?.postMessage(msg));
  setupViews((msg) => worker?.postMessage(msg));
  setupTryIt((msg) => worker?.postMessage(msg));
  makeCharts();
  setPhase("booting");
  renderProgress();
  try {  // the form first: classroom mode puts the teacher's settings into it
    await loadSchema();
    buildForm($("config-form"), $("presets"));
  } catch (e) {
    showError(`Could not load the settings: ${e.message ?? e}`);
  }
  const linkModel = applyLink();  // ?model=...&lr=... of a share link (web/share.js)
  startWorker();
  await loadModels(linkModel);
  checkLinkModel(linkModel);
  setupStorage();  // the stored checkpoint: the resume banner (web/storage.js)
}

boot();
