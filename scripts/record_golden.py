"""Write tests/fixtures/golden.json: the native engine's numbers, bit for bit (tests/golden.py).

tests/test_golden.py asserts the engine still computes exactly these numbers. Re-record ONLY
when a change is meant to change them (a new kernel, a fixed bug, a new case), and say why in
the commit message; a refactor (issue 17) must leave every bit as it is. Run from the
repository root (the test extras installed, MNIST prepared by ./run setup):

    .venv/bin/python scripts/record_golden.py [--backend vulkan]

It takes about a minute on 2 cores (lavapipe).
"""

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import golden  # noqa: E402  (tests/ on sys.path)
from webgpu_trainer.engine.backends.wgpu_native import Device  # noqa: E402


def dumps(doc: dict) -> str:
    """The document as JSON, one line per SeedNet step, self-check row and op case (a diff
    shows which ones changed)."""
    def one(v):
        return json.dumps(v, separators=(", ", ": "))

    parts = []
    for key, value in doc.items():
        if isinstance(value, list):
            body = "[\n" + ",\n".join(f"  {one(v)}" for v in value) + "\n ]"
        elif key == "cases":
            body = "{\n" + ",\n".join(f"  {one(k)}: {one(v)}" for k, v in value.items()) \
                + "\n }"
        else:
            body = one(value)
        parts.append(f" {one(key)}: {body}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def main(argv=None) -> int:
    """Record on the ``--backend`` adapter and write ``golden.FIXTURE``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="vulkan", help="wgpu backend (default vulkan)")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    doc = asyncio.run(golden.record(Device(backend=args.backend)))
    text = dumps(doc)
    assert json.loads(text) == json.loads(json.dumps(doc)), "dumps lost something"
    golden.FIXTURE.write_text(text)
    print(f"wrote {golden.FIXTURE} ({len(doc['cases'])} op cases, "
          f"{len(doc['selfcheck'])} self-check rows, {len(doc['seednet_steps'])} SeedNet "
          f"steps) on {doc['adapter']['device']} in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
