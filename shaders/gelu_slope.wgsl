// The erf Gelu's training forward when the Gemm after it takes its backward
// (engine/fusion.py gelu_grads; ops/unary.py): out[i] = GELU(v) = v * Phi(v), as unary.wgsl's
// unary_forward computes it, and, in place of the input v = slope[i] (read by this Gelu alone),
// its slope GELU'(v) = Phi(v) + v * phi(v) (lib/gelu.wgsl), which that Gemm's input-gradient
// kernel multiplies by (gemm.wgsl / reduce.wgsl GELU_GRAD): the same bits as unary_backward's
// dy * GELU'(v), with no erf left in the backward pass. A file of its own so that unary.wgsl's
// dispatches bind no second writable buffer.

//!include detmath
//!include gelu
//!include index

struct Params { n: u32, _p0: u32, _p1: u32, _p2: u32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> slope: array<f32>;  // the Gelu's input t
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(64)
fn gelu_forward_slope(@builtin(global_invocation_id) gid: vec3<u32>,
                      @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var i = flat_index(gid, nwg); i < p.n; i += grid_stride(nwg)) {
    let v = slope[i];
    let cdf = normal_cdf(v);  // once for both (erf's branches: a warp may take all three)
    out[i] = v * cdf;
    slope[i] = gelu_slope_cdf(v, cdf);
  }
}
