// erf, the standard normal CDF and the erf GELU's derivative, from IEEE add / multiply and
// lib/detmath's exp (the same bits on every host; include detmath first). unary.wgsl's Erf
// and Gelu use them, and gelu_slope.wgsl, which keeps the slope for a Gemm's dA epilogue
// (engine/fusion.py gelu_grads).
//
// erf: WGSL has none. |x| < 1: the Maclaurin series erf(x) = 2/sqrt(pi) * sum_n (-1)^n
// x^(2n+1) / (n! (2n+1)) (Abramowitz & Stegun 7.1.5), 11 terms (truncation < 2e-8 relative);
// |x| >= 1: erf = 1 - erfc, erfc(z) = t * exp(-z^2 + P(t)), t = 1 / (1 + z/2), with the
// Chebyshev-fitted P of Numerical Recipes in C, 2nd ed. (Press et al. 1992), sec. 6.2 `erfcc`
// (fractional error < 1.2e-7 for all z >= 0; erfc(z) <= 0.16 there, so erf's error stays a
// fraction of that). Measured in float32 against math.erf (tests/test_ops_unary.py
// test_erf_kernel_accuracy): max relative error 1.7e-7 over [-6, 6] and tiny |x|.

const TWO_OVER_SQRT_PI: f32 = 1.1283791670955126;
const INV_SQRT2: f32 = 0.7071067811865476;
const INV_SQRT_2PI: f32 = 0.3989422804014327;

// erf(x) / (2/sqrt(pi) * x) for |x| < 1: Maclaurin coefficients (-1)^n / (n! (2n+1)) in s = x^2.
fn erf_series(x: f32) -> f32 {
  let s = x * x;
  var r = 1.0 / 76204800.0;                    // n = 10: 1 / (10! * 21)
  r = r * s - 1.0 / 6894720.0;                 // n = 9:  1 / (9! * 19)
  r = r * s + 1.0 / 685440.0;                  // n = 8
  r = r * s - 1.0 / 75600.0;                   // n = 7
  r = r * s + 1.0 / 9360.0;                    // n = 6
  r = r * s - 1.0 / 1320.0;                    // n = 5
  r = r * s + 1.0 / 216.0;                     // n = 4
  r = r * s - 1.0 / 42.0;                      // n = 3
  r = r * s + 0.1;                             // n = 2
  r = r * s - 1.0 / 3.0;                       // n = 1
  r = r * s + 1.0;                             // n = 0
  return TWO_OVER_SQRT_PI * x * r;
}

// erfc(z) for z >= 0 (Numerical Recipes `erfcc`, see the header); z is capped at 10, where
// erfc is below float32's smallest normal.
fn erfc_pos(z_in: f32) -> f32 {
  let z = min(z_in, 10.0);
  let t = 1.0 / (1.0 + 0.5 * z);
  var q = 0.17087277;
  q = q * t - 0.82215223;
  q = q * t + 1.48851587;
  q = q * t - 1.13520398;
  q = q * t + 0.27886807;
  q = q * t - 0.18628806;
  q = q * t + 0.09678418;
  q = q * t + 0.37409196;
  q = q * t + 1.00002368;
  q = q * t - 1.26551223;
  // exp(-z^2) as exp(-zh^2) * exp(-(z - zh)(z + zh)), zh = z with its low 12 mantissa bits
  // cleared so zh^2 is exact in float32 (the splitting of fdlibm's s_erf.c): keeps the
  // rounding of z^2 (up to 8e-6 relative at z = 9) out of the result.
  let zh = bitcast<f32>(bitcast<u32>(z) & 0xFFFFF000u);
  return t * det_exp(-zh * zh) * det_exp(q - (z - zh) * (z + zh));
}

fn erf_(v: f32) -> f32 {
  let a = abs(v);
  if (a < 1.0) { return erf_series(v); }
  return sign(v) * (1.0 - erfc_pos(a));
}

// Phi(v) = P(N(0,1) <= v) = (1 + erf(v/sqrt2)) / 2, through erfc in the left tail (no
// cancellation of 1 + erf when erf is near -1).
fn normal_cdf(v: f32) -> f32 {
  let u = v * INV_SQRT2;
  if (u < -1.0) { return 0.5 * erfc_pos(-u); }
  return 0.5 * (1.0 + erf_(u));
}

// d/dv GELU(v) = Phi(v) + v * phi(v) for the erf GELU v * Phi(v) (ONNX Gelu, approximate
// "none"; torch's GeluBackward), phi the standard normal density.
fn gelu_slope(v: f32) -> f32 { return gelu_slope_cdf(v, normal_cdf(v)); }

// gelu_slope(v) from cdf = normal_cdf(v) already taken (gelu_slope.wgsl: the forward's Phi).
fn gelu_slope_cdf(v: f32, cdf: f32) -> f32 {
  return cdf + v * INV_SQRT_2PI * det_exp(-0.5 * v * v);
}
