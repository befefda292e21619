// The settings checked by the server with the engine's validator (POST /api/config/validate,
// the same Python code the worker runs again before training), together with the page's own
// findings (a share link's values it could not take, number fields holding no number): every
// bad field is marked inline (aria-invalid and the message next to it); Start waits for a
// clean check.

import { $ } from "../lib/util.js";
import { stateChanged } from "./state.js";
import { currentConfig, fieldProblems, schemaLoaded } from "./form.js";
import { linkErrorList, linkNotices } from "./share.js";

/** The last check: valid, pending (a check on its way), errors [[field, message]], steps. */
export const formState = { valid: false, pending: true, errors: [], steps: null };
let seq = 0;
let timer = null;

/** Check the settings ``delay`` ms from now (again and again while the user types). */
export function scheduleCheck(delay = 150) {
  formState.pending = true;
  stateChanged();
  clearTimeout(timer);
  // a change before the schema is loaded (a class session's dataset chosen first): the
  // form's check after it is drawn covers it (app.js: the dataset list's settings-changed)
  timer = setTimeout(() => schemaLoaded() && validateNow(), delay);
}

// form.js, summary.js, share.js and models.js say when a setting changed (state.js)
document.addEventListener("settings-changed", (ev) => scheduleCheck(ev.detail.delay));

/** Check ``config`` (default: ``currentConfig()``, what Start would send) with the
 * server's validator; marks the fields and returns the answer ``{ok, errors, config, steps}``
 * with the page's own findings first (one message a field: the page's, which quotes what
 * the user gave, before the server's). */
export async function validateNow(config = null) {
  clearTimeout(timer);
  const mine = ++seq;
  config = config ?? currentConfig();
  formState.pending = true;
  const body = await checkConfig(config, $("model")?.value || null);
  // a share link's values the form could not take, then number fields holding no number
  const errors = firstPerField([...linkErrorList(), ...fieldProblems(),
    ...(body.errors ?? [])]);
  const answer = { ...body, ok: !!body.ok && !errors.length, errors };
  if (mine === seq) {  // the latest check decides the marks
    Object.assign(formState, { valid: answer.ok, pending: false, errors,
      steps: body.steps ?? null });
    markErrors(formState.errors, linkNotices());
    stateChanged();
  }
  return answer;
}

function firstPerField(errors) {
  const seen = new Set();
  return errors.filter(([field]) => !seen.has(field) && seen.add(field));
}

/** The server's verdict on ``config`` for ``model`` (POST /api/config/validate), marking
 * nothing: ``{ok, errors: [[field, message]], config, steps}``; a failed request is an error of
 * the field "settings". */
export async function checkConfig(config, model) {
  try {
    const res = await fetch("/api/config/validate", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ config, model }),
    });
    const body = await res.json();
    if (!res.ok) throw new Error(body.error ?? `HTTP ${res.status}`);
    return body;
  } catch (e) {
    return { ok: false, errors: [["settings", `could not be checked: ${e.message ?? e}`]] };
  }
}

function clearMarks() {
  for (const node of document.querySelectorAll("#settings [aria-invalid]")) {
    node.removeAttribute("aria-invalid");
  }
  for (const node of document.querySelectorAll("#settings .field.invalid")) {
    node.classList.remove("invalid");
  }
  for (const node of document.querySelectorAll("#settings .field-error")) node.hidden = true;
}

/** Mark ``errors`` ([[field, message]]) inline, on the controls of those fields (elements with
 * ``data-field``); errors of fields not shown are listed below the form. Returns the first
 * control marked. */
export function markErrors(errors, notices = []) {
  clearMarks();
  // notices (what a share link gave that the page ignored) are listed, never marked in red
  // [field, text]: the page's own messages start with the field's name
  const named = ([name, message]) =>
    [name, message.startsWith(`${name}: `) ? message : `${name}: ${message}`];
  const rest = notices.map(named);
  let first = null;
  for (const [name, message] of errors) {
    const box = document.querySelector(`#settings [data-field="${CSS.escape(name)}"]`);
    if (!box || box.hidden) {
      rest.push(named([name, message]));
      continue;
    }
    box.classList.add("invalid");
    for (const input of box.querySelectorAll("input, select")) {
      input.setAttribute("aria-invalid", "true");
    }
    const err = box.querySelector(".field-error");
    err.textContent = message;
    err.hidden = false;
    first = first ?? box.querySelector("input, select");
    const details = box.closest("details");
    if (details && !details.open) details.open = true;
  }
  const list = $("config-errors");
  // each item names its field (data-mark-for, not data-field: that is a control's box; the
  // run bar's "Show" finds it, share.js)
  list.replaceChildren(...rest.map(([name, t]) => {
    const li = Object.assign(document.createElement("li"), { textContent: t, tabIndex: -1 });
    li.dataset.markFor = name;
    return li;
  }));
  list.hidden = !rest.length;
  const steps = formState.steps;
  $("run-steps").textContent = !errors.length && steps
    ? `${steps.per_epoch.toLocaleString()} steps per epoch · ${steps.total.toLocaleString()} ` +
      `steps in all (${steps.train_images.toLocaleString()} training images` +
      (steps.val_images ? `, ${steps.val_images.toLocaleString()} held out for validation)`
        : ")") : "";
  return first;
}
