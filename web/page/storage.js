// Keep your work (#panel-work): the checkpoint of every epoch in this browser's IndexedDB (and
// inside an epoch: every `checkpoint_every_s` seconds of training and on Stop), the resume
// banner after a reload or a crashed tab, the run's settings as JSON (export; the import is
// settings-file.js's), the .onnx of the current weights and the metrics as CSV
// at any time, "Reset everything", and the GPU device lost (resume on a new device).
//
// Why IndexedDB (through idb-keyval, served from web/node_modules under /vendor/idb-keyval)
// and not OPFS: a checkpoint is ONE record {header, metrics, weights, optimizer} written by
// one put in one transaction, so the stored checkpoint is replaced only when the new one is
// written completely (a failed or interrupted write leaves the last good one); OPFS would need
// several files and a rename dance for the same guarantee. ArrayBuffers are stored as they
// are (structured clone), with no encoding.
//
// The worker's side is py/webgpu_trainer/engine/browser_storage.py; the sections are
// engine/checkpoint.py's (the CLI's .ckpt files hold the same bytes).

import { createStore, get, set, del, update } from "/vendor/idb-keyval/index.js";
import { $, humanBytes, pct } from "../lib/util.js";
import { appState, hooks, log, setStatus, showError } from "./state.js";
import { applyConfig } from "./form.js";
import { importConfig } from "./settings-file.js";
import { onModelChange } from "./models.js";
import { requestRender } from "./progress.js";
import { downloadOnnx } from "./results.js";
import { setTrainable } from "./summary.js";

const DB = "webgpu-trainer";
const STORE = "checkpoints";
const KEY = "latest";
const FORMAT = "webgpu-trainer/browser-checkpoint@1";
const CONFIG_FORMAT = "webgpu-trainer/run-config@1";

let store = null;                 // idb-keyval's store, opened on first use (reset closes it)
let saving = Promise.resolve();   // checkpoint writes, one after another
let snapshotWaiter = null;        // resolves with the worker's `snapshot` answer

const db = () => (store ??= createStore(DB, STORE));
const time = (ms) => new Date(ms).toLocaleTimeString([], { hour12: false });
const sizeOf = (rec) => (rec.weights?.byteLength ?? 0) + (rec.optimizer?.byteLength ?? 0);

/** True when this page's database exists (reading it would otherwise create it). */
async function dbExists() {
  if (!indexedDB.databases) return true;
  return (await indexedDB.databases()).some((d) => d.name === DB);
}

// ------------------------------------------------------------------------ checkpoints
/** The worker's `checkpoint` message: store it with the page's config and the metrics so far
 * (rows up to its step), replacing the last one only once it is written. */
export function onCheckpoint(m) {
  const rec = {
    format: FORMAT, savedAt: Date.now(), model: m.model ?? appState.model,
    config: appState.config, resolved: m.config, epoch: m.epoch, step: m.step,
    epochs_completed: m.epochs_completed, total_steps: m.total_steps, rng: m.rng,
    run_state: m.run_state,
    metrics: { steps: appState.steps.filter((s) => s.step <= m.step),
      epochs: appState.epochs.filter((e) => e.epoch <= m.epoch) },
    weights: m.weights, optimizer: m.optimizer, adapter: appState.adapter, finished: false,
  };
  saving = saving.then(async () => {
    try {
      await set(KEY, rec, db());
      appState.checkpointError = null;
      showStored(rec);
      log(`Checkpoint saved in this browser: ${where(rec)} ` +
        `(${humanBytes(sizeOf(rec))}).`);
    } catch (e) {
      const last = appState.checkpoint;
      appState.checkpointError = `Could not save the checkpoint of ${where(rec)}: ` +
        `${e.name ?? "Error"}: ${e.message ?? e}. ` + (last
          ? `The last good checkpoint (epoch ${last.epoch}, step ${last.step}) is kept.`
          : "No earlier checkpoint is stored.");
      $("ckpt-status").textContent = appState.checkpointError;
      $("ckpt-status").dataset.state = "error";
      log(appState.checkpointError, "error");
    }
  });
}

/** Where a stored checkpoint ``rec`` is: "epoch E (step S)" at an epoch's end, else "step S,
 * inside epoch E" (a timed checkpoint, Stop, or a max_steps end). */
function where(rec) {
  return inside(rec) ? `step ${rec.step}, inside epoch ${rec.epoch}`
    : `epoch ${rec.epoch} (step ${rec.step})`;
}
const inside = (rec) => rec.epochs_completed != null && rec.epochs_completed < rec.epoch;

/** A run's `done`: a completed run's checkpoint stays but offers no resume; a stopped run's
 * offers to resume from its last checkpoint (the banner). */
export function onRunDone(m) {
  if (!appState.checkpoint) return;
  if (m.stopped) {
    saving.then(stored).then((rec) => rec && !rec.finished && offerResume(rec))
      .catch((e) => log(`Could not read the stored checkpoint: ${e.message ?? e}`, "error"));
    return;
  }
  saving = saving.then(() => update(KEY, (r) => r && { ...r, finished: true }, db()))
    .then(() => { appState.checkpoint.finished = true; })
    .catch((e) => log(`Could not mark the checkpoint finished: ${e.message ?? e}`, "error"));
}

function showStored(rec) {
  appState.checkpoint = { epoch: rec.epoch, step: rec.step, savedAt: rec.savedAt,
    epochs_completed: rec.epochs_completed, inside: inside(rec),
    bytes: sizeOf(rec), model: rec.model, finished: !!rec.finished };
  const last = rec.metrics?.epochs?.at(-1);
  $("ckpt-status").dataset.state = "ok";
  $("ckpt-status").textContent = `Saved at ${time(rec.savedAt)}: ${rec.model}, ` +
    (inside(rec) ? "inside" : "end of") + ` epoch ${rec.epoch} of ${rec.config?.epochs ?? "?"} ` +
    `(step ${rec.step} of ${rec.total_steps}), ` +
    `${humanBytes(sizeOf(rec))}` + (last ? `, validation accuracy ${pct(last.val_acc)}` : "") +
    (rec.finished ? ". The run finished." : ".");
}

async function stored() {
  return (await dbExists()) ? get(KEY, db()) : undefined;
}

// ---------------------------------------------------------------------------- resume
async function whenReady() {
  while (!appState.workerReady) await new Promise((r) => setTimeout(r, 200));
}

/** Continue the stored run ``rec``: its settings into the form, its metrics into the charts,
 * and `start` with its weights, optimizer state, epoch and step. */
async function resume(rec) {
  $("resume-banner").hidden = true;
  await whenReady();
  if (appState.phase === "training") return;
  if ($("model").value !== rec.model &&
      [...$("model").options].some((o) => o.value === rec.model)) {
    $("model").value = rec.model;
    onModelChange();
  }
  applyConfig(rec.config);
  await applyTrainable(rec.config);
  const { epoch, step, epochs_completed, total_steps, run_state, weights, optimizer } = rec;
  hooks.beginRun(rec.config, rec.model,
    { epoch, step, epochs_completed, total_steps, run_state, weights, optimizer }, rec.metrics);
}

/** Hide the resume banner (a new run replaces the stored one at its first epoch). */
export function hideResumeOffer() {
  $("resume-banner").hidden = true;
}

function offerResume(rec) {
  const c = rec.config ?? {};
  $("resume-text").textContent = `Your last run (${rec.model}, ${c.optimizer} lr ${c.lr}, ` +
    `batch ${c.batch_size}) stopped ${inside(rec) ? "inside" : "after"} epoch ${rec.epoch} ` +
    `of ${c.epochs}, step ${rec.step} of ${rec.total_steps}; its checkpoint was saved at ` +
    `${time(rec.savedAt)}. ` +
    "Resume continues from there with the same settings; Discard deletes the checkpoint.";
  $("resume-banner").hidden = false;
  $("resume-run").onclick = () => resume(rec);
  $("discard-run").onclick = async () => {
    $("resume-banner").hidden = true;
    await del(KEY, db());
    appState.checkpoint = null;
    $("ckpt-status").textContent = "Checkpoint discarded.";
    log("Discarded the stored checkpoint.");
  };
}

// ---------------------------------------------------------------------- device lost
/** The worker's `device_lost {reason, message}`: say so, offer to resume from the last
 * checkpoint on a new device (a new worker). */
export function onDeviceLost(m) {
  appState.deviceLost = { reason: m.reason, message: m.message };
  const wasTraining = appState.phase === "training";
  appState.workerReady = false;
  hooks.setPhase("lost");
  const ck = appState.checkpoint && !appState.checkpoint.finished ? appState.checkpoint : null;
  const why = `reason “${m.reason}”` + (m.message ? `: ${m.message.replace(/\.$/, "")}` : "");
  $("device-lost-text").textContent = "The GPU was reset or the laptop slept: the browser " +
    `took the GPU away from this page (WebGPU device lost, ${why}). ` +
    (wasTraining ? "Training stopped. " : "") +
    (ck ? `Your work is saved up to ${ck.inside ? "" : "the end of "}${where(ck)}.`
      : "No checkpoint was saved yet: training starts again from the beginning.");
  $("device-lost-go").textContent = ck ? "Resume on a new GPU device" : "Use a new GPU device";
  $("device-lost").hidden = false;
  $("device-lost-go").focus();
  setStatus(`The GPU device was lost (${m.reason}).`);
  requestRender({ progress: true });
  log(`GPU device lost (${m.reason}${m.message ? `: ${m.message}` : ""}).`, "error");
}

async function recoverDevice() {
  $("device-lost").hidden = true;
  appState.deviceLost = null;
  await hooks.restartWorker();
  const rec = await stored();
  if (rec && !rec.finished) await resume(rec);
}

// ---------------------------------------------------------------------------- downloads
function saveFile(name, blob) {
  const url = URL.createObjectURL(blob);
  const a = Object.assign(document.createElement("a"), { href: url, download: name });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/** The worker's `snapshot` answer ({weights, model, step, epoch} or {error}). */
export function onSnapshot(m) {
  snapshotWaiter?.(m);
  snapshotWaiter = null;
}

/** The .onnx of the current weights: a `snapshot` of a run in progress, else the last run's.
 * A run still in its set-up (model, data, compiling: no progress report yet) has no weights to
 * take: the note says so. */
async function downloadCurrentOnnx() {
  const btn = $("work-onnx");
  if (appState.phase === "training" || appState.phase === "paused") {
    if (appState.progress?.images_per_s === undefined) {
      return note("The run is still starting (model, data, compiling the training step): " +
        "its weights can be downloaded once its first step is shown.");
    }
    btn.disabled = true;
    const m = await new Promise((resolve) => {
      snapshotWaiter = resolve;
      hooks.post({ type: "snapshot" });
    });
    btn.disabled = false;
    if (m.error && appState.phase === "done" && window.lastRun?.weights) {
      return downloadOnnx(window.lastRun, btn);  // the run ended meanwhile: its final weights
    }
    if (m.error) return showError(`Could not take the current weights: ${m.error}`);
    return downloadOnnx({ weights: m.weights, model: m.model, steps: m.step,
      epochs_done: m.epochs_done ?? m.epoch }, btn);
  }
  if (window.lastRun?.weights) return downloadOnnx(window.lastRun, btn);
  const rec = await stored().catch(() => undefined);  // after a reload: the stored checkpoint
  if (rec?.weights && rec.format === FORMAT) {
    try {
      return downloadOnnx({ weights: await modelWeights(rec), model: rec.model, steps: rec.step,
        epochs_done: rec.epochs_completed, config: rec.config }, btn);
    } catch (e) {
      return showError(`Could not export the stored checkpoint: ${e.message ?? e}`);
    }
  }
  note("Nothing to download yet: start training (the .onnx can be taken at any time during it).");
}

/** The stored checkpoint's weights cut to its model's blob (the engine's weight buffer, what
 * a checkpoint keeps, is padded; the export route takes the exact size). */
async function modelWeights(rec) {
  const url = `/api/models/${encodeURIComponent(rec.model)}/graph.json`;
  const res = await fetch(url);
  if (!res.ok) throw new Error(`model ${rec.model}: HTTP ${res.status}`);
  const size = Math.max(0, ...(await res.json()).tensors.map((t) => t.offset + t.nbytes));
  if (size > rec.weights.byteLength) {
    throw new Error(`its weights (${rec.weights.byteLength} bytes) do not fit ${rec.model} ` +
      `(${size} bytes)`);
  }
  return rec.weights.slice(0, size);
}

/** The metrics as CSV: one `train` row per step (loss, batch accuracy, learning rate) and
 * one `val` row per epoch (validation loss and accuracy at the epoch's last step). */
export function metricsCsv() {
  const v = (x) => (x == null ? "" : String(x));
  const lines = ["kind,epoch,step,loss,acc,lr"];
  for (const s of appState.steps) {
    lines.push(`train,,${s.step},${v(s.loss)},${v(s.acc)},${v(s.lr)}`);
  }
  for (const e of appState.epochs) {
    lines.push(`val,${e.epoch},${v(e.step)},${v(e.val_loss)},${v(e.val_acc)},`);
  }
  return lines.join("\n") + "\n";
}
window.metricsCsvForTests = metricsCsv;

function exportConfig() {
  const doc = { format: CONFIG_FORMAT, model: $("model").value, config: hooks.currentConfig() };
  saveFile("webgpu-trainer-settings.json",
    new Blob([JSON.stringify(doc, null, 2) + "\n"], { type: "application/json" }));
  note("Settings exported as webgpu-trainer-settings.json.");
}

/** The model summary's Train checkboxes from ``config.trainable`` (null: every parameter),
 * once the summary of the model is drawn; a config without the key leaves them. */
async function applyTrainable(config) {
  if (!config || !("trainable" in config)) return;
  for (let i = 0; i < 50 && !appState.summary; i++) await new Promise((r) => setTimeout(r, 100));
  if (appState.summary) {
    setTrainable(config.trainable ?? appState.summary.tensors
      .filter((t) => t.role === "param").map((t) => t.name));
  }
}

// ------------------------------------------------------------------------------ reset
function deleteDatabase(name) {
  return new Promise((resolve, reject) => {
    const req = indexedDB.deleteDatabase(name);
    req.onsuccess = () => resolve();
    req.onerror = () => reject(req.error);
    req.onblocked = () => note(`Waiting for other tabs of this page to let go of “${name}”…`);
  });
}

/** Delete everything this page stored in this browser; returns what was cleared (lines). */
async function resetEverything() {
  await saving.catch(() => {});
  const cleared = [];
  const rec = await stored().catch(() => undefined);
  if (store) {
    await store("readonly", (s) => s.transaction.db.close()).catch(() => {});
    store = null;
  }
  const dbs = indexedDB.databases ? await indexedDB.databases() : [{ name: DB }];
  for (const d of dbs) {
    await deleteDatabase(d.name);
    cleared.push(`IndexedDB “${d.name}”` + (d.name === DB && rec
      ? ` (the checkpoint of epoch ${rec.epoch}, ${humanBytes(sizeOf(rec))})` : ""));
  }
  const areas = [["localStorage", localStorage], ["sessionStorage", sessionStorage]];
  for (const [label, area] of areas) {
    cleared.push(`${label}: ${area.length} key(s)`);
    area.clear();
  }
  const names = self.caches ? await caches.keys() : [];
  for (const k of names) await caches.delete(k);
  cleared.push(names.length ? `caches: ${names.join(", ")}` : "caches: none");
  appState.checkpoint = null;
  $("resume-banner").hidden = true;
  $("ckpt-status").textContent = "No checkpoint stored.";
  delete $("ckpt-status").dataset.state;
  return cleared;
}

function note(text) {
  $("work-note").textContent = text;
}

// ------------------------------------------------------------------------------ set-up
/** Wire the panel's controls and look for a stored run to offer (the resume banner). */
export async function setupStorage() {
  if (new URLSearchParams(location.search).get("test") === "1") {  // the tests' device loss
    window.loseDeviceForTests = () => hooks.post({ type: "debug_lose_device" });
  }
  $("work-onnx").addEventListener("click", downloadCurrentOnnx);
  $("work-csv").addEventListener("click", () => {
    saveFile("webgpu-trainer-metrics.csv", new Blob([metricsCsv()], { type: "text/csv" }));
    note(`Metrics exported: ${appState.steps.length} steps, ${appState.epochs.length} epochs.`);
  });
  $("work-config-export").addEventListener("click", exportConfig);
  $("work-config-import").addEventListener("click", () => $("work-config-file").click());
  $("work-config-file").addEventListener("change", async (ev) => {
    const file = ev.target.files?.[0];
    ev.target.value = "";
    if (file) await importConfig(await file.text(), file.name);
  });
  $("reset-all").addEventListener("click", () => {
    if (appState.phase === "training") {
      return note("Stop training first (Stop saves a checkpoint of the steps done).");
    }
    $("reset-confirm").hidden = false;
    $("reset-no").focus();
  });
  $("reset-no").addEventListener("click", () => { $("reset-confirm").hidden = true; });
  $("reset-yes").addEventListener("click", async () => {
    $("reset-confirm").hidden = true;
    try {
      const cleared = await resetEverything();
      const ul = $("reset-result");
      ul.replaceChildren(...cleared.map((t) => Object.assign(document.createElement("li"),
        { textContent: t })));
      ul.hidden = false;
      log(`Reset everything: ${cleared.join("; ")}.`);
    } catch (e) {
      showError(`Reset failed: ${e.name ?? "Error"}: ${e.message ?? e}`);
    }
  });
  $("device-lost-go").addEventListener("click", recoverDevice);
  try {
    const rec = await stored();
    if (!rec) return;
    if (rec.format !== FORMAT) {
      log(`Ignored a stored checkpoint of another format (${rec.format}).`, "error");
      return;
    }
    showStored(rec);
    if (!rec.finished) offerResume(rec);
  } catch (e) {
    log(`Could not read the stored checkpoint: ${e.message ?? e}`, "error");
  }
}
