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
also have "init_seed": int, which re-initialises the weights first (Plan.init_weights), and
"step": int, the number of its first step (default 1; Dropout masks depend on it), and
"fuse_all_attention": true, which folds attention into FusedAttention at any size
(``Builder.ATTENTION_MIN_ROWS`` 0 while the plan is built, whatever the Builder's default).

``load`` and ``run_step`` are the one way every host and every test runs a plan step:
build and upload, then write the step's uniform (``plan.pack_step``) and submit one program.
Standard library only.
"""

import base64
import struct

from ..errors import user_message
from ..train import optim
from ..graph import Graph
from ..plan import METRICS_RING, Builder, Plan, pack_step


def b64(data: bytes) -> str:
    return base64.b64encode(bytes(data)).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"))


async def load(dev, graph: dict, weights: bytes, batch: int, x: bytes = None,
               labels: bytes = None, loss=None, init_seed=None, plan=None, keep_grads=(),
               keep_acts=()):
    """A plan of ``graph`` (bundle dict) for ``batch`` samples with the loss spec ``loss``
    (unless ``plan`` is given), the weight blob ``weights`` uploaded (then re-initialised by
    ``Plan.init_weights(init_seed)`` when that is not None), the input ``x`` (float32 bytes)
    and ``labels`` (uint32 bytes); a None is not written; ``keep_grads``: the activation
    gradients to read after the step and ``keep_acts`` the activations (``Plan.build``: not
    folded away). Returns the plan. Raises what
    ``Plan.build`` raises."""
    if plan is None:
        plan = await Plan.build(dev, Graph(graph), batch, loss=loss, keep_grads=keep_grads,
                                keep_acts=keep_acts)
    if weights is not None:
        dev.write(plan.P, weights + bytes(plan.wbytes - len(weights)))
    if init_seed is not None:  # PyTorch's default init on the GPU (Plan.init_weights)
        await plan.init_weights(int(init_seed))
    if x is not None:
        dev.write(plan.input.buf, x)
    if labels is not None:
        dev.write(plan.labels.buf, labels)
    return plan


def program(dev, plan, train: bool = True, opt=None, backward: bool = True):
    """The dispatches of one step as one program: eval = ``fwd_eval + head``; train =
    ``fwd_train + loss`` then, when ``backward``, ``bwd`` and ``opt``'s update."""
    if not train:
        return dev.program(plan.fwd_eval + plan.head)
    tail = (plan.bwd + (opt.dispatches if opt else [])) if backward else []
    return dev.program(plan.fwd_train + plan.loss + tail)


def run_step(dev, plan, t: int = 1, seed: int = 0, train: bool = True, opt=None, lr=None,
             prog=None):
    """Run step ``t`` of ``plan``: write its uniform (``plan.pack_step``: ``seed``, the metrics
    slot ``metrics_slot(t)``; with ``opt`` the learning rate ``lr`` (default ``opt.lr``) and
    ``opt.scalars(t, lr)``), then submit ``prog`` (default: ``program(dev, plan, train,
    opt)``; pass it to reuse one across steps), both by ``dev.run_step`` as a training step.
    Read the results with ``dev.read`` (async)."""
    if opt is not None:
        lr = opt.lr if lr is None else lr
        uniform = pack_step(t, 0, seed, lr, opt.scalars(t, lr))
    else:
        uniform = pack_step(t, 0, seed, 0.0 if lr is None else lr)
    dev.run_step(prog if prog is not None else program(dev, plan, train, opt), plan.step,
                 uniform)


def metrics_slot(t: int) -> int:
    """The slot of ``plan.metrics`` (pairs loss, accuracy) that step ``t`` writes."""
    return (max(t, 1) - 1) % METRICS_RING


async def run_case(dev, case: dict) -> dict:
    """Run one case on ``dev`` (see the module docstring). Raises what the engine raises."""
    batch, seed = int(case["batch"]), int(case.get("seed", 0))
    min_rows = Builder.ATTENTION_MIN_ROWS
    if case.get("fuse_all_attention") is True:
        Builder.ATTENTION_MIN_ROWS = 0
    try:
        plan = await load(dev, case["graph"], unb64(case["weights"]), batch, unb64(case["x"]),
                          unb64(case["labels"]), loss=case.get("loss"),
                          init_seed=case.get("init_seed"))
    finally:
        Builder.ATTENTION_MIN_ROWS = min_rows
    train = case.get("train", True)
    opt = None
    if case.get("optimizer"):
        spec = dict(case["optimizer"])
        opt = optim.make(spec.pop("name"), float(spec.pop("lr")), **spec)
        await opt.attach(plan)
    prog = program(dev, plan, train, opt)
    first = int(case.get("step", 1))
    losses = []
    for t in range(first, first + int(case.get("steps", 1))):
        run_step(dev, plan, t, seed, train, opt, prog=prog)
        if train:
            at = 8 * metrics_slot(t)
            losses.append(struct.unpack("<f", await dev.read(plan.metrics, at, 4))[0])
    out = plan.acts[plan.graph.output]
    return {"name": case["name"], "losses": losses,
            "output": b64(await dev.read(out.buf, out.offset, out.nbytes)),
            "grads": b64(await dev.read(plan.G, 0, plan.wbytes)),
            "weights": b64(await dev.read(plan.P, 0, plan.wbytes))}


async def run_cases(dev, cases: list) -> list:
    """``run_case`` for each case; a failing case gives ``{"name", "error": message}``
    (``errors.user_message``: a ``UserError``'s message alone, else "Type: message") instead of
    stopping the others."""
    out = []
    for case in cases:
        try:
            out.append(await run_case(dev, case))
        except Exception as exc:  # reported per case, compared by the test
            out.append({"name": case.get("name"), "error": user_message(exc)})
    return out
