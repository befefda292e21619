// The teacher dashboard (web/teacher/teacher.html; routes in host/classroom/teacher.py).
//
// The teacher token arrives in the URL fragment (#token=..., never sent to the server in a
// URL), is kept in sessionStorage and sent as `Authorization: Bearer`. The live view reads the
// server's event stream with fetch (EventSource cannot send that header): `roster` events
// carry changed student rows, `points` events new loss points; both merge idempotently, so a
// reconnect simply replays. Test hook: window.teacherState.

import { $, el } from "../lib/util.js";
import { rebuildChart, renderBoard, renderChart, renderRoster } from "./views.js";

const TOKEN_KEY = "webgpu-trainer.teacher-token";
const RENDER_MS = 500;

const state = {
  token: null, info: null, schema: null, datasets: [], datasetList: [],
  defaultDataset: "mnist", sessions: [], session: null, addr: 0,
  roster: new Map(),          // student id -> row
  curves: new Map(),          // student id -> {run, steps: Map(step -> loss)}
  leaderboard: [],            // names, best first
  connected: false, events: 0,
};
window.teacherState = state;


function showError(text) {
  $("error-text").textContent = text;
  $("error").hidden = false;
}

// ------------------------------------------------------------------------------- the API
async function api(path, options = {}) {
  const res = await fetch(path, { ...options, cache: "no-store",
    headers: { Authorization: `Bearer ${state.token}`, ...(options.headers ?? {}) } });
  if (res.status === 403) {
    signOut("That teacher token was not accepted.");
    throw new Error("teacher token refused");
  }
  if (!res.ok) {
    const body = await res.json().catch(() => ({}));
    const err = new Error(body.error ?? `HTTP ${res.status}`);
    err.problems = body.problems;
    throw err;
  }
  return res;
}
const getJSON = async (path) => (await api(path)).json();

function signOut(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = null;
  $("dash").hidden = true;
  $("login").hidden = false;
  if (message) showError(message);
}

// ---------------------------------------------------------------------------- sessions
async function loadSessions(select) {
  state.sessions = await getJSON("/api/classroom/sessions");
  const sel = $("session-select");
  sel.replaceChildren(...state.sessions.map((s) => new Option(
    `${s.name} · ${s.students} student${s.students === 1 ? "" : "s"}${s.open ? "" : " · closed"}`,
    s.id)));
  const pick = select ?? state.session?.id ?? state.sessions.find((s) => s.open)?.id ??
    state.sessions[0]?.id;
  if (pick) {
    sel.value = pick;
    await openSession(pick);
  }
}

let openSeq = 0;  // the latest openSession: an earlier one answered later is dropped

async function openSession(sid) {
  const mine = ++openSeq;
  const session = await getJSON(`/api/classroom/sessions/${encodeURIComponent(sid)}`);
  if (mine !== openSeq) return;  // another session was chosen meanwhile
  if (state.session?.id !== sid) {
    state.roster.clear();
    state.curves.clear();
    rebuildChart();
  }
  state.session = session;
  history.replaceState(null, "", `/teacher?session=${encodeURIComponent(sid)}`);
  renderJoin();
  connect(sid);
}

function renderJoin() {
  const s = state.session;
  const addrs = s.join;
  const sel = $("addr-select");
  sel.hidden = addrs.length < 2;
  sel.replaceChildren(...addrs.map((j, i) => new Option(new URL(j.url).host, i)));
  sel.value = String(Math.min(state.addr, addrs.length - 1));
  const j = addrs[Number(sel.value)] ?? addrs[0];
  if (j) {
    $("join-url").textContent = j.url;
    $("join-url").href = j.url;
    $("qr").src = `data:image/svg+xml;charset=utf-8,${encodeURIComponent(j.qr_svg)}`;
  }
  const pinned = s.pinned.filter((k) => Object.hasOwn(s.config, k))
    .map((k) => `${k} ${s.config[k]}`);
  // the server's word on it wins: a dataset deleted after the session was made
  $("session-dataset").textContent = s.problems?.length ? s.problems.join(" ")
    : datasetText(s);
  $("session-dataset").classList.toggle("error", Boolean(s.problems?.length));
  $("pinned-text").textContent = pinned.length ? `Locked for students: ${pinned.join(" · ")}`
    : "Students may change every setting.";
  $("session-state").textContent = s.open ? "open" : "closed: nobody new can join";
  $("toggle-open").textContent = s.open ? "Close session" : "Reopen session";
}

/** The session's dataset in words: title, samples, classes, training images, locked or not. */
function datasetText(s) {
  const name = s.config.dataset ?? state.defaultDataset;
  const d = state.datasetList.find((x) => x.name === name);
  const lock = s.pinned.includes("dataset") ? "locked for students"
    : "students may choose another";
  if (!d) return `Dataset: ${name} (not on this server) · ${lock}`;
  return `Dataset: ${d.title} (${d.sample_shape.join("x")}, ${d.classes.length} classes, ` +
    `${Number(d.train).toLocaleString()} training images) · ${lock}`;
}

// ------------------------------------------------------------------------- live stream
let streamAbort = null;

async function connect(sid) {
  streamAbort?.abort();
  const ctl = new AbortController();
  streamAbort = ctl;
  let backoff = 1000;
  while (!ctl.signal.aborted && state.token) {
    try {
      const res = await api(`/api/classroom/sessions/${encodeURIComponent(sid)}/events`,
        { signal: ctl.signal });
      setLive(true);
      backoff = 1000;
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let cut;
        while ((cut = buf.indexOf("\n\n")) >= 0) {
          onEvent(buf.slice(0, cut));
          buf = buf.slice(cut + 2);
        }
      }
    } catch (e) {
      if (ctl.signal.aborted) return;
    }
    setLive(false);
    await new Promise((r) => setTimeout(r, backoff));
    backoff = Math.min(backoff * 2, 15000);
  }
}

function setLive(on) {
  state.connected = on;
  $("live").dataset.state = on ? "on" : "off";
  $("live").textContent = on ? "live" : "reconnecting…";
}

function onEvent(text) {
  let event = "message";
  const data = [];
  for (const line of text.split("\n")) {
    if (line.startsWith("event:")) event = line.slice(6).trim();
    else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
  }
  if (!data.length) return;
  const payload = JSON.parse(data.join("\n"));
  state.events++;
  if (event === "roster") {
    for (const row of payload) state.roster.set(row.id, row);
  } else if (event === "points") {
    for (const [id, { run, points }] of Object.entries(payload)) {
      let c = state.curves.get(id);
      if (!c || c.run !== run) state.curves.set(id, c = { run, steps: new Map() });
      for (const [step, loss] of points) c.steps.set(step, loss);
    }
  }
  scheduleRender();
}

// ------------------------------------------------------------------------------ render
let renderTimer = null;
function scheduleRender() {
  if (renderTimer) return;
  renderTimer = setTimeout(() => { renderTimer = null; render(); }, RENDER_MS);
}

function render() {
  renderRoster(state, download);
  renderBoard(state);
  renderChart(state);
}

// ------------------------------------------------------------------------------ actions
async function download(path, name) {
  try {
    const blob = await (await api(path)).blob();
    const a = el("a", { href: URL.createObjectURL(blob), download: name });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 10000);
  } catch (e) {
    showError(`Download failed: ${e.message}`);
  }
}

// The settings a teacher sets (and may lock) for a session: names of run-configuration fields;
// their labels, kinds, choices and limits come from the schema (GET /api/config/schema), the
// same one the page, the CLI and the server's validation use.
const FIELD_NAMES = ["optimizer", "lr", "batch_size", "epochs", "seed", "init", "max_steps",
  "eval_images", "momentum", "weight_decay"];

/** [name, label, kind] of the dialog's rows: the dataset (once the run config has the field;
 * the students' pages load it, pinned by default) and the model first, then FIELD_NAMES. */
function dialogFields() {
  const byName = Object.fromEntries(state.schema.fields.map((f) => [f.name, f]));
  const dataset = byName.dataset && state.datasets.length ? [["dataset", "Dataset", "select"]]
    : [];
  const fields = FIELD_NAMES.filter((k) => byName[k]);
  return [...dataset, ["model", "Model", "select"], ...fields.map((k) => {
    const f = byName[k];
    return [k, f.label + (f.zero ? ` (0 = ${f.zero})` : ""),
      f.type === "choice" ? "select" : "number", f];
  })];
}

function openDialog() {
  const d = state.info.defaults;
  const cur = state.session?.config ?? d;
  const box = $("s-fields");
  box.replaceChildren(...dialogFields().map(([k, label, kind, f]) => {
    const id = `s-${k}`;
    let input;
    if (kind === "select") {
      const opts = k === "model" ? state.info.models : k === "dataset" ? state.datasets
        : f.choices;
      const title = (o) => (k === "dataset"
        ? state.datasetList.find((x) => x.name === o)?.title : null) ?? o;
      input = el("select", { id, name: k }, ...opts.map((o) => new Option(
        title(o) === o ? o : `${title(o)} (${o})`, o)));
    } else {
      input = el("input", { id, name: k, type: "number", step: f.type === "int" ? "1" : "any",
        min: String(f.min ?? 0), title: f.help ?? "" });
    }
    const want = String(cur[k] ?? d[k] ?? f?.default ?? "");
    input.value = want;
    // a default this server lacks (the model seednet not in its models dir) would leave the
    // select empty in some Chromium versions and others show the first option: say the first,
    // and that the session's own value is not on this server (a model or dataset deleted)
    let note = null;
    if (kind === "select" && input.selectedIndex < 0 && input.options.length) {
      input.selectedIndex = 0;
      if (state.session && Object.hasOwn(state.session.config, k)) {
        note = el("p", { className: "hint", id: `${id}-gone`, textContent: `${want} (this ` +
          `session's) is not on this server: ${input.value} is chosen instead.` });
        input.setAttribute("aria-describedby", note.id);
      }
    }
    // the seed is the students' own unless pinned: each gets one derived from this one
    const lock = el("input", { type: "checkbox", name: `pin-${k}`,
      checked: state.session ? state.session.pinned.includes(k) : k !== "seed" });
    const seed = k === "seed";
    return el("div", { className: "field" },
      el("label", { htmlFor: id, textContent: label }),
      el("div", { className: "with-lock" }, input,
        el("label", { className: "lock", title: seed ? "pinned: every student trains with " +
          "this seed (the same curve); else each gets their own seed derived from it"
          : "students cannot change it" }, lock, seed ? " pin seed" : " lock")),
      ...(note ? [note] : []));
  }));
  $("s-error").hidden = true;
  $("session-dialog").showModal();
}

async function createSession(ev) {
  ev.preventDefault();
  const f = $("session-form");
  const config = {};
  const pinned = [];
  for (const [k, label, kind] of dialogFields()) {
    const v = f.elements[k].value;
    // an empty number field (or one holding no number: its value is "") is not a 0
    if (kind === "number" && (v.trim() === "" || !Number.isFinite(Number(v)))) {
      dialogError(`${label}: enter a number`);
      f.elements[k].focus();
      return;
    }
    config[k] = kind === "number" ? Number(v) : v;
    if (f.elements[`pin-${k}`].checked) pinned.push(k);
  }
  try {
    const res = await api("/api/classroom/sessions", { method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ name: f.elements.name.value, config, pinned }) });
    const s = await res.json();
    $("session-dialog").close();
    await loadSessions(s.id);
  } catch (e) {
    dialogError((e.problems ?? [e.message]).join("\n"));
  }
}

function dialogError(text) {
  $("s-error").textContent = text;
  $("s-error").hidden = false;
}

async function toggleOpen() {
  const s = state.session;
  await api(`/api/classroom/sessions/${encodeURIComponent(s.id)}`, { method: "PATCH",
    headers: { "Content-Type": "application/json" }, body: JSON.stringify({ open: !s.open }) });
  await loadSessions(s.id);
}

// ------------------------------------------------------------------------------- boot
async function start() {
  $("login").hidden = true;
  try {
    state.info = await getJSON("/api/classroom/info");
    state.schema = await getJSON("/api/config/schema");
    const listed = await getJSON("/api/datasets");
    state.datasetList = listed.datasets;
    state.defaultDataset = listed.default;
    state.datasets = listed.datasets.map((d) => d.name);
  } catch (e) {
    if (state.token) showError(`Could not load the dashboard: ${e.message}`);
    return;
  }
  $("dash").hidden = false;
  if (state.info.ca_sha256) {
    $("trust").hidden = false;
    $("ca-fp").textContent = state.info.ca_sha256;
  }
  const wanted = new URLSearchParams(location.search).get("session");
  try {
    await loadSessions(wanted ?? undefined);
  } catch (e) {
    showError(`Could not load the sessions: ${e.message}`);
  }
}

function boot() {
  const hash = new URLSearchParams(location.hash.slice(1));
  if (hash.get("token")) {
    sessionStorage.setItem(TOKEN_KEY, hash.get("token"));
    history.replaceState(null, "", location.pathname + location.search);  // off the screen
  }
  state.token = sessionStorage.getItem(TOKEN_KEY);
  $("error-close").addEventListener("click", () => { $("error").hidden = true; });
  $("login-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    state.token = $("token").value.trim();
    sessionStorage.setItem(TOKEN_KEY, state.token);
    $("error").hidden = true;
    start();
  });
  $("session-select").addEventListener("change", (ev) => openSession(ev.target.value));
  $("addr-select").addEventListener("change", (ev) => {
    state.addr = Number(ev.target.value);
    renderJoin();
  });
  $("copy-url").addEventListener("click", () => navigator.clipboard?.writeText(
    $("join-url").textContent));
  $("new-session").addEventListener("click", openDialog);
  $("s-cancel").addEventListener("click", () => $("session-dialog").close());
  $("session-form").addEventListener("submit", createSession);
  $("toggle-open").addEventListener("click", () => toggleOpen().catch((e) =>
    showError(e.message)));
  $("download-csv").addEventListener("click", () => download(
    `/api/classroom/sessions/${encodeURIComponent(state.session.id)}/results.csv`,
    `class-${state.session.name}-results.csv`));
  if (state.token) start();
  else $("login").hidden = false;
}

boot();
