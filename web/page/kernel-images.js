// The kernels playground's images (web/page/kernels.js): a synthetic pattern drawn on a canvas, a
// test image of the worker's dataset (testset.js: the split the worker holds), or a user's
// image file; each as
// greyscale float32 pixels in [0, 1], row-major, what the kernel convolves: {width, height,
// pixels, note}, and a colour image's RGBA bytes to show (``rgba``, absent for grey images).

import { testImages } from "./testset.js";

/** Greyscale of RGBA bytes: Rec. 601 luma (0.299 R + 0.587 G + 0.114 B) / 255. */
function greyscale(rgba, width, height) {
  const px = new Float32Array(width * height);
  for (let i = 0; i < px.length; i++) {
    px[i] = (0.299 * rgba[4 * i] + 0.587 * rgba[4 * i + 1] + 0.114 * rgba[4 * i + 2]) / 255;
  }
  return px;
}

function canvasPixels(canvas) {
  return greyscale(canvasRgba(canvas), canvas.width, canvas.height);
}

function canvasRgba(canvas) {
  const ctx = canvas.getContext("2d", { willReadFrequently: true });
  return ctx.getImageData(0, 0, canvas.width, canvas.height).data;
}

/** A 192 x 128 test pattern: a checkerboard, a disc, a ring and a gradient bar (edges in every
 * direction, flat areas, a smooth ramp). */
export function pattern() {
  const width = 192, height = 128;
  const c = Object.assign(document.createElement("canvas"), { width, height });
  const g = c.getContext("2d", { willReadFrequently: true });
  g.fillStyle = "#fff";
  g.fillRect(0, 0, width, height);
  g.fillStyle = "#000";
  for (let y = 0; y < 6; y++) {
    for (let x = 0; x < 6; x++) if ((x + y) % 2) g.fillRect(8 + 12 * x, 8 + 12 * y, 12, 12);
  }
  g.fillStyle = "#333";
  g.beginPath();
  g.arc(128, 44, 30, 0, 2 * Math.PI);
  g.fill();
  g.strokeStyle = "#999";
  g.lineWidth = 4;
  g.beginPath();
  g.arc(128, 44, 38, 0, 2 * Math.PI);
  g.stroke();
  const ramp = g.createLinearGradient(8, 0, width - 8, 0);
  ramp.addColorStop(0, "#000");
  ramp.addColorStop(1, "#fff");
  g.fillStyle = ramp;
  g.fillRect(8, 96, width - 16, 24);
  return { width, height, pixels: canvasPixels(c),
    note: `Pattern: ${width}×${height} (checkerboard, disc, ring, gradient)` };
}

/** Test image ``index`` of the worker's dataset and its class name (testset.js: the test
 * split the worker holds, never downloaded again); an RGB one convolved as its grey levels and
 * shown in colour; throws a RangeError naming the valid range. */
export async function testImage(index) {
  const set = await testImages([index]);
  const pixels = set.images[0].length;
  const side = Math.round(Math.sqrt(pixels));
  const [c, height, width] = set.shape.length === 3 ? set.shape : [1, side, side];
  const bytes = set.images[0];
  const title = set.title ?? (set.name === "mnist" ? "MNIST" : set.name);  // as the picker
  const what = `${title} test image #${index} ` +
    `(a ${set.classes[set.labels[0]] ?? set.labels[0]}): ${width}×${height}`;
  if (c !== 3) {
    return { width, height, pixels: Float32Array.from(bytes, (b) => b / 255), note: what };
  }
  const plane = width * height;
  const rgba = new Uint8ClampedArray(4 * plane);
  for (let i = 0; i < plane; i++) {
    rgba.set([bytes[i], bytes[plane + i], bytes[2 * plane + i], 255], 4 * i);
  }
  return { width, height, pixels: greyscale(rgba, width, height), rgba,
    note: `${what}, RGB (convolved as its grey levels)` };
}

/** A user's image file, decoded by the browser, scaled down to fit ``maxSide`` x ``maxSide``
 * (aspect kept), on white (transparent parts), as greyscale. */
export async function fromFile(file, maxSide) {
  let bitmap;
  try {
    bitmap = await createImageBitmap(file);
  } catch {
    throw new Error(`${file.name}: this browser cannot read it as an image ` +
      "(use a PNG, JPEG, GIF, WebP, BMP or SVG file)");
  }
  const { width: w0, height: h0 } = bitmap;
  const scale = Math.min(1, maxSide / Math.max(w0, h0));
  const width = Math.max(1, Math.round(w0 * scale));
  const height = Math.max(1, Math.round(h0 * scale));
  const c = Object.assign(document.createElement("canvas"), { width, height });
  const g = c.getContext("2d", { willReadFrequently: true });
  g.fillStyle = "#fff";
  g.fillRect(0, 0, width, height);
  g.drawImage(bitmap, 0, 0, width, height);
  bitmap.close();
  const size = scale < 1
    ? `${w0}×${h0} scaled down to ` +
      `${width}×${height} (at most ${maxSide}×${maxSide})`
    : `${width}×${height}`;
  const rgba = canvasRgba(c);
  return { width, height, pixels: greyscale(rgba, width, height), rgba,
    note: `${file.name}: ${size}, convolved as greyscale` };
}

/** Draw RGBA bytes (width x height) on ``canvas``. */
export function drawRgba(canvas, width, height, rgba) {
  canvas.width = width;
  canvas.height = height;
  canvas.getContext("2d").putImageData(new ImageData(rgba, width, height), 0, 0);
}

/** Draw float ``values`` (width x height) on ``canvas``: ``lo`` black, ``hi`` white. */
export function draw(canvas, width, height, values, lo = 0, hi = 1) {
  canvas.width = width;
  canvas.height = height;
  const img = new ImageData(width, height);
  const span = hi - lo;
  for (let i = 0; i < values.length; i++) {
    const v = span > 0 ? Math.round(((values[i] - lo) / span) * 255) : 128;
    img.data[4 * i] = img.data[4 * i + 1] = img.data[4 * i + 2] = v;
    img.data[4 * i + 3] = 255;
  }
  canvas.getContext("2d").putImageData(img, 0, 0);
}
