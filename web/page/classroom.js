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
// window.classroomState. This module: the session and joining it, the worker hook, boot;
// classroom-state.js (the shared state, the API call), classroom-card.js (the class card, the
// insecure-page banner), classroom-settings.js (the teacher's settings in the form),
// classroom-report.js (the reports to the teacher).

import { el, frac } from "../lib/util.js";
import { MAX_QUEUE, api, save, sessionId, state, storageKey } from "./classroom-state.js";
import { insecureHelp, onJoinSubmit, renderCard } from "./classroom-card.js";
import { applyConfig, keepUnavailable, pinnedValues } from "./classroom-settings.js";
import { reportLate, schedule } from "./classroom-report.js";

// ------------------------------------------------------------------------ session, join
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
  if (state.joined && reportLate()) schedule(0);
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

// ----------------------------------------------------------------------------------- boot
function boot() {
  insecureHelp();
  if (!sessionId) return;
  const link = el("link", { rel: "stylesheet", href: "/page/classroom.css" });
  document.head.append(link);
  onJoinSubmit(join);
  renderCard();
  loadSession().then(() => schedule(0));
  document.addEventListener("dataset-changed", keepUnavailable);
  // presets and other form code may rewrite pinned fields: put the teacher's values back
  document.addEventListener("click", (ev) => {
    if (ev.target.closest?.(".preset")) setTimeout(() => applyConfig(true), 0);
  });
}

boot();
