// The dataset picker (GET /api/datasets, host/data_routes.py): the prepared datasets, MNIST the
// default; the chosen one's title, sample shape, classes, counts and download size, a warning
// before download when it will not fit the browser or the GPU, and whether the chosen model
// fits it (its input shape from the model's graph.json against the dataset's sample_shape):
// when not, both shapes are named (under the picker and in the model summary) and Start is
// disabled (appState.fit, controls.js). A dataset change picks the model made for its shape
// when the server has one (DEFAULT_MODELS) and says `dataset-changed` on `document`. While a
// run's shards download, the worker's `download` messages show bytes, MB/s and the time left.

import { $, humanBytes } from "../lib/util.js";
import { appState, log, setStatus, settingsChanged, stateChanged } from "./state.js";
import { onModelChange } from "./models.js";
import { testChunkBytes } from "./worker-link.js";

// the committed default models of each sample shape and class count (scripts/make_seednet.py,
// scripts/make_default_models.py): the first the server has whose classes suffice is chosen
const DEFAULT_MODELS = new Map([["1x28x28", [["seednet", 10]]],
  ["3x32x32", [["seednet-rgb32", 10], ["seednet-rgb32-c100", 100]]]]);
const MAX_BYTES = 2 ** 30;  // larger downloads do not fit a tab's memory comfortably

let defaultName = "mnist";
let fitSeq = 0;
const graphs = new Map();  // model name -> its graph.json's {inputs, outputs}

/** The chosen dataset's name ("mnist" before the list is there). */
export const datasetName = () => appState.dataset?.name ?? defaultName;

/** The chosen dataset's name as the picker shows it: its title ("Fashion-MNIST"); the picker's
 * value when the server does not list it (a class session's dataset gone, no list). */
export const datasetTitle = () => appState.dataset?.title ?? $("dataset").value;

/** The dataset the server serves by default (the `--data-dir` one). */
export const defaultDataset = () => defaultName;

/** "3x32x32" of a sample shape. */
export const shapeText = (shape) => shape.join("x");

/** The chosen dataset's class names ("0".."9" before the list is there). */
export const classNames = () => appState.dataset?.classes ??
  Array.from({ length: 10 }, (_, i) => String(i));

/** The class names of the last run's dataset (the chosen one before any run); class ``i``
 * beyond the list (a model with more outputs) by its number. */
export function runClassName(i) {
  const d = appState.runDataset ?? appState.dataset;
  return d?.classes?.[i] ?? String(i);
}

/** What a model for samples of ``shape`` takes, in words: "2 features" ("1 feature") for a
 * table's rows, "3x32x32 images" (CxHxW) for images. */
function madeFor(shape) {
  if (shape.length === 1) return `${shape[0]} feature${shape[0] === 1 ? "" : "s"}`;
  return `${shapeText(shape)}${shape.length === 3 ? " images" : ""}`;
}

/** A dataset's samples in words: "3x32x32 images" or "54 features" ("1 feature"). */
export const samplesText = (d) => d.kind === "table" ? madeFor(d.sample_shape)
  : d.kind === "tokens" ? `${d.sample_shape[0]} token ids (trained from the command line)`
  : `${shapeText(d.sample_shape)} images`;

/** The model made for dataset ``d``'s sample shape and classes that the server lists, or
 * null. */
export function defaultModelFor(d) {
  const listed = (name) => appState.models.some((m) => m.name === name && !m.error);
  const made = d ? DEFAULT_MODELS.get(shapeText(d.sample_shape)) ?? [] : [];
  return made.find(([name, k]) => k >= d.classes.length && listed(name))?.[0] ?? null;
}

/** Fill the picker from GET /api/datasets and choose ``select`` (a share link's or stored
 * settings' name) when listed, else the server's default. */
export async function loadDatasets(select = null) {
  const sel = $("dataset");
  try {
    const res = await fetch("/api/datasets");
    if (!res.ok) throw new Error(`GET /api/datasets: HTTP ${res.status}`);
    const body = await res.json();
    defaultName = body.default;
    appState.datasets = body.datasets;
    sel.replaceChildren(...body.datasets.map((d) =>
      new Option(`${d.title} (${samplesText(d)}, ${d.classes.length} classes)`, d.name)));
    for (const p of body.problems ?? []) log(`Dataset left out: ${p}`, "error");
  } catch (e) {
    log(`Could not load the dataset list: ${e.message ?? e}`, "error");
    appState.datasets = [];
  }
  const names = appState.datasets.map((d) => d.name);
  sel.value = names.includes(select) ? select : defaultName;
  showDataset();
  if (select && !names.includes(select)) {
    log(`The dataset ${JSON.stringify(select).slice(0, 60)} is not on this server; ` +
      `${datasetTitle() || "none"} is selected`, "error");
  }
}

/** Choose dataset ``name`` (stored settings, classroom); false when it is not listed. */
export function chooseDataset(name) {
  if (!appState.datasets.some((d) => d.name === name)) return false;
  $("dataset").value = name;
  showDataset();
  return true;
}

function showDataset() {
  const sel = $("dataset");
  appState.dataset = appState.datasets.find((d) => d.name === sel.value) ?? null;
  const d = appState.dataset;
  $("dataset-hint").textContent = d ? [samplesText(d), `classes: ${d.classes.slice(0, 12)
    .join(", ")}${d.classes.length > 12 ? `, … (${d.classes.length})` : ""}`,
  `${Number(d.train).toLocaleString()} training + ${Number(d.test).toLocaleString()} test`,
  `${humanBytes(d.bytes)} to download`].join(" · ") : "";
  warnSize(d);
  document.dispatchEvent(new Event("dataset-changed"));
  stateChanged();
  settingsChanged(0);
  checkFit();
}

/** The user picked another dataset: its model when there is one, then the fit. */
function onPick() {
  showDataset();
  chooseDefaultModel();
}

/** Choose the model made for the chosen dataset when the server has one (not a class
 * session's pinned model: its select is disabled, web/page/classroom.js). */
export function chooseDefaultModel() {
  const want = defaultModelFor(appState.dataset);
  if (want && want !== $("model").value && !$("model").disabled) {
    $("model").value = want;
    log(`Model ${want} is made for ${shapeText(appState.dataset.sample_shape)}: chosen.`);
    onModelChange();
  }
}

let limits = null;  // the promise of this page's adapter limits (asked once)

export function adapterLimits() {
  limits ??= (async () => {
    try {
      return (await navigator.gpu?.requestAdapter())?.limits ?? null;
    } catch {
      return null;
    }
  })();
  return limits;
}

/** The warning before download: too large for the tab, or one sample larger than the GPU's
 * buffer limit; a training split over that limit is uploaded in several buffers (the hint says
 * how many; engine/train/data.py chunks). */
async function warnSize(d) {
  const box = $("dataset-warn");
  box.hidden = true;
  if (!d) return;
  const per = d.sample_shape.reduce((a, b) => a * b, 1) * (d.kind === "image" ? 1 : 4);
  const gpu = await adapterLimits();
  if (appState.dataset !== d) return;
  const limit = Math.min(testChunkBytes() ?? Infinity,
    ...gpu ? [gpu.maxBufferSize, gpu.maxStorageBufferBindingSize] : []);
  const perBuffer = Math.floor(Math.floor(limit / 4) * 4 / per);  // whole samples, as data.py
  let text = "";
  if (perBuffer < 1) {
    text = `${d.title}'s samples are ${humanBytes(per)} each: larger than this GPU's buffer ` +
      `limit (${humanBytes(limit)}); it will not fit.`;
  } else if (d.bytes > MAX_BYTES) {
    text = `${d.title} is ${humanBytes(d.bytes)}: larger than this page can hold ` +
      `(${humanBytes(MAX_BYTES)}); it will not fit the browser's memory.`;
  } else if (d.train > perBuffer) {
    $("dataset-hint").textContent += ` · uploaded as ${Math.ceil(d.train / perBuffer)} GPU ` +
      `buffers (this GPU binds ${humanBytes(limit)} at most)`;
  }
  box.textContent = text;
  box.hidden = !text;
}

/** The worker's `download` message {shard, of, what, loaded, total, elapsed_s}: bytes, MB/s
 * and the time left on the status line; the end of a shard in the log. */
export function onDownload(m) {
  const rate = m.elapsed_s > 0 ? m.loaded / m.elapsed_s : 0;
  const list = appState.downloads;
  if (m.shard === 1 && list.length && list[list.length - 1].shard !== 1) list.length = 0;
  list[m.shard - 1] = { ...m, rate };
  const speed = rate ? ` · ${(rate / 2 ** 20).toFixed(1)} MB/s` : "";
  const done = m.loaded >= m.total;
  const left = !done && rate ? ` · ${Math.ceil((m.total - m.loaded) / rate)} s left` : "";
  setStatus(`Downloading ${m.what} (shard ${m.shard} of ${m.of}): ${humanBytes(m.loaded)} ` +
    `of ${humanBytes(m.total)}${speed}${left}`);
  if (done) log(`Downloaded ${m.what}: ${humanBytes(m.total)} in ${m.elapsed_s.toFixed(1)} s` +
    `${speed}.`);
}

/** Model ``model``'s graph.json {inputs, outputs} (asked once per model). */
export async function graphOf(model) {
  if (!graphs.has(model)) {
    const p = fetch(`/api/models/${encodeURIComponent(model)}/graph.json`).then(async (r) => {
      const body = await r.json();
      if (!r.ok) throw new Error(body.error ?? `HTTP ${r.status}`);
      return { inputs: body.inputs, outputs: body.outputs };
    });
    graphs.set(model, p);
    p.catch(() => graphs.delete(model));
  }
  return graphs.get(model);
}

/** Why the chosen model does not fit the chosen dataset (both shapes named, with what to do:
 * another model, one built in the Build tab, another dataset), or null. */
export function fitProblem(model, g, d) {
  if (d.kind === "tokens") {
    return `Dataset ${d.name} holds token ids: the page does not train tokens datasets yet; ` +
      `train it with \`webgpu-trainer train MODEL.onnx --data ${d.name}\`.`;
  }
  const inp = g.inputs[0];
  const dims = inp.shape.slice(1);
  const want = d.sample_shape;
  const flat = want.reduce((a, b) => a * b, 1);
  // the worker's rule (engine/train/data.py check_fits): the sample shape, its values flat, a
  // grey image without its channel dim ([N, 28, 28]: an RNN over the rows) or each channel
  // as one sequence ([N, 1, 784])
  const fits = [want, [flat]];
  if (want.length === 3 && want[0] === 1) fits.push(want.slice(1));
  if (want.length === 3) fits.push([want[0], want[1] * want[2]]);
  const same = fits.some((f) => dims.length === f.length && dims.every((v, i) => v === f[i]));
  if (!same) {
    return `Model ${model}: input '${inp.name}' [N, ${dims.join(", ")}] does not fit dataset ` +
      `${d.name} (${samplesText(d)}, [N, ${want.join(", ")}]): choose a model made for ` +
      `${madeFor(want)}, make one in the Build tab, or choose another dataset.`;
  }
  const out = g.outputs?.[0]?.shape ?? [];
  const k = out[out.length - 1];
  if (Number.isInteger(k) && k < d.classes.length) {
    return `Model ${model}: output [N, ${k}] has fewer classes than dataset ${d.name} ` +
      `(${d.classes.length} classes).`;
  }
  return null;
}

/** Check the chosen model against the chosen dataset (appState.fit, #dataset-fit). */
export async function checkFit() {
  const seq = ++fitSeq;
  const model = $("model").value;
  const d = appState.dataset;
  let problem = null;
  if (model && d) {
    try {
      problem = fitProblem(model, await graphOf(model), d);
    } catch (e) {  // the model list and summary say why the model does not load
      console.warn(`fit of ${model} and ${d.name} not checked: ${e.message ?? e}`);
    }
  }
  if (seq !== fitSeq) return;
  appState.fit = problem;
  for (const id of ["dataset-fit", "summary-fit"]) {
    $(id).textContent = problem ?? "";
    $(id).hidden = !problem;
  }
  stateChanged();
}

/** Wire the picker: a pick, and a model change checks the fit again. */
export function setupDatasets() {
  $("dataset").addEventListener("change", onPick);
  document.addEventListener("model-changed", checkFit);
}
