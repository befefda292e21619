"""The "no GPU" trainer: ``train.Trainer``'s loop on the numpy engine in float32
(``webgpu-trainer train --device cpu``).

``CpuTrainer`` has the surface of ``train.Trainer`` that the native CLI uses (``setup``, ``run``,
``evaluate``, ``trained_weights``, ``step`` / ``epoch``, ``on_epoch``, ``emit`` with "status",
"progress" and "epoch" events, ``stop_requested``, ``cfg``, ``n_eval``, ``classes``) plus the
state a checkpoint needs: ``weights_blob`` / ``load_weights`` (the GPU plan's ``P`` layout:
the bundle's weight blob padded as ``Plan`` pads it) and ``opt.state_bytes`` /
``opt.load_state_bytes`` (the GPU optimizer's format), so checkpoints of either backend load
into the other.

The same data as ``train.Trainer``: the training order of epoch ``e`` is
``random.Random(seed * 1000003 + e).shuffle``, the last incomplete batch is dropped, images are
normalised as the GPU's gather kernel does (``pixel * (1 / (255 std)) - mean / std``, i.e.
``((x / 255) - 0.1307) / 0.3081``, in float32), validation is the first ``eval_images`` test
images in eval mode. The same loss (``cfg["loss"]``), frozen tensors (``cfg["trainable"]``),
optimizers (``cpu.optim``: torch.optim semantics, the GPU's state format), schedulers
(``schedulers.make``, OneCycleLR's momentum cycling included) and the same NaN/Inf guard
(``TrainingDiverged`` naming the step and the first layer, in graph order, whose gradient is not
finite; checked after every step's backward, before the update).

What differs from the GPU: ``init="scratch"`` draws PyTorch's default init (Conv / Gemm weight
and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), BatchNorm gamma 1, beta 0, running mean 0, running
variance 1) from ``numpy.random.default_rng([seed, k])`` (k = the tensor's index + 1), and the
Dropout masks of step ``t`` from ``numpy.random.default_rng([seed, t])``: deterministic for a
seed (so ``--resume`` continues exactly), but NOT the values the GPU's PCG hash draws, so a CPU
and a GPU run of the same seed start from different weights and drop different units. Float32
arithmetic in another order also makes the two backends' losses differ in the last digits.
CPython only (numpy).
"""

import math
import random
import time

import numpy as np

from ..engine import config as run_config, schedulers
from ..engine.ops.losses import final_op
from ..engine.ops.losses import resolve as resolve_loss
from ..engine.train import (MNIST_MEAN, MNIST_STD, TrainingDiverged, check_split_labels,
                            close_epoch, run_result, trainable_names)
from . import optim
from .engine import Engine
from .losses import criterion

EVAL_CHUNK = 256  # images per eval-mode forward (memory; BatchNorm in eval mode is per image)


def _round_up(n: int, k: int = 4) -> int:
    return (n + k - 1) // k * k


class CpuTrainer:
    """Trains ``graph`` (a model description) on ``train`` and evaluates on ``test`` with numpy.

    Arguments as ``train.Trainer`` without the device: ``config`` is a run configuration
    (``config.RunConfig`` or a dict of its fields), checked by ``config.parse`` in ``setup``;
    ``train`` / ``test`` are ``train.Split`` (bytes). To continue a run, set ``epoch`` and
    ``step`` and restore ``load_weights`` / ``opt.load_state_bytes`` after ``setup()``.
    """

    backend = "numpy"

    def __init__(self, graph: dict, weights: bytes, config: dict, train, test, emit=None):
        self.desc, self.weights = graph, weights
        self.cfg = config  # checked in setup (config.parse)
        self.train_set, self.test_set = train, test
        self.emit = emit or (lambda kind, **kw: None)
        self.stop_requested = False
        self.step = 0
        self.epoch = 0
        self.on_epoch = None
        self._sums = [0.0, 0.0, 0]

    # ------------------------------------------------------------------ setup

    async def setup(self):
        """Check the config and the model against the data, initialise the weights, build the
        optimizer and the schedule. Raises ValueError (bad config, model that does not fit
        MNIST) or NotImplementedError (an op the numpy engine lacks)."""
        self.cfg = cfg = run_config.parse(self.cfg, train_images=self.train_set.count) \
            .trainer_config()  # raises ConfigError naming every bad field
        graph, batch = self.desc, cfg["batch_size"]
        self.batch = batch
        self.emit("status", text="Preparing the numpy engine…")
        inp = graph["inputs"][0]
        per_sample = 1
        for d in inp["shape"][1:]:
            per_sample *= d if isinstance(d, int) else 0
        if per_sample != self.train_set.pixels:
            raise ValueError(
                f"model input {inp['name']!r} has shape {inp['shape']} ({per_sample or '?'} "
                f"values per sample) but MNIST images are 1x28x28 = {self.train_set.pixels}: "
                "use a model with input [N, 1, 28, 28] or [N, 784]")
        self.in_shape = [int(d) for d in inp["shape"][1:]]

        end = max((t["offset"] + t["nbytes"] for t in graph["tensors"]), default=0)
        self.weight_nbytes = end
        self.wbytes = _round_up(max(end, 16))
        self.P = np.zeros(self.wbytes // 4, np.float32)
        self.G = np.zeros_like(self.P)
        self.P.view(np.uint8)[:len(self.weights)] = np.frombuffer(self.weights, np.uint8)
        self.views = {t["name"]: self.P[t["offset"] // 4:(t["offset"] + t["nbytes"]) // 4]
                      .reshape(t["shape"]) for t in graph["tensors"]}
        self.engine = Engine(graph, self.views, np.float32,
                             trainable=trainable_names(graph, cfg.get("trainable")))
        for name, view in self.views.items():  # the engine computes on P itself
            assert self.engine.params[name] is view
        if cfg["init"] == "scratch":
            self.init_weights(int(cfg["seed"]))

        # The trainable tensors in graph order of their first use, with that node (the guard).
        self.trainable = []
        for node in graph["nodes"]:
            for name in node["inputs"]:
                if name in self.engine.trainable and name not in dict(self.trainable):
                    self.trainable.append((name, node["name"]))
        for name in sorted(self.engine.trainable - set(dict(self.trainable))):
            self.trainable.append((name, "?"))
        mask = np.zeros_like(self.P)
        self.ranges = {}
        for name, _ in self.trainable:
            t = next(t for t in graph["tensors"] if t["name"] == name)
            lo, hi = t["offset"] // 4, (t["offset"] + t["nbytes"]) // 4
            self.ranges[name] = (lo, hi)
            mask[lo:hi] = 1.0

        self.per_epoch, total = run_config.steps(cfg, self.train_set.count)  # drop_last
        self.total = total
        self.lr_at = schedulers.make(cfg, self.per_epoch)
        self.opt = optim.make(cfg["optimizer"], float(cfg["lr"]), float(cfg["momentum"]),
                              float(cfg["weight_decay"]),
                              clip_grad_norm=float(cfg.get("clip_grad_norm") or 0.0),
                              **(cfg.get("optimizer_args") or {}))
        self.opt.follow(self.lr_at)  # OneCycleLR's momentum / beta1, before the state exists
        self.opt.attach_flat(self.P.size, mask)

        self.train_images = np.frombuffer(bytes(self.train_set.images), np.uint8).reshape(
            self.train_set.count, -1)
        self.train_labels = np.frombuffer(bytes(self.train_set.labels), np.uint8)
        self.n_eval = min(int(cfg["eval_images"]), self.test_set.count)
        self.test_images = np.frombuffer(bytes(self.test_set.images), np.uint8).reshape(
            self.test_set.count, -1)
        self.test_labels = np.frombuffer(bytes(self.test_set.labels_host), np.uint8)

        out = self.engine.forward(self._inputs(self.test_images[:2]), train=False)[0][
            self.engine.output]
        if out.ndim != 2 or out.shape[1] < 10:
            raise ValueError(f"model output {self.engine.output!r} has shape "
                             f"{list(out.shape)}: training on MNIST needs [N, C] scores with "
                             "C >= 10 classes")
        self.classes = int(out.shape[1])
        # Raises ValueError naming a bad key / value of the loss spec.
        self.loss_spec = resolve_loss(cfg.get("loss"), final_op(self.desc), self.classes)
        check_split_labels(self.train_set, self.classes, "training")
        check_split_labels(self.test_set, self.classes, "test")

    def init_weights(self, seed: int) -> None:
        """PyTorch's default init with numpy's Generator (see the module docstring)."""
        index = {t["name"]: k for k, t in enumerate(self.desc["tensors"])}

        def draw(name, bound):
            rng = np.random.default_rng([seed, index[name] + 1])
            view = self.views[name]
            view[...] = rng.uniform(-bound, bound, view.shape).astype(np.float32)

        for node in self.desc["nodes"]:
            ins = node["inputs"]
            if node["op_type"] in ("Conv", "Gemm") and len(ins) > 1 and ins[1] in self.views:
                w = self.views[ins[1]].shape
                if node["op_type"] == "Conv":
                    fan_in = int(np.prod(w[1:]))
                else:
                    fan_in = w[1] if node.get("attrs", {}).get("transB", 0) else w[0]
                bound = 1.0 / math.sqrt(fan_in)
                for name in ins[1:3]:
                    if name in self.views:
                        draw(name, bound)
            elif node["op_type"] == "BatchNormalization":
                for name, value in zip(ins[1:5], (1.0, 0.0, 0.0, 1.0)):
                    if name in self.views:
                        self.views[name][...] = value

    # ------------------------------------------------------------------ data

    def _inputs(self, pixels):
        """uint8 [n, 784] -> the model's float32 input [n, *input dims], normalised."""
        scale = np.float32(1.0 / (255.0 * MNIST_STD))
        shift = np.float32(MNIST_MEAN / MNIST_STD)
        x = pixels.astype(np.float32) * scale - shift
        return x.reshape([len(pixels)] + self.in_shape)

    # ------------------------------------------------------------------ training

    def _train_step(self, t: int, rows):
        """Optimizer step ``t`` (1-based) on the training images ``rows``; returns the batch's
        ``(loss, accuracy)``. Raises TrainingDiverged before the update when the loss or a
        gradient is not finite."""
        seed = int(self.cfg["seed"])
        x = self._inputs(self.train_images[rows])
        y = self.train_labels[rows].astype(np.int64)
        with np.errstate(all="ignore"):  # non-finite values are the guard's to report
            res = self.engine.step(x, y, train=True, rng=np.random.default_rng([seed, t]),
                                   loss=self.cfg.get("loss"))
        loss, grads = float(res["loss"]), res["grads"]
        G = self.G
        for name, (lo, hi) in self.ranges.items():
            g = grads.get(name)
            G[lo:hi] = 0.0 if g is None else np.asarray(g, np.float32).reshape(-1)
        if not math.isfinite(loss) or not np.isfinite(G).all():
            self._diverged(t, loss)
        for name, value in res["buffers"].items():  # BatchNorm running statistics
            self.views[name][...] = value
        self.opt.step(self.P, G, t, self.lr_at(t))
        return loss, float(res["acc"])

    def _diverged(self, t: int, loss: float):
        """Raise TrainingDiverged with train.Trainer's message."""
        bad = next(((name, node) for name, node in self.trainable
                    if not np.isfinite(self.G[slice(*self.ranges[name])]).all()), None)
        lr = float(self.cfg["lr"])
        if bad:
            where = f"first non-finite gradient at step {t} in layer {bad[1]} (parameter {bad[0]})"
        else:
            where = "all gradients finite so far"
        what = f"loss is {loss}" if not math.isfinite(loss) else f"loss {loss:.4g}"
        raise TrainingDiverged(
            f"training diverged at step {t}: {what} at step {t}; {where}. Try a lower "
            f"learning rate (now {lr:g}, e.g. {lr / 10:g}) or gradient clipping.",
            step=t, layer=bad[1] if bad else None)

    async def run(self):
        """Train, validate after each epoch, evaluate at the end; returns the dict of
        ``train.Trainer.run``. Raises TrainingDiverged when the loss or a gradient is not
        finite (before that step's update)."""
        cfg, batch, per_epoch, total = self.cfg, self.batch, self.per_epoch, self.total
        report = max(1, int(cfg["report_every"]))
        start = time.perf_counter()
        epoch, last_eval = self.epoch, None
        first = self.step
        rows = []
        while self.step < total and not self.stop_requested:
            perm = list(range(self.train_set.count))
            random.Random(int(cfg["seed"]) * 1000003 + epoch).shuffle(perm)
            order = np.asarray(perm, np.int64)
            self._sums = [0.0, 0.0, 0]
            for s in range(max(0, self.step - epoch * per_epoch), per_epoch):
                if self.step >= total or self.stop_requested:
                    break
                t = self.step + 1
                loss, acc = self._train_step(t, order[s * batch:(s + 1) * batch])
                self.step = t
                rows.append([t, loss, acc])
                self._sums[0] += loss
                self._sums[1] += acc
                self._sums[2] += 1
                if t % report == 0 or t == total or s == per_epoch - 1:
                    elapsed = time.perf_counter() - start
                    rate = (t - first) / elapsed if elapsed > 0 else 0.0
                    self.emit("progress", step=t, total_steps=total, epoch=epoch + 1,
                              epochs=int(cfg["epochs"]), images_per_s=rate * batch,
                              eta_s=(total - t) / rate if rate else 0.0, losses=rows)
                    rows = []
                    await _yield()
            epoch += 1
            last_eval = await close_epoch(self, epoch, per_epoch, total) or last_eval
        return await run_result(self, epoch, last_eval, total)

    async def evaluate(self):
        """Eval-mode forward over the first ``eval_images`` test images.

        Returns ``(loss, accuracy, log-probabilities bytes [n, classes] float32)`` as
        ``train.Trainer.evaluate``: the configured loss in its mean form (NLL of the
        log-probabilities by default), accuracy = argmax == label."""
        n = self.n_eval
        scores = self.engine.scores(self.loss_spec)  # nll_log: the final Softmax's input
        outs, ins = [], []
        for lo in range(0, n, EVAL_CHUNK):
            x = self._inputs(self.test_images[lo:min(n, lo + EVAL_CHUNK)])
            with np.errstate(all="ignore"):
                vals = self.engine.forward(x, train=False)[0]
            outs.append(vals[self.engine.output])
            ins.append(vals[scores])
            await _yield()
        out = np.concatenate(outs) if outs else np.zeros((0, self.classes), np.float32)
        out = out.astype(np.float32, copy=False)
        src = np.concatenate(ins) if ins else out
        if final_op(self.desc) == "LogSoftmax":
            logp = out
        else:
            z = src if self.loss_spec["loss"] == "nll_log" else out
            m = z.max(axis=1, keepdims=True)
            logp = (z - m - np.log(np.exp(z - m).sum(axis=1, keepdims=True))) \
                .astype(np.float32)
        labels = self.test_labels[:n].astype(np.int64)
        if n == 0:
            return 0.0, 0.0, b""
        loss, _, _ = criterion({**self.loss_spec, "reduction": "mean"}, src.astype(np.float64),
                               labels)
        acc = float((logp.argmax(axis=1) == labels).mean())
        return float(loss), acc, np.ascontiguousarray(logp, "<f4").tobytes()

    # ------------------------------------------------------------------ state

    async def trained_weights(self) -> bytes:
        """The weights (params and running statistics) in the bundle's blob layout."""
        return self.P.tobytes()[:self.weight_nbytes]

    def weights_blob(self) -> bytes:
        """All of ``P`` (the GPU plan's ``wbytes``): a checkpoint's "weights" section."""
        return self.P.tobytes()

    def load_weights(self, blob: bytes) -> None:
        """Restore ``weights_blob()`` (of either backend); ValueError if the size differs."""
        if len(blob) != self.wbytes:
            raise ValueError(f"weights of {len(blob)} bytes do not fit this model's layout "
                             f"({self.wbytes} bytes)")
        self.P[:] = np.frombuffer(bytes(blob), "<f4")


async def _yield():
    """Let other tasks of the event loop run (a Stop request) between steps."""
    import asyncio
    await asyncio.sleep(0)
