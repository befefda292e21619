"""Make the image-folder / CSV fixtures of tests/test_datasets_images.py (issue 18: own data).

Usage: ``.venv/bin/python scripts/make_hostile_images.py OUT_DIR`` writes every fixture into
OUT_DIR; the tests call the functions below into their temp folders (nothing committed but
this script). Pillow + numpy; seeded, so the same files every time. Each ``make_*`` function
writes one file (or folder) and returns its path.
"""

from __future__ import annotations

import io
import stat
import struct
import sys
import zipfile
import zlib
from pathlib import Path

import numpy as np
from PIL import Image

FORMATS = {"png": "PNG", "jpg": "JPEG", "webp": "WEBP", "bmp": "BMP"}


def image_bytes(px: np.ndarray, fmt: str = "png", mode: str | None = None) -> bytes:
    """``px`` (uint8 [H, W] or [H, W, 3|4]) encoded as ``fmt`` (png, jpg, webp, bmp; webp
    lossless so values survive)."""
    buf = io.BytesIO()
    extra = {"lossless": True} if fmt == "webp" else {"quality": 95} if fmt == "jpg" else {}
    Image.fromarray(px, mode).save(buf, FORMATS[fmt], **extra)
    return buf.getvalue()


def sample(rng, h: int = 12, w: int = 12, channels: int = 3) -> np.ndarray:
    """A random image: uint8 [h, w] (channels 1) or [h, w, channels]."""
    shape = (h, w) if channels == 1 else (h, w, channels)
    return rng.integers(0, 256, shape, dtype=np.uint8)


def write_zip(path: Path, members: dict, dirs: tuple = ()) -> Path:
    """A zip of ``{name: bytes}`` (deflated) and empty folder entries ``dirs``."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for d in dirs:
            z.writestr(d.rstrip("/") + "/", b"")
        for name, data in members.items():
            z.writestr(name, data)
    return path


def good_members(classes=("cat", "dog", "fox"), per: int = 5, seed: int = 0,
                 fmts=("png", "jpg", "webp", "bmp")) -> dict:
    """``{class/i.ext: bytes}``: ``per`` random 12x12 RGB images per class, formats cycled."""
    rng = np.random.default_rng(seed)
    out = {}
    for c in classes:
        for i in range(per):
            fmt = fmts[i % len(fmts)]
            out[f"{c}/{i}.{fmt}"] = image_bytes(sample(rng), fmt)
    return out


def make_good_zip(out: Path) -> Path:
    """3 classes x 5 RGB images (PNG, JPEG, WebP, BMP) under a common top folder."""
    members = {f"photos/{k}": v for k, v in good_members().items()}
    return write_zip(out / "good.zip", members)


def make_traversal_zip(out: Path) -> Path:
    """A class member plus one named ``../evil/x.png``."""
    return write_zip(out / "traversal.zip", {**good_members(per=2), "../evil/x.png": b"x"})


def make_absolute_zip(out: Path) -> Path:
    """A class member plus one named ``/etc/x.png``."""
    return write_zip(out / "absolute.zip", {**good_members(per=2), "/etc/x.png": b"x"})


def make_bomb_zip(out: Path) -> Path:
    """``cat/bomb.png``: 8 MiB of zeros deflated to about 8 KiB (ratio about 1000:1)."""
    return write_zip(out / "bomb.zip", {**good_members(per=2), "cat/bomb.png": bytes(8 << 20)})


def patch_entry(path: Path, name: str, local_at: int, central_at: int, fmt: str,
                value: int) -> Path:
    """Overwrite one field (``struct`` format ``fmt``) of member ``name`` in both its local
    header (at byte ``local_at`` of it) and its central directory entry (``central_at``)."""
    raw, key = bytearray(path.read_bytes()), name.encode()
    for sig, off, name_len_at, name_at in ((b"PK\x03\x04", local_at, 26, 30),
                                           (b"PK\x01\x02", central_at, 28, 46)):
        at = raw.find(sig)
        while at >= 0:
            n = struct.unpack_from("<H", raw, at + name_len_at)[0]
            if raw[at + name_at:at + name_at + n] == key:
                struct.pack_into(fmt, raw, at + off, value)
            at = raw.find(sig, at + 4)
    path.write_bytes(bytes(raw))
    return path


def make_lying_zip(out: Path) -> Path:
    """``cat/big.png`` whose directory entries (central and local) say 100 bytes while its
    data unpacks to 3 MiB: the ratio check passes, reading must stop (CRC error)."""
    path = write_zip(out / "lying.zip", {**good_members(per=2), "cat/big.png": bytes(3 << 20)})
    return patch_entry(path, "cat/big.png", 22, 24, "<I", 100)  # uncompressed size


def make_encrypted_zip(out: Path) -> Path:
    """``cat/secret.png`` flagged encrypted (general purpose bit 0)."""
    path = write_zip(out / "encrypted.zip", {**good_members(per=2), "cat/secret.png": b"x"})
    return patch_entry(path, "cat/secret.png", 6, 8, "<H", 1)


def make_symlink_zip(out: Path) -> Path:
    """``cat/link.png``: a symbolic link member (mode bits S_IFLNK) to ``../../etc/passwd``."""
    path = write_zip(out / "symlink.zip", good_members(per=2))
    info = zipfile.ZipInfo("cat/link.png")
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    with zipfile.ZipFile(path, "a") as z:
        z.writestr(info, "../../etc/passwd")
    return path


def make_undecodable_zip(out: Path) -> Path:
    """``cat/broken.png``: a PNG signature then garbage; ``dog/text.jpg``: text (and 3 good
    images per class)."""
    return write_zip(out / "undecodable.zip", {**good_members(per=3), "dog/text.jpg": b"hello",
                                               "cat/broken.png": b"\x89PNG\r\n\x1a\n" + b"x" * 40})


def make_empty_class_zip(out: Path) -> Path:
    """Classes cat and dog with images, ``empty/`` a folder entry with none."""
    return write_zip(out / "empty_class.zip", good_members(("cat", "dog"), 2), dirs=("empty",))


def make_one_class_zip(out: Path) -> Path:
    """Only ``cat/`` (3 images)."""
    return write_zip(out / "one_class.zip", good_members(("cat",), 3))


def make_many_classes_zip(out: Path, count: int = 257) -> Path:
    """``count`` class folders ``c000``.. with 2 tiny PNGs each."""
    tiny = image_bytes(np.zeros((2, 2), np.uint8))
    return write_zip(out / "many_classes.zip",
                     {f"c{i:03d}/{j}.png": tiny for i in range(count) for j in range(2)})


def make_mixed_zip(out: Path) -> Path:
    """Grey and RGB(A) images of several sizes: ``a/`` 2 grey 20x10 PNG + 1 RGBA 32x32 PNG,
    ``b/`` 2 RGB 32x32 PNG + 1 grey 40x40 BMP; plus top-level files (``notes.txt``,
    ``top.png``), a non-image in a class (``a/readme.txt``) and hidden/system files
    (``__MACOSX/a/._0.png``, ``.DS_Store``, ``a/.DS_Store``)."""
    rng = np.random.default_rng(1)
    members = {
        "a/0.png": image_bytes(sample(rng, 10, 20, 1)),
        "a/1.png": image_bytes(sample(rng, 10, 20, 1)),
        "a/2.png": image_bytes(sample(rng, 32, 32, 4), mode="RGBA"),
        "b/0.png": image_bytes(sample(rng, 32, 32)),
        "b/1.png": image_bytes(sample(rng, 32, 32)),
        "b/2.bmp": image_bytes(sample(rng, 40, 40, 1), "bmp"),
        "notes.txt": b"hello", "top.png": image_bytes(sample(rng)), "a/readme.txt": b"x",
        "__MACOSX/a/._0.png": b"\0\5\26\7", ".DS_Store": b"\0\0\0\1Bud1", "a/.DS_Store": b"x",
    }
    return write_zip(out / "mixed.zip", members)


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose IHDR says ``width`` x ``height`` grey pixels, with one tiny IDAT: Pillow
    learns the size from the header without decoding anything."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0"))
            + chunk(b"IEND", b""))


def make_pixel_bomb_zip(out: Path) -> Path:
    """``dog/huge.png``: a header claiming 10000 x 10000 = 100,000,000 pixels (more than
    Pillow's MAX_IMAGE_PIXELS, 89,478,485), in an otherwise good zip."""
    return write_zip(out / "pixel_bomb.zip", {**good_members(("cat", "dog"), 2),
                                              "dog/huge.png": png_header_only(10000, 10000)})


def make_case_zip(out: Path) -> Path:
    """Class folders ``Cat`` and ``cat``."""
    return write_zip(out / "case.zip", good_members(("Cat", "cat"), 2))


def make_nfd_zip(out: Path) -> Path:
    """Class folders ``caf\\u00e9`` (NFC) and ``cafe\\u0301`` (NFD): the same name."""
    return write_zip(out / "nfd.zip", good_members(("caf\u00e9", "cafe\u0301"), 2))


def make_all(out: Path) -> list:
    """Every fixture above into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    makers = [v for k, v in globals().items() if k.startswith("make_") and k != "make_all"]
    return [m(out) for m in makers]


if __name__ == "__main__":
    for p in make_all(Path(sys.argv[1] if len(sys.argv) > 1 else "hostile-images")):
        print(p)
