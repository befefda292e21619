"""Shared fixtures and helpers for the engine tests: the native device, tiny bundle graphs and the
tolerances (in ONE place). Running a plan step and checking a case: tests/harness.py.

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
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

# The browser fixtures (server, chromium, mnist_cache, app, bare_page) and the in-process app's
# (config_client, dataset_client) for every test module.
pytest_plugins = ["e2e_fixtures", "app_fixtures"]

# Tolerances: error = max |got - ref| / max(max |ref|, ABS_FLOOR).
FWD_RTOL = 1e-5     # forward values (activations, loss, running statistics)
GRAD_RTOL = 1e-4    # gradients
OPTIM_RTOL = 1e-5   # optimizer trajectories (per step, per tensor)
PLAYGROUND_ATOL = 1e-4  # the kernels playground: max |output - numpy| (pixels in [0, 1])
RESUME_ATOL = 1e-5  # a resumed run's losses vs the uninterrupted run's (the browser: the
                    # engine is deterministic, 0 in practice)
ABS_FLOOR = 1e-6

ALIGN = 256  # bytes between tensors of the weight blob (WebGPU's storage offset alignment)


def run(coro):
    """Run a coroutine of the engine to completion. A module's browser fixture (Playwright's
    sync API) keeps an event loop running in this thread once it is made, and pytest-randomly
    may order a native test after it: then the coroutine runs in a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


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


# ---- the errors of tests/harness.py's comparisons, printed at the end ----------------------

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


def rng_for(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def f32(a):
    return np.asarray(a, np.float32)


def tiny_mlp(seed: int) -> dict:
    """A model description of a small MLP for trainer tests: Gemm [784 -> 24], Relu,
    Gemm [24 -> 10] (fc1/fc2 weights drawn from ``seed``, zero biases); input [N, 784]."""
    rng = np.random.default_rng(seed)
    nodes = [node("Gemm", ["input", "fc1.w", "fc1.b"], ["h"], transB=1),
             node("Relu", ["h"], ["r"]),
             node("Gemm", ["r", "fc2.w", "fc2.b"], ["output"], transB=1)]
    tensors = [("fc1.w", f32(rng.standard_normal((24, 784)) / 28), "param"),
               ("fc1.b", np.zeros(24, np.float32), "param"),
               ("fc2.w", f32(rng.standard_normal((10, 24)) / 5), "param"),
               ("fc2.b", np.zeros(10, np.float32), "param")]
    return make_graph(nodes, tensors, [("input", ["N", 784])], [("output", ["N", 10])])


def head(feat_name, features, classes, rng, prefix="fc"):
    """Gemm(transB=1) -> LogSoftmax over a [N, features] activation."""
    w = f32(rng.standard_normal((classes, features)) / np.sqrt(features))
    b = f32(rng.standard_normal(classes) * 0.1)
    nodes = [node("Gemm", [feat_name, f"{prefix}.w", f"{prefix}.b"], ["logits"], transB=1),
             node("LogSoftmax", ["logits"], ["output"], axis=-1)]
    return nodes, [(f"{prefix}.w", w, "param"), (f"{prefix}.b", b, "param")]



def pytest_terminal_summary(terminalreporter):
    """The largest measured error per op (tests/harness.py, relative, see rel_err)."""
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
