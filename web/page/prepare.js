// The model before any run, for Inside the model and Try it: the worker's `prepare` sets the
// chosen model up with the initial weights of the current settings (its init and seed; nothing
// trains), so the views and Try it answer before Start (saying the weights are untrained).
// A `model-prepared` event on document tells the views to ask again.

import { $ } from "../lib/util.js";
import { appState } from "./state.js";
import { currentConfig } from "./form.js";
import { post } from "./worker-link.js";

const RUN_PHASES = ["training", "paused", "done"];
let seq = 0;

/** The settings the prepared model depends on: the model, init and seed, and the dataset
 *  (its test images are what the views and Try it show). */
function keyOf(cfg, model) {
  return JSON.stringify([model, cfg?.init ?? null, cfg?.seed ?? null, cfg?.dataset ?? null]);
}

/** True when the worker has a model to answer from: a run's (training, paused or done) or the
 * one prepared for the current settings. Otherwise asks the worker to prepare it (once per
 * settings) and returns false; `prepareNote()` says why meanwhile. */
export function modelReady() {
  if (RUN_PHASES.includes(appState.phase)) return true;
  const model = $("model").value;
  if (!appState.workerReady || appState.noWebGPU || !model) return false;
  const cfg = currentConfig();
  const key = keyOf(cfg, model);
  const p = appState.prepared;
  if (p?.key === key) return !p.busy && !p.error;
  appState.prepared = { id: ++seq, key, model, busy: true, error: null };
  post({ type: "prepare", id: seq, model, config: { ...cfg, model } });
  return false;
}

/** A line for the views while there is no model to show (or "" when there is). */
export function prepareNote() {
  if (RUN_PHASES.includes(appState.phase)) return "";
  const p = appState.prepared;
  if (appState.noWebGPU) return "No WebGPU in this browser: no model to show.";
  if (!appState.workerReady) return "Waiting for the engine to start…";
  if (!p || p.busy) return "Setting up the model with its initial weights…";
  return p.error ? `Could not set up the model: ${p.error}` : "";
}

/** The worker's `prepared {id, model, error?}`. */
export function onPrepared(m) {
  const p = appState.prepared;
  if (!p || p.id !== m.id) return;  // settings changed since: a newer one is on its way
  p.busy = false;
  p.error = m.error ?? null;
  document.dispatchEvent(new CustomEvent("model-prepared", { detail: p }));
}
