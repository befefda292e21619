"""The Web Worker's Python side: messages in (start, stop, pause, resume, skip_test, profile,
bench, parity, selfcheck, convolve, browser_storage.py's snapshot, debug_lose_device and
browser_inspect.py's inspect, predict, prepare), messages out (see docs/ARCHITECTURE.md,
"Worker protocol"). Runs only in Pyodide."""

import asyncio
import json
import traceback

import js
from pyodide.ffi import to_js

from . import browser_inspect, browser_kernels, browser_storage, config as run_config
from .backends import get_device
from .backends.webgpu_js import NoWebGPU
from .gpu_engine import GpuEngine
from .train import VAL_POINTS, Split, Trainer, TrainingDiverged

# "last": {"trainer", "model", "untrained"} of the latest run once set up (or of `prepare`:
# untrained), kept after `done` for the live views (browser_inspect.py); "runs": how many
# `start`s this worker had (a `prepare` set up after a `start` does not replace its model);
# "prepare_id": the latest `prepare`'s id
STATE = {"device": None, "trainer": None, "stop": False, "pause": False, "selfcheck": None,
         "model": None, "last": None, "runs": 0, "prepare_id": None}


def post(kind: str, **fields):
    """postMessage({type: kind, ...fields}) to the page."""
    js.postMessage(to_js({"type": kind, **fields}, dict_converter=js.Object.fromEntries))


def _bytes_to_js(data: bytes):
    arr = js.Uint8Array.new(len(data))
    arr.assign(data)
    return arr.buffer


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
    browser_storage.watch_device(dev)
    post("adapter", info=dev.info)
    post("ready")


def _nulls_to_none(value):
    """JS null arrives as pyodide's JsNull (not None) in recent Pyodide: map it to None."""
    if isinstance(value, dict):
        return {k: _nulls_to_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nulls_to_none(v) for v in value]
    return None if type(value).__name__ == "JsNull" else value


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
    STATE["runs"] += 1
    return asyncio.ensure_future(_run(data.get("config") or {}, data.get("model"),
                                      resume=data.get("resume")))


def _pause(paused: bool):
    """Pause / Resume between two steps: also before the trainer exists (applied when it
    does); the trainer answers with ``paused``."""
    STATE["pause"] = paused
    trainer = STATE["trainer"]
    if trainer is not None:
        trainer.pause() if paused else trainer.resume()


# message type -> handler(data: dict); a feature's messages live in its own module and are
# registered here with one line each (see docs/ARCHITECTURE.md, "Worker protocol")
HANDLERS = {
    "stop": _stop,
    "pause": lambda d: _pause(True),
    "resume": lambda d: _pause(False),
    "skip_test": _skip_test,
    "start": _start,
    "prepare": lambda d: asyncio.ensure_future(browser_inspect.prepare(d, STATE, post)),
    "profile": lambda d: asyncio.ensure_future(_run(d.get("config") or {}, d.get("model"),
                                                    then=_profile)),
    "bench": lambda d: asyncio.ensure_future(_run(d.get("config") or {}, d.get("model"),
                                                  then=_bench(d))),
    "parity": lambda d: asyncio.ensure_future(_parity(d.get("cases") or "[]")),
    "selfcheck": lambda d: asyncio.ensure_future(_selfcheck()),
    "convolve": lambda d: asyncio.ensure_future(browser_kernels.convolve(d, STATE, post)),
    **browser_storage.HANDLERS,  # snapshot, debug_lose_device (keep your work)
    "inspect": lambda d: asyncio.ensure_future(browser_inspect.inspect(d, STATE, post)),
    "predict": lambda d: asyncio.ensure_future(browser_inspect.predict(d, STATE, post)),
}


def handle(msg):
    """Entry for every message from the page (a JS object): dispatched through HANDLERS."""
    data = _nulls_to_none(msg.to_py())
    handler = HANDLERS.get(data.get("type"))
    if handler is None:
        post("error", message=f"unknown message type {data.get('type')!r} sent to the worker")
        return
    handler(data)


async def _parity(cases_json: str):
    """Run the op/optimizer cases of ``parity.py`` (a JSON list) and post ``parity {results}``
    (a JSON list), for web/parity.html."""
    from . import parity
    dev = STATE["device"]
    if dev is None:
        post("no_webgpu", message="no WebGPU device")
        return
    try:
        results = await parity.run_cases(dev, json.loads(cases_json))
        post("parity", results=json.dumps(results))
    except Exception as exc:
        traceback.print_exc()
        post("error", message=f"{type(exc).__name__}: {exc}")


async def _selfcheck():
    """The GPU self-check (selfcheck.py) on this adapter, once per worker: posts
    ``selfcheck {ok, wrong, rows, seconds, adapter}``; the page warns when ``ok`` is false
    (training stays allowed)."""
    if STATE["selfcheck"] is None:
        from . import selfcheck
        if STATE["device"] is None:
            return
        post("status", text="Checking this GPU's results (self-check)…")
        try:
            STATE["selfcheck"] = await selfcheck.run(STATE["device"])
        except Exception as exc:  # the reference file missing from the wheel, ...
            traceback.print_exc()
            STATE["selfcheck"] = {"ok": False, "wrong": [f"self-check: {exc}"], "rows": [],
                                  "seconds": 0.0, "adapter": STATE["device"].info}
    post("selfcheck", **STATE["selfcheck"])


async def _fetch(url: str, what: str):
    resp = await js.fetch(url)
    if not resp.ok:
        text = await resp.text()
        raise RuntimeError(f"{what}: HTTP {resp.status} from {url}: {text[:200]}")
    return resp


async def _split(manifest: dict, name: str, keep: int = 0) -> Split:
    """The split ``name`` of the manifest; ``keep`` > 0: its first ``keep`` images only."""
    s = manifest["splits"][name]
    images = await (await _fetch(f"/data/mnist/{s['images']['file']}", f"{name} images")
                    ).arrayBuffer()
    labels = await (await _fetch(f"/data/mnist/{s['labels']['file']}", f"{name} labels")
                    ).arrayBuffer()
    pixels = 1
    for d in s["images"]["shape"][1:]:
        pixels *= d
    count = s["count"]
    if 0 < keep < count:
        images, labels, count = images.slice(0, keep * pixels), labels.slice(0, keep), keep
    return Split(images, labels, count, js.Uint8Array.new(labels).to_bytes(), pixels)


async def _profile(trainer):
    post("profile", rows=await trainer.profile())


def _bench(data: dict):
    """``bench {steps, warmup, profile}``: time training steps (engine/browser_bench.py)."""
    async def then(trainer):
        from . import browser_bench
        post("bench", **await browser_bench.bench(trainer, STATE["device"], data))
    return then


async def load(cfg: dict, model: str, say) -> tuple:
    """``(config, graph, weights, train split, test split)`` of a run of ``model``: the config
    checked (``run_config.parse``: ConfigError), the model and MNIST fetched; ``say(kind,
    **fields)`` gets the status lines."""
    manifest = json.loads(await (await _fetch("/data/mnist/manifest.json", "manifest")).text())
    # the page checked it with the server; checked again here, with the same code
    cfg = run_config.parse(cfg, train_images=manifest["splits"]["train"]["count"])
    say("status", text=f"Loading model {model}…")
    graph = json.loads(await (await _fetch(f"/api/models/{model}/graph.json", "model")).text())
    weights = js.Uint8Array.new(await (await _fetch(f"/api/models/{model}/weights.bin",
                                                    "weights")).arrayBuffer()).to_bytes()
    say("status", text="Loading MNIST shards…")
    train = await _split(manifest, "train")  # the trainer holds out the validation images
    test = await _split(manifest, "test")
    return cfg, graph, weights, train, test


async def _run(cfg: dict, model=None, then=None, resume: dict | None = None):
    """Load the model and data, set up a Trainer and train, or, with ``then``, only
    ``await then(trainer)`` (profile, bench); ``resume``: continue from the page's stored
    checkpoint (``browser_storage.restore``). Posts progress, epoch, checkpoint, done or error
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
    try:
        cfg, graph, weights, train, test = await load(cfg, model, post)
        trainer = Trainer(GpuEngine(dev), graph, weights, cfg, train, test,
                          emit=lambda kind, **kw: post(kind, **kw))
        STATE["trainer"] = trainer
        trainer.val_points = VAL_POINTS  # validation points inside each epoch (the chart)
        trainer.stop_requested = STATE["stop"]
        if STATE["pause"]:
            trainer.pause()
        await trainer.setup()
        if then is not None:
            await then(trainer)
            return
        STATE["last"] = {"trainer": trainer, "model": model,  # for inspect / predict
                         "untrained": False}
        if resume:
            browser_storage.restore(trainer, resume)
            post("status", text=f"Resuming from epoch {trainer.epoch}, step {trainer.step}…")
        trainer.on_epoch = trainer.on_checkpoint = browser_storage.checkpoint_hook(
            trainer, model, cfg.to_json())
        post("status", text="Training…")
        result = await trainer.run()
        trained = await trainer.trained_weights()
        logits = js.Float32Array.new(_bytes_to_js(result.pop("logits")))
        post("done", model=model, weights=_bytes_to_js(trained), logits=logits,
             labels=js.Uint8Array.new(_bytes_to_js(test.labels_host[:trainer.n_eval])),
             eval_images=trainer.n_eval, **result)
    except run_config.ConfigError as exc:
        post("error", message=f"Bad settings: {exc}", fields=[list(e) for e in exc.errors])
    except TrainingDiverged as exc:
        post("error", message=str(exc))
    except Exception as exc:
        traceback.print_exc()
        if not await browser_storage.lost_during(dev, exc):  # else device_lost said it
            post("error", message=f"{type(exc).__name__}: {exc}")
    finally:
        STATE["trainer"] = None
