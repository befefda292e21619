// Unary elementwise ops (ONNX semantics) and their gradients (PyTorch autograd formulas). The op
// is the override constant OP (one pipeline per op; ops/unary.py passes it, the uniform's `op`
// holds the same code): CPU adapters (lavapipe, SwiftShader) run a switch on a uniform value
// with execution masks, every case for every element (Clip 8x slower than a copy), while a
// switch on a pipeline constant compiles to its one case.
//   unary_forward:   out[i] = f(x[i])
//   unary_backward:  out[i] = dx[i] from dy[i], x[i] and, where the plan kept it intact and it is
//                    cheaper (Sigmoid, Tanh, Exp, Sqrt, Reciprocal: flags bit 0), y[i]
//   clip_bound_grad: out[i] = dy[i] where x[i] is clipped to min (aux 0) / max (aux 1), else 0;
//                    summed by reduce.wgsl into the gradient of a tensor bound (torch.clamp)
// Clip's bounds are p.lo / p.hi, or lo_t[0] / hi_t[0] when flags bit 1 / bit 2 is set.
//
// op codes: the constants UNARY_<OP> of the generated include unary_ops (ops/unary.py CODES;
// UNARY_GELU is the erf form, UNARY_GELUTANH the tanh form); Clip is the default case.
//
// erf, Phi and the erf GELU's slope: lib/gelu.wgsl.

//!include detmath
//!include gelu
//!include unary_ops

override OP: u32 = 0u;

struct Params {
  n: u32, op: u32, flags: u32, aux: u32,
  alpha: f32, beta: f32, lo: f32, hi: f32,
}

//!include index

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> y: array<f32>;
@group(0) @binding(3) var<storage, read> dy: array<f32>;
@group(0) @binding(4) var<storage, read> lo_t: array<f32>;
@group(0) @binding(5) var<storage, read> hi_t: array<f32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;

const SQRT_2_OVER_PI: f32 = 0.7978845608028654;
const GELU_C: f32 = 0.044715;


// tanh with the argument capped at +-10 (tanh(10) rounds to 1 in float32), so that
// implementations through exp(2x) never see an overflow.
fn tanh_(v: f32) -> f32 { return det_tanh(clamp(v, -10.0, 10.0)); }

// 1 / (1 + exp(-v)) without overflow: exp of a non-positive argument only.
fn sigmoid(v: f32) -> f32 {
  let e = det_exp(-abs(v));
  return select(e / (1.0 + e), 1.0 / (1.0 + e), v >= 0.0);
}

// log(1 + exp(v)) = max(v, 0) + log1p(exp(-|v|)), log1p by its series when the argument is small.
fn softplus(v: f32) -> f32 {
  let e = det_exp(-abs(v));
  let l = select(det_log(1.0 + e), e * (1.0 - e * (0.5 - e * (1.0 / 3.0))), e < 0.0078125);
  return max(v, 0.0) + l;
}

// exp(v) - 1, by its Taylor series near 0 (no cancellation).
fn expm1_(v: f32) -> f32 {
  if (abs(v) < 0.25) {
    var r = 1.0 / 5040.0;
    r = r * v + 1.0 / 720.0;
    r = r * v + 1.0 / 120.0;
    r = r * v + 1.0 / 24.0;
    r = r * v + 1.0 / 6.0;
    r = r * v + 0.5;
    r = r * v + 1.0;
    return r * v;
  }
  return det_exp(v) - 1.0;
}

fn clip_lo() -> f32 { return select(p.lo, lo_t[0], (p.flags & 2u) != 0u); }
fn clip_hi() -> f32 { return select(p.hi, hi_t[0], (p.flags & 4u) != 0u); }

fn forward_value(v: f32) -> f32 {
  switch OP {
    case UNARY_LEAKYRELU: { return select(p.alpha * v, v, v >= 0.0); }
    case UNARY_SIGMOID: { return sigmoid(v); }
    case UNARY_TANH: { return tanh_(v); }
    case UNARY_GELU: { return v * normal_cdf(v); }
    case UNARY_GELUTANH: {
      return 0.5 * v * (1.0 + tanh_(SQRT_2_OVER_PI * (v + GELU_C * v * v * v)));
    }
    case UNARY_ERF: { return erf_(v); }
    case UNARY_EXP: { return det_exp(v); }
    case UNARY_LOG: { return det_log(v); }
    case UNARY_SQRT: { return sqrt(v); }
    case UNARY_NEG: { return -v; }
    case UNARY_ABS: { return abs(v); }
    case UNARY_RECIPROCAL: { return 1.0 / v; }
    case UNARY_SOFTPLUS: { return softplus(v); }
    case UNARY_ELU: { return select(p.alpha * expm1_(v), v, v >= 0.0); }
    case UNARY_HARDSIGMOID: { return clamp(p.alpha * v + p.beta, 0.0, 1.0); }
    case UNARY_HARDSWISH: { return v * clamp(v * (1.0 / 6.0) + 0.5, 0.0, 1.0); }
    case UNARY_SOFTSIGN: { return v / (1.0 + abs(v)); }
    case UNARY_SELU: { return p.beta * select(p.alpha * expm1_(v), v, v > 0.0); }
    case UNARY_CELU: { return select(p.alpha * expm1_(v / p.alpha), v, v > 0.0); }
    case UNARY_MISH: { return v * tanh_(softplus(v)); }
    default: { return min(max(v, clip_lo()), clip_hi()); }
  }
}

// dx from dy = g, x = v and (when use_y) the saved output w. Masks follow torch: LeakyRelu,
// Elu, Selu (alpha, gamma = p.beta) and Celu take the negative branch at x = 0; HardSigmoid passes only strictly inside (0, 1);
// HardSwish is 0 below -3, x/3 + 1/2 on [-3, 3]; Clip passes dy where min <= x <= max.
fn backward_value(v: f32, w: f32, g: f32, use_y: bool) -> f32 {
  switch OP {
    case UNARY_LEAKYRELU: { return select(p.alpha * g, g, v > 0.0); }
    case UNARY_SIGMOID: {
      let s = select(sigmoid(v), w, use_y);
      return g * s * (1.0 - s);
    }
    case UNARY_TANH: {
      let t = select(tanh_(v), w, use_y);
      return g * (1.0 - t * t);
    }
    case UNARY_GELU: { return g * gelu_slope(v); }
    case UNARY_GELUTANH: {
      let t = tanh_(SQRT_2_OVER_PI * (v + GELU_C * v * v * v));
      let inner = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_C * v * v);
      return g * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * inner);
    }
    case UNARY_ERF: { return g * TWO_OVER_SQRT_PI * det_exp(-v * v); }
    case UNARY_EXP: { return g * select(det_exp(v), w, use_y); }
    case UNARY_LOG: { return g / v; }
    case UNARY_SQRT: { return g / (2.0 * select(sqrt(v), w, use_y)); }
    case UNARY_NEG: { return -g; }
    case UNARY_ABS: { return g * sign(v); }
    case UNARY_RECIPROCAL: {
      let r = select(1.0 / v, w, use_y);
      return -g * r * r;
    }
    case UNARY_SOFTPLUS: { return g * sigmoid(v); }
    case UNARY_ELU: { return select(g * p.alpha * det_exp(v), g, v > 0.0); }
    case UNARY_HARDSIGMOID: {
      let u = p.alpha * v + p.beta;
      return select(0.0, g * p.alpha, u > 0.0 && u < 1.0);
    }
    case UNARY_HARDSWISH: {
      if (v < -3.0) { return 0.0; }
      if (v <= 3.0) { return g * (v * (1.0 / 3.0) + 0.5); }
      return g;
    }
    case UNARY_SOFTSIGN: {
      let d = 1.0 + abs(v);
      return g / (d * d);
    }
    case UNARY_SELU: { return p.beta * select(g * p.alpha * det_exp(v), g, v > 0.0); }
    case UNARY_CELU: { return select(g * det_exp(v / p.alpha), g, v > 0.0); }
    case UNARY_MISH: {
      let t = tanh_(softplus(v));
      return g * (t + v * sigmoid(v) * (1.0 - t * t));
    }
    default: { return select(0.0, g, clip_lo() <= v && v <= clip_hi()); }
  }
}

@compute @workgroup_size(64)
fn unary_forward(@builtin(global_invocation_id) gid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var i = flat_index(gid, nwg); i < p.n; i += grid_stride(nwg)) {
    out[i] = forward_value(x[i]);
  }
}

@compute @workgroup_size(64)
fn unary_backward(@builtin(global_invocation_id) gid: vec3<u32>,
                  @builtin(num_workgroups) nwg: vec3<u32>) {
  let use_y = (p.flags & 1u) != 0u;
  for (var i = flat_index(gid, nwg); i < p.n; i += grid_stride(nwg)) {
    var w = 0.0;
    if (use_y) { w = y[i]; }
    out[i] = backward_value(x[i], w, dy[i], use_y);
  }
}

// torch.clamp's gradient of a tensor bound (clamp_backward_min_max): min gets dy where
// x < min (and min < max when max is given), max gets dy where x > max (or max < min).
@compute @workgroup_size(64)
fn clip_bound_grad(@builtin(global_invocation_id) gid: vec3<u32>,
                   @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat_index(gid, nwg);
  if (i >= p.n) { return; }
  let lo = clip_lo();
  let hi = clip_hi();
  let v = x[i];
  let has_lo = (p.flags & 8u) != 0u;
  let has_hi = (p.flags & 16u) != 0u;
  var m = false;
  if (p.aux == 0u) {
    m = v < lo && (!has_hi || lo < hi);
  } else {
    m = v > hi || (has_lo && hi < lo);
  }
  out[i] = select(0.0, dy[i], m);
}
