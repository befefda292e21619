// Adam / AdamW (optim.wgsl `adam`: the same expressions, torch.optim's semantics) four
// elements a thread from 16-byte vec4 loads and stores: GPU adapters (train/optim.py,
// Builder.OPTIM_VEC4; P, G and the states are allocated as whole vec4s). Each lane computes
// adam's scalar expressions, so the same bits; lanes whose element is not trainable (padding,
// buffers, frozen tensors: owner 0) or past p.n store back the values they loaded. The guard
// (flags bit GUARD) and clipping by global norm (clip[1]) as in optim.wgsl;
// a0 = lr / (1 - beta1^t), a1 = sqrt(1 - beta2^t), a2 = beta1.

//!include optim_common
//!include step
//!include index

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<uniform> st: Step;
@group(0) @binding(2) var<storage, read_write> P4: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> G4: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> S14: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> S24: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read> mask: array<u32>;  // optim.wgsl's (plan.owners)
@group(0) @binding(7) var<storage, read_write> S34: array<vec4<f32>>;
@group(0) @binding(8) var<storage, read> clip: array<f32>;
@group(0) @binding(9) var<storage, read_write> flags: array<atomic<u32>>;  // the guard's

@compute @workgroup_size(64)
fn adam4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let q = flat_index(gid, nwg);
  if (4u * q >= p.n) { return; }
  let i = 4u * q;
  let own = vec4<u32>(owner(i), owner(i + 1u), owner(i + 2u), owner(i + 3u));
  let on = (own != vec4<u32>(0u)) & (vec4<u32>(i, i + 1u, i + 2u, i + 3u) < vec4<u32>(p.n));
  if (!any(on)) { return; }
  let w0 = P4[q];
  var w = w0;
  var g = G4[q];
  if ((p.flags & GUARD) != 0u) {
    for (var l = 0u; l < 4u; l++) {
      if (on[l] && not_finite(g[l])) { atomicMin(&flags[own[l] - 1u], st.step); }
    }
  }
  if (p.max_norm > 0.0) { g = g * clip[1]; }
  if (p.decoupled != 0u) { w = w * (1.0 - st.lr * p.weight_decay); }
  else { g = g + p.weight_decay * w; }
  let beta1 = st.a2;
  let m0 = S14[q];
  let v0 = S24[q];
  let m = beta1 * m0 + (1.0 - beta1) * g;
  let v = p.beta2 * v0 + (1.0 - p.beta2) * g * g;
  S14[q] = select(m0, m, on);
  S24[q] = select(v0, v, on);
  var vd = v;
  if ((p.flags & AMSGRAD) != 0u) {
    let s0 = S34[q];
    vd = max(s0, v);
    S34[q] = select(s0, vd, on);
  }
  P4[q] = select(w0, w - st.a0 * m / (sqrt(vd) / st.a1 + p.eps), on);
}
