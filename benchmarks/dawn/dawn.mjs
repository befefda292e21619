// The browser path without a browser: the page's own Web Worker (web/lib/worker.js, unchanged)
// and its Python (py/webgpu_trainer/worker/, from the engine wheel) in Node.js, on Dawn's
// WebGPU (npm `webgpu`, the dawn.node of Chrome's implementation, with its Tint compiler) and
// Pyodide (the copy web/node_modules/pyodide that the server vendors for the page).
//
// What a browser would give the worker is stubbed here and nothing else:
// - navigator.gpu: Dawn (`create(flags)`; flags e.g. ["backend=null"] for wiring checks);
// - fetch: URLs of the page's server answered from a "site" folder written by
//   benchmarks/dawn/site.py (site/<url path> holds the body; 404 for anything else); other
//   URLs are refused (nothing is fetched from the network);
// - self.postMessage / self.onmessage: the worker's messages are collected and its inbox fed;
// - location.search: "" (no test hooks).
// The worker's `import ... from "/vendor/pyodide/pyodide.mjs"` is resolved to the local copy by
// a module resolve hook; `/api/wheel` names the local Pyodide folder as its `pyodide`.
// Node >= 20.6 (module.register).
import fs from "node:fs";
import path from "node:path";
import { register } from "node:module";
import { pathToFileURL } from "node:url";

/** Make this process look like the page's module worker. ``opts``: ``site`` (folder),
 * ``pyodide`` (folder of pyodide.mjs), ``webgpu`` (folder of the npm package), ``flags``
 * (Dawn's create() flags). Returns ``{gpu}``. */
export async function installWorkerGlobals(opts) {
  const { create, globals } = await import(pathToFileURL(path.join(opts.webgpu, "index.js")));
  Object.assign(globalThis, globals);
  const gpu = create(opts.flags ?? []);
  Object.defineProperty(globalThis, "navigator", { value: { gpu, userAgent: "node-dawn" },
    configurable: true, writable: true });
  globalThis.self = globalThis;
  globalThis.location = { search: "", href: "http://dawn.local/lib/worker.js" };
  const pyodideDir = path.resolve(opts.pyodide) + path.sep;
  globalThis.fetch = (url) => siteFetch(path.resolve(opts.site), pyodideDir, String(url));
  // the worker's Pyodide import: the local pyodide.mjs, its loadPyodide wrapped to keep the
  // instance in globalThis.dawnPyodide (run.mjs --no-selfcheck reaches the worker's state)
  const real = pathToFileURL(path.join(pyodideDir, "pyodide.mjs")).href;
  const wrapper = `import { loadPyodide as load } from ${JSON.stringify(real)};
    export async function loadPyodide(o) {
      const p = await load(o); globalThis.dawnPyodide = p; return p; }`;
  const hook = `export async function resolve(spec, ctx, next) {
    if (spec === "/vendor/pyodide/pyodide.mjs")
      return { url: ${JSON.stringify("data:text/javascript," + encodeURIComponent(wrapper))},
               shortCircuit: true };
    return next(spec, ctx); }`;
  register("data:text/javascript," + encodeURIComponent(hook));
  return { gpu };
}

/** The stub of `fetch`: ``url`` (of the page's origin) answered from the ``site`` folder; 404 for
 * what it lacks or what resolves outside it; other origins refused (a rejected Promise). */
export function siteFetch(site, pyodideDir, url) {
  const u = new URL(url, "http://dawn.local/");
  if (u.host !== "dawn.local") {
    return Promise.reject(new TypeError(`fetch ${url}: the harness serves only the site folder`));
  }
  if (u.pathname === "/api/wheel") {
    const meta = JSON.parse(fs.readFileSync(path.join(site, "api", "wheel"), "utf8"));
    return Promise.resolve(Response.json({ ...meta, pyodide: pyodideDir }));
  }
  let file = "";
  try { file = path.join(site, decodeURIComponent(u.pathname)); } catch { /* bad %-escape: 404 */ }
  if (!file || !file.startsWith(site + path.sep) || !fs.existsSync(file) || !fs.statSync(file).isFile()) {
    return Promise.resolve(new Response(JSON.stringify({ detail: `not in the site: ${u.pathname}` }),
      { status: 404, headers: { "content-type": "application/json" } }));
  }
  return Promise.resolve(new Response(fs.readFileSync(file)));
}

/** Start the worker (web/lib/worker.js) in this process; returns ``{send, next, messages}``:
 * ``send(msg)`` posts to the worker, ``await next(types, timeoutMs)`` the next message of one
 * of ``types`` (an ``error`` or ``no_webgpu`` message rejects), ``messages`` all so far. */
export async function startWorker(workerJs, log = () => {}) {
  const messages = [];
  const waiting = [];
  globalThis.postMessage = (msg) => {
    messages.push(msg);
    log(msg);
    for (const w of waiting.splice(0)) w();
  };
  await import(pathToFileURL(path.resolve(workerJs)));
  let seen = 0;
  async function next(types, timeoutMs = 600000) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      while (seen < messages.length) {
        const m = messages[seen++];
        if (types.includes(m.type)) return m;
        if (m.type === "error" || m.type === "no_webgpu") {
          throw new Error(`worker ${m.type}: ${m.message}`);
        }
      }
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no ${types.join("/")} message within ${timeoutMs} ms`);
      await new Promise((ok) => {
        const t = setTimeout(ok, left);
        waiting.push(() => { clearTimeout(t); ok(); });
      });
    }
  }
  return { send: (msg) => globalThis.onmessage({ data: msg }), next, messages };
}
