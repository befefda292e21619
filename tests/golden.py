"""The golden numbers (tests/fixtures/golden.json): what the native engine computes, bit for bit.

Recorded by scripts/record_golden.py, compared by tests/test_golden.py. Three parts, each made
here by one function so the recorder and the test compute them the same way:

- ``seednet``: SeedNet (models/seednet.onnx) trained 50 steps natively (``SEEDNET``: Adam,
  batch 16, seed 7, PyTorch's init drawn on the GPU, the first 800 MNIST training images, then
  64 test images): per step the loss, accuracy and learning rate, the test loss and accuracy,
  and the sha256 of the trained weights.
- ``selfcheck``: the GPU self-check (``webgpu-trainer doctor``): each row's case, check and
  error against the committed float64 references.
- ``cases``: every op case of tests/cases (the lists of tests/test_ops_*.py, test_plan.py and
  test_parity.py): one step (or the optimizer case's steps) through ``engine/tools/parity.py``;
  the loss and accuracy, and a ``digest`` of each float32 array read back: the model output, the
  activations ``acts`` and activation gradients ``dacts`` the case names, the flat gradient
  buffer (training cases) and the flat weight buffer.

Floats are stored as JSON numbers (Python's ``repr``: a float32 value widened to a Python float
reads back exactly). Every import of the package is in the block below: after a module
moves, fix the path here and nothing else.
"""

import hashlib
import struct
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO / "tests") not in sys.path:  # scripts/record_golden.py imports this file
    sys.path.insert(0, str(REPO / "tests"))

# ---- the package and test helpers this file uses (paths as of issue 17's start) -----------
from cases import FAMILIES, family  # noqa: E402  the op case lists
from harness import builder_patch  # noqa: E402  a case's Builder class attributes
from webgpu_trainer import onnx_io  # noqa: E402
from webgpu_trainer.cli import commands as native  # noqa: E402  load_splits, make_trainer
from webgpu_trainer.engine.tools import parity, selfcheck  # noqa: E402
# -------------------------------------------------------------------------------------------

FORMAT = "webgpu-trainer/golden@1"
FIXTURE = REPO / "tests" / "fixtures" / "golden.json"
SEEDNET_MODEL = REPO / "models" / "seednet.onnx"
SEEDNET = {"optimizer": "adam", "lr": 0.002, "batch_size": 16, "epochs": 1, "max_steps": 50,
           "seed": 7, "init": "scratch", "eval_images": 64, "report_every": 10,
           "val_images": 0}
SEEDNET_TRAIN_IMAGES = 800  # one epoch of 50 steps of 16
HEAD = 3  # values of each array stored beside its sha256 (for a reader, and another adapter)


def digest(raw: bytes) -> dict:
    """``{"n", "sha256", "head"}`` of float32 bytes: count, sha256 of the bytes, first values."""
    vals = np.frombuffer(bytes(raw), "<f4")
    return {"n": int(vals.size), "sha256": hashlib.sha256(bytes(raw)).hexdigest(),
            "head": [float(v) for v in vals[:HEAD]]}


def adapter(dev) -> dict:
    """What names the adapter the numbers were computed on (bit-identity holds on it only)."""
    return {k: dev.info.get(k, "") for k in ("device", "description", "backend_type")}


# ---- op cases -----------------------------------------------------------------------------

def all_cases() -> list:
    """Every op case of tests/cases, in FAMILIES order."""
    return [c for name in FAMILIES for c in family(name).CASES]


async def _read(dev, t) -> bytes:
    return bytes(await dev.read(t.buf, t.offset, t.nbytes))


async def _one_step(dev, case) -> dict:
    plan = await parity.load(dev, case.graph, case.blob, len(case.labels),
                             np.ascontiguousarray(case.x, "<f4").tobytes(),
                             np.asarray(case.labels, "<u4").tobytes(), loss=case.loss,
                             init_seed=case.init_seed, keep_grads=set(case.dacts),
                             keep_acts=set(case.acts))
    parity.run_step(dev, plan, case.step, case.seed, case.train)
    out = {"output": digest(await _read(dev, plan.acts[plan.graph.output])),
           "acts": {n: digest(await _read(dev, plan.acts[n])) for n in case.acts}}
    if case.train:
        met = await dev.read(plan.metrics, 8 * parity.metrics_slot(case.step), 8)
        out["loss"], out["acc"] = (float(v) for v in struct.unpack("<2f", met))
        out["dacts"] = {n: digest(await _read(dev, plan.grads[n])) for n in case.dacts}
        out["grads"] = digest(await dev.read(plan.G, 0, plan.wbytes))
    out["weights"] = digest(await dev.read(plan.P, 0, plan.wbytes))
    return out


async def _optimizer_steps(dev, case) -> dict:
    res = await parity.run_case(dev, case.parity())
    return {"losses": [float(v) for v in res["losses"]],
            **{k: digest(parity.unb64(res[k])) for k in ("output", "grads", "weights")}}


async def op_case(dev, case) -> dict:
    """The numbers of one case (tests/cases ``Case``) on ``dev``."""
    with builder_patch(case.patch):
        if case.optimizer is None and case.steps == 1:
            return await _one_step(dev, case)
        return await _optimizer_steps(dev, case)


async def op_cases(dev, cases=None) -> dict:
    """``{case id: op_case(...)}`` of ``cases`` (default: all of them)."""
    return {c.id: await op_case(dev, c) for c in (all_cases() if cases is None else cases)}


# ---- self-check ---------------------------------------------------------------------------

async def selfcheck_rows(dev) -> list:
    """The self-check's rows ``[case, check, error]`` (its seconds and adapter left out)."""
    result = await selfcheck.run(dev)
    return [[r["case"], r["check"], r["error"]] for r in result["rows"]]


# ---- SeedNet ------------------------------------------------------------------------------

async def seednet(dev) -> tuple:
    """SeedNet's 50 steps (``SEEDNET``) on ``dev``: ``([[step, loss, accuracy, lr]],
    {"test_loss", "test_acc", "weights"})``."""
    graph, blob = onnx_io.load_bundle(SEEDNET_MODEL)
    train, test, _ = native.load_splits(None, SEEDNET_TRAIN_IMAGES, SEEDNET["eval_images"])
    rows = []

    def emit(kind, **kw):
        if kind == "progress":
            rows.extend([int(t), float(loss), float(acc), float(lr)]
                        for (t, loss, acc), lr in zip(kw["losses"], kw["lrs"]))

    trainer = native.make_trainer(dev, graph, blob, dict(SEEDNET), train, test, emit)
    await trainer.setup()
    result = await trainer.run()
    return rows, {"test_loss": float(result["test_loss"]),
                  "test_acc": float(result["test_acc"]),
                  "weights": digest(await trainer.trained_weights())}


async def record(dev) -> dict:
    """The whole golden document on ``dev`` (what scripts/record_golden.py writes)."""
    steps, after = await seednet(dev)
    return {"format": FORMAT, "adapter": adapter(dev), "seednet_config": SEEDNET,
            "seednet": after, "seednet_steps": steps, "selfcheck": await selfcheck_rows(dev),
            "cases": await op_cases(dev)}
