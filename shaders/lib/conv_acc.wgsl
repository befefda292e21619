// The register accumulators of the direct convolution kernels (conv2d.wgsl, conv2d_wide.wgsl):
// eight vec4 locals, not arrays: CPU adapters (SwiftShader, lavapipe) keep them in vector
// registers, while a dynamically indexed private array spills to memory. `masked` reads the
// including shader's binding `b` (the fused ReLU's source).

struct Acc { a0: vec4<f32>, a1: vec4<f32>, a2: vec4<f32>, a3: vec4<f32>,
             a4: vec4<f32>, a5: vec4<f32>, a6: vec4<f32>, a7: vec4<f32> }

fn acc_get(acc: Acc, m: u32) -> vec4<f32> {
  switch m {
    case 0u: { return acc.a0; } case 1u: { return acc.a1; } case 2u: { return acc.a2; }
    case 3u: { return acc.a3; } case 4u: { return acc.a4; } case 5u: { return acc.a5; }
    case 6u: { return acc.a6; } default: { return acc.a7; }
  }
}

// acc.a_m += s_m * v for the eight scalars s (one per channel).
fn acc_fma(acc: ptr<function, Acc>, s0: f32, s1: f32, s2: f32, s3: f32, s4: f32, s5: f32,
           s6: f32, s7: f32, v: vec4<f32>) {
  (*acc).a0 = vec4(s0) * v + (*acc).a0;
  (*acc).a1 = vec4(s1) * v + (*acc).a1;
  (*acc).a2 = vec4(s2) * v + (*acc).a2;
  (*acc).a3 = vec4(s3) * v + (*acc).a3;
  (*acc).a4 = vec4(s4) * v + (*acc).a4;
  (*acc).a5 = vec4(s5) * v + (*acc).a5;
  (*acc).a6 = vec4(s6) * v + (*acc).a6;
  (*acc).a7 = vec4(s7) * v + (*acc).a7;
}

// v with the components q < valid where b[base + q] <= 0 set to 0 (the fused ReLU gradient).
fn masked(v: vec4<f32>, base: u32, valid: u32) -> vec4<f32> {
  let last = base + min(valid, 4u) - 1u;
  let m = vec4<f32>(b[base], b[min(base + 1u, last)], b[min(base + 2u, last)],
                    b[min(base + 3u, last)]);
  return select(vec4<f32>(0.0), v, m > vec4<f32>(0.0));
}
