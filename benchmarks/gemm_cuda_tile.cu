// matmul_tiled's design (shaders/gemm.wgsl) in CUDA, for benchmarks/gemm_cuda_tile.py. nn only
// (A [M, K], B [K, N] row-major), M, N multiples of 128 and K of BK: 16 x 16 threads, a 128 x
// 128 tile, 8 x 8 values a thread in two vec4 halves, BK along k through double-buffered
// shared memory, one register prefetch.
// CLAMP adds what WGSL robustness adds: min(index, last) on every shared (1) / global (2) index.
// LAYOUT 1: warp-tiled thread layout; SPLITPF 1: the two halves of a BK 16 step's prefetch
// loaded and stored one after the other (benchmarks/gemm_cuda_tile.py's variants).
#ifndef BK
#define BK 8
#endif
#ifndef CLAMP
#define CLAMP 0
#endif
#ifndef MINB
#define MINB 1
#endif
#ifndef LAYOUT
#define LAYOUT 0  // 1: each warp a compact 4 x 8 block of threads (ty x tx)
#endif
#ifndef SPLITPF
#define SPLITPF 0  // 1: the next step's second half loaded after the first half is stored
#endif
#define WM 16
#define WN 16
#define TILE_V4 (2 * 2 * BK * 2 * WM)  // A and B, two buffers each, vec4s
#if CLAMP & 1
#define SI(i) min((unsigned)(i), (unsigned)(TILE_V4 - 1))
#else
#define SI(i) (i)
#endif
#if CLAMP & 2
#define GA(i) min((unsigned)(i), lastA)
#define GB(i) min((unsigned)(i), lastB)
#else
#define GA(i) (i)
#define GB(i) (i)
#endif

__device__ __forceinline__ void fma4(float4& c, float a, float4 b) {  // c += a * b
  c.x = fmaf(a, b.x, c.x);
  c.y = fmaf(a, b.y, c.y);
  c.z = fmaf(a, b.z, c.z);
  c.w = fmaf(a, b.w, c.w);
}

extern "C" __global__ void __launch_bounds__(WM * WN, MINB)
tile_nn(const float4* __restrict__ A4, const float4* __restrict__ B4, float* __restrict__ C,
        unsigned M, unsigned N, unsigned K) {
  __shared__ float4 tile[TILE_V4];
  float* tf = reinterpret_cast<float*>(tile);
  const unsigned lastA = M * K / 4 - 1, lastB = K * N / 4 - 1;
  const unsigned lid = threadIdx.x;
  const unsigned tiles_n = (N + 8 * WN - 1) / (8 * WN);
  const unsigned m0 = (blockIdx.x / tiles_n) * 8 * WM, n0 = (blockIdx.x % tiles_n) * 8 * WN;
#if LAYOUT == 1
  const unsigned w = lid / 32, lane = lid % 32;
  const unsigned ty = (w / (WN / 8)) * 4 + lane / 8, tx = (w % (WN / 8)) * 8 + lane % 8;
#else
  const unsigned tx = lid % WN, ty = lid / WN;
#endif
  const unsigned nt = WM * WN;
  const unsigned QA = 2 * WM * BK, QB = 2 * WN * BK;  // vec4s of a step's A / B tile
  float4 acc[16];
#pragma unroll
  for (int i = 0; i < 16; i++) acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  float4 la0, la1, lb0, lb1;
  // vec4 q of a step's A tile (4 consecutive k of one row) / B tile (4 columns at one k)
  auto a_at = [&](unsigned k0, unsigned q) {
    return A4[GA(((m0 + q / (BK / 4)) * K + k0 + (q % (BK / 4)) * 4) / 4)];
  };
  auto b_at = [&](unsigned k0, unsigned q) {
    return B4[GB(((k0 + q / (2 * WN)) * N + n0 + (q % (2 * WN)) * 4) / 4)];
  };
  auto load0 = [&](unsigned k0) {
    if (lid < QA) la0 = a_at(k0, lid);
    if (lid < QB) lb0 = b_at(k0, lid);
  };
  auto load1 = [&](unsigned k0) {
    if (lid + nt < QA) la1 = a_at(k0, lid + nt);
    if (lid + nt < QB) lb1 = b_at(k0, lid + nt);
  };
  auto load = [&](unsigned k0) { load0(k0); load1(k0); };
  auto store = [&](unsigned buf, int half) {  // half 0, 1 or 2 (both)
    const unsigned ra = buf * BK * 2 * WM, rb = 2 * BK * 2 * WM + buf * BK * 2 * WN;
    auto sa = [&](float4 v, unsigned q) {
      unsigned m = q / (BK / 4), k = (q % (BK / 4)) * 4;
      tf[SI(ra + (k + 0) * 2 * WM + m / 4) * 4 + m % 4] = v.x;
      tf[SI(ra + (k + 1) * 2 * WM + m / 4) * 4 + m % 4] = v.y;
      tf[SI(ra + (k + 2) * 2 * WM + m / 4) * 4 + m % 4] = v.z;
      tf[SI(ra + (k + 3) * 2 * WM + m / 4) * 4 + m % 4] = v.w;
    };
    auto sb = [&](float4 v, unsigned q) {
      tile[SI(rb + (q / (2 * WN)) * 2 * WN + q % (2 * WN))] = v;
    };
    if (half != 1) {
      if (lid < QA) sa(la0, lid);
      if (lid < QB) sb(lb0, lid);
    }
    if (half != 0) {
      if (lid + nt < QA) sa(la1, lid + nt);
      if (lid + nt < QB) sb(lb1, lid + nt);
    }
  };
  load(0);
  store(0, 2);
  __syncthreads();
  unsigned cur = 0;
  for (unsigned k0 = 0; k0 < K; k0 += BK) {
    const bool more = k0 + BK < K;
#if SPLITPF
    if (more) load0(k0 + BK);
#else
    if (more) load(k0 + BK);
#endif
    const unsigned row_a = cur * BK * 2 * WM, row_b = 2 * BK * 2 * WM + cur * BK * 2 * WN;
#pragma unroll
    for (unsigned k = 0; k < BK; k++) {
#if SPLITPF
      if (k == BK / 2 && more) { store(1 - cur, 0); load1(k0 + BK); }
#endif
      const unsigned ra = row_a + k * 2 * WM, rb = row_b + k * 2 * WN;
      float4 a0 = tile[SI(ra + ty)], a1 = tile[SI(ra + WM + ty)];
      float4 b0 = tile[SI(rb + tx)], b1 = tile[SI(rb + WN + tx)];
      float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
#pragma unroll
      for (int r = 0; r < 8; r++) {
        fma4(acc[2 * r], av[r], b0);
        fma4(acc[2 * r + 1], av[r], b1);
      }
    }
#if SPLITPF
    if (more) { cur = 1 - cur; store(cur, 1); }
#else
    if (more) { cur = 1 - cur; store(cur, 2); }
#endif
    __syncthreads();
  }
  const unsigned top = m0 + ty * 4, bottom = m0 + 4 * WM + ty * 4;
  const unsigned left = n0 + tx * 4, right = n0 + 4 * WN + tx * 4;
#pragma unroll
  for (int r = 0; r < 8; r++) {
    const unsigned m = (r < 4 ? top + r : bottom + r - 4);
    *reinterpret_cast<float4*>(C + m * N + left) = acc[2 * r];
    *reinterpret_cast<float4*>(C + m * N + right) = acc[2 * r + 1];
  }
}
