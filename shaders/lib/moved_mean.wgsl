// The mean and the squares about it of `count` values from a first mean m0 (their f32 sum /
// count) and two sums about m0: q = sum (x - m0)^2 and d = sum (x - m0). Returns (m, sum (x -
// m)^2) for m = m0 + d / count, using sum (x - m)^2 = q - d^2 / count, clamped at 0; d * (d /
// count), because d * d overflows f32 where q does not (values at 1e22 with std 1e16). The f32
// sum of values far from zero loses the mean's low bits (a constant 1e6 + 0.3 over 4.2 M values
// summed 0.25 off); the x - m0 are small and, near m0, exact, so d puts them back.
// batchnorm.wgsl (correct_mean, forward_fused) and layernorm.wgsl (forward_*) use it.
fn moved_mean(m0: f32, q: f32, d: f32, count: f32) -> vec2<f32> {
  return vec2<f32>(m0 + d / count, max(q - d * (d / count), 0.0));
}
