// The Results tab's views of the test evaluation, from the worker's `done` message: a confusion
// matrix (a real <table>: rows true class, columns predicted), per-class accuracy, and the most
// confidently wrong test images drawn from the test split the worker holds (testset.js).
// Clicking a wrong image dispatches CustomEvent("pick-test-image", {detail: index}) on document
// (the "Try it" tab may listen).

import { $, el } from "../lib/util.js";
import { drawSample, testImages } from "./testset.js";
import { runClassName as cls } from "./dataset.js";

const WRONG_SHOWN = 24;  // the most confidently wrong images in the grid

/** From `done` message fields: logits (Float32Array [n, classes], log-probabilities) and labels
 * (Uint8Array [n]) -> {classes, n, pred, conf, confusion (rows true, columns predicted),
 * wrong: [{index, pred, label, p}] most confident first}. */
export function analyse(logits, labels) {
  const n = labels.length;
  const classes = n ? Math.round(logits.length / n) : 0;
  const confusion = Array.from({ length: classes }, () => new Array(classes).fill(0));
  const wrong = [];
  for (let i = 0; i < n; i++) {
    let best = 0;
    for (let c = 1; c < classes; c++) {
      if (logits[i * classes + c] > logits[i * classes + best]) best = c;
    }
    const label = labels[i];
    if (label < classes) confusion[label][best] += 1;
    if (best !== label) {
      wrong.push({ index: i, pred: best, label, p: Math.exp(logits[i * classes + best]) });
    }
  }
  wrong.sort((a, b) => b.p - a.p || a.index - b.index);
  return { classes, n, confusion, wrong };
}

// ------------------------------------------------------------------ colour scale (contrast)
// Cells are coloured by the fraction of the row (sqrt: small confusions stay visible). Light
// shades carry dark text, dark shades white text, in both colour schemes (>= 4.5:1).
const LIGHT = [[0xee, 0xf0, 0xff], [0xa5, 0xb4, 0xfc]];
const DARK = [[0x4f, 0x46, 0xe5], [0x1e, 0x1b, 0x4b]];
const mix = ([a, b], t) => `rgb(${a.map((v, k) => Math.round(v + (b[k] - v) * t)).join(",")})`;

function shade(frac) {
  if (frac <= 0) return null;
  const t = Math.sqrt(frac);
  return t < 0.5 ? { bg: mix(LIGHT, t / 0.5), fg: "#161a23" }
    : { bg: mix(DARK, (t - 0.5) / 0.5), fg: "#ffffff" };
}

function confusionTable({ classes, confusion }) {
  const head = el("tr", {}, el("th", { scope: "col", className: "corner" },
    el("span", { className: "sr-only" }, "true \\ predicted")));
  for (let c = 0; c < classes; c++) head.append(el("th", { scope: "col" }, cls(c)));
  const body = el("tbody");
  for (let r = 0; r < classes; r++) {
    const total = confusion[r].reduce((a, b) => a + b, 0);
    const tr = el("tr", {}, el("th", { scope: "row" }, cls(r)));
    for (let c = 0; c < classes; c++) {
      const count = confusion[r][c];
      const td = el("td", { textContent: String(count) });
      td.className = r === c ? "diag" : count ? "off" : "zero";
      td.title = `true ${cls(r)}, predicted ${cls(c)}: ${count} of ${total}`;
      const s = shade(total ? count / total : 0);
      if (s) Object.assign(td.style, { background: s.bg, color: s.fg });
      tr.append(td);
    }
    body.append(tr);
  }
  return el("table", { id: "confusion", className: "confusion" },
    el("caption", {}, "Rows: true class · columns: predicted class · colour: share of the row"),
    el("thead", {}, el("tr", {}, el("td"),
      el("th", { scope: "colgroup", colSpan: classes, className: "axis" }, "predicted")), head),
    body);
}

function perClassTable({ classes, confusion }) {
  const body = el("tbody");
  for (let r = 0; r < classes; r++) {
    const total = confusion[r].reduce((a, b) => a + b, 0);
    const acc = total ? confusion[r][r] / total : null;
    const bar = el("span", { className: "bar" }, el("span", { className: "fill" }));
    bar.firstChild.style.width = `${acc == null ? 0 : (100 * acc).toFixed(1)}%`;
    body.append(el("tr", {}, el("th", { scope: "row" }, cls(r)),
      el("td", { className: "num" }, `${confusion[r][r]} / ${total}`),
      el("td", { className: "num acc" }, acc == null ? "–" : `${(100 * acc).toFixed(1)}%`),
      el("td", { className: "bar-cell", ariaHidden: "true" }, bar)));
  }
  return el("table", { id: "per-class", className: "per-class" },
    el("caption", { className: "sr-only" }, "Accuracy of each class on the test images"),
    el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "Class"),
      el("th", { scope: "col" }, "Correct"), el("th", { scope: "col" }, "Accuracy"),
      el("td"))),
    body);
}

function wrongGrid(wrong, images) {
  const grid = el("ol", { id: "wrong-grid", className: "wrong-grid" });
  for (const w of wrong.slice(0, WRONG_SHOWN)) {
    const canvas = el("canvas", { className: "digit", width: 28, height: 28 });
    const k = images ? images.indices.indexOf(w.index) : -1;
    if (k >= 0) drawSample(canvas, images.images[k], images.shape);
    const pct = `${Math.round(100 * w.p)}%`;
    // the name is the visible text (WCAG 2.5.3, label in name), after "test image N:"
    const btn = el("button", { type: "button", className: "wrong" }, canvas,
      el("span", { className: "sr-only" }, `test image ${w.index}: `),
      el("span", { className: "cap" }, el("strong", {}, `predicted ${cls(w.pred)}`),
        ` (${pct})`, el("br"), `true ${cls(w.label)}`));
    Object.assign(btn.dataset, { index: w.index, pred: w.pred, label: w.label });
    btn.addEventListener("click", () =>
      document.dispatchEvent(new CustomEvent("pick-test-image", { detail: w.index })));
    grid.append(el("li", {}, btn));
  }
  return grid;
}

/** Draw the views for `done` message `m` into #evaluation (hidden without logits). */
export async function renderEvaluation(m) {
  const box = $("evaluation");
  if (!m?.logits || !m?.labels || !m.labels.length) {
    box.hidden = true;
    return;
  }
  const a = analyse(m.logits, m.labels);
  window.resultsView = a;  // test hook
  box.hidden = false;
  $("confusion-wrap").replaceChildren(confusionTable(a));
  $("per-class-wrap").replaceChildren(perClassTable(a));
  $("wrong-count").textContent = a.wrong.length
    ? `${a.wrong.length.toLocaleString()} of ${a.n.toLocaleString()} wrong; ` +
      `the ${Math.min(WRONG_SHOWN, a.wrong.length)} most confident`
    : `none of ${a.n.toLocaleString()} wrong`;
  $("wrong-wrap").replaceChildren(wrongGrid(a.wrong, null));
  try {
    const indices = a.wrong.slice(0, WRONG_SHOWN).map((w) => w.index);
    const images = indices.length ? { ...await testImages(indices), indices } : null;
    if (window.lastRun !== m) return;  // a newer run replaced these results
    $("wrong-wrap").replaceChildren(wrongGrid(a.wrong, images));
    box.dataset.images = "drawn";
  } catch (e) {
    $("wrong-count").textContent += ` (could not load the test images: ${e.message ?? e})`;
  }
}

export function clearEvaluation() {
  const box = $("evaluation");
  box.hidden = true;
  delete box.dataset.images;
  for (const id of ["confusion-wrap", "per-class-wrap", "wrong-wrap"]) $(id).replaceChildren();
  window.resultsView = null;
}
