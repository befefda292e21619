"""Token datasets (manifest kind "tokens"): host/datasets/tokens.py and store (the synthetic
``markers`` source, the checks, the manifest), engine/train/data_tokens.py (DataSpec, the
model/dataset fit, the page's refusal) and the GPU gather of int32 and uint16 token rows."""

import json

import numpy as np
import pytest

from conftest import run

from webgpu_trainer.engine import config as run_config
from webgpu_trainer.engine.graph import Graph
from webgpu_trainer.engine.train import data_tokens
from webgpu_trainer.engine.train.data import DataSpec, Split, check_fits
from webgpu_trainer.host.datafiles import DataError
from webgpu_trainer.host.datasets import store, tokens


def _tree(root):
    return sorted((p.relative_to(root).as_posix(), p.read_bytes() if p.is_file() else b"")
                  for p in root.rglob("*"))


def test_markers_written_and_read_back(tmp_path):
    """The manifest says tokens, [16], vocab 32, uint16 .u16 shards; DataSpec reads it; every
    row's label is the marker that appears most in it."""
    a = tokens.markers(train=300, test=50)
    m = store.write_dataset(tmp_path, "markers", a, log=lambda s: None)
    assert (m["kind"], m["sample_shape"], m["vocab_size"], m["mean"]) == \
        ("tokens", [16], 32, [])
    ent = m["splits"]["train"]["images"]
    assert ent["dtype"] == "uint16" and ent["file"].endswith(".u16")
    assert ent["bytes"] == 300 * 16 * 2
    assert store.read_manifest(tmp_path / "markers") == json.loads(
        (tmp_path / "markers" / "manifest.json").read_text())
    spec = DataSpec.from_manifest(m)
    assert (spec.kind, spec.dtype, spec.sample_bytes, spec.vocab_size, spec.table()) == \
        ("tokens", "uint16", 32, 32, None)
    assert spec.describe() == "16 token ids of 32"
    counts = np.stack([(a.train_x == k + 1).sum(1) for k in range(4)], 1)
    assert np.array_equal(counts.argmax(1), a.train_y)
    top = np.sort(counts, 1)
    assert np.all(top[:, -1] > top[:, -2])  # no ties: the label is learnable


def test_out_of_range_token_refused_nothing_written(tmp_path):
    """A token id 32 with vocab_size 32: DataError naming split, row, position and value;
    the dataset already there is untouched."""
    store.write_dataset(tmp_path, "markers", tokens.markers(train=40, test=8),
                        log=lambda s: None)
    before = _tree(tmp_path)
    a = tokens.markers(train=40, test=8, seed=1)
    a.test_x[3, 7] = 32
    with pytest.raises(DataError, match=r"^test split: token 7 of row 3 is 32, outside 0..31 "
                                        r"\(vocab_size 32\)$"):
        store.write_dataset(tmp_path, "markers", a, log=lambda s: None)
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("vocab, msg", [
    (1, "vocab_size must be an integer 2..16777216, got 1"),
    ("32", "vocab_size must be an integer 2..16777216, got '32'"),
    (None, "vocab_size must be an integer 2..16777216, got None")])
def test_manifest_vocab_size_checked(tmp_path, vocab, msg):
    """A tokens manifest with a bad vocab_size: DataSpec and check_manifest name the field."""
    m = store.write_dataset(tmp_path, "markers", tokens.markers(train=40, test=8),
                            log=lambda s: None)
    m["vocab_size"] = vocab
    with pytest.raises(ValueError, match="^dataset manifest: " + msg.replace("(", r"\(")):
        DataSpec.from_manifest(m)
    with pytest.raises(DataError, match=r"manifest.json: vocab_size .* is not an integer"):
        store.check_manifest(m)


def _graph(rows=32, dtype="int64"):
    return Graph({"inputs": [{"name": "ids", "shape": ["N", 16], "dtype": dtype}],
                  "outputs": [{"name": "y", "shape": ["N", 4]}],
                  "tensors": [{"name": "emb", "shape": [rows, 4], "role": "param"}],
                  "constants": {"axes": {"dtype": "int64", "shape": [1], "values": [1]}},
                  "nodes": [{"name": "/emb/Gather", "op_type": "Gather",
                             "inputs": ["emb", "ids"], "outputs": ["e"], "attrs": {}},
                            {"name": "/mean", "op_type": "ReduceMean",
                             "inputs": ["e", "axes"], "outputs": ["y"],
                             "attrs": {"axes": [1], "keepdims": 0}}]})


SPEC = DataSpec("markers", "markers", "tokens", [16], ["a", "b", "c", "d"], dtype="uint16",
                vocab_size=32)


def _split(spec, n=4):
    return Split(bytes(n * spec.sample_bytes), bytes(n), n, bytes(n), spec)


def test_fit_checks():
    """A token model fits the tokens dataset; a table of 20 rows for 32 ids is refused, as is
    a float model on tokens and a token model on images (each naming both sides)."""
    check_fits(_graph(), SPEC, _split(SPEC), _split(SPEC))
    with pytest.raises(ValueError, match=r"^dataset markers has token ids 0..31 \(vocab_size "
                                         r"32\) but the model's embedding table has 20 rows"):
        check_fits(_graph(rows=20), SPEC, _split(SPEC), _split(SPEC))
    table = DataSpec("feats", "feats", "table", [16], ["a", "b"])
    with pytest.raises(ValueError, match=r"^model input 'ids' takes int64 token ids; dataset "
                                         r"feats gives 16 features"):
        check_fits(_graph(), table, _split(table), _split(table))
    g = _graph()
    g.input = dict(g.input, dtype="float32")
    with pytest.raises(ValueError, match=r"^model input 'ids' takes float32 values; dataset "
                                         r"markers gives 16 token ids of 32"):
        data_tokens.check_tokens(g, SPEC)


def test_page_refuses_tokens_dataset():
    """The page's worker refuses a tokens dataset on the field ``dataset``, naming the CLI."""
    with pytest.raises(run_config.ConfigError) as exc:
        data_tokens.refuse_in_page(SPEC)
    assert exc.value.errors == [("dataset", "markers holds token ids (16 token ids of 32); the "
                                 "page does not train tokens datasets yet: train it with "
                                 "`webgpu-trainer train MODEL.onnx --data markers`")]
    data_tokens.refuse_in_page(DataSpec("feats", "feats", "table", [16], ["a", "b"]))


def test_gpu_gather_int32_and_uint16_alike(device, tmp_path):
    """The same token rows from an int32 and a uint16 shard train identically on the device
    (the loss of every step equal bit for bit), the rows drawn in a shuffled order."""
    torch = pytest.importorskip("torch")
    import test_text_model as ttm
    from webgpu_trainer.cli import devices
    from webgpu_trainer.onnx_io import load_bundle
    torch.manual_seed(0)
    ttm._export(ttm.TextNet(), tmp_path / "t.onnx", False)
    graph, blob = load_bundle(tmp_path / "t.onnx")
    a = tokens.markers(train=6 * 8, test=8, seed=2)
    cfg = {"batch_size": 8, "epochs": 1, "seed": 1, "init": "finetune", "eval_images": 8,
           "val_images": 0, "report_every": 1, "optimizer": "sgd", "lr": 0.5}
    losses = {}
    for dtype in ("int32", "uint16"):
        spec = DataSpec("markers", "markers", "tokens", [16], a.classes, dtype=dtype,
                        vocab_size=32)
        rows = []

        def emit(what_, rows=rows, **kw):
            if what_ == "progress":
                rows.extend(kw["losses"])
        splits = [Split(x.astype(dtype).tobytes(), y.tobytes(), len(y), y.tobytes(), spec)
                  for x, y in (a.split("train"), a.split("test"))]
        tr = devices.make_trainer(device, graph, blob, cfg, *splits, emit)
        run(tr.setup())
        run(tr.run())
        losses[dtype] = [loss for _, loss, _ in rows]
    assert len(losses["int32"]) == 6
    assert losses["int32"] == losses["uint16"]
    assert losses["int32"][-1] < losses["int32"][0]
