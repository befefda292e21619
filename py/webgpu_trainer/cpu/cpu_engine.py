"""The training engine on the numpy engine in float32 (``webgpu-trainer train --device cpu``):
``train.Trainer``'s steps without a GPU. CPython only (numpy).

The interface is ``engine/train/engine.py``'s ``Engine`` (as ``GpuEngine``), computed with
``cpu.engine.Engine`` and the optimizers of ``cpu.optim`` (torch.optim semantics, the GPU's
state format) over a flat float32 weight vector ``P`` laid out as the GPU plan's weight buffer
(the bundle's blob, padded as ``Plan`` pads it), so checkpoints move between the engines. What
the GPU draws, this draws bit for bit: the init (``engine/init.py`` rules, Philox) and the
dropout masks (Philox keyed by seed and step, cpu/philox.py); images are normalised through the
same float32 table (per channel), float32 features copied, and augmented with the same crops
and flips (cpu/augment.py). Float32 arithmetic in another order makes the losses of the two
engines differ in the last digits.

A step runs to completion inside ``step``; a non-finite loss or gradient is caught there,
before the update (the weights stay those of the last good step), and ``step`` returns True so
the trainer reads the metrics at once and stops with the guard's message.
"""

import asyncio

import numpy as np

from ..engine import init
from ..engine.backends.base import round_up
from ..engine.train.guard import watched
from ..engine.ops.losses import final_op, resolve
from ..engine.train.probe import LOGP, params_in_order
from . import heap, optim, philox
from .augment import apply as augment_batch
from .engine import Engine
from .softmax import log_softmax

EVAL_CHUNK = 256  # images per eval-mode forward (memory; BatchNorm in eval mode is per image)


class CpuEngine:
    """``train.Trainer``'s engine on numpy (float32)."""

    optim = optim  # the numpy twins of the GPU optimizers
    dev = None     # what ``opt.state_bytes(dev)`` is given (the numpy optimizers ignore it)
    memory_bytes = None  # no GPU buffers
    data_limit = None  # no limit on one data buffer (numpy arrays in host memory)
    augment = None  # (pad, flip) of set_augment, or None

    async def build(self, graph, batch: int, loss, trainable, seed: int):
        """The flat weight vector ``P`` (and gradients ``G``) over ``graph`` (``Graph``), the
        numpy engine computing on views of it, and the guard's tensors. Raises
        NotImplementedError for an op the numpy engine lacks. Freed arrays stay in the heap for
        the next step (cpu/heap.py)."""
        heap.retain_freed()
        self.graph, self.batch, self.seed = graph, batch, int(seed)
        self.wbytes = round_up(max(graph.weight_nbytes(), 16))
        self.P = np.zeros(self.wbytes // 4, np.float32)
        self.G = np.zeros_like(self.P)
        self.views = {name: self.P[t["offset"] // 4:(t["offset"] + t["nbytes"]) // 4]
                      .reshape(t["shape"]) for name, t in graph.tensors.items()}
        self.engine = Engine(graph.desc, self.views, np.float32, trainable=trainable)
        for name, view in self.views.items():  # the engine computes on P itself
            assert self.engine.params[name] is view
        self.in_shape = [int(d) for d in graph.input["shape"][1:]]
        self.classes = int(graph.shapes(2)[graph.output][1])
        self.loss_spec = resolve(loss, final_op(graph.desc), self.classes)
        self.watched = watched(graph, self.engine.trainable)
        self.ranges = {}
        self.mask = np.zeros_like(self.P)
        for name, _ in self.watched:
            t = graph.tensors[name]
            self.ranges[name] = lo, hi = t["offset"] // 4, (t["offset"] + t["nbytes"]) // 4
            self.mask[lo:hi] = 1.0
        self.rows, self.bad = {}, None

    def write_weights(self, blob: bytes) -> None:
        """Replace ``P`` (``wbytes`` bytes, of either engine); ValueError if the size differs."""
        if len(blob) != self.wbytes:
            raise ValueError(f"weights of {len(blob)} bytes do not fit this model's layout "
                             f"({self.wbytes} bytes)")
        self.P[:] = np.frombuffer(bytes(blob), "<f4")

    async def read_weights(self, nbytes: int | None = None) -> bytes:
        return self.P.tobytes()[:nbytes]

    async def init_weights(self, seed: int) -> None:
        """PyTorch's default init (``init.rules``), the GPU's bits (cpu/philox.py)."""
        for rule in init.rules(self.graph):
            view = self.views[rule.name]
            if rule.kind == "uniform":
                view[...] = philox.init_values(seed, rule.stream, view.size,
                                               np.float32(rule.scale)).reshape(view.shape)
            else:
                view[...] = rule.value

    async def attach(self, opt) -> None:
        self.opt = opt
        opt.attach_flat(self.P.size, self.mask)

    async def load_data(self, train, evals: dict, table) -> None:
        """Keep the training split and each split of ``evals`` (name -> ``train.Split``) as
        arrays [count, values] of the dataset's dtype, and the table (``DataSpec.table``;
        None for features) in float32 as [C, 256]."""
        self.spec = spec = train.spec
        self.table = None if table is None else np.asarray(table, np.float32).reshape(-1, 256)
        # the channel of each value of a sample (images: value index // (H * W))
        hw = int(np.prod(spec.sample_shape[-2:]))
        self.channel = np.arange(spec.values) // hw if table is not None else None
        self.train_images = self._samples(train.images, train.count)
        self.train_labels = np.frombuffer(bytes(train.labels), np.uint8)[:train.count]
        self.eval_chunk = EVAL_CHUNK
        self.eval_images = {name: self._samples(s.images, s.count) for name, s in evals.items()}

    def _samples(self, data, count: int):
        """Bytes of ``count`` samples -> array [count, values] of the dataset's dtype."""
        dtype = np.dtype(self.spec.dtype).newbyteorder("<")
        return np.frombuffer(bytes(data), dtype, count * self.spec.values).reshape(count, -1)

    def _inputs(self, samples):
        """Samples [n, values] -> the model's float32 input [n, *input dims]: uint8 values
        through the table of their channel, float32 features and token ids as they are."""
        x = samples if self.table is None else self.table[self.channel, samples]
        return np.asarray(x, np.float32).reshape([len(samples)] + self.in_shape)

    def set_augment(self, augment) -> None:
        """As ``GpuEngine.set_augment``: ``(pad, flip)`` or None (cpu/augment.py)."""
        self.augment = augment

    def set_order(self, perm) -> None:
        self.order = np.asarray(perm, np.int64)

    async def step(self, t: int, offset: int, lr: float) -> bool:
        """Optimizer step ``t`` on the batch at ``offset`` of the order: forward, loss,
        backward, guard, running statistics, update. Returns True (and leaves the weights
        alone) when the loss or a gradient is not finite."""
        rows = self.order[offset:offset + self.batch]
        x = self._inputs(self.train_images[rows])
        if self.augment is not None:
            x = augment_batch(x, self.seed, t, *self.augment, fill=self.table[:, 0])
        y = self.train_labels[rows].astype(np.int64)
        with np.errstate(all="ignore"):  # non-finite values are the guard's to report
            res = self.engine.step(x, y, train=True, loss=self.loss_spec, key=(self.seed, t))
        loss, grads, G = float(res["loss"]), res["grads"], self.G
        for name, (lo, hi) in self.ranges.items():
            g = grads.get(name)
            G[lo:hi] = 0.0 if g is None else np.asarray(g, np.float32).reshape(-1)
        self.rows[t] = (loss, float(res["acc"]))
        if self.bad is None:
            self.bad = next(((t, name, node) for name, node in self.watched
                             if not np.isfinite(G[slice(*self.ranges[name])]).all()), None)
        if self.bad is not None or not np.isfinite(loss):
            return True
        for name, value in res["buffers"].items():  # BatchNorm running statistics
            self.views[name][...] = value
        self.opt.step(self.P, G, t, lr)
        await asyncio.sleep(0)  # let the event loop deliver a Stop
        return False

    async def metrics(self, first: int, last: int):
        """As ``GpuEngine.metrics``: the rows of steps first..last and the guard."""
        return [self.rows.pop(t) for t in range(first, last + 1)], self.bad

    async def eval_outputs(self, what: str, lo: int, hi: int):
        """As ``GpuEngine.eval_outputs``, in eval mode on numpy (nll_log: the log-probabilities
        are log_softmax of the final Softmax's input, as the GPU plan fuses them)."""
        vals = self._forward(self.eval_images[what][lo:hi])
        await asyncio.sleep(0)  # let the event loop deliver messages
        out = np.asarray(vals[self.engine.output], np.float32).reshape(hi - lo, -1)
        logp = self._logp(vals).reshape(hi - lo, -1)
        logp = np.ascontiguousarray(logp, "<f4").tobytes()
        if self.loss_spec["loss"] in ("cross_entropy", "nll_log"):
            return logp, logp
        return logp, np.ascontiguousarray(out, "<f4").tobytes()

    def _forward(self, samples) -> dict:
        """Eval-mode forward of samples [n, values]: every activation by name."""
        with np.errstate(all="ignore"):
            return self.engine.forward(self._inputs(samples), train=False)[0]

    def _logp(self, vals):
        """The log-probabilities of a forward's activations ``vals`` (float32 [n, classes]):
        the output when the model ends in LogSoftmax, else log_softmax of the output (nll_log:
        of the final Softmax's input)."""
        if self.engine.head() == "nll":
            return np.asarray(vals[self.engine.output], np.float32)
        src = vals[self.engine.scores(self.loss_spec)] if self.loss_spec["loss"] == "nll_log" \
            else vals[self.engine.output]
        return log_softmax(np.asarray(src, np.float32), axis=1)

    async def probe(self, images, outputs) -> dict:
        """As ``GpuEngine.probe``: eval-mode forward of ``images`` [n, values] (the dataset's
        dtype) on the current weights, ``{name: float32 bytes [n, ...]}`` of the activations
        named (or ``probe.LOGP``); ValueError for a size or a name that does not fit."""
        size = self.spec.sample_bytes
        data = bytes(images)
        if not data or len(data) % size:
            raise ValueError(f"probe: {len(data)} bytes is not a whole number of "
                             f"{size}-byte samples ({self.spec.describe()})")
        vals = self._forward(self._samples(data, len(data) // size))
        out = {}
        for name in outputs:
            if name != LOGP and name not in vals:
                raise ValueError(f"probe: no activation named {name!r} in the model")
            arr = self._logp(vals) if name == LOGP else vals[name]
            out[name] = np.ascontiguousarray(arr, "<f4").tobytes()
        return out

    async def norms(self) -> list:
        """As ``GpuEngine.norms``: the L2 norms (float64) of each parameter's weights in ``P``
        and last gradient in ``G`` (None: frozen), in graph order."""
        rows = []
        for name, layer in params_in_order(self.graph):
            t = self.graph.tensors[name]
            lo, hi = t["offset"] // 4, (t["offset"] + t["nbytes"]) // 4
            rows.append({"name": name, "layer": layer, "numel": hi - lo,
                         "weight": float(np.linalg.norm(self.P[lo:hi].astype(np.float64))),
                         "grad": float(np.linalg.norm(self.G[lo:hi].astype(np.float64)))
                         if name in self.ranges else None})
        return rows
