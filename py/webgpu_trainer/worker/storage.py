"""Keep your work, the worker's side (Pyodide only; the page's side is web/storage.js): the
checkpoint posted after every epoch (and inside one: by time and on Stop), resuming a run from
one, the current weights on request (``snapshot``), the GPU device's loss (``device_lost``) and
the test hooks (``debug_lose_device``, ``debug_gpu_error``).

The checkpoint's sections and header are ``engine/train/checkpoint.py``'s, the same as the CLI's
``.ckpt`` files: ``weights`` (the engine's flat weight buffer) and ``optimizer``
(``Optimizer.state_bytes``), sent as ArrayBuffers transferred to the page."""

import asyncio
import traceback

from ..engine.errors import user_message
from ..engine.train import checkpoint
from ..engine.train.loop import epochs_fraction
from .bridge import STATE, on_settled, post, post_transfer, test_hooks_allowed, to_bytes

LOST_WAIT_S = 2.0  # after a GPU error: how long to wait for the device's `lost` to settle


def checkpoint_hook(trainer, model: str, config: dict):
    """The trainer's ``on_epoch`` and ``on_checkpoint`` (inside an epoch: every
    ``checkpoint_every_s`` and on Stop): posts ``checkpoint {model, config, epoch, step,
    epochs_completed, rng, run_state, metrics (None inside an epoch), total_steps, weights,
    optimizer}`` (the two sections as transferred ArrayBuffers)."""
    async def on_epoch(epoch, step, metrics=None):
        sections = await checkpoint.capture(trainer)
        post_transfer("checkpoint", sections, model=model, config=config,
                      total_steps=trainer.total, metrics=metrics,
                      **checkpoint.header(trainer, epoch, step))
    return on_epoch


def restore(trainer, resume: dict) -> None:
    """Continue from the page's stored checkpoint ``resume`` ({epoch, step, epochs_completed,
    run_state, weights, optimizer}) after ``trainer.setup()``. ValueError naming what does not
    fit."""
    sections = {"weights": to_bytes(resume["weights"]),
                "optimizer": to_bytes(resume["optimizer"])}
    checkpoint.restore(trainer, resume, sections, "the saved checkpoint")
    if trainer.step >= trainer.total:
        raise ValueError(f"the saved checkpoint is at step {trainer.step}, the end of this run "
                         f"({trainer.total} steps): nothing left to train")


def watch_device(dev) -> None:
    """Post ``device_lost {reason, message}`` when the WebGPU device is lost (driver reset, the
    machine sleeping, ``destroy()``); ``dev.lost`` then holds ``(reason, message)``."""
    dev.lost, dev.lost_event = None, asyncio.Event()

    def on_lost(info):
        dev.lost = (str(info.reason), str(info.message))
        dev.lost_event.set()
        post("device_lost", reason=dev.lost[0], message=dev.lost[1])

    on_settled(dev.device.lost, on_lost)


async def lost_during(dev, exc) -> bool:
    """After ``exc`` ended a run: True when the device was lost (``device_lost`` is posted then,
    so the run's error is not worth a second message). A JavaScript error (a failed
    ``mapAsync``, ...) waits up to ``LOST_WAIT_S`` for the device's ``lost`` to settle."""
    if getattr(dev, "lost_event", None) is None:
        return False
    if dev.lost is not None:
        return True
    if type(exc).__name__ != "JsException":
        return False
    try:
        await asyncio.wait_for(dev.lost_event.wait(), LOST_WAIT_S)
    except asyncio.TimeoutError:
        return False
    return True


async def _snapshot(data):
    """``snapshot``: the running trainer's current weights (bundle layout, what the export
    route takes) as ``snapshot {weights, model, step, epoch, epochs_done}`` (``epoch``: whole
    epochs done; ``epochs_done``: steps / steps per epoch, the export's metadata), or
    ``snapshot {error}``."""
    trainer = STATE["trainer"]
    if trainer is None or getattr(trainer, "opt", None) is None:
        post("snapshot", error="no training run is in progress (the weights of a finished "
                               "run are downloaded from its results)")
        return
    try:
        weights = await trainer.trained_weights()
    except Exception as exc:
        traceback.print_exc()
        post("snapshot", error=user_message(exc))
        return
    post_transfer("snapshot", {"weights": weights}, model=STATE.get("model"),
                  step=trainer.step, epoch=trainer.step // max(trainer.per_epoch, 1),
                  epochs_done=epochs_fraction(trainer.step, trainer.per_epoch))


def _lose_device(data):
    """``debug_lose_device``: destroy the GPU device, as a driver reset would lose it. Accepted
    only from a worker started with ``?test=1`` (the page does that when its own URL has it)."""
    if not test_hooks_allowed():
        post("error", message="debug_lose_device is a test hook (open the page with ?test=1)")
        return
    STATE["device"].device.destroy()


def _gpu_error(data):
    """``debug_gpu_error``: an uncaptured WebGPU validation error on the device (webgpu_js
    ``provoke_validation_error``): the run in progress fails with it at its next submit, the
    next run (which clears the device's errors as it starts) must not. Accepted only from a
    worker started with ``?test=1``."""
    if not test_hooks_allowed():
        post("error", message="debug_gpu_error is a test hook (open the page with ?test=1)")
        return
    STATE["device"].provoke_validation_error()


HANDLERS = {
    "snapshot": _snapshot,
    "debug_lose_device": _lose_device,
    "debug_gpu_error": _gpu_error,
}
