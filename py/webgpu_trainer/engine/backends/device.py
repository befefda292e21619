"""The Device interface: what a Plan, the optimizers and the engines need from a GPU. Two
backends implement it, ``wgpu_native.Device`` (wgpu-py) and ``webgpu_js.Device`` (WebGPU in
Pyodide); ``tests/test_layers.py`` checks them against ``Device``."""

from typing import Protocol


class Device(Protocol):
    """A WebGPU device (see the module docstring). ``info``: the adapter's vendor,
    architecture, device and description; ``is_cpu``: a software adapter (SwiftShader,
    lavapipe: the builder picks the kernels that suit a CPU); ``allocated``: bytes of every
    buffer made so far (what a run holds: the difference); ``limits``: the device's
    ``max_storage_buffer_binding_size`` and ``max_buffer_size`` (bytes)."""

    info: dict
    is_cpu: bool
    allocated: int
    limits: dict

    def buffer(self, nbytes: int, label: str = "", uniform: bool = False):
        """A zero-filled storage (or uniform) buffer of ``nbytes`` (rounded up to 4)."""

    def write(self, buf, data, offset: int = 0):
        """Upload bytes (a Python buffer, or a JS ArrayBuffer in Pyodide) at byte ``offset``."""

    async def pipeline(self, name: str, entry: str, constants: dict | None = None):
        """The compute pipeline of entry point ``entry`` of shader ``name``, compiled once and
        cached by ``shaders.pipeline_key``; a WGSL error raises ``base.ShaderError`` naming the
        shader and entry point."""

    def bind(self, pipeline, buffers: list):
        """A bind group: binding i of the shader file gets ``buffers[i]``, each a buffer or a
        ``base.View`` (buffer, byte offset, byte size)."""

    def program(self, dispatches: list):
        """``[(pipeline, bind_group, (x, y, z)), ...]`` recorded once, submitted many times."""

    def submit(self, programs: list, copies=()):
        """One command encoder, one compute pass per program, then ``copies`` (``(src,
        src_offset, dst, dst_offset, nbytes)``), one queue submit."""

    def run_step(self, program, uniform, data):
        """A training step: write ``data`` (bytes) at the start of the buffer ``uniform``, then
        submit ``program`` alone; returns ``fence()``. The same as ``write`` + ``submit`` +
        ``fence`` in the fewest host calls (natively wgpu-native's C calls once ``program`` was
        submitted; in Pyodide one JS call)."""

    async def read(self, buf, offset: int = 0, nbytes: int | None = None) -> bytes:
        """``nbytes`` of ``buf`` from ``offset`` (None: to its end), after the work submitted."""

    async def read_spans(self, spans: list) -> list:
        """``[bytes]``, one for each ``(buf, offset, nbytes)`` of ``spans`` (offsets multiples
        of 4; any nbytes, whole words copied), after the work submitted: one copy each into
        one staging buffer and one map, so one wait for the GPU instead of one a span (the
        trainer's report reads the metrics ring and the guard's flags this way)."""

    async def sync(self):
        """Wait for the work submitted so far."""

    def fence(self):
        """An awaitable for the work submitted so far (await it later)."""
