"""Fixtures of the browser tests: the real server on a free port and headless Chromium with
WebGPU (SwiftShader on a machine without a GPU); conftest.py registers this module as a plugin,
so every test module can ask for ``server``, ``chromium``, ``mnist_cache`` and ``app`` (a fresh
``Page``: the app's page with configure(), wait_ready(), state(), diagnostics())."""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = Path(os.environ.get("WEBGPU_TRAINER_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--no-sandbox", "--enable-unsafe-webgpu", "--disable-background-networking",
                 "--disable-component-update"]

SERVER_TIMEOUT_S = 180        # server answering (MNIST cache check + first wheel build)
BOOT_TIMEOUT_S = 120          # page load -> worker ready (Pyodide + engine wheel + adapter)
EVAL_IMAGES = 1000            # Page.configure's default: the first 1,000 test images


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def mnist_cache() -> Path:
    from webgpu_trainer.host import data
    cache = data.default_cache_dir()  # <repo>/.cache/datasets/mnist
    data.prepare(cache)
    return cache


@pytest.fixture(scope="module")
def server_uploads(tmp_path_factory) -> Path:
    """The uploads folder of the module's ``server`` (a temp folder: the tests' uploads stay out
    of the checkout's .cache/uploads, the user's own, which every later server would list)."""
    return tmp_path_factory.mktemp("uploads")


@pytest.fixture(scope="module")
def server_data_root(tmp_path_factory) -> Path:
    """The ``--data-root`` of the module's ``server`` (an empty temp folder: the datasets a
    test prepares there stay out of the checkout's .cache/datasets; the server lists the
    folder on each request, so a test may add datasets after the server started)."""
    return tmp_path_factory.mktemp("datasets")


@pytest.fixture(scope="module")
def server(mnist_cache, server_uploads, server_data_root, tmp_path_factory):
    """The real server as a subprocess on a free 127.0.0.1 port; yields its base URL."""
    port = _free_port()
    log_path = tmp_path_factory.mktemp("server") / "server.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "server.py"), "--host", "127.0.0.1", "--port", str(port),
         "--data-dir", str(mnist_cache), "--models-dir", str(REPO / "models"),
         "--uploads-dir", str(server_uploads), "--data-root", str(server_data_root)],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def server_log() -> str:
        log.flush()
        return log_path.read_text(errors="replace")[-4000:]

    deadline = time.monotonic() + SERVER_TIMEOUT_S
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"server exited with {proc.returncode} before answering:\n"
                            f"{server_log()}")
            try:
                with urllib.request.urlopen(f"{url}/api/models", timeout=5) as r:
                    if r.status == 200 and json.load(r):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"server did not answer on {url} within {SERVER_TIMEOUT_S} s:\n"
                            f"{server_log()}")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


@pytest.fixture(scope="module")
def chromium():
    """Headless Chromium with WebGPU (Playwright's sync API)."""
    if not CHROMIUM.exists():  # never a skip: leave the browser tests out with -m "not e2e"
        pytest.fail(f"{CHROMIUM} not found: the end-to-end tests need Chromium with WebGPU "
                    "(./run test installs it; or apt-get install chromium, or set "
                    "WEBGPU_TRAINER_CHROMIUM; -m 'not e2e' leaves these tests out)")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS,
                                    headless=True)
        try:
            yield browser
        finally:
            browser.close()


class Page:
    """A page of the app plus what its console said (for failure messages)."""

    def __init__(self, browser, url: str):
        self.context = browser.new_context(accept_downloads=True,
                                           viewport={"width": 1280, "height": 1000})
        self.page = self.context.new_page()
        self.console: list[str] = []
        self.page.on("console", lambda m: self.console.append(f"{m.type}: {m.text[:500]}"))
        self.page.on("pageerror", lambda e: self.console.append(f"pageerror: {e}"))
        # which resource a "Failed to load resource" names (the console message does not)
        self.page.on("response", lambda r: r.status >= 400 and self.console.append(
            f"http {r.status}: {r.request.method} {r.url[:300]}"))
        self.page.goto(url)

    def state(self) -> dict:
        return self.page.evaluate("""() => {
            const s = window.appState;
            if (!s) return null;
            return {phase: s.phase, workerReady: s.workerReady, noWebGPU: s.noWebGPU,
                    error: s.error, status: s.status, adapter: s.adapter,
                    progress: s.progress, nsteps: s.steps.length,
                    lastStep: s.steps.length ? s.steps[s.steps.length - 1] : null,
                    fresh: s.steps !== window.e2eStepsBefore};
        }""")

    def diagnostics(self) -> str:
        try:
            st = json.dumps(self.state())
        except Exception as exc:  # the page itself may be gone
            st = f"(no state: {exc})"
        tail = "\n".join(self.console[-40:])
        return f"appState: {st}\nconsole (last 40):\n{tail}"

    def wait_ready(self, timeout_s: float = BOOT_TIMEOUT_S) -> float:
        """Wait for the worker's ``ready``; returns the seconds it took. Fails on an error."""
        t0 = time.monotonic()
        try:
            self.page.wait_for_function(
                "window.appState && (window.appState.workerReady || "
                "window.appState.phase === 'error' || window.appState.noWebGPU)",
                timeout=timeout_s * 1000)
        except Exception as exc:
            pytest.fail(f"worker not ready within {timeout_s} s ({type(exc).__name__})\n"
                        f"{self.diagnostics()}")
        st = self.state()
        if not st["workerReady"]:
            pytest.fail(f"page failed to boot: phase {st['phase']!r}, error {st['error']!r}, "
                        f"noWebGPU {st['noWebGPU']}\n{self.diagnostics()}")
        return time.monotonic() - t0

    def configure(self, *, optimizer="adam", lr="0.001", batch=64, epochs=1, seed=0,
                  max_steps=0, eval_images=EVAL_IMAGES, scratch=True, model="seednet",
                  val_images=None, train_images=None):
        """Fill the settings form (unfolded, the Advanced section opened); ``val_images`` /
        ``train_images`` None leave the form's value."""
        p = self.page
        if p.get_attribute("#settings-toggle", "aria-expanded") == "false":
            p.click("#settings-toggle")  # folded on a narrow screen (web/layout.js)
        p.evaluate("document.querySelector('#advanced').open = true")
        if model is not None:
            p.select_option("#model", model)
        p.select_option("#optimizer", optimizer)
        p.fill("#lr", str(lr))
        p.fill("#batch-size", str(batch))
        p.fill("#epochs", str(epochs))
        p.fill("#seed", str(seed))
        p.check("#init-scratch" if scratch else "#init-finetune")
        p.fill("#max-steps", str(max_steps))
        p.fill("#eval-images", str(eval_images))
        if val_images is not None:
            p.fill("#val-images", str(val_images))
        if train_images is not None:
            p.fill("#train-images", str(train_images))

    def close(self):
        self.context.close()


@pytest.fixture()
def app(chromium, server):
    """A fresh page of the app (closed after the test)."""
    page = Page(chromium, server)
    yield page
    page.close()


@pytest.fixture()
def bare_page(chromium, server):
    """A Playwright page of a fresh 1280x800 context, not opened yet (the test goes to its
    URL); the page errors it raises are collected in ``pg.errors``."""
    ctx = chromium.new_context(viewport={"width": 1280, "height": 800})
    pg = ctx.new_page()
    errors = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.errors = errors
    yield pg
    ctx.close()


ARTIFACTS = REPO / "test-artifacts" / "screenshots"


def screenshot(page, name: str) -> Path:
    """Save a screenshot of ``page`` (the viewport) as test-artifacts/screenshots/<name>.png, the
    main states of the page kept for people to look at (CI keeps the folder as an artifact)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path))
    return path


# ------------------------------------------------------------------ the page, a run of it

MAX_S_PER_STEP = 1.0          # the kernels' goal, reported (benchmarks/ measures it)

REPORT = []  # the measurements, repeated in pytest's terminal summary (tests/conftest.py)


def note(message: str):
    """Print a measurement and keep it for the end-of-run summary (captured output is hidden)."""
    print(message, flush=True)
    REPORT.append(message.strip())


class Run:
    """Timing of one training run, observed by polling appState every POLL_S."""
    POLL_S = 0.25

    def __init__(self):
        self.t_start = 0.0
        self.t_done = 0.0
        self.seen: list[tuple[float, int]] = []   # (monotonic time, step) at each new report
        self.worker_ips = None                     # the last progress message's images_per_s

    def s_per_step(self) -> float | None:
        """Wall seconds per step between the first and the last step report (excludes set-up
        and the final evaluation)."""
        if len(self.seen) < 2 or self.seen[-1][1] == self.seen[0][1]:
            return None
        (t0, s0), (t1, s1) = self.seen[0], self.seen[-1]
        return (t1 - t0) / (s1 - s0)

    def first_report_s(self) -> float | None:
        return self.seen[0][0] - self.t_start if self.seen else None


def run_training(app: Page, total_steps: int, timeout_s: float, label: str) -> Run:
    """Click Start, follow progress until phase ``done``; fails on ``error``, on timeout, and
    early when the measured speed cannot finish ``total_steps`` within ``timeout_s``."""
    page, run = app.page, Run()
    # a run's start replaces appState.steps; until then the phase may still be the last run's
    # "done" (Start checks the settings first): only this run's "done" ends the wait
    error_before = page.evaluate("() => { window.e2eStepsBefore = appState.steps; "
                                 "return appState.error; }")
    page.click("#start")
    run.t_start = time.monotonic()
    deadline = run.t_start + timeout_s
    while True:
        st = app.state()
        now = time.monotonic()
        step = (st.get("progress") or {}).get("step") or 0
        if st["nsteps"] and (not run.seen or step > run.seen[-1][1]):
            run.seen.append((now, step))
            run.worker_ips = st["progress"].get("images_per_s")
            sps = run.s_per_step()
            print(f"[e2e {label}] {now - run.t_start:6.1f} s  step {step}/"
                  f"{st['progress'].get('total_steps')}  loss {st['lastStep']['loss']:.4f}"
                  + (f"  {sps:.2f} s/step" if sps else ""), flush=True)
            # fail fast: two reports give a per-step time; project the rest of the run
            if sps and total_steps:
                projected = (now - run.t_start) + (total_steps - step) * sps
                if projected > timeout_s:
                    pytest.fail(
                        f"training too slow: {sps:.2f} s/step measured over steps "
                        f"{run.seen[0][1]}..{step}; {total_steps} steps would take about "
                        f"{projected:.0f} s, over the {timeout_s:.0f} s limit "
                        f"(goal: < {MAX_S_PER_STEP} s/step)")
        if (st["phase"] == "error" or st["error"]) and (st["fresh"]
                                                       or st["error"] != error_before):
            pytest.fail(f"training failed: {st['error']!r}\n{app.diagnostics()}")
        if st["phase"] == "done" and st["fresh"]:
            run.t_done = now
            return run
        if now > deadline:
            sps = run.s_per_step()
            pytest.fail(f"training not done within {timeout_s:.0f} s: at step {step}"
                        + (f", {sps:.2f} s/step" if sps else "") + f"\n{app.diagnostics()}")
        time.sleep(Run.POLL_S)


def native_losses(mnist_cache: Path, config: dict, model: str = "seednet",
                  data: tuple | None = None) -> dict:
    """``{step: loss}`` of the native trainer (wgpu-py on the first adapter; models/``model``
    .onnx, SeedNet by default; the real MNIST cache, or ``data`` = (dataset name, data root);
    64 evaluation images) with the run ``config`` (the page's fields): what the browser's run
    of the same config reproduces step by step (same seed, same data order, same kernels).
    Runs in a thread of its own: Playwright's event loop owns the test's thread."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from webgpu_trainer import onnx_io
    from webgpu_trainer.cli import commands as native
    from webgpu_trainer.cli import run_data
    from webgpu_trainer.engine.backends.wgpu_native import Device
    from webgpu_trainer.engine.train.gpu_engine import GpuEngine
    from webgpu_trainer.engine.train.loop import Trainer

    if data is None:
        train, test, _ = native.load_splits(mnist_cache, eval_images=64)
    else:
        train, test, *_ = run_data.load_dataset(Path(data[1]) / data[0], data[0],
                                                eval_images=64)
    graph, weights = onnx_io.load_bundle(REPO / "models" / f"{model}.onnx")
    losses = {}

    def emit(kind, **kw):
        if kind == "progress":
            losses.update({int(s): float(v) for s, v, *_ in kw["losses"]})

    async def go():
        tr = Trainer(GpuEngine(Device()), graph, weights, {**config, "eval_images": 64}, train,
                     test, emit=emit)
        await tr.setup()
        await tr.run()

    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, go()).result()
    return losses
