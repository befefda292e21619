"""How the tests run the engine: ONE way to run a plan step, ONE way to check a case.

- ``one_step``: a plan step on a device through ``engine/tools/parity.py``'s ``load`` and
  ``run_step`` (the code the browser runs too), with every activation, gradient, weight and the
  metrics read back. Tests that need other steps (optimizers, metric slots) call
  ``parity.load`` / ``parity.run_step`` themselves.
- ``check_case``: a case of tests/cases on the native GPU (``one_step``) and on the float64
  numpy engine (``oracle``), compared by ``compare`` with the tolerances of conftest.py; the
  errors are recorded for the table printed at the end of the run.
"""

import contextlib

import numpy as np
import pytest

from conftest import FWD_RTOL, GRAD_RTOL, _record, assert_close, f32, rel_err, run
from webgpu_trainer.cpu.engine import Engine, params_from_blob
from webgpu_trainer.engine.tools import parity


async def read_f32(dev, t):
    """A plan Tensor's values as float32 of its shape."""
    raw = await dev.read(t.buf, t.offset, t.nbytes)
    return np.frombuffer(raw, np.float32).reshape(t.shape)


async def read_flat(dev, plan, flat, name):
    """Tensor ``name`` of the flat buffer ``flat`` (plan.P or plan.G) in bundle layout."""
    t = plan.graph.tensors[name]
    raw = await dev.read(flat, t["offset"], t["nbytes"])
    return np.frombuffer(raw, np.float32).reshape(t["shape"])


def _input_bytes(graph, x) -> bytes:
    """The input batch as the GPU takes it: float32, or u32 token ids for an int64 input."""
    tokens = graph["inputs"][0].get("dtype") == "int64"
    return np.ascontiguousarray(x, np.uint32 if tokens else np.float32).tobytes()


async def one_step(dev, graph, blob, x, labels, train=True, step=1, seed=0, plan=None,
                   loss=None, init_seed=None, keep=()):
    """Build (unless ``plan``: then its weights stay as they are), upload, run step ``step``:
    forward (+ loss + backward when ``train``), read back.

    Returns ``dict(plan, acts, dacts, grads, P, loss, acc)``: acts / dacts by activation name,
    grads / P by tensor name; with ``init_seed`` also ``P0``, the weights after
    ``Plan.init_weights(init_seed)``, before the step.
    """
    plan = await parity.load(dev, graph, blob if plan is None else None, len(labels),
                             _input_bytes(graph, x),
                             np.asarray(labels, np.uint32).tobytes(), loss=loss,
                             init_seed=init_seed, plan=plan, keep_grads=True, keep_acts=keep)
    out = {"plan": plan, "acts": {}, "dacts": {}, "grads": {}, "P": {}}
    if init_seed is not None:
        out["P0"] = {name: await read_flat(dev, plan, plan.P, name)
                     for name in plan.source.tensors}
    parity.run_step(dev, plan, step, seed, train)
    for name, t in plan.acts.items():
        out["acts"][name] = await read_f32(dev, t)
    for name, t in plan.grads.items():
        out["dacts"][name] = await read_f32(dev, t)
    for name in plan.source.tensors:  # the model's own, not the plan's spans
        out["P"][name] = await read_flat(dev, plan, plan.P, name)
        if name in plan.trainable:
            out["grads"][name] = await read_flat(dev, plan, plan.G, name)
    met = np.frombuffer(await dev.read(plan.metrics, 8 * parity.metrics_slot(step), 8),
                        np.float32)
    out["loss"], out["acc"] = float(met[0]), float(met[1])
    return out


# ---- comparing with the float64 numpy engine ---------------------------------------------

def check(tag, kind, got, want, what):
    """``got`` against ``want`` with the forward (kind "fwd") or gradient ("grad") tolerance;
    the error is recorded under ``tag``."""
    rtol = FWD_RTOL if kind == "fwd" else GRAD_RTOL
    _record(tag, kind, rel_err(got, want))
    assert_close(got, want, rtol, f"{tag}: {what}")


def compare(tag, res, want, acts=(), dacts=(), zero_grads=()):
    """Loss, accuracy, output, the named activations / gradients, all param grads, buffers.
    ``zero_grads``: parameters whose gradient is zero in exact arithmetic (a bias right before
    a BatchNorm): the device's and the reference's must be rounding noise, at most GRAD_RTOL
    of the largest other gradient."""
    check(tag, "fwd", res["loss"], want["loss"], "loss")
    assert res["acc"] == pytest.approx(want["acc"], abs=1e-6), f"{tag}: accuracy"
    out = res["plan"].graph.output
    check(tag, "fwd", res["acts"][out], want["acts"][out], "output")
    for name in acts:
        check(tag, "fwd", res["acts"][name], want["acts"][name], f"activation {name}")
    for name in dacts:
        check(tag, "grad", res["dacts"][name], want["dacts"][name], f"gradient of {name}")
    assert set(res["grads"]) == set(want["grads"]), "parameter gradients computed"
    for name, g in want["grads"].items():
        if name not in zero_grads:
            check(tag, "grad", res["grads"][name], g, f"gradient of {name}")
    if zero_grads:
        scale = max(np.abs(g).max() for k, g in want["grads"].items() if k not in zero_grads)
        for name in zero_grads:
            assert np.abs(want["grads"][name]).max() <= 1e-12 * scale, f"{tag}: {name} exact"
            assert np.abs(res["grads"][name]).max() <= GRAD_RTOL * scale, \
                f"{tag}: gradient of {name} is not rounding noise"
    for name, v in want["buffers"].items():
        check(tag, "fwd", res["P"][name], v, f"running statistic {name}")


def compare_eval(tag, res, want, acts=(), weights=None):
    """The eval forward: the output and the named activations; every weight (running
    statistics included) unchanged (``weights``: {name: float32 array before the step})."""
    out = res["plan"].graph.output
    check(tag, "fwd", res["acts"][out], want["acts"][out], "eval output")
    for name in acts:
        check(tag, "fwd", res["acts"][name], want["acts"][name], f"eval activation {name}")
    for name, arr in (weights or {}).items():
        assert np.array_equal(res["P"][name], arr), f"{tag}: eval changed {name}"


def oracle(case, res=None):
    """The float64 numpy engine's step on ``case`` (``Engine.step``). With the device's
    result ``res``: its Dropout masks are replayed (kept where the output is non-zero) and,
    for an ``init_seed`` case, its re-initialised weights are used."""
    params = params_from_blob(case.graph, case.blob)
    keep = None
    if res is not None:
        params.update({k: np.float64(v) for k, v in res.get("P0", {}).items()})
        if case.train:
            keep = {n["name"]: res["acts"][n["outputs"][0]] != 0 for n in case.graph["nodes"]
                    if n["op_type"] == "Dropout"}
    return Engine(case.graph, params, np.float64).step(np.float64(case.x), case.labels,
                                                       train=case.train, keep=keep,
                                                       loss=case.loss)


def op_types(graph) -> list:
    """The op_type of each node of a ``graph.Graph`` (a plan's folded graph), in order."""
    return [n["op_type"] for n in graph.nodes]


def same_memory(*tensors) -> bool:
    """Whether plan Tensors are the same bytes: one buffer at one byte offset. Pooled slots
    share buffers at different offsets (``pool.assign``), so ``.buf is`` alone is not."""
    first = tensors[0]
    return all(t.buf is first.buf and t.offset == first.offset and t.numel == first.numel
               for t in tensors[1:])


@contextlib.contextmanager
def builder_patch(attrs):
    """Set ``plan.Builder`` class attributes (e.g. REDUCE_CHUNK) for the duration."""
    from webgpu_trainer.engine.plan import Builder
    old = {k: getattr(Builder, k) for k in attrs}
    for k, v in attrs.items():
        setattr(Builder, k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            setattr(Builder, k, v)


def check_case(device, case, plan=None):
    """Run ``case`` (tests/cases) on ``device`` and on the float64 numpy engine and compare:
    training cases with ``compare`` (and the resolved loss spec), eval cases with
    ``compare_eval``; then the case's own ``checks``. Returns ``(res, want)``. Optimizer
    cases (tests/cases/optim.py) are for the browser only."""
    assert case.optimizer is None and case.steps == 1, f"{case.id}: one step, no optimizer"
    with builder_patch(case.patch):
        res = run(one_step(device, case.graph, case.blob, case.x, case.labels, train=case.train,
                           step=case.step, seed=case.seed, plan=plan, loss=case.loss,
                           init_seed=case.init_seed, keep=(*case.acts, *case.dacts)))
    want = oracle(case, res)
    for name in case.acts:
        assert np.all(np.isfinite(want["acts"][name])), f"{case.id}: reference {name} not finite"
    if case.train:
        assert res["plan"].loss_spec == want["spec"], f"{case.id}: loss spec"
        compare(case.tag, res, want, case.acts, case.dacts, case.zero_grads)
    else:
        before = res.get("P0") or {k: f32(v) for k, v in
                                   params_from_blob(case.graph, case.blob).items()}
        compare_eval(case.tag, res, want, case.acts, before)
    for extra in case.checks:
        extra(res, want)
    return res, want


def count_transposes_left(monkeypatch) -> dict:
    """Wrap ``rewrites.transposes.fold`` so each plan built records, under the value of
    ``Builder.COMMUTE_TRANSPOSES`` at the time (first plan only), how many Transposes of rank
    >= 3 its folded graph keeps. Returns that dict (filled as plans are built)."""
    from webgpu_trainer.engine.plan import Builder
    from webgpu_trainer.engine.rewrites import transposes
    left, fold = {}, transposes.fold

    def counting(graph, shapes, keep=()):
        out = fold(graph, shapes, keep)
        sh = out.shapes(3)
        left.setdefault(Builder.COMMUTE_TRANSPOSES, sum(
            n["op_type"] == "Transpose" and len(sh.get(n["inputs"][0], ())) >= 3
            for n in out.nodes))
        return out
    monkeypatch.setattr(transposes, "fold", counting)
    return left
