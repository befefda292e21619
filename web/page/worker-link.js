// The page's module worker (/lib/worker.js, the engine in Pyodide): started once at boot with
// app.js's message handler, started anew after a lost GPU device; `post` sends it a message.
// The protocol: docs/ARCHITECTURE.md.

import { appState, showError } from "./state.js";
import { setPhase } from "./controls.js";
import { attachClassroom } from "./classroom.js";

let worker = null;
let onMessage = null;     // app.js's handler of the worker's messages
const readyWaiters = [];  // restartWorker's promises, resolved by the next `ready`

/** Send ``msg`` to the worker (nothing while none could be started). */
export function post(msg) {
  worker?.postMessage(msg);
}

/** The page's ``?test=1&chunk=N`` (N > 0: the worker's data buffers hold at most N bytes), or
 * null. */
export function testChunkBytes() {
  const query = new URLSearchParams(location.search);
  const n = Number(query.get("chunk"));
  return query.get("test") === "1" && Number.isSafeInteger(n) && n > 0 ? n : null;
}

/** Start the worker; ``handler`` gets each of its messages (kept for restartWorker). */
export function startWorker(handler = onMessage) {
  onMessage = handler;
  try {
    // ?test=1: the worker accepts the test hooks (debug_lose_device, debug_gpu_error;
    // &chunk=N: data buffers of at most N bytes, worker/load.py)
    const test = new URLSearchParams(location.search).get("test") === "1";
    const chunk = testChunkBytes() ? `&chunk=${testChunkBytes()}` : "";
    worker = new Worker(test ? `/lib/worker.js?test=1${chunk}` : "/lib/worker.js",
      { type: "module" });
    attachClassroom(worker);  // classroom mode (?class=ID): web/page/classroom.js
  } catch (e) {
    showError(`Could not start the worker: ${e.message ?? e}`);
    setPhase("error");
    return;
  }
  worker.onmessage = (ev) => {
    onMessage(ev.data);
    if (ev.data?.type === "ready") for (const resolve of readyWaiters.splice(0)) resolve();
  };
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
export function restartWorker() {
  worker?.terminate();
  appState.workerReady = false;
  appState.busy.stopping = appState.busy.skipping = false;
  appState.prepared = null;  // a new worker has no prepared model (web/page/prepare.js)
  setPhase("booting");
  const ready = new Promise((resolve) => readyWaiters.push(resolve));
  startWorker();
  return ready;
}
