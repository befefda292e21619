"""The worker's live views of the model (issue 10): ``inspect`` (the first conv layer's filters,
feature maps of one test image per conv layer, per-parameter weight and gradient norms) and
``predict`` (class probabilities of a drawn image or of a test image), answered from the
current run's engine while it trains, or the last run's after it finished (``STATE["last"]``,
set by main.py), or before any run the model ``prepare`` set up with its initial weights.
Each answer is its own GPU submits between two training steps (``GpuEngine.probe`` /
``norms``); nothing of the training changes. Runs only in Pyodide.

Messages (docs/ARCHITECTURE.md, "Worker protocol"); ``values`` are Float32Arrays:

- ``inspect {id, index}`` -> ``inspect {id, index, label, model, step, ms, filters: {name,
  shape, values, layout: "filters" | "rows", image?, of?} | null, first: {op, node, text} |
  null, maps: [{layer, name, shape, values}], attention: {layer, name, heads, tokens, values,
  grid, first} | null, norms: [{name, layer, numel, weight, grad}], image: Uint8Array (the
  test sample as the worker holds it; null for a table), sample_shape, count}``, or
  ``inspect {id, error}``. ``first.text`` says in words what the views show of the first
  weighted layer (a Conv's kernels, a Linear's weight rows as images, or why there is no
  image view); ``attention``: the first attention layer's softmax(QK^T) of the test image,
  averaged over heads ([T, T] row-major, rows sum to 1), ``grid`` the patch grid of tokens
  ``first``.. (engine/train/probe.py); the page draws the test image from ``image``, never
  fetching the dataset again;
- ``predict {id, values | index}`` -> ``prediction {id, probs: [classes], classes: [names],
  index, label, model, step, ms}``, or ``prediction {id, error}``; ``values``: one sample of
  the run's dataset, ``DataSpec.values`` numbers (images: uint8 0..255 in [C, H, W] order,
  e.g. 784 for MNIST, 3072 for CIFAR-10; tables: float32 features); ``pixels`` is read as
  ``values`` (the name of earlier pages); ``classes`` the dataset's class names;
- ``test_images {id, indices}`` -> ``test_images {id, indices, dataset, title, dataset_kind,
  count, sample_shape, classes, labels: [one per index], images: Uint8Array (the samples' bytes
  one after the other, as the worker holds them)}`` or ``test_images {id, error, pending?,
  count?}`` (``count``: the test split's size, when the error is the request's):
  at most ``MAX_TEST_IMAGES`` samples of the test split the worker already holds (the
  Kernels tab, Try it and the Results' wrong guesses draw them: the page never fetches the
  split a second time);
- the answers of ``inspect`` and ``predict`` carry ``untrained`` (true: the model ``prepare``
  set up, never trained); while a run's model is being set up they (and ``test_images``) are
  ``{id, error, pending: true}`` (ask again soon);
- ``prepare {id, model, config}`` -> ``prepared {id, model, error?}``: set up
  ``model`` with the initial weights of ``config`` (its init and seed) without training
  (``STATE["last"]`` unless a run started meanwhile).
"""

import math
import time
from array import array

from ..engine.errors import user_message
from ..engine.train.loop import Trainer
from ..engine.train.probe import (
    LOGP,
    SHOWN_ROWS,
    attention_softmax,
    biases_before_norm,
    feature_maps,
    first_layer,
    head_mean,
    patch_grid,
    weight_rows,
    with_height,
)
from .bridge import STATE, float32_array, post, to_bytes, uint8_array
from .load import engine, load

NO_MODEL = "No model yet: open this tab again, or press Start (the views show the model " \
    "being trained)."
MAX_TEST_IMAGES = 256  # samples of one test_images answer
SETTING_UP = "Setting up the run's model (compiling the training step, loading the dataset)…"


def _current(kind: str, rid) -> dict | None:
    """The run to look into: ``STATE["last"]`` ({trainer, model, untrained}, set once a run
    is set up); None after posting ``kind {id, error}`` (pending while a run sets up)."""
    run, setting_up = STATE.get("last"), STATE.get("trainer")
    if setting_up is not None and (run is None or run["trainer"] is not setting_up):
        post(kind, id=rid, error=SETTING_UP, pending=True)
        return None
    if run is None:
        post(kind, id=rid, error=NO_MODEL)
    return run


async def prepare(data: dict) -> None:
    """Answer ``prepare {id, model, config}`` (see the module docstring): only the first batch of
    training images is loaded, no validation images, four test images for the evaluation."""
    rid, runs, cfg = data.get("id"), STATE["runs"], dict(data.get("config") or {})
    model = cfg.pop("model", None) or data.get("model") or "seednet"
    STATE["prepare_id"] = rid  # the latest wins
    if STATE["device"] is None:
        post("prepared", id=rid, model=model, error="no WebGPU device")
        return
    batch = cfg.get("batch_size")
    if isinstance(batch, int) and not isinstance(batch, bool) and batch > 0:
        cfg["train_images"] = -(-batch // 4) * 4  # whole 4-byte words of labels to upload
    cfg.update(val_images=0, eval_images=4, max_steps=0)
    try:
        cfg, graph, weights, train, test = await load(cfg, model, lambda kind, **kw: None)
        trainer = Trainer(engine(STATE["device"]), graph, weights, cfg, train, test)
        await trainer.setup()
    except Exception as exc:  # bad settings, a model that does not fit: said in the views
        post("prepared", id=rid, model=model, error=user_message(exc))
        return
    if STATE["runs"] == runs and STATE["prepare_id"] == rid:  # no run nor newer prepare since
        STATE["last"] = {"trainer": trainer, "model": model, "untrained": True}
    post("prepared", id=rid, model=model)


def _test_image(trainer, index) -> tuple:
    """(the sample's bytes, label) of test image ``index``; ValueError when out of range."""
    test = trainer.test_set
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < test.count:
        raise ValueError(f"test image index {index!r} is outside 0..{test.count - 1}")
    size = test.spec.sample_bytes
    lo = index * size
    data = test.images[lo:lo + size] if isinstance(test.images, (bytes, bytearray)) \
        else to_bytes(test.images.slice(lo, lo + size))
    return data, test.labels_host[index]


def _sample(spec, values) -> bytes:
    """The bytes of one sample of ``spec`` from the page's ``values`` (a list or typed array);
    ValueError naming the count or the value that does not fit."""
    values = list(values or [])
    if len(values) != spec.values:
        raise ValueError(f"a sample of {spec.title} must be {spec.values} values "
                         f"({spec.describe()}), got {len(values)}")
    if spec.kind == "table":
        return array("f", values).tobytes()
    bad = next((v for v in values if not isinstance(v, int) or not 0 <= v <= 255), None)
    if bad is not None:
        raise ValueError(f"image values must be integers 0..255, got {str(bad)[:20]}")
    return bytes(values)


async def _filters(eng, graph, first) -> dict | None:
    """The first layer's weights for the views: a Conv's kernels ``{name, shape, values,
    layout: "filters"}``, a Linear's first ``SHOWN_ROWS`` rows as images ``{name, shape:
    [rows, in], values, layout: "rows", image: [C, H, W], of}`` (``of``: all its rows), else
    None."""
    if first is None or first["view"] is None:
        return None
    t = graph.tensors[first["weight"]]
    raw = await eng.read_weights(t["offset"] + t["nbytes"])
    values = memoryview(raw[t["offset"]:t["offset"] + t["nbytes"]]).cast("f")
    if first["view"] == "filters":  # a 1-D Conv's [O, I, K] drawn as O x I strips 1 x K
        return {"name": first["weight"], "layout": "filters",
                "shape": with_height(t["shape"], 4), "values": float32_array(values.tobytes())}
    n_in = t["shape"][0] if first["rows"] else t["shape"][1]
    n_out = t["nbytes"] // 4 // n_in
    rows = weight_rows(values, t["shape"], first["rows"], SHOWN_ROWS)
    return {"name": first["weight"], "shape": [len(rows) // n_in, n_in], "of": n_out,
            "layout": "rows", "image": first["image"],
            "values": float32_array(array("f", rows).tobytes())}


def _attention(graph, found, got, shapes) -> dict | None:
    """The first attention map of the probe's forward (``found``: attention_softmax's
    answer), averaged over heads: ``{layer, name, heads, tokens, values: [T*T] (row q: query
    token q's weights over the keys, summing to 1), grid: [gh, gw] | None, first}``."""
    if found is None:
        return None
    layer, name = found
    shape = shapes[name]
    mean = head_mean(memoryview(got[name]).cast("f"), shape)
    tokens = shape[-1]
    grid = patch_grid(graph, tokens)
    return {"layer": layer, "name": name, "heads": len(got[name]) // 4 // (tokens * tokens),
            "tokens": tokens, "values": float32_array(array("f", mean).tobytes()),
            "grid": list(grid[:2]) if grid else None, "first": grid[2] if grid else 0}


async def inspect(data: dict) -> None:
    """Answer ``inspect {id, index}`` (see the module docstring)."""
    rid = data.get("id")
    run = _current("inspect", rid)
    if run is None:
        return
    t0 = time.perf_counter()
    try:
        trainer = run["trainer"]
        eng, graph, spec = trainer.engine, trainer.graph, trainer.test_set.spec
        index = data.get("index", 0)
        sample, label = _test_image(trainer, index)
        layers = feature_maps(graph)
        shapes = graph.shapes(1)
        found = attention_softmax(graph)
        names = [name for _, name in layers] + ([found[1]] if found else [])
        got = await eng.probe(sample, names) if names else {}
        maps = [{"layer": layer, "name": name, "shape": with_height(shapes[name][1:], 3),
                 "values": float32_array(got[name])} for layer, name in layers]
        first = first_layer(graph, spec.sample_shape)
        filters = await _filters(eng, graph, first)
        norms = await eng.norms()
        before_norm = biases_before_norm(graph)
        for row in norms:
            row["before_norm"] = row["name"] in before_norm
        image = bytes(sample) if spec.kind == "image" else None
        post("inspect", id=rid, index=index, label=label, model=run["model"], step=trainer.step,
             filters=filters, maps=maps, norms=norms, untrained=run["untrained"],
             first=None if first is None else {k: first[k] for k in ("op", "node", "text")},
             attention=_attention(graph, found, got, shapes),
             image=None if image is None else uint8_array(image),
             sample_shape=spec.sample_shape, count=trainer.test_set.count,
             ms=(time.perf_counter() - t0) * 1000)
    except Exception as exc:  # a bad index, a device error: shown in the panel
        post("inspect", id=rid, error=user_message(exc))


async def predict(data: dict) -> None:
    """Answer ``predict {id, values | index}`` (see the module docstring)."""
    rid = data.get("id")
    run = _current("prediction", rid)
    if run is None:
        return
    t0 = time.perf_counter()
    try:
        trainer = run["trainer"]
        index, label = data.get("index"), None
        spec = trainer.test_set.spec
        if index is not None:
            sample, label = _test_image(trainer, index)
        else:
            sample = _sample(spec, data.get("values", data.get("pixels")))
        raw = (await trainer.engine.probe(sample, [LOGP]))[LOGP]
        logp = memoryview(raw).cast("f")
        probs = [math.exp(v) for v in logp]
        post("prediction", id=rid, probs=probs, classes=spec.classes, index=index, label=label,
             model=run["model"], step=trainer.step, untrained=run["untrained"],
             ms=(time.perf_counter() - t0) * 1000)
    except Exception as exc:
        post("prediction", id=rid, error=user_message(exc))


def test_images(data: dict) -> None:
    """Answer ``test_images {id, indices}`` (see the module docstring)."""
    rid = data.get("id")
    run = _current("test_images", rid)
    if run is None:
        return
    trainer = run["trainer"]
    test, spec = trainer.test_set, trainer.test_set.spec
    try:
        if spec.kind == "tokens":  # as web/page/testset-fetch.js says it
            raise ValueError(f"{spec.name} holds token ids: the page shows only images or "
                             "features")
        indices = data.get("indices")
        if not isinstance(indices, list) or not 1 <= len(indices) <= MAX_TEST_IMAGES:
            raise ValueError(f"indices must be a list of 1..{MAX_TEST_IMAGES} test image "
                             f"indices, got {str(indices)[:40]}")
        got = [_test_image(trainer, index) for index in indices]
        post("test_images", id=rid, indices=indices, dataset=spec.name, title=spec.title,
             dataset_kind=spec.kind, count=test.count, sample_shape=spec.sample_shape,
             classes=spec.classes, labels=[label for _, label in got],
             images=uint8_array(b"".join(bytes(sample) for sample, _ in got)))
    except Exception as exc:  # a bad index: said where the image would be
        post("test_images", id=rid, error=user_message(exc), count=test.count)


HANDLERS = {
    "test_images": test_images,
    "prepare": prepare,
    "inspect": inspect,
    "predict": predict,
}
