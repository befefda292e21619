// The teacher dashboard's live views (web/teacher/teacher.js feeds them): the roster table,
// the leaderboard and the loss chart, each drawn from the dashboard's state (roster rows and
// loss curves, merged from the event stream).

import uPlot from "/vendor/uplot/uPlot.esm.js";
import { $, el, num, pct } from "../lib/util.js";
import { VERDICT_TITLE } from "../lib/verdict.js";

const STATE_LABEL = { joined: "joined", training: "training", finished: "finished",
  stopped: "stopped", error: "error", disconnected: "disconnected", "no WebGPU": "no WebGPU" };

/** The roster table; a model button calls ``download(path, name)``. */
export function renderRoster(state, download) {
  const rows = [...state.roster.values()].sort((a, b) => a.joined_at - b.joined_at);
  const body = $("roster").querySelector("tbody");
  body.replaceChildren(...rows.map((r) => {
    const tr = el("tr", { className: `state-${r.state.replace(/\s/g, "-")}` });
    tr.dataset.student = r.id;
    const prog = el("div", { className: "prog" });
    const bar = el("progress", { max: Math.max(1, r.total_steps ?? 1), value: r.step ?? 0 });
    prog.append(bar, el("span", { textContent: r.total_steps
      ? `${r.step} / ${r.total_steps}` + (r.epochs ? ` · ep ${r.epoch ?? 0}/${r.epochs}` : "")
      : "–" }));
    // a finished or stopped run shows its verdict in the student's page's words and colours
    const verdict = ["finished", "stopped"].includes(r.state) ? r.verdict : null;
    const pill = el("span", { className: "pill", textContent: verdict
      ? VERDICT_TITLE[verdict] ?? verdict : STATE_LABEL[r.state] ?? r.state });
    pill.dataset.state = verdict && verdict !== "ok" ? `verdict-${verdict}` : r.state;
    if (verdict) pill.dataset.verdict = verdict;
    if (r.error || r.reason) pill.title = r.error ?? r.reason;
    const model = el("td");
    if (r.model_sha256) {
      const b = el("button", { type: "button", className: "btn small", textContent: ".onnx",
        title: `sha256 ${r.model_sha256}` });
      b.addEventListener("click", () => download(`/api/classroom/models/${r.model_sha256}.onnx`,
        `${r.name.replace(/[^\w.-]+/g, "-")}-run${r.run}.onnx`));
      model.append(b);
    }
    const acc = el("td", { className: "num strong", textContent: pct(r.test_acc),
      title: "as the student's page reported it" });
    if (verdict) acc.dataset.verdict = verdict;
    const cells = [
      el("td", { className: "name", textContent: r.name }),
      el("td", { className: "gpu-name", textContent: r.adapter ?? "–", title: r.adapter ?? "" }),
      el("td", {}, pill), el("td", {}, prog),
      el("td", { className: "num", textContent: num(r.loss) }),
      el("td", { className: "num", textContent: pct(r.acc) }),
      el("td", { className: "num", textContent: pct(r.val_acc) }),
      acc,
      el("td", { className: "num", textContent: r.images_per_s == null ? "–"
        : Math.round(r.images_per_s).toLocaleString() }),
      model,
    ];
    tr.append(...cells);
    return tr;
  }));
  $("roster-empty").hidden = rows.length > 0;
  const opt = [...$("session-select").options].find((o) => o.value === state.session?.id);
  if (opt) opt.textContent = `${state.session.name} · ${rows.length} student` +
    `${rows.length === 1 ? "" : "s"}${state.session.open ? "" : " · closed"}`;
  $("roster-count").textContent = rows.length ? `${rows.length} joined · ` +
    `${rows.filter((r) => r.state === "training").length} training · ` +
    `${rows.filter((r) => r.state === "finished").length} finished` : "";
}

/** The leaderboard: best accuracy first; sets ``state.leaderboard``. */
export function renderBoard(state) {
  const ranked = [...state.roster.values()].filter((r) => r.best_acc != null)
    .sort((a, b) => b.best_acc - a.best_acc || (a.finished_at ?? 0) - (b.finished_at ?? 0));
  state.leaderboard = ranked.map((r) => r.name);
  $("leaderboard").replaceChildren(...ranked.map((r, i) => {
    // the best run's verdict, as on the roster: a chance-level best is not shown as a success
    const verdict = r.best_verdict ?? "ok";
    const li = el("li", {}, el("span", { className: "rank", textContent: `${i + 1}` }),
      el("span", { className: "who", textContent: r.name }),
      el("span", { className: "acc", textContent: pct(r.best_acc) }));
    if (verdict !== "ok") {
      li.append(el("span", { className: "verdict-word",
        textContent: VERDICT_TITLE[verdict] ?? verdict }));
    }
    li.dataset.student = r.id;
    li.dataset.verdict = verdict;
    return li;
  }));
  $("board-empty").hidden = ranked.length > 0;
}

// ---------------------------------------------------------------------------- the chart
let chart = null;
let chartIds = [];

function color(i) {
  return `hsl(${(i * 137.508) % 360} 68% 52%)`;
}

/** Drops the chart: the next renderChart draws it afresh. */
export function rebuildChart() {
  chart?.destroy();
  chart = null;
  chartIds = [];
}

/** The loss chart: one series per student with a curve, in joining order. */
export function renderChart(state) {
  const ids = [...state.roster.values()].sort((a, b) => a.joined_at - b.joined_at)
    .map((r) => r.id).filter((id) => state.curves.has(id));
  const box = $("curves");
  $("curves-empty").hidden = ids.length > 0;
  if (!ids.length) return;
  const steps = [...new Set(ids.flatMap((id) => [...state.curves.get(id).steps.keys()]))]
    .sort((a, b) => a - b);
  const data = [steps, ...ids.map((id) => {
    const m = state.curves.get(id).steps;
    return steps.map((s) => (m.has(s) ? m.get(s) : null));
  })];
  if (!chart || ids.join() !== chartIds.join()) {
    rebuildChart();
    chartIds = ids;
    const muted = getComputedStyle(document.documentElement).getPropertyValue("--muted");
    const grid = getComputedStyle(document.documentElement).getPropertyValue("--grid");
    const axis = { stroke: muted, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid } };
    chart = new uPlot({
      width: Math.max(280, box.clientWidth), height: 300,
      scales: { x: { time: false } },
      axes: [{ ...axis, label: "step" }, { ...axis, label: "loss", size: 56 }],
      series: [{ label: "step" }, ...ids.map((id, i) => ({
        label: state.roster.get(id)?.name ?? id, stroke: color(i), width: 1.6, spanGaps: true,
        value: (u, v) => num(v) }))],
      hooks: { setCursor: [legendToLatest] },
    }, data, box);
    legendToLatest(chart);
  } else {
    chart.setData(data);
    legendToLatest(chart);
  }
}

/** Away from the chart, its legend shows each student's latest loss instead of dashes. */
function legendToLatest(u) {
  const n = u.data[0].length;
  if (n && (u.cursor.idx == null || u.cursor.left < 0)) u.setLegend({ idx: n - 1 });
}

new ResizeObserver(() => chart?.setSize({ width: Math.max(280, $("curves").clientWidth),
  height: 300 })).observe($("curves"));
