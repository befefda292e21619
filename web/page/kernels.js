// The kernels playground (#panel-kernels): an image (web/page/kernel-images.js) filtered by a 3x3
// kernel (a preset of GET /api/kernels or the user's own) on the GPU by the engine's own Conv
// kernel (worker message `convolve` -> `convolved`, worker/kernels.py), input and output
// side by side, the output scaled from its min (black) to its max (white).
//
// One request at a time: a change while one is on its way is sent when it comes back (the
// latest wins). During a training run the worker computes it between two training steps.
// Test hook: window.kernelsState (presets, image, kernel, result: the request sent with the
// worker's raw float32 output, min, max, ms; busy, error).

import { $ } from "../lib/util.js";
import { appState } from "./state.js";
import { draw, drawRgba, fromFile, pattern, testImage } from "./kernel-images.js";

const state = {
  presets: [], maxSide: 256, image: null, kernelId: "sobel_x", kernel: null,
  result: null, busy: false, error: null,
};
window.kernelsState = state;
let post = null;           // (message) => the worker gets it
let started = false;       // the panel was opened once: presets loaded, first image drawn
let inflight = null;       // the request on its way
let again = false;         // something changed while it was on its way
let seq = 0;
const CUSTOM = "custom";
const CUSTOM_ABOUT = "Your own kernel: try a small change to a preset and watch what changes.";
const NUMBER = /^[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$/i;

/** A weight as typed: a number or a fraction a/b. Returns a finite number or null. */
export function parseWeight(text) {
  const parts = text.trim().replace(/\u2212/g, "-").split("/").map((t) => t.trim());
  if (parts.length > 2 || !parts.every((t) => NUMBER.test(t))) return null;
  const v = parts.length === 2 ? Number(parts[0]) / Number(parts[1]) : Number(parts[0]);
  return Number.isFinite(v) ? v : null;
}

function setStatus(text, busy = false) {
  $("kernel-status").textContent = text;
  $("kernel-progress").hidden = !busy;
}

// ----------------------------------------------------------------------------- the kernel
const CELL = (k) => $(`kernel-w${k}`);
const ROWS = ["top", "middle", "bottom"];
const COLS = ["left", "centre", "right"];

function buildGrid() {
  const grid = $("kernel-grid");
  grid.replaceChildren(document.createElement("span"));
  for (const [c, name] of COLS.entries()) {
    grid.append(Object.assign(document.createElement("span"),
      { id: `kernel-col${c}`, className: "kernel-head", textContent: name }));
  }
  for (const [r, rname] of ROWS.entries()) {
    grid.append(Object.assign(document.createElement("span"),
      { id: `kernel-row${r}`, className: "kernel-head", textContent: rname }));
    for (let c = 0; c < 3; c++) {
      const input = Object.assign(document.createElement("input"), {
        type: "text", id: `kernel-w${3 * r + c}`, inputMode: "decimal", autocomplete: "off",
        spellcheck: false,
      });
      input.setAttribute("aria-labelledby", `kernel-row${r} kernel-col${c}`);
      input.addEventListener("input", () => { selectKernel(CUSTOM, false); check(); });
      input.addEventListener("keydown", (e) => { if (e.key === "Enter") apply(); });
      grid.append(input);
    }
  }
}

function buildPresets() {
  const box = $("kernel-presets");
  box.replaceChildren();
  for (const p of [...state.presets, { id: CUSTOM, label: "Your own" }]) {
    const input = Object.assign(document.createElement("input"),
      { type: "radio", name: "kernel-preset", value: p.id, id: `kernel-preset-${p.id}` });
    input.addEventListener("change", () => { if (input.checked) selectKernel(p.id); });
    const label = Object.assign(document.createElement("label"), { className: "radio" });
    label.append(input, document.createTextNode(p.label));
    box.append(label);
  }
}

/** Choose preset ``id`` (or CUSTOM); a preset fills the grid and is applied at once. */
function selectKernel(id, fill = true) {
  state.kernelId = id;
  const preset = state.presets.find((p) => p.id === id);
  $(`kernel-preset-${id}`).checked = true;
  $("kernel-about").textContent = preset ? `${preset.label}: ${preset.about}` : CUSTOM_ABOUT;
  if (preset && fill) {
    preset.weights.forEach((w, k) => { CELL(k).value = String(+w.toPrecision(6)); });
    if (check()) apply();
  }
}

/** Mark the bad weights inline; returns the 9 weights or null. */
function check() {
  const errors = [];
  const weights = [];
  for (let k = 0; k < 9; k++) {
    const cell = CELL(k);
    const v = parseWeight(cell.value);
    const where = `${ROWS[Math.floor(k / 3)]} ${COLS[k % 3]}`;
    if (v === null) {
      errors.push(cell.value.trim() === "" ? `${where}: enter a number`
        : `${where}: “${cell.value.trim()}” is not a number (e.g. -1, 0.25 or 1/16)`);
      cell.setAttribute("aria-invalid", "true");
      cell.setAttribute("aria-describedby", "kernel-errors");
    } else {
      cell.removeAttribute("aria-invalid");
      cell.removeAttribute("aria-describedby");
    }
    weights.push(v);
  }
  const list = document.createElement("ul");
  list.append(...errors.map((t) => Object.assign(document.createElement("li"),
    { textContent: t })));
  $("kernel-errors").replaceChildren(...(errors.length ? [list] : []));
  $("kernel-errors").hidden = !errors.length;
  $("kernel-apply").disabled = errors.length > 0;
  state.kernel = errors.length ? null : weights;
  return state.kernel;
}

// ------------------------------------------------------------------------------ the image
async function loadImage(make) {
  $("kernel-image-error").hidden = true;
  $("kernel-digit").removeAttribute("aria-invalid");
  setStatus("Reading the image…", true);
  try {
    state.image = await make();
  } catch (e) {
    const box = $("kernel-image-error");
    box.textContent = e.message ?? String(e);
    box.hidden = false;
    if (e instanceof RangeError) $("kernel-digit").setAttribute("aria-invalid", "true");
    setStatus(state.image ? "The image was not changed." : "");
    return;
  }
  const { width, height, pixels, rgba, note } = state.image;
  $("kernel-image-note").textContent = note;
  $("kernel-input-size").textContent = `${width}×${height}`;
  if (rgba) drawRgba($("kernel-input"), width, height, rgba);
  else draw($("kernel-input"), width, height, pixels);
  $("kernel-output").width = width;  // the output appears in a frame of the same size
  $("kernel-output").height = height;
  $("kernel-range").textContent = "";
  apply();
}

// ------------------------------------------------------------------ requests to the worker
/** Send the image and kernel to the worker (or note that something changed meanwhile). */
export function apply() {
  if (!started || !state.image || !check()) return;
  if (appState.noWebGPU) {
    setStatus("This needs WebGPU, which this browser does not offer (see the message above).");
    return;
  }
  if (!appState.workerReady || !post) {
    again = true;
    setStatus("Waiting for the engine to load (Python and WebGPU)…", true);
    return;
  }
  if (inflight) {
    again = true;
    return;
  }
  again = false;
  const { width, height, pixels } = state.image;
  const kernel = state.kernel.slice();
  const preset = state.presets.find((p) => p.id === state.kernelId);
  inflight = { id: ++seq, width, height, pixels, kernel,
    label: preset ? preset.label : "Your kernel" };
  state.busy = true;
  setStatus(`Computing ${inflight.label} on the GPU (${width}×${height})…`, true);
  post({ type: "convolve", id: inflight.id, width, height, pixels: pixels.slice(), kernel });
}

/** The worker's `convolved` message. */
export function onConvolved(m) {
  if (!inflight || m.id !== inflight.id) return;
  const req = inflight;
  inflight = null;
  state.busy = false;
  if (m.error) {
    state.error = m.error;
    setStatus(`Could not apply the kernel: ${m.error}`);
    $("kernel-status").classList.add("error");
  } else {
    state.error = null;
    $("kernel-status").classList.remove("error");
    state.result = { ...req, output: m.output, min: m.min, max: m.max, ms: m.ms };
    draw($("kernel-output"), req.width, req.height, m.output, m.min, m.max);
    const fmt = (v) => (+v.toPrecision(4)).toString().replace("-", "−");
    $("kernel-range").textContent = `black = min ${fmt(m.min)}, white = max ${fmt(m.max)}`;
    setStatus(`${req.label}: ${req.width}×${req.height} pixels in ${m.ms.toFixed(1)} ms ` +
      (appState.phase === "training" ? "(after the training steps queued on the GPU)."
        : "(the engine’s Conv kernel on the GPU)."));
  }
  if (again) apply();
}

/** The worker is ready: run what waited for it. */
export function kernelsReady() {
  if (again && !inflight) apply();
}

async function start() {
  started = true;
  buildGrid();
  setStatus("Loading the kernels…", true);
  try {
    const res = await fetch("/api/kernels");
    if (!res.ok) throw new Error(`GET /api/kernels: HTTP ${res.status}`);
    const body = await res.json();
    Object.assign(state, { presets: body.presets, maxSide: body.max_side });
  } catch (e) {
    setStatus(`Could not load the kernels: ${e.message ?? e}`);
    return;
  }
  buildPresets();
  const known = state.presets.some((p) => p.id === state.kernelId);
  selectKernel(known ? state.kernelId : state.presets[0]?.id ?? CUSTOM);
  await loadImage(async () => pattern());
}

/** Wire the panel; ``postToWorker(message)`` sends to the worker. The panel starts (presets,
 * first image) when its tab is first shown. */
export function setupKernels(postToWorker) {
  post = postToWorker;
  document.addEventListener("tabchange", (e) => {
    if (e.detail === "kernels" && !started) start();
  });
  $("kernel-apply").addEventListener("click", apply);
  $("kernel-pattern").addEventListener("click", () => loadImage(async () => pattern()));
  const digit = () => loadImage(() => testImage($("kernel-digit").value.trim() === "" ? NaN
    : Number($("kernel-digit").value)));
  $("kernel-digit-load").addEventListener("click", digit);
  $("kernel-digit").addEventListener("keydown", (e) => { if (e.key === "Enter") digit(); });
  $("kernel-upload").addEventListener("click", () => $("kernel-file").click());
  $("kernel-file").addEventListener("change", () => {
    const file = $("kernel-file").files[0];
    $("kernel-file").value = "";
    if (file) loadImage(() => fromFile(file, state.maxSide));
  });
}
