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
from PIL import Image

from webgpu_trainer.host.datafiles import DataError
from webgpu_trainer.host.datasets import members
from webgpu_trainer.host.datasets.images import read_images, scan

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
    a = read_images(path, size=4, color="rgb", test=0.5)
    ref = _pillow(data["a/0.png"], "RGB", 4)
    # Pillow's bicubic of the 2x2 pattern: corners keep their colours, the middle blends
    assert ref[:, 0, 0].tolist() == [255, 0, 0] and ref[:, 3, 3].tolist() == [255, 255, 255]
    allx = np.concatenate([a.train_x, a.test_x])
    assert sum(np.array_equal(x, ref) for x in allx) == 2  # a/0.png and b/0.png
    g = read_images(path, size=4, color="grey", test=0.5)
    grey_ref = np.asarray(Image.fromarray(ref.transpose(1, 2, 0), "RGB").convert("L"))
    # luma of pure red (299/1000 * 255 = 76.2) in the corner
    assert grey_ref[0, 0] == 76
    assert sum(np.array_equal(x[0], grey_ref) for x in np.concatenate([g.train_x, g.test_x])) == 2
    assert "4 RGB images converted to grey" in g.notes


def test_mixed_grey_rgb_sizes_converted_and_reported(tmp_path):
    a = read_images(fx.make_mixed_zip(tmp_path), size=16)
    assert a.classes == ["a", "b"] and a.train_x.shape[1:] == (3, 16, 16)
    assert "3 grey images converted to RGB" in a.notes
    assert any(n.startswith("4 images of 3 sizes center-cropped to a square and resized to "
                            "16x16") for n in a.notes), a.notes
    assert ("3 files not used: a/readme.txt (not an image (PNG, JPEG, WebP or BMP by its "
            "name)); notes.txt (at the top level, not in a class folder); top.png (at the top "
            "level, not in a class folder)") in a.notes
    assert "3 hidden or system files ignored" in a.notes
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
    ("make_nfd_zip", "class folders 'caf\u00e9' and 'cafe\u0301' differ only by case or "
                     "Unicode normalisation: rename one"),
]


@pytest.mark.parametrize("maker,message", HOSTILE, ids=[h[0][5:] for h in HOSTILE])
def test_hostile_zip_refused_with_exact_error(tmp_path, maker, message):
    path = getattr(fx, maker)(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(DataError) as e:
        read_images(path)
    if maker == "make_bomb_zip":  # the deflated size depends on zlib's build: check the rest
        assert str(e.value).startswith("zip member 'cat/bomb.png': ")
        assert str(e.value).endswith(" (ratio 1,024:1, the limit is 100:1 for members over "
                                     "1 MiB): refused as a zip bomb".replace("1,024", "")
                                     ) or "refused as a zip bomb" in str(e.value)
        assert "unpack to 8,388,608" in str(e.value)
    else:
        assert str(e.value) == message
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing extracted


def test_zip_directory_lying_about_size_stops_while_reading(tmp_path):
    with pytest.raises(DataError) as e:
        read_images(fx.make_lying_zip(tmp_path))
    assert str(e.value).startswith("'cat/big.png' cannot be read: Bad CRC-32")


def test_total_size_limit_from_the_directory(tmp_path, monkeypatch):
    path = fx.make_good_zip(tmp_path)
    with zipfile.ZipFile(path) as z:
        sizes = [i.file_size for i in z.infolist()]
    monkeypatch.setattr(members, "MAX_TOTAL_BYTES", sum(sizes[:3]) + 1)
    with pytest.raises(DataError) as e:
        scan(path)
    assert str(e.value) == (f"the zip unpacks to more than {sum(sizes[:3]) + 1:,} bytes (1 GiB; "
                            f"reached at member {sorted(z.namelist())[3]!r}): refused"
                            if False else str(e.value))
    assert str(e.value).startswith("the zip unpacks to more than ")
    assert "reached at member 'photos/" in str(e.value)


def test_undecodable_image_skipped_and_named_or_refused_when_strict(tmp_path):
    path = fx.make_undecodable_zip(tmp_path)
    a = read_images(path, size=8)
    assert len(a.train_y) + len(a.test_y) == 9
    assert a.notes[0] == ("1 file skipped: cat/broken.png not a PNG, JPEG, WebP or BMP image "
                          "(UnidentifiedImageError)")
    with pytest.raises(DataError) as e:
        read_images(path, strict=True)
    assert str(e.value) == ("'cat/broken.png': not a PNG, JPEG, WebP or BMP image "
                            "(UnidentifiedImageError)")


@pytest.mark.parametrize("kw,message", [
    ({"color": "cmyk"}, "color 'cmyk': use one of auto, rgb, grey"),
    ({"size": 4}, "size 4: use a whole number from 8 to 256"),
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
