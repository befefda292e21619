// Depthwise 2-D convolution (group == C == K: one input channel per output channel, as
// MobileNet's 3x3 blocks), NCHW, ONNX pads / strides / dilations, and its gradients:
//   forward:         y[n,c,oh,ow]  = b[c] + sum_{i,j} w[c,i,j] * x[n,c,ih,iw]
//   backward_input:  dx[n,c,ih,iw] = sum_{i,j} w[c,i,j] * dy[n,c,oh,ow]
//   backward_weight: dw[c,i,j]     = sum_{n,oh,ow} dy[n,c,oh,ow] * x[n,c,ih,iw]
// with ih = oh*sh + i*dh - ph, iw = ow*sw + j*dw - pw. conv2d.wgsl's kernels block 8 output
// channels a thread and sum over the group's input channels: with one channel a group 7 of
// their 8 multiply-adds (and loads) are wasted, and their weight gradient had 3 threads a
// channel for the whole batch. Here a thread owns 4 columns of one row of one channel
// (forward, backward_input); the weight gradient has a thread per (part, channel, tap), each
// part a range of the N*OH output rows, written as partial sums [parts, C, KH*KW] that
// reduce.wgsl adds (ops/conv_depthwise.py picks the parts). On GPU adapters the weight gradient
// is `backward_weight_wg` instead: a workgroup per (channel, part of the batch), its threads
// over consecutive pixels (coalesced loads; the window's x values shared through the cache),
// each summing every tap, the taps' sums then added across the workgroup.

//!include conv_window
//!include index

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;        // x, or dy (backward_*)
@group(0) @binding(2) var<storage, read> w: array<f32>;        // [C,1,KH,KW], or x (weight grad)
@group(0) @binding(3) var<storage, read> b: array<f32>;        // bias [C], or the mask's source
@group(0) @binding(4) var<storage, read_write> y: array<f32>;  // output

const WT: u32 = 4u;  // columns per thread (forward, backward_input)

// v with the components q < valid where b[base + q] <= 0 set to 0 (a fused ReLU's gradient).
fn masked(v: vec4<f32>, base: u32, valid: u32) -> vec4<f32> {
  let last = base + min(valid, 4u) - 1u;
  let m = vec4<f32>(b[base], b[min(base + 1u, last)], b[min(base + 2u, last)],
                    b[min(base + 3u, last)]);
  return select(vec4<f32>(0.0), v, m > vec4<f32>(0.0));
}

fn store(base: u32, v: vec4<f32>, count: u32) {
  if (count == 4u) {
    y[base] = v.x; y[base + 1u] = v.y; y[base + 2u] = v.z; y[base + 3u] = v.w;
  } else {
    for (var q = 0u; q < count; q++) { y[base + q] = v[q]; }
  }
}

@compute @workgroup_size(64)
fn forward(@builtin(global_invocation_id) gid: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = flat_index(gid, nwg);
  let wblocks = (p.OW + WT - 1u) / WT;
  if (t >= p.N * p.C * p.OH * wblocks) { return; }
  let ow0 = (t % wblocks) * WT;
  let r = t / wblocks;
  let oh = r % p.OH;
  let nc = r / p.OH;  // n * C + c
  let c = nc % p.C;
  let xbase = nc * p.H * p.W;
  let iw0 = vec4<i32>(i32(ow0 * sw) - i32(pw)) + vec4<i32>(0, 1, 2, 3) * i32(sw);
  var acc = vec4<f32>(0.0);
  for (var i = 0u; i < KH; i++) {
    let ih = i32(oh * sh + i * dh) - i32(ph);
    if (ih < 0 || ih >= i32(p.H)) { continue; }
    let xrow = xbase + u32(ih) * p.W;
    for (var j = 0u; j < KW; j++) {
      let iw = iw0 + vec4<i32>(i32(j * dw));
      let ok = (iw >= vec4<i32>(0)) & (iw < vec4<i32>(i32(p.W)));
      let ix = vec4<u32>(clamp(iw, vec4<i32>(0), vec4<i32>(i32(p.W) - 1))) + xrow;
      let xv = select(vec4<f32>(0.0), vec4<f32>(x[ix.x], x[ix.y], x[ix.z], x[ix.w]), ok);
      acc = vec4<f32>(w[(c * KH + i) * KW + j]) * xv + acc;
    }
  }
  var v = acc + vec4<f32>(select(0.0, b[c], p.has_bias != 0u));
  if (p.relu != 0u) { v = max(v, vec4<f32>(0.0)); }
  store((nc * p.OH + oh) * p.OW + ow0, v, min(p.OW - ow0, WT));
}

// x = dy [N,C,OH,OW], y = dx [N,C,H,W]; mask: dx = 0 where b (the layer's input) <= 0.
@compute @workgroup_size(64)
fn backward_input(@builtin(global_invocation_id) gid: vec3<u32>,
                  @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = flat_index(gid, nwg);
  let wblocks = (p.W + WT - 1u) / WT;
  if (t >= p.N * p.C * p.H * wblocks) { return; }
  let iw0 = (t % wblocks) * WT;
  let r = t / wblocks;
  let ih = r % p.H;
  let nc = r / p.H;
  let c = nc % p.C;
  let dybase = nc * p.OH * p.OW;
  var acc = vec4<f32>(0.0);
  for (var i = 0u; i < KH; i++) {
    let num_h = i32(ih + ph) - i32(i * dh);
    if (num_h < 0 || (sh != 1u && u32(num_h) % sh != 0u)) { continue; }
    let oh = select(u32(num_h) / sh, u32(num_h), sh == 1u);
    if (oh >= p.OH) { continue; }
    let dyrow = dybase + oh * p.OW;
    for (var j = 0u; j < KW; j++) {
      let num_w = vec4<i32>(i32(iw0 + pw) - i32(j * dw)) + vec4<i32>(0, 1, 2, 3);
      var ow = vec4<u32>(max(num_w, vec4<i32>(0)));
      var ok = (num_w >= vec4<i32>(0)) & (ow < vec4<u32>(p.OW * sw));
      if (sw != 1u) {  // an override constant: stride-1 layers compile without divisions
        ok = ok & (ow % sw == vec4<u32>(0u));
        ow = ow / sw;
      }
      let ix = min(ow, vec4<u32>(p.OW - 1u)) + dyrow;
      let dv = select(vec4<f32>(0.0), vec4<f32>(x[ix.x], x[ix.y], x[ix.z], x[ix.w]), ok);
      acc = vec4<f32>(w[(c * KH + i) * KW + j]) * dv + acc;
    }
  }
  let base = (nc * p.H + ih) * p.W + iw0;
  let count = min(p.W - iw0, WT);
  var v = acc;
  if (p.mask != 0u) { v = masked(v, base, count); }
  store(base, v, count);
}

// x = dy [N,C,OH,OW], w = the layer's input [N,C,H,W], y = dw [splits, C, KH*KW]: thread
// (part, c, tap) sums the rows [part * per, (part + 1) * per) of the N*OH output rows, four
// columns a step (a vec4 of partial sums, added at the end).
@compute @workgroup_size(64)
fn backward_weight(@builtin(global_invocation_id) gid: vec3<u32>,
                   @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = flat_index(gid, nwg);
  let taps = KH * KW;
  if (t >= p.splits * p.C * taps) { return; }
  let tap = t % taps;
  let c = (t / taps) % p.C;
  let part = t / (taps * p.C);
  let i = tap / KW;
  let j = tap % KW;
  let rows = p.N * p.OH;
  let per = (rows + p.splits - 1u) / p.splits;
  let row_end = min(rows, (part + 1u) * per);
  let wblocks = (p.OW + 3u) / 4u;
  var acc = vec4<f32>(0.0);
  for (var rr = part * per; rr < row_end; rr++) {
    let n = rr / p.OH;
    let oh = rr % p.OH;
    let ih = i32(oh * sh + i * dh) - i32(ph);
    if (ih < 0 || ih >= i32(p.H)) { continue; }
    let nc = n * p.C + c;
    let xrow = (nc * p.H + u32(ih)) * p.W;
    let dyrow = (nc * p.OH + oh) * p.OW;
    for (var q = 0u; q < wblocks; q++) {
      let ow = vec4<u32>(q * 4u) + vec4<u32>(0u, 1u, 2u, 3u);
      let iw = vec4<i32>(ow * sw + j * dw) - vec4<i32>(i32(pw));
      let ok = (ow < vec4<u32>(p.OW)) & (iw >= vec4<i32>(0)) & (iw < vec4<i32>(i32(p.W)));
      let ie = min(ow, vec4<u32>(p.OW - 1u)) + dyrow;
      let ix = vec4<u32>(clamp(iw, vec4<i32>(0), vec4<i32>(i32(p.W) - 1))) + xrow;
      let dv = vec4<f32>(x[ie.x], x[ie.y], x[ie.z], x[ie.w]);
      let xv = select(vec4<f32>(0.0), vec4<f32>(w[ix.x], w[ix.y], w[ix.z], w[ix.w]), ok);
      acc = dv * xv + acc;
    }
  }
  y[(part * p.C + c) * taps + tap] = (acc.x + acc.y) + (acc.z + acc.w);
}

// GPU adapters' weight gradient (ops/conv_depthwise.py `weight_grad`, windows up to MAX_KH x
// MAX_KW): workgroup (c, part) sums the images [part * per, (part + 1) * per) of channel c;
// thread lid takes the pixels e = lid, lid + WGD, ... of those images' planes (one dy value
// each, times the KH x KW window of x around it: coalesced loads, the window's values shared
// through the cache). Window row i's taps accumulate in the registers lo<i> (columns 0-3) and
// hi<i> (4-7), named, not an array (an array indexed in a loop went to local memory); then
// each row's vec4 is summed over the workgroup (pairwise, halving) into
// y[(part * C + c) * taps + tap]. The thread-per-(part, channel, tap) kernel above read 9 rows
// of as many channels per warp: 1.3 ms for a MobileNetV2 layer of 1000 x 96 x 16 x 16 on an
// H200.
const WGD: u32 = 256u;
var<workgroup> wred: array<vec4<f32>, WGD>;
var<private> lo0: vec4<f32>;
var<private> hi0: vec4<f32>;
var<private> lo1: vec4<f32>;
var<private> hi1: vec4<f32>;
var<private> lo2: vec4<f32>;
var<private> hi2: vec4<f32>;
var<private> lo3: vec4<f32>;
var<private> hi3: vec4<f32>;
var<private> lo4: vec4<f32>;
var<private> hi4: vec4<f32>;
var<private> lo5: vec4<f32>;
var<private> hi5: vec4<f32>;
var<private> lo6: vec4<f32>;
var<private> hi6: vec4<f32>;

struct WinRow { lo: vec4<f32>, hi: vec4<f32> }

// x's value at column j of window row `base` (0 outside the image or past KW).
fn win_at(base: u32, iw0: i32, j: u32) -> f32 {
  let iw = iw0 + i32(j * dw);
  let ok = j < KW && iw >= 0 && iw < i32(p.W);
  return select(0.0, w[select(0u, base + u32(iw), ok)], ok);
}

// Row i of the window of output pixel (oh, ow) in the plane at xb: columns 0-3 and 4-7.
fn window_row(xb: u32, i: u32, oh: u32, ow: u32) -> WinRow {
  var r: WinRow;
  let ih = i32(oh * sh + i * dh) - i32(ph);
  if (ih < 0 || ih >= i32(p.H)) { return r; }
  let base = xb + u32(ih) * p.W;
  let iw0 = i32(ow * sw) - i32(pw);
  r.lo = vec4<f32>(win_at(base, iw0, 0u), win_at(base, iw0, 1u), win_at(base, iw0, 2u),
                   win_at(base, iw0, 3u));
  if (KW > 4u) {
    r.hi = vec4<f32>(win_at(base, iw0, 4u), win_at(base, iw0, 5u), win_at(base, iw0, 6u),
                     win_at(base, iw0, 7u));
  }
  return r;
}

// The workgroup's sum of each thread's row i (lo, hi) into y[out0 + i * KW + j]; every
// invocation calls it (uniform control flow).
fn put_row(i: u32, lo: vec4<f32>, hi: vec4<f32>, lid: u32, out0: u32) {
  for (var half = 0u; half < select(1u, 2u, KW > 4u); half++) {
    wred[lid] = select(lo, hi, half == 1u);
    workgroupBarrier();
    for (var h = WGD / 2u; h > 0u; h = h >> 1u) {
      if (lid < h) { wred[lid] += wred[lid + h]; }
      workgroupBarrier();
    }
    if (lid == 0u) {
      for (var j = half * 4u; j < min(KW, half * 4u + 4u); j++) {
        y[out0 + i * KW + j] = wred[0][j - half * 4u];
      }
    }
    workgroupBarrier();
  }
}

@compute @workgroup_size(WGD)
fn backward_weight_wg(@builtin(workgroup_id) wid: vec3<u32>,
                      @builtin(local_invocation_index) lid: u32) {
  let c = wid.x;
  let pix = p.OH * p.OW;
  let per = (p.N + p.splits - 1u) / p.splits;
  let n0 = min(p.N, wid.y * per);
  let total = (min(p.N, n0 + per) - n0) * pix;
  for (var e = lid; e < total; e += WGD) {
    let nc = (n0 + e / pix) * p.C + c;
    let q = e % pix;
    let oh = q / p.OW;
    let ow = q % p.OW;
    let dv = vec4<f32>(x[nc * pix + q]);
    let xb = nc * p.H * p.W;
    var r = window_row(xb, 0u, oh, ow);
    lo0 = fma(dv, r.lo, lo0);
    hi0 = fma(dv, r.hi, hi0);
  if (KH > 1u) { r = window_row(xb, 1u, oh, ow); lo1 = fma(dv, r.lo, lo1); hi1 = fma(dv, r.hi, hi1); }
  if (KH > 2u) { r = window_row(xb, 2u, oh, ow); lo2 = fma(dv, r.lo, lo2); hi2 = fma(dv, r.hi, hi2); }
  if (KH > 3u) { r = window_row(xb, 3u, oh, ow); lo3 = fma(dv, r.lo, lo3); hi3 = fma(dv, r.hi, hi3); }
  if (KH > 4u) { r = window_row(xb, 4u, oh, ow); lo4 = fma(dv, r.lo, lo4); hi4 = fma(dv, r.hi, hi4); }
  if (KH > 5u) { r = window_row(xb, 5u, oh, ow); lo5 = fma(dv, r.lo, lo5); hi5 = fma(dv, r.hi, hi5); }
  if (KH > 6u) { r = window_row(xb, 6u, oh, ow); lo6 = fma(dv, r.lo, lo6); hi6 = fma(dv, r.hi, hi6); }
  }
  let out0 = (wid.y * p.C + c) * KH * KW;
  put_row(0u, lo0, hi0, lid, out0);
  if (KH > 1u) { put_row(1u, lo1, hi1, lid, out0); }
  if (KH > 2u) { put_row(2u, lo2, hi2, lid, out0); }
  if (KH > 3u) { put_row(3u, lo3, hi3, lid, out0); }
  if (KH > 4u) { put_row(4u, lo4, hi4, lid, out0); }
  if (KH > 5u) { put_row(5u, lo5, hi5, lid, out0); }
  if (KH > 6u) { put_row(6u, lo6, hi6, lid, out0); }
}
