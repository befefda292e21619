// ONNX Pad in modes "reflect" and "edge" (ops/layout.py), forward and backward. Mode (p.mode):
// 0 reflect (t < 0 -> -t, t >= d -> 2(d - 1) - t; ONNX needs pads < d), 1 edge (t clamped to
// [0, d - 1]), where t = output index - pad_begin along a dim of input size d.
//   pad_forward: out[i] = x[src(i)], i decomposed over the output sizes geo[k].x (row-major,
//                k < rank; geo[k].y the input size, geo[k].z the pad at the beginning).
//   pad_fold:    the gradient along ONE padded dim: x viewed [outer, D, inner] (D = p.big, the
//                padded size), out [outer, d, inner] (d = p.small, begin pad p.lo):
//                out[o, i, r] = sum over j < D, in increasing order, with map(j - lo) == i of
//                x[o, j, r] (a scatter-add written as a gather: no atomics). The backward folds
//                the padded dims one after the other.

struct Params {
  n: u32, rank: u32, mode: u32, inner: u32,
  big: u32, small: u32, lo: u32, _p0: u32,
  geo: array<vec4<i32>, 6>,
}

//!include index

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

fn source(t: i32, d: i32) -> i32 {
  if (p.mode == 0u) {
    if (t < 0) { return -t; }
    if (t >= d) { return 2 * (d - 1) - t; }
    return t;
  }
  return clamp(t, 0, d - 1);
}

@compute @workgroup_size(64)
fn pad_forward(@builtin(global_invocation_id) gid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat_index(gid, nwg);
  if (i >= p.n) { return; }
  var rem = i;
  var src = 0;
  var stride = 1;
  for (var k = i32(p.rank) - 1; k >= 0; k--) {
    let g = p.geo[k];
    let idx = i32(rem % u32(g.x));
    rem = rem / u32(g.x);
    src += source(idx - g.z, g.y) * stride;
    stride *= g.y;
  }
  out[i] = x[u32(src)];
}

@compute @workgroup_size(64)
fn pad_fold(@builtin(global_invocation_id) gid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = flat_index(gid, nwg);
  if (t >= p.n) { return; }
  let r = t % p.inner;
  let i = i32((t / p.inner) % p.small);
  let o = t / (p.inner * p.small);
  var s = 0.0;
  for (var j = 0u; j < p.big; j++) {
    if (source(i32(j) - i32(p.lo), i32(p.small)) == i) {
      s += x[(o * p.big + j) * p.inner + r];
    }
  }
  out[t] = s;
}
