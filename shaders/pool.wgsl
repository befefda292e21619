// 2-D pooling over NCHW planes (ONNX MaxPool, AveragePool, GlobalMaxPool, GlobalAveragePool)
// and the gradients of PyTorch's autograd (max_pool2d_with_indices_backward,
// avg_pool2d_backward). Windows of output (oh, ow) start at (oh*sh - pt, ow*sw - pl); tap
// (i, j) reads input row oh*sh - pt + i*dh, column ow*sw - pl + j*dw; taps in the padding are
// skipped (-inf for max, 0 for average). The host guarantees every window has at least one
// input element (ops/pool.py refuses the others).
//   max_forward:  dst[o] = max over the window of src (src = x, dst = y); the FIRST maximum in
//                 window order (rows, then columns) wins ties, as PyTorch; with flags & 2 its
//                 index h*W + w in the plane is stored in arg[o] for the backward
//   avg_forward:  dst[o] = sum over the window of src / divisor(o)
//   max_backward: dst[e] = sum of src[o] (src = dy, dst = dx) over the windows o that contain
//                 input element e and whose arg[o] is e: a gather (WGSL has no float atomics)
//   avg_backward: dst[e] = sum of src[o] / divisor(o) over the windows o that contain e
// divisor (PyTorch avg_pool2d): the window clipped to the input plus its padding (end_h =
// H + bottom pad, end_w = W + right pad) with count_include_pad (flags & 1), else the number of
// input elements in the window.
// flags & 4 (the backwards): dst[e] = 0 where m[e] <= 0, m = x being the output of an in-place
// ReLU whose backward the plan fused here (relu_backward's select: the same floats).

struct Params {
  total: u32, H: i32, W: i32, OH: i32,
  OW: i32, KH: i32, KW: i32, sh: i32,
  sw: i32, pt: i32, pl: i32, dh: i32,
  dw: i32, end_h: i32, end_w: i32, flags: u32,
}

//!include index

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;
@group(0) @binding(3) var<storage, read_write> arg: array<u32>;
@group(0) @binding(4) var<storage, read> m: array<f32>;

fn masked(t: u32, g: f32) -> f32 {
  if ((p.flags & 4u) != 0u) { return select(0.0, g, m[t] > 0.0); }
  return g;
}


// Taps [lo, hi) of a window starting at `start` (step d, k taps) that fall inside [0, size).
fn taps(start: i32, size: i32, k: i32, d: i32) -> vec2<i32> {
  var lo = 0;
  if (start < 0) { lo = (-start + d - 1) / d; }
  let hi = min(k, (size - start + d - 1) / d);
  return vec2<i32>(lo, hi);
}

// Outputs [lo, hi] (inclusive) along one axis whose window may contain input position x.
fn windows(x: i32, pad: i32, k: i32, s: i32, d: i32, n_out: i32) -> vec2<i32> {
  let last = x + pad;                 // offset of x from the padded origin, >= 0
  let first = last - (k - 1) * d;
  var lo = 0;
  if (first > 0) { lo = (first + s - 1) / s; }
  return vec2<i32>(lo, min(n_out - 1, last / s));
}

fn divisor(oh: i32, ow: i32) -> f32 {
  let h0 = oh * p.sh - p.pt;
  let w0 = ow * p.sw - p.pl;
  let h1 = min(h0 + p.KH, p.end_h);
  let w1 = min(w0 + p.KW, p.end_w);
  if ((p.flags & 1u) != 0u) { return f32((h1 - h0) * (w1 - w0)); }
  return f32((min(h1, p.H) - max(h0, 0)) * (min(w1, p.W) - max(w0, 0)));
}

@compute @workgroup_size(64)
fn max_forward(@builtin(global_invocation_id) gid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = flat_index(gid, nwg);
  if (t >= p.total) { return; }
  let ow = i32(t % u32(p.OW));
  let r = t / u32(p.OW);
  let oh = i32(r % u32(p.OH));
  let base = (r / u32(p.OH)) * u32(p.H * p.W);
  let h0 = oh * p.sh - p.pt;
  let w0 = ow * p.sw - p.pl;
  let ri = taps(h0, p.H, p.KH, p.dh);
  let rj = taps(w0, p.W, p.KW, p.dw);
  var at = u32((h0 + ri.x * p.dh) * p.W + w0 + rj.x * p.dw);
  var best = src[base + at];
  for (var i = ri.x; i < ri.y; i++) {
    let row = (h0 + i * p.dh) * p.W + w0;
    for (var j = rj.x; j < rj.y; j++) {
      let e = u32(row + j * p.dw);
      let v = src[base + e];
      if (v > best) { best = v; at = e; }
    }
  }
  dst[t] = best;
  if ((p.flags & 2u) != 0u) { arg[t] = at; }
}

@compute @workgroup_size(64)
fn avg_forward(@builtin(global_invocation_id) gid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = flat_index(gid, nwg);
  if (t >= p.total) { return; }
  let ow = i32(t % u32(p.OW));
  let r = t / u32(p.OW);
  let oh = i32(r % u32(p.OH));
  let base = (r / u32(p.OH)) * u32(p.H * p.W);
  let h0 = oh * p.sh - p.pt;
  let w0 = ow * p.sw - p.pl;
  let ri = taps(h0, p.H, p.KH, p.dh);
  let rj = taps(w0, p.W, p.KW, p.dw);
  var s = 0.0;
  for (var i = ri.x; i < ri.y; i++) {
    let row = base + u32((h0 + i * p.dh) * p.W + w0);
    for (var j = rj.x; j < rj.y; j++) {
      s += src[row + u32(j * p.dw)];
    }
  }
  dst[t] = s / divisor(oh, ow);
}

@compute @workgroup_size(64)
fn max_backward(@builtin(global_invocation_id) gid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = flat_index(gid, nwg);
  if (t >= p.total) { return; }
  let w = i32(t % u32(p.W));
  let r = t / u32(p.W);
  let h = i32(r % u32(p.H));
  let obase = (r / u32(p.H)) * u32(p.OH * p.OW);
  let e = u32(h * p.W + w);
  let rh = windows(h, p.pt, p.KH, p.sh, p.dh, p.OH);
  let rw = windows(w, p.pl, p.KW, p.sw, p.dw, p.OW);
  var g = 0.0;
  for (var oh = rh.x; oh <= rh.y; oh++) {
    if ((h + p.pt - oh * p.sh) % p.dh != 0) { continue; }
    for (var ow = rw.x; ow <= rw.y; ow++) {
      if ((w + p.pl - ow * p.sw) % p.dw != 0) { continue; }
      let o = obase + u32(oh * p.OW + ow);
      if (arg[o] == e) { g += src[o]; }
    }
  }
  dst[t] = masked(t, g);
}

@compute @workgroup_size(64)
fn avg_backward(@builtin(global_invocation_id) gid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = flat_index(gid, nwg);
  if (t >= p.total) { return; }
  let w = i32(t % u32(p.W));
  let r = t / u32(p.W);
  let h = i32(r % u32(p.H));
  let obase = (r / u32(p.H)) * u32(p.OH * p.OW);
  let rh = windows(h, p.pt, p.KH, p.sh, p.dh, p.OH);
  let rw = windows(w, p.pl, p.KW, p.sw, p.dw, p.OW);
  var g = 0.0;
  for (var oh = rh.x; oh <= rh.y; oh++) {
    if ((h + p.pt - oh * p.sh) % p.dh != 0) { continue; }
    for (var ow = rw.x; ow <= rw.y; ow++) {
      if ((w + p.pl - ow * p.sw) % p.dw != 0) { continue; }
      g += src[obase + u32(oh * p.OW + ow)] / divisor(oh, ow);
    }
  }
  dst[t] = masked(t, g);
}
