"""The data side of a run (standard library only): what a dataset's samples are
(``DataSpec``, from its manifest), the splits as the engines take them (``Split``), the
held-out validation images (``holdout``), the value -> input table (``DataSpec.table``), and
the checks of a model and a config against the data before any GPU work.

Validation images are the last ``val_images`` of the training split (``holdout``): training
uses the images before them, so the per-epoch validation numbers come from images the model
never trained on, and the test split is kept for the final number.
"""

import math
import re

from .. import config as run_config
from ..config.schema import DATASET_NAME
from ..graph import Graph
from . import data_tokens

MNIST_MEAN, MNIST_STD = 0.1307, 0.3081  # ((x / 255) - mean) / std, as the PyTorch MNIST example

FORMAT, LEGACY_FORMAT = "webgpu-trainer/dataset@1", "webgpu-trainer/mnist@1"


def _field(m: dict, key: str, kind, what: str):
    """``m[key]`` checked to be a ``kind``; ValueError naming the field otherwise."""
    value = m.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"dataset manifest: {key} must be {what}, got {_short(value)}")
    return value


def _short(value) -> str:
    """``repr(value)`` cut to 60 characters (errors never echo a huge value)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class DataSpec:
    """What a dataset's samples are (from its ``manifest.json``, docs in DATASETS.md):
    ``name``, ``title`` (shown to users), ``kind`` ("image": uint8 [C, H, W] samples;
    "table": float32 [F]), ``sample_shape``, ``classes`` (K names, label i = classes[i]),
    ``mean`` / ``std`` (per channel, of x / 255; tables: empty), ``values`` (numbers per
    sample), ``dtype`` ("uint8" or "float32") and ``sample_bytes``."""

    def __init__(self, name: str, title: str, kind: str, sample_shape, classes, mean=(),
                 std=(), dtype=None, vocab_size=0):
        self.name, self.title, self.kind = name, title, kind
        self.sample_shape = [int(d) for d in sample_shape]
        self.classes, self.mean, self.std = list(classes), list(mean), list(std)
        self.values = math.prod(self.sample_shape)
        self.dtype = dtype or ("uint8" if kind == "image" else "float32")
        self.sample_bytes = self.values * data_tokens.ITEMSIZE.get(self.dtype, 4)
        self.vocab_size = vocab_size  # tokens: ids are 0..vocab_size-1 (data_tokens.py)

    @property
    def channels(self) -> int:
        """C of an image [C, H, W] (1 for a [H, W] shape); 0 for a table."""
        return (self.sample_shape[0] if len(self.sample_shape) == 3 else 1) \
            if self.kind == "image" else 0

    def describe(self) -> str:
        """How errors name the samples: "3x32x32 images", "12 features"."""
        if self.kind == "table":
            return f"{self.values} feature{'s' * (self.values != 1)}"
        if self.kind == "tokens":
            return f"{self.values} token ids of {self.vocab_size}"
        return "x".join(map(str, self.sample_shape)) + " images"

    def table(self) -> list | None:
        """The model input of each (channel, value) as C*256 floats, entry c*256 + v =
        ((v / 255) - mean[c]) / std[c] in float64, which every engine rounds once to float32
        (so they see the same inputs); None for a table dataset (features are copied)."""
        if self.kind != "image":
            return None
        return [(v / 255 - m) / s for m, s in zip(self.mean, self.std) for v in range(256)]

    @classmethod
    def from_manifest(cls, m: dict) -> "DataSpec":
        """The spec of a ``manifest.json`` dict: format ``webgpu-trainer/dataset@1``, or the
        old ``webgpu-trainer/mnist@1`` (MNIST, or "own" for ``"dataset": "own"``: 1x28x28,
        classes "0".."9", MNIST's mean and std). ValueError naming the field that is wrong."""
        if not isinstance(m, dict):
            raise ValueError(f"dataset manifest must be a JSON object, got {_short(m)}")
        fmt = m.get("format")
        if fmt == LEGACY_FORMAT:
            own = m.get("dataset") == "own"
            return cls("own" if own else "mnist", "your own digits" if own else "MNIST",
                       "image", [1, 28, 28], [str(i) for i in range(10)], [MNIST_MEAN],
                       [MNIST_STD])
        if fmt != FORMAT:
            raise ValueError(f"dataset manifest: format {_short(fmt)} is not {FORMAT!r} (or "
                             f"the older {LEGACY_FORMAT!r})")
        name = _field(m, "name", str, "a dataset name")
        if not re.fullmatch(DATASET_NAME, name):
            raise ValueError(f"dataset manifest: name {_short(name)} is not a dataset name "
                             f"({DATASET_NAME})")
        kind = m.get("kind")
        if kind not in ("image", "table", "tokens"):
            raise ValueError(f"dataset manifest: kind must be 'image', 'table' or 'tokens', "
                             f"got {_short(kind)}")
        shape = _field(m, "sample_shape", list, "a list of sizes")
        ranks = (2, 3) if kind == "image" else (1,)
        if len(shape) not in ranks or not all(isinstance(d, int) and not isinstance(d, bool)
                                              and d >= 1 for d in shape):
            want = "[C, H, W] (or [H, W])" if kind == "image" else "[F]"
            raise ValueError(f"dataset manifest: sample_shape {_short(shape)} is not {want} "
                             "with sizes >= 1")
        classes = _field(m, "classes", list, "a list of class names")
        if not 2 <= len(classes) <= 256 or not all(isinstance(c, str) for c in classes):
            raise ValueError(f"dataset manifest: classes must be 2 to 256 names, got "
                             f"{_short(classes)}")
        title = m.get("title") or m.get("dataset") or name
        if kind == "table":
            return cls(name, str(title), kind, shape, classes)
        if kind == "tokens":
            return cls(name, str(title), kind, shape, classes,
                       **data_tokens.spec_fields(m, _short))
        mean, std = _field(m, "mean", list, "a list"), _field(m, "std", list, "a list")
        c = shape[0] if len(shape) == 3 else 1
        for key, vals in (("mean", mean), ("std", std)):
            if len(vals) != c or not all(isinstance(v, (int, float)) and math.isfinite(v)
                                         for v in vals):
                raise ValueError(f"dataset manifest: {key} must be {c} numbers (one per "
                                 f"channel), got {_short(vals)}")
        if not all(s > 0 for s in std):
            raise ValueError(f"dataset manifest: std must be > 0, got {_short(std)}")
        return cls(name, str(title), kind, shape, classes, mean, std)


MNIST = DataSpec.from_manifest({"format": LEGACY_FORMAT})


class Split:
    """One split on its way to the GPU: ``images`` [count, values] (``spec.dtype``: uint8
    pixels or float32 features) and ``labels`` [count] uint8, each bytes-like or (in the
    browser) a JS ArrayBuffer; ``labels_host`` the labels as Python bytes (for evaluation on
    the host); ``spec`` the dataset's ``DataSpec`` (default MNIST)."""

    def __init__(self, images, labels, count: int, labels_host: bytes, spec: DataSpec = MNIST):
        self.images, self.labels, self.count = images, labels, count
        self.labels_host, self.spec = labels_host, spec
        self.values = spec.values

    def part(self, lo: int, hi: int) -> "Split":
        """Images lo..hi-1 as a Split (a copy; JS typed arrays: a view, ``subarray``)."""
        def cut(data, size):
            return cut_bytes(data, lo * size, hi * size)
        return Split(cut(self.images, self.spec.sample_bytes), cut(self.labels, 1), hi - lo,
                     self.labels_host[lo:hi], self.spec)


def cut_bytes(data, lo: int, hi: int):
    """Bytes lo..hi-1 of ``data``: bytes-like (a copy), a JS typed array (a view, through
    ``subarray``) or a JS ArrayBuffer (a copy, through ``slice``)."""
    if hasattr(data, "subarray"):
        return data.subarray(lo, hi)
    return data.slice(lo, hi) if hasattr(data, "byteLength") else data[lo:hi]


def chunks(count: int, sample_bytes: int, limit: int | None) -> list:
    """The sample ranges ``[(lo, hi)]`` of a split of ``count`` samples of ``sample_bytes``
    each, cut on sample boundaries into GPU buffers of at most ``limit`` bytes (rounded down
    to whole 4-byte words; None: one buffer): what ``GpuEngine`` uploads as one buffer each.
    ValueError when one sample is larger than ``limit``."""
    usable = None if limit is None else limit // 4 * 4
    per = count if usable is None else usable // sample_bytes
    if per < 1:
        raise ValueError(f"one sample is {sample_bytes:,} bytes, more than the largest data "
                         f"buffer this device binds ({usable:,} bytes)")
    return [(lo, min(lo + per, count)) for lo in range(0, max(count, 1), max(per, 1))]


def check_size(spec: DataSpec, counts: dict, limit: int | None, budget: int | None = None):
    """Refuse, before any download or GPU work, a dataset that cannot fit at all: one sample
    larger than ``limit`` (the bytes of one data buffer, ``GpuEngine.data_limit``; None: no
    limit), or samples and labels of the splits ``counts`` (name -> count) together more than
    ``budget`` bytes (None: unchecked). ValueError naming the dataset and the numbers."""
    try:
        chunks(1, spec.sample_bytes, limit)
    except ValueError as exc:
        raise ValueError(f"dataset {spec.name} ({spec.describe()}) cannot be uploaded: {exc}"
                         ) from None
    total = sum(n * (spec.sample_bytes + 1) for n in counts.values())
    if budget is not None and total > budget:
        parts = " + ".join(f"{n:,} {name}" for name, n in counts.items())
        raise ValueError(f"dataset {spec.name} is {total:,} bytes ({parts} samples of "
                         f"{spec.sample_bytes:,} bytes and a label byte each): more than the "
                         f"{budget:,} bytes this page can hold; use fewer samples")


def holdout(train: Split, cfg) -> tuple:
    """``(training images, validation images or None)`` of the training split ``train`` under
    the config ``cfg``: validation = its last ``val_images`` images (deterministic: the same
    for every seed; MNIST: training images 55,000..59,999), training = the first
    ``config.train_used`` images before them (``train_images`` > 0: that many)."""
    val = int(cfg.get("val_images") or 0)
    used = run_config.train_used(cfg, train.count)
    return train.part(0, used), (train.part(train.count - val, train.count) if val else None)


def check_split_labels(split: Split, classes: int, what: str) -> None:
    """Refuse a split holding a label outside 0..classes-1 (ValueError naming the split, the
    index and the value), before any GPU work: such a label must never reach a loss kernel."""
    labels = split.labels_host
    if not labels or max(labels) < classes:
        return
    i = next(i for i, v in enumerate(labels) if v >= classes)
    raise ValueError(f"{what} label {labels[i]} at index {i} is outside 0..{classes - 1} "
                     f"(the model has {classes} classes): prepare the data again with "
                     "`webgpu-trainer data --source DIR`, which refuses such labels")


def _dims(shape) -> str:
    """A shape as users read it: [N, 3, 32, 32]."""
    return "[" + ", ".join(str(d) for d in shape) + "]"


def check_fits(graph: Graph, spec: DataSpec, train: Split, test: Split) -> None:
    """``check_model_fits``, then refuse data with a label outside the model's classes
    (before any GPU work): ValueError naming the split, index and value of the first bad
    label."""
    k = check_model_fits(graph, spec)
    check_split_labels(train, k, "training")
    check_split_labels(test, k, "test")


def check_model_fits(graph: Graph, spec: DataSpec) -> int:
    """The model's classes K, after refusing a model whose input or output does not fit the
    dataset ``spec`` (no data needed: its manifest is enough). The input fits when its
    per-sample dims are the dataset's sample shape, the same values flat, a grey image
    without its channel dim, or each channel's pixels as one sequence (MNIST: [N, 1, 28, 28],
    [N, 784], [N, 28, 28] or [N, 1, 784], a 1-D conv net's input); the output
    must be [N, K] scores with K >= 2 and K >= the dataset's classes.

    Raises ValueError naming both shapes."""
    inp = graph.input
    dims = list(inp["shape"][1:])
    shape = spec.sample_shape
    fits = [shape, [spec.values]] + ([shape[1:]] if len(shape) == 3 and shape[0] == 1 else []) \
        + ([[shape[0], math.prod(shape[1:])]] if len(shape) == 3 else [])
    if dims not in fits:
        per_sample = math.prod(d if isinstance(d, int) else 0 for d in dims)
        want = " or ".join(dict.fromkeys(_dims(["N", *s]) for s in fits[:2]))
        raise ValueError(
            f"model input {inp['name']!r} {_dims(inp['shape'])} does not fit dataset "
            f"{spec.name} ({spec.describe()}): it takes {_dims(dims)} per sample "
            f"({per_sample or '?'} values), the dataset gives {_dims(shape)} "
            f"({spec.values} values); use a model with input {want}")
    data_tokens.check_tokens(graph, spec)
    out = graph.shapes(2)[graph.output]
    k = len(spec.classes)
    if len(out) != 2 or out[1] < max(2, k):
        raise ValueError(f"model output {graph.output!r} {_dims(['N', *out[1:]])} does not "
                         f"fit dataset {spec.name} ({k} classes): training needs [N, K] "
                         f"scores with K >= {max(2, k)}")
    return out[1]


def check_run(cfg: dict, graph: dict, manifest: dict):
    """A page run's checks in the order the user should hear them (the worker's ``load`` and
    ``POST /api/config/validate``): the model against the dataset first (``check_model_fits``:
    ValueError naming both shapes), then the config against the training split
    (``config.parse`` with its size and the model's classes: ConfigError, the batch size's
    limit among them). A model that cannot fit is never reported as a batch size problem.
    Returns ``(RunConfig, spec)``."""
    spec = DataSpec.from_manifest(manifest)
    classes = check_model_fits(Graph(graph), spec)
    cfg = run_config.parse(cfg, train_images=int(manifest["splits"]["train"]["count"]),
                           classes=classes)
    return cfg, spec


def trainable_names(graph: dict, names) -> set | None:
    """Validate a ``trainable`` config value: None (every parameter trains) or a list of
    initializer names of role "param" (the rest is frozen: no gradient, no update). Raises
    ValueError naming unknown names, buffers, or an empty list."""
    if names is None:
        return None
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"trainable must be a list of parameter names, got {names!r}")
    roles = {t["name"]: t["role"] for t in graph["tensors"]}
    unknown = sorted(n for n in names if n not in roles)
    if unknown:
        params = ", ".join(n for n, r in roles.items() if r == "param")
        raise ValueError(f"trainable: no parameter named {', '.join(map(repr, unknown))} in the "
                         f"model (parameters: {params})")
    buffers = sorted(n for n in names if roles[n] != "param")
    if buffers:
        raise ValueError(f"trainable: {', '.join(buffers)} are buffers (BatchNorm running "
                         "statistics), not parameters")
    if not names:
        raise ValueError("trainable is empty: nothing would train (freeze fewer parameters)")
    return set(names)
