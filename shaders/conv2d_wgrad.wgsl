// The weight gradient of a 2-D convolution on GPU adapters (ops/conv.py picks it; CPU adapters
// run conv2d.wgsl backward_weight): dw[k,c,i,j] = sum_{n,oh,ow} dy[n,k,oh,ow] * x[n,c,ih,iw]
// with ih = oh*sh + i*dh - ph, iw = ow*sw + j*dw - pw, as partial sums per chunk of output
// pixels, y[chunk, k, (c,i,j)], that reduce.wgsl reduce_splits adds. Params and window:
// lib/conv_window.wgsl.

//!include conv_window
//!include index

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;        // dy [N,K,OH,OW]
@group(0) @binding(2) var<storage, read> w: array<f32>;        // x [N,C,H,W]
@group(0) @binding(3) var<storage, read_write> y: array<f32>;  // partial dw [splits,K,Cg*KH*KW]

// Workgroup (wid.x = (group, 4*CQ output channels, WRB blocks of 8 taps), wid.y = chunk of the
// output pixels (n, oh, ow) flattened into `splits` chunks), 64 threads a tap block. The chunk
// advances a tile of T = 64*WRB pixels at a time: every thread loads one pixel's 4*CQ values of
// dy into workgroup memory (double-buffered, one barrier a tile), then each thread accumulates
// 4*CQ channels x 8 taps over WRB pixels of the tile (dy from workgroup memory, shared by the
// WRB tap blocks; 8 loads of x, each used 4*CQ times). The threads' sums are added through
// workgroup memory, one tap block and 8 channels at a time, and written to y[chunk, k, r]
// (reduce.wgsl adds the chunks). Every accumulator is a named struct member (no array, no
// dynamic index), so they stay in registers. Each value's sum is the same whatever CQ is: the
// same pixels in the same order, the same lanes added in the same order.
// BIAS (the layer's bias gradient fused, ops/conv.backward): each thread also adds up the dy it
// loads (its pixels of the chunk, 4*CQ channels); the first workgroup of each channel block
// adds its threads' sums (a tree, fixed order) and writes them after the weight parts, at
// y[splits*K*R + chunk*K + k], which reduce_splits adds as its tail: no channel_sum pass
// over dy.
override WRB: u32 = 4u;                        // tap blocks a workgroup: 1, 2 or 4
// Channel quads a thread (ops/conv.weight_grad_quads): 2 (8 channels), 3 (12) or 4 (16);
// WRB * CQ <= 8 (the dy tiles fill wbuf).
override CQ: u32 = 2u;
override BIAS: bool = false;
var<workgroup> wbuf: array<vec4<f32>, 1024>;   // dy tiles [2][CQ][T], then the sums [16][64]

fn wslot(a: u32, lid: u32) -> u32 { return a * 64u + (a + lid) % 64u; }

// Without padding every tap of every output pixel is inside the input: the offset of a tap
// from the pixel's window corner is then one constant per tap (Taps.x), nothing is checked.
override UNPADDED: bool = ph == 0u && pw == 0u;

// Offsets of taps r0 + 0..3 (c, i, j flattened, clamped to R - 1): input offset in an image
// (with the tap's row and column when unpadded), row offset i*dh - ph, column offset j*dw - pw.
struct Taps { x: vec4<u32>, i: vec4<i32>, j: vec4<i32> }

fn taps4(r0: u32, R: u32, c0: u32) -> Taps {
  let taps = KH * KW;
  let r = min(vec4<u32>(r0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(R - 1u));
  let i = (r % taps) / KW;
  let j = r % KW;
  let inside = select(vec4<u32>(0u), i * dh * p.W + j * dw, vec4<bool>(UNPADDED));
  return Taps((r / taps + c0) * p.H * p.W + inside, vec4<i32>(i * dh) - i32(ph),
              vec4<i32>(j * dw) - i32(pw));
}

// x (the forward input, bound as `w`) at the tap (xo, io, jo) of output pixel (oh, ow) of the
// image at xn.
fn tap_value(xo: u32, io: i32, jo: i32, xn: u32, oh: u32, ow: u32) -> f32 {
  if (UNPADDED) { return w[xn + oh * sh * p.W + ow * sw + xo]; }
  let ih = i32(oh * sh) + io;
  let iw = i32(ow * sw) + jo;
  let ok = ih >= 0 && ih < i32(p.H) && iw >= 0 && iw < i32(p.W);
  return select(0.0, w[select(0u, xn + xo + u32(ih) * p.W + u32(iw), ok)], ok);
}

// The 4 taps of `t` at pixel (oh, ow) of the image at xn.
fn tap_values(t: Taps, xn: u32, oh: u32, ow: u32) -> vec4<f32> {
  return vec4<f32>(tap_value(t.x.x, t.i.x, t.j.x, xn, oh, ow),
                   tap_value(t.x.y, t.i.y, t.j.y, xn, oh, ow),
                   tap_value(t.x.z, t.i.z, t.j.z, xn, oh, ow),
                   tap_value(t.x.w, t.i.w, t.j.w, xn, oh, ow));
}

// A pixel walker over the flattened (n, oh, ow) with a fixed stride.
struct Walk { q: u32, n: u32, oh: u32, ow: u32, dn: u32, doh: u32, dow: u32 }

fn walk_start(q: u32, stride: u32) -> Walk {
  let plane = p.OH * p.OW;
  return Walk(q, q / plane, (q % plane) / p.OW, q % p.OW, stride / plane,
              (stride % plane) / p.OW, stride % p.OW);
}

fn walk_next(w_: ptr<function, Walk>, stride: u32) {
  (*w_).q += stride;
  (*w_).ow += (*w_).dow;
  if ((*w_).ow >= p.OW) { (*w_).ow -= p.OW; (*w_).oh += 1u; }
  (*w_).oh += (*w_).doh;
  if ((*w_).oh >= p.OH) { (*w_).oh -= p.OH; (*w_).n += 1u; }
  (*w_).n += (*w_).dn;
}

// A thread's sums for one quad of channels: tap t (0..7) of its block, 4 channels each.
struct Acc { t0: vec4<f32>, t1: vec4<f32>, t2: vec4<f32>, t3: vec4<f32>,
             t4: vec4<f32>, t5: vec4<f32>, t6: vec4<f32>, t7: vec4<f32> }

// c plus one pixel's products: taps va (0..3) and vb (4..7) times the quad's dy d.
fn mac(c: Acc, va: vec4<f32>, vb: vec4<f32>, d: vec4<f32>) -> Acc {
  return Acc(fma(vec4<f32>(va.x), d, c.t0), fma(vec4<f32>(va.y), d, c.t1),
             fma(vec4<f32>(va.z), d, c.t2), fma(vec4<f32>(va.w), d, c.t3),
             fma(vec4<f32>(vb.x), d, c.t4), fma(vec4<f32>(vb.y), d, c.t5),
             fma(vec4<f32>(vb.z), d, c.t6), fma(vec4<f32>(vb.w), d, c.t7));
}

// Offsets into dy of channels k, k + 1, k + 2, k + 3 (clamped to the last channel).
fn chan4(k: u32, last: u32, plane: u32) -> vec4<u32> {
  return min(vec4<u32>(k) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(last)) * plane;
}

// dy at e + the four channel offsets d, or zeros when !ok.
fn dy4(e: u32, d: vec4<u32>, ok: bool) -> vec4<f32> {
  return select(vec4<f32>(0.0), vec4<f32>(x[e + d.x], x[e + d.y], x[e + d.z], x[e + d.w]), ok);
}

// Writes a pair of quads' sums (lo: channels +0..3, hi: +4..7) into wbuf's 16 slots.
fn put_pair(lane: u32, lo: Acc, hi: Acc) {
  wbuf[wslot(0u, lane)] = lo.t0; wbuf[wslot(1u, lane)] = hi.t0;
  wbuf[wslot(2u, lane)] = lo.t1; wbuf[wslot(3u, lane)] = hi.t1;
  wbuf[wslot(4u, lane)] = lo.t2; wbuf[wslot(5u, lane)] = hi.t2;
  wbuf[wslot(6u, lane)] = lo.t3; wbuf[wslot(7u, lane)] = hi.t3;
  wbuf[wslot(8u, lane)] = lo.t4; wbuf[wslot(9u, lane)] = hi.t4;
  wbuf[wslot(10u, lane)] = lo.t5; wbuf[wslot(11u, lane)] = hi.t5;
  wbuf[wslot(12u, lane)] = lo.t6; wbuf[wslot(13u, lane)] = hi.t6;
  wbuf[wslot(14u, lane)] = lo.t7; wbuf[wslot(15u, lane)] = hi.t7;
}

@compute @workgroup_size(64 * WRB)
fn weight_grad(@builtin(workgroup_id) wid: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
  let T = 64u * WRB;
  let grp = lid / 64u;
  let lane = lid % 64u;
  let Kg = p.K / p.G;
  let Cg = p.C / p.G;
  let R = Cg * KH * KW;
  let KC = 4u * CQ;
  let kblocks = (Kg + KC - 1u) / KC;
  let rblocks = (R + 7u) / 8u;
  let rgroups = (rblocks + WRB - 1u) / WRB;
  let kb = wid.x / rgroups;
  let rb = (wid.x % rgroups) * WRB + grp;  // >= rblocks: this tap block idles (and writes none)
  let g = kb / kblocks;
  let k0 = g * Kg + (kb % kblocks) * KC;
  let r0 = min(rb, rblocks - 1u) * 8u;
  let ta = taps4(r0, R, g * Cg);
  let tb = taps4(r0 + 4u, R, g * Cg);
  // q<c>: channels k0 + 4c .. k0 + 4c + 3 (q2 with CQ >= 3, q3 with CQ 4)
  var q0 = Acc(); var q1 = Acc(); var q2 = Acc(); var q3 = Acc();
  let plane = p.OH * p.OW;
  let last = p.K - 1u;
  let d0 = chan4(k0, last, plane);
  let d1 = chan4(k0 + 4u, last, plane);
  let d2 = chan4(k0 + 8u, last, plane);
  let d3 = chan4(k0 + 12u, last, plane);
  let total = p.N * plane;
  let per = (total + p.splits - 1u) / p.splits;
  let start = wid.y * per;
  let end = min(total, start + per);
  let img = p.C * p.H * p.W;
  let tile = CQ * T;  // one buffer of dy: [CQ][T]
  var ld = walk_start(start + lid, T);   // the pixel whose dy this thread loads
  var cw = walk_start(start + lane, 64u);  // the pixels this thread multiplies
  // dy of the loader's pixel, 4*CQ channels (zero past the chunk)
  var e = min(ld.n * p.K * plane + ld.oh * p.OW + ld.ow, p.N * p.K * plane - 1u);
  var ok = ld.q < end;
  var s0 = dy4(e, d0, ok);  // BIAS: this loader's sums of dy
  var s1 = dy4(e, d1, ok);
  var s2 = vec4<f32>(0.0);
  var s3 = vec4<f32>(0.0);
  wbuf[lid] = s0;
  wbuf[T + lid] = s1;
  if (CQ > 2u) { s2 = dy4(e, d2, ok); wbuf[2u * T + lid] = s2; }
  if (CQ > 3u) { s3 = dy4(e, d3, ok); wbuf[3u * T + lid] = s3; }
  walk_next(&ld, T);
  workgroupBarrier();
  var cur = 0u;
  for (var t0 = start; t0 < end; t0 += T) {
    let more = t0 + T < end;
    var n0 = vec4<f32>(0.0);
    var n1 = vec4<f32>(0.0);
    var n2 = vec4<f32>(0.0);
    var n3 = vec4<f32>(0.0);
    if (more) {  // the next tile's dy is in flight while this tile multiplies
      e = min(ld.n * p.K * plane + ld.oh * p.OW + ld.ow, p.N * p.K * plane - 1u);
      ok = ld.q < end;
      n0 = dy4(e, d0, ok);
      n1 = dy4(e, d1, ok);
      if (CQ > 2u) { n2 = dy4(e, d2, ok); }
      if (CQ > 3u) { n3 = dy4(e, d3, ok); }
      if (BIAS) { s0 += n0; s1 += n1; s2 += n2; s3 += n3; }
      walk_next(&ld, T);
    }
    for (var j = 0u; j < WRB; j++) {
      if (cw.q < end) {
        let slot = cur * tile + lane + 64u * j;
        let xn = cw.n * img;
        let va = tap_values(ta, xn, cw.oh, cw.ow);
        let vb = tap_values(tb, xn, cw.oh, cw.ow);
        q0 = mac(q0, va, vb, wbuf[slot]);
        q1 = mac(q1, va, vb, wbuf[slot + T]);
        if (CQ > 2u) { q2 = mac(q2, va, vb, wbuf[slot + 2u * T]); }
        if (CQ > 3u) { q3 = mac(q3, va, vb, wbuf[slot + 3u * T]); }
      }
      walk_next(&cw, 64u);
    }
    if (more) {
      cur = 1u - cur;
      wbuf[cur * tile + lid] = n0;
      wbuf[cur * tile + T + lid] = n1;
      if (CQ > 2u) { wbuf[cur * tile + 2u * T + lid] = n2; }
      if (CQ > 3u) { wbuf[cur * tile + 3u * T + lid] = n3; }
    }
    workgroupBarrier();
  }
  // add each tap block's 64 threads' sums, one block and one pair of quads at a time through
  // wbuf: thread lane then owns value lane = (tap lane/8, channel lane%8 of the pair)
  for (var b = 0u; b < WRB; b++) {
    for (var h = 0u; 2u * h < CQ; h++) {
      if (grp == b) {
        if (h == 0u) { put_pair(lane, q0, q1); } else { put_pair(lane, q2, q3); }
      }
      workgroupBarrier();
      if (grp == b) {
        let a = lane / 4u;
        var sum = 0.0;
        for (var u = 0u; u < 64u; u++) { sum += wbuf[wslot(a, u)][lane % 4u]; }
        let kq = 8u * h + (a % 2u) * 4u + lane % 4u;  // channel within the thread's 4*CQ
        let k = k0 + kq;
        let r = r0 + a / 2u;
        if (rb < rblocks && kq < KC && k < (g + 1u) * Kg && r < R) {
          y[(wid.y * p.K + k) * R + r] = sum;
        }
      }
      workgroupBarrier();
    }
  }
  if (BIAS && wid.x % rgroups == 0u) {
    wbuf[lid] = s0;
    wbuf[T + lid] = s1;
    if (CQ > 2u) { wbuf[2u * T + lid] = s2; }
    if (CQ > 3u) { wbuf[3u * T + lid] = s3; }
    workgroupBarrier();
    // a tree over the T (a power of two) threads' sums: thread i adds i + half, a fixed order
    for (var half = T / 2u; half > 0u; half /= 2u) {
      if (lid < half) {
        wbuf[lid] += wbuf[lid + half];
        wbuf[T + lid] += wbuf[T + lid + half];
        if (CQ > 2u) { wbuf[2u * T + lid] += wbuf[2u * T + lid + half]; }
        if (CQ > 3u) { wbuf[3u * T + lid] += wbuf[3u * T + lid + half]; }
      }
      workgroupBarrier();
    }
    let k = k0 + lid;
    if (lid < KC && k < (g + 1u) * Kg) {
      y[p.splits * p.K * R + wid.y * p.K + k] = wbuf[(lid / 4u) * T][lid % 4u];
    }
  }
}

// A zero-padded copy of the forward input for `weight_grad` of a padded layer, which then runs
// UNPADDED (no bounds test per tap): w = x [N,C,H,W], y = [N,C,OH,OW] where here OH, OW are
// the padded sizes H + ph + bottom pad, W + pw + right pad (ops/conv.py). Grid-stride.
@compute @workgroup_size(64)
fn pad_input(@builtin(global_invocation_id) gid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>) {
  let total = p.N * p.C * p.OH * p.OW;
  for (var e = flat_index(gid, nwg); e < total; e += grid_stride(nwg)) {
    let col = e % p.OW;
    let r = e / p.OW;
    let row = r % p.OH;
    let nc = r / p.OH;
    let ih = i32(row) - i32(ph);
    let iw = i32(col) - i32(pw);
    let ok = ih >= 0 && ih < i32(p.H) && iw >= 0 && iw < i32(p.W);
    y[e] = select(0.0, w[select(0u, (nc * p.H + u32(ih)) * p.W + u32(iw), ok)], ok);
  }
}
