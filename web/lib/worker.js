// The module worker: boots Pyodide, loads the engine wheel, and hands messages to
// webgpu_trainer.worker.main (Python), which drives navigator.gpu from this worker.
import { loadPyodide } from "/vendor/pyodide/pyodide.mjs";

const pending = [];
let handle = null;

function post(type, fields = {}) {
  self.postMessage({ type, ...fields });
}

self.onmessage = (event) => {
  if (handle) handle(event.data);
  else pending.push(event.data);
};

async function boot() {
  post("status", { text: "Loading Python (Pyodide)…" });
  const meta = await (await fetch("/api/wheel")).json();
  // a versioned folder: the runtime's large files are cached as immutable
  const pyodide = await loadPyodide({ indexURL: meta.pyodide ?? "/vendor/pyodide/" });
  post("status", { text: "Loading the engine…" });
  const wheel = await fetch(meta.url);
  if (!wheel.ok) throw new Error(`engine wheel ${meta.url}: HTTP ${wheel.status}`);
  pyodide.unpackArchive(await wheel.arrayBuffer(), "wheel");
  const browser = pyodide.pyimport("webgpu_trainer.worker.main");
  await browser.boot();
  handle = (msg) => browser.handle(msg);
  for (const msg of pending.splice(0)) handle(msg);
}

boot().catch((err) => post("error", { message: `worker start failed: ${err.message || err}` }));
