// Settings in the URL and the leave-page warning.
//
// "Copy share link": the page's address with ?model=...&seed=... and every setting that differs
// from its default (&dataset=... unless the server's default; &layers=[...] (JSON) for a
// network built in the page, rebuilt from it on load by builder.js; lists comma-separated;
// `trainable`, the fine-tuning selection, as the
// parameters' names), copied to the clipboard and shown for copying by hand. On load, the
// link's settings go into the form (readLink / applyLink) and are checked like any input, with
// values.js's strict parser: a value the control cannot hold (text or 0x10 in a number field,
// 1e999, an unknown choice; a number field shows the link's text), a name given twice, a
// setting that does not apply to the link's optimizer (scheduler, loss) and names that are no
// settings are marked, Start stays disabled until that field is edited; the names ignored (no
// setting, or another optimizer's) are listed as notices that do not hold Start (they go with
// any edit); nothing is dropped silently: a `layers` network that is not built, a dataset or
// model the server lacks (an empty one too) and an empty `trainable` are marked too. No key
// of a link is looked up through an inherited property (?constructor=2 is a name that is no
// setting). While a run trains (or is paused), leaving the page asks first (beforeunload).

import { $ } from "../lib/util.js";
import { appState, log, settingsChanged } from "./state.js";
import { applyConfig, changedConfig, notApplying, pageField, readConfig } from "./form.js";
import { loadedSummary, setTrainable, trainableConfig } from "./summary.js";
import { datasetName, datasetTitle, defaultDataset } from "./dataset.js";
import { own, parseList, parseNumber, quote } from "./values.js";
import { layersOf } from "./builder.js";
import { showSettings } from "./layout.js";

const NOT_SETTINGS = new Set(["class", "test", "chunk"]);  // ?class=ID (classroom), test hooks
const IGNORED_SHOWN = 5;                   // the ignored names a message lists
// {field, message, ignored, wait}: what the link gave that the form could not take, until
// edited (wait: what is wrong and what to do, in the run bar's words: linkWait)
let linkErrors = [];
let linkTrainable = null;                  // the link's `trainable` names, once the model is known
// what to do about a link's `trainable` the page could not use (the run bar's words, linkWait)
const TRAINABLE = "tick what trains (Inside the model) or choose the model again";

/** The share link of the current settings and model. */
export function shareLink() {
  const params = new URLSearchParams();
  params.set("model", $("model").value);
  if (datasetName() !== defaultDataset()) params.set("dataset", datasetName());
  const cfg = readConfig();
  const changed = { seed: cfg.seed, ...changedConfig() };  // the seed always: it pins the run
  for (const [k, v] of Object.entries(changed)) {
    if (v !== undefined) params.set(k, Array.isArray(v) ? v.join(",") : String(v));
  }
  const trainable = trainableConfig();
  if (trainable) params.set("trainable", trainable.join(","));
  const layers = layersOf($("model").value);  // a network built in the page (builder.js)
  if (layers) params.set("layers", JSON.stringify(layers));
  return `${location.origin}${location.pathname}?${params}`;
}

/** The value of ``text`` for field ``f``: ``{value}``, or ``{error}`` naming the field and
 * quoting the link's text (and ``{text}``: what a number field shows). */
function parseValue(f, text) {
  const t = text.trim();
  const bad = (what) => ({ error: `${f.name}: ${quote(text)} from the link ${what}`,
    wait: `${what.split(" (")[0]}: fix the marked setting` });
  if (f.type === "int" || f.type === "float") {
    const n = parseNumber(t);
    return n.problem ? { ...bad(n.problem), text } : { value: n.value };
  }
  if (f.type === "bool") {
    if (["true", "1"].includes(t)) return { value: true };
    if (["false", "0"].includes(t)) return { value: false };
    return bad("is not true or false");
  }
  if (f.type === "choice") {
    return f.choices.includes(t) ? { value: t } : bad(`is not one of ${f.choices.join(", ")}`);
  }
  if (f.type === "list") {
    const n = parseList(t);
    return n.problem ? { ...bad(`is not a list of numbers (it ${n.problem})`), text }
      : { value: n.value };
  }
  return { value: t };
}

function ignoredMessage(names) {
  const shown = names.slice(0, IGNORED_SHOWN).map(quote).join(", ");
  const more = names.length > IGNORED_SHOWN ? ` and ${names.length - IGNORED_SHOWN} more` : "";
  return `link: ignored ${names.length === 1 ? "a name that is" : `${names.length} names ` +
    "that are"} no setting of this page: ${shown}${more}`;
}

/** The link's model and settings: ``{model, config, texts, trainable, errors}``; ``config``
 * holds the values the form can take, ``texts`` the text of number fields it cannot (shown
 * as they are, marked), ``errors`` [{field, message, ignored}]. */
export function readLink(search = location.search) {
  const given = new Map();  // name -> every text the link gives it
  for (const [k, text] of new URLSearchParams(search)) {
    if (!NOT_SETTINGS.has(k)) given.set(k, [...(given.get(k) ?? []), text]);
  }
  const config = {};
  const texts = {};
  const errors = [];
  const ignored = [];
  let model = null;
  let dataset = null;
  let trainable = null;
  let layers = null;
  for (const [k, all] of given) {
    const f = pageField(k);
    if (!f && !["model", "trainable", "dataset", "layers"].includes(k)) {
      ignored.push(k);
      continue;
    }
    const text = all[0];
    if (all.length > 1) {
      errors.push({ field: k, wait: `given ${all.length} times: ${k === "model" ||
        k === "dataset" ? `choose the ${k} again` : "fix the marked setting"}`,
      message: `${k}: the link gives it ${all.length} times ` +
        `(${all.slice(0, IGNORED_SHOWN).map(quote).join(", ")}${all.length > IGNORED_SHOWN
          ? ", …" : ""}); using the first, ${quote(text)}` });
    }
    if (k === "model") model = text;
    else if (k === "dataset") dataset = text;
    else if (k === "layers") layers = text;  // checked by the server (builder.js)
    else if (k === "trainable") {
      trainable = text.split(",").map((n) => n.trim()).filter(Boolean);
      if (!trainable.length) {  // before: nothing trained, silently
        errors.push({ field: k, wait: `empty: ${TRAINABLE}`,
          message: `trainable: ${quote(text)} from the link names no ` +
          "parameter; every parameter trains" });
        trainable = null;
      }
    }
    else {
      const v = parseValue(f, text);
      if (v.error) errors.unshift({ field: k, message: v.error, wait: v.wait });
      else config[k] = v.value;
      if (v.text !== undefined) texts[k] = v.text;
    }
  }
  // a setting of another optimizer (scheduler, loss) than the link's, good value or bad
  for (const k of given.keys()) {
    const why = notApplying(k, config);
    if (!why) continue;
    delete config[k];
    delete texts[k];
    errors.splice(0, errors.length, ...errors.filter((e) => e.field !== k));
    errors.push({ field: k, ignored: true,
      message: `${k}: ${quote(given.get(k)[0])} from the link ${why}; ignored` });
  }
  if (ignored.length) {
    errors.push({ field: "link", message: ignoredMessage(ignored), ignored: true });
  }
  return { model, dataset, config, texts, trainable, layers, errors };
}

/** Apply the link's settings to the form; returns the model, dataset and layer list (JSON
 * text) it names ({model, dataset, layers}, each null when it names none). */
export function applyLink() {
  const { model, dataset, config, texts, trainable, layers, errors } = readLink();
  linkErrors = errors;
  linkTrainable = trainable;
  if (Object.keys(config).length || Object.keys(texts).length) {
    applyConfig({ ...config, ...texts });
  }
  if (errors.length || Object.keys(config).length || trainable) {
    log(`Settings from the link: ${Object.entries(config).map(([k, v]) => `${k}=${v}`)
      .join(", ") || "none"}` + (trainable ? `; trainable: ${trainable.length} parameter(s)`
      : "") + (errors.length ? `; ${errors.length} marked to fix` : ""));
  }
  // a field edited by hand drops its link error; the ignored names go with any edit
  const edited = (name) => {
    const before = linkErrors.length;
    linkErrors = linkErrors.filter((e) => e.field !== name && !e.ignored);
    if (linkErrors.length !== before) settingsChanged(0);
  };
  // another model: its own selection, and the link's network (layers) is no longer wanted
  const choosers = { model: ["trainable", "layers", "model"], dataset: ["dataset"] };
  $("settings").addEventListener("input", (ev) => {
    for (const name of own(choosers, ev.target.id) ??
      [ev.target.closest("[data-field]")?.dataset.field]) edited(name);
  });
  // the fine-tuning selection is the model summary's (ticks, "Train all", "Head only")
  $("summary-card").addEventListener("input", () => edited("trainable"));
  $("summary-card").addEventListener("click", (ev) => {
    if (ev.target.closest("button:not(.tip)")) edited("trainable");
  });
  settingsChanged(0);
  return { model, dataset, layers };
}

/** What the picker shows while Start waits for a choice: " (NAME is selected)", or "" when
 * nothing is (before: "; using NAME", which read as if the run went ahead with it). */
const selected = (name) => name ? ` (${name} is selected)` : "";

/** A dataset named by the link (an empty one too) that the picker lacks: marked like a bad
 * setting (before: only a line in the log) until a dataset is chosen. */
export function checkLinkDataset(dataset) {
  if (dataset != null && $("dataset").value !== dataset) {
    linkErrors.push({ field: "dataset", wait: "unknown: choose a dataset",
      message: `dataset: the link's dataset ${quote(dataset)} is not on this server: ` +
      `choose one${selected(datasetTitle())}` });
    settingsChanged(0);
  }
}

/** A model named by the link (an empty one too) that the list lacks, and the link's network
 * (`layers`) that was not built (``layersError``, builder.js's words; before: only a line in
 * the log and the hidden Build tab's note): each marked like a bad setting until a model is
 * chosen. Then the link's `trainable` once the model's summary is there: names the model
 * lacks are marked (and every parameter trains). */
export async function checkLinkModel(model, layersError = null) {
  if (layersError) {
    linkErrors.push({ field: "layers", wait: "not built: choose a model",
      message: `layers: the link's network was not built ` +
      `(${layersError}): choose a model${selected($("model").value)}` });
    settingsChanged(0);
  }
  if (model != null && $("model").value !== model) {
    linkErrors.push({ field: "model", wait: "unknown: choose a model",
      message: `the link's model ${quote(model)} is not on ` +
      `this server: choose one${selected($("model").value)}` });
    settingsChanged(0);
  }
  if (!linkTrainable) return;
  const summary = await loadedSummary();
  if (!summary) return;
  const params = new Set(summary.tensors.filter((t) => t.role === "param").map((t) => t.name));
  const unknown = linkTrainable.filter((n) => !params.has(n));
  if (unknown.length) {
    linkErrors.push({ field: "trainable", wait: `names what ${$("model").value} lacks: ` +
      TRAINABLE, message: `trainable: the link names ` +
      `${unknown.length} tensor(s) that ${$("model").value} has no parameter of: ` +
      `${unknown.slice(0, IGNORED_SHOWN).map(quote).join(", ")}` +
      `${unknown.length > IGNORED_SHOWN ? ", …" : ""}; every parameter trains` });
    settingsChanged(0);
  } else {
    setTrainable(linkTrainable);
  }
  linkTrainable = null;
}
// a bad value or a name given twice waits for an edit; what the page ignored (names that are
// no settings, another optimizer's setting) is a notice that lets Start go: a link with
// ?utm_source=... must not block a run
/** The link's values the form could not take, as [[field, message]]: they block Start. */
export const linkErrorList = () => linkErrors.filter((e) => !e.ignored)
  .map((e) => [e.field, e.message]);
/** What the link gave that the page ignored, as [[field, message]]: listed, never blocking. */
export const linkNotices = () => linkErrors.filter((e) => e.ignored)
  .map((e) => [e.field, e.message]);

/** Why Start waits for the link (its first value the form could not take), as the run bar
 * says it: ``{field, text}`` ("Link parameter dataset= unknown: choose a dataset", and how
 * many more are marked), or null when no link value holds Start. */
export function linkWait() {
  const errors = linkErrors.filter((e) => !e.ignored);
  if (!errors.length) return null;
  const { field, wait } = errors[0];
  const more = errors.length > 1 ? ` (and ${errors.length - 1} more marked)` : "";
  return { field, text: `Link parameter ${field}= ${wait}${more}` };
}

/** Scroll to the mark of the link's ``field`` and focus it: the marked control (its message
 * next to it), or the message listed below the form; the settings unfold first (a phone). */
export function showLinkMark(field) {
  showSettings();
  const box = document.querySelector(`#settings [data-field="${CSS.escape(field)}"]`);
  const target = box && !box.hidden ? box.querySelector("[aria-invalid]")
    : document.querySelector(`#config-errors li[data-mark-for="${CSS.escape(field)}"]`);
  if (!target) return;
  const details = target.closest("details");
  if (details) details.open = true;
  target.scrollIntoView({ block: "center" });
  target.focus({ preventScroll: true });
}

async function copyShareLink() {
  const link = shareLink();
  const out = $("share-url");
  out.value = link;
  out.hidden = false;
  out.select();
  let copied = false;
  try {
    await navigator.clipboard.writeText(link);
    copied = true;
  } catch {
    // no clipboard permission (e.g. plain http on a LAN address): the selected field remains
  }
  $("share-note").textContent = copied ? "Link copied." : "Copy the selected link (Ctrl+C).";
}

export function setupShare() {
  $("share").addEventListener("click", copyShareLink);
  window.addEventListener("beforeunload", (ev) => {
    if (appState.phase === "training" || appState.phase === "paused") {
      ev.preventDefault();
      ev.returnValue = "";  // older browsers show their own "leave the page?" text
    }
  });
}
