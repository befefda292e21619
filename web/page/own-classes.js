// "Make your own classes" (issue 18, "In the page"): name 2-10 classes, add examples by
// drawing on a canvas or by webcam snapshots (the camera buttons only where
// navigator.mediaDevices.getUserMedia exists), the count per class shown; Prepare reads each
// example as the chosen model's input [C, H, W] (grey or RGB, square: e.g. 28x28 grey for
// SeedNet, 32x32 RGB for seednet-rgb32) the way Try it reads a drawing (drawn-sample.js), zips
// them in the page (PNG files in one folder per class, fflate) and sends them through the drop
// zone's upload (dataset-upload.js) at that size and colour, so what is drawn in Try it after
// training looks to the model like what it learnt from. The examples are kept as drawn (a
// canvas each) until Prepare: a model chosen meanwhile gets them in its shape.

import { zip } from "/vendor/fflate/browser.js";
import { $, el } from "../lib/util.js";
import { uploadDataset, useNewDataset } from "./dataset-upload.js";
import { graphOf } from "./dataset.js";
import { canvasSample, samplePng, shapeWords } from "./drawn-sample.js";

const MIN_CLASSES = 2;
const MAX_CLASSES = 10;
const MIN_EXAMPLES = 2;  // one for the test split (the server's rule)
const SIDE = 140;        // the drawing canvas (prepared at the model's input size)
const FALLBACK = [1, 28, 28];  // before the model's graph is known

let classes = [];        // [{name, examples: [OffscreenCanvas SIDE x SIDE, as drawn]}]
let stream = null;       // the webcam's MediaStream while on

const MARKUP = `
<div id="own-list" class="own-list"></div>
<button type="button" class="btn small" id="own-add-class">Add a class</button>
<div class="own-draw">
  <canvas id="own-canvas" width="${SIDE}" height="${SIDE}"
          aria-label="Draw an example of the chosen class"></canvas>
  <video id="own-video" width="${SIDE}" height="${SIDE}" muted playsinline hidden></video>
  <div class="own-buttons">
    <label>Class <select id="own-target"></select></label>
    <button type="button" class="btn small" id="own-add">Add drawing</button>
    <button type="button" class="btn small" id="own-clear">Clear</button>
    <button type="button" class="btn small" id="own-camera" hidden>Use the camera</button>
    <button type="button" class="btn small" id="own-snap" hidden>Snapshot</button>
  </div>
</div>
<p class="hint" id="own-shape"></p>
<label>Name <input id="own-name" type="text" maxlength="40" value="my-classes"
  spellcheck="false"></label>
<button type="button" class="btn primary small" id="own-prepare">Prepare</button>
<progress id="own-progress" class="dsu-progress" max="1" hidden></progress>
<p class="fit-error" id="own-error" role="alert" hidden></p>
<p class="hint" id="own-status" role="status" aria-live="polite"></p>`;

function clearCanvas() {
  const ctx = $("own-canvas").getContext("2d");
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, SIDE, SIDE);
}

/** The class rows (name inputs, counts, remove buttons) and the target select. */
function render() {
  const target = $("own-target");
  const was = target.selectedIndex;
  $("own-list").replaceChildren(...classes.map((c, i) => el("div", { className: "own-row" },
    el("input", { type: "text", value: c.name, maxLength: 40, "aria-label": `class ${i + 1}`,
      className: "own-class-name", oninput: (e) => { c.name = e.target.value; names(); } }),
    el("span", { className: "own-count", textContent:
      `${c.examples.length} example${c.examples.length === 1 ? "" : "s"}` }),
    el("button", { type: "button", className: "btn small", textContent: "×",
      title: "Remove this class", disabled: classes.length <= MIN_CLASSES,
      onclick: () => { classes.splice(i, 1); render(); } }))));
  $("own-add-class").disabled = classes.length >= MAX_CLASSES;
  names();
  target.selectedIndex = Math.min(Math.max(was, 0), classes.length - 1);
}

function names() {
  const target = $("own-target");
  const at = target.selectedIndex;
  target.replaceChildren(...classes.map((c, i) => new Option(c.name || `class ${i + 1}`, i)));
  target.selectedIndex = Math.max(at, 0);
}

/** True when ``canvas`` is all white (nothing drawn). */
function blank(canvas) {
  const px = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  return px.every((v) => v === 255);
}

/** Add ``canvas`` (a drawing, dark on white, or a snapshot) to the chosen class, a copy as
 * drawn; false when it is blank. The class and the pixels are taken at once: a class chosen
 * or a stroke drawn meanwhile belongs to the next example. */
function addExample(canvas) {
  if (blank(canvas)) return false;
  const copy = new OffscreenCanvas(SIDE, SIDE);
  copy.getContext("2d").drawImage(canvas, 0, 0, SIDE, SIDE);
  classes[$("own-target").selectedIndex].examples.push(copy);
  render();
  return true;
}

/** The chosen model's input as a [C, H, W] image shape (a flat [N, S*S]: 1xSxS), or an Error
 * naming the model and its input when it is no square grey or RGB image. */
export async function modelShape(model = $("model").value) {
  let g;
  try {
    g = await graphOf(model);
  } catch {
    return FALLBACK;  // the model list says why it does not load; Prepare as SeedNet's
  }
  const dims = g.inputs[0].shape.slice(1);
  const side = Math.sqrt(dims[0]);
  const image = dims.length === 1 && Number.isInteger(side) ? [1, side, side] : dims;
  if (image.length === 3 && [1, 3].includes(image[0]) && image[1] === image[2] &&
      Number.isInteger(image[1]) && image[1] >= 8 && image[1] <= 256) return image;
  return new Error(`Model ${model}: input '${g.inputs[0].name}' [N, ${dims.join(", ")}] is ` +
    "no square grey or RGB image (own classes are drawn images): choose another model.");
}

/** Say the shape the examples will be prepared at (the chosen model's input). */
async function showShape() {
  const model = $("model").value;
  const shape = await modelShape(model);
  if (model !== $("model").value) return;  // another model was chosen meanwhile
  $("own-shape").textContent = shape instanceof Error ? shape.message
    : model ? `Prepared as ${shapeWords(shape)}: the input of model ${model}.` : "";
}

/** Draw strokes with the mouse, pen or finger (pointer events). */
function wireCanvas(canvas) {
  const ctx = canvas.getContext("2d");
  let down = false;
  const at = (e) => {
    const r = canvas.getBoundingClientRect();
    return [(e.clientX - r.left) * SIDE / r.width, (e.clientY - r.top) * SIDE / r.height];
  };
  canvas.addEventListener("pointerdown", (e) => {
    down = true;
    canvas.setPointerCapture?.(e.pointerId);
    ctx.beginPath();
    ctx.moveTo(...at(e));
  });
  canvas.addEventListener("pointermove", (e) => {
    if (!down) return;
    Object.assign(ctx, { lineWidth: SIDE / 12, lineCap: "round", strokeStyle: "#000" });
    ctx.lineTo(...at(e));
    ctx.stroke();
  });
  const up = () => { down = false; };
  canvas.addEventListener("pointerup", up);
  canvas.addEventListener("pointerleave", up);
}

async function camera() {
  const video = $("own-video");
  if (stream) {
    for (const t of stream.getTracks()) t.stop();
    stream = null;
    video.hidden = $("own-snap").hidden = true;
    $("own-canvas").hidden = false;
    $("own-camera").textContent = "Use the camera";
    return;
  }
  try {
    stream = await navigator.mediaDevices.getUserMedia({ video: true });
  } catch (e) {
    showError(`The camera did not start: ${e.message ?? e}`);
    return;
  }
  video.srcObject = stream;
  await video.play();
  video.hidden = $("own-snap").hidden = false;
  $("own-canvas").hidden = true;
  $("own-camera").textContent = "Back to drawing";
}

/** A snapshot of the webcam: its centre square, as a SIDE x SIDE canvas. */
function snapshot() {
  const video = $("own-video");
  const s = Math.min(video.videoWidth, video.videoHeight);
  const c = el("canvas", { width: SIDE, height: SIDE });
  c.getContext("2d").drawImage(video, (video.videoWidth - s) / 2, (video.videoHeight - s) / 2,
    s, s, 0, 0, SIDE, SIDE);
  return addExample(c);  // a photo: the whole square is its "ink" box
}

function showError(text) {
  $("own-error").textContent = text ?? "";
  $("own-error").hidden = !text;
}

/** Why the classes cannot be prepared yet, or null. */
export function ownProblem(list) {
  const named = list.map((c) => c.name.trim());
  if (named.some((n) => !n)) return "Give every class a name.";
  const dup = named.find((n, i) => named.indexOf(n) !== i);
  if (dup) return `Two classes are named ${JSON.stringify(dup)}: rename one.`;
  if (named.some((n) => /[/\\]|^\.+$/.test(n))) return "A class name may not hold / or \\.";
  const few = list.find((c) => c.examples.length < MIN_EXAMPLES);
  if (few) return `Class ${few.name} has ${few.examples.length} of the ${MIN_EXAMPLES} ` +
    "examples every class needs: add more.";
  return null;
}

async function prepare() {
  showError(null);
  const problem = ownProblem(classes);
  if (problem) return showError(problem);
  const shape = await modelShape();
  if (shape instanceof Error) return showError(shape.message);
  const tree = {};
  for (const c of classes) {
    for (const [i, drawn] of c.examples.entries()) {
      const sample = canvasSample(drawn, shape);
      if (sample) tree[`${c.name.trim()}/${i + 1}.png`] = await samplePng(sample, shape);
    }
  }
  const body = await new Promise((resolve, reject) => zip(tree, { level: 0 }, (err, d) =>
    (err ? reject(err) : resolve(d))));
  const name = $("own-name").value.trim();
  $("own-prepare").disabled = true;
  try {
    const answer = await uploadDataset(new Blob([body]), { name, size: shape[1],
      color: shape[0] === 3 ? "rgb" : "grey", test: 0.2, title: name },
    { bar: $("own-progress"), text: $("own-status") });
    $("own-status").textContent = await useNewDataset(answer, { keepModel: true });
  } catch (e) {
    $("own-status").textContent = "";
    showError(e.message ?? String(e));
  } finally {
    $("own-prepare").disabled = false;
  }
}

/** Draw the panel into #own-classes and wire it (two classes to start). */
export function setupOwnClasses() {
  $("own-classes").innerHTML = MARKUP;
  classes = [{ name: "circle", examples: [] }, { name: "cross", examples: [] }];
  clearCanvas();
  wireCanvas($("own-canvas"));
  render();
  $("own-add-class").addEventListener("click", () => {
    classes.push({ name: `class-${classes.length + 1}`, examples: [] });
    render();
  });
  $("own-add").addEventListener("click", () => {
    const added = addExample($("own-canvas"));
    clearCanvas();
    showError(added ? null : "Draw something first.");
  });
  $("own-clear").addEventListener("click", clearCanvas);
  $("own-camera").hidden = !navigator.mediaDevices?.getUserMedia;
  $("own-camera").addEventListener("click", camera);
  $("own-snap").addEventListener("click", snapshot);
  $("own-prepare").addEventListener("click", prepare);
  document.addEventListener("model-changed", showShape);  // the model list loads later
}
