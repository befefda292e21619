"""Your own photos: a folder or a .zip of images, one subfolder per class -> ``Arrays``.

Layout: ``CLASS/IMAGE`` (images in deeper subfolders belong to their top folder's class); when
every file sits under one common top folder (``photos/cat/1.png``, as zipping a folder gives),
that folder is stepped into. Class names are the folder names, NFC-normalised and sorted;
names that differ only by case or Unicode normalisation are refused, and so are names with a
control character or an invisible formatting character such as U+202E RIGHT-TO-LEFT OVERRIDE
(``host.text.hidden_character``, the display names' check). Files at the top level
and files that are not images are listed as refused (and skipped); hidden and system files are
skipped and counted in ``notes`` (``members.py`` lists and reads with the zip-bomb and
symlink checks).

Each image (PNG, JPEG, WebP, BMP; Pillow, told only those formats) is turned upright by its
EXIF orientation, made grey (``L``) or RGB (transparency composited onto white), center-cropped
to a square and resized to ``size`` x ``size`` (Pillow's bicubic, antialiased when shrinking),
all in its own mode (a large JPEG is decoded at a reduced scale, still at least twice ``size``:
Pillow's ``draft``); then converted to the dataset's colour: ``rgb``, ``grey``, or ``auto``
(RGB when any image has colour, i.e. R, G and B differ somewhere). Grey -> RGB repeats the
channel; RGB -> grey is Pillow's ``convert("L")`` (ITU-R 601-2 luma). An image whose header
claims more than Pillow's ``Image.MAX_IMAGE_PIXELS`` pixels is refused naming the file (a
decompression bomb); one that does not decode is skipped and counted in ``notes`` (or refused,
with ``strict``). Every error is a ``DataError`` naming the member and the problem.
"""

from __future__ import annotations

import io
import unicodedata
import warnings
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

from ..text import hidden_character
from ..datafiles import DataError
from .arrays import Arrays
from .members import Listing, Source
from .split import check_fraction, check_seed, stratified_split

EXTENSIONS = {".png", ".jpg", ".jpeg", ".webp", ".bmp"}
FORMATS = ["PNG", "JPEG", "WEBP", "BMP"]
MAX_CLASSES = 256  # labels are uint8
SIZES = range(8, 257)
COLORS = ("auto", "rgb", "grey")
EXAMPLES = 8
MAX_PIXEL_BYTES = 1 << 30  # all images at the chosen size, as RGB (CIFAR-10 at 32x32: 154 MB)


def _classes(listing: Listing) -> tuple[dict, list]:
    """``({class name: [Member]}, refused)``: the members grouped by class folder (empty
    folders too), after stepping into a single common top folder. Top-level files and
    non-images are refused."""
    members, folders = listing.members, listing.folders
    while members and all("/" in m.name for m in members):
        tops = {m.name.split("/", 1)[0] for m in members} | {f.split("/", 1)[0] for f in folders}
        if len(tops) != 1 or all(m.name.count("/") == 1 for m in members):
            break
        top = tops.pop() + "/"
        members = [type(m)(m.name[len(top):], m.size, m.key) for m in members]
        folders = {f[len(top):] for f in folders if f.startswith(top)}
    groups = {f.split("/", 1)[0]: [] for f in folders if f}
    refused = list(listing.refused)
    for m in members:
        if "/" not in m.name:
            refused.append({"member": m.name, "reason": "at the top level, not in a class "
                                                        "folder"})
        elif Path(m.name).suffix.lower() not in EXTENSIONS:
            refused.append({"member": m.name, "reason": "not an image (PNG, JPEG, WebP or "
                                                        "BMP by its name)"})
        else:
            groups.setdefault(m.name.split("/", 1)[0], []).append(m)
    folded = {}
    for name in groups:
        problem = hidden_character(name)
        if problem:  # the page and the summaries would show another name than the folder's
            raise DataError(f"class folder {name!r}: the name has {problem}: rename the "
                            "folder")
        key = unicodedata.normalize("NFC", name).casefold()
        if key in folded:
            shown = f"{folded[key]!r} and {name!r}"
            if unicodedata.normalize("NFC", folded[key]) == unicodedata.normalize("NFC", name):
                shown += f" ({ascii(folded[key])} and {ascii(name)})"
            raise DataError(f"class folders {shown} differ only by case or Unicode "
                            "normalisation: rename one")
        folded[key] = name
    return dict(sorted((unicodedata.normalize("NFC", k), v) for k, v in groups.items())), refused


def scan(path) -> dict:
    """The page's preview of a folder or .zip, without decoding pixels: ``{"classes": [{"name",
    "count", "examples": [first 8 member names]}], "refused": [{"member", "reason"}], "ignored":
    hidden/system files, "images": total, "problems": [what would stop preparing]}``.
    DataError for a source refused as a whole (bad names, zip bomb, symlink member, ...)."""
    with Source(Path(path)) as src:
        listing = src.listing()
    groups, refused = _classes(listing)
    classes = [{"name": n, "count": len(ms), "examples": [m.name for m in ms[:EXAMPLES]]}
               for n, ms in groups.items()]
    return {"classes": classes, "refused": refused, "ignored": listing.ignored,
            "images": sum(c["count"] for c in classes), "problems": _problems(groups),
            "notes": _ignored_note(listing.ignored)}


def detect(path) -> bool:
    """Whether ``path`` is a source of this kind (``datasets.SOURCES``; names only): a .zip
    file, or a folder with an image file (by its extension) in a subfolder, at most 3 levels
    down (symbolic links not followed)."""
    path = Path(path)
    if path.is_file():
        return path.suffix.lower() == ".zip"
    todo = [(path, 0)] if path.is_dir() else []
    while todo:
        folder, depth = todo.pop()
        for entry in folder.iterdir():
            if entry.is_symlink() or entry.name.startswith("."):
                continue
            if entry.is_dir() and depth < 3:
                todo.append((entry, depth + 1))
            elif depth > 0 and entry.suffix.lower() in EXTENSIONS:
                return True
    return False


def read(path, log=print, **options) -> Arrays:
    """``read_images(path, **options)`` (default 32x32, colour auto, 20% test, seed 0), its
    notes through ``log`` (``datasets.SOURCES``)."""
    arrays = read_images(path, **options)
    for note in arrays.notes:
        log(f"note: {note}")
    return arrays


def _problems(groups: dict) -> list:
    """Why ``groups`` cannot become a dataset: too few or too many classes, a class with
    fewer than 2 images."""
    out = []
    if len(groups) < 2:
        names = ", ".join(repr(n) for n in groups) or "none"
        out.append(f"{len(groups)} class folder{'s' * (len(groups) != 1)} ({names}): a "
                   "classifier needs at least 2, one subfolder per class")
    if len(groups) > MAX_CLASSES:
        out.append(f"{len(groups)} class folders: at most {MAX_CLASSES} (labels are one byte)")
    for name, ms in groups.items():
        if len(ms) < 2:
            out.append(f"class folder {name!r} holds {len(ms)} image{'s' * (len(ms) != 1)}: "
                       "each class needs at least 2 (one for the test split)")
    return out


def check_size(size) -> int:
    """``size`` (pixels per side) when it is in ``SIZES``, else DataError saying the range;
    the one rule for the CLI's ``--size`` and the upload route's ``size=``."""
    if isinstance(size, str) and size.isdigit() and len(size) <= 4:
        size = int(size)
    if not isinstance(size, int) or isinstance(size, bool) or size not in SIZES:
        text = size if isinstance(size, str) else repr(size)
        shown = repr(text[:20]) if isinstance(size, str) else text[:20]
        shown += "..." if len(text) > 20 else ""  # cut, never a broken quote
        raise DataError(f"size {shown}: use a whole number of pixels from {SIZES[0]} to "
                        f"{SIZES[-1]} (28 for digits, 32 for CIFAR-like photos)")
    return size


def _decode(data: bytes, name: str, size: int) -> tuple[np.ndarray, str, list]:
    """``(pixels, original "WxH mode", Pillow's warnings)``: ``data`` decoded, upright, grey or
    RGB, center-cropped and resized to ``size`` (uint8 [size, size] or [size, size, 3]).
    DataError ("bomb") for more pixels than ``Image.MAX_IMAGE_PIXELS``; ValueError for
    anything that does not decode. Warnings (e.g. corrupt EXIF data) are returned, never
    printed."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # checked below
        try:
            im = Image.open(io.BytesIO(data), formats=FORMATS)
        except Image.DecompressionBombError as exc:  # over twice the limit
            raise DataError(f"{name!r}: refused as a decompression bomb ({exc})") from None
        except Image.UnidentifiedImageError:
            raise ValueError("is not a PNG, JPEG, WebP or BMP image") from None
        except Exception as exc:  # Pillow's parsers raise many types on bad data
            raise ValueError(f"does not decode ({type(exc).__name__}: {str(exc)[:80]})"
                             ) from None
        w, h = im.size
        if Image.MAX_IMAGE_PIXELS and w * h > Image.MAX_IMAGE_PIXELS:
            raise DataError(f"{name!r}: {w}x{h} = {w * h:,} pixels, more than Pillow's limit "
                            f"of {Image.MAX_IMAGE_PIXELS:,}: refused as a decompression bomb")
        try:
            shown = f"{w}x{h} {im.mode}"
            im.draft(None, (2 * size, 2 * size))  # JPEG: decode at 1/2..1/8 scale, >= 2x size
            im.load()
            im = ImageOps.exif_transpose(im)
            im = _grey_or_rgb(im)
            side = min(im.size)
            left, top = (im.size[0] - side) // 2, (im.size[1] - side) // 2
            im = im.crop((left, top, left + side, top + side))
            im = im.resize((size, size), Image.Resampling.BICUBIC)
        except DataError:
            raise
        except Exception as exc:  # a truncated or corrupt stream: any decoder error
            raise ValueError(f"does not decode ({type(exc).__name__}: {str(exc)[:80]})"
                             ) from None
    said = list(dict.fromkeys(" ".join(str(w.message).split())[:100] for w in caught))
    return np.asarray(im, dtype=np.uint8), shown, said


def _grey_or_rgb(im: Image.Image) -> Image.Image:
    """``im`` as ``L`` when its mode is grey, else ``RGB``; transparency onto white."""
    if im.mode == "P":
        im = im.convert("RGBA" if "transparency" in im.info else "RGB")
    if im.mode in ("I", "I;16", "I;16B", "I;16L", "F"):  # 16-bit grey: 0..65535 -> 0..255
        scale = 1.0 if im.mode == "F" else 257.0
        px = np.clip(np.rint(np.asarray(im, dtype=np.float64) / scale), 0, 255)
        return Image.fromarray(px.astype(np.uint8), "L")
    if im.mode in ("1", "L"):
        return im.convert("L")
    if im.mode in ("LA", "La", "PA", "RGBA", "RGBa"):
        grey = im.mode in ("LA", "La")
        im = im.convert("RGBA")
        white = Image.new("RGBA", im.size, (255, 255, 255, 255))
        im = Image.alpha_composite(white, im).convert("RGB")
        return im.convert("L") if grey else im
    return im.convert("RGB")


def read_images(path, *, size: int = 32, color: str = "auto", test: float = 0.2,
                seed: int = 0, strict: bool = False) -> Arrays:
    """A folder or .zip of class folders as ``Arrays`` (uint8 [N, C, size, size]); see the
    module docstring. ``color`` "auto" | "rgb" | "grey"; ``test`` the test fraction (per class,
    at least 1); ``seed`` the split's seed; ``strict``: refuse an image that does not decode
    instead of skipping it."""
    if color not in COLORS:
        raise DataError(f"color {str(color)[:20]!r}: use one of {', '.join(COLORS)}")
    size = check_size(size)
    frac = check_fraction(test)
    check_seed(seed)
    path = Path(path)
    with Source(path) as src:
        listing = src.listing()
        groups, refused = _classes(listing)
        problems = _problems(groups)
        if problems:
            raise DataError(f"{path.name}: " + "; ".join(problems[:3]))
        count = sum(len(ms) for ms in groups.values())
        if count * size * size * 3 > MAX_PIXEL_BYTES:
            raise DataError(f"{path.name}: {count:,} images at {size}x{size} would take "
                            f"{count * size * size * 3:,} bytes, more than {MAX_PIXEL_BYTES:,}: "
                            "choose a smaller size")
        pixels, labels, skipped, shapes, warned = [], [], [], {}, []
        for k, members in enumerate(groups.values()):
            for m in members:
                try:
                    px, shown, said = _decode(src.read(m), m.name, size)
                except ValueError as exc:
                    if strict:
                        raise DataError(f"{m.name!r} {exc}") from None
                    skipped.append(f"{m.name} {exc}")
                    continue
                pixels.append(px)
                labels.append(k)
                shapes[shown] = shapes.get(shown, 0) + 1
                warned += [f"{m.name}: {w}" for w in said]
    notes = _ignored_note(listing.ignored) + _notes(shapes, skipped, refused, size)
    if warned:
        notes.append(f"Pillow warned about {len(warned)} image{'s' * (len(warned) != 1)} "
                     "(kept): " + "; ".join(warned[:3]) + ("; ..." if len(warned) > 3 else ""))
    labels = np.asarray(labels, dtype=np.int64)
    classes = list(groups)
    after = _problems({c: [0] * int((labels == k).sum()) for k, c in enumerate(classes)})
    if after:  # skipped images left a class too small
        raise DataError(f"{path.name}: after skipping {len(skipped)} image(s) that do not "
                        "decode: " + "; ".join(after[:3]))
    rgb = color == "rgb" or (color == "auto" and any(_coloured(p) for p in pixels))
    x, converted = _stack(pixels, rgb)
    if converted:
        notes.append(f"{converted} {'grey' if rgb else 'RGB'} image{'s' * (converted != 1)} "
                     f"converted to {'RGB' if rgb else 'grey'}")
    tr, te = stratified_split(labels, classes, frac, seed)
    src_line = (f"{path.name} ({len(labels)} images in {len(classes)} class folders, "
                f"{size}x{size} {'RGB' if rgb else 'grey'})")
    return Arrays(x[tr], labels[tr], x[te], labels[te], classes, path.stem or path.name,
                  src_line, notes)


def _coloured(px: np.ndarray) -> bool:
    """Whether RGB pixels ``px`` have colour (some R, G, B differ); grey arrays have none."""
    return px.ndim == 3 and bool((px[..., 0] != px[..., 1]).any()
                                 or (px[..., 1] != px[..., 2]).any())


def _stack(pixels: list, rgb: bool) -> tuple[np.ndarray, int]:
    """``(uint8 [N, C, H, W], how many images changed mode)``: grey repeated into 3 channels
    or RGB through Pillow's ``convert("L")``."""
    out, converted = [], 0
    for px in pixels:
        if rgb and px.ndim == 2:
            px, converted = np.repeat(px[None], 3, axis=0), converted + 1
        elif rgb:
            px = px.transpose(2, 0, 1)
        elif px.ndim == 3:
            px = np.asarray(Image.fromarray(px, "RGB").convert("L"))[None]
            converted += 1
        else:
            px = px[None]
        out.append(px)
    return np.ascontiguousarray(np.stack(out)), converted


def _ignored_note(ignored: int) -> list:
    """The note on the hidden and system files skipped (``members.is_hidden``), or none."""
    return [f"{ignored:,} hidden or system file{'s' * (ignored != 1)} skipped (__MACOSX/, "
            "names starting with '.', Thumbs.db, desktop.ini)"] if ignored else []


def _notes(shapes: dict, skipped: list, refused: list, size: int) -> list:
    """The notes a user sees: skipped and refused files, resized images (the hidden and
    system files skipped: ``_ignored_note``)."""
    notes = []
    if skipped:
        shown = "; ".join(skipped[:3]) + ("; ..." if len(skipped) > 3 else "")
        notes.append(f"{len(skipped)} file{'s' * (len(skipped) != 1)} skipped: {shown}")
    if refused:
        shown = "; ".join(f"{r['member']} ({r['reason']})" for r in refused[:3])
        notes.append(f"{len(refused)} file{'s' * (len(refused) != 1)} not used: {shown}"
                     + ("; ..." if len(refused) > 3 else ""))
    sizes = {s.split()[0] for s in shapes}
    resized = sum(n for s, n in shapes.items() if s.split()[0] != f"{size}x{size}")
    if resized:
        notes.append(f"{resized} image{'s' * (resized != 1)} of {len(sizes)} size"
                     f"{'s' * (len(sizes) != 1)} center-cropped to a square and resized to "
                     f"{size}x{size}")
    return notes
