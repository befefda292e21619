// Parameter initialisation, the same bits on every host for a seed (engine/init.py makes the
// rules: PyTorch's default init per op family):
//   uniform_fill: out[i] = ((x_i >> 8) - 2^23) * scale, x_i = Philox(seed; i / 4, stream, 0, 0)
//                 word i % 4 (philox.wgsl): U[-bound, bound) with scale = bound * 2^-23
//   fill:         out[i] = value
// cpu/philox.py draws the same values in numpy.

struct Params { n: u32, seed: u32, stream: u32, _p0: u32, value: f32, _p1: u32, _p2: u32, _p3: u32 }

//!include index

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;

//!include philox

fn put(i: u32, x: u32) {
  if (i < p.n) { out[i] = philox_symmetric(x, p.value); }
}

// One thread per block of four elements.
@compute @workgroup_size(64)
fn uniform_fill(@builtin(global_invocation_id) gid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>) {
  let j = flat_index(gid, nwg);
  if (4u * j >= p.n) { return; }
  let r = philox4x32(vec4<u32>(j, p.stream, 0u, 0u), vec2<u32>(p.seed, 0u));
  put(4u * j, r.x);
  put(4u * j + 1u, r.y);
  put(4u * j + 2u, r.z);
  put(4u * j + 3u, r.w);
}

@compute @workgroup_size(64)
fn fill(@builtin(global_invocation_id) gid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat_index(gid, nwg);
  if (i < p.n) { out[i] = p.value; }
}
