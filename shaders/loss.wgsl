// LogSoftmax along one axis of a tensor viewed as [outer, C, inner], its gradient, and the
// negative log-likelihood loss (PyTorch NLLLoss, reduction "mean") with its gradient and the
// batch metrics (mean loss, accuracy) written into the metrics ring at slot st.slot.
//   log_softmax_forward:  y = x - max - log(sum(exp(x - max)))
//   log_softmax_backward: dx = dy - exp(y) * sum(dy)          (x binding = y, y binding = dy)
//   nll: loss = -mean_b x[b, label_b]; dx[b, c] = -(c == label_b) / B

struct Params { outer: u32, C: u32, inner: u32, _p0: u32 }
struct Step { step: u32, offset: u32, seed: u32, slot: u32, lr: f32, a0: f32, a1: f32, a2: f32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<uniform> st: Step;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read> y: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
@group(0) @binding(5) var<storage, read> labels: array<u32>;
@group(0) @binding(6) var<storage, read_write> metrics: array<f32>;

var<workgroup> red_loss: array<f32, 256>;
var<workgroup> red_hit: array<f32, 256>;

@compute @workgroup_size(64)
fn log_softmax_forward(@builtin(global_invocation_id) gid: vec3<u32>,
                       @builtin(num_workgroups) nwg: vec3<u32>) {
  let r = gid.x + gid.y * nwg.x * 64u;
  if (r >= p.outer * p.inner) { return; }
  let base = (r / p.inner) * p.C * p.inner + r % p.inner;
  var m = x[base];
  for (var c = 1u; c < p.C; c++) { m = max(m, x[base + c * p.inner]); }
  var s = 0.0;
  for (var c = 0u; c < p.C; c++) { s += exp(x[base + c * p.inner] - m); }
  let lse = m + log(s);
  for (var c = 0u; c < p.C; c++) { out[base + c * p.inner] = x[base + c * p.inner] - lse; }
}

@compute @workgroup_size(64)
fn log_softmax_backward(@builtin(global_invocation_id) gid: vec3<u32>,
                        @builtin(num_workgroups) nwg: vec3<u32>) {
  let r = gid.x + gid.y * nwg.x * 64u;
  if (r >= p.outer * p.inner) { return; }
  let base = (r / p.inner) * p.C * p.inner + r % p.inner;
  var s = 0.0;
  for (var c = 0u; c < p.C; c++) { s += y[base + c * p.inner]; }
  for (var c = 0u; c < p.C; c++) {
    let i = base + c * p.inner;
    out[i] = y[i] - exp(x[i]) * s;
  }
}

// One workgroup: x = log-probabilities [B, C] (outer = B), out = dx [B, C].
@compute @workgroup_size(256)
fn nll(@builtin(local_invocation_index) lid: u32) {
  let B = p.outer;
  var loss = 0.0;
  var hit = 0.0;
  for (var b = lid; b < B; b += 256u) {
    let label = labels[b];
    var best = 0u;
    for (var c = 0u; c < p.C; c++) {
      let v = x[b * p.C + c];
      if (v > x[b * p.C + best]) { best = c; }
      out[b * p.C + c] = select(0.0, -1.0 / f32(B), c == label);
    }
    loss -= x[b * p.C + label];
    hit += select(0.0, 1.0, best == label);
  }
  red_loss[lid] = loss;
  red_hit[lid] = hit;
  workgroupBarrier();
  for (var half = 128u; half > 0u; half = half >> 1u) {
    if (lid < half) {
      red_loss[lid] += red_loss[lid + half];
      red_hit[lid] += red_hit[lid + half];
    }
    workgroupBarrier();
  }
  if (lid == 0u) {
    metrics[2u * st.slot] = red_loss[0] / f32(B);
    metrics[2u * st.slot + 1u] = red_hit[0] / f32(B);
  }
}
