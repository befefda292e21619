#!/usr/bin/env python3
"""The numpy engine (``--device cpu``, float32) beside PyTorch CPU eager, SeedNet training
steps (Adam, NLL) at one batch, the same thread count on both sides (OpenBLAS threads for
numpy, ``torch.set_num_threads`` for torch), alternating runs in one process tree so that
both see the same load (not a test).

    python benchmarks/cpu_table.py                       # batch 64, 1 thread, 3 rounds
    python benchmarks/cpu_table.py --threads 2 --json out.json --label after
    python benchmarks/cpu_table.py --base /tmp/old   # also another checkout's numpy engine

Prints a table of ms per step (the best of the rounds: load only ever adds time) and the
ratio numpy / torch (the issue's target: at most 3x at batch 64).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def _numpy(batch: int, steps: int, threads: int, root: Path = HERE.parent) -> dict:
    """ms per step of the numpy engine of the checkout ``root`` (its benchmarks/cpu.py) in a
    fresh process (OpenBLAS reads its thread count at load)."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}
    out = subprocess.run([sys.executable, str(root / "benchmarks" / "cpu.py"), str(batch),
                          str(steps)],
                         env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _torch(batch: int, steps: int, threads: int) -> float:
    import torch
    import torch_ref
    torch.set_num_threads(threads)
    assert torch.get_num_threads() == threads
    return torch_ref.seednet(batch, steps, warmup=2, graphs=False)["ms"]


def main(args) -> dict:
    import numpy as np
    import torch
    numpy_ms, torch_ms, base_ms, loads, blas = [], [], [], [], set()
    for _ in range(args.rounds):
        if args.base:
            base_ms.append(_numpy(args.batch, args.steps, args.threads, Path(args.base))["ms"])
        run = _numpy(args.batch, args.steps, args.threads)
        numpy_ms.append(run["ms"])
        blas.add(run.get("blas_threads"))
        torch_ms.append(_torch(args.batch, args.steps, args.threads))
        loads.append(os.getloadavg()[0])
    base = {"base": str(args.base), "base_ms": base_ms,
            "base_ratio": min(base_ms) / min(torch_ms)} if args.base else {}
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "label": args.label, "batch": args.batch, "steps": args.steps,
            "threads": args.threads, "numpy_blas_threads": sorted(blas, key=str),
            "torch_threads": torch.get_num_threads(),
            "numpy": np.__version__, "torch": torch.__version__,
            "python": platform.python_version(), "cores": os.cpu_count(),
            "load": os.getloadavg(), "numpy_ms": numpy_ms, "torch_ms": torch_ms,
            "round_loads": loads, "ratio": min(numpy_ms) / min(torch_ms), **base}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--label", default="")
    ap.add_argument("--base", help="another checkout whose numpy engine runs in the same rounds "
                    "(before / after a change)")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    r = main(a)
    print(f"| SeedNet batch {r['batch']}, {r['threads']} thread(s) | ms/step (best of "
          f"{a.rounds}) | all rounds |\n|---|---:|---|")
    print(f"| engine, numpy (float32) | {min(r['numpy_ms']):.1f} | "
          f"{', '.join(f'{v:.1f}' for v in r['numpy_ms'])} |")
    if a.base:
        print(f"| base: {a.base} | {min(r['base_ms']):.1f} | "
              f"{', '.join(f'{v:.1f}' for v in r['base_ms'])} |")
    print(f"| PyTorch CPU eager | {min(r['torch_ms']):.1f} | "
          f"{', '.join(f'{v:.1f}' for v in r['torch_ms'])} |")
    print(f"numpy / torch: {r['ratio']:.2f}x" + (f" (base {r['base_ratio']:.2f}x)" if a.base
                                                 else "") +
          f"; load {r['load'][0]:.1f} on {r['cores']} cores")
    if a.json:
        Path(a.json).write_text(json.dumps(r, indent=1) + "\n")
