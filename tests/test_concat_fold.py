"""A ViT's class token: the Transpose of the patch tokens and the Expand of the class token
folded into the Concat that joins them (engine/rewrites/concats.py, ops/layout.py's strided
Concat parts and their gradients). Exported by both torch exporters and trained one step on
the CPU adapters' kernels and on the GPU adapters' (Builder.TILED) against torch in float64
(torch_models.export_and_step: forward vs onnxruntime, loss and every parameter gradient);
the plan must have dropped the ops it folds, and the fold moves the same values (the same
bits with it and without); what it must not fold stays."""

import numpy as np
import pytest

from conftest import make_graph, node, run
from harness import builder_patch

torch = pytest.importorskip("torch")
nn = torch.nn


class ClassToken(nn.Module):
    """A ViT's stem on 1x28x28: 7x7 patches (Conv 1 -> 8) as 16 tokens (flatten, transpose),
    a class token [1, 1, 8] expanded over the batch and concatenated before them (``last``:
    after them), positions added, a Linear 8 -> 8 with GELU, the class token's row (the
    first, or the last), Linear to 10. ``shared``: the patch tokens' mean also feeds the head,
    so the Transpose has two readers and stays."""

    def __init__(self, variant="first"):
        super().__init__()
        self.embed = nn.Conv2d(1, 8, 7, 7)
        self.cls = nn.Parameter(torch.randn(1, 1, 8))
        self.pos = nn.Parameter(torch.randn(1, 17, 8) * 0.1)
        self.mix = nn.Linear(8, 8)
        self.fc = nn.Linear(8, 10)
        self.variant = variant

    def forward(self, x):
        t = self.embed(x).flatten(2).transpose(1, 2)
        c = self.cls.expand(x.shape[0], -1, -1)
        h = torch.cat([t, c] if self.variant == "last" else [c, t], 1) + self.pos
        h = nn.functional.gelu(self.mix(h))
        row = h[:, -1] if self.variant == "last" else h[:, 0]
        if self.variant == "shared":
            row = row + t.mean(1)
        return self.fc(row)


@pytest.mark.parametrize("tiled", [False, True])
@pytest.mark.parametrize("dynamo", [False, True])
@pytest.mark.parametrize("variant", ["first", "last", "shared"])
def test_class_token_folds(device, tmp_path, tiled, dynamo, variant):
    from torch_models import export_and_step
    if dynamo:
        pytest.importorskip("onnxscript")
    torch.manual_seed(3)
    ops = {}
    with builder_patch({"TILED": tiled}):
        export_and_step(device, ClassToken(variant), tmp_path / "cls.onnx", dynamo,
                        18 if dynamo else 17, f"class token {'dynamo' if dynamo else 'ts'}",
                        batch=3, dynamic=True, plan_ops=ops)
    assert ops.get("Concat") == 1 and "Expand" not in ops, ops
    assert ops.get("Transpose", 0) == (1 if variant == "shared" else 0), ops


def test_fold_moves_the_same_bits(device, tmp_path):
    """Output, loss and the whole gradient buffer with the fold and without, bit for bit (the
    gathers copy the same values; the class token's gradient sums the same terms in the same
    order), on the GPU adapters' kernels (its sum in lanes)."""
    from webgpu_trainer import onnx_io
    from webgpu_trainer.engine.tools import parity
    torch.manual_seed(4)
    path = tmp_path / "cls.onnx"
    x = np.random.default_rng(4).standard_normal((20, 1, 28, 28)).astype(np.float32)
    torch.onnx.export(ClassToken().eval(), (torch.from_numpy(x),), str(path), dynamo=False,
                      opset_version=17, input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "N"}, "output": {0: "N"}})
    graph, blob = onnx_io.load_bundle(path)
    labels = (np.arange(20) % 10).astype(np.uint32).tobytes()
    got = {}
    for fold in (False, True):
        with builder_patch({"TILED": True, "FOLD_CONCAT_READS": fold}):
            plan = run(parity.load(device, graph, blob, 20, x.tobytes(), labels,
                                   loss="cross_entropy"))
        parity.run_step(device, plan, 1, 0)
        got[fold] = (run(device.read(plan.G)), run(device.read(plan.metrics, 0, 8)),
                     run(device.read(plan.acts[plan.graph.output].buf,
                                     plan.acts[plan.graph.output].offset, 20 * 10 * 4)),
                     sum(n["op_type"] in ("Transpose", "Expand") for n in plan.graph.nodes))
    assert got[False][3] == 2 and got[True][3] == 0
    assert got[True][:3] == got[False][:3]


def test_expand_along_the_axis_and_all_expands_stay():
    """An Expand that broadcasts along the Concat's axis is not folded (its size there is not
    its source's); of Concats whose every input is a foldable Expand one Expand stays, the
    shape the folded ones follow."""
    from webgpu_trainer.engine.graph import Graph
    from webgpu_trainer.engine.rewrites import concats

    def shape(*v):
        return {"dtype": "int64", "shape": [len(v)], "values": list(v)}
    p = np.ones((1, 1, 4), np.float32)
    tensors = [("p", p, "param"), ("q", p, "param")]
    nodes = [node("Expand", ["p", "s3"], ["e3"]), node("Concat", ["input", "e3"], ["c1"], axis=1),
             node("Expand", ["p", "s1"], ["e1"]), node("Expand", ["q", "s1"], ["f1"]),
             node("Concat", ["e1", "f1"], ["c2"], axis=1),
             node("Concat", ["c1", "c2"], ["y"], axis=1)]
    desc, _ = make_graph(nodes, tensors, [("input", ["N", 2, 4])], [("y", ["N", 7, 4])],
                         constants={"s3": shape(5, 3, 4), "s1": shape(5, 1, 4)})
    g = Graph(desc)
    out = concats.fold(g, g.shapes(5))
    reads = {n["outputs"][0]: n["attrs"].get("_reads") for n in out.nodes
             if n["op_type"] == "Concat"}
    assert reads["c1"] is None  # e3 broadcasts along axis 1: kept
    assert reads["c2"] == [{"expand": True}, None]  # f1 stays for e1 to follow
    assert [n["outputs"][0] for n in out.nodes if n["op_type"] == "Expand"] == ["e3", "f1"]
    assert out.shapes(5)["y"] == g.shapes(5)["y"] == [5, 7, 4]


def test_concat_reads_refuses_what_does_not_broadcast():
    from webgpu_trainer.engine.errors import GraphError
    from webgpu_trainer.engine.ops.layout_rules import concat_reads
    n = {"name": "/c", "op_type": "Concat",
         "attrs": {"axis": 1, "_reads": [{"expand": True}, {"perm": [0, 2, 1]}]}}
    assert concat_reads(n, [[1, 1, 4], [3, 4, 2]]) == [[3, 1, 4], [3, 2, 4]]
    with pytest.raises(GraphError, match=r"/c .*input 0 of shape \[1, 1, 5\] does not "
                                         r"broadcast to \[3, 2, 4\]"):
        concat_reads(n, [[1, 1, 5], [3, 4, 2]])
    n["attrs"]["_reads"] = [{"expand": True}, {"expand": True}]
    with pytest.raises(GraphError, match="every input is a folded Expand"):
        concat_reads(n, [[1, 1, 4], [1, 2, 4]])


@pytest.mark.parametrize("kind,read", [("transpose", [{"perm": [0, 2, 3, 1]}, None]),
                                       ("expand", [None, {"expand": True}])])
def test_layout_cases_fold(device, kind, read):
    """The op cases tests/cases/layout.py checks against the float64 numpy engine
    (``concat_reads_*``: a perm that is not its own inverse, an Expand of a rank-2 param on
    the last axis) reach the device folded."""
    from cases import layout
    from webgpu_trainer.engine.tools import parity
    case = next(c for c in layout.CASES if c.id == f"layout/concat_reads_{kind}")
    plan = run(parity.load(device, case.graph, case.blob, len(case.x), loss="cross_entropy"))
    concat = [n for n in plan.graph.nodes if n["op_type"] == "Concat"]
    assert [n["attrs"].get("_reads") for n in concat] == [read]
    assert not [n for n in plan.graph.nodes if n["op_type"] in ("Transpose", "Expand")]
