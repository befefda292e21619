// Inverted dropout (Srivastava et al. 2014; ONNX Dropout with training_mode): in training,
// y = x * keep / (1 - ratio) with keep = (u >= ratio), u uniform in [0, 1) from a counter-based
// hash of (run seed, optimizer step, layer salt, element index) — PCG hash of Jarzynski & Olano,
// "Hash Functions for GPU Rendering", JCGT 2020. The backward pass recomputes the same mask.

struct Params { n: u32, salt: u32, ratio: f32, scale: f32 }
//!include step

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<uniform> st: Step;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

fn pcg(v: u32) -> u32 {
  let s = v * 747796405u + 2891336453u;
  let w = ((s >> ((s >> 28u) + 4u)) ^ s) * 277803737u;
  return (w >> 22u) ^ w;
}

fn keep_scale(i: u32) -> f32 {
  let h = pcg(i ^ pcg(p.salt ^ pcg(st.step ^ pcg(st.seed))));
  let u = f32(h >> 8u) * (1.0 / 16777216.0);
  return select(0.0, p.scale, u >= p.ratio);
}

// forward: x = input, y = output. backward: x = dy, y = dx (the same mask, the same scale).
@compute @workgroup_size(64)
fn apply(@builtin(global_invocation_id) gid: vec3<u32>,
         @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.x + gid.y * nwg.x * 64u;
  if (i < p.n) { y[i] = x[i] * keep_scale(i); }
}
