// Classroom mode, the student's side: the teacher's settings in the page's form: the session's
// config put in (the pinned fields locked), the pinned values of every start, and a session
// dataset the server no longer has shown as such in the picker.

import { state } from "./classroom-state.js";

/** {field: value} of the session's pinned fields (every start carries them). */
export function pinnedValues() {
  const s = state.session;
  if (!s) return {};
  return Object.fromEntries(s.pinned.filter((k) => Object.hasOwn(s.config, k))
    .map((k) => [k, s.config[k]]));
}

/** Put the session's config into the form (only the pinned keys with `onlyPinned`); lock the
 * pinned fields. The model list loads asynchronously: retried until its option exists. */
export function applyConfig(onlyPinned = false, tries = 0) {
  const s = state.session;
  const form = document.getElementById("settings");
  if (!s || !form) return;
  const pinned = new Set(s.pinned);
  let missing = false;
  for (const [k, v] of Object.entries(s.config)) {
    if (onlyPinned && !pinned.has(k)) continue;
    const fields = form.querySelectorAll(`[name="${CSS.escape(k)}"]`);
    for (const f of fields) {
      if (f.type === "radio") f.checked = f.value === String(v);
      else if (f.type === "checkbox") {
        if (f.checked !== Boolean(v)) {
          f.checked = Boolean(v);
          f.dispatchEvent(new Event("change", { bubbles: true }));
        }
      }
      else if (f.tagName === "SELECT" && ![...f.options].some((o) => o.value === String(v))) {
        if (k !== "dataset" || !(s.problems ?? []).length) {
          missing = true;
          continue;
        }
        showUnavailable(f, String(v));
      } else if (f.value !== String(v)) {
        f.value = String(v);
        f.dispatchEvent(new Event("change", { bubbles: true }));
      }
      f.disabled = pinned.has(k);
      f.closest(".field")?.classList.toggle("pinned", pinned.has(k));
    }
  }
  // a missing option may still be loading; not a dataset the server says is gone
  if (missing && tries < 100 && !(s.problems ?? []).length) {
    setTimeout(() => applyConfig(onlyPinned, tries + 1), 300);
  }
}

/** The session's dataset the server says is gone (its ``problems``), in the picker as
 * "NAME (not on this server)", chosen and not choosable, instead of the server's default. */
function showUnavailable(select, name) {
  if (![...select.options].some((o) => o.value === name)) {
    const option = new Option(`${name} (not on this server)`, name);
    option.disabled = true;
    select.append(option);
  }
  if (select.value === name) return;
  select.value = name;
  select.dispatchEvent(new Event("change", { bubbles: true }));
}

/** The dataset list may arrive after the session and choose the default: the gone dataset
 * again (dataset.js says `dataset-changed` after each choice). */
export function keepUnavailable() {
  const s = state.session;
  const name = s?.config?.dataset;
  const select = document.getElementById("dataset");
  if (name == null || !(s.problems ?? []).length || !select) return;
  if (select.value !== String(name)) setTimeout(() => showUnavailable(select, String(name)), 0);
}
