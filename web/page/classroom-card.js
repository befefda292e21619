// Classroom mode, the student's side: what the student sees: the class card (session, join
// form, the teacher's pinned settings, the server's problems, errors), Start blocked while the
// class cannot train, and the banner of a page that is not a secure context (no WebGPU).

import { el } from "../lib/util.js";
import { appState, stateChanged } from "./state.js";
import { sessionId, state } from "./classroom-state.js";

let onJoin = () => {};

/** What the join form's submit calls with the typed name (classroom.js's join). */
export function onJoinSubmit(fn) {
  onJoin = fn;
}

// ------------------------------------------------------------------ secure context banner
export function insecureHelp() {
  if (window.isSecureContext) return;
  const host = location.host;
  const https = `https://${location.hostname}${location.port ? ":" + location.port : ""}` +
    `${location.pathname}${location.search}`;
  const box = el("div", { id: "insecure", className: "banner", role: "alert" },
    el("h2", { textContent: "This page cannot use the GPU: the connection is not secure" }),
    el("p", { textContent: `It was opened as http://${host}, and browsers give web pages ` +
      "WebGPU only on https:// addresses (or on http://localhost on the same computer)." }));
  const steps = el("ol");
  steps.append(
    el("li", {}, "Open ", el("a", { href: https, textContent: https }), " instead. If the " +
      "browser says “Your connection is not private”, click Advanced, then “Proceed to " +
      `${location.hostname} (unsafe)” — or ask your teacher to install the class ` +
      "certificate on this device (the teacher page shows how)."),
    el("li", { textContent: "If that address does not load, the server runs without HTTPS: " +
      "ask your teacher to start it with “webgpu-trainer classroom --host 0.0.0.0”." }),
    el("li", {}, "Stopgap in Chrome: open ", el("code", {
      textContent: "chrome://flags/#unsafely-treat-insecure-origin-as-secure" }),
    `, enter http://${host}, choose Enabled, then Relaunch.`));
  box.append(steps);
  document.querySelector(".topbar")?.after(box);
  const msg = document.getElementById("no-webgpu-message");
  if (msg) msg.textContent = `Not a secure page (http://${host}): see the steps above.`;
}

// ---------------------------------------------------------------------------- the card
let card = null;

export function renderCard() {
  if (!sessionId) return;
  if (!card) {
    card = el("section", { id: "classroom", className: "classroom card" });
    card.setAttribute("aria-live", "polite");
    (document.querySelector("main.layout") ?? document.body).before(card);
  }
  card.replaceChildren();
  const s = state.session;
  if (!s) {
    card.append(el("p", { className: "hint", textContent: state.lastError ??
      "Looking up the class session…" }));
    return;
  }
  const head = el("div", { className: "classroom-head" },
    el("h2", { textContent: `Class: ${s.name}` }),
    el("span", { className: "pill", id: "classroom-status", textContent: statusText() }));
  card.append(head);
  if (!state.joined) {
    const input = el("input", { id: "classroom-name", type: "text", maxLength: 40,
      required: true, autocomplete: "nickname", placeholder: "e.g. Ada L.",
      value: state.typedName ?? "" });  // a refused name stays as typed, to correct
    input.addEventListener("input", () => { state.typedName = input.value; });
    const form = el("form", { id: "classroom-join", className: "classroom-join" },
      el("label", { htmlFor: "classroom-name", textContent: "Your name (the teacher sees it)" }),
      el("div", { className: "classroom-row" }, input,
        el("button", { type: "submit", className: "btn primary", textContent: "Join class" })));
    form.addEventListener("submit", (ev) => { ev.preventDefault(); onJoin(input.value); });
    card.append(form);
    if (!s.open) input.disabled = true;
  } else {
    card.append(el("p", { className: "hint", textContent: `You are ${state.name}. Press ` +
      "Start training: your teacher sees your progress live." }));
  }
  const pinned = new Set(s.pinned);
  const chips = el("ul", { className: "classroom-pins", ariaLabel: "Settings from the teacher" });
  for (const [k, v] of Object.entries(s.config)) {
    if (!pinned.has(k)) continue;
    chips.append(el("li", { textContent: `${k.replace("_", " ")}: ${v}`, title: "set by the " +
      "teacher" }));
  }
  if (chips.childElementCount) {
    card.append(el("p", { className: "hint", textContent: "Set by your teacher (locked):" }),
      chips);
  }
  // the server's reasons this class cannot train now (its dataset deleted: GET/POST
  // /api/classroom/join/ID's "problems"), said at once instead of a Start that fails later
  for (const text of s.problems ?? []) {
    card.append(el("p", { className: "classroom-error", role: "alert", textContent: text }));
  }
  blockStart(s.problems?.[0] ?? null);
  if (state.lastError) card.append(el("p", { className: "classroom-error",
    textContent: state.lastError }));
}

/** Start disabled (its title the reason) while the class cannot train: ``reason`` (the
 * server's first problem) or null. */
function blockStart(reason) {
  if (appState.blocked === reason) return;
  appState.blocked = reason;
  stateChanged();
}

function statusText() {
  if (!state.joined) return state.session?.open === false ? "closed" : "not joined";
  if (state.failures) return "reconnecting…";
  if (state.modelSent) return "result sent";
  return state.reports ? "connected" : "joined";
}
