"""Own photos (issue 18): a folder or .zip of class folders -> Arrays, the preview ``scan``, and
every hostile fixture of scripts/make_hostile_images.py with its exact error."""

from __future__ import annotations

import importlib.util
import io
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageOps

from webgpu_trainer.host.datafiles import DataError
from webgpu_trainer.host.datasets import images, members
from webgpu_trainer.host.datasets.images import check_size, read_images, scan

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("make_hostile_images",
                                               REPO / "scripts" / "make_hostile_images.py")
fx = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fx)


def _pillow(data: bytes, mode: str, size: int) -> np.ndarray:
    """The reference: Pillow alone, center crop + bicubic resize, as the docstring says."""
    im = Image.open(io.BytesIO(data)).convert(mode)
    side = min(im.size)
    left, top = (im.size[0] - side) // 2, (im.size[1] - side) // 2
    im = im.crop((left, top, left + side, top + side)).resize((size, size),
                                                              Image.Resampling.BICUBIC)
    px = np.asarray(im)
    return px[None] if px.ndim == 2 else px.transpose(2, 0, 1)


def test_good_zip_values_match_pillow_and_split_is_stratified(tmp_path):
    path = fx.make_good_zip(tmp_path)
    a = read_images(path, size=8, color="auto", test=0.4, seed=3)
    assert a.classes == ["cat", "dog", "fox"] and a.title == "good"
    assert a.train_x.shape == (9, 3, 8, 8) and a.test_x.shape == (6, 3, 8, 8)
    assert a.train_x.dtype == np.uint8
    # 5 per class, round(0.4 * 5) = 2 test images each
    assert np.bincount(a.test_y).tolist() == [2, 2, 2]
    assert np.bincount(a.train_y).tolist() == [3, 3, 3]
    # every sample is one of the originals, decoded and resized by Pillow independently
    with zipfile.ZipFile(path) as z:
        refs = {(n.split("/")[1], i): _pillow(z.read(n), "RGB", 8)
                for i, n in enumerate(sorted(z.namelist()))}
    found = 0
    for x, y in [*zip(a.train_x, a.train_y), *zip(a.test_x, a.test_y)]:
        match = [k for k, r in refs.items() if np.array_equal(r, x)]
        assert len(match) == 1 and match[0][0] == a.classes[y]
        found += 1
    assert found == 15
    # the same seed gives the same split, another seed another one
    b = read_images(path, size=8, test=0.4, seed=3)
    assert np.array_equal(a.test_x, b.test_x) and np.array_equal(a.train_y, b.train_y)
    c = read_images(path, size=8, test=0.4, seed=4)
    assert not np.array_equal(a.test_x, c.test_x)


def test_known_2x2_pattern_upscaled_and_grey(tmp_path):
    px = np.array([[[255, 0, 0], [0, 255, 0]], [[0, 0, 255], [255, 255, 255]]], np.uint8)
    data = {f"{c}/{i}.png": fx.image_bytes(np.roll(px, i, axis=1)) for c in "ab" for i in
            range(2)}
    path = fx.write_zip(tmp_path / "p.zip", data)
    a = read_images(path, size=8, color="rgb", test=0.5)
    ref = _pillow(data["a/0.png"], "RGB", 8)
    # Pillow's bicubic of the 2x2 pattern: corners keep their colours, the middle blends
    assert ref[:, 0, 0].tolist() == [255, 0, 0] and ref[:, 7, 7].tolist() == [255, 255, 255]
    assert ref[0, 0].tolist() == [255, 255, 255, 175, 80, 0, 0, 0]  # red along the top row
    allx = np.concatenate([a.train_x, a.test_x])
    assert sum(np.array_equal(x, ref) for x in allx) == 2  # a/0.png and b/0.png
    g = read_images(path, size=8, color="grey", test=0.5)
    grey_ref = np.asarray(Image.fromarray(ref.transpose(1, 2, 0), "RGB").convert("L"))
    # luma of pure red (299/1000 * 255 = 76.2) in the corner
    assert grey_ref[0].tolist() == [76, 76, 89, 105, 121, 137, 150, 150]
    assert sum(np.array_equal(x[0], grey_ref) for x in np.concatenate([g.train_x, g.test_x])) == 2
    assert "4 RGB images converted to grey" in g.notes


def test_mixed_grey_rgb_sizes_converted_and_reported(tmp_path):
    a = read_images(fx.make_mixed_zip(tmp_path), size=16)
    assert a.classes == ["a", "b"] and a.train_x.shape[1:] == (3, 16, 16)
    assert "3 grey images converted to RGB" in a.notes
    assert "6 images of 3 sizes center-cropped to a square and resized to 16x16" in a.notes
    assert ("3 files not used: a/readme.txt (not an image (PNG, JPEG, WebP or BMP by its "
            "name)); notes.txt (at the top level, not in a class folder); top.png (at the top "
            "level, not in a class folder)") in a.notes
    # __MACOSX/a/._0.png, .DS_Store, a/.DS_Store: skipped, counted (before: silently)
    assert a.notes[0] == ("3 hidden or system files skipped (__MACOSX/, names starting with "
                          "'.', Thumbs.db, desktop.ini)")
    assert not any("DS_Store" in n for n in a.notes)
    assert len(a.notes) == 4
    # the RGBA image (random alpha) is composited onto white: never darker than its RGB
    g = read_images(fx.make_mixed_zip(tmp_path), size=16, color="grey")
    assert g.train_x.shape[1] == 1 and "3 RGB images converted to grey" in g.notes


def test_scan_preview(tmp_path):
    out = scan(fx.make_mixed_zip(tmp_path))
    assert out["classes"] == [
        {"name": "a", "count": 3, "examples": ["a/0.png", "a/1.png", "a/2.png"]},
        {"name": "b", "count": 3, "examples": ["b/0.png", "b/1.png", "b/2.bmp"]}]
    assert {r["member"] for r in out["refused"]} == {"a/readme.txt", "notes.txt", "top.png"}
    assert out["ignored"] == 3 and out["images"] == 6 and out["problems"] == []
    one = scan(fx.make_one_class_zip(tmp_path))
    assert one["problems"] == ["1 class folder ('cat'): a classifier needs at least 2, one "
                               "subfolder per class"]


def test_folder_source_and_symlinks_not_followed(tmp_path):
    src = tmp_path / "photos"
    for name, data in fx.good_members(("cat", "dog"), 3).items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_bytes(data)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.png").write_bytes(fx.image_bytes(np.zeros((4, 4), np.uint8)))
    os.symlink(outside, src / "linked")               # a folder symlink: not a class
    os.symlink(outside / "secret.png", src / "cat" / "s.png")
    a = read_images(src, size=8)
    assert a.classes == ["cat", "dog"] and len(a.train_y) + len(a.test_y) == 6
    out = scan(src)
    assert sorted(out["refused"], key=lambda r: r["member"]) == [
        {"member": "cat/s.png", "reason": "symbolic link: not followed"},
        {"member": "linked", "reason": "symbolic link: not followed"}]


HOSTILE = [
    ("make_traversal_zip", "zip member '../evil/x.png': names with '..' are refused"),
    ("make_absolute_zip", "zip member '/etc/x.png': absolute names are refused"),
    ("make_bomb_zip", "zip member 'cat/bomb.png': 8,190 bytes unpack to 8,388,608 (ratio "
                      "1,024:1, the limit is 100:1 for members over 1 MiB): refused as a zip "
                      "bomb"),
    ("make_symlink_zip", "zip member 'cat/link.png' is a symbolic link: refused (a zip of "
                         "images holds files only)"),
    ("make_empty_class_zip", "empty_class.zip: class folder 'empty' holds 0 images: each "
                             "class needs at least 2 (one for the test split)"),
    ("make_one_class_zip", "one_class.zip: 1 class folder ('cat'): a classifier needs at "
                           "least 2, one subfolder per class"),
    ("make_many_classes_zip", "many_classes.zip: 257 class folders: at most 256 (labels are "
                              "one byte)"),
    ("make_pixel_bomb_zip", "'dog/huge.png': 10000x10000 = 100,000,000 pixels, more than "
                            "Pillow's limit of 89,478,485: refused as a decompression bomb"),
    ("make_case_zip", "class folders 'Cat' and 'cat' differ only by case or Unicode "
                      "normalisation: rename one"),
    ("make_nfd_zip", "class folders 'cafe\u0301' and 'caf\u00e9' ('cafe\\u0301' and "
                     "'caf\\xe9') differ only by case or Unicode normalisation: rename one"),
]


@pytest.mark.parametrize("maker,message", HOSTILE, ids=[h[0][5:] for h in HOSTILE])
def test_hostile_zip_refused_with_exact_error(tmp_path, maker, message):
    path = getattr(fx, maker)(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(DataError) as e:
        read_images(path)
    if maker == "make_bomb_zip":  # the packed size depends on zlib's build: read it
        with zipfile.ZipFile(path) as z:
            packed = z.getinfo("cat/bomb.png").compress_size
        message = message.replace("8,190", f"{packed:,}").replace(
            "1,024:1", f"{(8 << 20) / packed:,.0f}:1")
    assert str(e.value) == message
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing extracted


def test_zip_directory_lying_about_size_stops_while_reading(tmp_path):
    with pytest.raises(DataError) as e:
        read_images(fx.make_lying_zip(tmp_path))
    assert str(e.value).startswith("'cat/big.png' cannot be read: Bad CRC-32")


def test_total_size_limit_from_the_directory(tmp_path, monkeypatch):
    path = fx.make_good_zip(tmp_path)
    with zipfile.ZipFile(path) as z:
        infos = z.infolist()
    limit = sum(i.file_size for i in infos[:3])  # the 4th member goes past it
    monkeypatch.setattr(members, "MAX_TOTAL_BYTES", limit)
    with pytest.raises(DataError) as e:
        scan(path)
    assert str(e.value) == (f"the zip unpacks to more than {limit:,} bytes (reached at member "
                            f"{infos[3].filename!r}): refused")


def test_undecodable_image_skipped_and_named_or_refused_when_strict(tmp_path):
    path = fx.make_undecodable_zip(tmp_path)
    a = read_images(path, size=8)
    assert len(a.train_y) + len(a.test_y) == 9
    assert a.notes[0] == ("2 files skipped: cat/broken.png does not decode (OSError: Truncated "
                          "File Read); dog/text.jpg is not a PNG, JPEG, WebP or BMP image")
    with pytest.raises(DataError) as e:
        read_images(path, strict=True)
    assert str(e.value) == "'cat/broken.png' does not decode (OSError: Truncated File Read)"


@pytest.mark.parametrize("kw,message", [
    ({"color": "cmyk"}, "color 'cmyk': use one of auto, rgb, grey"),
    ({"size": 4}, "size 4: use a whole number of pixels from 8 to 256 (28 for digits, 32 for "
                  "CIFAR-like photos)"),
    ({"test": 0}, "test fraction 0.0: use a number above 0 and at most 0.9"),
    ({"test": "x"}, "test fraction 'x' is not a number"),
])
def test_bad_options(tmp_path, kw, message):
    with pytest.raises(DataError) as e:
        read_images(fx.make_good_zip(tmp_path), **kw)
    assert str(e.value) == message


def test_not_a_zip(tmp_path):
    bad = tmp_path / "x.zip"
    bad.write_bytes(b"hello")
    with pytest.raises(DataError) as e:
        read_images(bad)
    assert str(e.value) == "x.zip: not a zip file or a folder (File is not a zip file)"


def test_exif_orientation_transparency_and_16_bit_grey(tmp_path):
    rng = np.random.default_rng(2)
    tall = rng.integers(0, 256, (16, 8, 3), dtype=np.uint8)
    buf = io.BytesIO()
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: rotate 90 degrees clockwise to display
    Image.fromarray(tall).save(buf, "PNG", exif=exif)
    clear = np.zeros((8, 8, 4), np.uint8)  # fully transparent black -> white
    deep = np.array([[0, 65535], [257, 514]], np.uint16)  # 16-bit grey -> 0, 255, 1, 2
    dbuf = io.BytesIO()
    Image.fromarray(deep).save(dbuf, "PNG")
    path = fx.write_zip(tmp_path / "modes.zip", {
        "a/rot.png": buf.getvalue(), "a/rot2.png": buf.getvalue(),
        "b/clear.png": fx.image_bytes(clear, mode="RGBA"), "b/deep.png": dbuf.getvalue()})
    a = read_images(path, size=8, color="rgb", test=0.5)
    allx = np.concatenate([a.train_x, a.test_x])
    ref = ImageOps.exif_transpose(Image.open(io.BytesIO(buf.getvalue())).convert("RGB"))
    assert ref.size == (16, 8)  # turned: now wide
    ref = np.asarray(ref.crop((4, 0, 12, 8))).transpose(2, 0, 1)  # center square, 8x8 already
    assert sum(np.array_equal(x, ref) for x in allx) == 2
    assert sum(bool((x == 255).all()) for x in allx) == 1  # the transparent image: white
    deep_ref = np.repeat(np.asarray(Image.fromarray(np.array([[0, 255], [1, 2]], np.uint8))
                                    .resize((8, 8), Image.Resampling.BICUBIC))[None], 3, 0)
    assert sum(np.array_equal(x, deep_ref) for x in allx) == 1


def test_pixel_bomb_over_twice_the_limit_and_encrypted_member(tmp_path):
    zf = fx.write_zip(tmp_path / "b.zip", {**fx.good_members(("cat", "dog"), 2),
                                           "dog/huge.png": fx.png_header_only(20000, 20000)})
    with pytest.raises(DataError) as e:
        read_images(zf)
    assert str(e.value) == ("'dog/huge.png': refused as a decompression bomb (Image size "
                            "(400000000 pixels) exceeds limit of 178956970 pixels, could be "
                            "decompression bomb DOS attack.)")
    with pytest.raises(DataError) as e:
        scan(fx.make_encrypted_zip(tmp_path))
    assert str(e.value) == "zip member 'cat/secret.png' is encrypted: refused"


def test_skipped_images_leave_a_class_too_small(tmp_path):
    members_ = {**fx.good_members(("cat", "dog"), 2), "dog/1.jpg": b"\xff\xd8\xff junk"}
    with pytest.raises(DataError) as e:
        read_images(fx.write_zip(tmp_path / "small.zip", members_), size=8)
    assert str(e.value) == ("small.zip: after skipping 1 image(s) that do not decode: class "
                            "folder 'dog' holds 1 image: each class needs at least 2 (one for "
                            "the test split)")


def test_cli_source_kinds_zip_folder_and_csv(tmp_path):
    from webgpu_trainer.host.datasets import prepare_source, table
    root, quiet = tmp_path / "root", (lambda *_: None)
    m, folder = prepare_source(fx.make_good_zip(tmp_path), root, log=quiet)
    assert (m["name"], m["kind"], m["sample_shape"]) == ("good", "image", [3, 32, 32])
    assert m["classes"] == ["cat", "dog", "fox"] and folder == root / "good"
    assert (m["splits"]["train"]["count"], m["splits"]["test"]["count"]) == (12, 3)
    src = tmp_path / "My Photos"
    for name, data in fx.good_members(("a", "b"), 2).items():
        (src / "set" / name).parent.mkdir(parents=True, exist_ok=True)
        (src / "set" / name).write_bytes(data)
    assert images.detect(src) and not images.detect(tmp_path / "root" / "good")
    assert prepare_source(src, root, log=quiet)[0]["name"] == "my-photos"
    csv = tmp_path / "Iris.csv"
    csv.write_text("a,b,label\n" + "".join(f"{i},{i % 3},{'xy'[i % 2]}\n" for i in range(8)))
    assert table.detect(csv) and not images.detect(csv)
    m, _ = prepare_source(csv, root, log=quiet)
    assert (m["name"], m["kind"], m["sample_shape"], m["mean"]) == ("iris", "table", [2], [])


def test_pixel_memory_bound_before_decoding(tmp_path, monkeypatch):
    monkeypatch.setattr(images, "MAX_PIXEL_BYTES", 15 * 64 * 64 * 3 - 1)
    with pytest.raises(DataError) as e:
        read_images(fx.make_good_zip(tmp_path), size=64)
    assert str(e.value) == ("good.zip: 15 images at 64x64 would take 184,320 bytes, more than "
                            "184,319: choose a smaller size")
    assert read_images(fx.make_good_zip(tmp_path), size=32).train_x.shape == (12, 3, 32, 32)


def test_entry_count_checked_before_the_directory_is_parsed(tmp_path, monkeypatch):
    monkeypatch.setattr(members, "MAX_MEMBERS", 14)
    parsed = []
    monkeypatch.setattr(zipfile.ZipFile, "_RealGetContents", lambda self: parsed.append(1))
    with pytest.raises(DataError) as e:
        scan(fx.make_good_zip(tmp_path))  # 15 members
    assert str(e.value) == "good.zip: 15 zip entries, more than 14: refused"
    assert parsed == []


@pytest.mark.parametrize("size, shown", [
    ("9" * 20, "'99999999999999999999'"), ("9" * 25, "'99999999999999999999'..."),
    ("1e308", "'1e308'"), (10 ** 30, "10000000000000000000..."), (300, "300")])
def test_size_refused_with_the_value_quoted_whole_or_cut(size, shown):
    """``size=99999999999999999999`` in the upload route once read ``size '9999999999999999999:``
    (the value cut inside its quotes)."""
    with pytest.raises(DataError) as exc:
        check_size(size)
    assert str(exc.value) == (f"size {shown}: use a whole number of pixels from 8 to 256 "
                              "(28 for digits, 32 for CIFAR-like photos)")
