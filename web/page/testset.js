// The test images the page shows (Kernels, Try it, the Results' wrong guesses) come from the
// worker, which holds the run's test split already (the run's, or the one `prepare` loaded for
// the current settings): a `test_images {id, indices}` message answered by `test_images`
// (worker/views.py). The page does not download a split the worker holds
// (tests/test_page_testset.py counts the requests); only when the worker holds none for the
// chosen dataset (the model does not fit it, no WebGPU) it fetches it (testset-fetch.js).
// Also here: drawing a sample on a canvas.

import { appState } from "./state.js";
import { modelReady, prepareNote } from "./prepare.js";
import { post } from "./worker-link.js";
import { datasetName } from "./dataset.js";
import { fetchTestImages, forgetFetched } from "./testset-fetch.js";

const RETRY_MS = 250;        // between two looks while the worker sets its model up
const WAIT_MS = 300_000;     // the longest wait for the worker's model (a slow dataset download)
const waiting = new Map();   // request id -> resolve
let seq = 0;
let knownCount_ = null;       // the test split's size from the last answer

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Wait until the worker has a model (a run's, or the one prepared for the current
 *  settings): true; false when it will have none (no WebGPU, the chosen model does not fit
 *  the chosen dataset: `prepare` failed before any shard came); an Error after WAIT_MS. */
async function workerModel(deadline) {
  while (!modelReady()) {
    const p = appState.prepared;
    if (appState.noWebGPU || (p && !p.busy && p.error)) return false;
    if (performance.now() > deadline) {
      throw new Error(prepareNote() || "the engine has no model to read test images from");
    }
    await sleep(RETRY_MS);
  }
  return true;
}

function ask(indices) {
  const id = ++seq;
  return new Promise((resolve) => {
    waiting.set(id, resolve);
    post({ type: "test_images", id, indices });
  });
}

/** The worker's `test_images` answer (worker/views.py). */
export function onTestImages(m) {
  const resolve = waiting.get(m.id);
  if (!resolve) return;
  waiting.delete(m.id);
  resolve(m);
}

/** Test images ``indices`` of the worker's dataset: `{name, title, kind, count, shape: [C, H,
 *  W] (or [F]), classes, labels: [one per index], images: [Uint8Array per index]}`. Rejects
 *  with a RangeError naming the valid range for an index outside the split, else an Error
 *  saying what went wrong. */
export async function testImages(indices) {
  const bad = indices.find((i) => !Number.isInteger(i) || i < 0);
  if (bad !== undefined) throw new RangeError(rangeText(knownCount_));
  const deadline = performance.now() + WAIT_MS;
  for (;;) {
    if (!await workerModel(deadline)) return fetchTestImages(datasetName(), indices);
    const m = await ask(indices);
    if (m.count != null) knownCount_ = m.count;
    if (!m.error) return unpack(m);
    if (m.count != null && m.error.startsWith("ValueError: test image index")) {
      throw new RangeError(rangeText(m.count));
    }
    if (!m.pending || performance.now() > deadline) throw new Error(m.error);
    await sleep(RETRY_MS);
  }
}

/** The worker's test split's size from the last answer (null before one). */
export const knownCount = () => knownCount_;

const rangeText = (count) =>
  count ? `pick a test image from 0 to ${count - 1}` : "pick a test image number from 0 up";

function unpack(m) {
  const size = m.images.length / m.indices.length;
  const images = m.indices.map((_, k) => m.images.subarray(k * size, (k + 1) * size));
  return { name: m.dataset, title: m.title, kind: m.dataset_kind, count: m.count,
    shape: m.sample_shape, classes: m.classes, labels: m.labels, images };
}

/** Dataset ``name`` was prepared again: a model prepared on its old images is set up anew
 *  before the next look (the worker holds the old test split until then). */
export function forgetTestSet(name) {
  if (appState.prepared && !appState.prepared.busy) appState.prepared = null;
  forgetFetched(name);
}

/** Draw uint8 `pixels` of `shape` [C, H, W] (C 1 or 3, planar as the shards store them;
 *  default: a square grey image) on `canvas` (an H x W backing store, scaled by CSS): as the
 *  dataset stores it (what the model sees; MNIST: light ink on black), or with `dark` a grey
 *  image inverted (dark ink on white, as people write). */
export function drawSample(canvas, pixels, shape = null, { dark = false } = {}) {
  const side = Math.round(Math.sqrt(pixels.length));
  const [c, h, w] = shape?.length === 3 ? shape : [1, side, side];
  canvas.width = w;
  canvas.height = h;
  const ctx = canvas.getContext("2d");
  const img = ctx.createImageData(w, h);
  const plane = h * w;
  for (let i = 0; i < plane; i++) {
    if (c === 3) {
      img.data.set([pixels[i], pixels[plane + i], pixels[2 * plane + i], 255], 4 * i);
    } else {
      const v = dark ? 255 - pixels[i] : pixels[i];
      img.data.set([v, v, v, 255], 4 * i);
    }
  }
  ctx.putImageData(img, 0, 0);
}

/** Draw a square grey image (MNIST's 28x28); see drawSample. */
export function drawDigit(canvas, pixels, opts = {}) {
  drawSample(canvas, pixels, null, opts);
}
