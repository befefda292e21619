// Batch assembly of a tokens dataset (train/data_tokens.py) from its shards resident on the
// GPU: the token rows order[offset + b] copied as u32 ids into the model input (read by the
// embedding lookups, shaders/embed.wgsl), their uint8 labels widened to u32. One thread per
// token of the batch. Shards: uint16 (wide 0: two ids per u32 word, little-endian) or int32
// (wide 1: one per word). A split over several buffers (engine/train/data.py chunks): one
// dispatch per chunk (samples first..first+count-1 of total), as shaders/data.wgsl.

struct Params { batch: u32, values: u32, count: u32, wide: u32, first: u32, total: u32 }
//!include step
//!include index

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<uniform> st: Step;
@group(0) @binding(2) var<storage, read> images: array<u32>;  // [count, values] ids
@group(0) @binding(3) var<storage, read> labels: array<u32>;  // [count] uint8
@group(0) @binding(4) var<storage, read> order: array<u32>;
@group(0) @binding(5) var<storage, read_write> x: array<u32>;  // [batch, values] ids
@group(0) @binding(6) var<storage, read_write> y: array<u32>;  // [batch]

@compute @workgroup_size(64)
fn gather_tokens(@builtin(global_invocation_id) gid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = flat_index(gid, nwg);
  if (t >= p.batch * p.values) { return; }
  let b = t / p.values;
  let whole = min(order[st.offset + b], p.total - 1u);
  if (whole < p.first || whole - p.first >= p.count) { return; }
  let src = whole - p.first;
  if (t % p.values == 0u) { y[b] = (labels[src / 4u] >> (8u * (src % 4u))) & 255u; }
  let at = src * p.values + t % p.values;  // id index in the shard
  if (p.wide == 1u) {
    x[t] = images[at];
  } else {
    x[t] = (images[at / 2u] >> (16u * (at % 2u))) & 65535u;
  }
}
