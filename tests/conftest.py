"""Shared fixtures and helpers for the engine tests: the native device, tiny bundle graphs, one
training step on the device, and the tolerances (in ONE place).

wgpu backends: ``--backends vulkan,opengl`` (or the environment variable
WEBGPU_TRAINER_BACKENDS; default "vulkan,opengl": lavapipe and llvmpipe on a machine without a
GPU). Modules marked ``pytest.mark.every_backend`` (the op tests) run each test that takes
``device`` once per backend (ids ``...-vulkan`` / ``...-opengl``); every other test gets the
first backend. A requested backend that has no adapter FAILS the tests that need it.
"""

import asyncio
import os
import sys
import tempfile
import zlib

import numpy as np
import pytest

from webgpu_trainer.engine.plan import METRICS_RING, pack_step

# The browser fixtures (server, chromium, mnist_cache) for every test module.
pytest_plugins = ["e2e_fixtures"]

# Tolerances: error = max |got - ref| / max(max |ref|, ABS_FLOOR).
FWD_RTOL = 1e-5     # forward values (activations, loss, running statistics)
GRAD_RTOL = 1e-4    # gradients
OPTIM_RTOL = 1e-5   # optimizer trajectories (per step, per tensor)
ABS_FLOOR = 1e-6

ALIGN = 256  # bytes between tensors of the weight blob (WebGPU's storage offset alignment)


def run(coro):
    """Run a coroutine of the engine to completion."""
    return asyncio.run(coro)


def rel_err(got, ref) -> float:
    got = np.asarray(got, np.float64).ravel()
    ref = np.asarray(ref, np.float64).ravel()
    assert got.shape == ref.shape, f"shape {got.shape} != {ref.shape}"
    if ref.size == 0:
        return 0.0
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), ABS_FLOOR))


def assert_close(got, ref, rtol, what=""):
    err = rel_err(got, ref)
    assert err <= rtol, f"{what}: relative error {err:.3g} > {rtol:g}"
    return err


DEFAULT_BACKENDS = "vulkan,opengl"
_DEVICES: dict = {}  # backend -> Device, or the message of why it could not be opened
CURRENT = {"backend": None, "first": None}  # the running test's backend, the first one


def pytest_addoption(parser):
    parser.addoption("--backends", default=None,
                     help="comma-separated wgpu backends (vulkan, opengl, metal, d3d12) for the "
                          "GPU tests; every_backend modules run on each, the rest on the first "
                          f"(default $WEBGPU_TRAINER_BACKENDS or {DEFAULT_BACKENDS})")


def pytest_configure(config):
    config.addinivalue_line("markers", "every_backend: run the tests that take `device` on "
                                       "every backend of --backends")
    # The GPU self-check's cache of `webgpu-trainer train` (doctor.py): not the user's one.
    os.environ.setdefault("WEBGPU_TRAINER_CACHE_DIR",
                          tempfile.mkdtemp(prefix="webgpu-trainer-test-cache-"))


def backends(config) -> list:
    text = (config.getoption("--backends") or os.environ.get("WEBGPU_TRAINER_BACKENDS")
            or DEFAULT_BACKENDS)
    out = [b.strip().lower() for b in text.split(",") if b.strip()]
    if not out:
        raise pytest.UsageError(f"--backends {text!r} names no backend")
    return out


def pytest_generate_tests(metafunc):
    if "device" in metafunc.fixturenames and metafunc.definition.get_closest_marker(
            "every_backend"):
        metafunc.parametrize("device", backends(metafunc.config), indirect=True,
                             scope="session")


def pytest_runtest_setup(item):
    params = getattr(getattr(item, "callspec", None), "params", {})
    CURRENT["first"] = backends(item.config)[0]
    CURRENT["backend"] = params.get("device") or CURRENT["first"]


@pytest.fixture(scope="session")
def device(request):
    """One native wgpu device per backend for the whole session (lavapipe / llvmpipe on a
    machine with no GPU): the test's backend parameter, else the first of --backends. Fails
    (does not skip) when that backend has no adapter."""
    backend = getattr(request, "param", None) or backends(request.config)[0]
    if backend not in _DEVICES:
        try:
            from webgpu_trainer.engine.backends.wgpu_native import Device
            _DEVICES[backend] = Device(backend=backend)
        except Exception as exc:  # ImportError, RuntimeError (no adapter), driver errors
            _DEVICES[backend] = (f"wgpu backend {backend!r} was requested (--backends or "
                                 f"WEBGPU_TRAINER_BACKENDS) but cannot be used: {exc}")
    dev = _DEVICES[backend]
    if isinstance(dev, str):
        pytest.fail(dev, pytrace=False)
    return dev


def node(op_type, inputs, outputs, name=None, **attrs):
    """A bundle node dict; ``attrs`` are ONNX attribute names."""
    return {"name": name or f"/{op_type}_{outputs[0]}", "op_type": op_type,
            "inputs": list(inputs), "outputs": list(outputs), "attrs": attrs}


def make_graph(nodes, tensors, inputs, outputs, constants=None, name="test"):
    """The bundle dict and weight blob of a tiny model.

    ``tensors``: ``[(name, array, role)]`` with role "param" or "buffer" (float32, each at a
    256-byte aligned offset); ``inputs`` / ``outputs``: ``[(name, shape)]`` (a str dim is the
    batch). Returns ``(graph, blob)``.
    """
    blob = bytearray()
    descs = []
    for tname, arr, role in tensors:
        arr = np.ascontiguousarray(arr, np.float32)
        blob += bytes(-len(blob) % ALIGN)
        descs.append({"name": tname, "shape": list(arr.shape), "dtype": "float32",
                      "offset": len(blob), "nbytes": arr.nbytes, "role": role})
        blob += arr.tobytes()
    graph = {"format": "webgpu-trainer/graph@1", "name": name, "opset": 17, "producer": "tests",
             "inputs": [{"name": n, "shape": list(s), "dtype": "float32"} for n, s in inputs],
             "outputs": [{"name": n, "shape": list(s), "dtype": "float32"} for n, s in outputs],
             "tensors": descs, "constants": constants or {}, "nodes": nodes}
    return graph, bytes(blob)


def step_bytes(step=1, seed=0, lr=0.0, a=(0.0, 0.0, 0.0), offset=0) -> bytes:
    """The plan's 32-byte Step uniform (``plan.pack_step``; metrics slot ``(step - 1) % 64``)."""
    return pack_step(step, offset, seed, lr, a)


async def build(dev, graph, blob, batch, loss=None):
    from webgpu_trainer.engine.graph import Graph
    from webgpu_trainer.engine.plan import Plan
    plan = await Plan.build(dev, Graph(graph), batch, loss=loss)
    dev.write(plan.P, blob + bytes(plan.wbytes - len(blob)))
    return plan


async def read_f32(dev, t):
    """A plan Tensor's values as float32 of its shape."""
    raw = await dev.read(t.buf, t.offset, t.nbytes)
    return np.frombuffer(raw, np.float32).reshape(t.shape)


async def read_flat(dev, plan, flat, name):
    """Tensor ``name`` of the flat buffer ``flat`` (plan.P or plan.G) in bundle layout."""
    t = plan.graph.tensors[name]
    raw = await dev.read(flat, t["offset"], t["nbytes"])
    return np.frombuffer(raw, np.float32).reshape(t["shape"])


async def one_step(dev, graph, blob, x, labels, train=True, step=1, seed=0, plan=None,
                   loss=None):
    """Build (unless ``plan``; with the loss spec ``loss``), upload, run forward (+ loss +
    backward when ``train``), read back.

    Returns ``dict(plan, acts, dacts, grads, P, loss, acc)``: acts / dacts by activation name,
    grads / P by tensor name.
    """
    batch = len(labels)
    if plan is None:
        plan = await build(dev, graph, blob, batch, loss)
    dev.write(plan.input.buf, np.ascontiguousarray(x, np.float32).tobytes())
    dev.write(plan.labels.buf, np.asarray(labels, np.uint32).tobytes())
    dev.write(plan.step, step_bytes(step, seed))
    prog = plan.fwd_train + plan.loss + plan.bwd if train else plan.fwd_eval
    dev.submit([dev.program(prog)])
    out = {"plan": plan, "acts": {}, "dacts": {}, "grads": {}, "P": {}}
    for name, t in plan.acts.items():
        out["acts"][name] = await read_f32(dev, t)
    for name, t in plan.grads.items():
        out["dacts"][name] = await read_f32(dev, t)
    for name in plan.graph.tensors:
        out["P"][name] = await read_flat(dev, plan, plan.P, name)
        if name in plan.trainable:
            out["grads"][name] = await read_flat(dev, plan, plan.G, name)
    slot = (max(step, 1) - 1) % METRICS_RING
    met = np.frombuffer(await dev.read(plan.metrics, 8 * slot, 8), np.float32)
    out["loss"], out["acc"] = float(met[0]), float(met[1])
    return out


# ---- comparing an engine step with the float64 numpy engine (tests/test_ops*.py) -------------

ERRORS: dict = {}  # op tag -> {"fwd": max error, "grad": max error}; printed at the end


def tag_of(tag: str) -> str:
    """``tag``, with `` [backend]`` when the running test is not on the first backend."""
    if CURRENT["backend"] != CURRENT["first"]:
        return f"{tag} [{CURRENT['backend']}]"
    return tag


def _record(tag, kind, err):
    tag = tag_of(tag)
    d = ERRORS.setdefault(tag, {"fwd": 0.0, "grad": 0.0})
    d[kind] = max(d[kind], err)


def check(tag, kind, got, want, what):
    rtol = FWD_RTOL if kind == "fwd" else GRAD_RTOL
    _record(tag, kind, rel_err(got, want))
    assert_close(got, want, rtol, f"{tag}: {what}")


def rng_for(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def f32(a):
    return np.asarray(a, np.float32)


def compare(tag, res, want, acts=(), dacts=()):
    """Loss, accuracy, output, the named activations / gradients, all param grads, buffers."""
    check(tag, "fwd", res["loss"], want["loss"], "loss")
    assert res["acc"] == pytest.approx(want["acc"], abs=1e-6), f"{tag}: accuracy"
    out = res["plan"].graph.output
    check(tag, "fwd", res["acts"][out], want["acts"][out], "log-probabilities")
    for name in acts:
        check(tag, "fwd", res["acts"][name], want["acts"][name], f"activation {name}")
    for name in dacts:
        check(tag, "grad", res["dacts"][name], want["dacts"][name], f"gradient of {name}")
    assert set(res["grads"]) == set(want["grads"]), "parameter gradients computed"
    for name, g in want["grads"].items():
        check(tag, "grad", res["grads"][name], g, f"gradient of {name}")
    for name, v in want["buffers"].items():
        check(tag, "fwd", res["P"][name], v, f"running statistic {name}")



def head(feat_name, features, classes, rng, prefix="fc"):
    """Gemm(transB=1) -> LogSoftmax over a [N, features] activation."""
    w = f32(rng.standard_normal((classes, features)) / np.sqrt(features))
    b = f32(rng.standard_normal(classes) * 0.1)
    nodes = [node("Gemm", [feat_name, f"{prefix}.w", f"{prefix}.b"], ["logits"], transB=1),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    return nodes, [(f"{prefix}.w", w, "param"), (f"{prefix}.b", b, "param")]


def params_of(tensors):
    return {name: arr for name, arr, _ in tensors}



def pytest_terminal_summary(terminalreporter):
    """The largest measured error per op of tests/test_ops.py (relative, see rel_err)."""
    errors = ERRORS
    if errors:
        terminalreporter.section("measured max errors (max|got-ref| / max|ref|)")
        for tag, d in sorted(errors.items()):
            terminalreporter.write_line(f"{tag:20s} forward {d['fwd']:.2e}   grad {d['grad']:.2e}")
    parity = getattr(sys.modules.get("test_parity"), "REPORT", None)
    if parity:
        terminalreporter.section("browser vs native parity (max relative difference)")
        for line in parity:
            terminalreporter.write_line(line)
    for mod, title in (("test_selfcheck", "GPU self-check (doctor) on the native adapters"),
                       ("test_selfcheck_page", "GPU self-check in the browser")):
        lines = getattr(sys.modules.get(mod), "REPORT", None)
        if lines:
            terminalreporter.section(title)
            for line in lines:
                terminalreporter.write_line(line)
    e2e = getattr(sys.modules.get("test_e2e"), "REPORT", None)
    if e2e:
        terminalreporter.section("end to end in headless Chromium")
        for line in e2e:
            terminalreporter.write_line(line)
    optim_errors = getattr(sys.modules.get("test_optim"), "MAX_ERR", None)
    if optim_errors:
        terminalreporter.section("optimizer trajectories: max error over 20 steps vs torch")
        for name, err in sorted(optim_errors.items()):
            terminalreporter.write_line(f"{name:20s} {err:.2e}")
