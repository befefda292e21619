// LogSoftmax along one axis of a tensor viewed as [outer, C, inner], its gradient, and the
// training losses of PyTorch over [B, C] with their gradients and the batch metrics (loss,
// accuracy = argmax_c x[b, c] == label_b) written into the metrics ring at slot st.slot.
//   log_softmax_forward:  y = x - max - log(sum(exp(x - max)))
//   log_softmax_backward: dx = dy - exp(y) * sum(dy)          (x binding = y, y binding = dy)
//   nll:   NLLLoss of log-probabilities x with class weights w (y binding) and the label
//          smoothing eps of CrossEntropyLoss (aten/src/ATen/native/LossNLL.cpp,
//          cross_entropy_loss_label_smoothing):
//            loss = sum_b [(1 - eps) w[l_b] (-x[b, l_b]) + eps / C * sum_c w[c] (-x[b, c])] / D,
//            dx[b, c] = -[(1 - eps) w[l_b] (c == l_b) + eps / C * w[c]] / D,
//          D = sum_b w[l_b] (mean, weighted), B (mean), 1 (sum); w = 1 without weights.
//   mse:             loss = sum (x - t)^2 / N, dx = 2 (x - t) / N        (t = onehot(label))
//   bce_with_logits: loss = sum max(x, 0) - x t + log(1 + exp(-|x|)) / N, dx = (sigmoid(x) - t) / N
//          N = B * C (mean) or 1 (sum).
// The loss entry points read Params as {B, C, flags (1: mean, 2: weighted), eps}; nll's flag 8
// writes the gradient through the LogSoftmax x came from (x = log_softmax(z), out = dz: that
// LogSoftmax's backward in the loss's own dispatch), flag 16 also dx itself into gout, flag
// 32 (FROM_SCORES, with 8) x holds that LogSoftmax's INPUT z and the kernel computes
// log_softmax(z) itself (row_lse: the same sums in the same order as softmax.wgsl forward_seg
// with SEG 16), writing it into gout (the head's forward in the loss's dispatch too).
// Each loss is one workgroup of 256 threads (the batch's loss needs all of it before dx), a
// thread taking whole rows; on GPU adapters nll runs as several (ops/losses.py NLL_GROUPS):
// each sums the whole batch as one would (the same sums in the same order, so the same
// divisor), then writes its share of dx, a thread an element; workgroup 0 writes the metrics. Wide rows (ops/losses.py: WIDE classes or more) go through two
// dispatches instead: nll_rows / mse_rows / bce_with_logits_rows, one workgroup per row (its
// argmax, sums and gradient strided over the 256 threads), write the row's terms into rows[5b
// ..] (loss, hit, smoothing sum, weight, bad), and rows_total sums them into the metrics. A
// thread then loops about C / 256 + B / 256 times: lavapipe caps a shader's loop iterations
// at 65,535 in all, and one thread looping over 70,000 classes cut the batch's reduction short.
// A label >= C (never expected: the data is checked before training) is not read through: its
// sample adds nothing to the loss, its gradient row is 0, and the step's accuracy slot holds
// minus the number of such labels, which the trainer reports as an error.

//!include detmath

struct Params { outer: u32, C: u32, inner: u32, eps: f32 }  // losses: inner = flags
//!include step
//!include index

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<uniform> st: Step;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read> y: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
@group(0) @binding(5) var<storage, read> labels: array<u32>;
@group(0) @binding(6) var<storage, read_write> metrics: array<f32>;
@group(0) @binding(7) var<storage, read_write> rows: array<f32>;  // *_rows: 5 per row
@group(0) @binding(8) var<storage, read_write> gout: array<f32>;  // nll's flag 16: dx too

var<workgroup> red_loss: array<f32, 256>;
var<workgroup> red_hit: array<f32, 256>;
var<workgroup> red_aux: array<f32, 256>;
var<workgroup> red_den: array<f32, 256>;
var<workgroup> red_bad: array<f32, 256>;
var<workgroup> red_val: array<f32, 256>;
var<workgroup> red_idx: array<u32, 256>;
const NONE: u32 = 0xffffffffu;
const THROUGH_LOG_SOFTMAX: u32 = 8u;  // nll's flags
const ALSO_DX: u32 = 16u;
const FROM_SCORES: u32 = 32u;
const LSE_SEG: u32 = 16u;  // softmax.wgsl forward_seg's SEG (ops/softmax.py SEG)

fn from_scores() -> bool { return (p.inner & FROM_SCORES) != 0u; }

// log(sum_c exp(z[row, c])) as softmax.wgsl forward_seg finds it with SEG = LSE_SEG: the row's
// maximum m, lane l's sum of exp(z - m) over c = l, l + SEG, ... in that order, the lanes'
// sums added pairwise, halving (lane l += lane l + h for h = SEG/2 .. 1), then m + log(sum).
// The same floats in the same order, so z - row_lse is forward_seg's output bit for bit.
fn row_lse(row: u32) -> f32 {
  let base = row * p.C;
  var m = x[base];
  for (var c = 1u; c < p.C; c++) { m = max(m, x[base + c]); }
  var part: array<f32, LSE_SEG>;
  for (var l = 0u; l < LSE_SEG; l++) {
    var s = 0.0;
    for (var c = l; c < p.C; c += LSE_SEG) { s += det_exp(x[base + c] - m); }
    part[l] = s;
  }
  for (var h = LSE_SEG / 2u; h > 0u; h = h >> 1u) {
    for (var l = 0u; l < h; l++) { part[l] = part[l] + part[l + h]; }
  }
  return m + det_log(part[0]);
}

// Element i of the log-probabilities: x itself, or with FROM_SCORES z - lse (lse: i's row's).
fn logp_at(i: u32, lse: f32) -> f32 {
  if (from_scores()) { return x[i] - lse; }
  return x[i];
}

fn lse_of(row: u32) -> f32 {
  if (from_scores()) { return row_lse(row); }
  return 0.0;
}

@compute @workgroup_size(64)
fn log_softmax_forward(@builtin(global_invocation_id) gid: vec3<u32>,
                       @builtin(num_workgroups) nwg: vec3<u32>) {
  let r = flat_index(gid, nwg);
  if (r >= p.outer * p.inner) { return; }
  let base = (r / p.inner) * p.C * p.inner + r % p.inner;
  var m = x[base];
  for (var c = 1u; c < p.C; c++) { m = max(m, x[base + c * p.inner]); }
  var s = 0.0;
  for (var c = 0u; c < p.C; c++) { s += det_exp(x[base + c * p.inner] - m); }
  let lse = m + det_log(s);
  for (var c = 0u; c < p.C; c++) { out[base + c * p.inner] = x[base + c * p.inner] - lse; }
}

@compute @workgroup_size(64)
fn log_softmax_backward(@builtin(global_invocation_id) gid: vec3<u32>,
                        @builtin(num_workgroups) nwg: vec3<u32>) {
  let r = flat_index(gid, nwg);
  if (r >= p.outer * p.inner) { return; }
  let base = (r / p.inner) * p.C * p.inner + r % p.inner;
  var s = 0.0;
  for (var c = 0u; c < p.C; c++) { s += y[base + c * p.inner]; }
  for (var c = 0u; c < p.C; c++) {
    let i = base + c * p.inner;
    out[i] = y[i] - det_exp(x[i]) * s;
  }
}

// 1.0 when argmax_c x[row, c] (the first maximum) is the row's label, else 0.0.
fn hit_of(row: u32, label: u32) -> f32 {
  return hit_lse(row, label, 0.0);
}

// hit_of on the log-probabilities logp_at(., lse) (FROM_SCORES: the values the head's
// forward would have written, so the same ties).
fn hit_lse(row: u32, label: u32, lse: f32) -> f32 {
  let base = row * p.C;
  var best = 0u;
  var bv = logp_at(base, lse);
  for (var c = 1u; c < p.C; c++) {
    let v = logp_at(base + c, lse);
    if (v > bv) {
      best = c;
      bv = v;
    }
  }
  return select(0.0, 1.0, best == label);
}

// The first c with the largest x[row, c], found by the whole workgroup (every thread calls
// it: uniform control flow). Each thread strides over C and the 256 candidates are reduced, so
// no thread loops C times (lavapipe caps a shader's loop iterations at 65,535 in all: a loop
// over 70,000 classes cut short the reductions after it).
fn row_argmax(lid: u32, row: u32) -> u32 {
  let base = row * p.C;
  var bi = NONE;
  var bv = 0.0;
  for (var c = lid; c < p.C; c += 256u) {
    if (bi == NONE || x[base + c] > bv) { bv = x[base + c]; bi = c; }
  }
  red_val[lid] = bv;
  red_idx[lid] = bi;
  workgroupBarrier();
  for (var half = 128u; half > 0u; half = half >> 1u) {
    if (lid < half) {
      let oi = red_idx[lid + half];
      let ov = red_val[lid + half];
      let mi = red_idx[lid];
      if (oi != NONE && (mi == NONE || ov > red_val[lid] || (ov == red_val[lid] && oi < mi))) {
        red_val[lid] = ov;
        red_idx[lid] = oi;
      }
    }
    workgroupBarrier();
  }
  let best = red_idx[0];
  workgroupBarrier();
  return best;
}

// Sums red_loss, red_hit, red_aux, red_den, red_bad over the workgroup into element 0 (every
// thread calls it: uniform control flow).
fn reduce_all(lid: u32) {
  workgroupBarrier();
  for (var half = 128u; half > 0u; half = half >> 1u) {
    if (lid < half) {
      red_loss[lid] += red_loss[lid + half];
      red_hit[lid] += red_hit[lid + half];
      red_aux[lid] += red_aux[lid + half];
      red_den[lid] += red_den[lid + half];
      red_bad[lid] += red_bad[lid + half];
    }
    workgroupBarrier();
  }
}

// The metrics of one step: the loss, and the accuracy or, when labels >= C were ignored,
// minus their count (a flag the trainer turns into an error).
fn write_metrics(loss: f32) {
  metrics[2u * st.slot] = loss;
  metrics[2u * st.slot + 1u] = select(red_hit[0] / f32(p.outer), -red_bad[0], red_bad[0] > 0.0);
}

fn class_weight(c: u32) -> f32 {
  if ((p.inner & 2u) != 0u) { return y[c]; }
  return 1.0;
}

// d loss / d x[b, c] of nll (0 for a label >= C).
fn nll_grad(c: u32, label: u32, keep: f32, spread: f32, scale: f32) -> f32 {
  let on = select(0.0, keep, c == label);
  return select(-(on * class_weight(c) + spread * class_weight(c)) * scale, 0.0, label >= p.C);
}

// x = log-probabilities [B, C], y = class weights [C] (when flag 2), out = dx [B, C], or with
// flag 8 (THROUGH_LOG_SOFTMAX) the gradient of the LogSoftmax's input z (x = log_softmax(z)),
// and with flag 16 (ALSO_DX) dx into gout as well.
@compute @workgroup_size(256)
fn nll(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
       @builtin(num_workgroups) nwg: vec3<u32>) {
  let B = p.outer;
  let C = p.C;
  let eps = p.eps;
  var loss = 0.0;
  var spread_sum = 0.0;
  var hit = 0.0;
  var den = 0.0;
  var bad = 0.0;
  for (var b = lid; b < B; b += 256u) {
    let label = labels[b];
    if (label >= C) {
      bad += 1.0;
      continue;
    }
    let wy = class_weight(label);
    let lse = lse_of(b);
    loss -= wy * logp_at(b * C + label, lse);
    den += wy;
    hit += hit_lse(b, label, lse);
    if (eps != 0.0) {
      for (var c = 0u; c < C; c++) { spread_sum -= class_weight(c) * logp_at(b * C + c, lse); }
    }
  }
  red_loss[lid] = loss;
  red_hit[lid] = hit;
  red_aux[lid] = spread_sum;
  red_den[lid] = den;
  red_bad[lid] = bad;
  reduce_all(lid);
  var d = 1.0;
  if ((p.inner & 1u) != 0u) { d = red_den[0]; }
  if (d == 0.0 && red_bad[0] > 0.0) { d = 1.0; }
  let scale = 1.0 / d;
  let keep = 1.0 - eps;
  let spread = eps / f32(C);
  let first = wid.x * 256u + lid;  // this thread's first element (several workgroups)
  let stride = nwg.x * 256u;
  if ((p.inner & THROUGH_LOG_SOFTMAX) != 0u && nwg.x > 1u) {
    // as below, a thread an element: its row's sum of g recomputed (the same order)
    for (var i = first; i < B * C; i += stride) {
      let label = labels[i / C];
      var s = 0.0;
      for (var c = 0u; c < C; c++) { s += nll_grad(c, label, keep, spread, scale); }
      let g = nll_grad(i % C, label, keep, spread, scale);
      let lp = logp_at(i, lse_of(i / C));
      out[i] = g - det_exp(lp) * s;
      if ((p.inner & ALSO_DX) != 0u) { gout[i] = g; }
      if (from_scores()) { gout[i] = lp; }
    }
  } else if ((p.inner & THROUGH_LOG_SOFTMAX) != 0u) {
    // x = log_softmax(z): out = dz = g - exp(x) * sum_c g (log_softmax_backward), a row a
    // thread, the same sums in the same order as that kernel.
    for (var b = lid; b < B; b += 256u) {
      let label = labels[b];
      var s = 0.0;
      for (var c = 0u; c < C; c++) { s += nll_grad(c, label, keep, spread, scale); }
      let lse = lse_of(b);
      for (var c = 0u; c < C; c++) {
        let i = b * C + c;
        let g = nll_grad(c, label, keep, spread, scale);
        let lp = logp_at(i, lse);
        out[i] = g - det_exp(lp) * s;
        if ((p.inner & ALSO_DX) != 0u) { gout[i] = g; }
        if (from_scores()) { gout[i] = lp; }
      }
    }
  } else {
    for (var i = first; i < B * C; i += stride) {
      out[i] = nll_grad(i % C, labels[i / C], keep, spread, scale);
    }
  }
  if (lid == 0u && wid.x == 0u) {
    write_metrics((keep * red_loss[0] + spread * red_aux[0]) * scale);
  }
}

// log(1 + exp(-a)) for a >= 0, accurate where exp(-a) is tiny (WGSL has no log1p).
fn log1p_exp_neg(a: f32) -> f32 {
  let z = det_exp(-a);
  if (z < 1e-3) { return z * (1.0 - z * (0.5 - z / 3.0)); }
  return det_log(1.0 + z);
}

// Element i's loss term of kind 0 (mse) or 1 (bce_with_logits) against the target 1 (``on``)
// or 0; writes its gradient times ``scale`` to out[i].
fn element_term(i: u32, on: bool, kind: u32, scale: f32) -> f32 {
  let v = x[i];
  let t = select(0.0, 1.0, on);
  if (kind == 0u) {
    let e = v - t;
    out[i] = 2.0 * e * scale;
    return e * e;
  }
  let z = det_exp(-abs(v));
  let s = select(z / (1.0 + z), 1.0 / (1.0 + z), v >= 0.0);
  out[i] = (s - t) * scale;
  return max(v, 0.0) - v * t + log1p_exp_neg(abs(v));
}

// Shared body of mse (kind 0) and bce_with_logits (kind 1): x = raw output [B, C], out = dx.
fn elementwise_loss(lid: u32, kind: u32) {
  let B = p.outer;
  let C = p.C;
  var n = 1.0;
  if ((p.inner & 1u) != 0u) { n = f32(B) * f32(C); }
  let scale = 1.0 / n;
  var loss = 0.0;
  var hit = 0.0;
  var bad = 0.0;
  for (var b = lid; b < B; b += 256u) {
    let label = labels[b];
    if (label >= C) {
      bad += 1.0;
      for (var c = 0u; c < C; c++) { out[b * C + c] = 0.0; }
      continue;
    }
    hit += hit_of(b, label);
    for (var c = 0u; c < C; c++) {
      loss += element_term(b * C + c, c == label, kind, scale);
    }
  }
  red_loss[lid] = loss;
  red_hit[lid] = hit;
  red_aux[lid] = 0.0;
  red_den[lid] = 0.0;
  red_bad[lid] = bad;
  reduce_all(lid);
  if (lid == 0u) {
    write_metrics(red_loss[0] * scale);
  }
}

@compute @workgroup_size(256)
fn mse(@builtin(local_invocation_index) lid: u32) {
  elementwise_loss(lid, 0u);
}

@compute @workgroup_size(256)
fn bce_with_logits(@builtin(local_invocation_index) lid: u32) {
  elementwise_loss(lid, 1u);
}

// ---- wide rows: one workgroup per row, then rows_total ------------------------------------

// The sum of v over the workgroup (every thread calls it; red_aux is free in *_rows).
fn wg_total(lid: u32, v: f32) -> f32 {
  red_aux[lid] = v;
  workgroupBarrier();
  for (var half = 128u; half > 0u; half = half >> 1u) {
    if (lid < half) { red_aux[lid] += red_aux[lid + half]; }
    workgroupBarrier();
  }
  let total = red_aux[0];
  workgroupBarrier();
  return total;
}

fn put_row(b: u32, loss: f32, hit: f32, aux: f32, den: f32, bad: f32) {
  rows[5u * b] = loss;
  rows[5u * b + 1u] = hit;
  rows[5u * b + 2u] = aux;
  rows[5u * b + 3u] = den;
  rows[5u * b + 4u] = bad;
}

// nll for row b = wid.x + wid.y * nwg.x: its gradient row (the batch's D from every label, as
// nll computes it) and its terms.
@compute @workgroup_size(256)
fn nll_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
  let B = p.outer;
  let C = p.C;
  let b = wid.x + wid.y * nwg.x;
  if (b >= B) { return; }
  var den_part = 0.0;
  var bad_part = 0.0;
  for (var t = lid; t < B; t += 256u) {
    if (labels[t] >= C) { bad_part += 1.0; } else { den_part += class_weight(labels[t]); }
  }
  let den = wg_total(lid, den_part);
  let bad = wg_total(lid, bad_part);
  let label = labels[b];
  let best = row_argmax(lid, b);
  var spread_part = 0.0;
  if (label < C && p.eps != 0.0) {
    for (var c = lid; c < C; c += 256u) { spread_part -= class_weight(c) * x[b * C + c]; }
  }
  let spread_sum = wg_total(lid, spread_part);
  var d = 1.0;
  if ((p.inner & 1u) != 0u) { d = den; }
  if (d == 0.0 && bad > 0.0) { d = 1.0; }
  let scale = 1.0 / d;
  let keep = 1.0 - p.eps;
  let spread = p.eps / f32(C);
  for (var c = lid; c < C; c += 256u) {
    let on = select(0.0, keep, c == label);
    out[b * C + c] = select(-(on * class_weight(c) + spread * class_weight(c)) * scale, 0.0,
                            label >= C);
  }
  if (lid == 0u) {
    if (label >= C) {
      put_row(b, 0.0, 0.0, 0.0, 0.0, 1.0);
    } else {
      let wy = class_weight(label);
      put_row(b, -wy * x[b * C + label], select(0.0, 1.0, best == label), spread_sum, wy, 0.0);
    }
  }
}

// mse (kind 0) or bce_with_logits (kind 1) for row b: its gradient row and its terms.
fn elementwise_row(wid: vec3<u32>, nwg: vec3<u32>, lid: u32, kind: u32) {
  let B = p.outer;
  let C = p.C;
  let b = wid.x + wid.y * nwg.x;
  if (b >= B) { return; }
  var n = 1.0;
  if ((p.inner & 1u) != 0u) { n = f32(B) * f32(C); }
  let scale = 1.0 / n;
  let label = labels[b];
  let best = row_argmax(lid, b);
  var part = 0.0;
  for (var c = lid; c < C; c += 256u) {
    if (label >= C) {
      out[b * C + c] = 0.0;
    } else {
      part += element_term(b * C + c, c == label, kind, scale);
    }
  }
  let loss = wg_total(lid, part);
  if (lid == 0u) {
    put_row(b, loss, select(0.0, 1.0, best == label && label < C), 0.0, 0.0,
            select(0.0, 1.0, label >= C));
  }
}

@compute @workgroup_size(256)
fn mse_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
  elementwise_row(wid, nwg, lid, 0u);
}

@compute @workgroup_size(256)
fn bce_with_logits_rows(@builtin(workgroup_id) wid: vec3<u32>,
                        @builtin(num_workgroups) nwg: vec3<u32>,
                        @builtin(local_invocation_index) lid: u32) {
  elementwise_row(wid, nwg, lid, 1u);
}

// The metrics from the rows' terms: flag 4 (elementwise) divides the loss by n as
// elementwise_loss does, else as nll does.
@compute @workgroup_size(256)
fn rows_total(@builtin(local_invocation_index) lid: u32) {
  var t = array<f32, 5>(0.0, 0.0, 0.0, 0.0, 0.0);
  for (var b = lid; b < p.outer; b += 256u) {
    for (var k = 0u; k < 5u; k++) { t[k] += rows[5u * b + k]; }
  }
  red_loss[lid] = t[0];
  red_hit[lid] = t[1];
  red_aux[lid] = t[2];
  red_den[lid] = t[3];
  red_bad[lid] = t[4];
  reduce_all(lid);
  if (lid != 0u) { return; }
  if ((p.inner & 4u) != 0u) {
    var n = 1.0;
    if ((p.inner & 1u) != 0u) { n = f32(p.outer) * f32(p.C); }
    write_metrics(red_loss[0] * (1.0 / n));
    return;
  }
  var d = 1.0;
  if ((p.inner & 1u) != 0u) { d = red_den[0]; }
  if (d == 0.0 && red_bad[0] > 0.0) { d = 1.0; }
  write_metrics(((1.0 - p.eps) * red_loss[0] + p.eps / f32(p.C) * red_aux[0]) * (1.0 / d));
}
