"""Evaluation of a split in chunks, and where the validation points inside an epoch fall
(standard library only). ``loop.Trainer`` calls both."""

from array import array

from ..ops import losses

# Validation during an epoch (the page's "Train vs validation" chart; ``Trainer.val_points``):
# VAL_POINTS - 1 points evenly inside each epoch on the first images of the held-out set, then
# the whole set at the epoch's end. A point's images: a tenth of the epoch's training images
# (an eval forward costs about a third of a training step per image: three points add ~10%),
# at least VAL_MIN, at most VAL_SUBSET.
VAL_POINTS, VAL_SUBSET, VAL_MIN = 4, 512, 64


def validation_marks(epoch: int, per_epoch: int, total: int, held_out: int, batch: int,
                     points: int) -> dict:
    """``{step: images}``: the steps of epoch ``epoch`` (0-based; ``per_epoch`` steps each,
    ``total`` in the run) after which to validate on the first ``images`` of the ``held_out``
    images (``points`` - 1 of them); empty with ``points`` <= 1."""
    if points <= 1:
        return {}
    start = epoch * per_epoch
    n = min(total, start + per_epoch) - start
    images = min(VAL_SUBSET, held_out, max(VAL_MIN, n * batch // 10))
    return {start + k * n // points: images for k in range(1, points)
            if 0 < k * n // points < n}


async def evaluate(engine, split, what: str, classes: int, emit, limit: int | None = None,
                   skip=lambda: False):
    """Eval-mode forward over ``split`` (the engine's split ``what``: "test" or "validation")
    in chunks of the engine's ``eval_chunk`` images, emitting "evaluating" ``{done, total,
    what}`` before the first and after each chunk; ``limit``: its first images only;
    ``skip()`` true (asked before each chunk of "test" after the first): stop there.

    Returns ``(loss, accuracy, log-probabilities bytes [n, classes] float32)``: the loss is
    the configured loss with reduction "mean" (weighted mean with class weights) over the n
    images; the log-probabilities are the model's output when it ends in LogSoftmax, else
    log_softmax of it."""
    n, c, chunk = split.count, classes, engine.eval_chunk
    n = n if limit is None else min(n, limit)
    labels, spec = split.labels_host, engine.loss_spec
    num, den, hits, raws = 0.0, 0.0, 0, []
    emit("evaluating", done=0, total=n, what=what)
    for lo in range(0, n, chunk):
        if lo and what == "test" and skip():
            n = lo
            break
        hi = min(n, lo + chunk)
        raw, rows = await engine.eval_outputs(what, lo, hi)
        raws.append(raw)
        vals = array("f")
        vals.frombytes(raw)
        lvals = vals
        if rows is not raw:
            lvals = array("f")
            lvals.frombytes(rows)
        for i in range(hi - lo):
            row = vals[i * c:(i + 1) * c]
            label = labels[lo + i]
            a, d = losses.host_terms(spec, lvals[i * c:(i + 1) * c], label)
            num += a
            den += d
            hits += max(range(c), key=row.__getitem__) == label
        emit("evaluating", done=hi, total=n, what=what)
    return (num / den if den else 0.0), hits / max(n, 1), b"".join(raws)
