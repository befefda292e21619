"""The training loop shared by the browser worker and the native CLI (standard library only).

One training step is one queue submit of a prebuilt program (gather batch -> forward -> NLL loss
-> backward -> optimizer update) after a 32-byte write of the step's uniforms; metrics (loss,
accuracy) accumulate in a ring on the GPU and are read back every ``report_every`` steps, which
also bounds how far the CPU runs ahead of the GPU.
"""

import math
import random
import struct
import time
from array import array

from . import config as run_config, optim, schedulers
from .backends.base import groups_1d, pack_params, round_up
from .graph import Graph
from .guard import Guard
from .ops import losses
from .plan import METRICS_RING, Plan, pack_step

MNIST_MEAN, MNIST_STD = 0.1307, 0.3081  # ((x / 255) - mean) / std, as the PyTorch MNIST example


def trainable_names(graph: dict, names) -> set | None:
    """Validate a ``trainable`` config value: None (every parameter trains) or a list of
    initializer names of role "param" (the rest is frozen: no gradient, no update). Raises
    ValueError naming unknown names, buffers, or an empty list."""
    if names is None:
        return None
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"trainable must be a list of parameter names, got {names!r}")
    roles = {t["name"]: t["role"] for t in graph["tensors"]}
    unknown = sorted(n for n in names if n not in roles)
    if unknown:
        raise ValueError(f"trainable: no parameter named {', '.join(map(repr, unknown))} in the "
                         f"model (parameters: {', '.join(n for n, r in roles.items() if r == 'param')})")
    buffers = sorted(n for n in names if roles[n] != "param")
    if buffers:
        raise ValueError(f"trainable: {', '.join(buffers)} are buffers (BatchNorm running "
                         "statistics), not parameters")
    if not names:
        raise ValueError("trainable is empty: nothing would train (freeze fewer parameters)")
    return set(names)


class Split:
    """One MNIST split on its way to the GPU: ``images`` [count, 784] uint8 and ``labels``
    [count] uint8, each bytes-like or (in the browser) a JS ArrayBuffer; ``labels_host`` the
    labels as Python bytes (for evaluation on the host)."""

    def __init__(self, images, labels, count: int, labels_host: bytes, pixels: int = 784):
        self.images, self.labels, self.count = images, labels, count
        self.labels_host, self.pixels = labels_host, pixels


def check_split_labels(split: Split, classes: int, what: str) -> None:
    """Refuse a split holding a label outside 0..classes-1 (ValueError naming the split, the
    index and the value), before any GPU work: such a label must never reach a loss kernel."""
    labels = split.labels_host
    if not labels or max(labels) < classes:
        return
    i = next(i for i, v in enumerate(labels) if v >= classes)
    raise ValueError(f"{what} label {labels[i]} at index {i} is outside 0..{classes - 1} "
                     f"(the model has {classes} classes): prepare the data again with "
                     "`webgpu-trainer data --source DIR`, which refuses such labels")


class TrainingDiverged(RuntimeError):
    """The loss or a gradient became NaN or infinite; the message names the step and the first
    layer (graph order) with a non-finite gradient, and suggests a fix. ``step``, ``layer``."""

    def __init__(self, message, step=None, layer=None):
        super().__init__(message)
        self.step, self.layer = step, layer


async def close_epoch(tr, epoch: int, per_epoch: int, total: int):
    """After epoch ``epoch`` (1-based) of trainer ``tr`` (``Trainer`` or ``cpu.CpuTrainer``):
    unless training stopped or the epoch is partial, validate, emit "epoch" (with the epoch's
    mean train_loss / train_acc from ``tr._sums``) and await ``tr.on_epoch``. Returns
    ``(step, evaluate() result)``, or None when it did not validate."""
    if tr.stop_requested or not (tr.step % per_epoch == 0 or tr.step == total):
        return None
    last_eval = (tr.step, await tr.evaluate())
    loss, acc, _ = last_eval[1]
    n = max(tr._sums[2], 1)
    metrics = {"epoch": epoch, "step": tr.step, "train_loss": tr._sums[0] / n,
               "train_acc": tr._sums[1] / n, "val_loss": loss, "val_acc": acc}
    tr.emit("epoch", **metrics)
    if tr.on_epoch is not None:
        await tr.on_epoch(epoch, tr.step, metrics)
    return last_eval


async def run_result(tr, epochs_done: int, last_eval, total: int) -> dict:
    """The dict ``run`` returns: the last validation when it evaluated these weights, else a
    new evaluation (training stopped)."""
    if last_eval is None or last_eval[0] != tr.step:
        last_eval = (tr.step, await tr.evaluate())
    loss, acc, logits = last_eval[1]
    return {"test_acc": acc, "test_loss": loss, "steps": tr.step, "epochs_done": epochs_done,
            "stopped": tr.stop_requested, "logits": logits, "total_steps": total}


class Trainer:
    """Trains ``graph`` (a model description) on ``train`` and evaluates on ``test``.

    ``config``: a run configuration (``config.RunConfig`` or a dict of its fields, see
    ``engine/config``), checked by ``config.parse`` against the training images in ``setup``
    (before any GPU work); ``self.cfg`` is then its ``trainer_config()``: optimizer, lr,
    batch_size, epochs, seed, init ("scratch" re-initialises with PyTorch's default init,
    "finetune" keeps the model's weights), momentum, weight_decay, optimizer_args,
    clip_grad_norm, scheduler, max_steps (0: no cap), eval_images (first N test images),
    report_every (steps between metric readbacks), loss (spec, see ``ops/losses.py``; "auto":
    NLLLoss after a final LogSoftmax, NLLLoss of log(output) after a final Softmax, else
    CrossEntropyLoss), trainable (None: every parameter; else the initializer names to train,
    the rest frozen: see ``trainable_names``).
    ``emit(kind, **fields)`` receives "status", "progress", "epoch" events ("epoch" carries the
    epoch's mean train_loss / train_acc too). To continue a run, set ``epoch`` (epochs done) and
    ``step`` (steps done) and restore weights / optimizer state after ``setup()``;
    ``on_epoch`` (async, optional) is awaited after each epoch's validation with
    ``(epoch, step, metrics dict)``.
    """

    def __init__(self, dev, graph: dict, weights: bytes, config: dict, train: Split,
                 test: Split, emit=None):
        self.dev, self.desc, self.weights = dev, graph, weights
        self.cfg = config  # checked in setup (config.parse)
        self.train_set, self.test_set = train, test
        self.emit = emit or (lambda kind, **kw: None)
        self.stop_requested = False
        self.step = 0
        self.epoch = 0
        self.on_epoch = None
        self._sums = [0.0, 0.0, 0]  # loss, accuracy, steps of the current epoch
        self._lut = None  # data.wgsl's pixel -> normalised value table (set-up)

    async def setup(self):
        """Build the plan, upload weights and data, record the train and eval programs."""
        self.cfg = cfg = run_config.parse(self.cfg, train_images=self.train_set.count) \
            .trainer_config()  # raises ConfigError naming every bad field
        dev, batch = self.dev, cfg["batch_size"]
        self.graph = Graph(self.desc)
        self._check_fits_data()
        # Raises ValueError naming the bad key / value, before any GPU work.
        losses.normalize(cfg["loss"], self.graph.shapes(2)[self.graph.output][1])
        self.emit("status", text="Compiling the training step…")
        train_only = trainable_names(self.desc, cfg.get("trainable"))
        self.plan = plan = await Plan.build(dev, self.graph, batch, loss=cfg["loss"],
                                            trainable=train_only)
        blob = bytearray(plan.wbytes)
        blob[:len(self.weights)] = self.weights
        dev.write(plan.P, bytes(blob))
        if cfg["init"] == "scratch":
            await plan.init_weights(int(cfg["seed"]))
        # "clip_grad_norm" (0 = off) and "optimizer_args" (torch.optim keywords) are optional.
        self.opt = optim.make(cfg["optimizer"], float(cfg["lr"]), float(cfg["momentum"]),
                              float(cfg["weight_decay"]),
                              clip_grad_norm=float(cfg.get("clip_grad_norm") or 0.0),
                              **(cfg.get("optimizer_args") or {}))
        # Learning rate (and OneCycleLR's momentum / beta1) of optimizer step t (1-based):
        # cfg["scheduler"] (see schedulers.py); the optimizer follows it before attach, which
        # makes the momentum buffer a cycled momentum needs.
        per_epoch = run_config.steps(cfg, self.train_set.count)[0]
        self.lr_at = schedulers.make(cfg, per_epoch)
        self.opt.follow(self.lr_at)
        await self.opt.attach(plan)
        self.guard = await Guard.build(plan)
        self.emit("status", text="Uploading MNIST to the GPU…")
        self.order = dev.buffer(4 * self.train_set.count, "train.order")
        self.gather_train = await self._gather(self.train_set, self.order)
        n_eval = min(int(cfg["eval_images"]), self.test_set.count)
        self.eval_batches = max(1, math.ceil(n_eval / batch))
        self.n_eval = n_eval
        eval_order = dev.buffer(4 * self.eval_batches * batch, "eval.order")
        idx = array("I", [i if i < self.test_set.count else 0
                          for i in range(self.eval_batches * batch)])
        dev.write(eval_order, idx.tobytes())
        self.gather_eval = await self._gather(self.test_set, eval_order)
        classes = plan.acts[plan.logp].shape[1]
        self.classes = classes
        self.logits = dev.buffer(4 * self.eval_batches * batch * classes, "eval.logits")
        # What the loss reads when that is not the log-probabilities (nll on a raw output, mse,
        # bce_with_logits): copied too, for the validation loss.
        self.loss_rows = None if plan.loss_input == plan.logp else \
            dev.buffer(4 * self.eval_batches * batch * classes, "eval.loss_rows")
        self.train_program = dev.program(self.gather_train + plan.fwd_train + plan.loss
                                         + plan.bwd + self.guard.dispatches
                                         + self.opt.dispatches)
        self.eval_program = dev.program(self.gather_eval + plan.fwd_eval + plan.head)

    def _check_fits_data(self):
        """Refuse a model whose input or output does not fit the data, and data with a label
        outside the model's classes (before any GPU work).

        Raises ValueError naming the input/output, its shape and what MNIST provides, or the
        split, index and value of the first bad label."""
        inp = self.graph.input
        dims = inp["shape"][1:]
        per_sample = 1
        for d in dims:
            per_sample *= d if isinstance(d, int) else 0
        if per_sample != self.train_set.pixels:
            raise ValueError(
                f"model input {inp['name']!r} has shape {inp['shape']} ({per_sample or '?'} "
                f"values per sample) but MNIST images are 1x28x28 = {self.train_set.pixels}: "
                "use a model with input [N, 1, 28, 28] or [N, 784]")
        out = self.graph.shapes(2)[self.graph.output]
        if len(out) != 2 or out[1] < 10:
            raise ValueError(f"model output {self.graph.output!r} has shape {out}: training on "
                             "MNIST needs [N, C] scores with C >= 10 classes")
        check_split_labels(self.train_set, out[1], "training")
        check_split_labels(self.test_set, out[1], "test")

    async def _gather(self, split: Split, order):
        dev, plan = self.dev, self.plan
        images = dev.buffer(round_up(split.count * split.pixels), "images")
        labels = dev.buffer(round_up(split.count), "labels")
        dev.write(images, _padded(split.images, split.count * split.pixels))
        dev.write(labels, _padded(split.labels, split.count))
        words = split.pixels // 4
        b = plan.builder
        b.current = []
        if self._lut is None:  # the normalisation table, made in float64, shared by both splits
            self._lut = dev.buffer(4 * 256, "normalize.lut")
            dev.write(self._lut, array("f", [(v / 255 - MNIST_MEAN) / MNIST_STD
                                             for v in range(256)]).tobytes())
        params = pack_params(plan.batch, words, split.count, 0)
        await b.kernel("data", "gather", params,
                       [plan.step, images, labels, order, plan.input, plan.labels, self._lut],
                       groups_1d(plan.batch * words))
        return b.current

    def _write_step(self, t: int, offset: int):
        lr = self.lr_at(max(t, 1))
        a0, a1, a2 = self.opt.scalars(max(t, 1), lr)
        self.dev.write(self.plan.step, pack_step(t, offset, int(self.cfg["seed"]), lr, (a0, a1, a2)))

    async def run(self):
        """Train, validate after each epoch, evaluate at the end. Returns the final metrics dict:
        ``{"test_acc", "test_loss", "steps", "epochs_done", "stopped", "logits": bytes}``.
        Raises TrainingDiverged when the loss or a gradient is not finite."""
        cfg, dev, plan = self.cfg, self.dev, self.plan
        batch = plan.batch
        per_epoch, total = run_config.steps(cfg, self.train_set.count)  # drop_last
        report = max(1, min(int(cfg["report_every"]), METRICS_RING // 2))
        start = time.perf_counter()
        epoch, in_flight, last_eval = self.epoch, None, None
        last_read = first = self.step
        while self.step < total and not self.stop_requested:
            perm = list(range(self.train_set.count))
            random.Random(int(cfg["seed"]) * 1000003 + epoch).shuffle(perm)
            dev.write(self.order, array("I", perm).tobytes())
            self._sums = [0.0, 0.0, 0]
            for s in range(max(0, self.step - epoch * per_epoch), per_epoch):
                if self.step >= total or self.stop_requested:
                    break
                self.step += 1
                self._write_step(self.step, s * batch)
                dev.submit([self.train_program])
                # At most two steps in flight: Stop takes effect within a step, and awaiting
                # lets the worker's event loop deliver messages.
                fence = dev.fence()
                if in_flight is not None:
                    await in_flight
                in_flight = fence
                if self.step % report == 0 or self.step == total or s == per_epoch - 1:
                    last_read = await self._report(last_read, total, epoch, start, first)
            if self.stop_requested and last_read < self.step:  # report the steps done
                last_read = await self._report(last_read, total, epoch, start, first)
            epoch += 1
            last_eval = await close_epoch(self, epoch, per_epoch, total) or last_eval
        return await run_result(self, epoch, last_eval, total)

    async def _report(self, last_read, total, epoch, start, first=0):
        raw = await self.dev.read(self.plan.metrics)
        vals = struct.unpack(f"<{2 * METRICS_RING}f", raw)
        bad_grad = await self.guard.first_bad()
        rows = []
        for t in range(last_read + 1, self.step + 1):
            slot = (t - 1) % METRICS_RING
            loss, acc = vals[2 * slot], vals[2 * slot + 1]
            if acc < 0:  # the loss kernel's flag: labels >= classes were ignored
                raise ValueError(f"step {t}: {int(-acc)} label(s) outside 0..{self.classes - 1}"
                                 " reached the loss (the kernel ignored them): the training "
                                 "data changed after it was checked; prepare it again")
            if not math.isfinite(loss) or (bad_grad and bad_grad[0] <= t):
                self._diverged(t, loss, bad_grad)
            rows.append([t, loss, acc])
            self._sums[0] += loss
            self._sums[1] += acc
            self._sums[2] += 1
        elapsed = time.perf_counter() - start
        rate = (self.step - first) / elapsed if elapsed > 0 else 0.0
        self.emit("progress", step=self.step, total_steps=total, epoch=epoch + 1,
                  epochs=int(self.cfg["epochs"]), images_per_s=rate * self.plan.batch,
                  eta_s=(total - self.step) / rate if rate else 0.0, losses=rows)
        return self.step

    def _diverged(self, t, loss, bad_grad):
        lr = float(self.cfg["lr"])
        if bad_grad:
            where = (f"first non-finite gradient at step {bad_grad[0]} in layer {bad_grad[2]} "
                     f"(parameter {bad_grad[1]})")
        else:
            where = "all gradients finite so far"
        what = f"loss is {loss}" if not math.isfinite(loss) else f"loss {loss:.4g}"
        step = min(t, bad_grad[0]) if bad_grad else t
        raise TrainingDiverged(
            f"training diverged at step {step}: {what} at step {t}; {where}. Try a lower "
            f"learning rate (now {lr:g}, e.g. {lr / 10:g}) or gradient clipping.",
            step=step, layer=bad_grad[2] if bad_grad else None)

    async def evaluate(self):
        """Eval-mode forward over the first ``eval_images`` test images.

        Returns ``(loss, accuracy, log-probabilities bytes [n, classes] float32)``: the loss is
        the configured loss with reduction "mean" (weighted mean with class weights) over the n
        images; the log-probabilities are the model's output when it ends in LogSoftmax, else
        log_softmax of it."""
        dev, plan, batch, c = self.dev, self.plan, self.plan.batch, self.classes
        out, src = plan.acts[plan.logp], plan.acts[plan.loss_input]
        for i in range(self.eval_batches):
            self._write_step(max(self.step, 1), i * batch)
            copies = [(out.buf, 0, self.logits, i * batch * c * 4, batch * c * 4)]
            if self.loss_rows is not None:
                copies.append((src.buf, src.offset, self.loss_rows, i * batch * c * 4,
                               batch * c * 4))
            dev.submit([self.eval_program], copies=copies)
        raw = await dev.read(self.logits, 0, self.n_eval * c * 4)
        vals = array("f")
        vals.frombytes(raw)
        lvals = vals
        if self.loss_rows is not None:
            lvals = array("f")
            lvals.frombytes(await dev.read(self.loss_rows, 0, self.n_eval * c * 4))
        labels = self.test_set.labels_host
        spec = plan.loss_spec
        num, den, hits = 0.0, 0.0, 0
        for i in range(self.n_eval):
            row = vals[i * c:(i + 1) * c]
            label = labels[i]
            a, d = losses.host_terms(spec, lvals[i * c:(i + 1) * c], label)
            num += a
            den += d
            hits += max(range(c), key=row.__getitem__) == label
        n = max(self.n_eval, 1)
        return (num / den if den else 0.0), hits / n, raw

    async def profile(self, repeats: int = 2) -> list:
        """Time every dispatch of one training step on its own (submit, wait, repeat).

        Returns ``[(phase, "shader:entry:", (x, y, z), ms)]``; ms is wall time per dispatch
        including one submit and one queue wait, so small kernels read high."""
        dev, plan = self.dev, self.plan
        self._write_step(1, 0)
        rows = []
        for phase, dispatches in (("data", self.gather_train), ("forward", plan.fwd_train),
                                  ("loss", plan.loss), ("backward", plan.bwd),
                                  ("optimizer", self.opt.dispatches)):
            for d in dispatches:
                prog = dev.program([d])
                dev.submit([prog])
                await dev.sync()
                start = time.perf_counter()
                for _ in range(repeats):
                    dev.submit([prog])
                    await dev.sync()
                rows.append((phase, d[0][2], list(d[2]),
                             (time.perf_counter() - start) / repeats * 1000))
        return rows

    async def trained_weights(self) -> bytes:
        """The weights (params and running statistics) in the bundle's blob layout."""
        return await self.dev.read(self.plan.P, 0, self.graph.weight_nbytes())


def _padded(data, nbytes: int):
    """``data`` padded with zeros to a multiple of 4 bytes (JS buffers pass through)."""
    if hasattr(data, "byteLength"):
        return data
    pad = round_up(nbytes) - len(data)
    return bytes(data) + bytes(pad) if pad else data
