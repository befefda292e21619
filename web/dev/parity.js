// The parity page: the same worker as the trainer; window.runParity(casesJson) resolves with
// the worker's results (a JSON string, see py/webgpu_trainer/engine/tools/parity.py) and
// lists them.
const worker = new Worker("/lib/worker.js", { type: "module" });
const statusEl = document.getElementById("status");
const body = document.querySelector("#cases tbody");
let ready = null;
const readyPromise = new Promise((resolve) => { ready = resolve; });
let pending = null;

window.parityState = { ready: false, error: null, adapter: null };

worker.onmessage = ({ data }) => {
  if (data.type === "status") statusEl.textContent = data.text;
  else if (data.type === "adapter") window.parityState.adapter = data.info;
  else if (data.type === "ready") {
    window.parityState.ready = true;
    statusEl.textContent = "Ready.";
    ready();
  } else if (data.type === "no_webgpu" || data.type === "error") {
    window.parityState.error = data.message;
    statusEl.textContent = data.message;
    if (pending) pending.reject(new Error(data.message));
  } else if (data.type === "parity" && pending) {
    show(JSON.parse(data.results));
    pending.resolve(data.results);
    pending = null;
  }
};

function show(results) {
  body.replaceChildren();
  for (const r of results) {
    const tr = document.createElement("tr");
    const losses = (r.losses || []).map((v) => v.toPrecision(6)).join(", ");
    for (const text of [r.name, losses, r.error || "ok"]) {
      const td = document.createElement("td");
      td.textContent = text;
      tr.append(td);
    }
    body.append(tr);
  }
  statusEl.textContent = `${results.length} cases run.`;
}

window.runParity = async (casesJson) => {
  await readyPromise;
  statusEl.textContent = "Running cases…";
  return new Promise((resolve, reject) => {
    pending = { resolve, reject };
    worker.postMessage({ type: "parity", cases: casesJson });
  });
};

// window.compileWGSL({name: code}) -> {name: ["error 12:3 message", ...]}: every shader module
// compiled by this browser's WebGPU (Tint in Chromium), on the main thread.
window.compileWGSL = async (sources) => {
  const adapter = await navigator.gpu.requestAdapter();
  const device = await adapter.requestDevice();
  const out = {};
  for (const [name, code] of Object.entries(sources)) {
    device.pushErrorScope("validation");
    const module = device.createShaderModule({ code, label: name });
    const info = await module.getCompilationInfo();
    const scope = await device.popErrorScope();
    out[name] = info.messages.filter((m) => m.type === "error")
      .map((m) => `error ${m.lineNum}:${m.linePos} ${m.message}`);
    if (scope) out[name].push(`validation: ${scope.message}`);
  }
  device.destroy();
  return out;
};
