// The 2-D convolution on CPU adapters for stride-1 3-wide windows (ops/conv.py picks these;
// Params and window: lib/conv_window.wgsl; GPU adapters run conv2d.wgsl / conv2d_wgrad.wgsl).
//   forward_wide: y[n,k,oh,ow] = b[k] + sum_{c,i,j} wt[(c,i,j), k] * x[n, g*Cg+c, ih, iw], the
//     forward and, over dy with the flipped transposed weights, the input gradient;
//   weight_wide:  dw[k,c,i,j]  = sum_{n,oh,ow} dy[n,k,oh,ow] * x[n, g*Cg+c, ih, iw]
// with ih = oh*sh + i*dh - ph, iw = ow + j - pw (weight_wide: sh = 1, KH = 3). SwiftShader
// runs 4 invocations in SIMD lanes and loads every value lane by lane (a gather, whatever the
// addresses); a branch the lanes may take apart costs a blend of every live value at its merge,
// and a loop turn one of every value it carries. So here a thread owns many outputs (each
// loaded value feeds many of them), the three taps of a row share its loaded input columns,
// padding is zeros loaded, not branches, and a loop turn carries the accumulators 9 taps. Each
// sum runs in the order of conv2d.wgsl's kernels (forward: over (c, i, j); weight: over
// (n, oh, ow), the batch split as backward_weight splits it), so both give the same numbers.

//!include conv_window
//!include conv_acc
//!include index

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;       // x, or dy
@group(0) @binding(2) var<storage, read> w: array<f32>;       // x (weight_wide)
@group(0) @binding(3) var<storage, read> wt: array<vec4<f32>>; // packed weight (conv2d.wgsl)
@group(0) @binding(4) var<storage, read> b: array<f32>;       // bias or ReLU mask source
@group(0) @binding(5) var<storage, read_write> y: array<f32>; // output

// Column quads a forward_wide thread owns: 2, 3 or 4 (8, 12 or 16 columns; ops/conv.py picks
// the fewest loads for the row's width: each weight loaded feeds 4 x WQ columns).
override WQ: u32 = 2u;

// 4 input columns of a row at clamped indices i, zero where not ok (padding).
fn cols4(xrow: u32, i: vec4<u32>, ok: vec4<bool>) -> vec4<f32> {
  return select(vec4<f32>(0.0),
                vec4<f32>(x[xrow + i.x], x[xrow + i.y], x[xrow + i.z], x[xrow + i.w]), ok);
}

// ... the first two of them (the row's last columns: only the taps j = 1, 2 reach them).
fn cols2(xrow: u32, i: vec4<u32>, ok: vec4<bool>) -> vec4<f32> {
  return vec4<f32>(select(vec2<f32>(0.0), vec2<f32>(x[xrow + i.x], x[xrow + i.y]), ok.xy),
                   0.0, 0.0);
}

struct Cols { i: vec4<u32>, ok: vec4<bool> }

// Clamped indices and validity of the 4 columns from c0 in a row of `width`.
fn cols_at(c0: i32, width: u32) -> Cols {
  let c = vec4<i32>(c0) + vec4<i32>(0, 1, 2, 3);
  let wmax = i32(width);
  return Cols(vec4<u32>(clamp(c, vec4<i32>(0), vec4<i32>(wmax - 1))),
              (c >= vec4<i32>(0)) & (c < vec4<i32>(wmax)));
}

// One tap: the 8 channels' weights at packed index r times the WQ column quads v0..v3.
fn wide_tap(a0: ptr<function, Acc>, a1: ptr<function, Acc>, a2: ptr<function, Acc>,
            a3: ptr<function, Acc>, r: u32, v0: vec4<f32>, v1: vec4<f32>, v2: vec4<f32>,
            v3: vec4<f32>) {
  let wa = wt[r];
  let wb = wt[r + 1u];
  acc_fma(a0, wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w, v0);
  acc_fma(a1, wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w, v1);
  if (WQ >= 3u) { acc_fma(a2, wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w, v2); }
  if (WQ >= 4u) { acc_fma(a3, wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w, v3); }
}

fn store_row(v: vec4<f32>, k: u32, ybase: u32, ncols: u32) {
  var u = v + select(0.0, b[k], p.has_bias != 0u);
  if (p.relu != 0u) { u = max(u, vec4<f32>(0.0)); }
  if (p.mask != 0u) { u = masked(u, ybase, ncols); }
  if (ncols >= 4u) {
    y[ybase] = u.x; y[ybase + 1u] = u.y; y[ybase + 2u] = u.z; y[ybase + 3u] = u.w;
  } else {
    for (var q = 0u; q < ncols; q++) { y[ybase + q] = u[q]; }
  }
}

// Input channels a weight_wide thread owns: 1 or 2 (ops/conv.py).
override WC: u32 = 1u;

// One input row (ih, of the channel at xbase) through the three taps from packed row r0:
// its 4 * WQ + 2 columns loaded once. Rows in the padding load zeros (clamped), with no branch,
// whose merge SwiftShader pays for every accumulator (a divergent `continue`: 1.2x slower).
fn wide_row(a0: ptr<function, Acc>, a1: ptr<function, Acc>, a2: ptr<function, Acc>,
            a3: ptr<function, Acc>, xbase: u32, ih: i32, r0: u32, row4: u32, c0: Cols, c1: Cols,
            c2: Cols, c3: Cols, c4: Cols) {
  let okr = vec4<bool>(ih >= 0 && ih < i32(p.H));
  let xrow = (xbase + u32(clamp(ih, 0, i32(p.H) - 1))) * p.W;
  let x0 = cols4(xrow, c0.i, c0.ok & okr);
  let x1 = cols4(xrow, c1.i, c1.ok & okr);
  var x2 = vec4<f32>(0.0);
  var x3 = vec4<f32>(0.0);
  var x4 = vec4<f32>(0.0);
  if (WQ == 2u) {
    x2 = cols2(xrow, c2.i, c2.ok & okr);
  } else if (WQ == 3u) {
    x2 = cols4(xrow, c2.i, c2.ok & okr);
    x3 = cols2(xrow, c3.i, c3.ok & okr);
  } else {
    x2 = cols4(xrow, c2.i, c2.ok & okr);
    x3 = cols4(xrow, c3.i, c3.ok & okr);
    x4 = cols2(xrow, c4.i, c4.ok & okr);
  }
  wide_tap(a0, a1, a2, a3, r0, x0, x1, x2, x3);
  wide_tap(a0, a1, a2, a3, r0 + row4, vec4<f32>(x0.yzw, x1.x), vec4<f32>(x1.yzw, x2.x),
           vec4<f32>(x2.yzw, x3.x), vec4<f32>(x3.yzw, x4.x));
  wide_tap(a0, a1, a2, a3, r0 + 2u * row4, vec4<f32>(x0.zw, x1.xy), vec4<f32>(x1.zw, x2.xy),
           vec4<f32>(x2.zw, x3.xy), vec4<f32>(x3.zw, x4.xy));
}

// Thread: 8 output channels x 4*WQ columns of one output row. A row's 4*WQ + 2 input columns
// are loaded once for its three taps.
@compute @workgroup_size(64)
fn forward_wide(@builtin(global_invocation_id) gid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = flat_index(gid, nwg);
  let Kg = p.K / p.G;
  let Cg = p.C / p.G;
  let cblocks = (Kg + 7u) / 8u;
  let wblocks = (p.OW + 4u * WQ - 1u) / (4u * WQ);
  if (t >= p.N * p.G * cblocks * p.OH * wblocks) { return; }
  let ow0 = (t % wblocks) * 4u * WQ;
  var r = t / wblocks;
  let oh = r % p.OH;
  r = r / p.OH;
  let cb = r % (p.G * cblocks);
  let n = r / (p.G * cblocks);
  let g = cb / cblocks;
  let k0 = g * Kg + (cb % cblocks) * 8u;
  let kend = (g + 1u) * Kg;
  let Kp = (Kg + 7u) / 8u * 8u;
  let row4 = p.G * Kp / 4u;                   // vec4s per packed row (one row per tap)
  let col4 = (g * Kp + (cb % cblocks) * 8u) / 4u;
  let iw0 = i32(ow0) - i32(pw);
  let ncols = min(p.OW - ow0, 4u * WQ);
  let c0 = cols_at(iw0, p.W);
  let c1 = cols_at(iw0 + 4, p.W);
  let c2 = cols_at(iw0 + 8, p.W);
  let c3 = cols_at(iw0 + 12, p.W);
  let c4 = cols_at(iw0 + 16, p.W);
  var a0: Acc;
  var a1: Acc;
  var a2: Acc;
  var a3: Acc;
  for (var c = 0u; c < Cg; c++) {
    let xbase = (n * p.C + g * Cg + c) * p.H;
    let ih0 = i32(oh * sh) - i32(ph);
    let rc = c * KH * KW * row4 + col4;
    if (KH == 3u) {  // rows written out: one loop turn carries the accumulators 9 taps
      wide_row(&a0, &a1, &a2, &a3, xbase, ih0, rc, row4, c0, c1, c2, c3, c4);
      wide_row(&a0, &a1, &a2, &a3, xbase, ih0 + i32(dh), rc + 3u * row4, row4, c0, c1, c2, c3,
               c4);
      wide_row(&a0, &a1, &a2, &a3, xbase, ih0 + 2 * i32(dh), rc + 6u * row4, row4, c0, c1, c2,
               c3, c4);
    } else {
      for (var i = 0u; i < KH; i++) {
        wide_row(&a0, &a1, &a2, &a3, xbase, ih0 + i32(i * dh), rc + i * KW * row4, row4, c0, c1,
                 c2, c3, c4);
      }
    }
  }
  for (var m = 0u; m < 8u; m++) {
    let k = k0 + m;
    if (k >= kend) { break; }
    let ybase = ((n * p.K + k) * p.OH + oh) * p.OW + ow0;
    store_row(acc_get(a0, m), k, ybase, ncols);
    if (ncols > 4u) { store_row(acc_get(a1, m), k, ybase + 4u, ncols - 4u); }
    if (WQ >= 3u && ncols > 8u) { store_row(acc_get(a2, m), k, ybase + 8u, ncols - 8u); }
    if (WQ >= 4u && ncols > 12u) { store_row(acc_get(a3, m), k, ybase + 12u, ncols - 12u); }
  }
}

// The 3 x 3 taps' sums of one input channel for 8 output channels: row i, tap j, channels
// 0-3 (l) and 4-7 (h).
struct Row3 { l0: vec4<f32>, h0: vec4<f32>, l1: vec4<f32>, h1: vec4<f32>, l2: vec4<f32>,
              h2: vec4<f32> }

// Row r's taps += one output column's dy (channels lo, hi) x the input at taps j = 0, 1, 2.
fn col_fma(r: ptr<function, Row3>, x0: f32, x1: f32, x2: f32, lo: vec4<f32>, hi: vec4<f32>) {
  (*r).l0 = vec4(x0) * lo + (*r).l0;
  (*r).h0 = vec4(x0) * hi + (*r).h0;
  (*r).l1 = vec4(x1) * lo + (*r).l1;
  (*r).h1 = vec4(x1) * hi + (*r).h1;
  (*r).l2 = vec4(x2) * lo + (*r).l2;
  (*r).h2 = vec4(x2) * hi + (*r).h2;
}

// 4 output columns' dy: d_q = (lo, hi) of column q; the input row's 6 columns v, v2.
struct Dy4 { l0: vec4<f32>, h0: vec4<f32>, l1: vec4<f32>, h1: vec4<f32>,
             l2: vec4<f32>, h2: vec4<f32>, l3: vec4<f32>, h3: vec4<f32> }

fn row_fma(r: ptr<function, Row3>, v: vec4<f32>, v2: vec4<f32>, d: Dy4) {
  col_fma(r, v.x, v.y, v.z, d.l0, d.h0);
  col_fma(r, v.y, v.z, v.w, d.l1, d.h1);
  col_fma(r, v.z, v.w, v2.x, d.l2, d.h2);
  col_fma(r, v.w, v2.x, v2.y, d.l3, d.h3);
}

// cols4 / cols2 of the layer's input, bound as `w` in weight_wide.
fn wcols4(xrow: u32, i: vec4<u32>, ok: vec4<bool>) -> vec4<f32> {
  return select(vec4<f32>(0.0),
                vec4<f32>(w[xrow + i.x], w[xrow + i.y], w[xrow + i.z], w[xrow + i.w]), ok);
}

fn wcols2(xrow: u32, i: vec4<u32>, ok: vec4<bool>) -> vec4<f32> {
  return vec4<f32>(select(vec2<f32>(0.0), vec2<f32>(w[xrow + i.x], w[xrow + i.y]), ok.xy),
                   0.0, 0.0);
}

// dy of 4 channels (offsets dk from e) at one column, zero past the row (ok false).
fn dy4(e: u32, dk: vec4<u32>, ok: bool) -> vec4<f32> {
  return select(vec4<f32>(0.0), vec4<f32>(x[e + dk.x], x[e + dk.y], x[e + dk.z], x[e + dk.w]),
                ok);
}

fn store_taps(r: Row3, base: u32, R: u32, k0: u32, kend: u32) {
  for (var m = 0u; m < 4u; m++) {
    if (k0 + m < kend) {
      y[base + m * R] = r.l0[m]; y[base + m * R + 1u] = r.l1[m]; y[base + m * R + 2u] = r.l2[m];
    }
    if (k0 + 4u + m < kend) {
      let o = base + (4u + m) * R;
      y[o] = r.h0[m]; y[o + 1u] = r.h1[m]; y[o + 2u] = r.h2[m];
    }
  }
}

// x = dy [N,K,OH,OW], w = x [N,C,H,W], y = partial dw [splits,K,Cg*9]. Thread: 8 output
// channels x WC input channels' 9 taps, over the batch part gid.z (split as backward_weight
// splits it), 4 output columns at a time: each of the 4 columns' 8 dy values feeds 9 x WC
// taps, each of the 3 x 6 input values of a channel up to 3 x 8 (WC 1: 2.2x fewer loads than
// backward_weight; WC 2, SwiftShader: 1.1x faster again).
@compute @workgroup_size(64)
fn weight_wide(@builtin(global_invocation_id) gid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = flat_index(gid, nwg);
  let split = gid.z;
  let Kg = p.K / p.G;
  let Cg = p.C / p.G;
  let R = Cg * 9u;
  let kblocks = (Kg + 7u) / 8u;
  let cblocks = (Cg + WC - 1u) / WC;
  if (t >= p.G * kblocks * cblocks) { return; }
  let c = (t % cblocks) * WC;
  let kb = t / cblocks;
  let g = kb / kblocks;
  let k0 = g * Kg + (kb % kblocks) * 8u;
  let kend = (g + 1u) * Kg;
  let plane = p.OH * p.OW;
  let last = p.K - 1u;
  let dk = vec4<u32>(min(k0, last), min(k0 + 1u, last), min(k0 + 2u, last),
                     min(k0 + 3u, last)) * plane;
  let dk4 = vec4<u32>(min(k0 + 4u, last), min(k0 + 5u, last), min(k0 + 6u, last),
                      min(k0 + 7u, last)) * plane;
  let per = (p.N + p.splits - 1u) / p.splits;
  let n_end = min(p.N, (split + 1u) * per);
  var r0: Row3;
  var r1: Row3;
  var r2: Row3;
  var r3: Row3;
  var r4: Row3;
  var r5: Row3;
  let has2 = WC == 2u && c + 1u < Cg;  // the second channel (else channel c again, not stored)
  let next = select(0u, p.H * p.W, has2);
  for (var n = split * per; n < n_end; n++) {
    let xc = (n * p.C + g * Cg + c) * p.H;
    let dn = n * p.K * plane;
    for (var oh = 0u; oh < p.OH; oh++) {
      let ih = vec3<i32>(i32(oh)) + vec3<i32>(0, 1, 2) * i32(dh) - vec3<i32>(i32(ph));
      let okh = (ih >= vec3<i32>(0)) & (ih < vec3<i32>(i32(p.H)));
      let rows = (vec3<u32>(clamp(ih, vec3<i32>(0), vec3<i32>(i32(p.H) - 1))) + xc) * p.W;
      let erow = dn + oh * p.OW;
      for (var ow0 = 0u; ow0 < p.OW; ow0 += 4u) {
        let e = erow + ow0;
        let e1 = min(e + 1u, erow + p.OW - 1u);
        let e2 = min(e + 2u, erow + p.OW - 1u);
        let e3 = min(e + 3u, erow + p.OW - 1u);
        let ok = vec3<u32>(ow0) + vec3<u32>(1u, 2u, 3u) < vec3<u32>(p.OW);
        let d = Dy4(dy4(e, dk, true), dy4(e, dk4, true), dy4(e1, dk, ok.x), dy4(e1, dk4, ok.x),
                    dy4(e2, dk, ok.y), dy4(e2, dk4, ok.y), dy4(e3, dk, ok.z), dy4(e3, dk4, ok.z));
        let ca = cols_at(i32(ow0) - i32(pw), p.W);
        let cb = cols_at(i32(ow0) + 4 - i32(pw), p.W);
        let v0 = wcols4(rows.x, ca.i, ca.ok & vec4<bool>(okh.x));
        let u0 = wcols2(rows.x, cb.i, cb.ok & vec4<bool>(okh.x));
        row_fma(&r0, v0, u0, d);
        let v1 = wcols4(rows.y, ca.i, ca.ok & vec4<bool>(okh.y));
        let u1 = wcols2(rows.y, cb.i, cb.ok & vec4<bool>(okh.y));
        row_fma(&r1, v1, u1, d);
        let v2 = wcols4(rows.z, ca.i, ca.ok & vec4<bool>(okh.z));
        let u2 = wcols2(rows.z, cb.i, cb.ok & vec4<bool>(okh.z));
        row_fma(&r2, v2, u2, d);
        if (WC == 2u) {
          row_fma(&r3, wcols4(rows.x + next, ca.i, ca.ok & vec4<bool>(okh.x)),
                  wcols2(rows.x + next, cb.i, cb.ok & vec4<bool>(okh.x)), d);
          row_fma(&r4, wcols4(rows.y + next, ca.i, ca.ok & vec4<bool>(okh.y)),
                  wcols2(rows.y + next, cb.i, cb.ok & vec4<bool>(okh.y)), d);
          row_fma(&r5, wcols4(rows.z + next, ca.i, ca.ok & vec4<bool>(okh.z)),
                  wcols2(rows.z + next, cb.i, cb.ok & vec4<bool>(okh.z)), d);
        }
      }
    }
  }
  let base = (split * p.K + k0) * R + c * 9u;
  store_taps(r0, base, R, k0, kend);
  store_taps(r1, base + 3u, R, k0, kend);
  store_taps(r2, base + 6u, R, k0, kend);
  if (has2) {
    store_taps(r3, base + 9u, R, k0, kend);
    store_taps(r4, base + 12u, R, k0, kend);
    store_taps(r5, base + 15u, R, k0, kend);
  }
}
