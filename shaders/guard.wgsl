// Numerical guard: after backward, flag every parameter tensor whose gradient region of G holds a
// NaN or an Inf. One dispatch for the whole model: workgroup row y = tensor index, threads stride
// over that tensor's elements. flags[k] = min(flags[k], step) when tensor k's gradient is not
// finite (flags start at 0xffffffff, so each keeps the first bad step). Nothing is written on a
// healthy step; the trainer reads flags with the metrics ring (no per-step readback).

struct Params { tensors: u32, _p0: u32, _p1: u32, _p2: u32 }
//!include step

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<uniform> st: Step;
@group(0) @binding(2) var<storage, read> G: array<f32>;
@group(0) @binding(3) var<storage, read> table: array<u32>;  // (element offset, count) pairs
@group(0) @binding(4) var<storage, read_write> flags: array<atomic<u32>>;

// Exponent bits all ones: Inf or NaN (a bit test, immune to fast-math assumptions).
fn not_finite(x: f32) -> bool { return (bitcast<u32>(x) & 0x7f800000u) == 0x7f800000u; }

@compute @workgroup_size(64)
fn check(@builtin(global_invocation_id) gid: vec3<u32>,
         @builtin(num_workgroups) nwg: vec3<u32>) {
  let k = gid.y;
  if (k >= p.tensors) { return; }
  let start = table[2u * k];
  let count = table[2u * k + 1u];
  var bad = false;
  for (var i = gid.x; i < count; i = i + nwg.x * 64u) {
    if (not_finite(G[start + i])) { bad = true; break; }
  }
  if (bad) { atomicMin(&flags[k], st.step); }
}
