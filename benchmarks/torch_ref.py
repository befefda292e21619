"""PyTorch references in the same run: SeedNet training steps (eager and, on CUDA, one CUDA
graph per step) and the float32 GEMM (cuBLAS on CUDA). Strict float32: TF32 off for matmuls
and cuDNN convolutions (the engine computes in float32)."""

from __future__ import annotations

import time


def _setup(torch):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    return "cuda" if torch.cuda.is_available() else "cpu"


def _seednet(nn):
    """SeedNet (shared/DESIGN.md): three 3x3 convs with ReLU, BatchNorm2d, Linear 11616 -> 32,
    ReLU, Dropout(0.3), Linear 32 -> 10, BatchNorm1d, log_softmax."""
    return nn.Sequential(
        nn.Conv2d(1, 8, 3), nn.ReLU(), nn.Conv2d(8, 16, 3), nn.ReLU(),
        nn.Conv2d(16, 24, 3), nn.ReLU(), nn.BatchNorm2d(24), nn.Flatten(),
        nn.Linear(24 * 22 * 22, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 10),
        nn.BatchNorm1d(10), nn.LogSoftmax(dim=1))


def _sync(torch, device):
    if device == "cuda":
        torch.cuda.synchronize()


def seednet(batch: int, steps: int, warmup: int = 10, graphs: bool = True) -> dict:
    """ms per Adam training step (NLL loss) of SeedNet at ``batch``; eager, and replaying one
    captured CUDA graph per step when ``graphs`` and CUDA; peak CUDA memory of the eager run."""
    import torch
    from torch import nn
    device = _setup(torch)
    torch.manual_seed(0)
    model = _seednet(nn).to(device)
    x = torch.randn(batch, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    capturable = device == "cuda" and graphs
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=capturable)
    loss_fn = nn.NLLLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    out = {"batch": batch, "device": device, "steps": steps}
    if device == "cuda":
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(warmup):
                step()
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.reset_peak_memory_stats()
    else:
        for _ in range(warmup):
            step()
    _sync(torch, device)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(torch, device)
    out["eager_ms"] = 1000 * (time.perf_counter() - t0) / steps
    if device == "cuda":
        out["peak_bytes"] = torch.cuda.max_memory_allocated()
    if capturable:
        g = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(g):
            static_loss = loss_fn(model(x), y)
            static_loss.backward()
            opt.step()
        for _ in range(warmup):
            g.replay()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            g.replay()
        torch.cuda.synchronize()
        out["graph_ms"] = 1000 * (time.perf_counter() - t0) / steps
    out["ms"] = out.get("graph_ms", out["eager_ms"])
    return out


def gemm(n: int = 4096, reps: int = 20) -> dict:
    """float32 [n, n] x [n, n] through torch.matmul (cuBLAS on CUDA, TF32 off): TFLOP/s, median
    of ``reps`` timed with CUDA events after a warm-up."""
    import torch
    device = _setup(torch)
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    for _ in range(3):
        c = a @ b
    _sync(torch, device)
    times = []
    for _ in range(reps if device == "cuda" else 3):
        if device == "cuda":
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            c = a @ b
            e1.record()
            torch.cuda.synchronize()
            times.append(e0.elapsed_time(e1))
        else:
            t0 = time.perf_counter()
            c = a @ b
            times.append(1000 * (time.perf_counter() - t0))
    del c
    times.sort()
    ms = times[len(times) // 2]
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    return {"n": n, "ms": ms, "tflops": 2 * n ** 3 / ms / 1e9, "device": name,
            "library": "cuBLAS" if device == "cuda" else "torch CPU"}


def versions() -> dict:
    import torch
    v = {"torch": torch.__version__}
    if torch.cuda.is_available():
        v["cuda"] = torch.version.cuda
        v["cudnn"] = torch.backends.cudnn.version()
        v["gpu"] = torch.cuda.get_device_name()
    return v
