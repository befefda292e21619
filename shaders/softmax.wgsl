// Softmax and LogSoftmax along one axis of a tensor viewed as [outer, C, inner] (ONNX Softmax /
// LogSoftmax; before opset 13 the input is coerced to 2-D, i.e. viewed as [outer, C, 1] with C
// the flattened trailing block), and their gradients (PyTorch autograd):
//   softmax:     y = exp(x - max) / sum(exp(x - max))     dx = y * (dy - sum(dy * y))
//   log_softmax: y = x - max - log(sum(exp(x - max)))     dx = dy - exp(y) * sum(dy)
// p.use_log == 1 selects log_softmax. A row is the C values of one (outer, inner) pair, `inner`
// apart. *_rows: one thread per row (short rows); *_wg: one 64-thread workgroup per row (long
// rows), row = wid.x + wid.y * num_workgroups.x; *_seg: SEG threads per contiguous row (inner
// 1), 64 / SEG rows per workgroup (GPU adapters, rows of 8-255 values: neighbouring threads
// read neighbouring values, where one thread per row reads C apart).
// Bindings: x = input (forward) or y (backward); g = dy (backward only); out = y or dx.

//!include detmath

struct Params { outer: u32, C: u32, inner: u32, use_log: u32 }

//!include index

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> g: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

const WG: u32 = 64u;
alias RedT = f32;
var<workgroup> red: array<RedT, 64>;
//!include wg_reduce

fn row_base(r: u32) -> u32 { return (r / p.inner) * p.C * p.inner + r % p.inner; }

@compute @workgroup_size(64)
fn forward_rows(@builtin(global_invocation_id) gid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>) {
  let r = flat_index(gid, nwg);
  if (r >= p.outer * p.inner) { return; }
  let base = row_base(r);
  var m = x[base];
  for (var c = 1u; c < p.C; c++) { m = max(m, x[base + c * p.inner]); }
  var s = 0.0;
  for (var c = 0u; c < p.C; c++) { s += det_exp(x[base + c * p.inner] - m); }
  if (p.use_log == 1u) {
    let lse = m + det_log(s);
    for (var c = 0u; c < p.C; c++) { out[base + c * p.inner] = x[base + c * p.inner] - lse; }
  } else {
    for (var c = 0u; c < p.C; c++) {
      out[base + c * p.inner] = det_exp(x[base + c * p.inner] - m) / s;
    }
  }
}

@compute @workgroup_size(64)
fn backward_rows(@builtin(global_invocation_id) gid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>) {
  let r = flat_index(gid, nwg);
  if (r >= p.outer * p.inner) { return; }
  let base = row_base(r);
  var s = 0.0;
  if (p.use_log == 1u) {
    for (var c = 0u; c < p.C; c++) { s += g[base + c * p.inner]; }
    for (var c = 0u; c < p.C; c++) {
      let i = base + c * p.inner;
      out[i] = g[i] - det_exp(x[i]) * s;
    }
  } else {
    for (var c = 0u; c < p.C; c++) { s += g[base + c * p.inner] * x[base + c * p.inner]; }
    for (var c = 0u; c < p.C; c++) {
      let i = base + c * p.inner;
      out[i] = x[i] * (g[i] - s);
    }
  }
}

@compute @workgroup_size(64)
fn forward_wg(@builtin(workgroup_id) wid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
  let r = wid.x + wid.y * nwg.x;
  if (r >= p.outer * p.inner) { return; }
  let base = row_base(r);
  var m = x[base];
  for (var c = lid; c < p.C; c += WG) { m = max(m, x[base + c * p.inner]); }
  m = wg_max(lid, m);
  var s = 0.0;
  for (var c = lid; c < p.C; c += WG) { s += det_exp(x[base + c * p.inner] - m); }
  s = wg_sum(lid, s);
  if (p.use_log == 1u) {
    let lse = m + det_log(s);
    for (var c = lid; c < p.C; c += WG) {
      out[base + c * p.inner] = x[base + c * p.inner] - lse;
    }
  } else {
    for (var c = lid; c < p.C; c += WG) {
      out[base + c * p.inner] = det_exp(x[base + c * p.inner] - m) / s;
    }
  }
}

@compute @workgroup_size(64)
fn backward_wg(@builtin(workgroup_id) wid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
  let r = wid.x + wid.y * nwg.x;
  if (r >= p.outer * p.inner) { return; }
  let base = row_base(r);
  let log_mode = p.use_log == 1u;
  var s = 0.0;
  for (var c = lid; c < p.C; c += WG) {
    let i = base + c * p.inner;
    s += select(g[i] * x[i], g[i], log_mode);
  }
  s = wg_sum(lid, s);
  for (var c = lid; c < p.C; c += WG) {
    let i = base + c * p.inner;
    out[i] = select(x[i] * (g[i] - s), g[i] - det_exp(x[i]) * s, log_mode);
  }
}

override SEG: u32 = 16u;

// The sum (or maximum, `want_max`) of v over the SEG invocations of lid's row segment, returned
// to each of them; pairwise halving within the segment. All invocations call it (uniformly).
fn seg_reduce(lid: u32, v: f32, want_max: bool) -> f32 {
  red[lid] = v;
  workgroupBarrier();
  let lane = lid % SEG;
  for (var h = SEG / 2u; h > 0u; h = h >> 1u) {
    if (lane < h) {
      red[lid] = select(red[lid] + red[lid + h], max(red[lid], red[lid + h]), want_max);
    }
    workgroupBarrier();
  }
  let total = red[lid - lane];
  workgroupBarrier();
  return total;
}

// The row of invocation lid of a *_seg workgroup: 64 / SEG rows a workgroup, SEG lanes a row.
fn seg_row(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
  return (wid.x + wid.y * nwg.x) * (WG / SEG) + lid / SEG;
}

@compute @workgroup_size(64)
fn forward_seg(@builtin(workgroup_id) wid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
  let r = seg_row(wid, nwg, lid);
  let lane = lid % SEG;
  let live = r < p.outer;
  let base = r * p.C;
  var m = 0.0;
  if (live) {
    m = x[base];
    for (var c = lane; c < p.C; c += SEG) { m = max(m, x[base + c]); }
  }
  m = seg_reduce(lid, m, true);
  var s = 0.0;
  if (live) { for (var c = lane; c < p.C; c += SEG) { s += det_exp(x[base + c] - m); } }
  s = seg_reduce(lid, s, false);
  if (!live) { return; }
  if (p.use_log == 1u) {
    let lse = m + det_log(s);
    for (var c = lane; c < p.C; c += SEG) { out[base + c] = x[base + c] - lse; }
  } else {
    for (var c = lane; c < p.C; c += SEG) { out[base + c] = det_exp(x[base + c] - m) / s; }
  }
}

@compute @workgroup_size(64)
fn backward_seg(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
  let r = seg_row(wid, nwg, lid);
  let lane = lid % SEG;
  let live = r < p.outer;
  let base = r * p.C;
  let log_mode = p.use_log == 1u;
  var s = 0.0;
  if (live) {
    for (var c = lane; c < p.C; c += SEG) {
      s += select(g[base + c] * x[base + c], g[base + c], log_mode);
    }
  }
  s = seg_reduce(lid, s, false);
  if (!live) { return; }
  for (var c = lane; c < p.C; c += SEG) {
    let i = base + c;
    out[i] = select(x[i] * (g[i] - s), g[i] - det_exp(x[i]) * s, log_mode);
  }
}
