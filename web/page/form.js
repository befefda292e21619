// The settings form, drawn from the run configuration's schema (GET /api/config/schema, made
// by py/webgpu_trainer/engine/config): one control per field the page shows, its label, limits
// and hint and help text; only the fields of the chosen optimizer, scheduler and loss are
// shown; torch's defaults follow the optimizer; the presets. Number fields are text fields
// read by values.js's strict parser (what was typed stays and is marked: fieldProblems); every
// change is checked by the server (validation.js). The batch size, until the user types one,
// fits the chosen dataset (fitBatch).

import { $, el } from "../lib/util.js";
import { appState, settingsChanged } from "./state.js";
import { trainableConfig } from "./summary.js";
import { chooseDataset, datasetName } from "./dataset.js";
import { toggletip } from "./help.js";
import { exactInteger, own, parseList, parseNumber, quote } from "./values.js";

let schema = null;
const byName = new Map();  // the schema's fields by name (a Map: no inherited keys)
const CHOOSERS = ["optimizer", "scheduler", "loss"];
let chosen = {};      // the optimizer / scheduler / loss the current values were defaulted for
let batchTyped = false;  // the batch size was typed (or given by a config): never changed here

export async function loadSchema() {
  const res = await fetch("/api/config/schema");
  if (!res.ok) throw new Error(`GET /api/config/schema: HTTP ${res.status}`);
  schema = await res.json();
  for (const f of schema.fields) byName.set(f.name, f);
  return schema;
}

export const presets = () => schema.presets;
/** Whether the settings schema is loaded (the form can be read). */
export const schemaLoaded = () => schema !== null;
// the config's `dataset` is the dataset picker's (web/page/dataset.js), not a form field
const onPage = (f) => f.where.includes("page") && f.group !== "finetune" &&
  f.name !== "dataset";
const current = () => Object.fromEntries(CHOOSERS.map((k) => [k, read(byName.get(k))]));

function applies(f, c = current()) {
  return (!f.optimizers || f.optimizers.includes(c.optimizer)) &&
    (!f.schedulers || f.schedulers.includes(c.scheduler)) &&
    (!f.losses || f.losses.includes(c.loss));
}

function defaultFor(f, c) {
  const d = f.defaults ?? {};
  return own(d, c.optimizer) ?? own(d, c.scheduler) ?? f.default;
}

// ------------------------------------------------------------------------------- drawing
const fmt = (x) => Number(x).toLocaleString("en-US", { maximumFractionDigits: 12 });

/** The limits in short, e.g. "2 – 60,000 images", "> 0", "0 ≤ x < 1". */
function hintOf(f) {
  if (f.auto) return `auto: ${f.auto}`;
  if (f.zero) return `0 = ${f.zero}`;
  if (f.type === "list") return f.length ? `${f.length} numbers, comma-separated`
    : "comma-separated; empty = off";
  if (f.type !== "int" && f.type !== "float") return "";
  const { min: lo, max: hi } = f;
  let text = "";
  if (lo != null && hi != null) {
    text = f.min_open || f.max_open
      ? `${fmt(lo)} ${f.min_open ? "<" : "≤"} x ${f.max_open ? "<" : "≤"} ${fmt(hi)}`
      : `${fmt(lo)} – ${fmt(hi)}`;
  } else if (lo != null) text = `${f.min_open ? ">" : "≥"} ${fmt(lo)}`;
  return text + (f.unit ? ` ${f.unit}` : "");
}

function control(f) {
  const title = `${f.help} (${f.range})`;
  const described = `${f.id}-hint ${f.id}-error`;
  const error = el("p", { className: "field-error", id: `${f.id}-error`, hidden: true });
  const hint = el("p", { className: "hint", id: `${f.id}-hint`, title, textContent: hintOf(f) });
  const wrap = el("div", { className: "field", id: `${f.id}-field` });
  wrap.dataset.field = f.name;
  const [tip, note] = toggletip(f.id, f.label || f.name, `${f.help} (${f.range})`);
  if (f.type === "bool") {
    const box = el("input", { type: "checkbox", id: f.id, name: f.name, title });
    box.setAttribute("aria-describedby", described);
    wrap.classList.add("check");
    wrap.append(el("div", { className: "label-row" },
      el("label", { className: "radio", htmlFor: f.id }, box, ` ${f.label || f.name}`), tip),
    note, error);
    return wrap;
  }
  if (f.name === "init") {  // radios: "Train from scratch" / "Fine-tune"
    const set = el("fieldset", { className: "field radios", id: `${f.id}-field` });
    set.dataset.field = f.name;
    set.append(el("legend", { className: "label-row" }, f.label, tip), note);
    for (const c of f.choices) {
      const radio = el("input", { type: "radio", id: `${f.id}-${c}`, name: f.name, value: c });
      const note = schema.notes?.init?.[c];
      set.append(el("label", { className: "radio", title },
        radio, el("span", {}, schema.labels.init[c], " ",
          note ? el("small", {}, `(${note})`) : "")));
    }
    set.append(error);
    return set;
  }
  let input;
  if (f.type === "choice") {
    input = el("select", { id: f.id, name: f.name });
    for (const c of f.choices) input.append(new Option(schema.labels[f.name]?.[c] ?? c, c));
  } else if (f.type === "list") {
    input = el("input", { type: "text", id: f.id, name: f.name, spellcheck: false,
      placeholder: f.default == null ? "off" : "" });
  } else {  // text, not type=number: Chrome's number field gives "" for what it cannot read
    input = el("input", { type: "text", id: f.id, name: f.name, spellcheck: false,
      autocomplete: "off", inputMode: f.type === "int" ? "numeric" : "decimal",
      placeholder: f.auto ? "auto" : "" });
  }
  input.title = title;
  input.setAttribute("aria-describedby", described);
  wrap.append(el("div", { className: "label-row" },
    el("label", { htmlFor: f.id, textContent: f.label || f.name, title }), tip), note, input,
  hint, error);
  return wrap;
}

function grid(names) {
  return el("div", { className: "grid2" }, ...names.map((n) => control(byName.get(n))));
}

const pageFields = (test) => schema.fields.filter((f) => onPage(f) && test(f)).map((f) => f.name);

/** Draw the form into ``container`` (inside the settings fieldset) and the preset buttons into
 * ``presetBox``; values start at the schema's defaults. */
export function buildForm(container, presetBox) {
  const main = (g) => pageFields((f) => f.group === g && !f.advanced && !CHOOSERS.includes(f.name)
    && f.name !== "init");
  const adv = (g) => pageFields((f) => f.group === g && (f.advanced || g === "schedule" ||
    g === "loss") && !CHOOSERS.includes(f.name));
  container.replaceChildren(
    control(byName.get("optimizer")), grid(main("optimizer")),
    grid(main("run")), control(byName.get("init")),
    el("p", { className: "hint steps", id: "run-steps" }),
    el("details", { className: "advanced", id: "advanced" },
      el("summary", { textContent: "Advanced" }),
      grid([...adv("run"), ...adv("optimizer")]),
      el("h3", { textContent: "Learning-rate schedule" }), control(byName.get("scheduler")),
      grid(adv("schedule")),
      el("h3", { textContent: "Loss" }), control(byName.get("loss")), grid(adv("loss"))),
    el("ul", { className: "config-errors", id: "config-errors", hidden: true }));
  presetBox.replaceChildren(...schema.presets.map((p) => {
    const b = el("button", { type: "button", className: "preset", id: `preset-${p.name}` },
      el("span", { className: "preset-name", textContent: p.label }),
      el("span", { className: "preset-desc", textContent: p.description }));
    b.dataset.preset = p.name;
    b.addEventListener("click", () => applyPreset(p.name));
    return b;
  }));
  chosen = Object.fromEntries(CHOOSERS.map((k) => [k, byName.get(k).default]));
  for (const f of schema.fields) if (onPage(f)) write(f, defaultFor(f, chosen));
  const batch = byName.get("batch_size");
  $(`${batch.id}-hint`).after(el("p", { className: "hint", id: `${batch.id}-fit`, hidden: true,
    role: "status" }));
  $(batch.id).setAttribute("aria-describedby",
    `${$(batch.id).getAttribute("aria-describedby")} ${batch.id}-fit`);
  document.addEventListener("dataset-changed", fitBatch);
  changed();
  container.addEventListener("input", onEdit);
  container.addEventListener("change", onEdit);
  container.addEventListener("keydown", (e) => {  // Enter checks the settings, never starts
    if (e.key === "Enter" && e.target.matches("input, select")) {
      e.preventDefault();
      settingsChanged(0);
    }
  });
}

// ------------------------------------------------------------------------- values
function write(f, v) {
  if (f.name === "init") {
    const radio = $(`${f.id}-${v}`);
    if (radio) radio.checked = true;
    return;
  }
  const input = $(f.id);
  if (!input) return;
  if (f.type === "bool") input.checked = !!v;
  else if (f.type === "list") input.value = v == null ? "" : [v].flat().join(", ");
  else input.value = v == null ? "" : String(v);
}

/** The value of a control as JSON for the validator: numbers as numbers, what the strict
 * parser (values.js) does not read as the text typed (the validator refuses it; fieldProblems
 * names it), an empty optional field as undefined. */
function read(f) {
  if (f.name === "init") return document.querySelector(`input[name="init"]:checked`)?.value;
  const input = $(f.id);
  if (!input) return undefined;
  if (f.type === "bool") return input.checked;
  if (f.type === "choice") return input.value;
  const text = input.value.trim();
  if (text === "") return f.default == null && !f.required_by ? undefined : text;
  const n = f.type === "list" ? parseList(text) : parseNumber(text);
  if (n.problem) return text;
  return f.type === "int" ? exactInteger(text, n.value) : n.value;
}

/** The number and list fields shown whose text is no number (or list of numbers), as
 * [[field, message]], the message naming the field and quoting the text, e.g.
 * "lr: “0.0.1” is not a number". */
export function fieldProblems() {
  const c = current();
  const out = [];
  for (const f of schema?.fields ?? []) {
    if (!onPage(f) || !applies(f, c) || !["int", "float", "list"].includes(f.type)) continue;
    const text = $(f.id)?.value.trim() ?? "";
    if (text === "") continue;
    if (f.type === "list") {
      const n = parseList(text);
      if (n.problem) out.push([f.name, `${f.name}: ${quote(text)} is not a list of numbers ` +
        `(it ${n.problem})`]);
    } else {
      const n = parseNumber(text);
      if (n.problem) out.push([f.name, `${f.name}: ${quote(text)} ${n.problem}`]);
    }
  }
  return out;
}

// equal values, an empty field counting as no value
const same = (a, b) => JSON.stringify(a === "" ? null : a ?? null) ===
  JSON.stringify(b === "" ? null : b ?? null);

// fields whose default the validator sizes to the dataset when not given (val_images: at most
// a tenth of the training images): at their default they are left out, so it does
const SIZED = new Set(["val_images"]);

/** The settings as the run configuration's fields (those that apply to the choices). */
export function readConfig() {
  const c = current();
  const out = {};
  for (const f of schema.fields) {
    if (!onPage(f) || !applies(f, c)) continue;
    const v = read(f);
    if (v !== undefined && !(SIZED.has(f.name) && same(v, f.default))) out[f.name] = v;
  }
  return out;
}

/** The config Start sends: the form's fields and the ticked parameters (`trainable`). */
export function currentConfig() {
  const cfg = { ...readConfig(), trainable: trainableConfig() };
  if (byName.has("dataset")) cfg.dataset = datasetName();  // once the schema has the field
  return cfg;
}

/** Set field ``name`` to ``value`` (a chooser: the other fields follow its defaults). */
export function setField(name, value) {
  write(byName.get(name), value);
  changed();
}

function followChoosers() {
  // fields still at the default of the previous choice take the default of the new one
  const now = current();
  if (!same(now, chosen)) {
    for (const f of schema.fields) {
      if (onPage(f) && f.defaults && same(read(f), defaultFor(f, chosen))) {
        write(f, defaultFor(f, now));
      }
    }
    chosen = now;
  }
  for (const f of schema.fields) {
    const box = $(`${f.id}-field`);
    if (box && onPage(f)) box.hidden = !applies(f, now);
  }
}

function onEdit(e) {
  if (e.target.id === byName.get("batch_size").id) batchTyped = true;
  changed();
}

function changed() {
  followChoosers();
  fitBatch();
  markPresets();
  settingsChanged();
}

// ------------------------------------------------------------------------- presets
export function applyPreset(name) {
  applyConfig(schema.presets.find((x) => x.name === name).config);
}

/** Put ``config`` (run configuration fields, e.g. an imported or stored one) into the form:
 * the choosers first, then every field of the page it names; other keys are left out. A
 * number field may be given text (a share link's bad value: shown as it is, and marked). */
export function applyConfig(config) {
  if (typeof config.dataset === "string") chooseDataset(config.dataset);
  for (const k of CHOOSERS) if (Object.hasOwn(config, k)) write(byName.get(k), config[k]);
  followChoosers();
  for (const [k, v] of Object.entries(config)) {
    if (pageField(k)) write(byName.get(k), v);
  }
  if (Object.hasOwn(config, "batch_size")) {
    batchTyped = !same(config.batch_size, byName.get("batch_size").default);
  }
  changed();
}

/** The schema's field ``name`` as the page shows it (undefined: no such field on the page). */
export function pageField(name) {
  const f = byName.get(name);
  return f && onPage(f) ? f : undefined;
}

const OWNERS = { optimizer: "optimizers", scheduler: "schedulers", loss: "losses" };
const label = (kind, value) => own(own(schema.labels, kind), value) ?? value;

/** Why page field ``name`` does not apply under the choosers ``config`` names (the form's
 * for the others), e.g. "does not apply to optimizer Adam (only to SGD, RMSprop)"; null
 * when it applies. */
export function notApplying(name, config = {}) {
  const f = pageField(name);
  const c = current();
  for (const k of CHOOSERS) if (Object.hasOwn(config, k)) c[k] = config[k];
  if (!f || applies(f, c)) return null;
  const kind = CHOOSERS.find((k) => f[OWNERS[k]] && !f[OWNERS[k]].includes(c[k]));
  return `does not apply to ${kind} ${label(kind, c[kind])} (only to ` +
    `${f[OWNERS[kind]].map((v) => label(kind, v)).join(", ")})`;
}

/** The settings that differ from their defaults (for the current optimizer / scheduler /
 * loss): what a share link carries. */
export function changedConfig() {
  const c = current();
  return Object.fromEntries(Object.entries(readConfig())
    .filter(([k, v]) => !same(v, defaultFor(byName.get(k), c))));
}

function markPresets() {
  for (const p of schema.presets) {
    const match = Object.entries(p.config).every(([k, v]) => same(read(byName.get(k)), v));
    $(`preset-${p.name}`)?.setAttribute("aria-pressed", String(match));
  }
}

// ------------------------------------------------------------------------- batch fit
/** The training images a run of the form's settings trains on out of ``train`` in the split
 * (engine/config/run.py train_used; val_images at its default: at most a tenth of them). */
function trainUsed(train) {
  const num = (name) => {
    const v = read(byName.get(name));
    return typeof v === "number" ? v : 0;
  };
  const vf = byName.get("val_images");
  const val = same(read(vf), vf.default) ? Math.min(vf.default, Math.floor(train / 10))
    : num("val_images");
  const rest = Math.max(train - val, 0);
  return Math.min(num("train_images") || rest, rest);
}

/** While the batch size is not typed: the largest power of two within the chosen dataset's
 * training images (at most the default), said next to the field. */
function fitBatch() {
  const f = byName.get("batch_size");
  const d = appState.dataset;
  const note = $(`${f?.id}-fit`);
  if (!note || batchTyped || !d || $(f.id).disabled) {
    if (note && batchTyped) note.hidden = true;
    return;
  }
  const used = trainUsed(Number(d.train));
  const fit = used < 2 ? f.default : Math.min(f.default, 2 ** Math.floor(Math.log2(used)));
  write(f, fit);
  note.textContent = fit === f.default ? "" : `Set to ${fit} to fit the ${used.toLocaleString()}` +
    ` training images of ${d.name} (the default ${f.default} needs more); type a batch size ` +
    "to choose your own.";
  note.hidden = fit === f.default;
}
