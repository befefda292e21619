// The live views' per-parameter norms (engine/gpu_engine.py norms): workgroup k sums the squares
// of tensor k's region of the flat weight buffer P and of the gradient buffer G, and writes both
// sums to out[2k], out[2k + 1] (the host takes the square roots). 256 threads stride over the
// tensor, each summing its share in f32, then a tree in workgroup memory. One dispatch for the
// whole model, read back as 8 bytes per tensor instead of the two 1.5 MB buffers.

struct Params { tensors: u32, _p0: u32, _p1: u32, _p2: u32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> P: array<f32>;
@group(0) @binding(2) var<storage, read> G: array<f32>;
@group(0) @binding(3) var<storage, read> table: array<u32>;  // (element offset, count) pairs
@group(0) @binding(4) var<storage, read_write> out: array<f32>;  // [tensors, 2]

const WG = 256u;
alias RedT = vec2<f32>;  // (sum of w^2, sum of g^2)
var<workgroup> red: array<RedT, 256>;
//!include wg_reduce

@compute @workgroup_size(256)
fn sumsq(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  let k = wid.x;
  if (k >= p.tensors) { return; }
  let start = table[2u * k];
  let count = table[2u * k + 1u];
  var aw = 0.0;
  var ag = 0.0;
  for (var i = lid.x; i < count; i = i + WG) {
    let w = P[start + i];
    let g = G[start + i];
    aw = aw + w * w;
    ag = ag + g * g;
  }
  red[lid.x] = vec2<f32>(aw, ag);
  wg_tree_sum(lid.x);
  if (lid.x == 0u) {
    out[2u * k] = red[0].x;
    out[2u * k + 1u] = red[0].y;
  }
}
