"""Small dataset files in exactly the official formats, and hostile variants, for the dataset
sources' tests (tests/test_datasets_sources.py generates them into a temp folder; run this
script to look at them: ``python scripts/make_data_fixtures.py OUT``).

Formats (cs.toronto.edu/~kriz/cifar.html, yann.lecun.com/exdb/mnist): CIFAR binary records
``label (+ fine label) + 3,072 bytes R, G, B planes``; CIFAR python batches pickled with
protocol 2 (dict of ``data`` uint8 [N, 3072] and ``labels`` / ``fine_labels``); IDX big-endian
headers (magic ``0x00000801/803/804``, then the dimensions). Each writer returns the arrays it
wrote (images ``[N, C, H, W]``, labels) so the tests compare against them.
"""

from __future__ import annotations

import gzip
import io
import pickle
import sys
import tarfile
from pathlib import Path

import numpy as np

CIFAR10 = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
           "truck"]
CIFAR100 = [f"fine{i:02d}" for i in range(100)]


def _images(rng, n, shape=(3, 32, 32)):
    return rng.integers(0, 256, (n, *shape), dtype=np.uint8)


def _labels(n, k, offset=0):
    return (np.arange(n) + offset) % k


def cifar_binary(folder: Path, k: int = 10, per_batch: int = 10, seed: int = 0) -> dict:
    """CIFAR-10 (``k`` 10: ``data_batch_1..5.bin``, ``test_batch.bin``, ``batches.meta.txt``)
    or CIFAR-100 (``k`` 100: ``train.bin``, ``test.bin``, label name files) in ``folder``.
    Returns {"train": (x, y), "test": (x, y)} (CIFAR-100: fine labels)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    batches = ({f"data_batch_{i}.bin": "train" for i in range(1, 6)} | {"test_batch.bin": "test"}
               if k == 10 else {"train.bin": "train", "test.bin": "test"})
    n = per_batch if k == 10 else 2 * k  # CIFAR-100: every fine class in the training split
    out: dict = {"train": ([], []), "test": ([], [])}
    for i, (name, split) in enumerate(batches.items()):
        x, y = _images(rng, n), _labels(n, k, i)
        cols = [y.astype(np.uint8)[:, None]]
        if k == 100:
            cols.insert(0, (y // 5).astype(np.uint8)[:, None])  # the coarse label first
        (folder / name).write_bytes(np.hstack([*cols, x.reshape(n, -1)]).tobytes())
        out[split][0].append(x)
        out[split][1].append(y)
    if k == 10:
        (folder / "batches.meta.txt").write_text("\n".join(CIFAR10) + "\n\n")
    else:
        (folder / "fine_label_names.txt").write_text("\n".join(CIFAR100) + "\n")
        (folder / "coarse_label_names.txt").write_text(
            "\n".join(f"coarse{i}" for i in range(20)) + "\n")
    return {s: (np.concatenate(xs), np.concatenate(ys)) for s, (xs, ys) in out.items()}


def cifar_python(folder: Path, k: int = 10, per_batch: int = 10, seed: int = 1) -> dict:
    """The python version: pickled dicts with byte-string keys (as the originals, written by
    Python 2), ``data_batch_1..5`` + ``test_batch`` + ``batches.meta`` (CIFAR-10) or ``train``
    + ``test`` + ``meta`` (CIFAR-100) in ``folder``. Returns the arrays as ``cifar_binary``."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    batches = ({f"data_batch_{i}": "train" for i in range(1, 6)} | {"test_batch": "test"}
               if k == 10 else {"train": "train", "test": "test"})
    n = per_batch if k == 10 else 2 * k
    out: dict = {"train": ([], []), "test": ([], [])}
    for i, (name, split) in enumerate(batches.items()):
        x, y = _images(rng, n), _labels(n, k, i)
        d = {b"batch_label": name.encode(), b"data": x.reshape(n, -1),
             b"filenames": [f"img_{j}.png".encode() for j in range(n)]}
        if k == 10:
            d[b"labels"] = y.tolist()
        else:
            d[b"fine_labels"], d[b"coarse_labels"] = y.tolist(), (y // 5).tolist()
        (folder / name).write_bytes(pickle.dumps(d, protocol=2))
        out[split][0].append(x)
        out[split][1].append(y)
    meta = ({b"label_names": [c.encode() for c in CIFAR10], b"num_cases_per_batch": n}
            if k == 10 else {b"fine_label_names": [c.encode() for c in CIFAR100],
                             b"coarse_label_names": [f"coarse{i}".encode() for i in range(20)]})
    (folder / ("batches.meta" if k == 10 else "meta")).write_bytes(pickle.dumps(meta, protocol=2))
    return {s: (np.concatenate(xs), np.concatenate(ys)) for s, (xs, ys) in out.items()}


def idx_bytes(arr: np.ndarray, images_dims: int = 3) -> bytes:
    """The IDX file of uint8 ``arr``: labels [N] (idx1), images [N, H, W] (idx3) or
    [N, C, H, W] (idx4; ``images_dims`` 4)."""
    dims = list(arr.shape)
    if arr.ndim == 4 and images_dims == 3:
        dims = [dims[0], *dims[2:]]
    return bytes([0, 0, 8, len(dims)]) + np.array(dims, ">u4").tobytes() + arr.tobytes()


def idx_folder(folder: Path, shape=(1, 8, 6), k: int = 3, n=(9, 4), gz: bool = False,
               seed: int = 2) -> dict:
    """Four IDX files (``train-images-idx3-ubyte`` ..., ``.gz`` when ``gz``; idx4 when the
    images have 3 channels) of ``k`` classes. Returns the arrays as ``cifar_binary``."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    dims = 3 if shape[0] == 1 else 4
    for split, stem, m in (("train", "train", n[0]), ("test", "t10k", n[1])):
        x, y = _images(rng, m, shape), _labels(m, k)
        for part, raw in (("images", idx_bytes(x, dims)), ("labels", idx_bytes(y.astype(
                np.uint8)))):
            name = f"{stem}-{part}-idx{dims if part == 'images' else 1}-ubyte"
            (folder / (name + (".gz" if gz else ""))).write_bytes(
                gzip.compress(raw, mtime=0) if gz else raw)
        out[split] = (x, y)
    return out


def tar_gz(folder: Path, path: Path, top: str) -> Path:
    """``folder`` packed as ``path`` (.tar.gz) under the member folder ``top``."""
    with tarfile.open(path, "w:gz") as tar:
        tar.add(folder, arcname=top)
    return path


def tar_with_member(path: Path, name: str, data: bytes = b"x") -> Path:
    """A .tar.gz holding one file member named exactly ``name`` (``../x``, ``/etc/x`` ...)."""
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


class _System:
    """Pickles as ``os.system(command)``: what a hostile 'batch' runs under plain pickle."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        import os
        return os.system, (self.command,)


def evil_pickle(marker: Path) -> bytes:
    """A CIFAR-looking batch whose ``data`` is ``os.system("touch marker")``."""
    return pickle.dumps({b"data": _System(f"touch {marker}"), b"labels": [0]}, protocol=2)


def main(out: str) -> int:
    root = Path(out)
    cifar_binary(root / "cifar-10-batches-bin")
    cifar_binary(root / "cifar-100-binary", k=100)
    cifar_python(root / "cifar-10-batches-py")
    cifar_python(root / "cifar-100-python", k=100)
    tar_gz(root / "cifar-10-batches-bin", root / "cifar-10-binary.tar.gz", "cifar-10-batches-bin")
    idx_folder(root / "idx-grey")
    idx_folder(root / "idx-rgb", shape=(3, 5, 7), gz=True)
    hostile = root / "hostile"
    hostile.mkdir(parents=True, exist_ok=True)
    tar_with_member(hostile / "dotdot.tar.gz", "../escape.bin")
    (hostile / "evil_batch").write_bytes(evil_pickle(hostile / "PWNED"))
    print(f"wrote fixtures under {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "data-fixtures"))
