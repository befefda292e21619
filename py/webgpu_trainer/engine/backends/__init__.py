"""Backends: the device a Plan runs on (``device.Device``, the interface), picked by platform
(``sys.platform == "emscripten"`` means Pyodide in a browser); shaders.py loads the WGSL."""

import sys


async def get_device():
    """The WebGPU device for this host: ``webgpu_js.Device`` in Pyodide, ``wgpu_native.Device``
    (wgpu-py) natively. The numpy engine needs no device (``cli/devices.py``).

    Raises ``webgpu_js.NoWebGPU`` in a browser without WebGPU, RuntimeError natively without an
    adapter.
    """
    if sys.platform == "emscripten":
        from .webgpu_js import Device
        return await Device.create()
    from .wgpu_native import Device
    return Device()
