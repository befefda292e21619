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
// reduce.wgsl adds (ops/conv_depthwise.py picks the parts).

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
