// Elementwise activations and their gradients (ReLU), in place where the plan aliases buffers,
// and the sums of gradient contributions.
//   relu_forward:     a = max(a, 0)                     (a = x, becomes y)
//   relu_forward_to:  a = max(b, 0)                     (a = y, b = x)
//   relu_backward:    a = select(0, a, b > 0)           (a = dy, becomes dx; b = y)
//   relu_backward_to: a = select(0, b, c > 0)           (a = dx, b = dy, c = y)
// dReLU/dx uses y > 0, which equals x > 0, so the forward may overwrite its input.

struct Params { n: u32, mask: u32, _p1: u32, _p2: u32 }

//!include index

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read> c: array<f32>;
@group(0) @binding(4) var<storage, read> d: array<f32>;

// Each thread strides over the elements (grid-stride loop): the dispatch may cover n with one
// thread per element (CPU adapters) or fewer threads (GPUs: fewer, fuller workgroups):
// flat_index and grid_stride of lib/index.wgsl.
@compute @workgroup_size(64)
fn relu_forward(@builtin(global_invocation_id) gid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var i = flat_index(gid, nwg); i < p.n; i += grid_stride(nwg)) { a[i] = max(a[i], 0.0); }
}

@compute @workgroup_size(64)
fn relu_forward_to(@builtin(global_invocation_id) gid: vec3<u32>,
                   @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var i = flat_index(gid, nwg); i < p.n; i += grid_stride(nwg)) { a[i] = max(b[i], 0.0); }
}

@compute @workgroup_size(64)
fn relu_backward(@builtin(global_invocation_id) gid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var i = flat_index(gid, nwg); i < p.n; i += grid_stride(nwg)) {
    a[i] = select(0.0, a[i], b[i] > 0.0);
  }
}

@compute @workgroup_size(64)
fn relu_backward_to(@builtin(global_invocation_id) gid: vec3<u32>,
                    @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var i = flat_index(gid, nwg); i < p.n; i += grid_stride(nwg)) {
    a[i] = select(0.0, b[i], c[i] > 0.0);
  }
}

// Gradient accumulation over the uses of a tensor (plan._sum_contributions):
//   add_to:     a = b + c
//   accumulate: a += b
// mask (the last of a sum's dispatches): the sum is the gradient of an in-place ReLU's output
// y = d, whose backward the plan fused here: a = select(0, sum, d > 0), relu_backward's floats.
fn masked(i: u32, v: f32) -> f32 {
  if (p.mask != 0u) { return select(0.0, v, d[i] > 0.0); }
  return v;
}

@compute @workgroup_size(64)
fn add_to(@builtin(global_invocation_id) gid: vec3<u32>,
          @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var i = flat_index(gid, nwg); i < p.n; i += grid_stride(nwg)) {
    a[i] = masked(i, b[i] + c[i]);
  }
}

@compute @workgroup_size(64)
fn accumulate(@builtin(global_invocation_id) gid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var i = flat_index(gid, nwg); i < p.n; i += grid_stride(nwg)) {
    a[i] = masked(i, a[i] + b[i]);
  }
}
