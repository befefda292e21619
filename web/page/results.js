// The results card: the run's verdict (ok / diverged / no better than chance / stopped, and
// why: engine/train/verdict.py), test accuracy and loss, the last validation accuracy, the test
// set's views (web/page/evaluation.js) and "Download trained .onnx" (POST
// /api/models/{name}/export with the trained weights and the run's provenance).

import { $, humanBytes, duration, num, pct } from "../lib/util.js";
import { appState, log, showError, stateChanged } from "./state.js";
import { clearEvaluation, renderEvaluation } from "./evaluation.js";
import { VERDICT_TITLE } from "../lib/verdict.js";

export { VERDICT_TITLE } from "../lib/verdict.js";

export function clearResults() {
  for (const id of ["test-acc", "test-loss", "val-acc", "eval-count", "result-steps"]) {
    $(id).textContent = "–";
  }
  $("result-note").textContent = "";
  $("verdict").hidden = true;
  $("results-empty").hidden = false;
  delete $("results").dataset.state;
  clearEvaluation();
}

/** Show the worker's `done` message ``m``; ``secs``: wall time since Start (or null). */
export function showResults(m, secs) {
  const steps = m.steps ?? appState.progress?.step ?? appState.steps.at(-1)?.step ?? null;
  const verdict = m.verdict ?? (m.stopped ? "stopped" : "ok");
  $("results-empty").hidden = true;
  $("verdict-title").textContent = VERDICT_TITLE[verdict] ?? verdict;
  $("verdict-reason").textContent = m.reason ? m.reason[0].toUpperCase() + m.reason.slice(1) : "";
  $("verdict").dataset.verdict = verdict;
  $("verdict").hidden = false;
  $("test-acc").textContent = pct(m.test_acc);
  $("test-loss").textContent = num(m.test_loss);
  $("val-acc").textContent = m.val_acc == null ? "–" : pct(m.val_acc);
  $("val-acc").title = m.val_acc == null ? "no validation images (val_images 0) or no whole epoch"
    : "the last epoch's accuracy on the training images held out for validation";
  $("eval-count").textContent =
    m.eval_images != null ? Number(m.eval_images).toLocaleString() : "–";
  $("result-steps").textContent = steps != null ? Number(steps).toLocaleString() : "–";
  $("result-note").textContent = [
    m.model, appState.config?.optimizer, m.stopped ? "stopped early" : "completed",
    secs != null ? `${duration(secs)} wall time` : "",
  ].filter(Boolean).join(" · ");
  $("results").dataset.state = verdict;
  renderEvaluation(m);
}

/** Export ``run``'s weights (bundle layout) as .onnx through the server and download it:
 * ``run`` is a `done` message (default: the last one), a `snapshot` of a run in progress
 * ({weights, model, steps, epochs_done}) or a stored checkpoint's (also ``config``: its
 * settings); ``btn`` shows "Exporting…" meanwhile. */
export async function downloadOnnx(run = window.lastRun, btn = $("download")) {
  if (!run?.weights) return;
  const cfg = run.config ?? appState.config ?? {};
  const model = run.model || appState.model;
  const provenance = {
    dataset: (appState.runDataset ?? appState.dataset)?.title ?? "MNIST",
    epochs: run.epochs_done ?? appState.progress?.epoch ?? cfg.epochs,
    optimizer: cfg.optimizer,
    lr: cfg.lr,
    batch_size: cfg.batch_size,
    seed: cfg.seed,
    init: cfg.init,
    test_accuracy: run.test_acc,
    trainable: cfg.trainable ? cfg.trainable.join(",") : "all",
    steps: run.steps ?? appState.progress?.step ?? 0,
  };
  appState.busy.downloading = true;
  stateChanged();
  const label = btn.textContent;
  btn.textContent = "Exporting…";
  try {
    const res = await fetch(`/api/models/${encodeURIComponent(model)}/export`, {
      method: "POST",
      headers: { "Content-Type": "application/octet-stream",
        "X-Provenance": JSON.stringify(provenance) },
      body: run.weights,
    });
    if (!res.ok) {
      let detail = (await res.text().catch(() => "")).slice(0, 2000);
      try { detail = JSON.parse(detail).error ?? detail; } catch { /* plain text */ }
      throw new Error(`HTTP ${res.status}${detail ? `: ${detail}` : ""}`);
    }
    const blob = await res.blob();
    const url = URL.createObjectURL(blob);
    const a = document.createElement("a");
    a.href = url;
    a.download = `${model}-trained.onnx`;
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10_000);
    log(`Exported ${model}-trained.onnx (${humanBytes(blob.size)}).`);
  } catch (e) {
    showError(`Export failed: ${e.message ?? e}`);
  } finally {
    appState.busy.downloading = false;
    btn.textContent = label;
    stateChanged();
  }
}
