// Scaled dot-product attention as one op (ops/attention.py; rewrites/attention.py folds
// MatMul -> Softmax(last axis) -> MatMul into it), forward and backward:
//   S[z, i, j] = alpha_s * sum_d Q[z, i, d] K[z, j, d]      (i < TQ, j < TK, d < DQ)
//   P[z, i, j] = exp(S[z, i, j] - max_j S) / sum_j exp(...)  (softmax along j)
//   Y[z, i, e] = alpha_y * sum_j P[z, i, j] V[z, j, e]      (e < DV)
// z runs over the batch dims (up to 4, sizes p.zs; each tensor's batch strides q_b, k_b, v_b,
// y_b, none 0: no operand broadcasts). Q, K, V, Y are read and written through strides (the
// folded Transposes of a head split: Q[z, i, d] at offset(z, q_b) + i * q_r + d), so the
// layout ops around the products stay views. Rows are contiguous and every stride and width
// a multiple of 4 (ops/attention.layout): Q, K, V, dY and the outputs are read and written as
// vec4s, strides in vec4s (a thread's row of 16 values is 4 loads, not 16). P is this op's
// own: stored transposed, pt[(z * TK + j) * TQ + i], so that the threads of one z (one row i
// each) store and load neighbouring floats. Only the backward reads it.
// LANES threads a row (z, i) forward (1 to 8, ops/attention.lanes): each its q row in
// registers, two passes over its keys (the row's maximum and sum online, then P and Y), K
// and V rows read alike by the threads of a z with the same lane (one load serves them); the
// lanes' maxima,
// sums and partial Y rows meet in workgroup memory. The three dispatches of the products and
// the softmax were each 12-42 us on an H100 at the encoder's 28 x 16 x 28 per head (batch
// 64); they were dispatch- and latency-bound, not bound by their 3 MFLOP, and so is a thread
// a row there: its chain over the keys is the time, which the lanes cut.
// Backward (PyTorch's softmax and matmul gradients):
//   dP = alpha_y * dY V^T, D[z, i] = sum_j P dP, dS = P * (dP - D),
//   dQ = alpha_s * dS K, dK = alpha_s * dS^T Q, dV = alpha_y * P^T dY.
// `attention_dq`: LANES threads a row (z, i): D (stored in dsum for the next dispatch) and dQ.
// `attention_dkv`: LANES threads a key (z, j), the queries split: dK and dV, dP recomputed
// from dY and V.
// DQ, DV <= 64 (override constants, in vec4s DQ4 = DQ / 4, DV4: the loops over d and e are
// unrolled, the rows held in registers). p.want (backward): bit 0 dQ, 1 dK, 2 dV are stored
// (the others are not needed).

struct Params {
  TQ: u32, TK: u32, rows: u32, keys: u32,
  alpha_s: f32, alpha_y: f32, write_p: u32, want: u32,
  zs: vec4<u32>, q_b: vec4<u32>, k_b: vec4<u32>, v_b: vec4<u32>, y_b: vec4<u32>,
  q_r: u32, k_r: u32, v_r: u32, y_r: u32,
}

//!include index
//!include batch_dims
//!include detmath

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> k: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> v: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> dy: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> pt: array<f32>;
@group(0) @binding(6) var<storage, read_write> dsum: array<f32>;
// Y (attention_forward), dQ (attention_dq), dK (attention_dkv)
@group(0) @binding(7) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(8) var<storage, read_write> out2: array<vec4<f32>>;  // dV (attention_dkv)

override DQ4: u32 = 4u;
override DV4: u32 = 4u;
const DMAX4: u32 = 16u;
override U: u32 = 4u;  // keys (queries in attention_dkv) a loop step, 1 to 4
// Threads a row (a key in attention_dkv), 1, 2, 4 or 8 (ops/attention.py: more where the rows
// alone are too few threads for the GPU). Lane l of a row takes keys l, l + LANES, ... (dkv:
// queries); the lanes' partials meet in workgroup memory and are added in lane order, so every
// lane gets the same bits, on every host. With 1 the kernels are the one-thread-a-row ones.
override LANES: u32 = 1u;
const LOWEST: f32 = -3.4028234e38;  // the lowest finite float (rounded to it)

// The lanes' partials: 64 threads x 4 vec4 (LANES > 1).
var<workgroup> part: array<vec4<f32>, 256>;

// a . b in a fixed order of IEEE multiply-adds (WGSL's dot leaves the order to the
// implementation; with detmath's det_exp the kernels give the same bits on every host).
fn dot4(a: vec4<f32>, b: vec4<f32>) -> f32 {
  return fma(a.w, b.w, fma(a.z, b.z, fma(a.y, b.y, a.x * b.x)));
}

// The row's (max, sum of exp(s - max)) over all its lanes' keys from each lane's own (thread
// t, lane `lane` of its row): the lanes' maxima's maximum, then their sums rescaled to it.
fn merge_max_sum(t: u32, lane: u32, mx: f32, l: f32) -> vec2<f32> {
  if (LANES == 1u) { return vec2<f32>(mx, l); }
  part[t] = vec4<f32>(mx, l, 0.0, 0.0);
  workgroupBarrier();
  let first = t - lane;
  var m = LOWEST;
  for (var x = 0u; x < LANES; x++) { m = max(m, part[first + x].x); }
  var sum = 0.0;
  for (var x = 0u; x < LANES; x++) {
    let o = part[first + x];
    sum += o.y * det_exp(o.x - m);
  }
  workgroupBarrier();
  return vec2<f32>(m, sum);
}

// The sum of the row's lanes' x.
fn lane_total(t: u32, lane: u32, x: f32) -> f32 {
  if (LANES == 1u) { return x; }
  part[t] = vec4<f32>(x, 0.0, 0.0, 0.0);
  workgroupBarrier();
  var sum = 0.0;
  for (var y = 0u; y < LANES; y++) { sum += part[t - lane + y].x; }
  workgroupBarrier();
  return sum;
}

// The sums of the row's lanes' a[0 .. n) (n <= DMAX4 vec4), four vec4 at a time.
fn lane_sums(t: u32, lane: u32, a: array<vec4<f32>, DMAX4>, n: u32) -> array<vec4<f32>, DMAX4> {
  var sums = a;
  if (LANES == 1u) { return sums; }
  let first = 4u * (t - lane);
  for (var c = 0u; c < n; c += 4u) {
    for (var x = 0u; x < 4u; x++) {
      if (c + x < n) { part[4u * t + x] = a[c + x]; }
    }
    workgroupBarrier();
    for (var x = 0u; x < 4u; x++) {
      var v = vec4<f32>(0.0);
      for (var y = 0u; y < LANES; y++) { v += part[first + 4u * y + x]; }
      if (c + x < n) { sums[c + x] = v; }
    }
    workgroupBarrier();
  }
  return sums;
}

// alpha_s * q . k_j for the U keys j0, j0 + LANES, .. (past the last key: the last one again).
// U keys a step: their loads are in flight together (at batch 64 a few warps an SM run these
// kernels, so each thread's chain of loads over the keys is their time; ops/attention.py
// takes 1 where many rows keep the GPU busy).
fn scores(qr: array<vec4<f32>, DMAX4>, k0: u32, j0: u32) -> vec4<f32> {
  var sv = vec4<f32>(0.0);
  for (var u = 0u; u < U; u++) {
    let kj = k0 + min(j0 + u * LANES, p.TK - 1u) * p.k_r;
    var s = 0.0;
    for (var d = 0u; d < DQ4; d++) { s += dot4(qr[d], k[kj + d]); }
    sv[u] = s * p.alpha_s;
  }
  return sv;
}

@compute @workgroup_size(64)
fn attention_forward(@builtin(global_invocation_id) gid: vec3<u32>,
                     @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) t: u32) {
  let th = flat_index(gid, nwg);
  let lane = t % LANES;
  let live = th / LANES < p.rows;  // no return before the lanes meet (barriers)
  let r = min(th / LANES, p.rows - 1u);
  let z = r / p.TQ;
  let i = r % p.TQ;
  let zi = unflatten(z, p.zs);
  let q0 = offset(zi, p.q_b) + i * p.q_r;
  let k0 = offset(zi, p.k_b);
  let v0 = offset(zi, p.v_b);
  var qr: array<vec4<f32>, DMAX4>;
  for (var d = 0u; d < DQ4; d++) { qr[d] = q[q0 + d]; }
  var mx = LOWEST;
  var l = 0.0;
  for (var j0 = lane; j0 < p.TK; j0 += U * LANES) {  // the lane's max and sum(exp(s - max))
    let sv = scores(qr, k0, j0);
    for (var u = 0u; u < U; u++) {
      let s = sv[u];
      if (j0 + u * LANES < p.TK) {
        if (s > mx) {
          l = l * det_exp(mx - s) + 1.0;
          mx = s;
        } else {
          l += det_exp(s - mx);
        }
      }
    }
  }
  let row = merge_max_sum(t, lane, mx, l);
  mx = row.x;
  let inv = 1.0 / row.y;
  var acc: array<vec4<f32>, DMAX4>;
  for (var e = 0u; e < DV4; e++) { acc[e] = vec4<f32>(0.0); }
  let pt0 = z * p.TK * p.TQ + i;
  for (var j0 = lane; j0 < p.TK; j0 += U * LANES) {
    let sv = scores(qr, k0, j0);
    for (var u = 0u; u < U; u++) {
      let j = j0 + u * LANES;
      let pij = select(0.0, det_exp(sv[u] - mx) * inv, j < p.TK);  // 0 past the last key
      if (p.write_p != 0u && j < p.TK && live) { pt[pt0 + j * p.TQ] = pij; }
      let vj = v0 + min(j, p.TK - 1u) * p.v_r;
      for (var e = 0u; e < DV4; e++) { acc[e] = fma(vec4<f32>(pij), v[vj + e], acc[e]); }
    }
  }
  acc = lane_sums(t, lane, acc, DV4);
  let y0 = offset(zi, p.y_b) + i * p.y_r;
  for (var e = 0u; e < DV4; e++) {
    if (live && e % LANES == lane) { out[y0 + e] = p.alpha_y * acc[e]; }
  }
}

// dP[i, j] = g . v_j (g = alpha_y dY row) for the U keys j0, j0 + LANES, .. (as `scores`).
fn dscores(g: array<vec4<f32>, DMAX4>, v0: u32, j0: u32) -> vec4<f32> {
  var dp = vec4<f32>(0.0);
  for (var u = 0u; u < U; u++) {
    let vj = v0 + min(j0 + u * LANES, p.TK - 1u) * p.v_r;
    var s = 0.0;
    for (var e = 0u; e < DV4; e++) { s += dot4(g[e], v[vj + e]); }
    dp[u] = s;
  }
  return dp;
}

// dQ rows (into out) and D (dsum[z * TQ + i], for attention_dkv).
@compute @workgroup_size(64)
fn attention_dq(@builtin(global_invocation_id) gid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) t: u32) {
  let th = flat_index(gid, nwg);
  let lane = t % LANES;
  let live = th / LANES < p.rows;
  let r = min(th / LANES, p.rows - 1u);
  let z = r / p.TQ;
  let i = r % p.TQ;
  let zi = unflatten(z, p.zs);
  let k0 = offset(zi, p.k_b);
  let v0 = offset(zi, p.v_b);
  let y0 = offset(zi, p.y_b) + i * p.y_r;
  var g: array<vec4<f32>, DMAX4>;
  for (var e = 0u; e < DV4; e++) { g[e] = p.alpha_y * dy[y0 + e]; }
  let pt0 = z * p.TK * p.TQ + i;
  var dsm = 0.0;  // D = sum_j P dP
  for (var j0 = lane; j0 < p.TK; j0 += U * LANES) {
    let dp = dscores(g, v0, j0);
    for (var u = 0u; u < U; u++) {
      let j = min(j0 + u * LANES, p.TK - 1u);
      dsm = fma(select(0.0, pt[pt0 + j * p.TQ], j0 + u * LANES < p.TK), dp[u], dsm);
    }
  }
  dsm = lane_total(t, lane, dsm);
  if (live && lane == 0u) { dsum[r] = dsm; }
  if ((p.want & 1u) == 0u) { return; }  // no dQ wanted: D was all the next dispatch needs
  var acc: array<vec4<f32>, DMAX4>;
  for (var d = 0u; d < DQ4; d++) { acc[d] = vec4<f32>(0.0); }
  for (var j0 = lane; j0 < p.TK; j0 += U * LANES) {
    let dp = dscores(g, v0, j0);
    for (var u = 0u; u < U; u++) {
      let j = min(j0 + u * LANES, p.TK - 1u);
      let ds = select(0.0, pt[pt0 + j * p.TQ] * (dp[u] - dsm), j0 + u * LANES < p.TK);
      let kj = k0 + j * p.k_r;
      for (var d = 0u; d < DQ4; d++) { acc[d] = fma(vec4<f32>(ds), k[kj + d], acc[d]); }
    }
  }
  acc = lane_sums(t, lane, acc, DQ4);
  let q0 = offset(zi, p.q_b) + i * p.q_r;
  for (var d = 0u; d < DQ4; d++) {
    if (live && d % LANES == lane) { out[q0 + d] = p.alpha_s * acc[d]; }
  }
}

// dK (into out) and dV (out2) rows of key (z, j): the dS column recomputed as
// P * (alpha_y dY . V_j - D).
@compute @workgroup_size(64)
fn attention_dkv(@builtin(global_invocation_id) gid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) t: u32) {
  let th = flat_index(gid, nwg);
  let lane = t % LANES;
  let live = th / LANES < p.keys;
  let r = min(th / LANES, p.keys - 1u);
  let z = r / p.TK;
  let j = r % p.TK;
  let zi = unflatten(z, p.zs);
  let q0 = offset(zi, p.q_b);
  let y0 = offset(zi, p.y_b);
  let vj = offset(zi, p.v_b) + j * p.v_r;
  var vr: array<vec4<f32>, DMAX4>;
  for (var e = 0u; e < DV4; e++) { vr[e] = v[vj + e]; }
  var ak: array<vec4<f32>, DMAX4>;
  var av: array<vec4<f32>, DMAX4>;
  for (var d = 0u; d < DQ4; d++) { ak[d] = vec4<f32>(0.0); }
  for (var e = 0u; e < DV4; e++) { av[e] = vec4<f32>(0.0); }
  let pt0 = (z * p.TK + j) * p.TQ;
  for (var i0 = lane; i0 < p.TQ; i0 += U * LANES) {
    for (var u = 0u; u < U; u++) {  // U queries a step (past the last: the last, weight 0)
      let i = min(i0 + u * LANES, p.TQ - 1u);
      let pij = select(0.0, pt[pt0 + i], i0 + u * LANES < p.TQ);
      let yi = y0 + i * p.y_r;
      var dp = 0.0;
      for (var e = 0u; e < DV4; e++) {
        let gy = dy[yi + e];
        dp += dot4(gy, vr[e]);
        av[e] = fma(vec4<f32>(pij), gy, av[e]);
      }
      let ds = pij * (p.alpha_y * dp - dsum[z * p.TQ + i]);
      let qi = q0 + i * p.q_r;
      for (var d = 0u; d < DQ4; d++) { ak[d] = fma(vec4<f32>(ds), q[qi + d], ak[d]); }
    }
  }
  let kj = offset(zi, p.k_b) + j * p.k_r;
  if ((p.want & 2u) != 0u) {
    ak = lane_sums(t, lane, ak, DQ4);
    for (var d = 0u; d < DQ4; d++) {
      if (live && d % LANES == lane) { out[kj + d] = p.alpha_s * ak[d]; }
    }
  }
  if ((p.want & 4u) != 0u) {
    av = lane_sums(t, lane, av, DV4);
    for (var e = 0u; e < DV4; e++) {
      if (live && e % LANES == lane) { out2[vj + e] = p.alpha_y * av[e]; }
    }
  }
}
