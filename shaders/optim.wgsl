// Optimizer updates over the flat weight buffer P with gradients G, one dispatch for every
// parameter of the model (elements whose owner is 0 — buffers, frozen tensors, padding — are
// left alone),
// with torch.optim's semantics (PyTorch 2.x docs, "Algorithm" boxes).
// Per-step scalars come from the Step uniform: lr, a0, a1 (see each entry point) and a2, the
// step's momentum (SGD, RMSprop) or beta1 (Adam): a schedule may change them every step (torch's
// OneCycleLR with cycle_momentum=True); Params.momentum / Params.beta1 only record the
// constructor's values.
// Gradient clipping by global norm (torch.nn.utils.clip_grad_norm_): when p.max_norm > 0,
// grad_sumsq + grad_norm run before the update and every update reads g = G * clip[1].
//   clip[0] = ||G * mask||_2, clip[1] = min(1, max_norm / (clip[0] + 1e-6)),
//   clip[2 + k] = partial sum of squares of workgroup k (k < p.parts).
// The numerical guard (flags bit 4, GUARD; guard.wgsl's check otherwise): the owner of each
// trainable element is 1 + the guard's index k of its tensor, and a NaN / Inf in G[i] sets
// flags[k] = min(flags[k], step) as it is read for the update, one dispatch fewer a step.

//!include optim_common
//!include step
//!include index

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<uniform> st: Step;
@group(0) @binding(2) var<storage, read_write> P: array<f32>;
@group(0) @binding(3) var<storage, read> G: array<f32>;
@group(0) @binding(4) var<storage, read_write> S1: array<f32>;
@group(0) @binding(5) var<storage, read_write> S2: array<f32>;
// A u32 per block of 2^p.shift elements (plan.owners): 0, no trainable element; else
// owner << 7 | count, the block's first count elements being one tensor's, owner 1 (with GUARD
// 1 + the guard's index of the tensor)
@group(0) @binding(6) var<storage, read> mask: array<u32>;
@group(0) @binding(7) var<storage, read_write> S3: array<f32>;
@group(0) @binding(8) var<storage, read_write> clip: array<f32>;
@group(0) @binding(9) var<storage, read_write> flags: array<atomic<u32>>;  // the guard's

// The gradient of trainable element i after clipping by the global norm (when enabled); with
// GUARD, a non-finite G[i] (before clipping, as guard.wgsl tests it) flags its tensor.
fn grad(i: u32) -> f32 {
  let g = G[i];
  if ((p.flags & GUARD) != 0u && not_finite(g)) { atomicMin(&flags[owner(i) - 1u], st.step); }
  if (p.max_norm > 0.0) { return g * clip[1]; }
  return g;
}

const WG: u32 = 256u;  // the norm kernels' workgroup
alias RedT = f32;
var<workgroup> red: array<RedT, 256>;
//!include wg_reduce


// Level 1 of the norm: workgroup k (of p.parts) sums g^2 over trainable elements k*256 + lid,
// stepping by p.parts * 256, into clip[2 + k].
@compute @workgroup_size(256)
fn grad_sumsq(@builtin(workgroup_id) wid: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
  var s = 0.0;
  for (var e = wid.x * 256u + lid; e < p.n; e += max(p.parts, 1u) * 256u) {
    let g = select(0.0, G[e], owner(e) != 0u);
    s += g * g;
  }
  red[lid] = s;
  wg_tree_sum(lid);
  if (lid == 0u) { clip[2u + wid.x] = red[0]; }
}

// Level 2: one workgroup sums the p.parts partials; clip_coef as torch.nn.utils.clip_grad_norm_
// (clip_coef = max_norm / (total_norm + 1e-6), clamped to at most 1).
@compute @workgroup_size(256)
fn grad_norm(@builtin(local_invocation_index) lid: u32) {
  var s = 0.0;
  for (var k = lid; k < p.parts; k += 256u) { s += clip[2u + k]; }
  red[lid] = s;
  wg_tree_sum(lid);
  if (lid == 0u) {
    let norm = sqrt(red[0]);
    clip[0] = norm;
    clip[1] = min(1.0, p.max_norm / (norm + 1e-6));
  }
}

// SGD (momentum = a2, dampening, nesterov, weight_decay); the first step sets buf = g.
@compute @workgroup_size(64)
fn sgd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat_index(gid, nwg);
  if (i >= p.n || owner(i) == 0u) { return; }
  var g = grad(i) + p.weight_decay * P[i];
  let momentum = st.a2;
  if (momentum != 0.0) {
    var buf = g;
    if (st.step > 1u) { buf = momentum * S1[i] + (1.0 - p.dampening) * g; }
    S1[i] = buf;
    g = select(buf, g + momentum * buf, p.nesterov != 0u);
  }
  P[i] = P[i] - st.lr * g;
}

// Adam / AdamW (Kingma & Ba 2015; Loshchilov & Hutter 2019 when decoupled):
// a0 = lr / (1 - beta1^t), a1 = sqrt(1 - beta2^t), a2 = beta1. amsgrad (Reddi et al. 2018, torch's form):
// S3 = max(S3, v) and the denominator uses S3.
@compute @workgroup_size(64)
fn adam(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat_index(gid, nwg);
  if (i >= p.n || owner(i) == 0u) { return; }
  var w = P[i];
  var g = grad(i);
  if (p.decoupled != 0u) { w = w * (1.0 - st.lr * p.weight_decay); }
  else { g = g + p.weight_decay * w; }
  let beta1 = st.a2;
  let m = beta1 * S1[i] + (1.0 - beta1) * g;
  let v = p.beta2 * S2[i] + (1.0 - p.beta2) * g * g;
  S1[i] = m;
  S2[i] = v;
  var vd = v;
  if ((p.flags & AMSGRAD) != 0u) {
    vd = max(S3[i], v);
    S3[i] = vd;
  }
  P[i] = w - st.a0 * m / (sqrt(vd) / st.a1 + p.eps);
}

// AdaGrad (Duchi et al. 2011): a0 = lr / (1 + (t - 1) * lr_decay); S1 starts at
// initial_accumulator_value.
@compute @workgroup_size(64)
fn adagrad(@builtin(global_invocation_id) gid: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat_index(gid, nwg);
  if (i >= p.n || owner(i) == 0u) { return; }
  let g = grad(i) + p.weight_decay * P[i];
  let s = S1[i] + g * g;
  S1[i] = s;
  P[i] = P[i] - st.a0 * g / (sqrt(s) + p.eps);
}

// RMSprop (Hinton, Coursera lecture 6e; torch.optim.RMSprop): alpha = p.beta2.
//   v = alpha v + (1 - alpha) g^2 (S1); centered: gavg = alpha gavg + (1 - alpha) g (S3),
//   avg = sqrt(v - gavg^2) + eps, else sqrt(v) + eps;
//   momentum (a2) > 0: buf = momentum buf + g / avg (S2), w -= lr buf; else w -= lr g / avg.
@compute @workgroup_size(64)
fn rmsprop(@builtin(global_invocation_id) gid: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat_index(gid, nwg);
  if (i >= p.n || owner(i) == 0u) { return; }
  let g = grad(i) + p.weight_decay * P[i];
  let alpha = p.beta2;
  let v = alpha * S1[i] + (1.0 - alpha) * g * g;
  S1[i] = v;
  var avg: f32;
  if ((p.flags & CENTERED) != 0u) {
    let ga = alpha * S3[i] + (1.0 - alpha) * g;
    S3[i] = ga;
    avg = sqrt(v - ga * ga) + p.eps;
  } else {
    avg = sqrt(v) + p.eps;
  }
  let momentum = st.a2;
  if (momentum > 0.0) {
    let buf = momentum * S2[i] + g / avg;
    S2[i] = buf;
    P[i] = P[i] - st.lr * buf;
  } else {
    P[i] = P[i] - st.lr * g / avg;
  }
}

// Adadelta (Zeiler 2012; torch.optim.Adadelta): rho = p.beta2.
//   v = rho v + (1 - rho) g^2 (S1); delta = sqrt(u + eps) / sqrt(v + eps) * g;
//   u = rho u + (1 - rho) delta^2 (S2); w -= lr delta.
@compute @workgroup_size(64)
fn adadelta(@builtin(global_invocation_id) gid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat_index(gid, nwg);
  if (i >= p.n || owner(i) == 0u) { return; }
  let g = grad(i) + p.weight_decay * P[i];
  let rho = p.beta2;
  let v = rho * S1[i] + (1.0 - rho) * g * g;
  S1[i] = v;
  let delta = sqrt(S2[i] + p.eps) / sqrt(v + p.eps) * g;
  S2[i] = rho * S2[i] + (1.0 - rho) * delta * delta;
  P[i] = P[i] - st.lr * delta;
}
