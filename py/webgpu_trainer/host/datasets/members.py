"""The files of an image-folder dataset, from a folder or a .zip, listed and read with limits.

Nothing is ever extracted to disk: a zip's members are read into memory one at a time. Before
anything is read, the zip's central directory is checked: member names (no absolute names, no
``..``, no drive letters), symbolic links (refused), encrypted members (refused), the total
unpacked size (``MAX_TOTAL_BYTES``) and, for members over 1 MiB, the compression ratio
(``MAX_RATIO``): a zip bomb is refused from its directory alone. While reading, each member is
read at most to its declared size and the bytes read are counted again.

In a folder, symbolic links (files or folders) are not followed: they are listed as refused.
Hidden and system files (a part starting with ``.``, ``__MACOSX``, ``Thumbs.db``,
``desktop.ini``) are skipped and counted (``Listing.ignored``). Member names use ``/``, as
stored (``images.py`` NFC-normalises the class names and refuses two that differ only by case
or normalisation). A zip member's name is read as stored: a NUL in it is refused (zipfile's
``filename`` would end there).
"""

from __future__ import annotations

import os
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from ..datafiles import DataError

MAX_TOTAL_BYTES = 1 << 30     # all members unpacked (1 GiB)
MAX_MEMBER_BYTES = 64 << 20   # one image file (64 MiB)
MAX_RATIO = 100               # unpacked / packed, checked for members over RATIO_FROM bytes
RATIO_FROM = 1 << 20
MAX_MEMBERS = 200_000         # entries in a zip's directory
SYSTEM_NAMES = {"__macosx", "thumbs.db", "desktop.ini"}


@dataclass
class Member:
    """One file: ``name`` (``/``-separated, relative to the dataset's top) and what reads
    it (``size`` the declared unpacked size)."""

    name: str
    size: int
    key: object  # a ZipInfo or a Path


@dataclass
class Listing:
    """What a source holds: its ``members`` (files, sorted by name), its ``folders`` (names,
    empty ones too), ``refused`` (``[{"member", "reason"}]``: symbolic links in folders) and
    the count of ``ignored`` hidden or system files."""

    members: list
    folders: set = field(default_factory=set)
    refused: list = field(default_factory=list)
    ignored: int = 0


def is_hidden(name: str) -> bool:
    """Whether a member is a hidden or system file (any part ``.x``, ``__MACOSX``, ...)."""
    return any(p.startswith(".") or p.lower() in SYSTEM_NAMES for p in name.split("/"))


def _clean_name(raw: str) -> str:
    """A zip member's name, ``/``-separated; DataError for an absolute name, a drive
    letter, ``..`` or a NUL (nothing is extracted, but such a zip is not a set of folders)."""
    name = raw.replace("\\", "/")
    shown = repr(raw[:120])
    if "\0" in name:
        raise DataError(f"zip member {shown}: the name holds a NUL character")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise DataError(f"zip member {shown}: absolute names are refused")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise DataError(f"zip member {shown}: names with '..' are refused")
    return "/".join(parts)


def _check_zip_entry(info: zipfile.ZipInfo, name: str, total: int) -> None:
    """DataError for a symbolic link, an encrypted member, a member over the size or ratio
    limits, or a ``total`` unpacked size over ``MAX_TOTAL_BYTES``."""
    if stat.S_ISLNK(info.external_attr >> 16):
        raise DataError(f"zip member {name!r} is a symbolic link: refused (a zip of images "
                        "holds files only)")
    if info.flag_bits & 0x1:
        raise DataError(f"zip member {name!r} is encrypted: refused")
    if info.file_size > RATIO_FROM and info.file_size > MAX_RATIO * max(info.compress_size, 1):
        ratio = info.file_size / max(info.compress_size, 1)
        raise DataError(f"zip member {name!r}: {info.compress_size:,} bytes unpack to "
                        f"{info.file_size:,} (ratio {ratio:,.0f}:1, the limit is {MAX_RATIO}:1 "
                        "for members over 1 MiB): refused as a zip bomb")
    if info.file_size > MAX_MEMBER_BYTES:
        raise DataError(f"zip member {name!r}: {info.file_size:,} bytes, more than the "
                        f"{MAX_MEMBER_BYTES:,} bytes one image may have")
    if total > MAX_TOTAL_BYTES:
        raise DataError(f"the zip unpacks to more than {MAX_TOTAL_BYTES:,} bytes (reached at "
                        f"member {name!r}): refused")


def _check_entry_count(path: Path) -> None:
    """DataError when the zip's end record declares more than ``MAX_MEMBERS`` entries: checked
    before ``zipfile`` parses the directory into one object per entry (zipfile's
    ``_EndRecData``, private but unchanged since Python 2, reads the end record, zip64 too)."""
    with open(path, "rb") as f:
        end = zipfile._EndRecData(f)
    if end is None:
        raise zipfile.BadZipFile("File is not a zip file")
    count = end[zipfile._ECD_ENTRIES_TOTAL]
    if count > MAX_MEMBERS:
        raise DataError(f"{path.name}: {count:,} zip entries, more than {MAX_MEMBERS:,}: "
                        "refused")


class Source:
    """A folder or a .zip of class folders: ``listing()`` and ``read(member)``. Use as a
    context manager (a zip stays open while its members are read)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._zip = None
        self._read_total = 0
        if not self.path.exists():
            raise DataError(f"{self.path.name}: no such file or folder")
        if not self.path.is_dir():
            try:
                _check_entry_count(self.path)
                self._zip = zipfile.ZipFile(self.path)
            except (zipfile.BadZipFile, OSError) as exc:
                raise DataError(f"{self.path.name}: not a zip file or a folder ({exc})") from None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._zip is not None:
            self._zip.close()

    def listing(self) -> Listing:
        """The files (hidden and system ones ignored), checked as the module docstring says."""
        return self._zip_listing() if self._zip is not None else self._folder_listing()

    def _zip_listing(self) -> Listing:
        infos = self._zip.infolist()
        out, seen, folders, total, ignored = [], set(), set(), 0, 0
        for info in infos:
            # orig_filename: zipfile's ``filename`` ends at a NUL ("c\0at/1.png" -> "c")
            name = _clean_name(info.orig_filename)
            total += info.file_size
            _check_zip_entry(info, name or info.filename, total)
            if is_hidden(name):
                ignored += not info.is_dir()
                continue
            if info.is_dir() or not name:
                folders.add(name)
                continue
            if name in seen:
                raise DataError(f"zip member {name!r} appears twice in the zip")
            seen.add(name)
            out.append(Member(name, info.file_size, info))
        return Listing(sorted(out, key=lambda m: m.name), folders, ignored=ignored)

    def _folder_listing(self) -> Listing:
        out, folders, refused, ignored = [], set(), [], 0
        for top, dirs, files in os.walk(self.path, followlinks=False):
            rel = Path(top).relative_to(self.path).as_posix()
            rel = "" if rel == "." else rel + "/"
            for d in list(dirs):
                name = rel + d
                if is_hidden(name):
                    dirs.remove(d)
                elif (Path(top) / d).is_symlink():  # os.walk would not enter it: say so
                    refused.append({"member": name, "reason": "symbolic link: not followed"})
                else:
                    folders.add(name)
            for f in files:
                name, path = rel + f, Path(top) / f
                if is_hidden(name):
                    ignored += 1
                elif path.is_symlink():
                    refused.append({"member": name, "reason": "symbolic link: not followed"})
                elif path.is_file():
                    out.append(Member(name, path.stat().st_size, path))
        return Listing(sorted(out, key=lambda m: m.name), folders, refused, ignored)

    def read(self, member: Member) -> bytes:
        """The bytes of ``member``: at most its declared size (a zip member that unpacks to
        more, or fails its CRC, is a DataError naming it), all reads together at most
        ``MAX_TOTAL_BYTES``."""
        if member.size > MAX_MEMBER_BYTES:
            raise DataError(f"{member.name!r}: {member.size:,} bytes, more than the "
                            f"{MAX_MEMBER_BYTES:,} bytes one image may have")
        try:
            if self._zip is None:
                with open(member.key, "rb") as f:
                    data = f.read(member.size + 1)
            else:
                with self._zip.open(member.key) as f:
                    data = f.read(member.size + 1)
        except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError) as exc:
            raise DataError(f"{member.name!r} cannot be read: {exc}") from None
        if len(data) > member.size:
            raise DataError(f"{member.name!r}: holds more than the {member.size:,} bytes "
                            "its entry declares: refused")
        self._read_total += len(data)
        if self._read_total > MAX_TOTAL_BYTES:
            raise DataError(f"{self.path.name}: more than {MAX_TOTAL_BYTES:,} bytes read "
                            f"(reached at {member.name!r}): refused")
        return data
