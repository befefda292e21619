"""Data augmentation of the training batches (standard library only): which of the config's
``augment_crop`` / ``augment_flip`` apply to a run, checked against the model and the data.

Both engines augment the same way, from the same Philox numbers: shaders/augment.wgsl on the
GPU (a dispatch after the batch gather, recorded only when augmentation is on), cpu/augment.py
on numpy. Evaluation, validation and the probe never augment.
"""


def _dims(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def resolve(cfg, graph, spec) -> tuple[int, bool] | None:
    """``(pad, flip)`` of a run, or None when it does not augment (both off, or a table or
    tokens dataset: ``spec.kind`` not "image"). ``cfg`` the trainer's config, ``graph`` the
    ``Graph``, ``spec`` the dataset's ``DataSpec``. Raises ValueError naming the model input when
    augmentation is asked of a model that does not take the dataset's images as
    [N, C, H, W]."""
    pad, flip = int(cfg.get("augment_crop") or 0), bool(cfg.get("augment_flip"))
    if not (pad or flip) or spec.kind != "image":
        return None
    asked = " and ".join(name for name, on in (("augment_crop", pad), ("augment_flip", flip))
                         if on)
    inp = graph.input
    if len(inp["shape"]) != 4:
        raise ValueError(f"{asked} need images: model input {inp['name']!r} has shape "
                         f"{_dims(inp['shape'])}, not [N, C, H, W]; turn augmentation off "
                         "for this model")
    image = list(spec.sample_shape) if len(spec.sample_shape) == 3 else [1, *spec.sample_shape]
    if list(inp["shape"][1:]) != image:
        raise ValueError(f"{asked} need the dataset's images as they are: model input "
                         f"{inp['name']!r} {_dims(inp['shape'])} reshapes {spec.name}'s "
                         f"{spec.describe()}; use a model with input {_dims(['N', *image])}")
    return pad, flip
