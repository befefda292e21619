// Strided matrix product with optional split-K, the core of Gemm (ONNX: Y = alpha*A'*B' + beta*C,
// transA/transB as strides) and of its gradients dA = dY*B', dB = A'*dY:
//   out[z, m, n] = alpha * sum_{k in part z} a[m*sam + k*sak] * bm[k*sbk + n*sbn]  (+ beta*bias)
// Each thread owns a 4x4 block of out. With splits > 1 the partial sums [splits, M, N] are added
// (and the bias applied) by reduce.wgsl `reduce_splits`; with splits == 1 the bias is added here:
// bias_mode 0 none, 1 bias[n] (a row vector, Linear's bias), 2 bias[m], 3 bias[m*N + n],
// 4 bias[0] (a scalar).

struct Params {
  M: u32, N: u32, K: u32, splits: u32,
  sam: u32, sak: u32, sbk: u32, sbn: u32,
  bias_mode: u32, alpha: f32, beta: f32, _p0: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> bm: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

const T: u32 = 4u;

fn bias_at(m: u32, n: u32) -> f32 {
  switch p.bias_mode {
    case 1u: { return p.beta * bias[n]; }
    case 2u: { return p.beta * bias[m]; }
    case 3u: { return p.beta * bias[m * p.N + n]; }
    case 4u: { return p.beta * bias[0]; }
    default: { return 0.0; }
  }
}

@compute @workgroup_size(64)
fn matmul(@builtin(global_invocation_id) gid: vec3<u32>,
          @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = gid.x + gid.y * nwg.x * 64u;
  let nb = (p.N + T - 1u) / T;
  let mb = (p.M + T - 1u) / T;
  if (t >= mb * nb) { return; }
  let n0 = (t % nb) * T;
  let m0 = (t / nb) * T;
  let per = (p.K + p.splits - 1u) / p.splits;
  let k_start = gid.z * per;
  let k_end = min(p.K, k_start + per);
  // Row offsets into a and column offsets into bm of this 4x4 block (clamped at the edges);
  // vec4 accumulators stay in registers on CPU adapters, unlike indexed arrays.
  let ai = min(vec4<u32>(m0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(p.M - 1u)) * p.sam;
  let bi = min(vec4<u32>(n0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(p.N - 1u)) * p.sbn;
  var c0 = vec4<f32>(0.0);
  var c1 = vec4<f32>(0.0);
  var c2 = vec4<f32>(0.0);
  var c3 = vec4<f32>(0.0);
  for (var k = k_start; k < k_end; k++) {
    let ka = k * p.sak;
    let kb = k * p.sbk;
    let bv = vec4<f32>(bm[bi.x + kb], bm[bi.y + kb], bm[bi.z + kb], bm[bi.w + kb]);
    c0 += a[ai.x + ka] * bv;
    c1 += a[ai.y + ka] * bv;
    c2 += a[ai.z + ka] * bv;
    c3 += a[ai.w + ka] * bv;
  }
  let base = gid.z * p.M * p.N;
  for (var i = 0u; i < T; i++) {
    let m = m0 + i;
    if (m >= p.M) { break; }
    var row = c3;
    switch i { case 0u: { row = c0; } case 1u: { row = c1; } case 2u: { row = c2; } default: {} }
    for (var j = 0u; j < T; j++) {
      let n = n0 + j;
      if (n >= p.N) { break; }
      var v = p.alpha * row[j];
      if (p.splits == 1u) { v += bias_at(m, n); }
      out[base + m * p.N + n] = v;
    }
  }
}
