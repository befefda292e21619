// Keep your work (#panel-work): the .onnx of the current weights and the metrics as CSV at
// any time, the run's settings as JSON (export; the import is settings-file.js's), and "Reset
// everything". The checkpoint itself is checkpoints.js's, the resume banner resume.js's.

import { $, humanBytes } from "../lib/util.js";
import { appState, log, showError } from "./state.js";
import { afterSaving, closeStore, DB, FORMAT, sizeOf, stored } from "./checkpoints.js";
import { currentConfig } from "./form.js";
import { importConfig } from "./settings-file.js";
import { downloadOnnx } from "./results.js";
import { hideResumeOffer } from "./resume.js";
import { post } from "./worker-link.js";
import { layersOf } from "./builder.js";

const CONFIG_FORMAT = "webgpu-trainer/run-config@1";

let snapshotWaiter = null;        // resolves with the worker's `snapshot` answer

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
      post({ type: "snapshot" });
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
  const doc = { format: CONFIG_FORMAT, model: $("model").value, config: currentConfig() };
  const layers = layersOf(doc.model);  // a network built in the page: rebuilt on import
  if (layers) doc.layers = layers;
  saveFile("webgpu-trainer-settings.json",
    new Blob([JSON.stringify(doc, null, 2) + "\n"], { type: "application/json" }));
  note("Settings exported as webgpu-trainer-settings.json.");
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
  await afterSaving().catch(() => {});
  const cleared = [];
  const rec = await stored().catch(() => undefined);
  await closeStore();
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
  hideResumeOffer();
  $("ckpt-status").textContent = "No checkpoint stored.";
  delete $("ckpt-status").dataset.state;
  return cleared;
}

function note(text) {
  $("work-note").textContent = text;
}

// ------------------------------------------------------------------------------ set-up
/** Wire the panel's controls. */
export function setupWork() {
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
}
