"""Browser backend: the page's ``navigator.gpu`` through Pyodide's JS bridge (works in a Worker).

Per training step Python makes O(1) bridge calls: ``submit`` hands prebuilt JS arrays of
pipelines, bind groups and workgroup counts to one small JS function that records them
(skipping a setPipeline / setBindGroup of the state already set, as the native replay);
``run_step`` (a training step) is two: the step uniform's bytes, then one JS call that
writes them, replays the program, submits and returns the fence.
"""

import js
from pyodide.code import run_js
from pyodide.ffi import to_js

from ..errors import UserError
from . import shaders
from .base import ShaderError, View, round_up, span_copies, split_spans

_REPLAY, _STEP = run_js("""
const replay = (device, programs, copies) => {
  const enc = device.createCommandEncoder();
  for (const [pipes, groups, counts] of programs) {
    const pass = enc.beginComputePass();
    let pipe = null, group = null;
    for (let i = 0; i < pipes.length; i++) {
      if (pipes[i] !== pipe) {
        pipe = pipes[i];
        pass.setPipeline(pipe);
        group = null;
      }
      if (groups[i] !== group) {
        group = groups[i];
        pass.setBindGroup(0, group);
      }
      pass.dispatchWorkgroups(counts[3 * i], counts[3 * i + 1], counts[3 * i + 2]);
    }
    pass.end();
  }
  for (const [src, so, dst, dO, n] of copies) enc.copyBufferToBuffer(src, so, dst, dO, n);
  device.queue.submit([enc.finish()]);
};
const step = (device, program, uniform, data) => {
  device.queue.writeBuffer(uniform, 0, data);
  replay(device, [program], []);
  return device.queue.onSubmittedWorkDone();
};
[replay, step]
""")


class NoWebGPU(UserError, RuntimeError):
    """This browser exposes no WebGPU adapter (``navigator.gpu`` missing or no adapter)."""


def _absent(value) -> bool:
    """True for JS null/undefined (Pyodide maps null to ``jsnull``, undefined to None)."""
    return value is None or type(value).__name__ == "JsNull"


def _js(obj):
    return to_js(obj, dict_converter=js.Object.fromEntries)


class Device:
    """A WebGPU ``GPUDevice`` as a ``device.Device``.

    Create with ``await Device.create()``; raises ``NoWebGPU`` where WebGPU is unavailable.
    """

    is_cpu = False

    @classmethod
    async def create(cls, power_preference: str = "high-performance"):
        gpu = getattr(js.navigator, "gpu", None)
        if _absent(gpu) and not getattr(js, "isSecureContext", True):
            raise NoWebGPU("this page is not a secure context (plain http on an address other "
                           "than localhost), and browsers offer WebGPU only to secure ones: "
                           "open it as http://localhost:PORT or serve it over https")
        if _absent(gpu):
            raise NoWebGPU("navigator.gpu is undefined: this browser has no WebGPU")
        adapter = await gpu.requestAdapter(_js({"powerPreference": power_preference}))
        if _absent(adapter):
            raise NoWebGPU("navigator.gpu.requestAdapter() returned null: no usable GPU adapter")
        lim = adapter.limits
        stages = {"maxStorageBuffersPerShaderStage": min(10, lim.maxStorageBuffersPerShaderStage)}
        try:  # the adapter's larger data buffers where offered; WebGPU's defaults otherwise
            device = await adapter.requestDevice(_js({"requiredLimits": {
                "maxStorageBufferBindingSize": lim.maxStorageBufferBindingSize,
                "maxBufferSize": lim.maxBufferSize, **stages}}))
        except Exception:  # noqa: BLE001 - any refusal: the defaults (data in more chunks)
            device = await adapter.requestDevice(_js({"requiredLimits": stages}))
        self = cls()
        self.device = device
        # what GpuEngine.data_limit cuts the data by
        self.limits = {"max_storage_buffer_binding_size":
                       int(device.limits.maxStorageBufferBindingSize),
                       "max_buffer_size": int(device.limits.maxBufferSize)}
        info = adapter.info
        self.info = {k: str(getattr(info, k, "") or "") for k in
                     ("vendor", "architecture", "device", "description")}
        self.is_cpu = "swiftshader" in (self.info["architecture"] + self.info["description"]
                                        ).lower()
        self._pipelines, self._layouts, self._modules = {}, {}, {}
        self._errors = []
        self._step_bytes = {}  # run_step's Uint8Array of the step uniform, by its length
        self.allocated = 0  # bytes of every buffer() made so far (GpuEngine.memory_bytes)
        device.onuncapturederror = self._on_error
        return self

    def _on_error(self, event):
        self._errors.append(str(event.error.message))

    def check_errors(self):
        """RuntimeError naming the uncaptured errors (``onuncapturederror``) reported since
        ``clear_errors``. Every submit calls it, so every submit after one fails (the run in
        progress, and a live view's probe between its steps); the worker also calls it after
        a run's last read, so an error of its last submits fails the run instead of being
        cleared as the run ends."""
        if self._errors:
            raise RuntimeError("WebGPU error: " + "; ".join(self._errors[:3]))

    def clear_errors(self):
        """Forget the uncaptured errors reported so far: the worker calls it as the self-check
        and each run start and as each run ends, so one error fails the job it came in and not
        every later one on this device (it lives as long as the worker)."""
        self._errors = []

    def provoke_validation_error(self):
        """Test hook (the worker's ``debug_gpu_error``): ask for a buffer WebGPU must refuse
        (MAP_READ beside STORAGE usage), so the device reports an uncaptured validation error
        as a driver or engine bug would."""
        u = js.GPUBufferUsage
        self.device.createBuffer(_js({"size": 16, "usage": u.MAP_READ | u.STORAGE,
                                      "label": "debug_gpu_error"}))

    def buffer(self, nbytes: int, label: str = "", uniform: bool = False):
        """A zero-filled buffer of ``nbytes`` (rounded up to 4) for storage or uniform use."""
        u = js.GPUBufferUsage
        usage = (u.UNIFORM | u.COPY_DST) if uniform else (u.STORAGE | u.COPY_SRC | u.COPY_DST)
        size = max(16, round_up(nbytes))
        self.allocated += size
        return self.device.createBuffer(_js({"size": size, "usage": usage, "label": label}))

    def write(self, buf, data, offset: int = 0):
        """Upload ``data``: a Python bytes-like, or a JS ArrayBuffer/TypedArray passed through.

        writeBuffer takes whole 4-byte words: a JS array of another length (a split of 999
        labels) goes through a zero-padded copy."""
        if hasattr(data, "byteLength"):
            n = int(data.byteLength)
            if n % 4:
                src = (js.Uint8Array.new(data.buffer, data.byteOffset, n)
                       if hasattr(data, "buffer") else js.Uint8Array.new(data))
                padded = js.Uint8Array.new(n + (-n) % 4)
                padded.set(src)
                data = padded
            self.device.queue.writeBuffer(buf, offset, data)
            return
        mv = memoryview(data).cast("B")
        arr = js.Uint8Array.new(len(mv))
        arr.assign(mv)
        self.device.queue.writeBuffer(buf, offset, arr)

    def _layout(self, name: str):
        if name not in self._layouts:
            entries = [{"binding": b, "visibility": js.GPUShaderStage.COMPUTE,
                        "buffer": {"type": kind}} for b, kind in shaders.bindings(name)]
            bgl = self.device.createBindGroupLayout(_js({"entries": entries}))
            layout = self.device.createPipelineLayout(_js({"bindGroupLayouts": [bgl]}))
            self._layouts[name] = (bgl, layout)
        return self._layouts[name]

    async def pipeline(self, name: str, entry: str, constants: dict | None = None):
        """The compute pipeline for ``entry`` of ``shaders/<name>.wgsl`` (cached by key).

        Raises ShaderError with the compiler's messages when WGSL or the pipeline is invalid.
        """
        key = shaders.pipeline_key(name, entry, constants)
        if key in self._pipelines:
            return self._pipelines[key]
        bgl, layout = self._layout(name)
        self.device.pushErrorScope("validation")
        if name not in self._modules:
            code = shaders.source(name)
            if shaders.PRINT_WGSL:
                print(f"// ---- {key}\n{code}")
            self._modules[name] = self.device.createShaderModule(_js({"code": code,
                                                                      "label": name}))
        module = self._modules[name]
        compute = {"module": module, "entryPoint": entry}
        if constants:
            compute["constants"] = {k: float(v) for k, v in constants.items()}
        pipe = self.device.createComputePipeline(_js({"layout": layout, "compute": compute,
                                                      "label": key}))
        err = await self.device.popErrorScope()
        if not _absent(err):
            info = await module.getCompilationInfo()
            msgs = [f"{m.lineNum}:{m.linePos} {m.message}" for m in info.messages]
            raise ShaderError(f"shader {name}.wgsl entry {entry!r}: {err.message} {msgs}")
        self._pipelines[key] = (pipe, bgl, key)
        return self._pipelines[key]

    def bind(self, pipeline, buffers: list):
        """A bind group giving binding i of the pipeline's shader the buffer (or View) i."""
        entries = []
        for i, b in enumerate(buffers):
            if isinstance(b, View):
                res = {"buffer": b.buffer, "offset": b.offset, "size": round_up(b.nbytes)}
            else:
                res = {"buffer": b}
            entries.append({"binding": i, "resource": res})
        return self.device.createBindGroup(_js({"layout": pipeline[1], "entries": entries}))

    def program(self, dispatches: list):
        """Record ``[(pipeline, bind_group, (x, y, z))]`` as JS arrays for ``submit``."""
        counts = js.Uint32Array.new(3 * len(dispatches))
        flat = [int(c) for _, _, xyz in dispatches for c in xyz]
        for i, c in enumerate(flat):
            counts[i] = c
        return js.Array.of(to_js([p[0] for p, _, _ in dispatches]),
                           to_js([bg for _, bg, _ in dispatches]), counts)

    def submit(self, programs: list, copies=()):
        """Encode every program (one compute pass each), then ``copies``; one queue submit."""
        _REPLAY(self.device, to_js(programs), to_js([list(c) for c in copies]))
        self.check_errors()

    def run_step(self, program, uniform, data):
        """Write ``data`` at the start of ``uniform``, submit ``program`` alone; ``fence()``.

        Two bridge calls a step: the bytes into a Uint8Array kept for it, then one JS call
        (``_STEP``: writeBuffer, the replay, onSubmittedWorkDone)."""
        arr = self._step_bytes.get(len(data))
        if arr is None:
            arr = self._step_bytes[len(data)] = js.Uint8Array.new(len(data))
        arr.assign(data)
        fence = _STEP(self.device, program, uniform, arr)
        self.check_errors()
        return fence

    async def read(self, buf, offset: int = 0, nbytes: int | None = None) -> bytes:
        """Bytes ``[offset, offset + nbytes)`` of ``buf`` after all submitted work (async map)."""
        if nbytes is None:
            nbytes = int(buf.size) - offset
        return (await self.read_spans([(buf, offset, nbytes)]))[0]

    async def read_spans(self, spans: list) -> list:
        """``[bytes]`` of each ``(buf, offset, nbytes)``: one staging buffer, one submit of
        the copies, one ``mapAsync`` (``device.Device.read_spans``)."""
        copies, total = span_copies(spans)
        u = js.GPUBufferUsage
        staging = self.device.createBuffer(_js({"size": total,
                                                "usage": u.MAP_READ | u.COPY_DST}))
        try:
            enc = self.device.createCommandEncoder()
            for buf, offset, at, size in copies:
                enc.copyBufferToBuffer(buf, offset, staging, at, size)
            self.device.queue.submit(to_js([enc.finish()]))
            await staging.mapAsync(js.GPUMapMode.READ)
            data = js.Uint8Array.new(staging.getMappedRange()).to_bytes()
            staging.unmap()
        finally:
            staging.destroy()
        return split_spans(data, spans)

    async def sync(self):
        """Wait until the queue has finished all submitted work."""
        await self.device.queue.onSubmittedWorkDone()

    def fence(self):
        """An awaitable that resolves when the work submitted so far has finished."""
        return self.device.queue.onSubmittedWorkDone()
