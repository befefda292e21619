"""Host-independent op and optimizer cases: the same code runs them in Pyodide (browser WebGPU)
and in CPython (wgpu-py), so tests can assert both hosts compute the same numbers.

A case is a JSON-able dict (bytes as base64 strings):
``{"name", "graph": bundle dict, "weights": b64 float32 blob, "x": b64 float32 input [batch, ...],
"labels": b64 uint32 [batch], "batch": int, "steps": int (training steps, >= 1),
"optimizer": {"name", "lr", ...optim.make keywords} or None (no update: one step of forward +
loss + backward), "seed": int, "train": bool (False: eval forward only), "loss": a loss spec
of ops/losses.py or None}``.
``run_case`` returns ``{"name", "losses": [float per step], "output": b64 float32 of the model
output after the last step's forward, "grads": b64 float32 of the flat gradient buffer (bundle
layout), "weights": b64 float32 of the flat parameter buffer after the last step}``. A case may
also have "init_seed": int, which re-initialises the weights first (Plan.init_weights).
Standard library only.
"""

import base64
import struct

from . import optim
from .graph import Graph
from .plan import METRICS_RING, Plan, pack_step


def b64(data: bytes) -> str:
    return base64.b64encode(bytes(data)).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"))


async def run_case(dev, case: dict) -> dict:
    """Run one case on ``dev`` (see the module docstring). Raises what the engine raises."""
    batch, seed = int(case["batch"]), int(case.get("seed", 0))
    plan = await Plan.build(dev, Graph(case["graph"]), batch, loss=case.get("loss"))
    weights = unb64(case["weights"])
    dev.write(plan.P, weights + bytes(plan.wbytes - len(weights)))
    if case.get("init_seed") is not None:  # PyTorch's default init on the GPU (Plan.init_weights)
        await plan.init_weights(int(case["init_seed"]))
    dev.write(plan.input.buf, unb64(case["x"]))
    dev.write(plan.labels.buf, unb64(case["labels"]))
    train = case.get("train", True)
    opt = None
    if case.get("optimizer"):
        spec = dict(case["optimizer"])
        opt = optim.make(spec.pop("name"), float(spec.pop("lr")), **spec)
        await opt.attach(plan)
    if train:
        prog = dev.program(plan.fwd_train + plan.loss + plan.bwd
                           + (opt.dispatches if opt else []))
    else:
        prog = dev.program(plan.fwd_eval + plan.head)
    losses = []
    for t in range(1, int(case.get("steps", 1)) + 1):
        a = opt.scalars(t, opt.lr) if opt else (0.0, 1.0, 0.0)
        lr = opt.lr if opt else 0.0
        dev.write(plan.step, pack_step(t, 0, seed, lr, a))
        dev.submit([prog])
        if train:
            slot = (t - 1) % METRICS_RING
            losses.append(struct.unpack("<f", await dev.read(plan.metrics, 8 * slot, 4))[0])
    out = plan.acts[plan.graph.output]
    return {"name": case["name"], "losses": losses,
            "output": b64(await dev.read(out.buf, out.offset, out.nbytes)),
            "grads": b64(await dev.read(plan.G, 0, plan.wbytes)),
            "weights": b64(await dev.read(plan.P, 0, plan.wbytes))}


async def run_cases(dev, cases: list) -> list:
    """``run_case`` for each case; a failing case gives ``{"name", "error": "Type: message"}``
    instead of stopping the others."""
    out = []
    for case in cases:
        try:
            out.append(await run_case(dev, case))
        except Exception as exc:  # reported per case, compared by the test
            out.append({"name": case.get("name"), "error": f"{type(exc).__name__}: {exc}"})
    return out
