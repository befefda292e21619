"""``Arrays``: a dataset as every source reader returns it (docs/ARCHITECTURE.md, "Datasets").

Images are uint8 ``[N, C, H, W]`` (C 1 or 3, row-major); tables are float32 ``[N, F]``
(already standardised with the training split's mean and std); tokens int32 or uint16
``[N, T]`` ids below ``vocab_size``. Labels are integers ``[N]`` in
``0..K-1`` where ``K = len(classes)``. The fields up to ``notes`` are the shared contract;
``name`` and ``idx_md5`` are optional. ``store.write_dataset`` checks all of this before it
writes anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

MAX_SAMPLE_DIM = 65536
"""The largest size of one dimension of a sample (a table's features, an image's side): what a
manifest may declare (``store.check_manifest``); a CSV with more feature columns is refused as
it is read (``table.read_table``)."""


@dataclass
class Arrays:
    """The two splits of a dataset, its class names and where it came from."""

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    classes: list[str]
    title: str
    source: str
    notes: list[str] = field(default_factory=list)
    #: the name a known dataset gets by default ("mnist", "cifar10" ...); "" for the user's own
    name: str = ""
    #: {(split, "images" | "labels"): md5 of the original IDX file}, recorded in the manifest
    #: (MNIST's cache check compares them with the originals')
    idx_md5: dict = field(default_factory=dict)

    #: tokens only: ids are 0..vocab_size-1 (int32 or uint16 samples [N, T])
    vocab_size: int = 0

    @property
    def kind(self) -> str:
        """"image" (uint8 samples), "table" (float32 feature rows) or "tokens" (int32 or
        uint16 token ids [N, T])."""
        if self.train_x.dtype in (np.int32, np.uint16):
            return "tokens"
        return "table" if self.train_x.dtype == np.float32 else "image"

    def split(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """``(x, y)`` of the split ``name`` ("train" or "test")."""
        return (self.train_x, self.train_y) if name == "train" else (self.test_x, self.test_y)
