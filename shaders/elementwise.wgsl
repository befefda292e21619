// In-place elementwise activations and their gradients (ReLU).
//   relu_forward:  a[i] = max(a[i], 0)                        (a = x, becomes y)
//   relu_backward: a[i] = select(0, a[i], b[i] > 0)           (a = dy, becomes dx; b = y)
// dReLU/dx uses y > 0, which equals x > 0, so the forward may overwrite its input.

struct Params { n: u32, _p0: u32, _p1: u32, _p2: u32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;

@compute @workgroup_size(64)
fn relu_forward(@builtin(global_invocation_id) gid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.x + gid.y * nwg.x * 64u;
  if (i < p.n) { a[i] = max(a[i], 0.0); }
}

@compute @workgroup_size(64)
fn relu_backward(@builtin(global_invocation_id) gid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.x + gid.y * nwg.x * 64u;
  if (i < p.n) { a[i] = select(0.0, a[i], b[i] > 0.0); }
}
