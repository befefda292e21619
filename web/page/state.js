// The page's state (window.appState, a test hook), the log, the status line and the error box,
// and the page's two events on `document` (modules that cannot import the one that reacts
// without an import circle say what changed; the listener lives where the reaction does):
//   state-changed     appState changed in a way the run controls show (controls.js re-syncs)
//   settings-changed  a setting changed, {detail: {delay}} (validation.js checks them again)

import { $ } from "../lib/util.js";

export const appState = {
  phase: "booting",          // "booting" | "ready" | "training" | "paused" | "done" | "error" |
                             // "lost"
  adapter: null,             // the `adapter` message's info
  steps: [],                 // [{step, loss, acc}] from `progress` messages, acc as a fraction
  epochs: [],                // [{epoch, step, val_loss, val_acc, train_loss, train_acc}] from
                             // `epoch` messages
  validations: [],           // [{step, epoch, images, val_loss, val_acc}] from `validation`
                             // messages: points inside an epoch on part of the held-out images
  progress: null,            // the last `progress` message (without its losses)
  memoryBytes: null,         // the `setup` message's GPU memory of the run
  evaluating: null,          // the last `evaluating` message {done, total, what} of this phase
  config: null,              // the config sent with the last `start`
  resuming: false,           // that `start` continues the stored checkpoint (web/page/resume.js)
  status: "",                // the last `status` text
  error: null,               // the last `error` message text
  noWebGPU: false,           // true after a `no_webgpu` message
  workerReady: false,        // true after `ready`
  models: [],                // GET /api/models
  datasets: [],              // GET /api/datasets' list (web/page/dataset.js)
  dataset: null,             // the chosen dataset's entry of that list
  fit: null,                 // why the chosen model does not fit the chosen dataset, or null
  blocked: null,             // why Start cannot run whatever the settings, or null (classroom.js:
                             // the class's dataset is gone from the server)
  runDataset: null,          // the dataset of the last run started (its class names)
  downloads: [],             // the worker's `download` messages of the last run, with `rate`
                             // (bytes/s): the last of each shard (web/page/dataset.js)
  summary: null,             // GET /api/models/{name}/summary of the chosen model
  trainable: new Set(),      // the parameters ticked to train
  busy: { stopping: false, pausing: false, downloading: false, profiling: false,
    skipping: false },         // skipping: the second Stop sent (skip_test)
  prepared: null,            // the model set up before any run {id, key, model, busy, error}
                             // (web/page/prepare.js)
  checkpoint: null,          // the stored checkpoint {epoch, step, savedAt, bytes, model,
                             // finished} (web/page/checkpoints.js)
  checkpointError: null,     // the last failed checkpoint write, in words
  deviceLost: null,          // the `device_lost` message's {reason, message} until recovered
};
window.appState = appState;
window.lastRun = null;

/** Say that appState changed in a way the run controls show (Start, Stop, the pill). */
export function stateChanged() {
  document.dispatchEvent(new Event("state-changed"));
}

/** Say that a setting changed: the settings are checked again ``delay`` ms from now. */
export function settingsChanged(delay = 150) {
  document.dispatchEvent(new CustomEvent("settings-changed", { detail: { delay } }));
}

const MAX_LOG = 300;
export function log(text, kind = "info") {
  const li = document.createElement("li");
  li.className = `log-${kind}`;
  const t = document.createElement("time");
  t.textContent = new Date().toLocaleTimeString([], { hour12: false });
  li.append(t, document.createTextNode(" " + text));
  const box = $("log");
  const stick = box.scrollTop + box.clientHeight >= box.scrollHeight - 4;
  box.append(li);
  while (box.childElementCount > MAX_LOG) box.firstElementChild.remove();
  if (stick) box.scrollTop = box.scrollHeight;
}

export function setStatus(text) {
  appState.status = text;
  $("status").textContent = text;
}

export function showError(message) {
  appState.error = String(message);
  $("error-text").textContent = appState.error;
  $("error").hidden = false;
  $("error").scrollIntoView({ block: "center", behavior: "smooth" });
  setStatus(appState.error);
  log(appState.error, "error");
}

export function hideError() {
  $("error").hidden = true;
}
