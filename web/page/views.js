// Inside the model: live views of the model being trained (or the last one trained), refreshed
// every few seconds ONLY while the "Inside the model" panel is visible: the first weighted
// layer (a Conv's filters in diverging colours, over RGB input as colour tiles; a Linear over
// the image's pixels: its weight rows as images; otherwise the worker's words for why there is
// no image view, e.g. an LSTM's), the feature maps of a chosen test image (grey or RGB, the
// dataset's) per conv layer, the first attention layer's map of that image (a ViT's;
// attention.js) and the L2 norms of every parameter's weights and last gradient (log scale).
// Worker message: `inspect {id, index}` -> `inspect {...}` (worker/views.py), which carries
// the test image itself: the views never download the dataset. Before any run they show
// the model's initial weights (prepare.js); while a run sets up, they ask again each second
// and show its initial weights as soon as they exist.
// Test hook: window.viewsState.last (the last `inspect` answer shown).

import { $, el } from "../lib/util.js";
import { appState } from "./state.js";
import { activeTab } from "./tabs.js";
import { drawSample } from "./testset.js";
import { attentionFigure, drawAttention } from "./attention.js";
import { runClassName } from "./dataset.js";
import { modelReady, prepareNote } from "./prepare.js";

const INTERVAL_MS = 3000;   // from one answer to the next request while training
const RETRY_MS = 1000;      // while the run's model is being set up
const POS = [178, 24, 43];  // diverging scale: positive -> red, 0 -> white, negative -> blue
const NEG = [33, 102, 172];

let send = () => {};
let seq = 0;
let waiting = 0;            // id of the request in flight (0: none)
let timer = null;
let shownRun = null;        // window.lastRun when the last answer came (null: during a run)
const state = { last: null, requests: 0, key: null };  // key: the prepared model's shown
window.viewsState = state;

/** The colour [r, g, b] of `t` in [-1, 1] on the diverging scale (white at 0). */
export function diverging(t) {
  const c = t >= 0 ? POS : NEG;
  const a = Math.min(1, Math.abs(t));
  return c.map((v) => Math.round(255 + (v - 255) * a));
}

function build() {
  const panel = $("panel-model");
  const index = el("input", { type: "number", id: "views-index", min: 0, value: 0, step: 1,
    inputMode: "numeric" });
  const card = el("section", { className: "card views-card", id: "views" },
    el("div", { className: "card-head" },
      el("h2", { id: "views-title", textContent: "Live views" }),
      el("span", { id: "views-when", className: "sub" })),
    el("p", { id: "views-status", className: "hint", role: "status",
      textContent: "These views show the model’s initial weights, then follow the run " +
        "every few seconds while this tab is open." }),
    el("div", { className: "views-grid" },
      el("figure", { className: "views-fig" },
        el("figcaption", { id: "views-filters-caption",
          textContent: "First conv layer's filters" }),
        el("canvas", { id: "views-filters", className: "pixelated", width: 1, height: 1,
          role: "img", "aria-label": "the first conv layer's filters" }),
        el("p", { id: "views-filters-legend", className: "hint views-legend" },
          el("span", { className: "swatch neg" }),
          " negative  ", el("span", { className: "swatch zero" }), " 0  ",
          el("span", { className: "swatch pos" }), " positive (scale: the largest |weight|)")),
      el("figure", { className: "views-fig views-maps-fig" },
        el("figcaption", {}, "Feature maps of a test image, after each conv layer's ReLU"),
        el("div", { className: "views-pick" },
          el("label", { htmlFor: "views-index", textContent: "Test image #" }), index,
          el("canvas", { id: "views-image", className: "pixelated digit-small", width: 28,
            height: 28, role: "img", "aria-label": "the chosen test image" }),
          el("span", { id: "views-label", className: "hint" })),
        el("div", { id: "views-maps", className: "views-maps" })),
      attentionFigure()),
    el("section", { className: "views-norms", "aria-labelledby": "views-norms-title" },
      el("h3", { id: "views-norms-title",
        textContent: "Weight and gradient L2 norms per parameter (log scale)" }),
      el("p", { className: "hint", textContent: "Gradients are those of the last step. A " +
        "gradient far below its weights (ratio under 1e-6) may be vanishing; one above its " +
        "weights may be exploding." }),
      el("div", { className: "table-wrap", tabIndex: 0, role: "region",
        "aria-label": "norms table (scrolls)" },
        el("table", { id: "views-norms", className: "norms-table" },
        el("thead", {}, el("tr", {},
          ...["Parameter", "Elements", "‖weight‖", "‖gradient‖", "grad / weight"]
          .map((t, i) => el("th", { className: i ? "num" : "", textContent: t, scope: "col" })))),
        el("tbody")))));
  panel.prepend(card);  // the live views first; the summary below can fold
  index.addEventListener("change", () => {
    const max = Number(index.max) || Infinity;
    index.value = Math.max(0, Math.min(max, Math.floor(Number(index.value) || 0)));
    request(true);
  });
}

function wanted() {
  if (activeTab() !== "model") return false;
  if (appState.phase === "training") return true;
  const index = Number($("views-index").value);
  if (!["paused", "done"].includes(appState.phase)) {  // before any run: the initial weights
    const p = appState.prepared;
    return !(state.last && !state.last.error && state.last.untrained && state.key === p?.key &&
      state.last.index === index);
  }
  // after a run: until the views show its final weights (this run's: a second run of as many
  // steps must not take the first one's answer for its own)
  const run = window.lastRun;
  return appState.phase === "done" && !!run && !(state.last && shownRun === run &&
    state.last.step === run.steps && !state.last.error && state.last.index === index);
}

function schedule(ms) {
  clearTimeout(timer);
  timer = setTimeout(() => {
    timer = null;
    request(false);
  }, ms);
}

/** Ask the worker for the views now (`force`: even if the last answer is current). */
function request(force) {
  if (waiting || activeTab() !== "model") return;
  if (!force && !wanted()) return;
  if (!modelReady()) {  // no run yet: the initial weights are being set up
    $("views-status").textContent = prepareNote();
    return;
  }
  state.key = appState.prepared?.key ?? null;
  waiting = ++seq;
  state.requests++;
  send({ type: "inspect", id: waiting, index: Number($("views-index").value) || 0 });
}

export function onInspect(m) {
  if (m.id !== waiting) return;
  waiting = 0;
  shownRun = appState.phase === "done" ? window.lastRun : null;  // the finished run shown
  state.last = m;
  if (m.error) {
    $("views-status").textContent = m.error;
    if (m.pending) schedule(RETRY_MS);  // the run's model is being set up
  } else {
    $("views-status").textContent = m.untrained ? "Untrained: the model’s initial weights. " +
      "Press Start: these views then follow the run every few seconds." : "";
    showWhen();
    drawFirstLayer(m);
    drawMaps(m);
    drawAttention(m);
    drawNorms(m.norms, m.step === 0);
  }
  if (!m.error && activeTab() === "model" && wanted()) {
    const moved = m.index !== Number($("views-index").value);  // picked while it was on its way
    schedule(appState.phase === "training" && !moved ? INTERVAL_MS : 200);
  }
}

/** Whose weights the views show; "(training; …)" only while the run trains (refreshed on
 * state-changed: an answer that came during the final evaluation is the run's last). */
function showWhen() {
  const m = state.last;
  if (!m || m.error) return;
  $("views-when").textContent = m.untrained ? `${m.model}, initial weights`
    : `${m.model} after step ${m.step}` +
      (appState.phase === "training" ? " (training; refreshed every few seconds)" : "");
}

/** The first weighted layer: a Conv's kernels, a Linear's weight rows as images, or the
 * worker's words for why there is no image view (`m.first.text`). */
function drawFirstLayer(m) {
  const f = m.filters;
  const text = m.first?.text ?? "no layer with weights found";
  const said = text[0].toUpperCase() + text.slice(1);
  $("views-filters").hidden = !f;
  $("views-filters-legend").hidden = !f;
  if (!f) {
    $("views-filters-caption").textContent = said;
    return;
  }
  const rows = f.layout === "rows";
  const [c, h, w] = rows ? f.image : [];
  const rgb = (rows ? c : f.shape[1]) === 3;
  const max = rows ? drawTiles(f.values, f.shape[0], rgb ? 1 : c, h, w, rgb, 8)
    : drawTiles(f.values, f.shape[0], f.shape[1], f.shape[2], f.shape[3], rgb,
      Math.max(4, Math.ceil(Math.sqrt(rgb ? f.shape[0] : f.shape[0] * f.shape[1]))));
  $("views-filters-caption").textContent = `${said}, max |w| ${max.toPrecision(3)}` +
    (rgb ? " (over RGB: one tile per " + (rows ? "row" : "filter") + ", its red, green and " +
      "blue weights as a colour; grey = 0)" : "");
}

/** Draw `out` tiles of `inC` x `kh` x `kw` weights (a tile per (output, input) channel pair,
 * one pixel a weight, 1 px apart; `rgb`: one colour tile per output over 3 input channels)
 * on #views-filters, at most `colsMax` tiles a row; returns the largest |weight|. */
function drawTiles(values, out, inC, kh, kw, rgb, colsMax) {
  const tiles = rgb ? out : out * inC;
  const cols = Math.min(tiles, colsMax);
  const rows = Math.ceil(tiles / cols);
  const cv = $("views-filters");
  cv.width = cols * (kw + 1) - 1;
  cv.height = rows * (kh + 1) - 1;
  Object.assign(cv.dataset, { cols, kh, kw });
  cv.style.width = `${Math.min(cv.width * 18, 320)}px`;
  let max = 0;
  for (const v of values) max = Math.max(max, Math.abs(v));
  const ctx = cv.getContext("2d");
  const img = ctx.createImageData(cv.width, cv.height);
  for (let t = 0; t < tiles; t++) {
    const x0 = (t % cols) * (kw + 1);
    const y0 = Math.floor(t / cols) * (kh + 1);
    for (let i = 0; i < kh; i++) {
      for (let j = 0; j < kw; j++) {
        const at = 4 * ((y0 + i) * cv.width + x0 + j);
        if (rgb) {
          const col = [0, 1, 2].map((k) => Math.round(127.5 + 127.5 *
            (max ? values[((t * 3 + k) * kh + i) * kw + j] / max : 0)));
          img.data.set([...col, 255], at);
        } else {
          img.data.set([...diverging(max ? values[(t * kh + i) * kw + j] / max : 0), 255], at);
        }
      }
    }
  }
  ctx.putImageData(img, 0, 0);
  return max;
}

function drawMaps(m) {
  const box = $("views-maps");
  box.replaceChildren(...m.maps.map((map) => {
    const [c, h, w] = map.shape;
    const cols = Math.min(c, 8);
    const rows = Math.ceil(c / cols);
    const cv = el("canvas", { className: "pixelated", width: cols * (w + 1) - 1,
      height: rows * (h + 1) - 1, role: "img",
      "aria-label": `${c} feature maps of ${map.layer}` });
    let max = 0;
    for (const v of map.values) max = Math.max(max, v);
    const ctx = cv.getContext("2d");
    const img = ctx.createImageData(cv.width, cv.height);
    for (let k = 0; k < c; k++) {
      const x0 = (k % cols) * (w + 1);
      const y0 = Math.floor(k / cols) * (h + 1);
      for (let i = 0; i < h; i++) {
        for (let j = 0; j < w; j++) {
          const v = max > 0 ? Math.max(0, map.values[(k * h + i) * w + j]) / max : 0;
          const g = Math.round(255 * (1 - v));  // 0 -> white, the layer's max -> black
          img.data.set([g, g, g, 255], 4 * ((y0 + i) * cv.width + x0 + j));
        }
      }
    }
    ctx.putImageData(img, 0, 0);
    cv.style.width = `${Math.min(cv.width * 2.5, 560)}px`;
    return el("figure", { className: "views-map" },
      el("figcaption",
        { textContent: `${map.layer} → ${c} × ${h} × ${w} (max ${max.toPrecision(3)})` }), cv);
  }));
  if (!m.maps.length) {
    box.replaceChildren(el("p", { className: "hint", id: "views-maps-none",
      textContent: "No conv layer in this model: no feature maps to show." }));
  }
  // the test image as the worker holds it (no second download of the dataset)
  $("views-label").textContent = `label ${runClassName(m.label)}`;
  $("views-index").max = m.count - 1;
  $("views-image").hidden = !m.image;
  if (m.image) drawSample($("views-image"), m.image, m.sample_shape);
}

/** The norms table; ``noStep``: no training step yet (no gradients to show). */
function drawNorms(norms, noStep) {
  if (noStep) norms = norms.map((r) => ({ ...r, grad: r.grad == null ? null : undefined }));
  const vals = norms.flatMap((r) => [r.weight, r.grad]).filter((v) => v > 0 && Number.isFinite(v));
  const lo = Math.floor(Math.log10(Math.min(...vals)));
  const hi = Math.ceil(Math.log10(Math.max(...vals))) || lo + 1;
  const bar = (v, kind) => {
    const td = el("td", { className: "num" });
    if (v == null) {
      td.textContent = v === undefined ? "no step yet" : "frozen";
      return td;
    }
    const w = v > 0 && Number.isFinite(v) ? (Math.log10(v) - lo) / Math.max(hi - lo, 1) : 0;
    td.append(
      el("span", { className: `norm-bar ${kind}`, style: `width:${(100 * w).toFixed(1)}%` }),
      el("span", { className: "norm-val",
        textContent: Number.isFinite(v) ? v.toExponential(2) : String(v) }));
    return td;
  };
  $("views-norms").querySelector("tbody").replaceChildren(...norms.map((r) => {
    const ratio = r.grad != null && r.weight > 0 ? r.grad / r.weight : null;
    // a bias right before BatchNorm: its gradient is 0 by construction, not vanishing
    const flag = ratio == null || r.before_norm ? "" : ratio < 1e-6 ? " vanishing?"
      : ratio > 1 ? " exploding?" : "";
    const note = r.before_norm ? " (before BatchNorm: no effect)" : flag;
    const tr = el("tr", { className: flag ? "norm-flag" : "" },
      el("th", { scope: "row", textContent: r.name, title: `layer ${r.layer}` }),
      el("td", { className: "num", textContent: Number(r.numel).toLocaleString() }),
      bar(r.weight, "w"), bar(r.grad, "g"),
      el("td", { className: "num", textContent: ratio == null ? "–" : ratio.toExponential(1) + note,
        title: r.before_norm ? "BatchNorm subtracts each channel's batch mean, so a bias added " +
          "just before it changes nothing and its gradient is 0 (up to rounding)" : "" }));
    return tr;
  }));
  $("views-norms").dataset.scale = `1e${lo}..1e${hi}`;
}

/** Build the views into #panel-model; `post(msg)` sends a message to the worker. */
export function setupViews(post) {
  send = post;
  build();
  document.addEventListener("tabchange", (ev) => {
    if (ev.detail === "model") {
      if (!waiting && !modelReady()) $("views-status").textContent = prepareNote();
      request(false);
    } else {
      clearTimeout(timer);
      timer = null;
    }
  });
  document.addEventListener("state-changed", showWhen);
  document.addEventListener("model-prepared", () => {
    $("views-status").textContent = prepareNote();
    request(false);
  });
  // a run that starts or ends while the panel is open: follow it
  setInterval(() => { if (!waiting && timer === null && wanted()) request(false); }, INTERVAL_MS);
}
