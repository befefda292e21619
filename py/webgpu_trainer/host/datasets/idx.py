"""IDX datasets of any image size (MNIST, Fashion-MNIST, your own), from a folder or a tar.

Four files (raw or ``.gz``; found by name as ``datafiles.find_files`` does: ``idx`` or
``ubyte``; ``image`` / ``label``; ``train`` / ``test`` or ``t10k``): images ``idx3``
``[N, H, W]`` (magic 0x00000803) or ``idx4`` ``[N, C, H, W]`` (0x00000804, C 1 or 3), labels
``idx1`` ``[N]`` (0x00000801), all unsigned bytes. Classes are ``0..K-1`` (K: the largest label
+ 1) named by an optional ``classes.txt`` next to them (one name a line).

The md5 of each uncompressed file names a known dataset: MNIST (``mnist``) or Fashion-MNIST
(``fashion-mnist``, with its class names). Files with MNIST's standard names and counts that
are neither are refused (a corrupt download); any other set is the user's own dataset.
"""

from __future__ import annotations

import hashlib
import math
import re
import unicodedata
from pathlib import Path, PurePosixPath

import numpy as np

from ..datafiles import MNIST_COUNTS, MNIST_IDX, DataError, _gunzip
from . import archive
from .arrays import Arrays

#: md5 of the uncompressed original IDX files (header included).
MNIST_MD5 = {
    ("train", "images"): "6bbc9ace898e44ae57da46a324031adb",
    ("test", "images"): "2646ac647ad5339dbf082846283269ea",
    ("train", "labels"): "a25bea736e30d166cdddb491f175f624",
    ("test", "labels"): "27ae3e4e09519cfbb04c329615203637",
}
FASHION_MD5 = {  # the .gz files: cf8536b0..., 10bea18f..., f78720b4..., 0d30e22e...
    ("train", "images"): "f4a8712d7a061bf5bd6d2ca38dc4d50a",
    ("test", "images"): "8181f5470baa50b63fa0f6fddb340f0a",
    ("train", "labels"): "9018921c3c673c538a1fc5bad174d6f9",
    ("test", "labels"): "15d484375f8d13e6eb1aabb0c3f46965",
}
FASHION_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                   "Sneaker", "Bag", "Ankle boot"]
FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")  # Debian's dataset-fashion-mnist
KNOWN = {"mnist": ("MNIST", MNIST_MD5, [str(d) for d in range(10)]),
         "fashion-mnist": ("Fashion-MNIST", FASHION_MD5, FASHION_CLASSES)}
PARTS = ("images", "labels")


def parse(raw: bytes, part: str, name: str) -> tuple[np.ndarray, str]:
    """``(array, md5 of the uncompressed file)`` of IDX bytes (raw or gzip): images uint8
    ``[N, C, H, W]``, labels uint8 ``[N]``. DataError naming ``name`` for a wrong magic, a
    short header, a channel count other than 1 or 3, or a body shorter or longer than the
    header says (with the record and byte offset where it stops)."""
    raw = _gunzip(raw, name)
    ndims = (3, 4) if part == "images" else (1,)
    want = " or ".join(f"0x{0x800 + d:08x}" for d in ndims)
    magic = int.from_bytes(raw[:4], "big") if len(raw) >= 4 else None
    if magic is None or raw[:3] != b"\0\0\x08" or raw[3] not in ndims:
        shown = "missing" if magic is None else f"0x{magic:08x}"
        raise DataError(f"{name}: bad IDX magic {shown}, expected {want} (IDX {part}: unsigned "
                        f"bytes, {' or '.join(map(str, ndims))} dimensions)")
    head = 4 + 4 * raw[3]
    if len(raw) < head:
        raise DataError(f"{name}: {len(raw)} bytes, too short for its IDX header ({head} bytes)")
    dims = np.frombuffer(raw, ">u4", count=raw[3], offset=4).tolist()
    if part == "images" and len(dims) == 3:
        dims.insert(1, 1)
    if part == "images" and (dims[1] not in (1, 3) or 0 in dims[2:]):
        raise DataError(f"{name}: images of {dims[1]} channel(s), {dims[2]}x{dims[3]}: expected "
                        "1 or 3 channels of at least 1x1 pixels")
    n, per = dims[0], math.prod(dims[1:])
    body = len(raw) - head
    if body < n * per:
        raise DataError(f"{name}: truncated: the header says {n:,} {part} ({n * per:,} bytes "
                        f"after the header) but the file holds {body:,}: record {body // per:,} "
                        f"is cut off at byte offset {len(raw):,} (the end of the file)")
    if body > n * per:
        raise DataError(f"{name}: {body - n * per:,} bytes more than the {n:,} {part} the "
                        f"header says (from byte offset {head + n * per:,})")
    arr = np.frombuffer(raw, np.uint8, offset=head).reshape(dims).copy()
    return arr, hashlib.md5(raw).hexdigest()


def idx_md5(arr: np.ndarray) -> str:
    """md5 of the IDX file that holds uint8 ``arr`` (``[N, 784]`` counts as ``[N, 28, 28]``)."""
    dims = [len(arr), 28, 28] if arr.ndim == 2 and arr.shape[1] == 784 else list(arr.shape)
    h = hashlib.md5(bytes([0, 0, 8, len(dims)]) + np.array(dims, ">u4").tobytes())
    h.update(np.ascontiguousarray(arr, np.uint8).tobytes())
    return h.hexdigest()


def _role(name: str) -> tuple | None:
    low = PurePosixPath(name).name.lower()
    stem = low.removesuffix(".gz")
    if not ("idx" in stem or "ubyte" in stem):
        return None
    split = "train" if "train" in stem else "test" if "test" in stem or "t10k" in stem else None
    part = "images" if "image" in stem else "labels" if "label" in stem else None
    return (split, part) if split and part else None


def find(files: archive.Files) -> dict | None:
    """{(split, part): name} of the four IDX files in one folder of ``files``, or None.
    DataError when a role has several candidates (a raw file wins over its own .gz)."""
    for folder, names in sorted(archive.by_dir(files.names).items()):
        roles: dict = {}
        for name in names.values():
            role = _role(name)
            if role:
                roles.setdefault(role, []).append(name)
        if len(roles) == 4:
            out = {}
            for role, cands in roles.items():
                cands.sort(key=len)
                if len(cands) == 2 and cands[1].lower() == cands[0].lower() + ".gz":
                    cands = cands[:1]
                if len(cands) > 1:
                    raise DataError(f"{files.label(folder)}: {len(cands)} files could be the "
                                    f"{role[0]} {role[1]} ({', '.join(cands)}); keep one")
                out[role] = cands[0]
            return out
    return None


def detect(path: Path) -> bool:
    """Whether ``path`` (a folder or a tar) holds four IDX files (by name)."""
    path = Path(path)
    if not (path.is_dir() or archive.is_archive(path)):
        return False
    return find(archive.open_files(path)) is not None


def slug(text: str) -> str:
    """A dataset name made from a file or folder name (``My Photos.tar.gz`` -> ``my-photos``,
    ``Café.csv`` -> ``cafe``). Letters without an ASCII form (``猫.csv``) would be lost, so
    names from such text end in 8 hex digits of its sha256 (``dataset-3f0c41d2``): distinct
    names for distinct files."""
    low = re.sub(r"\.(tar\.gz|tgz|tar|zip|csv)$", "", text.lower())
    plain = unicodedata.normalize("NFKD", low).encode("ascii", "ignore").decode()
    base = re.sub(r"[^a-z0-9_-]+", "-", plain).strip("-_")
    lost = any(c.isalnum() and not unicodedata.normalize("NFKD", c).encode("ascii", "ignore")
               for c in low)
    if not lost:
        return (base[:40] or "dataset").strip("-_")
    tag = hashlib.sha256(low.encode()).hexdigest()[:8]
    return f"{base[:31].strip('-_') or 'dataset'}-{tag}"


def _classes(files: archive.Files, folder: str, k: int) -> list[str]:
    name = next((n for n in files.names if PurePosixPath(n).parent.as_posix() == folder
                 and PurePosixPath(n).name.lower() == "classes.txt"), None)
    if name is None:
        return [str(i) for i in range(k)]
    try:
        lines = [ln.strip() for ln in files.read(name).decode("utf-8").splitlines()]
    except UnicodeDecodeError as exc:
        raise DataError(f"{files.label(name)}: not UTF-8 text ({exc.reason} at byte offset "
                        f"{exc.start:,})") from None
    names = [ln for ln in lines if ln]
    if len(names) < k:
        raise DataError(f"{files.label(name)}: {len(names)} class names, but the labels go up "
                        f"to {k - 1} ({k} classes)")
    return names


def read(path: Path, log=print) -> Arrays:
    """The IDX dataset in the folder or tar ``path`` (see the module docstring)."""
    path = Path(path)
    files = archive.open_files(path)
    found = find(files)
    if found is None:
        raise DataError(f"{path}: no IDX files (train/t10k images and labels)")
    arrays, md5s = {}, {}
    for split in ("train", "test"):
        for part in PARTS:
            log(f"reading {files.label(found[(split, part)])}")
            arrays[(split, part)], md5s[(split, part)] = parse(
                files.read(found[(split, part)]), part, files.label(found[(split, part)]))
        n_im, n_lb = len(arrays[(split, "images")]), len(arrays[(split, "labels")])
        if n_im != n_lb:
            raise DataError(f"{files.label(found[(split, 'images')])}: {n_im:,} images but "
                            f"{files.label(found[(split, 'labels')])} holds {n_lb:,} labels")
    a = Arrays(arrays[("train", "images")], arrays[("train", "labels")],
               arrays[("test", "images")], arrays[("test", "labels")], [], "", "")
    for name, (title, want, classes) in KNOWN.items():
        if md5s == want:
            a.classes, a.title, a.name = list(classes), title, name
            a.source = f"{title} IDX files in {path}"
            a.idx_md5 = md5s
            return a
    standard = all(PurePosixPath(found[k]).name.lower().removesuffix(".gz") in
                   (MNIST_IDX[k], MNIST_IDX[k].replace("-idx", ".idx")) for k in found)
    if standard and all(len(arrays[(s, "labels")]) == n for s, n in MNIST_COUNTS.items()):
        bad = next(k for k in sorted(md5s) if md5s[k] not in (MNIST_MD5[k], FASHION_MD5[k]))
        raise DataError(f"checksum mismatch for {bad[0]} {bad[1]} from {files.label(found[bad])}:"
                        f" md5 of the uncompressed IDX file is {md5s[bad]}, expected "
                        f"{MNIST_MD5[bad]} (MNIST) or {FASHION_MD5[bad]} (Fashion-MNIST); the "
                        "files carry their standard names and counts but are corrupt or neither")
    k = int(max(a.train_y.max(), a.test_y.max())) + 1
    a.classes = _classes(files, PurePosixPath(found[("train", "labels")]).parent.as_posix(), k)
    a.title = path.name.removesuffix(".gz").removesuffix(".tar") or "IDX dataset"
    a.name, a.source = slug(path.name), f"IDX files in {path}"
    return a
