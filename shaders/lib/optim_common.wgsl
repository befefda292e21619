// What optim.wgsl and adam_vec4.wgsl share: their uniform Params, the flags' bits and the
// update mask's owner of an element. The including file declares `p` (Params) and `mask`.

struct Params {
  n: u32, nesterov: u32, decoupled: u32, flags: u32,  // flags: 1 amsgrad, 2 centered, 4 guard
  momentum: f32, dampening: f32, weight_decay: f32, eps: f32,
  beta1: f32, beta2: f32, max_norm: f32, parts: u32,  // beta2 is alpha (RMSprop), rho (Adadelta)
  shift: u32, _p0: u32, _p1: u32, _p2: u32,  // mask: a u32 per 2^shift elements
}

const AMSGRAD: u32 = 1u;
const CENTERED: u32 = 2u;
const GUARD: u32 = 4u;

// Element i's owner: 0 where it is not trainable (see mask).
fn owner(i: u32) -> u32 {
  let m = mask[i >> p.shift];
  return select(0u, m >> 7u, (i & ((1u << p.shift) - 1u)) < (m & 127u));
}

// Exponent bits all ones: Inf or NaN (a bit test, immune to fast-math assumptions).
fn not_finite(x: f32) -> bool { return (bitcast<u32>(x) & 0x7f800000u) == 0x7f800000u; }
