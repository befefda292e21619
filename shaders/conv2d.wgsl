// 2-D convolution, NCHW, ONNX Conv semantics (pads, strides, dilations, group), with its
// gradients. Register-blocked direct convolution: each thread owns CT channels x WT columns of
// one output row, so every loaded input value feeds CT multiply-adds and every weight WT.
//   forward:         y[n,k,oh,ow]  = b[k] + sum_{c,i,j} w[k,c,i,j] * x[n, g*Cg+c, ih, iw]
//   backward_input:  dx[n,c,ih,iw] = sum_{k in group, i, j} w[k,c',i,j] * dy[n,k,oh,ow]
//   backward_weight: dw[k,c,i,j]   = sum_{n,oh,ow} dy[n,k,oh,ow] * x[n, g*Cg+c, ih, iw]
// with ih = oh*sh + i*dh - ph, iw = ow*sw + j*dw - pw. backward_weight splits the batch into
// `splits` parts (grid z) writing partial sums [split, K, Cg*KH*KW]; reduce.wgsl adds them.

struct Params {
  N: u32, C: u32, H: u32, W: u32,
  K: u32, OH: u32, OW: u32, G: u32,
  KH: u32, KW: u32, sh: u32, sw: u32,
  ph: u32, pw: u32, dh: u32, dw: u32,
  has_bias: u32, splits: u32, _p0: u32, _p1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;       // [N,C,H,W] or dy
@group(0) @binding(2) var<storage, read> w: array<f32>;       // [K,Cg,KH,KW] or x (weight grad)
@group(0) @binding(3) var<storage, read> b: array<f32>;       // [K] bias (or any when unused)
@group(0) @binding(4) var<storage, read_write> y: array<f32>; // output

const CT: u32 = 8u;  // channels per thread
const WT: u32 = 4u;  // output columns per thread (forward, backward_input)
const RT: u32 = 4u;  // weight taps per thread (backward_weight)

fn flat(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
  return gid.x + gid.y * nwg.x * 64u;
}

@compute @workgroup_size(64)
fn forward(@builtin(global_invocation_id) gid: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = flat(gid, nwg);
  let Kg = p.K / p.G;
  let Cg = p.C / p.G;
  let cblocks = (Kg + CT - 1u) / CT;
  let wblocks = (p.OW + WT - 1u) / WT;
  if (t >= p.N * p.G * cblocks * p.OH * wblocks) { return; }
  let ow0 = (t % wblocks) * WT;
  var r = t / wblocks;
  let oh = r % p.OH;
  r = r / p.OH;
  let cb = r % (p.G * cblocks);
  let n = r / (p.G * cblocks);
  let g = cb / cblocks;
  let k0 = g * Kg + (cb % cblocks) * CT;
  let kend = (g + 1u) * Kg;
  let taps = p.KH * p.KW;
  var acc: array<f32, 32>;  // CT * WT
  for (var c = 0u; c < Cg; c++) {
    let xbase = (n * p.C + g * Cg + c) * p.H;
    for (var i = 0u; i < p.KH; i++) {
      let ih = i32(oh * p.sh + i * p.dh) - i32(p.ph);
      if (ih < 0 || ih >= i32(p.H)) { continue; }
      let xrow = (xbase + u32(ih)) * p.W;
      for (var j = 0u; j < p.KW; j++) {
        var xv: array<f32, 4>;
        for (var q = 0u; q < WT; q++) {
          let iw = i32((ow0 + q) * p.sw + j * p.dw) - i32(p.pw);
          let ok = iw >= 0 && iw < i32(p.W) && ow0 + q < p.OW;
          xv[q] = select(0.0, x[xrow + u32(max(iw, 0))], ok);
        }
        let tap = (c * p.KH + i) * p.KW + j;
        for (var m = 0u; m < CT; m++) {
          let wv = w[min(k0 + m, p.K - 1u) * Cg * taps + tap];
          for (var q = 0u; q < WT; q++) { acc[m * WT + q] = fma(wv, xv[q], acc[m * WT + q]); }
        }
      }
    }
  }
  for (var m = 0u; m < CT; m++) {
    let k = k0 + m;
    if (k >= kend) { break; }
    let bias = select(0.0, b[k], p.has_bias != 0u);
    let ybase = ((n * p.K + k) * p.OH + oh) * p.OW;
    for (var q = 0u; q < WT; q++) {
      if (ow0 + q < p.OW) { y[ybase + ow0 + q] = acc[m * WT + q] + bias; }
    }
  }
}

// x = dy [N,K,OH,OW], w = weight, y = dx [N,C,H,W]. Thread: CT input channels x WT columns.
@compute @workgroup_size(64)
fn backward_input(@builtin(global_invocation_id) gid: vec3<u32>,
                  @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = flat(gid, nwg);
  let Kg = p.K / p.G;
  let Cg = p.C / p.G;
  let cblocks = (Cg + CT - 1u) / CT;
  let wblocks = (p.W + WT - 1u) / WT;
  if (t >= p.N * p.G * cblocks * p.H * wblocks) { return; }
  let iw0 = (t % wblocks) * WT;
  var r = t / wblocks;
  let ih = r % p.H;
  r = r / p.H;
  let cb = r % (p.G * cblocks);
  let n = r / (p.G * cblocks);
  let g = cb / cblocks;
  let c0 = (cb % cblocks) * CT;  // within the group
  let taps = p.KH * p.KW;
  var acc: array<f32, 32>;
  for (var k = g * Kg; k < (g + 1u) * Kg; k++) {
    let dybase = (n * p.K + k) * p.OH;
    for (var i = 0u; i < p.KH; i++) {
      let num_h = i32(ih + p.ph) - i32(i * p.dh);
      if (num_h < 0 || u32(num_h) % p.sh != 0u) { continue; }
      let oh = u32(num_h) / p.sh;
      if (oh >= p.OH) { continue; }
      let dyrow = (dybase + oh) * p.OW;
      for (var j = 0u; j < p.KW; j++) {
        var dv: array<f32, 4>;
        for (var q = 0u; q < WT; q++) {
          let num_w = i32(iw0 + q + p.pw) - i32(j * p.dw);
          let ow = u32(max(num_w, 0)) / p.sw;
          let ok = num_w >= 0 && u32(num_w) % p.sw == 0u && ow < p.OW;
          dv[q] = select(0.0, x[dyrow + min(ow, p.OW - 1u)], ok);
        }
        for (var m = 0u; m < CT; m++) {
          let wv = w[(k * Cg + min(c0 + m, Cg - 1u)) * taps + i * p.KW + j];
          for (var q = 0u; q < WT; q++) { acc[m * WT + q] = fma(wv, dv[q], acc[m * WT + q]); }
        }
      }
    }
  }
  for (var m = 0u; m < CT; m++) {
    let c = c0 + m;
    if (c >= Cg) { break; }
    let xbase = ((n * p.C + g * Cg + c) * p.H + ih) * p.W;
    for (var q = 0u; q < WT; q++) {
      if (iw0 + q < p.W) { y[xbase + iw0 + q] = acc[m * WT + q]; }
    }
  }
}

// x = dy [N,K,OH,OW], w = x (the forward input) [N,C,H,W], y = partial dw [splits,K,Cg*KH*KW].
// Thread: CT output channels x RT taps (c,i,j flattened), over the batch part gid.z.
@compute @workgroup_size(64)
fn backward_weight(@builtin(global_invocation_id) gid: vec3<u32>,
                   @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = gid.x + gid.y * nwg.x * 64u;
  let split = gid.z;
  let Kg = p.K / p.G;
  let Cg = p.C / p.G;
  let taps = p.KH * p.KW;
  let R = Cg * taps;
  let kblocks = (Kg + CT - 1u) / CT;
  let rblocks = (R + RT - 1u) / RT;
  if (t >= p.G * kblocks * rblocks) { return; }
  let r0 = (t % rblocks) * RT;
  let kb = t / rblocks;
  let g = kb / kblocks;
  let k0 = g * Kg + (kb % kblocks) * CT;
  let kend = (g + 1u) * Kg;
  // Decode the RT taps once: input-channel offset, row and column offsets.
  var rc: array<u32, 4>;
  var ri: array<i32, 4>;
  var rj: array<i32, 4>;
  for (var q = 0u; q < RT; q++) {
    let rr = min(r0 + q, R - 1u);
    rc[q] = g * Cg + rr / taps;
    ri[q] = i32(((rr % taps) / p.KW) * p.dh) - i32(p.ph);
    rj[q] = i32((rr % p.KW) * p.dw) - i32(p.pw);
  }
  let per = (p.N + p.splits - 1u) / p.splits;
  let n_end = min(p.N, (split + 1u) * per);
  var acc: array<f32, 32>;  // CT * RT
  for (var n = split * per; n < n_end; n++) {
    for (var oh = 0u; oh < p.OH; oh++) {
      for (var ow = 0u; ow < p.OW; ow++) {
        var xv: array<f32, 4>;
        for (var q = 0u; q < RT; q++) {
          let ih = i32(oh * p.sh) + ri[q];
          let iw = i32(ow * p.sw) + rj[q];
          let ok = ih >= 0 && ih < i32(p.H) && iw >= 0 && iw < i32(p.W);
          let idx = ((n * p.C + rc[q]) * p.H + u32(max(ih, 0))) * p.W + u32(max(iw, 0));
          xv[q] = select(0.0, w[min(idx, arrayLength(&w) - 1u)], ok);
        }
        for (var m = 0u; m < CT; m++) {
          let k = min(k0 + m, p.K - 1u);
          let dv = x[((n * p.K + k) * p.OH + oh) * p.OW + ow];
          for (var q = 0u; q < RT; q++) { acc[m * RT + q] = fma(dv, xv[q], acc[m * RT + q]); }
        }
      }
    }
  }
  for (var m = 0u; m < CT; m++) {
    let k = k0 + m;
    if (k >= kend) { break; }
    for (var q = 0u; q < RT; q++) {
      if (r0 + q < R) { y[(split * p.K + k) * R + r0 + q] = acc[m * RT + q]; }
    }
  }
}
