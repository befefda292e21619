// Build a network in the page (the "Build" tab, issue 19 item 6): add, remove, move and resize
// layers for the chosen dataset (its sample shape and classes, never constants); every edit is
// checked by POST /api/models/build (host/build_routes.py: shapes, parameters and mult-adds per
// layer, errors naming the layer and field) and the table follows as you type. "Use this
// network" builds it (save: true) into the uploads as `built-<hash>` and chooses it: the summary,
// training, export and views are then an upload's. The layer list goes into the share link
// (`layers=`, JSON; share.js) and is rebuilt from it on load (`buildFromLink`); a built model
// chosen later (its file keeps the layers: GET /api/models' `layers`) fills the table again.

import { $, el, humanCount } from "../lib/util.js";
import { appState, log, setStatus } from "./state.js";
import { loadModels } from "./models.js";
import { exactInteger, MAX_DEPTH, nestingDepth } from "./values.js";

// op -> [label, [[field, default, hint]]]: what a row edits (the server checks every value)
const OPS = {
  conv: ["Conv2d", [["out_channels", 8, "channels"], ["kernel_size", 3, "kernel"],
    ["stride", 1, "stride"], ["padding", 0, "padding"]]],
  maxpool: ["MaxPool2d", [["kernel_size", 2, "kernel"]]],
  avgpool: ["AvgPool2d", [["kernel_size", 2, "kernel"]]],
  global_avgpool: ["GlobalAvgPool", []],
  flatten: ["Flatten", []],
  linear: ["Linear", [["out_features", 32, "features or classes"]]],
  batchnorm: ["BatchNorm", []],
  dropout: ["Dropout", [["p", 0.3, "p"]]],
  relu: ["ReLU", []], gelu: ["GELU", []], tanh: ["Tanh", []], sigmoid: ["Sigmoid", []],
  elu: ["ELU", []], leaky_relu: ["LeakyReLU", [["negative_slope", 0.01, "slope"]]],
  residual: ["Residual block", []],
};
const LINK_LIMIT = 16384;  // characters of a link's `layers`
const built = new Map();   // model name -> the layer list it was built from (the share link's)
let spec = [];
let edited = false;        // the user changed the list: a new dataset keeps it
let editedFor = null;      // the input shape (text) the list was first edited for
let timer = null;
let asked = 0;             // the latest check's number: older answers are dropped

const isOp = (op) => typeof op === "string" && Object.hasOwn(OPS, op);
/** A typed field: a number when it reads as one exactly, else the text (the server names it):
 * "1e999" would be Infinity (sent as null, read as "not given") and 20 digits would round. */
function numberOrText(t) {
  const s = t.trim();
  if (!/^-?\d+(\.\d+)?(e[+-]?\d+)?$/i.test(s)) return s;
  const n = Number(s);
  return Number.isFinite(n) ? exactInteger(s, n) : s;
}
/** JSON.parse's reviver for a link's layers: a number JSON.stringify would not send back as
 * itself (Infinity, an integer past 2^53) stays its source text. */
const keepExact = (key, v, ctx) => (typeof v === "number" && (!Number.isFinite(v) ||
  (Number.isInteger(v) && !Number.isSafeInteger(v))) ? (ctx?.source ?? String(v)) : v);

function starter(d) {
  const last = { op: "linear", out_features: "classes" };
  if (d?.sample_shape?.length === 3) {
    return [{ ...newLayer("conv"), padding: 1 }, newLayer("relu"), newLayer("maxpool"),
      newLayer("flatten"), last];
  }
  return [newLayer("linear"), newLayer("relu"), last];
}

/** The input shape and class count of the chosen dataset (MNIST's until it is known). */
function target() {
  const d = appState.dataset;
  return { input: d?.sample_shape ?? [1, 28, 28], classes: d?.classes?.length ?? 10 };
}

function newLayer(op) {
  const layer = { op };
  for (const [f, v] of OPS[op][1]) layer[f] = v;
  if (op === "residual") layer.layers = [{ op: "relu" }];
  return layer;
}

// ------------------------------------------------------------------------------ the table
function fieldInput(layer, field, hint, index) {
  const v = layer[field];
  const input = el("input", { type: "text", inputMode: "decimal", size: 6, value: v ?? "",
    className: "builder-field", "aria-label": `layer ${index} ${field}`, title: hint,
    placeholder: hint });
  input.dataset.field = field;
  input.addEventListener("input", () => {
    if (input.value.trim() === "") delete layer[field];
    else layer[field] = numberOrText(input.value);
    schedule();
  });
  return el("label", { className: "builder-label" }, `${field} `, input);
}

function opSelect(layer, index, list, k) {
  const sel = el("select", { "aria-label": `layer ${index} op` });
  for (const [op, [label]] of Object.entries(OPS)) {
    if (op === "residual" && String(index).includes(".")) continue;
    sel.append(new Option(label, op, false, op === layer.op));
  }
  sel.addEventListener("change", () => { list[k] = newLayer(sel.value); render(); });
  return sel;
}

function button(text, label, onClick) {
  const b = el("button", { type: "button", className: "btn small", textContent: text,
    "aria-label": label });
  b.addEventListener("click", onClick);
  return b;
}

function rows(list, prefix, body) {
  list.forEach((layer, k) => {
    const index = `${prefix}${k}`;
    const fields = el("div", { className: "builder-fields" });
    for (const [f, , hint] of OPS[layer.op]?.[1] ?? []) {
      fields.append(fieldInput(layer, f, hint, index));
    }
    const move = (d) => () => {
      const j = k + d;
      if (j < 0 || j >= list.length) return;
      [list[k], list[j]] = [list[j], list[k]];
      render();
    };
    const tools = el("div", { className: "builder-tools" },
      button("↑", `move layer ${index} up`, move(-1)),
      button("↓", `move layer ${index} down`, move(1)),
      button("✕", `remove layer ${index}`, () => { list.splice(k, 1); render(); }));
    if (layer.op === "residual") {
      fields.append(button("+ layer inside", `add a layer inside block ${index}`, () => {
        layer.layers.push(newLayer("relu"));
        render();
      }));
    }
    const tr = el("tr", { className: prefix ? "builder-inner" : "" },
      el("td", { textContent: index }),
      el("td", {}, el("div", { className: "builder-op" }, opSelect(layer, index, list, k), tools)),
      el("td", {}, fields),
      el("td", { className: "shape" }), el("td", { className: "num params" }),
      el("td", { className: "num macs" }));
    tr.dataset.index = index;
    body.append(tr);
    if (layer.op === "residual" && Array.isArray(layer.layers)) {
      rows(layer.layers, `${index}.`, body);
    }
  });
}

function render(edit = true) {
  const body = $("builder-table").tBodies[0];
  body.replaceChildren();
  rows(spec, "", body);
  schedule(0, edit);
}

function showCheck(res) {
  const byIndex = new Map(res.rows.map((r) => [r.index, r]));
  for (const tr of $("builder-table").tBodies[0].rows) {
    const r = byIndex.get(tr.dataset.index);
    tr.querySelector(".shape").textContent = r?.shape ? `[${r.shape.join(", ")}]` : "–";
    const known = r?.shape != null;  // after a refused layer the shapes are unknown
    tr.querySelector(".params").textContent = known ? r.params.toLocaleString() : "–";
    tr.querySelector(".macs").textContent = known ? r.macs.toLocaleString() : "–";
    const errs = res.errors.filter((e) => e.layer === tr.dataset.index);
    tr.classList.toggle("bad", errs.length > 0);
    for (const input of tr.querySelectorAll("input")) {
      input.setAttribute("aria-invalid", String(errs.some((e) => e.field === input.dataset.field)));
    }
  }
  const t = res.totals;
  $("builder-totals").textContent = (res.ok ? "" : "Before the first problem: ") +
    `${t.layers} layers · ${t.params.toLocaleString()} ` +
    `parameters (${humanCount(t.params)}) · ${t.macs.toLocaleString()} mult-adds per sample`;
  const ul = $("builder-errors");
  ul.replaceChildren(...res.errors.slice(0, 20).map((e) => el("li", { textContent: e.message })));
  const now = target();
  if (!res.ok && edited && editedFor !== null && editedFor !== now.input.join(", ")) {
    ul.prepend(el("li", { className: "builder-hint", textContent: "These layers were edited " +
      `for samples [${editedFor}]; this dataset's are [${now.input.join(", ")}] with ` +
      `${now.classes} classes. “Start over” resets the layers for this dataset.` }));
  }
  ul.hidden = !res.errors.length;
  $("builder-use").disabled = !res.ok || appState.phase === "training" ||
    appState.phase === "paused";
}

async function post(layers, save) {
  const res = await fetch("/api/models/build", { method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ layers, ...target(), save }) });
  const body = await res.json().catch(() => ({ error: `HTTP ${res.status}` }));
  if (!res.ok) throw new Error(body.error ?? `HTTP ${res.status}`);
  return body;
}

function schedule(delay = 150, edit = true) {
  if (edit && !edited) editedFor = target().input.join(", ");
  edited ||= edit;
  clearTimeout(timer);
  $("builder-use").disabled = true;
  timer = setTimeout(async () => {
    const n = ++asked;
    try {
      const res = await post(spec, false);
      if (n === asked) showCheck(res);
    } catch (e) {
      if (n === asked) showCheck({ rows: [], totals: { layers: 0, params: 0, macs: 0 },
        ok: false, errors: [{ layer: "", message: `check failed: ${e.message ?? e}` }] });
    }
  }, delay);
}

async function useNetwork() {
  $("builder-use").disabled = true;
  try {
    const res = await post(spec, true);
    if (!res.ok) { showCheck(res); return; }
    built.set(res.name, res.spec);
    log(`Built ${res.name}: ${res.totals.params.toLocaleString()} parameters, ` +
      `${res.totals.layers} layers.`);
    setStatus(`Built ${res.name}; it is the chosen model.`);
    $("builder-note").textContent = `Chosen as the model: ${res.name}. Start trains it.`;
    await loadModels(res.name);
  } catch (e) {
    $("builder-note").textContent = `Could not build: ${e.message ?? e}`;
  } finally {
    schedule(0, false);  // the button follows a fresh check (a refused list keeps it off)
  }
}

/** The layer list of model ``name`` when this page built it, or when its file says it was
 * built by the builder (GET /api/models' ``layers``, from its metadata), else null: the share
 * link and the exported settings carry it, so the model can be built again. */
export const layersOf = (name) => built.get(name) ??
  appState.models?.find((m) => m.name === name)?.layers ?? null;

/** What rebuilds model ``name`` if it was built in the page: ``{layers, input, classes}``
 * (POST /api/models/build's body without ``save``: the shape it was built for, GET
 * /api/models' ``built_for``), else null. */
export function recipeOf(name) {
  const layers = layersOf(name);
  const shape = appState.models?.find((m) => m.name === name)?.built_for;
  return Array.isArray(layers) && shape ? { layers, ...shape } : null;
}

/** A chosen model built by the builder (now or in an earlier session): its layers fill the
 * table, as for a model built from a share link. */
function showModelLayers() {
  const layers = layersOf($("model").value);
  if (!Array.isArray(layers) || appState.phase === "training" || appState.phase === "paused") {
    return;
  }
  spec = structuredClone(layers);
  edited = false;
  editedFor = null;
  render(false);
}

/** Rebuild a share link's ``layers`` (JSON text) for the chosen dataset: ``{name}`` (the
 * model's), or ``{error}`` after naming the problem in the builder (the caller shows it where
 * the settings are: share.js marks it like a bad setting, settings-file.js lists it). */
export async function buildFromLink(text) {
  const fail = (msg) => {
    $("builder-note").textContent = `The link's network was not built: ${msg}`;
    log(`link: layers: ${msg}`, "error");
    return { error: msg };
  };
  if (text.length > LINK_LIMIT) {
    return fail(`${text.length.toLocaleString()} characters; the limit is ` +
      LINK_LIMIT.toLocaleString());
  }
  if (nestingDepth(text) > MAX_DEPTH) {  // JSON.parse's reviver recurses once a level
    return fail(`arrays or objects nest more than ${MAX_DEPTH} levels deep (the limit)`);
  }
  let layers;
  try {
    layers = JSON.parse(text, keepExact);
  } catch (e) {
    return fail(`not JSON (${e.message})`);
  }
  try {
    const res = await post(layers, true);
    if (!res.ok) {  // the table keeps the page's own list; the note names the link's problems
      return fail(res.errors.slice(0, 3).map((e) => e.message).join("; ") +
        (res.errors.length > 3 ? ` (and ${res.errors.length - 3} more)` : ""));
    }
    spec = res.spec;  // the server's checked copy: only own, known keys
    render();
    built.set(res.name, res.spec);
    return { name: res.name };
  } catch (e) {
    return fail(e.message ?? String(e));
  }
}

export function setupBuilder() {
  const add = $("builder-add-op");
  for (const [op, [label]] of Object.entries(OPS)) add.append(new Option(label, op));
  $("builder-add").addEventListener("click", () => {
    if (!isOp(add.value)) return;
    spec.splice(Math.max(spec.length - 1, 0), 0, newLayer(add.value));  // before the head
    render();
  });
  $("builder-reset").addEventListener("click", () => {
    spec = starter(appState.dataset);
    edited = false;
    editedFor = null;
    render(false);
  });
  $("builder-use").addEventListener("click", useNetwork);
  document.addEventListener("model-changed", showModelLayers);
  document.addEventListener("dataset-changed", () => {
    const d = appState.dataset;
    $("builder-input").textContent = d ? `${d.title}: input [${d.sample_shape.join(", ")}], ` +
      `${d.classes.length} classes` : "";
    if (!edited) spec = starter(d);
    render(false);
  });
  spec = starter(appState.dataset);
  render(false);
}
