"""What the live views say and show of a model's layers (issue 19 item 5; engine/train/probe.py):
the first weighted layer in words (a Conv's kernels, a Linear's weight rows as images, no image
view for an RNN or a Linear over features), the rows of a Linear's weight in [out, in] order
whichever way the exporter stored it (against numpy), and the first attention map (a ViT's
softmax(QK^T)) found, averaged over heads as the float64 numpy engine computes it, with its patch
grid. Native only (no device): the page's side is tests/test_page_zoo.py."""

from pathlib import Path

import numpy as np
import pytest
from conftest import FWD_RTOL, assert_close
from dataset_fixtures import mlp_model

from webgpu_trainer import onnx_io
from webgpu_trainer.cpu.engine import Engine, params_from_blob
from webgpu_trainer.engine.graph import Graph
from webgpu_trainer.engine.train import probe

ZOO = Path(__file__).resolve().parent / "fixtures" / "zoo"
ROW_SUM_TOL = 1e-12   # float64 softmax rows, averaged over heads


def _zoo(stem):
    graph, blob = onnx_io.load_bundle(ZOO / f"{stem}.onnx")
    return graph, blob, Graph(graph)


@pytest.mark.parametrize("stem,shape,text", [
    ("vit-ts", [3, 32, 32], "first layer is a Conv (embed.weight [64x3x4x4]): its kernels shown"),
    ("resnet8-dynamo", [3, 32, 32],
     "first layer is a Conv (stem.0.weight [16x3x3x3]): its kernels shown"),
    ("lstm-ts", [1, 28, 28], "first layer is an LSTM: no image view (its gate weights act on "
     "one time step of 28 values at a time; node /rnn/LSTM)"),
    ("gru-dynamo", [1, 28, 28], "first layer is a GRU: no image view (its gate weights act on "
     "one time step of 28 values at a time; node node_gru__1)"),
])
def test_first_layer_of_the_zoo_in_words(stem, shape, text):
    first = probe.first_layer(_zoo(stem)[2], shape)
    assert first["text"] == text
    assert first["view"] == ("filters" if "Conv" in text else None)


@pytest.mark.parametrize("form", ["gemm", "matmul", "transposed"])
def test_a_linear_first_layer_shows_its_rows_as_images(form, tmp_path):
    w1 = mlp_model(tmp_path / "mlp.onnx", form)
    graph, blob = onnx_io.load_bundle(tmp_path / "mlp.onnx")
    first = probe.first_layer(Graph(graph), [1, 28, 28])
    assert first["view"] == "rows" and first["weight"] == "fc1.weight", first
    assert first["text"] == "first layer is a Linear (fc1.weight): its 784->128 weight rows " \
        "shown as 28x28 images (the first 64 of 128)"
    t = next(t for t in graph["tensors"] if t["name"] == "fc1.weight")
    values = np.frombuffer(blob, np.float32, t["nbytes"] // 4, t["offset"])
    rows = probe.weight_rows(values.tolist(), t["shape"], first["rows"], probe.SHOWN_ROWS)
    np.testing.assert_array_equal(np.asarray(rows, np.float32).reshape(64, 784), w1[:64])
    # the same model over 784 features (a table): no image to show
    table = probe.first_layer(Graph(graph), [784])
    assert table["view"] is None and table["text"].endswith("over features: no image view")


@pytest.mark.parametrize("stem", ["vit-ts", "vit-dynamo"])
def test_the_first_attention_map_averaged_over_heads(stem):
    graph, blob, g = _zoo(stem)
    layer, name = probe.attention_softmax(g)
    assert layer in ("/encoder/layers.0/self_attn/Softmax", "node_Softmax_86"), layer
    shape = g.shapes(1)[name]
    assert shape[-3:] == [4, 65, 65], shape
    assert probe.patch_grid(g, 65) == (8, 8, 1)
    x = np.random.default_rng(3).standard_normal((1, 3, 32, 32))
    acts = Engine(graph, params_from_blob(graph, blob), np.float64).forward(x, train=False)[0]
    a = np.asarray(acts[name], np.float64)
    mean = np.asarray(probe.head_mean(a.reshape(-1).tolist(), shape)).reshape(65, 65)
    assert_close(mean, a.reshape(-1, 65, 65).mean(0), FWD_RTOL, "head mean")
    assert np.abs(mean.sum(1) - 1).max() <= ROW_SUM_TOL
    # the other encoder layer's Softmax is not the first
    later = [n["name"] for n in g.nodes if n["op_type"] == "Softmax"]
    assert len(later) == 2 and later[0] == layer


@pytest.mark.parametrize("stem", ["resnet8-ts", "lstm-dynamo", "mobilenetv2-ts"])
def test_no_attention_map_without_attention(stem):
    assert probe.attention_softmax(_zoo(stem)[2]) is None


def test_a_1d_conv_is_drawn_as_rows():
    """conv1d-ts ([N, 1, 784] on MNIST): its kernels [O, I, K] and feature maps [C, L] reach
    the page as [O, I, 1, K] and [C, 1, L] (views.js draws rank-4 kernels, rank-3 maps)."""
    graph = _zoo("conv1d-ts")[2]
    first = probe.first_layer(graph, [1, 28, 28])
    assert first["view"] == "filters" and len(first["shape"]) == 3, first
    assert first["text"].startswith("first layer is a 1-D Conv (") and \
        first["text"].endswith("): its kernels shown as 1 x K strips"), first["text"]
    o, i, k = first["shape"]
    assert probe.with_height(first["shape"], 4) == [o, i, 1, k]
    shapes = graph.shapes(1)
    maps = [shapes[name][1:] for _, name in probe.feature_maps(graph)]
    assert maps and all(len(m) == 2 for m in maps), maps
    assert [probe.with_height(m, 3) for m in maps] == [[m[0], 1, m[1]] for m in maps]
    assert probe.with_height([16, 3, 3, 3], 4) == [16, 3, 3, 3]  # 2-D kernels unchanged
