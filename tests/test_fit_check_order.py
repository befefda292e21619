"""The worker's checks of a page run (``data.check_run``, pure Python, called by
``worker/load.py`` before any shard is fetched) in the order the user should hear them: the
model against the dataset (input shape, outputs vs classes), then the batch size."""

import json
from pathlib import Path

import pytest

from webgpu_trainer.engine import config
from webgpu_trainer.engine.train.data import check_run
from webgpu_trainer.onnx_io import load_bundle

REPO = Path(__file__).resolve().parents[1]


def _manifest(shape, classes, train):
    return {"format": "webgpu-trainer/dataset@1", "name": "blobs", "kind": "image",
            "sample_shape": shape, "classes": [f"c{i}" for i in range(classes)],
            "mean": [0.5] * shape[0], "std": [0.2] * shape[0],
            "splits": {"train": {"count": train}, "test": {"count": 2}}}


@pytest.fixture(scope="module")
def seednet():
    graph, _ = load_bundle(REPO / "models" / "seednet.onnx")
    return json.loads(json.dumps(graph))


def test_input_misfit_before_batch_size(seednet):
    """[N, 1, 28, 28] on 3x8x8 images, batch 64 > 12 training images: the misfit is named,
    not the batch size (before, the batch size's ConfigError came first)."""
    with pytest.raises(ValueError) as e:
        check_run({"dataset": "blobs", "batch_size": 64}, seednet, _manifest([3, 8, 8], 3, 12))
    assert not isinstance(e.value, config.ConfigError)
    assert str(e.value) == (
        "model input 'input' [N, 1, 28, 28] does not fit dataset blobs (3x8x8 images): it "
        "takes [1, 28, 28] per sample (784 values), the dataset gives [3, 8, 8] (192 values); "
        "use a model with input [N, 3, 8, 8] or [N, 192]")


def test_outputs_misfit_before_batch_size(seednet):
    """SeedNet's 10 scores for 12 classes, batch too large: the outputs are named."""
    with pytest.raises(ValueError) as e:
        check_run({"dataset": "blobs", "batch_size": 64}, seednet,
                  _manifest([1, 28, 28], 12, 12))
    assert not isinstance(e.value, config.ConfigError)
    assert str(e.value) == ("model output 'output' [N, 10] does not fit dataset blobs (12 "
                            "classes): training needs [N, K] scores with K >= 12")


def test_batch_size_once_the_model_fits(seednet):
    """A model that fits: the batch size's limit is checked (and a good config passes)."""
    with pytest.raises(config.ConfigError) as e:
        check_run({"dataset": "blobs", "batch_size": 64}, seednet,
                  _manifest([1, 28, 28], 10, 12))
    assert e.value.errors == [("batch_size", "must be an integer in [2, 11] (at most the 11 "
                                             "training images), got 64")]
    cfg, spec = check_run({"dataset": "blobs", "batch_size": 4}, seednet,
                          _manifest([1, 28, 28], 10, 12))
    assert cfg["batch_size"] == 4 and spec.sample_shape == [1, 28, 28]
