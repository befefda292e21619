"""A run's checkpoint as the trainer sees it (standard library: the CLI's ``.ckpt`` files and the
browser's IndexedDB checkpoints both use it): the "weights" section (the engine's whole flat
weight buffer, plan layout, GPU and numpy alike), the "optimizer" section
(``optim.Optimizer.state_bytes``; ``cpu.optim`` writes the same format) and the header fields
that place the run (epoch, step, epochs completed, the RNG's description). Restoring them after
``Trainer.setup()`` continues the run exactly: the shuffle of an epoch and the dropout masks of
a step are functions of (seed, epoch) and (seed, step), so no generator state is saved."""

SHUFFLE = "random.Random(seed * 1000003 + epoch)"
DROPOUT = "philox4x32-10(key (seed, 0), counter (i / 4, node + 1, step, 1))"


async def optimizer_state(dev, opt) -> bytes:
    """The "optimizer" section: ``opt.state_bytes(dev)`` (the numpy optimizers of ``cpu.optim``
    write the same format and ignore ``dev``)."""
    return bytes(await opt.state_bytes(dev))


def load_optimizer_state(dev, opt, data: bytes) -> None:
    """Restore an "optimizer" section into the attached ``opt``; ValueError naming what differs
    (optimizer, state buffers, element count)."""
    opt.load_state_bytes(dev, data)


async def read_weights(trainer) -> bytes:
    """The "weights" section: the whole flat weight buffer of the trainer's engine (``wbytes``
    bytes, float32 little-endian, the GPU plan's layout on both engines)."""
    return await trainer.engine.read_weights()


def write_weights(trainer, blob: bytes, where="checkpoint") -> None:
    """Restore a "weights" section (written by either engine) into the trainer's engine;
    ValueError naming ``where`` when its size does not fit this model's layout."""
    try:
        trainer.engine.write_weights(bytes(blob))
    except ValueError:
        raise ValueError(f"{where}: weights do not fit this model's layout") from None


def header(trainer, epoch: int, step: int) -> dict:
    """The fields that place a checkpoint taken by ``on_epoch(epoch, step, ...)`` or
    ``on_checkpoint(epoch, step)``: ``epoch`` (1-based: the epoch just closed, or the one in
    progress), ``step`` (optimizer steps done), ``epochs_completed`` (whole epochs done: a
    ``max_steps`` stop, a timed checkpoint or Stop can be inside an epoch), ``rng`` (seed, the
    epoch whose shuffle comes next, how the shuffle and dropout derive from them) and
    ``run_state`` (``Trainer.run_state``: the epoch's running sums, the verdict's losses)."""
    seed, done = int(trainer.cfg["seed"]), step // trainer.per_epoch
    if done and step % trainer.per_epoch == 0 and getattr(trainer, "closed_step", step) < step:
        done -= 1  # Stop after an epoch's last step: resuming validates that epoch first
    return {"epoch": epoch, "step": step, "epochs_completed": done,
            "rng": {"seed": seed, "next_epoch": done, "shuffle": SHUFFLE, "dropout": DROPOUT},
            "run_state": trainer.run_state()}


async def capture(trainer) -> dict:
    """The sections ``{"weights": bytes, "optimizer": bytes}`` of the trainer's current state
    (call between steps: from ``on_epoch``, ``on_checkpoint`` or after ``run``)."""
    return {"weights": await read_weights(trainer),
            "optimizer": await optimizer_state(trainer.engine.dev, trainer.opt)}


def restore(trainer, head: dict, sections: dict, where: str = "checkpoint") -> None:
    """Continue from a checkpoint after ``trainer.setup()``: write the "weights" and
    "optimizer" sections, set ``trainer.epoch`` (epochs completed) and ``trainer.step`` and the
    header's ``run_state`` (a checkpoint inside an epoch continues it exactly).
    Raises ValueError naming ``where`` and what does not fit."""
    write_weights(trainer, sections["weights"], where)
    try:
        load_optimizer_state(trainer.engine.dev, trainer.opt, sections["optimizer"])
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    trainer.epoch = int(head.get("epochs_completed", head["epoch"]))
    trainer.step = int(head["step"])
    trainer.restore_run_state(head.get("run_state"))
