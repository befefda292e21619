"""LayerNormalization (ops/layernorm.py, shaders/layernorm.wgsl): Gemm -> Reshape -> LayerNorm
over the last 1 or 2 dims -> Flatten -> Gemm -> LogSoftmax; rows of 1 to 4096 values, the Mean /
InvStdDev outputs, Scale / B broadcast over 2 normalised dims, many rows, a frozen Scale."""

from cases.blocks import chain, flat_head_case, gemm_to
from conftest import f32, node, rng_for


def _layernorm(size, last):
    """Gemm -> Reshape [N, 2, 3, size] -> LayerNorm over the last 1 or 2 dims."""
    rng = rng_for("layernorm", size, last)
    shape = [2, 3, size]
    norm = shape[-last:]
    nodes, tensors, consts = gemm_to(rng, shape)
    tensors += [("ln.g", f32(1 + 0.3 * rng.standard_normal(norm)), "param"),
                ("ln.b", f32(0.3 * rng.standard_normal(norm)), "param")]
    nodes.append(node("LayerNormalization", ["h", "ln.g", "ln.b"], ["ln"], axis=-last,
                      epsilon=1e-5))
    return flat_head_case(f"layernorm/size{size}_last{last}", rng, nodes, tensors, consts, "ln",
                          shape, tag="LayerNormalization", acts=("h", "ln"), dacts=("h", "ln"))


VARIANT_SHAPES = {"stats_no_bias": [3, 7], "scale_broadcast": [5, 33], "many_rows": [64, 7],
                  "many_rows_broadcast": [64, 2, 3], "frozen_scale": [3, 40],
                  "row4096": [1, 4096], "rows_in_parts": [37, 64],
                  "no_bias_parts": [40, 24], "frozen_scale_parts": [96, 8],
                  "rows_in_many_parts": [300, 16]}


def _variant(name):
    """Mean / InvStdDev outputs without B; Scale / B of the last dim over 2 normalised dims
    (the gradient sums fold); many rows (the parameter gradients in several parts); a frozen
    Scale (role buffer) with a trained B; rows of 4096 values; rows of 64 in parts of 16+ rows,
    the last one shorter, and a last workgroup of SEG rows half empty (the GPU path); the GPU
    path's one fold of the parts (only Scale, only B, both in 37 parts: 16 threads a sum)."""
    rng = rng_for("layernorm_var", name)
    shape = VARIANT_SHAPES[name]
    axis = -2 if name in ("scale_broadcast", "many_rows_broadcast") else -1
    pshape = shape[-1:]
    nodes, tensors, consts = gemm_to(rng, shape)
    tensors.append(("ln.g", f32(1 + 0.3 * rng.standard_normal(pshape)),
                    "buffer" if name.startswith("frozen_scale") else "param"))
    inputs = ["h", "ln.g"]
    outputs = ["ln"]
    if name == "stats_no_bias":
        outputs += ["ln_mean", "ln_inv"]
    if "no_bias" not in name:
        tensors.append(("ln.b", f32(0.3 * rng.standard_normal(pshape)), "param"))
        inputs.append("ln.b")
    nodes.append(node("LayerNormalization", inputs, outputs, axis=axis, epsilon=1e-3))
    acts = ("h", "ln") + (("ln_mean", "ln_inv") if name == "stats_no_bias" else ())
    checks = ()
    if name == "stats_no_bias":
        def stat_shapes(res, want):
            assert res["acts"]["ln_mean"].shape == (2, shape[0], 1)
            assert res["acts"]["ln_inv"].shape == (2, shape[0], 1)
        checks = (stat_shapes,)
    return flat_head_case(f"layernorm/{name}", rng, nodes, tensors, consts, "ln", shape,
                          x_scale=3.0, tag="LayerNormalization", acts=acts, dacts=("h", "ln"),
                          checks=checks)


def _softmax_layernorm():
    """Softmax over channels, then LayerNorm over the last 2 dims (the browser's first parity
    list)."""
    rng = rng_for("softmax_layernorm")
    c, hw = 3, 7
    return chain(rng, "layernorm/chain_softmax_layernorm", c, hw, [
        node("Softmax", ["pre"], ["sm"], axis=1),
        node("LayerNormalization", ["sm", "ln.g", "ln.b"], ["body_out"], axis=-2,
             epsilon=1e-5)], c * hw * hw,
        extra=[("ln.g", f32(1 + 0.1 * rng.standard_normal((hw, hw))), "param"),
               ("ln.b", f32(0.1 * rng.standard_normal((hw, hw))), "param")],
        tag="LayerNormalization", acts=("sm", "body_out"), dacts=("pre", "sm"))


CASES = [_layernorm(size, last) for last in (1, 2) for size in (1, 7, 33, 260)] + \
    [_variant(name) for name in VARIANT_SHAPES] + [_softmax_layernorm()]
