// Continuing a stored run (checkpoints.js): the resume banner after a reload, a crashed tab
// or Stop, and the GPU device lost (the browser took the GPU away: resume on a new device,
// that is a new worker).

import { $ } from "../lib/util.js";
import { appState, log, setStatus, showError } from "./state.js";
import { afterSaving, discard, FORMAT, inside, markFinished, showStored, stored, time, where }
  from "./checkpoints.js";
import { applyConfig } from "./form.js";
import { loadModels, onModelChange } from "./models.js";
import { requestRender } from "./progress.js";
import { setTrainable } from "./summary.js";
import { setPhase } from "./controls.js";
import { post, restartWorker } from "./worker-link.js";
import { beginRun } from "./run.js";

async function whenReady() {
  while (!appState.workerReady) await new Promise((r) => setTimeout(r, 200));
}

/** Say that the stored run ``rec`` cannot resume because its model is gone from the server
 * (``rebuilt``: a network built in the page could not be built again) and offer the resume
 * banner again: the checkpoint (IndexedDB) is kept as it was. */
function cannotResume(rec, rebuilt = false) {
  const why = `Cannot resume: the model ${rec.model} is no longer on the server` +
    (rebuilt ? " and could not be built again from its layers" : "") +
    "; the checkpoint is kept.";
  showError(why);
  // the banner again, its buttons wired to the stored record (a resume after a lost device
  // came without them)
  stored().then((r) => { if (r && !r.finished) offerResume(r); })
    .catch((e) => log(`Could not read the stored checkpoint: ${e.message ?? e}`, "error"));
}

/** Whether the server still lists model ``name`` (GET /api/models now: it may have been
 * deleted since the page loaded its list); null when the list cannot be read. */
async function onServer(name) {
  try {
    const res = await fetch("/api/models");
    if (!res.ok) return null;
    return (await res.json()).some((m) => m.name === name && !m.error);
  } catch {
    return null;
  }
}

/** Continue the stored run ``rec``: its settings into the form, its metrics into the charts,
 * and `start` with its weights, optimizer state, epoch and step. */
async function resume(rec) {
  $("resume-banner").hidden = true;
  await whenReady();
  if (appState.phase === "training") return;
  const listed = () => [...$("model").options].some((o) => o.value === rec.model);
  if (listed() && (await onServer(rec.model)) === false) {
    await loadModels($("model").value);  // deleted after the page loaded: the picker drops it
  }
  if (!listed() && !(await rebuild(rec))) {
    if (appState.phase === "training") return;  // Start was pressed meanwhile
    cannotResume(rec, Boolean(rec.built));
    return;
  }
  if (appState.phase === "training") return;
  if ($("model").value !== rec.model && listed()) {
    $("model").value = rec.model;
    onModelChange();
  }
  applyConfig(rec.config);
  await applyTrainable(rec.config);
  const { epoch, step, epochs_completed, total_steps, run_state, weights, optimizer } = rec;
  hideResumeOffer();
  beginRun(rec.config, rec.model,
    { epoch, step, epochs_completed, total_steps, run_state, weights, optimizer }, rec.metrics);
}

/** A network built in the page whose file is gone (the uploads keep the 64 newest built
 * models): built again from the layers and shape the checkpoint kept (``rec.built``), under
 * the same name (a hash of them). True when the model list has it again. */
async function rebuild(rec) {
  if (!Array.isArray(rec.built?.layers)) return false;
  const build = async (save) => {
    const res = await fetch("/api/models/build", { method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ ...rec.built, save }) });
    const body = await res.json();
    return res.ok && body.ok && body.name === rec.model;
  };
  try {  // checked first: a recipe that builds another model writes nothing
    if (!(await build(false)) || !(await build(true))) return false;
    await loadModels(rec.model);
    log(`Built ${rec.model} again from the layers its checkpoint kept.`);
    return [...$("model").options].some((o) => o.value === rec.model);
  } catch {
    return false;
  }
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

/** The worker's `error` with ``model_gone`` (the model answered 404 when the run loaded
 * it: deleted between the check above and the load): a resumed run says it cannot resume
 * and keeps its checkpoint (true: handled; the phase is back to ready), a new run says the
 * worker's message (false). The model list is read again either way. */
export function onModelGone(m) {
  const resumed = appState.resuming && appState.checkpoint?.model === m.model_gone;
  loadModels($("model").value === m.model_gone ? null : $("model").value);
  if (!resumed) return false;
  appState.resuming = false;
  cannotResume(appState.checkpoint);
  setPhase("ready");
  return true;
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
    await discard();
    $("ckpt-status").textContent = "Checkpoint discarded.";
    log("Discarded the stored checkpoint.");
  };
}

/** A run's `done`: a completed run's checkpoint stays but offers no resume; a stopped run's
 * offers to resume from its last checkpoint (the banner). */
export function onRunDone(m) {
  if (!appState.checkpoint) return;
  if (m.stopped) {
    afterSaving().then(stored).then((rec) => rec && !rec.finished && offerResume(rec))
      .catch((e) => log(`Could not read the stored checkpoint: ${e.message ?? e}`, "error"));
    return;
  }
  markFinished();
}

// ---------------------------------------------------------------------- device lost
/** The worker's `device_lost {reason, message}`: say so, offer to resume from the last
 * checkpoint on a new device (a new worker). */
export function onDeviceLost(m) {
  appState.deviceLost = { reason: m.reason, message: m.message };
  const wasTraining = appState.phase === "training";
  appState.workerReady = false;
  setPhase("lost");
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
  await restartWorker();
  const rec = await stored();
  if (rec && !rec.finished) await resume(rec);
}

// ------------------------------------------------------------------------------ set-up
/** Wire the device-lost banner and look for a stored run to offer (the resume banner). */
export async function setupResume() {
  if (new URLSearchParams(location.search).get("test") === "1") {  // the tests' GPU faults
    window.loseDeviceForTests = () => post({ type: "debug_lose_device" });
    window.gpuErrorForTests = () => post({ type: "debug_gpu_error" });
  }
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
