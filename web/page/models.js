// The model list (GET /api/models) and bringing your own model: the drop zone and its upload
// (POST /api/models/upload), with every import problem listed; deleting an upload (DELETE
// /api/models/{name}, after a confirm step; not during a run: the settings are disabled then).

import { $, el, humanBytes, humanCount } from "../lib/util.js";
import { appState, log, setStatus, settingsChanged, showError, stateChanged } from "./state.js";
import { loadSummary } from "./summary.js";

export async function loadModels(select = null) {
  const sel = $("model");
  try {
    const res = await fetch("/api/models");
    if (!res.ok) throw new Error(`GET /api/models: HTTP ${res.status}`);
    const models = await res.json();
    appState.models = models;
    sel.textContent = "";
    if (!models.length) {
      sel.append(new Option("no models found in models/", "", true, true));
      sel.options[0].disabled = true;
    }
    for (const m of models) {
      const label = m.error ? `${m.name} (cannot be loaded)`
        : m.params != null ? `${m.name} — ${humanCount(m.params)} params` : m.name;
      const opt = new Option(label, m.name);
      opt.disabled = !!m.error;
      sel.append(opt);
    }
    const usable = models.filter((m) => !m.error);
    const preferred = usable.find((m) => m.name === select) ??
      usable.find((m) => m.name === "seednet") ?? usable[0];
    sel.value = preferred ? preferred.name : "";
    onModelChange();
  } catch (e) {
    sel.textContent = "";
    sel.append(new Option("could not load models", "", true, true));
    showError(`Could not load the model list: ${e.message ?? e}`);
  }
  stateChanged();
}

export function onModelChange() {
  const m = appState.models.find((x) => x.name === $("model").value);
  $("model-hint").textContent = m?.error ? m.error : m
    ? [m.uploaded ? "uploaded" : "", m.file, humanBytes(m.bytes),
       m.params != null ? `${Number(m.params).toLocaleString()} parameters` : ""]
      .filter(Boolean).join(" · ")
    : "";
  appState.summary = null;
  $("model-delete").hidden = !m?.uploaded;
  $("model-delete-confirm").hidden = true;
  $("model-delete-error").hidden = true;
  stateChanged();
  settingsChanged(0);  // class weights are checked against the model's classes
  document.dispatchEvent(new Event("model-changed"));  // dataset.js checks the fit
  if (m && !m.error) loadSummary(m.name);
  else $("summary-card").hidden = true;
}

function showImportErrors(title, problems, hints = []) {
  const ul = $("import-errors");
  ul.replaceChildren();
  const head = document.createElement("li");
  head.append(Object.assign(document.createElement("strong"), { textContent: title }));
  ul.append(head);
  for (const p of problems) ul.append(el("li", { textContent: p }));
  for (const h of hints) {  // e.g. the ops the engine trains: long, so folded
    const det = document.createElement("details");
    det.append(Object.assign(document.createElement("summary"), { textContent: h.split(":")[0] }),
      document.createTextNode(h.slice(h.indexOf(":") + 1)));
    const li = document.createElement("li");
    li.append(det);
    ul.append(li);
  }
  ul.hidden = false;
}

async function uploadModel(file) {
  if (!file) return;
  const zone = $("dropzone");
  $("import-errors").hidden = true;
  if (!file.name.toLowerCase().endsWith(".onnx")) {
    showImportErrors(`${file.name}: not an .onnx file`,
      ["Export your model with torch.onnx.export(model, x, \"model.onnx\")."]);
    setStatus(`${file.name} was not imported.`);
    return;
  }
  zone.classList.add("busy");
  setStatus(`Uploading ${file.name} (${humanBytes(file.size)})…`);
  try {
    const res = await fetch(`/api/models/upload?filename=${encodeURIComponent(file.name)}`, {
      method: "POST", headers: { "Content-Type": "application/octet-stream" }, body: file,
    });
    const body = await res.json().catch(() => ({ error: `HTTP ${res.status}` }));
    if (!res.ok) {
      const problems = body.problems ?? [];
      showImportErrors(problems.length ? `${file.name} cannot be used:` : body.error, problems,
        body.hints ?? []);
      setStatus(`${file.name} was not imported.`);
      log(`Upload of ${file.name} refused: ${body.error}`, "error");
      return;
    }
    log(`Imported ${file.name} as model “${body.name}”: ` +
      `${Number(body.summary.totals.params).toLocaleString()} parameters.`);
    setStatus(`Imported ${body.name}.`);
    await loadModels(body.name);
  } catch (e) {
    showImportErrors(`Upload of ${file.name} failed: ${e.message ?? e}`, []);
  } finally {
    zone.classList.remove("busy");
  }
}

async function deleteModel() {
  const name = $("model").value;
  const fail = (text) => {
    $("model-delete-error").textContent = text;
    $("model-delete-error").hidden = false;
  };
  $("model-delete-confirm").hidden = true;
  if (appState.phase === "training") return fail("Stop the training run first.");
  try {
    const res = await fetch(`/api/models/${encodeURIComponent(name)}`, { method: "DELETE" });
    const body = await res.json().catch(() => ({ error: `HTTP ${res.status}` }));
    if (!res.ok) return fail(`Could not delete ${name}: ${body.error}`);
  } catch (e) {
    return fail(`Could not delete ${name}: ${e.message ?? e}`);
  }
  log(`Deleted the uploaded model “${name}”.`);
  setStatus(`Deleted ${name}.`);
  await loadModels();
}

function setupDelete() {
  $("model-delete-ask").addEventListener("click", () => {
    $("model-delete-question").textContent = `Delete “${$("model").value}” from this ` +
      "computer? Its file is removed from the uploads; upload it again to use it again.";
    $("model-delete-error").hidden = true;
    $("model-delete-confirm").hidden = false;
    $("model-delete-no").focus();
  });
  $("model-delete-no").addEventListener("click", () => {
    $("model-delete-confirm").hidden = true;
    $("model-delete-ask").focus();
  });
  $("model-delete-yes").addEventListener("click", deleteModel);
}

export function setupDropzone() {
  setupDelete();
  const zone = $("dropzone");
  const input = $("model-file");
  zone.addEventListener("click", () => input.click());
  zone.addEventListener("keydown", (e) => {
    if (e.key === "Enter" || e.key === " ") { e.preventDefault(); input.click(); }
  });
  input.addEventListener("change", () => { uploadModel(input.files[0]); input.value = ""; });
  zone.addEventListener("dragover", (e) => { e.preventDefault(); zone.classList.add("over"); });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", (e) => {
    e.preventDefault();
    zone.classList.remove("over");
    uploadModel(e.dataTransfer.files[0]);
  });
}
