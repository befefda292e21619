"""SeedNet's gradients at full scale against PyTorch float64 (issue 16 §2b).

Usage: ``python scripts/seednet_grads.py [--batch 64] [--offset 0]
[--seed S | --init-seed S] [--backends vulkan,opengl]``

One training step (forward, NLL loss, backward; Dropout ratio 0) of ``models/seednet.onnx`` on
MNIST training images ``offset .. offset + batch`` (the shards of ``webgpu-trainer data``), from
the model's weights (``--seed S``: those of ``torch.manual_seed(S); SeedNet()``; ``--init-seed
S``: those of a training run's init, ``Plan.init_weights(S)``), on PyTorch float32, the numpy
engine (float64 and float32) and the GPU engine on each wgpu backend. Prints per tensor
max |g - g64| / max |g64| with g64 = PyTorch float64, twice: against PyTorch's own ReLU
branches, and against PyTorch float64 taking the ReLU branches of the engine under test; then
the pre-ReLU values whose sign differs from PyTorch float64's ("flips") and the smallest
|pre-ReLU| value.

A ReLU's gradient jumps at 0: a pre-activation within rounding of 0 (|v| ~ 1e-8 of the
largest) may land on either side in float32, which moves every gradient below it by far more
than rounding (1e-3 .. 1e-2 at SeedNet's init: ReLU(conv3) channels with a variance below
BatchNorm's eps get large input gradients). The second comparison removes that; the flip
count shows whether a branch differs beyond rounding. Needs torch (test/dev only);
tests/test_seednet_grads.py imports the functions here.
"""
from __future__ import annotations

import argparse
import copy
import pathlib
import sys

import numpy as np
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from make_seednet import SeedNet  # noqa: E402

from webgpu_trainer import onnx_io  # noqa: E402
from webgpu_trainer.cpu import philox  # noqa: E402
from webgpu_trainer.cpu.engine import Engine, params_from_blob  # noqa: E402
from webgpu_trainer.engine import init  # noqa: E402
from webgpu_trainer.engine.graph import Graph  # noqa: E402
from webgpu_trainer.engine.train.data import MNIST  # noqa: E402
from webgpu_trainer.host import data  # noqa: E402

# The ReLUs of models/seednet.onnx: (pre-activation, output) as the exported graph names them.
RELUS = [("/conv1/Conv_output_0", "/Relu_output_0"), ("/conv2/Conv_output_0", "/Relu_1_output_0"),
         ("/conv3/Conv_output_0", "/Relu_2_output_0"), ("/fc1/Gemm_output_0", "/Relu_3_output_0")]
EPS = float(np.float32(1e-5))  # BatchNorm's eps as the ONNX attribute (float32) holds it
FLIP_MARGIN = 1e-5  # |pre-ReLU| / max |pre-ReLU| above which float32 rounding cannot flip a sign


def seednet_case(batch: int, offset: int = 0, seed: int | None = None, cache=None,
                 init_seed: int | None = None):
    """(graph, params {name: float64}, x float32 [batch, 1, 28, 28], labels uint8) of SeedNet
    with Dropout ratio 0, the model's weights (``seed``: PyTorch's default init with
    ``torch.manual_seed(seed)``; ``init_seed``: the engines' init of a training run,
    ``Plan.init_weights``, bit for bit) and MNIST training images ``offset .. offset + batch``
    normalised through the engines' float32 pixel table."""
    graph, blob = onnx_io.load_bundle(ROOT / "models" / "seednet.onnx")
    graph = copy.deepcopy(graph)
    for node in graph["nodes"]:
        if node["op_type"] == "Dropout":
            node["attrs"]["ratio"] = 0.0
            graph["constants"][node["inputs"][1]]["values"] = [0.0]
    params = params_from_blob(graph, blob)
    if seed is not None:
        torch.manual_seed(seed)
        state = SeedNet().state_dict()
        params.update({k: state[k].numpy().astype(np.float64) for k in params})
    if init_seed is not None:
        for rule in init.rules(Graph(graph)):
            shape = params[rule.name].shape
            params[rule.name] = np.full(shape, rule.value, np.float64) if rule.kind != "uniform" \
                else np.float64(philox.init_values(init_seed, rule.stream, params[rule.name].size,
                                                   np.float32(rule.scale)).reshape(shape))
    images, labels = data.load(cache, "train")
    x = np.float32(MNIST.table())[images[offset:offset + batch]][:, None]
    return graph, params, x, labels[offset:offset + batch]


def torch_step(params: dict, x, labels, dtype=torch.float64, masks=None) -> dict:
    """One PyTorch step of SeedNet (``make_seednet.SeedNet``'s layers, Dropout off) in
    ``dtype``, BatchNorm's eps the exported graph's (``EPS``). ``masks``: {pre-activation name:
    bool array} taken as the ReLUs' branches (y = v * mask) instead of v > 0. Returns ``grads``
    {parameter: float64}, ``pre`` {pre-activation name: float64 value} and ``loss``."""
    model = SeedNet().to(dtype).train()
    model.norm1.eps = model.norm2.eps = EPS
    model.load_state_dict({k: torch.tensor(v, dtype=dtype) for k, v in params.items()})
    pre = {}

    def relu(v, name):
        pre[name] = v
        if masks is None:
            return torch.relu(v)
        return v * torch.tensor(np.asarray(masks[name]).reshape(v.shape), dtype=dtype)

    names = iter(p for p, _ in RELUS)
    h = torch.tensor(x, dtype=dtype)
    for conv in (model.conv1, model.conv2, model.conv3):
        h = relu(conv(h), next(names))
    h = relu(model.fc1(torch.flatten(model.norm1(h), 1)), next(names))
    out = torch.log_softmax(model.norm2(model.fc2(h)), dim=1)
    loss = torch.nn.functional.nll_loss(out, torch.tensor(np.int64(labels)))
    loss.backward()
    return {"grads": {k: p.grad.numpy().astype(np.float64) for k, p in model.named_parameters()},
            "pre": {k: v.detach().numpy().astype(np.float64) for k, v in pre.items()},
            "loss": float(loss.detach())}


def engine_masks(acts: dict) -> dict:
    """{pre-activation name: bool branch} of an engine's activations (the ReLU's output > 0
    where the pre-activation is not kept, e.g. a ReLU fused into the producer)."""
    return {p: (acts[p] > 0) if p in acts else (acts[o] > 0) for p, o in RELUS}


def flips(masks: dict, pre64: dict) -> dict:
    """{pre-activation name: (ReLU branches that differ from PyTorch float64's, of them those
    with |v| > FLIP_MARGIN * max |v|, which float32 rounding cannot explain)}."""
    out = {}
    for name, mask in masks.items():
        v = pre64[name]
        diff = np.asarray(mask).reshape(v.shape) != (v > 0)
        out[name] = (int(diff.sum()),
                     int((diff & (np.abs(v) > FLIP_MARGIN * np.abs(v).max())).sum()))
    return out


def rel_err(got, ref) -> float:
    """max |got - ref| / max |ref| (0 for an all-zero ref equal to got)."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    scale = np.abs(ref).max()
    return float(np.abs(got - ref).max() / scale) if scale else float(np.abs(got).max())


def numpy_result(graph, params, x, labels, dtype) -> dict:
    """{"grads", "masks"} of the numpy engine's step in ``dtype``."""
    res = Engine(graph, params, dtype).step(x, labels, train=True)
    return {"grads": res["grads"], "masks": engine_masks(res["acts"])}


def gpu_result(backend, graph, params, x, labels) -> dict:
    """{"grads", "masks"} of the GPU engine's step on wgpu ``backend``."""
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import run
    from harness import one_step
    from webgpu_trainer.cpu.engine import blob_from_params
    from webgpu_trainer.engine.backends.wgpu_native import Device
    res = run(one_step(Device(backend=backend), graph, blob_from_params(graph, params), x,
                       labels))
    return {"grads": res["grads"], "masks": engine_masks(res["acts"])}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--offset", type=int, default=0)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--init-seed", type=int, default=None)
    ap.add_argument("--backends", default="vulkan,opengl", help="'' for none")
    args = ap.parse_args(argv)
    graph, params, x, labels = seednet_case(args.batch, args.offset, args.seed,
                                             init_seed=args.init_seed)
    ref = torch_step(params, x, labels)
    runs = {"numpy f64": numpy_result(graph, params, x, labels, np.float64),
            "numpy f32": numpy_result(graph, params, x, labels, np.float32)}
    for backend in filter(None, args.backends.split(",")):
        runs[f"wgpu {backend}"] = gpu_result(backend, graph, params, x, labels)
    t32 = torch_step(params, x, labels, torch.float32)
    runs["torch f32"] = {"grads": t32["grads"], "masks": {k: v > 0 for k, v in t32["pre"].items()}}
    replayed = {k: torch_step(params, x, labels, masks=r["masks"])["grads"]
                for k, r in runs.items()}
    print(f"batch {args.batch}, images {args.offset}.., weights "
          + ("models/seednet.onnx" if args.seed is None and args.init_seed is None else
             f"torch.manual_seed({args.seed})" if args.seed is not None else
             f"Plan.init_weights({args.init_seed})"))
    for title, refs in (("vs PyTorch float64", {k: ref["grads"] for k in runs}),
                        ("vs PyTorch float64 on the engine's ReLU branches", replayed)):
        print(f"\n{title}\n{'tensor':14s}" + "".join(f"{k:>12s}" for k in runs))
        for name in ref["grads"]:
            print(f"{name:14s}" + "".join(f"{rel_err(r['grads'][name], refs[k][name]):12.1e}"
                                          for k, r in runs.items()))
    print("\nReLU branches != PyTorch float64's (all / beyond rounding):")
    for k, r in runs.items():
        print(f"  {k:10s} " + ", ".join(f"{n.split('/')[1]} {a}/{b}"
                                        for n, (a, b) in flips(r["masks"], ref["pre"]).items()))
    print("smallest |pre-ReLU| / max: " + ", ".join(
        f"{n.split('/')[1]} {np.abs(v).min() / np.abs(v).max():.1e}"
        for n, v in ref["pre"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
