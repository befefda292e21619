"""Data augmentation of the training batches (standard library only): which of the config's
``augment_crop`` / ``augment_flip`` apply to a run, checked against the model and the data.

Both engines augment the same way, from the same Philox numbers: shaders/augment.wgsl on the
GPU (a dispatch after the batch gather, recorded only when augmentation is on), cpu/augment.py
on numpy. Evaluation, validation and the probe never augment.
"""


def resolve(cfg, graph, kind: str = "image") -> tuple[int, bool] | None:
    """``(pad, flip)`` of a run, or None when it does not augment (both off, or ``kind``
    "table": tables are not images). ``cfg`` the trainer's config, ``graph`` the ``Graph``.
    Raises ValueError naming the model input when augmentation is asked of a model that does
    not take images [N, C, H, W]."""
    pad, flip = int(cfg.get("augment_crop") or 0), bool(cfg.get("augment_flip"))
    if not (pad or flip) or kind == "table":
        return None
    inp = graph.input
    if len(inp["shape"]) != 4:
        asked = " and ".join(name for name, on in (("augment_crop", pad), ("augment_flip", flip))
                             if on)
        shape = "[" + ", ".join(str(d) for d in inp["shape"]) + "]"
        raise ValueError(f"{asked} need images: model input {inp['name']!r} has shape "
                         f"{shape}, not [N, C, H, W]; turn augmentation off for this model")
    return pad, flip
