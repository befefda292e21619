// Data augmentation of a training batch (issue 18): torchvision's RandomCrop(size, padding=pad)
// then RandomHorizontalFlip(p=0.5), per image, on the gathered batch x [batch, C, H, W] into the
// model input y (same shape). The random numbers are Philox draws of the run's stream
// (philox.wgsl): image b at optimizer step t reads block ctr = (b, 0, t, 2), key = (seed, 0):
//   dy = mulhi(word 0, 2 pad + 1), dx = mulhi(word 1, 2 pad + 1)   offsets in [0, 2 pad]
//   flip = flip_on && (word 2 >> 31) == 1                           probability 1/2
// (mulhi(x, n) = floor(x * n / 2^32): integers only, as cpu/augment.py). torchvision pads the raw
// image with 0 before normalising, so a padded pixel of channel c is lut[c * 256], the gather's
// table entry of pixel value 0 in that channel (data.wgsl).
// Output pixel (i, j) of image b, channel c = x[b, c, i + dy - pad, jj + dx - pad] with
// jj = W - 1 - j when flipped, else j; lut[c * 256] outside the image. Only copies: no float
// arithmetic.

struct Params { batch: u32, channels: u32, height: u32, width: u32, pad: u32, flip: u32,
                _p0: u32, _p1: u32 }
//!include step
//!include index

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<uniform> st: Step;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> lut: array<f32>;  // [C * 256] (data.wgsl)

//!include philox

// One thread per output value.
@compute @workgroup_size(64)
fn crop_flip(@builtin(global_invocation_id) gid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = flat_index(gid, nwg);
  let plane = p.height * p.width;
  let per = p.channels * plane;
  if (t >= p.batch * per) { return; }
  let b = t / per;
  let c = (t % per) / plane;
  let i = (t % plane) / p.width;
  let j = t % p.width;
  let r = philox4x32(vec4<u32>(b, 0u, st.step, 2u), vec2<u32>(st.seed, 0u));
  let span = 2u * p.pad + 1u;
  let dy = philox_mulhilo(r.x, span).x;
  let dx = philox_mulhilo(r.y, span).x;
  let jj = select(j, p.width - 1u - j, p.flip != 0u && (r.z >> 31u) == 1u);
  let si = i32(i + dy) - i32(p.pad);
  let sj = i32(jj + dx) - i32(p.pad);
  var v = lut[c * 256u];
  if (si >= 0 && si < i32(p.height) && sj >= 0 && sj < i32(p.width)) {
    v = x[((b * p.channels + c) * p.height + u32(si)) * p.width + u32(sj)];
  }
  y[t] = v;
}
