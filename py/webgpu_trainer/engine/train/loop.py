"""The training loop shared by the browser worker, the native CLI and both engines (standard
library only: it runs in Pyodide too).

``Trainer`` owns what a run means: epochs, the per-epoch shuffle (``random.Random(seed * 1000003
+ epoch)``), batches without replacement dropping the last incomplete one (BatchNorm needs full
batches), the learning-rate schedule per step, metrics, progress and ETA, validation at the end
of each epoch (and a few points inside it on part of the held-out images: ``evaluate.py``),
Stop, the divergence guard's verdict, the checkpoint hook (``on_epoch``) and the result. It
drives an *engine* (``engine.Engine``: ``GpuEngine`` or ``CpuEngine``), which owns the weights
and computes steps; the data side (splits, held-out images, checks) is ``data.py``.
"""

import asyncio
import math
import random
import time

from .. import config as run_config
from ..errors import UserError
from ..graph import Graph
from ..ops import losses
from ..plan import METRICS_RING
from . import augment, memory, schedulers
from .data import Split, check_fits, check_size, holdout, trainable_names
from .engine import Engine
from .evaluate import evaluate, validation_marks
from .verdict import LAST_STEPS, lower_lr, verdict

REPORT_S = 2.0  # progress reports at least this often (wall seconds), besides every report_every


class TrainingDiverged(UserError, RuntimeError):
    """The loss or a gradient became NaN or infinite; the message names the step and the first
    layer (graph order) with a non-finite gradient, and suggests a fix. ``step``, ``layer``."""

    def __init__(self, message, step=None, layer=None):
        super().__init__(message)
        self.step, self.layer = step, layer


def epochs_fraction(steps: int, per_epoch: int):
    """The epochs ``steps`` make: an int when whole, else rounded to 4 decimals."""
    q = steps / per_epoch if per_epoch else 0
    return int(q) if q == int(q) else round(q, 4)


class Trainer:
    """Trains ``graph`` (a model description) on ``train`` and evaluates on ``test``.

    ``engine``: an ``Engine`` (``GpuEngine(dev)`` or ``cpu.cpu_engine.CpuEngine()``).
    ``config``: a run configuration (``config.RunConfig`` or a dict of its fields, see
    ``engine/config``), checked by ``config.parse`` against the training images in
    ``setup`` (before any GPU work); ``self.cfg`` is then its ``trainer_config()``: optimizer,
    lr, batch_size, epochs, seed, init ("scratch" re-initialises with PyTorch's default init,
    "finetune" keeps the model's weights), momentum, weight_decay, optimizer_args (torch.optim
    keywords), clip_grad_norm, scheduler (``schedulers.make``'s spec), max_steps (0: no cap),
    eval_images (first N test images), report_every (steps between metric readbacks), loss
    (spec, see ``ops/losses.py``; "auto": NLLLoss after a final LogSoftmax, NLLLoss of
    log(output) after a final Softmax, else CrossEntropyLoss), trainable (None: every
    parameter; else the initializer names to train, the rest frozen: see
    ``data.trainable_names``).
    ``emit(kind, **fields)`` receives "status", "setup" (once, after ``setup``: ``memory_bytes``
    of the engine's GPU buffers, None on the CPU engine), "progress" (after step 1, then every
    ``report_every`` steps or ``REPORT_S`` seconds, whichever comes first; ``losses``: [step,
    loss, accuracy] rows, ``lrs``: the learning rate of each of those steps), "paused"
    (``paused``, ``step``), "evaluating" (``done``, ``total``, ``what``: after each chunk of an
    evaluation), "validation" (``step``, ``epoch``, ``images``, ``val_loss``, ``val_acc``: a
    point inside an epoch on the first held-out images when ``val_points`` > 1,
    ``evaluate.validation_marks``) and "epoch" events ("epoch": the epoch's last step, mean
    train_loss / train_acc and val_loss / val_acc of the held-out validation images, None
    without them).
    ``skip_test``: set True to end the final test evaluation after its current chunk (the
    result covers those images).
    ``pause()`` / ``resume()``: the loop waits between two steps while paused (Stop ends the
    wait); paused time does not count in images/s and the ETA. ``train`` is the whole training
    split: ``setup`` holds its last ``val_images`` out for validation (``data.holdout``).
    To continue a run, set ``epoch`` (epochs done)
    and ``step`` (steps done) and restore the weights (``engine.write_weights``) and optimizer
    state after ``setup()``; ``on_epoch`` (async, optional) is awaited after each epoch's
    validation with ``(epoch, step, metrics dict)``; ``on_checkpoint`` (async, optional) with
    ``(epoch in progress (1-based), step)`` inside an epoch, every ``checkpoint_every_s``
    seconds (0: never) and on Stop; ``run_state()`` then holds what continues the epoch.
    """

    def __init__(self, engine: Engine, graph: dict, weights: bytes, config: dict, train: Split,
                 test: Split, emit=None):
        self.engine = engine
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
        config, model that does not fit the dataset) or NotImplementedError (an op the engine
        lacks) before any training."""
        self.graph = Graph(self.desc)  # the model fits the data before any count check
        check_fits(self.graph, self.train_set.spec, self.train_set, self.test_set)
        self.cfg = cfg = run_config.parse(self.cfg, train_images=self.train_set.count) \
            .trainer_config()  # raises ConfigError naming every bad field
        eng, batch = self.engine, cfg["batch_size"]
        check_size(self.train_set.spec, {"training": self.train_set.count,
                                         "test": self.test_set.count}, eng.data_limit)
        augmentation = augment.resolve(cfg, self.graph, self.train_set.spec)
        # Raises ValueError naming the bad key / value, before any GPU work.
        losses.normalize(cfg["loss"], self.graph.shapes(2)[self.graph.output][1])
        trainable = trainable_names(self.desc, cfg.get("trainable"))
        self.memory = self._check_memory(cfg, trainable)
        self.emit("status", text="Compiling the training step…")
        seed = int(cfg["seed"])
        await eng.build(self.graph, batch, cfg["loss"], trainable, seed)
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
        self.emit("status", text=f"Loading {self.train_set.spec.title}…")
        eng.set_augment(augmentation)
        self.n_eval = min(int(cfg["eval_images"]), self.test_set.count)
        self.evals = {"test": self.test_set.part(0, self.n_eval)}
        if self.val_set is not None:
            self.evals["validation"] = self.val_set
        await eng.load_data(self.train_set, self.evals, self.train_set.spec.table())
        self.classes = eng.classes
        self.emit("setup", memory_bytes=eng.memory_bytes,
                  memory_estimate=self.memory and self.memory["bytes"])

    def _check_memory(self, cfg, trainable):
        """The training step's GPU memory estimate (``memory.estimate``) on a GPU engine, None
        on the CPU engine; raises ``memory.LimitError`` (a ValueError) naming the tensor and the
        limit when a buffer exceeds the device's binding or buffer size."""
        dev = getattr(self.engine, "dev", None)
        if dev is None:
            return None
        est = memory.estimate(self.desc, cfg["batch_size"], loss=cfg["loss"],
                              trainable=trainable, optimizer=cfg["optimizer"],
                              momentum=float(cfg["momentum"]),
                              optimizer_args=cfg.get("optimizer_args"), is_cpu=dev.is_cpu,
                              init=cfg["init"] == "scratch")
        memory.check(est, getattr(dev, "limits", None))
        return est

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
            marks = {} if self.val_set is None else validation_marks(
                epoch, per_epoch, total, self.val_set.count, batch, self.val_points)
            for s in range(max(0, self.step - epoch * per_epoch), per_epoch):
                if self.paused and self.step < total:
                    await self._wait_while_paused(epoch)
                if self.step >= total or self.stop_requested:
                    break
                self.step = t = self.step + 1
                halt = await eng.step(t, s * batch, self.lr_at(t))
                # the first step at once, then `report` steps after the last report (which
                # may have come at an epoch's end or after REPORT_S seconds) or REPORT_S
                # seconds; the metrics come from the GPU's ring, read between steps
                if halt or t - self._read >= report or t == total or s == per_epoch - 1 \
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
        # guessing among the dataset's classes (a 10-output model on 2 own classes: 50%)
        guess_classes = min(self.classes, len(self.train_set.spec.classes) or self.classes)
        judged = verdict(test_acc=acc, classes=guess_classes, eval_images=self.n_eval,
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

    async def _validate_part(self, epoch: int, images: int):
        """Validate on the first ``images`` held-out images inside an epoch; emit "validation"
        (``step``, ``epoch`` 1-based, ``images``, ``val_loss``, ``val_acc``)."""
        if self._read < self.step:
            await self._report(epoch)
        loss, acc, _ = await self.evaluate("validation", limit=images)
        self.emit("validation", step=self.step, epoch=epoch + 1, images=images, val_loss=loss,
                  val_acc=acc)

    async def evaluate(self, what: str = "test", limit: int | None = None):
        """``evaluate.evaluate`` of the split ``what``: "test" (the first ``eval_images`` test
        images; ``skip_test`` ends it after the current chunk) or "validation" (the held-out
        training images); ``limit``: the first images only. Returns ``(loss, accuracy,
        log-probabilities bytes [n, classes] float32)``."""
        return await evaluate(self.engine, self.evals[what], what, self.classes, self.emit,
                              limit, lambda: self.skip_test)

    async def profile(self) -> list:
        """The GPU engine's per-dispatch timings of one training step (``GpuEngine.profile``).
        It changes the weights and the optimizer's state: profile a run set up for it, not
        one in progress."""
        return await self.engine.profile()

    async def trained_weights(self) -> bytes:
        """The weights (params and running statistics) in the bundle's blob layout."""
        return await self.engine.read_weights(self.graph.weight_nbytes())
