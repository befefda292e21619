"""A source's files, from a folder or a ``.tar`` / ``.tar.gz`` as downloaded (read in memory).

``open_files(path)`` returns a ``Files``: the regular files' relative POSIX names and their
bytes on demand. A folder is walked to ``MAX_DEPTH`` levels (symlinks and hidden names skipped).
An archive is read in one pass with bounds: every member ``MAX_BYTES`` (256 MiB, the bound for
one data file) and all of them ``MAX_TOTAL`` (1 GiB); a member named with ``..`` or an absolute
path, or a link or device member, is refused (DataError naming it). The last archive read stays
cached (``detect`` then ``read`` unpack it once) until ``forget()``.
"""

from __future__ import annotations

import tarfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ..datafiles import MAX_BYTES, DataError

MAX_TOTAL = 1 << 30
MAX_DEPTH = 3
MAX_FILES = 10_000
TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz")

_cache: dict = {}


@dataclass
class Files:
    """The files of a source: ``names`` (relative POSIX paths) and ``read(name)``."""

    where: Path
    names: list[str]
    _data: dict = field(default_factory=dict)  # archive members: name -> bytes

    def read(self, name: str) -> bytes:
        """The bytes of ``name``; DataError for a file past ``MAX_BYTES``."""
        if name in self._data:
            return self._data[name]
        path = self.where / name
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise DataError(f"{path}: {size:,} bytes, more than {MAX_BYTES:,} bytes (256 MiB, "
                            "the bound for one data file)")
        return path.read_bytes()

    def label(self, name: str) -> str:
        """How errors name the file ``name``: its path, or ``archive:member``."""
        return f"{self.where}:{name}" if self._data else str(self.where / name)


def is_archive(path: Path) -> bool:
    """Whether ``path`` is a file named like a tar archive."""
    return Path(path).is_file() and Path(path).name.lower().endswith(TAR_SUFFIXES)


def _walk(folder: Path) -> list[str]:
    out: list[str] = []
    todo = [(folder, 0)]
    while todo:
        here, depth = todo.pop()
        for p in sorted(here.iterdir()):
            if p.name.startswith(".") or p.is_symlink():
                continue
            if p.is_dir() and depth + 1 < MAX_DEPTH:
                todo.append((p, depth + 1))
            elif p.is_file():
                out.append(p.relative_to(folder).as_posix())
                if len(out) > MAX_FILES:
                    raise DataError(f"{folder}: more than {MAX_FILES:,} files; point at the "
                                    "dataset's own folder")
    return sorted(out)


def _member_name(tar_path: Path, m: tarfile.TarInfo) -> str:
    name = m.name
    parts = PurePosixPath(name).parts
    if name.startswith(("/", "\\")) or ".." in parts or ":" in (parts[0] if parts else ""):
        raise DataError(f"{tar_path}: member {name[:200]!r} has an absolute or '..' path: "
                        "refused")
    if m.issym() or m.islnk() or m.isdev() or m.isfifo():
        raise DataError(f"{tar_path}: member {name[:200]!r} is a link or device: refused")
    return PurePosixPath(*[p for p in parts if p != "."]).as_posix()


def _read_tar(path: Path) -> Files:
    data: dict = {}
    total = 0
    try:
        with tarfile.open(path, "r:*") as tar:
            for m in tar:
                name = _member_name(path, m)
                if not m.isfile() or PurePosixPath(name).name.startswith("."):
                    continue
                if m.size > MAX_BYTES:
                    raise DataError(f"{path}: member {name!r} is {m.size:,} bytes, more than "
                                    f"{MAX_BYTES:,} (256 MiB, the bound for one data file)")
                total += m.size
                if total > MAX_TOTAL or len(data) >= MAX_FILES:
                    raise DataError(f"{path}: unpacks to more than {MAX_TOTAL:,} bytes (1 GiB) "
                                    f"or {MAX_FILES:,} files: refused")
                f = tar.extractfile(m)
                raw = f.read(m.size + 1) if f else b""
                if len(raw) != m.size:
                    raise DataError(f"{path}: member {name!r} holds {len(raw):,} bytes, its "
                                    f"header says {m.size:,} (truncated archive)")
                data[name] = raw
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise DataError(f"{path}: not a readable tar archive ({exc})") from None
    return Files(path, sorted(data), data)


def open_files(path: Path) -> Files:
    """The files of the folder or archive ``path`` (see the module docstring)."""
    path = Path(path)
    if path.is_dir():
        return Files(path, _walk(path))
    if not is_archive(path):
        raise DataError(f"{path}: not a folder or a .tar / .tar.gz archive")
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _cache:
        _cache.clear()
        _cache[key] = _read_tar(path)
    return _cache[key]


def forget() -> None:
    """Drop the cached archive (its bytes)."""
    _cache.clear()


def by_dir(names: list[str]) -> dict[str, dict[str, str]]:
    """{folder: {lowercase base name: name}} of ``names``."""
    out: dict = {}
    for n in names:
        p = PurePosixPath(n)
        out.setdefault(p.parent.as_posix(), {})[p.name.lower()] = n
    return out
