"""Dropout (ops/dropout.py, shaders/dropout.wgsl): ratio as an input or an attribute, the mask
output, ratio 0; the reference replays the device's mask (harness.oracle)."""

import numpy as np

from cases import case
from conftest import f32, head, node, rng_for


def _model(name, rng, ratio, features=6, hidden=512, classes=4, as_attr=False,
           mask_out=False, batch=4, **opts):
    consts = {}
    if as_attr:
        dnode = node("Dropout", ["h"], ["d"], ratio=ratio)
    else:
        consts = {"ratio": {"dtype": "float32", "shape": [], "values": [ratio]}}
        dnode = node("Dropout", ["h", "ratio"], ["d"] + (["d_mask"] if mask_out else []))
    nodes = [node("Gemm", ["input", "pre.w", "pre.b"], ["h"], transB=1), dnode]
    hn, ht = head("d", hidden, classes, rng)
    tensors = [("pre.w", f32(rng.standard_normal((hidden, features))), "param"),
               ("pre.b", f32(rng.standard_normal(hidden)), "param")] + ht
    x = f32(rng.standard_normal((batch, features)))
    labels = rng.integers(0, classes, batch)
    return case(f"dropout/{name}", nodes + hn, tensors, x, labels, constants=consts,
                tag="Dropout", **opts)


def _identity(res, want):
    assert np.array_equal(res["acts"]["d"], res["acts"]["h"])
    assert np.array_equal(res["dacts"]["h"], res["dacts"]["d"])


def _ratio03_mask(res, want):
    """About 30 % dropped, the kept values scaled by 1 / (1 - ratio), the same mask in the
    backward."""
    ratio = 0.3
    h, d = res["acts"]["h"], res["acts"]["d"]
    assert np.all(h != 0)
    keep = d != 0
    n = keep.size
    frac = 1 - keep.mean()
    sigma = np.sqrt(ratio * (1 - ratio) / n)
    assert abs(frac - ratio) <= 3 * sigma, f"dropped fraction {frac:.4f}, expected {ratio}"
    scale = np.float32(1.0) / np.float32(1.0 - ratio)
    assert np.array_equal(d[keep], h[keep] * scale), "kept values are x / (1 - ratio)"
    # backward uses the same mask: the gradient of h is zero exactly where dropped
    assert np.all(res["dacts"]["h"][~keep] == 0)


def _ratio03(as_attr, mask_out):
    name = "ratio03_" + ("attr" if as_attr else "mask_out" if mask_out else "input")
    return _model(name, rng_for("dropout03", as_attr), 0.3, as_attr=as_attr, mask_out=mask_out,
                  step=5, seed=7, acts=("d",), dacts=("h",), checks=(_ratio03_mask,))


CASES = [_model("ratio0_identity", rng_for("dropout0"), 0.0, hidden=33, seed=123,
                acts=("h", "d"), dacts=("h",), checks=(_identity,)),
         _ratio03(False, False), _ratio03(True, False), _ratio03(False, True)]
