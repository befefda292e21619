"""Fixtures of the server's app in-process (Starlette's TestClient; no browser, no port), shared
by the route tests (registered for every module by tests/conftest.py):

- ``config_client``: the app over the repository's models and an MNIST manifest of 640 training
  and 100 test images (no shards): the settings check and the schema
  (tests/test_config.py, tests/test_config_body.py).
- ``dataset_client``: ``(client, datasets folder, app)``: the app with an empty data root
  (tests/test_dataset_upload.py, tests/test_dataset_upload_inputs.py).
"""

import json
from pathlib import Path

import pytest
from starlette.testclient import TestClient

REPO = Path(__file__).resolve().parents[1]


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "web").mkdir(parents=True)
    return root


@pytest.fixture()
def config_client(tmp_path):
    """A TestClient of the app over the repository's models and a 640 / 100 image MNIST
    manifest."""
    from webgpu_trainer.host import server
    data = tmp_path / "mnist"
    data.mkdir()
    (data / "manifest.json").write_text(json.dumps(
        {"splits": {"train": {"count": 640}, "test": {"count": 100}}}))
    return TestClient(server.create_app(_root(tmp_path), REPO / "models", data,
                                        tmp_path / "wheels"))


@pytest.fixture()
def dataset_client(tmp_path):
    """``(TestClient, the data root, the app)``: the app with an empty data root in
    ``tmp_path / "datasets"``."""
    from webgpu_trainer.host import server
    app = server.create_app(_root(tmp_path), tmp_path / "models", tmp_path / "mnist",
                            tmp_path / "wheels", data_root=tmp_path / "datasets")
    return TestClient(app), tmp_path / "datasets", app
