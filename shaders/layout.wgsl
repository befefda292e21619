// Data movement (ONNX Transpose, Concat, Slice, Pad, Expand) forward and backward: one strided
// gather, a masked sum (the gradient of Pad's constant_value) and a sum over broadcast dims
// (the gradient of Expand). ops/layout.py expresses every op and gradient as these.
//
//   strided:      for i < n, with (idx_d) = i decomposed over the sizes geo[d].x (row-major,
//                 d < rank) and per dim  t_d = idx_d * geo[d].y + geo[d].z,
//                 valid iff every t_d % geo[d].w == 0 and 0 <= t_d / geo[d].w < ext[d].x:
//                   out[dst_off + sum idx_d * ext[d].z] =
//                     valid ? x[src_off + sum (t_d / geo[d].w) * ext[d].y] : value
//                 (value = fill[0] when use_fill, else p.value); the divisor geo[d].w is > 0.
//                 Transpose/Expand/Concat are plain copies (geo = (size, 1, 0, 1)), Slice
//                 forward t = start + idx*step, its backward t = (idx - start) / step (for a
//                 negative step: (start - idx) / -step), Pad forward t = idx - pad_begin, its
//                 backward t = idx + pad_begin.
//   masked_sum:   workgroup k sums, over its part of i < n, x[i] where the position i of the
//                 strided gather above is NOT valid (Pad's padded cells) into out[k].
//   sum_expanded: out[z*n + i] = sum_{r in part z of [0, red)} x[base(i) + off(r)]: base
//                 is src_off plus i decomposed over the kept sizes geo[d].x with dy strides
//                 geo[d].y (d < rank), off decomposes r over the reduced sizes ext[d].x with
//                 strides ext[d].y (d < red_rank). The parts (splits > 1) are added by reduce.wgsl
//                 `reduce_splits`. sum_expanded_lanes: the same sums, LANES threads an
//                 output (GPU adapters, few outputs).

struct Params {
  n: u32, rank: u32, src_off: u32, dst_off: u32,
  value: f32, use_fill: u32, red: u32, splits: u32,
  red_rank: u32, quad: u32, _p1: u32, _p2: u32,
  geo: array<vec4<i32>, 6>,
  ext: array<vec4<i32>, 6>,
}

//!include index

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> fill: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

var<workgroup> partial: array<f32, 256>;

struct Loc { src: i32, dst: u32, ok: bool }

// Where output element i reads from (src, valid or not) and writes to (dst).
fn locate(i: u32) -> Loc {
  var rem = i;
  var src = i32(p.src_off);
  var dst = p.dst_off;
  var ok = true;
  for (var d = i32(p.rank) - 1; d >= 0; d--) {
    let g = p.geo[d];
    let e = p.ext[d];
    let size = u32(g.x);
    let idx = rem % size;
    rem = rem / size;
    var t = i32(idx) * g.y + g.z;
    // A negative t is out of range whatever the divisor (div > 0, see ops/layout.py). Test it
    // BEFORE dividing, and divide unsigned: WGSL defines i32 `%` and `/` of negative operands
    // (truncation), but naga's GLSL output uses GLSL's `%`, undefined for negative operands
    // (llvmpipe gives -7 % 2 == 1), which made the OpenGL backend keep wrong cells.
    ok = ok && t >= 0;
    if (g.w != 1) {
      let ut = u32(max(t, 0));
      ok = ok && (ut % u32(g.w) == 0u);
      t = i32(ut / u32(g.w));
    }
    ok = ok && t < e.x;
    src += t * e.y;
    dst += idx * u32(e.z);
  }
  return Loc(src, dst, ok);
}

fn put(i: u32) {
  let l = locate(i);
  var v = p.value;
  if (p.use_fill != 0u) { v = fill[0]; }
  if (l.ok) { v = x[u32(l.src)]; }
  out[l.dst] = v;
}

// With p.quad (ops/layout.py `gather`: the last dim a plain copy, at least 4 long) a thread
// takes 4 consecutive i: inside one row of the last dim they share every other index, so one
// `locate` serves the 4 (its divisions dominated the cost: an H200 moved ViT's head
// transposes at ~1.1 TB/s).
@compute @workgroup_size(64)
fn strided(@builtin(global_invocation_id) gid: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>) {
  if (p.quad == 0u) {
    for (var i = flat_index(gid, nwg); i < p.n; i += grid_stride(nwg)) { put(i); }
    return;
  }
  let r = i32(p.rank) - 1;
  let size = u32(p.geo[r].x);
  let ss = u32(p.ext[r].y);
  let ds = u32(p.ext[r].z);
  for (var q = flat_index(gid, nwg); q < (p.n + 3u) / 4u; q += grid_stride(nwg)) {
    let i = q * 4u;
    if (i % size + 3u < size && i + 3u < p.n) {
      let l = locate(i);
      var v = vec4<f32>(p.value);
      if (p.use_fill != 0u) { v = vec4<f32>(fill[0]); }
      if (l.ok) {
        let s0 = u32(l.src);
        v = vec4<f32>(x[s0], x[s0 + ss], x[s0 + 2u * ss], x[s0 + 3u * ss]);
      }
      out[l.dst] = v.x;
      out[l.dst + ds] = v.y;
      out[l.dst + 2u * ds] = v.z;
      out[l.dst + 3u * ds] = v.w;
    } else {
      for (var k = i; k < min(i + 4u, p.n); k++) { put(k); }
    }
  }
}

// Workgroup k of num_workgroups.x sums chunk k of [0, n).
@compute @workgroup_size(256)
fn masked_sum(@builtin(workgroup_id) wid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
  let chunk = (p.n + nwg.x - 1u) / nwg.x;
  let end = min(p.n, (wid.x + 1u) * chunk);
  var s = 0.0;
  for (var i = wid.x * chunk + lid; i < end; i += 256u) {
    if (!locate(i).ok) { s += x[i]; }
  }
  partial[lid] = s;
  workgroupBarrier();
  for (var half = 128u; half > 0u; half = half >> 1u) {
    if (lid < half) { partial[lid] += partial[lid + half]; }
    workgroupBarrier();
  }
  if (lid == 0u) { out[wid.x] = partial[0]; }
}

// Where output i of sum_expanded reads its first term: i decomposed over the kept sizes.
fn kept_base(i: u32) -> u32 {
  var rem = i;
  var base = p.src_off;
  for (var d = i32(p.rank) - 1; d >= 0; d--) {
    let size = u32(p.geo[d].x);
    base += (rem % size) * u32(p.geo[d].y);
    rem = rem / size;
  }
  return base;
}

// Term r of an output's sum, at base + r decomposed over the reduced sizes and strides.
fn reduced_at(base: u32, r: u32) -> f32 {
  var q = r;
  var off = base;
  for (var d = i32(p.red_rank) - 1; d >= 0; d--) {
    let size = u32(p.ext[d].x);
    off += (q % size) * u32(p.ext[d].y);
    q = q / size;
  }
  return x[off];
}

@compute @workgroup_size(64)
fn sum_expanded(@builtin(global_invocation_id) gid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat_index(gid, nwg);
  if (i >= p.n) { return; }
  let base = kept_base(i);
  let per = (p.red + p.splits - 1u) / p.splits;
  let r0 = gid.z * per;
  let r1 = min(p.red, r0 + per);
  var s = 0.0;
  for (var r = r0; r < r1; r++) { s += reduced_at(base, r); }
  out[gid.z * p.n + i] = s;
}

// sum_expanded for few outputs of long sums on GPU adapters (ops/layout.py expand_lanes: a
// class token's gradient, [64, 1, 64] summed over the batch into [1, 1, 64], ran 64 threads of
// 64 dependent loads). LANES threads an output, one dispatch (no parts, no reduce_splits):
// lane l adds terms l, l + LANES, ... in four running sums (terms l + 4j LANES + k LANES into
// sum k); the lanes' sums are added in lane order from workgroup memory. A workgroup holds
// 256 / LANES outputs; neighbouring threads take neighbouring outputs of one term.
override LANES: u32 = 16u;

@compute @workgroup_size(256)
fn sum_expanded_lanes(@builtin(workgroup_id) wid: vec3<u32>,
                      @builtin(num_workgroups) nwg: vec3<u32>,
                      @builtin(local_invocation_index) lid: u32) {
  let per = 256u / LANES;
  let i = (wid.x + wid.y * nwg.x) * per + lid % per;
  let inside = i < p.n;
  var s4 = vec4<f32>(0.0);
  if (inside) {
    let base = kept_base(i);
    var r = lid / per;
    for (; r + 3u * LANES < p.red; r += 4u * LANES) {
      s4 += vec4<f32>(reduced_at(base, r), reduced_at(base, r + LANES),
                      reduced_at(base, r + 2u * LANES), reduced_at(base, r + 3u * LANES));
    }
    for (; r < p.red; r += LANES) { s4.x += reduced_at(base, r); }
  }
  partial[lid] = (s4.x + s4.y) + (s4.z + s4.w);
  workgroupBarrier();
  if (lid < per && inside) {
    var s = 0.0;
    for (var l = 0u; l < LANES; l++) { s += partial[l * per + lid]; }
    out[i] = s;
  }
}
