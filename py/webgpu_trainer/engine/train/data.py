"""The data side of a run (standard library only): the MNIST splits as the engines take them
(``Split``), the held-out validation images (``holdout``), the pixel -> input table, and the
checks of a model and a config against the data before any GPU work.

Validation images are the last ``val_images`` of the training split (``holdout``): training
uses the images before them, so the per-epoch validation numbers come from images the model
never trained on, and the test split is kept for the final number.
"""

from .. import config as run_config
from ..graph import Graph

MNIST_MEAN, MNIST_STD = 0.1307, 0.3081  # ((x / 255) - mean) / std, as the PyTorch MNIST example


class Split:
    """One MNIST split on its way to the GPU: ``images`` [count, 784] uint8 and ``labels``
    [count] uint8, each bytes-like or (in the browser) a JS ArrayBuffer; ``labels_host`` the
    labels as Python bytes (for evaluation on the host)."""

    def __init__(self, images, labels, count: int, labels_host: bytes, pixels: int = 784):
        self.images, self.labels, self.count = images, labels, count
        self.labels_host, self.pixels = labels_host, pixels

    def part(self, lo: int, hi: int) -> "Split":
        """Images lo..hi-1 as a Split (a copy; JS ArrayBuffers through ``slice``)."""
        def cut(data, size):
            return data.slice(lo * size, hi * size) if hasattr(data, "byteLength") \
                else data[lo * size:hi * size]
        return Split(cut(self.images, self.pixels), cut(self.labels, 1), hi - lo,
                     self.labels_host[lo:hi], self.pixels)


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


def check_fits(graph: Graph, train: Split, test: Split) -> None:
    """Refuse a model whose input or output does not fit the data, and data with a label
    outside the model's classes (before any GPU work).

    Raises ValueError naming the input/output, its shape and what MNIST provides, or the
    split, index and value of the first bad label."""
    inp = graph.input
    per_sample = 1
    for d in inp["shape"][1:]:
        per_sample *= d if isinstance(d, int) else 0
    if per_sample != train.pixels:
        raise ValueError(
            f"model input {inp['name']!r} has shape {inp['shape']} ({per_sample or '?'} "
            f"values per sample) but MNIST images are 1x28x28 = {train.pixels}: "
            "use a model with input [N, 1, 28, 28] or [N, 784]")
    out = graph.shapes(2)[graph.output]
    if len(out) != 2 or out[1] < 10:
        raise ValueError(f"model output {graph.output!r} has shape {out}: training on "
                         "MNIST needs [N, C] scores with C >= 10 classes")
    check_split_labels(train, out[1], "training")
    check_split_labels(test, out[1], "test")


def pixel_table() -> list:
    """The model input of each pixel value 0..255: ((v / 255) - mean) / std in float64, which
    every engine rounds once to float32 (so they see the same inputs)."""
    return [(v / 255 - MNIST_MEAN) / MNIST_STD for v in range(256)]


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
