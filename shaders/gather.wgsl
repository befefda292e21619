// ONNX Gather with constant indices (ops/gather.py) forward and backward. The data x is viewed
// as [outer, dim, inner] around the gathered axis, the output as [outer, count, inner] (count:
// the number of indices, the index tensor flattened). `index` holds, at u32 offsets given in
// Params: the indices normalised to [0, dim) (count of them, at idx_off), and their inverse,
// made on the host, for the backward: starts (dim + 1 entries, at start_off) and order (count
// entries, at order_off) such that order[starts[a] .. starts[a+1]) are the positions j with
// index[j] == a, increasing.
//
//   gather_forward:  out[(o*count + j)*inner + i] = x[(o*dim + index[j])*inner + i]
//   gather_backward: out[(o*dim + a)*inner + i] = sum over the j of a, increasing, of
//                    x[(o*count + j)*inner + i]   (x = dy; zero where no index selects a: the
//                    scatter-add of PyTorch's index_select backward, without atomics)

struct Params {
  n: u32, inner: u32, count: u32, dim: u32,
  idx_off: u32, start_off: u32, order_off: u32, _p0: u32,
}

//!include index

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> index: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(64)
fn gather_forward(@builtin(global_invocation_id) gid: vec3<u32>,
                  @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = flat_index(gid, nwg);
  if (t >= p.n) { return; }
  let i = t % p.inner;
  let j = (t / p.inner) % p.count;
  let o = t / (p.inner * p.count);
  out[t] = x[(o * p.dim + index[p.idx_off + j]) * p.inner + i];
}

@compute @workgroup_size(64)
fn gather_backward(@builtin(global_invocation_id) gid: vec3<u32>,
                   @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = flat_index(gid, nwg);
  if (t >= p.n) { return; }
  let i = t % p.inner;
  let a = (t / p.inner) % p.dim;
  let o = t / (p.inner * p.dim);
  var s = 0.0;
  for (var k = index[p.start_off + a]; k < index[p.start_off + a + 1u]; k++) {
    s += x[(o * p.count + index[p.order_off + k]) * p.inner + i];
  }
  out[t] = s;
}
