// Inside the model, for a model with attention (a ViT): the first attention layer's map of the
// chosen test image, as the worker's `inspect` answer carries it (`attention`: softmax(QK^T)
// of the forward pass, averaged over heads, [T, T] row-major, each row a query token's weights
// over the keys, summing to 1; `grid` [gh, gw]: the patch tokens `first`.. as a grid over the
// image; worker/views.py, engine/train/probe.py). Drawn twice: the class token's row over the
// image's patches (bright: attended), and the whole T x T matrix.

import { $, el } from "../lib/util.js";
import { drawSample } from "./testset.js";

/** The attention figure (hidden until a model with attention answers). */
export function attentionFigure() {
  return el("figure", { className: "views-fig views-attention", id: "views-attention",
    hidden: true },
  el("figcaption", { id: "views-attention-caption" }),
  el("div", { className: "views-attention-row" },
    el("canvas", { id: "views-attention-image", className: "pixelated", width: 1, height: 1,
      role: "img", "aria-label": "the class token's attention over the test image's patches" }),
    el("canvas", { id: "views-attention-matrix", className: "pixelated", width: 1, height: 1,
      role: "img", "aria-label": "the attention matrix, query tokens by key tokens" })),
  el("p", { id: "views-attention-note", className: "hint" }));
}

/** One row of the map ([T] weights of query ``q``), or the mean of every row (no class
 * token: the attention each key receives on average). */
function queryRow(a, q) {
  const t = a.tokens;
  const row = new Float64Array(t);
  const rows = q === null ? [...Array(t).keys()] : [q];
  for (const r of rows) for (let k = 0; k < t; k++) row[k] += a.values[r * t + k] / rows.length;
  return row;
}

function drawOverImage(a, m) {
  const cv = $("views-attention-image");
  const [c, h, w] = m.sample_shape.length === 3 ? m.sample_shape : [1, 0, 0];
  if (!a.grid || !m.image || !h) {
    cv.hidden = true;
    return null;
  }
  cv.hidden = false;
  drawSample(cv, m.image, [c, h, w]);
  const [gh, gw] = a.grid;
  const row = queryRow(a, a.first > 0 ? 0 : null);
  const patches = row.slice(a.first, a.first + gh * gw);
  const max = Math.max(...patches);
  const ctx = cv.getContext("2d");
  const img = ctx.getImageData(0, 0, w, h);
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      const p = Math.min(gh - 1, Math.floor((y * gh) / h)) * gw +
        Math.min(gw - 1, Math.floor((x * gw) / w));
      const v = max > 0 ? patches[p] / max : 0;  // 1: the most attended patch
      const at = 4 * (y * w + x);
      const dim = 0.15 + 0.85 * v;
      for (let k = 0; k < 3; k++) img.data[at + k] = Math.round(img.data[at + k] * dim);
    }
  }
  ctx.putImageData(img, 0, 0);
  cv.style.width = `${Math.min(w * 6, 224)}px`;
  return { max, patches };
}

function drawMatrix(a) {
  const t = a.tokens;
  const cv = $("views-attention-matrix");
  cv.width = t;
  cv.height = t;
  let max = 0;
  for (const v of a.values) max = Math.max(max, v);
  const ctx = cv.getContext("2d");
  const img = ctx.createImageData(t, t);
  for (let i = 0; i < t * t; i++) {
    const g = Math.round(255 * (1 - (max > 0 ? a.values[i] / max : 0)));  // 0 white, max black
    img.data.set([g, g, g, 255], 4 * i);
  }
  ctx.putImageData(img, 0, 0);
  cv.style.width = `${Math.min(t * 3, 224)}px`;
  return max;
}

/** Show `m.attention` of an `inspect` answer `m` (hide the figure when there is none). */
export function drawAttention(m) {
  const fig = $("views-attention");
  const a = m.attention;
  fig.hidden = !a;
  if (!a) return;
  const over = drawOverImage(a, m);
  const max = drawMatrix(a);
  const grid = a.grid ? `${a.grid[0]}×${a.grid[1]}` : "";
  const who = a.first > 0 ? "the class token’s attention (token 0)" : "the mean attention";
  $("views-attention-caption").textContent = `Attention maps of the first attention layer ` +
    `(${a.layer}): softmax(QKᵀ/√d) of test image #${m.index}, averaged over its ${a.heads} ` +
    `head${a.heads === 1 ? "" : "s"}`;
  $("views-attention-note").textContent = (over ? `Left: ${who} over the image's ${grid} ` +
    `patches (bright: attended; the most attended patch gets ${over.max.toFixed(3)}). ` : "") +
    `${over ? "Right" : "The matrix"}: all ${a.tokens}×${a.tokens} weights (row: a query ` +
    `token, its weights over the key tokens sum to 1; black: ${max.toFixed(3)}).`;
}
