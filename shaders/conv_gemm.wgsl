// 2-D convolution (NCHW, group 1) as an implicit GEMM on the tiles of gemm.wgsl `matmul_tiled`:
// the im2col matrix is never written, each tile gathers its values from the image. GPU adapters,
// wide layers (ops/conv.py `gemm_tile`); MODE picks the product:
//   0 forward:  y[n,m,p]  = sum_kk w[m, kk] * im2col(x)[kk, (n,p)]          (M = K, N = batch*P)
//   1 input gradient of a stride-1 convolution as the forward of dy with the flipped, transposed
//     filter:   dx[n,c,p] = sum_(k,t) w[k, c, T-1-t] * im2col(dy)[(k,t), (n,p)]  (M = C)
//   2 weight gradient: dw[m, tap] = sum_(n,p) dy[n,m,p] * im2col(x)[tap, (n,p)]  (M = K,
//     N = C*KH*KW, the sum over batch*P split into `splits` parts, added by reduce.wgsl)
//   3 input gradient of a strided convolution (dilation 1), one stride class (r, q) a z slice
//     (sub-pixel decomposition): the dx pixels (r + sh*u, q + sw*v) take only the taps
//     i = i0 + a*sh, j = j0 + b*sw with (r + ph - i) and (q + pw - j) multiples of the
//     stride, from dy[n, k, u + eh - a, v + ew - b] (`Cls`): a stride-1 product over
//     C_out * A * B terms, with none of the zeros a strided gather would multiply. Params:
//     M = C, N = batch, C / H / W the channels and size of dy, OH / OW the size of dx; z
//     slice class * splits + part.
// with kk = c*T + i*KW + j (T = KH*KW), p = oh*OW + ow, im2col(img)[kk, (n,p)] =
// img[n, c, oh*sh - ph + i*dh, ow*sw - pw + j*dw] (0 outside the image). The image is
// [batch, C, H, W]; OH x OW is the window grid. Outputs of modes 0 and 1 are NCHW
// [batch, M, OH, OW] (partial sums [splits, ...] likewise); mode 2's [splits, M, N].
// Epilogue (splits == 1; else reduce.wgsl reduce_splits applies it): + bias[m] (has_bias),
// max(., 0) (relu), 0 where src <= 0 (mask: a fused ReLU's gradient, src the ReLU's output at
// the same index).

struct Params {
  M: u32, N: u32, K: u32, splits: u32,
  C: u32, H: u32, W: u32, OH: u32,
  OW: u32, has_bias: u32, relu: u32, mask: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;    // w (modes 0, 1) or dy (mode 2)
@group(0) @binding(2) var<storage, read> img: array<f32>;  // the gathered image
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read> src: array<f32>;  // the mask's source
@group(0) @binding(5) var<storage, read_write> out: array<f32>;

override MODE: u32 = 0u;
override KH: u32 = 3u;
override KW: u32 = 3u;
override sh: u32 = 1u;
override sw: u32 = 1u;
override ph: u32 = 0u;
override pw: u32 = 0u;
override dh: u32 = 1u;
override dw: u32 = 1u;
override TW: u32 = 16u;  // threads along n: 8 * TW columns a tile (16 or 8)
override TM: u32 = TW;   // threads along m: 8 * TM rows a tile (TW, or TW / 2: 64 x 128 tiles)
override BK: u32 = TW / 2u;


const FAR: i32 = -1048576;  // a row or column offset that every bounds test rejects

var<private> acc: array<vec4<f32>, 16>;  // as gemm.wgsl: constant indices only

// Mode 3's stride class: its pixel offsets (r, q), first taps (i0, j0), tap counts (A, B),
// grid of dx pixels (hr, wr) and dy offsets (eh, ew); `cols` and `kd`, the product's N and K
// (p.N and p.K in the other modes).
struct Cls { r: u32, q: u32, i0: u32, j0: u32, A: u32, B: u32, hr: u32, wr: u32, eh: i32,
             ew: i32 }
var<private> cls: Cls;
var<private> cols: u32;

fn class_of(z: u32) -> Cls {
  var c: Cls;
  c.r = z / sw;
  c.q = z % sw;
  c.i0 = (c.r + ph) % sh;
  c.j0 = (c.q + pw) % sw;
  c.A = select(0u, (KH - c.i0 + sh - 1u) / sh, c.i0 < KH);
  c.B = select(0u, (KW - c.j0 + sw - 1u) / sw, c.j0 < KW);
  c.hr = select(0u, (p.OH - c.r + sh - 1u) / sh, c.r < p.OH);
  c.wr = select(0u, (p.OW - c.q + sw - 1u) / sw, c.q < p.OW);
  c.eh = i32((c.r + ph - c.i0) / sh);
  c.ew = i32((c.q + pw - c.j0) / sw);
  return c;
}
var<workgroup> tile_a: array<vec4<f32>, 512>;
var<workgroup> tile_b: array<vec4<f32>, 512>;

// A[m, k] (0 outside [M, k_end)).
fn a_at(m: u32, k: u32, k_end: u32) -> f32 {
  if (m >= p.M || k >= k_end) { return 0.0; }
  let t = KH * KW;
  if (MODE == 0u) { return a[m * p.K + k]; }
  if (MODE == 1u) { return a[(k / t) * p.M * t + m * t + (t - 1u - k % t)]; }
  if (MODE == 3u) {
    let ab = cls.A * cls.B;
    let i = cls.i0 + ((k % ab) / cls.B) * sh;
    let j = cls.j0 + (k % cls.B) * sw;
    return a[((k / ab) * p.M + m) * t + i * KW + j];
  }
  let pix = p.OH * p.OW;
  return a[(k / pix) * p.M * pix + m * pix + k % pix];
}

// One side of an im2col index: an offset into img and the row / column before the bounds test.
struct Part { base: u32, ih: i32, iw: i32 }

// The column's part (fixed for the thread): a pixel (n, oh, ow) in modes 0, 1; a tap in mode 2.
fn col_part(j: u32) -> Part {
  if (j >= cols) { return Part(0u, FAR, FAR); }
  if (MODE == 3u) {
    let pix = cls.hr * cls.wr;
    let q = j % pix;
    return Part((j / pix) * p.C * p.H * p.W, i32(q / cls.wr), i32(q % cls.wr));
  }
  if (MODE == 2u) {
    let t = j % (KH * KW);
    return Part((j / (KH * KW)) * p.H * p.W, i32((t / KW) * dh) - i32(ph),
                i32((t % KW) * dw) - i32(pw));
  }
  let pix = p.OH * p.OW;
  let q = j % pix;
  return Part((j / pix) * p.C * p.H * p.W, i32((q / p.OW) * sh) - i32(ph),
              i32((q % p.OW) * sw) - i32(pw));
}

// The row's part (per k step): a tap in modes 0, 1, 3 (mode 2: `row_part_pix`).
fn row_part(k: u32, k_end: u32) -> Part {
  if (k >= k_end) { return Part(0u, FAR, FAR); }
  if (MODE == 3u) {
    let ab = cls.A * cls.B;
    let t = k % ab;
    return Part((k / ab) * p.H * p.W, cls.eh - i32(t / cls.B), cls.ew - i32(t % cls.B));
  }
  let t = k % (KH * KW);
  return Part((k / (KH * KW)) * p.H * p.W, i32((t / KW) * dh), i32((t % KW) * dw));
}

// Mode 2's pixel of the batch at k, (n, q) = (k / (OH*OW), k % (OH*OW)), carried from step to
// step by `pix_add` (one division by a uniform a step instead of two in `row_part`).
struct Pix { n: u32, q: u32 }

fn pix_of(k: u32) -> Pix {
  let pix = p.OH * p.OW;
  return Pix(k / pix, k % pix);
}

fn pix_add(v: Pix, d: u32) -> Pix {
  let pix = max(p.OH * p.OW, 1u);  // an empty grid (never dispatched) must not loop forever
  var r = Pix(v.n, v.q + d);
  while (r.q >= pix) {  // at most d / pix + 1 times
    r.q -= pix;
    r.n += 1u;
  }
  return r;
}

// `row_part` of mode 2 at k (its pixel v = pix_of(k)).
fn row_part_pix(v: Pix, k: u32, k_end: u32) -> Part {
  if (k >= k_end) { return Part(0u, FAR, FAR); }
  return Part(v.n * p.C * p.H * p.W, i32((v.q / p.OW) * sh), i32((v.q % p.OW) * sw));
}

fn img_at(c: Part, r: Part) -> f32 {
  let ih = c.ih + r.ih;
  let iw = c.iw + r.iw;
  let ok = ih >= 0 && iw >= 0 && u32(ih) < p.H && u32(iw) < p.W;
  return select(0.0, img[select(0u, c.base + r.base + u32(ih) * p.W + u32(iw), ok)], ok);
}

// This thread's 4 consecutive k of one row of A, stored k-major (gemm.wgsl store_a, sak = 1).
fn load_a(m: u32, k: u32, k_end: u32) -> vec4<f32> {
  if (MODE == 2u && m < p.M && k + 3u < k_end) {  // dy: four k of one plane are neighbours
    let pix = p.OH * p.OW;
    let q = k % pix;
    if (q + 3u < pix) {
      let i = (k / pix) * p.M * pix + m * pix + q;
      return vec4<f32>(a[i], a[i + 1u], a[i + 2u], a[i + 3u]);
    }
  }
  return vec4<f32>(a_at(m, k, k_end), a_at(m, k + 1u, k_end), a_at(m, k + 2u, k_end),
                   a_at(m, k + 3u, k_end));
}

fn store_a(v: vec4<f32>, buf: u32, lid: u32) {
  let row = buf * BK * 2u * TM;
  let q = BK / 4u;
  let m = lid / q;
  let k = (lid % q) * 4u;
  for (var i = 0u; i < 4u; i++) { tile_a[row + (k + i) * 2u * TM + m / 4u][m % 4u] = v[i]; }
}

// B's entry e (k row e / (2 TW), 4 columns from (e % (2 TW)) * 4): thread lid stores e = lid,
// and with TM < TW also e = lid + TM * TW (the row TM / 2 further, the same columns).
fn store_b(v: vec4<f32>, buf: u32, e: u32) {
  tile_b[buf * BK * 2u * TW + e] = v;
}

// The output index of (m, column j) for modes 0, 1 and 3 is colbase(j) + m * P.
fn col_base(j: u32) -> u32 {
  if (MODE == 3u) {
    let pix = cls.hr * cls.wr;
    let q = j % pix;
    return (j / pix) * p.M * p.OH * p.OW + (cls.r + sh * (q / cls.wr)) * p.OW + cls.q +
           sw * (q % cls.wr);
  }
  let pix = p.OH * p.OW;
  return (j / pix) * p.M * pix + j % pix;
}

// `zb`: the offset of this workgroup's part (split-K) in the output.
fn put(zb: u32, m: u32, cb: vec4<u32>, j: u32, v: vec4<f32>) {
  if (m >= p.M) { return; }
  var b = 0.0;
  if (p.splits == 1u && p.has_bias == 1u) { b = bias[m]; }
  for (var i = 0u; i < 4u; i++) {
    if (j + i < cols) {
      var at = zb + m * p.N + j + i;
      if (MODE != 2u) { at = zb + cb[i] + m * p.OH * p.OW; }
      var o = v[i] + b;
      if (p.splits == 1u) {
        if (p.relu == 1u) { o = max(o, 0.0); }
        if (p.mask == 1u && src[at] <= 0.0) { o = 0.0; }
      }
      out[at] = o;
    }
  }
}

@compute @workgroup_size(TM * TW)
fn conv_gemm(@builtin(workgroup_id) wid: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
  // Loop bounds from locals (uniform: the barriers below need them so); the private copies
  // `cls` and `cols` serve the load and store helpers.
  var n_cols = p.N;
  var kd = p.K;
  var split = wid.z;
  var zb = wid.z * p.M * p.N;  // the part's offset in the output
  if (MODE == 3u) {  // a stride class `splits` z slices; its grid may need fewer tiles
    let c = class_of(wid.z / p.splits);
    cls = c;
    n_cols = p.N * c.hr * c.wr;
    kd = p.C * c.A * c.B;
    split = wid.z % p.splits;
    zb = split * p.N * p.M * p.OH * p.OW;
  }
  cols = n_cols;
  let tiles_n = (n_cols + 8u * TW - 1u) / (8u * TW);
  if (wid.x >= tiles_n * ((p.M + 8u * TM - 1u) / (8u * TM))) { return; }
  let m0 = (wid.x / tiles_n) * 8u * TM;
  let n0 = (wid.x % tiles_n) * 8u * TW;
  let per = ((kd + p.splits - 1u) / p.splits + BK - 1u) / BK * BK;
  let k_start = min(kd, split * per);
  let k_end = min(kd, k_start + per);
  let tx = lid % TW;
  let ty = lid / TW;
  // This thread's loads: A row am, 4 k from ak; B columns bj.. bj + 3 at k row bk (and, on
  // 64 x 128 tiles, at k row bk + TM / 2: `two`).
  let am = m0 + lid / (BK / 4u);
  let ak = (lid % (BK / 4u)) * 4u;
  let bj = n0 + (lid % (2u * TW)) * 4u;
  let bk = lid / (2u * TW);
  let two = TM < TW;
  let e2 = lid + TM * TW;
  let c0 = col_part(bj);
  let c1 = col_part(bj + 1u);
  let c2 = col_part(bj + 2u);
  let c3 = col_part(bj + 3u);
  var rp = Pix(0u, 0u);  // mode 2: the pixels of this thread's B rows
  var rp2 = rp;
  var r: Part;
  if (MODE == 2u) {
    rp = pix_of(k_start + bk);
    rp2 = pix_add(rp, TM / 2u);
    r = row_part_pix(rp, k_start + bk, k_end);
  } else {
    r = row_part(k_start + bk, k_end);
  }
  var va = load_a(am, k_start + ak, k_end);
  var vb = vec4<f32>(img_at(c0, r), img_at(c1, r), img_at(c2, r), img_at(c3, r));
  var vb2 = vec4<f32>(0.0);
  if (two) {
    if (MODE == 2u) {
      r = row_part_pix(rp2, k_start + bk + TM / 2u, k_end);
    } else {
      r = row_part(k_start + bk + TM / 2u, k_end);
    }
    vb2 = vec4<f32>(img_at(c0, r), img_at(c1, r), img_at(c2, r), img_at(c3, r));
    store_b(vb2, 0u, e2);
  }
  store_a(va, 0u, lid);
  store_b(vb, 0u, lid);
  workgroupBarrier();
  var cur = 0u;
  for (var k0 = k_start; k0 < k_end; k0 += BK) {
    let more = k0 + BK < k_end;
    if (more) {
      va = load_a(am, k0 + BK + ak, k_end);
      if (MODE == 2u) {
        rp = pix_add(rp, BK);
        r = row_part_pix(rp, k0 + BK + bk, k_end);
      } else {
        r = row_part(k0 + BK + bk, k_end);
      }
      vb = vec4<f32>(img_at(c0, r), img_at(c1, r), img_at(c2, r), img_at(c3, r));
      if (two) {
        if (MODE == 2u) {
          rp2 = pix_add(rp2, BK);
          r = row_part_pix(rp2, k0 + BK + bk + TM / 2u, k_end);
        } else {
          r = row_part(k0 + BK + bk + TM / 2u, k_end);
        }
        vb2 = vec4<f32>(img_at(c0, r), img_at(c1, r), img_at(c2, r), img_at(c3, r));
      }
    }
    let rowa0 = cur * BK * 2u * TM;
    let row0 = cur * BK * 2u * TW;
    for (var k = 0u; k < BK; k++) {
      let rowa = rowa0 + k * 2u * TM;
      let row = row0 + k * 2u * TW;
      let a0 = tile_a[rowa + ty];
      let a1 = tile_a[rowa + TM + ty];
      let b0 = tile_b[row + tx];
      let b1 = tile_b[row + TW + tx];
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
      store_a(va, cur, lid);
      store_b(vb, cur, lid);
      if (two) { store_b(vb2, cur, e2); }
    }
    workgroupBarrier();
  }
  let top = m0 + ty * 4u;
  let bottom = m0 + 4u * TM + ty * 4u;
  let left = n0 + tx * 4u;
  let right = n0 + 4u * TW + tx * 4u;
  var cl = vec4<u32>(0u);
  var cr = vec4<u32>(0u);
  if (MODE != 2u) {  // modes 0, 1, 3
    cl = vec4<u32>(col_base(left), col_base(left + 1u), col_base(left + 2u),
                   col_base(left + 3u));
    cr = vec4<u32>(col_base(right), col_base(right + 1u), col_base(right + 2u),
                   col_base(right + 3u));
  }
  put(zb, top, cl, left, acc[0]); put(zb, top, cr, right, acc[1]);
  put(zb, top + 1u, cl, left, acc[2]); put(zb, top + 1u, cr, right, acc[3]);
  put(zb, top + 2u, cl, left, acc[4]); put(zb, top + 2u, cr, right, acc[5]);
  put(zb, top + 3u, cl, left, acc[6]); put(zb, top + 3u, cr, right, acc[7]);
  put(zb, bottom, cl, left, acc[8]); put(zb, bottom, cr, right, acc[9]);
  put(zb, bottom + 1u, cl, left, acc[10]); put(zb, bottom + 1u, cr, right, acc[11]);
  put(zb, bottom + 2u, cl, left, acc[12]); put(zb, bottom + 2u, cr, right, acc[13]);
  put(zb, bottom + 3u, cl, left, acc[14]); put(zb, bottom + 3u, cr, right, acc[15]);
}
