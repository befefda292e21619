"""What every op card shares: reading a node's attributes with its card's defaults, and the
window attributes (kernel, pads, strides, dilations, ``auto_pad``) of Conv and the pools.

A card's ``ATTRS`` maps each ONNX op_type of the family (those the engine runs, ``TYPES``, and
those only the importer maps) to ``{attribute: default}`` in the order the importer fills
them. A default is a value, or a callable ``f(node, opset, shapes) -> value | None`` (None: no
default) for the rank- or opset-dependent ones; ``node`` is the bundle node being built (its
``attrs`` so far), ``shapes(name)`` an input's shape (list, or None when unknown).
"""


def read(node, attrs: dict) -> dict:
    """The node's attributes over its card's constant defaults (``attrs``: the card's ATTRS).
    The importer fills every default into the bundle; this also serves hand-written bundles
    (the op cases) and is the attribute reader of the numpy twins."""
    spec = attrs.get(node["op_type"], {})
    out = {k: v for k, v in spec.items() if not callable(v)}
    out.update(node.get("attrs") or {})
    return out


def fill(spec: dict, node, opset: int, shapes) -> None:
    """Fill the defaults of ``spec`` (one op's ATTRS) missing from ``node["attrs"]``, in order."""
    attrs = node["attrs"]
    for key, default in spec.items():
        if key in attrs:
            continue
        value = default(node, opset, shapes) if callable(default) else default
        if value is not None:
            attrs[key] = value


def _rank(node) -> int:
    return len(node["attrs"].get("kernel_shape", [0, 0]))


def window_attrs(dilations=True) -> dict:
    """pads / strides / dilations defaults of one spatial rank (that of ``kernel_shape``);
    ``dilations`` False: only from opset 19 (AveragePool)."""
    return {"pads": lambda node, opset, shapes: [0] * (2 * _rank(node)),
            "strides": lambda node, opset, shapes: [1] * _rank(node),
            "dilations": lambda node, opset, shapes: [1] * _rank(node)
            if dilations or opset >= 19 else None,
            "auto_pad": "NOTSET"}


def resolve_auto_pad(node, opset: int, shapes) -> list:
    """``auto_pad`` SAME_UPPER / SAME_LOWER / VALID made explicit ``pads`` (then NOTSET).
    Returns the problems (the input's spatial size is needed but unknown)."""
    attrs, name, op = node["attrs"], node["name"], node["op_type"]
    k = _rank(node)
    auto, problems = attrs.get("auto_pad", "NOTSET"), []
    if auto in ("SAME_UPPER", "SAME_LOWER", "VALID"):
        x = shapes(node["inputs"][0])
        if auto == "VALID":
            attrs["pads"] = [0] * (2 * k)
        elif x and len(x) == k + 2 and all(isinstance(d, int) for d in x[2:]):
            lo, hi = [], []
            for i in range(k):
                s, d = attrs["strides"][i], attrs.get("dilations", [1] * k)[i]
                size = x[2 + i]
                total = max((-(-size // s) - 1) * s + (attrs["kernel_shape"][i] - 1)
                            * d + 1 - size, 0)
                small, big = total // 2, total - total // 2
                lo.append(small if auto == "SAME_UPPER" else big)
                hi.append(big if auto == "SAME_UPPER" else small)
            attrs["pads"] = lo + hi
        else:
            problems.append(f"node {name} ({op}): auto_pad {auto} needs the "
                            "input's spatial size, which is unknown")
    attrs["auto_pad"] = "NOTSET"
    return problems


def lift_1d(node: dict) -> dict:
    """A 1-D Conv / pooling node (input [N, C, L]) as the 2-D node over [N, C, 1, L] that the
    2-D kernels run (a view: the buffers are the same, the shapes gain an H axis of 1): the
    window attributes get a leading H of kernel 1, stride 1, dilation 1 and no pads. A node
    of another rank is returned as it is."""
    a = dict(node.get("attrs") or {})
    for key in ("kernel_shape", "strides", "dilations"):
        if a.get(key) is not None and len(a[key]) == 1:
            a[key] = [1, *a[key]]
    if a.get("pads") is not None and len(a["pads"]) == 2:
        a["pads"] = [0, a["pads"][0], 0, a["pads"][1]]
    return {**node, "attrs": a}


def as_2d(shape) -> list:
    """The [N, C, 1, L] form of a 1-D window op's [N, C, L] tensor (other ranks unchanged)."""
    shape = list(shape)
    return shape[:2] + [1] + shape[2:] if len(shape) == 3 else shape
