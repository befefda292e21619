"""The kernels playground: a 3x3 filter over a greyscale image by the engine's own Conv kernel.

The image is run through a ``Plan`` (the code every training step uses) of a two-node graph:
``Conv`` (weight [1, 1, 3, 3], no bias, pads 1: the output has the image's size) and a
``Flatten`` (a view, no dispatch: a plan's output is [batch, values]). ONNX's Conv is a
cross-correlation with zero padding:
``out[i, j] = sum over a, b in 0..2 of kernel[a][b] * image[i + a - 1, j + b - 1]``.
Host-independent (the browser worker through ``worker/kernels.py``, the tests natively);
standard library only.
"""

import asyncio
import math
import struct

from . import parity
from ..graph import Graph
from ..plan import Plan

MAX_SIDE = 256  # the largest width and height; the page scales images down to fit
PLANS_KEPT = 4  # plans kept per device (one per image size), the oldest dropped first

# The preset kernels (row-major 3x3) with one line for students on what each one shows.
PRESETS = [
    {"id": "blur", "label": "Gaussian blur",
     "weights": [1 / 16, 2 / 16, 1 / 16, 2 / 16, 4 / 16, 2 / 16, 1 / 16, 2 / 16, 1 / 16],
     "about": "A weighted average of each pixel and its neighbours: softens edges and noise."},
    {"id": "sobel_x", "label": "Sobel x",
     "weights": [-1, 0, 1, -2, 0, 2, -1, 0, 1],
     "about": "Brightness change from left to right: lights up vertical edges (positive "
              "where it gets brighter to the right, negative where darker)."},
    {"id": "sobel_y", "label": "Sobel y",
     "weights": [-1, -2, -1, 0, 0, 0, 1, 2, 1],
     "about": "Brightness change from top to bottom: lights up horizontal edges."},
    {"id": "laplacian", "label": "Laplacian",
     "weights": [0, 1, 0, 1, -4, 1, 0, 1, 0],
     "about": "Neighbours minus the centre: zero on flat areas and smooth ramps, large at "
              "edges and fine detail, in every direction."},
    {"id": "sharpen", "label": "Sharpen",
     "weights": [0, -1, 0, -1, 5, -1, 0, -1, 0],
     "about": "The pixel plus its difference from its neighbours: makes edges crisper."},
]


def presets() -> dict:
    """What the page draws its controls from (``GET /api/kernels``): ``{"presets": PRESETS,
    "max_side": MAX_SIDE}``."""
    return {"presets": PRESETS, "max_side": MAX_SIDE}


def graph(height: int, width: int) -> dict:
    """The model description (bundle dict) of the filter over one ``height`` x ``width`` image:
    input ``image`` [N, 1, H, W], weight ``kernel`` [1, 1, 3, 3] (role "buffer": nothing
    trains), output ``values`` [N, H * W]."""
    conv = {"name": "/kernels/Conv", "op_type": "Conv", "inputs": ["image", "kernel"],
            "outputs": ["filtered"],
            "attrs": {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [1, 1],
                      "dilations": [1, 1], "group": 1}}
    flat = {"name": "/kernels/Flatten", "op_type": "Flatten", "inputs": ["filtered"],
            "outputs": ["values"], "attrs": {"axis": 1}}
    return {"format": "webgpu-trainer/graph@1", "name": "kernels-playground", "opset": 17,
            "producer": "webgpu-trainer",
            "inputs": [{"name": "image", "shape": ["N", 1, height, width], "dtype": "float32"}],
            "outputs": [{"name": "values", "shape": ["N", height * width],
                         "dtype": "float32"}],
            "tensors": [{"name": "kernel", "shape": [1, 1, 3, 3], "dtype": "float32",
                         "offset": 0, "nbytes": 36, "role": "buffer"}],
            "constants": {}, "nodes": [conv, flat]}


def check(width, height, pixels: bytes, kernel) -> list:
    """The problems of a request, as sentences (empty: fine). ``pixels``: float32 bytes,
    row-major, ``width * height`` values; ``kernel``: 9 finite numbers, row-major."""
    problems = []
    for name, v in (("width", width), ("height", height)):
        if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= MAX_SIDE:
            problems.append(f"{name} must be a whole number from 1 to {MAX_SIDE}, not {v!r}")
    if not problems and len(pixels) != 4 * width * height:
        problems.append(f"pixels: {len(pixels)} bytes for a {width}x{height} image (expected "
                        f"{4 * width * height}: one float32 per pixel)")
    if not isinstance(kernel, (list, tuple)) or len(kernel) != 9:
        problems.append("kernel must be 9 numbers (3x3, row by row)")
    else:
        for k, v in enumerate(kernel):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                problems.append(f"kernel row {k // 3 + 1}, column {k % 3 + 1}: {v!r} is not a "
                                "finite number")
    return problems


class Filter:
    """The plans of one device, one per image size (``PLANS_KEPT`` kept), and one request at a
    time (a lock: concurrent requests queue)."""

    def __init__(self, dev):
        self.dev = dev
        self.plans: dict = {}
        self.lock = asyncio.Lock()

    async def plan(self, height: int, width: int) -> Plan:
        key = (height, width)
        if key not in self.plans:
            while len(self.plans) >= PLANS_KEPT:
                self.plans.pop(next(iter(self.plans)))
            self.plans[key] = await Plan.build(self.dev, Graph(graph(height, width)), 1)
        self.plans[key] = self.plans.pop(key)  # most recently used last
        return self.plans[key]

    async def convolve(self, width: int, height: int, pixels: bytes, kernel) -> bytes:
        """The filtered image: float32 bytes, row-major, the input's size. Runs the plan's
        eval forward (the Conv's weight packing and the Conv itself) on the device. Raises
        ValueError listing every problem of the request (``check``)."""
        problems = check(width, height, pixels, kernel)
        if problems:
            raise ValueError("; ".join(problems))
        async with self.lock:
            plan = await self.plan(height, width)
            await parity.load(self.dev, None, struct.pack("<9f", *kernel), 1, bytes(pixels),
                              plan=plan)
            self.dev.submit([self.dev.program(plan.fwd_eval)])
            out = plan.acts[plan.graph.output]
            return await self.dev.read(out.buf, out.offset, out.nbytes)
