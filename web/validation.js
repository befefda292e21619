// The settings checked by the server with the engine's validator (POST /api/config/validate,
// the same Python code the worker runs again before training): every bad field is marked
// inline (aria-invalid and the validator's message next to it); Start waits for a clean check.

import { $ } from "./util.js";
import { hooks } from "./state.js";

/** The last check: valid, pending (a check on its way), errors [[field, message]], steps. */
export const formState = { valid: false, pending: true, errors: [], steps: null };
let seq = 0;
let timer = null;

/** Check the settings ``delay`` ms from now (again and again while the user types). */
export function scheduleCheck(delay = 150) {
  formState.pending = true;
  hooks.sync();
  clearTimeout(timer);
  timer = setTimeout(() => validateNow(), delay);
}

/** Check ``config`` (default: ``hooks.currentConfig()``, what Start would send) with the
 * server's validator; marks the fields and returns the answer ``{ok, errors, config, steps}``. */
export async function validateNow(config = null) {
  clearTimeout(timer);
  const mine = ++seq;
  config = config ?? hooks.currentConfig();
  formState.pending = true;
  const body = await checkConfig(config, $("model")?.value || null);
  if (mine === seq) {  // the latest check decides the marks
    const link = hooks.linkErrors();  // values of a share link the form could not take
    Object.assign(formState, { valid: !!body.ok && !link.length, pending: false,
      errors: [...(body.errors ?? []), ...link], steps: body.steps ?? null });
    markErrors(formState.errors);
    hooks.sync();
  }
  return body;
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
export function markErrors(errors) {
  clearMarks();
  const rest = [];
  let first = null;
  for (const [name, message] of errors) {
    const box = document.querySelector(`#settings [data-field="${CSS.escape(name)}"]`);
    if (!box || box.hidden) {
      rest.push(`${name}: ${message}`);
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
  list.replaceChildren(...rest.map((t) => Object.assign(document.createElement("li"),
    { textContent: t })));
  list.hidden = !rest.length;
  const steps = formState.steps;
  $("run-steps").textContent = !errors.length && steps
    ? `${steps.per_epoch.toLocaleString()} steps per epoch · ${steps.total.toLocaleString()} ` +
      `steps in all (${steps.train_images.toLocaleString()} training images` +
      (steps.val_images ? `, ${steps.val_images.toLocaleString()} held out for validation)`
        : ")") : "";
  return first;
}
