// The fallback of testset.js when the worker holds no test split for the chosen dataset: the
// chosen model does not fit it (`prepare` refused it before downloading any shard) or there is
// no WebGPU. Then, and only then, the page fetches the split itself (once per dataset).

const pending = new Map();  // dataset name -> the promise of its test set

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
  return { name, title: manifest.title ?? name, kind: manifest.kind ?? "image", images, labels,
    count: test.count, shape, classes, pixels: shape.reduce((a, b) => a * b, 1) };
}

/** Test images ``indices`` of dataset ``name`` fetched by the page, in testImages' form;
 *  a RangeError naming the valid range for an index outside the split. */
export async function fetchTestImages(name, indices) {
  if (!pending.has(name)) {
    pending.set(name, load(name).catch((e) => {
      pending.delete(name);
      throw e;
    }));
  }
  const set = await pending.get(name);
  if (indices.some((i) => i >= set.count)) {
    throw new RangeError(`pick a test image from 0 to ${set.count - 1}`);
  }
  const { images, labels, pixels, ...rest } = set;
  return { ...rest, labels: indices.map((i) => labels[i]),
    images: indices.map((i) => images.subarray(i * pixels, (i + 1) * pixels)) };
}

/** Forget dataset ``name``'s fetched test set (it was prepared again). */
export function forgetFetched(name) {
  pending.delete(name);
}
