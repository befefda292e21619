// The chosen dataset's test split on the page (the live views, Try it, Results and Kernels show
// its images): the manifest and the test images / labels shards of /data/<name>/, fetched once
// per dataset, lazily (again after the dataset is replaced: forgetTestSet).

import { datasetName } from "./dataset.js";

const pending = new Map();  // dataset name -> the promise of its test set

/** `{name, images: Uint8Array [count * pixels], labels: Uint8Array [count], count, pixels,
 *  shape: [C, H, W] (or [F]), classes}` of dataset ``name`` (default: the chosen one);
 *  fetched once (a failed fetch is retried on the next call). Rejects with an Error naming
 *  the file. */
export function testSet(name = datasetName()) {
  if (!pending.has(name)) {
    pending.set(name, load(name).catch((e) => {
      pending.delete(name);
      throw e;
    }));
  }
  return pending.get(name);
}

/** Forget dataset ``name``'s test set (it was prepared again): the next call fetches it. */
export function forgetTestSet(name) {
  pending.delete(name);
}

async function fetchBytes(url, what) {
  const res = await fetch(url);
  if (!res.ok) throw new Error(`${what}: HTTP ${res.status} from ${url}`);
  return new Uint8Array(await res.arrayBuffer());
}

async function load(name) {
  const base = `/data/${encodeURIComponent(name)}`;
  const res = await fetch(`${base}/manifest.json`);
  if (!res.ok) throw new Error(`${name} manifest: HTTP ${res.status}`);
  const manifest = await res.json();
  if (manifest.kind === "tokens") {
    throw new Error(`${name} holds token ids: the page shows only images or features ` +
      `(train it with \`webgpu-trainer train MODEL.onnx --data ${name}\`)`);
  }
  const test = manifest.splits.test;
  const [images, labels] = await Promise.all([
    fetchBytes(`${base}/${test.images.file}`, "test images"),
    fetchBytes(`${base}/${test.labels.file}`, "test labels")]);
  const old = manifest.format === "webgpu-trainer/mnist@1";
  const shape = old ? [1, 28, 28] : manifest.sample_shape;
  const classes = old ? Array.from({ length: 10 }, (_, i) => String(i)) : manifest.classes;
  const pixels = shape.reduce((a, b) => a * b, 1);
  return { name, images, labels, count: test.count, pixels, shape, classes };
}

/** The pixels of test image `index` (a view into the shard). */
export function imageOf(set, index) {
  return set.images.subarray(index * set.pixels, (index + 1) * set.pixels);
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
