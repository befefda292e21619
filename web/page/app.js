// webgpu-trainer — the page (main thread), the entry module. No framework: plain ES modules.
//
// Talks to the module worker (/lib/worker.js) with the protocol in docs/ARCHITECTURE.md:
//   main -> worker: {type: "start", model, config, resume?}, {type: "stop"}, {type: "pause"},
//                   {type: "resume"}, {type: "skip_test"} (the second Stop), prepare,
//                   snapshot, convolve, test_images (testset.js)
//   worker -> main: selfcheck (the GPU self-check's warning, selfcheck.js)
//   worker -> main: status, download, adapter, no_webgpu, error, ready, setup, progress,
//                   paused, evaluating, validation, epoch, done; prepared (prepare.js);
//                   checkpoint (checkpoints.js), snapshot (work.js), device_lost (resume.js);
//                   convolved (kernels.js), test_images (testset.js)
// The settings form is drawn from the run configuration's schema (form.js). Test hooks:
// window.appState (phase, adapter, steps, epochs, ...), window.lastRun (the last `done`
// message) and window.readFormForTests() (the config Start would send).
//
// Modules (web/page/; web/lib/util.js: $, el and number formatting shared with the teacher
// page): state.js (appState, log, status, errors, the page's events), controls.js (phase,
// run controls), worker-link.js (the worker), run.js (start, pause, stop), form.js (settings
// from the schema), validation.js (the server's check, inline marks), models.js (model list,
// upload), dataset.js (dataset picker, model/dataset fit), dataset-upload.js (your own data:
// drop zone, preview, upload), own-classes.js (make your own classes), summary.js (model summary,
// trainable parameters), charts.js, progress.js (progress
// card, redraws), results.js (results, download), tabs.js (the view tabs), dashboard.js (speed
// and machine), help.js (the (i) toggletips), share.js (share link, leave-page warning),
// kernels.js (the kernels playground), checkpoints.js (the checkpoint in IndexedDB),
// resume.js (the resume banner, GPU device lost), work.js (Keep your work: downloads, export /
// import, reset), views.js (live views inside the model), tryit.js (draw, a photo / pick a test
// image), testset.js (test images from the worker), values.js (the strict number parser, own keys).

import { $, frac, num, pct } from "../lib/util.js";
import { appState, hideError, log, setStatus, showError } from "./state.js";
import { buildForm, currentConfig, loadSchema, setField } from "./form.js";
import { adapterName, renderStats } from "./dashboard.js";
import { enhanceHelp } from "./help.js";
import { applyLink, checkLinkDataset, checkLinkModel, setupShare } from "./share.js";
import { markErrors, validateNow } from "./validation.js";
import { loadModels, onModelChange, setupDropzone } from "./models.js";
import { buildFromLink, setupBuilder } from "./builder.js";
import { setTrainable } from "./summary.js";
import { chooseDefaultModel, datasetTitle, loadDatasets, onDownload, setupDatasets }
  from "./dataset.js";
import { setupDatasetUpload } from "./dataset-upload.js";
import { setupMemory } from "./memory.js";
import { setupOwnClasses } from "./own-classes.js";
import { addSteps, makeCharts } from "./charts.js";
import { renderProgress, requestRender, showEvaluating } from "./progress.js";
import { downloadOnnx, showResults, VERDICT_TITLE } from "./results.js";
import { showSelfCheck } from "./selfcheck.js";
import { setupTabs } from "./tabs.js";
import { setupChartTables } from "./chart-tables.js";
import { onProfile, setupProfile } from "./profile.js";
import { kernelsReady, onConvolved, setupKernels } from "./kernels.js";
import { onCheckpoint } from "./checkpoints.js";
import { hideResumeOffer, onDeviceLost, onModelGone, onRunDone, setupResume }
  from "./resume.js";
import { onSnapshot, setupWork } from "./work.js";
import { onInspect, setupViews } from "./views.js";
import { onPrediction, setupTryIt } from "./tryit.js";
import { own } from "./values.js";
import { onPrepared } from "./prepare.js";
import { onTestImages } from "./testset.js";
import { setupLayout, showSettings } from "./layout.js";
import { running, setPhase, syncControls } from "./controls.js";
import { post, startWorker } from "./worker-link.js";
import { beginRun, runSeconds, stopTraining, togglePause } from "./run.js";

window.readFormForTests = currentConfig;

function showAdapter(info) {
  appState.adapter = info;
  const name = adapterName(info);
  // SwiftShader and llvmpipe run WebGPU on the CPU: it works, but expect ~30 images/s.
  const software = /swiftshader|llvmpipe|software/i.test(Object.values(info).join(" "));
  $("adapter").textContent = software ? `${name} (software GPU: slow)` : name;
  $("adapter").title = Object.entries(info).map(([k, v]) => `${k}: ${v || "—"}`).join("\n");
  $("adapter-dot").dataset.state = "ok";
  renderStats();  // the % of peak knows the adapter now (or says "peak unknown")
  log(`GPU adapter: ${name}` + (software ? " — a CPU implementation of WebGPU, expect" +
      " seconds per step; a real GPU is hundreds of times faster" : ""));
}

const handlers = {
  profile: onProfile,  // the per-kernel profile (profile.js)
  selfcheck: showSelfCheck,  // the GPU self-check's warning (web/page/selfcheck.js)
  convolved: onConvolved,  // the kernels playground (kernels.js)
  inspect: onInspect,        // the live views of the model (views.js)
  test_images: onTestImages,  // test images for Kernels, Try it, Results (testset.js)
  prediction: onPrediction,  // Try it (tryit.js)
  download: onDownload,      // a dataset shard's download progress (dataset.js)
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
    if (m.model_gone && onModelGone(m)) return;  // a resume whose model is gone: ready again
    showError(m.message ?? "unknown error");
    if (m.fields) markErrors(m.fields);  // the worker's check of the settings
    setStatus("Stopped by an error.");
    appState.busy.stopping = appState.busy.profiling = appState.busy.skipping = false;
    setPhase("error");
  },
  ready() {
    appState.workerReady = true;
    if (!appState.adapter) $("adapter-dot").dataset.state = "ok";
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
  prepared: onPrepared,  // the model's initial weights, before any run (prepare.js)
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
    showResults(m, runSeconds());
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
  checkpoint: onCheckpoint,  // keep your work (checkpoints.js)
  snapshot: onSnapshot,
  device_lost: onDeviceLost,
};

function onWorkerMessage(m) {
  if (!m || typeof m !== "object") return;
  const h = own(handlers, m.type);
  if (h) h(m);
  else console.warn("unknown worker message", m);
}

// ---------------------------------------------------------------------------------- start
/** Start: the settings checked by the server again (exactly what is sent), then `start`. */
async function startTraining() {
  if ($("start").disabled || running()) return;
  const cfg = currentConfig();
  const model = $("model").value;
  const verdict = await validateNow(cfg);  // the server's validator, on exactly this config
  if (!verdict.ok) {
    const first = markErrors(verdict.errors ?? []);
    showSettings();  // folded on a phone: the marked field must show
    first?.focus();
    setStatus("Fix the settings marked in red, then press Start.");
    return;
  }
  if (running()) return;
  hideResumeOffer();  // a new run replaces the stored one at its first checkpoint
  beginRun(cfg, model);
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
  setupDatasets();
  setupMemory();
  // the header names the chosen dataset as the picker does (its title; a class session's
  // dataset gone from the server: its name), as text: a dataset's title is the user's words
  document.addEventListener("dataset-changed", () => {
    const title = datasetTitle();
    $("tagline").textContent = `Train a neural network ${title ? `on ${title} ` : ""}on your ` +
      "GPU, in the browser";
  });
  setupDatasetUpload();
  setupOwnClasses();
  setupBuilder();
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
  setupKernels(post);
  setupViews(post);
  setupTryIt(post);
  makeCharts();
  setPhase("booting");
  renderProgress();
  try {  // the form first: classroom mode puts the teacher's settings into it
    await loadSchema();
    buildForm($("config-form"), $("presets"));
  } catch (e) {
    showError(`Could not load the settings: ${e.message ?? e}`);
  }
  const link = applyLink();  // ?model=...&dataset=...&lr=... of a share link (share.js)
  startWorker(onWorkerMessage);
  await loadDatasets(link.dataset);
  checkLinkDataset(link.dataset);
  // a link's `layers` (a network built in the page, builder.js) is rebuilt for its dataset
  // first; when it cannot be, the link's model (or the dataset's) is used and that is marked
  const built = link.layers != null ? await buildFromLink(link.layers) : {};
  const model = built.name ?? link.model;
  await loadModels(model);
  if (!model) chooseDefaultModel();  // the link's dataset's model
  checkLinkModel(model, built.error);
  setupWork();  // Keep your work (web/page/work.js)
  setupResume();  // the stored checkpoint: the resume banner (web/page/resume.js)
}

boot();
