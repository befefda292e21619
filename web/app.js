// webgpu-trainer — the page (main thread). No framework: plain ES module.
//
// Talks to the module worker (/worker.js) with the protocol in docs/ARCHITECTURE.md:
//   main -> worker: {type: "start", config}, {type: "stop"}
//   worker -> main: status, adapter, no_webgpu, error, ready, progress, epoch, done
// Test hooks: window.appState (phase, adapter, steps, epochs, ...) and window.lastRun (the last
// `done` message).

import uPlot from "/vendor/uplot/uPlot.esm.js";
import { showSelfCheck } from "/selfcheck.js";
import { attachClassroom } from "/classroom.js";

const $ = (id) => document.getElementById(id);

// ----------------------------------------------------------------------------------- presets
const PRESETS = {
  seed: { optimizer: "adagrad", lr: 1.0, batch_size: 1000, epochs: 8, init: "scratch" },
  fast: { optimizer: "adam", lr: 0.001, batch_size: 64, epochs: 1, init: "scratch" },
};

// ------------------------------------------------------------------------------------- state
const appState = {
  phase: "booting",          // "booting" | "ready" | "training" | "done" | "error"
  adapter: null,             // the `adapter` message's info
  steps: [],                 // [{step, loss, acc}] from `progress` messages, acc as a fraction
  epochs: [],                // [{epoch, val_loss, val_acc}] from `epoch` messages
  progress: null,            // the last `progress` message (without its losses)
  config: null,              // the config sent with the last `start`
  status: "",                // the last `status` text
  error: null,               // the last `error` message text
  noWebGPU: false,           // true after a `no_webgpu` message
  workerReady: false,        // true after `ready`
  models: [],                // GET /api/models
};
window.appState = appState;
window.readFormForTests = () => readForm();
window.lastRun = null;

// ---------------------------------------------------------------------------------- helpers
/** Accuracy values are fractions in [0, 1]; tolerate percentages too. */
const frac = (a) => (a == null || Number.isNaN(+a) ? null : +a > 1.0001 ? +a / 100 : +a);
const pct = (a, digits = 2) => (a == null ? "–" : `${(frac(a) * 100).toFixed(digits)}%`);
const num = (x, digits = 4) => (x == null || !Number.isFinite(+x) ? "–" : (+x).toFixed(digits));

function mmss(seconds) {
  if (seconds == null || !Number.isFinite(+seconds) || seconds < 0) return "–";
  const s = Math.round(+seconds);
  return `${String(Math.floor(s / 60)).padStart(2, "0")}:${String(s % 60).padStart(2, "0")}`;
}

function humanBytes(n) {
  if (!Number.isFinite(n)) return "";
  const u = ["B", "KB", "MB", "GB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${u[i]}`;
}

function humanCount(n) {
  if (!Number.isFinite(n)) return "";
  if (n >= 1e6) return `${(n / 1e6).toFixed(2)} M`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)} k`;
  return String(n);
}

function cssVar(name, fallback) {
  const v = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  return v || fallback;
}

// ------------------------------------------------------------------------------------- log
const MAX_LOG = 300;
function log(text, kind = "info") {
  const li = document.createElement("li");
  li.className = `log-${kind}`;
  const t = document.createElement("time");
  t.textContent = new Date().toLocaleTimeString([], { hour12: false });
  li.append(t, document.createTextNode(" " + text));
  const box = $("log");
  const stick = box.scrollTop + box.clientHeight >= box.scrollHeight - 4;
  box.append(li);
  while (box.childElementCount > MAX_LOG) box.firstElementChild.remove();
  if (stick) box.scrollTop = box.scrollHeight;
}

function setStatus(text) {
  appState.status = text;
  $("status").textContent = text;
}

function showError(message) {
  appState.error = String(message);
  $("error-text").textContent = appState.error;
  $("error").hidden = false;
  $("error").scrollIntoView({ block: "center", behavior: "smooth" });
  setStatus(appState.error);
  log(appState.error, "error");
}

function hideError() {
  $("error").hidden = true;
}

// ------------------------------------------------------------------------------------ phase
const PHASE_LABEL = {
  booting: "starting up", ready: "ready", training: "training", done: "done", error: "error",
};

function setPhase(phase) {
  appState.phase = phase;
  const pill = $("phase");
  pill.dataset.phase = phase;
  pill.textContent = appState.noWebGPU ? "no WebGPU"
    : phase === "done" && window.lastRun?.stopped ? "stopped" : PHASE_LABEL[phase] ?? phase;
  syncControls();
}

function syncControls() {
  const training = appState.phase === "training";
  const haveModel = !!$("model").value;
  $("start").disabled = training || !appState.workerReady || appState.noWebGPU || !haveModel;
  $("stop").disabled = !training || stopRequested;
  $("settings-fields").disabled = training;
  // the model summary's trainable toggles and the upload belong to the settings too
  for (const el of document.querySelectorAll("#summary-card button, #summary-table input")) {
    el.disabled = training;
  }
  $("dropzone").classList.toggle("busy", training);
  for (const b of document.querySelectorAll(".preset")) b.disabled = training;
  $("download").disabled = training || !window.lastRun || !window.lastRun.weights || downloading;
}

// ----------------------------------------------------------------------------------- form
function applyPreset(name) {
  const p = PRESETS[name];
  $("optimizer").value = p.optimizer;
  $("lr").value = p.lr;
  $("batch-size").value = p.batch_size;
  $("epochs").value = p.epochs;
  $(p.init === "finetune" ? "init-finetune" : "init-scratch").checked = true;
  onOptimizerChange();
  markPreset();
}

function markPreset() {
  const cfg = readForm();
  for (const b of document.querySelectorAll(".preset")) {
    const p = PRESETS[b.dataset.preset];
    const match = p.optimizer === cfg.optimizer && p.lr === cfg.lr &&
      p.batch_size === cfg.batch_size && p.epochs === cfg.epochs && p.init === cfg.init;
    b.setAttribute("aria-pressed", String(match));
  }
}

function onOptimizerChange() {
  $("momentum-field").hidden = $("optimizer").value !== "sgd";
}

function readForm() {
  const n = (id) => Number($(id).value);
  return {
    model: $("model").value,
    optimizer: $("optimizer").value,
    lr: n("lr"),
    batch_size: Math.trunc(n("batch-size")),
    epochs: Math.trunc(n("epochs")),
    seed: Math.trunc(n("seed")),
    init: $("init-finetune").checked ? "finetune" : "scratch",
    momentum: $("optimizer").value === "sgd" ? n("momentum") : 0,
    weight_decay: n("weight-decay") || 0,
    max_steps: Math.max(0, Math.trunc(n("max-steps") || 0)),
    eval_images: Math.trunc(n("eval-images")),
    trainable: trainableConfig(),
  };
}

function validate(cfg) {
  const bad = [];
  if (!cfg.model) bad.push("choose a model");
  if (!(cfg.lr > 0)) bad.push("learning rate must be > 0");
  if (!(cfg.batch_size >= 2)) bad.push("batch size must be ≥ 2");
  if (!Number.isInteger(Number($("batch-size").value))) {
    bad.push("batch size must be a whole number");
  }
  if (!(cfg.epochs >= 1)) bad.push("epochs must be ≥ 1");
  if (cfg.trainable && !cfg.trainable.length) bad.push("tick at least one parameter to train");
  if (!Number.isInteger(cfg.seed) || cfg.seed < 0 || cfg.seed >= 2 ** 32) {
    bad.push("seed must be an integer in 0 … 4294967295");
  }
  if (!(cfg.momentum >= 0 && cfg.momentum <= 1)) bad.push("momentum must be in [0, 1]");
  if (!(cfg.weight_decay >= 0)) bad.push("weight decay must be ≥ 0");
  if (!(cfg.eval_images >= 1 && cfg.eval_images <= 10000)) bad.push("test images must be 1…10000");
  return bad;
}

async function loadModels(select = null) {
  const sel = $("model");
  try {
    const res = await fetch("/api/models");
    if (!res.ok) throw new Error(`GET /api/models: HTTP ${res.status}`);
    const models = await res.json();
    appState.models = models;
    sel.textContent = "";
    if (!models.length) {
      sel.append(new Option("no models found in models/", "", true, true));
      sel.options[0].disabled = true;
    }
    for (const m of models) {
      const label = m.error ? `${m.name} (cannot be loaded)`
        : m.params != null ? `${m.name} — ${humanCount(m.params)} params` : m.name;
      const opt = new Option(label, m.name);
      opt.disabled = !!m.error;
      sel.append(opt);
    }
    const usable = models.filter((m) => !m.error);
    const preferred = usable.find((m) => m.name === select) ??
      usable.find((m) => m.name === "seednet") ?? usable[0];
    sel.value = preferred ? preferred.name : "";
    onModelChange();
  } catch (e) {
    sel.textContent = "";
    sel.append(new Option("could not load models", "", true, true));
    showError(`Could not load the model list: ${e.message ?? e}`);
  }
  syncControls();
}

function onModelChange() {
  const m = appState.models.find((x) => x.name === $("model").value);
  $("model-hint").textContent = m?.error ? m.error : m
    ? [m.uploaded ? "uploaded" : "", m.file, humanBytes(m.bytes),
       m.params != null ? `${Number(m.params).toLocaleString()} parameters` : ""]
      .filter(Boolean).join(" · ")
    : "";
  syncControls();
  if (m && !m.error) loadSummary(m.name);
  else $("summary-card").hidden = true;
}

// ------------------------------------------------------------------- bring your own model
// appState.summary: GET /api/models/{name}/summary; appState.trainable: Set of the parameter
// names to train (the config's `trainable`: null when every parameter trains).
async function loadSummary(name) {
  try {
    const res = await fetch(`/api/models/${encodeURIComponent(name)}/summary`);
    const body = await res.json();
    if (!res.ok) throw new Error(body.error ?? `HTTP ${res.status}`);
    if ($("model").value !== name) return;  // the user moved on
    appState.summary = body;
    appState.trainable = new Set(body.tensors.filter((t) => t.trainable).map((t) => t.name));
    $("summary-card").dataset.model = name;
    renderSummary();
  } catch (e) {
    $("summary-card").hidden = true;
    log(`Model summary of ${name} failed: ${e.message ?? e}`, "error");
  }
}

function renderSummary() {
  const s = appState.summary;
  if (!s) return;
  const byName = Object.fromEntries(s.tensors.map((t) => [t.name, t]));
  const body = $("summary-table").querySelector("tbody");
  body.replaceChildren();
  for (const layer of s.layers) {
    const params = layer.tensors.filter((n) => byName[n]?.role === "param");
    const tr = document.createElement("tr");
    const cells = [layer.name, layer.op,
      layer.output_shape ? `[${layer.output_shape.join(", ")}]` : "?",
      layer.params ? Number(layer.params).toLocaleString() : "",
      layer.macs ? humanCount(layer.macs) : ""];
    cells.forEach((text, i) => {
      const td = document.createElement("td");
      td.textContent = text;
      if (i === 1) td.className = "ops";
      if (i >= 3) td.className = "num";
      tr.append(td);
    });
    const td = document.createElement("td");
    for (const n of params) {
      const label = document.createElement("label");
      const box = document.createElement("input");
      box.type = "checkbox";
      box.dataset.tensor = n;
      box.checked = appState.trainable.has(n);
      box.addEventListener("change", () => {
        if (box.checked) appState.trainable.add(n); else appState.trainable.delete(n);
        renderSummary();
      });
      const short = n.startsWith(layer.name.replace(/^\//, "").split("/")[0] + ".")
        ? n.split(".").pop() : n;
      label.title = `${n} ${JSON.stringify(byName[n].shape)}`;
      label.append(box, document.createTextNode(` ${short}`));
      td.append(label);
    }
    tr.append(td);
    if (params.length && params.every((n) => !appState.trainable.has(n))) tr.className = "frozen";
    for (const box of td.querySelectorAll("input")) box.disabled = appState.phase === "training";
    body.append(tr);
  }
  const total = s.tensors.filter((t) => t.role === "param");
  const nTrain = total.filter((t) => appState.trainable.has(t.name)).reduce((a, t) => a + t.numel, 0);
  const all = total.reduce((a, t) => a + t.numel, 0);
  $("summary-title").textContent = `Model: ${$("model").value}`;
  $("summary-totals").textContent = `${Number(all).toLocaleString()} parameters · ` +
    `${humanCount(s.totals.macs)} mult-adds per image · opset ${s.opset ?? "?"}`;
  // the loss the model trains with, the initializers that never train (why), the import's notes
  const about = [];
  if (s.loss) about.push(`Loss${s.loss.auto ? " (auto)" : ""}: ${s.loss.text}`);
  for (const f of s.not_trained ?? []) about.push(`Not trained: ${f.name}: ${f.reason}`);
  for (const n of s.notes ?? []) about.push(`Note: ${n}`);
  $("summary-about").replaceChildren(...about.map((text) => {
    const li = document.createElement("li");
    li.textContent = text;
    return li;
  }));
  $("trainable-text").textContent = nTrain === all ? "all parameters train"
    : `${Number(nTrain).toLocaleString()} of ${Number(all).toLocaleString()} parameters train ` +
      `(${total.length - total.filter((t) => appState.trainable.has(t.name)).length} tensors frozen)`;
  $("summary-card").hidden = false;
}

function setTrainable(names) {
  appState.trainable = new Set(names);
  renderSummary();
  // bring the first layer that trains into view inside the table's scroll box
  const first = $("summary-table").querySelector("input:checked");
  const wrap = document.querySelector("#summary-card .table-wrap");
  if (first && wrap) {
    const row = first.closest("tr");
    wrap.scrollTop = Math.max(0, row.offsetTop - wrap.clientHeight / 2);
  }
}

/** The config's `trainable`: null when every parameter trains, else the sorted names. */
function trainableConfig() {
  const s = appState.summary;
  if (!s) return null;
  const params = s.tensors.filter((t) => t.role === "param").map((t) => t.name);
  return params.every((n) => appState.trainable.has(n)) ? null
    : params.filter((n) => appState.trainable.has(n));
}

function showImportErrors(title, problems, hints = []) {
  const ul = $("import-errors");
  ul.replaceChildren();
  const head = document.createElement("li");
  head.innerHTML = "<strong></strong>";
  head.firstChild.textContent = title;
  ul.append(head);
  for (const p of problems) {
    const li = document.createElement("li");
    li.textContent = p;
    ul.append(li);
  }
  for (const h of hints) {  // e.g. the ops the engine trains: long, so folded
    const li = document.createElement("li");
    const det = document.createElement("details");
    const sum = document.createElement("summary");
    sum.textContent = h.split(":")[0];
    det.append(sum, document.createTextNode(h.slice(h.indexOf(":") + 1)));
    li.append(det);
    ul.append(li);
  }
  ul.hidden = false;
}

async function uploadModel(file) {
  if (!file) return;
  const zone = $("dropzone");
  $("import-errors").hidden = true;
  if (!file.name.toLowerCase().endsWith(".onnx")) {
    showImportErrors(`${file.name}: not an .onnx file`, ["Export your model with torch.onnx.export(model, x, \"model.onnx\")."]);
    setStatus(`${file.name} was not imported.`);
    return;
  }
  zone.classList.add("busy");
  setStatus(`Uploading ${file.name} (${humanBytes(file.size)})…`);
  try {
    const res = await fetch(`/api/models/upload?filename=${encodeURIComponent(file.name)}`, {
      method: "POST", headers: { "Content-Type": "application/octet-stream" }, body: file,
    });
    const body = await res.json().catch(() => ({ error: `HTTP ${res.status}` }));
    if (!res.ok) {
      const problems = body.problems ?? [];
      showImportErrors(problems.length ? `${file.name} cannot be used:` : body.error, problems,
        body.hints ?? []);
      setStatus(`${file.name} was not imported.`);
      log(`Upload of ${file.name} refused: ${body.error}`, "error");
      return;
    }
    log(`Imported ${file.name} as model “${body.name}”: ` +
      `${Number(body.summary.totals.params).toLocaleString()} parameters.`);
    setStatus(`Imported ${body.name}.`);
    await loadModels(body.name);
  } catch (e) {
    showImportErrors(`Upload of ${file.name} failed: ${e.message ?? e}`, []);
  } finally {
    zone.classList.remove("busy");
  }
}

function setupDropzone() {
  const zone = $("dropzone");
  const input = $("model-file");
  zone.addEventListener("click", () => input.click());
  zone.addEventListener("keydown", (e) => {
    if (e.key === "Enter" || e.key === " ") { e.preventDefault(); input.click(); }
  });
  input.addEventListener("change", () => { uploadModel(input.files[0]); input.value = ""; });
  zone.addEventListener("dragover", (e) => { e.preventDefault(); zone.classList.add("over"); });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", (e) => {
    e.preventDefault();
    zone.classList.remove("over");
    uploadModel(e.dataTransfer.files[0]);
  });
  $("train-all").addEventListener("click", () => setTrainable(
    appState.summary.tensors.filter((t) => t.role === "param").map((t) => t.name)));
  $("train-head").addEventListener("click", () => {
    setTrainable(appState.summary.head);
    if (!$("init-finetune").checked) {
      $("init-finetune").checked = true;
      markPreset();
      log("Fine-tuning only the head: starting from the model’s weights.");
    }
  });
}

// ---------------------------------------------------------------------------------- charts
let stepChart = null;
let epochChart = null;
let emaLoss = null;
const stepData = [[], [], [], []];   // step, loss, smoothed loss, batch acc (%)
const epochData = [[], [], []];      // epoch, val loss, val acc (%)

function chartSize(el) {
  const w = Math.max(240, Math.floor(el.clientWidth));
  return { width: w, height: Math.max(200, Math.min(300, Math.round(w * 0.55))) };
}

/** When the cursor is not on a chart, its legend shows the latest values instead of dashes. */
function legendToLatest(u) {
  const n = u.data[0].length;
  if (n && (u.cursor.idx == null || u.cursor.left < 0)) u.setLegend({ idx: n - 1 });
}
const INT_INCRS = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 2500, 5000, 10000, 20000, 50000, 100000];
const latestLegendHooks = { setCursor: [legendToLatest] };

function makeCharts() {
  const text = cssVar("--muted", "#667");
  const grid = cssVar("--grid", "rgba(0,0,0,.08)");
  const cLoss = cssVar("--c-loss", "#4f46e5");
  const cLossRaw = cssVar("--c-loss-raw", "rgba(79,70,229,.3)");
  const cAcc = cssVar("--c-acc", "#059669");
  const font = `12px ${cssVar("--font", "system-ui, sans-serif")}`;
  const axis = (extra) => ({
    stroke: text, font, labelFont: font, grid: { stroke: grid, width: 1 },
    ticks: { stroke: grid, width: 1 }, ...extra,
  });
  const pctAxis = axis({
    scale: "acc", side: 1, label: "accuracy", grid: { show: false },
    values: (u, v) => v.map((x) => `${x}%`), size: 56,
  });
  const lossAxis = axis({
    scale: "loss", label: "loss", size: 56,
    values: (u, v) => v.map((x) => (x >= 10 ? x.toFixed(0) : +x.toPrecision(3))),
  });
  const accScale = { range: (u, mn, mx) => [Math.min(mn ?? 0, 0) < 0 ? mn : 0, 100] };

  const elS = $("chart-steps");
  stepChart = new uPlot({
    ...chartSize(elS),
    cursor: { drag: { x: true, y: false } },
    hooks: latestLegendHooks,
    scales: {
      x: { time: false, range: (u, mn, mx) => [0, Math.max(mx ?? 1, appState.progress?.total_steps ?? 1, 1)] },
      loss: { auto: true, range: (u, mn, mx) => [0, mx > 0 ? mx * 1.05 : 1] },
      acc: accScale,
    },
    axes: [axis({ label: "step", incrs: INT_INCRS, values: (u, v) => v.map((x) => x.toLocaleString()) }), lossAxis, pctAxis],
    series: [
      { label: "step", value: (u, v) => (v == null ? "–" : v.toLocaleString()) },
      { label: "loss", scale: "loss", stroke: cLossRaw, width: 1, value: (u, v) => num(v) },
      { label: "loss (smoothed)", scale: "loss", stroke: cLoss, width: 2, value: (u, v) => num(v) },
      { label: "batch acc", scale: "acc", stroke: cAcc, width: 1.5, value: (u, v) => (v == null ? "–" : `${v.toFixed(1)}%`) },
    ],
  }, stepData, elS);

  const elE = $("chart-epochs");
  epochChart = new uPlot({
    ...chartSize(elE),
    cursor: { drag: { x: false, y: false } },
    hooks: latestLegendHooks,
    scales: {
      x: { time: false, range: (u, mn, mx) => [0, Math.max(mx ?? 1, appState.config?.epochs ?? 1, 1)] },
      loss: { auto: true, range: (u, mn, mx) => [0, mx > 0 ? mx * 1.1 : 1] },
      // validation accuracy lives near the top: zoom to [min rounded down to 10%, 100%]
      acc: { range: (u, mn, mx) => [mn == null ? 0 : Math.max(0, Math.floor((mn - 2) / 10) * 10), 100] },
    },
    axes: [
      axis({ label: "epoch", incrs: INT_INCRS, values: (u, v) => v.map((x) => String(x)) }),
      lossAxis, pctAxis,
    ],
    series: [
      { label: "epoch", value: (u, v) => (v == null ? "–" : String(v)) },
      { label: "val loss", scale: "loss", stroke: cLoss, width: 2, points: { show: true, size: 7, fill: cLoss }, value: (u, v) => num(v) },
      { label: "val acc", scale: "acc", stroke: cAcc, width: 2, points: { show: true, size: 7, fill: cAcc }, value: (u, v) => (v == null ? "–" : `${v.toFixed(2)}%`) },
    ],
  }, epochData, elE);

  const ro = new ResizeObserver(() => {
    stepChart.setSize(chartSize(elS));
    epochChart.setSize(chartSize(elE));
  });
  ro.observe(elS);
  ro.observe(elE);
}

function resetCharts() {
  for (const a of stepData) a.length = 0;
  for (const a of epochData) a.length = 0;
  emaLoss = null;
  dirty.charts = true;
  scheduleRender();
}

// ----------------------------------------------------------------- throttled rendering (rAF)
const dirty = { charts: false, progress: false };
let rafPending = false;

function scheduleRender() {
  if (rafPending) return;
  rafPending = true;
  requestAnimationFrame(render);
}

function render() {
  rafPending = false;
  if (dirty.progress) {
    dirty.progress = false;
    renderProgress();
  }
  if (dirty.charts) {
    dirty.charts = false;
    for (const u of [stepChart, epochChart]) {
      if (!u) continue;
      u.setData(u === stepChart ? stepData : epochData);
      legendToLatest(u);
    }
    $("chart-steps-empty").hidden = stepData[0].length > 0;
    $("chart-epochs-empty").hidden = epochData[0].length > 0;
  }
}

function renderProgress() {
  const p = appState.progress;
  if (!p) {
    $("progress").value = 0;
    $("progress").max = 1;
    for (const id of ["step-text", "epoch-text", "ips", "eta", "last-loss"]) $(id).textContent = "–";
    return;
  }
  if (!p.total_steps) {  // started, no report yet
    $("progress").removeAttribute("value");
    $("step-text").textContent = "starting…";
    return;
  }
  const total = Math.max(1, p.total_steps || 1);
  $("progress").max = total;
  $("progress").value = Math.min(p.step, total);
  $("progress").textContent = `${Math.round((100 * p.step) / total)}%`;
  $("step-text").textContent = `${Number(p.step).toLocaleString()} / ${Number(total).toLocaleString()}`;
  $("epoch-text").textContent = `${p.epoch} / ${p.epochs}`;
  $("ips").textContent = p.images_per_s != null ? Math.round(p.images_per_s).toLocaleString() : "–";
  $("eta").textContent = appState.phase === "training" ? mmss(p.eta_s)
    : appState.phase === "done" && !window.lastRun?.stopped ? "00:00" : "–";
  const last = appState.steps[appState.steps.length - 1];
  $("last-loss").textContent = last ? num(last.loss) : "–";
}

// ---------------------------------------------------------------------------------- worker
let worker = null;
let stopRequested = false;
let downloading = false;
let trainStart = 0;

function startWorker() {
  try {
    worker = new Worker("/worker.js", { type: "module" });
    attachClassroom(worker);  // classroom mode (?class=ID): web/classroom.js
  } catch (e) {
    showError(`Could not start the worker: ${e.message ?? e}`);
    setPhase("error");
    return;
  }
  worker.onmessage = (ev) => onWorkerMessage(ev.data);
  worker.onerror = (ev) => {
    ev.preventDefault?.();
    showError(`Worker failed: ${ev.message || "could not load /worker.js"}` +
      (ev.filename ? ` (${ev.filename}:${ev.lineno})` : ""));
    finishTraining();
    setPhase("error");
  };
  worker.onmessageerror = () => showError("Could not read a message from the worker.");
}

const handlers = {
  selfcheck: showSelfCheck,  // the GPU self-check's warning (web/selfcheck.js)
  status(m) {
    setStatus(m.text);
    log(m.text);
  },

  adapter(m) {
    const info = m.info ?? {};
    appState.adapter = info;
    const name = info.description ||
      [info.vendor, info.architecture, info.device].filter(Boolean).join(" ") || "WebGPU adapter";
    // SwiftShader and llvmpipe run WebGPU on the CPU: it works, but expect ~30 images/s.
    const software = /swiftshader|llvmpipe|software/i.test(Object.values(info).join(" "));
    $("adapter").textContent = software ? `${name} (software GPU: slow)` : name;
    $("adapter").title = Object.entries(info).map(([k, v]) => `${k}: ${v || "—"}`).join("\n");
    $("adapter-dot").dataset.state = "ok";
    log(`GPU adapter: ${name}` + (software ? " — a CPU implementation of WebGPU, expect" +
        " seconds per step; a real GPU is hundreds of times faster" : ""));
  },

  no_webgpu(m) {
    appState.noWebGPU = true;
    if (m.message) $("no-webgpu-message").textContent = m.message;
    $("no-webgpu").hidden = false;
    $("adapter").textContent = "no WebGPU";
    $("adapter-dot").dataset.state = "bad";
    setStatus("WebGPU is not available: training needs a GPU through WebGPU.");
    log(`No WebGPU: ${m.message ?? ""}`, "error");
    setPhase("error");
  },

  error(m) {
    showError(m.message ?? "unknown error");
    setStatus("Stopped by an error.");
    finishTraining();
    setPhase("error");
  },

  ready() {
    appState.workerReady = true;
    if (!appState.adapter) $("adapter-dot").dataset.state = "ok";
    setStatus("Ready. Choose settings and press Start.");
    log("Engine ready.");
    if (appState.phase === "booting") setPhase("ready");
    else syncControls();
  },

  progress(m) {
    const { losses, ...rest } = m;
    appState.progress = rest;
    for (const [step, loss, acc] of losses ?? []) {
      const a = frac(acc);
      appState.steps.push({ step, loss, acc: a });
      emaLoss = emaLoss == null ? loss : 0.9 * emaLoss + 0.1 * loss;
      stepData[0].push(step);
      stepData[1].push(loss);
      stepData[2].push(emaLoss);
      stepData[3].push(a == null ? null : a * 100);
      dirty.charts = true;
    }
    dirty.progress = true;
    scheduleRender();
  },

  epoch(m) {
    const e = { epoch: m.epoch, val_loss: m.val_loss, val_acc: frac(m.val_acc) };
    appState.epochs.push(e);
    epochData[0].push(e.epoch);
    epochData[1].push(e.val_loss);
    epochData[2].push(e.val_acc == null ? null : e.val_acc * 100);
    log(`Epoch ${e.epoch}: val loss ${num(e.val_loss)}, val accuracy ${pct(e.val_acc)}`);
    dirty.charts = true;
    scheduleRender();
  },

  done(m) {
    window.lastRun = m;
    if (appState.progress && m.steps != null) appState.progress.step = m.steps;
    const secs = trainStart ? (performance.now() - trainStart) / 1000 : null;
    const steps = m.steps ?? appState.progress?.step ?? appState.steps.at(-1)?.step ?? null;
    $("test-acc").textContent = pct(m.test_acc);
    $("test-loss").textContent = num(m.test_loss);
    $("eval-count").textContent = m.eval_images != null ? Number(m.eval_images).toLocaleString() : "–";
    $("result-steps").textContent = steps != null ? Number(steps).toLocaleString() : "–";
    $("result-note").textContent = [
      m.model, appState.config?.optimizer, m.stopped ? "stopped early" : "completed",
      secs != null ? `${mmss(secs)} wall time` : "",
    ].filter(Boolean).join(" · ");
    $("results").dataset.state = m.stopped ? "stopped" : "done";
    log(`Done${m.stopped ? " (stopped)" : ""}: test accuracy ${pct(m.test_acc)}, test loss ${num(m.test_loss)}`);
    setStatus(m.stopped ? "Stopped. Evaluated the model as it was." : "Training finished.");
    dirty.progress = true;
    scheduleRender();
    finishTraining();
    setPhase("done");
  },
};

function onWorkerMessage(m) {
  if (!m || typeof m !== "object") return;
  const h = handlers[m.type];
  if (h) h(m);
  else console.warn("unknown worker message", m);
}

function finishTraining() {
  stopRequested = false;
}

function startTraining(ev) {
  ev?.preventDefault();
  if ($("start").disabled || appState.phase === "training") return;
  const cfg = readForm();
  const bad = validate(cfg);
  if (bad.length) {
    showError(`Please fix the settings: ${bad.join("; ")}.`);
    return;
  }
  hideError();
  appState.config = cfg;
  appState.steps = [];
  appState.epochs = [];
  appState.progress = { step: 0, total_steps: 0, epoch: 0, epochs: cfg.epochs };
  appState.error = null;
  window.lastRun = null;
  for (const id of ["test-acc", "test-loss", "eval-count", "result-steps"]) $(id).textContent = "–";
  $("result-note").textContent = "";
  delete $("results").dataset.state;
  resetCharts();
  dirty.progress = true;
  stopRequested = false;
  trainStart = performance.now();
  setPhase("training");
  setStatus("Starting…");
  log(`Start: ${cfg.model}, ${cfg.optimizer} lr ${cfg.lr}, batch ${cfg.batch_size}, ` +
    `${cfg.epochs} epoch(s), seed ${cfg.seed}, ${cfg.init}` +
    (cfg.max_steps ? `, max ${cfg.max_steps} steps` : ""));
  if (cfg.trainable && cfg.init === "scratch") {
    log("Note: “Train from scratch” re-initialises the frozen parameters too; choose " +
      "“Fine-tune” to keep the model’s weights in the frozen layers.", "error");
  }
  worker.postMessage({ type: "start", config: cfg });
}

function stopTraining() {
  if (appState.phase !== "training" || stopRequested) return;
  stopRequested = true;
  worker.postMessage({ type: "stop" });
  setStatus("Stopping after the current step…");
  log("Stop requested.");
  syncControls();
}

// -------------------------------------------------------------------------------- download
async function downloadOnnx() {
  const run = window.lastRun;
  if (!run?.weights) return;
  const cfg = appState.config ?? readForm();
  const model = run.model || cfg.model;
  const provenance = {
    dataset: "MNIST",
    epochs: run.epochs_done ?? appState.progress?.epoch ?? cfg.epochs,
    optimizer: cfg.optimizer,
    lr: cfg.lr,
    batch_size: cfg.batch_size,
    seed: cfg.seed,
    init: cfg.init,
    test_accuracy: run.test_acc,
    trainable: cfg.trainable ? cfg.trainable.join(",") : "all",
    steps: run.steps ?? appState.progress?.step ?? 0,
  };
  downloading = true;
  syncControls();
  const btn = $("download");
  const label = btn.textContent;
  btn.textContent = "Exporting…";
  try {
    const res = await fetch(`/api/models/${encodeURIComponent(model)}/export`, {
      method: "POST",
      headers: { "Content-Type": "application/octet-stream", "X-Provenance": JSON.stringify(provenance) },
      body: run.weights,
    });
    if (!res.ok) {
      let detail = (await res.text().catch(() => "")).slice(0, 2000);
      try { detail = JSON.parse(detail).error ?? detail; } catch { /* plain text */ }
      throw new Error(`HTTP ${res.status}${detail ? `: ${detail}` : ""}`);
    }
    const blob = await res.blob();
    const url = URL.createObjectURL(blob);
    const a = document.createElement("a");
    a.href = url;
    a.download = `${model}-trained.onnx`;
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10_000);
    log(`Exported ${model}-trained.onnx (${humanBytes(blob.size)}).`);
  } catch (e) {
    showError(`Export failed: ${e.message ?? e}`);
  } finally {
    downloading = false;
    btn.textContent = label;
    syncControls();
  }
}

// ------------------------------------------------------------------------------------ boot
function boot() {
  $("settings").addEventListener("submit", startTraining);
  $("stop").addEventListener("click", stopTraining);
  $("download").addEventListener("click", downloadOnnx);
  $("error-close").addEventListener("click", hideError);
  $("optimizer").addEventListener("change", () => { onOptimizerChange(); markPreset(); });
  $("model").addEventListener("change", onModelChange);
  setupDropzone();
  for (const b of document.querySelectorAll(".preset")) {
    b.addEventListener("click", () => applyPreset(b.dataset.preset));
  }
  for (const id of ["lr", "batch-size", "epochs", "init-scratch", "init-finetune"]) {
    $(id).addEventListener("input", markPreset);
    $(id).addEventListener("change", markPreset);
  }
  applyPreset("fast");
  makeCharts();
  setPhase("booting");
  renderProgress();
  startWorker();
  loadModels();
}

boot();
