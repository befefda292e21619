// Classroom mode, the student's side (host/classroom/ on the server).
//
// With ?class=ID in the URL the page asks for a display name, joins the teacher's session,
// puts the settings the teacher pinned into the form (locked) and into every start, and
// reports progress to the teacher: one batch every 2 s (a heartbeat every 10 s when nothing
// is new), retried with back-off, then the trained model. Without ?class= it only explains
// what to do when the page is not a secure context (no navigator.gpu).
//
// Hooked into the page by ONE call: attachClassroom(worker) right after app.js creates the
// worker; it watches the worker's messages and adjusts `start` messages. Test hook:
// window.classroomState.

import { el, frac } from "../lib/util.js";
import { appState, stateChanged } from "./state.js";

const REPORT_MS = 2000;
const HEARTBEAT_MS = 10000;
const MAX_BACKOFF_MS = 30000;
const MAX_QUEUE = 4000;           // points waiting while the server is unreachable
const MAX_BATCH = 1500;           // points per report

const sessionId = new URLSearchParams(location.search).get("class");
const storageKey = sessionId ? `webgpu-trainer.classroom.${sessionId}` : null;

const state = {
  sessionId, session: null, joined: false, student: null, key: null, name: null,
  run: 0, config: null, configSent: false, progress: null, points: [], evals: [],
  result: null, resultSent: false, weights: null, modelSent: false, error: null,
  errorSent: false, adapter: null, adapterSent: false, clientState: "ready",
  inflight: false, lastSent: 0, backoff: 0, retryAt: 0, reports: 0, failures: 0,
  lastError: null,
};
window.classroomState = state;

// ------------------------------------------------------------------ secure context banner
function insecureHelp() {
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

function renderCard() {
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
    form.addEventListener("submit", (ev) => { ev.preventDefault(); join(input.value); });
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

// ------------------------------------------------------------------------ session, join
async function api(path, options = {}) {
  const headers = { ...(options.headers ?? {}) };
  if (state.key) headers["X-Student-Key"] = state.key;
  const res = await fetch(path, { ...options, headers, cache: "no-store" });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) {
    const err = new Error(body.error ?? `HTTP ${res.status}`);
    err.status = res.status;
    throw err;
  }
  return body;
}

async function loadSession() {
  const saved = JSON.parse(sessionStorage.getItem(storageKey) ?? "null");
  if (saved?.key) state.key = saved.key;  // a joined student's session has their own seed
  try {
    state.session = await api(`/api/classroom/join/${encodeURIComponent(sessionId)}`);
    state.lastError = null;
  } catch (e) {
    state.lastError = e.status === 404
      ? "This class link is not valid (unknown session). Ask your teacher for the link again."
      : `Could not reach the class: ${e.message}`;
  }
  if (saved && state.session) {
    Object.assign(state, saved, { joined: true });
    // a run of this page before the reload is over: say so (ignored if it had finished)
    if (state.run) Object.assign(state, { error: "stopped: the page was reloaded",
      configSent: true, resultSent: true, modelSent: true });
  }
  renderCard();
  if (state.session) applyConfig();
}

async function join(name) {
  state.typedName = name;
  name = name.trim();
  if (!name) return;
  try {
    const r = await api(`/api/classroom/join/${encodeURIComponent(sessionId)}`, {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ name }),
    });
    Object.assign(state, { student: r.student, key: r.key, name: r.name, joined: true,
      session: r.session, lastError: null });
    applyConfig();  // the session as this student gets it: their own seed unless pinned
    save();
    schedule(0);
  } catch (e) {
    state.lastError = `Could not join: ${e.message}`;
  }
  renderCard();
}

function save() {
  sessionStorage.setItem(storageKey, JSON.stringify(
    { student: state.student, key: state.key, name: state.name, run: state.run }));
}

// ----------------------------------------------------------------- the teacher's settings
function pinnedValues() {
  const s = state.session;
  if (!s) return {};
  return Object.fromEntries(s.pinned.filter((k) => Object.hasOwn(s.config, k))
    .map((k) => [k, s.config[k]]));
}

/** Put the session's config into the form (only the pinned keys with `onlyPinned`); lock the
 * pinned fields. The model list loads asynchronously: retried until its option exists. */
function applyConfig(onlyPinned = false, tries = 0) {
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
function keepUnavailable() {
  const s = state.session;
  const name = s?.config?.dataset;
  const select = document.getElementById("dataset");
  if (name == null || !(s.problems ?? []).length || !select) return;
  if (select.value !== String(name)) setTimeout(() => showUnavailable(select, String(name)), 0);
}

// ------------------------------------------------------------------------ the worker hook
export function attachClassroom(worker) {
  if (!sessionId) return;
  const post = worker.postMessage.bind(worker);
  worker.postMessage = (msg, ...rest) => {
    if (msg?.type === "start") {
      if (!state.joined) {  // answer app.js as the worker would, so its phase resets
        worker.onmessage?.({ data: { type: "error", message:
          "Join the class first: enter your name at the top of the page." } });
        return;
      }
      msg = { ...msg, config: { ...msg.config, ...pinnedValues() } };
      Object.assign(state, { run: state.run + 1, config: msg.config, configSent: false,
        progress: null, points: [], evals: [], result: null, resultSent: false,
        weights: null, modelSent: false, error: null, errorSent: false,
        clientState: "training" });
      save();
      schedule(0);
    }
    return post(msg, ...rest);
  };
  worker.addEventListener("message", (ev) => onWorkerMessage(ev.data));
}

function onWorkerMessage(m) {
  if (!m || typeof m !== "object") return;
  // a hidden tab's timers are throttled, its messages are not: report from here when late
  if (state.joined && Date.now() - lastTick > 2 * REPORT_MS) schedule(0);
  if (m.type === "adapter") {
    const i = m.info ?? {};
    state.adapter = (i.description || [i.vendor, i.architecture, i.device]
      .filter(Boolean).join(" ") || "WebGPU adapter").slice(0, 200);
    state.adapterSent = false;
  } else if (m.type === "no_webgpu") {
    state.clientState = "no_webgpu";
    state.adapter = `no WebGPU: ${m.message ?? ""}`.slice(0, 200);
    state.adapterSent = false;
  } else if (!state.run) {
    return;  // nothing below belongs to a run yet
  } else if (m.type === "progress") {
    const { step, total_steps, epoch, epochs, images_per_s } = m;
    state.progress = { step, total_steps, epoch, epochs, images_per_s };
    for (const [step, loss, acc] of m.losses ?? []) state.points.push([step, loss, frac(acc)]);
    if (state.points.length > MAX_QUEUE) state.points = state.points.filter((_, i) => i % 2);
  } else if (m.type === "epoch") {
    state.evals.push([m.epoch, m.val_loss, frac(m.val_acc)]);
  } else if (m.type === "done") {
    state.result = { test_acc: frac(m.test_acc), test_loss: m.test_loss,
      eval_images: m.eval_images, steps: m.steps ?? state.progress?.step ?? null,
      stopped: !!m.stopped, verdict: m.verdict ?? null,
      reason: m.reason ? String(m.reason).slice(0, 1000) : null };
    state.weights = m.weights ?? null;
    state.clientState = "done";
    schedule(0);
  } else if (m.type === "error") {
    state.error = String(m.message ?? "error").slice(0, 4000);
    state.clientState = "error";
    schedule(0);
  }
}

// ------------------------------------------------------------------------------ reporting
let timer = null;
let lastTick = 0;

function schedule(ms) {
  clearTimeout(timer);
  timer = setTimeout(tick, Math.max(ms, state.retryAt - Date.now(), 0));
}

async function tick() {
  lastTick = Date.now();
  try {
    await report();
  } finally {
    schedule(REPORT_MS);
  }
}

async function report() {
  if (!state.joined || state.inflight) return;
  const batch = { state: state.clientState };
  if (state.adapter && !state.adapterSent) batch.adapter = state.adapter;
  if (state.run) {
    batch.run = state.run;
    if (!state.configSent) batch.config = state.config;
    if (state.progress) batch.progress = state.progress;
    batch.points = state.points.slice(0, MAX_BATCH);
    batch.evals = state.evals.slice(0, 200);
    if (state.result && !state.resultSent && state.points.length <= MAX_BATCH) {
      batch.result = state.result;
    }
    if (state.error && !state.errorSent) batch.error = state.error;
  }
  const news = batch.adapter || batch.config || batch.points?.length || batch.evals?.length ||
    batch.result || batch.error;
  const modelDue = state.resultSent && state.weights && !state.modelSent;
  if (!news && !modelDue && Date.now() - state.lastSent < HEARTBEAT_MS) return;
  state.inflight = true;
  try {
    if (news || Date.now() - state.lastSent >= HEARTBEAT_MS) {
      await api("/api/classroom/report", { method: "POST",
        headers: { "Content-Type": "application/json" }, body: JSON.stringify(batch) });
      state.lastSent = Date.now();
      state.reports++;
      // acknowledged: drop what was sent
      state.points.splice(0, batch.points?.length ?? 0);
      state.evals.splice(0, batch.evals?.length ?? 0);
      if (batch.adapter) state.adapterSent = true;
      if (batch.config) state.configSent = true;
      if (batch.error) state.errorSent = true;
      if (batch.result) state.resultSent = true;
    }
    if (state.resultSent && state.weights && !state.modelSent) {
      await api(`/api/classroom/model?run=${state.run}`, { method: "POST",
        headers: { "Content-Type": "application/octet-stream" }, body: state.weights });
      state.modelSent = true;
      state.weights = null;
    }
    state.failures = 0;
    state.retryAt = 0;
    if (state.lastError?.startsWith("Reporting")) state.lastError = null;
  } catch (e) {
    onReportError(e);
  } finally {
    state.inflight = false;
    renderCard();
  }
}

function onReportError(e) {
  if (e.status === 403 || (e.status === 404 && !state.resultSent)) {
    // the server does not know this student (a new database?): join again
    sessionStorage.removeItem(storageKey);
    Object.assign(state, { joined: false, key: null, student: null,
      lastError: "The class no longer knows you: please join again." });
    return;
  }
  if (e.status === 409 || e.status === 422) {  // refused for good: do not resend it
    state.lastError = `Your teacher's server refused this run: ${e.message}`;
    Object.assign(state, { points: [], evals: [], configSent: true, resultSent: true,
      errorSent: true, weights: null });
    return;
  }
  state.failures++;
  const wait = Math.min(MAX_BACKOFF_MS, REPORT_MS * 2 ** Math.min(state.failures, 5));
  state.retryAt = Date.now() + wait;
  state.lastError = `Reporting to the teacher failed (${e.message}); retrying in ` +
    `${Math.round(wait / 1000)} s. Your training continues.`;
}

// ----------------------------------------------------------------------------------- boot
function boot() {
  insecureHelp();
  if (!sessionId) return;
  const link = el("link", { rel: "stylesheet", href: "/page/classroom.css" });
  document.head.append(link);
  renderCard();
  loadSession().then(() => schedule(0));
  document.addEventListener("dataset-changed", keepUnavailable);
  // presets and other form code may rewrite pinned fields: put the teacher's values back
  document.addEventListener("click", (ev) => {
    if (ev.target.closest?.(".preset")) setTimeout(() => applyConfig(true), 0);
  });
}

boot();
