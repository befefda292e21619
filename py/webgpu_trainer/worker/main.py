"""The Web Worker's Python entry (web/worker.js imports this module and calls ``boot`` once,
then ``handle`` for every message from the page). Messages in: start, stop, pause, resume,
skip_test, profile, bench, parity, selfcheck (here), snapshot, debug_lose_device and
debug_gpu_error (storage.py), inspect, predict and prepare (views.py), convolve (kernels.py);
messages out: see docs/ARCHITECTURE.md, "Worker protocol". Runs only in Pyodide.

One handler convention: each module has ``HANDLERS``, message type -> ``handler(data: dict)``;
it acts at once (stop, pause), and an awaitable it returns (a coroutine function's) runs as a
task of its own.
Handlers share the worker's state through ``bridge.STATE`` and answer through ``bridge.post``.
"""

import asyncio
import inspect
import json
import traceback

from ..engine import config as run_config
from ..engine.backends import get_device
from ..engine.backends.webgpu_js import NoWebGPU
from ..engine.errors import user_message
from ..engine.tools import parity, selfcheck
from ..engine.train.evaluate import VAL_POINTS
from ..engine.train.loop import Trainer, TrainingDiverged
from . import bench, kernels, storage, views
from .bridge import STATE, array_buffer, float32_array, nulls_to_none, post, uint8_array
from .load import ModelGone, engine, load


async def boot():
    """Find the GPU; post ``adapter`` and ``ready``, or ``no_webgpu``."""
    try:
        dev = await get_device()
    except NoWebGPU as exc:
        post("no_webgpu", message=str(exc))
        return
    except Exception as exc:  # adapter found but device creation failed
        post("no_webgpu", message=f"WebGPU device creation failed: {exc}")
        return
    STATE["device"] = dev
    storage.watch_device(dev)
    post("adapter", info=dev.info)
    post("ready")


def _stop(data):
    """Stop: also before the trainer exists (model and data still loading)."""
    STATE["stop"] = True
    if STATE["trainer"] is not None:
        STATE["trainer"].stop_requested = True


def _skip_test(data):
    """Stop evaluating: the final test evaluation ends after its current chunk."""
    if STATE["trainer"] is not None:
        STATE["trainer"].skip_test = True


def _start(data):
    """Count the run at once (a ``prepare`` answered later must not replace its model), then
    train as a task."""
    STATE["runs"] += 1
    return _run(data.get("config") or {}, data.get("model"), resume=data.get("resume"))


def _pause(paused: bool):
    """Pause / Resume between two steps: also before the trainer exists (applied when it
    does); the trainer answers with ``paused``."""
    STATE["pause"] = paused
    trainer = STATE["trainer"]
    if trainer is not None:
        trainer.pause() if paused else trainer.resume()


async def _parity(data):
    """Run the op/optimizer cases ``cases`` (``parity.py``'s, a JSON list) and post ``parity
    {results}`` (a JSON list), for web/parity.html."""
    dev = STATE["device"]
    if dev is None:
        post("no_webgpu", message="no WebGPU device")
        return
    try:
        results = await parity.run_cases(dev, json.loads(data.get("cases") or "[]"))
        post("parity", results=json.dumps(results))
    except Exception as exc:
        traceback.print_exc()
        post("error", message=user_message(exc))


async def _selfcheck(data=None):
    """The GPU self-check (selfcheck.py) on this adapter, once per worker: posts
    ``selfcheck {ok, wrong, rows, seconds, adapter}``; the page warns when ``ok`` is false
    (training stays allowed)."""
    if STATE["selfcheck"] is None:
        if STATE["device"] is None:
            return
        post("status", text="Checking this GPU's results (self-check)…")
        STATE["device"].clear_errors()  # judged by its own errors (webgpu_js.Device)
        try:
            STATE["selfcheck"] = await selfcheck.run(STATE["device"])
        except Exception as exc:  # the reference file missing from the wheel, ...
            traceback.print_exc()
            STATE["selfcheck"] = {"ok": False, "wrong": [f"self-check: {user_message(exc)}"],
                                  "rows": [], "seconds": 0.0, "adapter": STATE["device"].info}
    post("selfcheck", **STATE["selfcheck"])


async def _profile(data):
    """``profile {model, config}``: set the run up, post ``profile {rows}`` (the per-dispatch
    timings of one step) instead of training."""
    async def then(trainer):
        post("profile", rows=await trainer.profile())
    await _run(data.get("config") or {}, data.get("model"), then=then)


async def _bench(data):
    """``bench {model, config, steps, warmup, host, profile, gemm}``: set the run up, post
    ``bench {...}`` (bench.py: training steps timed) instead of training."""
    async def then(trainer):
        post("bench", **await bench.bench(trainer, STATE["device"], data))
    await _run(data.get("config") or {}, data.get("model"), then=then)


# message type -> handler(data: dict) -> None or an awaitable (run as a task of its own); a
# feature's messages live in its own module's HANDLERS (see docs/ARCHITECTURE.md, "Worker
# protocol")
HANDLERS = {
    "stop": _stop,
    "pause": lambda d: _pause(True),
    "resume": lambda d: _pause(False),
    "skip_test": _skip_test,
    "start": _start,
    "profile": _profile,
    "bench": _bench,
    "parity": _parity,
    "selfcheck": _selfcheck,
    **kernels.HANDLERS,  # convolve (the kernels playground)
    **storage.HANDLERS,  # snapshot, debug_lose_device, debug_gpu_error (keep your work)
    **views.HANDLERS,  # inspect, predict, prepare, test_images (the live views)
}


def handle(msg):
    """Entry for every message from the page (a JS object): dispatched through HANDLERS."""
    data = nulls_to_none(msg.to_py())
    handler = HANDLERS.get(data.get("type"))
    if handler is None:
        post("error", message=f"unknown message type {data.get('type')!r} sent to the worker")
        return
    result = handler(data)
    if inspect.isawaitable(result):
        asyncio.ensure_future(result)


async def _run(cfg: dict, model=None, then=None, resume: dict | None = None):
    """Load the model and data, set up a Trainer and train, or, with ``then``, only
    ``await then(trainer)`` (profile, bench); ``resume``: continue from the page's stored
    checkpoint (``storage.restore``). Posts progress, epoch, checkpoint, done or error
    (none after ``device_lost``)."""
    dev = STATE["device"]
    if dev is None:
        post("no_webgpu", message="no WebGPU device")
        return
    cfg = dict(cfg)
    model = cfg.pop("model", None) or model or "seednet"  # config.model: classroom's pin
    STATE["model"] = model
    STATE["stop"] = STATE["pause"] = False
    if STATE["selfcheck"] is None:
        await _selfcheck()
    dev.clear_errors()  # a run fails on errors reported during it, not on earlier ones
    try:
        cfg, graph, weights, train, test = await load(cfg, model, post)
        trainer = Trainer(engine(dev), graph, weights, cfg, train, test,
                          emit=lambda kind, **kw: post(kind, **kw))
        STATE["trainer"] = trainer
        trainer.val_points = VAL_POINTS  # validation points inside each epoch (the chart)
        trainer.stop_requested = STATE["stop"]
        if STATE["pause"]:
            trainer.pause()
        await trainer.setup()
        if then is not None:
            await then(trainer)
            dev.check_errors()  # an error of its last submits fails it (cleared below)
            return
        STATE["last"] = {"trainer": trainer, "model": model,  # for inspect / predict
                         "untrained": False}
        if resume:
            storage.restore(trainer, resume)
            post("status", text=f"Resuming from epoch {trainer.epoch}, step {trainer.step}…")
        trainer.on_epoch = trainer.on_checkpoint = storage.checkpoint_hook(
            trainer, model, cfg.to_json())
        post("status", text="Training…")
        result = await trainer.run()
        trained = await trainer.trained_weights()
        dev.check_errors()  # an error of the last submits fails the run (cleared below)
        logits = float32_array(result.pop("logits"))
        post("done", model=model, weights=array_buffer(trained), logits=logits,
             labels=uint8_array(test.labels_host[:trainer.n_eval]),
             eval_images=trainer.n_eval, **result)
    except run_config.ConfigError as exc:
        post("error", message=f"Bad settings: {exc}", fields=[list(e) for e in exc.errors])
    except TrainingDiverged as exc:
        post("error", message=str(exc))
    except ModelGone as exc:  # the page says it (a resume keeps its checkpoint)
        post("error", message=str(exc), model_gone=exc.model)
    except Exception as exc:
        traceback.print_exc()
        if not await storage.lost_during(dev, exc):  # else device_lost said it
            post("error", message=user_message(exc))
    finally:
        STATE["trainer"] = None
        # its errors were this run's (checked after its last read, reported above when it
        # failed): later probes between runs do not fail on them (webgpu_js.Device)
        dev.clear_errors()
