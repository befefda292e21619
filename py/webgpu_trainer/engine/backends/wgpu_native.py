"""Native backend on wgpu-py (Vulkan / Metal / D3D12; Mesa lavapipe on a machine with no GPU)."""

import atexit
import os
import shutil
import tempfile

import wgpu

from . import shaders
from .base import ShaderError, View, round_up, span_copies, split_spans

_STORAGE = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
_UNIFORM = wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST
_LAYOUT_TYPES = {"uniform": "uniform", "storage": "storage",
                 "read-only-storage": "read-only-storage"}


try:  # wgpu-py's cffi handles: replaying a validated program skips its per-call wrappers
    from wgpu.backends.wgpu_native import _api
    from wgpu.backends.wgpu_native._api import ffi as _ffi, lib as _lib, libf as _libf
    _RAW = (_lib.wgpuComputePassEncoderSetPipeline, _lib.wgpuComputePassEncoderSetBindGroup,
            _lib.wgpuComputePassEncoderDispatchWorkgroups, _ffi.NULL)
except (ImportError, AttributeError):  # another wgpu-py layout: the public API only
    _RAW = None


# wgpu.h WGPUShaderRuntimeChecks for the engine's own shader modules: 1 = BoundsChecks alone (the
# index clamps WebGPU's semantics need, as a plain module gets), without 2 = ForceLoopBounding:
# naga then adds no 64-bit iteration counter to every loop (wgpu 25+, gfx-rs/wgpu#7080), which
# is there against undefined behaviour of infinite loops; every loop of shaders/ ends (each is
# bounded by a Params count). None: wgpu-py's plain create_shader_module (all checks).
RUNTIME_CHECKS: int | None = 1


def _shader_module(device, code: str, label: str):
    """``device.create_shader_module(code=code, label=label)`` with ``RUNTIME_CHECKS`` through
    wgpu-native's ``wgpuDeviceCreateShaderModuleTrusted`` (validated as the plain call is; its
    errors raise through wgpu-py's error handler), or the plain call where this wgpu-py has no
    such entry point."""
    fn = getattr(_libf, "wgpuDeviceCreateShaderModuleTrusted", None) if _RAW else None
    if RUNTIME_CHECKS is None or fn is None:
        return device.create_shader_module(code=code, label=label)
    src = _api.new_struct_p("WGPUShaderSourceWGSL *", code=_api.to_c_string_view(code))
    src[0].chain.next = _ffi.NULL
    src[0].chain.sType = _lib.WGPUSType_ShaderSourceWGSL
    desc = _api.new_struct_p("WGPUShaderModuleDescriptor *",
                             nextInChain=_ffi.cast("WGPUChainedStruct *", src),
                             label=_api.to_c_string_view(label))
    handle = fn(device._internal, desc, RUNTIME_CHECKS)
    if handle == _ffi.NULL:
        raise RuntimeError("Shader module creation failed")
    return _api.GPUShaderModule(label, handle, device)


def _replay_raw(h, raw):
    """Encode ``raw`` (``_replay``'s list) into the compute pass of wgpu-native handle ``h``."""
    set_pipeline, set_bind_group, dispatch, null = _RAW
    for pipe, bg, x, y, z in raw:
        if pipe is not None:
            set_pipeline(h, pipe)
        if bg is not None:
            set_bind_group(h, 0, bg, 0, null)
        dispatch(h, x, y, z)


class _Step:
    """``Device.run_step``'s C calls on one device: wgpu-py's error-checked entry points
    (``libf``: a failure raises as through wgpu-py) for the per-step calls, the descriptors
    made once; no wgpu-py wrapper object per step (their creation, logging and release by the
    garbage collector were a quarter of a small model's host time on lavapipe)."""

    def __init__(self, device):
        self.queue, self.device = device.queue._internal, device._internal
        self.enc_desc = _ffi.new("WGPUCommandEncoderDescriptor *")
        self.pass_desc = _ffi.new("WGPUComputePassDescriptor *")
        self.cb_desc = _ffi.new("WGPUCommandBufferDescriptor *")
        self.cbs = _ffi.new("WGPUCommandBuffer[1]")

    def __call__(self, raw, uniform, data):
        f = _libf
        f.wgpuQueueWriteBuffer(self.queue, uniform, 0, _ffi.from_buffer(data), len(data))
        enc = f.wgpuDeviceCreateCommandEncoder(self.device, self.enc_desc)
        try:
            h = f.wgpuCommandEncoderBeginComputePass(enc, self.pass_desc)
            try:
                _replay_raw(h, raw)
                f.wgpuComputePassEncoderEnd(h)
            finally:
                _lib.wgpuComputePassEncoderRelease(h)
            cbs = self.cbs
            cbs[0] = f.wgpuCommandEncoderFinish(enc, self.cb_desc)
        finally:
            _lib.wgpuCommandEncoderRelease(enc)
        try:
            f.wgpuQueueSubmit(self.queue, 1, cbs)
        finally:
            _lib.wgpuCommandBufferRelease(cbs[0])


class _Program(list):
    """``[(pipeline, bind_group, (x, y, z))]``; ``raw``: the same as wgpu-native handles, set
    once the program went through the checked API (``Device.submit``; ``_replay``)."""
    raw = None


def _replay(prog) -> list:
    """``prog`` as wgpu-native handles ``[(pipeline, bind_group, x, y, z)]`` for the replay,
    with a pipeline equal to the one set before as None, and likewise a bind group (unchanged
    pipeline and bind group: the state the dispatch sees is the same, one C call less)."""
    out, last_pipe, last_bg = [], None, None
    for pipe, bg, (x, y, z) in prog:
        p, g = pipe._internal, bg._internal
        same_pipe = p == last_pipe
        out.append((None if same_pipe else p, None if same_pipe and g == last_bg else g,
                    x, y, z))
        last_pipe, last_bg = p, g
    return out


class _Ready:
    """An awaitable that is already done."""

    def __await__(self):
        return iter(())


_READY = _Ready()


# wgpu's backend names (adapter.info["backend_type"]).
BACKENDS = ("Vulkan", "Metal", "D3D12", "OpenGL", "OpenGLES")
_KIND_ORDER = ("DiscreteGPU", "IntegratedGPU", "VirtualGPU", "CPU", "Unknown")


def _runtime_dir() -> None:
    """Give the process a private, empty XDG_RUNTIME_DIR (removed at exit) when it has none or
    one that is not a directory, before wgpu looks for adapters: on a machine with no desktop
    session (a server, CI, ssh) Mesa's drivers otherwise print "error: XDG_RUNTIME_DIR is
    invalid or not set in the environment." (libwayland, probing for a display) twice per
    process, an error line for a run that works. Nothing is looked for in it."""
    if os.path.isdir(os.environ.get("XDG_RUNTIME_DIR", "")):
        return
    path = tempfile.mkdtemp(prefix="webgpu-trainer-runtime-")  # 0700, as the spec asks
    os.environ["XDG_RUNTIME_DIR"] = path
    atexit.register(shutil.rmtree, path, True)


def adapters() -> list:
    """``[(backend_type, adapter summary)]`` of every adapter wgpu can reach here."""
    _runtime_dir()
    return [(a.info["backend_type"], a.summary) for a in wgpu.gpu.enumerate_adapters_sync()]


def _adapter_of(backend: str):
    """The adapter of the wgpu backend ``backend`` (a discrete GPU first, a CPU one last)."""
    name = {b.lower(): b for b in BACKENDS}.get(backend.lower())
    if name is None:
        raise ValueError(f"unknown wgpu backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    found = [a for a in wgpu.gpu.enumerate_adapters_sync() if a.info["backend_type"] == name]
    if not found:
        there = "; ".join(f"{s} [{b}]" for b, s in adapters()) or "none"
        raise RuntimeError(f"wgpu has no {name} adapter here (adapters: {there})")
    rank = {k: i for i, k in enumerate(_KIND_ORDER)}
    return min(found, key=lambda a: rank.get(a.info["adapter_type"], len(rank)))


class Device:
    """A wgpu-py device (``device.Device``)."""

    def __init__(self, power_preference: str = "high-performance", backend: str | None = None):
        """``backend``: a wgpu backend name (``BACKENDS``, any case) to use only that API's
        adapter, e.g. "OpenGL" for llvmpipe through EGL; None lets wgpu choose (the
        environment variable WGPU_BACKEND_TYPE forces one then). RuntimeError when there is no
        adapter (for ``backend``: naming the adapters there are)."""
        _runtime_dir()
        if backend:
            adapter = _adapter_of(backend)
        else:
            adapter = wgpu.gpu.request_adapter_sync(power_preference=power_preference)
        if adapter is None:
            raise RuntimeError("wgpu found no GPU adapter "
                               "(install mesa-vulkan-drivers for a CPU one)")
        limits = adapter.limits
        stages = {"max-storage-buffers-per-shader-stage": min(
            10, limits["max-storage-buffers-per-shader-stage"])}
        try:  # the adapter's larger data buffers where offered; WebGPU's defaults otherwise
            self.device = adapter.request_device_sync(required_limits={
                "max-storage-buffer-binding-size": limits["max-storage-buffer-binding-size"],
                "max-buffer-size": limits["max-buffer-size"], **stages})
        except Exception:  # noqa: BLE001 - any refusal: the defaults (data in more chunks)
            self.device = adapter.request_device_sync(required_limits=stages)
        granted = self.device.limits
        # what GpuEngine.data_limit cuts the data by
        self.limits = {"max_storage_buffer_binding_size":
                       int(granted["max-storage-buffer-binding-size"]),
                       "max_buffer_size": int(granted["max-buffer-size"])}
        info = adapter.info
        self.info = {k: str(info.get(k, "")) for k in ("vendor", "architecture", "device",
                                                      "description", "adapter_type",
                                                      "backend_type")}
        self.is_cpu = info.get("adapter_type") == "CPU"
        self._pipelines: dict = {}
        self._layouts: dict = {}
        self.allocated = 0  # bytes of every buffer() made so far (GpuEngine.memory_bytes)
        self._step = None  # run_step's C calls (_Step), made at its first replay

    def buffer(self, nbytes: int, label: str = "", uniform: bool = False):
        """A zero-filled buffer of ``nbytes`` (rounded up to 4) for storage or uniform use."""
        size = max(16, round_up(nbytes))
        self.allocated += size
        return self.device.create_buffer(size=size, label=label,
                                         usage=_UNIFORM if uniform else _STORAGE)

    def write(self, buf, data, offset: int = 0):
        """Upload ``data`` (bytes-like, length a multiple of 4) at byte ``offset`` of ``buf``."""
        self.device.queue.write_buffer(buf, offset, memoryview(data).cast("B"))

    def _layout(self, name: str):
        if name not in self._layouts:
            entries = [{"binding": b, "visibility": wgpu.ShaderStage.COMPUTE,
                        "buffer": {"type": _LAYOUT_TYPES[kind]}}
                       for b, kind in shaders.bindings(name)]
            bgl = self.device.create_bind_group_layout(entries=entries)
            self._layouts[name] = (bgl, self.device.create_pipeline_layout(
                bind_group_layouts=[bgl]))
        return self._layouts[name]

    async def pipeline(self, name: str, entry: str, constants: dict | None = None):
        """The compute pipeline for ``entry`` of ``shaders/<name>.wgsl`` (cached by key)."""
        key = shaders.pipeline_key(name, entry, constants)
        if key not in self._pipelines:
            code = shaders.source(name)
            if shaders.PRINT_WGSL:
                print(f"// ---- {key}\n{code}")
            bgl, layout = self._layout(name)
            try:
                module = _shader_module(self.device, code, name)
                compute = {"module": module, "entry_point": entry}
                if constants:
                    compute["constants"] = {k: float(v) for k, v in constants.items()}
                pipe = self.device.create_compute_pipeline(layout=layout, compute=compute,
                                                           label=key)
            except Exception as exc:  # wgpu raises GPUValidationError and friends
                raise ShaderError(f"shader {name}.wgsl entry {entry!r}: {exc}") from exc
            self._pipelines[key] = (pipe, bgl, key)
        return self._pipelines[key]

    def bind(self, pipeline, buffers: list):
        """A bind group giving binding i of the pipeline's shader the buffer (or View) i."""
        entries = []
        for i, b in enumerate(buffers):
            if isinstance(b, View):
                res = {"buffer": b.buffer, "offset": b.offset, "size": round_up(b.nbytes)}
            else:
                res = {"buffer": b, "offset": 0, "size": b.size}
            entries.append({"binding": i, "resource": res})
        return self.device.create_bind_group(layout=pipeline[1], entries=entries)

    def program(self, dispatches: list):
        """Record ``[(pipeline, bind_group, (x, y, z))]``; replayed by ``submit``."""
        return _Program((p[0], bg, tuple(int(c) for c in counts)) for p, bg, counts in dispatches)

    def submit(self, programs: list, copies=()):
        """Encode every program (one compute pass each), then ``copies``; one queue submit.

        A program's first submit goes through wgpu-py's checked calls (an invalid dispatch
        raises); later ones call wgpu-native directly (at most 3 C calls a dispatch, no
        repeated set_pipeline / set_bind_group of the state already set: the same commands,
        already validated once). What a step's host time is made of: benchmarks/host_time.py."""
        enc = self.device.create_command_encoder()
        checked = []
        for prog in programs:
            cpass = enc.begin_compute_pass()
            raw = getattr(prog, "raw", None)
            if raw is not None:
                _replay_raw(cpass._internal, raw)
            else:
                for pipe, bg, (x, y, z) in prog:
                    cpass.set_pipeline(pipe)
                    cpass.set_bind_group(0, bg)
                    cpass.dispatch_workgroups(x, y, z)
                checked.append(prog)
            cpass.end()
        for src, so, dst, do, n in copies:
            enc.copy_buffer_to_buffer(src, so, dst, do, n)
        self.device.queue.submit([enc.finish()])
        if _RAW is not None:
            for prog in checked:
                if isinstance(prog, _Program):
                    prog.raw = _replay(prog)

    def run_step(self, program, uniform, data):
        """Write ``data`` at the start of ``uniform``, submit ``program`` alone; ``fence()``.

        Once ``program`` went through ``submit`` (checked), the step is wgpu-native's C calls
        alone (``_Step``: 8 a step + at most 3 a dispatch)."""
        raw = getattr(program, "raw", None)
        if raw is None:
            self.write(uniform, data)
            self.submit([program])
        else:
            if self._step is None:
                self._step = _Step(self.device)
            self._step(raw, uniform._internal, data)
        return _READY

    async def read(self, buf, offset: int = 0, nbytes: int | None = None) -> bytes:
        """Bytes ``[offset, offset + nbytes)`` of ``buf`` after all submitted work."""
        if nbytes is None:
            nbytes = buf.size - offset
        return bytes(self.device.queue.read_buffer(buf, offset, nbytes))

    async def read_spans(self, spans: list) -> list:
        """``[bytes]`` of each ``(buf, offset, nbytes)``: one staging buffer, one submit of
        the copies, one map (``device.Device.read_spans``)."""
        copies, total = span_copies(spans)
        staging = self.device.create_buffer(
            size=total, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
        try:
            enc = self.device.create_command_encoder()
            for buf, offset, at, size in copies:
                enc.copy_buffer_to_buffer(buf, offset, staging, at, size)
            self.device.queue.submit([enc.finish()])
            staging.map_sync(wgpu.MapMode.READ)
            data = bytes(staging.read_mapped(0, staging.size))
        finally:
            staging.destroy()
        return split_spans(data, spans)

    async def sync(self):
        """Wait until the queue is idle."""
        self.device.queue.read_buffer(self._fence(), 0, 4)

    def fence(self):
        """An awaitable for the work submitted so far. Natively nothing waits on it: the
        metrics readback every few steps bounds how far the CPU runs ahead."""
        return _READY

    def _fence(self):
        if not hasattr(self, "_fence_buf"):
            self._fence_buf = self.buffer(16, "fence")
        return self._fence_buf
