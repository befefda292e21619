"""``webgpu-trainer doctor``: does this machine's GPU compute what the engine means?

Runs the self-check (``engine/tools/selfcheck.py``: every op family forward and backward and every
optimizer, against committed float64 references) on a native adapter and prints the table
(op case, check, max relative error, tolerance, ok / WRONG) and the adapter. Exit status 0
when every check is ok, 1 naming the wrong ops otherwise, 2 when no adapter can be opened.

``gate(dev, force)`` is the same check before ``webgpu-trainer train`` on the GPU: a pass is
cached per adapter and source version (``cache_dir()``), so only the first run on an adapter
pays for it (about 2 s on a CPU adapter). CPython only.

    webgpu-trainer doctor                   # the adapter wgpu picks (WGPU_BACKEND_TYPE forces one)
    webgpu-trainer doctor --backend opengl  # one wgpu backend; --backend all: each one there is
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sys
from pathlib import Path

from ..engine.tools import selfcheck


def cache_dir() -> Path:
    """$WEBGPU_TRAINER_CACHE_DIR, else $XDG_CACHE_HOME/webgpu-trainer (~/.cache/...)."""
    if os.environ.get("WEBGPU_TRAINER_CACHE_DIR"):
        return Path(os.environ["WEBGPU_TRAINER_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "webgpu-trainer"


def cache_key(info: dict) -> str:
    """sha256 over the adapter's info, wgpu's version and every engine source file (Python,
    WGSL, the references): any change re-runs the check."""
    from importlib import metadata

    from ..engine.backends import shaders
    h = hashlib.sha256(json.dumps(info, sort_keys=True).encode())
    try:
        h.update(metadata.version("wgpu").encode())
    except metadata.PackageNotFoundError:
        pass
    package = Path(__file__).resolve().parents[1]
    files = sorted(package.rglob("*.py")) + sorted(shaders.shader_dir().rglob("*.wgsl"))
    for f in files + [selfcheck.REFERENCE]:
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def _cached_pass(key: str) -> dict | None:
    try:
        doc = json.loads((cache_dir() / f"selfcheck-{key[:24]}.json").read_text())
    except (OSError, ValueError):
        return None
    return doc if doc.get("ok") else None


def _remember_pass(key: str, result: dict) -> None:
    """Keep a passing result for ``gate``; an unwritable cache only costs the next run time."""
    try:
        folder = cache_dir()
        folder.mkdir(parents=True, exist_ok=True)
        doc = {k: result[k] for k in ("ok", "wrong", "seconds", "adapter")}
        (folder / f"selfcheck-{key[:24]}.json").write_text(json.dumps(doc, indent=1) + "\n")
    except OSError:
        pass


def summary(result: dict) -> dict:
    """What config.json records: ok, the wrong checks, seconds, cached."""
    return {"ok": result["ok"], "wrong": result["wrong"],
            "seconds": round(result["seconds"], 3), "cached": bool(result.get("cached"))}


async def gate(dev, force: bool = False, out=None) -> dict:
    """The self-check before training on ``dev`` (cached per adapter when it passes).

    Returns ``summary(result)``. Raises ``SelfCheckFailed`` naming the wrong ops when it
    fails, unless ``force`` (then a warning goes to ``out``, default stderr).
    """
    out = out or sys.stderr
    key = cache_key(dev.info)
    cached = _cached_pass(key)
    if cached:
        return summary({**cached, "cached": True})
    print("checking the GPU's results (webgpu-trainer doctor; once per adapter) ...",
          file=out, flush=True)
    result = await selfcheck.run(dev)
    if result["ok"]:
        _remember_pass(key, result)
        return summary(result)
    msg = failure_message(result)
    if not force:
        raise SelfCheckFailed(msg + "; run `webgpu-trainer doctor` for the table, train with "
                              "--force anyway or with --device cpu on the CPU")
    print(f"warning: {msg}; training anyway (--force)", file=out, flush=True)
    return summary(result)


class SelfCheckFailed(RuntimeError):
    """The adapter computes wrong results (the message names the wrong ops)."""


def failure_message(result: dict) -> str:
    return (f"the GPU self-check failed on {selfcheck.adapter_name(result['adapter'])}: wrong "
            "results for " + "; ".join(result["wrong"]))


# ---------------------------------------------------------------- the command

def add_doctor(sub) -> argparse.ArgumentParser:
    from ..engine.backends.wgpu_native import BACKENDS
    p = sub.add_parser("doctor", help="check that this machine's GPU computes every op "
                                      "correctly (a few seconds)")
    p.add_argument("--backend", type=str.lower, default=None,
                   choices=[b.lower() for b in BACKENDS] + ["all"],
                   help="the wgpu backend to check (default: the adapter wgpu picks; all: "
                        "every backend with an adapter)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def doctor(args) -> int:
    from ..engine.backends import wgpu_native
    try:
        names = [args.backend] if args.backend != "all" else list(
            dict.fromkeys(b.lower() for b, _ in wgpu_native.adapters()))
    except Exception as exc:  # wgpu's library or driver failing to load
        print(f"error: {exc}", file=sys.stderr)
        return 2
    status, results = 0, []
    for name in names:
        try:
            dev = wgpu_native.Device(backend=name)
        except (RuntimeError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            status = 2
            continue
        result = asyncio.run(selfcheck.run(dev))
        results.append(result)
        if result["ok"]:
            _remember_pass(cache_key(dev.info), result)
        if not args.json:
            print(selfcheck.table(result))
        if not result["ok"]:
            print(f"error: {failure_message(result)}", file=sys.stderr)
            status = max(status, 1)
    if args.json:
        print(json.dumps(results if args.backend == "all" else (results or [None])[0],
                         indent=1, default=str))
    return status


COMMANDS = {"doctor": (add_doctor, doctor)}
