// Batch assembly from uint8 shards resident on the GPU: gathers the images order[offset + b]
// (4 pixels per u32, little-endian), normalises them through a 256-entry table made on the host,
// lut[v] = (v/255 - mean) / std in float64 rounded to float32 (no float arithmetic here, so every
// host gets the same bits; a driver may fuse v * scale - shift into an FMA, another may not),
// and widens their uint8 labels to u32. One thread per 4 pixels of one image.

struct Params { batch: u32, words: u32, count: u32, _p0: u32 }
//!include step
//!include index

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<uniform> st: Step;
@group(0) @binding(2) var<storage, read> images: array<u32>;  // [count, 4*words] uint8
@group(0) @binding(3) var<storage, read> labels: array<u32>;  // [count] uint8
@group(0) @binding(4) var<storage, read> order: array<u32>;
@group(0) @binding(5) var<storage, read_write> x: array<f32>;  // [batch, 4*words]
@group(0) @binding(6) var<storage, read_write> y: array<u32>;  // [batch]
@group(0) @binding(7) var<storage, read> lut: array<f32, 256>;

@compute @workgroup_size(64)
fn gather(@builtin(global_invocation_id) gid: vec3<u32>,
          @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = flat_index(gid, nwg);
  if (t >= p.batch * p.words) { return; }
  let b = t / p.words;
  let w = t % p.words;
  let src = min(order[st.offset + b], p.count - 1u);
  let v = images[src * p.words + w];
  for (var k = 0u; k < 4u; k++) {
    x[(b * p.words + w) * 4u + k] = lut[(v >> (8u * k)) & 255u];
  }
  if (w == 0u) { y[b] = (labels[src / 4u] >> (8u * (src % 4u))) & 255u; }
}
