"""Issue 18's CIFAR-10 in the page, through the chunked upload (item 6): a small source in
CIFAR-10's binary format (scripts/make_data_fixtures.py) prepared by the real CLI
(``webgpu-trainer data --source cifar-10-binary.tar.gz --data-root ROOT``, the server's data
root), then trained for a few steps in headless Chromium (SwiftShader) with
models/seednet-rgb32.onnx, the page opened with ``?test=1&chunk=N`` so that the worker cuts the
training split into 3 GPU buffers (``GpuEngine.chunk_bytes``).

Asserted: the picker says the training split takes several buffers; every shard's download
was reported with its bytes (the last message of each: loaded == total == the manifest's
size); the page's per-step losses equal the native engine's (wgpu-py, one buffer: no chunking)
on the same data, config and seed within CURVE_RTOL relative (the kernels give the same bits
on both hosts, tests/test_e2e.py); the loss is a cross entropy of 10 classes near ln 10 at the
start.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import make_data_fixtures as fx  # noqa: E402
from e2e_fixtures import REPO, Page, native_losses, note, run_training  # noqa: E402

pytestmark = pytest.mark.e2e

PER_BATCH = 16  # 5 x 16 = 80 training images, 16 test images
VAL, STEPS, BATCH = 16, 4, 8
CHUNK = 24 * 3072  # 24 images a buffer: the 64 training images span 3 buffers
CURVE_RTOL = 1e-4
RUN_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def cifar(server_data_root, tmp_path_factory):
    """The "cifar10" dataset prepared by the CLI into the server's data root."""
    tmp = tmp_path_factory.mktemp("cifar-source")
    fx.cifar_binary(tmp / "cifar-10-batches-bin", per_batch=PER_BATCH)
    archive = fx.tar_gz(tmp / "cifar-10-batches-bin", tmp / "cifar-10-binary.tar.gz",
                        "cifar-10-batches-bin")
    proc = subprocess.run([sys.executable, "-m", "webgpu_trainer.cli.main", "data", "--source",
                           str(archive), "--data-root", str(server_data_root)],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads((server_data_root / "cifar10" / "manifest.json").read_text())


def test_cifar10_trains_in_the_page_in_chunks_as_natively(cifar, chromium, server,
                                                          server_data_root):
    app = Page(chromium, f"{server}/?test=1&chunk={CHUNK}")
    try:
        app.wait_ready()
        page = app.page
        page.select_option("#dataset", "cifar10")
        page.wait_for_function("document.getElementById('model').value === 'seednet-rgb32'")
        # the 80 training images (64 trained on, 16 held out): 3 + 1 buffers of 24 at most
        page.wait_for_function("document.getElementById('dataset-hint').textContent"
                               ".includes('GPU buffers')")
        assert page.text_content("#dataset-hint").endswith(
            " · uploaded as 4 GPU buffers (this GPU binds 72.0 KB at most)")
        app.configure(model="seednet-rgb32", optimizer="sgd", lr="0.05", batch=BATCH,
                      max_steps=STEPS, eval_images=16, val_images=VAL, seed=3)
        cfg = page.evaluate("readFormForTests()")
        run = run_training(app, STEPS, RUN_TIMEOUT_S, "cifar")
        browser = page.evaluate("appState.steps.map((s) => [s.step, s.loss])")
        downloads = page.evaluate("appState.downloads")
    finally:
        app.close()
    sizes = [(s, k, cifar["splits"][s][k]["bytes"]) for s in ("train", "test")
             for k in ("images", "labels")]
    assert [(d["shard"], d["of"], d["loaded"], d["total"]) for d in downloads] == \
        [(i + 1, 4, b, b) for i, (_, _, b) in enumerate(sizes)]
    assert downloads[0]["what"] == "CIFAR-10 training images" and downloads[0]["rate"] > 0
    assert cfg["dataset"] == "cifar10" and cfg["max_steps"] == STEPS

    native = native_losses(None, {k: v for k, v in cfg.items() if k != "model"},
                           model="seednet-rgb32", data=("cifar10", server_data_root))
    steps = list(range(1, STEPS + 1))
    assert [s for s, _ in browser] == steps and sorted(native) == steps
    want = np.array([loss for _, loss in browser])
    got = np.array([native[t] for t in steps])
    rel = np.abs(got - want) / np.abs(want)
    note(f"\n[e2e cifar] browser (3 buffers) vs native (1 buffer), {STEPS} steps: max relative "
         f"difference {rel.max():.2e}; first step report {run.first_report_s():.1f} s")
    assert rel.max() <= CURVE_RTOL, (want, got)
    assert abs(want[0] - math.log(10)) < 1.0, want
