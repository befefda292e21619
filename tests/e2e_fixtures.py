"""Fixtures of the browser tests: the real server on a free port and headless Chromium with
WebGPU (SwiftShader on a machine without a GPU); conftest.py registers this module as a plugin,
so every test module can ask for ``server``, ``chromium`` and ``mnist_cache``."""

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


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def mnist_cache() -> Path:
    from webgpu_trainer.host import data
    cache = REPO / ".cache" / "mnist"
    data.prepare(cache)
    return cache


@pytest.fixture(scope="module")
def server(mnist_cache, tmp_path_factory):
    """The real server as a subprocess on a free 127.0.0.1 port; yields its base URL."""
    port = _free_port()
    log_path = tmp_path_factory.mktemp("server") / "server.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "server.py"), "--host", "127.0.0.1", "--port", str(port),
         "--data-dir", str(mnist_cache), "--models-dir", str(REPO / "models")],
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




ARTIFACTS = REPO / "test-artifacts" / "screenshots"


def screenshot(page, name: str) -> Path:
    """Save a screenshot of ``page`` (the viewport) as test-artifacts/screenshots/<name>.png, the
    main states of the page kept for people to look at (CI keeps the folder as an artifact)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path))
    return path
