"""The device of a native run (``--device gpu``: wgpu-py, ``--device cpu``: the numpy engine)
and the trainer for it (``train.Trainer`` over a ``GpuEngine`` or a ``cpu_engine.CpuEngine``)."""

from __future__ import annotations

import os

from ..engine.train import loop as train_mod
from ..engine.train.gpu_engine import GpuEngine


class CpuDevice:
    """``--device cpu``: no device object is needed by the numpy engine; this one names it in
    config.json (``info``) and tells the code paths apart (``is_numpy``; a device's own
    ``is_cpu`` means a software WebGPU adapter, ``backends.device.Device``)."""

    is_numpy = True

    def __init__(self):
        import numpy as np
        self.info = {"backend": "numpy", "device": "numpy float32 (CPU)",
                     "description": f"numpy {np.__version__}, {os.cpu_count()} CPU cores"}


def is_numpy(dev) -> bool:
    """True for ``CpuDevice`` (the numpy engine), False for a WebGPU device."""
    return getattr(dev, "is_numpy", False)


def open_device(kind: str):
    """``CpuDevice()`` for "cpu", the wgpu-py device for "gpu"."""
    if kind == "cpu":
        return CpuDevice()
    if kind != "gpu":
        raise ValueError(f"unknown device {kind!r}: choose gpu or cpu")
    from ..engine.backends.wgpu_native import Device
    return Device()


def make_engine(dev):
    """The training engine on ``dev``: ``CpuEngine`` for a ``CpuDevice``, else ``GpuEngine``."""
    if is_numpy(dev):
        from ..cpu.cpu_engine import CpuEngine
        return CpuEngine()
    return GpuEngine(dev)


def make_trainer(dev, graph, weights, cfg, train_set, test_set, emit=None):
    """``train.Trainer`` on the engine of ``dev`` (``make_engine``)."""
    return train_mod.Trainer(make_engine(dev), graph, weights, cfg, train_set, test_set, emit)
