// The run's checkpoint in this browser's IndexedDB: the checkpoint of every epoch (and inside
// an epoch: every `checkpoint_every_s` seconds of training and on Stop) as ONE record, and the
// line that says what is stored (#ckpt-status). The resume banner and the GPU device lost are
// resume.js's, the "Your work" panel's downloads and reset work.js's.
//
// Why IndexedDB (through idb-keyval, served from web/node_modules under /vendor/idb-keyval)
// and not OPFS: a checkpoint is ONE record {header, metrics, weights, optimizer} written by
// one put in one transaction, so the stored checkpoint is replaced only when the new one is
// written completely (a failed or interrupted write leaves the last good one); OPFS would need
// several files and a rename dance for the same guarantee. ArrayBuffers are stored as they
// are (structured clone), with no encoding.
//
// The worker's side is py/webgpu_trainer/worker/storage.py; the sections are
// engine/train/checkpoint.py's (the CLI's .ckpt files hold the same bytes).

import { createStore, get, set, del, update } from "/vendor/idb-keyval/index.js";
import { $, humanBytes, pct } from "../lib/util.js";
import { appState, log } from "./state.js";
import { recipeOf } from "./builder.js";

export const DB = "webgpu-trainer";
const STORE = "checkpoints";
const KEY = "latest";
export const FORMAT = "webgpu-trainer/browser-checkpoint@1";

let store = null;                 // idb-keyval's store, opened on first use (reset closes it)
let saving = Promise.resolve();   // checkpoint writes, one after another

const db = () => (store ??= createStore(DB, STORE));
/** A clock time for people (24 h). */
export const time = (ms) => new Date(ms).toLocaleTimeString([], { hour12: false });
/** The bytes of a stored checkpoint ``rec`` (weights and optimizer state). */
export const sizeOf = (rec) => (rec.weights?.byteLength ?? 0) + (rec.optimizer?.byteLength ?? 0);

/** True when this page's database exists (reading it would otherwise create it). */
async function dbExists() {
  if (!indexedDB.databases) return true;
  return (await indexedDB.databases()).some((d) => d.name === DB);
}

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
    built: recipeOf(m.model ?? appState.model),  // a network built in the page: rebuilt on resume
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
export function where(rec) {
  return inside(rec) ? `step ${rec.step}, inside epoch ${rec.epoch}`
    : `epoch ${rec.epoch} (step ${rec.step})`;
}
/** True when ``rec`` was taken inside an epoch (not at its end). */
export const inside = (rec) => rec.epochs_completed != null && rec.epochs_completed < rec.epoch;

/** The stored checkpoint ``rec`` as appState.checkpoint and on the status line. */
export function showStored(rec) {
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

/** The stored checkpoint record (undefined when none). */
export async function stored() {
  return (await dbExists()) ? get(KEY, db()) : undefined;
}

/** Resolves once the checkpoint writes asked for so far are done (or failed). */
export const afterSaving = () => saving;

/** Mark the stored checkpoint finished (a completed run: it offers no resume). */
export function markFinished() {
  saving = saving.then(() => update(KEY, (r) => r && { ...r, finished: true }, db()))
    .then(() => { appState.checkpoint.finished = true; })
    .catch((e) => log(`Could not mark the checkpoint finished: ${e.message ?? e}`, "error"));
}

/** Delete the stored checkpoint. */
export async function discard() {
  await del(KEY, db());
  appState.checkpoint = null;
}

/** Close the database (before it is deleted: Reset everything); the next use opens it. */
export async function closeStore() {
  if (store) {
    await store("readonly", (s) => s.transaction.db.close()).catch(() => {});
    store = null;
  }
}
