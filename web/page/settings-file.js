// Importing a run's settings from a JSON file (Keep your work > Import settings; storage.js
// exports them): this page's export {format, model, config} or a flat config (a CLI run's
// config.json). Checked before anything changes: numbers that are not finite (1e999, which
// JSON.parse turns into Infinity and JSON.stringify would send as null), the model, the
// `trainable` names against the model (a network built in the page, `layers`, is rebuilt
// first: builder.js), then the server's validator; on any error nothing is
// applied and every bad field is named with the file's value.

import { $ } from "../lib/util.js";
import { appState, log } from "./state.js";
import { applyConfig, pageField } from "./form.js";
import { checkConfig } from "./validation.js";
import { loadModels, onModelChange } from "./models.js";
import { buildFromLink } from "./builder.js";
import { loadedSummary, paramNames, setTrainable } from "./summary.js";
import { cut, MAX_DEPTH, nestingDepth, quote } from "./values.js";

const NAMES_SHOWN = 5;  // the unknown `trainable` names a message lists

function showImportErrors(title, errors) {
  const ul = $("config-import-errors");
  ul.replaceChildren(Object.assign(document.createElement("li"), { textContent: title }));
  for (const [field, msg] of errors) {
    ul.append(Object.assign(document.createElement("li"), { textContent: `${field}: ${msg}` }));
  }
  ul.hidden = false;
}

const note = (text) => { $("work-note").textContent = text; };

/** A number of a settings file that is not finite (1e999: JSON.parse gives Infinity, which
 * JSON.stringify would send as null), with the file's text of it. */
class NotFinite {
  constructor(source) { this.source = source; }
  toJSON() { return this.source; }  // the validator gets the text: not a number
}

// JSON.parse's reviver: a non-finite number becomes NotFinite with its source text (the
// reviver's third argument, in Chromium since 114; elsewhere the value's own text)
const keepNotFinite = (key, value, context) => (typeof value === "number" &&
  !Number.isFinite(value) ? new NotFinite(context?.source ?? String(value)) : value);

/** [[field, message]] of every NotFinite in ``value`` (a field's value: nested values get
 * their path, e.g. "betas[1]"). */
function notFinite(value, path) {
  if (value instanceof NotFinite) {
    return [[path, `${cut(value.source)} is not a finite number`]];
  }
  if (Array.isArray(value)) return value.flatMap((v, i) => notFinite(v, `${path}[${i}]`));
  if (value && typeof value === "object") {
    return Object.entries(value).flatMap(([k, v]) => notFinite(v, `${path}.${k}`));
  }
  return [];
}

/** The problems of the file's `trainable` for ``model``: names that are no parameter of it. */
async function trainableProblems(config, model) {
  const names = config.trainable;
  if (!Array.isArray(names) || !model) return [];
  let params;
  try {
    params = new Set(await paramNames(model));
  } catch (e) {
    return [["trainable", `could not be checked: the summary of ${model}: ${e.message ?? e}`]];
  }
  const unknown = names.filter((n) => typeof n === "string" && !params.has(n));
  const more = unknown.length > NAMES_SHOWN ? ", …" : "";
  return unknown.length ? [["trainable", `${model} has no parameter named ` +
    `${unknown.slice(0, NAMES_SHOWN).map(quote).join(", ")}${more}`]] : [];
}

/** Import settings from a JSON file (this page's export, or a flat config): checked by the
 * page (numbers that are not finite, `trainable` against the model) and the server's
 * validator first; on any error nothing is applied and every bad field is named with the
 * file's value. Fields the page does not show (the command line's) are named as left out. */
export async function importConfig(text, name = "the file") {
  $("config-import-errors").hidden = true;
  if (nestingDepth(text) > MAX_DEPTH) {  // before: "Maximum call stack size exceeded"
    return showImportErrors(`${name} is not a settings file, nothing was changed:`, [["file",
      `arrays or objects nest more than ${MAX_DEPTH} levels deep (the limit; a settings ` +
      "file needs 3)"]]);
  }
  let doc;
  try {
    doc = JSON.parse(text, keepNotFinite);
  } catch (e) {
    return showImportErrors(`${name} is not JSON, nothing was changed:`, [["file", e.message]]);
  }
  const nested = doc && typeof doc === "object" && Object.hasOwn(doc, "config");
  const config = nested ? doc.config : doc;
  let model = nested ? doc.model : $("model").value;
  if (nested && Object.hasOwn(doc, "layers") && typeof model === "string" &&
      !appState.models.some((m) => m.name === model)) {  // a network built in the page
    const built = await buildFromLink(JSON.stringify(doc.layers) ?? "null");
    if (built.error) {
      return showImportErrors(`${name} does not fit here, nothing was changed:`,
        [["layers", `the file's network was not built: ${built.error}`]]);
    }
    await loadModels($("model").value);  // listed, not chosen: the model changes only once
    model = built.name;                   // every check has passed
  }
  if (!config || typeof config !== "object" || Array.isArray(config)) {
    return showImportErrors(`${name} holds no settings, nothing was changed:`,
      [["file", "expected an object {\"model\", \"config\": {...}} or the settings' fields"]]);
  }
  if (model != null && typeof model !== "string") {
    return showImportErrors(`${name} does not fit here, nothing was changed:`, [["model",
      `must be a model's name (text), got ${quote(JSON.stringify(model) ?? model)}`]]);
  }
  if (model && !appState.models.some((m) => m.name === model)) {
    return showImportErrors(`${name} does not fit here, nothing was changed:`, [["model",
      `no model named ${quote(model)} (models: ${appState.models.map((m) => m.name)
        .join(", ")})`]]);
  }
  const names = appState.datasets.map((d) => d.name);
  if (config.dataset != null && !names.includes(config.dataset)) {
    return showImportErrors(`${name} does not fit here, nothing was changed:`, [["dataset",
      `no dataset named ${quote(String(config.dataset).slice(0, 60))} (datasets: ` +
      `${names.join(", ")})`]]);
  }
  const local = [...notFinite(config, "").map(([p, m]) => [p.slice(1), m]),
    ...await trainableProblems(config, model)];
  const verdict = await checkConfig(JSON.parse(JSON.stringify(config)), model || null);
  const named = new Set(local.map(([p]) => p.split(/[.[]/)[0]));  // one message a field
  const errors = [...local, ...(verdict.errors ?? []).filter(([f]) => !named.has(f))];
  if (errors.length || !verdict.ok) {
    return showImportErrors(`${name} has settings the trainer refuses, nothing was changed:`,
      errors);
  }
  if (model && model !== $("model").value) {
    $("model").value = model;
    onModelChange();
  }
  applyConfig(config);
  if (Object.hasOwn(config, "trainable")) {
    const summary = await loadedSummary();
    if (summary) {
      setTrainable(config.trainable ?? summary.tensors
        .filter((t) => t.role === "param").map((t) => t.name));
    }
  }
  const left = Object.keys(config).filter((k) => k !== "trainable" && k !== "dataset" &&
    !pageField(k));
  note(`Imported the settings of ${name}.` + (left.length ? ` Left out what this page does ` +
    `not set (the command line's): ${left.join(", ")}.` : ""));
  log(`Imported settings from ${name}.`);
}
