"""The committed import fixtures (tests/fixtures/models, made by scripts/make_fixtures.py): small
PyTorch models exported by the TorchScript exporter (opset 13 static batch, opset 17 dynamic
batch) and the dynamo exporter (opset 18, dynamic batch).

For each: it imports; the folded graph has no shape arithmetic left; the numpy engine in float64
reproduces torch's eval-mode outputs (<= 1e-4 relative) and torch's parameter gradients and
running statistics for a fixed loss (<= 1e-3 relative; torch computed them in train mode with
dropout disabled by p=0, so the Dropout ratios are set to 0 here); the graph works for other
batch sizes (7, 1); the GPU planner's shape inference accepts it; the inference export runs in
onnxruntime with torch's outputs and re-imports to the same weights.

Needs numpy / onnx / onnxruntime only (no torch). The largest errors go to the summary that
pytest prints (conftest.ERRORS, tag ``onnx <fixture>``).
"""
from __future__ import annotations

import copy
import json
import pathlib

import numpy as np
import onnx
import pytest
from conftest import _record, rel_err

from webgpu_trainer import onnx_io
from webgpu_trainer.cpu.engine import Engine, params_from_blob
from webgpu_trainer.engine.graph import Graph, GraphError

ROOT = pathlib.Path(__file__).resolve().parents[1]
FIXTURES = sorted((ROOT / "tests" / "fixtures" / "models").glob("*.onnx"))
OUT_RTOL = 1e-4
GRAD_RTOL = 1e-3
SHAPE_OPS = {"Shape", "Size", "Constant", "ConstantOfShape", "Range", "Cast",
             "CastLike", "Equal", "Where"}
IDS = [p.stem for p in FIXTURES]


# Models the TorchScript exporter cannot write at opset 13 (scaled_dot_product_attention needs
# opset 14): only ts17 and dynamo18 (scripts/make_fixtures.py, the model's EXPORTS).
NO_TS13 = {"transformer_enc"}


def test_fixture_set():
    """>= 10 models x 3 exports (2 for NO_TS13), every .onnx with its .npz, small enough to
    commit."""
    models = {p.stem.rsplit("-", 1)[0] for p in FIXTURES}
    exports = {p.stem.rsplit("-", 1)[1] for p in FIXTURES}
    assert len(models) >= 10 and exports == {"ts13", "ts17", "dynamo18"}
    assert len(FIXTURES) == len(models) * len(exports) - len(NO_TS13 & models)
    total = 0
    for p in FIXTURES:
        assert p.with_suffix(".npz").is_file(), p
        total += p.stat().st_size + p.with_suffix(".npz").stat().st_size
    assert total < 3 * 1024 * 1024


@pytest.fixture(scope="module")
def loaded():
    cache: dict = {}

    def get(path):
        if path not in cache:
            graph, blob = onnx_io.load_bundle(path, check_trainable=False)
            cache[path] = (graph, blob, dict(np.load(path.with_suffix(".npz"))))
        return cache[path]
    return get


def _engine(graph, blob, ratio0=False):
    """The float64 numpy engine; xfail (not strict) for an op it has no kernel for yet."""
    if ratio0:
        graph = copy.deepcopy(graph)
        graph["constants"]["__ratio0"] = {"dtype": "float32", "shape": [], "values": [0.0]}
        for n in graph["nodes"]:
            if n["op_type"] == "Dropout":
                n["inputs"] = [n["inputs"][0], "__ratio0"] + n["inputs"][2:]
                n["attrs"]["ratio"] = 0.0
    try:
        return Engine(graph, params_from_blob(graph, blob), np.float64)
    except NotImplementedError as exc:
        pytest.xfail(reason=str(exc))


@pytest.mark.parametrize("path", FIXTURES, ids=IDS)
def test_imports(path, loaded):
    graph, blob, ref = loaded(path)
    json.dumps(graph)
    meta = json.loads(str(ref["meta"]))
    assert graph["inputs"][0]["shape"][1:] == [1, 28, 28]
    assert isinstance(graph["inputs"][0]["shape"][0], str)  # any batch, also for static exports
    assert graph["outputs"][0]["shape"] == [graph["inputs"][0]["shape"][0], 10]
    assert len(blob) == graph["weights_nbytes"]
    names = [t["name"] for t in graph["tensors"]]
    assert len(names) == len(set(names))
    params = {t["name"] for t in graph["tensors"] if t["role"] == "param"}
    buffers = {t["name"] for t in graph["tensors"] if t["role"] == "buffer"}
    assert params == {k[5:] for k in ref if k.startswith("grad/")}
    assert buffers == {k[7:] for k in ref if k.startswith("buffer/")}
    # the weights are the file's initializers
    model = onnx.load(str(path))
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    for name, arr in params_from_blob(graph, blob, np.float32).items():
        np.testing.assert_array_equal(arr, inits[name])
    if meta["exporter"] == "torchscript" and not meta["dynamic_batch"]:
        assert any("fixed batch size of 4" in n for n in graph["notes"])


@pytest.mark.parametrize("path", FIXTURES, ids=IDS)
def test_folded(path, loaded):
    """No shape arithmetic is left: every node reads at least one activation or parameter
    (the unoptimised dynamo export transposes nn.Linear weights in the graph)."""
    graph, _, _ = loaded(path)
    for n in graph["nodes"]:
        assert n["op_type"] not in SHAPE_OPS, n
        assert any(x and x not in graph["constants"] for x in n["inputs"]), n
    for n in graph["nodes"]:
        # the batch dim as 0 (copy; first, or where it is: attention's [L, N, ...]) or -1
        if n["op_type"] == "Reshape":
            shape = graph["constants"][n["inputs"][1]]["values"]
            assert (0 in shape or -1 in shape) and shape.count(-1) <= 1, shape
            if 0 in shape:
                assert n["attrs"].get("allowzero", 0) == 0


@pytest.mark.parametrize("path", FIXTURES, ids=IDS)
def test_engine_matches_torch(path, loaded):
    graph, blob, ref = loaded(path)
    tag = f"onnx {path.stem}"
    eng = _engine(graph, blob)
    vals, _, _ = eng.forward(ref["x"], train=False)
    err = rel_err(vals[graph["outputs"][0]["name"]], ref["out"])
    _record(tag, "fwd", err)
    assert err <= OUT_RTOL, f"eval output: {err:.3g}"

    eng = _engine(graph, blob, ratio0=True)
    assert eng.head() == str(ref["loss_kind"])
    res = eng.step(ref["x"], ref["labels"], train=True)
    err = abs(res["loss"] - float(ref["loss"])) / abs(float(ref["loss"]))
    _record(tag, "fwd", err)
    assert err <= OUT_RTOL, f"loss: {err:.3g}"
    want = {k[5:]: v for k, v in ref.items() if k.startswith("grad/")}
    assert set(res["grads"]) == set(want)
    for name, g in want.items():
        err = rel_err(res["grads"][name], g)
        _record(tag, "grad", err)
        assert err <= GRAD_RTOL, f"gradient of {name}: {err:.3g}"
    for key in (k for k in ref if k.startswith("buffer/")):
        err = rel_err(res["buffers"][key[7:]], ref[key])
        _record(tag, "fwd", err)
        assert err <= OUT_RTOL, f"running statistic {key[7:]}: {err:.3g}"


@pytest.mark.parametrize("path", FIXTURES, ids=IDS)
def test_other_batch_sizes(path, loaded):
    """Eval outputs are per sample: batches of 7 and 1 give torch's rows (static exports too)."""
    graph, blob, ref = loaded(path)
    eng = _engine(graph, blob)
    out = graph["outputs"][0]["name"]
    for rows in ([0, 1, 2, 3, 2, 1, 0], [2]):
        vals, _, _ = eng.forward(ref["x"][rows], train=False)
        assert rel_err(vals[out], ref["out"][rows]) <= OUT_RTOL


@pytest.mark.parametrize("path", FIXTURES, ids=IDS)
def test_gpu_planner_shapes(path, loaded):
    """graph.Graph (the GPU engine's op registry) infers [batch, 10] for batches 7 and 1."""
    graph, _, _ = loaded(path)
    try:
        g = Graph(graph)
    except GraphError as exc:
        pytest.xfail(reason=str(exc))
    for batch in (7, 1):
        assert g.shapes(batch)[g.output] == [batch, 10]
    onnx_io.load_bundle(path)  # and the strict import (ops the engine trains) accepts it


@pytest.mark.parametrize("path", FIXTURES, ids=IDS)
def test_export_round_trip(path, loaded, tmp_path):
    """Perturbed weights -> inference .onnx: checker, onnxruntime == engine, same re-import."""
    import onnxruntime as ort

    graph, blob, ref = loaded(path)
    params = params_from_blob(graph, blob, np.float32)
    rng = np.random.default_rng(7)
    new = {k: (v + rng.normal(0, 0.01, v.shape) if "running_var" not in k else
               v * rng.uniform(0.9, 1.1, v.shape)).astype(np.float32) for k, v in params.items()}
    from webgpu_trainer.cpu.engine import blob_from_params
    new_blob = blob_from_params(graph, new, len(blob))
    data = onnx_io.export_onnx(path, new_blob, {"dataset": "test"})
    model = onnx.load_from_string(data)
    onnx.checker.check_model(model, full_check=True)
    assert "Dropout" not in {n.op_type for n in model.graph.node}
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    (got,) = sess.run(None, {sess.get_inputs()[0].name: ref["x"]})
    eng = _engine(graph, new_blob)
    vals, _, _ = eng.forward(ref["x"], train=False)
    assert rel_err(got, vals[graph["outputs"][0]["name"]]) <= OUT_RTOL
    out = tmp_path / path.name
    out.write_bytes(data)
    graph2, blob2 = onnx_io.load_bundle(out, check_trainable=False)
    assert [t["name"] for t in graph2["tensors"]] == [t["name"] for t in graph["tensors"]]
    assert blob2 == new_blob
