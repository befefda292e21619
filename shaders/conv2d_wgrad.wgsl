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

// Workgroup (wid.x = (group, 8 output channels, WRB blocks of 8 taps), wid.y = chunk of the
// output pixels (n, oh, ow) flattened into `splits` chunks), 64 threads a tap block. The chunk
// advances a tile of T = 64*WRB pixels at a time: every thread loads one pixel's 8 values of dy
// into workgroup memory (double-buffered, one barrier a tile), then each thread accumulates
// 8 channels x 8 taps over WRB pixels of the tile (dy from workgroup memory, shared by the WRB
// tap blocks; 8 loads of x). The threads' sums are added through workgroup memory, one tap
// block at a time, and written to y[chunk, k, r] (reduce.wgsl adds the chunks). Every index
// into the accumulators is a constant (written out), so they stay in registers.
override WRB: u32 = 4u;                        // tap blocks a workgroup: 1, 2 or 4
var<workgroup> wbuf: array<vec4<f32>, 1024>;   // dy tiles [2][2][T], then the sums [16][64]
// Every accumulator and tap offset is a named local (no array, no index): they stay in registers.

fn wslot(a: u32, lid: u32) -> u32 { return a * 64u + (a + lid) % 64u; }

// Without padding every tap of every output pixel is inside the input: the offset of a tap
// from the pixel's window corner is then one constant per tap (Taps.x), nothing is checked.
override UNPADDED: bool = ph == 0u && pw == 0u;

// BIAS_TAP (ops/conv.py, split into parts): one more tap after the R real ones, whose input
// value is 1 at every pixel, so its sums are the bias gradient sum_{n,oh,ow} dy[n,k,oh,ow],
// added beside the weight gradient from the same dy loads; its partial sums go to the tail
// y[splits * K * R + chunk * K + k] that reduce.wgsl reduce_splits adds into the bias's
// gradient (no channel_sum and reduce_splits of their own).
override BIAS_TAP: bool = false;

// Offsets of taps r0 + 0..3 (c, i, j flattened, clamped to R - 1): input offset in an image
// (with the tap's row and column when unpadded), row offset i*dh - ph, column offset j*dw - pw.
// one: BIAS_TAP's tap (r == R), whose value is 1.
struct Taps { x: vec4<u32>, i: vec4<i32>, j: vec4<i32>, one: vec4<bool> }

fn taps4(r0: u32, R: u32, c0: u32) -> Taps {
  let taps = KH * KW;
  let one = vec4<bool>(BIAS_TAP) & (vec4<u32>(r0) + vec4<u32>(0u, 1u, 2u, 3u) == vec4<u32>(R));
  let r = min(vec4<u32>(r0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(R - 1u));
  let i = (r % taps) / KW;
  let j = r % KW;
  let inside = select(vec4<u32>(0u), i * dh * p.W + j * dw, vec4<bool>(UNPADDED));
  return Taps((r / taps + c0) * p.H * p.W + inside, vec4<i32>(i * dh) - i32(ph),
              vec4<i32>(j * dw) - i32(pw), one);
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
  let v = vec4<f32>(tap_value(t.x.x, t.i.x, t.j.x, xn, oh, ow),
                    tap_value(t.x.y, t.i.y, t.j.y, xn, oh, ow),
                    tap_value(t.x.z, t.i.z, t.j.z, xn, oh, ow),
                    tap_value(t.x.w, t.i.w, t.j.w, xn, oh, ow));
  if (BIAS_TAP) { return select(v, vec4<f32>(1.0), t.one); }
  return v;
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

@compute @workgroup_size(64 * WRB)
fn weight_grad(@builtin(workgroup_id) wid: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
  let T = 64u * WRB;
  let grp = lid / 64u;
  let lane = lid % 64u;
  let Kg = p.K / p.G;
  let Cg = p.C / p.G;
  let R = Cg * KH * KW;
  let kblocks = (Kg + 7u) / 8u;
  let rblocks = (R + u32(BIAS_TAP) + 7u) / 8u;
  let rgroups = (rblocks + WRB - 1u) / WRB;
  let kb = wid.x / rgroups;
  let rb = (wid.x % rgroups) * WRB + grp;  // >= rblocks: this tap block idles (and writes none)
  let g = kb / kblocks;
  let k0 = g * Kg + (kb % kblocks) * 8u;
  let r0 = min(rb, rblocks - 1u) * 8u;
  let ta = taps4(r0, R, g * Cg);
  let tb = taps4(r0 + 4u, R, g * Cg);
  // acc_tc: tap t (0..7), channels k0..k0+3 (c = 0) or k0+4..k0+7 (c = 1)
  var a00 = vec4<f32>(0.0); var a01 = vec4<f32>(0.0); var a10 = vec4<f32>(0.0);
  var a11 = vec4<f32>(0.0); var a20 = vec4<f32>(0.0); var a21 = vec4<f32>(0.0);
  var a30 = vec4<f32>(0.0); var a31 = vec4<f32>(0.0); var a40 = vec4<f32>(0.0);
  var a41 = vec4<f32>(0.0); var a50 = vec4<f32>(0.0); var a51 = vec4<f32>(0.0);
  var a60 = vec4<f32>(0.0); var a61 = vec4<f32>(0.0); var a70 = vec4<f32>(0.0);
  var a71 = vec4<f32>(0.0);
  let plane = p.OH * p.OW;
  let last = p.K - 1u;
  let dk = vec4<u32>(min(k0, last), min(k0 + 1u, last), min(k0 + 2u, last),
                     min(k0 + 3u, last)) * plane;
  let dk4 = vec4<u32>(min(k0 + 4u, last), min(k0 + 5u, last), min(k0 + 6u, last),
                      min(k0 + 7u, last)) * plane;
  let total = p.N * plane;
  let per = (total + p.splits - 1u) / p.splits;
  let start = wid.y * per;
  let end = min(total, start + per);
  let img = p.C * p.H * p.W;
  var ld = walk_start(start + lid, T);   // the pixel whose dy this thread loads
  var cw = walk_start(start + lane, 64u);  // the pixels this thread multiplies
  // dy of the loader's pixel, 8 channels (zero past the chunk)
  var e = min(ld.n * p.K * plane + ld.oh * p.OW + ld.ow, p.N * p.K * plane - 1u);
  var ok = ld.q < end;
  wbuf[lid] = select(vec4<f32>(0.0), vec4<f32>(x[e + dk.x], x[e + dk.y], x[e + dk.z],
                                                x[e + dk.w]), ok);
  wbuf[T + lid] = select(vec4<f32>(0.0), vec4<f32>(x[e + dk4.x], x[e + dk4.y], x[e + dk4.z],
                                                    x[e + dk4.w]), ok);
  walk_next(&ld, T);
  workgroupBarrier();
  var cur = 0u;
  for (var t0 = start; t0 < end; t0 += T) {
    let more = t0 + T < end;
    var n0 = vec4<f32>(0.0);
    var n1 = vec4<f32>(0.0);
    if (more) {  // the next tile's dy is in flight while this tile multiplies
      e = min(ld.n * p.K * plane + ld.oh * p.OW + ld.ow, p.N * p.K * plane - 1u);
      ok = ld.q < end;
      n0 = select(vec4<f32>(0.0), vec4<f32>(x[e + dk.x], x[e + dk.y], x[e + dk.z],
                                            x[e + dk.w]), ok);
      n1 = select(vec4<f32>(0.0), vec4<f32>(x[e + dk4.x], x[e + dk4.y], x[e + dk4.z],
                                            x[e + dk4.w]), ok);
      walk_next(&ld, T);
    }
    for (var j = 0u; j < WRB; j++) {
      if (cw.q < end) {
        let slot = cur * 2u * T + lane + 64u * j;
        let d0 = wbuf[slot];
        let d1 = wbuf[slot + T];
        let xn = cw.n * img;
        let va = tap_values(ta, xn, cw.oh, cw.ow);
        let vb = tap_values(tb, xn, cw.oh, cw.ow);
        a00 = fma(vec4<f32>(va.x), d0, a00); a01 = fma(vec4<f32>(va.x), d1, a01);
        a10 = fma(vec4<f32>(va.y), d0, a10); a11 = fma(vec4<f32>(va.y), d1, a11);
        a20 = fma(vec4<f32>(va.z), d0, a20); a21 = fma(vec4<f32>(va.z), d1, a21);
        a30 = fma(vec4<f32>(va.w), d0, a30); a31 = fma(vec4<f32>(va.w), d1, a31);
        a40 = fma(vec4<f32>(vb.x), d0, a40); a41 = fma(vec4<f32>(vb.x), d1, a41);
        a50 = fma(vec4<f32>(vb.y), d0, a50); a51 = fma(vec4<f32>(vb.y), d1, a51);
        a60 = fma(vec4<f32>(vb.z), d0, a60); a61 = fma(vec4<f32>(vb.z), d1, a61);
        a70 = fma(vec4<f32>(vb.w), d0, a70); a71 = fma(vec4<f32>(vb.w), d1, a71);
      }
      walk_next(&cw, 64u);
    }
    if (more) {
      cur = 1u - cur;
      wbuf[cur * 2u * T + lid] = n0;
      wbuf[cur * 2u * T + T + lid] = n1;
    }
    workgroupBarrier();
  }
  // add each tap block's 64 threads' sums (one block at a time through wbuf): thread lane then
  // owns value lane = (tap lane/8, channel lane%8)
  for (var b = 0u; b < WRB; b++) {
    if (grp == b) {
      wbuf[wslot(0u, lane)] = a00; wbuf[wslot(1u, lane)] = a01;
      wbuf[wslot(2u, lane)] = a10; wbuf[wslot(3u, lane)] = a11;
      wbuf[wslot(4u, lane)] = a20; wbuf[wslot(5u, lane)] = a21;
      wbuf[wslot(6u, lane)] = a30; wbuf[wslot(7u, lane)] = a31;
      wbuf[wslot(8u, lane)] = a40; wbuf[wslot(9u, lane)] = a41;
      wbuf[wslot(10u, lane)] = a50; wbuf[wslot(11u, lane)] = a51;
      wbuf[wslot(12u, lane)] = a60; wbuf[wslot(13u, lane)] = a61;
      wbuf[wslot(14u, lane)] = a70; wbuf[wslot(15u, lane)] = a71;
    }
    workgroupBarrier();
    if (grp == b) {
      let a = lane / 4u;
      var sum = 0.0;
      for (var u = 0u; u < 64u; u++) { sum += wbuf[wslot(a, u)][lane % 4u]; }
      let k = k0 + (a % 2u) * 4u + lane % 4u;
      let r = r0 + a / 2u;
      if (rb < rblocks && k < (g + 1u) * Kg && r < R) { y[(wid.y * p.K + k) * R + r] = sum; }
      if (BIAS_TAP && rb < rblocks && k < (g + 1u) * Kg && r == R) {
        y[p.splits * p.K * R + wid.y * p.K + k] = sum;
      }
    }
    workgroupBarrier();
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
