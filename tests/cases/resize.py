"""Resize (ops/resize.py, shaders/resize.wgsl): input -> 1x1 Conv (so Resize's input gradient
is computed) -> Resize -> Flatten -> Gemm -> LogSoftmax, one training step: nearest (every
nearest_mode) and linear, every coordinate_transformation_mode the engine runs, up and down,
integer and fractional scales, sizes, the opset-10 form (X, scales) and ``axes``."""

import numpy as np

from cases import case
from conftest import f32, head, node, rng_for

CASES_SPEC = {
    # id: (C, H, W, attrs, scales or None, sizes or None, opset)
    "nearest_x2": (2, 4, 5, dict(mode="nearest", coordinate_transformation_mode="asymmetric",
                                 nearest_mode="floor"), [1, 1, 2, 2], None, 13),
    "nearest_x1_5": (3, 5, 4, dict(mode="nearest", coordinate_transformation_mode="asymmetric",
                                   nearest_mode="floor"), [1, 1, 1.5, 1.5], None, 18),
    "nearest_half_pixel_round": (2, 5, 6, dict(mode="nearest"), [1, 1, 1.7, 0.5], None, 13),
    "nearest_prefer_ceil": (2, 4, 6, dict(mode="nearest", nearest_mode="round_prefer_ceil"),
                            [1, 1, 2, 0.5], None, 13),
    "nearest_ceil_sizes": (2, 5, 5, dict(mode="nearest", nearest_mode="ceil",
                                         coordinate_transformation_mode="asymmetric"),
                           None, [2, 2, 7, 3], 13),
    "linear_half_pixel_x2": (2, 4, 5, dict(mode="linear"), [1, 1, 2, 2], None, 13),
    "linear_align_corners": (3, 4, 3, dict(mode="linear",
                                           coordinate_transformation_mode="align_corners"),
                             [1, 1, 2, 3], None, 18),
    "linear_sizes_down": (2, 9, 8, dict(mode="linear"), None, [2, 2, 4, 5], 13),
    "linear_pytorch_half_pixel": (2, 5, 4, dict(
        mode="linear", coordinate_transformation_mode="pytorch_half_pixel"),
        None, [2, 2, 1, 9], 13),
    "linear_asymmetric_x2_5": (1, 3, 4, dict(mode="linear",
                                             coordinate_transformation_mode="asymmetric"),
                               [1, 1, 2.5, 1], None, 21),
    "axes_sizes": (2, 4, 4, dict(mode="linear", axes=[2, 3]), None, [6, 3], 18),
    "opset10_scales": (2, 3, 3, dict(mode="nearest"), [1, 1, 3, 2], None, 10),
}


def _resize(name):
    c, h, w, attrs, scales, sizes, opset = CASES_SPEC[name]
    rng = rng_for("resize", name)
    pre_w = f32(rng.standard_normal((c, c, 1, 1)) / np.sqrt(c))
    pre_b = f32(rng.standard_normal(c) * 0.1)
    x = f32(rng.standard_normal((2, c, h, w)))
    constants = {}
    if opset == 10:
        inputs = ["pre_out", "scales"]
    else:
        inputs = ["pre_out", "", "scales" if scales else "", "sizes" if sizes else ""]
        inputs = inputs[:3] if not sizes else inputs
    if scales:
        constants["scales"] = {"dtype": "float32", "shape": [len(scales)],
                               "values": [float(v) for v in scales]}
    if sizes:
        constants["sizes"] = {"dtype": "int64", "shape": [len(sizes)], "values": sizes}
    nodes = [node("Conv", ["input", "pre.w", "pre.b"], ["pre_out"], kernel_shape=[1, 1]),
             node("Resize", inputs, ["up"], **attrs),
             node("Flatten", ["up"], ["flat"], axis=1)]
    if sizes:
        oh, ow = sizes[-2:]
    else:
        oh, ow = int(np.floor(h * scales[2])), int(np.floor(w * scales[3]))
    hn, ht = head("flat", c * oh * ow, 5, rng)
    tensors = [("pre.w", pre_w, "param"), ("pre.b", pre_b, "param")] + ht
    return case(f"resize/{name}", nodes + hn, tensors, x, rng.integers(0, 5, 2),
                constants=constants, opset=opset, tag="Resize", acts=("pre_out", "up"),
                dacts=("pre_out", "up"), selfcheck=name == "linear_half_pixel_x2")


CASES = [_resize(name) for name in CASES_SPEC]
