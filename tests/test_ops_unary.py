"""Unary elementwise ops and Clip on the native device against the float64 numpy engine
(tests/cases/unary.py; the GPU erf also elementwise against math.erf), and the numpy engine's
Erf / Gelu against math.erf values and its ops against torch (skipped without torch).
"""

import math

import numpy as np
import pytest

from cases import ids, unary
from cases.unary import OPS
from conftest import rng_for
from harness import check_case

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend


@pytest.mark.parametrize("case", unary.CASES, ids=ids(unary.CASES))
def test_case(device, case):
    check_case(device, case)


def test_each_op_its_own_pipeline(device):
    """The op is the pipeline's override constant OP (ops/unary.py CODES), not a switch on the
    uniform: CPU adapters ran every case of that switch for every element (issue 19)."""
    from cases import by_id
    from webgpu_trainer.engine.ops.unary import CODES
    res, _ = check_case(device, by_id(unary.CASES, "Clip_40x80"))
    plan = res["plan"]
    keys = [d[0][2] for d in plan.fwd_train + plan.bwd if d[0][2].startswith("unary:")]
    op = f"OP={CODES['Clip']}"
    assert keys == [f"unary:unary_forward:{op}", f"unary:unary_backward:{op}"], keys


# ---- the numpy engine ---------------------------------------------------------------------

def test_numpy_erf_gelu_against_math():
    from webgpu_trainer.cpu import unary
    xs = np.array([-8.0, -3.5, -1.0, -0.3, -1e-8, 0.0, 1e-8, 0.5, 1.0, 2.0, 4.0, 10.0])
    np.testing.assert_allclose(unary.erf(xs), [math.erf(v) for v in xs], rtol=1e-15, atol=0)
    gelu = unary.unary_forward({"op_type": "Gelu", "name": "g", "attrs": {}}, xs)
    want = [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in xs]
    keep = xs > -3  # below, 1 + erf cancels (the engine uses erfc there)
    np.testing.assert_allclose(gelu[keep], np.array(want)[keep], rtol=1e-12, atol=1e-300)
    want = [0.5 * v * math.erfc(-v / math.sqrt(2)) for v in xs]
    np.testing.assert_allclose(gelu, want, rtol=1e-14, atol=1e-300)
    # derivative of the erf form by central differences
    d = unary.unary_backward({"op_type": "Gelu", "name": "g", "attrs": {}}, xs, gelu,
                             np.ones_like(xs))
    h = 1e-6
    fd = [(0.5 * (v + h) * (1 + math.erf((v + h) / math.sqrt(2)))
           - 0.5 * (v - h) * (1 + math.erf((v - h) / math.sqrt(2)))) / (2 * h) for v in xs]
    np.testing.assert_allclose(d, fd, rtol=1e-6, atol=1e-9)
    derf = unary.unary_backward({"op_type": "Erf", "name": "e", "attrs": {}}, xs,
                                unary.erf(xs), np.ones_like(xs))
    fd = [(math.erf(v + h) - math.erf(v - h)) / (2 * h) for v in xs]
    np.testing.assert_allclose(derf, fd, rtol=1e-6, atol=1e-9)
    # float32 engine dtype stays float32
    x32 = xs.astype(np.float32)
    assert unary.erf(x32).dtype == np.float32
    outs, _ = unary.forward({"op_type": "Gelu", "name": "g", "attrs": {}}, [x32], None)
    assert outs[0].dtype == np.float32


@pytest.mark.parametrize("case", [c for c in OPS if OPS[c][0] not in ("Log", "Sqrt",
                                                                     "Reciprocal")])
def test_numpy_matches_torch(case):
    """The numpy engine's forward and backward against torch (float64) where torch has the op."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    from webgpu_trainer.cpu import unary
    op_type, attrs, sampler = OPS[case]
    rng = rng_for("torch", case)
    x = sampler(rng, 257)
    dy = rng.standard_normal(257)
    n = {"op_type": op_type, "name": case, "attrs": attrs}
    fns = {
        "LeakyRelu": lambda t: F.leaky_relu(t, attrs.get("alpha", 0.01)),
        "Sigmoid": torch.sigmoid, "Tanh": torch.tanh,
        "Gelu": lambda t: F.gelu(t, approximate=attrs.get("approximate", "none")),
        "Erf": torch.erf, "Exp": torch.exp, "Neg": torch.neg, "Abs": torch.abs,
        "Softplus": F.softplus, "Softsign": F.softsign,
        "Elu": lambda t: F.elu(t, attrs.get("alpha", 1.0)),
        # Selu with the ONNX (float32) defaults: torch's F.selu has the float64 constants
        "Selu": lambda t: attrs.get("gamma", 1.05070102214813232421875) * F.elu(
            t, attrs.get("alpha", 1.67326319217681884765625)),
        "Celu": lambda t: F.celu(t, attrs.get("alpha", 1.0)), "Mish": F.mish,
        "HardSigmoid": lambda t: torch.clamp(attrs.get("alpha", 0.2) * t
                                             + attrs.get("beta", 0.5), 0, 1),
        "HardSwish": F.hardswish,
    }
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    y = fns[op_type](t)
    y.backward(torch.tensor(dy))
    got_y = unary.unary_forward(n, x)
    got_dx = unary.unary_backward(n, x, got_y, dy)
    # torch's Softplus returns x above its threshold 20 (ONNX: log(1 + e^x), e^-20 more)
    atol = 3e-9 if op_type == "Softplus" else 1e-12
    np.testing.assert_allclose(got_y, y.detach().numpy(), rtol=1e-12, atol=atol)
    np.testing.assert_allclose(got_dx, t.grad.numpy(), rtol=1e-10, atol=atol)


def test_numpy_clip_matches_torch():
    torch = pytest.importorskip("torch")
    from webgpu_trainer.cpu import unary
    rng = rng_for("torch_clip")
    x = rng.uniform(-3, 3, 101)
    x[:3] = [-0.5, 1.5, 0.0]  # exactly on the bounds: torch passes the gradient
    dy = rng.standard_normal(101)
    for lo, hi in [(-0.5, 1.5), (1.0, -1.0)]:
        t = torch.tensor(x, requires_grad=True)
        tl = torch.tensor(lo, dtype=torch.float64, requires_grad=True)
        th = torch.tensor(hi, dtype=torch.float64, requires_grad=True)
        torch.clamp(t, tl, th).backward(torch.tensor(dy))
        n = {"op_type": "Clip", "name": "c", "attrs": {}}
        ins = [x, np.array(lo), np.array(hi)]
        (y,), _ = unary.forward(n, ins, None)
        dx, dl, dh = unary.backward(n, ins, [y], None, [dy], None)
        np.testing.assert_allclose(y, torch.clamp(torch.tensor(x), lo, hi).numpy())
        np.testing.assert_allclose(dx, t.grad.numpy())
        np.testing.assert_allclose(dl, tl.grad.numpy())
        np.testing.assert_allclose(dh, th.grad.numpy())


def test_softsign_exported_by_torch_imports_and_trains(device, tmp_path):
    """A torch.onnx.export'ed model with an ONNX Softsign node imports, and one training step
    on the device matches torch (float64) within the forward / gradient tolerances (1e-5 /
    1e-4 relative to the largest value). torch's F.softsign is x / (1 + |x|) in Python, which
    the TorchScript exporter writes as Abs, Add, Div; a Function with a ``symbolic`` gives the
    one ONNX Softsign node that other producers (tf2onnx, the dynamo exporter) write."""
    torch = pytest.importorskip("torch")
    from conftest import FWD_RTOL, GRAD_RTOL, assert_close, run
    from harness import one_step
    from webgpu_trainer.onnx_io import load_bundle

    class Softsign(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x / (1 + x.abs())

        @staticmethod
        def backward(ctx, dy):
            (x,) = ctx.saved_tensors
            return dy / (1 + x.abs()) ** 2

        @staticmethod
        def symbolic(g, x):
            return g.op("Softsign", x)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(784, 16), torch.nn.Linear(16, 10)

        def forward(self, x):
            return self.fc2(Softsign.apply(self.fc1(x.flatten(1)) * 4.0))

    torch.manual_seed(0)
    net = Net()
    path = tmp_path / "softsign.onnx"
    torch.onnx.export(net, torch.zeros(2, 1, 28, 28), str(path), dynamo=False, opset_version=13,
                      input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "N"}, "output": {0: "N"}})
    graph, blob = load_bundle(path)
    assert "Softsign" in [n["op_type"] for n in graph["nodes"]]
    rng = rng_for("softsign_export")
    x = rng.standard_normal((5, 1, 28, 28)).astype(np.float32)
    labels = np.array([3, 1, 4, 1, 5])
    res = run(one_step(device, graph, blob, x, labels))
    net64 = net.double()
    loss = torch.nn.functional.cross_entropy(net64(torch.tensor(x, dtype=torch.float64)),
                                             torch.tensor(labels))
    loss.backward()
    assert_close(res["loss"], loss.item(), FWD_RTOL, "loss")
    for name, p in net64.named_parameters():
        assert_close(res["grads"][name], p.grad.numpy(), GRAD_RTOL, f"gradient of {name}")
