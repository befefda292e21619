#!/usr/bin/env python3
"""Benchmark (not a test): SeedNet training speed, ms/step and images/s, natively and in the
browser, with the adapter used. Issue 2, item 10.

    python scripts/bench.py                       # both, batch 64 and 1000
    python scripts/bench.py --native-only --steps 50 --batch 64
    webgpu-trainer bench --browser-only --batch 64

native:  wgpu-py (``webgpu_trainer.engine.train.Trainer`` on real MNIST, Adam, from scratch): a few
         warm-up steps, then N steps of its engine (``GpuEngine.step``: uniforms, one submit),
         each timed span closed by ``await dev.sync()``.
browser: the real server + headless Chromium (``--enable-unsafe-webgpu``) driving the page as a
         user would (Start with "max steps"); the worker reports progress every 10 steps, so the
         first report (10 steps, including first-use pipeline/warm-up costs) is the warm-up and
         ms/step is the wall time between the first and the last report divided by the steps in
         between. Where only one report arrives in time, the worker's own images/s (steps since
         the run started / elapsed) is used instead and the row says so.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "py") not in sys.path:
    sys.path.insert(0, str(REPO / "py"))

CHROMIUM = os.environ.get("WEBGPU_TRAINER_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--enable-unsafe-webgpu", "--disable-background-networking",
                 "--disable-component-update"]
REPORT_EVERY = 10  # the browser worker's progress interval (config.BY_NAME["report_every"].default)


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--native-only", action="store_true", help="only wgpu-py")
    g.add_argument("--browser-only", action="store_true", help="only headless Chromium")
    p.add_argument("--steps", type=int, default=20,
                   help="timed steps per run (browser: rounded up to a multiple of 10; "
                        "default 20)")
    p.add_argument("--warmup", type=int, default=3, help="native warm-up steps (default 3)")
    p.add_argument("--batch", type=int, nargs="+", default=[64, 1000],
                   help="batch sizes (default 64 1000)")
    p.add_argument("--model", default="seednet", help="model in models/ (default seednet)")
    p.add_argument("--timeout", type=float, default=600,
                   help="browser: seconds per run before it is stopped and measured as is")
    p.add_argument("--chromium", default=CHROMIUM, help=f"Chromium binary (default {CHROMIUM})")
    p.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    return p


def adapter_name(info: dict | None) -> str:
    info = info or {}
    name = info.get("device") or info.get("description") or " ".join(
        str(info[k]) for k in ("vendor", "architecture") if info.get(k))
    backend = info.get("backend_type") or info.get("adapter_type")
    return f"{name} ({backend})" if name and backend else (name or "?")


# ----------------------------------------------------------------------------------- native

def bench_native(batches: list[int], steps: int, warmup: int, model: str) -> list[dict]:
    return asyncio.run(_bench_native(batches, steps, warmup, model))


async def _bench_native(batches, steps, warmup, model):
    from webgpu_trainer import onnx_io
    from webgpu_trainer.host import data
    from webgpu_trainer.engine.backends.wgpu_native import Device
    from webgpu_trainer.engine.train import Split, Trainer

    cache = REPO / ".cache" / "mnist"
    data.prepare(cache)
    splits = {}
    for name in ("train", "test"):
        images, labels = data.load(cache, name)
        splits[name] = Split(images.tobytes(), labels.tobytes(), len(labels), labels.tobytes(),
                             784)
    graph, weights = onnx_io.load_bundle(REPO / "models" / f"{model}.onnx")
    dev = Device()
    rows = []
    for batch in batches:
        cfg = {"optimizer": "adam", "lr": 1e-3, "batch_size": batch, "seed": 0,
               "init": "scratch", "eval_images": batch, "val_images": 0}
        trainer = Trainer(dev, graph, weights, cfg, splits["train"], splits["test"])
        t0 = time.perf_counter()
        await trainer.setup()
        setup_s = time.perf_counter() - t0
        per_epoch = splits["train"].count // batch

        async def one_step():  # the loop's per-step work: the engine's step, no readback
            trainer.step = t = trainer.step + 1
            await trainer.engine.step(t, ((t - 1) % per_epoch) * batch, trainer.lr_at(t))

        import random
        perm = list(range(splits["train"].count))
        random.Random(0).shuffle(perm)
        trainer.engine.set_order(perm)
        for _ in range(warmup):
            await one_step()
        await dev.sync()
        t0 = time.perf_counter()
        for _ in range(steps):
            await one_step()
        await dev.sync()
        dt = time.perf_counter() - t0
        loss, acc, _ = await trainer.evaluate()
        rows.append({"where": "native (wgpu-py)", "adapter": adapter_name(dev.info),
                     "batch": batch, "steps": steps, "ms_per_step": 1000 * dt / steps,
                     "images_per_s": steps * batch / dt,
                     "note": f"setup {setup_s:.1f} s, {warmup} warm-up steps; "
                             f"eval acc {acc:.3f} on {trainer.n_eval}"})
        print(_row(rows[-1]), flush=True)
    return rows


# ---------------------------------------------------------------------------------- browser

def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``python server.py`` on a free 127.0.0.1 port, stopped on exit."""

    def __enter__(self):
        self.port = _free_port()
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


STATE_JS = """() => { const s = window.appState;
  return s && {phase: s.phase, ready: s.workerReady, error: s.error, adapter: s.adapter,
               progress: s.progress, n: s.steps.length}; }"""


def bench_browser(batches: list[int], steps: int, model: str, timeout: float,
                  chromium: str) -> list[dict]:
    from playwright.sync_api import sync_playwright

    if not Path(chromium).exists():
        raise RuntimeError(f"{chromium} not found (apt-get install chromium)")
    timed = max(REPORT_EVERY, -(-steps // REPORT_EVERY) * REPORT_EVERY)
    rows = []
    with Server() as server, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            for batch in batches:
                rows.append(_browser_run(browser, server.url, batch, timed, model, timeout))
                print(_row(rows[-1]), flush=True)
        finally:
            browser.close()
    return rows


def _browser_run(browser, url, batch, timed, model, timeout):
    ctx = browser.new_context()
    page = ctx.new_page()
    try:
        page.goto(url)
        page.wait_for_function("window.appState && (window.appState.workerReady || "
                               "window.appState.phase === 'error')", timeout=120_000)
        st = page.evaluate(STATE_JS)
        if not st["ready"]:
            raise RuntimeError(f"page did not boot: {st['error']}")
        total = REPORT_EVERY + timed
        page.evaluate("document.querySelector('#advanced').open = true")
        page.select_option("#model", model)
        page.select_option("#optimizer", "adam")
        page.fill("#lr", "0.001")
        page.fill("#batch-size", str(batch))
        page.fill("#epochs", "1")
        page.fill("#seed", "0")
        page.check("#init-scratch")
        page.fill("#max-steps", str(total))
        page.fill("#eval-images", str(batch))
        page.click("#start")
        t_start = time.monotonic()
        seen = []  # (time, step, worker images/s)
        stopped = False
        while True:
            st = page.evaluate(STATE_JS)
            now = time.monotonic()
            prog = st["progress"] or {}
            if st["n"] and (not seen or prog["step"] > seen[-1][1]):
                seen.append((now, prog["step"], prog.get("images_per_s")))
            if st["phase"] == "error":
                raise RuntimeError(f"training failed: {st['error']}")
            if st["phase"] == "done":
                break
            if now - t_start > timeout and not stopped:
                page.click("#stop")
                stopped = True
            if now - t_start > timeout + 300:
                raise RuntimeError("run did not stop")
            time.sleep(0.2)
        note = f"first report at step {seen[0][1]} after {seen[0][0] - t_start:.1f} s" \
            if seen else "no progress report"
        if len(seen) >= 2:
            (t0, s0, _), (t1, s1, _) = seen[0], seen[-1]
            ms = 1000 * (t1 - t0) / (s1 - s0)
            n = s1 - s0
            note += f"; timed steps {s0}..{s1} (wall clock between reports)"
        elif seen and seen[0][2]:
            ms = 1000 * batch / seen[0][2]
            n = seen[0][1]
            note += "; only one report: from the worker's images/s (includes warm-up)"
        else:
            ms, n = float("nan"), 0
        if stopped:
            note += f"; stopped after {timeout:.0f} s"
        return {"where": "browser (Chromium)", "adapter": adapter_name(st["adapter"]),
                "batch": batch, "steps": n, "ms_per_step": ms,
                "images_per_s": 1000 * batch / ms if ms == ms else float("nan"), "note": note}
    finally:
        ctx.close()


# ------------------------------------------------------------------------------------ table

COLS = [("where", 19), ("adapter", 34), ("batch", 6), ("steps", 6), ("ms_per_step", 11),
        ("images_per_s", 12)]


def _header() -> str:
    names = {"ms_per_step": "ms/step", "images_per_s": "images/s"}
    return "  ".join(names.get(c, c).ljust(w) if c in ("where", "adapter") else
                     names.get(c, c).rjust(w) for c, w in COLS) + "  note"


def _row(r: dict) -> str:
    out = []
    for c, w in COLS:
        v = r[c]
        if isinstance(v, float):
            out.append(f"{v:{w}.1f}")
        elif isinstance(v, int):
            out.append(f"{v:{w}d}")
        else:
            out.append(str(v)[:w].ljust(w))
    return "  ".join(out) + "  " + r.get("note", "")


def run(args) -> int:
    rows, failed = [], False
    print(_header(), flush=True)
    if not args.browser_only:
        try:
            rows += bench_native(args.batch, args.steps, args.warmup, args.model)
        except Exception as exc:  # keep going: the other half is still worth printing
            print(f"native: FAILED: {type(exc).__name__}: {exc}", flush=True)
            failed = True
    if not args.native_only:
        try:
            rows += bench_browser(args.batch, args.steps, args.model, args.timeout,
                                  args.chromium)
        except Exception as exc:
            print(f"browser: FAILED: {type(exc).__name__}: {exc}", flush=True)
            failed = True
    print("\nSeedNet training, Adam, from scratch, real MNIST")
    print(_header())
    for r in rows:
        print(_row(r))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = add_arguments(argparse.ArgumentParser(
        prog="bench.py", description="SeedNet training speed natively and in the browser"))
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
