"""Issue 16: `train --resume` of a damaged run folder, and a run that fails before its first
step. Every refusal names the file and what is wrong, and the run folder is byte-identical
afterwards (the last good checkpoint intact). One small CPU run (128 training images, 4 steps of
32, 1 epoch) is made once (read-only); each test damages its own copy. The commands run
in-process (``cli.main.main``) except the GPU run with ``--lr 1e308``.
(A file of its own: tests/test_cli.py is past 400 lines.)
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from webgpu_trainer.cli.main import main

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "models" / "seednet.onnx"
HOSTILE = REPO / "tests" / "fixtures" / "hostile" / "data"
SMALL = ["--device", "cpu", "--train-images", "128", "--val-images", "0", "--batch-size", "32",
         "--eval-images", "64", "--no-progress"]


def state(folder: Path) -> dict:
    """{relative path: sha256} of every file under ``folder`` (None: no folder)."""
    if not folder.exists():
        return None
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def cli(capsys, *args) -> tuple[int, str]:
    code = main([str(a) for a in args])
    return code, capsys.readouterr().err.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("resume") / "run"
    assert main(["train", str(MODEL), *SMALL, "--epochs", "1", "--out", str(out)]) == 0
    return out


@pytest.fixture
def run_copy(base_run, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(base_run, out)
    return out


def _edit_config(out: Path, change) -> None:
    path = out / "config.json"
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def _resume_refused(capsys, out: Path) -> str:
    before = state(out)
    code, err = cli(capsys, "train", "--resume", out, "--epochs", "2")
    assert code == 2 and state(out) == before
    return err


def test_checkpoint_cut_to_10_bytes(capsys, run_copy):
    ckpt = run_copy / "checkpoints" / "epoch-001.ckpt"
    ckpt.write_bytes(ckpt.read_bytes()[:10])
    assert _resume_refused(capsys, run_copy) == (
        f"error: checkpoint {ckpt}: truncated: 10 bytes, shorter than the 12 bytes of its magic "
        "and header length (bytes 0..11); it cannot be resumed from")


def test_checkpoint_cut_inside_its_header(capsys, run_copy):
    ckpt = run_copy / "checkpoints" / "epoch-001.ckpt"
    raw = ckpt.read_bytes()
    ckpt.write_bytes(raw[:100])
    end = 11 + int.from_bytes(raw[8:12], "little")
    assert _resume_refused(capsys, run_copy) == (
        f"error: checkpoint {ckpt}: truncated inside its header: the header takes bytes "
        f"12..{end:,} but the file ends at byte offset 100; it cannot be resumed from")


def test_corrupt_last_checkpoint_names_the_earlier_one(capsys, run_copy):
    ckpts = run_copy / "checkpoints"
    shutil.copy(ckpts / "epoch-001.ckpt", ckpts / "epoch-002.ckpt")
    raw = (ckpts / "epoch-002.ckpt").read_bytes()
    (ckpts / "epoch-002.ckpt").write_bytes(raw[:-1])
    n = int.from_bytes(raw[8:12], "little")
    last = json.loads(raw[12:12 + n])["sections"]["optimizer"]
    assert 12 + n + last["offset"] + last["nbytes"] == len(raw)
    assert _resume_refused(capsys, run_copy) == (
        f"error: checkpoint {ckpts / 'epoch-002.ckpt'}: truncated: section 'optimizer' takes "
        f"bytes {len(raw) - last['nbytes']:,}..{len(raw) - 1:,} but the file ends at byte offset "
        f"{len(raw) - 1:,}; it cannot be resumed from (the earlier checkpoint epoch-001.ckpt is "
        f"left: move epoch-002.ckpt out of {ckpts} to resume from it)")


@pytest.mark.parametrize("key,message", [
    ("config", "has no 'config' object (the run's settings)"),
    ("model", "has no 'model' object (the model's path)"),
])
def test_config_json_without_a_key(capsys, run_copy, key, message):
    _edit_config(run_copy, lambda doc: doc.pop(key))
    assert _resume_refused(capsys, run_copy) == \
        f"error: --resume: {run_copy / 'config.json'} {message}"


@pytest.mark.parametrize("key,value,was", [("batch_size", 16, 32), ("seed", 7, 0),
                                           ("train_images", 96, 128)])
def test_config_json_edited_away_from_the_checkpoint(capsys, run_copy, key, value, was):
    _edit_config(run_copy, lambda doc: doc["config"].update({key: value}))
    assert _resume_refused(capsys, run_copy) == (
        f"error: {run_copy / 'config.json'} does not match the checkpoint epoch-001.ckpt: "
        f"{key} is {value!r} there but the checkpoint was trained with {was!r} (these may not "
        "change on --resume: the run would not continue exactly; put the checkpoint's values "
        "back)")


def test_config_json_with_another_optimizer(capsys, run_copy):
    def to_sgd(doc):
        doc["config"] = {k: v for k, v in doc["config"].items()
                         if k not in ("betas", "eps", "amsgrad")}
        doc["config"]["optimizer"] = "sgd"
    _edit_config(run_copy, to_sgd)
    assert _resume_refused(capsys, run_copy) == (
        f"error: {run_copy / 'config.json'} does not match the checkpoint epoch-001.ckpt: "
        "optimizer is 'sgd' there but the checkpoint was trained with 'adam' (these may not "
        "change on --resume: the run would not continue exactly; put the checkpoint's values "
        "back)")
    _edit_config(run_copy, lambda doc: doc["config"].update({"betas": [0.9, 0.999]}))
    assert _resume_refused(capsys, run_copy) == (
        f"error: --resume: {run_copy / 'config.json'}: its 'config' is not a valid run "
        "configuration: betas: applies to optimizer adam, adamw only, not optimizer sgd")


def _fail_first_step(monkeypatch):
    from webgpu_trainer.cpu.cpu_engine import CpuEngine

    async def step(self, t, offset, lr):
        raise OverflowError("float too large to pack with f format")
    monkeypatch.setattr(CpuEngine, "step", step)


def test_failure_before_the_first_step_leaves_out_as_it_was(capsys, monkeypatch, tmp_path,
                                                           run_copy):
    """A new run into a new folder, a new run into a folder holding a file, a resumed run:
    the engine fails at step 1; nothing is left behind, nothing of the run is touched."""
    _fail_first_step(monkeypatch)
    fresh, used = tmp_path / "fresh", tmp_path / "used"
    used.mkdir()
    (used / "notes.txt").write_text("mine")
    for out, args in ((fresh, [MODEL, *SMALL, "--out", fresh]),
                      (used, [MODEL, *SMALL, "--out", used]),
                      (run_copy, ["--resume", run_copy, "--epochs", "2"])):
        before = state(out)
        code, err = cli(capsys, "train", *args)
        assert (code, err) == (1, "error: training failed unexpectedly (OverflowError: float "
                                  "too large to pack with f format)")
        assert state(out) == before


def test_lr_1e308_on_the_gpu_writes_nothing(tmp_path):
    """The exact input of the issue (main: OverflowError, config.json left in --out)."""
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "webgpu_trainer.cli.main", "train", str(MODEL),
                           "--device", "gpu", "--lr", "1e308", "--out", str(out),
                           *SMALL[2:]], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode in (1, 2) and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("error: ")
    assert not out.exists()


def test_one_image_dataset(capsys, tmp_path):
    cache, out = tmp_path / "cache", tmp_path / "out"
    assert main(["data", "--source", str(HOSTILE / "own_one"), "--cache", str(cache)]) == 0
    code, err = cli(capsys, "train", MODEL, *SMALL[:2], "--val-images", "0", "--data-dir",
                    cache, "--out", out)
    assert (code, err) == (2, "error: --batch-size: the dataset has 1 training image, but a "
                              "batch of 64 (--batch-size) needs 64: a run needs at least 2 "
                              "training images (a batch of 2, --val-images 0); give the "
                              "dataset more training images")
    assert not out.exists()


def test_export_metadata_states_the_real_progress(tmp_path):
    """A run stopped by --max-steps 3 inside its 4-step epoch: the exported model says 0.75
    epochs and 3 steps (main: "epochs": 1)."""
    import onnx
    out = tmp_path / "out"
    assert main(["train", str(MODEL), *SMALL, "--epochs", "1", "--max-steps", "3", "--out",
                 str(out)]) == 0
    props = {p.key: p.value for p in onnx.load(str(out / "model.onnx")).metadata_props}
    assert (json.loads(props["epochs"]), json.loads(props["steps"]),
            json.loads(props["total_steps"])) == (0.75, 3, 3)


def test_new_run_into_a_run_folder_refused(capsys, run_copy):
    """A new run whose --out holds a run would overwrite its config.json and checkpoints."""
    before = state(run_copy)
    code, err = cli(capsys, "train", MODEL, *SMALL, "--out", run_copy)
    assert (code, err) == (2, f"error: --out {run_copy} already holds a run (config.json or "
                              "checkpoints) that a new run would overwrite: give another "
                              f"folder, or --resume {run_copy} to continue it")
    assert state(run_copy) == before


def test_config_json_not_json(capsys, run_copy):
    (run_copy / "config.json").write_bytes(b"{")
    assert _resume_refused(capsys, run_copy) == (
        f"error: --resume: {run_copy / 'config.json'} is not valid JSON (Expecting property "
        "name enclosed in double quotes: line 1 column 2 (char 1))")
