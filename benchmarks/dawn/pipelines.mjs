// Which compute pipelines Dawn (npm `webgpu`) refuses: node pipelines.mjs ITEMS.json [--flags F]...
// ITEMS.json: [[label, wgsl, entryPoint, constants], ...]. Prints one JSON line, the list of
// "label: message" for each refused shader module or pipeline ([] when all build). With
// --flags backend=null Dawn runs Tint's front end (WGSL validation, override constants,
// workgroup size and memory checks) and compiles nothing for a GPU: tests/test_ops_tiled.py
// checks the pipelines there whose SwiftShader compile takes minutes.
import fs from "node:fs";
import { create, globals } from "webgpu";

Object.assign(globalThis, globals);
const args = process.argv.slice(2);
const flags = [];
for (let i = 1; i < args.length; i += 2) {
  if (args[i] !== "--flags") throw new Error(`unknown argument ${args[i]}`);
  flags.push(args[i + 1]);
}
const items = JSON.parse(fs.readFileSync(args[0], "utf8"));
const adapter = await create(flags).requestAdapter();
const device = await adapter.requestDevice({  // as the engine asks (backends/webgpu_js.py)
  requiredLimits: { maxStorageBuffersPerShaderStage:
                    Math.min(10, adapter.limits.maxStorageBuffersPerShaderStage) } });
const out = [];
for (const [label, code, entryPoint, constants] of items) {
  device.pushErrorScope("validation");
  const module = device.createShaderModule({ code, label });
  device.createComputePipeline({ layout: "auto", compute: { module, entryPoint, constants } });
  const err = await device.popErrorScope();
  if (err) out.push(`${label}: ${err.message}`);
}
device.destroy();
console.log(JSON.stringify(out));
process.exit(0);
