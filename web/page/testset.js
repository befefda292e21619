// The MNIST test split on the page (the live views, Try it, Results and Kernels show its
// images): the shard manifest and the test images / labels shards, fetched once, lazily.

let pending = null;

/** `{images: Uint8Array [count * 784], labels: Uint8Array [count], count, pixels}`; fetched
 *  once (a failed fetch is retried on the next call). Rejects with an Error naming the file. */
export function testSet() {
  if (!pending) {
    pending = load().catch((e) => {
      pending = null;
      throw e;
    });
  }
  return pending;
}

async function fetchBytes(url, what) {
  const res = await fetch(url);
  if (!res.ok) throw new Error(`${what}: HTTP ${res.status} from ${url}`);
  return new Uint8Array(await res.arrayBuffer());
}

async function load() {
  const res = await fetch("/data/mnist/manifest.json");
  if (!res.ok) throw new Error(`MNIST manifest: HTTP ${res.status}`);
  const test = (await res.json()).splits.test;
  const [images, labels] = await Promise.all([
    fetchBytes(`/data/mnist/${test.images.file}`, "test images"),
    fetchBytes(`/data/mnist/${test.labels.file}`, "test labels")]);
  const pixels = test.images.shape.slice(1).reduce((a, b) => a * b, 1);
  return { images, labels, count: test.count, pixels };
}

/** The pixels of test image `index` (a view into the shard). */
export function imageOf(set, index) {
  return set.images.subarray(index * set.pixels, (index + 1) * set.pixels);
}

/** Draw 28x28 uint8 `pixels` (0 = background) on `canvas` (28x28 backing store, scaled by
 *  CSS): light ink on black as MNIST stores it (what the model sees), or with `dark` dark ink
 *  on white as people write. */
export function drawDigit(canvas, pixels, { dark = false } = {}) {
  const side = Math.round(Math.sqrt(pixels.length));
  canvas.width = canvas.height = side;
  const ctx = canvas.getContext("2d");
  const img = ctx.createImageData(side, side);
  for (let i = 0; i < pixels.length; i++) {
    const v = dark ? 255 - pixels[i] : pixels[i];
    img.data.set([v, v, v, 255], 4 * i);
  }
  ctx.putImageData(img, 0, 0);
}
