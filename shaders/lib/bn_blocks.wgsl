// BatchNorm's per-channel sums without workgroup memory or barriers, for CPU adapters
// (SwiftShader, lavapipe; ops/batchnorm.py when not b.tiled), included by batchnorm.wgsl (its
// Params, x, dy, save, part). SwiftShader runs a workgroup that has barriers as coroutines, one
// per SIMD group, and paid ~120 us a 256-thread workgroup of the barrier-tree kernels whatever
// its elements (MobileNetV2 at batch 8: 43% of the step in them, natively on SwiftShader).
//
// A thread per (channel c, block k) sums its block into part[2 * (c * parts + k) + {0, 1}];
// a thread per channel then adds the `parts` partial sums in a fixed order (block_finish,
// dy_block_finish): the same order on every adapter and every run.
// Block k of channel c is planes [n0, n1) (the outer, batch index) x [i0, i1) (the inner,
// spatial index): `bpp` blocks of width `bw` along each plane, `bg` planes a block.
//
// Variance: each block holds (s_k, q_k) = (sum (x - K), sum (x - K - s_k/n_k)^2), shifted by
// K = the channel's first element and centred on the block's own mean (two passes over the
// block, the second from cache); the finish combines them exactly,
//   sum (x - mean)^2 = sum_k q_k + sum_k (s_k - n_k m)^2 / n_k,   m = sum_k s_k / M,
// the "shifted data" and pairwise (block-combining) forms of Chan, Golub & LeVeque,
// "Algorithms for computing the sample variance: analysis and recommendations", The American
// Statistician 37(3), 1983, 242-247. Neither a mean far from zero nor one far from K (an
// outlying first element) cancels digits the way sum x^2 - M mean^2 does: the between-block
// term is a sum of squares of small differences.
// Every long sum is blocked (two-level: runs of SUB vec4 adds folded into a running total) so
// that its rounding error grows with SUB + count / SUB, not the count. (Pairwise sums of the
// partials were tried: as accurate, and they moved one MobileNetV2 BatchNorm output of
// ~1e-7 across ReLU6's kink at 0, which test_zoo's gradient check against torch counts.)

const SUB: u32 = 16u;  // vec4 adds (64 elements, or 64 parts) per fold

struct Blk { n0: u32, n1: u32, i0: u32, i1: u32 }

fn block_of(k: u32) -> Blk {
  let n0 = (k / p.bpp) * p.bg;
  let i0 = (k % p.bpp) * p.bw;
  return Blk(n0, min(p.outer, n0 + p.bg), i0, min(p.inner, i0 + p.bw));
}

fn block_count(b: Blk) -> f32 {
  return f32((b.n1 - b.n0) * (b.i1 - b.i0));
}

// sum over block b of channel c of d = (x - K) - m (sq == false) or d^2 (sq == true): x - K
// first, exact for x near K (Sterbenz), where K + m would round at the scale of K.
fn block_sum(c: u32, b: Blk, K: f32, m: f32, sq: bool) -> f32 {
  var s4 = vec4<f32>(0.0);
  var s = 0.0;
  for (var n = b.n0; n < b.n1; n++) {
    let base = (n * p.C + c) * p.inner;
    let end = base + b.i1;
    var i = base + b.i0;
    while (i + 4u <= end) {
      let stop = min(end, i + 4u * SUB);
      var b4 = vec4<f32>(0.0);
      for (; i + 4u <= stop; i += 4u) {
        let d = (vec4<f32>(x[i], x[i + 1u], x[i + 2u], x[i + 3u]) - K) - m;
        b4 += select(d, d * d, sq);
      }
      s4 += b4;
    }
    for (; i < end; i++) {
      let d = (x[i] - K) - m;
      s += select(d, d * d, sq);
    }
  }
  return ((s4.x + s4.y) + (s4.z + s4.w)) + s;
}

// (sum dy, sum dy * xhat) over block b of channel c, xhat from the saved mean / invstd.
fn block_sum_dy(c: u32, b: Blk) -> vec2<f32> {
  let mean = save[c];
  let invstd = save[p.C + c];
  var s4 = vec4<f32>(0.0);
  var sx4 = vec4<f32>(0.0);
  var s = vec2<f32>(0.0);
  for (var n = b.n0; n < b.n1; n++) {
    let base = (n * p.C + c) * p.inner;
    let end = base + b.i1;
    var i = base + b.i0;
    while (i + 4u <= end) {
      let stop = min(end, i + 4u * SUB);
      var b4 = vec4<f32>(0.0);
      var bx4 = vec4<f32>(0.0);
      for (; i + 4u <= stop; i += 4u) {
        let d = dy4(vec4<u32>(i, i + 1u, i + 2u, i + 3u));
        b4 += d;
        bx4 += d * (vec4<f32>(x[i], x[i + 1u], x[i + 2u], x[i + 3u]) - mean) * invstd;
      }
      s4 += b4;
      sx4 += bx4;
    }
    for (; i < end; i++) {
      let d = dy_at(i);
      s += vec2<f32>(d, d * (x[i] - mean) * invstd);
    }
  }
  return vec2<f32>((s4.x + s4.y) + (s4.z + s4.w), (sx4.x + sx4.y) + (sx4.z + sx4.w)) + s;
}

// sum_{k < parts} part[base + 2k], blocked, in a fixed order.
fn sum_blocks(base: u32) -> f32 {
  var s4 = vec4<f32>(0.0);
  var k = 0u;
  while (k + 4u <= p.parts) {
    let stop = min(p.parts, k + 4u * SUB);
    var b4 = vec4<f32>(0.0);
    for (; k + 4u <= stop; k += 4u) {
      let e = base + 2u * k;
      b4 += vec4<f32>(part[e], part[e + 2u], part[e + 4u], part[e + 6u]);
    }
    s4 += b4;
  }
  var s = 0.0;
  for (; k < p.parts; k++) { s += part[base + 2u * k]; }
  return ((s4.x + s4.y) + (s4.z + s4.w)) + s;
}

// sum_k (s_k - n_k m)^2 / n_k, the between-block part of channel c's sum of squares, blocked.
fn between_blocks(c: u32, m: f32) -> f32 {
  var t = 0.0;
  var k = 0u;
  while (k < p.parts) {
    let stop = min(p.parts, k + 4u * SUB);
    var b = 0.0;
    for (; k < stop; k++) {
      let n = block_count(block_of(k));
      let d = part[2u * (c * p.parts + k)] - n * m;
      b += d * d / n;
    }
    t += b;
  }
  return t;
}

// normalize and backward_input on CPU adapters when 4 divides the inner size (ops/batchnorm.py):
// a thread per 4 neighbouring elements of one channel, which loads the channel's parameters
// and works out its channel once (the grid-stride kernels divide twice per element, and
// SwiftShader divides vectors lane by lane); per element the same operations in the same order.
fn quad_index(gid: vec3<u32>, nwg: vec3<u32>) -> vec2<u32> {
  let i = 4u * flat_index(gid, nwg);
  return vec2<u32>(i, (min(i, p.outer * p.C * p.inner - 1u) / p.inner) % p.C);
}

fn quad_out(i: u32, v: vec4<f32>) {
  if (i < p.outer * p.C * p.inner) {
    out[i] = v.x; out[i + 1u] = v.y; out[i + 2u] = v.z; out[i + 3u] = v.w;
  }
}

@compute @workgroup_size(64)
fn normalize4(@builtin(global_invocation_id) gid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>) {
  let ic = quad_index(gid, nwg);
  let i = ic.x;
  let c = ic.y;
  let e = min(vec4<u32>(i) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(arrayLength(&x) - 1u));
  let v = vec4<f32>(x[e.x], x[e.y], x[e.z], x[e.w]);
  var y = (v - save[c]) * save[p.C + c] * P[p.gamma + c] + P[p.beta + c];
  if (p.relu != 0u) { y = max(y, vec4<f32>(0.0)); }
  quad_out(i, y);
  if (p.clip != 0u && i < p.outer * p.C * p.inner) {
    let z = min(max(y, vec4<f32>(p.lo)), vec4<f32>(p.hi));
    aux[i] = z.x; aux[i + 1u] = z.y; aux[i + 2u] = z.z; aux[i + 3u] = z.w;
  }
}

@compute @workgroup_size(64)
fn backward_input4(@builtin(global_invocation_id) gid: vec3<u32>,
                   @builtin(num_workgroups) nwg: vec3<u32>) {
  let ic = quad_index(gid, nwg);
  let i = ic.x;
  let c = ic.y;
  let M = f32(p.outer * p.inner);
  let e = min(vec4<u32>(i) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(arrayLength(&x) - 1u));
  let xv = vec4<f32>(x[e.x], x[e.y], x[e.z], x[e.w]);
  let dv = dy4(e);
  let invstd = save[p.C + c];
  let xhat = (xv - save[c]) * invstd;
  let dbeta = G[p.beta + c];
  let dgamma = G[p.gamma + c];
  let v = P[p.gamma + c] * invstd * (dv - dbeta / M - xhat * dgamma / M);
  quad_out(i, select(vec4<f32>(0.0), v, vec4<bool>(p.mask == 0u) | (xv > vec4<f32>(0.0))));
}
