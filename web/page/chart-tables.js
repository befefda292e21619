// The charts' data as tables (the text alternative of the Dashboard's charts): a "Data table"
// disclosure under each chart, filled from appState when it is opened and kept current while
// open (the last TABLE_ROWS rows of the per-step data; every validation point).

import { appState } from "./state.js";
import { num, pct } from "../lib/util.js";
import { validationPoints } from "./charts.js";

const TABLE_ROWS = 200;

const TABLES = {
  "chart-steps": {
    caption: "Loss and batch accuracy per step",
    head: ["Step", "Loss", "Batch accuracy"],
    rows: () => appState.steps.slice(-TABLE_ROWS).map((s) => [s.step, num(s.loss), pct(s.acc)]),
  },
  "chart-val": {
    caption: "Train and validation against steps",
    head: ["Step", "Epoch", "Validation images", "Train loss", "Train accuracy",
      "Validation loss", "Validation accuracy"],
    rows: () => validationPoints().map((p) => [p.step, p.epoch,
      p.full ? "all" : Number(p.images).toLocaleString(), num(p.train_loss), pct(p.train_acc),
      p.val_loss == null ? "–" : num(p.val_loss), p.val_acc == null ? "–" : pct(p.val_acc)]),
  },
  "chart-lr": {
    caption: "Learning rate per step",
    head: ["Step", "Learning rate"],
    rows: () => appState.steps.slice(-TABLE_ROWS).map((s) => [s.step,
      s.lr == null ? "–" : Number(s.lr).toPrecision(4)]),
  },
};

function fill(details, spec) {
  const table = document.createElement("table");
  table.className = "data-table";
  const cap = table.createCaption();
  cap.textContent = spec.caption;
  const head = table.createTHead().insertRow();
  for (const h of spec.head) {
    const th = document.createElement("th");
    th.scope = "col";
    th.textContent = h;
    head.append(th);
  }
  const body = table.createTBody();
  const rows = spec.rows();
  for (const r of rows) {
    const tr = body.insertRow();
    for (const v of r) tr.insertCell().textContent = String(v);
  }
  if (!rows.length) body.insertRow().insertCell().textContent = "no data yet";
  details.querySelector(".table-wrap").replaceChildren(table);
}

/** Add a "Data table" disclosure under each chart (once, at boot). */
export function setupChartTables() {
  for (const [id, spec] of Object.entries(TABLES)) {
    const chart = document.getElementById(id);
    if (!chart) continue;
    const details = document.createElement("details");
    details.className = "chart-table";
    details.dataset.chart = id;
    details.innerHTML = "<summary>Data table</summary>" +
      '<div class="table-wrap" tabindex="0" role="region"></div>';
    details.querySelector(".table-wrap").setAttribute("aria-label", spec.caption);
    details.addEventListener("toggle", () => details.open && fill(details, spec));
    chart.closest(".chart-wrap").after(details);
  }
}

/** Refresh the open tables (called with the chart redraw). */
export function refreshChartTables() {
  for (const details of document.querySelectorAll("details.chart-table[open]")) {
    fill(details, TABLES[details.dataset.chart]);
  }
}
