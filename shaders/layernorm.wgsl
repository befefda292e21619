// LayerNormalization (ONNX opset 17) of `rows` rows of D contiguous values (the dims from `axis`
// on), with Scale / B of S values broadcast over the row (index d % S), and its gradients
// (PyTorch native_layer_norm_backward; population variance):
//   mean = sum(x) / D,  var = sum((x - mean)^2) / D,  rstd = 1 / sqrt(var + eps)
// (in f32: m0 = sum(x) / D, then the mean and var moved by sum(x - m0), lib/moved_mean: rows far
// from zero keep their mean's low bits)
//   xhat = (x - mean) * rstd,  y = xhat * scale[d % S] + bias[d % S]
//   dx = rstd * (g - mean_d(g) - xhat * mean_d(g * xhat)),  g = dy * scale[d % S]
//   dscale[s] = sum_{r, d % S == s} dy * xhat,  dbias[s] = sum_{r, d % S == s} dy
// forward_* write y and stats = [mean (rows), rstd (rows)]; backward_* read stats.
// *_rows: one thread per row (short rows); *_seg: SEG threads per row, 64 / SEG rows a
// workgroup, row = (wid.x + wid.y * num_workgroups.x) * 64 / SEG + lid / SEG: SEG 16 for rows of
// 8-255 values on GPU adapters (neighbouring threads read neighbouring values), SEG 64 (a
// workgroup a row) for long rows or few rows. param_grad: thread (d, part) sums rows of its part into
// out[part * D + d] (dscale) and out2[...] (dbias), or with flags bit 2 both into out, dbias
// after the parts at out[(parts + part) * D + d] (reduce.wgsl reduce_splits' tail: one dispatch
// folds both); fold: out[s] = sum over parts and d == s mod S of x[part * D + d]; stats_out
// copies the statistics to the Mean / InvStdDev outputs.
// p.flags: bit 0 = dscale / Mean wanted, bit 1 = dbias / InvStdDev wanted, bit 2 = one buffer,
// bit 3 (backward_*: ADDEND) = dx plus out2, the other use's gradient of x (plan: a tensor read
// twice gets the sum of its two contributions from its first reader's backward, no add_to).

struct Params {
  rows: u32, D: u32, S: u32, has_bias: u32,
  eps: f32, parts: u32, flags: u32, _p0: u32,
}

//!include index
//!include moved_mean

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> scale: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read> dy: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;
@group(0) @binding(6) var<storage, read_write> stats: array<f32>;
@group(0) @binding(7) var<storage, read_write> out2: array<f32>;

const WG: u32 = 64u;
alias RedT = vec2<f32>;
var<workgroup> red: array<RedT, 64>;  // seg_sum's

fn affine(xh: f32, d: u32) -> f32 {
  let s = d % p.S;
  var v = xh * scale[s];
  if (p.has_bias == 1u) { v += bias[s]; }
  return v;
}

const ADDEND: u32 = 8u;

// dx of element i, plus the other contribution out2[i] with flags bit 3 (the same float32 sum
// as elementwise.wgsl's add_to of the two).
fn with_addend(v: f32, i: u32) -> f32 {
  if ((p.flags & ADDEND) != 0u) { return v + out2[i]; }
  return v;
}

@compute @workgroup_size(64)
fn forward_rows(@builtin(global_invocation_id) gid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>) {
  let r = flat_index(gid, nwg);
  if (r >= p.rows) { return; }
  let base = r * p.D;
  var s = 0.0;
  for (var d = 0u; d < p.D; d++) { s += x[base + d]; }
  let m0 = s / f32(p.D);
  var v = 0.0;
  var e = 0.0;
  for (var d = 0u; d < p.D; d++) {
    let t = x[base + d] - m0;
    v += t * t;
    e += t;
  }
  let mv = moved_mean(m0, v, e, f32(p.D));
  let mean = mv.x;
  let rstd = 1.0 / sqrt(mv.y / f32(p.D) + p.eps);
  stats[r] = mean;
  stats[p.rows + r] = rstd;
  for (var d = 0u; d < p.D; d++) { out[base + d] = affine((x[base + d] - mean) * rstd, d); }
}

@compute @workgroup_size(64)
fn backward_rows(@builtin(global_invocation_id) gid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>) {
  let r = flat_index(gid, nwg);
  if (r >= p.rows) { return; }
  let base = r * p.D;
  let mean = stats[r];
  let rstd = stats[p.rows + r];
  var sg = 0.0;
  var sgx = 0.0;
  for (var d = 0u; d < p.D; d++) {
    let gg = dy[base + d] * scale[d % p.S];
    sg += gg;
    sgx += gg * (x[base + d] - mean) * rstd;
  }
  let a = sg / f32(p.D);
  let c = sgx / f32(p.D);
  for (var d = 0u; d < p.D; d++) {
    let xh = (x[base + d] - mean) * rstd;
    out[base + d] = with_addend(rstd * (dy[base + d] * scale[d % p.S] - a - xh * c), base + d);
  }
}

override SEG: u32 = 16u;

// The sum of v over the SEG invocations of lid's row, returned to each of them; pairwise
// halving within the row's lanes (with SEG 64, wg_reduce's wg_sum). All invocations call it
// (uniformly).
fn seg_sum(lid: u32, v: RedT) -> RedT {
  red[lid] = v;
  workgroupBarrier();
  let lane = lid % SEG;
  for (var h = SEG / 2u; h > 0u; h = h >> 1u) {
    if (lane < h) { red[lid] += red[lid + h]; }
    workgroupBarrier();
  }
  let total = red[lid - lane];
  workgroupBarrier();
  return total;
}

@compute @workgroup_size(64)
fn forward_seg(@builtin(workgroup_id) wid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
  let r = (wid.x + wid.y * nwg.x) * (WG / SEG) + lid / SEG;
  let lane = lid % SEG;
  let live = r < p.rows;
  let base = r * p.D;
  var s = 0.0;
  if (live) { for (var d = lane; d < p.D; d += SEG) { s += x[base + d]; } }
  let m0 = seg_sum(lid, vec2<f32>(s, 0.0)).x / f32(p.D);
  var v = vec2<f32>(0.0);  // sum (x - m0)^2, sum (x - m0)
  if (live) {
    for (var d = lane; d < p.D; d += SEG) {
      let t = x[base + d] - m0;
      v += vec2<f32>(t * t, t);
    }
  }
  let q = seg_sum(lid, v);
  let mv = moved_mean(m0, q.x, q.y, f32(p.D));
  let mean = mv.x;
  let rstd = 1.0 / sqrt(mv.y / f32(p.D) + p.eps);
  if (!live) { return; }
  if (lane == 0u) {
    stats[r] = mean;
    stats[p.rows + r] = rstd;
  }
  for (var d = lane; d < p.D; d += SEG) { out[base + d] = affine((x[base + d] - mean) * rstd, d); }
}

@compute @workgroup_size(64)
fn backward_seg(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
  let r = (wid.x + wid.y * nwg.x) * (WG / SEG) + lid / SEG;
  let lane = lid % SEG;
  let live = r < p.rows;
  let base = r * p.D;
  var mean = 0.0;
  var rstd = 0.0;
  var acc = vec2<f32>(0.0);
  if (live) {
    mean = stats[r];
    rstd = stats[p.rows + r];
    for (var d = lane; d < p.D; d += SEG) {
      let gg = dy[base + d] * scale[d % p.S];
      acc += vec2<f32>(gg, gg * (x[base + d] - mean) * rstd);
    }
  }
  let sums = seg_sum(lid, acc) / f32(p.D);
  if (!live) { return; }
  for (var d = lane; d < p.D; d += SEG) {
    let xh = (x[base + d] - mean) * rstd;
    out[base + d] = with_addend(rstd * (dy[base + d] * scale[d % p.S] - sums.x - xh * sums.y),
                                base + d);
  }
}

@compute @workgroup_size(64)
fn param_grad(@builtin(global_invocation_id) gid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = flat_index(gid, nwg);
  let d = t % p.D;
  let part = t / p.D;
  if (part >= p.parts) { return; }
  let per = (p.rows + p.parts - 1u) / p.parts;
  let end = min(p.rows, (part + 1u) * per);
  var sg = 0.0;
  var sb = 0.0;
  for (var r = part * per; r < end; r++) {
    let i = r * p.D + d;
    sg += dy[i] * (x[i] - stats[r]) * stats[p.rows + r];
    sb += dy[i];
  }
  if ((p.flags & 1u) != 0u) { out[part * p.D + d] = sg; }
  if ((p.flags & 6u) == 6u) {
    out[(p.parts + part) * p.D + d] = sb;
  } else if ((p.flags & 2u) != 0u) {
    out2[part * p.D + d] = sb;
  }
}

@compute @workgroup_size(64)
fn fold(@builtin(global_invocation_id) gid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  let s = flat_index(gid, nwg);
  if (s >= p.S) { return; }
  var acc = 0.0;
  for (var part = 0u; part < p.parts; part++) {
    for (var d = s; d < p.D; d += max(p.S, 1u)) { acc += x[part * p.D + d]; }
  }
  out[s] = acc;
}

@compute @workgroup_size(64)
fn stats_out(@builtin(global_invocation_id) gid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>) {
  let r = flat_index(gid, nwg);
  if (r >= p.rows) { return; }
  if ((p.flags & 1u) != 0u) { out[r] = stats[r]; }
  if ((p.flags & 2u) != 0u) { out2[r] = stats[p.rows + r]; }
}
