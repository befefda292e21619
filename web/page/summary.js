// The chosen model's summary card (GET /api/models/{name}/summary): layers, output shapes,
// parameters, multiply-adds, and a Train checkbox per parameter (the config's `trainable`).

import { $, humanCount } from "../lib/util.js";
import { appState, log, settingsChanged } from "./state.js";

let loading = Promise.resolve();  // the latest loadSummary

async function fetchSummary(name) {
  const res = await fetch(`/api/models/${encodeURIComponent(name)}/summary`);
  const body = await res.json();
  if (!res.ok) throw new Error(body.error ?? `HTTP ${res.status}`);
  return body;
}

/** Load the summary of model ``name`` (the chosen one) into the card. */
export function loadSummary(name) {
  loading = showSummary(name);
  return loading;
}

/** The chosen model's summary once the latest load ended (null: it failed). */
export async function loadedSummary() {
  let p;
  do {
    p = loading;
    await p;
  } while (p !== loading);
  return appState.summary;
}

/** The names of model ``name``'s parameters (what `trainable` may name), graph order. */
export async function paramNames(name) {
  const s = $("summary-card").dataset.model === name && appState.summary
    ? appState.summary : await fetchSummary(name);
  return s.tensors.filter((t) => t.role === "param").map((t) => t.name);
}

async function showSummary(name) {
  try {
    const body = await fetchSummary(name);
    if ($("model").value !== name) return;  // the user moved on
    appState.summary = body;
    appState.trainable = new Set(body.tensors.filter((t) => t.trainable).map((t) => t.name));
    $("summary-card").dataset.model = name;
    renderSummary();
  } catch (e) {
    $("summary-card").hidden = true;
    log(`Model summary of ${name} failed: ${e.message ?? e}`, "error");
  }
}

function cellsOf(layer) {
  return [layer.name, layer.op,
    layer.output_shape ? `[${layer.output_shape.join(", ")}]` : "?",
    layer.params ? Number(layer.params).toLocaleString() : "",
    layer.macs ? humanCount(layer.macs) : ""];
}

function trainBoxes(layer, params, byName) {
  const td = document.createElement("td");
  for (const n of params) {
    const label = document.createElement("label");
    const box = document.createElement("input");
    box.type = "checkbox";
    box.dataset.tensor = n;
    box.checked = appState.trainable.has(n);
    box.disabled = appState.phase === "training" || appState.phase === "paused";
    box.addEventListener("change", () => {
      if (box.checked) appState.trainable.add(n); else appState.trainable.delete(n);
      renderSummary();
      settingsChanged(0);
    });
    const short = n.startsWith(layer.name.replace(/^\//, "").split("/")[0] + ".")
      ? n.split(".").pop() : n;
    label.title = `${n} ${JSON.stringify(byName.get(n).shape)}`;
    box.setAttribute("aria-label", `Train ${n}`);  // the visible "weight" / "bias" is not unique
    label.append(box, document.createTextNode(` ${short}`));
    td.append(label);
  }
  return td;
}

export function renderSummary() {
  const s = appState.summary;
  if (!s) return;
  const byName = new Map(s.tensors.map((t) => [t.name, t]));  // no inherited names
  const body = $("summary-table").querySelector("tbody");
  body.replaceChildren();
  for (const layer of s.layers) {
    const params = layer.tensors.filter((n) => byName.get(n)?.role === "param");
    const tr = document.createElement("tr");
    cellsOf(layer).forEach((text, i) => {
      const td = document.createElement("td");
      td.textContent = text;
      if (i === 1) td.className = "ops";
      if (i >= 3) td.className = "num";
      tr.append(td);
    });
    tr.append(trainBoxes(layer, params, byName));
    if (params.length && params.every((n) => !appState.trainable.has(n))) tr.className = "frozen";
    body.append(tr);
  }
  const total = s.tensors.filter((t) => t.role === "param");
  const ticked = total.filter((t) => appState.trainable.has(t.name));
  const nTrain = ticked.reduce((a, t) => a + t.numel, 0);
  const all = total.reduce((a, t) => a + t.numel, 0);
  $("summary-title").textContent = `Model: ${$("model").value}`;
  // trainable parameters as PyTorch counts them (requires_grad); buffers apart, as torch does
  const buffers = s.totals.buffers ?? 0;
  $("summary-totals").textContent = `${Number(nTrain).toLocaleString()} trainable parameters` +
    (nTrain < all ? ` (${Number(all - nTrain).toLocaleString()} frozen)` : "") +
    (buffers ? ` · ${Number(buffers).toLocaleString()} buffers (BatchNorm running statistics, ` +
      "not trained)" : "") +
    ` · ${humanCount(s.totals.macs)} mult-adds per image · opset ${s.opset ?? "?"}`;
  Object.assign($("summary-totals").dataset, { trainable: nTrain, buffers });
  // the loss the model trains with, the initializers that never train (why), the import's notes
  const about = [];
  if (s.loss) about.push(`Loss${s.loss.auto ? " (auto)" : ""}: ${s.loss.text}`);
  for (const f of s.not_trained ?? []) about.push(`Not trained: ${f.name}: ${f.reason}`);
  for (const n of s.notes ?? []) about.push(`Note: ${n}`);
  $("summary-about").replaceChildren(...about.map((text) => {
    const li = document.createElement("li");
    li.textContent = text;
    return li;
  }));
  $("trainable-text").textContent = nTrain === all ? "all parameters train"
    : `${Number(nTrain).toLocaleString()} of ${Number(all).toLocaleString()} parameters train ` +
      `(${total.length - ticked.length} tensors frozen)`;
  $("summary-card").hidden = false;
}

export function setTrainable(names) {
  appState.trainable = new Set(names);
  renderSummary();
  settingsChanged(0);
  // bring the first layer that trains into view inside the table's scroll box
  const first = $("summary-table").querySelector("input:checked");
  const wrap = document.querySelector("#summary-card .table-wrap");
  if (first && wrap) {
    const row = first.closest("tr");
    wrap.scrollTop = Math.max(0, row.offsetTop - wrap.clientHeight / 2);
  }
}

/** The config's `trainable`: null when every parameter trains, else the names, graph order. */
export function trainableConfig() {
  const s = appState.summary;
  if (!s) return null;
  const params = s.tensors.filter((t) => t.role === "param").map((t) => t.name);
  return params.every((n) => appState.trainable.has(n)) ? null
    : params.filter((n) => appState.trainable.has(n));
}
