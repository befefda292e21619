"""Record every dispatch the engine binds, and the numbers it computes, for a refactor check.

    .venv/bin/python scripts/dispatch_record.py OUT.json          # record this checkout
    .venv/bin/python scripts/dispatch_record.py OUT.json --compare OLD.json

Runs every op case of tests/cases (natively, wgpu-py; once more with the tiled kernels forced)
and a short SeedNet training run (the CLI: data gather, Dropout, guard, gradient clipping,
SGD with momentum) with the native device's ``pipeline``/``write``/``bind`` wrapped. Per case
it records, in bind order, each dispatch's pipeline key, the bytes of its uniform (hex) and
what every other binding slot holds (buffer label, byte offset, size); and sha256 digests of
the case's results (losses, output, gradients, weights; SeedNet's metrics.jsonl losses). With
``--compare`` it prints the first difference per case and exits 1 when any exists: a kernel
refactor must leave both the packed uniforms and the numbers bit-identical.
"""

import asyncio
import hashlib
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "py")]

from webgpu_trainer.engine.backends import wgpu_native  # noqa: E402
from webgpu_trainer.engine.backends.base import View  # noqa: E402

LOG: list = []
_UNIFORMS: dict = {}


def _wrap(dev_cls):
    """Wrap ``write`` (remember uniform bytes) and ``bind`` (record the dispatch)."""
    write, bind = dev_cls.write, dev_cls.bind

    def rec_write(self, buf, data, offset=0):
        if offset == 0 and str(getattr(buf, "label", "")).endswith(".params"):
            _UNIFORMS[id(buf)] = (buf, bytes(memoryview(data).cast("B")))
        return write(self, buf, data, offset)

    def rec_bind(self, pipeline, buffers):
        slots = []
        for b in buffers:
            buf, off, size = (b.buffer, b.offset, b.nbytes) if isinstance(b, View) \
                else (b, 0, b.size)
            if id(buf) in _UNIFORMS and _UNIFORMS[id(buf)][0] is buf:
                slots.append(_UNIFORMS[id(buf)][1].hex())
            else:
                slots.append(f"{buf.label}@{off}+{size}")
        LOG.append([pipeline[2], slots])
        return bind(self, pipeline, buffers)

    dev_cls.write, dev_cls.bind = rec_write, rec_bind


def _digest(data) -> str:
    return hashlib.sha256(data if isinstance(data, bytes) else
                          json.dumps(data).encode()).hexdigest()[:16]


def _cases(dev, tiled: bool) -> dict:
    from cases import FAMILIES, family
    from harness import builder_patch
    from webgpu_trainer.engine.tools import parity
    out = {}
    for name in FAMILIES:
        for case in family(name).CASES:
            patch = dict(case.patch, TILED=True) if tiled else case.patch
            LOG.clear()
            with builder_patch(patch):
                res = asyncio.run(parity.run_case(dev, case.parity()))
            nums = {k: _digest(v) for k, v in res.items() if k != "name"}
            out[case.id + (" [tiled]" if tiled else "")] = {"dispatches": list(LOG),
                                                          "numbers": nums}
    return out


def _seednet() -> dict:
    from webgpu_trainer.cli.main import main
    LOG.clear()
    with tempfile.TemporaryDirectory() as tmp:
        rc = main(["train", str(REPO / "models" / "seednet.onnx"), "--train-images", "640",
                   "--val-images", "64", "--eval-images", "64", "--batch-size", "32",
                   "--epochs", "1", "--max-steps", "12", "--optimizer", "sgd", "--lr", "0.05",
                   "--momentum", "0.9", "--clip-grad-norm", "1.0", "--seed", "3",
                   "--no-progress", "--force", "--out", str(Path(tmp) / "run")])
        text = (Path(tmp) / "run" / "metrics.jsonl").read_text()
    rows = [json.loads(line) for line in text.splitlines()]
    losses = [[r.get(k) for k in sorted(r) if "loss" in k or "acc" in k] for r in rows]
    return {"seednet": {"dispatches": list(LOG), "numbers": {"rc": rc, "metrics": losses}}}


def _compare(new: dict, old: dict) -> int:
    bad = 0
    for key in sorted(set(new) | set(old)):
        a, b = new.get(key), old.get(key)
        if a == b:
            continue
        bad += 1
        if a is None or b is None:
            print(f"{key}: only in {'old' if a is None else 'new'}")
            continue
        if a["numbers"] != b["numbers"]:
            print(f"{key}: numbers differ {a['numbers']} vs {b['numbers']}")
        da, db = a["dispatches"], b["dispatches"]
        if len(da) != len(db):
            print(f"{key}: {len(da)} dispatches vs {len(db)}")
        for i, (x, y) in enumerate(zip(da, db)):
            if x != y:
                print(f"{key}: dispatch {i}\n  new {x}\n  old {y}")
                break
    total = sum(len(v["dispatches"]) for v in new.values())
    print(f"{len(new)} runs, {total} dispatches; {bad} differ")
    return 1 if bad else 0


def main(argv) -> int:
    """Record (and optionally compare); see the module docstring."""
    _wrap(wgpu_native.Device)
    dev = wgpu_native.Device()
    rec = {**_cases(dev, False), **_cases(dev, True), **_seednet()}
    Path(argv[0]).write_text(json.dumps(rec))
    if len(argv) == 3 and argv[1] == "--compare":
        return _compare(rec, json.loads(Path(argv[2]).read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
