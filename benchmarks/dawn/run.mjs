#!/usr/bin/env node
// Drive the page's worker (dawn.mjs: web/lib/worker.js + Pyodide + Dawn in Node) through a list
// of jobs and print one JSON line of results.
//
//   node benchmarks/dawn/run.mjs --site .cache/dawn-site --jobs '[{"type":"bench",...}]'
//       [--flags backend=null] [--out results.json] [--verbose] [--no-selfcheck]
//
// A job is a worker message (docs/ARCHITECTURE.md, "Worker protocol") and what answers it:
//   {"type": "bench", "model", "config", "steps", "warmup", "host"}   -> the `bench` message
//   {"type": "start", "model", "config"}    -> {losses: [[step, loss], ...], done: {...}}
//   {"type": "selfcheck"}                   -> the `selfcheck` message
// Paths (defaults: this checkout's): --worker web/lib/worker.js, --pyodide
// web/node_modules/pyodide, --webgpu benchmarks/node_modules/webgpu.
// --no-selfcheck: mark the worker's self-check as done (skipped) so a run does not start with
// it (the wiring test's time budget; the benchmark keeps it: it proves Tint's results).
// Exit 1 with {"error": ...} when the worker reports an error.
import path from "node:path";
import fs from "node:fs";
import { fileURLToPath } from "node:url";
import { installWorkerGlobals, startWorker } from "./dawn.mjs";

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");

function args(argv) {
  const out = { site: null, jobs: "[]", flags: [], out: null, verbose: false, selfcheck: true,
    worker: path.join(REPO, "web/lib/worker.js"),
    pyodide: path.join(REPO, "web/node_modules/pyodide"),
    webgpu: path.join(REPO, "benchmarks/node_modules/webgpu"), timeout: 600 };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i].replace(/^--/, "");
    if (k === "verbose") out.verbose = true;
    else if (k === "no-selfcheck") out.selfcheck = false;
    else if (k === "flags") out.flags.push(argv[++i]);
    else if (k in out) out[k] = argv[++i];
    else throw new Error(`unknown argument ${argv[i]}`);
  }
  if (!out.site) throw new Error("--site FOLDER is required (benchmarks/dawn/site.py writes it)");
  out.jobs = JSON.parse(out.jobs.startsWith("@") ? fs.readFileSync(out.jobs.slice(1), "utf8")
    : out.jobs);
  return out;
}

async function runJob(w, job, timeoutMs) {
  w.send(job);
  if (job.type === "bench") return await w.next(["bench"], timeoutMs);
  if (job.type === "selfcheck") return await w.next(["selfcheck"], timeoutMs);
  if (job.type === "start") {
    const losses = [];
    for (;;) {
      const m = await w.next(["progress", "done"], timeoutMs);
      if (m.type === "progress") losses.push(...m.losses);
      else {
        return { losses, done: { test_loss: m.test_loss, test_acc: m.test_acc,
          steps: m.steps, seconds: m.seconds } };
      }
    }
  }
  throw new Error(`job type ${JSON.stringify(job.type)}: bench, start or selfcheck`);
}

async function main() {
  const a = args(process.argv.slice(2));
  const t0 = performance.now();
  await installWorkerGlobals(a);
  const log = a.verbose ? (m) => process.stderr.write(`[worker ${((performance.now() - t0) / 1000).toFixed(1)} s] ${m.type} ${
    JSON.stringify(m).slice(0, 300)}\n`) : () => {};
  const w = await startWorker(a.worker, log);
  const ready = await w.next(["ready"], a.timeout * 1000);
  const adapter = w.messages.find((m) => m.type === "adapter")?.info ?? null;
  const out = { adapter, flags: a.flags, node: process.version, boot_s: 0, results: [] };
  out.boot_s = (performance.now() - t0) / 1000;
  void ready;
  if (!a.selfcheck) {  // the worker runs its self-check before the first run unless it has one
    globalThis.dawnPyodide.runPython(`from webgpu_trainer.worker.bridge import STATE
STATE["selfcheck"] = {"ok": True, "wrong": [], "rows": [], "seconds": 0.0,
                      "skipped": "benchmarks/dawn/run.mjs --no-selfcheck"}`);
  }
  out.selfcheck = a.selfcheck;
  for (const job of a.jobs) {
    const t = performance.now();
    const r = await runJob(w, job, a.timeout * 1000);
    const { type: _t, ...fields } = r;
    out.results.push({ job, seconds: (performance.now() - t) / 1000, ...fields });
    if (a.verbose) process.stderr.write(`[run] ${JSON.stringify(out.results.at(-1)).slice(0, 400)}\n`);
  }
  const text = JSON.stringify(out);
  if (a.out) fs.writeFileSync(a.out, text);
  process.stdout.write(text + "\n");
}

main().then(() => process.exit(0), (err) => {
  process.stdout.write(JSON.stringify({ error: String(err?.stack ?? err) }) + "\n");
  process.exit(1);
});
