// exp and log from IEEE add/multiply and exact exponent manipulation, included (not compiled
// alone) by the kernels on the training path: WGSL's exp/log are implementation-defined
// approximations (WGSL spec 14.6.2, accuracy "3 + 2 * |x| ULP" / "3 ULP"), so SwiftShader,
// lavapipe and GPU drivers round them differently and the same training run drifts apart
// between hosts. These give the same bits wherever f32 add/multiply are IEEE (the Vulkan and
// Metal drivers tested). Polynomials of Cephes expf / logf (S. L. Moshier, Cephes Math Library,
// 1984-1992), ~1 ULP on normal values.
//   det_exp(x): exp(x), +inf above 88.72, 0 below -103.97
//   det_log(x): natural log, -inf at 0, NaN below 0

fn det_exp(x: f32) -> f32 {
  if (x > 88.72283) { return x * 1e38; }          // +inf (computed: Tint rejects inf literals)
  if (x < -103.97208) { return 0.0; }
  let k = floor(x * 1.44269504 + 0.5);            // x = k ln2 + r, |r| <= ln2 / 2
  let r = (x - k * 0.693359375) + k * 2.12194440e-4;  // Cody & Waite: ln2 in two parts
  var q = 1.9875691500e-4;
  q = q * r + 1.3981999507e-3;
  q = q * r + 8.3334519073e-3;
  q = q * r + 4.1665795894e-2;
  q = q * r + 1.6666665459e-1;
  q = q * r + 5.0000001201e-1;
  let e = q * (r * r) + r + 1.0;
  let kk = i32(k);
  if (kk < -126) { return ldexp(ldexp(e, kk + 64), -64); }  // subnormal results in two steps
  return ldexp(e, kk);
}

fn det_log(x: f32) -> f32 {
  if (x <= 0.0) { return select((x - x) / (x - x), -1.0 / x, x == 0.0); }  // NaN, -inf
  if (x > 3.4028234e38) { return x; }               // +inf
  let fr = frexp(x);                                  // x = m 2^e, m in [0.5, 1)
  var m = fr.fract;
  var e = f32(fr.exp);
  if (m < 0.70710678) { m = m + m - 1.0; e = e - 1.0; } else { m = m - 1.0; }
  let z = m * m;
  var y = 7.0376836292e-2;
  y = y * m - 1.1514610310e-1;
  y = y * m + 1.1676998740e-1;
  y = y * m - 1.2420140846e-1;
  y = y * m + 1.4249322787e-1;
  y = y * m - 1.6668057665e-1;
  y = y * m + 2.0000714765e-1;
  y = y * m - 2.4999993993e-1;
  y = y * m + 3.3333331174e-1;
  y = y * m * z;
  y = y - e * 2.12194440e-4;
  y = y - 0.5 * z;
  return m + y + e * 0.693359375;
}

// tanh from det_exp (Cephes tanhf): odd polynomial for |x| < 0.625, else 1 - 2 / (e^(2|x|) + 1).
fn det_tanh(x: f32) -> f32 {
  let a = abs(x);
  if (a < 0.625) {
    let z = x * x;
    var q = -5.70498872745e-3;
    q = q * z + 2.06390887954e-2;
    q = q * z - 5.37397155531e-2;
    q = q * z + 1.33314422036e-1;
    q = q * z - 3.33332819422e-1;
    return q * z * x + x;
  }
  if (a > 44.0) { return sign(x); }
  return sign(x) * (1.0 - 2.0 / (det_exp(a + a) + 1.0));
}
