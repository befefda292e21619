// LSTM and GRU (ONNX, layout 0, default activations; GRU with linear_before_reset = 1) forward
// and backpropagation through time. X [T, N, I], W [D, G*H, I], R [D, G*H, H], B [D, 2*G*H];
// gates in ONNX order (LSTM i, o, f, c: G = 4; GRU z, r, h: G = 3). Direction d runs its step s
// on time t = s (forward) or T - 1 - s (reverse, and the second direction of bidirectional).
// Buffers in step order:
//   xp    [D, T, N, G*H]  x-projections X W^T + Wb (+ Rb, except GRU's h gate), by TIME t
//   hs/cs [D, T+1, N, H]  hidden / cell state before step 0 (the initial state) and after each step
//   gates [D, T, N, 4H]   LSTM: i, o, f, c~ (activated); GRU: z, r, n, hn = R_h h + Rb_h
//   dg    [D, T, N, 4H]   pre-activation gradients: LSTM the 4 gates; GRU z, r, n (W side) and
//                         r * da_n (R side of the h gate, column 3H + j): rcol(q) maps R rows.
//                         Backward flags 64: written over gates (bound as c; unit j of step s
//                         reads its four gates, then writes its four dg at the same offsets)
// LSTM forward flags 64 (one direction, not reversed, so t = s): xp is the gates buffer (bound
// as c), unit j of step s reading its four x-projections before writing its four gates there.
//   carry [D, N, H]       LSTM: dc of the later step; GRU: dh * z of the later step
// One dispatch for the whole sequence forward (`forward_seq`) and one backward (`backward_seq`),
// a workgroup per (d, n) stepping through time; unit j reads dh's R part of the later step
// from dg, so no separate reduction. With H <= SEQ_H the workgroup first copies the row every
// unit's dot product reads (h of the step before; the later step's dg) into workgroup memory
// (`row`): one storage load a thread instead of one per multiply-add (those loads of
// read_write buffers, written by the step before, are not cached near the cores). The
// *_seq_wide kernels (flags 16) load it from storage once a dispatch: each unit then writes its
// h (forward) or dg (backward) into `row` itself, so a step waits on workgroup barriers only.

struct Params {
  T: u32, N: u32, I: u32, H: u32,
  D: u32, G: u32, s: u32, flags: u32,
  rev0: u32, rshift: u32, steps: u32, _p1: u32,
}

//!include index
//!include detmath

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read> r: array<f32>;
@group(0) @binding(4) var<storage, read> bias: array<f32>;
@group(0) @binding(5) var<storage, read> dy: array<f32>;
@group(0) @binding(6) var<storage, read_write> a: array<f32>;
@group(0) @binding(7) var<storage, read_write> b: array<f32>;
@group(0) @binding(8) var<storage, read_write> c: array<f32>;
@group(0) @binding(9) var<storage, read_write> out: array<f32>;

const SEQ_H = 256u;
// 4 * SEQ_H: forward, h of (d, n) before the step (its first H); backward, dg of (d, n)'s
// later step (4 * H)
var<workgroup> row: array<f32, 1024>;
// 4 * SEQ_H, the *_seq_wide kernels (flags 16): forward, R h of every gate row q; backward,
// per gate g and unit j the part of dh's R sum over that gate's rows
var<workgroup> rsum: array<f32, 1024>;

// flags 32 (the *_seq_wide kernels; H a multiple of 4, at most 64, so G * H <= 256): thread lid
// keeps the H values of R its dot product reads in registers for the whole dispatch (forward:
// row q = lid; backward: gate g = lid / H's column j = lid % H), RV = H / 4 vec4 of them. Only
// constant indices into rr (a dynamically indexed array would live in memory, not registers).
override RV: u32 = 16u;
var<private> rr: array<vec4<f32>, 16>;

// The *_seq_wide kernels with registers (flags 32) run NB samples n0 .. n0 + NB - 1 of one
// direction a workgroup (rnn.py `_rows`: fewer workgroups resident at once, each R value in
// registers used NB times a step). Sample n0 + `slot` keeps its row at slot * H (forward) or
// slot * 4H (backward) of `row` and its rsum at slot * G * H: NB * 4 * H <= 1024.
override NB: u32 = 1u;
var<private> slot: u32 = 0u;

// flags 128 (LSTM *_seq_wide with NB * H <= 256, so a thread owns at most one unit: u = lid):
// the unit's values that do not depend on the recurrence are loaded one step ahead, at the end
// of the step before, into `pre` (forward: the step's four x-projections; backward: its four
// saved gates) and `pre_c` (backward: the cell after and before the step, and dY), so their
// loads are in flight across the barriers and the R sums instead of on the step's serial path;
// and the unit's cell (forward) or dc carry (backward) stays in `held` from step to step
// instead of a store and a load of storage. The same floats in the same order.
var<private> pre: vec4<f32>;
var<private> pre_c: vec3<f32>;
var<private> held: f32;

fn ahead() -> bool { return (p.flags & 128u) != 0u; }

// r[at], r[at + step], r[at + 2 step], r[at + 3 step]
fn r4(at: u32, step: u32) -> vec4<f32> {
  return vec4<f32>(r[at], r[at + step], r[at + 2u * step], r[at + 3u * step]);
}

// rr[i] = R's values at base + (4 i + c) * step, c = 0..3, for i < RV
fn load_rr(base: u32, step: u32) {
  let v = 4u * step;
  rr[0] = r4(base, step);
  if (RV > 1u) { rr[1] = r4(base + v, step); }
  if (RV > 2u) { rr[2] = r4(base + 2u * v, step); }
  if (RV > 3u) { rr[3] = r4(base + 3u * v, step); }
  if (RV > 4u) { rr[4] = r4(base + 4u * v, step); }
  if (RV > 5u) { rr[5] = r4(base + 5u * v, step); }
  if (RV > 6u) { rr[6] = r4(base + 6u * v, step); }
  if (RV > 7u) { rr[7] = r4(base + 7u * v, step); }
  if (RV > 8u) { rr[8] = r4(base + 8u * v, step); }
  if (RV > 9u) { rr[9] = r4(base + 9u * v, step); }
  if (RV > 10u) { rr[10] = r4(base + 10u * v, step); }
  if (RV > 11u) { rr[11] = r4(base + 11u * v, step); }
  if (RV > 12u) { rr[12] = r4(base + 12u * v, step); }
  if (RV > 13u) { rr[13] = r4(base + 13u * v, step); }
  if (RV > 14u) { rr[14] = r4(base + 14u * v, step); }
  if (RV > 15u) { rr[15] = r4(base + 15u * v, step); }
}

// acc + the four products of v with row[k..k+3], added one at a time (rdot's order)
fn acc4(acc: f32, v: vec4<f32>, k: u32) -> f32 {
  return acc + v.x * row[k] + v.y * row[k + 1u] + v.z * row[k + 2u] + v.w * row[k + 3u];
}

// sum_i rr[i] . row[k + 4 i ..], in order: the dot product of the registers' R values with the
// H values of row from k
fn rdot_reg(k: u32) -> f32 {
  var acc = acc4(0.0, rr[0], k);
  if (RV > 1u) { acc = acc4(acc, rr[1], k + 4u); }
  if (RV > 2u) { acc = acc4(acc, rr[2], k + 8u); }
  if (RV > 3u) { acc = acc4(acc, rr[3], k + 12u); }
  if (RV > 4u) { acc = acc4(acc, rr[4], k + 16u); }
  if (RV > 5u) { acc = acc4(acc, rr[5], k + 20u); }
  if (RV > 6u) { acc = acc4(acc, rr[6], k + 24u); }
  if (RV > 7u) { acc = acc4(acc, rr[7], k + 28u); }
  if (RV > 8u) { acc = acc4(acc, rr[8], k + 32u); }
  if (RV > 9u) { acc = acc4(acc, rr[9], k + 36u); }
  if (RV > 10u) { acc = acc4(acc, rr[10], k + 40u); }
  if (RV > 11u) { acc = acc4(acc, rr[11], k + 44u); }
  if (RV > 12u) { acc = acc4(acc, rr[12], k + 48u); }
  if (RV > 13u) { acc = acc4(acc, rr[13], k + 52u); }
  if (RV > 14u) { acc = acc4(acc, rr[14], k + 56u); }
  if (RV > 15u) { acc = acc4(acc, rr[15], k + 60u); }
  return acc;
}

fn time_of(s: u32, d: u32) -> u32 {
  if (d == 1u || p.rev0 == 1u) { return p.T - 1u - s; }
  return s;
}

// sigmoid and tanh from detmath (the same bits on every host, as the other training kernels)
fn sigm(v: f32) -> f32 { return 1.0 / (1.0 + det_exp(-v)); }

fn rcol(q: u32) -> u32 {
  if (q >= (p.G - 1u) * p.H) { return q + p.rshift; }
  return q;
}

// xp[d, t, n, q] = sum_i x[t, n, i] w[d, q, i] + bias; Rb added except GRU's h gate (flags 1).
// Bindings: x, w (or r: W^T, flags 4), bias -> out.
@compute @workgroup_size(64)
fn xproj(@builtin(global_invocation_id) gid: vec3<u32>,
         @builtin(num_workgroups) nwg: vec3<u32>) {
  let e = flat_index(gid, nwg);
  let gh = p.G * p.H;
  if (e >= p.D * p.T * p.N * gh) { return; }
  let q = e % gh;
  let tn = (e / gh) % (p.T * p.N);
  let d = e / (gh * p.T * p.N);
  var acc = 0.0;
  if ((p.flags & 4u) != 0u) {  // W^T [D, I, G*H] in r (GPU adapters): neighbours read neighbours
    let col = d * p.I * gh + q;
    for (var i = 0u; i < p.I; i++) { acc += x[tn * p.I + i] * r[col + i * gh]; }
  } else {
    for (var i = 0u; i < p.I; i++) { acc += x[tn * p.I + i] * w[(d * gh + q) * p.I + i]; }
  }
  if ((p.flags & 2u) != 0u) {
    acc += bias[d * 2u * gh + q];
    if ((p.flags & 1u) == 0u || q < (p.G - 1u) * p.H) { acc += bias[d * 2u * gh + gh + q]; }
  }
  out[e] = acc;
}

// out[d, q] = Wb[d, q] + Rb[d, q] (GRU's h gate, flags 1: Wb alone), xproj's bias for the
// GEMM (rnn.py). Bindings: bias -> out.
@compute @workgroup_size(64)
fn bias_sum(@builtin(global_invocation_id) gid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>) {
  let e = flat_index(gid, nwg);
  let gh = p.G * p.H;
  if (e >= p.D * gh) { return; }
  let q = e % gh;
  let d = e / gh;
  var v = bias[d * 2u * gh + q];
  if ((p.flags & 1u) == 0u || q < (p.G - 1u) * p.H) { v += bias[d * 2u * gh + gh + q]; }
  out[e] = v;
}

// hs[d, 0] = initial_h (x) and cs[d, 0] = initial_c (dy) or zeros (flags 1: h given, 2: c given).
// Bindings: x, dy -> a (hs), b (cs).
@compute @workgroup_size(64)
fn init_state(@builtin(global_invocation_id) gid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>) {
  let e = flat_index(gid, nwg);
  let nh = p.N * p.H;
  if (e >= p.D * nh) { return; }
  let d = e / nh;
  let k = d * (p.T + 1u) * nh + e % nh;
  a[k] = select(0.0, x[e], (p.flags & 1u) != 0u);
  b[k] = select(0.0, dy[e], (p.flags & 2u) != 0u);
}

// sum_k r[d, q, k] hs[d, s, n, k] for rows q of gate g. flags 4 (GPU adapters): R^T [D, H, G*H]
// is in w (`transpose_r`), so the units j of a workgroup read neighbouring values of it where
// rows of R lie H apart (the same products, summed in the same order).
fn rdot(d: u32, g: u32, j: u32, hb: u32) -> f32 {
  let rq = (d * p.G + g) * p.H + j;
  var acc = 0.0;
  let near = p.H <= SEQ_H;  // h in row (forward_seq copied it)
  if ((p.flags & 4u) != 0u) {
    let gh = p.G * p.H;
    let col = d * p.H * gh + g * p.H + j;
    if (near) {
      for (var k = 0u; k < p.H; k++) { acc += w[col + k * gh] * row[k]; }
    } else {
      for (var k = 0u; k < p.H; k++) { acc += w[col + k * gh] * a[hb + k]; }
    }
    return acc;
  }
  if (near) {
    for (var k = 0u; k < p.H; k++) { acc += r[rq * p.H + k] * row[k]; }
  } else {
    for (var k = 0u; k < p.H; k++) { acc += r[rq * p.H + k] * a[hb + k]; }
  }
  return acc;
}

// rdot for a step of unit j: from rsum when forward_seq_wide computed it (flags 16).
fn rdot_of(d: u32, g: u32, j: u32, hb: u32) -> f32 {
  if ((p.flags & 16u) != 0u) { return rsum[slot * p.G * p.H + g * p.H + j]; }
  return rdot(d, g, j, hb);
}

// out[d, k, q] = r[d, q, k]: R^T [D, H, G*H] for `forward_seq` on GPU adapters, or with
// flags 8 W^T [D, I, G*H] (r bound to W) for `xproj`. Bindings: r -> out.
@compute @workgroup_size(64)
fn transpose_r(@builtin(global_invocation_id) gid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>) {
  let e = flat_index(gid, nwg);
  let gh = p.G * p.H;
  let inner = select(p.H, p.I, (p.flags & 8u) != 0u);
  if (e >= p.D * gh * inner) { return; }
  let q = e % gh;
  let k = (e / gh) % inner;
  let d = e / (gh * inner);
  out[e] = r[(d * gh + q) * inner + k];
}

// The x-projection at i: x, or c when the gates are written over them (flags 64).
fn xp_at(i: u32) -> f32 {
  if ((p.flags & 64u) != 0u) { return c[i]; }
  return x[i];
}

// One LSTM step s for unit j of (d, n). Bindings: x (xp), r (or w: R^T, flags 4) -> a (hs),
// b (cs), c (gates; flags 64: xp too), out (Y [T, D, N, H], flags 1).
fn lstm_step(d: u32, n: u32, j: u32, s: u32) {
  let nh = p.N * p.H;
  let t = time_of(s, d);
  let gh = 4u * p.H;
  let hb = (d * (p.T + 1u) + s) * nh + n * p.H;
  var before = held;
  if (!ahead()) {
    step_ahead(d, n, j, s);
    before = b[hb + j];
  }
  let xv = pre;
  let ig = sigm(xv.x + rdot_of(d, 0u, j, hb));
  let og = sigm(xv.y + rdot_of(d, 1u, j, hb));
  let fg = sigm(xv.z + rdot_of(d, 2u, j, hb));
  let cg = det_tanh(xv.w + rdot_of(d, 3u, j, hb));
  let cell = fg * before + ig * cg;
  let h = og * det_tanh(cell);
  b[hb + nh + j] = cell;
  a[hb + nh + j] = h;
  if ((p.flags & 16u) != 0u) { row[slot * p.H + j] = h; }  // the next step's h (*_wide)
  let gb = ((d * p.T + s) * p.N + n) * gh;
  c[gb + j] = ig;
  c[gb + p.H + j] = og;
  c[gb + 2u * p.H + j] = fg;
  c[gb + 3u * p.H + j] = cg;
  if ((p.flags & 1u) != 0u) { out[((t * p.D + d) * p.N + n) * p.H + j] = h; }
  if (ahead()) {
    held = cell;
    if (s + 1u < min(p.s + p.steps, p.T)) { step_ahead(d, n, j, s + 1u); }
  }
}

// Step s's four x-projections of unit (n, j) into pre (written over by the step's gates with
// flags 64 only after the unit has read them, in that step): at the step itself, or a step
// ahead (flags 128).
fn step_ahead(d: u32, n: u32, j: u32, s: u32) {
  let xb = ((d * p.T + time_of(s, d)) * p.N + n) * 4u * p.H;
  pre = vec4<f32>(xp_at(xb + j), xp_at(xb + p.H + j), xp_at(xb + 2u * p.H + j),
                  xp_at(xb + 3u * p.H + j));
}

// One GRU step s (linear_before_reset = 1) for unit j of (d, n); Rb of the h gate is bias's.
// Bindings: x (xp), r (or w: R^T, flags 4), bias -> a (hs), c (gates), out (Y, flags 1;
// flags 2: B given).
fn gru_step(d: u32, n: u32, j: u32, s: u32) {
  let nh = p.N * p.H;
  let t = time_of(s, d);
  let gh = 3u * p.H;
  let xb = ((d * p.T + t) * p.N + n) * gh;
  let hb = (d * (p.T + 1u) + s) * nh + n * p.H;
  let zg = sigm(x[xb + j] + rdot_of(d, 0u, j, hb));
  let rg = sigm(x[xb + p.H + j] + rdot_of(d, 1u, j, hb));
  var hn = rdot_of(d, 2u, j, hb);
  if ((p.flags & 2u) != 0u) { hn += bias[d * 2u * gh + gh + 2u * p.H + j]; }
  let ng = det_tanh(x[xb + 2u * p.H + j] + rg * hn);
  let h = (1.0 - zg) * ng + zg * a[hb + j];
  a[hb + nh + j] = h;
  if ((p.flags & 16u) != 0u) { row[slot * p.H + j] = h; }
  let gb = ((d * p.T + s) * p.N + n) * 4u * p.H;
  c[gb + j] = zg;
  c[gb + p.H + j] = rg;
  c[gb + 2u * p.H + j] = ng;
  c[gb + 3u * p.H + j] = hn;
  if ((p.flags & 1u) != 0u) { out[((t * p.D + d) * p.N + n) * p.H + j] = h; }
}

// Steps p.s .. p.s + p.steps - 1 of the sequence forward (all T in one dispatch unless a
// thread's loop iterations would pass lavapipe's cap, rnn.py), one workgroup per (d, n) (p.G 4:
// LSTM, 3: GRU): its threads take units j = lid, lid + 64, ...; a step reads the hidden state
// the workgroup wrote at the step before (storageBarrier between steps).
// Forward flags 256 (no initial state given; the sequence's first dispatch, instead of
// init_state): zeros into hs[d, 0] (a) and, for an LSTM, cs[d, 0] (b) of samples n0 ..
// n0 + count - 1, by the workgroup that then reads them (storageBarrier: visible to it).
// Called in uniform control flow.
fn zero_state(d: u32, n0: u32, count: u32, lid: u32, threads: u32) {
  let nh = p.N * p.H;
  for (var e = lid; e < count * p.H; e += threads) {
    let n = n0 + e / p.H;
    if (n < p.N) {
      let k = d * (p.T + 1u) * nh + n * p.H + e % p.H;
      a[k] = 0.0;
      if (p.G == 4u) { b[k] = 0.0; }
    }
  }
  storageBarrier();
}

@compute @workgroup_size(64)
fn forward_seq(@builtin(workgroup_id) wid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
  let dn = wid.x + wid.y * nwg.x;
  let near = p.H <= SEQ_H && dn < p.D * p.N;
  if ((p.flags & 256u) != 0u && dn < p.D * p.N) {
    zero_state(dn / p.N, dn % p.N, 1u, lid, 64u);
  }
  for (var s = p.s; s < min(p.s + p.steps, p.T); s++) {
    if (near) {  // h of (d, n) before step s into row
      let hb = ((dn / p.N) * (p.T + 1u) + s) * p.N * p.H + (dn % p.N) * p.H;
      for (var k = lid; k < p.H; k += 64u) { row[k] = a[hb + k]; }
    }
    workgroupBarrier();
    seq_units(dn, lid, s, false, 64u);
    storageBarrier();
    workgroupBarrier();  // every unit has read row before the next step rewrites it
  }
}

// forward_seq on GPU adapters (H <= SEQ_H, flags 16): a thread per gate row q first sums R h
// of the step (rdot, the same order; flags 32: rdot_reg from registers, for each of the
// workgroup's NB samples) into rsum, so a step's serial chain is H multiply-adds instead of
// G * H; then a thread per (sample, unit) as forward_seq, which also writes its new h into row.
// A unit reads storage only where it wrote it itself (its cell, GRU's h), so no storageBarrier.
@compute @workgroup_size(256)
fn forward_seq_wide(@builtin(workgroup_id) wid: vec3<u32>,
                    @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32) {
  let blocks = (p.N + NB - 1u) / NB;  // workgroups a direction
  let wg = wid.x + wid.y * nwg.x;
  let d = wg / blocks;
  let n0 = (wg % blocks) * NB;
  let live = d < p.D;
  let gh = p.G * p.H;
  let reg = (p.flags & 32u) != 0u;
  let copies = 256u / gh;  // threads a gate row q (flags 32): sample slots lid / gh + copies k
  if (live && (p.flags & 256u) != 0u) { zero_state(d, n0, NB, lid, 256u); }
  if (live) {  // h before the dispatch's first step into row; R's row q into rr (flags 32)
    for (var e = lid; e < NB * p.H; e += 256u) {
      let n = min(n0 + e / p.H, p.N - 1u);
      row[e] = a[(d * (p.T + 1u) + p.s) * p.N * p.H + n * p.H + e % p.H];
    }
    if (reg && lid < copies * gh) { load_rr((d * gh + lid % gh) * p.H, 1u); }
    if (ahead() && lid < NB * p.H && n0 + lid / p.H < p.N) {  // the first step's, the cell
      let n = n0 + lid / p.H;
      held = b[(d * (p.T + 1u) + p.s) * p.N * p.H + n * p.H + lid % p.H];
      step_ahead(d, n, lid % p.H, p.s);
    }
  }
  for (var s = p.s; s < min(p.s + p.steps, p.T); s++) {
    workgroupBarrier();  // row holds h before step s
    if (live) {
      if (reg) {
        if (lid < copies * gh) {
          for (var k = lid / gh; k < NB; k += copies) {
            rsum[k * gh + lid % gh] = rdot_reg(k * p.H);
          }
        }
      } else {
        for (var q = lid; q < gh; q += 256u) { rsum[q] = rdot(d, q / p.H, q % p.H, 0u); }
      }
    }
    workgroupBarrier();  // every thread has read row; rsum is complete
    wide_units(d, n0, lid, s, false);
  }
}

// Y_h = hs[d, T] (flags 1) into a, Y_c = cs[d, T] (flags 2) into b. Bindings: x (hs), dy (cs).
@compute @workgroup_size(64)
fn final_state(@builtin(global_invocation_id) gid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>) {
  let e = flat_index(gid, nwg);
  let nh = p.N * p.H;
  if (e >= p.D * nh) { return; }
  let k = ((e / nh) * (p.T + 1u) + p.T) * nh + e % nh;
  if ((p.flags & 1u) != 0u) { a[e] = x[k]; }
  if ((p.flags & 2u) != 0u) { b[e] = dy[k]; }
}

// dh of thread (d, n, j) at step s from the later step: sum_q r[d, q, j] dg[d, s + 1, n, rcol(q)].
fn dh_later(d: u32, n: u32, j: u32, s1: u32) -> f32 {
  let gh = p.G * p.H;
  let base = ((d * p.T + s1) * p.N + n) * 4u * p.H;
  var acc = 0.0;
  for (var q = 0u; q < gh; q++) { acc += r[(d * gh + q) * p.H + j] * c[base + rcol(q)]; }
  return acc;
}

// dh at step s: dY (flags 1) plus, at the last step, dY_h (x; flags 2), else the later step's.
fn dh_at(d: u32, n: u32, j: u32, t: u32, e: u32, s: u32) -> f32 {
  var dh = 0.0;
  if ((p.flags & 1u) != 0u) {
    if (ahead()) { dh = pre_c.z; } else { dh = dy[((t * p.D + d) * p.N + n) * p.H + j]; }
  }
  if (s + 1u == p.T) {
    if ((p.flags & 2u) != 0u) { dh += x[e]; }
  } else {
    dh += dh_later_near(d, n, j, s + 1u) + select(0.0, carry(e), p.rshift != 0u);
  }
  return dh;
}

// The carry of the later step: out[e], or held (flags 128).
fn carry(e: u32) -> f32 {
  if (ahead()) { return held; }
  return out[e];
}

// dh_later for backward_seq: from row when backward_seq copied the later step's dg there.
fn dh_later_near(d: u32, n: u32, j: u32, s1: u32) -> f32 {
  if (p.H > SEQ_H) { return dh_later(d, n, j, s1); }
  if ((p.flags & 16u) != 0u) {  // backward_seq_wide's parts, in gate order
    var sum = 0.0;
    for (var g = 0u; g < p.G; g++) { sum += rsum[slot * p.G * p.H + g * p.H + j]; }
    return sum;
  }
  let gh = p.G * p.H;
  var acc = 0.0;
  for (var q = 0u; q < gh; q++) { acc += r[(d * gh + q) * p.H + j] * row[rcol(q)]; }
  return acc;
}

// Unit j's four values of dg at gb (c), and of row for the step before (backward_seq_wide).
fn store_dg(gb: u32, j: u32, v0: f32, v1: f32, v2: f32, v3: f32) {
  c[gb + j] = v0;
  c[gb + p.H + j] = v1;
  c[gb + 2u * p.H + j] = v2;
  c[gb + 3u * p.H + j] = v3;
  if ((p.flags & 16u) != 0u) {
    let o = slot * 4u * p.H + j;
    row[o] = v0;
    row[o + p.H] = v1;
    row[o + 2u * p.H] = v2;
    row[o + 3u * p.H] = v3;
  }
}

// The saved gate value at i: a, or c when dg is written over the gates (flags 64).
fn gate_at(i: u32) -> f32 {
  if ((p.flags & 64u) != 0u) { return c[i]; }
  return a[i];
}

// LSTM backward step s for unit j of (d, n). Bindings: x (dY_h), r, dy (dY), bias (dY_c,
// flags 4) -> a (gates), b (cs), c (dg), out (carry: dc).
fn lstm_back(d: u32, n: u32, j: u32, s: u32) {
  let nh = p.N * p.H;
  let e = d * nh + n * p.H + j;
  let t = time_of(s, d);
  let dh = dh_at(d, n, j, t, e, s);
  var dc = 0.0;
  if (s + 1u == p.T) {
    if ((p.flags & 4u) != 0u) { dc = bias[e]; }
  } else {
    dc = carry(e);
  }
  let gb = ((d * p.T + s) * p.N + n) * 4u * p.H;
  let cb = (d * (p.T + 1u) + s) * nh + n * p.H + j;
  var gv = pre;
  var cv = pre_c.xy;
  if (!ahead()) {
    gv = vec4<f32>(gate_at(gb + j), gate_at(gb + p.H + j), gate_at(gb + 2u * p.H + j),
                   gate_at(gb + 3u * p.H + j));
    cv = vec2<f32>(b[cb + nh], b[cb]);
  }
  let ig = gv.x;
  let og = gv.y;
  let fg = gv.z;
  let cg = gv.w;
  let tc = det_tanh(cv.x);
  dc += dh * og * (1.0 - tc * tc);
  store_dg(gb, j, dc * cg * ig * (1.0 - ig), dh * tc * og * (1.0 - og),
           dc * cv.y * fg * (1.0 - fg), dc * ig * (1.0 - cg * cg));
  out[e] = dc * fg;
  if (ahead()) {
    held = dc * fg;
    if (s > 0u && p.s - s + 1u < p.steps) { back_ahead(d, n, j, s - 1u); }
  }
}

// flags 128, backward: step s's saved gates of unit (n, j) into pre (read before the unit
// writes its dg over them, flags 64), its cell after and before the step and dY into pre_c.
fn back_ahead(d: u32, n: u32, j: u32, s: u32) {
  let nh = p.N * p.H;
  let gb = ((d * p.T + s) * p.N + n) * 4u * p.H;
  let cb = (d * (p.T + 1u) + s) * nh + n * p.H + j;
  pre = vec4<f32>(gate_at(gb + j), gate_at(gb + p.H + j), gate_at(gb + 2u * p.H + j),
                  gate_at(gb + 3u * p.H + j));
  var dyv = 0.0;
  if ((p.flags & 1u) != 0u) { dyv = dy[((time_of(s, d) * p.D + d) * p.N + n) * p.H + j]; }
  pre_c = vec3<f32>(b[cb + nh], b[cb], dyv);
}

// GRU backward step s for unit j of (d, n). Bindings: x (dY_h), r, dy (dY) -> a (gates),
// b (hs), c (dg), out (carry: dh * z).
fn gru_back(d: u32, n: u32, j: u32, s: u32) {
  let nh = p.N * p.H;
  let e = d * nh + n * p.H + j;
  let t = time_of(s, d);
  let dh = dh_at(d, n, j, t, e, s);
  let gb = ((d * p.T + s) * p.N + n) * 4u * p.H;
  let zg = gate_at(gb + j);
  let rg = gate_at(gb + p.H + j);
  let ng = gate_at(gb + 2u * p.H + j);
  let hn = gate_at(gb + 3u * p.H + j);
  let hprev = b[(d * (p.T + 1u) + s) * nh + n * p.H + j];
  let dan = dh * (1.0 - zg) * (1.0 - ng * ng);
  store_dg(gb, j, dh * (hprev - ng) * zg * (1.0 - zg), dan * hn * rg * (1.0 - rg), dan,
           dan * rg);
  out[e] = dh * zg;
}

// Step s (forward, or `back`) of pair dn = d * N + n of a *_seq workgroup, for its units
// j = lid, lid + stride, ...; a workgroup past the D * N pairs idles (it still reaches the barrier).
fn seq_units(dn: u32, lid: u32, s: u32, back: bool, stride: u32) {
  if (dn >= p.D * p.N) { return; }
  let d = dn / p.N;
  let n = dn % p.N;
  for (var j = lid; j < p.H; j += stride) {
    if (back) {
      if (p.G == 4u) { lstm_back(d, n, j, s); } else { gru_back(d, n, j, s); }
    } else {
      if (p.G == 4u) { lstm_step(d, n, j, s); } else { gru_step(d, n, j, s); }
    }
  }
}

// Step s (forward, or `back`) of a *_seq_wide workgroup: its threads take the units
// (sample n0 + slot, unit j) of its NB samples, slot * H + j = lid, lid + 256, ...
fn wide_units(d: u32, n0: u32, lid: u32, s: u32, back: bool) {
  if (d >= p.D) { return; }
  for (var u = lid; u < NB * p.H; u += 256u) {
    let n = n0 + u / p.H;
    if (n >= p.N) { break; }
    slot = u / p.H;
    let j = u % p.H;
    if (back) {
      if (p.G == 4u) { lstm_back(d, n, j, s); } else { gru_back(d, n, j, s); }
    } else {
      if (p.G == 4u) { lstm_step(d, n, j, s); } else { gru_step(d, n, j, s); }
    }
  }
}

// Backpropagation through steps p.s, p.s - 1, ..., p.s - p.steps + 1 (in reverse; all T in
// one dispatch unless lavapipe's cap says otherwise), one workgroup per (d, n) as forward_seq:
// step s reads the gate gradients of (d, n)'s step s + 1, written by this workgroup
// (storageBarrier between steps).
@compute @workgroup_size(64)
fn backward_seq(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
  let dn = wid.x + wid.y * nwg.x;
  let near = p.H <= SEQ_H && dn < p.D * p.N;
  for (var k = 0u; k < min(p.steps, p.s + 1u); k++) {
    let s = p.s - k;
    if (near && s + 1u < p.T) {  // dg of (d, n)'s step s + 1 into row
      let base = (((dn / p.N) * p.T + s + 1u) * p.N + dn % p.N) * 4u * p.H;
      for (var q = lid; q < 4u * p.H; q += 64u) { row[q] = c[base + q]; }
    }
    workgroupBarrier();
    seq_units(dn, lid, s, true, 64u);
    storageBarrier();
    workgroupBarrier();  // every unit has read row before the next step rewrites it
  }
}

// backward_seq on GPU adapters (H <= SEQ_H, flags 16): dh's R sum over the later step's dg
// split by gate, a thread per (gate g, unit j) into rsum (flags 32: rdot_reg from registers,
// for each of the workgroup's NB samples), added in gate order by the unit (dh_later_near); a
// step's serial chain is H multiply-adds instead of G * H. Units write their dg into row for the
// step before, and read storage only where they wrote it themselves (the carry), so no
// storageBarrier.
@compute @workgroup_size(256)
fn backward_seq_wide(@builtin(workgroup_id) wid: vec3<u32>,
                     @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
  let blocks = (p.N + NB - 1u) / NB;
  let wg = wid.x + wid.y * nwg.x;
  let d = wg / blocks;
  let n0 = (wg % blocks) * NB;
  let live = d < p.D;
  let gh = p.G * p.H;
  let reg = (p.flags & 32u) != 0u;
  let copies = 256u / gh;
  if (live) {  // dg of the step after the dispatch's first into row; R's column into rr
    if (p.s + 1u < p.T) {
      for (var e = lid; e < NB * 4u * p.H; e += 256u) {
        let n = min(n0 + e / (4u * p.H), p.N - 1u);
        row[e] = c[((d * p.T + p.s + 1u) * p.N + n) * 4u * p.H + e % (4u * p.H)];
      }
    }
    if (reg && lid < copies * gh) {
      let q = lid % gh;
      load_rr((d * gh + (q / p.H) * p.H) * p.H + q % p.H, p.H);
    }
    if (ahead() && lid < NB * p.H && n0 + lid / p.H < p.N) {  // the first step's, the carry
      let n = n0 + lid / p.H;
      if (p.s + 1u < p.T) { held = out[(d * p.N + n) * p.H + lid % p.H]; }
      back_ahead(d, n, lid % p.H, p.s);
    }
  }
  for (var k = 0u; k < min(p.steps, p.s + 1u); k++) {
    let s = p.s - k;
    workgroupBarrier();  // row holds dg of step s + 1
    if (live && s + 1u < p.T) {
      if (reg) {
        if (lid < copies * gh) {
          let q = lid % gh;
          for (var m = lid / gh; m < NB; m += copies) {
            rsum[m * gh + q] = rdot_reg(m * 4u * p.H + rcol((q / p.H) * p.H));
          }
        }
      } else {
        for (var e = lid; e < gh; e += 256u) {
          let g = e / p.H;
          let j = e % p.H;
          var acc = 0.0;
          for (var q = g * p.H; q < (g + 1u) * p.H; q++) {
            acc += r[(d * gh + q) * p.H + j] * row[rcol(q)];
          }
          rsum[e] = acc;
        }
      }
    }
    workgroupBarrier();  // every thread has read row; rsum is complete
    wide_units(d, n0, lid, s, true);
  }
}

// The initial states' gradients: a = dh0 (flags 1), b = dc0 = carry (flags 2: LSTM) or GRU's
// dh0 += carry. Bindings: r, dy (carry) -> a, b, c (dg).
@compute @workgroup_size(64)
fn back_init(@builtin(global_invocation_id) gid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>) {
  let e = flat_index(gid, nwg);
  let nh = p.N * p.H;
  if (e >= p.D * nh) { return; }
  let d = e / nh;
  let n = (e % nh) / p.H;
  let j = e % p.H;
  if ((p.flags & 1u) != 0u) {
    a[e] = dh_later(d, n, j, 0u) + select(0.0, dy[e], p.rshift != 0u);
  }
  if ((p.flags & 2u) != 0u) { b[e] = dy[e]; }
}

// The weight gradients below sum over the T * N (step, sample) pairs split into num_workgroups.z
// parts (split-K): part z sums pairs [lo, hi) of part_range and writes out[z * count + e]; the
// parts are added by gemm.wgsl's reduce_splits (rnn.py). One part: out[e] itself.
fn part_range(z: u32, parts: u32) -> vec2<u32> {
  let total = p.T * p.N;
  let chunk = (total + parts - 1u) / parts;
  return vec2<u32>(min(z * chunk, total), min((z + 1u) * chunk, total));
}

// dW[d, q, i] = sum_{s, n} dg[d, s, n, q] x[t, n, i]. Bindings: x, dy (dg) -> out.
@compute @workgroup_size(64)
fn grad_w(@builtin(global_invocation_id) gid: vec3<u32>,
          @builtin(num_workgroups) nwg: vec3<u32>) {
  let e = flat_index(gid, nwg);
  let gh = p.G * p.H;
  let count = p.D * gh * p.I;
  if (e >= count) { return; }
  let i = e % p.I;
  let q = (e / p.I) % gh;
  let d = e / (p.I * gh);
  let range = part_range(gid.z, nwg.z);
  var acc = 0.0;
  for (var sn = range.x; sn < range.y; sn++) {
    let t = time_of(sn / p.N, d);
    let n = sn % p.N;
    acc += dy[(d * p.T * p.N + sn) * 4u * p.H + q] * x[(t * p.N + n) * p.I + i];
  }
  out[gid.z * count + e] = acc;
}

// dR[d, q, k] = sum_{s, n} dg[d, s, n, rcol(q)] hs[d, s, n, k]. Bindings: x (hs), dy (dg) -> out.
@compute @workgroup_size(64)
fn grad_r(@builtin(global_invocation_id) gid: vec3<u32>,
          @builtin(num_workgroups) nwg: vec3<u32>) {
  let e = flat_index(gid, nwg);
  let gh = p.G * p.H;
  let count = p.D * gh * p.H;
  if (e >= count) { return; }
  let k = e % p.H;
  let q = (e / p.H) % gh;
  let d = e / (p.H * gh);
  let range = part_range(gid.z, nwg.z);
  var acc = 0.0;
  for (var sn = range.x; sn < range.y; sn++) {
    let s = sn / p.N;
    acc += dy[(d * p.T * p.N + sn) * 4u * p.H + rcol(q)]
      * x[((d * (p.T + 1u) + s) * p.N + sn % p.N) * p.H + k];
  }
  out[gid.z * count + e] = acc;
}

// dB[d, 0:GH] = sum dg (W side), dB[d, GH:2GH] = sum dg[rcol]. Bindings: dy (dg) -> out.
@compute @workgroup_size(64)
fn grad_b(@builtin(global_invocation_id) gid: vec3<u32>,
          @builtin(num_workgroups) nwg: vec3<u32>) {
  let e = flat_index(gid, nwg);
  let gh = p.G * p.H;
  let count = p.D * 2u * gh;
  if (e >= count) { return; }
  let q2 = e % (2u * gh);
  let d = e / (2u * gh);
  var col = q2;
  if (q2 >= gh) { col = rcol(q2 - gh); }
  let range = part_range(gid.z, nwg.z);
  var acc = 0.0;
  for (var sn = range.x; sn < range.y; sn++) { acc += dy[(d * p.T * p.N + sn) * 4u * p.H + col]; }
  out[gid.z * count + e] = acc;
}

// dX[t, n, i] = sum_d sum_q dg[d, s(t, d), n, q] w[d, q, i]. Bindings: w, dy (dg) -> out.
@compute @workgroup_size(64)
fn grad_x(@builtin(global_invocation_id) gid: vec3<u32>,
          @builtin(num_workgroups) nwg: vec3<u32>) {
  let e = flat_index(gid, nwg);
  if (e >= p.T * p.N * p.I) { return; }
  let i = e % p.I;
  let n = (e / p.I) % p.N;
  let t = e / (p.I * p.N);
  let gh = p.G * p.H;
  var acc = 0.0;
  for (var d = 0u; d < p.D; d++) {
    let s = time_of(t, d);
    let base = ((d * p.T + s) * p.N + n) * 4u * p.H;
    for (var q = 0u; q < gh; q++) { acc += dy[base + q] * w[(d * gh + q) * p.I + i]; }
  }
  out[e] = acc;
}
