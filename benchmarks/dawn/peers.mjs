#!/usr/bin/env node
// The peers of benchmarks/peers.js (jax-js, TensorFlow.js; their WebGPU backends) on the same
// Dawn in Node as the worker (dawn.mjs): TF.js's UMD bundles run in this context (as
// peers.html's script tags do), then peers.js; one JSON line of results.
//
//   node benchmarks/dawn/peers.mjs --jobs '[["jax-js","seednet",64,20,5],["tfjs","gemm",1024,5]]'
//       [--flags backend=null] [--modules benchmarks/node_modules]
// A job: [lib, what, batch (gemm: n), steps (gemm: reps), warmup]. A job that throws gives
// {lib, what, batch, error}; the others still run.
import fs from "node:fs";
import path from "node:path";
import vm from "node:vm";
import { createRequire } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";

const HERE = path.dirname(fileURLToPath(import.meta.url));

function args(argv) {
  const out = { jobs: "[]", flags: [], modules: path.join(HERE, "..", "node_modules"),
    peers: path.join(HERE, "..", "peers.js") };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i].replace(/^--/, "");
    if (k === "flags") out.flags.push(argv[++i]);
    else if (k in out) out[k] = argv[++i];
    else throw new Error(`unknown argument ${argv[i]}`);
  }
  out.jobs = JSON.parse(out.jobs);
  return out;
}

async function main() {
  const a = args(process.argv.slice(2));
  const { create, globals } = await import(pathToFileURL(path.join(a.modules, "webgpu/index.js")));
  Object.assign(globalThis, globals);
  Object.defineProperty(globalThis, "navigator", { value: { gpu: create(a.flags),
    userAgent: "node-dawn" }, configurable: true, writable: true });
  globalThis.window = globalThis.self = globalThis;
  globalThis.require = createRequire(import.meta.url);  // TF.js asks for node:util in Node
  for (const f of ["@tensorflow/tfjs/dist/tf.min.js",
    "@tensorflow/tfjs-backend-webgpu/dist/tf-backend-webgpu.min.js"]) {
    vm.runInThisContext(fs.readFileSync(path.join(a.modules, f), "utf8"), { filename: f });
  }
  // peers.js imports jax-js as ./node_modules/@jax-js/jax/dist/index.js, next to itself
  await import(pathToFileURL(path.resolve(a.peers)));
  const results = [];
  for (const [lib, what, batch, steps, warmup] of a.jobs) {
    try {
      results.push(await globalThis.peers.run(lib, what, batch, steps, warmup ?? 2));
    } catch (err) {
      results.push({ lib, what, batch, error: String(err?.message ?? err) });
    }
    process.stderr.write(`[peers] ${JSON.stringify(results.at(-1))}\n`);
  }
  process.stdout.write(JSON.stringify({ node: process.version, flags: a.flags, results }) + "\n");
}

main().then(() => process.exit(0), (err) => {
  process.stdout.write(JSON.stringify({ error: String(err?.message ?? err).slice(0, 2000) }) + "\n");
  process.exit(1);
});
