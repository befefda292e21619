"""The page's layer list ("Build a network", issue 19 item 6): checked, with every layer's
output shape, parameters and multiply-adds for one sample. Standard library only.

A spec is a JSON list of layers, each an object ``{"op": OP, ...}`` with torch's keyword names:

======================  =====================================================================
op                      fields (default)
======================  =====================================================================
``conv``                ``out_channels``, ``kernel_size`` (3), ``stride`` (1), ``padding`` (0)
                        -- nn.Conv2d on [C, H, W]
``maxpool``/``avgpool``  ``kernel_size`` (2), ``stride`` (= kernel_size) -- nn.MaxPool2d /
                        nn.AvgPool2d
``global_avgpool``      -- nn.AdaptiveAvgPool2d(1): [C, H, W] -> [C, 1, 1]
``flatten``             -- nn.Flatten: [C, H, W] -> [C*H*W]
``linear``              ``out_features`` (a number, or ``"classes"``: the dataset's class count)
                        -- nn.Linear on [F]
``batchnorm``           -- nn.BatchNorm2d on [C, H, W], nn.BatchNorm1d on [F]
``dropout``             ``p`` (0.5) -- nn.Dropout
``relu`` ``gelu`` ``tanh`` ``sigmoid`` ``elu``; ``leaky_relu`` with ``negative_slope`` (0.01)
``residual``            ``layers``: a list of layers (no residual inside); y = x + layers(x),
                        which must keep x's shape
======================  =====================================================================

``check(spec, input_shape, classes) -> Checked``: ``rows`` (one per layer, residual bodies
included, ``index`` "3" or "3.1"), ``errors`` ([{"layer", "field", "message"}], every problem
at once, each naming the layer index and field), ``spec`` (the layers with their defaults
filled in), ``output`` (the last shape). The model's output must be ``[classes]``. Nothing here
raises for user input; only ``SpecError`` (a ValueError) from ``checked``.
"""
from __future__ import annotations

import hashlib
import json
import math

MAX_LAYERS = 64            # layers in all, residual bodies included
MAX_WIDTH = 4096           # channels / features of one layer
MAX_KERNEL = 15
MAX_STRIDE = 8
MAX_PADDING = 7
MAX_PARAMS = 16_000_000    # 64 MB of float32 weights
MAX_VALUES = 4_194_304     # one layer's output values per sample (16 MB float32)
MAX_SIDE = 512             # the input's height / width
ACTIVATIONS = {"relu": "ReLU", "gelu": "GELU", "tanh": "Tanh", "sigmoid": "Sigmoid",
               "elu": "ELU", "leaky_relu": "LeakyReLU"}
# op -> {field: (kind, default, low, high)}; kind "int", "float" or "width" (int or "classes")
FIELDS = {
    "conv": {"out_channels": ("width", None, 1, MAX_WIDTH),
             "kernel_size": ("int", 3, 1, MAX_KERNEL), "stride": ("int", 1, 1, MAX_STRIDE),
             "padding": ("int", 0, 0, MAX_PADDING)},
    "maxpool": {"kernel_size": ("int", 2, 1, MAX_KERNEL), "stride": ("int", None, 1, MAX_STRIDE)},
    "avgpool": {"kernel_size": ("int", 2, 1, MAX_KERNEL), "stride": ("int", None, 1, MAX_STRIDE)},
    "global_avgpool": {}, "flatten": {},
    "linear": {"out_features": ("width", None, 1, MAX_WIDTH)},
    "batchnorm": {}, "dropout": {"p": ("float", 0.5, 0.0, 0.95)},
    "leaky_relu": {"negative_slope": ("float", 0.01, 0.0, 1.0)},
    "residual": {"layers": ("layers", None, 0, 0)},
    **{a: {} for a in ACTIVATIONS if a != "leaky_relu"},
}
OPS = tuple(FIELDS)


class SpecError(ValueError):
    """A spec that cannot be built; ``errors`` is ``check``'s list, the message all of them."""

    def __init__(self, errors: list):
        super().__init__("; ".join(e["message"] for e in errors))
        self.errors = errors


class Checked:
    """What ``check`` found: ``rows``, ``errors``, ``spec``, ``output``, ``input``,
    ``classes``; ``totals()`` sums the rows."""

    def __init__(self, input_shape, classes):
        self.classes = classes  # input: a copy of a list; anything else as given
        self.input = list(input_shape) if isinstance(input_shape, list) else input_shape
        self.rows, self.errors, self.spec, self.output = [], [], [], None
        self.count = 0

    def fail(self, index, op, field, text):
        where = index if index in ("input", "layers") else f"layer {index}"
        where += f" ({op})" if op else ""
        self.errors.append({"layer": index, "field": field,
                            "message": f"{where}{' ' + field if field else ''}: {text}"})

    def totals(self) -> dict:
        return {"params": sum(r["params"] for r in self.rows),
                "macs": sum(r["macs"] for r in self.rows), "layers": len(self.rows)}


def _short(value) -> str:
    try:
        text = json.dumps(value) if isinstance(value, (list, dict)) else repr(value)
    except (TypeError, ValueError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= 40 else f"{text[:40]}... ({len(text):,} characters)"


def _number(chk, index, op, field, value, rule, classes):
    """The value of one field, or None after naming its problem."""
    kind, _, low, high = rule
    if kind == "width" and value == "classes":
        return classes if isinstance(classes, int) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        chk.fail(index, op, field, f"{_short(value)} is not a number"
                 + (' (or "classes")' if kind == "width" else ""))
        return None
    if kind != "float" and (isinstance(value, float) and not value.is_integer()):
        chk.fail(index, op, field, f"{_short(value)} is not a whole number")
        return None
    if not low <= value <= high:  # NaN and +-inf fail too; an int of 400 digits stays exact
        chk.fail(index, op, field, f"{_short(value)} is outside {low}..{high}")
        return None
    return float(value) if kind == "float" else int(value)


def _fields(chk, index, op, layer, classes):
    """The layer's fields with defaults, or None after naming each problem."""
    rules, out, ok = FIELDS[op], {"op": op}, True
    for key in layer:
        if key != "op" and key not in rules:
            known = ", ".join(rules) or "none"
            chk.fail(index, op, str(key)[:40], f"unknown field (this op's fields: {known})")
            ok = False
    for field, rule in rules.items():
        if rule[0] == "layers":
            continue
        if field not in layer or layer[field] is None:
            if rule[1] is None and field != "stride":
                chk.fail(index, op, field, "missing")
                ok = False
            out[field] = rule[1]
            continue
        value = _number(chk, index, op, field, layer[field], rule, classes)
        ok = ok and value is not None
        out[field] = layer[field] if layer[field] == "classes" else value
    if op in ("maxpool", "avgpool") and out.get("stride") is None:
        out["stride"] = out["kernel_size"]
    return out if ok else None


def _shape(op, f, x, classes):
    """(output shape, params, macs, label) of op with fields ``f`` on input ``x``; or a
    ``(field, text)`` problem."""
    width = (classes if f.get("out_channels") == "classes" else f.get("out_channels")) or \
        (classes if f.get("out_features") == "classes" else f.get("out_features"))
    if op in ("conv", "maxpool", "avgpool", "global_avgpool") and len(x) != 3:
        return None, (f"its input is {x}; it needs images [C, H, W] (a table's rows have no "
                      "height and width)")
    if op == "conv":
        k, s, p = f["kernel_size"], f["stride"], f["padding"]
        h, w = ((d + 2 * p - k) // s + 1 for d in x[1:])
        if min(h, w) < 1:
            return None, ("kernel_size", f"{k} with padding {p} does not fit its input "
                          f"{x[1]}x{x[2]} (the output would be {max(h, 0)}x{max(w, 0)})")
        params = width * x[0] * k * k + width
        return ([width, h, w], params, width * h * w * x[0] * k * k,
                f"Conv2d({x[0]}, {width}, {k}, stride={s}, padding={p})"), None
    if op in ("maxpool", "avgpool"):
        k, s = f["kernel_size"], f["stride"]
        h, w = ((d - k) // s + 1 for d in x[1:])
        if min(h, w) < 1:
            return None, ("kernel_size", f"{k} does not fit its input {x[1]}x{x[2]} (the "
                          f"output would be {max(h, 0)}x{max(w, 0)})")
        name = "MaxPool2d" if op == "maxpool" else "AvgPool2d"
        return ([x[0], h, w], 0, 0, f"{name}({k}, stride={s})"), None
    if op == "global_avgpool":
        return ([x[0], 1, 1], 0, 0, "AdaptiveAvgPool2d(1)"), None
    if op == "flatten":
        return ([math.prod(x)], 0, 0, "Flatten()"), None
    if op == "linear":
        if len(x) != 1:
            return None, f"its input is {x}; add a Flatten (or GlobalAvgPool, Flatten) before it"
        return ([width], x[0] * width + width, x[0] * width, f"Linear({x[0]}, {width})"), None
    if op == "batchnorm":
        return (list(x), 2 * x[0], 0, f"BatchNorm{1 if len(x) == 1 else 2}d({x[0]})"), None
    if op == "dropout":
        return (list(x), 0, 0, f"Dropout(p={f['p']})"), None
    if op == "leaky_relu":
        return (list(x), 0, 0, f"LeakyReLU({f['negative_slope']})"), None
    return (list(x), 0, 0, f"{ACTIVATIONS[op]}()"), None


def _layers(chk, layers, x, classes, prefix="", inside=False):
    """Check ``layers`` on input shape ``x``: rows and errors into ``chk``; returns (the
    layers with defaults filled, the output shape or None once a shape is unknown)."""
    out = []
    for i, layer in enumerate(layers):
        index = f"{prefix}{i}"
        chk.count += 1
        if chk.count > MAX_LAYERS:
            chk.fail(index, None, None, f"more than {MAX_LAYERS} layers in all; remove some")
            return out, None
        if not isinstance(layer, dict):
            chk.fail(index, None, None, f"{_short(layer)} is not a layer: expected an object "
                                        '{"op": ..., ...}')
            x = None
            continue
        op = layer.get("op")
        if not isinstance(op, str) or op not in FIELDS:
            chk.fail(index, None, "op", f"{_short(op) if 'op' in layer else 'missing'}: "
                     f"expected one of {', '.join(OPS)}")
            x = None
            continue
        f = _fields(chk, index, op, layer, classes)
        if op == "residual":
            body = layer.get("layers")
            if inside:
                chk.fail(index, op, None, "a residual block inside a residual block is not "
                                          "offered")
                x = None
            elif not isinstance(body, list) or not body:
                chk.fail(index, op, "layers", f"{_short(body)} is not a list of layers"
                         if not isinstance(body, list) else "no layers inside: add one")
                x = None
            elif f is not None:
                start = len(chk.rows)
                chk.rows.append(None)  # the block's own row, filled below
                inner, y = _layers(chk, body, x, classes, f"{index}.", inside=True)
                f["layers"] = inner
                if x is not None and y is not None and y != x:
                    chk.fail(index, op, "layers", f"its layers turn {x} into {y}; a residual "
                                                  "block must keep its input's shape")
                    y = None
                chk.rows[start] = {"index": index, "op": op, "label": "Residual (x + layers(x))",
                                   "shape": y, "params": 0, "macs": 0}
                x = y
            if f is not None:
                out.append(f)
            continue
        if f is None:
            x = None
            continue
        out.append(f)
        if x is None:
            chk.rows.append({"index": index, "op": op, "label": op, "shape": None,
                             "params": 0, "macs": 0})
            continue
        res, problem = _shape(op, f, x, classes)
        if res is None:
            field, text = problem if isinstance(problem, tuple) else (None, problem)
            chk.fail(index, op, field, text)
            x = None
            continue
        shape, params, macs, label = res
        if math.prod(shape) > MAX_VALUES:
            chk.fail(index, op, None, f"its output {shape} holds {math.prod(shape):,} values per "
                                      f"sample; the limit is {MAX_VALUES:,}")
        chk.rows.append({"index": index, "op": op, "label": label, "shape": shape,
                         "params": params, "macs": macs})
        x = shape
    return out, x


def check(spec, input_shape, classes) -> Checked:
    """Check ``spec`` for samples of ``input_shape`` ([C, H, W] or [F]) and ``classes``
    classes; see the module docstring. Never raises for user input."""
    chk = Checked(input_shape, classes)
    shape_ok = isinstance(input_shape, list) and len(input_shape) in (1, 3) and all(
        isinstance(d, int) and not isinstance(d, bool) and 1 <= d <= MAX_WIDTH * MAX_SIDE
        for d in input_shape) and (len(input_shape) == 1 or (
            input_shape[0] <= MAX_WIDTH and max(input_shape[1:]) <= MAX_SIDE))
    if not shape_ok:
        chk.fail("input", None, "shape", f"{_short(input_shape)}: expected images [C, H, W] "
                 f"(sides up to {MAX_SIDE}) or table rows [F]")
    if isinstance(classes, bool) or not isinstance(classes, int) or not 2 <= classes <= 4096:
        chk.fail("input", None, "classes", f"{_short(classes)}: expected 2..4096 classes")
        classes = None
    if not isinstance(spec, list):
        chk.fail("layers", None, None, f"{_short(spec)} is not a list of layers")
        return chk
    if not spec:
        chk.fail("layers", None, None, "no layers: add at least a Linear to the classes")
        return chk
    chk.spec, chk.output = _layers(chk, spec, list(input_shape) if shape_ok else None, classes)
    params = chk.totals()["params"]
    if params > MAX_PARAMS:
        chk.fail("layers", None, None, f"{params:,} parameters in all; the limit is "
                                       f"{MAX_PARAMS:,}")
    if not chk.errors and classes is not None and chk.output != [classes]:
        chk.fail(str(len(spec) - 1), spec[-1]["op"], None,
                 f"the model's output is {chk.output}; the dataset has {classes} classes: end "
                 f'with a Linear of out_features {classes} (or "classes")')
    return chk


def checked(spec, input_shape, classes) -> Checked:
    """``check``, raising SpecError when it found problems."""
    chk = check(spec, input_shape, classes)
    if chk.errors:
        raise SpecError(chk.errors)
    return chk


def model_name(chk: Checked) -> str:
    """``built-`` and 12 hex digits of the spec's, input shape's and classes' hash: the same
    network for the same dataset shape is the same model."""
    text = json.dumps([chk.spec, chk.input, chk.classes], sort_keys=True, separators=(",", ":"))
    return "built-" + hashlib.sha256(text.encode()).hexdigest()[:12]
