"""A CSV table -> ``Arrays`` of float32 features ``[N, F]`` and uint8 labels, for MLPs.

The file: UTF-8 (a BOM is skipped), comma-separated (``;`` or tab when the first line holds
no comma), blank lines skipped. The first line is a header when some column has a non-number
there and a number on the next line. The label column: ``label`` (a header name, or a column
index counting from 0, negative from the end); by default the column named ``label``,
``class`` or ``target`` (any case), else the last. Every other column is a numeric feature.
Labels may be integers (classes in numeric order, named by their digits) or strings (classes
= the sorted unique names). After a seeded stratified split, each feature is standardised
with the TRAINING split's mean and population std (ddof 0, float64, stored as float32); a
feature constant in the training split (std 0) is kept and divided by 1 (said in ``notes``).
A value beyond float32's range, or one whose standardised value exceeds ``MAX_STANDARDISED``
in magnitude (e.g. ``1e38`` in a column of ones: float32 training would overflow), is refused.

Errors are ``DataError`` naming the line (1-based, as an editor counts, the header included)
and the column (1-based, with its header name): a non-number feature, a missing label, NaN or
infinity, a value out of range (above), a row with another number of columns, an empty
file, a single class, more than ``MAX_SAMPLE_DIM`` feature columns.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import numpy as np

from ..datafiles import DataError
from .arrays import MAX_SAMPLE_DIM, Arrays
from .split import check_fraction, check_seed, stratified_split

MAX_BYTES = 512 << 20
MAX_CLASSES = 256
LABEL_NAMES = ("label", "class", "target")
MAX_STANDARDISED = 1e6
"""The largest magnitude of a standardised feature value: a value this many standard deviations
from the training split's mean is a typo or a unit error, and its squares overflow float32."""
_F32_MAX = float(np.finfo(np.float32).max)
_NUMBER = re.compile(r"[ \t]*[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?[ \t]*\Z")
_NUMBER_CHARS = str.maketrans("", "", "0123456789+-.eE \t\n")  # deletes them
_NON_FINITE = re.compile(r"[ \t]*[-+]?(?:nan|inf|infinity)[ \t]*\Z", re.IGNORECASE)
_INT = re.compile(r"[ \t]*[-+]?[0-9]+[ \t]*\Z")


def _rows(path: Path) -> list:
    """``[(line number, [cells])]`` of the non-blank lines; DataError for an empty file, bad
    UTF-8 (its byte offset) or a line csv cannot split."""
    raw = path.read_bytes()
    if len(raw) > MAX_BYTES:
        raise DataError(f"{path.name}: {len(raw):,} bytes, more than {MAX_BYTES:,}")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path.name}: not UTF-8 text (byte offset {exc.start:,})") from None
    first = text.split("\n", 1)[0]
    delim = "," if "," in first else ";" if ";" in first else "\t" if "\t" in first else ","
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delim)
    rows, start = [], 1
    try:
        for cells in reader:
            if len(cells) > 1 or (cells and cells[0].strip()):
                rows.append((start, cells))  # the line a record starts on
            start = reader.line_num + 1
    except csv.Error as exc:
        raise DataError(f"{path.name}, line {reader.line_num}: {exc}") from None
    if not rows:
        raise DataError(f"{path.name}: the file is empty (no rows)")
    return rows


def detect(path) -> bool:
    """Whether ``path`` is a source of this kind (``datasets.SOURCES``): a ``.csv`` file."""
    return Path(path).is_file() and Path(path).suffix.lower() == ".csv"


def read(path, log=print, **options) -> Arrays:
    """``read_table(path, **options)`` (default: the label column found by name, else the
    last; 20% test, seed 0), its notes through ``log``."""
    arrays = read_table(path, **options)
    for note in arrays.notes:
        log(f"note: {note}")
    return arrays


def _label_column(label, header: list | None, width: int, name: str) -> int:
    """The label column's index from ``label`` (a header name or an index), or the default."""
    if label is None:
        names = [h.strip().lower() for h in header] if header else []
        found = [i for i, h in enumerate(names) if h in LABEL_NAMES]
        return found[0] if found else width - 1
    if isinstance(label, int) or (isinstance(label, str) and _INT.match(label)):
        i = int(label)
        if not -width <= i < width:
            raise DataError(f"{name}: label column index {i} is outside the {width} columns "
                            "(indexes count from 0)")
        return i % width
    if header is None or label not in [h.strip() for h in header]:
        shown = ", ".join(repr(h.strip()) for h in header[:8]) if header else "no header line"
        raise DataError(f"{name}: no column named {str(label)[:40]!r} (columns: {shown})")
    return [h.strip() for h in header].index(label)


def read_table(path, *, label=None, test: float = 0.2, seed: int = 0) -> Arrays:
    """A CSV file as ``Arrays`` (see the module docstring): ``label`` names the label column
    (header name or index from 0), ``test`` the test fraction, ``seed`` the split's seed."""
    path = Path(path)
    frac = check_fraction(test)
    check_seed(seed)
    rows = _rows(path)
    width = len(rows[0][1])
    header = None
    if len(rows) > 1 and any(not _NUMBER.match(a) and len(rows[1][1]) > i
                             and _NUMBER.match(rows[1][1][i]) for i, a in enumerate(rows[0][1])):
        header, rows = rows[0][1], rows[1:]
    elif len(rows) == 1 and not all(_NUMBER.match(c) for c in rows[0][1]):
        raise DataError(f"{path.name}: only a header line, no data rows")
    if width < 2:
        raise DataError(f"{path.name}: {width} column: a table needs a label column and at "
                        "least one feature column")
    if width - 1 > MAX_SAMPLE_DIM:  # before: written, then refused as the manifest was read
        raise DataError(f"{path.name}: {width:,} columns, {width - 1:,} features besides the "
                        f"label; at most {MAX_SAMPLE_DIM:,} features (a sample's dimension "
                        "limit): drop columns")
    col = _label_column(label, header, width, path.name)
    names = [h.strip() for h in header] if header else [f"column {i + 1}" for i in range(width)]

    def where(line: int, i: int) -> str:
        shown = f" {names[i]!r}" if header else ""
        return f"{path.name}, line {line}, column {i + 1}{shown}"

    def hint(i: int, r: int) -> str:  # words in a feature column from its first row on:
        if label is not None or r or (header and names[col].lower() in LABEL_NAMES):
            return ""                     # maybe the labels, not the default last column
        there = f"column {i + 1}" + (f" {names[i]!r}" if header else "")
        by = names[i] if header and names[i] and " " not in names[i] else i
        return (f"; the label column is the last ({col + 1}"
                + (f" {names[col]!r}" if header else "") + f") by default: if {there} holds "
                f"the labels, give --label {by}")

    feats = [i for i in range(width) if i != col]
    raw_labels = []
    for line, cells in rows:
        if len(cells) != width:
            raise DataError(f"{path.name}, line {line}: {len(cells)} columns, the "
                            f"{'header' if header else 'first row'} has {width}")
        if not cells[col].strip():
            raise DataError(f"{where(line, col)}: missing label")
        raw_labels.append(cells[col].strip())
    x = _features(rows, feats, where, hint)
    classes, y = _classes(raw_labels, path.name)
    tr, te = stratified_split(y, classes, frac, seed)
    mean, std = x[tr].mean(axis=0), x[tr].std(axis=0)
    constant = [names[feats[j]] for j in np.flatnonzero(std == 0)]
    std = np.where(std == 0, 1.0, std)
    z = (x - mean) / std
    _check_range(x, z, rows, feats, where)
    x = z.astype(np.float32)
    notes = [f"{len(feats)} feature{'s' * (len(feats) != 1)} standardised with the training "
             f"split's mean and std; label column {col + 1} ({names[col]!r})"]
    if constant:
        notes.append(f"{len(constant)} feature{'s' * (len(constant) != 1)} constant in the "
                     f"training split (std 0: kept, centred, divided by 1): "
                     + ", ".join(repr(c) for c in constant[:5])
                     + (", ..." if len(constant) > 5 else ""))
    source = (f"{path.name} ({_count(len(rows), 'row')}, {_count(len(feats), 'feature')}, "
              f"{len(classes)} classes)")
    return Arrays(np.ascontiguousarray(x[tr]), y[tr], np.ascontiguousarray(x[te]), y[te],
                  classes, path.stem or path.name, source, notes)


def _count(n: int, what: str) -> str:
    """``"1 feature"``, ``"4 features"``."""
    return f"{n} {what}{'s' * (n != 1)}"


def _features(rows: list, feats: list, where, hint=lambda i, r: "") -> np.ndarray:
    """The feature columns ``feats`` of ``rows`` as float64 ``[N, F]``. Fast path: a column
    whose cells use only digits, signs, ``.``, ``e``/``E``, spaces and tabs is converted by
    numpy; when any column fails that or numpy, every cell is checked in file order so the
    error names the first bad one (``where(line, column)``): not a number, or NaN / infinity
    (also after overflow); ``hint(column, row)`` is appended to a "not a number" error."""
    x = np.empty((len(rows), len(feats)), dtype=np.float64)
    cols = list(zip(*(cells for _, cells in rows)))
    try:
        for j, i in enumerate(feats):
            joined = "\n".join(cols[i])
            if joined.translate(_NUMBER_CHARS) or joined.count("\n") != len(rows) - 1:
                raise ValueError(i)
            x[:, j] = np.array(cols[i], dtype=np.float64)
        if np.isfinite(x).all():
            return x
    except ValueError:
        pass
    for r, (line, cells) in enumerate(rows):
        for j, i in enumerate(feats):
            cell = cells[i]
            if _NON_FINITE.match(cell) or (_NUMBER.match(cell) and not np.isfinite(float(cell))):
                raise DataError(f"{where(line, i)}: {cell.strip()[:40]!r} is not a finite number")
            if not _NUMBER.match(cell):
                raise DataError(f"{where(line, i)}: {cell.strip()[:40]!r} is not a number"
                                + hint(i, r))
            x[r, j] = float(cell)
    return x


def _check_range(x: np.ndarray, z: np.ndarray, rows: list, feats: list, where) -> None:
    """DataError naming the first value (in file order) of ``x`` beyond float32's range, or
    whose standardised value in ``z`` exceeds ``MAX_STANDARDISED`` in magnitude."""
    bad = (np.abs(x) > _F32_MAX) | ~(np.abs(z) <= MAX_STANDARDISED)
    if not bad.any():
        return
    r, j = (int(v) for v in np.argwhere(bad)[0])
    line, cells = rows[r]
    cell = f"{where(line, feats[j])}: {cells[feats[j]].strip()[:40]!r}"
    if abs(x[r, j]) > _F32_MAX:
        raise DataError(f"{cell} is beyond float32's range (magnitude at most {_F32_MAX:.4g})")
    raise DataError(f"{cell} standardises to {z[r, j]:.3g} ((value - mean) / std of the "
                    f"training split); at most {MAX_STANDARDISED:g} in magnitude is accepted "
                    "(float32 training would overflow): fix the value or remove the row")


def _classes(raw: list, name: str) -> tuple[list, np.ndarray]:
    """``(class names, labels int64)``: integer labels in numeric order, else sorted names."""
    if all(_INT.match(v) for v in raw):
        values = sorted({int(v) for v in raw})
        classes = [str(v) for v in values]
        index = {v: k for k, v in enumerate(values)}
        y = np.array([index[int(v)] for v in raw], dtype=np.int64)
    else:
        classes = sorted(set(raw))
        index = {v: k for k, v in enumerate(classes)}
        y = np.array([index[v] for v in raw], dtype=np.int64)
    if len(classes) < 2:
        raise DataError(f"{name}: every row has the label {classes[0][:40]!r}: a classifier "
                        "needs at least 2 classes")
    if len(classes) > MAX_CLASSES:
        raise DataError(f"{name}: {len(classes)} classes, at most {MAX_CLASSES} (labels are "
                        "one byte)")
    return classes, y
