"""A CSV table (issue 18): label column, numeric features standardised with the training split's
mean/std (against numpy float64), a seeded stratified split, and every bad file with its exact
error (line and column named)."""

from __future__ import annotations

import numpy as np
import pytest

from webgpu_trainer.host.datafiles import DataError
from webgpu_trainer.host.datasets.table import read_table


def _csv(tmp_path, text: str, name: str = "t.csv"):
    path = tmp_path / name
    path.write_bytes(text.encode())
    return path


def _iris_like(rng, n_per=10):
    rows, feats, labels = ["sepal,petal,species,width"], [], []
    for k, name in enumerate(["versicolor", "setosa", "virginica"]):
        for _ in range(n_per):
            f = rng.normal(k, 1.0, 3).round(3)
            rows.append(f"{f[0]},{f[1]},{name},{f[2]}")
            feats.append(f)
            labels.append(name)
    return "\n".join(rows) + "\n", np.array(feats), labels


def test_standardised_with_training_stats_vs_numpy_float64(tmp_path):
    text, feats, labels = _iris_like(np.random.default_rng(0))
    a = read_table(_csv(tmp_path, text), label="species", test=0.2, seed=5)
    assert a.classes == ["setosa", "versicolor", "virginica"]
    assert a.train_x.dtype == np.float32 and a.train_x.shape == (24, 3)
    assert np.bincount(a.test_y).tolist() == [2, 2, 2]
    assert np.bincount(a.train_y).tolist() == [8, 8, 8]
    # which raw rows went to training: the standardisation is increasing per column, so the
    # ranks of column 0 over both splits are the ranks of the raw values (all distinct)
    assert len(set(feats[:, 0])) == len(feats)
    both = np.concatenate([a.train_x, a.test_x]).astype(np.float64)
    raw_sorted = np.argsort(feats[:, 0])
    rank = np.empty(len(both), np.int64)
    rank[np.argsort(both[:, 0])] = np.arange(len(both))
    rows = raw_sorted[rank]  # raw row of each standardised sample
    train = rows[:len(a.train_x)]
    mean, std = feats[train].mean(axis=0), feats[train].std(axis=0)  # numpy float64, ddof 0
    expect = ((feats[rows] - mean) / std).astype(np.float32)
    np.testing.assert_array_equal(both.astype(np.float32), expect)
    assert [a.classes[y] for y in a.train_y] == [labels[i] for i in train]
    # training features have mean 0 and std 1 (float64 of the float32 values)
    np.testing.assert_allclose(a.train_x.astype(np.float64).mean(axis=0), 0, atol=1e-6)
    np.testing.assert_allclose(a.train_x.astype(np.float64).std(axis=0), 1, atol=1e-6)
    # the same seed gives the same split; another seed another one
    b = read_table(_csv(tmp_path, text), label="species", test=0.2, seed=5)
    assert np.array_equal(a.train_x, b.train_x) and np.array_equal(a.test_y, b.test_y)
    c = read_table(_csv(tmp_path, text), label="species", test=0.2, seed=6)
    assert not np.array_equal(a.test_x, c.test_x)


def test_constant_column_kept_and_said(tmp_path):
    text = "a,b,label\n" + "".join(f"{i},7,{i % 2}\n" for i in range(10))
    a = read_table(_csv(tmp_path, text))
    assert a.classes == ["0", "1"]
    assert a.notes[1] == ("1 feature constant in the training split (std 0: kept, centred, "
                          "divided by 1): 'b'")
    assert np.all(a.train_x[:, 1] == 0) and np.all(a.test_x[:, 1] == 0)


@pytest.mark.parametrize("text,message", [
    ("", "t.csv: the file is empty (no rows)"),
    ("a,b,label\n", "t.csv: only a header line, no data rows"),
    ("a,b,label\n1,2,x\n3,oops,y\n", "t.csv, line 3, column 2 'b': 'oops' is not a number"),
    ("a,b,label\n1,2,x\n3,4,\n", "t.csv, line 3, column 3 'label': missing label"),
    ("a,b,label\n1,2,x\n3,4\n", "t.csv, line 3: 2 columns, the header has 3"),
    ("a,b,label\n1,2,x\n3,nan,y\n", "t.csv, line 3, column 2 'b': 'nan' is not a finite number"),
    ("a,b,label\n1,2,x\n-inf,2,y\n", "t.csv, line 3, column 1 'a': '-inf' is not a finite "
                                     "number"),
    ("a,b,label\n1,2,x\n1e999,2,y\n", "t.csv, line 3, column 1 'a': '1e999' is not a finite "
                                      "number"),
    ("a,b,label\n1,2,x\n3,4,x\n", "t.csv: every row has the label 'x': a classifier needs at "
                                  "least 2 classes"),
    ("1,2,x\n3,4,y\n5,z,x\n", "t.csv, line 3, column 2: 'z' is not a number"),
    # the first bad cell in file order, though column 'a' fails too (later)
    ("a,b,label\n1,2,x\n3,bad,y\nbad2,4,x\n", "t.csv, line 3, column 2 'b': 'bad' is not a "
                                              "number"),
    ('a,b,label\n1,2,x\n"3\n4",5,y\n', "t.csv, line 3, column 1 'a': '3\\n4' is not a "
                                       "number"),
    ("a,b,label\n\n1,2,x\n\n3,4,y\n5,6\n", "t.csv, line 6: 2 columns, the header has 3"),
])
def test_bad_csv_exact_error(tmp_path, text, message):
    with pytest.raises(DataError) as e:
        read_table(_csv(tmp_path, text))
    assert str(e.value) == message


def test_label_by_index_and_default_names(tmp_path):
    text = "target,f1,f2\n" + "".join(f"{'ab'[i % 2]},{i},{i * i}\n" for i in range(8))
    a = read_table(_csv(tmp_path, text))  # the column named "target"
    assert a.classes == ["a", "b"] and a.train_x.shape[1] == 2
    b = read_table(_csv(tmp_path, text), label=0)
    assert np.array_equal(a.train_x, b.train_x)
    with pytest.raises(DataError) as e:
        read_table(_csv(tmp_path, text), label="kind")
    assert str(e.value) == "t.csv: no column named 'kind' (columns: 'target', 'f1', 'f2')"
    with pytest.raises(DataError) as e:
        read_table(_csv(tmp_path, text), label=5)
    assert str(e.value) == "t.csv: label column index 5 is outside the 3 columns (indexes " \
                           "count from 0)"



def _with_test_outlier(tmp_path, value: str):
    """20 rows (a, b, label) with ``value`` in column a of the first row of the test split
    (seed 0, 20%): ``(path, its 1-based line (the header is line 1), the training split)``."""
    from webgpu_trainer.host.datasets.split import stratified_split
    tr, te = stratified_split(np.array([i % 2 for i in range(20)]), ["0", "1"], 0.2, 0)
    t = int(min(te))
    rows = [f"{value if i == t else i % 5},{i % 3},{i % 2}" for i in range(20)]
    return _csv(tmp_path, "a,b,label\n" + "\n".join(rows) + "\n"), t + 2, tr


@pytest.mark.parametrize("value,why", [
    ("1e38", "standardises to {z} ((value - mean) / std of the training split); at most 1e+06 "
             "in magnitude is accepted (float32 training would overflow): fix the value or "
             "remove the row"),
    ("-1e39", "is beyond float32's range (magnitude at most 3.403e+38)")])
def test_value_out_of_float32_training_range_refused(tmp_path, value, why):
    from webgpu_trainer.host.datasets import prepare_source
    path, line, tr = _with_test_outlier(tmp_path, value)
    train_a = np.array([i % 5 for i in range(20)], dtype=np.float64)[tr]  # numpy's reference
    why = why.format(z=f"{(1e38 - train_a.mean()) / train_a.std():.3g}")
    with pytest.raises(DataError) as e:
        prepare_source(path, tmp_path / "root", "t", lambda _m: None)
    assert str(e.value) == f"t.csv, line {line}, column 1 'a': {value!r} {why}"
    assert not (tmp_path / "root" / "t").exists()  # nothing written
    ok = read_table(_csv(tmp_path, path.read_text().replace(value, "0"), "ok.csv"))
    assert ok.train_x.shape == (16, 2) and np.isfinite(ok.test_x).all()
