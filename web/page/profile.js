// The per-kernel profile on demand (Dashboard, "Speed & machine"): the worker builds the run of
// the current settings and times every dispatch of one training step on its own
// (GpuEngine.profile: n and 2n copies of it in one submit each, the difference / n; one lone
// run on a slow adapter), answering `profile {rows: [[phase, kernel, grid, ms]]}`; the page
// shows the slowest kernels with their share of the step.

import { $ } from "../lib/util.js";
import { appState, log, setStatus, stateChanged } from "./state.js";
import { currentConfig } from "./form.js";
import { post } from "./worker-link.js";

const TOP = 15;

export function setupProfile() {
  $("profile-run").addEventListener("click", requestProfile);
}

function requestProfile() {
  if ($("profile-run").disabled) return;
  const cfg = currentConfig();
  const model = $("model").value;
  appState.busy.profiling = true;
  stateChanged();
  $("profile-out").replaceChildren();
  $("profile-note").textContent = "Profiling: building the training step of the current " +
    "settings and timing each of its kernels alone…";
  setStatus("Profiling the kernels…");
  post({ type: "profile", model, config: { ...cfg, model } });
}

/** The worker's `profile` message: a table of the slowest kernels. */
export function onProfile(m) {
  appState.busy.profiling = false;
  stateChanged();
  const rows = (m.rows ?? []).map(([phase, kernel, grid, ms]) => ({ phase, kernel, grid, ms }));
  const total = rows.reduce((a, r) => a + r.ms, 0);
  rows.sort((a, b) => b.ms - a.ms);
  appState.profile = { rows, total };
  const table = document.createElement("table");
  table.className = "data-table profile-table";
  table.createCaption().textContent =
    `The ${Math.min(TOP, rows.length)} slowest of ${rows.length} kernels of one training step`;
  const head = table.createTHead().insertRow();
  for (const h of ["Phase", "Kernel", "Workgroups", "ms", "Share"]) {
    const th = document.createElement("th");
    th.scope = "col";
    th.textContent = h;
    head.append(th);
  }
  const body = table.createTBody();
  for (const r of rows.slice(0, TOP)) {
    const tr = body.insertRow();
    for (const v of [r.phase, r.kernel, `[${r.grid.join(", ")}]`, r.ms.toFixed(r.ms < 0.1 ? 4 : 2),
      `${((100 * r.ms) / (total || 1)).toFixed(1)}%`]) tr.insertCell().textContent = v;
  }
  $("profile-out").replaceChildren(table);
  $("profile-note").textContent = `Sum of all ${rows.length} kernels: ${total.toFixed(1)} ms ` +
    "(each timed alone; on a fast GPU as copies of it in one submit, the submit's own cost " +
    "taken out).";
  setStatus("Profile ready (Dashboard, Speed & machine).");
  log(`Profile: ${rows.length} kernels, ${total.toFixed(1)} ms summed; slowest ` +
    (rows[0] ? `${rows[0].kernel} ${rows[0].ms.toFixed(2)} ms` : "–"));
}
