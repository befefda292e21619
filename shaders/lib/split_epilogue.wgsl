// reduce.wgsl's parameters and the epilogue of a split-K sum (its bias, fused ReLU or mask),
// shared by reduce.wgsl and reduce_vec4.wgsl. The includer declares p (uniform Params), bias,
// src and the override GELU_GRAD; see reduce.wgsl's header for the fields.

struct Params {
  outer: u32, C: u32, inner: u32, count: u32,
  splits: u32, N: u32, bias_mode: u32, beta: f32,
  relu: u32, mask: u32, tail: u32, part0: u32,
}

// Output e's value from its sum: the bias, then the fused ReLU or mask.
fn epilogue(e: u32, sum: f32) -> f32 {
  var s = sum;
  let m = e / max(p.N, 1u);
  let n = e % max(p.N, 1u);
  switch p.bias_mode {
    case 1u: { s += p.beta * bias[n]; }
    case 2u: { s += p.beta * bias[m]; }
    case 3u: { s += p.beta * bias[e]; }
    case 4u: { s += p.beta * bias[0]; }
    case 5u: { s += p.beta * bias[(e / max(p.inner, 1u)) % max(p.C, 1u)]; }
    default: {}
  }
  if (p.relu != 0u) { s = max(s, 0.0); }
  if (p.mask != 0u) {
    if (GELU_GRAD != 0u) { s = s * src[e]; } else if (src[e] <= 0.0) { s = 0.0; }
  }
  return s;
}
