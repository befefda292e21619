// BatchNormalization over NC(HW) with PyTorch's training semantics (Ioffe & Szegedy 2015):
// training normalises with the batch mean and biased variance and updates the running statistics
// with the unbiased variance: running = running*momentum + batch*(1 - momentum), momentum being
// ONNX's attribute (= 1 - PyTorch's momentum). Eval normalises with the running statistics.
// gamma, beta and the running statistics live in the flat weight buffer P, the gradients in G,
// at element offsets given in Params. save = [mean[C], invstd[C]] of the last forward.
// Per-channel sums on GPUs are two-level so that a big GPU gets enough workgroups: workgroup
// (c, k) sums part k of channel c into part[] (c folded into x and z past 65535 channels), then
// a finish kernel adds the `parts` partial sums (one workgroup a channel: forward_fused,
// backward_fused). CPU adapters sum without barriers, a thread a block (block_stats, block_dy;
// lib/bn_blocks.wgsl).
//   sum_x -> mean_finish (mean m0), sum_sq -> var_finish (m0 corrected, invstd, running
//   statistics: correct_mean), or on
//   GPU adapters stats_parts -> stats_finish (one pass over x),
//   sum_dy -> dy_finish: G[dgamma] = sum(dy * xhat), G[dbeta] = sum(dy),
//   backward_input: dx = gamma*invstd * (dy - dbeta/M - xhat*dgamma/M), M = outer*inner

struct Params {
  outer: u32, C: u32, inner: u32, gamma: u32,
  beta: u32, rmean: u32, rvar: u32, parts: u32,
  eps: f32, momentum: f32, mask: u32, want_dx: u32,
  relu: u32, bw: u32, bg: u32, bpp: u32,
  clip: u32, lo: f32, hi: f32, _p0: u32,
}
// want_dx: backward_fused writes dx (else only the gamma / beta gradients).
// relu (normalize, forward_fused): y = max(y, 0), an in-place ReLU after this layer fused here
// (the same max as elementwise.wgsl's relu_forward: the same floats).
// mask (backward_input): dx = 0 where x <= 0 (x is the output of an in-place ReLU whose backward
// the plan fused here).
// clip: a Clip(lo, hi) that alone reads this layer's output y is fused here (fusion.clips_after):
// normalize / forward_fused also write its output min(max(y, lo), hi) (unary.wgsl's Clip: the
// same floats) into aux; the backward kernels read the Clip's output gradient as dy, each value
// kept where lo <= y <= hi (aux = y: torch.clamp's gradient, as unary.wgsl's), so neither the
// Clip's dispatches nor y's gradient are made.
// bw, bg, bpp: the blocks of the CPU adapters' kernels (block_stats, block_dy; lib/bn_blocks):
// width along the inner axis, planes a block, blocks a plane; parts blocks a channel.

//!include index

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> dy: array<f32>;
@group(0) @binding(3) var<storage, read_write> P: array<f32>;
@group(0) @binding(4) var<storage, read_write> save: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;
@group(0) @binding(6) var<storage, read_write> G: array<f32>;
@group(0) @binding(7) var<storage, read_write> part: array<f32>;  // ops/batchnorm._part
@group(0) @binding(8) var<storage, read_write> aux: array<f32>;  // clip: its output / y

const WG: u32 = 256u;  // the summing kernels' workgroup
alias RedT = vec2<f32>;  // two sums at once (x: the first, y: the second)
var<workgroup> red: array<RedT, 256>;
//!include wg_reduce
//!include bn_blocks
//!include moved_mean

fn at(c: u32, e: u32) -> u32 {
  return ((e / p.inner) * p.C + c) * p.inner + e % p.inner;
}

// dy[i], or with a fused Clip its gradient: kept where lo <= y <= hi
fn dy_at(i: u32) -> f32 {
  if (p.clip == 0u) { return dy[i]; }
  let y = aux[i];
  return select(0.0, dy[i], p.lo <= y && y <= p.hi);
}

fn dy4(i: vec4<u32>) -> vec4<f32> {
  return vec4<f32>(dy_at(i.x), dy_at(i.y), dy_at(i.z), dy_at(i.w));
}

// out[i] = y, and the fused Clip's output
fn put(i: u32, y: f32) {
  out[i] = y;
  if (p.clip != 0u) { aux[i] = min(max(y, p.lo), p.hi); }
}

// sum_{k < parts} part[base + k*step]: four independent running sums, so that a GPU has four
// loads in flight instead of one (the finish kernels are latency-bound: one thread a channel).
fn sum_parts(base: u32, step: u32) -> f32 {
  var s4 = vec4<f32>(0.0);
  var k = 0u;
  for (; k + 4u <= p.parts; k += 4u) {
    let e = base + k * step;
    s4 += vec4<f32>(part[e], part[e + step], part[e + 2u * step], part[e + 3u * step]);
  }
  var s = (s4.x + s4.y) + (s4.z + s4.w);
  for (; k < p.parts; k++) { s += part[base + k * step]; }
  return s;
}

// The element range [lo, hi) of the batch-and-space axis that workgroup part k sums.
fn part_range(k: u32) -> vec2<u32> {
  let M = p.outer * p.inner;
  let chunk = (M + p.parts - 1u) / p.parts;
  return vec2<u32>(k * chunk, min(M, (k + 1u) * chunk));
}

@compute @workgroup_size(256)
fn sum_x(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
  let c = channel_of(wid, nwg);
  if (c >= p.C) { return; }  // uniform: the whole workgroup
  red[lid] = vec2<f32>(thread_sum_x(c, part_range(wid.y), lid), 0.0);
  wg_tree_sum(lid);
  if (lid == 0u) { part[c * p.parts + wid.y] = red[0].x; }
}

@compute @workgroup_size(64)
fn mean_finish(@builtin(global_invocation_id) gid: vec3<u32>) {
  let c = gid.x;
  if (c >= p.C) { return; }
  save[c] = sum_parts(c * p.parts, 1u) / f32(p.outer * p.inner);
}

@compute @workgroup_size(256)
fn sum_sq(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
  let c = channel_of(wid, nwg);
  if (c >= p.C) { return; }  // uniform: the whole workgroup
  red[lid] = thread_dev(c, part_range(wid.y), lid, save[c]);
  wg_tree_sum(lid);
  if (lid == 0u) {
    part[c * p.parts + wid.y] = red[0].x;
    part[(p.C + c) * p.parts + wid.y] = red[0].y;
  }
}

@compute @workgroup_size(64)
fn var_finish(@builtin(global_invocation_id) gid: vec3<u32>) {
  let c = gid.x;
  if (c >= p.C) { return; }
  correct_mean(c, sum_parts(c * p.parts, 1u), sum_parts((p.C + c) * p.parts, 1u));
}

// save[c] (the mean m0 as summed) moved by the deviations' sum d = sum (x - m0), and invstd and
// the running statistics from q = sum (x - m0)^2 about the moved mean (lib/moved_mean).
fn correct_mean(c: u32, q: f32, d: f32) {
  let v = moved(save[c], q, d);
  save[c] = v.x;
  finish_var(c, v.y);
}

// (m, sum (x - m)^2) for m = m0 + d / M: correct_mean's arithmetic (forward_fused's too).
fn moved(m0: f32, q: f32, d: f32) -> vec2<f32> {
  return moved_mean(m0, q, d, f32(p.outer * p.inner));
}

// One pass over x for the statistics on GPU adapters (ops/batchnorm.py, Builder.BN_STATS_PARTS):
// workgroup (c, k) writes part k's sum s_k (sum_x's), its mean a_k = s_k / n_k as rounded, and
// the squares and the sum of x - a_k (its elements read a second time, from cache): part[4
// (c parts + k) + 0..3] = (s_k, a_k, q_k, r_k). stats_finish adds them: m0 = sum s_k / M
// (sum_x -> mean_finish's bits), and about m0 q = sum_k q_k + n_k (a_k - m0)^2 + 2 (a_k - m0)
// r_k and d = sum_k r_k + n_k (a_k - m0), which are sum (x - m0)^2 and sum (x - m0) exactly in
// exact arithmetic (then correct_mean): r_k = -n_k (a_k's rounding error) carries that error
// out to second order (Chan, Golub & LeVeque 1979's pairwise update of the sums of
// squares, with the parts' means as rounded). Two dispatches and one read of x from memory
// instead of sum_x, mean_finish, sum_sq, var_finish's four and two.
@compute @workgroup_size(256)
fn stats_parts(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
  let c = channel_of(wid, nwg);
  if (c >= p.C) { return; }  // uniform: the whole workgroup
  let r = part_range(wid.y);
  red[lid] = vec2<f32>(thread_sum_x(c, r, lid), 0.0);
  wg_tree_sum(lid);
  let s = red[0].x;
  workgroupBarrier();  // everyone read red[0]
  let a = s / f32(max(part_count(r), 1u));
  red[lid] = thread_dev(c, r, lid, a);
  wg_tree_sum(lid);
  if (lid == 0u) {
    let at = 4u * (c * p.parts + wid.y);
    part[at] = s;
    part[at + 1u] = a;
    part[at + 2u] = red[0].x;
    part[at + 3u] = red[0].y;
  }
}

// The elements in part range r (0 for an empty part past the end).
fn part_count(r: vec2<u32>) -> u32 { return select(0u, r.y - r.x, r.y > r.x); }

// Part k of channel c's (sum (x - m0)^2, sum (x - m0)) from its (a_k, q_k, r_k): with
// e = a_k - m0, (q_k + n_k e^2 + 2 e r_k, r_k + n_k e) ((0, 0) when empty).
fn part_about(c: u32, k: u32, m0: f32) -> vec2<f32> {
  let at = 4u * (c * p.parts + k);
  let n = f32(part_count(part_range(k)));
  let e = part[at + 1u] - m0;
  let r = part[at + 3u];
  return select(vec2<f32>(0.0), vec2<f32>(part[at + 2u] + n * e * e + 2.0 * e * r, r + n * e),
                n > 0.0);
}

@compute @workgroup_size(64)
fn stats_finish(@builtin(global_invocation_id) gid: vec3<u32>) {
  let c = gid.x;
  if (c >= p.C) { return; }
  let m0 = sum_parts(4u * c * p.parts, 4u) / f32(p.outer * p.inner);
  save[c] = m0;
  var s01 = vec4<f32>(0.0);  // four independent sums: four parts' loads in flight
  var s23 = vec4<f32>(0.0);
  var k = 0u;
  for (; k + 4u <= p.parts; k += 4u) {
    s01 += vec4<f32>(part_about(c, k, m0), part_about(c, k + 1u, m0));
    s23 += vec4<f32>(part_about(c, k + 2u, m0), part_about(c, k + 3u, m0));
  }
  var s = (s01.xy + s01.zw) + (s23.xy + s23.zw);
  for (; k < p.parts; k++) { s += part_about(c, k, m0); }
  correct_mean(c, s.x, s.y);
}

// invstd (save) and the running statistics of channel c from q = sum (x - mean)^2.
fn finish_var(c: u32, q: f32) {
  let M = p.outer * p.inner;
  save[p.C + c] = inverseSqrt(q / f32(M) + p.eps);
  let var_u = q / f32(max(M, 2u) - 1u);
  P[p.rmean + c] = P[p.rmean + c] * p.momentum + save[c] * (1.0 - p.momentum);
  P[p.rvar + c] = P[p.rvar + c] * p.momentum + var_u * (1.0 - p.momentum);
}

@compute @workgroup_size(64)
fn stats_eval(@builtin(global_invocation_id) gid: vec3<u32>) {
  let c = gid.x;
  if (c >= p.C) { return; }
  save[c] = P[p.rmean + c];
  save[p.C + c] = inverseSqrt(P[p.rvar + c] + p.eps);
}

@compute @workgroup_size(64)
fn normalize(@builtin(global_invocation_id) gid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>) {
  let n = p.outer * p.C * p.inner;
  let S = grid_stride(nwg);
  let i0 = flat_index(gid, nwg);
  if (S >= n) {  // a thread per element (CPU adapters)
    if (i0 < n) { put(i0, normalized(i0, x[i0])); }
    return;
  }
  // grid-stride, elements i + q*S (q < 4) an iteration: their loads are issued together
  for (var i = i0; i < n; i += 4u * S) {
    let e = min(vec4<u32>(i) + vec4<u32>(0u, 1u, 2u, 3u) * S, vec4<u32>(n - 1u));
    let v = vec4<f32>(x[e.x], x[e.y], x[e.z], x[e.w]);
    for (var q = 0u; q < 4u; q++) { if (i + q * S < n) { put(e[q], normalized(e[q], v[q])); } }
  }
}

fn normalized(i: u32, xi: f32) -> f32 {
  let c = (i / p.inner) % p.C;
  return normalized_c(c, xi, save[c], save[p.C + c]);
}

fn normalized_c(c: u32, xi: f32, mean: f32, invstd: f32) -> f32 {
  let y = (xi - mean) * invstd * P[p.gamma + c] + P[p.beta + c];
  if (p.relu != 0u) { return max(y, 0.0); }
  return y;
}

@compute @workgroup_size(256)
fn sum_dy(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
  let c = channel_of(wid, nwg);
  if (c >= p.C) { return; }  // uniform: the whole workgroup
  let r = part_range(wid.y);
  let t = thread_sum_dy(c, r, lid);
  red[lid] = t;
  wg_tree_sum(lid);
  if (lid == 0u) {
    part[2u * (c * p.parts + wid.y)] = red[0].x;
    part[2u * (c * p.parts + wid.y) + 1u] = red[0].y;
  }
}

@compute @workgroup_size(64)
fn dy_finish(@builtin(global_invocation_id) gid: vec3<u32>) {
  let c = gid.x;
  if (c >= p.C) { return; }
  G[p.beta + c] = sum_parts(2u * c * p.parts, 2u);
  G[p.gamma + c] = sum_parts(2u * c * p.parts + 1u, 2u);
}

@compute @workgroup_size(64)
fn backward_input(@builtin(global_invocation_id) gid: vec3<u32>,
                  @builtin(num_workgroups) nwg: vec3<u32>) {
  let n = p.outer * p.C * p.inner;
  let M = f32(p.outer * p.inner);
  let S = grid_stride(nwg);
  let i0 = flat_index(gid, nwg);
  if (S >= n) {  // a thread per element (CPU adapters)
    if (i0 < n) { out[i0] = input_grad(i0, x[i0], dy_at(i0), M); }
    return;
  }
  // grid-stride, elements i + q*S (q < 4) an iteration: their loads are issued together
  for (var i = i0; i < n; i += 4u * S) {
    let e = min(vec4<u32>(i) + vec4<u32>(0u, 1u, 2u, 3u) * S, vec4<u32>(n - 1u));
    let xv = vec4<f32>(x[e.x], x[e.y], x[e.z], x[e.w]);
    let dv = dy4(e);
    for (var q = 0u; q < 4u; q++) {
      if (i + q * S < n) { out[e[q]] = input_grad(e[q], xv[q], dv[q], M); }
    }
  }
}

fn input_grad(i: u32, xi: f32, dyi: f32, M: f32) -> f32 {
  let c = (i / p.inner) % p.C;
  return input_grad_c(c, xi, dyi, M, G[p.beta + c], G[p.gamma + c]);
}

// dx of one element of channel c; dbeta = sum dy, dgamma = sum dy * xhat over the channel.
fn input_grad_c(c: u32, xi: f32, dyi: f32, M: f32, dbeta: f32, dgamma: f32) -> f32 {
  let invstd = save[p.C + c];
  let xhat = (xi - save[c]) * invstd;
  let v = P[p.gamma + c] * invstd * (dyi - dbeta / M - xhat * dgamma / M);
  return select(0.0, v, p.mask == 0u || xi > 0.0);
}

// ---- per-thread partial sums over the elements [r.x, r.y) of channel c (stride 256) ---------
// Four elements an iteration, loaded before they are added: four loads in flight. Blocked
// (two-level) sums: BLOCK iterations add into a fresh block sum, which is then added to the
// running total. With one part per channel (CPU adapters) a thread adds thousands of
// elements per lane; added in one sequence their rounding error grew with the count (a
// BatchNorm's bias gradient over N*H*W = 1M was 2.9e-6 off, relative, against the float64 sum
// of the same dy); blocked it grows with BLOCK + count / BLOCK. (Kahan's compensation was
// tried: Mesa's compiler folds it away, as any compiler may that treats f32 adds as
// reassociable; blocking needs no such promise.)

const BLOCK: u32 = 32u;  // iterations (of 1024 elements per workgroup) per block sum

fn thread_sum_x(c: u32, r: vec2<u32>, lid: u32) -> f32 {
  var s4 = vec4<f32>(0.0);
  var e = r.x + lid;
  while (e + 768u < r.y) {
    var b4 = vec4<f32>(0.0);
    for (var k = 0u; k < BLOCK && e + 768u < r.y; k++) {
      b4 += vec4<f32>(x[at(c, e)], x[at(c, e + 256u)], x[at(c, e + 512u)], x[at(c, e + 768u)]);
      e += 1024u;
    }
    s4 += b4;
  }
  for (; e < r.y; e += 256u) { s4.x += x[at(c, e)]; }
  return (s4.x + s4.y) + (s4.z + s4.w);
}

// (sum (x - a)^2, sum (x - a)) over the thread's elements: about the first mean m0 (sum_sq,
// forward_fused: then correct_mean) or about a part's own mean (stats_parts).
fn thread_dev(c: u32, r: vec2<u32>, lid: u32, a: f32) -> vec2<f32> {
  var q4 = vec4<f32>(0.0);
  var d4 = vec4<f32>(0.0);
  var e = r.x + lid;
  while (e + 768u < r.y) {
    var b4 = vec4<f32>(0.0);
    var bd4 = vec4<f32>(0.0);
    for (var k = 0u; k < BLOCK && e + 768u < r.y; k++) {
      let d = vec4<f32>(x[at(c, e)], x[at(c, e + 256u)], x[at(c, e + 512u)],
                        x[at(c, e + 768u)]) - a;
      b4 += d * d;
      bd4 += d;
      e += 1024u;
    }
    q4 += b4;
    d4 += bd4;
  }
  for (; e < r.y; e += 256u) {
    let d = x[at(c, e)] - a;
    q4.x += d * d;
    d4.x += d;
  }
  return vec2<f32>((q4.x + q4.y) + (q4.z + q4.w), (d4.x + d4.y) + (d4.z + d4.w));
}

// (sum dy, sum dy * xhat) with the saved mean / invstd.
fn thread_sum_dy(c: u32, r: vec2<u32>, lid: u32) -> vec2<f32> {
  let mean = save[c];
  let invstd = save[p.C + c];
  var s4 = vec4<f32>(0.0);
  var sx4 = vec4<f32>(0.0);
  var e = r.x + lid;
  while (e + 768u < r.y) {
    var b4 = vec4<f32>(0.0);
    var bx4 = vec4<f32>(0.0);
    for (var k = 0u; k < BLOCK && e + 768u < r.y; k++) {
      let i = vec4<u32>(at(c, e), at(c, e + 256u), at(c, e + 512u), at(c, e + 768u));
      let d = dy4(i);
      b4 += d;
      bx4 += d * (vec4<f32>(x[i.x], x[i.y], x[i.z], x[i.w]) - mean) * invstd;
      e += 1024u;
    }
    s4 += b4;
    sx4 += bx4;
  }
  for (; e < r.y; e += 256u) {
    let i = at(c, e);
    let d = dy_at(i);
    s4.x += d;
    sx4.x += d * (x[i] - mean) * invstd;
  }
  return vec2<f32>((s4.x + s4.y) + (s4.z + s4.w), (sx4.x + sx4.y) + (sx4.z + sx4.w));
}

// ---- CPU adapters: a thread a (channel, block), no workgroup memory (lib/bn_blocks.wgsl) ----
//   block_stats -> block_finish (mean, invstd, running statistics) -> normalize;
//   block_dy -> dy_block_finish (dbeta, dgamma) -> backward_input.

@compute @workgroup_size(64)
fn block_stats(@builtin(global_invocation_id) gid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = flat_index(gid, nwg);
  if (t >= p.C * p.parts) { return; }
  let c = t / p.parts;
  let b = block_of(t % p.parts);
  let K = x[c * p.inner];  // the channel's shift: its first element
  let s = block_sum(c, b, K, 0.0, false);
  part[2u * t] = s;
  part[2u * t + 1u] = block_sum(c, b, K, s / block_count(b), true);
}

@compute @workgroup_size(64)
fn block_finish(@builtin(global_invocation_id) gid: vec3<u32>) {
  let c = gid.x;
  if (c >= p.C) { return; }
  let m = sum_blocks(2u * c * p.parts) / f32(p.outer * p.inner);  // mean - K
  save[c] = x[c * p.inner] + m;
  finish_var(c, sum_blocks(2u * c * p.parts + 1u) + between_blocks(c, m));
}

@compute @workgroup_size(64)
fn block_dy(@builtin(global_invocation_id) gid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = flat_index(gid, nwg);
  if (t >= p.C * p.parts) { return; }
  let s = block_sum_dy(t / p.parts, block_of(t % p.parts));
  part[2u * t] = s.x;
  part[2u * t + 1u] = s.y;
}

@compute @workgroup_size(64)
fn dy_block_finish(@builtin(global_invocation_id) gid: vec3<u32>) {
  let c = gid.x;
  if (c >= p.C) { return; }
  G[p.beta + c] = sum_blocks(2u * c * p.parts);
  G[p.gamma + c] = sum_blocks(2u * c * p.parts + 1u);
}

// ---- one workgroup a channel, every step in one dispatch (GPUs, when parts == 1) ------------
// The same arithmetic as the part kernels with parts == 1 (sum_x -> mean_finish -> sum_sq ->
// var_finish -> normalize; sum_dy -> dy_finish -> backward_input), so results are identical.

@compute @workgroup_size(256)
fn forward_fused(@builtin(workgroup_id) wid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
  let c = channel_of(wid, nwg);
  if (c >= p.C) { return; }  // uniform: the whole workgroup
  let r = part_range(0u);
  red[lid] = vec2<f32>(thread_sum_x(c, r, lid), 0.0);
  wg_tree_sum(lid);
  let mean = red[0].x / f32(p.outer * p.inner);
  if (lid == 0u) { save[c] = mean; }
  workgroupBarrier();  // everyone read red[0]
  red[lid] = thread_dev(c, r, lid, mean);
  wg_tree_sum(lid);
  if (lid == 0u) { correct_mean(c, red[0].x, red[0].y); }
  let v = moved(mean, red[0].x, red[0].y);
  let invstd = inverseSqrt(v.y / f32(p.outer * p.inner) + p.eps);  // = finish_var's
  for (var e = r.x + lid; e < r.y; e += 256u) {
    let i = at(c, e);
    put(i, normalized_c(c, x[i], v.x, invstd));
  }
}

@compute @workgroup_size(256)
fn backward_fused(@builtin(workgroup_id) wid: vec3<u32>,
                  @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
  let c = channel_of(wid, nwg);
  if (c >= p.C) { return; }  // uniform: the whole workgroup
  let r = part_range(0u);
  let t = thread_sum_dy(c, r, lid);
  red[lid] = t;
  wg_tree_sum(lid);
  let dbeta = red[0].x;
  let dgamma = red[0].y;
  if (lid == 0u) {
    G[p.beta + c] = dbeta;
    G[p.gamma + c] = dgamma;
  }
  if (p.want_dx == 0u) { return; }
  let M = f32(p.outer * p.inner);
  for (var e = r.x + lid; e < r.y; e += 256u) {
    let i = at(c, e);
    out[i] = input_grad_c(c, x[i], dy_at(i), M, dbeta, dgamma);
  }
}
