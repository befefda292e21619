"""The run configuration (issue 8, part 1): one schema, one validator (``engine/config``), the
CLI flags made from it, the server's schema and validation routes.

Every error names its field and the allowed values; wrong types are errors, never rounded; the
defaults round-trip through config.json; config.json of earlier versions still loads."""

import json
import math
import re
import time

import pytest

from webgpu_trainer.engine import config
from webgpu_trainer.engine.config import FIELDS, ConfigError


# config.json's "config" as webgpu-trainer wrote it before the run configuration (commit
# fdeef2b: `train --device cpu --train-images 96 --batch-size 32 --eval-images 32 --optimizer
# adamw --amsgrad --lr 0.01 --seed 4 --scheduler steplr --gamma 0.5 --loss cross_entropy
# --label-smoothing 0.1 --head-only --init finetune`)
LEGACY = {"optimizer": "adamw", "lr": 0.01, "batch_size": 32, "epochs": 1, "seed": 4,
          "init": "finetune", "momentum": 0.0, "weight_decay": 0.0, "max_steps": 0,
          "eval_images": 32, "report_every": 10,
          "loss": {"loss": "cross_entropy", "reduction": "mean", "label_smoothing": 0.1,
                   "weight": None},
          "trainable": ["fc2.weight", "fc2.bias", "norm2.weight", "norm2.bias"],
          "train_images": 96, "device": "cpu", "clip_grad_norm": 0.0,
          "optimizer_args": {"amsgrad": True},
          "scheduler": {"name": "StepLR", "gamma": 0.5, "step_size": 1}}


def errors_of(data, **kw) -> list:
    with pytest.raises(ConfigError) as info:
        config.parse(data, **kw)
    return info.value.errors


# ------------------------------------------------------------------------------- validation

@pytest.mark.parametrize("data, kw, field, needle", [
    ({"seed": 1.5}, {}, "seed", "must be an integer in [0, 4,294,967,295], got 1.5"),
    ({"epochs": 1.7}, {}, "epochs", "must be an integer in [1, 1000], got 1.7"),
    ({"epochs": 10 ** 6}, {}, "epochs", "must be an integer in [1, 1000], got 1000000"),
    ({"batch_size": 1}, {}, "batch_size", "must be an integer in [2, 65,536], got 1"),
    ({"batch_size": 100000}, {"train_images": 60000}, "batch_size",
     "must be an integer in [2, 65,536], got 100000"),
    ({"batch_size": 1000, "train_images": 640}, {"train_images": 60000}, "batch_size",
     "must be an integer in [2, 640] (at most the 640 training images), got 1,000"),
    ({"train_images": 20_000_000}, {}, "train_images", "must be an integer in [0, 10,000,000]"),
    ({"train_images": 70000, "val_images": 0}, {"train_images": 60000}, "train_images",
     "must be an integer in [0, 60,000] (the 60,000 training images less the last 0 held out "
     "for validation; 0 = all of them), got 70,000"),
    ({"eval_images": 20000}, {"test_images": 10000}, "eval_images",
     "must be an integer in [1, 10,000] (the dataset's 10,000 test images), got 20,000"),
    ({"lr": 0}, {}, "lr", "must be a number > 0, got 0"),
    ({"lr": float("nan")}, {}, "lr", "must be a number > 0, got nan"),
    ({"lr": True}, {}, "lr", "must be a number > 0, got True"),
    ({"seed": True}, {}, "seed", "must be an integer in [0, 4,294,967,295], got True"),
    ({"lr": "0.1"}, {}, "lr", "must be a number > 0, got '0.1'"),
    ({"optimizer": "adam", "momentum": 0.9}, {}, "momentum",
     "applies to optimizer sgd, rmsprop only, not optimizer adam"),
    ({"optimizer": "sgd", "momentum": 1.0}, {}, "momentum", "must be a number in [0, 1)"),
    ({"optimizer": "lion"}, {}, "optimizer",
     "must be one of sgd, adam, adamw, adagrad, rmsprop, adadelta, got 'lion'"),
    ({"betas": [0.9]}, {}, "betas", "must be 2 numbers, each in [0, 1), got 1 value(s)"),
    ({"betas": [0.9, 1.0]}, {}, "betas", "must be 2 numbers, each in [0, 1), got 1.0"),
    ({"nesterov": True, "optimizer": "sgd"}, {}, "nesterov", "needs momentum > 0"),
    ({"scheduler": "exponential"}, {}, "gamma", "required by scheduler exponential (a number > 0)"),
    ({"gamma": 0.5}, {}, "gamma", "applies to scheduler steplr, exponential only, not scheduler "
                                  "none"),
    ({"scheduler": "onecycle", "optimizer": "adagrad"}, {}, "cycle_momentum",
     "adagrad has no momentum or beta1"),
    ({"scheduler": "onecycle", "total_steps": 50, "val_images": 0}, {"train_images": 6400},
     "total_steps",
     "must be an integer >= 100 (this run takes 100 steps"),
    ({"loss": "nll", "label_smoothing": 0.1}, {}, "label_smoothing",
     "applies to loss auto, cross_entropy, nll_log only, not loss nll"),
    ({"class_weights": [1.0] * 3}, {"classes": 10}, "class_weights",
     "must be 10 numbers, each >= 0 (one per class of the model), got 3"),
    ({"trainable": []}, {}, "trainable", "nothing would train"),
    ({"trainable": "fc2.weight"}, {}, "trainable", "must be a list of names"),
    ({"trainable": ["fc2.weight"], "head_only": True}, {}, "head_only", "give one of"),
    ({"learning_rate": 0.1}, {}, "learning_rate", "unknown option (known: optimizer, lr, "),
    ({"augment_crop": -1}, {}, "augment_crop", "must be an integer in [0, 32], got -1"),
    ({"augment_crop": 33}, {}, "augment_crop", "must be an integer in [0, 32], got 33"),
    ({"augment_crop": 2.5}, {}, "augment_crop", "must be an integer in [0, 32], got 2.5"),
])
def test_errors_name_the_field_and_the_allowed_values(data, kw, field, needle):
    errors = errors_of(data, **kw)
    assert len(errors) == 1, errors
    assert errors[0][0] == field and needle in errors[0][1], errors
    if "must be" in needle:  # the allowed values, in words
        assert re.search(r"must be (an integer|a number|one of|\d+ numbers|a list|2 numbers)"
                         r".*([\[(]\d|[<>]=? \d|, )", errors[0][1]), errors


def test_every_error_is_collected():
    errors = errors_of({"seed": 1.5, "epochs": 0, "lr": -1, "optimizer": "adam",
                        "momentum": 0.5, "colour": "red"})
    assert [f for f, _ in errors] == ["colour", "lr", "epochs", "seed", "momentum"]
    text = str(ConfigError(errors))
    assert text.startswith("colour: unknown option") and "; lr: must be a number > 0" in text


def test_wrong_types_are_never_rounded():
    for field in ("seed", "epochs", "batch_size", "max_steps", "eval_images", "train_images"):
        errors = errors_of({field: 2.0})
        assert errors[0][0] == field and "must be an integer" in errors[0][1]
    assert config.parse({"lr": 1})["lr"] == 1.0 and isinstance(config.parse({"lr": 1})["lr"],
                                                              float)


# ------------------------------------------------------------------------------- defaults

def test_defaults_are_torchs_per_optimizer():
    want = {"sgd": (1e-3, None), "adam": (1e-3, 1e-8), "adamw": (1e-3, 1e-8),
            "adagrad": (1e-2, 1e-10), "rmsprop": (1e-2, 1e-8), "adadelta": (1.0, 1e-6)}
    for name, (lr, eps) in want.items():
        cfg = config.parse({"optimizer": name})
        assert (cfg["lr"], cfg.get("eps")) == (lr, eps), name
    assert config.parse({"optimizer": "adamw"})["weight_decay"] == 0.01
    assert config.parse({"optimizer": "adam"})["weight_decay"] == 0.0
    assert config.parse({"scheduler": "steplr"})["gamma"] == 0.1


@pytest.mark.parametrize("optimizer", list(config.OPTIMIZERS))
@pytest.mark.parametrize("scheduler", [s for s in config.SCHEDULERS if s != "exponential"])
def test_defaults_round_trip_through_config_json(optimizer, scheduler):
    if scheduler == "onecycle" and optimizer in ("adagrad", "adadelta"):
        extra = {"cycle_momentum": False}
    else:
        extra = {}
    cfg = config.parse({"optimizer": optimizer, "scheduler": scheduler, **extra},
                       train_images=60000)
    doc = json.loads(json.dumps({"config": cfg.to_json()}))
    again = config.parse(doc["config"])
    assert again == cfg
    assert config.parse(again, train_images=60000) == cfg  # resolved values stay


def test_run_dependent_defaults_resolved_once():
    cfg = config.parse({"scheduler": "onecycle", "lr": 0.05, "epochs": 3, "batch_size": 100,
                        "max_steps": 250}, train_images=60000)
    # 55,000 training images (5,000 held out for validation) / 100 = 550 steps per epoch
    assert (cfg["max_lr"], cfg["total_steps"]) == (0.05, 1650)  # max_steps only stops early
    assert cfg.steps(60000) == (550, 250)
    cos = config.parse({"scheduler": "cosine", "epochs": 4, "interval": "step",
                        "batch_size": 64, "train_images": 640}, train_images=60000)
    assert cos["T_max"] == 40 and cos.steps(60000) == (10, 40)
    assert config.parse({"scheduler": "cosine", "epochs": 4, "val_images": 0},
                        train_images=64)["T_max"] == 4
    unresolved = config.parse({"scheduler": "onecycle"})
    assert unresolved["total_steps"] is None and unresolved["max_lr"] is None


def test_augmentation_fields_off_by_default_and_from_the_cli():
    """augment_crop / augment_flip: off by default, reach the trainers, and come from
    --augment-crop N / --augment-flip."""
    t = config.parse({}).trainer_config()
    assert (t["augment_crop"], t["augment_flip"]) == (0, False)
    t = config.parse({"augment_crop": 4, "augment_flip": True}).trainer_config()
    assert (t["augment_crop"], t["augment_flip"]) == (4, True)
    assert errors_of({"augment_flip": "yes"}) == [
        ("augment_flip", "must be true or false, got 'yes'")]
    from webgpu_trainer.cli import main as cli_mod
    from webgpu_trainer.cli.options import given
    args = cli_mod.build_parser().parse_args(["train", "m.onnx", "--augment-crop", "4",
                                              "--augment-flip"])
    assert given(args) == {"augment_crop": 4, "augment_flip": True}


def test_trainer_config_is_the_engines_shape():
    cfg = config.parse({"optimizer": "rmsprop", "momentum": 0.5, "centered": True,
                        "scheduler": "steplr", "loss": "cross_entropy",
                        "class_weights": [1.0] * 10, "val_images": 0}, train_images=640)
    t = cfg.trainer_config()
    assert (t["optimizer"], t["lr"], t["momentum"], t["weight_decay"]) == \
        ("rmsprop", 1e-2, 0.5, 0.0)
    assert t["optimizer_args"] == {"alpha": 0.99, "eps": 1e-8, "centered": True}
    assert t["scheduler"] == {"name": "StepLR", "step_size": 1, "gamma": 0.1,
                              "interval": "epoch"}
    assert t["loss"] == {"loss": "cross_entropy", "reduction": "mean", "label_smoothing": 0.0,
                         "weight": [1.0] * 10}
    assert config.parse({"optimizer": "adam"}).trainer_config()["momentum"] == 0.0


# ------------------------------------------------------------------------------- legacy

def test_legacy_config_json_loads():
    cfg = config.parse(LEGACY)
    assert cfg.to_json() == {
        "optimizer": "adamw", "lr": 0.01, "batch_size": 32, "epochs": 1, "seed": 4,
        "dataset": "mnist", "init": "finetune", "max_steps": 0, "train_images": 96, "val_images": 0,
        "eval_images": 32, "checkpoint_every_s": 60.0,  # newer than LEGACY: the default
        "augment_crop": 0, "augment_flip": False,  # newer than LEGACY: off
        "report_every": 10, "device": "cpu", "weight_decay": 0.01,  # 0 meant torch's 1e-2
        "betas": [0.9, 0.999], "eps": 1e-8, "amsgrad": True, "clip_grad_norm": 0.0,
        "scheduler": "steplr", "step_size": 1, "gamma": 0.5, "interval": "epoch",
        "loss": "cross_entropy", "reduction": "mean", "label_smoothing": 0.1,
        "class_weights": None, "trainable": LEGACY["trainable"]}
    # a OneCycleLR spec, Adam's ignored momentum, a loss given by name
    old = {**LEGACY, "optimizer": "sgd", "momentum": 0.9, "weight_decay": 0.0,
           "optimizer_args": {"nesterov": True}, "loss": "nll",
           "scheduler": {"name": "OneCycleLR", "max_lr": 0.1, "total_steps": 12}}
    cfg = config.parse(old)
    assert (cfg["scheduler"], cfg["max_lr"], cfg["total_steps"], cfg["loss"]) == \
        ("onecycle", 0.1, 12, "nll")
    assert config.parse({**LEGACY, "optimizer": "adam", "momentum": 0.9,
                         "optimizer_args": {}}).get("momentum") is None
    assert config.parse({**LEGACY, "scheduler": None})["scheduler"] == "none"


@pytest.mark.parametrize("value,shown", [
    ("../etc", "'../etc'"), ("CIFAR10", "'CIFAR10'"), ("", "''"),
    ("a" * 41, "'" + "a" * 40 + "'... (41 characters)"), ("-x", "'-x'"), (10, "10"), (None, None)])
def test_dataset_field(value, shown):
    """``dataset``: a dataset NAME (a folder under the data root; in URLs of the page's
    worker), default mnist; anything else refused naming the value; fixed on --resume."""
    if value is None:
        assert config.parse({})["dataset"] == "mnist"
        assert config.parse({"dataset": "cifar10"})["dataset"] == "cifar10"
        assert config.parse({"dataset": "my_photos-2"})["dataset"] == "my_photos-2"
        with pytest.raises(ConfigError) as info:
            config.resume_with(config.parse({"dataset": "mnist"}), {"dataset": "cifar10"})
        assert info.value.errors == [("dataset", "may not change on --resume (the run has "
                                                 "'mnist', 'cifar10' given): it would not "
                                                 "continue exactly")]
        return
    with pytest.raises(ConfigError) as info:
        config.parse({"dataset": value})
    assert info.value.errors == [
        ("dataset", f"must be a name matching [a-z0-9][a-z0-9_-]{{0,39}}, got {shown}")]


def test_resume_update():
    stored = config.parse({"optimizer": "sgd", "lr": 0.1, "momentum": 0.9, "scheduler": "steplr",
                           "gamma": 0.5, "loss": "mse", "reduction": "sum"})
    assert config.resume_with(stored, {"epochs": 3, "lr": 0.2})["gamma"] == 0.5
    fresh = config.resume_with(stored, {"scheduler": "steplr", "loss": "cross_entropy"})
    assert (fresh["gamma"], fresh["reduction"]) == (0.1, "mean")  # groups start afresh
    assert config.resume_with(stored, {"reduction": "mean"})["loss"] == "mse"
    with pytest.raises(ConfigError) as info:
        config.resume_with(stored, {"batch_size": 128, "seed": 1, "optimizer": "sgd"})
    assert [f for f, _ in info.value.errors] == ["batch_size", "seed"]
    assert "may not change on --resume (the run has 64" in info.value.errors[0][1]


# ------------------------------------------------------------------------------- schema

def test_schema_json_and_presets():
    doc = json.loads(json.dumps(config.schema()))
    names = [f["name"] for f in doc["fields"]]
    assert names == [f.name for f in FIELDS]
    page = {f["name"] for f in doc["fields"] if "page" in f["where"]}
    assert {"optimizer", "lr", "momentum", "betas", "rho", "lr_decay", "centered",
            "clip_grad_norm", "scheduler", "gamma", "total_steps", "loss", "label_smoothing",
            "batch_size", "epochs", "seed", "init", "max_steps", "eval_images"} <= page
    lr = next(f for f in doc["fields"] if f["name"] == "lr")
    assert (lr["range"], lr["id"], lr["min"], lr["min_open"]) == ("a number > 0", "lr", 0, True)
    assert sorted(doc["labels"]["optimizer"]) == sorted(config.OPTIMIZERS)
    presets = {p["name"]: p for p in doc["presets"]}
    assert presets["seed"]["config"] == {"optimizer": "adagrad", "lr": 1.0, "batch_size": 1000,
                                         "epochs": 8, "init": "scratch"}
    assert presets["fast"]["config"]["optimizer"] == "adam"
    for p in presets.values():
        config.parse(p["config"], train_images=60000)


# ------------------------------------------------------------------------------- CLI

def _train_help() -> str:
    from webgpu_trainer.cli import main as cli_mod
    sub = cli_mod.build_parser()._subparsers._group_actions[0].choices["train"]
    return " ".join(sub.format_help().split())


def test_every_field_has_a_flag_and_help_lists_limits():
    from webgpu_trainer.cli import main as cli_mod
    text = _train_help()
    for f in FIELDS:
        if "cli" not in f.where:
            continue
        assert f.cli_flag in text, f.name
        if f.type in ("int", "float", "list"):
            assert config.describe(f) in text, (f.name, config.describe(f))
        assert f.help.split(";")[0][:30] in text, f.name
    assert "--no-cycle-momentum" in text and "fixed on --resume" in text
    # flags land on the field's name
    args = cli_mod.build_parser().parse_args(
        ["train", "m.onnx", "--t-max", "3", "--scheduler-interval", "step", "--betas", "0.8",
         "0.9", "--no-cycle-momentum", "--class-weights", "1,2", "--freeze", "conv1.,fc1."])
    from webgpu_trainer.cli.options import given
    assert given(args) == {"T_max": 3, "interval": "step", "betas": [0.8, 0.9],
                           "cycle_momentum": False, "class_weights": [1.0, 2.0],
                           "freeze": ["conv1.", "fc1."]}


# ------------------------------------------------------------------------------- server

def test_schema_route(config_client):
    r = config_client.get("/api/config/schema")
    assert r.status_code == 200
    assert r.json() == json.loads(json.dumps(config.schema()))


def test_validate_route(config_client):
    r = config_client.post("/api/config/validate", json={"config": {"optimizer": "sgd", "lr": 0.1,
                                                                   "scheduler": "onecycle",
                                                                   "val_images": 64}})
    body = r.json()
    assert r.status_code == 200 and body["ok"] is True, body
    # the manifest's 640 training images less 64 held out for validation, / 64
    assert body["config"]["total_steps"] == 9
    assert body["steps"] == {"per_epoch": 9, "total": 9, "train_images": 576, "val_images": 64}
    r = config_client.post("/api/config/validate", json={"config": {}})  # default: a tenth held out
    assert r.json()["steps"] == {"per_epoch": 9, "total": 9, "train_images": 576,
                                 "val_images": 64}
    r = config_client.post("/api/config/validate", json={"config": {"val_images": 5000}})
    assert r.json()["errors"] == [["val_images", "must be an integer in [0, 638] (the 640 "
                                   "training images less a batch of 2 to train on; 0 = no "
                                   "validation), got 5,000"]]
    r = config_client.post("/api/config/validate", json={"config": {"seed": 1.5, "batch_size": 1000,
                                                                   "momentum": 0.9}})
    body = r.json()
    assert r.status_code == 200 and body["ok"] is False
    assert [e[0] for e in body["errors"]] == ["seed", "momentum"]
    r = config_client.post("/api/config/validate", json={"config": {"batch_size": 1000,
                                                                   "val_images": 0}})
    assert r.json()["errors"] == [["batch_size", "must be an integer in [2, 640] (at most the "
                                                 "640 training images), got 1,000"]]
    # with the model: class weights must match its classes
    r = config_client.post("/api/config/validate", json={"model": "seednet", "config": {
        "class_weights": [1.0, 2.0], "val_images": 0}})
    assert r.json()["errors"][0][0] == "class_weights"
    assert config_client.post("/api/config/validate", content=b"[1]").status_code == 400


@pytest.mark.parametrize("model, message", [
    ("../../etc/passwd", "bad model name: '../../etc/passwd'"),
    ("nope", "unknown model: 'nope' (no nope.onnx in the models folder or the uploads)"),
    ({"a": 1}, "must be a model's name"),
    (7, "must be a model's name"),
])
def test_validate_route_names_an_unknown_model(config_client, model, message):
    """A config is not "ok" for a model the server does not have (before: ok true for any)."""
    r = config_client.post("/api/config/validate",
                           json={"model": model, "config": {"val_images": 0}})
    assert r.status_code == 200 and r.json() == {"ok": False, "errors": [["model", message]]}
    r = config_client.post("/api/config/validate", json={"model": "seednet",
                                                         "config": {"val_images": 0}})
    assert r.json()["ok"] is True


# ------------------------------------------------------------- issue 16: hostile values
F32_ERR = "and at most 3.403e+38 (the largest float32, which the GPU computes in)"


@pytest.mark.parametrize("data, field, message", [
    ({"lr": 1e308}, "lr", f"must be a number > 0 {F32_ERR}, got 1e+308"),
    ({"weight_decay": 1e308}, "weight_decay", f"must be a number >= 0 {F32_ERR}, got 1e+308"),
    ({"lr": int("9" * 401)}, "lr", f"must be a number > 0 {F32_ERR}, got an integer of 401 "
                                   "digits"),
    ({"lr": 1e-50}, "lr", "must be a number > 0 and at least 1.175e-38 (smaller is 0 in "
                          "float32, which the GPU computes in), got 1e-50"),
    ({"lr": 1e38}, "lr", "lr / (1 - beta1) = 1e+39 (Adam's step size at step 1) is above "
                         "3.403e+38, the largest float32: lower lr (now 1e+38)"),
    ({"optimizer": "adamw", "lr": 1e30, "weight_decay": 1e10}, "weight_decay",
     "lr x weight_decay = 1e+40 is above 3.403e+38, the largest float32: lower weight_decay "
     "(now 1e+10)"),
    ({"optimizer": "sgd", "scheduler": "exponential", "gamma": 10.0, "epochs": 100}, "gamma",
     "lr x gamma^99 (the learning rate of the last step) is above 3.403e+38, the largest "
     "float32: lower gamma (now 10) or lr (0.001)"),
    ({"optimizer": "sgd", "scheduler": "steplr", "step_size": 10 ** 400}, "step_size",
     "must be an integer in [1, 1,000,000,000], got an integer of 401 digits"),
    ({"optimizer": "x" * 10 ** 7}, "optimizer", "must be one of sgd, adam, adamw, adagrad, "
     "rmsprop, adadelta, got 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'... (10,000,000 "
     "characters)"),
    ({"betas": [[[[0.9]]], 0.9]}, "betas", "must be 2 numbers, each in [0, 1), got a list of "
                                           "1 item"),
])
def test_hostile_values_named_and_short(data, field, message):
    with pytest.raises(config.ConfigError) as exc:
        config.parse(data, train_images=60000)
    assert exc.value.errors == [(field, message)]


def test_every_accepted_float_packs_as_float32():
    """The largest float32 passes and packs (as the GPU's uniforms do); 1e308, which made
    struct.pack raise "float too large to pack with f format" on the GPU, and the next double
    above float32's largest are refused by the validator, naming the field."""
    import struct
    cfg = config.parse({"optimizer": "sgd", "lr": 1.0, "weight_decay": F32_MAX_TEST},
                       train_images=60000)
    assert struct.unpack("<f", struct.pack("<f", cfg["weight_decay"]))[0] == F32_MAX_TEST
    with pytest.raises(OverflowError, match="float too large to pack with f format"):
        struct.pack("<f", 1e308)
    for value in (1e308, math.nextafter(F32_MAX_TEST, math.inf)):
        with pytest.raises(config.ConfigError, match="^weight_decay: must be a number >= 0 "
                                                     "and at most 3.403e"):
            config.parse({"optimizer": "sgd", "weight_decay": value})


F32_MAX_TEST = 3.4028234663852886e38


def test_700000_unknown_keys_named_three_times_once_listed():
    data = {f"k{i}": 1 for i in range(700_000)}
    t0 = time.perf_counter()
    with pytest.raises(config.ConfigError) as exc:
        config.parse(data)
    assert time.perf_counter() - t0 < 5
    errors = exc.value.errors
    assert [f for f, _ in errors] == ["k0", "k1", "k2", "config"]
    assert errors[0][1].startswith("unknown option (known: optimizer, lr, batch_size")
    assert errors[1:] == [("k1", "unknown option"), ("k2", "unknown option"),
                          ("config", "699,997 more unknown options (not listed)")]
    assert len(str(exc.value)) < 1000


def test_long_unknown_key_is_cut():
    with pytest.raises(config.ConfigError) as exc:
        config.parse({"k" * 100_000: 1})
    field, message = exc.value.errors[0]
    assert field == "'kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk'... (100,000 characters)"
    assert len(str(exc.value)) < 800


def test_default_validation_is_at_most_a_tenth_of_a_small_dataset():
    """The default 5,000 validation images would leave a 300-image dataset nothing to train on:
    by default at most a tenth is held out; a given value is kept (and checked) as it is."""
    assert config.parse({}, train_images=300)["val_images"] == 30
    assert config.parse({}, train_images=60000)["val_images"] == 5000
    assert config.parse({"val_images": 100}, train_images=300)["val_images"] == 100
    with pytest.raises(config.ConfigError) as e:
        config.parse({"val_images": 299}, train_images=300)
    assert e.value.errors[0][0] == "val_images"
