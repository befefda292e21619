// The run's phase and the controls that follow it: the phase pill, Start, Stop (Stop
// evaluating), Pause / Resume, the settings (locked while a run goes on), Profile, Download.
// They re-sync on every `state-changed` event (state.js) and on every phase change.

import { $, el } from "../lib/util.js";
import { appState } from "./state.js";
import { formState } from "./validation.js";
import { own } from "./values.js";
import { linkWait, showLinkMark } from "./share.js";

const PHASE_LABEL = {
  booting: "starting up", ready: "ready", training: "training", paused: "paused", done: "done",
  error: "error", lost: "GPU lost",
};
// the pill after a run: the verdict of engine/train/verdict.py
const DONE_LABEL = { ok: "done", diverged: "diverged", chance: "chance level", stopped: "stopped" };

/** True while a run goes on (training or paused). */
export const running = () => appState.phase === "training" || appState.phase === "paused";

/** True during the final test evaluation: after Stop, or at the end of the run (Stop then
 * skips its rest). */
export const testing = () => running() &&
  (appState.busy.stopping || appState.evaluating?.what === "test");

/** Enter ``phase`` (appState.phase, the pill, the verdict after a run) and re-sync. */
export function setPhase(phase) {
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

/** Every control's state from appState and the last settings check. */
export function syncControls() {
  const training = running();
  // Disabled while the last check found a bad setting; a check on its way does not disable it
  // (leaving a field fires its change, and its check, just before the click lands): Start
  // checks the settings again itself.
  $("start").disabled = training || !appState.workerReady || appState.noWebGPU ||
    !$("model").value || !formState.valid || !!appState.fit || !!appState.blocked;
  $("start").title = appState.blocked ?? appState.fit ??
    (formState.valid ? "" : "Fix the settings marked in red first");
  syncWait(training);
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

/** Why Start waits, said in the status line where it would say "Ready", whole (class "full":
 * wrapped, and shown on a phone too, dashboard.css): a reason outside the settings
 * (appState.blocked: classroom.js, the class's dataset gone), or a share link's parameter the
 * page could not use (share.js), with a button to its mark (before: marked below the settings,
 * out of view, the run bar saying "Ready"), or a model that does not fit the dataset
 * (appState.fit). When the reason goes, the last status returns. */
// the run bar while the chosen model does not fit the chosen dataset (dataset.js checkFit)
const FIT_WAIT = "Start waits: the model does not fit the dataset (the note under the dataset " +
  "says why).";

function syncWait(training) {
  const status = $("status");
  const can = !training && appState.workerReady && !appState.noWebGPU;
  const link = can && !appState.blocked ? linkWait() : null;
  const text = can && appState.blocked ? `Start is disabled: ${appState.blocked}`
    : link ? `Start waits. ${link.text}.`
      : can && appState.fit ? FIT_WAIT : null;
  if (text === null) {
    if (status.dataset.wait !== undefined) status.textContent = appState.status ?? "";
    delete status.dataset.wait;
  } else if (status.textContent !== (link ? `${text} Show` : text)) {  // set, or overwritten
    status.textContent = text;
    status.dataset.wait = text;
    if (link) {
      const show = el("button", { type: "button", className: "link-button",
        id: "show-link-mark", textContent: "Show" });
      show.addEventListener("click", () => showLinkMark(link.field));
      status.append(" ", show);
    }
  }
  status.classList.toggle("full", text !== null);
}

document.addEventListener("state-changed", syncControls);
