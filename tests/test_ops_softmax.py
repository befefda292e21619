"""Softmax and LogSoftmax on the native device against the float64 numpy engine
(tests/cases/softmax.py), the metrics slot of the loss, and the numpy engine against literal
values and torch (skipped without torch)."""

import numpy as np
import pytest

from cases import ids, softmax
from conftest import head, make_graph, node, rng_for, run
from harness import check, check_case
from webgpu_trainer.cpu import KERNELS
from webgpu_trainer.cpu import engine as cpu_engine
from webgpu_trainer.cpu.engine import Engine, params_from_blob
from webgpu_trainer.cpu.softmax import (log_softmax, log_softmax_backward, nll, softmax as
                                        np_softmax, softmax_backward)
from webgpu_trainer.engine.tools import parity

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend


@pytest.mark.parametrize("case", softmax.CASES, ids=ids(softmax.CASES))
def test_case(device, case):
    check_case(device, case)


def test_metrics_slot(device):
    """plan.metrics slot s = [mean loss, accuracy] of the step whose uniform has slot s."""
    batch, features, classes = 4, 3, 5
    rng = rng_for("slot")
    nodes, tensors = head("input", features, classes, rng)
    graph, blob = make_graph(nodes, tensors, [("input", ["N", features])],
                             [("output", ["N", classes])])
    x = rng.standard_normal((batch, features)).astype(np.float32)
    labels = rng.integers(0, classes, batch)

    async def go():
        plan = await parity.load(device, graph, blob, batch, x.tobytes(),
                                 labels.astype(np.uint32).tobytes())
        parity.run_step(device, plan, 4, prog=parity.program(device, plan, backward=False))
        assert parity.metrics_slot(4) == 3
        return np.frombuffer(await device.read(plan.metrics, 0, 64), np.float32)

    met = run(go())
    want = Engine(graph, params_from_blob(graph, blob)).step(np.float64(x), labels)
    assert np.all(met[:6] == 0) and np.all(met[8:] == 0)
    check("LogSoftmax+NLL", "fwd", met[6], want["loss"], "loss in slot 3")
    assert met[7] == pytest.approx(want["acc"], abs=1e-6)


# ---- the numpy engine against literal values and torch ------------------------------------

def _cpu_forward(n, x, opset=17):
    ctx = cpu_engine.Context(False, np.float64)
    ctx.opset = opset
    outs, _ = KERNELS[n["op_type"]].forward(n, [np.asarray(x, np.float64)], ctx)
    return outs


def test_numpy_softmax_literals():
    """Values computed by hand."""
    outs = _cpu_forward(node("Softmax", ["x"], ["y"], axis=-1), [[1.0, 2.0, 3.0]])
    assert np.allclose(outs[0], [[0.09003057317038046, 0.24472847105479767,
                                  0.6652409557748219]], rtol=1e-12)
    # opset 11: [1, 2, 2] at axis 1 normalises over all 4 values; opset 13 over axis 1 alone
    x = [[[0.0, 0.0], [0.0, np.log(2.0)]]]
    outs = _cpu_forward(node("Softmax", ["x"], ["y"], axis=1), x, opset=11)
    assert np.allclose(outs[0], [[[0.2, 0.2], [0.2, 0.4]]], rtol=1e-12)
    outs = _cpu_forward(node("Softmax", ["x"], ["y"], axis=1), x, opset=13)
    assert np.allclose(outs[0], [[[0.5, 1 / 3], [0.5, 2 / 3]]], rtol=1e-12)
    outs = _cpu_forward(node("Softmax", ["x"], ["y"]), x, opset=11)  # default axis 1
    assert np.allclose(outs[0], [[[0.2, 0.2], [0.2, 0.4]]], rtol=1e-12)
    # softmax backward: y = [0.5, 0.5], dy = [1, 0] -> dx = y * (dy - 0.5) = [0.25, -0.25]
    assert np.allclose(softmax_backward(np.array([0.5, 0.5]), np.array([1.0, 0.0])),
                       [0.25, -0.25])


def test_numpy_softmax_matches_torch():
    """Softmax along axis 1 of NCHW (forward, backward); opset 11 = softmax of the 2-D coerced
    input."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(0)
    x, dy = rng.standard_normal((2, 5, 3, 4)) * 3, rng.standard_normal((2, 5, 3, 4))
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    yt = F.softmax(xt, 1)
    yt.backward(torch.tensor(dy))
    y = np_softmax(x, 1)
    assert np.allclose(y, yt.detach().numpy(), rtol=1e-12)
    assert np.allclose(softmax_backward(y, dy, 1), xt.grad.numpy(), rtol=1e-10, atol=1e-14)
    outs = _cpu_forward(node("Softmax", ["x"], ["y"], axis=1), x, opset=11)
    want = F.softmax(torch.tensor(x).reshape(2, -1), 1).reshape(x.shape).numpy()
    assert np.allclose(outs[0], want, rtol=1e-12)


def test_numpy_log_softmax_nll_matches_torch():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(0)
    z = rng.standard_normal((5, 7)) * 3
    labels = rng.integers(0, 7, 5)
    zt = torch.tensor(z, dtype=torch.float64, requires_grad=True)
    loss = F.nll_loss(F.log_softmax(zt, 1), torch.tensor(labels))
    loss.backward()
    logp = log_softmax(z)
    val, d, _ = nll(logp, labels)
    assert np.isclose(val, loss.item())
    assert np.allclose(log_softmax_backward(logp, d), zt.grad.numpy())
