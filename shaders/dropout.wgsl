// Inverted dropout (Srivastava et al. 2014; ONNX Dropout with training_mode): in training,
// y = x * keep / (1 - ratio) with keep = (u >= ratio), u = philox_unit of Philox(seed; i / 4,
// layer salt, optimizer step, 1) word i % 4 (philox.wgsl; cpu/dropout.py draws the same mask).
// The backward pass recomputes the same mask; with relu it also zeroes dx where the input m
// (the output of an in-place ReLU before this layer, whose backward the plan fused here) is <= 0:
// select(0, dy * keep * scale, m > 0), the floats elementwise.wgsl's relu_backward gives.

struct Params { n: u32, salt: u32, ratio: f32, scale: f32, relu: u32, _p0: u32, _p1: u32, _p2: u32 }
//!include step
//!include index

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<uniform> st: Step;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> m: array<f32>;
// apply4's views of x, y and m (the same buffers, n a multiple of 4, bindings 16-byte aligned)
@group(0) @binding(5) var<storage, read> x4: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read_write> y4: array<vec4<f32>>;
@group(0) @binding(7) var<storage, read> m4: array<vec4<f32>>;

//!include philox

// The scale factors (0 or 1 / (1 - ratio)) of elements 4j .. 4j + 3: one Philox draw.
fn keep4(j: u32) -> vec4<f32> {
  let r = philox4x32(vec4<u32>(j, p.salt, st.step, 1u), vec2<u32>(st.seed, 0u));
  return select(vec4<f32>(0.0), vec4<f32>(p.scale),
                vec4<f32>(philox_unit(r.x), philox_unit(r.y), philox_unit(r.z),
                          philox_unit(r.w)) >= vec4<f32>(p.ratio));
}

fn put(i: u32, keep: f32) {
  if (i >= p.n) { return; }
  let v = x[i] * keep;
  if (p.relu != 0u) { y[i] = select(0.0, v, m[i] > 0.0); } else { y[i] = v; }
}

// forward: x = input, y = output. backward: x = dy, y = dx (the same mask, the same scale).
// One thread per block of four elements.
@compute @workgroup_size(64)
fn apply(@builtin(global_invocation_id) gid: vec3<u32>,
         @builtin(num_workgroups) nwg: vec3<u32>) {
  let j = flat_index(gid, nwg);
  if (4u * j >= p.n) { return; }
  let keep = keep4(j);
  put(4u * j, keep.x);
  put(4u * j + 1u, keep.y);
  put(4u * j + 2u, keep.z);
  put(4u * j + 3u, keep.w);
}

// apply on GPU adapters when n is a multiple of 4 (ops/dropout.py, Builder.DROPOUT_VEC4): the
// thread's four elements as one 16-byte load and store. apply's four scalar accesses a thread
// left each warp instruction 4 floats apart (H200: ~1.4 TB/s). The same mask and products,
// so the same floats.
@compute @workgroup_size(64)
fn apply4(@builtin(global_invocation_id) gid: vec3<u32>,
          @builtin(num_workgroups) nwg: vec3<u32>) {
  let j = flat_index(gid, nwg);
  if (4u * j >= p.n) { return; }
  let v = x4[j] * keep4(j);
  if (p.relu != 0u) {
    y4[j] = select(vec4<f32>(0.0), v, m4[j] > vec4<f32>(0.0));
  } else {
    y4[j] = v;
  }
}
