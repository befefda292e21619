// Classroom mode, the student's side: reporting to the teacher: one batch every 2 s (a heartbeat
// every 10 s when nothing is new), retried with back-off, then the trained model.

import { HEARTBEAT_MS, MAX_BACKOFF_MS, MAX_BATCH, REPORT_MS, api, state, storageKey }
  from "./classroom-state.js";
import { renderCard } from "./classroom-card.js";

let timer = null;
let lastTick = 0;

/** The next report ``ms`` from now (not before a back-off's retry time). */
export function schedule(ms) {
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

/** Whether the last report is overdue (a hidden tab's timers are throttled). */
export const reportLate = () => Date.now() - lastTick > 2 * REPORT_MS;
