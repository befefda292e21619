// Try it: draw (mouse, touch, pen: Pointer Events), upload a photo or pick a test image by
// index; the current model (the one training, or the last one trained) classifies it, the
// probabilities of each of the model's outputs shown as bars, named by the dataset's classes
// (a model with more outputs than the dataset has classes: the extra ones by their number,
// said to be no class of it; they still take their share of the 100%). The input has the
// chosen dataset's sample shape [C, H, W] (grey or RGB), read from the drawing as
// drawn-sample.js says (MNIST's preprocessing for 1x28x28). Worker message: `predict {id,
// pixels (C*H*W uint8, planar) | index}` -> `prediction {id, probs, index, label, model, step,
// untrained}` (worker/views.py). One request in flight: every answer that arrives is shown (the
// latest one), "updating…" while one is on its way, and the input changed meanwhile is asked
// next. Before any run the model's initial weights answer (web/page/prepare.js), said untrained.
// The Results panel's `pick-test-image` event (detail: index) shows that test image here,
// scrolled into view.
// Test hook: window.tryState {probs, input (C*H*W values), source, index, step, untrained,
// requests, answers, inFlight (the id on its way, 0: none)}.

import { $, el } from "../lib/util.js";
import { appState } from "./state.js";
import { activeTab, showTab } from "./tabs.js";
import { drawSample, knownCount, testImages } from "./testset.js";
import { classNames, datasetName } from "./dataset.js";
import { canvasSample, isMnistShape, shapeWords } from "./drawn-sample.js";
import { modelReady, prepareNote } from "./prepare.js";

const SIDE = 28;            // MNIST's image side
const CANVAS = 280;         // the drawing canvas' backing store (10 px per MNIST pixel)
const PEN = 22;             // stroke width on it (about 2 MNIST pixels after fitting)
const DEBOUNCE_MS = 120;    // while drawing
const REFRESH_MS = 3000;    // re-classify while the model trains and the panel is open
const RETRY_MS = 1000;      // ask again while the run's model is being set up
const LOST_MS = 60_000;     // a request unanswered this long is lost (a worker restarted)

let send = () => {};
let seq = 0;
let inFlight = 0;           // id of the request on its way (0: none)
let sentAt = 0;
let opening = false;        // the Results panel opens this tab on an image: no other pick
let again = false;          // the input changed while one was on its way: ask once it is back
let current = null;         // what is shown: {pixels} (drawn) or {index} (test image)
let typed = 0;              // keystrokes in the index field (a pending pick yields to them)
let debounce = null;
const state = { probs: null, input: null, source: null, index: null, step: null,
  untrained: false, requests: 0, answers: 0, inFlight: 0 };
window.tryState = state;

/** The chosen dataset's sample shape [C, H, W] (MNIST's before the list is there). */
const shape = () => {
  const s = appState.dataset?.sample_shape;
  return s?.length === 3 ? s : [1, SIDE, SIDE];
};

function seesText() {
  if (isMnistShape(shape())) return "What the model sees (28 × 28, ink 255 on 0, as MNIST):";
  return `What the model sees (${shapeWords(shape())}${shape()[0] === 3 ? "" : ", ink 255 on 0"}):`;
}

/** True when the dataset's classes are the digits 0-9 (MNIST, or one like it). */
const digits = () => classNames().join() === "0,1,2,3,4,5,6,7,8,9";

/** What to draw, in the dataset's words: "a digit (0–9)" only for digits. */
function drawText() {
  if (digits()) return "Draw a digit (0–9) in the box, or upload a photo:";
  const names = classNames();
  const some = names.slice(0, 3).join(", ") + (names.length > 3 ? ", …" : "");
  const title = appState.dataset?.title ?? datasetName();
  return `Draw one of the ${names.length} classes of ${title} (${some}) in the box, or upload a ` +
    `photo${shape()[0] === 3 ? " (in colour)" : ""}:`;
}

/** The probability rows: one per model output (``k``; the dataset's classes before an
 * answer), named by the dataset's class names; outputs beyond them by their number. */
function probRows(k = classNames().length) {
  const names = classNames();
  const rows = Array.from({ length: Math.max(k, 1) }, (_, i) => names[i] ?? `output ${i}`);
  const longest = Math.max(...rows.map((n) => n.length));
  // one name column for every row (the bars line up), at most 12em (longer names cut: …)
  $("try-probs").style.setProperty("--name-w", `${Math.min(12, Math.max(1.4, 0.7 * longest))}em`);
  $("try-probs").replaceChildren(...rows.map((name, i) => el("li", {
    className: i < names.length ? "prob" : "prob extra" },
  el("span", { className: "prob-digit", textContent: name,
    title: i < names.length ? name : `no class of ${datasetName()}` }),
  el("span", { className: "prob-track" }, el("span", { className: "prob-bar" })),
  el("span", { className: "prob-val", textContent: "–" }))));
  const extra = k - names.length;
  $("try-extra").hidden = extra <= 0;
  const which = extra === 1 ? `output ${k - 1} is` : `outputs ${names.length}–${k - 1} are`;
  $("try-extra").textContent = extra <= 0 ? "" : `This model has ${k} outputs and ` +
    `${datasetName()} ${names.length} classes: ${which} no class of it (training pushes ` +
    `${extra === 1 ? "it" : "them"} towards 0%).`;
}

function build() {
  const panel = $("panel-try");
  const canvas = el("canvas", { id: "try-canvas", width: CANVAS, height: CANVAS,
    role: "img", "aria-label": "drawing area: draw with the mouse, a finger or a pen" });
  const index = el("input", { type: "number", id: "try-index", min: 0, value: 0, step: 1,
    inputMode: "numeric" });
  const probs = el("ol", { id: "try-probs", className: "probs", start: 0,
    "aria-label": "class probabilities" });
  panel.append(el("section", { className: "card try-card", "aria-labelledby": "try-title" },
    el("div", { className: "card-head" }, el("h2", { id: "try-title", textContent: "Try it" }),
      // shown by visibility: the layout never moves under a click
      el("span", { id: "try-updating", className: "sub try-updating", textContent: "updating…" }),
      el("span", { id: "try-model", className: "sub" })),
    el("p", { id: "try-status", className: "hint", role: "status" }),
    el("div", { className: "try-grid" },
      el("div", { className: "try-draw" },
        el("p", { className: "hint", id: "try-draw-hint" }), canvas,
        el("div", { className: "try-tools" },
          el("button", { type: "button", id: "try-clear", className: "btn small",
            textContent: "Clear" }),
          el("button", { type: "button", id: "try-photo", className: "btn small",
            textContent: "Upload a photo" }),
          el("input", { type: "file", id: "try-photo-file", accept: "image/*", hidden: true }),
          el("label", { htmlFor: "try-index", textContent: "or test image #" }), index,
          el("button", { type: "button", id: "try-prev", className: "btn small",
            textContent: "◀ Prev", title: "previous test image" }),
          el("button", { type: "button", id: "try-next", className: "btn small",
            textContent: "Next ▶", title: "next test image" }))),
      el("div", { className: "try-out" },
        el("p", { className: "hint", id: "try-sees" }),
        el("canvas", { id: "try-input", className: "pixelated digit-big", width: SIDE, height: SIDE,
          role: "img", "aria-label": "the preprocessed input" }),
        el("p", { id: "try-source", className: "hint" }),
        el("h3", { textContent: "Probabilities" }), probs,
        el("p", { id: "try-extra", className: "hint", hidden: true })))));
  clearCanvas();
  setupDrawing(canvas);
  followDataset();
  $("try-photo").addEventListener("click", () => $("try-photo-file").click());
  $("try-photo-file").addEventListener("change", (ev) => {
    const file = ev.target.files[0];
    ev.target.value = "";
    if (file) loadPhoto(file);
  });
  $("try-clear").addEventListener("click", () => {
    clearCanvas();
    current = null;
    show(null);
  });
  // typing supersedes a pick still waiting for the test set (it would overwrite the field)
  index.addEventListener("input", () => { typed++; });
  index.addEventListener("change", () => pick(Number(index.value)));
  $("try-prev").addEventListener("click", () => pick(Number(index.value) - 1));
  $("try-next").addEventListener("click", () => pick(Number(index.value) + 1));
  $("try-status").textContent = statusText();
}

/** The chosen dataset's texts, probability rows and an empty input. */
function followDataset() {
  $("try-draw-hint").textContent = drawText();
  $("try-sees").textContent = seesText();
  probRows();
  clearCanvas();
  current = null;
  show(null);
}

/** A photo: its centre square drawn on the drawing canvas, then classified. */
async function loadPhoto(file) {
  let bitmap;
  try {
    bitmap = await createImageBitmap(file);
  } catch (e) {
    $("try-status").textContent = `${file.name} is not an image this browser decodes ` +
      `(${e.message ?? e})`;
    return;
  }
  const side = Math.min(bitmap.width, bitmap.height);
  const ctx = $("try-canvas").getContext("2d");
  clearCanvas();
  ctx.imageSmoothingEnabled = true;
  ctx.imageSmoothingQuality = "high";
  ctx.drawImage(bitmap, (bitmap.width - side) / 2, (bitmap.height - side) / 2, side, side,
    0, 0, CANVAS, CANVAS);
  bitmap.close();
  classifyDrawing(file.name);
}

function statusText() {
  return prepareNote();
}

function clearCanvas() {
  const ctx = $("try-canvas").getContext("2d");
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, CANVAS, CANVAS);
}

function setupDrawing(canvas) {
  const ctx = canvas.getContext("2d");
  let last = null;
  const at = (ev) => {
    const r = canvas.getBoundingClientRect();
    return [(ev.clientX - r.left) * CANVAS / r.width, (ev.clientY - r.top) * CANVAS / r.height];
  };
  const line = (from, to) => {
    Object.assign(ctx,
      { strokeStyle: "#000", lineWidth: PEN, lineCap: "round", lineJoin: "round" });
    ctx.beginPath();
    ctx.moveTo(...from);
    ctx.lineTo(...to);
    ctx.stroke();
  };
  canvas.addEventListener("pointerdown", (ev) => {
    ev.preventDefault();
    canvas.setPointerCapture(ev.pointerId);
    if (current && current.index != null) clearCanvas();  // a test image was shown: start over
    last = at(ev);
    line(last, last);
    changed();
  });
  canvas.addEventListener("pointermove", (ev) => {
    if (!last) return;
    for (const e of ev.getCoalescedEvents?.() ?? [ev]) {
      const p = at(e);
      line(last, p);
      last = p;
    }
    changed();
  });
  const end = () => {
    if (!last) return;
    last = null;
    clearTimeout(debounce);
    classifyDrawing();
  };
  canvas.addEventListener("pointerup", end);
  canvas.addEventListener("pointercancel", end);
}

function changed() {
  clearTimeout(debounce);
  debounce = setTimeout(classifyDrawing, DEBOUNCE_MS);
}

function classifyDrawing(photo = null) {
  const pixels = canvasSample($("try-canvas"), shape());
  current = pixels ? { pixels } : null;
  show(pixels);
  if (pixels) {
    $("try-source").textContent = photo ? `your photo ${photo}` : "your drawing";
    classify();
  }
}

/** Show test image `index` (clamped to the test set) and classify it; typing in the index field
 * while the test set loads supersedes this pick (it would overwrite what was typed). */
export async function pick(index) {
  const keys = typed;
  // clamped to the test split (its size known after the worker's first answer)
  const clamp = (i) => Math.max(0, Math.min((knownCount() ?? Infinity) - 1,
    Math.floor(Number(i) || 0)));
  let set;
  try {
    index = clamp(index);
    try {
      set = await testImages([index]);
    } catch (e) {  // past the end of a split not seen before: the last image
      if (!(e instanceof RangeError)) throw e;
      index = clamp(index);
      set = await testImages([index]);
    }
  } catch (e) {
    $("try-status").textContent = `Could not load the test images: ${e.message ?? e}`;
    return;
  }
  if (keys !== typed) return;
  $("try-index").max = set.count - 1;
  $("try-index").value = index;
  const pixels = set.images[0];
  current = { index };
  show(pixels);
  // the test image on the drawing canvas too, as drawn there (grey: dark ink on white)
  const ink = document.createElement("canvas");
  drawSample(ink, pixels, set.shape, { dark: true });
  const ctx = $("try-canvas").getContext("2d");
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(ink, 0, 0, CANVAS, CANVAS);
  $("try-source").textContent = `test image #${index}, labelled ` +
    `${set.classes[set.labels[0]] ?? set.labels[0]}`;
  classify();
}

function show(pixels) {
  state.input = pixels ? Array.from(pixels) : null;
  if (pixels) drawSample($("try-input"), pixels, shape());
  else {
    const c = $("try-input");
    c.getContext("2d").clearRect(0, 0, c.width, c.height);
    $("try-source").textContent = "";
    render(null);
  }
}

/** Ask the model about the current input: at once when nothing is on its way, else once the
 * answer on its way is back (one request in flight). */
function classify() {
  if (!current) return;
  if (!modelReady()) {  // before any run: the initial weights are being set up
    $("try-status").textContent = statusText();
    return;
  }
  if (inFlight && performance.now() - sentAt < LOST_MS) {
    again = true;
    return;
  }
  again = false;
  const msg = current.index != null ? { index: current.index }
    : { pixels: Array.from(current.pixels) };
  inFlight = state.inFlight = ++seq;
  sentAt = performance.now();
  state.requests++;
  $("try-updating").classList.add("on");
  send({ type: "predict", id: inFlight, ...msg });
}

/** The worker's `prediction`: shown whatever it answered (the latest answer received). */
export function onPrediction(m) {
  if (m.id !== inFlight) return;  // not ours (a worker restarted meanwhile)
  inFlight = state.inFlight = 0;
  $("try-updating").classList.remove("on");
  if (m.pending) {  // the run's model is being set up: ask again soon
    $("try-status").textContent = m.error;
    setTimeout(classify, RETRY_MS);
    return;
  }
  state.answers++;
  if (m.error) {
    $("try-status").textContent = m.error;
    render(null);
  } else {
    $("try-status").textContent = m.untrained ? "Untrained: these are the initial weights’ " +
      `guesses (about 1 in ${classNames().length} right). Press Start to train the model; ` +
      "it answers here, live." : "";
    $("try-model").textContent = m.untrained ? `${m.model}, initial weights (untrained)`
      : `${m.model} after step ${m.step}` + (appState.phase === "training" ? " (training)" : "");
    Object.assign(state, { probs: m.probs, source: m.index != null ? "test" : "drawn",
      index: m.index, step: m.step, untrained: !!m.untrained });
    if (m.probs.length !== $("try-probs").children.length) probRows(m.probs.length);
    render(m.probs);
  }
  if (again) classify();
}

function render(probs) {
  const best = probs ? probs.indexOf(Math.max(...probs)) : -1;
  $("try-probs").querySelectorAll("li").forEach((li, d) => {
    const p = probs ? probs[d] : 0;
    li.classList.toggle("best", d === best);
    li.querySelector(".prob-bar").style.width = `${(100 * p).toFixed(1)}%`;
    li.querySelector(".prob-val").textContent = probs ? `${(100 * p).toFixed(1)}%` : "–";
  });
  if (!probs) state.probs = null;
}

/** Build Try it into #panel-try; `post(msg)` sends a message to the worker. */
export function setupTryIt(post) {
  send = post;
  build();
  document.addEventListener("pick-test-image", async (ev) => {
    opening = true;
    showTab("try");
    opening = false;
    await pick(ev.detail);
    // the chosen image where the eye is: the drawing canvas and the probabilities in view
    $("try-canvas").scrollIntoView({ block: "center" });
  });
  document.addEventListener("tabchange", (ev) => {
    if (ev.detail !== "try" || opening) return;
    $("try-status").textContent = statusText();
    if (!current) pick(Number($("try-index").value));  // a test image from the start
    else classify();
  });
  document.addEventListener("dataset-changed", () => {
    followDataset();
    if (activeTab() === "try") pick(Number($("try-index").value));
  });
  document.addEventListener("model-prepared", () => {
    if (activeTab() !== "try") return;
    $("try-status").textContent = statusText();
    classify();
  });
  setInterval(() => {
    if (activeTab() === "try" && appState.phase === "training" && !inFlight) classify();
  }, REFRESH_MS);
}
