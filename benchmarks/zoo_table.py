#!/usr/bin/env python3
"""Issue 19's table for every model of the zoo (tests/fixtures/zoo, scripts/make_zoo.py):
model, parameters, whether each exporter's file imports (Y/N), the largest forward and
gradient errors vs torch over both files, training steps per second natively (wgpu-py; on a
machine without a GPU, lavapipe) and in headless Chromium (Pyodide + WebGPU; SwiftShader).

    .venv/bin/python benchmarks/zoo_table.py                       # accuracy + native
    flock /tmp/e2e.lock .venv/bin/python benchmarks/zoo_table.py --browser   # + browser
    .venv/bin/python benchmarks/zoo_table.py --json rows.json   # then, holding the lock only
    flock /tmp/e2e.lock .venv/bin/python benchmarks/zoo_table.py --rows rows.json --browser

What each column is:

- ``fwd err``: the training step's output (batch statistics, Dropout p=0) vs torch autograd
  in float64, relative to the largest value (tests/test_zoo.py's
  ``check_forward_and_gradients``, which also checks the eval forward vs onnxruntime);
  ``grad err``: the worst parameter gradient of that step vs torch, each relative to its own
  largest value. "over tolerance: ..." when a check fails (tolerances 1e-5 / 1e-4).
- ``native steps/s``: the trainer's own Adam step (gather -> forward -> loss -> backward ->
  Adam, one submit) from the TorchScript file, ``--steps`` back-to-back steps after one
  warm-up step, batch ``--batch``.
- ``browser steps/s``: web/dev/parity.html's ``runParity`` (engine/tools/parity.py: one
  submit per step and a 4-byte loss readback after each) on the same file and batch, timed
  from Python around two calls, 1 and 1 + k Adam steps: k / (the difference), so the
  plan's build and the upload cancel out; k = ``--steps``, or more for a fast model (about
  5 s of native steps, at most 200). Each call is bounded by
  ``--browser-timeout`` seconds (a model over it shows "timeout").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for p in (HERE, REPO / "tests", REPO / "scripts"):
    sys.path.insert(0, str(p))

from embed_grad import time_steps  # noqa: E402


def accuracy(device, name: str) -> dict:
    """{"imported": {exporter: "Y"/"N"}, "fwd": max error, "grad": max error, "note"}."""
    import test_zoo
    from webgpu_trainer.onnx_io import load_bundle
    out = {"imported": {}, "fwd": 0.0, "grad": 0.0, "note": ""}
    for exporter in test_zoo.make_zoo.EXPORTERS:
        path = test_zoo.ZOO / f"{name}-{exporter}.onnx"
        try:
            load_bundle(path)
        except Exception as exc:  # the import's refusal: the table says N and why
            out["imported"][exporter] = "N"
            out["note"] += f"{exporter}: {str(exc)[:120]} "
            continue
        out["imported"][exporter] = "Y"
        try:
            _, fwd, grad = test_zoo.check_forward_and_gradients(device, name, exporter, path)
            out["fwd"], out["grad"] = max(out["fwd"], fwd), max(out["grad"], grad)
        except AssertionError as exc:
            out["note"] += f"{exporter} over tolerance: {str(exc).splitlines()[0][:120]} "
    return out


def native_steps(device, name: str, batch: int, steps: int) -> float:
    """Adam steps per second of the TorchScript file on ``device``."""
    import test_zoo
    from webgpu_trainer.onnx_io import load_bundle
    graph, blob = load_bundle(test_zoo.ZOO / f"{name}-ts.onnx")
    split = test_zoo._data(name, 4 * batch, 1)
    res = asyncio.run(time_steps(device, graph, blob, split, batch, steps, 1))
    return 1000.0 / res["ms_per_step"]


RACE_JS = """async ([c, ms]) => await Promise.race([window.runParity(c),
  new Promise((_, reject) => setTimeout(() => reject(new Error("timeout")), ms))])"""


def _case(name: str, batch: int, steps: int) -> dict:
    """The parity case of zoo model ``name`` (TorchScript file): ``steps`` Adam steps."""
    import test_zoo
    from webgpu_trainer.engine.tools import parity
    from webgpu_trainer.onnx_io import load_bundle
    graph, blob = load_bundle(test_zoo.ZOO / f"{name}-ts.onnx")
    rng = np.random.default_rng(0)
    if name in test_zoo.make_zoo.TOKENS:  # token ids reach the GPU as u32
        x = rng.integers(0, test_zoo.make_zoo.VOCAB, (batch, *test_zoo.make_zoo.MODELS[name][1]))
        x = x.astype(np.uint32)
    else:
        x = rng.standard_normal((batch, *test_zoo.make_zoo.MODELS[name][1])).astype(np.float32)
    labels = rng.integers(0, test_zoo._classes(name), batch).astype(np.uint32)
    return {"name": name, "graph": graph, "weights": parity.b64(blob),
            "x": parity.b64(x.tobytes()), "labels": parity.b64(labels.tobytes()),
            "batch": batch, "steps": steps, "optimizer": {"name": "adam", "lr": 0.003},
            "train": True, "seed": 1}


def browser_steps(names, batch: int, steps: dict, timeout_s: float) -> dict:
    """{name: steps/s or a short reason} in headless Chromium (benchmarks/browser.py's server
    and launch; the caller holds /tmp/e2e.lock); ``steps[name]``: the steps timed. A
    difference that is not positive (noise larger than the steps) gives "noise"."""
    from playwright.sync_api import sync_playwright

    import browser
    out = {}
    with browser.Server() as srv, sync_playwright() as p:
        b = browser.launch(p)
        try:
            page = b.new_page()
            page.goto(srv.url + "/dev/parity.html")
            page.wait_for_function("window.parityState && (window.parityState.ready || "
                                   "window.parityState.error)", timeout=180_000)
            if page.evaluate("window.parityState.error"):
                return {n: "page error" for n in names}
            for name in names:
                times = []
                try:
                    for k in (1, 1 + steps[name]):
                        case = json.dumps([_case(name, batch, k)])
                        t0 = time.perf_counter()
                        (got,) = json.loads(page.evaluate(RACE_JS, [case, 1000 * timeout_s]))
                        times.append(time.perf_counter() - t0)
                        if "error" in got:
                            raise RuntimeError(got["error"][:80])
                    diff = times[1] - times[0]
                    out[name] = steps[name] / diff if diff > 0 else "noise"
                except Exception as exc:  # a timeout or an engine error: named in the table
                    out[name] = "timeout" if "timeout" in str(exc) else f"error: {exc}"[:60]
                    if "timeout" in str(exc):
                        page.reload()  # the timed-out run may still hold the worker
                        page.wait_for_function("window.parityState && "
                                               "window.parityState.ready", timeout=180_000)
        finally:
            b.close()
    return out


def _fmt(v, spec):
    return format(v, spec) if isinstance(v, float) else str(v)


def table(rows, batch: int) -> str:
    """The text table (one line per model)."""
    head = (f"{'model':<14} {'params':>9} {'ts':>3} {'dyn':>3} {'fwd err':>8} {'grad err':>8} "
            f"{'native/s':>9} {'browser/s':>10}")
    lines = [f"steps/s at batch {batch}: native = wgpu-py (lavapipe), browser = headless "
             f"Chromium (Pyodide, SwiftShader); errors vs torch float64, relative", head,
             "-" * len(head)]
    for r in rows:
        a = r["acc"]
        lines.append(f"{r['name']:<14} {r['params']:>9,} {a['imported'].get('ts', '-'):>3} "
                     f"{a['imported'].get('dynamo', '-'):>3} {a['fwd']:>8.1e} {a['grad']:>8.1e} "
                     f"{_fmt(r['native'], '9.2f'):>9} {_fmt(r.get('browser', '-'), '10.2f'):>10}")
        if a["note"]:
            lines.append(f"  note: {a['note'].strip()}")
    return "\n".join(lines)


def main(argv=None) -> int:
    import make_zoo
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", default=make_zoo.ZOO)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--browser", action="store_true", help="also in headless Chromium "
                    "(run under flock /tmp/e2e.lock)")
    ap.add_argument("--browser-timeout", type=float, default=240)
    ap.add_argument("--json", type=Path, help="write the rows to this file")
    ap.add_argument("--rows", type=Path, help="take accuracy and native rows from a --json "
                    "file of an earlier run (then --browser adds the browser column)")
    a = ap.parse_args(argv)
    rows = json.loads(a.rows.read_text()) if a.rows else []
    if not rows:
        rows = _native_rows(a)
    if a.browser:  # with --rows, only the named models (default: all) are measured again
        names = [r["name"] for r in rows if r["name"] in a.models]
        # enough steps for about 5 s natively: the difference of two calls then stands out
        # of the noise of building the plan
        steps = {r["name"]: min(200, max(a.steps, math.ceil(5 * r["native"]))) for r in rows}
        got = browser_steps(names, a.batch, steps, a.browser_timeout)
        for r in rows:
            r["browser"] = got.get(r["name"], r.get("browser", "-"))
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    print(table(rows, a.batch))
    return 0


def _native_rows(a) -> list:
    """The accuracy and native columns of every model of ``a.models``."""
    import make_zoo
    from webgpu_trainer.engine.backends.wgpu_native import Device
    device = Device(backend="vulkan")
    rows = []
    for name in a.models:
        model, _ = make_zoo.build(name)
        with contextlib.redirect_stdout(io.StringIO()):
            acc = accuracy(device, name)
        rows.append({"name": name, "params": sum(p.numel() for p in model.parameters()),
                     "acc": acc, "native": native_steps(device, name, a.batch, a.steps)})
        print(f"{name}: {rows[-1]}", file=sys.stderr, flush=True)
    return rows


if __name__ == "__main__":
    sys.exit(main())
