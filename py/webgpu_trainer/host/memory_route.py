"""``GET /api/models/{name}/memory``: the GPU memory of training model ``name`` at a batch, and
the largest batch within an adapter's buffer limits, before any work (the page's summary card;
``engine/train/memory.py`` counts the plan's own buffers, so the figure is what a run makes).

Query: ``batch`` (required: a batch size the run settings take, the schema's ``batch_size``
range, 2-65,536), ``optimizer`` (one of the run config's, default adam;
sgd is counted without momentum), ``max_storage_buffer_binding_size`` and ``max_buffer_size``
(the adapter's limits in bytes, optional; without them there is no largest batch). Answer:
``{"batch", "bytes", "parts": {part: bytes}, "largest": {"name", "bytes"}, "problems":
[str] (the limits the batch exceeds), "max_batch": int or None}``; a batch too large for the
kernels' 32-bit offsets is such an answer too: ``bytes`` null, ``parts`` {}, ``largest`` the
tensor, its one problem naming the batch, tensor and bytes. 400 naming the parameter
for a value out of its rule (``batch`` not a whole number), 422 for a batch the run settings
refuse (naming ``batch_size`` and its range: before, batch 1 was counted) and for a model the
engine cannot plan, 404 for an unknown model.
One count runs at a time (a plan build holds the GIL; ~1 s for a large model's largest batch),
answers are cached by file, optimizer and batch or limits.
"""
from __future__ import annotations

import threading

from starlette.requests import Request
from starlette.responses import JSONResponse

from .dataset_routes import check_query
from .errors import ApiError

LIMITS = ("max_storage_buffer_binding_size", "max_buffer_size")
QUERY = ("batch", "optimizer", *LIMITS)
MAX_LIMIT = 1 << 53  # bytes: beyond any adapter, within a float's integers
CACHED = 256  # answers kept (a largest batch is up to ~32 plan builds, an estimate one)


def _shown(text: str) -> str:
    return ascii(text[:24]) + ("..." if len(text) > 24 else "")


def _batch(q) -> int:
    """The query's ``batch``: ApiError 400 when absent or not a whole number (plain ASCII
    digits, as ``_int``), 422 when outside the run settings' range (the config schema's
    ``batch_size`` bounds: a batch a run refuses is not counted)."""
    from ..engine.config import BY_NAME
    from ..engine.config.schema import describe
    text = q.get("batch")
    if text is None:
        raise ApiError(400, "batch is required: the batch size to count the memory at")
    if not (text.isascii() and text.isdigit()):
        raise ApiError(400, f"batch must be a whole number, got {_shown(text)}")
    field = BY_NAME["batch_size"]
    if len(text) > 20 or not field.min <= int(text) <= field.max:
        raise ApiError(422, f"batch: must be {describe(field)} (the run settings' "
                            f"{field.name}), got {_shown(text)}")
    return int(text)


def _int(q, key: str, lo: int, hi: int):
    """The query's ``key`` as an int in [lo, hi], None when absent; ApiError 400 naming the key,
    the rule and the value (cut) otherwise. Plain ASCII digits only: no sign, no spaces, no
    exponent, no other script's digits."""
    text = q.get(key)
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()) or len(text) > 20 or not lo <= int(text) <= hi:
        raise ApiError(400, f"{key} must be a whole number from {lo:,} to {hi:,}, got "
                            f"{_shown(text)}")
    return int(text)


def memory_handler(models):
    """The route's handler over ``models`` (``ModelRoutes``: ``bundle``, ``path``)."""
    from ..engine.config import OPTIMIZERS
    from ..engine.train import memory
    cache: dict = {}  # (file, optimizer, limits) -> largest batch; (file, optimizer, batch) -> est
    lock = threading.Lock()
    work = threading.Semaphore(1)  # one count at a time: a client cannot take every core

    def cached(key, make):
        with lock:
            if key in cache:
                return cache[key]
        with work:
            value = make()
        with lock:
            if len(cache) >= CACHED:
                cache.pop(next(iter(cache)))
            cache[key] = value
        return value

    def handler(request: Request) -> JSONResponse:  # sync: Starlette runs it in a thread
        from ..engine.graph import GraphError
        q = request.query_params
        check_query(q, QUERY, "GET /api/models/{name}/memory")
        batch = _batch(q)
        optimizer = q.get("optimizer", "adam")
        if optimizer not in OPTIMIZERS:
            raise ApiError(400, f"optimizer must be one of {', '.join(OPTIMIZERS)}, got "
                                f"{ascii(optimizer[:24])}")
        limits = {k: v for k in LIMITS if (v := _int(q, k, 1, MAX_LIMIT)) is not None}
        path = models.path(request.path_params["name"])
        graph, _ = models.bundle(path)
        file = (str(path), path.stat().st_mtime_ns, optimizer)
        def count():  # a batch too large for 32-bit offsets: a "does not fit" answer
            try:
                est = memory.estimate(graph, batch, optimizer=optimizer)
            except memory.LimitError as exc:
                if exc.problem is None:
                    raise
                return {"bytes": None, "parts": {}, "largest": exc.largest,
                        "problems": [exc.problem]}
            return {"bytes": est["bytes"], "parts": est["parts"], "largest": est["largest"],
                    "problems": None}
        try:
            est = dict(cached((*file, "batch", batch), count))
            if est["problems"] is None:
                est["problems"] = memory.problems({**est, "batch": batch}, limits)
            top = cached((*file, "limits", tuple(sorted(limits.items()))),
                         lambda: memory.largest_batch(graph, limits, optimizer=optimizer)) \
                if limits else None
        except (GraphError, NotImplementedError, ValueError) as exc:
            raise ApiError(422, f"{path.name}: {exc}") from None
        return JSONResponse({"batch": batch, **est, "max_batch": top},
                            headers={"Cache-Control": "no-cache"})
    return handler
