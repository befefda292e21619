// Strided matrix product with optional split-K, the core of Gemm (ONNX: Y = alpha*A'*B' + beta*C,
// transA/transB as strides) and of its gradients dA = dY*B', dB = A'*dY:
//   out[z, m, n] = alpha * sum_{k in part z} a[m*sam + k*sak] * bm[k*sbk + n*sbn]  (+ beta*bias)
// Each thread of `matmul` owns a 4x4 block of out. With splits > 1 the partial sums [splits, M, N] are added
// (and the bias applied) by reduce.wgsl `reduce_splits`; with splits == 1 the bias is added here:
// bias_mode 0 none, 1 bias[n] (a row vector, Linear's bias), 2 bias[m], 3 bias[m*N + n],
// 4 bias[0] (a scalar). relu (Gemm + an in-place ReLU after it, fused: plan.fused_relu): the
// unsplit kernels store max(v, 0) (elementwise.wgsl relu_forward's floats); split, reduce_splits.
// mask (the gradient of an in-place ReLU before a Gemm, fused into its dA: plan.relu_grad_fused):
// 0 where src[at] <= 0, src the ReLU's output (the same index as out); split, reduce_splits.
// With GELU_GRAD (a Gelu before the Gemm, its backward fused into dA: plan.gelu_grad_fused) the
// mask is the Gelu's slope instead: v * src[at], src the Gelu's input buffer, where the
// training forward's gelu_slope.wgsl left the slope in place of the input.
// BSUM (`matmul`, `matmul_vec`; ops/gemm.py, GPU adapters): a Linear's bias gradient beside its
// weight gradient, the sums over k of the operand that is dY: 1 the rows of op(A) (M sums,
// stored by the threads at n0 == 0), 2 the columns of op(B) (N sums, m0 == 0). Not scaled by
// alpha. Unsplit into bsum; split into out
// after the partial products (out[splits*M*N + z*L + i], L = M or N), which reduce.wgsl
// `reduce_splits` adds as its tail.
// part0 (`matmul_tiled` split, ops/gemm.py): part 0 into out0, the output itself, and part z > 0
// at (z - 1) * M * N of out; reduce_splits (part0) then adds the others to out0 in place, in the
// same order: a part's scratch fewer.

struct Params {
  M: u32, N: u32, K: u32, splits: u32,
  sam: u32, sak: u32, sbk: u32, sbn: u32,
  bias_mode: u32, alpha: f32, beta: f32, relu: u32,
  vec: u32, mask: u32, part0: u32,
}

//!include index

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> bm: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
// a and bm again as vec4 (matmul_tiled and matmul_vec when p.vec says they are aligned,
// matmul_kpar_t when KVEC does: one 16-byte load instead of four 4-byte ones).
@group(0) @binding(5) var<storage, read> a4: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read> b4: array<vec4<f32>>;
@group(0) @binding(7) var<storage, read> src: array<f32>;  // the mask's source
@group(0) @binding(8) var<storage, read_write> bsum: array<f32>;  // BSUM's sums, unsplit
@group(0) @binding(9) var<storage, read_write> out0: array<f32>;  // part 0 (part0)

override BSUM: u32 = 0u;
override GELU_GRAD: u32 = 0u;  // see mask in the header

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

// The value stored at out[at]: ReLU'd, or masked, when fused (only with splits == 1: the parts
// are not the result).
fn act(at: u32, v: f32) -> f32 {
  if (p.splits != 1u) { return v; }
  if (p.mask != 0u) {
    if (GELU_GRAD != 0u) { return v * src[at]; }
    if (src[at] <= 0.0) { return 0.0; }
  }
  if (p.relu != 0u) { return max(v, 0.0); }
  return v;
}

fn store4(at: u32, v: vec4<f32>) {
  out[at] = act(at, v.x); out[at + 1u] = act(at + 1u, v.y); out[at + 2u] = act(at + 2u, v.z);
  out[at + 3u] = act(at + 3u, v.w);
}

// Threads along n in a workgroup of `matmul` (1 to 64, a power of two; 64 / WX along m): a
// workgroup covers a (4 * 64 / WX) x (4 * WX) block of out, so its rows of a and columns of bm
// stay in cache while it runs (ops/gemm.py: 8, fewer for narrow outputs).
override WX: u32 = 8u;

// (m0, n0): the first row and column of thread t's 4x4 block of out (`matmul`, `matmul_vec`).
fn block_of(t: u32) -> vec2<u32> {
  let wy = 64u / WX;
  let blk = t / 64u;
  let nbh = (p.N + 4u * WX - 1u) / (4u * WX);  // workgroup blocks along n
  return vec2<u32>(((blk / nbh) * wy + (t / WX) % wy) * T, ((blk % nbh) * WX + t % WX) * T);
}

// BSUM's sums v of rows (1) or columns (2) first.. first + 3 of split z (edges clipped).
fn store_sums(z: u32, first: u32, v: vec4<f32>) {
  let count = select(p.N, p.M, BSUM == 1u);
  for (var i = 0u; i < T; i++) {
    if (first + i >= count) { break; }
    if (p.splits == 1u) {
      bsum[first + i] = v[i];
    } else {
      out[p.splits * p.M * p.N + z * count + first + i] = v[i];
    }
  }
}

// Stores the 4x4 block c at (m0, n0) of split z (alpha, the bias when not split,
// the fused ReLU or mask; edges clipped).
fn store_block(z: u32, m0: u32, n0: u32, c: Block) {
  let base = z * p.M * p.N;
  if ((BSUM == 1u && n0 == 0u) || (BSUM == 2u && m0 == 0u)) {
    store_sums(z, select(n0, m0, BSUM == 1u), c.s);
  }
  let bias_row = p.splits == 1u && p.bias_mode == 1u;
  if (m0 + T <= p.M && n0 + T <= p.N && (p.splits != 1u || p.bias_mode <= 1u)) {
    // A whole block with no bias or a row-vector bias: straight-line stores.
    let bv = select(vec4<f32>(0.0),
                    p.beta * vec4<f32>(bias[min(n0, arrayLength(&bias) - 1u)],
                                       bias[min(n0 + 1u, arrayLength(&bias) - 1u)],
                                       bias[min(n0 + 2u, arrayLength(&bias) - 1u)],
                                       bias[min(n0 + 3u, arrayLength(&bias) - 1u)]), bias_row);
    store4(base + m0 * p.N + n0, p.alpha * c.c0 + bv);
    store4(base + (m0 + 1u) * p.N + n0, p.alpha * c.c1 + bv);
    store4(base + (m0 + 2u) * p.N + n0, p.alpha * c.c2 + bv);
    store4(base + (m0 + 3u) * p.N + n0, p.alpha * c.c3 + bv);
    return;
  }
  for (var i = 0u; i < T; i++) {
    let m = m0 + i;
    if (m >= p.M) { break; }
    var row = c.c3;
    switch i {
      case 0u: { row = c.c0; }
      case 1u: { row = c.c1; }
      case 2u: { row = c.c2; }
      default: {}
    }
    for (var j = 0u; j < T; j++) {
      let n = n0 + j;
      if (n >= p.N) { break; }
      var v = p.alpha * row[j];
      if (p.splits == 1u) { v += bias_at(m, n); }
      out[base + m * p.N + n] = act(base + m * p.N + n, v);
    }
  }
}

// A thread's 4x4 block of sums (rows c0..c3) and BSUM's four sums (s).
struct Block { c0: vec4<f32>, c1: vec4<f32>, c2: vec4<f32>, c3: vec4<f32>, s: vec4<f32> }

fn hsum(v: vec4<f32>) -> f32 { return (v.x + v.y) + (v.z + v.w); }

// `c` plus the products of k in [k_from, k_end), one k at a time with scalar loads (rows ai of
// a, columns bi of bm): the k left after the steps of four of `matmul` and `matmul_vec`.
fn add_rest(c: Block, k_from: u32, k_end: u32, ai: vec4<u32>, bi: vec4<u32>) -> Block {
  var r = c;
  for (var k = k_from; k < k_end; k++) {
    let ka = k * p.sak;
    let kb = k * p.sbk;
    let bv = vec4<f32>(bm[bi.x + kb], bm[bi.y + kb], bm[bi.z + kb], bm[bi.w + kb]);
    r.c0 += a[ai.x + ka] * bv;
    r.c1 += a[ai.y + ka] * bv;
    r.c2 += a[ai.z + ka] * bv;
    r.c3 += a[ai.w + ka] * bv;
    if (BSUM == 1u) {
      r.s += vec4<f32>(a[ai.x + ka], a[ai.y + ka], a[ai.z + ka], a[ai.w + ka]);
    } else if (BSUM == 2u) {
      r.s += bv;
    }
  }
  return r;
}

@compute @workgroup_size(64)
fn matmul(@builtin(global_invocation_id) gid: vec3<u32>,
          @builtin(num_workgroups) nwg: vec3<u32>) {
  let mn = block_of(flat_index(gid, nwg));
  let m0 = mn.x;
  let n0 = mn.y;
  if (m0 >= p.M || n0 >= p.N) { return; }
  let per = (p.K + p.splits - 1u) / p.splits;
  let k_start = gid.z * per;
  let k_end = min(p.K, k_start + per);
  // Row offsets into a and column offsets into bm of this 4x4 block (clamped at the edges);
  // vec4 accumulators stay in registers on CPU adapters, unlike indexed arrays.
  let ai = min(vec4<u32>(m0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(p.M - 1u)) * p.sam;
  let bi = min(vec4<u32>(n0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(p.N - 1u)) * p.sbn;
  let sak = p.sak;
  let sbk = p.sbk;
  var c0 = vec4<f32>(0.0);
  var c1 = vec4<f32>(0.0);
  var c2 = vec4<f32>(0.0);
  var c3 = vec4<f32>(0.0);
  var bs = vec4<f32>(0.0);
  // k unrolled by 4 (as jax-js's generated matmuls): each accumulator takes one sum of four
  // products a step, a quarter of the loop and index work (SwiftShader: 1.6-2x the GFLOP/s).
  var k = k_start;
  for (; k + 4u <= k_end; k += 4u) {
    let ka = k * sak;
    let kb = k * sbk;
    let b0 = vec4<f32>(bm[bi.x + kb], bm[bi.y + kb], bm[bi.z + kb], bm[bi.w + kb]);
    let kb1 = kb + sbk;
    let b1 = vec4<f32>(bm[bi.x + kb1], bm[bi.y + kb1], bm[bi.z + kb1], bm[bi.w + kb1]);
    let kb2 = kb1 + sbk;
    let b2 = vec4<f32>(bm[bi.x + kb2], bm[bi.y + kb2], bm[bi.z + kb2], bm[bi.w + kb2]);
    let kb3 = kb2 + sbk;
    let b3 = vec4<f32>(bm[bi.x + kb3], bm[bi.y + kb3], bm[bi.z + kb3], bm[bi.w + kb3]);
    let ka1 = ka + sak;
    let ka2 = ka1 + sak;
    let ka3 = ka2 + sak;
    c0 += a[ai.x + ka] * b0 + a[ai.x + ka1] * b1 + a[ai.x + ka2] * b2 + a[ai.x + ka3] * b3;
    c1 += a[ai.y + ka] * b0 + a[ai.y + ka1] * b1 + a[ai.y + ka2] * b2 + a[ai.y + ka3] * b3;
    c2 += a[ai.z + ka] * b0 + a[ai.z + ka1] * b1 + a[ai.z + ka2] * b2 + a[ai.z + ka3] * b3;
    c3 += a[ai.w + ka] * b0 + a[ai.w + ka1] * b1 + a[ai.w + ka2] * b2 + a[ai.w + ka3] * b3;
    if (BSUM == 1u) {
      bs += vec4<f32>(a[ai.x + ka] + a[ai.x + ka1] + a[ai.x + ka2] + a[ai.x + ka3],
                     a[ai.y + ka] + a[ai.y + ka1] + a[ai.y + ka2] + a[ai.y + ka3],
                     a[ai.z + ka] + a[ai.z + ka1] + a[ai.z + ka2] + a[ai.z + ka3],
                     a[ai.w + ka] + a[ai.w + ka1] + a[ai.w + ka2] + a[ai.w + ka3]);
    } else if (BSUM == 2u) {
      bs += (b0 + b1) + (b2 + b3);
    }
  }
  store_block(gid.z, m0, n0, add_rest(Block(c0, c1, c2, c3, bs), k, k_end, ai, bi));
}

// ---- matmul_vec: `matmul` on GPU adapters when both operands load as aligned vec4s (p.vec
// == 3, ops/gemm.py): the same 4x4 block a thread, a and bm read 16 bytes at a time along
// whichever dim is contiguous: four k of a row (sak == 1) or four rows at one k (sam == 1);
// four k of a column (sbk == 1) or four columns at one k (sbn == 1). `matmul`'s 32 scalar
// loads a step of four k were each a warp instruction touching 4-8 cache lines; these are 8
// (H200: the transformers' [28000, 64] x k 64 products). Each split's k range starts at a
// multiple of 4, so the loads along k stay aligned; a K not a multiple of 4 ends in scalars.
@compute @workgroup_size(64)
fn matmul_vec(@builtin(global_invocation_id) gid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>) {
  let mn = block_of(flat_index(gid, nwg));
  let m0 = mn.x;
  let n0 = mn.y;
  if (m0 >= p.M || n0 >= p.N) { return; }
  let per = ((p.K + p.splits - 1u) / p.splits + 3u) / 4u * 4u;
  let k_start = gid.z * per;
  let k_end = min(p.K, k_start + per);
  let ai = min(vec4<u32>(m0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(p.M - 1u)) * p.sam;
  let bi = min(vec4<u32>(n0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(p.N - 1u)) * p.sbn;
  var c0 = vec4<f32>(0.0);
  var c1 = vec4<f32>(0.0);
  var c2 = vec4<f32>(0.0);
  var c3 = vec4<f32>(0.0);
  var bs = vec4<f32>(0.0);
  var k = k_start;
  if (p.sak == 1u && p.sbk == 1u) {  // rows of a, columns of bm (X W^T): 16 dot products
    for (; k + 4u <= k_end; k += 4u) {
      let a0 = a4[(ai.x + k) / 4u];
      let a1 = a4[(ai.y + k) / 4u];
      let a2 = a4[(ai.z + k) / 4u];
      let a3 = a4[(ai.w + k) / 4u];
      let b0 = b4[(bi.x + k) / 4u];
      let b1 = b4[(bi.y + k) / 4u];
      let b2 = b4[(bi.z + k) / 4u];
      let b3 = b4[(bi.w + k) / 4u];
      c0 += vec4<f32>(dot(a0, b0), dot(a0, b1), dot(a0, b2), dot(a0, b3));
      c1 += vec4<f32>(dot(a1, b0), dot(a1, b1), dot(a1, b2), dot(a1, b3));
      c2 += vec4<f32>(dot(a2, b0), dot(a2, b1), dot(a2, b2), dot(a2, b3));
      c3 += vec4<f32>(dot(a3, b0), dot(a3, b1), dot(a3, b2), dot(a3, b3));
      if (BSUM == 1u) {
        bs += vec4<f32>(hsum(a0), hsum(a1), hsum(a2), hsum(a3));
      } else if (BSUM == 2u) {
        bs += vec4<f32>(hsum(b0), hsum(b1), hsum(b2), hsum(b3));
      }
    }
  } else if (p.sak == 1u) {  // rows of a, rows of bm (dY W)
    for (; k + 4u <= k_end; k += 4u) {
      let a0 = a4[(ai.x + k) / 4u];
      let a1 = a4[(ai.y + k) / 4u];
      let a2 = a4[(ai.z + k) / 4u];
      let a3 = a4[(ai.w + k) / 4u];
      let kb = (k * p.sbk + n0) / 4u;
      let s = p.sbk / 4u;
      let b0 = b4[kb];
      let b1 = b4[kb + s];
      let b2 = b4[kb + 2u * s];
      let b3 = b4[kb + 3u * s];
      c0 += a0.x * b0 + a0.y * b1 + a0.z * b2 + a0.w * b3;
      c1 += a1.x * b0 + a1.y * b1 + a1.z * b2 + a1.w * b3;
      c2 += a2.x * b0 + a2.y * b1 + a2.z * b2 + a2.w * b3;
      c3 += a3.x * b0 + a3.y * b1 + a3.z * b2 + a3.w * b3;
      if (BSUM == 1u) {
        bs += vec4<f32>(hsum(a0), hsum(a1), hsum(a2), hsum(a3));
      } else if (BSUM == 2u) {
        bs += (b0 + b1) + (b2 + b3);
      }
    }
  } else if (p.sbn == 1u) {  // columns of a (sam == 1), rows of bm (X^T dY): outer products
    for (; k + 4u <= k_end; k += 4u) {
      for (var r = 0u; r < 4u; r++) {
        let av = a4[(m0 + (k + r) * p.sak) / 4u];
        let bv = b4[((k + r) * p.sbk + n0) / 4u];
        c0 += av.x * bv;
        c1 += av.y * bv;
        c2 += av.z * bv;
        c3 += av.w * bv;
        if (BSUM == 1u) {
          bs += av;
        } else if (BSUM == 2u) {
          bs += bv;
        }
      }
    }
  } else {  // columns of a, columns of bm (sbk == 1)
    for (; k + 4u <= k_end; k += 4u) {
      let b0 = b4[(bi.x + k) / 4u];
      let b1 = b4[(bi.y + k) / 4u];
      let b2 = b4[(bi.z + k) / 4u];
      let b3 = b4[(bi.w + k) / 4u];
      let a0 = a4[(m0 + k * p.sak) / 4u];
      let a1 = a4[(m0 + (k + 1u) * p.sak) / 4u];
      let a2 = a4[(m0 + (k + 2u) * p.sak) / 4u];
      let a3 = a4[(m0 + (k + 3u) * p.sak) / 4u];
      let bk0 = vec4<f32>(b0.x, b1.x, b2.x, b3.x);
      let bk1 = vec4<f32>(b0.y, b1.y, b2.y, b3.y);
      let bk2 = vec4<f32>(b0.z, b1.z, b2.z, b3.z);
      let bk3 = vec4<f32>(b0.w, b1.w, b2.w, b3.w);
      c0 += a0.x * bk0 + a1.x * bk1 + a2.x * bk2 + a3.x * bk3;
      c1 += a0.y * bk0 + a1.y * bk1 + a2.y * bk2 + a3.y * bk3;
      c2 += a0.z * bk0 + a1.z * bk1 + a2.z * bk2 + a3.z * bk3;
      c3 += a0.w * bk0 + a1.w * bk1 + a2.w * bk2 + a3.w * bk3;
      if (BSUM == 1u) {
        bs += (a0 + a1) + (a2 + a3);
      } else if (BSUM == 2u) {
        bs += vec4<f32>(hsum(b0), hsum(b1), hsum(b2), hsum(b3));
      }
    }
  }
  store_block(gid.z, m0, n0, add_rest(Block(c0, c1, c2, c3, bs), k, k_end, ai, bi));
}

// ---- matmul_tiled: the same product for GPU adapters (ops/gemm.py picks it) -----------------
// A workgroup of WM x WN threads (WM along m, WN along n) computes an (8*WM) x (8*WN) tile of
// out, each thread 8 x 8 values (rows 4*ty.. and 4*WM + 4*ty.., columns 4*tx.. and 4*WN + 4*tx..:
// two vec4 halves, so the workgroup memory reads are conflict-free vec4 loads). The k range
// advances BK = 8 at a time through double-buffered workgroup memory: each thread loads its
// one or two vec4 of A and of B for the next step into registers (threads past the tile's
// count load nothing), multiplies the current step, then stores them (one barrier a step).
// WM = WN = 16: 128 x 128 tiles of 256 threads (large products); 16 x 8: 128 x 64 tiles for
// outputs 64 wide (a transformer's d_model); 8 x 8: 64 x 64 (small outputs, long sums). The
// loads walk whichever dim of an operand is contiguous (sak == 1 or sam == 1; sbn == 1 or
// sbk == 1). CPU adapters keep `matmul` (no workgroup memory: faster on SwiftShader).
// p.vec bit 0 (1): a's four values of a vec4 load are one aligned vec4 of a4 (sak == 1 with
// sam a multiple of 4, or sam == 1 with sak one); bit 1 (2) likewise for bm and b4. Each
// split's k range then starts at a multiple of BK, so every load of a whole step is aligned.
override WM: u32 = 16u;
override WN: u32 = 16u;
override EDGE_CLAMP: u32 = 1u;
const BK: u32 = 8u;
// acc[2*r + h]: row r of the thread's 8, column half h. Only constant indices (the epilogue is
// written out): a dynamically indexed array would live in memory, not registers.
var<private> acc: array<vec4<f32>, 16>;

// [2 buffers][BK][2*WM vec4 = 8*WM rows] of A from 0, then [2][BK][2*WN] of B from 32 * WM:
// 32 * (WM + WN) <= 1024 vec4 (16 KiB, WebGPU's default maxComputeWorkgroupStorageSize).
var<workgroup> tile: array<vec4<f32>, 1024>;

fn a_at(m: u32, k: u32, k_end: u32) -> f32 {
  let ok = m < p.M && k < k_end;
  return select(0.0, a[select(0u, m * p.sam + k * p.sak, ok)], ok);
}

fn b_at(k: u32, n: u32, k_end: u32) -> f32 {
  let ok = n < p.N && k < k_end;
  return select(0.0, bm[select(0u, k * p.sbk + n * p.sbn, ok)], ok);
}

// vec4 number q (< 2 * WM * BK) of the A tile at k0. `inside`: the k step lies inside the
// split's k range (every step but a K's ragged last): plain loads, no bounds tests. Rows past
// M read row M - 1 again: they feed only rows of out past M, which are never stored, so a
// tile at the edge of out loads as fast as one inside it (the MLP's [1000, 1024]: its eighth
// row of tiles). Four rows at one k are one vec4 only when all four lie inside: with M not a
// multiple of 4 the group of the last row may run past the binding (a view ending at its
// last element), so such a group loads row by row.
fn load_a(m0: u32, k0: u32, k_end: u32, q: u32, inside: bool) -> vec4<f32> {
  let last = p.M - 1u;
  if (p.sak == 1u) {  // 4 consecutive k of one row
    let m = min(m0 + q / (BK / 4u), last);
    let k = k0 + (q % (BK / 4u)) * 4u;
    if (inside) {
      let i = m * p.sam + k;
      if ((p.vec & 1u) != 0u) { return a4[i / 4u]; }
      return vec4<f32>(a[i], a[i + 1u], a[i + 2u], a[i + 3u]);
    }
    return vec4<f32>(a_at(m, k, k_end), a_at(m, k + 1u, k_end), a_at(m, k + 2u, k_end),
                     a_at(m, k + 3u, k_end));
  }
  let m = m0 + (q % (2u * WM)) * 4u;  // 4 consecutive rows at one k
  let k = k0 + q / (2u * WM);
  if (inside) {
    let ka = k * p.sak;
    if ((p.vec & 1u) != 0u && m + 3u <= last) { return a4[(m + ka) / 4u]; }
    return vec4<f32>(a[min(m, last) * p.sam + ka], a[min(m + 1u, last) * p.sam + ka],
                     a[min(m + 2u, last) * p.sam + ka], a[min(m + 3u, last) * p.sam + ka]);
  }
  return vec4<f32>(a_at(m, k, k_end), a_at(m + 1u, k, k_end), a_at(m + 2u, k, k_end),
                   a_at(m + 3u, k, k_end));
}

fn store_a(v: vec4<f32>, buf: u32, q: u32) {
  let row = buf * BK * 2u * WM;
  if (p.sak == 1u) {
    let m = q / (BK / 4u);
    let k = (q % (BK / 4u)) * 4u;
    for (var i = 0u; i < 4u; i++) { tile[row + (k + i) * 2u * WM + m / 4u][m % 4u] = v[i]; }
  } else {
    tile[row + (q / (2u * WM)) * 2u * WM + q % (2u * WM)] = v;
  }
}

// vec4 number q (< 2 * WN * BK) of the B tile at k0 (columns past N as load_a's rows).
fn load_b(n0: u32, k0: u32, k_end: u32, q: u32, inside: bool) -> vec4<f32> {
  let last = p.N - 1u;
  if (p.sbn == 1u || p.sbk != 1u) {  // 4 consecutive columns at one k
    let n = n0 + (q % (2u * WN)) * 4u;
    let k = k0 + q / (2u * WN);
    if (inside) {
      let kb = k * p.sbk;
      if ((p.vec & 2u) != 0u && n + 3u <= last) { return b4[(kb + n) / 4u]; }
      return vec4<f32>(bm[kb + min(n, last) * p.sbn], bm[kb + min(n + 1u, last) * p.sbn],
                       bm[kb + min(n + 2u, last) * p.sbn], bm[kb + min(n + 3u, last) * p.sbn]);
    }
    return vec4<f32>(b_at(k, n, k_end), b_at(k, n + 1u, k_end), b_at(k, n + 2u, k_end),
                     b_at(k, n + 3u, k_end));
  }
  let n = min(n0 + q / (BK / 4u), last);  // 4 consecutive k of one column
  let k = k0 + (q % (BK / 4u)) * 4u;
  if (inside) {
    let i = k + n * p.sbn;
    if ((p.vec & 2u) != 0u) { return b4[i / 4u]; }
    return vec4<f32>(bm[i], bm[i + 1u], bm[i + 2u], bm[i + 3u]);
  }
  return vec4<f32>(b_at(k, n, k_end), b_at(k + 1u, n, k_end), b_at(k + 2u, n, k_end),
                   b_at(k + 3u, n, k_end));
}

fn store_b(v: vec4<f32>, buf: u32, q: u32) {
  let row = 32u * WM + buf * BK * 2u * WN;
  if (p.sbn == 1u || p.sbk != 1u) {
    tile[row + (q / (2u * WN)) * 2u * WN + q % (2u * WN)] = v;
  } else {
    let n = q / (BK / 4u);
    let k = (q % (BK / 4u)) * 4u;
    for (var i = 0u; i < 4u; i++) { tile[row + (k + i) * 2u * WN + n / 4u][n % 4u] = v[i]; }
  }
}

// This thread's share of one k step: vec4 numbers lid and lid + WM * WN of A's tile and of
// B's (2 * WM * BK and 2 * WN * BK vec4; BK <= WN and BK <= WM, so at most two each).
struct Loads { a0: vec4<f32>, a1: vec4<f32>, b0: vec4<f32>, b1: vec4<f32> }

fn load_step(m0: u32, n0: u32, k0: u32, k_end: u32, lid: u32, inside: bool) -> Loads {
  let nt = WM * WN;
  var l: Loads;
  if (lid < 2u * WM * BK) { l.a0 = load_a(m0, k0, k_end, lid, inside); }
  if (lid + nt < 2u * WM * BK) { l.a1 = load_a(m0, k0, k_end, lid + nt, inside); }
  if (lid < 2u * WN * BK) { l.b0 = load_b(n0, k0, k_end, lid, inside); }
  if (lid + nt < 2u * WN * BK) { l.b1 = load_b(n0, k0, k_end, lid + nt, inside); }
  return l;
}

fn store_step(l: Loads, buf: u32, lid: u32) {
  let nt = WM * WN;
  if (lid < 2u * WM * BK) { store_a(l.a0, buf, lid); }
  if (lid + nt < 2u * WM * BK) { store_a(l.a1, buf, lid + nt); }
  if (lid < 2u * WN * BK) { store_b(l.b0, buf, lid); }
  if (lid + nt < 2u * WN * BK) { store_b(l.b1, buf, lid + nt); }
}

// matmul_tiled's workgroup writes part 0 into out0 (part0). put / put4 are store4's for
// matmul_tiled only: the untiled kernels do not use out0, so their layouts bind one storage
// buffer fewer (vec4 matmul_vec would reach 9 of the 10 the backends ask for).
var<private> into0: bool = false;

fn put(at: u32, v: f32) {
  if (into0) { out0[at] = v; } else { out[at] = v; }
}

fn put4(at: u32, v: vec4<f32>) {
  put(at, act(at, v.x)); put(at + 1u, act(at + 1u, v.y)); put(at + 2u, act(at + 2u, v.z));
  put(at + 3u, act(at + 3u, v.w));
}

// Writes one 4-wide row segment of the tile (alpha, bias when not split, edges clipped).
fn write_row(base: u32, m: u32, n: u32, v: vec4<f32>) {
  if (m >= p.M) { return; }
  for (var j = 0u; j < 4u; j++) {
    if (n + j < p.N) {
      var o = p.alpha * v[j];
      if (p.splits == 1u) { o += bias_at(m, n + j); }
      put(base + m * p.N + n + j, act(base + m * p.N + n + j, o));
    }
  }
}

@compute @workgroup_size(WM * WN)
fn matmul_tiled(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
  let tiles_n = (p.N + 8u * WN - 1u) / (8u * WN);
  let m0 = (wid.x / tiles_n) * 8u * WM;
  let n0 = (wid.x % tiles_n) * 8u * WN;
  let per = ((p.K + p.splits - 1u) / p.splits + BK - 1u) / BK * BK;  // whole steps a split
  let k_start = wid.z * per;
  let k_end = min(p.K, k_start + per);
  let tx = lid % WN;
  let ty = lid / WN;
  let tile_in = m0 + 8u * WM <= p.M && n0 + 8u * WN <= p.N;
  let fast = EDGE_CLAMP != 0u || tile_in;
  var l = load_step(m0, n0, k_start, k_end, lid, fast && k_start + BK <= k_end);
  store_step(l, 0u, lid);
  workgroupBarrier();
  var cur = 0u;
  for (var k0 = k_start; k0 < k_end; k0 += BK) {
    let more = k0 + BK < k_end;
    if (more) {  // the next step's values are in flight while this step multiplies
      l = load_step(m0, n0, k0 + BK, k_end, lid, fast && k0 + 2u * BK <= k_end);
    }
    let row_a = cur * BK * 2u * WM;
    let row_b = 32u * WM + cur * BK * 2u * WN;
    for (var k = 0u; k < BK; k++) {  // explicit fma: one instruction a multiply-add
      let ra = row_a + k * 2u * WM;
      let rb = row_b + k * 2u * WN;
      let a0 = tile[ra + ty];
      let a1 = tile[ra + WM + ty];
      let b0 = tile[rb + tx];
      let b1 = tile[rb + WN + tx];
      acc[0] = fma(vec4<f32>(a0.x), b0, acc[0]); acc[1] = fma(vec4<f32>(a0.x), b1, acc[1]);
      acc[2] = fma(vec4<f32>(a0.y), b0, acc[2]); acc[3] = fma(vec4<f32>(a0.y), b1, acc[3]);
      acc[4] = fma(vec4<f32>(a0.z), b0, acc[4]); acc[5] = fma(vec4<f32>(a0.z), b1, acc[5]);
      acc[6] = fma(vec4<f32>(a0.w), b0, acc[6]); acc[7] = fma(vec4<f32>(a0.w), b1, acc[7]);
      acc[8] = fma(vec4<f32>(a1.x), b0, acc[8]); acc[9] = fma(vec4<f32>(a1.x), b1, acc[9]);
      acc[10] = fma(vec4<f32>(a1.y), b0, acc[10]); acc[11] = fma(vec4<f32>(a1.y), b1, acc[11]);
      acc[12] = fma(vec4<f32>(a1.z), b0, acc[12]); acc[13] = fma(vec4<f32>(a1.z), b1, acc[13]);
      acc[14] = fma(vec4<f32>(a1.w), b0, acc[14]); acc[15] = fma(vec4<f32>(a1.w), b1, acc[15]);
    }
    if (more) {
      cur = 1u - cur;
      store_step(l, cur, lid);
    }
    workgroupBarrier();
  }
  into0 = p.part0 != 0u && wid.z == 0u;
  let base = select((wid.z - p.part0) * p.M * p.N, 0u, into0);
  let top = m0 + ty * 4u;
  let bottom = m0 + 4u * WM + ty * 4u;
  let left = n0 + tx * 4u;
  let right = n0 + 4u * WN + tx * 4u;
  if (tile_in && (p.splits != 1u || p.bias_mode <= 1u)) {
    // The whole tile inside out, no bias or a row-vector bias: straight-line stores, no
    // bounds tests (H200: 2-16% faster on the MLP's split-K products, benchmarks/gemm.py).
    let last = arrayLength(&bias) - 1u;
    let row_bias = p.splits == 1u && p.bias_mode == 1u;
    let bl = select(vec4<f32>(0.0), p.beta * vec4<f32>(bias[min(left, last)],
        bias[min(left + 1u, last)], bias[min(left + 2u, last)], bias[min(left + 3u, last)]),
        row_bias);
    let br = select(vec4<f32>(0.0), p.beta * vec4<f32>(bias[min(right, last)],
        bias[min(right + 1u, last)], bias[min(right + 2u, last)], bias[min(right + 3u, last)]),
        row_bias);
    let r0 = base + top * p.N;
    let r1 = base + bottom * p.N;
    let n1 = p.N;
    let n2 = 2u * p.N;
    let n3 = 3u * p.N;
    put4(r0 + left, p.alpha * acc[0] + bl); put4(r0 + right, p.alpha * acc[1] + br);
    put4(r0 + n1 + left, p.alpha * acc[2] + bl); put4(r0 + n1 + right, p.alpha * acc[3] + br);
    put4(r0 + n2 + left, p.alpha * acc[4] + bl); put4(r0 + n2 + right, p.alpha * acc[5] + br);
    put4(r0 + n3 + left, p.alpha * acc[6] + bl); put4(r0 + n3 + right, p.alpha * acc[7] + br);
    put4(r1 + left, p.alpha * acc[8] + bl); put4(r1 + right, p.alpha * acc[9] + br);
    put4(r1 + n1 + left, p.alpha * acc[10] + bl);
    put4(r1 + n1 + right, p.alpha * acc[11] + br);
    put4(r1 + n2 + left, p.alpha * acc[12] + bl);
    put4(r1 + n2 + right, p.alpha * acc[13] + br);
    put4(r1 + n3 + left, p.alpha * acc[14] + bl);
    put4(r1 + n3 + right, p.alpha * acc[15] + br);
    return;
  }
  write_row(base, top, left, acc[0]); write_row(base, top, right, acc[1]);
  write_row(base, top + 1u, left, acc[2]); write_row(base, top + 1u, right, acc[3]);
  write_row(base, top + 2u, left, acc[4]); write_row(base, top + 2u, right, acc[5]);
  write_row(base, top + 3u, left, acc[6]); write_row(base, top + 3u, right, acc[7]);
  write_row(base, bottom, left, acc[8]); write_row(base, bottom, right, acc[9]);
  write_row(base, bottom + 1u, left, acc[10]); write_row(base, bottom + 1u, right, acc[11]);
  write_row(base, bottom + 2u, left, acc[12]); write_row(base, bottom + 2u, right, acc[13]);
  write_row(base, bottom + 3u, left, acc[14]); write_row(base, bottom + 3u, right, acc[15]);
}

// ---- matmul_kpar: small outputs summed over long k on GPU adapters (a classifier's head:
// [batch, classes] over the hidden width; ops/gemm.kpar_lanes picks it) ---------------------
// A workgroup of 256 threads: KL lanes (8 to 64; to 256 in matmul_kpar_t) along k for each
// of its 256 / KL 4x4 blocks.
// Lane l of a block adds the products of k = l, l + KL, l + 2 KL, ... (neighbouring lanes read
// neighbouring k); the KL partial blocks then meet in workgroup memory, and one thread per
// value adds its KL partials in lane order (a fixed order: the same bits every run) and
// stores it with alpha, the bias and the fused ReLU or mask. One dispatch: no split-K parts,
// no reduce_splits, and no thread walks the whole k alone (`matmul`'s 4x4 blocks of a
// [64, 10] head are 48 threads, each adding every k in turn). Not split (p.splits 1). BSUM's
// sums (a head's bias gradient beside its weight gradient) likewise: lanes' partial sums in
// registers, added through the tile after the products, one thread per block.
override KL: u32 = 16u;

// The partial blocks c0..c3 (rows of 4) and BSUM's partial sums bs of lane l of block j at
// slot j * KL + l of the tile, then one thread a value adds its KL partials in lane order and
// stores it (alpha, the bias, the fused ReLU or mask), and BSUM's sums likewise.
fn kpar_finish(wx: u32, lid: u32, slot: u32, c0: vec4<f32>, c1: vec4<f32>, c2: vec4<f32>,
               c3: vec4<f32>, bs: vec4<f32>) {
  let per_wg = 256u / KL;
  let nbn = (p.N + 3u) / 4u;
  let blocks = ((p.M + 3u) / 4u) * nbn;
  // slot s's rows at tile[4s ..]: 256 threads x 4 vec4 = the whole 16 KiB tile
  tile[4u * slot] = c0;
  tile[4u * slot + 1u] = c1;
  tile[4u * slot + 2u] = c2;
  tile[4u * slot + 3u] = c3;
  workgroupBarrier();
  for (var o = lid; o < 16u * per_wg; o += 256u) {  // value o % 16 of the workgroup's block o / 16
    let ob = wx * per_wg + o / 16u;
    let m = (ob / nbn) * 4u + (o % 16u) / 4u;
    let n = (ob % nbn) * 4u + o % 4u;
    if (ob < blocks && m < p.M && n < p.N) {
      let first = (o / 16u) * KL * 4u + (o % 16u) / 4u;
      var s = 0.0;
      for (var l = 0u; l < KL; l++) { s += tile[first + 4u * l][o % 4u]; }
      let at = m * p.N + n;
      out[at] = act(at, p.alpha * s + bias_at(m, n));
    }
  }
  if (BSUM != 0u) {  // the lanes' sums through the tile again: thread o adds block o's
    workgroupBarrier();
    tile[slot] = bs;
    workgroupBarrier();
    let ob = wx * per_wg + lid;
    let first = select((ob % nbn) * 4u, (ob / nbn) * 4u, BSUM == 1u);
    let owner = select((ob / nbn) == 0u, (ob % nbn) == 0u, BSUM == 1u);
    if (lid < per_wg && ob < blocks && owner) {
      var v = vec4<f32>(0.0);
      for (var l = 0u; l < KL; l++) { v += tile[lid * KL + l]; }
      store_sums(0u, first, v);
    }
  }
}

@compute @workgroup_size(256)
fn matmul_kpar(@builtin(workgroup_id) wid: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
  let per_wg = 256u / KL;  // blocks a workgroup
  let nbn = (p.N + 3u) / 4u;
  let blocks = ((p.M + 3u) / 4u) * nbn;
  let lane = lid % KL;
  let blk = wid.x * per_wg + lid / KL;
  let m0 = (blk / nbn) * 4u;
  let n0 = (blk % nbn) * 4u;
  var c0 = vec4<f32>(0.0);
  var c1 = vec4<f32>(0.0);
  var c2 = vec4<f32>(0.0);
  var c3 = vec4<f32>(0.0);
  var bs = vec4<f32>(0.0);
  if (blk < blocks) {
    let ai = min(vec4<u32>(m0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(p.M - 1u)) * p.sam;
    let bi = min(vec4<u32>(n0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(p.N - 1u)) * p.sbn;
    for (var k = lane; k < p.K; k += KL) {
      let ka = k * p.sak;
      let kb = k * p.sbk;
      let av = vec4<f32>(a[ai.x + ka], a[ai.y + ka], a[ai.z + ka], a[ai.w + ka]);
      let bv = vec4<f32>(bm[bi.x + kb], bm[bi.y + kb], bm[bi.z + kb], bm[bi.w + kb]);
      c0 = fma(vec4<f32>(av.x), bv, c0);
      c1 = fma(vec4<f32>(av.y), bv, c1);
      c2 = fma(vec4<f32>(av.z), bv, c2);
      c3 = fma(vec4<f32>(av.w), bv, c3);
      if (BSUM == 1u) {
        bs += av;
      } else if (BSUM == 2u) {
        bs += bv;
      }
    }
  }
  kpar_finish(wid.x, lid, lid, c0, c1, c2, c3, bs);
}

// ---- matmul_kpar_t: matmul_kpar for k strided (a weight gradient dY^T X over a batch's
// tokens; ops/gemm.py). The workgroup's blocks, not a block's lanes, are neighbouring threads,
// so a warp reads neighbouring blocks' values at one k; with KVEC bit 0 / 1 op(A)'s four rows
// / op(B)'s four columns of a block at one k are one aligned vec4 of a4 / b4 (sam == 1 /
// sbn == 1). The same sums in the same order as matmul_kpar (its epilogue, kpar_finish).
override KVEC: u32 = 0u;

@compute @workgroup_size(256)
fn matmul_kpar_t(@builtin(workgroup_id) wid: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
  let per_wg = 256u / KL;
  let nbn = (p.N + 3u) / 4u;
  let blocks = ((p.M + 3u) / 4u) * nbn;
  let lane = lid / per_wg;
  let own = lid % per_wg;  // the block, in the workgroup
  let blk = wid.x * per_wg + own;
  let m0 = (blk / nbn) * 4u;
  let n0 = (blk % nbn) * 4u;
  var c0 = vec4<f32>(0.0);
  var c1 = vec4<f32>(0.0);
  var c2 = vec4<f32>(0.0);
  var c3 = vec4<f32>(0.0);
  var bs = vec4<f32>(0.0);
  if (blk < blocks) {
    let ai = min(vec4<u32>(m0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(p.M - 1u)) * p.sam;
    let bi = min(vec4<u32>(n0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(p.N - 1u)) * p.sbn;
    for (var k = lane; k < p.K; k += KL) {
      let ka = k * p.sak;
      let kb = k * p.sbk;
      var av: vec4<f32>;
      var bv: vec4<f32>;
      if ((KVEC & 1u) != 0u) {
        av = a4[(m0 + ka) / 4u];
      } else {
        av = vec4<f32>(a[ai.x + ka], a[ai.y + ka], a[ai.z + ka], a[ai.w + ka]);
      }
      if ((KVEC & 2u) != 0u) {
        bv = b4[(n0 + kb) / 4u];
      } else {
        bv = vec4<f32>(bm[bi.x + kb], bm[bi.y + kb], bm[bi.z + kb], bm[bi.w + kb]);
      }
      c0 = fma(vec4<f32>(av.x), bv, c0);
      c1 = fma(vec4<f32>(av.y), bv, c1);
      c2 = fma(vec4<f32>(av.z), bv, c2);
      c3 = fma(vec4<f32>(av.w), bv, c3);
      if (BSUM == 1u) {
        bs += av;
      } else if (BSUM == 2u) {
        bs += bv;
      }
    }
  }
  kpar_finish(wid.x, lid, own * KL + lane, c0, c1, c2, c3, bs);
}
