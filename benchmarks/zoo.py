#!/usr/bin/env python3
"""Model zoo benchmark (not a test): ms per Adam training step (NLL loss on log_softmax) of
SeedNet, the wide MLP, ResNet-8 and a transformer encoder block, our engine natively (wgpu-py)
beside PyTorch eager, one CUDA graph per step, and torch.compile with the whole step captured in
one CUDA graph; float32, TF32 off. The models are built here with torch and exported to ONNX
(TorchScript exporter, opset 17, training mode); the engine trains SeedNet from
models/seednet.onnx. Every variant is timed the same way: warm-up (at least 2 s of steps: the
GPU's clocks ramp up), then ``--repeats`` runs of ``--steps`` back-to-back steps ending in a
synchronisation, the median of ms per step.

    python benchmarks/zoo.py --json out.json                # all parts, batch 64 and 1000
    python benchmarks/zoo.py --parts engine --engine /other/checkout/py --label base --json b.json
    python benchmarks/zoo.py --table a.json b.json          # one table from several runs

The input shape is a parameter (``--shape 1 28 28``, ``--shape 3 32 32``). The engine trains on
MNIST for 1x28x28 when .cache/datasets/mnist exists, else on random bytes of the shape (speed
does not depend on the pixels).
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import contextlib
import datetime
import json
import os
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

ZOO = ("seednet", "mlp", "resnet8", "resnet18", "encoder", "vit", "mobilenetv2", "lstm")
# scripts/make_zoo.py's models (issue 19's zoo), each at its own sample shape; the engine
# trains the committed TorchScript fixture tests/fixtures/zoo/<name>-ts.onnx
SCRIPTED = ("vit", "mobilenetv2", "lstm")
TORCH_MODES = ("eager", "graph", "compile")
LABELS = {"seednet": "SeedNet", "mlp": "MLP 784-1024-1024-10",
          "resnet8": "ResNet-8 (16/32/64, BN, residual Add, GAP)",
          "resnet18": "ResNet-18 (64..512, 2 blocks a stage, CIFAR stem)",
          "encoder": "encoder block (28 tokens x 28, d 64, 4 heads)",
          "vit": "ViT (3x32x32, 4x4 patches, d 64, 2 layers)",
          "mobilenetv2": "MobileNetV2-style (3x32x32, depthwise, ReLU6)",
          "lstm": "LSTM (28 rows of 28, hidden 64)"}


def _make_zoo():
    """scripts/make_zoo.py as a module (its torch classes)."""
    sys.path.insert(0, str(REPO / "scripts"))
    import make_zoo
    return make_zoo


def shape_of(name: str, shape) -> tuple:
    """The sample shape model ``name`` is timed at: ``shape`` (``--shape``), or the zoo
    script's own for the models of ``SCRIPTED``."""
    return tuple(_make_zoo().MODELS[name][1]) if name in SCRIPTED else tuple(shape)


def build(name: str, shape):
    """The torch module ``name`` of the zoo for inputs [N, *shape], ending in log_softmax."""
    from torch import nn
    if name in SCRIPTED:
        return nn.Sequential(_make_zoo().build(name)[0], nn.LogSoftmax(dim=1))
    residual, encoder = _modules()
    c, h, w = shape
    if name == "seednet":
        import torch_ref
        net = torch_ref._seednet(nn)
        if tuple(shape) != (1, 28, 28):
            net[0] = nn.Conv2d(c, 8, 3)
            net[8] = nn.Linear(24 * (h - 6) * (w - 6), 32)
        return net
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(c * h * w, 1024), nn.ReLU(),
                             nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10),
                             nn.LogSoftmax(dim=1))
    if name in ("resnet8", "resnet18"):
        def block(cin, cout, stride):
            return residual(nn.Sequential(
                nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)),
                None if stride == 1 and cin == cout else nn.Sequential(
                    nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)))
        widths = (16, 32, 64) if name == "resnet8" else (64, 128, 256, 512)
        blocks, cin = [], widths[0]
        for i, wd in enumerate(widths):
            for j in range(1 if name == "resnet8" else 2):
                blocks.append(block(cin, wd, 2 if i and not j else 1))
                cin = wd
        return nn.Sequential(nn.Conv2d(c, widths[0], 3, 1, 1, bias=False),
                             nn.BatchNorm2d(widths[0]), nn.ReLU(), *blocks,
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 10),
                             nn.LogSoftmax(dim=1))
    if name == "encoder":
        return encoder(c * h, w)
    raise ValueError(f"unknown zoo model {name!r} (known: {', '.join(ZOO)})")


def _modules():
    """(Residual, Encoder): torch module classes (defined here: torch is imported lazily)."""
    from torch import nn

    class Residual(nn.Module):
        """relu(body(x) + shortcut(x)): a ResNet basic block (residual Add)."""

        def __init__(self, body, shortcut):
            super().__init__()
            self.body, self.shortcut = body, shortcut

        def forward(self, x):
            s = x if self.shortcut is None else self.shortcut(x)
            return (self.body(x) + s).relu()

    class Encoder(nn.Module):
        """Rows of the image as tokens: Linear embedding to d 64, one pre-norm encoder block
        (4-head self-attention, MLP 64-256-64 with GELU, residual Adds), mean over tokens,
        Linear to 10 classes."""

        def __init__(self, tokens, width, d=64, heads=4):
            super().__init__()
            self.t, self.heads = tokens, heads
            self.embed = nn.Linear(width, d)
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
            self.proj = nn.Linear(d, d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
            self.head = nn.Linear(d, 10)

        def forward(self, x):
            n = x.shape[0]
            x = self.embed(x.reshape(n, self.t, -1))
            d, h = x.shape[-1], self.ln1(x)
            q, k, v = (f(h).reshape(n, self.t, self.heads, d // self.heads).transpose(1, 2)
                       for f in (self.q, self.k, self.v))
            att = (q @ k.transpose(-1, -2) * (d // self.heads) ** -0.5).softmax(-1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(n, self.t, d))
            x = x + self.mlp(self.ln2(x))
            return self.head(x.mean(1)).log_softmax(-1)
    return Residual, Encoder


def export(name: str, shape, folder: Path, zeros: bool = False) -> Path:
    """ONNX file of zoo model ``name`` (TorchScript exporter, opset 17, training mode, dynamic
    batch); SeedNet at 1x28x28 is the checked-in models/seednet.onnx. ``zeros``: every
    parameter 0 (a file that compresses to almost nothing, for a payload whose runs initialise
    the weights themselves: init "scratch"; not for the checked-in files)."""
    import torch
    if name == "seednet" and tuple(shape) == (1, 28, 28) and not zeros:
        return REPO / "models" / "seednet.onnx"
    if name in SCRIPTED:
        return REPO / "tests" / "fixtures" / "zoo" / f"{name}-ts.onnx"
    torch.manual_seed(0)
    path = folder / f"{name}.onnx"
    net = build(name, shape).train()
    if zeros:
        with torch.no_grad():
            for t in net.parameters():
                t.zero_()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (torch.zeros(2, *shape),), str(path),
                          dynamo=False, opset_version=17,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {0: "N"}, "output": {0: "N"}})
    return path


@contextlib.contextmanager
def builder(spec: str):
    """``plan.Builder`` class attributes ``NAME=VALUE,...`` (Python literals) set meanwhile;
    ``Device.NAME=VALUE`` sets the native backend's ``Device`` attribute."""
    from webgpu_trainer.engine.backends.wgpu_native import Device
    from webgpu_trainer.engine.plan import Builder
    new = [(Device, k.removeprefix("Device."), ast.literal_eval(v)) if k.startswith("Device.")
           else (Builder, k, ast.literal_eval(v))
           for k, v in (kv.split("=") for kv in spec.split(",") if kv)]
    old = [(cls, k, getattr(cls, k)) for cls, k, _ in new]
    for cls, k, v in new:
        setattr(cls, k, v)
    try:
        yield
    finally:
        for cls, k, v in old:
            setattr(cls, k, v)


def _median(v):
    v = sorted(v)
    return v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2])


WARMUP_S = 2.0  # the GPU's clocks ramp up under load (H200: 345 MHz idle; the first cell of
# a run measured 2.4 ms/step at SeedNet batch 64 after 10 warm-up steps, 0.8 once warm)


async def _timed(step, sync, steps: int, repeats: int, warmup: int) -> dict:
    """Median ms per step over ``repeats`` runs of ``steps`` back-to-back awaited ``step()``
    calls, each run ended by ``await sync()``, after at least ``warmup`` steps and
    ``WARMUP_S`` seconds of steps."""
    t0, n = time.perf_counter(), 0
    while n < warmup or time.perf_counter() - t0 < WARMUP_S:
        await step()
        n += 1
        if n % 10 == 0:
            await sync()
    await sync()
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            await step()
        await sync()
        runs.append(1000 * (time.perf_counter() - t0) / steps)
    return {"ms": _median(runs), "runs": runs}


def _split(count: int, shape):
    """MNIST (1x28x28, when cached) or ``count`` random uint8 images of ``shape`` [C, H, W]
    with 10 classes: the training split the engine is timed on."""
    import random
    import native
    from webgpu_trainer.engine.train.data import DataSpec, Split
    if tuple(shape) == (1, 28, 28):
        return native._data(count)[0]
    spec = DataSpec("random", "random bytes", "image", shape, [str(i) for i in range(10)],
                    mean=[0.5] * shape[0], std=[0.25] * shape[0])
    rng = random.Random(0)
    labels = bytes(rng.randrange(10) for _ in range(count))
    return Split(rng.randbytes(count * spec.values), labels, count, labels, spec)


async def trainer(dev, path: Path, batch: int, shape=(1, 28, 28)):
    """The set-up trained on by ``engine`` and zoo_profile.py: a Trainer of the ONNX model at
    ``path`` (Adam lr 1e-3, scratch init, seed 0) on images of ``shape`` (``_split``), set up,
    its GPU engine given a seeded shuffled order; returns (trainer, steps per epoch)."""
    import random
    from webgpu_trainer import onnx_io
    from webgpu_trainer.engine.train.gpu_engine import GpuEngine
    from webgpu_trainer.engine.train.loop import Trainer
    split = _split(max(4 * batch, 8192), shape)
    graph, weights = onnx_io.load_bundle(path)
    cfg = {"optimizer": "adam", "lr": 1e-3, "batch_size": batch, "seed": 0, "init": "scratch",
           "eval_images": batch, "val_images": 0}
    tr = Trainer(GpuEngine(dev), graph, weights, cfg, split, split)
    await tr.setup()
    perm = list(range(split.count))
    random.Random(0).shuffle(perm)
    tr.engine.set_order(perm)
    return tr, split.count // batch


async def engine(dev, path: Path, batch: int, steps: int, repeats: int, warmup: int,
                 shape=(1, 28, 28)) -> dict:
    """The engine's training step of the ONNX model at ``path``, natively (trainer's own step:
    gather, forward, loss, backward, guard, Adam)."""
    from gpu_timer import Timer
    tr, per_epoch = await trainer(dev, path, batch, shape)
    eng = tr.engine

    async def step():
        tr.step += 1
        await eng.step(tr.step, ((tr.step - 1) % per_epoch) * batch, 1e-3)
    out = await _timed(step, dev.sync, steps, repeats, warmup)
    out["dispatches"] = len(eng.train_program)
    if dev.timestamps:  # the GPU's own time of one step (timestamps around one pass)
        eng._write_step(tr.step + 1, 0, 1e-3, eng.opt.scalars(tr.step + 1, 1e-3))
        out["gpu_ms"] = _median(Timer(dev).passes([eng.train_program] * 20))
    return out


def torch_step(name: str, shape, batch: int, mode: str, steps: int, repeats: int,
               warmup: int) -> dict:
    """PyTorch's training step of zoo model ``name`` on CUDA: "eager", "graph" (the eager step
    captured in one CUDA graph) or "compile" (torch.compile'd model and Adam step, the whole
    step captured in one CUDA graph)."""
    import torch
    from torch import nn
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    torch.set_float32_matmul_precision("highest")
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = build(name, shape).cuda().train()
    x = torch.randn(batch, *shape, device="cuda")
    y = torch.randint(0, 10, (batch,), device="cuda")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=mode != "eager")
    loss_fn = nn.NLLLoss()
    fwd = torch.compile(model) if mode == "compile" else model
    opt_step = torch.compile(opt.step) if mode == "compile" else opt.step

    def step():
        opt.zero_grad(set_to_none=False)
        loss_fn(fwd(x), y).backward()
        opt_step()
    t0 = time.perf_counter()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(max(3, warmup)):
            step()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    setup_s = time.perf_counter() - t0
    run = step
    if mode != "eager":
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            step()
        run = g.replay

    async def astep():
        run()

    async def sync():
        torch.cuda.synchronize()
    out = asyncio.run(_timed(astep, sync, steps, repeats, warmup))
    out["setup_s"] = setup_s
    out["peak_bytes"] = torch.cuda.max_memory_allocated()
    return out


def _versions(dev) -> dict:
    v = {"python": platform.python_version(), "platform": platform.platform()}
    try:
        import wgpu
        v["wgpu-py"] = wgpu.__version__
    except ImportError:
        pass
    try:
        import torch
        v["torch"] = torch.__version__
        if torch.cuda.is_available():
            v.update(cuda=torch.version.cuda, gpu=torch.cuda.get_device_name())
    except ImportError:
        v["torch"] = "absent"
    if dev is not None:
        v["adapter"] = dev.info
    return v


def run(args) -> dict:
    """Measure ``args.parts`` over ``args.models`` x ``args.batch``; returns the results."""
    sys.path.insert(0, str(args.engine.resolve()))
    res = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
           "label": args.label, "shape": args.shape, "steps": args.steps,
           "repeats": args.repeats, "builder": args.builder, "load": os.getloadavg(), "rows": []}
    dev = None
    folder = Path(tempfile.mkdtemp(prefix="zoo-"))
    if "engine" in args.parts:
        import gemm
        import gpu_timer
        dev = gpu_timer.open_device()
    res["versions"] = _versions(dev)
    for name in args.models:
        shape = shape_of(name, args.shape)
        path = export(name, shape, folder)
        for batch in args.batch:
            row = {"model": name, "batch": batch}
            if dev is not None:
                try:
                    with gemm.constants(args.const), builder(args.builder):
                        row["engine"] = asyncio.run(engine(dev, path, batch, args.steps,
                                                           args.repeats, args.warmup,
                                                           shape))
                except Exception as exc:  # keep going: the other cells are still worth it
                    row["engine"] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            for mode in TORCH_MODES:
                if mode in args.parts:
                    try:
                        row[mode] = torch_step(name, shape, batch, mode, args.steps,
                                               args.repeats, args.warmup)
                    except Exception as exc:
                        row[mode] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            res["rows"].append(row)
            print(name, batch, {k: (v.get("ms") or v.get("error")) for k, v in row.items()
                                if isinstance(v, dict)}, flush=True)
    return res


def table(results: list) -> str:
    """Markdown: ms per step per (model, batch), one column per engine run (label) and PyTorch
    mode, and the engine's ratio to the fastest PyTorch column (> 1: the engine is slower)."""
    cells, engines = {}, []
    for res in results:
        lab = "engine" + (f" ({res['label']})" if res.get("label") else "")
        for row in res["rows"]:
            key = (row["model"], row["batch"])
            for part in ("engine",) + TORCH_MODES:
                if part in row and "ms" in row[part]:
                    col = lab if part == "engine" else part
                    if col not in engines and part == "engine":
                        engines.append(col)
                    cells.setdefault(key, {})[col] = row[part]["ms"]
    head = {"eager": "PyTorch eager", "graph": "CUDA graph",
            "compile": "torch.compile + whole-step CUDA graph"}
    tcols = [m for m in TORCH_MODES if any(m in c for c in cells.values())]
    cols = engines + [head[m] for m in tcols] + [f"{e} vs best PyTorch" for e in engines]
    lines = ["| model | batch | " + " | ".join(cols) + " |", "|---|---:|" + "---:|" * len(cols)]
    for (model, batch), c in cells.items():
        best = min((c[m] for m in tcols if m in c), default=None)
        vals = [f"{c[e]:.3f}" if e in c else "-" for e in engines]
        vals += [(f"**{c[m]:.3f}**" if c[m] == best else f"{c[m]:.3f}") if m in c else "-"
                 for m in tcols]
        ratios = [f"{c[e] / best:.2f}x" if e in c and best else "-" for e in engines]
        lines.append(f"| {LABELS.get(model, model)} | {batch} | " + " | ".join(vals + ratios)
                     + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=list(ZOO), choices=ZOO)
    p.add_argument("--batch", type=int, nargs="+", default=[64, 1000])
    p.add_argument("--shape", type=int, nargs=3, default=[1, 28, 28], metavar=("C", "H", "W"))
    p.add_argument("--parts", nargs="+", default=["engine", *TORCH_MODES],
                   choices=["engine", *TORCH_MODES])
    p.add_argument("--steps", type=int, default=20, help="back-to-back steps per timed run")
    p.add_argument("--repeats", type=int, default=5, help="timed runs (the median is reported)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--engine", type=Path, default=REPO / "py",
                   help="folder holding the webgpu_trainer package (default: this checkout's)")
    p.add_argument("--label", default="", help="names the engine column and the JSON")
    p.add_argument("--const", default="", metavar="NAME=VALUE,...",
                   help="engine: override constants of the tiled GEMM (benchmarks/gemm.py)")
    p.add_argument("--builder", default="", metavar="NAME=VALUE,...",
                   help="engine: set plan.Builder class attributes (an A/B of a path choice; "
                   "VALUE a Python literal, e.g. CONV_GEMM_MIN=None)")
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    p.add_argument("--table", type=Path, nargs="+", default=None,
                   help="instead: print one table of these result files")
    args = p.parse_args(argv)
    if args.table:
        print(table([json.loads(f.read_text()) for f in args.table]))
        return 0
    res = run(args)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=1))
    print()
    print(table([res]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
