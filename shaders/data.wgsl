// Batch assembly from the dataset's shards resident on the GPU: gathers the samples
// order[offset + b] and widens their uint8 labels to u32. One thread per value of one sample.
// A split larger than one buffer may bind (maxStorageBufferBindingSize) is uploaded as chunks
// of whole samples, one buffer each (engine/train/data.py chunks); one dispatch per chunk
// (samples first..first+count-1 of total) writes the batch rows whose sample is in its chunk
// and leaves the others to the other chunks' dispatches.
// - gather: uint8 images [count, values] (C channels of H*W values each, any count: read byte
//   by byte from the u32 words, little-endian), normalised through a table made on the host,
//   lut[c * 256 + v] = (v/255 - mean[c]) / std[c] in float64 rounded to float32 (no float
//   arithmetic here, so every host gets the same bits; a driver may fuse v * scale - shift into
//   an FMA, another may not), c = (value index within the sample) / hw.
// - gather_table: float32 features [count, values] (standardised when prepared), copied.

struct Params { batch: u32, values: u32, count: u32, hw: u32, first: u32, total: u32 }
//!include step
//!include index

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<uniform> st: Step;
@group(0) @binding(2) var<storage, read> images: array<u32>;  // [count, values] uint8 or f32, this chunk's
@group(0) @binding(3) var<storage, read> labels: array<u32>;  // [count] uint8, this chunk's
@group(0) @binding(4) var<storage, read> order: array<u32>;
@group(0) @binding(5) var<storage, read_write> x: array<f32>;  // [batch, values]
@group(0) @binding(6) var<storage, read_write> y: array<u32>;  // [batch]
@group(0) @binding(7) var<storage, read> lut: array<f32>;  // [C * 256]

// Thread t's (batch row, value index within the sample, source sample within this chunk, 1
// when the source sample is in this chunk else 0); writes the label of a sample in the chunk.
fn locate(t: u32) -> vec4<u32> {
  let b = t / p.values;
  let src = min(order[st.offset + b], p.total - 1u);
  if (src < p.first || src - p.first >= p.count) { return vec4<u32>(b, 0u, 0u, 0u); }
  let s = src - p.first;
  if (t % p.values == 0u) { y[b] = (labels[s / 4u] >> (8u * (s % 4u))) & 255u; }
  return vec4<u32>(b, t % p.values, s, 1u);
}

@compute @workgroup_size(64)
fn gather(@builtin(global_invocation_id) gid: vec3<u32>,
          @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = flat_index(gid, nwg);
  if (t >= p.batch * p.values) { return; }
  let s = locate(t);
  if (s.w == 0u) { return; }
  let at = s.z * p.values + s.y;  // byte offset in the shard
  let v = (images[at / 4u] >> (8u * (at % 4u))) & 255u;
  x[t] = lut[(s.y / p.hw) * 256u + v];
}

@compute @workgroup_size(64)
fn gather_table(@builtin(global_invocation_id) gid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = flat_index(gid, nwg);
  if (t >= p.batch * p.values) { return; }
  let s = locate(t);
  if (s.w == 0u) { return; }
  x[t] = bitcast<f32>(images[s.z * p.values + s.y]);
}
