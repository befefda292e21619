// Settings in the URL and the leave-page warning.
//
// "Copy share link": the page's address with ?model=...&seed=... and every setting that differs
// from its default (lists comma-separated), copied to the clipboard and shown for copying by
// hand. On load, the link's settings go into the form (readLink / applyLink) and are checked
// like any input: a value the control cannot hold (text in a number field, an unknown
// choice) or a name that is no setting is marked inline, Start stays disabled until that field
// is edited; nothing is dropped silently. While a run trains (or is paused), leaving the page
// asks first (beforeunload).

import { $ } from "./util.js";
import { appState, hooks, log } from "./state.js";
import { applyConfig, changedConfig, pageField, readConfig } from "./form.js";
import { scheduleCheck } from "./validation.js";

const NOT_SETTINGS = new Set(["class"]);  // classroom mode's ?class=ID (web/classroom.js)
let linkErrors = [];                       // [[field, message]] from the link, until edited

/** The share link of the current settings and model. */
export function shareLink() {
  const params = new URLSearchParams();
  params.set("model", $("model").value);
  const cfg = readConfig();
  const changed = { seed: cfg.seed, ...changedConfig() };  // the seed always: it pins the run
  for (const [k, v] of Object.entries(changed)) {
    if (v !== undefined) params.set(k, Array.isArray(v) ? v.join(",") : String(v));
  }
  return `${location.origin}${location.pathname}?${params}`;
}

/** The value of ``text`` for field ``f``, or {error} naming what is wrong. */
function parseValue(f, text) {
  const t = text.trim();
  if (f.type === "int" || f.type === "float") {
    const n = Number(t);
    return t === "" || Number.isNaN(n) ? { error: `“${text}” from the link is not a number` }
      : { value: n };
  }
  if (f.type === "bool") {
    if (["true", "1"].includes(t)) return { value: true };
    if (["false", "0"].includes(t)) return { value: false };
    return { error: `“${text}” from the link is not true or false` };
  }
  if (f.type === "choice") {
    return f.choices.includes(t) ? { value: t }
      : { error: `“${text}” from the link is not one of ${f.choices.join(", ")}` };
  }
  if (f.type === "list") {
    const parts = t.split(/[\s,]+/).filter(Boolean).map(Number);
    return parts.some(Number.isNaN)
      ? { error: `“${text}” from the link is not a list of numbers` } : { value: parts };
  }
  return { value: t };
}

/** The link's model and settings: ``{model, config, errors}``. */
export function readLink(search = location.search) {
  const config = {};
  const errors = [];
  let model = null;
  for (const [k, text] of new URLSearchParams(search)) {
    if (NOT_SETTINGS.has(k)) continue;
    if (k === "model") { model = text; continue; }
    const f = pageField(k);
    if (!f) {
      errors.push([k, "is not a setting of this page (from the link; ignored)"]);
      continue;
    }
    const v = parseValue(f, text);
    if ("error" in v) errors.push([k, v.error]);
    else config[k] = v.value;
  }
  return { model, config, errors };
}

/** Apply the link's settings to the form; returns the model it names (or null). */
export function applyLink() {
  const { model, config, errors } = readLink();
  linkErrors = errors;
  if (Object.keys(config).length) applyConfig(config);
  if (errors.length || Object.keys(config).length) {
    log(`Settings from the link: ${Object.entries(config).map(([k, v]) => `${k}=${v}`)
      .join(", ") || "none"}` + (errors.length ? `; ${errors.length} marked to fix` : ""));
  }
  // a field edited by hand drops its link error; a name that is no setting goes with any edit
  $("settings").addEventListener("input", (ev) => {
    const name = ev.target.closest("[data-field]")?.dataset.field;
    const before = linkErrors.length;
    linkErrors = linkErrors.filter(([k]) => k !== name && pageField(k));
    if (linkErrors.length !== before) scheduleCheck(0);
  });
  scheduleCheck(0);
  return model;
}

/** A model named by the link that the list lacks: marked like a bad setting. */
export function checkLinkModel(model) {
  if (model && $("model").value !== model) {
    linkErrors.push(["model", `the link's model “${model}” is not on this server; using ` +
      `${$("model").value || "none"}`]);
    scheduleCheck(0);
  }
}
hooks.linkErrors = () => linkErrors;

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
