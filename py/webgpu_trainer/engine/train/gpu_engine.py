"""The training engine on a WebGPU device (browser or wgpu-py): ``train.Trainer``'s steps as
prebuilt GPU programs (standard library only).

One training step is one queue submit of a program recorded once (gather batch -> forward ->
loss -> backward -> guard -> optimizer update) after a 32-byte write of the step's uniforms, so
per-step Python work is O(1) bridge calls. Metrics (loss, accuracy) accumulate in a ring on the
GPU (``plan.METRICS_RING`` slots) and the guard's flags in a small buffer; ``metrics`` reads
both back, which the trainer does every few steps (never inside a step). At most
``GpuEngine.IN_FLIGHT`` steps are in flight: ``step`` returns once the steps before the last
``IN_FLIGHT - 1`` it submitted have finished, so a Stop takes effect within a step or two and
the browser's event loop delivers messages meanwhile.

The interface every engine implements is described in ``train.py``.
"""

import asyncio
import math
from collections import deque
import struct
import time
from array import array
from types import SimpleNamespace

from . import data_tokens, optim
from ..backends.base import groups_1d, round_up
from .data import chunks, cut_bytes
from .guard import Guard
from ..plan import METRICS_RING, Plan, pack_step
from .probe import LOGP, params_in_order

PROBE_BATCH = 1  # images per forward of the probe's plan (the live views ask for one)

EVAL_IMAGES = 256  # images per evaluation chunk (one readback, one "evaluating" report each)


class GpuEngine:
    """``train.Trainer``'s engine on the WebGPU device ``dev`` (``backends``)."""

    optim = optim  # the optimizers the trainer makes for this engine (torch.optim semantics)

    # Steps submitted and not yet finished when ``step`` returns, plus one: 2 waits for step
    # t - 1 after submitting t (the GPU always has the next step queued while the host
    # prepares another). At least 1 (1: each step waits for itself).
    IN_FLIGHT = 2

    def __init__(self, dev, chunk_bytes: int | None = None):
        """``chunk_bytes``: the most bytes of one data buffer (None: the device's binding
        limit; tests lower it so that a small dataset spans several buffers)."""
        self.dev, self.chunk_bytes = dev, chunk_bytes
        self._in_flight = deque()  # the fences of the submitted steps, oldest first
        self._probe = None  # (plan, program, images buffer), made by the first probe
        self._norms = None  # (program, output buffer) of norms, made by the first call
        self._probe_lock = asyncio.Lock()  # one probe / norms readback at a time
        self.augment = None  # (pad, flip) of set_augment, or None

    async def build(self, graph, batch: int, loss, trainable, seed: int):
        """Compile the training step of ``graph`` (``Graph``) at ``batch`` (``Plan``) and the
        guard; ``loss`` a loss spec (``ops/losses.py``), ``trainable`` None or a set of names,
        ``seed`` the run's (dropout masks)."""
        self.seed = int(seed) & 0xFFFFFFFF
        self.graph, self.loss_request = graph, loss
        self._allocated0 = self.dev.allocated
        self.plan = plan = await Plan.build(self.dev, graph, batch, loss=loss,
                                            trainable=trainable)
        self.batch, self.wbytes, self.loss_spec = batch, plan.wbytes, plan.loss_spec
        self.classes = plan.acts[plan.logp].shape[1]
        self.guard = await Guard.build(plan)

    @property
    def memory_bytes(self) -> int:
        """Bytes of the GPU buffers this run made (weights, gradients, activations, optimizer
        state, the uploaded data, eval outputs): the device's ``allocated`` since ``build``."""
        return self.dev.allocated - self._allocated0

    @property
    def data_limit(self) -> int | None:
        """The most bytes of one data buffer: the device's ``maxStorageBufferBindingSize`` and
        ``maxBufferSize``, and ``chunk_bytes``; a split larger than that is uploaded as several
        buffers (``data.chunks``)."""
        lim = getattr(self.dev, "limits", None) or {}
        sizes = [v for v in (lim.get("max_storage_buffer_binding_size"),
                             lim.get("max_buffer_size"), self.chunk_bytes) if v]
        return min(sizes) if sizes else None

    def write_weights(self, blob: bytes) -> None:
        """Replace the flat weight buffer (``wbytes``: the bundle's blob padded); ValueError
        when the size differs."""
        if len(blob) != self.wbytes:
            raise ValueError(f"weights of {len(blob)} bytes do not fit this model's layout "
                             f"({self.wbytes} bytes)")
        self.dev.write(self.plan.P, blob)

    async def read_weights(self, nbytes: int | None = None) -> bytes:
        """The first ``nbytes`` (default all ``wbytes``) of the flat weight buffer."""
        return bytes(await self.dev.read(self.plan.P, 0, self.wbytes if nbytes is None
                                         else nbytes))

    async def init_weights(self, seed: int) -> None:
        await self.plan.init_weights(seed)

    async def attach(self, opt) -> None:
        """Attach the optimizer ``opt`` (of ``self.optim``): its state buffers and update."""
        self.opt = opt
        await opt.attach(self.plan, self.guard)

    async def load_data(self, train, evals: dict, table) -> None:
        """Upload the training split and each split of ``evals`` (name -> ``train.Split``,
        e.g. "validation" and "test") and ``table`` (``DataSpec.table``: C*256 floats, value
        of channel c -> model input, rounded to float32; None for float32 features, copied);
        record the train program and one eval program per split (the same gather, eval-mode
        forward and head over its images in batches of ``batch``)."""
        dev, plan, batch = self.dev, self.plan, self.batch
        self._spec = train.spec
        lut = array("f", table or [0.0])
        self._lut = dev.buffer(4 * len(lut), "normalize.lut")
        dev.write(self._lut, lut.tobytes())
        self.order = dev.buffer(4 * train.count, "train.order")
        scratch = None if self.augment is None else \
            dev.buffer(4 * plan.input.numel, "augment.scratch")
        self.gather_train, _ = await self._gather(train, self.order, out=scratch)
        if scratch is not None:
            self.gather_train += await self._augment(scratch)
        # images per eval_outputs call: ~EVAL_IMAGES, whole batches
        self.eval_chunk = batch * max(1, EVAL_IMAGES // batch)
        self.eval_programs = {}
        for name, split in evals.items():
            padded = max(1, math.ceil(split.count / batch)) * batch
            order = dev.buffer(4 * padded, f"{name}.order")
            dev.write(order, array("I", [i if i < split.count else 0
                                         for i in range(padded)]).tobytes())
            gather, _ = await self._gather(split, order)
            self.eval_programs[name] = dev.program(gather + plan.fwd_eval + plan.head)
        rows = 4 * self.eval_chunk * self.classes
        self.logits = dev.buffer(rows, "eval.logits")
        # What the loss reads when that is not the log-probabilities (nll on a raw output, mse,
        # bce_with_logits): copied too, for the validation loss.
        self.loss_rows = None if plan.loss_input == plan.logp else \
            dev.buffer(rows, "eval.loss_rows")
        train = (self.gather_train + plan.fwd_train + plan.loss + plan.bwd
                 + self.guard.dispatches + self.opt.dispatches)
        self.train_program = dev.program(train)
        self.train_dispatches = len(train)

    def set_augment(self, augment) -> None:
        """Augment the training batches (``(pad, flip)`` or None); before ``load_data``."""
        self.augment = augment

    async def _augment(self, scratch):
        """The augment dispatch (shaders/augment.wgsl) from the gathered batch ``scratch`` into
        the model input; the padding of channel c is the table's entry of its pixel value 0."""
        plan, b = self.plan, self.plan.builder
        n, c, h, w = plan.input.shape
        b.current = []
        await b.kernel("augment", "crop_flip", groups_1d(plan.input.numel),
                       params=dict(batch=n, channels=c, height=h, width=w,
                                   pad=self.augment[0], flip=int(self.augment[1])),
                       st=plan.step, x=scratch, y=plan.input, lut=self._lut)
        return b.current

    async def _gather(self, split, order, plan=None, out=None):
        """The gather dispatches of ``split``'s samples in ``order`` into ``plan``'s input
        (default the training plan; ``out``: that buffer instead), uint8 images through the
        normalisation table, float32 features copied: the split uploaded as chunks of whole
        samples within ``data_limit`` (``data.chunks``), one buffer and one dispatch each;
        returns ``(dispatches, images buffers)``."""
        dev, plan, spec = self.dev, plan or self.plan, split.spec
        size = spec.sample_bytes
        hw = math.prod(spec.sample_shape[-2:]) if spec.kind == "image" else 1
        b = plan.builder
        b.current = []
        buffers = []
        data, tags = (split.images, split.labels) if hasattr(split.images, "byteLength") \
            else (memoryview(split.images).cast("B"), memoryview(split.labels).cast("B"))
        for lo, hi in chunks(split.count, size, self.data_limit):
            nbytes, n = (hi - lo) * size, hi - lo
            images = dev.buffer(round_up(nbytes), f"images[{lo}:{hi}]")
            labels = dev.buffer(round_up(n), f"labels[{lo}:{hi}]")
            dev.write(images, _padded(cut_bytes(data, lo * size, hi * size), nbytes))
            dev.write(labels, _padded(cut_bytes(tags, lo, hi), n))
            buffers.append(images)
            if spec.kind == "tokens":
                await data_tokens.gather(b, plan, spec, n, images, labels, order,
                                         plan.input if out is None else out, lo, split.count)
                continue
            await b.kernel("data", "gather" if spec.kind == "image" else "gather_table",
                           groups_1d(plan.batch * spec.values),
                           params=dict(batch=plan.batch, values=spec.values, count=n, hw=hw,
                                       first=lo, total=split.count),
                           st=plan.step, images=images, labels=labels, order=order,
                           x=plan.input if out is None else out,
                           y=plan.labels, lut=self._lut)
        return b.current, buffers

    def set_order(self, perm) -> None:
        """This epoch's training order (a permutation of the training images)."""
        self.dev.write(self.order, array("I", perm).tobytes())

    def _write_step(self, t: int, offset: int, lr: float, scalars=(0.0, 0.0, 0.0)):
        self.dev.write(self.plan.step, pack_step(t, offset, self.seed, lr, scalars))

    async def step(self, t: int, offset: int, lr: float) -> bool:
        """Submit optimizer step ``t`` on the batch at ``offset`` of the order, at learning rate
        ``lr``; returns once step ``t - IN_FLIGHT + 1`` has finished (with the default 2, step
        ``t - 1``). Always False: the GPU's metrics are known only at the next ``metrics``."""
        fences = self._in_flight
        fences.append(self.dev.run_step(self.train_program, self.plan.step, pack_step(
            t, offset, self.seed, lr, self.opt.scalars(t, lr))))
        while len(fences) >= max(1, self.IN_FLIGHT):
            await fences.popleft()
        return False

    def forget_fences(self):
        """Drop the fences of submitted steps (after a queue wait, or a read that waited for
        every submitted step): the next ``step`` then waits only for what it submits after."""
        self._in_flight.clear()

    async def metrics(self, first: int, last: int):
        """``([(loss, accuracy)] of steps first..last, guard)``: guard is None while every
        gradient was finite, else ``(step, tensor, node)`` of the first non-finite one. One
        readback of both (``Device.read_spans``: one wait for the GPU, not two)."""
        flags = self.guard.span()
        raws = await self.dev.read_spans([(self.plan.metrics, 0, 8 * METRICS_RING)]
                                         + ([flags] if flags else []))
        vals = struct.unpack(f"<{2 * METRICS_RING}f", raws[0])
        slots = [(t - 1) % METRICS_RING for t in range(first, last + 1)]
        return ([(vals[2 * s], vals[2 * s + 1]) for s in slots],
                self.guard.bad_of(raws[1]) if flags else None)

    async def eval_outputs(self, what: str, lo: int, hi: int):
        """Eval-mode forward over images lo..hi-1 of the split ``what`` (``load_data``'s
        ``evals``; ``lo`` a multiple of ``batch``, at most ``eval_chunk`` images): ``(log-
        probabilities, loss rows)``, float32 bytes [hi - lo, classes] each (the loss rows are
        what the loss reads: the log-probabilities for cross_entropy, else the raw output).
        One submit per batch, one readback per call."""
        dev, plan, batch, c = self.dev, self.plan, self.batch, self.classes
        out, src = plan.acts[plan.logp], plan.acts[plan.loss_input]
        size = batch * c * 4
        for k, start in enumerate(range(lo, hi, batch)):
            self._write_step(0, start, 0.0)
            copies = [(out.buf, 0, self.logits, k * size, size)]
            if self.loss_rows is not None:
                copies.append((src.buf, src.offset, self.loss_rows, k * size, size))
            dev.submit([self.eval_programs[what]], copies=copies)
        self.forget_fences()
        nbytes = (hi - lo) * c * 4
        logp = await dev.read(self.logits, 0, nbytes)
        if self.loss_rows is None:
            return logp, logp
        return logp, await dev.read(self.loss_rows, 0, nbytes)

    async def probe(self, images, outputs) -> dict:
        """Eval-mode forward of ``images`` (bytes-like [n, values] of the dataset's dtype, n >=
        1: uint8 pixels or float32 features) on the current weights; returns ``{name:
        float32 bytes [n, *shape[1:]]}`` for each name of ``outputs``: activations of the
        graph, or ``probe.LOGP`` (the log-probabilities, as ``eval_outputs``). The images go
        through the training's gather and table into a plan of batch ``PROBE_BATCH`` that
        shares the weight buffer and has its own step uniform and activations: running
        statistics, metrics, gradients and the training step are untouched, so it may run
        between training steps (its own submits, ordered after the steps already submitted).
        Needs ``load_data`` first (RuntimeError). ValueError: a size that is not a whole
        number of samples, an unknown name, or an activation a ReLU overwrites in place (the
        message names what to ask for)."""
        if not hasattr(self, "_lut"):
            raise RuntimeError("probe needs the data loaded (load_data) first")
        spec = self._spec
        size = spec.sample_bytes
        data = bytes(images)
        if not data or len(data) % size:
            raise ValueError(f"probe: {len(data)} bytes is not a whole number of "
                             f"{size}-byte samples ({spec.describe()})")
        n = len(data) // size
        async with self._probe_lock:  # one probe's copies and reads at a time
            if self._probe is None:
                self._probe = await self._probe_plan(spec)
            plan, program, upload = self._probe
            acts = [(name, self._probe_act(plan, name)) for name in outputs]
            pb = plan.batch
            sizes = [n * (t.numel // pb) * 4 for _, t in acts]  # bytes of each output
            starts = [sum(sizes[:i]) for i in range(len(sizes))]
            out = self.dev.buffer(max(sum(sizes), 4), "probe.out")  # one readback for all
            for lo in range(0, n, pb):
                k = min(pb, n - lo)
                chunk = data[lo * size:(lo + k) * size]
                self.dev.write(upload, chunk + bytes(round_up(pb * size) - len(chunk)))
                self.dev.write(plan.step, pack_step(0, 0, self.seed, 0.0))
                copies = []
                for (_name, t), start in zip(acts, starts):
                    per = t.numel // pb * 4
                    copies.append((t.buf, t.offset, out, start + lo * per, k * per))
                self.dev.submit([program], copies=copies)
            raw = await self.dev.read(out, 0, max(sum(sizes), 4))
            return {name: raw[start:start + size]
                    for (name, _), start, size in zip(acts, starts, sizes)}

    @staticmethod
    def probe_keep(graph) -> list:
        """The activations a probe's plan keeps (``keep_acts``): every Softmax output, so the
        attention maps a probe reads are not folded into a FusedAttention
        (rewrites/attention.py), whose eval forward stores no P; and every output of an LSTM
        / GRU, which otherwise leaves what the model does not read unwritten
        (``Builder.unread``: Y_h, Y_c)."""
        return [o for n in graph.nodes for k, o in enumerate(n["outputs"]) if o and (
            n["op_type"] in ("LSTM", "GRU") or (k == 0 and n["op_type"] == "Softmax"))]

    async def _probe_plan(self, spec):
        """The probe's eval-only plan over the training plan's weights (keeping
        ``probe_keep``), its program (gather -> eval forward -> head) and its image upload
        buffer."""
        keep = self.probe_keep(self.graph)
        plan = await Plan.build(self.dev, self.graph, PROBE_BATCH, trainable=set(),
                                loss=self.loss_request, weights=self.plan.P, keep_acts=keep)
        order = self.dev.buffer(4 * PROBE_BATCH, "probe.order")
        self.dev.write(order, array("I", range(PROBE_BATCH)).tobytes())
        split = SimpleNamespace(images=bytes(round_up(PROBE_BATCH * spec.sample_bytes)),
                                labels=bytes(round_up(PROBE_BATCH)), count=PROBE_BATCH,
                                spec=spec)
        gather, (upload,) = await self._gather(split, order, plan)
        return plan, self.dev.program(gather + plan.fwd_eval + plan.head), upload

    @staticmethod
    def _probe_act(plan, name):
        """``plan``'s activation ``name`` (``LOGP``: the log-probabilities); ValueError when
        unknown or overwritten in place by a ReLU."""
        if name == LOGP:
            return plan.acts[plan.logp]
        t = plan.acts.get(name)
        if t is None:
            raise ValueError(f"probe: no activation named {name!r} in the model")
        made = plan.graph.producer.get(name)
        if made is not None and made["op_type"] == "FusedAttention" and \
                made["outputs"][0] != name:  # P: not stored by an eval forward
            raise ValueError(f"probe: {name} is inside the fused attention {made['name']}")
        for node in plan.graph.consumers.get(name, []):
            if node["op_type"] == "Relu" and plan.acts[node["outputs"][0]].buf is t.buf:
                raise ValueError(f"probe: {name} is overwritten in place by the ReLU "
                                 f"{node['name']}; ask for its output {node['outputs'][0]}")
        return t

    async def norms(self) -> list:
        """``[{"name", "layer", "numel", "weight", "grad"}]``: the L2 norm of every parameter's
        weights and last gradient (None: frozen) in graph order, after the submitted steps:
        one dispatch of shaders/norms.wgsl (sums of squares per tensor in f32) and an 8-byte
        readback per tensor."""
        params = params_in_order(self.graph)
        async with self._probe_lock:
            if self._norms is None:
                table = [v for name, _ in params for v in
                         (self.graph.tensors[name]["offset"] // 4,
                          self.graph.tensors[name]["nbytes"] // 4)]
                tbuf = self.dev.buffer(4 * max(len(table), 4), "norms.table")
                if table:
                    self.dev.write(tbuf, array("I", table).tobytes())
                out = self.dev.buffer(8 * max(len(params), 1), "norms.out")
                b = self.plan.builder
                b.current = []
                await b.kernel("norms", "sumsq", (max(len(params), 1), 1, 1),
                               params={"tensors": len(params)}, P=self.plan.P, G=self.plan.G,
                               table=tbuf, out=out)
                self._norms = (self.dev.program(b.current), out)
            program, out = self._norms
            self.dev.submit([program])
            raw = await self.dev.read(out, 0, 8 * max(len(params), 1))
        sums = memoryview(raw).cast("f")
        return [{"name": name, "layer": layer, "numel": self.graph.tensors[name]["nbytes"] // 4,
                 "weight": math.sqrt(sums[2 * k]),
                 "grad": math.sqrt(sums[2 * k + 1]) if name in self.plan.trainable else None}
                for k, (name, layer) in enumerate(params)]

    async def profile(self, budget_ms: float = 100.0, most: int = 32) -> list:
        """Time every dispatch of one training step on its own.

        Each dispatch runs once alone (submit, wait: ``first`` ms of wall time; where that
        leaves n below 2, once more and ``first`` is the shorter of the two). Then, with
        n = ``budget_ms`` / (3 ``first``) copies, at most ``most``: n copies in one submit and
        2n in another, three times, and its ms is the median difference of the two wall times
        / n, so the submit, the wait and its polling cancel out (they were ~0.05-1 ms a
        dispatch, more than most kernels on a real GPU) and one stalled submit does not count;
        where noise makes the difference negative, the n copies' shortest wall time / n. Where
        n < 2 (a slow adapter: SwiftShader) its ms is ``first``. It runs the backward and
        optimizer dispatches up to ~3 * ``most`` times each: the weights and the optimizer's
        state are not those of a training run afterwards (callers profile a throwaway run).
        Dispatches that work in place read their own output when repeated (LSTM / GRU gates
        and their gradients, a tiled GEMM's split-K part 0 in its output: ``Builder.
        RNN_DG_IN_PLACE``, ``RNN_XP_IN_PLACE``, ``GEMM_PART0_IN_OUT``), so their values drift;
        the work, and so the time, is the same.
        Returns ``[(phase, "shader:entry:", (x, y, z), ms)]``."""
        dev, plan = self.dev, self.plan
        self._write_step(1, 0, self.opt.lr, self.opt.scalars(1, self.opt.lr))

        async def wall(prog) -> float:
            start = time.perf_counter()
            dev.submit([prog])
            await dev.sync()
            return (time.perf_counter() - start) * 1000

        rows = []
        for phase, dispatches in (("data", self.gather_train), ("forward", plan.fwd_train),
                                  ("loss", plan.loss), ("backward", plan.bwd),
                                  ("optimizer", self.opt.dispatches)):
            for d in dispatches:
                one = dev.program([d])
                ms = await wall(one)
                n = min(most, int(budget_ms / (3 * max(ms, 1e-3))))
                if n < 2:  # a slow adapter, or a stalled submit: the shorter of two lone runs
                    ms = min(ms, await wall(one))
                    n = min(most, int(budget_ms / (3 * max(ms, 1e-3))))
                if n >= 2:
                    single, double = dev.program([d] * n), dev.program([d] * (2 * n))
                    onces, diffs = [], []
                    for _ in range(3):  # the median difference: one stalled submit is noise
                        onces.append(await wall(single))
                        diffs.append(await wall(double) - onces[-1])
                    diff = sorted(diffs)[1]
                    ms = (diff if diff > 0 else min(onces)) / n
                rows.append((phase, d[0][2], list(d[2]), ms))
        return rows


def _padded(data, nbytes: int):
    """``data`` padded with zeros to a multiple of 4 bytes (JS buffers pass through)."""
    if hasattr(data, "byteLength"):
        return data
    pad = round_up(nbytes) - len(data)
    return bytes(data) + bytes(pad) if pad else data
