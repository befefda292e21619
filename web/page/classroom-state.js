// Classroom mode, the student's side: what its modules share (web/page/classroom.js is the
// entry): the session id of ?class=ID, the state (test hook: window.classroomState), the API
// call with the student's key, and the joined student kept in sessionStorage.

export const REPORT_MS = 2000;
export const HEARTBEAT_MS = 10000;
export const MAX_BACKOFF_MS = 30000;
export const MAX_QUEUE = 4000;    // points waiting while the server is unreachable
export const MAX_BATCH = 1500;    // points per report

export const sessionId = new URLSearchParams(location.search).get("class");
export const storageKey = sessionId ? `webgpu-trainer.classroom.${sessionId}` : null;

export const state = {
  sessionId, session: null, joined: false, student: null, key: null, name: null,
  run: 0, config: null, configSent: false, progress: null, points: [], evals: [],
  result: null, resultSent: false, weights: null, modelSent: false, error: null,
  errorSent: false, adapter: null, adapterSent: false, clientState: "ready",
  inflight: false, lastSent: 0, backoff: 0, retryAt: 0, reports: 0, failures: 0,
  lastError: null,
};
window.classroomState = state;

/** ``path`` of the classroom API as JSON, with the student's key; an error carries the
 * server's message and ``status``. */
export async function api(path, options = {}) {
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

/** The joined student (id, key, name, run number) for a reload of this tab. */
export function save() {
  sessionStorage.setItem(storageKey, JSON.stringify(
    { student: state.student, key: state.key, name: state.name, run: state.run }));
}
