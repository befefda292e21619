// Your own dataset from the page (issue 18, "In the page"): drop or choose a .zip of class
// folders, a folder (zipped here with fflate, served from web/node_modules as /vendor/fflate)
// or a .csv table -> POST /api/datasets/scan -> a preview per class (count, thumbnails of the
// first images, refused files with their reasons, notes) -> name, size, colour, test share ->
// Prepare: POST /api/datasets with the upload's progress (bytes, %, ETA), then "Preparing…"
// until the server's 201 -> the picker chooses the new dataset and the model made for its
// shape (dataset.js). The server's 400/413 is shown under the drop zone as it words it.
// Prepare under the name of a listed dataset asks first (in the page) whether to replace it.
// own-classes.js sends its drawings through uploadDataset() too.

import { unzip, zip } from "/vendor/fflate/browser.js";
import { $, duration, el, humanBytes } from "../lib/util.js";
import { appState, log } from "./state.js";
import { chooseDefaultModel, loadDatasets } from "./dataset.js";
import { forgetTestSet } from "./testset.js";

const THUMBS = 4;  // thumbnails per class in the preview
const IMAGE = /\.(png|jpe?g|webp|bmp)$/i;
// the server refuses these names itself (host/datasets BUILT_IN): no replace question for them
const BUILT_IN = new Set(["mnist", "fashion-mnist", "cifar10", "cifar100"]);

let pending = null;   // {body: Blob, file: "photos.zip", zipped: Uint8Array | null}
let thumbUrls = [];   // object URLs of the shown thumbnails (revoked on the next preview)

/** A dataset name (DATASETS.md: ^[a-z0-9][a-z0-9_-]{0,39}$) made from a file name. */
export function nameFrom(file) {
  const base = file.replace(/\.[^.]*$/, "").toLowerCase().replace(/[^a-z0-9_-]+/g, "-");
  return base.replace(/^[-_]+/, "").slice(0, 40) || "my-data";
}

/** Zip ``files`` ([{path: "cat/1.png", file: File}]) without compressing (images are). */
export async function zipFiles(files) {
  const tree = {};
  for (const { path, file } of files) tree[path] = new Uint8Array(await file.arrayBuffer());
  return new Promise((resolve, reject) => zip(tree, { level: 0 }, (err, data) =>
    (err ? reject(err) : resolve(data))));
}

/** The files of a dropped folder entry (webkitGetAsEntry), paths from the folder's name. */
async function entryFiles(entry, prefix = "") {
  if (entry.isFile) {
    const file = await new Promise((res, rej) => entry.file(res, rej));
    return [{ path: prefix + entry.name, file }];
  }
  const reader = entry.createReader();
  const out = [];
  for (;;) {  // readEntries gives at most 100 at a time
    const batch = await new Promise((res, rej) => reader.readEntries(res, rej));
    if (!batch.length) return out;
    for (const e of batch) out.push(...await entryFiles(e, `${prefix}${entry.name}/`));
  }
}

/** Show an error next to the drop zone (null hides it). */
function showError(text) {
  $("dsu-error").textContent = text ?? "";
  $("dsu-error").hidden = !text;
}

/** Take a dropped or chosen set of files: one .zip or .csv, or a folder's files. */
async function take(files, label) {
  showError(null);
  $("dsu-replace").hidden = true;
  try {
    if (files.length === 1 && /\.(zip|csv)$/i.test(files[0].file.name)) {
      const f = files[0].file;
      const bytes = /\.zip$/i.test(f.name) ? new Uint8Array(await f.arrayBuffer()) : null;
      pending = { body: f, file: f.name, zipped: bytes };
    } else if (files.length) {
      $("dsu-status").textContent = `Zipping ${files.length} files of ${label}…`;
      const zipped = await zipFiles(files);
      pending = { body: new Blob([zipped]), file: `${label}.zip`, zipped };
    } else {
      throw new Error("nothing to read: drop a .zip, a folder of class folders or a .csv");
    }
    $("dsu-name").value = nameFrom(pending.file);
    await preview();
  } catch (e) {
    pending = null;
    $("dsu-status").textContent = "";
    $("dsu-preview").replaceChildren();
    $("dsu-form").hidden = true;
    showError(e.message ?? String(e));
  }
}

/** POST the pending upload to /api/datasets/scan and draw the preview. */
async function preview() {
  $("dsu-status").textContent = `Reading ${pending.file} (${humanBytes(pending.body.size)})…`;
  // file: the user's file name, which the server's messages and summary show
  const res = await fetch(`/api/datasets/scan?${new URLSearchParams({ file: pending.file })}`,
    { method: "POST", body: pending.body });
  const body = await res.json().catch(() => ({}));
  $("dsu-status").textContent = "";
  if (!res.ok) throw new Error(body.error ?? `HTTP ${res.status}`);
  const thumbs = pending.zipped ? await thumbnails(pending.zipped, body.classes ?? []) : {};
  const grid = (body.classes ?? []).map((c) => el("figure", { className: "dsu-class" },
    el("div", { className: "dsu-thumbs" }, ...(thumbs[c.name] ?? []).map((src) =>
      el("img", { src, alt: "", width: 40, height: 40 }))),
    el("figcaption", {}, el("strong", { textContent: c.name }),
      ` ${Number(c.count).toLocaleString()}`)));
  const lines = (cls, items) => items.map((t) => el("li", { className: cls, textContent: t }));
  $("dsu-preview").replaceChildren(
    el("p", { className: "hint", textContent: body.kind === "table"
      ? `${pending.file}: a table of ${body.rows} rows, ${body.features} features, ` +
        `${body.classes.length} classes`
      : `${pending.file}: ${body.images} images in ${body.classes.length} classes` }),
    el("div", { className: "dsu-grid", id: "dsu-grid" }, ...grid),
    el("ul", { className: "dsu-notes" },
      ...lines("dsu-problem", body.problems ?? []),
      ...lines("dsu-refused", (body.refused ?? []).map((r) => `${r.member}: ${r.reason}`)),
      ...lines("", body.notes ?? [])));
  $("dsu-form").hidden = false;
  pending.kind = body.kind;
  $("dsu-size").disabled = $("dsu-color").disabled = body.kind === "table";  // images only
  $("dsu-prepare").disabled = (body.problems ?? []).length > 0;
}

/** {class: [object URL]}: the first THUMBS example images of each class, from the zip. */
async function thumbnails(bytes, classes) {
  for (const u of thumbUrls) URL.revokeObjectURL(u);
  thumbUrls = [];
  const want = new Map();
  for (const c of classes) {
    for (const m of (c.examples ?? []).slice(0, THUMBS)) want.set(m, c.name);  // "cat/1.png"
  }
  // a member's name may keep the common top folder the server stepped into ("photos/")
  const match = (name) => [...want.keys()].find((k) => name === k || name.endsWith(`/${k}`));
  const files = await new Promise((resolve) => unzip(bytes, {
    filter: (f) => IMAGE.test(f.name) && f.originalSize < (4 << 20) && !!match(f.name),
  }, (err, out) => resolve(err ? {} : out)));
  const out = {};
  for (const [name, data] of Object.entries(files)) {
    const cls = want.get(match(name));
    const url = URL.createObjectURL(new Blob([data]));
    thumbUrls.push(url);
    (out[cls] ??= []).push(url);
  }
  return out;
}

/** The progress line of an upload: bytes, %, ETA. */
function progressText(loaded, total, t0) {
  const s = (performance.now() - t0) / 1000;
  const eta = loaded > 0 && loaded < total ? duration(s * (total - loaded) / loaded) : "–";
  return `Uploading ${humanBytes(loaded)} of ${humanBytes(total)} ` +
    `(${Math.floor(100 * loaded / total)}%, ETA ${eta})`;
}

/** POST ``body`` to /api/datasets?``params`` with the progress in ``ui`` ({bar, text}
 * elements); resolves with the server's 201 body, rejects with its error's words. */
export function uploadDataset(body, params, ui) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    const t0 = performance.now();
    xhr.open("POST", `/api/datasets?${new URLSearchParams(params)}`);
    ui.bar.hidden = false;
    ui.bar.value = 0;
    xhr.upload.onprogress = (e) => {
      if (!e.lengthComputable) return;
      ui.bar.value = e.loaded / e.total;
      ui.text.textContent = progressText(e.loaded, e.total, t0);
    };
    xhr.upload.onload = () => {
      ui.bar.removeAttribute("value");  // indeterminate while the server prepares
      ui.text.textContent = `Preparing ${params.name}…`;
    };
    xhr.onload = () => {
      ui.bar.hidden = true;
      let answer = null;
      try {
        answer = JSON.parse(xhr.responseText);
      } catch { /* not JSON: the status says it */ }
      if (xhr.status === 201) resolve(answer);
      else reject(new Error(answer?.error ?? `HTTP ${xhr.status}`));
    };
    xhr.onerror = () => {
      ui.bar.hidden = true;
      reject(new Error("the upload was cut off (too large for the server, or it stopped)"));
    };
    xhr.send(body);
  });
}

/** After a 201: list the datasets again, choose the new one and its model (``keepModel``: the
 * chosen model stays, own-classes.js prepared the data for it). */
export async function useNewDataset(answer, { keepModel = false } = {}) {
  const d = answer.dataset;
  forgetTestSet(d.name);  // a replaced dataset's test images are others
  await loadDatasets(d.name);
  if (!keepModel) chooseDefaultModel();
  log(`Dataset ${d.name} prepared: ${d.train} training + ${d.test} test images, ` +
    `${d.classes.length} classes.`);
  return `Prepared ${d.title}: ${d.sample_shape.join("x")}, ${d.classes.length} classes, ` +
    `${d.train} training + ${d.test} test` + (answer.notes?.length
    ? ` (${answer.notes.join("; ")})` : "");
}

/** Prepare: under the name of a listed dataset, ask first whether to replace it. */
function prepare() {
  if (!pending) return;
  const name = $("dsu-name").value.trim();
  if (!BUILT_IN.has(name) && appState.datasets.some((d) => d.name === name)) {
    $("dsu-replace-ask").textContent = `A dataset named “${name}” exists. Replace it with ` +
      `${pending.file}? Its prepared images are overwritten; runs of it cannot be resumed.`;
    $("dsu-replace").hidden = false;
    $("dsu-replace-no").focus();
    return;
  }
  upload();
}

async function upload() {
  $("dsu-replace").hidden = true;
  if (!pending) return;
  showError(null);
  $("dsu-prepare").disabled = true;
  const params = { name: $("dsu-name").value.trim(), test: $("dsu-test").value,
    file: pending.file };
  if (pending.kind !== "table") {  // a table takes no size or colour: the server refuses them
    Object.assign(params, { size: $("dsu-size").value, color: $("dsu-color").value });
  }
  try {
    const answer = await uploadDataset(pending.body, params,
      { bar: $("dsu-progress"), text: $("dsu-status") });
    $("dsu-status").textContent = await useNewDataset(answer);
  } catch (e) {
    $("dsu-status").textContent = "";
    showError(e.message ?? String(e));
  } finally {
    $("dsu-prepare").disabled = false;
  }
}

// the panel's markup (static: no user data), put into #dataset-upload
const MARKUP = `
<div id="dsu-drop" class="dropzone dsu-drop" tabindex="0" role="button"
     aria-describedby="dsu-hint">
  <input type="file" id="dsu-file" accept=".zip,.csv,application/zip,text/csv" hidden>
  <input type="file" id="dsu-folder" webkitdirectory hidden>
  <span>Drop a <strong>.zip</strong>, a <strong>folder</strong> or a <strong>.csv</strong>
    here, or choose a <u id="dsu-choose">file</u> or a <u id="dsu-choose-folder">folder</u></span>
  <small id="dsu-hint">One subfolder per class (PNG, JPEG, WebP, BMP), or a table with a label
    column. Sent to this trainer's own server, which prepares it.</small>
</div>
<p class="fit-error" id="dsu-error" role="alert" hidden></p>
<div id="dsu-preview" class="dsu-preview" aria-live="polite"></div>
<div id="dsu-form" class="dsu-form" hidden>
  <label>Name <input id="dsu-name" type="text" maxlength="40" pattern="[a-z0-9][a-z0-9_-]*"
    spellcheck="false"></label>
  <label>Size <select id="dsu-size"><option>28</option><option selected>32</option>
    <option>64</option></select></label>
  <label>Colour <select id="dsu-color"><option value="auto">as the images</option>
    <option value="grey">grey</option><option value="rgb">RGB</option></select></label>
  <label>Test share <input id="dsu-test" type="number" min="0.05" max="0.5" step="0.05"
    value="0.2"></label>
  <button type="button" class="btn primary small" id="dsu-prepare">Prepare</button>
</div>
<div id="dsu-replace" class="model-delete-confirm" role="group"
     aria-labelledby="dsu-replace-ask" hidden>
  <p id="dsu-replace-ask"></p>
  <button type="button" class="btn small danger" id="dsu-replace-yes">Yes, replace it</button>
  <button type="button" class="btn small" id="dsu-replace-no">Cancel</button>
</div>
<progress id="dsu-progress" class="dsu-progress" max="1" hidden></progress>
<p class="hint" id="dsu-status" role="status" aria-live="polite"></p>`;

/** Draw the panel into #dataset-upload; wire the drop zone, its file and folder inputs and
 * the Prepare form. */
export function setupDatasetUpload() {
  $("dataset-upload").innerHTML = MARKUP;
  const zone = $("dsu-drop");
  const chosen = (input, label) => take([...input.files].map((f) =>
    ({ path: f.webkitRelativePath || f.name, file: f })), label(input.files));
  $("dsu-file").addEventListener("change", (e) => chosen(e.target, () => "upload"));
  $("dsu-folder").addEventListener("change", (e) => chosen(e.target,
    (fs) => fs[0]?.webkitRelativePath.split("/")[0] || "folder"));
  zone.addEventListener("click", (e) => {
    if (e.target.id === "dsu-choose-folder") $("dsu-folder").click();
    else if (!e.target.closest("input")) $("dsu-file").click();
  });
  zone.addEventListener("keydown", (e) => {
    if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      $("dsu-file").click();
    }
  });
  zone.addEventListener("dragover", (e) => {
    e.preventDefault();
    zone.classList.add("over");
  });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", async (e) => {
    e.preventDefault();
    zone.classList.remove("over");
    const entries = [...e.dataTransfer.items].map((i) => i.webkitGetAsEntry?.()).filter(Boolean);
    if (entries.length === 1 && entries[0].isDirectory) {
      take(await entryFiles(entries[0]), entries[0].name);
    } else {
      take([...e.dataTransfer.files].map((f) => ({ path: f.name, file: f })), "upload");
    }
  });
  $("dsu-prepare").addEventListener("click", prepare);
  $("dsu-replace-yes").addEventListener("click", upload);
  $("dsu-replace-no").addEventListener("click", () => {
    $("dsu-replace").hidden = true;
    $("dsu-status").textContent = `Kept ${$("dsu-name").value.trim()}: nothing was prepared.`;
    $("dsu-name").focus();
  });
  $("dsu-name").addEventListener("input", () => { $("dsu-replace").hidden = true; });
}
