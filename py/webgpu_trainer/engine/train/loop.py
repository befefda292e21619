"""The training loop shared by the browser worker, the native CLI and both engines (standard
library only: it runs in Pyodide too).

``Trainer`` owns what a run means: epochs, the per-epoch shuffle (``random.Random(seed * 1000003
+ epoch)``), batches without replacement dropping the last incomplete one (BatchNorm needs full
batches), the learning-rate schedule per step, metrics, progress and ETA, validation at the end
of each epoch (and a few points inside it on part of the held-out images), Stop, the
divergence guard's verdict, the checkpoint hook (``on_epoch``) and the result. It drives an
*engine*, which owns the weights and computes steps:

- ``gpu_engine.GpuEngine(dev)``: WebGPU (browser, wgpu-py): each step one queue submit of a
  prebuilt program, metrics read back asynchronously from a ring on the GPU;
- ``cpu.cpu_engine.CpuEngine()``: numpy float32 (``--device cpu``).

The engine interface (methods are coroutines except ``write_weights`` and ``set_order``):

- ``build(graph, batch, loss, trainable, seed)``: compile for the ``Graph`` at ``batch``; then
  ``wbytes`` (bytes of the flat weights), ``classes`` and ``loss_spec`` (resolved) are set;
- ``write_weights(blob)`` / ``read_weights(nbytes=None)``: the flat weights, ``wbytes`` bytes
  (the bundle's blob padded: the checkpoint format of both engines); ValueError on a size
  mismatch;
- ``init_weights(seed)``: PyTorch's default init, the same bits on every engine (``init.py``);
- ``optim`` (the module whose ``make`` builds the optimizer), ``dev`` (what the optimizer's
  ``state_bytes(dev)`` takes) and ``attach(opt)``;
- ``load_data(train, evals, table)``: the training split, ``evals`` (``{"validation": Split,
  "test": Split}``, each evaluated whole; validation may be absent) and the pixel -> input
  table; then ``eval_chunk`` is set (images per ``eval_outputs`` call, a multiple of the batch);
- ``set_order(perm)``: this epoch's training order;
- ``step(t, offset, lr) -> bool``: optimizer step t on the batch at ``offset`` of the order,
  returning with at most two steps in flight (no readback); True: read the metrics now (the
  host saw a non-finite value);
- ``metrics(first, last)``: ``([(loss, acc)] of steps first..last, guard)``, guard None or
  ``(step, tensor, node)`` of the first non-finite gradient;
- ``eval_outputs(what, lo, hi)``: ``(log-probabilities, loss rows)``, float32 bytes
  [hi - lo, classes] of an eval-mode forward over images lo..hi-1 of the split ``what``
  ("validation" or "test"; ``lo`` a multiple of ``eval_chunk``).

Validation images are the last ``val_images`` of the training split (``holdout``): training
uses the images before them, so the per-epoch validation numbers come from images the model
never trained on, and the test split is kept for the final number.
"""

import asyncio
import math
import random
import time
from array import array

from . import config as run_config, schedulers
from .gpu_engine import GpuEngine
from .graph import Graph
from .ops import losses
from .plan import METRICS_RING
from .verdict import LAST_STEPS, lower_lr, verdict

REPORT_S = 2.0  # progress reports at least this often (wall seconds), besides every report_every
# Validation during an epoch (the page's "Train vs validation" chart; ``Trainer.val_points``):
# VAL_POINTS - 1 points evenly inside each epoch on the first images of the held-out set, then
# the whole set at the epoch's end. A point's images: a tenth of the epoch's training images
# (an eval forward costs about a third of a training step per image: three points add ~10%),
# at least VAL_MIN, at most VAL_SUBSET.
VAL_POINTS, VAL_SUBSET, VAL_MIN = 4, 512, 64

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

    def part(self, lo: int, hi: int) -> "Split":
        """Images lo..hi-1 as a Split (a copy; JS ArrayBuffers through ``slice``)."""
        def cut(data, size):
            return data.slice(lo * size, hi * size) if hasattr(data, "byteLength") \
                else data[lo * size:hi * size]
        return Split(cut(self.images, self.pixels), cut(self.labels, 1), hi - lo,
                     self.labels_host[lo:hi], self.pixels)


def holdout(train: Split, cfg) -> tuple:
    """``(training images, validation images or None)`` of the training split ``train`` under
    the config ``cfg``: validation = its last ``val_images`` images (deterministic: the same
    for every seed; MNIST: training images 55,000..59,999), training = the first
    ``config.train_used`` images before them (``train_images`` > 0: that many)."""
    val = int(cfg.get("val_images") or 0)
    used = run_config.train_used(cfg, train.count)
    return train.part(0, used), (train.part(train.count - val, train.count) if val else None)


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




def pixel_table() -> list:
    """The model input of each pixel value 0..255: ((v / 255) - mean) / std in float64, which
    every engine rounds once to float32 (so they see the same inputs)."""
    return [(v / 255 - MNIST_MEAN) / MNIST_STD for v in range(256)]



def epochs_fraction(steps: int, per_epoch: int):
    """The epochs ``steps`` make: an int when whole, else rounded to 4 decimals."""
    q = steps / per_epoch if per_epoch else 0
    return int(q) if q == int(q) else round(q, 4)


class Trainer:
    """Trains ``graph`` (a model description) on ``train`` and evaluates on ``test``.

    ``engine``: a ``GpuEngine`` or ``cpu.cpu_engine.CpuEngine`` (a WebGPU device is wrapped in
    a ``GpuEngine``). ``config``: a run configuration (``config.RunConfig`` or a dict of its
    fields, see ``engine/config``), checked by ``config.parse`` against the training images in
    ``setup`` (before any GPU work); ``self.cfg`` is then its ``trainer_config()``: optimizer,
    lr, batch_size, epochs, seed, init ("scratch" re-initialises with PyTorch's default init,
    "finetune" keeps the model's weights), momentum, weight_decay, optimizer_args (torch.optim
    keywords), clip_grad_norm, scheduler (``schedulers.make``'s spec), max_steps (0: no cap),
    eval_images (first N test images), report_every (steps between metric readbacks), loss
    (spec, see ``ops/losses.py``; "auto": NLLLoss after a final LogSoftmax, NLLLoss of
    log(output) after a final Softmax, else CrossEntropyLoss), trainable (None: every
    parameter; else the initializer names to train, the rest frozen: see
    ``trainable_names``).
    ``emit(kind, **fields)`` receives "status", "setup" (once, after ``setup``: ``memory_bytes``
    of the engine's GPU buffers, None on the CPU engine), "progress" (after step 1, then every
    ``report_every`` steps or ``REPORT_S`` seconds, whichever comes first; ``losses``: [step,
    loss, accuracy] rows, ``lrs``: the learning rate of each of those steps), "paused"
    (``paused``, ``step``), "evaluating" (``done``, ``total``, ``what``: after each chunk of an
    evaluation), "validation" (``step``, ``epoch``, ``images``, ``val_loss``, ``val_acc``: a
    point inside an epoch on the first held-out images when ``val_points`` > 1,
    ``_validation_marks``) and "epoch" events ("epoch": the epoch's last step, mean train_loss
    / train_acc and val_loss / val_acc of the held-out validation images, None without them).
    ``skip_test``: set True to end the final test evaluation after its current chunk (the
    result covers those images).
    ``pause()`` / ``resume()``: the loop waits between two steps while paused (Stop ends the
    wait); paused time does not count in images/s and the ETA. ``train`` is the whole training
    split: ``setup`` holds its last ``val_images`` out for validation (``holdout``).
    To continue a run, set ``epoch`` (epochs done)
    and ``step`` (steps done) and restore the weights (``engine.write_weights``) and optimizer
    state after ``setup()``; ``on_epoch`` (async, optional) is awaited after each epoch's
    validation with ``(epoch, step, metrics dict)``; ``on_checkpoint`` (async, optional) with
    ``(epoch in progress (1-based), step)`` inside an epoch, every ``checkpoint_every_s``
    seconds (0: never) and on Stop; ``run_state()`` then holds what continues the epoch.
    """

    def __init__(self, engine, graph: dict, weights: bytes, config: dict, train: Split,
                 test: Split, emit=None):
        self.engine = engine if hasattr(engine, "step") else GpuEngine(engine)
        self.desc, self.weights = graph, weights
        self.cfg = config  # checked in setup (config.parse)
        self.train_set, self.test_set = train, test
        self.emit = emit or (lambda kind, **kw: None)
        self._stop = False
        self._running = asyncio.Event()  # clear while paused
        self._running.set()
        self._paused_s = 0.0  # seconds paused during this run()
        self.step = 0
        self.epoch = 0
        self.on_epoch = self.on_checkpoint = None
        self._sums = [0.0, 0.0, 0]  # loss, accuracy, steps of the current epoch
        self._resumed_sums = None  # a mid-epoch checkpoint's sums (restore_run_state)
        self._first_loss, self._last_losses = None, []  # the verdict's training losses
        self.val_set = None
        self.skip_test = False  # True: the test evaluation ends after its current chunk
        self.val_points = 1  # validations per epoch (VAL_POINTS: the page's); 1: at its end

    @property
    def stop_requested(self) -> bool:
        """Set True to stop after the current step (also while paused)."""
        return self._stop

    @stop_requested.setter
    def stop_requested(self, value: bool):
        self._stop = bool(value)
        if self._stop:
            self._running.set()  # a paused loop wakes up to stop

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    def pause(self) -> None:
        """Pause between two steps (from the loop's thread: a message handler, a task)."""
        if not self._stop:
            self._running.clear()

    def resume(self) -> None:
        """Continue a paused run."""
        self._running.set()

    async def _wait_while_paused(self, epoch: int):
        """Report the steps done, emit "paused", wait for ``resume`` or Stop; the time
        waited is left out of images/s and the ETA."""
        if self._read < self.step:
            await self._report(epoch)
        t0 = time.perf_counter()
        self.emit("paused", paused=True, step=self.step)
        await self._running.wait()
        self._paused_s += time.perf_counter() - t0
        self.emit("paused", paused=False, step=self.step)

    async def setup(self):
        """Check the config and the model against the data, build the engine, set the initial
        weights, make the optimizer and the schedule, load the data. Raises ValueError (bad
        config, model that does not fit MNIST) or NotImplementedError (an op the engine
        lacks) before any training."""
        self.cfg = cfg = run_config.parse(self.cfg, train_images=self.train_set.count) \
            .trainer_config()  # raises ConfigError naming every bad field
        eng, batch = self.engine, cfg["batch_size"]
        self.graph = Graph(self.desc)
        self._check_fits_data()
        # Raises ValueError naming the bad key / value, before any GPU work.
        losses.normalize(cfg["loss"], self.graph.shapes(2)[self.graph.output][1])
        self.emit("status", text="Compiling the training step…")
        seed = int(cfg["seed"])
        await eng.build(self.graph, batch, cfg["loss"],
                        trainable_names(self.desc, cfg.get("trainable")), seed)
        blob = bytearray(eng.wbytes)
        blob[:len(self.weights)] = self.weights
        eng.write_weights(bytes(blob))
        if cfg["init"] == "scratch":
            await eng.init_weights(seed)
        self.opt = eng.optim.make(cfg["optimizer"], float(cfg["lr"]), float(cfg["momentum"]),
                                  float(cfg["weight_decay"]),
                                  clip_grad_norm=float(cfg.get("clip_grad_norm") or 0.0),
                                  **(cfg.get("optimizer_args") or {}))
        # drop_last: BatchNorm needs full batches
        self.per_epoch, self.total = run_config.steps(cfg, self.train_set.count)
        self.train_set, self.val_set = holdout(self.train_set, cfg)
        # Learning rate (and OneCycleLR's momentum / beta1) of optimizer step t (1-based); the
        # optimizer follows it before attach, which makes the momentum buffer a cycled
        # momentum needs.
        self.lr_at = schedulers.make(cfg, self.per_epoch)
        self.opt.follow(self.lr_at)
        await eng.attach(self.opt)
        self.emit("status", text="Loading MNIST…")
        self.n_eval = min(int(cfg["eval_images"]), self.test_set.count)
        self.evals = {"test": self.test_set.part(0, self.n_eval)}
        if self.val_set is not None:
            self.evals["validation"] = self.val_set
        await eng.load_data(self.train_set, self.evals, pixel_table())
        self.classes = eng.classes
        self.emit("setup", memory_bytes=getattr(eng, "memory_bytes", None))

    def _check_fits_data(self):
        """Refuse a model whose input or output does not fit the data, and data with a label
        outside the model's classes (before any GPU work).

        Raises ValueError naming the input/output, its shape and what MNIST provides, or the
        split, index and value of the first bad label."""
        inp = self.graph.input
        per_sample = 1
        for d in inp["shape"][1:]:
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

    async def run(self):
        """Train, validate after each epoch on the held-out images, evaluate the test images at
        the end. Returns ``{"test_acc", "test_loss", "val_acc", "val_loss" (the last
        validation, None without one), "steps", "epochs_done" (steps / steps per epoch: 2,
        or 0.1257 for a run stopped at step 108 of an 859-step epoch), "stopped", "logits": bytes,
        "total_steps", "verdict", "reason"}`` (``verdict.verdict``). Raises TrainingDiverged
        when the loss or a gradient is not finite."""
        cfg, eng = self.cfg, self.engine
        batch, per_epoch, total = int(cfg["batch_size"]), self.per_epoch, self.total
        report = max(1, min(int(cfg["report_every"]), METRICS_RING // 2))
        self._start, self._first, self._read = time.perf_counter(), self.step, self.step
        self._paused_s = 0.0
        self._reported = self._start
        every = float(cfg.get("checkpoint_every_s") or 0)
        self._ckpt_at, self._ckpt_step = time.perf_counter(), self.step
        self.closed_step = self.step  # the step of the last epoch closed (validated)
        epoch, last_val = self.epoch, (None, None)
        while self.step < total and not self.stop_requested:
            perm = list(range(self.train_set.count))
            random.Random(int(cfg["seed"]) * 1000003 + epoch).shuffle(perm)
            eng.set_order(perm)
            self._sums, self._resumed_sums = self._resumed_sums or [0.0, 0.0, 0], None
            marks = self._validation_marks(epoch)
            for s in range(max(0, self.step - epoch * per_epoch), per_epoch):
                if self.paused and self.step < total:
                    await self._wait_while_paused(epoch)
                if self.step >= total or self.stop_requested:
                    break
                self.step = t = self.step + 1
                halt = await eng.step(t, s * batch, self.lr_at(t))
                # the first step at once, then every `report` steps or REPORT_S seconds; the
                # metrics come from the GPU's ring, read between steps
                if halt or t % report == 0 or t == total or s == per_epoch - 1 \
                        or t == self._first + 1 \
                        or time.perf_counter() - self._reported >= REPORT_S:
                    await self._report(epoch)
                if t in marks and not self.stop_requested:
                    await self._validate_part(epoch, marks[t])
                if every and s < per_epoch - 1 and t < total \
                        and time.perf_counter() - self._ckpt_at >= every:
                    await self._checkpoint(epoch)
            if self._read < self.step:  # stopped between two reports: report the steps done
                await self._report(epoch)
            if self.stop_requested and self.step < total:
                await self._checkpoint(epoch)  # Stop keeps the steps done
            epoch += 1
            last_val = await self._close_epoch(epoch) or last_val
        loss, acc, logits = await self.evaluate("test")
        self.n_eval = len(logits) // (4 * self.classes)  # fewer after ``skip_test``
        first = self._first_loss
        last = sum(self._last_losses) / len(self._last_losses) if self._last_losses else None
        judged = verdict(test_acc=acc, classes=self.classes, eval_images=self.n_eval,
                         first_loss=first, last_loss=last, steps=self.step, total_steps=total,
                         stopped=self.stop_requested and self.step < total,
                         lr=float(cfg["lr"]), optimizer=str(cfg["optimizer"]))
        return {"test_acc": acc, "test_loss": loss, "val_loss": last_val[0],
                "val_acc": last_val[1], "steps": self.step,
                "epochs_done": epochs_fraction(self.step, per_epoch),
                "stopped": self.stop_requested, "logits": logits, "total_steps": total,
                **judged}

    async def _report(self, epoch: int):
        """Read the metrics of the steps since the last report, stop on a non-finite one, add
        them to the epoch's sums and emit "progress" (images/s and ETA over this run)."""
        first = self._read + 1
        rows, bad_grad = await self.engine.metrics(first, self.step)
        out = []
        for t, (loss, acc) in enumerate(rows, first):
            if acc < 0:  # the loss kernel's flag: labels >= classes were ignored
                raise ValueError(f"step {t}: {int(-acc)} label(s) outside 0..{self.classes - 1}"
                                 " reached the loss (the kernel ignored them): the training "
                                 "data changed after it was checked; prepare it again")
            if not math.isfinite(loss) or (bad_grad and bad_grad[0] <= t):
                self._diverged(t, loss, bad_grad)
            out.append([t, loss, acc])
            self._sums[0] += loss
            self._sums[1] += acc
            self._sums[2] += 1
        if out and self._first_loss is None:
            self._first_loss = out[0][1]
        self._last_losses = (self._last_losses + [r[1] for r in out])[-LAST_STEPS:]
        self._read = self.step
        self._reported = now = time.perf_counter()
        elapsed = now - self._start - self._paused_s
        rate = (self.step - self._first) / elapsed if elapsed > 0 else 0.0
        self.emit("progress", step=self.step, total_steps=self.total, epoch=epoch + 1,
                  epochs=int(self.cfg["epochs"]), images_per_s=rate * int(self.cfg["batch_size"]),
                  eta_s=(self.total - self.step) / rate if rate else 0.0, losses=out,
                  lrs=[self.lr_at(t) for t, _, _ in out])

    def _diverged(self, t, loss, bad_grad):
        lr, opt = float(self.cfg["lr"]), str(self.cfg["optimizer"])
        if bad_grad:
            where = (f"first non-finite gradient at step {bad_grad[0]} in layer {bad_grad[2]} "
                     f"(parameter {bad_grad[1]})")
        else:
            where = "all gradients finite so far"
        what = f"loss is {loss}" if not math.isfinite(loss) else f"loss {loss:.4g}"
        step = min(t, bad_grad[0]) if bad_grad else t
        raise TrainingDiverged(
            f"training diverged at step {step}: {what} at step {t}; {where}. Try a lower "
            f"learning rate (now {lr:g} with {opt}, {lower_lr(lr, opt)}) or gradient clipping.",
            step=step, layer=bad_grad[2] if bad_grad else None)

    async def _close_epoch(self, epoch: int):
        """After epoch ``epoch`` (1-based): unless training stopped or the epoch is partial,
        validate on the held-out images (when there are any), emit "epoch" (with the epoch's
        mean train_loss / train_acc; val_loss / val_acc None without validation images) and
        await ``on_epoch``. Returns ``(val_loss, val_acc)``, or None when it did not
        validate."""
        if self.stop_requested or not (self.step % self.per_epoch == 0
                                       or self.step == self.total):
            return None
        loss = acc = None
        if self.val_set is not None:
            loss, acc, _ = await self.evaluate("validation")
        n = max(self._sums[2], 1)
        metrics = {"epoch": epoch, "step": self.step, "train_loss": self._sums[0] / n,
                   "train_acc": self._sums[1] / n, "val_loss": loss, "val_acc": acc}
        self.emit("epoch", **metrics)
        self.closed_step = self.step
        if self.on_epoch is not None:
            await self.on_epoch(epoch, self.step, metrics)
            self._ckpt_at, self._ckpt_step = time.perf_counter(), self.step
        return None if loss is None else (loss, acc)

    async def _checkpoint(self, epoch: int):
        """Inside epoch ``epoch`` (0-based), between two steps: report the steps not reported
        yet and await ``on_checkpoint(epoch + 1, step)`` (once per step)."""
        if self.on_checkpoint is None or self._ckpt_step >= self.step:
            return
        if self._read < self.step:
            await self._report(epoch)
        await self.on_checkpoint(epoch + 1, self.step)
        self._ckpt_at, self._ckpt_step = time.perf_counter(), self.step

    def run_state(self) -> dict:
        """What continues an epoch exactly besides the weights, the optimizer state and the
        step: the epoch's running sums (its train_loss / train_acc means) and the losses the
        verdict judges (JSON-ready; floats round-trip exactly)."""
        return {"epoch_sums": list(self._sums), "first_loss": self._first_loss,
                "last_losses": list(self._last_losses)}

    def restore_run_state(self, state: dict | None) -> None:
        """Continue from ``run_state()`` (None: a checkpoint without it) after ``step`` and
        ``epoch`` are set: the sums only when the step is inside an epoch."""
        if not state:
            return
        self._first_loss = state.get("first_loss")
        self._last_losses = [float(x) for x in state.get("last_losses") or []]
        sums = state.get("epoch_sums")
        if sums and self.step > self.epoch * self.per_epoch:
            self._resumed_sums = [float(sums[0]), float(sums[1]), int(sums[2])]

    def _validation_marks(self, epoch: int) -> dict:
        """``{step: images}``: the steps of epoch ``epoch`` (0-based) after which to validate on
        the first ``images`` held-out images (``val_points`` - 1 of them); empty without
        validation images."""
        if self.val_set is None or self.val_points <= 1:
            return {}
        start = epoch * self.per_epoch
        n = min(self.total, start + self.per_epoch) - start
        images = min(VAL_SUBSET, self.val_set.count,
                     max(VAL_MIN, n * int(self.cfg["batch_size"]) // 10))
        return {start + k * n // self.val_points: images for k in range(1, self.val_points)
                if 0 < k * n // self.val_points < n}

    async def _validate_part(self, epoch: int, images: int):
        """Validate on the first ``images`` held-out images inside an epoch; emit "validation"
        (``step``, ``epoch`` 1-based, ``images``, ``val_loss``, ``val_acc``)."""
        if self._read < self.step:
            await self._report(epoch)
        loss, acc, _ = await self.evaluate("validation", limit=images)
        self.emit("validation", step=self.step, epoch=epoch + 1, images=images, val_loss=loss,
                  val_acc=acc)

    async def evaluate(self, what: str = "test", limit: int | None = None):
        """Eval-mode forward over the split ``what``: "test" (the first ``eval_images`` test
        images) or "validation" (the held-out training images), in chunks of the engine's
        ``eval_chunk`` images, emitting "evaluating" ``{done, total, what}`` before the first
        and after each chunk.

        Returns ``(loss, accuracy, log-probabilities bytes [n, classes] float32)``: the loss is
        the configured loss with reduction "mean" (weighted mean with class weights) over the n
        images; the log-probabilities are the model's output when it ends in LogSoftmax, else
        log_softmax of it."""
        split = self.evals[what]
        n, c, chunk = split.count, self.classes, self.engine.eval_chunk
        n = n if limit is None else min(n, limit)
        labels, spec = split.labels_host, self.engine.loss_spec
        num, den, hits, raws = 0.0, 0.0, 0, []
        self.emit("evaluating", done=0, total=n, what=what)
        for lo in range(0, n, chunk):
            if lo and what == "test" and self.skip_test:
                n = lo
                break
            hi = min(n, lo + chunk)
            raw, rows = await self.engine.eval_outputs(what, lo, hi)
            raws.append(raw)
            vals = array("f")
            vals.frombytes(raw)
            lvals = vals
            if rows is not raw:
                lvals = array("f")
                lvals.frombytes(rows)
            for i in range(hi - lo):
                row = vals[i * c:(i + 1) * c]
                label = labels[lo + i]
                a, d = losses.host_terms(spec, lvals[i * c:(i + 1) * c], label)
                num += a
                den += d
                hits += max(range(c), key=row.__getitem__) == label
            self.emit("evaluating", done=hi, total=n, what=what)
        return (num / den if den else 0.0), hits / max(n, 1), b"".join(raws)

    async def profile(self, repeats: int = 2) -> list:
        """The GPU engine's per-dispatch timings of one training step (``GpuEngine.profile``)."""
        return await self.engine.profile(repeats)

    async def trained_weights(self) -> bytes:
        """The weights (params and running statistics) in the bundle's blob layout."""
        return await self.engine.read_weights(self.graph.weight_nbytes())
