"""The worker side of the kernels playground (web/kernels.js): ``convolve`` in, ``convolved``
out (docs/ARCHITECTURE.md, "Worker protocol"). Runs only in Pyodide.

A request runs whenever the worker's event loop is free: with no training, at once; during a
training run, between two steps (the training loop awaits the GPU after each submit), as one
small submit of its own on separate buffers, so the run's numbers do not change and its steps
wait for at most one convolution.
"""

import array
import time

from ..engine.errors import user_message
from ..engine.tools.playground import Filter
from .bridge import STATE, float32_array, post

FILTERS: dict = {}  # id(device) -> the device's Filter (its plans)


def _bytes_of(value) -> bytes:
    """A Float32Array / ArrayBuffer (a JsBuffer, or a memoryview after ``to_py``) as bytes."""
    if hasattr(value, "to_bytes"):
        return value.to_bytes()
    return bytes(memoryview(value).cast("B")) if value is not None else b""


async def convolve(data: dict):
    """``convolve {id, width, height, pixels: Float32Array (row-major, width * height),
    kernel: [9 numbers, row-major]}`` -> ``convolved {id, output: Float32Array, min, max, ms}``
    (``ms``: wall time of the request in the worker, a new image size's plan included), or
    ``convolved {id, error}`` naming the problem (a bad request or no GPU), on the worker's
    device (``STATE["device"]``)."""
    rid, dev = data.get("id"), STATE.get("device")
    if dev is None:
        post("convolved", id=rid, error="no WebGPU device: the playground needs the GPU")
        return
    t0 = time.perf_counter()
    try:
        flt = FILTERS.setdefault(id(dev), Filter(dev))
        out = await flt.convolve(data.get("width"), data.get("height"),
                                 _bytes_of(data.get("pixels")), data.get("kernel"))
    except ValueError as exc:
        post("convolved", id=rid, error=str(exc))
        return
    except Exception as exc:  # the device's own errors (lost, out of memory), reported
        post("convolved", id=rid, error=user_message(exc))
        return
    values = array.array("f", out)
    post("convolved", id=rid, output=float32_array(out), min=min(values),
         max=max(values), ms=(time.perf_counter() - t0) * 1000)


HANDLERS = {"convolve": convolve}
