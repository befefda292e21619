"""Hostile dataset uploads refused or reported at upload (POST /api/datasets and its scan), each
with the exact input and the exact message, the dataset already there kept byte for byte: a
CSV wider than a sample's dimension limit (before: written, then listed as invalid), class
folders whose names hold a bidirectional override or a NUL (before: accepted, or a NUL cut the
name to another), hidden and system entries (skipped, and now counted in the notes), and the
user's file name (``file=``) in the summary and the messages instead of the temp file's."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from test_dataset_upload import _alive, _files, fx


MAX_SAMPLE_DIM = 65536  # a manifest's largest sample dimension (store.check_manifest)

_GOOD_CSV = ("a,b,label\n" + "".join(f"{i},{i % 3},{'xy'[i % 2]}\n"
                                     for i in range(20))).encode()


def _wide_csv(features: int, rows: int = 4) -> bytes:
    head = ",".join(f"f{i}" for i in range(features)) + ",label\n"
    return (head + "".join(",".join(str((r * 7 + i) % 5) for i in range(features))
                           + f",{r % 2}\n" for r in range(rows))).encode()


def _zip(members: dict, nul_in: str | None = None) -> bytes:
    """A zip of ``members``; ``nul_in``: a 4-character name part whose second character
    becomes NUL in the stored names (zipfile cannot write one: it cuts a name at a NUL)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    raw = buf.getvalue()
    if nul_in:
        raw = raw.replace(nul_in.encode(), (nul_in[0] + "\0" + nul_in[2:]).encode())
    return raw


def _keep_pets(c, root, tmp_path) -> dict:
    """Upload the good zip as "pets"; the data root's files after it."""
    good = fx.make_good_zip(tmp_path).read_bytes()
    assert c.post("/api/datasets?name=pets&size=8", content=good).status_code == 201
    return _files(root)


def test_csv_wider_than_a_sample_refused_at_upload(dataset_client, tmp_path):
    """100,000 feature columns: before, 201 and a dataset the server then listed as invalid
    (check_manifest's 65,536 per dimension); now 400 at the upload and the scan naming the
    file, the column count and the limit, nothing written. 65,536 features still go."""
    c, root, _ = dataset_client
    before = _keep_pets(c, root, tmp_path)
    wide = _wide_csv(100_000)
    want = ("wide.csv: 100,001 columns, 100,000 features besides the label; at most 65,536 "
            "features (a sample's dimension limit): drop columns")
    for route in ("/api/datasets?name=pets&file=wide.csv", "/api/datasets/scan?file=wide.csv"):
        r = c.post(route, content=wide)
        assert (r.status_code, r.json()) == (400, {"error": want}), route
    r = c.post("/api/datasets?name=wide", content=wide)  # no file name: "the upload"
    assert r.json() == {"error": want.replace("wide.csv", "the upload")}
    assert _files(root) == before
    listed = c.get("/api/datasets").json()
    assert [d["name"] for d in listed["datasets"]] == ["pets"]
    assert listed.get("problems", []) == []
    r = c.post("/api/datasets?name=edge&file=edge.csv", content=_wide_csv(MAX_SAMPLE_DIM))
    assert r.status_code == 201, r.text[:300]
    assert r.json()["dataset"]["sample_shape"] == [65536]
    listed = c.get("/api/datasets").json()  # read back: the manifest passes check_manifest
    assert [d["name"] for d in listed["datasets"]] == ["edge", "pets"]
    assert listed.get("problems", []) == []
    _alive(c)


RLO, RLI = "\u202e", "\u2067"
HOSTILE_CLASSES = [
    # before: 201, the class "c\u202eat" shown reversed in the page
    (f"c{RLO}at", None, "class folder 'c\\u202eat': the name has an invisible formatting "
                        "character (U+202E RIGHT-TO-LEFT OVERRIDE) that can make it show "
                        "differently from what was typed: rename the folder"),
    (f"d{RLI}og", None, "class folder 'd\\u2067og': the name has an invisible formatting "
                        "character (U+2067 RIGHT-TO-LEFT ISOLATE) that can make it show "
                        "differently from what was typed: rename the folder"),
    ("c\tat", None, "class folder 'c\\tat': the name has a control character (U+0009): "
                    "rename the folder"),
    # before: zipfile cut the names at the NUL: "zip member 'c' appears twice in the zip"
    ("cQat", "cQat", "zip member 'c\\x00at/0.png': the name holds a NUL character"),
]


@pytest.mark.parametrize("folder,nul,message", HOSTILE_CLASSES)
def test_class_folder_names_that_hide_refused(dataset_client, tmp_path, folder, nul, message):
    c, root, _ = dataset_client
    before = _keep_pets(c, root, tmp_path)
    members = {k.replace("cat", folder) if k.startswith("cat/") else k: v
               for k, v in fx.good_members(per=2).items()}
    body = _zip(members, nul)
    for route in ("/api/datasets?name=pets&size=8", "/api/datasets/scan"):
        r = c.post(route, content=body)
        assert (r.status_code, r.json()) == (400, {"error": message}), route
    assert _files(root) == before
    _alive(c)


def test_hidden_entries_skipped_and_counted(dataset_client, tmp_path):
    """__MACOSX/, .DS_Store, a dot-file in a class folder and a dot-folder: skipped (no class,
    no image of them) and counted in the scan's and the upload's notes (before: silently)."""
    c, root, _ = dataset_client
    good = fx.good_members(per=2)
    hidden = {"__MACOSX/cat/._0.png": b"x", ".DS_Store": b"x", "cat/.thumb.png": b"x",
              ".git/HEAD": b"x", "dog/Thumbs.db": b"x"}
    body = _zip({**good, **hidden})
    note = ("5 hidden or system files skipped (__MACOSX/, names starting with '.', Thumbs.db, "
            "desktop.ini)")
    scan = c.post("/api/datasets/scan", content=body).json()
    assert scan["notes"] == [note] and scan["ignored"] == 5 and scan["images"] == len(good)
    assert [k["name"] for k in scan["classes"]] == ["cat", "dog", "fox"]
    r = c.post("/api/datasets?name=pets&size=8&file=pets.zip", content=body)
    assert r.status_code == 201, r.text
    out = r.json()
    assert out["notes"][0] == note
    assert out["dataset"]["train"] + out["dataset"]["test"] == len(good)
    assert out["source"] == "pets.zip (6 images in 3 class folders, 8x8 RGB)"
    plain = c.post("/api/datasets/scan", content=_zip(good)).json()
    assert plain["notes"] == [] and plain["ignored"] == 0


def test_summary_and_messages_name_the_users_file(dataset_client, tmp_path):
    """The summary's source and every message name the user's file (``file=``; a path keeps its
    last part), never the temp file ``.upload-...``; a file name with a bidirectional override
    is not shown (the upload goes on under the default label)."""
    c, root, _ = dataset_client
    r = c.post("/api/datasets?name=tab&file=my%20data.csv", content=_GOOD_CSV)
    assert r.status_code == 201, r.text
    assert r.json()["source"] == "my data.csv (20 rows, 2 features, 2 classes)"
    manifest = json.loads((root / "tab" / "manifest.json").read_text())
    assert manifest["source"] == "my data.csv (20 rows, 2 features, 2 classes)"
    before = _files(root)
    bad = b"a,b,label\n1,2,x\n3,oops,y\n"
    for route in ("/api/datasets?name=tab&file=C%3A%5Cdata%5Cmy.csv", "/api/datasets/scan?"
                  "file=C%3A%5Cdata%5Cmy.csv"):
        r = c.post(route, content=bad)
        assert (r.status_code, r.json()) == (
            400, {"error": "my.csv, line 3, column 2 'b': 'oops' is not a number"}), route
    r = c.post("/api/datasets/scan?file=cut.zip", content=_zip(fx.good_members())[:300])
    assert (r.status_code, r.json()) == (400, {"error": "cut.zip: not a zip file or a folder "
                                                        "(File is not a zip file)"})
    assert _files(root) == before
    for p in root.rglob("*"):
        assert ".upload-" not in p.name
    # a file name with a bidirectional override is only a label: not shown, the upload goes on
    r = c.post("/api/datasets?name=tab2&file=gpj.%E2%80%AEcsv", content=_GOOD_CSV)
    assert r.status_code == 201, r.text
    assert r.json()["source"] == "upload.csv (20 rows, 2 features, 2 classes)"
    _alive(c)


def test_csv_label_names_that_hide_refused(dataset_client, tmp_path):
    """A CSV's label values are its class names: one with a bidirectional override (U+202E) is
    refused at upload like a class folder's (before: 201, the class shown reversed), the
    dataset already there kept byte for byte; the same labels without it still go."""
    c, root, _ = dataset_client
    before = _keep_pets(c, root, tmp_path)
    body = _GOOD_CSV.replace(b",x\n", f",x{RLO}y\n".encode())
    r = c.post("/api/datasets?name=pets&file=rlo.csv", content=body)
    assert (r.status_code, r.json()) == (400, {"error": (
        "class 0 'x\\u202ey': the name has an invisible formatting character (U+202E "
        "RIGHT-TO-LEFT OVERRIDE) that can make it show differently from what was typed; "
        "rename it")}), r.text[:300]
    assert _files(root) == before
    r = c.post("/api/datasets?name=plain&file=plain.csv", content=_GOOD_CSV)
    assert r.status_code == 201, r.text[:300]
    _alive(c)
