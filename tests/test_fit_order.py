"""`train` reports a model that does not fit the dataset (input shape) before any check of the
batch size against the dataset's images: a 1x28x28 model on a 6-feature table with a batch
larger than the training split is refused for the shapes, and nothing is written."""

from pathlib import Path

from test_dataset_rgb import cli
from test_dataset_table import write_table

REPO = Path(__file__).resolve().parents[1]


def test_shape_mismatch_reported_before_batch_size(tmp_path):
    write_table(tmp_path / "datasets", "blobs")  # 240 training rows of 6 features
    out = tmp_path / "run"
    r = cli("train", REPO / "models" / "seednet.onnx", "--data", "blobs", "--data-root",
            tmp_path / "datasets", "--device", "cpu", "--batch-size", "1000", "--out", out,
            "--no-progress", check=False)
    assert r.returncode != 0
    assert "error: model input 'input' [N, 1, 28, 28] does not fit dataset blobs (6 features)" \
        ": it takes [1, 28, 28] per sample (784 values), the dataset gives [6] (6 values); " \
        "use a model with input [N, 6]" in r.stderr, r.stderr
    assert "batch" not in r.stderr, r.stderr
    assert not out.exists()
