"""POST /api/models/build (host/build_routes.py): the as-you-type check (rows with shapes,
parameters and mult-adds, errors naming layer and field), the build into the uploads (listed,
summarised, exported like an upload) and hostile bodies."""

import json

import onnx
import pytest
from starlette.testclient import TestClient

from webgpu_trainer.host import server

SPEC = [{"op": "conv", "out_channels": 4, "kernel_size": 3}, {"op": "relu"},
        {"op": "maxpool"}, {"op": "flatten"}, {"op": "linear", "out_features": "classes"}]


@pytest.fixture()
def client(tmp_path):
    root = tmp_path / "root"
    (root / "web").mkdir(parents=True)
    models = tmp_path / "models"
    models.mkdir()
    app = server.create_app(root, models, tmp_path / "mnist", tmp_path / "wheels",
                            uploads_dir=tmp_path / "uploads")
    return TestClient(app), tmp_path / "uploads"


def test_check_gives_rows_and_writes_nothing(client):
    c, uploads = client
    r = c.post("/api/models/build", json={"layers": SPEC, "input": [1, 28, 28], "classes": 10})
    assert r.status_code == 200
    body = r.json()
    assert body["ok"] and body["errors"] == [] and body["output"] == [10]
    assert [(x["index"], x["shape"], x["params"], x["macs"]) for x in body["rows"]] == [
        ("0", [4, 26, 26], 40, 4 * 26 * 26 * 9), ("1", [4, 26, 26], 0, 0),
        ("2", [4, 13, 13], 0, 0), ("3", [676], 0, 0), ("4", [10], 6770, 6760)]
    assert body["totals"] == {"params": 6810, "macs": 24336 + 6760, "layers": 5}
    assert body["spec"][2] == {"op": "maxpool", "kernel_size": 2, "stride": 2}
    assert body["name"].startswith("built-") and not uploads.exists()  # named, not written


def test_save_builds_an_upload_that_trains_and_exports(client):
    c, uploads = client
    req = {"layers": SPEC, "input": [3, 32, 32], "classes": 10, "save": True}
    body = c.post("/api/models/build", json=req).json()
    name = body["name"]
    assert name.startswith("built-") and (uploads / f"{name}.onnx").is_file()
    assert body["summary"]["totals"]["params"] == body["totals"]["params"] == 4 * 27 + 4 + \
        4 * 15 * 15 * 10 + 10
    again = c.post("/api/models/build", json=req).json()
    assert again["name"] == name  # the same layers for the same shape: the same model
    dry = c.post("/api/models/build", json={**req, "save": False}).json()
    assert dry["name"] == name and "summary" not in dry
    listed = {m["name"]: m for m in c.get("/api/models").json()}
    assert listed[name]["uploaded"] and listed[name]["params"] == body["totals"]["params"]
    # the shape it was built for: what a resumed run builds it again with (page resume.js)
    assert listed[name]["built_for"] == {"input": [3, 32, 32], "classes": 10}
    graph = c.get(f"/api/models/{name}/graph.json").json()
    assert graph["inputs"][0]["shape"] == ["N", 3, 32, 32]
    blob = c.get(f"/api/models/{name}/weights.bin").content
    out = c.post(f"/api/models/{name}/export", content=blob)
    assert out.status_code == 200
    onnx.checker.check_model(onnx.load_from_string(out.content), full_check=True)
    assert c.delete(f"/api/models/{name}").json() == {"deleted": name}


@pytest.mark.parametrize("raw,status,error", [
    (b"not json", 400, "the layer list is not valid JSON"),
    (b"[" * 40 + b"]" * 40, 400, "the layer list nests arrays or objects more than 32"),
    (b"[1]", 400, "the layer list: expected an object"),
    (json.dumps({"layers": [], "constructor": 1}).encode(), 400,
     "the layer list: unknown field(s) constructor"),
    (b'{"layers": [{"op": "conv", "out_channels": 1' + b"0" * 5000 + b"}]}", 400,
     "the layer list holds a number of more than 4,300 digits"),
    (b'{"layers": "' + b"x" * (70 << 10) + b'"}', 413, "the layer list is"),
])
def test_hostile_bodies(client, raw, status, error):
    c, uploads = client
    r = c.post("/api/models/build", content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == status
    assert r.json()["error"].startswith(error)
    assert not uploads.exists()


INPUT = ("input: expected the samples' shape, a list of whole numbers: images [C, H, W] or "
         "table rows [F]")


@pytest.mark.parametrize("body,problems", [
    ({}, ['layers: missing: expected a list of layers [{"op": ...}, ...]',
          "input: missing: " + INPUT[7:],
          "classes: missing: expected the dataset's class count, a whole number 2..4096"]),
    ({"layers": SPEC, "classes": 10}, ["input: missing: " + INPUT[7:]]),
    ({"layers": SPEC, "input": None, "classes": 10}, [INPUT + "; got null"]),
    ({"layers": SPEC, "input": 784, "classes": 10, "save": True}, [INPUT + "; got 784"]),
    ({"layers": SPEC, "input": 1e308, "classes": 10}, [INPUT + "; got 1e+308"]),
    ({"layers": SPEC, "input": {"C": 1}, "classes": 10}, [INPUT + '; got {"C": 1}']),
    ({"layers": SPEC, "input": "1x28x28", "classes": 10}, [INPUT + '; got "1x28x28"']),
    ({"layers": SPEC, "input": [1, 28, 28], "classes": "10"},
     ["classes: expected the dataset's class count, a whole number 2..4096; got \"10\""]),
    ({"layers": SPEC, "input": [1, 28, 28], "classes": True},
     ["classes: expected the dataset's class count, a whole number 2..4096; got true"]),
    ({"layers": {"op": "relu"}, "input": [1, 28, 28], "classes": 10},
     ['layers: expected a list of layers [{"op": ...}, ...]; got {"op": "relu"}']),
    ({"layers": SPEC, "input": [1, 28, 28], "classes": 10, "save": "yes"},
     ['save: expected true or false; got "yes"']),
    ({"layers": SPEC, "input": 1, "classes": 10, "save": 1},
     [INPUT + "; got 1", "save: expected true or false; got 1"]),
    ({"layers": SPEC, "input": "x" * 50, "classes": 10},
     [INPUT + '; got "' + "x" * 39 + '... (52 characters)']),
])
def test_a_body_field_of_the_wrong_type_is_a_400_naming_it(client, body, problems):
    """Was a 500 (TypeError in build_spec.Checked) for an input missing, null or a number;
    each field missing or of the wrong JSON type is named with what it must be, all at once,
    and nothing is written (not even with "save": true)."""
    c, uploads = client
    r = c.post("/api/models/build", json=body)
    assert r.status_code == 400, r.text
    assert r.json() == {"error": "the layer list: " + "; ".join(problems), "problems": problems}
    assert not uploads.exists()
    ok = c.post("/api/models/build", json={"layers": SPEC, "input": [1, 28, 28],
                                           "classes": 10})
    assert ok.status_code == 200 and ok.json()["ok"]  # the route still answers


@pytest.mark.parametrize("layers,message", [
    ([{}] * 10_000, "layer 0 op: missing: expected one of conv, maxpool"),
    ([{}] * 10_000, "layer 64: more than 64 layers in all"),
    ([{"op": "relu"}] * 4_000, "layer 64: more than 64 layers in all"),
    ([{"op": "conv", "out_channels": 1e308}], "layer 0 (conv) out_channels: 1e+308 is outside"),
    ([{"op": "conv", "out_channels": 4, "kernel_size": 15},
      {"op": "maxpool", "kernel_size": 15}],
     "layer 1 (maxpool) kernel_size: 15 does not fit its input 14x14 (the output would be 0x0)"),
])
def test_hostile_layers_answer_errors_and_save_nothing(client, layers, message):
    c, uploads = client
    body = json.dumps({"layers": layers, "input": [1, 28, 28], "classes": 10, "save": True},
                      separators=(",", ":"))
    r = c.post("/api/models/build", content=body)
    assert r.status_code == 200, r.text
    got = r.json()
    assert not got["ok"] and "name" not in got
    assert any(e["message"].startswith(message) for e in got["errors"]), got["errors"][:3]
    assert not uploads.exists()


@pytest.mark.parametrize("field,layer", [
    ("out_channels", '{"op": "conv", "out_channels": 1%s}'),
    ("p", '{"op": "dropout", "p": 1%s}'),
    ("negative_slope", '{"op": "leaky_relu", "negative_slope": -1%s}'),
])
def test_an_integer_of_400_digits_is_outside_not_a_500(client, field, layer):
    """Python compares a 400-digit int exactly (math.isfinite would raise OverflowError)."""
    c, uploads = client
    body = '{"layers": [%s], "input": [1, 28, 28], "classes": 10}' % (layer % ("0" * 400))
    r = c.post("/api/models/build", content=body.encode())
    assert r.status_code == 200, r.text
    (err,) = r.json()["errors"]
    assert err["field"] == field and "is outside" in err["message"], err
    assert not uploads.exists()


def test_an_upload_cannot_take_a_built_name(client):
    """A built model's name is a hash anyone can compute: an upload of that name is renamed,
    so "Use this network" never picks a planted file."""
    c, uploads = client
    req = {"layers": SPEC, "input": [1, 28, 28], "classes": 10, "save": True}
    name = c.post("/api/models/build", json=req).json()["name"]
    planted = (uploads / f"{name}.onnx").read_bytes()
    assert c.delete(f"/api/models/{name}").json() == {"deleted": name}
    up = c.post(f"/api/models/upload?filename={name}.onnx", content=planted)
    assert up.status_code == 200, up.text
    assert up.json()["name"] == f"{name}-upload"
    assert not (uploads / f"{name}.onnx").exists()


def test_the_oldest_built_models_are_removed_past_the_cap(client, monkeypatch):
    from webgpu_trainer.host import build_routes
    monkeypatch.setattr(build_routes, "MAX_BUILT", 2)
    c, uploads = client
    names = []
    for width in (2, 3, 4):
        layers = [{"op": "flatten"}, {"op": "linear", "out_features": width},
                  {"op": "linear", "out_features": "classes"}]
        body = {"layers": layers, "input": [1, 28, 28], "classes": 10, "save": True}
        names.append(c.post("/api/models/build", json=body).json()["name"])
    assert len(set(names)) == 3
    assert sorted(p.stem for p in uploads.glob("built-*.onnx")) == sorted(names[1:])


def test_built_model_lists_its_layers_and_rebuilds_from_them(client):
    """A built model's layer list (kept in its metadata) comes back in GET /api/models and its
    graph; the file removed, those layers build the same model again (a resumed run or a
    share link of it). A metadata list that is not JSON, or that no longer fits the model, is
    left out, and the model stays usable."""
    c, uploads = client
    req = {"layers": SPEC, "input": [1, 28, 28], "classes": 10, "save": True}
    body = c.post("/api/models/build", json=req).json()
    name = body["name"]
    listed = {m["name"]: m for m in c.get("/api/models").json()}
    assert listed[name]["layers"] == body["spec"]
    assert c.get(f"/api/models/{name}/graph.json").json()["layers"] == body["spec"]
    assert "layers" not in listed.get("seednet", {})
    path = uploads / f"{name}.onnx"
    data = path.read_bytes()
    path.unlink()
    again = c.post("/api/models/build", json={**req, "layers": listed[name]["layers"]}).json()
    assert again["name"] == name and path.read_bytes() == data
    other = [{"op": "flatten"}, {"op": "linear", "out_features": 32}, {"op": "relu"},
             {"op": "linear", "out_features": "classes"}]  # fits, but is another network
    for bad in ("not json [", json.dumps([{"op": "linear", "out_features": 5}]),
                json.dumps(other)):
        model = onnx.load_from_string(data)
        onnx.helper.set_model_props(model, {"webgpu-trainer.layers": bad})
        (uploads / "tampered.onnx").write_bytes(model.SerializeToString())
        item = {m["name"]: m for m in c.get("/api/models").json()}["tampered"]
        assert "layers" not in item and "error" not in item and item["params"] > 0


@pytest.mark.parametrize("field,raw,message", [
    ("input", '[1%s, 28, 28]' % ("0" * 400),
     "input shape: [1" + "0" * 38 + "... (411 characters): expected images [C, H, W]"),
    ("input", "[1e308, 28, 28]", "input shape: [1e+308, 28, 28]: expected images"),
    ("input", "[[[[[[1]]]]], 28, 28]", "input shape: [[[[[[1]]]]], 28, 28]: expected images"),
    ("classes", "1" + "0" * 400,
     "input classes: 1" + "0" * 39 + "... (401 characters): expected 2..4096 classes"),
])
def test_giant_or_nested_values_of_the_right_type_are_errors_not_a_500(client, field, raw,
                                                                      message):
    """Each field of the body swept with wrong types, giant numbers and nesting found no other
    500: a value of the right JSON type that does not fit is the 200's error, cut to 40
    characters, and nothing is written even with "save": true."""
    c, uploads = client
    fields = {"layers": json.dumps(SPEC), "input": "[1, 28, 28]", "classes": "10",
              "save": "true", field: raw}
    body = "{" + ", ".join(f'"{k}": {v}' for k, v in fields.items()) + "}"
    r = c.post("/api/models/build", content=body.encode())
    assert r.status_code == 200, r.text
    (err,) = r.json()["errors"]
    assert err["message"].startswith(message), err
    assert not uploads.exists()
