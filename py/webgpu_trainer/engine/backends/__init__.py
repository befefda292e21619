"""Backends: pick by platform (``sys.platform == "emscripten"`` means Pyodide in a browser)."""

import sys


async def get_device(kind: str = "gpu"):
    """The device for this host: WebGPU in Pyodide, wgpu-py natively, numpy when ``kind="cpu"``.

    Raises ``webgpu_js.NoWebGPU`` in a browser without WebGPU, RuntimeError natively without an
    adapter.
    """
    if sys.platform == "emscripten":
        from .webgpu_js import Device
        return await Device.create()
    from .wgpu_native import Device
    return Device()
