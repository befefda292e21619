"""Folders written whole or not at all, under the data root (``store.write_folder`` uses it).

A dataset is built in a temp folder ``<root>/.tmp-NAME-XXXX`` (``building``) which holds a
``.lock`` file locked (``fcntl.flock``) by the process writing it; ``replace_dir`` then puts it
at ``<root>/NAME`` in one rename (Linux ``renameat2(RENAME_EXCHANGE)``; elsewhere two renames,
undone on failure). A prepare that was killed leaves its temp folder behind: ``clean_stale``
removes every ``.tmp-*`` folder whose lock no process holds (where ``flock`` is missing, or for
a folder without a ``.lock``: one untouched for ``STALE_AFTER_S``), and ``.old-*`` folders and
``.upload-*`` files (a server's upload being received) untouched for that long.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable

try:
    import fcntl
except ImportError:  # Windows: stale temp folders are told by their age only
    fcntl = None

STALE_AFTER_S = 3600.0  # a temp folder or upload untouched this long is a killed prepare's
LOCK = ".lock"


def write_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` and fsync it."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def fsync_dir(path: Path) -> None:
    """fsync a folder (its entries: renames into it survive a crash); silent where unsupported."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    return fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def replace_dir(new: Path, dest: Path) -> None:
    """Put folder ``new`` at ``dest`` (replacing the folder there, removed afterwards)."""
    if not dest.exists() and not dest.is_symlink():
        os.rename(new, dest)
    elif _exchange(new, dest):
        shutil.rmtree(new, ignore_errors=True)  # new now holds the old folder
    else:
        old = dest.with_name(f".old-{dest.name}-{os.getpid()}")
        os.rename(dest, old)
        try:
            os.rename(new, dest)
        except OSError:
            os.rename(old, dest)
            raise
        shutil.rmtree(old, ignore_errors=True)
    fsync_dir(dest.parent)


@contextlib.contextmanager
def building(parent: Path, name: str):
    """A new temp folder ``<parent>/.tmp-<name>-XXXX`` (mode 0755) holding a locked ``.lock``
    while the ``with`` block runs; the lock file is gone at its end, and the folder too unless
    the block moved it away (``replace_dir``). Call ``unlock()`` (yielded second) before the
    move so the lock file stays out of the result."""
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{name}-", dir=parent))
    lock = None

    def unlock() -> None:
        if lock is not None and not lock.closed:
            (tmp / LOCK).unlink(missing_ok=True)
            lock.close()  # closing drops the flock
    try:
        lock = open(tmp / ".lock-new", "wb")  # noqa: SIM115 - held for the block
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        os.rename(tmp / ".lock-new", tmp / LOCK)  # never seen unlocked under its name
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0700
        yield tmp, unlock
    finally:
        unlock()
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _untouched_for(path: Path, now: float) -> float:
    """Seconds since ``path`` or anything directly inside it last changed."""
    times = [path.lstat().st_mtime]
    if path.is_dir() and not path.is_symlink():
        times += [p.lstat().st_mtime for p in path.iterdir()]
    return now - max(times)


def _abandoned(folder: Path) -> bool | None:
    """For a ``.tmp-*`` folder: True when its ``.lock`` exists and no process holds it,
    False when one does, None when that cannot be told (no lock file, no ``flock``)."""
    if fcntl is None or not (folder / LOCK).is_file():
        return None
    try:
        with open(folder / LOCK, "rb") as f:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:
        return None
    return True


def clean_stale(root: Path, log: Callable[[str], None] | None = None,
                max_age_s: float = STALE_AFTER_S) -> list[str]:
    """Remove what killed prepares and uploads left in ``root`` (see the module docstring);
    the names removed (each said through ``log``). Never follows a symbolic link."""
    root, now, removed = Path(root), time.time(), []
    if not root.is_dir():
        return removed
    for p in sorted(root.iterdir()):
        if not p.name.startswith((".tmp-", ".old-", ".upload-")) or p.is_symlink():
            continue
        try:
            stale = _abandoned(p) if p.name.startswith(".tmp-") and p.is_dir() else None
            if stale is None:
                stale = _untouched_for(p, now) > max_age_s
            if not stale:
                continue
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink()
        except OSError:
            continue  # gone meanwhile, or not ours to remove: left alone
        removed.append(p.name)
        if log:
            log(f"removed {p.name}: left by an interrupted prepare or upload")
    return removed
