"""Stand-in for ds-prep's ``Arrays`` (the contract's dataclass) until that branch is merged."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Arrays:
    """A dataset's splits: images uint8 [N, C, H, W] or features float32 [N, F], labels
    [N] in 0..K-1, with class names, a title, a source line and notes."""

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    classes: list
    title: str
    source: str
    notes: list = field(default_factory=list)
