// ReduceSum / ReduceMean / ReduceMax / ReduceMin / ReduceSumSquare / ReduceL2 /
// ReduceLogSumExp / ReduceL1 / ReduceProd (ONNX) over any set of axes, and gradients (PyTorch autograd: sum / mean
// spread dy evenly; amax / amin split dy evenly among the ties; the others below).
// The input is seen as up to 3 runs of kept dims (sizes k0..k2, element strides ks0..ks2; the
// output index o = (i0 * k1 + i1) * k2 + i2) and up to 3 runs of reduced dims (r0..r2, rs0..rs2;
// R = r0 * r1 * r2 values per output). Unused runs have size 1.
//   forward:  y[o] = scale * sum_j x[base(o) + off(j)]   (mode 0; scale 1 or 1/R)
//             y[o] = max_j / min_j x[base(o) + off(j)]   (mode 2 / 3)
//   backward: dx[base(o) + off(j)] = scale * dy[o]                               (mode 0)
//             dx[...] = dy[o] / ties(o) where x == max (min) of the output, else 0 (mode 2 / 3)
//             y[o] = sum_j x^2 (mode 1), sqrt(sum_j x^2) (mode 4), m + log(sum_j exp(x - m)),
//             m the row's max (mode 5); one thread per output (*_out) for these three:
//   backward: dx = 2 x dy (mode 1), x dy / y (0 where y == 0, torch's norm backward; mode 4),
//             dy exp(x - y) (mode 5)
//             y[o] = sum_j |x| (mode 6, ReduceL1), prod_j x (mode 7, ReduceProd), one thread:
//   backward: dx = sign(x) dy (mode 6); mode 7 as torch's prod_backward: dy y / x without
//             zeros in the row, dy * (product of the others) at its one zero, else 0
// The backward recomputes the max from x (y may have been overwritten by an in-place ReLU).
// *_out: one thread per output; *_wg: one 64-thread workgroup per output (long reductions),
// o = wid.x + wid.y * num_workgroups.x.

struct Params {
  n_out: u32, mode: u32, R: u32, scale: f32,
  k0: u32, k1: u32, k2: u32, ks0: u32,
  ks1: u32, ks2: u32, r0: u32, r1: u32,
  r2: u32, rs0: u32, rs1: u32, rs2: u32,
}

//!include index
//!include detmath

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> dy: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

const WG: u32 = 64u;
var<workgroup> red: array<vec2<f32>, 64>;

fn base_of(o: u32) -> u32 {
  let i2 = o % p.k2;
  let t = o / p.k2;
  return (t / p.k1) * p.ks0 + (t % p.k1) * p.ks1 + i2 * p.ks2;
}

fn offset_of(j: u32) -> u32 {
  let c = j % p.r2;
  let t = j / p.r2;
  return (t / p.r1) * p.rs0 + (t % p.r1) * p.rs1 + c * p.rs2;
}

// (extreme, count of values equal to it) after seeing v; max for mode 2, min for mode 3.
fn extreme(acc: vec2<f32>, v: f32) -> vec2<f32> {
  let better = select((v < acc.x), (v > acc.x), p.mode == 2u);
  if (better) { return vec2<f32>(v, 1.0); }
  if (v == acc.x) { return vec2<f32>(acc.x, acc.y + 1.0); }
  return acc;
}

fn merge(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
  if (a.x == b.x) { return vec2<f32>(a.x, a.y + b.y); }
  let b_better = select((b.x < a.x), (b.x > a.x), p.mode == 2u);
  return select(a, b, b_better);
}

// Sum (mode 0) or (extreme, ties) over the row of output o, one thread.
fn reduce_row(base: u32) -> vec2<f32> {
  var acc = vec2<f32>(0.0);
  if (p.mode != 0u) { acc = vec2<f32>(x[base], 0.0); }
  for (var a = 0u; a < p.r0; a++) {
    for (var b = 0u; b < p.r1; b++) {
      let row = base + a * p.rs0 + b * p.rs1;
      if (p.mode == 0u) {
        for (var c = 0u; c < p.r2; c++) { acc.x += x[row + c * p.rs2]; }
      } else {
        for (var c = 0u; c < p.r2; c++) { acc = extreme(acc, x[row + c * p.rs2]); }
      }
    }
  }
  return acc;
}

// Modes 1, 4, 5, 6, 7: the row's sum of squares, its square root, its log-sum-exp, its sum of
// absolute values or its product; one thread.
fn row_value(base: u32) -> f32 {
  var m = x[base];
  if (p.mode == 5u) {
    for (var j = 0u; j < p.R; j++) { m = max(m, x[base + offset_of(j)]); }
  }
  var s = select(0.0, 1.0, p.mode == 7u);
  for (var j = 0u; j < p.R; j++) {
    let v = x[base + offset_of(j)];
    if (p.mode == 5u) {
      s += det_exp(v - m);
    } else if (p.mode == 6u) {
      s += abs(v);
    } else if (p.mode == 7u) {
      s *= v;
    } else {
      s += v * v;
    }
  }
  if (p.mode == 4u) { return sqrt(s); }
  if (p.mode == 5u) { return m + det_log(s); }
  return s;
}

fn is_row_value_mode() -> bool { return p.mode == 1u || p.mode >= 4u; }

@compute @workgroup_size(64)
fn forward_out(@builtin(global_invocation_id) gid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>) {
  let o = flat_index(gid, nwg);
  if (o >= p.n_out) { return; }
  if (is_row_value_mode()) {
    out[o] = row_value(base_of(o));
    return;
  }
  let acc = reduce_row(base_of(o));
  out[o] = select(acc.x, acc.x * p.scale, p.mode == 0u);
}

// ReduceProd's dx of output o (torch's prod_backward): dy * y / x where the row holds no
// zero; where it holds one, dy * (the product of the others) at the zero and 0 elsewhere; 0
// where it holds more.
fn prod_backward(o: u32, base: u32) {
  var zeros = 0u;
  var others = 1.0;
  for (var j = 0u; j < p.R; j++) {
    let v = x[base + offset_of(j)];
    if (v == 0.0) { zeros += 1u; } else { others *= v; }
  }
  for (var j = 0u; j < p.R; j++) {
    let i = base + offset_of(j);
    var g = 0.0;
    if (zeros == 0u) {
      g = dy[o] * others / x[i];
    } else if (zeros == 1u && x[i] == 0.0) {
      g = dy[o] * others;
    }
    out[i] = g;
  }
}

@compute @workgroup_size(64)
fn backward_out(@builtin(global_invocation_id) gid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>) {
  let o = flat_index(gid, nwg);
  if (o >= p.n_out) { return; }
  let base = base_of(o);
  if (p.mode == 7u) {
    prod_backward(o, base);
    return;
  }
  if (is_row_value_mode()) {
    let y = row_value(base);
    for (var j = 0u; j < p.R; j++) {
      let i = base + offset_of(j);
      if (p.mode == 6u) {
        out[i] = sign(x[i]) * dy[o];
      } else if (p.mode == 1u) {
        out[i] = 2.0 * x[i] * dy[o];
      } else if (p.mode == 4u) {
        out[i] = select(x[i] * dy[o] / y, 0.0, y == 0.0);
      } else {
        out[i] = dy[o] * det_exp(x[i] - y);
      }
    }
    return;
  }
  var g = dy[o] * p.scale;
  var peak = 0.0;
  if (p.mode != 0u) {
    let acc = reduce_row(base);
    peak = acc.x;
    g = dy[o] / acc.y;
  }
  for (var a = 0u; a < p.r0; a++) {
    for (var b = 0u; b < p.r1; b++) {
      let row = base + a * p.rs0 + b * p.rs1;
      for (var c = 0u; c < p.r2; c++) {
        let i = row + c * p.rs2;
        if (p.mode == 0u) { out[i] = g; } else { out[i] = select(0.0, g, x[i] == peak); }
      }
    }
  }
}

// The workgroup's (sum, -) or (extreme, ties); called in uniform control flow by all 64.
fn wg_reduce(lid: u32, v: vec2<f32>) -> vec2<f32> {
  red[lid] = v;
  workgroupBarrier();
  for (var h = WG / 2u; h > 0u; h = h >> 1u) {
    if (lid < h) {
      if (p.mode == 0u) { red[lid] += red[lid + h]; } else { red[lid] = merge(red[lid], red[lid + h]); }
    }
    workgroupBarrier();
  }
  let total = red[0];
  workgroupBarrier();
  return total;
}

fn wg_row(lid: u32, base: u32) -> vec2<f32> {
  var acc = vec2<f32>(0.0);
  if (p.mode != 0u) { acc = vec2<f32>(x[base], 0.0); }  // neutral for max / min, no ties yet
  for (var j = lid; j < p.R; j += WG) {
    let v = x[base + offset_of(j)];
    if (p.mode == 0u) { acc.x += v; } else { acc = extreme(acc, v); }
  }
  return wg_reduce(lid, acc);
}

@compute @workgroup_size(64)
fn forward_wg(@builtin(workgroup_id) wid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
  let o = wid.x + wid.y * nwg.x;
  if (o >= p.n_out) { return; }
  let acc = wg_row(lid, base_of(o));
  if (lid == 0u) { out[o] = select(acc.x, acc.x * p.scale, p.mode == 0u); }
}

@compute @workgroup_size(64)
fn backward_wg(@builtin(workgroup_id) wid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
  let o = wid.x + wid.y * nwg.x;
  if (o >= p.n_out) { return; }
  let base = base_of(o);
  var g = dy[o] * p.scale;
  var peak = 0.0;
  if (p.mode != 0u) {  // p.mode is uniform: the barriers in wg_row stay in uniform control flow
    let acc = wg_row(lid, base);
    peak = acc.x;
    g = dy[o] / acc.y;
  }
  for (var j = lid; j < p.R; j += WG) {
    let i = base + offset_of(j);
    if (p.mode == 0u) { out[i] = g; } else { out[i] = select(0.0, g, x[i] == peak); }
  }
}
