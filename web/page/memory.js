// The GPU memory of training the chosen model at the chosen batch, said under the batch size
// before Start (GET /api/models/{name}/memory: the plan's own buffers, counted on the server
// without a GPU) with the largest batch within this adapter's buffer limits
// (maxStorageBufferBindingSize, maxBufferSize); a batch that does not fit is said in red
// with the reason (.fit-error). Asked again when a setting changes (debounced).

import { $, humanBytes } from "../lib/util.js";
import { appState } from "./state.js";
import { adapterLimits } from "./dataset.js";
import { currentConfig, pageField, schemaLoaded } from "./form.js";

const DELAY_MS = 400;
let timer = null;
let asked = 0;  // the latest request; an older answer is dropped

/** The hint element under the batch size (made once, after the fit note). */
function hint() {
  let p = $("batch-size-memory");
  if (!p && $("batch-size")) {
    p = document.createElement("p");
    p.className = "hint";
    p.id = "batch-size-memory";
    p.setAttribute("role", "status");
    ($("batch-size-fit") ?? $("batch-size-hint") ?? $("batch-size")).after(p);
    const by = $("batch-size").getAttribute("aria-describedby") ?? "";
    $("batch-size").setAttribute("aria-describedby", `${by} batch-size-memory`.trim());
  }
  return p;
}

/** The form's batch size when it is one the run accepts (a whole number read from decimal
 * digits, within the schema's batch_size range: 2 – 65,536), else null: the form's own
 * check names the problem, and no memory is asked for a batch that cannot run (“1”, “0x10”,
 * which the form reads as text, “1e9”, “64.5”). */
function validBatch(value) {
  const f = pageField("batch_size");
  if (typeof value !== "number" || !Number.isSafeInteger(value)) return null;
  if (f?.min != null && value < f.min) return null;
  if (f?.max != null && value > f.max) return null;
  return value;
}

async function update() {
  const p = hint();
  if (!schemaLoaded()) return;  // the form cannot be read yet; its loading says settings-changed
  const model = $("model")?.value;
  const cfg = currentConfig();
  const batch = validBatch(cfg.batch_size);
  if (!p || !model || batch === null) {
    ++asked;  // an answer still on its way is for a batch no longer typed: dropped
    appState.memoryEstimate = null;
    if (p) p.hidden = true;
    return;
  }
  const mine = ++asked;
  const q = new URLSearchParams({ batch: String(batch), optimizer: String(cfg.optimizer) });
  const lim = await adapterLimits();
  if (lim) {
    q.set("max_storage_buffer_binding_size", String(lim.maxStorageBufferBindingSize));
    q.set("max_buffer_size", String(lim.maxBufferSize));
  }
  let body = null;
  try {
    const res = await fetch(`/api/models/${encodeURIComponent(model)}/memory?${q}`);
    body = await res.json();
    if (!res.ok) body = null;
  } catch {
    body = null;
  }
  if (mine !== asked) return;
  appState.memoryEstimate = body && { ...body, model };  // the model it is for
  if (!body) {
    p.hidden = true;
    return;
  }
  const top = body.max_batch == null ? "" : body.max_batch === 0
    ? " Not even a batch of 1 fits this GPU."
    : ` Up to ${body.max_batch.toLocaleString()} fits this GPU.`;
  const big = body.largest;
  const most = lim ? Math.min(lim.maxStorageBufferBindingSize, lim.maxBufferSize) : null;
  p.textContent = body.problems.length && body.bytes == null  // not plannable: say why
    ? `Batch ${batch.toLocaleString()} does not fit this GPU: ` +
      `${body.problems[0].replace(/[.\s]*$/, ".")}${top}`
    : body.problems.length
    ? `Batch ${batch.toLocaleString()} does not fit this GPU: ${big.name} needs ` +
      `${big.bytes.toLocaleString()} bytes, ${most ? `one buffer holds at most ` +
      `${most.toLocaleString()}` : "more than it has"}.${top}`
    : `GPU memory at batch ${batch.toLocaleString()}: ${humanBytes(body.bytes)}.${top}`;
  p.title = [...body.problems, Object.entries(body.parts).filter(([, v]) => v)
    .map(([k, v]) => `${k} ${humanBytes(v)}`).join(", ")].join("\n");
  p.classList.toggle("fit-error", body.problems.length > 0);
  p.hidden = false;
}

/** Say the memory under the batch size from now on. */
export function setupMemory() {
  document.addEventListener("settings-changed", () => {
    clearTimeout(timer);
    timer = setTimeout(update, DELAY_MS);
  });
}
