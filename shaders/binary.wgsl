// Binary elementwise ops with NumPy (multidirectional) broadcasting, ONNX Add, Sub, Mul, Div,
// Pow, PRelu (A = x, B = slope), and Max, Min, Sum, Mean of two inputs (more: a chain of these,
// ops/binary.py); gradients by PyTorch's
// autograd formulas. OP (override): BINARY_ADD, _SUB, _MUL, _DIV, _POW, _PRELU, _MAX, _MIN,
// _SUM, _MEAN of the generated include binary_ops (ops/binary.py CODES). SIDE (override, backward):
// 0 the gradient of A, 1 of B.
//
//   forward_same:  out[i] = f(x0[i], x1[i])                   (A, B and Y of one size)
//   forward:       out[i] = f(x0[ia(i)], x1[ib(i)])           (x0 = A, x1 = B)
//   backward_same: out[i] = x2[i] * df/dt(x0[i], x1[i])       (x0 = t, x1 = o, x2 = dY)
//   backward_full: out[i] = x2[i] * df/dt(x0[i], x1[io(i)])   (t not broadcast: no sum)
//   backward:      out[s*n + j] = sum over the positions r of split s of
//                                 dY[y(j, r)] * df/dt(x0[j], x1[o(j, r)])
// t is the operand whose gradient is computed, o the other one. Shapes come collapsed (size-1
// dims dropped, neighbours with the same broadcast pattern merged), innermost dim first:
//   forward:  dims[d] = (size, A stride, B stride, 0), rank of them; i decomposes over them;
//   backward: dims[d] = (size, dY stride, o stride, 0) of the dims t spans (rank of them; t is
//             contiguous over them, so its element j decomposes over them), red[d] = the same
//             for the dims t is broadcast along (nred of them, `total` positions, r = 0..total).
// The gradient sum is a gather (WGSL has no float atomics): thread j owns t[j] and loops over
// the broadcast positions; split s covers positions [s*chunk, (s+1)*chunk), summed afterwards
// by reduce.wgsl's reduce_splits. The loop runs over the innermost broadcast dim with a stride,
// so the index math is paid once per run of red[0].x positions.
//
// Pow (torch.pow, its autograd): x^0 = 1; integral exponents by repeated squaring (exact sign
// for x < 0, 1/x^|n| for n < 0); x^0.5 = sqrt(x); else pow(|x|, y) (WGSL pow is undefined for
// x < 0), NaN for x < 0 with a non-integral exponent.
//   d/da = b * a^(b-1) (0 where b == 0);  d/db = a^b * ln(a) (0 where a == 0 and b >= 0).
//
// PRelu: y = a < 0 ? b * a : a; torch's prelu backward: d/da = a > 0 ? 1 : b, d/db = a > 0 ?
// 0 : a. Max / Min: a tie gives A the whole gradient (A wins ties; torch.maximum would split
// it in halves): d/da = a >= b (a <= b), d/db = b > a (b < a). Mean: (a + b) * MEAN_SCALE,
// MEAN_SCALE each (override: 1/2, or 1/n for the last step of a Mean of n inputs, ops/binary.py).

//!include binary_ops

override OP: u32 = 0u;
override SIDE: u32 = 0u;
override MEAN_SCALE: f32 = 0.5;

struct Params {
  n: u32, rank: u32, nred: u32, total: u32,
  chunk: u32, nan_bits: u32, relu: u32, _p1: u32,
  dims: array<vec4<u32>, 6>,
  red: array<vec4<u32>, 6>,
}

//!include index

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read> x0: array<f32>;
@group(0) @binding(3) var<storage, read> x1: array<f32>;
@group(0) @binding(4) var<storage, read> x2: array<f32>;


fn qnan() -> f32 { return bitcast<f32>(p.nan_bits); }  // a run-time NaN (no NaN constants)

// The forwards' result; relu: max(y, 0), an in-place ReLU after the node fused here (the same
// max as elementwise.wgsl's relu_forward: the same floats).
fn activated(y: f32) -> f32 {
  if (p.relu != 0u) { return max(y, 0.0); }
  return y;
}

fn powf(a: f32, b: f32) -> f32 {
  if (b == 0.0) { return 1.0; }
  let n = round(b);
  if (n == b && abs(n) <= 64.0) {
    var e = u32(abs(n));
    var base = a;
    var r = 1.0;
    loop {
      if ((e & 1u) != 0u) { r = r * base; }
      e = e >> 1u;
      if (e == 0u) { break; }
      base = base * base;
    }
    return select(r, 1.0 / r, n < 0.0);
  }
  if (b == 0.5) { return select(sqrt(a), qnan(), a < 0.0); }
  if (a == 0.0) { return select(0.0, 1.0 / abs(a), b < 0.0); }  // +inf for b < 0
  let m = pow(abs(a), b);
  if (a > 0.0) { return m; }
  if (n != b) { return qnan(); }
  return select(m, -m, fract(n * 0.5) != 0.0);  // |n| > 64: odd n keeps the sign
}

fn f(a: f32, b: f32) -> f32 {
  switch OP {
    case BINARY_ADD: { return a + b; }
    case BINARY_SUB: { return a - b; }
    case BINARY_MUL: { return a * b; }
    case BINARY_DIV: { return a / b; }
    case BINARY_PRELU: { return select(a, b * a, a < 0.0); }
    case BINARY_MAX: { return select(b, a, a >= b); }
    case BINARY_MIN: { return select(b, a, a <= b); }
    case BINARY_SUM: { return a + b; }
    case BINARY_MEAN: { return (a + b) * MEAN_SCALE; }
    default: { return powf(a, b); }
  }
}

// dy * df/dt at (a, b) = (t, o) for SIDE 0, (o, t) for SIDE 1.
fn grad(dy: f32, t: f32, o: f32) -> f32 {
  let a = select(t, o, SIDE == 1u);
  let b = select(o, t, SIDE == 1u);
  if (SIDE == 0u) {
    switch OP {
      case BINARY_ADD, BINARY_SUB, BINARY_SUM: { return dy; }
      case BINARY_MUL: { return dy * b; }
      case BINARY_DIV: { return dy / b; }
      case BINARY_PRELU: { return select(dy * b, dy, a > 0.0); }
      case BINARY_MAX: { return select(0.0, dy, a >= b); }
      case BINARY_MIN: { return select(0.0, dy, a <= b); }
      case BINARY_MEAN: { return dy * MEAN_SCALE; }
      default: { return select(dy * (b * powf(a, b - 1.0)), 0.0, b == 0.0); }
    }
  }
  switch OP {
    case BINARY_ADD, BINARY_SUM: { return dy; }
    case BINARY_SUB: { return -dy; }
    case BINARY_MUL: { return dy * a; }
    case BINARY_DIV: { return -dy * ((a / b) / b); }
    case BINARY_PRELU: { return select(dy * a, 0.0, a > 0.0); }
    case BINARY_MAX: { return select(0.0, dy, b > a); }
    case BINARY_MIN: { return select(0.0, dy, b < a); }
    case BINARY_MEAN: { return dy * MEAN_SCALE; }
    default: { return select(dy * (powf(a, b) * log(a)), 0.0, a == 0.0 && b >= 0.0); }
  }
}

@compute @workgroup_size(64)
fn forward_same(@builtin(global_invocation_id) gid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var i = flat_index(gid, nwg); i < p.n; i += grid_stride(nwg)) {
    out[i] = activated(f(x0[i], x1[i]));
  }
}

// The two offsets of flat index i over p.dims[0..rank): sum of coordinate * dims[d].y and
// sum of coordinate * dims[d].z (forward: a and b; backward: dY and o).
fn offsets(i: u32) -> vec2<u32> {
  var rest = i;
  var o = vec2<u32>(0u);
  for (var d = 0u; d < p.rank; d++) {
    let dim = p.dims[d];
    let c = rest % dim.x;
    rest = rest / dim.x;
    o += c * dim.yz;
  }
  return o;
}

@compute @workgroup_size(64)
fn forward(@builtin(global_invocation_id) gid: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var i = flat_index(gid, nwg); i < p.n; i += grid_stride(nwg)) {
    let o = offsets(i);
    out[i] = activated(f(x0[o.x], x1[o.y]));
  }
}

@compute @workgroup_size(64)
fn backward_same(@builtin(global_invocation_id) gid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var i = flat_index(gid, nwg); i < p.n; i += grid_stride(nwg)) {
    out[i] = grad(x2[i], x0[i], x1[i]);
  }
}

// t spans every dim of Y (o is broadcast): dims as backward's, no red; grid-stride, as forward.
@compute @workgroup_size(64)
fn backward_full(@builtin(global_invocation_id) gid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var i = flat_index(gid, nwg); i < p.n; i += grid_stride(nwg)) {
    let o = offsets(i);
    let v = grad(x2[o.x], x0[i], x1[o.y]);
    out[i] = select(v, 0.0, v == 0.0);  // -0 as +0, as backward's sum from 0.0 (same bits)
  }
}

@compute @workgroup_size(64)
fn backward(@builtin(global_invocation_id) gid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>) {
  let j = flat_index(gid, nwg);
  if (j >= p.n) { return; }
  // Offsets of dY and o at the first broadcast position of t[j].
  let first = offsets(j);
  let oy = first.x;
  let oo = first.y;
  let tv = x0[j];
  let inner = max(p.red[0].x, 1u);  // 0 (nothing to sum: total 0) must not stall the loop
  let sy = p.red[0].y;
  let so = p.red[0].z;
  let r_end = min(p.total, (gid.z + 1u) * p.chunk);
  var r = gid.z * p.chunk;
  var s = 0.0;
  loop {
    if (r >= r_end) { break; }
    let k0 = r % inner;
    var q = r / inner;
    var qy = oy;
    var qo = oo;
    for (var d = 1u; d < p.nred; d++) {
      let dim = p.red[d];
      let c = q % dim.x;
      q = q / dim.x;
      qy += c * dim.y;
      qo += c * dim.z;
    }
    let k1 = min(inner, k0 + (r_end - r));
    for (var k = k0; k < k1; k++) {
      s += grad(x2[qy + k * sy], tv, x1[qo + k * so]);
    }
    r += k1 - k0;
  }
  out[gid.z * p.n + j] = s;
}
