"""Browser measurements: the engine in headless Chromium (``--enable-unsafe-webgpu``; here
SwiftShader), driven through its own Web Worker with the ``bench`` message
(worker/bench.py), and the peers (jax-js, TensorFlow.js; benchmarks/peers.html) in the
same Chromium on the same adapter.

Our engine: the real server (``server.py``) on a free 127.0.0.1 port; the page loads, then a
second worker (``/lib/worker.js``, the page's own code) gets ``{type: "bench", config, steps,
warmup, profile}`` and answers ``bench {wall_ms, host_ms, profile?}``. Peers: benchmarks/ is
served by a static file server on another free port (its node_modules hold the peers, installed
by ``npm ci --prefix benchmarks``).
"""

from __future__ import annotations

import functools
import http.server
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CHROMIUM = os.environ.get("WEBGPU_TRAINER_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--enable-unsafe-webgpu", "--disable-background-networking",
                 "--disable-component-update"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``python server.py`` on a free 127.0.0.1 port, stopped on exit."""

    def __enter__(self):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, str(REPO / "server.py"), "--host",
                                      "127.0.0.1", "--port", str(self.port)], cwd=REPO,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 180
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("server exited: " + self.proc.stderr.read().decode()[-2000:])
            try:
                with urllib.request.urlopen(f"{self.url}/api/models", timeout=5) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"server did not answer on {self.url}")
            time.sleep(0.3)

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class StaticServer:
    """benchmarks/ over HTTP on a free 127.0.0.1 port (a thread), for peers.html."""

    def __enter__(self):
        handler = functools.partial(_QuietHandler, directory=str(HERE))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".js": "text/javascript", ".mjs": "text/javascript"}

    def log_message(self, *args):
        pass


def launch(p, chromium: str = CHROMIUM):
    if not Path(chromium).exists():
        raise RuntimeError(f"{chromium} not found (apt-get install chromium)")
    return p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)


BENCH_JS = """async ([msg, timeoutMs]) => {
  const w = new Worker("/lib/worker.js", { type: "module" });
  try {
    return await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("bench timed out")), timeoutMs);
      w.onmessage = (ev) => {
        const m = ev.data;
        if (m.type === "ready") w.postMessage(msg);
        else if (m.type === "bench") { clearTimeout(timer); resolve(m); }
        else if (m.type === "error" || m.type === "no_webgpu") {
          clearTimeout(timer); reject(new Error(m.message)); }
      };
      w.onerror = (ev) => { clearTimeout(timer); reject(new Error(ev.message)); };
    });
  } finally { w.terminate(); }
}"""


def engine(browser, url: str, batch: int, steps: int, warmup: int, profile: bool,
           gemm: int = 0, timeout_s: float = 900) -> dict:
    """Our engine's SeedNet steps at ``batch`` in a worker of the page at ``url`` (and its
    ``gemm`` x ``gemm`` GEMM when nonzero): the worker's ``bench`` answer."""
    ctx = browser.new_context()
    page = ctx.new_page()
    try:
        page.goto(url)
        cfg = {"optimizer": "adam", "lr": 0.001, "batch_size": batch, "epochs": 1, "seed": 0,
               "init": "scratch", "eval_images": batch, "train_images": 0}
        msg = {"type": "bench", "model": "seednet", "config": cfg, "steps": steps,
               "warmup": warmup, "profile": profile, "host": 5 if batch < 512 else 2, "gemm": gemm}
        return page.evaluate(BENCH_JS, [msg, int(timeout_s * 1000)])
    finally:
        ctx.close()


def peer(browser, url: str, lib: str, what: str, batch: int, steps: int, warmup: int,
         timeout_s: float = 1200) -> dict:
    """One peer measurement from peers.html: ``lib`` jax-js or tfjs, ``what`` seednet or
    gemm (``batch`` = n for the GEMM)."""
    ctx = browser.new_context()
    page = ctx.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(f"{url}/peers.html")
        page.wait_for_function("window.peers !== undefined", timeout=60_000)
        return page.evaluate("([lib, what, batch, steps, warmup]) => "
                             "window.peers.run(lib, what, batch, steps, warmup)",
                             [lib, what, batch, steps, warmup])
    except Exception as exc:
        raise RuntimeError(f"{lib} {what}: {exc} {' '.join(errors)[:500]}") from None
    finally:
        ctx.close()
