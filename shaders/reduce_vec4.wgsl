// reduce.wgsl `reduce_splits` on four neighbouring outputs a thread, from 16-byte loads and
// stores (GPU adapters: at least 4 * Builder.SPLIT_THREADS outputs, a multiple of 4, no tail;
// ops/gemm.reduce_splits): x4 and out4 are its x and out as vec4s. Each output's parts are
// added in reduce_splits' order (four running sums of every fourth part, then the rest) and
// finished by the same epilogue, so its bits are reduce_splits'. A file of its own so that
// reduce.wgsl's other dispatches bind no two more buffers (one of them writable).
// H100, the MLP's [1000, 1024] over 4 parts: 15.6 us a thread an output (20 MB, 1.3 TB/s),
// 10.5-11.2 us here.

//!include split_epilogue
//!include index

override GELU_GRAD: u32 = 0u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x4: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> bias: array<f32>;
@group(0) @binding(3) var<storage, read_write> out4: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> src: array<f32>;  // the mask's source

// Part k of outputs 4q .. 4q + 3 (part0 as `part`).
fn part4(k: u32, q: u32) -> vec4<f32> {
  let c4 = p.count / 4u;
  if (p.part0 == 0u) { return x4[k * c4 + q]; }
  if (k == 0u) { return out4[q]; }
  return x4[(k - 1u) * c4 + q];
}

@compute @workgroup_size(64)
fn reduce_splits4(@builtin(global_invocation_id) gid: vec3<u32>,
                  @builtin(num_workgroups) nwg: vec3<u32>) {
  let q = flat_index(gid, nwg);
  if (q >= p.count / 4u) { return; }
  var s0 = vec4<f32>(0.0);  // parts k = 0, 4, 8, ... (reduce_splits' s4.x, four outputs)
  var s1 = vec4<f32>(0.0);
  var s2 = vec4<f32>(0.0);
  var s3 = vec4<f32>(0.0);
  var k = 0u;
  for (; k + 4u <= p.splits; k += 4u) {
    s0 += part4(k, q);
    s1 += part4(k + 1u, q);
    s2 += part4(k + 2u, q);
    s3 += part4(k + 3u, q);
  }
  var s = (s0 + s1) + (s2 + s3);
  for (; k < p.splits; k++) { s += part4(k, q); }
  let e = 4u * q;
  out4[q] = vec4<f32>(epilogue(e, s.x), epilogue(e + 1u, s.y), epilogue(e + 2u, s.z),
                      epilogue(e + 3u, s.w));
}

