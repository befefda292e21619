// A drawing (dark ink on white), a photo or a webcam snapshot on a canvas as one sample of a
// [C, H, W] input (uint8, planar): Try it (tryit.js) classifies it, "Make your own classes"
// (own-classes.js) stores examples so, and both read a canvas the same way, so what is drawn
// in Try it after training looks to the model like what it learnt from. For 1x28x28 a drawing
// is preprocessed like MNIST (LeCun et al.): the ink's bounding box scaled to fit 20x20 keeping
// its aspect ratio (anti-aliased grey levels 0..255), placed in 28x28 with its centre of mass
// at the centre; for any other shape the whole canvas is resized to H x W (grey: ink 255 on 0;
// RGB: the colours).

const SIDE = 28;            // MNIST's image
const BOX = 20;             // the ink's box inside it

/** True for MNIST's shape [1, 28, 28]. */
export const isMnistShape = (shape) => String(shape) === "1,28,28";

/** "32 × 32 RGB" or "28 × 28 grey" of a [C, H, W] shape. */
export const shapeWords = ([c, h, w]) => `${h} × ${w} ${c === 3 ? "RGB" : "grey"}`;

/** ``canvas`` as a sample of ``shape`` [C, H, W] (see the module's head); null when blank. */
export function canvasSample(canvas, shape) {
  return isMnistShape(shape) ? mnistSample(canvas) : resized(canvas, shape);
}

/** The canvas resized with smoothing to uint8 [C, H, W] planar (grey: ink 255 on 0); null
 * when it is blank (all white). */
export function resized(canvas, [c, h, w]) {
  const tmp = new OffscreenCanvas(w, h);
  const tctx = tmp.getContext("2d", { willReadFrequently: true });
  tctx.imageSmoothingEnabled = true;
  tctx.imageSmoothingQuality = "high";
  tctx.drawImage(canvas, 0, 0, w, h);
  const src = tctx.getImageData(0, 0, w, h).data;
  const out = new Uint8Array(c * h * w);
  let blank = true;
  for (let i = 0; i < h * w; i++) {
    const [r, g, b] = src.subarray(4 * i, 4 * i + 3);
    if (r < 255 || g < 255 || b < 255) blank = false;
    if (c === 3) [out[i], out[h * w + i], out[2 * h * w + i]] = [r, g, b];
    else out[i] = 255 - Math.round(0.299 * r + 0.587 * g + 0.114 * b);
  }
  return blank ? null : out;
}

/** A drawing (dark on white) as MNIST's 28x28 uint8 (0 background, 255 ink, centred as
 * MNIST), or null when empty. */
export function mnistSample(canvas) {
  const w = canvas.width, h = canvas.height;
  const src = canvas.getContext("2d").getImageData(0, 0, w, h).data;
  let x0 = w, y0 = h, x1 = -1, y1 = -1;
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      if (src[4 * (y * w + x)] < 255) {
        x0 = Math.min(x0, x); x1 = Math.max(x1, x); y0 = Math.min(y0, y); y1 = Math.max(y1, y);
      }
    }
  }
  if (x1 < 0) return null;
  const bw = x1 - x0 + 1, bh = y1 - y0 + 1;
  const scale = BOX / Math.max(bw, bh);
  const dw = Math.max(1, Math.round(bw * scale)), dh = Math.max(1, Math.round(bh * scale));
  const tmp = new OffscreenCanvas(dw, dh);
  const tctx = tmp.getContext("2d", { willReadFrequently: true });
  tctx.imageSmoothingEnabled = true;
  tctx.imageSmoothingQuality = "high";
  tctx.drawImage(canvas, x0, y0, bw, bh, 0, 0, dw, dh);
  const small = tctx.getImageData(0, 0, dw, dh).data;
  const ink = new Float64Array(dw * dh);
  let mass = 0, mx = 0, my = 0;
  for (let y = 0; y < dh; y++) {
    for (let x = 0; x < dw; x++) {
      const v = 255 - small[4 * (y * dw + x)];
      ink[y * dw + x] = v;
      mass += v; mx += (x + 0.5) * v; my += (y + 0.5) * v;
    }
  }
  // shift the centre of mass to the centre of the 28x28 field (whole pixels, as MNIST)
  const ox = Math.round(SIDE / 2 - mx / mass), oy = Math.round(SIDE / 2 - my / mass);
  const out = new Uint8Array(SIDE * SIDE);
  for (let y = 0; y < dh; y++) {
    for (let x = 0; x < dw; x++) {
      const tx = x + ox, ty = y + oy;
      if (tx >= 0 && tx < SIDE && ty >= 0 && ty < SIDE) out[ty * SIDE + tx] = ink[y * dw + x];
    }
  }
  return out;
}

/** A sample of ``shape`` [C, H, W] (uint8 planar; grey: ink 255 on 0, as the model reads it)
 * as PNG bytes: grey stored as is (the server reads the PNG's grey levels), RGB interleaved. */
export async function samplePng(sample, [c, h, w]) {
  const image = new ImageData(w, h);
  for (let i = 0; i < h * w; i++) {
    const px = c === 3 ? [sample[i], sample[h * w + i], sample[2 * h * w + i]]
      : [sample[i], sample[i], sample[i]];
    image.data.set([...px, 255], 4 * i);
  }
  const png = new OffscreenCanvas(w, h);
  png.getContext("2d").putImageData(image, 0, 0);
  const blob = await png.convertToBlob({ type: "image/png" });
  return new Uint8Array(await blob.arrayBuffer());
}
