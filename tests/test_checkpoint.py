"""The checkpoint payload of a run (engine/train/checkpoint.py: what the CLI's ``.ckpt`` files and
the browser's IndexedDB checkpoints hold) round-trips: a run stopped after its first epoch's
checkpoint and continued from it in a new trainer (new engine, new optimizer, restored weights,
optimizer state, epoch and step) repeats the uninterrupted run's next steps bit for bit, on each
native GPU backend and on the numpy engine; so does a run continued from a checkpoint inside an
epoch (``checkpoint_every_s``, or Stop), its epoch means included. SeedNet has BatchNorm (running
statistics in the weights) and Dropout (masks drawn from the step), Adam two state buffers,
StepLR a schedule of the step: each would break the comparison if it were not restored."""

import numpy as np
import pytest
from conftest import run

from webgpu_trainer import onnx_io
from webgpu_trainer.cli import commands as native
from webgpu_trainer.engine.train import checkpoint

from e2e_fixtures import REPO

CFG = {"optimizer": "adam", "lr": 0.002, "batch_size": 16, "epochs": 3, "seed": 7,
       "init": "scratch", "eval_images": 32, "report_every": 1, "val_images": 0,
       "scheduler": "steplr", "step_size": 1, "gamma": 0.5}
TRAIN_IMAGES = 64  # 4 steps per epoch, 12 in all


@pytest.fixture(scope="module")
def seednet():
    return onnx_io.load_bundle(REPO / "models" / "seednet.onnx")


@pytest.fixture(scope="module")
def splits():
    return native.load_splits(None, TRAIN_IMAGES, CFG["eval_images"])[:2]


def _trainer(dev, seednet, splits, cfg=CFG):
    graph, blob = seednet
    tr = native.make_trainer(dev, graph, blob, dict(cfg), *splits)
    tr.losses, tr.epochs = [], []

    def emit(kind, **kw):
        if kind == "progress":
            tr.losses += [(t, loss, acc, lr) for (t, loss, acc), lr in zip(kw["losses"],
                                                                          kw["lrs"])]
        elif kind == "epoch":
            tr.epochs.append(kw)
    tr.emit = emit
    return tr


def _round_trip(dev, seednet, splits):
    """(uninterrupted trainer, interrupted-and-resumed trainer, the checkpoint's header)."""
    full = _trainer(dev, seednet, splits)

    async def go_full():
        await full.setup()
        await full.run()
        full.final = await checkpoint.capture(full)
    run(go_full())

    first, saved = _trainer(dev, seednet, splits), {}

    async def on_epoch(epoch, step, metrics):
        saved["head"] = checkpoint.header(first, epoch, step)
        saved["sections"] = await checkpoint.capture(first)
        first.stop_requested = True  # the tab closes after the first checkpoint

    async def go_first():
        await first.setup()
        first.on_epoch = on_epoch
        await first.run()
    run(go_first())

    resumed = _trainer(dev, seednet, splits)

    async def go_resumed():
        await resumed.setup()
        checkpoint.restore(resumed, saved["head"], saved["sections"])
        await resumed.run()
        resumed.final = await checkpoint.capture(resumed)
    run(go_resumed())
    return full, resumed, saved["head"]


def _check(full, resumed, head):
    assert (head["epoch"], head["step"], head["epochs_completed"]) == (1, 4, 1)
    assert head["rng"] == {"seed": 7, "next_epoch": 1, "shuffle": checkpoint.SHUFFLE,
                           "dropout": checkpoint.DROPOUT}
    assert [r[0] for r in full.losses] == list(range(1, 13))
    assert [r[0] for r in resumed.losses] == list(range(5, 13))
    assert resumed.losses == full.losses[4:]  # loss, accuracy and lr: bit for bit
    assert (full.losses[3][3], full.losses[4][3]) == (0.002, 0.001)  # StepLR: epoch 2 halves
    for name in ("weights", "optimizer"):
        assert resumed.final[name] == full.final[name], name
    w = np.frombuffer(full.final["weights"], np.float32)
    assert np.isfinite(w).all() and np.abs(w).max() > 0


@pytest.mark.every_backend
def test_gpu_checkpoint_resumes_bit_for_bit(device, seednet, splits):
    _check(*_round_trip(device, seednet, splits))


def test_cpu_checkpoint_resumes_bit_for_bit(seednet, splits):
    _check(*_round_trip(native.CpuDevice(), seednet, splits))


def test_restore_refuses_another_optimizer(seednet, splits):
    """An SGD-with-momentum state into an Adam run: ValueError naming where and what differs;
    wrong-sized weights: ValueError naming the layout."""
    dev = native.CpuDevice()
    sgd = _trainer(dev, seednet, splits, {**CFG, "optimizer": "sgd", "momentum": 0.9})
    adam = _trainer(dev, seednet, splits)

    async def go():
        await sgd.setup()
        await adam.setup()
        return await checkpoint.capture(sgd)
    sections = run(go())
    head = {"epoch": 1, "step": 4, "epochs_completed": 1}
    with pytest.raises(ValueError, match=r"^the saved checkpoint: optimizer state mismatch: "
                                         r"optimizer is 'SGD'"):
        checkpoint.restore(adam, head, sections, "the saved checkpoint")
    with pytest.raises(ValueError, match="weights do not fit this model's layout"):
        checkpoint.restore(adam, head, {**sections, "weights": sections["weights"][:-4]})
    assert (adam.epoch, adam.step) == (0, 0)  # nothing applied


# ----------------------------------------------------------------------------- hostile files
# issue 16: a corrupt or truncated .ckpt names the file, what is wrong and the byte offset.

SECTIONS = {"weights": bytes(range(256)) * 4, "optimizer": b"\x01" * 100}


def _ckpt(tmp_path):
    from webgpu_trainer.cli.checkpoints import write_checkpoint
    path = tmp_path / "epoch-001.ckpt"
    write_checkpoint(path, {"epoch": 1, "step": 4, "model_sha256": "ab"}, SECTIONS)
    raw = path.read_bytes()
    return path, raw, 12 + int.from_bytes(raw[8:12], "little")  # the binary part's offset


def _refused(path) -> str:
    from webgpu_trainer.cli.checkpoints import read_checkpoint
    before = path.read_bytes()
    with pytest.raises(ValueError) as e:
        read_checkpoint(path)
    assert path.read_bytes() == before
    return str(e.value)


def test_checkpoint_round_trip(tmp_path):
    from webgpu_trainer.cli.checkpoints import read_checkpoint
    path, _, _ = _ckpt(tmp_path)
    head, sections = read_checkpoint(path)
    assert sections == SECTIONS and (head["epoch"], head["step"]) == (1, 4)


def test_checkpoint_cut_to_10_bytes(tmp_path):
    path, raw, _ = _ckpt(tmp_path)
    path.write_bytes(raw[:10])
    assert _refused(path) == (f"checkpoint {path}: truncated: 10 bytes, shorter than the 12 "
                              "bytes of its magic and header length (bytes 0..11); it cannot "
                              "be resumed from")


def test_checkpoint_cut_inside_its_header(tmp_path):
    path, raw, body = _ckpt(tmp_path)
    path.write_bytes(raw[:100])
    assert _refused(path) == (f"checkpoint {path}: truncated inside its header: the header "
                              f"takes bytes 12..{body - 1} but the file ends at byte offset "
                              "100; it cannot be resumed from")


def test_checkpoint_header_not_json(tmp_path):
    path, raw, body = _ckpt(tmp_path)
    path.write_bytes(raw[:13] + b"}" + raw[14:])  # '{"epoch"...' becomes '{}epoch"...'
    assert _refused(path) == (f"checkpoint {path}: its header (bytes 12..{body - 1}) is not "
                              "valid JSON: Extra data at byte offset 14; it cannot be resumed "
                              "from")


def test_checkpoint_other_magic_and_no_sections(tmp_path):
    path, raw, _ = _ckpt(tmp_path)
    path.write_bytes(b"PK\x03\x04" + raw[4:])
    assert _refused(path) == (f"checkpoint {path}: not a webgpu-trainer checkpoint (bytes 0..7 "
                              "are b'PK\\x03\\x04KPT1', expected b'WGTCKPT1'); it cannot be "
                              "resumed from")
    head = b'{"epoch": 1}'
    path.write_bytes(raw[:8] + len(head).to_bytes(4, "little") + head)
    assert _refused(path) == (f"checkpoint {path}: its header (bytes 12..23) lists no sections "
                              "(no 'sections' object); it cannot be resumed from")


def test_checkpoint_truncated_and_corrupt_sections(tmp_path):
    path, raw, body = _ckpt(tmp_path)
    path.write_bytes(raw[:-50])
    end = body + 1024 + 100
    assert _refused(path) == (f"checkpoint {path}: truncated: section 'optimizer' takes bytes "
                              f"{body + 1024:,}..{end - 1:,} but the file ends at byte offset "
                              f"{end - 50:,}; it cannot be resumed from")
    flipped = bytearray(raw)
    flipped[body + 5] ^= 1
    path.write_bytes(bytes(flipped))
    assert _refused(path) == (f"checkpoint {path}: section 'weights' (bytes {body:,}.."
                              f"{body + 1023:,}) does not match its sha256 (corrupt); it cannot "
                              "be resumed from")


MID = 6  # a step inside epoch 2 (steps 5..8)


def _mid_epoch_round_trip(dev, seednet, splits, how, at=MID):
    """(uninterrupted, resumed from a checkpoint at step ``at``, its header, every checkpoint):
    ``how`` "timed" (``checkpoint_every_s`` tiny: a checkpoint after every step; the tab closes
    after the one of ``at``) or "stop" (Stop after step ``at``: the Stop's checkpoint)."""
    cfg = {**CFG, "checkpoint_every_s": 1e-9 if how == "timed" else 0}
    full = _trainer(dev, seednet, splits, cfg)

    async def go_full():
        await full.setup()
        await full.run()
        full.final = await checkpoint.capture(full)
    run(go_full())

    first, saved = _trainer(dev, seednet, splits, cfg), []

    async def on_checkpoint(epoch, step):
        saved.append((checkpoint.header(first, epoch, step), await checkpoint.capture(first)))
        if how == "timed" and step == at:
            first.stop_requested = True

    def stop_at_mid(kind, **kw):
        emit(kind, **kw)
        if how == "stop" and kind == "progress" and kw["step"] == at:
            first.stop_requested = True
    emit, first.emit = first.emit, stop_at_mid

    async def go_first():
        await first.setup()
        first.on_checkpoint = on_checkpoint
        await first.run()
    run(go_first())
    head, sections = saved[-1]
    resumed = _trainer(dev, seednet, splits, cfg)

    async def go_resumed():
        await resumed.setup()
        checkpoint.restore(resumed, head, sections)
        await resumed.run()
        resumed.final = await checkpoint.capture(resumed)
    run(go_resumed())
    return full, resumed, head, saved


def _check_mid(full, resumed, head, saved, how, at=MID):
    steps = [h["step"] for h, _ in saved]
    # timed: every step but the epochs' last ones (their epoch checkpoint follows)
    assert steps == ([1, 2, 3, 5, 6] if how == "timed" else [at]), steps
    # a Stop after epoch 2's last step: epoch 2 is not validated yet (epochs_completed 1):
    # the resumed run validates it first
    assert (head["epoch"], head["step"], head["epochs_completed"]) == (2, at, 1)
    assert head["rng"]["next_epoch"] == 1
    sums = head["run_state"]["epoch_sums"]
    assert sums[2] == at - 4 and sums[0] == sum(r[1] for r in full.losses[4:at])
    assert [r[0] for r in resumed.losses] == list(range(at + 1, 13))
    assert resumed.losses == full.losses[at:]  # loss, accuracy and lr: bit for bit
    # epoch 2's means span the steps before and after the checkpoint: equal to the full run's
    assert [e["epoch"] for e in resumed.epochs] == [2, 3]
    assert resumed.epochs == full.epochs[1:]
    for name in ("weights", "optimizer"):
        assert resumed.final[name] == full.final[name], name


@pytest.mark.every_backend
def test_gpu_mid_epoch_checkpoint_resumes_bit_for_bit(device, seednet, splits):
    _check_mid(*_mid_epoch_round_trip(device, seednet, splits, "timed"), "timed")


@pytest.mark.parametrize("how,at", [("timed", MID), ("stop", MID), ("stop", 8)])
def test_cpu_mid_epoch_checkpoint_resumes_bit_for_bit(seednet, splits, how, at):
    _check_mid(*_mid_epoch_round_trip(native.CpuDevice(), seednet, splits, how, at), how, at)
