// Optimizer updates over the flat weight buffer P with gradients G, one dispatch for every
// parameter of the model (elements whose mask is 0 — buffers, frozen tensors — are left alone), with torch.optim's semantics (PyTorch 2.x docs, "Algorithm" boxes).
// Per-step scalars come from the Step uniform: lr, a0, a1 (see each entry point).

struct Params {
  n: u32, nesterov: u32, decoupled: u32, _p0: u32,
  momentum: f32, dampening: f32, weight_decay: f32, eps: f32,
  beta1: f32, beta2: f32, _p1: u32, _p2: u32,
}
struct Step { step: u32, offset: u32, seed: u32, slot: u32, lr: f32, a0: f32, a1: f32, a2: f32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<uniform> st: Step;
@group(0) @binding(2) var<storage, read_write> P: array<f32>;
@group(0) @binding(3) var<storage, read> G: array<f32>;
@group(0) @binding(4) var<storage, read_write> S1: array<f32>;
@group(0) @binding(5) var<storage, read_write> S2: array<f32>;
@group(0) @binding(6) var<storage, read> mask: array<f32>;  // 1 trainable, 0 frozen or buffer

fn index(gid: vec3<u32>, nwg: vec3<u32>) -> u32 { return gid.x + gid.y * nwg.x * 64u; }

// SGD (momentum, dampening, nesterov, weight_decay); the first step sets buf = g.
@compute @workgroup_size(64)
fn sgd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = index(gid, nwg);
  if (i >= p.n || mask[i] == 0.0) { return; }
  var g = G[i] + p.weight_decay * P[i];
  if (p.momentum != 0.0) {
    var buf = g;
    if (st.step > 1u) { buf = p.momentum * S1[i] + (1.0 - p.dampening) * g; }
    S1[i] = buf;
    g = select(buf, g + p.momentum * buf, p.nesterov != 0u);
  }
  P[i] = P[i] - st.lr * g;
}

// Adam / AdamW (Kingma & Ba 2015; Loshchilov & Hutter 2019 when decoupled):
// a0 = lr / (1 - beta1^t), a1 = sqrt(1 - beta2^t).
@compute @workgroup_size(64)
fn adam(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = index(gid, nwg);
  if (i >= p.n || mask[i] == 0.0) { return; }
  var w = P[i];
  var g = G[i];
  if (p.decoupled != 0u) { w = w * (1.0 - st.lr * p.weight_decay); }
  else { g = g + p.weight_decay * w; }
  let m = p.beta1 * S1[i] + (1.0 - p.beta1) * g;
  let v = p.beta2 * S2[i] + (1.0 - p.beta2) * g * g;
  S1[i] = m;
  S2[i] = v;
  P[i] = w - st.a0 * m / (sqrt(v) / st.a1 + p.eps);
}

// AdaGrad (Duchi et al. 2011): a0 = lr / (1 + (t - 1) * lr_decay); S1 starts at
// initial_accumulator_value.
@compute @workgroup_size(64)
fn adagrad(@builtin(global_invocation_id) gid: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = index(gid, nwg);
  if (i >= p.n || mask[i] == 0.0) { return; }
  let g = G[i] + p.weight_decay * P[i];
  let s = S1[i] + g * g;
  S1[i] = s;
  P[i] = P[i] - st.a0 * g / (sqrt(s) + p.eps);
}
