"""A tensor read by a LayerNorm and then by a residual Add gets the sum of its two gradient
contributions from the LayerNorm's backward (``Plan._sums_in_backward``, layernorm.wgsl flags
bit 3, ``Builder.SUM_IN_BACKWARD``) instead of an elementwise add_to: on every LayerNorm kernel
(a thread a row, 16 threads a row, a workgroup a row) the step trains as torch does in float64,
equals the step without it to float32 rounding, one dispatch fewer; where it is not taken
(three uses, the Add first, an in-place ReLU's output) the add_to stays."""

import numpy as np
import pytest

from conftest import GRAD_RTOL, run
from harness import builder_patch, one_step

torch = pytest.importorskip("torch")
nn = torch.nn
BATCH = 5


class PreNorm(nn.Module):
    """x [N, T, F] -> h = Linear(F -> d) -> y = h + Linear(LayerNorm(h)) (the pre-norm
    residual block) -> mean over T -> Linear to 4 -> LogSoftmax. ``reads``: 3 adds a third
    reader of h (h * 0.5 into the sum); ``add_first``: the residual sum is taken before the
    LayerNorm reads h; ``direct``: y = h + LayerNorm(h) (no Linear between)."""

    def __init__(self, d, reads=2, add_first=False, relu=False, direct=False):
        super().__init__()
        torch.manual_seed(2)
        self.inp, self.mix, self.out = nn.Linear(6, d), nn.Linear(d, d), nn.Linear(d, 4)
        self.norm = nn.LayerNorm(d)
        self.reads, self.add_first, self.relu, self.direct = reads, add_first, relu, direct
        with torch.no_grad():
            for p in self.norm.parameters():
                p.add_(torch.randn_like(p), alpha=0.2)

    def forward(self, x):
        h = self.inp(x)
        if self.relu:
            h = torch.relu(h)
        if self.direct:  # the LayerNorm's output is the Add's other input
            y = h + self.norm(h)
        elif self.add_first:
            s = h + 1.5
            y = s * self.mix(self.norm(h))
        else:
            y = h + self.mix(self.norm(h))
        if self.reads == 3:
            y = y + h * 0.5
        return torch.log_softmax(self.out(y.mean(1)), -1)


def _export(model, path, tokens):
    from webgpu_trainer import onnx_io
    torch.onnx.export(model.train(), torch.zeros(2, tokens, 6), str(path), opset_version=17,
                      dynamo=False, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, input_names=["input"],
                      output_names=["output"],
                      dynamic_axes={"input": {0: "N"}, "output": {0: "N"}})
    return onnx_io.load_bundle(path)


def _data(tokens):
    rng = np.random.default_rng(4)
    return rng.standard_normal((BATCH, tokens, 6)).astype(np.float32), np.arange(BATCH) % 4


def _step(device, graph, blob, tokens, on, tiled):
    x, labels = _data(tokens)
    with builder_patch({"SUM_IN_BACKWARD": on, "TILED": tiled}):
        return run(one_step(device, graph, blob, x, labels))


def _add_tos(plan):
    return sum(d[0][2].startswith("elementwise:") for d in plan.bwd)


# d = 4: a thread a row (CPU adapters' kernel for short rows); 48: 16 threads a row on GPU
# adapters; 300: a workgroup a row.
@pytest.mark.parametrize("d", [4, 48, 300])
@pytest.mark.parametrize("tiled", [False, True], ids=["cpu_kernels", "gpu_kernels"])
def test_layernorm_writes_the_sum(device, tmp_path, d, tiled):
    tokens = 3
    model = PreNorm(d)
    graph, blob = _export(model, tmp_path / "m.onnx", tokens)
    on, off = (_step(device, graph, blob, tokens, v, tiled) for v in (True, False))
    assert len(on["plan"].addends) == 1 and not off["plan"].addends
    assert len(on["plan"].bwd) == len(off["plan"].bwd) - 1
    assert _add_tos(on["plan"]) == _add_tos(off["plan"]) - 1
    x, labels = _data(tokens)
    ref = model.double()
    loss = nn.functional.nll_loss(ref(torch.from_numpy(x).double()), torch.from_numpy(labels))
    loss.backward()
    assert abs(on["loss"] - loss.item()) <= 1e-5 * abs(loss.item())
    for name, p in ref.named_parameters():
        want = p.grad.numpy()
        for res in (on, off):
            err = np.abs(res["grads"][name] - want).max() / max(np.abs(want).max(), 1e-30)
            assert err <= GRAD_RTOL, (name, err)
        np.testing.assert_allclose(on["grads"][name], off["grads"][name], rtol=1e-5,
                                   atol=1e-6 * np.abs(want).max())


@pytest.mark.parametrize("kw", [dict(reads=3), dict(add_first=True), dict(relu=True),
                                dict(direct=True)],
                         ids=["three_reads", "add_first", "relu_output", "layernorm_into_add"])
def test_not_taken(device, tmp_path, kw):
    """... and y = h + LayerNorm(h), where the Add hands dY to both of its inputs: the other
    part would be the LayerNorm's own dY, which its dispatch cannot also bind as the addend
    (a WebGPU validation error before the check)."""
    tokens = 3
    graph, blob = _export(PreNorm(8, **kw), tmp_path / "m.onnx", tokens)
    on = _step(device, graph, blob, tokens, True, True)
    off = _step(device, graph, blob, tokens, False, True)
    assert not on["plan"].addends and len(on["plan"].bwd) == len(off["plan"].bwd)
    for name, g in off["grads"].items():
        assert np.array_equal(on["grads"][name], g), name
