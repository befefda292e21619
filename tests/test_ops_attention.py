"""F.scaled_dot_product_attention, nn.MultiheadAttention and nn.TransformerEncoderLayer as
the dynamo exporter decomposes them at opsets 18-21 (q and k each Mul'd by the scale's square
root, MatMul, Softmax, MatMul; with is_causal, a Trilu / Equal / Where mask the import folds
into a constant Added to the scores; MultiheadAttention's packed q / k / v projection through
Gather on activations): each imports with a dynamic batch and
trains one step like torch (forward vs onnxruntime, every parameter gradient vs torch in
float64). The ops are those of their own families (matmul, softmax, binary, layernorm,
gather); this file checks the exporter's composition of them."""

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
nn, F = torch.nn, torch.nn.functional


@pytest.fixture(autouse=True)
def fuse_small(monkeypatch):
    """Fold attentions at these tests' batch of 4 whatever the default
    (Builder.ATTENTION_MIN_ROWS)."""
    from webgpu_trainer.engine.plan import Builder
    monkeypatch.setattr(Builder, "ATTENTION_MIN_ROWS", 0)


class Sdpa(nn.Module):
    """The image's 28 rows as tokens -> q, k, v Linears -> 4 heads of SDPA -> mean -> Linear."""

    def __init__(self, causal):
        super().__init__()
        self.causal = causal
        # no key bias: it shifts a row of scores by a constant, its gradient is zero
        self.q, self.k, self.v = nn.Linear(28, 32), nn.Linear(28, 32, bias=False), \
            nn.Linear(28, 32)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = x.squeeze(1)

        def heads(t):
            return t.reshape(t.shape[0], 28, 4, 8).transpose(1, 2)

        y = F.scaled_dot_product_attention(heads(self.q(x)), heads(self.k(x)),
                                           heads(self.v(x)), is_causal=self.causal)
        return self.fc(y.transpose(1, 2).reshape(x.shape[0], 28, 32).mean(1))


class Encoder(nn.Module):
    """nn.TransformerEncoderLayer (d_model 28, 4 heads, GELU, pre-norm) over the 28 rows."""

    def __init__(self):
        super().__init__()
        self.enc = nn.TransformerEncoderLayer(28, 4, 64, dropout=0.0, activation="gelu",
                                              batch_first=True, norm_first=True)
        self.fc = nn.Linear(28, 10)
        with torch.no_grad():  # no two equal parameters (zero biases, unit norm weights):
            for p in self.parameters():  # the exporter would merge them into one initializer
                p.add_(0.1 * torch.randn_like(p))

    def forward(self, x):
        return self.fc(self.enc(x.squeeze(1)).mean(1))


@pytest.mark.parametrize("opset", [18, 21])
@pytest.mark.parametrize("name", ["sdpa", "sdpa_causal", "encoder"])
def test_dynamo_attention_trains_like_torch(device, tmp_path, name, opset):
    from torch_models import export_and_step
    torch.manual_seed(3)
    model = Encoder() if name == "encoder" else Sdpa(name == "sdpa_causal")
    plan_ops = {}
    graph = export_and_step(device, model, tmp_path / f"{name}.onnx", True, opset,
                            f"dynamo {name} opset {opset}", dynamic=True, plan_ops=plan_ops)
    ops = {n["op_type"] for n in graph["nodes"]}
    assert {"MatMul", "Softmax"} <= ops
    # the plan runs MatMul -> Softmax -> MatMul as one FusedAttention (rewrites/attention.py),
    # except under the causal mask, which an Add puts between the scores and the Softmax, and
    # for the encoder's heads of 7 (the fused kernels read rows as vec4s)
    fused = int(name == "sdpa")
    assert plan_ops.get("FusedAttention", 0) == fused, plan_ops
    assert plan_ops.get("Softmax", 0) == 1 - fused, plan_ops


class Cross(nn.Module):
    """Attention of the image's 28 rows (queries) over 14 tokens of two rows each (keys and
    values), by hand: 2 heads, query / key heads of ``dq``, value heads of ``dv`` (the fused
    kernel's TQ != TK, DQ != DV), the scale after the product. A head wider than 64 or not a
    multiple of 4 keeps the three ops."""

    def __init__(self, dq, dv, tq=28):
        super().__init__()
        self.dq, self.dv, self.tq = dq, dv, tq
        self.q, self.k = nn.Linear(784 // tq, 2 * dq), nn.Linear(56, 2 * dq, bias=False)
        self.v = nn.Linear(56, 2 * dv)
        self.fc = nn.Linear(2 * dv, 10)

    def forward(self, x):
        n = x.shape[0]
        rows, pairs = x.reshape(n, self.tq, 784 // self.tq), x.reshape(n, 14, 56)
        q = self.q(rows).reshape(n, self.tq, 2, self.dq).transpose(1, 2)
        k = self.k(pairs).reshape(n, 14, 2, self.dq).transpose(1, 2)
        v = self.v(pairs).reshape(n, 14, 2, self.dv).transpose(1, 2)
        att = (q @ k.transpose(-1, -2) * self.dq ** -0.5).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(n, self.tq, 2 * self.dv)
        return self.fc(y.mean(1))


@pytest.mark.parametrize("dq, dv, tq, fused", [(8, 12, 28, 1), (64, 4, 28, 1), (4, 8, 7, 1),
                                               (72, 8, 28, 0), (8, 6, 28, 0)])
@pytest.mark.parametrize("split", [True, False], ids=["lanes", "one_lane"])
def test_cross_attention_trains_like_torch(device, tmp_path, monkeypatch, dq, dv, tq, fused,
                                           split):
    """Queries and keys of different lengths (28 or 7 queries, 14 keys: 7 and 14 leave a
    partial step of the kernels' 4 a step) and head widths (dq, dv) on the fused kernel
    (heads up to 64 wide, ops/attention.DMAX, multiples of 4); a wider query head or a value
    head of 6 keeps the three ops. Either way the step matches torch (TorchScript exporter,
    opset 17). ``lanes``: the GPU adapters' kernels (Builder.TILED), which at this batch split
    each row's keys over 4 threads (dkv: a key's queries over 8 or 2, ops/attention.lanes);
    ``one_lane``: a thread a row, as at batch 1000 and on CPU adapters."""
    from torch_models import export_and_step

    from webgpu_trainer.engine.plan import Builder
    monkeypatch.setattr(Builder, "TILED", True if split else None)
    if not split:
        monkeypatch.setattr(Builder, "ATTENTION_LANE_THREADS", None)
    torch.manual_seed(5)
    plan_ops = {}
    export_and_step(device, Cross(dq, dv, tq), tmp_path / "cross.onnx", False, 17,
                    f"cross attention dq {dq} dv {dv} tq {tq}", plan_ops=plan_ops)
    assert plan_ops.get("FusedAttention", 0) == fused, plan_ops
    assert plan_ops.get("Softmax", 0) == 1 - fused, plan_ops


class Chained(nn.Module):
    """Two attentions where the first's output is the second's scores (its values 28 wide):
    the first folds, the second keeps its Softmax and MatMul (its first MatMul is inside the
    first fold)."""

    def __init__(self):
        super().__init__()
        self.q, self.k = nn.Linear(28, 16), nn.Linear(28, 16, bias=False)  # (zero gradient)
        self.v1, self.v2 = nn.Linear(28, 56), nn.Linear(28, 16)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        n = x.shape[0]
        x = x.reshape(n, 28, 28)

        def heads(t, d):
            return t.reshape(n, 28, 2, d).transpose(1, 2)
        att = (heads(self.q(x), 8) @ heads(self.k(x), 8).transpose(-1, -2)).softmax(-1)
        y = (att @ heads(self.v1(x), 28)).softmax(-1) @ heads(self.v2(x), 8)
        return self.fc(y.transpose(1, 2).reshape(n, 28, 16).mean(1))


def test_chained_attentions_fold_once(device, tmp_path):
    from torch_models import export_and_step
    torch.manual_seed(6)
    plan_ops = {}
    export_and_step(device, Chained(), tmp_path / "chained.onnx", False, 17, "chained attention",
                    plan_ops=plan_ops)
    assert (plan_ops.get("FusedAttention"), plan_ops.get("Softmax"),
            plan_ops.get("MatMul")) == (1, 1, 1), plan_ops


class RawQueries(nn.Module):
    """Queries (and, with ``raw_v``, values) straight from the image's rows, 7 heads of 4: the
    fused backward has no dQ (dV) to write, only what the Linears before it need."""

    def __init__(self, raw_v):
        super().__init__()
        self.raw_v = raw_v
        self.k = nn.Linear(28, 28, bias=False)  # a key bias has a zero gradient
        self.v = None if raw_v else nn.Linear(28, 28)
        self.fc = nn.Linear(28, 10)

    def forward(self, x):
        n = x.shape[0]
        x = x.reshape(n, 28, 28)

        def heads(t):
            return t.reshape(n, 28, 7, 4).transpose(1, 2)
        v = heads(x if self.raw_v else self.v(x))
        att = (heads(x) @ heads(self.k(x)).transpose(-1, -2) * 0.5).softmax(-1)
        return self.fc((att @ v).transpose(1, 2).reshape(n, 28, 28).mean(1))


@pytest.mark.parametrize("raw_v", [False, True])
def test_attention_without_every_gradient(device, tmp_path, raw_v):
    from torch_models import export_and_step
    torch.manual_seed(7)
    plan_ops = {}
    export_and_step(device, RawQueries(raw_v), tmp_path / "raw.onnx", False, 17,
                    f"attention, raw queries{' and values' if raw_v else ''}",
                    plan_ops=plan_ops)
    assert plan_ops.get("FusedAttention") == 1, plan_ops


def test_small_attentions_stay_unfused(device, tmp_path, monkeypatch):
    """Below ``Builder.ATTENTION_MIN_ROWS`` query rows the three ops run: the cross
    attention's 4 x 2 x 28 rows against a minimum of 225 and of 224."""
    from torch_models import export_and_step

    from webgpu_trainer.engine.plan import Builder
    for rows, fused in ((225, 0), (224, 1)):
        monkeypatch.setattr(Builder, "ATTENTION_MIN_ROWS", rows)
        torch.manual_seed(5)
        plan_ops = {}
        export_and_step(device, Cross(8, 12), tmp_path / "cross.onnx", False, 17,
                        f"cross attention, at least {rows} rows", plan_ops=plan_ops)
        assert plan_ops.get("FusedAttention", 0) == fused, (rows, plan_ops)


@pytest.mark.parametrize("dq, dv, tq", [(8, 12, 28), (4, 8, 7)])
def test_attention_one_key_a_step(device, tmp_path, monkeypatch, dq, dv, tq):
    """The kernels' loop of one key (query) a step, which they take from
    ``ops/attention.UNROLL_ROWS`` rows (many rows: the ViT at batch 1000), here at 4."""
    from torch_models import export_and_step

    from webgpu_trainer.engine.ops import attention
    monkeypatch.setattr(attention, "UNROLL_ROWS", 0)
    torch.manual_seed(5)
    plan_ops = {}
    export_and_step(device, Cross(dq, dv, tq), tmp_path / "cross.onnx", False, 17,
                    f"cross attention dq {dq} dv {dv} tq {tq}, U 1", plan_ops=plan_ops)
    assert plan_ops.get("FusedAttention", 0) == 1, plan_ops


class Divided(nn.Module):
    """Attention as often written by hand: the scores divided by sqrt(d) (a Div, which
    rewrites/scales.py folds as the product's 1 / sqrt(d)), 2 heads of 16."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(28, 32), nn.Linear(28, 32, bias=False), \
            nn.Linear(28, 32)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        n = x.shape[0]
        x = x.reshape(n, 28, 28)

        def heads(t):
            return t.reshape(n, 28, 2, 16).transpose(1, 2)
        s = heads(self.q(x)) @ heads(self.k(x)).transpose(-1, -2) / math.sqrt(16)
        y = s.softmax(-1) @ heads(self.v(x))
        return self.fc(y.transpose(1, 2).reshape(n, 28, 32).mean(1))


@pytest.mark.parametrize("dynamo", [False, True])
def test_divided_scores_fuse(device, tmp_path, dynamo):
    from torch_models import export_and_step
    torch.manual_seed(8)
    plan_ops = {}
    export_and_step(device, Divided(), tmp_path / "divided.onnx", dynamo, 18 if dynamo else 17,
                    f"attention / sqrt(d){' dynamo' if dynamo else ''}", plan_ops=plan_ops)
    assert plan_ops.get("FusedAttention") == 1 and "Div" not in plan_ops, plan_ops


@pytest.mark.parametrize("rows, length, target, want", [
    (7168, 28, 65536, 8), (16640, 65, 65536, 4), (260000, 65, 65536, 1), (7168, 7, 65536, 2),
    (7168, 8, 65536, 4), (7168, 3, 65536, 1), (100, 1, 65536, 1), (7168, 28, None, 1),
    (40000, 28, 65536, 2)])
def test_attention_lanes_rule(rows, length, target, want):
    """Threads a row (ops/attention.lanes): doubled up to 8 while the rows' threads are below
    the target and each lane keeps at least 2 keys (4 * lanes <= length)."""
    import types

    from webgpu_trainer.engine.ops import attention
    b = types.SimpleNamespace(ATTENTION_LANE_THREADS=target, tiled=True)
    assert attention.lanes(b, rows, length) == want
    assert attention.lanes(types.SimpleNamespace(ATTENTION_LANE_THREADS=target, tiled=False),
                           rows, length) == 1  # CPU adapters


def test_large_scores_split_over_lanes(device, tmp_path, monkeypatch):
    """Scores in the hundreds (q and k weights x 30: near one-hot rows) with each row's keys
    split over threads (GPU adapters' kernels): the lanes' maxima must meet before any
    exponential, else exp overflows (mutation: lane 0's maximum left out gives NaN). Same step
    as torch."""
    from torch_models import export_and_step

    from webgpu_trainer.engine.plan import Builder
    monkeypatch.setattr(Builder, "TILED", True)
    torch.manual_seed(5)
    model = Cross(8, 12)
    with torch.no_grad():
        model.q.weight.mul_(30.0)
        model.k.weight.mul_(30.0)
    plan_ops = {}
    export_and_step(device, model, tmp_path / "large.onnx", False, 17,
                    "cross attention, scores x 900", plan_ops=plan_ops)
    assert plan_ops.get("FusedAttention") == 1, plan_ops


@pytest.mark.parametrize("unroll", [True, False], ids=["U4", "U1"])
def test_more_lanes_than_keys(device, tmp_path, monkeypatch, unroll):
    """8 threads a row whatever the size (ops/attention.lanes patched): 7 queries over 14
    keys, so attention_dkv's 8 lanes of a key share 7 queries (one lane has none), with 4
    keys (queries) a loop step and with 1. Same step as torch."""
    from torch_models import export_and_step

    from webgpu_trainer.engine.ops import attention
    from webgpu_trainer.engine.plan import Builder
    monkeypatch.setattr(Builder, "TILED", True)
    monkeypatch.setattr(attention, "lanes", lambda b, rows, length: 8)
    if not unroll:
        monkeypatch.setattr(attention, "UNROLL_ROWS", 0)
    torch.manual_seed(5)
    plan_ops = {}
    export_and_step(device, Cross(4, 8, 7), tmp_path / "lanes.onnx", False, 17,
                    f"cross attention, 8 lanes, U {4 if unroll else 1}", plan_ops=plan_ops)
    assert plan_ops.get("FusedAttention") == 1, plan_ops
