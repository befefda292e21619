// Batched strided matrix product, the kernel of ONNX MatMul (numpy.matmul semantics) and of its
// gradients (ops/matmul.py):
//   out[s, z, m, n] = sum_{r < R} sum_{k in part s} a[A(z, r) + m*sam + k*sak]
//                                                 * bm[B(z, r) + k*sbk + n*sbn]
// z runs over the kept batch dims (the output's, up to 4, sizes ks), r over the reduced ones
// (up to 4, sizes rs: the broadcast batch dims a gradient sums over). A(z, r) / B(z, r) are
// the batch offsets: index . strides (ksa, ksb, rsa, rsb; a stride is 0 on a dim the operand
// broadcasts). Each thread owns a 4x4 block of one batch of out (as shaders/gemm.wgsl: vec4
// accumulators, edge rows / columns clamped); threads are folded 1-D (gid.x + gid.y * 64 *
// num_workgroups.x) over kept * tiles. gid.z = s splits the k range (split-K); partial sums
// [splits, kept, M, N] are added by reduce.wgsl `reduce_splits`. With p.strided (one part,
// ops/matmul.py: an output written already transposed, or a transposed operand's gradient)
// out[z, m, n] is at offset(z, kso) + m*som + n*son instead of contiguous. Every value stored
// is scaled by p.alpha (a scalar Mul folded into the product, rewrites/scales.py; 1 otherwise).

struct Params {
  M: u32, N: u32, K: u32, splits: u32,
  sam: u32, sak: u32, sbk: u32, sbn: u32,
  kept: u32, reduced: u32, kc: u32, alpha: f32,
  ks: vec4<u32>, ksa: vec4<u32>, ksb: vec4<u32>,
  rs: vec4<u32>, rsa: vec4<u32>, rsb: vec4<u32>,
  kso: vec4<u32>, som: u32, son: u32, strided: u32, _p2: u32,
}

//!include index

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> bm: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

const T: u32 = 4u;

//!include batch_dims

// Where out[z, m, n] of a part starting at `base` (z's contiguous [M, N] block) is stored:
// there, or at the strided place (p.strided; zi = z's multi-index).
fn out_at(base: u32, zi: vec4<u32>, m: u32, n: u32) -> u32 {
  if (p.strided != 0u) { return offset(zi, p.kso) + m * p.som + n * p.son; }
  return base + m * p.N + n;
}

@compute @workgroup_size(64)
fn matmul(@builtin(global_invocation_id) gid: vec3<u32>,
          @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = flat_index(gid, nwg);
  let nb = (p.N + T - 1u) / T;
  let mb = (p.M + T - 1u) / T;
  let tiles = mb * nb;
  if (t >= tiles * p.kept) { return; }
  let zo = t / tiles;
  let tile = t % tiles;
  let n0 = (tile % nb) * T;
  let m0 = (tile / nb) * T;
  let zi = unflatten(zo, p.ks);
  let a0 = offset(zi, p.ksa);
  let b0 = offset(zi, p.ksb);
  let per = (p.K + p.splits - 1u) / p.splits;
  let k_start = gid.z * per;
  let k_end = min(p.K, k_start + per);
  let rows = min(vec4<u32>(m0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(p.M - 1u)) * p.sam;
  let cols = min(vec4<u32>(n0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(p.N - 1u)) * p.sbn;
  var c0 = vec4<f32>(0.0);
  var c1 = vec4<f32>(0.0);
  var c2 = vec4<f32>(0.0);
  var c3 = vec4<f32>(0.0);
  for (var r = 0u; r < p.reduced; r++) {
    let ri = unflatten(r, p.rs);
    let ai = rows + vec4<u32>(a0 + offset(ri, p.rsa));
    let bi = cols + vec4<u32>(b0 + offset(ri, p.rsb));
    for (var k = k_start; k < k_end; k++) {
      let ka = k * p.sak;
      let kb = k * p.sbk;
      let bv = vec4<f32>(bm[bi.x + kb], bm[bi.y + kb], bm[bi.z + kb], bm[bi.w + kb]);
      c0 += a[ai.x + ka] * bv;
      c1 += a[ai.y + ka] * bv;
      c2 += a[ai.z + ka] * bv;
      c3 += a[ai.w + ka] * bv;
    }
  }
  let base = (gid.z * p.kept + zo) * p.M * p.N;
  for (var i = 0u; i < T; i++) {
    let m = m0 + i;
    if (m >= p.M) { break; }
    var row = c3;
    switch i { case 0u: { row = c0; } case 1u: { row = c1; } case 2u: { row = c2; } default: {} }
    for (var j = 0u; j < T; j++) {
      let n = n0 + j;
      if (n >= p.N) { break; }
      out[out_at(base, zi, m, n)] = p.alpha * row[j];
    }
  }
}

// matmul_wg (GPU adapters, ops/matmul.py `_wg_chunk`): a 256-thread workgroup per kept batch
// index z (no reduced dims, no split) computes all of out[z] from workgroup memory: A [M, K]
// and B^T [N, K] staged once, rows padded to K + 1 values (threads of a warp reading the rows of
// different 4-row blocks hit different banks), loaded along whichever stride is 1. Each thread
// then owns 4x4 blocks of out[z] in turn. The per-thread kernel above reads a batch's values
// across cache lines (attention's [65, 16] x [16, 65] per head: ~5 TFLOP/s on an H200).
// matmul_wg_chunks: the same with k staged p.kc values at a time (rows padded to kc + 1) for
// at most 256 blocks, one a thread, summed over the chunks (few batch indices).
override TILE: u32 = 4096u;  // floats staged: (M + N) * (K + 1) rounded up, <= 4096 (16 KiB)
const WGT: u32 = 256u;
var<workgroup> tile: array<f32, TILE>;

// Stages k values k0 .. k0 + kn of the batch at offsets (a0, b0): A's row m at tile[m * ks],
// B^T's row n at tile[bt + n * ks]; consecutive threads load along whichever stride is 1.
fn stage(lid: u32, a0: u32, b0: u32, k0: u32, kn: u32, ks: u32, bt: u32) {
  let am_fast = p.sam == 1u && p.sak != 1u;
  for (var i = lid; i < p.M * kn; i += WGT) {
    let m = select(i / kn, i % p.M, am_fast);
    let k = select(i % kn, i / p.M, am_fast);
    tile[m * ks + k] = a[a0 + m * p.sam + (k0 + k) * p.sak];
  }
  let bn_fast = p.sbn == 1u && p.sbk != 1u;
  for (var i = lid; i < p.N * kn; i += WGT) {
    let n = select(i / kn, i % p.N, bn_fast);
    let k = select(i % kn, i / p.N, bn_fast);
    tile[bt + n * ks + k] = bm[b0 + (k0 + k) * p.sbk + n * p.sbn];
  }
}

// out[base + m * N + n] (out_at) for the 4x4 block at (m0, n0), rows c0..c3, clipped at M, N.
fn store_block(base: u32, zi: vec4<u32>, m0: u32, n0: u32, c0: vec4<f32>, c1: vec4<f32>,
               c2: vec4<f32>, c3: vec4<f32>) {
  for (var i = 0u; i < T; i++) {
    let m = m0 + i;
    if (m >= p.M) { break; }
    var row = c3;
    switch i { case 0u: { row = c0; } case 1u: { row = c1; } case 2u: { row = c2; } default: {} }
    for (var j = 0u; j < T; j++) {
      let n = n0 + j;
      if (n >= p.N) { break; }
      out[out_at(base, zi, m, n)] = p.alpha * row[j];
    }
  }
}

@compute @workgroup_size(256)
fn matmul_wg(@builtin(workgroup_id) wid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
  let zo = wid.x + wid.y * nwg.x;
  if (zo >= p.kept) { return; }  // uniform: the whole workgroup
  let zi = unflatten(zo, p.ks);
  let a0 = offset(zi, p.ksa);
  let b0 = offset(zi, p.ksb);
  let ks = p.K + 1u;
  let bt = p.M * ks;  // B^T's first row in tile
  stage(lid, a0, b0, 0u, p.K, ks, bt);
  workgroupBarrier();
  let nb = (p.N + T - 1u) / T;
  let blocks = ((p.M + T - 1u) / T) * nb;
  let base = zo * p.M * p.N;
  for (var t = lid; t < blocks; t += WGT) {
    let n0 = (t % nb) * T;
    let m0 = (t / nb) * T;
    let rows = min(vec4<u32>(m0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(p.M - 1u)) * ks;
    let cols = min(vec4<u32>(n0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(p.N - 1u)) * ks +
               vec4<u32>(bt);
    var c0 = vec4<f32>(0.0);
    var c1 = vec4<f32>(0.0);
    var c2 = vec4<f32>(0.0);
    var c3 = vec4<f32>(0.0);
    for (var k = 0u; k < p.K; k++) {
      let bv = vec4<f32>(tile[cols.x + k], tile[cols.y + k], tile[cols.z + k], tile[cols.w + k]);
      c0 += tile[rows.x + k] * bv;
      c1 += tile[rows.y + k] * bv;
      c2 += tile[rows.z + k] * bv;
      c3 += tile[rows.w + k] * bv;
    }
    store_block(base, zi, m0, n0, c0, c1, c2, c3);
  }
}

@compute @workgroup_size(256)
fn matmul_wg_chunks(@builtin(workgroup_id) wid: vec3<u32>,
                    @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32) {
  let zo = wid.x + wid.y * nwg.x;
  if (zo >= p.kept) { return; }  // uniform: the whole workgroup
  let zi = unflatten(zo, p.ks);
  let a0 = offset(zi, p.ksa);
  let b0 = offset(zi, p.ksb);
  let ks = p.kc + 1u;
  let bt = p.M * ks;
  let nb = (p.N + T - 1u) / T;
  let live = lid < ((p.M + T - 1u) / T) * nb;  // this thread's block exists
  let n0 = (lid % nb) * T;
  let m0 = (lid / nb) * T;
  let rows = min(vec4<u32>(m0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(p.M - 1u)) * ks;
  let cols = min(vec4<u32>(n0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(p.N - 1u)) * ks +
             vec4<u32>(bt);
  var c0 = vec4<f32>(0.0);
  var c1 = vec4<f32>(0.0);
  var c2 = vec4<f32>(0.0);
  var c3 = vec4<f32>(0.0);
  for (var k0 = 0u; k0 < p.K; k0 += max(p.kc, 1u)) {  // a step of 0 would never end
    let kn = min(max(p.kc, 1u), p.K - k0);
    stage(lid, a0, b0, k0, kn, ks, bt);
    workgroupBarrier();
    if (live) {
      for (var k = 0u; k < kn; k++) {
        let bv = vec4<f32>(tile[cols.x + k], tile[cols.y + k], tile[cols.z + k],
                           tile[cols.w + k]);
        c0 += tile[rows.x + k] * bv;
        c1 += tile[rows.y + k] * bv;
        c2 += tile[rows.z + k] * bv;
        c3 += tile[rows.w + k] * bv;
      }
    }
    workgroupBarrier();
  }
  if (!live) { return; }
  store_block(zo * p.M * p.N, zi, m0, n0, c0, c1, c2, c3);
}
