// 2-D convolution, NCHW, ONNX Conv semantics (pads, strides, dilations, group), with its
// gradients. Register-blocked direct convolution: each thread owns CT channels x WT columns of
// one output row, so every loaded input value feeds CT multiply-adds and every weight WT.
//   forward:         y[n,k,oh,ow]  = b[k] + sum_{c,i,j} w[k,c,i,j] * x[n, g*Cg+c, ih, iw]
//   backward_input:  dx[n,c,ih,iw] = sum_{k in group, i, j} w[k,c',i,j] * dy[n,k,oh,ow]
//   backward_weight: dw[k,c,i,j]   = sum_{n,oh,ow} dy[n,k,oh,ow] * x[n, g*Cg+c, ih, iw]
// with ih = oh*sh + i*dh - ph, iw = ow*sw + j*dw - pw. The weight is first repacked so that
// the eight channels a thread needs at one tap are two aligned vec4 loads (pack_forward,
// pack_backward): on CPU adapters every scalar load is a gather, the dominant cost here.
// backward_weight splits the batch into `splits` parts (grid z) writing partial sums
// [split, K, Cg*KH*KW]; reduce.wgsl adds them. GPU adapters compute the weight gradient with
// conv2d_wgrad.wgsl instead, and `forward` with 4 channels a thread for small batches (FCT);
// CPU adapters run stride-1 3-wide windows on conv2d_wide.wgsl (the packed weights of here).

//!include conv_window
//!include conv_acc
//!include index

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;       // [N,C,H,W] or dy
@group(0) @binding(2) var<storage, read> w: array<f32>;       // [K,Cg,KH,KW] or x (weight grad)
@group(0) @binding(3) var<storage, read> wt: array<vec4<f32>>; // packed weight (see pack_*)
@group(0) @binding(4) var<storage, read> b: array<f32>;       // [K] bias (or any when unused)
@group(0) @binding(5) var<storage, read_write> y: array<f32>; // output

const CT: u32 = 8u;  // channels per thread
// Channels per thread of `forward`: 8, or 4 where 8 leaves a GPU with too few threads (small
// batches; ops/conv.py). Weight rows stay padded to 8 channels (pack_forward).
override FCT: u32 = 8u;
// 1 on CPU adapters (ops/conv.py): `forward` loads a stride-1 3-wide row's input columns once
// (SwiftShader: 1.3x); GPU adapters keep the per-tap loads (not measured there).
override ROW_LOADS: u32 = 0u;

const WT: u32 = 4u;  // output columns per thread (forward, backward_input)
const RT: u32 = 4u;  // weight taps per thread (backward_weight)
// acc += (the FCT channels' weights at packed vec4 index r) x (4 columns xv), for `forward`.
fn forward_tap(acc: ptr<function, Acc>, r: u32, xv: vec4<f32>) {
  let wa = wt[r];
  if (FCT == 8u) {
    let wb = wt[r + 1u];
    acc_fma(acc, wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w, xv);
  } else {
    (*acc).a0 = vec4(wa.x) * xv + (*acc).a0;
    (*acc).a1 = vec4(wa.y) * xv + (*acc).a1;
    (*acc).a2 = vec4(wa.z) * xv + (*acc).a2;
    (*acc).a3 = vec4(wa.w) * xv + (*acc).a3;
  }
}

fn flat(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
  return flat_index(gid, nwg);
}

@compute @workgroup_size(64)
fn forward(@builtin(global_invocation_id) gid: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = flat(gid, nwg);
  let Kg = p.K / p.G;
  let Cg = p.C / p.G;
  let cblocks = (Kg + FCT - 1u) / FCT;
  let wblocks = (p.OW + WT - 1u) / WT;
  if (t >= p.N * p.G * cblocks * p.OH * wblocks) { return; }
  let ow0 = (t % wblocks) * WT;
  var r = t / wblocks;
  let oh = r % p.OH;
  r = r / p.OH;
  let cb = r % (p.G * cblocks);
  let n = r / (p.G * cblocks);
  let g = cb / cblocks;
  let k0 = g * Kg + (cb % cblocks) * FCT;
  let kend = (g + 1u) * Kg;
  let Kp = (Kg + 7u) / 8u * 8u;
  let row4 = p.G * Kp / 4u;                       // vec4s per packed row (one row per tap)
  let col4 = (g * Kp + (cb % cblocks) * FCT) / 4u;  // this thread's channels within a row
  let iw0 = i32(ow0 * sw) - i32(pw);
  let ncols = min(p.OW - ow0, WT);  // columns this thread writes
  let ok_cols = vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(ncols);
  var acc: Acc;
  if (ROW_LOADS != 0u && sw == 1u && dw == 1u && KW == 3u) {
    // The three taps of a row read 6 input columns: load each once per row, with the column
    // offsets and bounds worked out once per thread (on CPU adapters every load is a gather).
    let ca = vec4<i32>(iw0) + vec4<i32>(0, 1, 2, 3);
    let cb = vec2<i32>(iw0 + 4, iw0 + 5);
    let oka = (ca >= vec4<i32>(0)) & (ca < vec4<i32>(i32(p.W)));
    let okb = (cb >= vec2<i32>(0)) & (cb < vec2<i32>(i32(p.W)));
    let ia = vec4<u32>(clamp(ca, vec4<i32>(0), vec4<i32>(i32(p.W) - 1)));
    let ib = vec2<u32>(clamp(cb, vec2<i32>(0), vec2<i32>(i32(p.W) - 1)));
    for (var c = 0u; c < Cg; c++) {
      let xbase = (n * p.C + g * Cg + c) * p.H;
      for (var i = 0u; i < KH; i++) {
        let ih = i32(oh * sh + i * dh) - i32(ph);
        if (ih < 0 || ih >= i32(p.H)) { continue; }
        let xrow = (xbase + u32(ih)) * p.W;
        let xa = select(vec4<f32>(0.0),
                        vec4<f32>(x[xrow + ia.x], x[xrow + ia.y], x[xrow + ia.z], x[xrow + ia.w]),
                        oka);
        let xb = select(vec2<f32>(0.0), vec2<f32>(x[xrow + ib.x], x[xrow + ib.y]), okb);
        let r = (c * KH + i) * KW * row4 + col4;
        forward_tap(&acc, r, xa);
        forward_tap(&acc, r + row4, vec4<f32>(xa.yzw, xb.x));
        forward_tap(&acc, r + 2u * row4, vec4<f32>(xa.zw, xb));
      }
    }
  } else {
    for (var c = 0u; c < Cg; c++) {
      let xbase = (n * p.C + g * Cg + c) * p.H;
      for (var i = 0u; i < KH; i++) {
        let ih = i32(oh * sh + i * dh) - i32(ph);
        if (ih < 0 || ih >= i32(p.H)) { continue; }
        let xrow = (xbase + u32(ih)) * p.W;
        for (var j = 0u; j < KW; j++) {
          let iw = vec4<i32>(iw0) + vec4<i32>(0, 1, 2, 3) * i32(sw) + i32(j * dw);
          let ok = ok_cols & (iw >= vec4<i32>(0)) & (iw < vec4<i32>(i32(p.W)));
          let ix = vec4<u32>(max(iw, vec4<i32>(0))) + xrow;
          let xv = select(vec4<f32>(0.0),
                          vec4<f32>(x[ix.x], x[ix.y], x[ix.z], x[ix.w]), ok);
          forward_tap(&acc, ((c * KH + i) * KW + j) * row4 + col4, xv);
        }
      }
    }
  }
  for (var m = 0u; m < FCT; m++) {
    let k = k0 + m;
    if (k >= kend) { break; }
    var v = acc_get(acc, m) + select(0.0, b[k], p.has_bias != 0u);
    if (p.relu != 0u) { v = max(v, vec4<f32>(0.0)); }
    let ybase = ((n * p.K + k) * p.OH + oh) * p.OW + ow0;
    if (p.mask != 0u) { v = masked(v, ybase, ncols); }
    if (ncols == 4u) {
      y[ybase] = v.x; y[ybase + 1u] = v.y; y[ybase + 2u] = v.z; y[ybase + 3u] = v.w;
    } else {
      for (var q = 0u; q < ncols; q++) { y[ybase + q] = v[q]; }
    }
  }
}

// x = dy [N,K,OH,OW], w = weight, y = dx [N,C,H,W]. Thread: CT input channels x WT columns.
// With has_bias / relu (ConvTranspose's forward) b is the bias [C], then y = max(y + b, 0).
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
  let taps = KH * KW;
  let row4 = cblocks * 2u;   // vec4s per packed row (one row per output channel and tap)
  let col4 = c0 / 4u;
  var acc: Acc;
  for (var k = g * Kg; k < (g + 1u) * Kg; k++) {
    let dybase = (n * p.K + k) * p.OH;
    let wk = k * taps;
    for (var i = 0u; i < KH; i++) {
      let num_h = i32(ih + ph) - i32(i * dh);
      if (num_h < 0 || (sh != 1u && u32(num_h) % sh != 0u)) { continue; }
      let oh = select(u32(num_h) / sh, u32(num_h), sh == 1u);
      if (oh >= p.OH) { continue; }
      let dyrow = (dybase + oh) * p.OW;
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
        let r = (wk + i * KW + j) * row4 + col4;
        let wa = wt[r];
        let wb = wt[r + 1u];
        acc_fma(&acc, wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w, dv);
      }
    }
  }
  for (var m = 0u; m < CT; m++) {
    let c = c0 + m;
    if (c >= Cg) { break; }
    var v = acc_get(acc, m);
    // ConvTranspose's forward (ops/conv.py) is this pass: its bias and fused ReLU
    if (p.has_bias != 0u) { v = v + vec4<f32>(b[g * Cg + c]); }
    if (p.relu != 0u) { v = max(v, vec4<f32>(0.0)); }
    let xbase = ((n * p.C + g * Cg + c) * p.H + ih) * p.W + iw0;
    if (p.mask != 0u) { v = masked(v, xbase, p.W - iw0); }
    for (var q = 0u; q < WT; q++) { if (iw0 + q < p.W) { y[xbase + q] = v[q]; } }
  }
}

// x = dy [N,K,OH,OW], w = x (the forward input) [N,C,H,W], y = partial dw [splits,K,Cg*KH*KW].
// Thread: CT output channels x RT taps (c,i,j flattened), over the batch part gid.z.
@compute @workgroup_size(64)
fn backward_weight(@builtin(global_invocation_id) gid: vec3<u32>,
                   @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = flat(gid, nwg);
  let split = gid.z;
  let Kg = p.K / p.G;
  let Cg = p.C / p.G;
  let taps = KH * KW;
  let R = Cg * taps;
  let kblocks = (Kg + CT - 1u) / CT;
  let rblocks = (R + RT - 1u) / RT;
  if (t >= p.G * kblocks * rblocks) { return; }
  let r0 = (t % rblocks) * RT;
  let kb = t / rblocks;
  let g = kb / kblocks;
  let k0 = g * Kg + (kb % kblocks) * CT;
  let kend = (g + 1u) * Kg;
  // The RT taps: input channel, row and column offsets.
  let rr = min(vec4<u32>(r0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(R - 1u));
  let rc = (rr / taps + g * Cg) * p.H * p.W;
  let ri = vec4<i32>(((rr % taps) / KW) * dh) - i32(ph);
  let rj = vec4<i32>((rr % KW) * dw) - i32(pw);
  let plane = p.OH * p.OW;
  let last = p.K - 1u;
  let d0 = min(k0, last) * plane;
  let d1 = min(k0 + 1u, last) * plane;
  let d2 = min(k0 + 2u, last) * plane;
  let d3 = min(k0 + 3u, last) * plane;
  let d4 = min(k0 + 4u, last) * plane;
  let d5 = min(k0 + 5u, last) * plane;
  let d6 = min(k0 + 6u, last) * plane;
  let d7 = min(k0 + 7u, last) * plane;
  let per = (p.N + p.splits - 1u) / p.splits;
  let n_end = min(p.N, (split + 1u) * per);
  var acc: Acc;
  if (ph == 0u && pw == 0u) {
    // No padding: every window lies inside the input (ONNX output sizes), so the loop has no
    // bounds checks; the 4 taps' offsets from the pixel are fixed.
    let ro = rc + vec4<u32>(ri) * p.W + vec4<u32>(rj);
    for (var n = split * per; n < n_end; n++) {
      let xn = n * p.C * p.H * p.W;
      let dn = n * p.K * plane;
      for (var oh = 0u; oh < p.OH; oh++) {
        let rowbase = ro + (xn + oh * sh * p.W);
        let erow = dn + oh * p.OW;
        for (var ow = 0u; ow < p.OW; ow++) {
          let ix = rowbase + ow * sw;
          let xv = vec4<f32>(w[ix.x], w[ix.y], w[ix.z], w[ix.w]);
          let e = erow + ow;
          acc_fma(&acc, x[e + d0], x[e + d1], x[e + d2], x[e + d3], x[e + d4], x[e + d5],
                  x[e + d6], x[e + d7], xv);
        }
      }
    }
  } else {
    for (var n = split * per; n < n_end; n++) {
      let xn = n * p.C * p.H * p.W;
      let dn = n * p.K * plane;
      for (var oh = 0u; oh < p.OH; oh++) {
        let ih = vec4<i32>(i32(oh * sh)) + ri;
        let okh = (ih >= vec4<i32>(0)) & (ih < vec4<i32>(i32(p.H)));
        let rowbase = rc + vec4<u32>(max(ih, vec4<i32>(0))) * p.W + xn;
        for (var ow = 0u; ow < p.OW; ow++) {
          let iw = vec4<i32>(i32(ow * sw)) + rj;
          let ok = okh & (iw >= vec4<i32>(0)) & (iw < vec4<i32>(i32(p.W)));
          let ix = rowbase + vec4<u32>(max(iw, vec4<i32>(0)));
          let xv = select(vec4<f32>(0.0), vec4<f32>(w[ix.x], w[ix.y], w[ix.z], w[ix.w]), ok);
          let e = dn + oh * p.OW + ow;
          acc_fma(&acc, x[e + d0], x[e + d1], x[e + d2], x[e + d3], x[e + d4], x[e + d5],
                  x[e + d6], x[e + d7], xv);
        }
      }
    }
  }
  for (var m = 0u; m < CT; m++) {
    let k = k0 + m;
    if (k >= kend) { break; }
    let v = acc_get(acc, m);
    for (var q = 0u; q < RT; q++) {
      if (r0 + q < R) { y[(split * p.K + k) * R + r0 + q] = v[q]; }
    }
  }
}

// Packs w [K,Cg,KH,KW] for `forward`: y[tap * G*Kp + g*Kp + k'] = w[g*Kg + k', tap] with
// tap = (c, i, j) flattened and Kp = Kg rounded up to 8 (the padding is zero).
@compute @workgroup_size(64)
fn pack_forward(@builtin(global_invocation_id) gid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>) {
  let e = flat(gid, nwg);
  let Kg = p.K / p.G;
  let Kp = (Kg + 7u) / 8u * 8u;
  let R = (p.C / p.G) * KH * KW;
  if (e >= R * p.G * Kp) { return; }
  let col = e % (p.G * Kp);
  let tap = e / (p.G * Kp);
  let g = col / Kp;
  let kk = col % Kp;
  y[e] = select(0.0, w[min((g * Kg + kk) * R + tap, arrayLength(&w) - 1u)], kk < Kg);
}

// Packs w for `backward_input`: y[(k*taps + t) * Cp + c] = w[k, c, t], Cp = Cg rounded up to 8.
@compute @workgroup_size(64)
fn pack_backward(@builtin(global_invocation_id) gid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>) {
  let e = flat(gid, nwg);
  let Cg = p.C / p.G;
  let Cp = (Cg + 7u) / 8u * 8u;
  let taps = KH * KW;
  if (e >= p.K * taps * Cp) { return; }
  let c = e % Cp;
  let kt = e / Cp;
  let k = kt / taps;
  let t = kt % taps;
  y[e] = select(0.0, w[min((k * Cg + c) * taps + t, arrayLength(&w) - 1u)], c < Cg);
}

// Packs w for `forward` to compute the input gradient of a stride-1 convolution as a forward
// convolution of dy with the flipped, transposed filter w'[g*Cg + c, k, i, j] =
// w[g*Kg + k, c, KH-1-i, KW-1-j] (the "full" correlation: pads KH-1-ph, KW-1-pw). Here the
// Params describe that forward pass: K = C of the layer, C = K of the layer.
@compute @workgroup_size(64)
fn pack_transposed(@builtin(global_invocation_id) gid: vec3<u32>,
                   @builtin(num_workgroups) nwg: vec3<u32>) {
  let e = flat(gid, nwg);
  let Cg = p.K / p.G;  // input channels of the layer (outputs of this pass), per group
  let Kg = p.C / p.G;  // output channels of the layer, per group
  let Cp = (Cg + 7u) / 8u * 8u;
  let taps = KH * KW;
  if (e >= Kg * taps * p.G * Cp) { return; }
  let col = e % (p.G * Cp);
  let row = e / (p.G * Cp);  // (k, i, j) of the pass = (k, flipped tap)
  let g = col / Cp;
  let c = col % Cp;
  let k = row / taps;
  let t = taps - 1u - row % taps;
  let src = ((g * Kg + k) * Cg + c) * taps + t;
  y[e] = select(0.0, w[min(src, arrayLength(&w) - 1u)], c < Cg);
}
