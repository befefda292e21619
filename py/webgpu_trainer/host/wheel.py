"""Build the engine's pure-Python wheel on demand (for the browser, loaded by Pyodide).

``ensure_wheel(out_dir)`` rebuilds ``webgpu_trainer-<version>-py3-none-any.whl`` with hatchling
(PEP 517 ``build_wheel`` hook in a subprocess, no network, no isolation) whenever the content
hash of ``py/``, ``shaders/``, ``pyproject.toml`` and ``README.md`` differs from the hash stored
in the sidecar ``<wheel>.src-sha256``. Thread-safe within one process; the final rename is
atomic so a concurrent reader never sees a partial wheel.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

_LOCK = threading.Lock()
SOURCES = ("py", "shaders", "pyproject.toml", "README.md")
_SKIP_DIRS = {"__pycache__", ".pytest_cache"}
_SKIP_SUFFIXES = (".pyc", ".pyo", ".tmp", ".swp")


class WheelError(RuntimeError):
    """The wheel could not be built (hatchling missing, bad pyproject, ...)."""


def repo_root() -> Path:
    """The source tree holding pyproject.toml (this file lives in <root>/py/webgpu_trainer/host)."""
    root = Path(__file__).resolve().parents[3]
    if not (root / "pyproject.toml").is_file():
        raise WheelError(f"no pyproject.toml at {root}: the wheel is built from a source tree")
    return root


def wheel_name() -> str:
    """``webgpu_trainer-<version>-py3-none-any.whl`` for the package's ``__version__``."""
    from .. import __version__
    return f"webgpu_trainer-{__version__}-py3-none-any.whl"


def source_hash(root: Path) -> str:
    """sha256 (hex) over the relative paths and bytes of every source file of the wheel."""
    h = hashlib.sha256()
    files = []
    for name in SOURCES:
        p = root / name
        if p.is_file():
            files.append(p)
        elif p.is_dir():
            for dirpath, dirnames, filenames in os.walk(p):
                dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
                files += [Path(dirpath) / f for f in filenames
                          if not f.endswith(_SKIP_SUFFIXES) and not f.startswith(".")]
    for f in sorted(files):
        try:
            data = f.read_bytes()
        except OSError:  # vanished while walking (another editor saving)
            continue
        h.update(f.relative_to(root).as_posix().encode() + b"\0")
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def ensure_wheel(out_dir: Path | str, root: Path | None = None, log=print) -> Path:
    """Return the path of an up-to-date wheel in ``out_dir``, building it when sources changed.

    out_dir: created if missing. root: the source tree (default: this package's repo).
    Raises WheelError with hatchling's output when the build fails. A build takes ~1 s.
    """
    root = Path(root) if root else repo_root()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with _LOCK:
        digest = source_hash(root)
        target = out_dir / wheel_name()
        sidecar = target.with_name(target.name + ".src-sha256")
        if target.is_file() and sidecar.is_file() and sidecar.read_text().strip() == digest:
            return target
        log(f"[wheel] building {target.name} (sources changed)")
        with tempfile.TemporaryDirectory(prefix=".wheel-", dir=out_dir) as tmp:
            code = ("import sys, hatchling.build as b; "
                    "print(b.build_wheel(sys.argv[1]))")
            proc = subprocess.run([sys.executable, "-c", code, tmp], cwd=root,
                                  capture_output=True, text=True)
            built = list(Path(tmp).glob("*.whl"))
            if proc.returncode != 0 or not built:
                raise WheelError(f"hatchling failed (rc {proc.returncode}):\n"
                                 f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
            if built[0].name != target.name:
                raise WheelError(f"built {built[0].name}, expected {target.name} "
                                 "(version in pyproject.toml and __init__.py differ?)")
            shutil.move(str(built[0]), str(target.with_name(target.name + ".part")))
            os.replace(target.with_name(target.name + ".part"), target)
        sidecar.write_text(digest + "\n")
        log(f"[wheel] built {target} ({target.stat().st_size:,} bytes)")
        return target
