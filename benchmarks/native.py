"""Native (wgpu-py) measurements of the engine: SeedNet training steps (GPU ms/step, host ms
per step, peak GPU memory by kind), the engine's f32 GEMM, and a per-dispatch profile.

Steps are the trainer's own (gather batch -> forward -> loss -> backward -> guard -> Adam), on
MNIST from .cache/datasets/mnist when present, else random MNIST-shaped bytes (speed does not
depend on the pixels).
"""

from __future__ import annotations

import contextlib
import random
import struct
import time
import types
from pathlib import Path

from gpu_timer import Timer, median

REPO = Path(__file__).resolve().parents[1]


def _data(count: int):
    from webgpu_trainer.engine.train.data import Split
    cache = REPO / ".cache" / "datasets" / "mnist"
    if (cache / "manifest.json").is_file():
        from webgpu_trainer.host import data
        images, labels = data.load(cache, "train")
        split = Split(images.tobytes(), labels.tobytes(), len(labels), labels.tobytes())
        return split, "MNIST"
    rng = random.Random(0)
    images = rng.randbytes(count * 784)
    labels = bytes(rng.randrange(10) for _ in range(count))
    return Split(images, labels, count, labels), "random bytes"


def _memory(dev, plan, start: int) -> dict:
    """Bytes the engine allocated for this model (ledger entries from ``start``) by kind, and
    the reference size params + optimizer state + activations kept + parameter gradients."""
    kinds = {"data": 0, "params": 0, "param_grads": 0, "optimizer": 0, "activations": 0,
             "activation_grads": 0, "packed_weights": 0, "scratch": 0, "other": 0}
    act_labels = {t.buf.label for t in plan.acts.values()}
    grad_labels = {t.buf.label for t in plan.grads.values()}
    for label, size in dev.ledger[start:]:
        if label in ("images", "labels", "train.order", "eval.order", "eval.logits",
                     "eval.loss_rows", "normalize.lut"):
            kinds["data"] += size
        elif label == "weights":
            kinds["params"] += size
        elif label == "grads":
            kinds["param_grads"] += size
        elif label.startswith("optim."):
            kinds["optimizer"] += size
        elif label in grad_labels or (label.startswith("d") and "@" in label):
            kinds["activation_grads"] += size
        elif label in act_labels:
            kinds["activations"] += size
        elif label.endswith((".wfwd", ".wbwd", ".wtrans")):
            kinds["packed_weights"] += size
        elif label == "scratch":
            kinds["scratch"] += size
        else:
            kinds["other"] += size
    kept = sum({id(t.buf): t.buf.size for t in plan.acts.values()}.values())
    grads = sorted({id(t.buf): t.buf.size for t in plan.grads.values()}.values())
    wb = plan.wbytes
    # the least any trainer keeps: params, Adam's two moments, parameter gradients, the
    # activations kept for backward, and the two activation gradients live at once (the
    # largest layer's input and output gradients)
    reference = wb + 2 * wb + wb + kept + sum(grads[-2:])
    model = sum(v for k, v in kinds.items() if k != "data")
    return {"by_kind": kinds, "model_bytes": model, "data_bytes": kinds["data"],
            "reference_bytes": reference, "ratio": model / reference,
            "reference": {"params": wb, "adam_moments": 2 * wb, "param_grads": wb,
                          "activations_kept": kept, "live_activation_grads": sum(grads[-2:])}}


async def seednet(dev, batch: int, steps: int, warmup: int, profile: bool = True,
                  gpu_reps: int = 50) -> dict:
    """One SeedNet configuration: GPU ms/step (timestamps of whole steps, median), wall ms/step
    of back-to-back steps, host ms/step (write + submit with the GPU idle, median), memory."""
    from webgpu_trainer import onnx_io
    from webgpu_trainer.engine.train.gpu_engine import GpuEngine
    from webgpu_trainer.engine.train.loop import Trainer
    split, source = _data(max(4 * batch, 8192))
    graph, weights = onnx_io.load_bundle(REPO / "models" / "seednet.onnx")
    start = len(dev.ledger)
    cfg = {"optimizer": "adam", "lr": 1e-3, "batch_size": batch, "seed": 0,
           "init": "scratch", "eval_images": batch, "val_images": 0}
    tr = Trainer(GpuEngine(dev), graph, weights, cfg, split, split)
    t0 = time.perf_counter()
    await tr.setup()
    setup_s = time.perf_counter() - t0
    eng = tr.engine  # engine/gpu_engine.GpuEngine: the plan's programs
    per_epoch = split.count // batch
    perm = list(range(split.count))
    random.Random(0).shuffle(perm)
    eng.set_order(perm)

    async def one_step():  # what Trainer.run does per step: write the Step uniform, submit
        tr.step += 1
        await eng.step(tr.step, ((tr.step - 1) % per_epoch) * batch, 1e-3)

    for _ in range(warmup):
        await one_step()
    await dev.sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        await one_step()
    await dev.sync()
    wall_ms = 1000 * (time.perf_counter() - t0) / steps
    host = []
    for _ in range(min(steps, 50)):
        await dev.sync()
        t0 = time.perf_counter()
        await one_step()
        host.append(1000 * (time.perf_counter() - t0))
    await dev.sync()
    timer = Timer(dev)
    gpu = []
    for _ in range(max(1, gpu_reps // 10)):
        eng._write_step(tr.step + 1, 0, 1e-3, eng.opt.scalars(tr.step + 1, 1e-3))
        gpu += timer.passes([eng.train_program] * min(10, gpu_reps))
    out = {"batch": batch, "steps": steps, "data": source, "setup_s": setup_s,
           "dispatches": len(eng.train_program), "wall_ms": wall_ms, "gpu_ms": median(gpu),
           "host_ms": median(host), "host_ms_max": max(host),
           "images_per_s": 1000 * batch / wall_ms, "memory": _memory(dev, eng.plan, start)}
    slot = 8 * ((tr.step - 1) % 64)
    out["last_loss"] = struct.unpack("<f", await dev.read(eng.plan.metrics, slot, 4))[0]
    if profile:
        out["profile"] = _profile(eng, timer)
    return out


def _profile(eng, timer) -> list:
    """[(phase, pipeline key, workgroups, GPU ms)] of every dispatch of one training step, each
    in its own pass (median of 5 runs)."""
    plan = eng.plan
    rows = []
    for phase, ds in (("data", eng.gather_train), ("forward", plan.fwd_train),
                      ("loss", plan.loss), ("backward", plan.bwd),
                      ("guard", eng.guard.dispatches), ("optimizer", eng.opt.dispatches)):
        rows += [(phase, d[0][2], list(d[2])) for d in ds]
    progs = [[d] for d in eng.train_program]
    runs = [timer.passes(progs) for _ in range(5)]
    return [(*r, median([run[i] for run in runs])) for i, r in enumerate(rows)]


async def gemm(dev, n: int = 4096, tiled=None, tw=None, reps: int = 10) -> dict:
    """The engine's Gemm kernel (ops/gemm.matmul) on [n, n] x [n, n] float32: TFLOP/s (GPU time
    by timestamps, median of reps after a warm-up) and the error of 64 rows vs float64."""
    import numpy as np
    from webgpu_trainer.engine.ops import gemm as gemm_op
    from webgpu_trainer.engine.plan import Builder
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    ba, bb, bc = dev.buffer(a.nbytes, "A"), dev.buffer(b.nbytes, "B"), dev.buffer(a.nbytes, "C")
    dev.write(ba, a.tobytes())
    dev.write(bb, b.tobytes())
    builder = Builder(types.SimpleNamespace(dev=dev, P=None, G=None, step=None))
    if tiled is not None:
        builder.TILED = tiled
    rule = getattr(gemm_op, "tile_shape", None)
    if tw is not None and rule is not None:  # force a tile width (8: 64 x 64 tiles)
        gemm_op.tile_shape = lambda *_: (tw, tw) if tw else None
    try:
        await gemm_op.matmul(builder, ba, (n, 1), bb, (n, 1), bc, n, n, n)
    finally:
        if rule is not None:
            gemm_op.tile_shape = rule
    prog = dev.program(builder.current)
    timer = Timer(dev)
    timer.passes([prog] * 2)  # warm-up
    times = timer.passes([prog] * reps)
    raw = await dev.read(bc, 0, 64 * n * 4)
    got = np.frombuffer(raw, np.float32).reshape(64, n)
    ref = a[:64].astype(np.float64) @ b.astype(np.float64)
    err = float(np.abs(got - ref).max() / np.abs(ref).max())
    ms = median(times)
    return {"n": n, "ms": ms, "tflops": 2 * n ** 3 / ms / 1e9, "rel_err": err,
            "kernels": [d[0][2] for d in builder.current],
            "variant": " + ".join(d[0][2].split(":", 1)[1].rstrip(":") for d in builder.current)}


@contextlib.contextmanager
def variant(name: str):
    """One engine choice changed for an A/B timing: "gemm_untiled" (the 4x4 GEMM kernel for
    every shape), "conv_fct8" (8 channels a forward thread at any batch), "wgrad_1" (one tap
    block a weight-gradient workgroup: dy read once per block), "elementwise_1" (one element a
    thread), "conv_row_loads" (CPU adapters: ``forward`` with ROW_LOADS, 4 columns a thread,
    instead of ``forward_wide``), "conv_wide_8" (CPU adapters: ``forward_wide`` with 8 columns a
    thread at every width and ``backward_weight`` instead of ``weight_wide``)."""
    from webgpu_trainer.engine.ops import conv, gemm as gemm_op
    from webgpu_trainer.engine.plan import Builder
    saved = []
    if name == "gemm_untiled":
        saved.append((gemm_op, "tile_shape", gemm_op.tile_shape))
        gemm_op.tile_shape = lambda *_: None
    elif name == "conv_fct8":
        saved.append((conv, "_forward_threads", conv._forward_threads))
        conv._forward_threads = lambda b, n, grp, kg, oh, ow, win: (
            n * grp * -(-kg // 8) * oh * -(-ow // 4), "conv2d", "forward", win)
    elif name == "conv_row_loads":
        saved.append((conv, "WIDE", conv.WIDE))
        conv.WIDE = False
    elif name == "conv_wide_8":
        saved += [(conv, "WIDE_QUADS", conv.WIDE_QUADS), (conv, "WIDE_WEIGHT", conv.WIDE_WEIGHT)]
        conv.WIDE_QUADS, conv.WIDE_WEIGHT = 2, False
    elif name == "wgrad_1":
        saved.append((Builder, "WEIGHT_GRAD_BLOCKS", Builder.WEIGHT_GRAD_BLOCKS))
        Builder.WEIGHT_GRAD_BLOCKS = 1
    elif name == "elementwise_1":
        saved.append((Builder, "ELEMENTS_PER_THREAD", Builder.ELEMENTS_PER_THREAD))
        Builder.ELEMENTS_PER_THREAD = 1
    else:
        raise ValueError(f"unknown variant {name!r}")
    try:
        yield
    finally:
        for obj, attr, value in saved:
            setattr(obj, attr, value)
