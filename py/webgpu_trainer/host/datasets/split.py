"""The seeded stratified train / test split shared by the image-folder and table readers."""

from __future__ import annotations

import numpy as np

from ..datafiles import DataError


def check_fraction(test) -> float:
    """``test`` as a float in (0, 0.9]; DataError naming the value otherwise."""
    try:
        frac = float(test)
    except (TypeError, ValueError):
        raise DataError(f"test fraction {str(test)[:40]!r} is not a number") from None
    if not 0.0 < frac <= 0.9:
        raise DataError(f"test fraction {frac!r}: use a number above 0 and at most 0.9")
    return frac


SEED_MAX = 2 ** 32 - 1  # as ``train --seed``


def check_seed(seed) -> int:
    """``seed`` as an int in 0..2^32-1; DataError naming the value otherwise."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX:
        raise DataError(f"seed {str(seed)[:40]}: use a whole number from 0 to {SEED_MAX:,}")
    return seed


def stratified_split(labels: np.ndarray, classes: list, test: float,
                     seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(train_idx, test_idx)`` into ``labels`` (ints 0..K-1): per class, ``test * n`` rounded
    half up (at least 1, at most n - 1) go to the test split, chosen by a permutation from
    ``np.random.default_rng(seed)``; then each split is shuffled by the same generator, so the
    validation hold-out (the last training samples) mixes the classes. The same labels and seed
    give the same split. DataError naming the class when one has fewer than 2 samples."""
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    train, held = [], []
    for k, name in enumerate(classes):
        idx = np.flatnonzero(labels == k)
        if len(idx) < 2:
            raise DataError(f"class {name!r} has {len(idx)} sample{'s' * (len(idx) != 1)}; "
                            "each class needs at least 2 (one for the test split)")
        n_test = min(max(1, int(test * len(idx) + 0.5)), len(idx) - 1)
        idx = idx[rng.permutation(len(idx))]
        held.append(idx[:n_test])
        train.append(idx[n_test:])
    train_idx, test_idx = np.concatenate(train), np.concatenate(held)
    return train_idx[rng.permutation(len(train_idx))], test_idx[rng.permutation(len(test_idx))]
