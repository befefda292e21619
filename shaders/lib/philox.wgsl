// Philox-4x32-10 (Salmon, Moraes, Dror & Shaw, "Parallel random numbers: as easy as 1, 2, 3",
// SC 2011; Random123's philox4x32_R(10, ctr, key)): the engine's ONE random generator, included
// (not compiled alone) by init.wgsl and dropout.wgsl. Counter-based: a value is a pure function
// of (counter, key), so every element is drawn independently, in any order, on any host, with
// integer arithmetic only. py/webgpu_trainer/cpu/philox.py is the same generator in numpy (the
// tests compare the bits, and check Random123's known-answer vectors).
//
// What the engine draws (key = (seed, 0); element i is word i % 4 of block i / 4):
//   parameter init  ctr = (i / 4, tensor index + 1, 0, 0)
//   dropout mask    ctr = (i / 4, node index + 1, optimizer step, 1)
// and how 32 random bits x become floats, exactly in float32 (no rounding but the last multiply):
//   philox_unit(x)            = (x >> 8) * 2^-24              in [0, 1), 24 bits
//   philox_symmetric(x, s)    = ((x >> 8) - 2^23) * s         in [-b, b) for s = b * 2^-23

const PHILOX_M0: u32 = 0xD2511F53u;
const PHILOX_M1: u32 = 0xCD9E8D57u;
const PHILOX_W0: u32 = 0x9E3779B9u;
const PHILOX_W1: u32 = 0xBB67AE85u;

// (high, low) 32-bit halves of the 64-bit product a * b, from 16-bit parts (WGSL has no u64).
fn philox_mulhilo(a: u32, b: u32) -> vec2<u32> {
  let a0 = a & 0xFFFFu;
  let a1 = a >> 16u;
  let b0 = b & 0xFFFFu;
  let b1 = b >> 16u;
  let p01 = a0 * b1;
  let p10 = a1 * b0;
  let mid = ((a0 * b0) >> 16u) + (p01 & 0xFFFFu) + (p10 & 0xFFFFu);
  return vec2<u32>(a1 * b1 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u), a * b);
}

fn philox4x32(ctr: vec4<u32>, key: vec2<u32>) -> vec4<u32> {
  var c = ctr;
  var k = key;
  for (var r = 0u; r < 10u; r++) {
    if (r > 0u) { k = k + vec2<u32>(PHILOX_W0, PHILOX_W1); }
    let p0 = philox_mulhilo(PHILOX_M0, c.x);
    let p1 = philox_mulhilo(PHILOX_M1, c.z);
    c = vec4<u32>(p1.x ^ c.y ^ k.x, p1.y, p0.x ^ c.w ^ k.y, p0.y);
  }
  return c;
}

fn philox_unit(x: u32) -> f32 {
  return f32(x >> 8u) * (1.0 / 16777216.0);
}

fn philox_symmetric(x: u32, scale: f32) -> f32 {
  return f32(i32(x >> 8u) - 8388608i) * scale;
}
