// Reductions: per-channel sums of NCHW-like tensors (bias gradients) and the sum over split-K
// partial results (gemm.wgsl, conv2d.wgsl backward_weight).
//   channel_sum:   out[c] = sum_{o < outer, i < inner} x[(o*C + c)*inner + i]   (in parts)
//   reduce_splits: out[e] = sum_{s < splits} x[s*count + e]  (+ beta*bias per bias_mode, e = m*N+n)
//                  (reduce_splits_lanes: LANES threads an output); and a tail of `tail` more
//                  sums after the parts, [splits, tail] at x[splits*count], into out2 (plain
//                  sums: a Linear's bias gradient beside its split-K weight gradient, gemm.wgsl
//                  BSUM); part0 (no tail): part 0 is out itself (gemm.wgsl part0), part
//                  s > 0 at x[(s - 1)*count + e], added in the same order
//   column_parts:  out[k*C + c] = sum over the rows o of part k of x[o*C + c]   (inner 1)

//!include split_epilogue
// reduce_splits' epilogue, after the bias: relu: max(sum, 0), a Gemm's or a convolution's fused
// ReLU (gemm.wgsl, conv_gemm.wgsl); mask: 0 where src[e] <= 0, a fused ReLU's gradient (src the
// ReLU's output at the same index), or with GELU_GRAD times src[e], a fused Gelu's gradient
// (src the Gelu's input buffer, holding its slope: gemm.wgsl). bias_mode 5 is a convolution's
// per-channel bias of an NCHW output: bias[(e / inner) % C] (inner the pixels of a plane, C the
// channels).

//!include index

override GELU_GRAD: u32 = 0u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> bias: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<storage, read> src: array<f32>;  // reduce_splits' mask source
@group(0) @binding(5) var<storage, read_write> out2: array<f32>;  // reduce_splits' tail

const WG: u32 = 256u;  // channel_sum's workgroup
alias RedT = f32;
var<workgroup> red: array<RedT, 256>;
//!include wg_reduce

// Element e of channel c of x viewed as [outer, C, inner] (e over outer and inner).
fn at(c: u32, e: u32) -> u32 { return ((e / p.inner) * p.C + c) * p.inner + e % p.inner; }

// Workgroup (c, k) sums part k of channel c (`splits` parts) into out[k*C + c]; c folds into
// x and z past 65535 channels (groups_per_channel).
@compute @workgroup_size(256)
fn channel_sum(@builtin(workgroup_id) wid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
  let c = channel_of(wid, nwg);
  if (c >= p.C) { return; }  // uniform: the whole workgroup
  let total = p.outer * p.inner;
  let chunk = (total + p.splits - 1u) / p.splits;
  let end = min(total, (wid.y + 1u) * chunk);
  // four elements an iteration, loaded before they are added: four loads in flight
  var s4 = vec4<f32>(0.0);
  var e = wid.y * chunk + lid;
  for (; e + 768u < end; e += 1024u) {
    s4 += vec4<f32>(x[at(c, e)], x[at(c, e + 256u)], x[at(c, e + 512u)], x[at(c, e + 768u)]);
  }
  for (; e < end; e += 256u) { s4.x += x[at(c, e)]; }
  red[lid] = (s4.x + s4.y) + (s4.z + s4.w);
  wg_tree_sum(lid);
  if (lid == 0u) { out[wid.y * p.C + c] = red[0]; }
}

// A thread per (part k, column c) of x viewed as [outer, C] (`splits` parts of the rows; GPU
// adapters, ops/gemm.channel_sum, which folds the parts with channel_sum): neighbouring threads
// read neighbouring columns of a row, where channel_sum's read values C apart.
@compute @workgroup_size(64)
fn column_parts(@builtin(global_invocation_id) gid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = flat_index(gid, nwg);
  let c = t % p.C;
  let k = t / p.C;
  if (k >= p.splits) { return; }
  let per = (p.outer + p.splits - 1u) / p.splits;
  let end = min(p.outer, (k + 1u) * per);
  var s4 = vec4<f32>(0.0);  // four loads in flight
  var o = k * per;
  for (; o + 4u <= end; o += 4u) {
    let i = o * p.C + c;
    s4 += vec4<f32>(x[i], x[i + p.C], x[i + 2u * p.C], x[i + 3u * p.C]);
  }
  var s = (s4.x + s4.y) + (s4.z + s4.w);
  for (; o < end; o++) { s += x[o * p.C + c]; }
  out[k * p.C + c] = s;
}

// Part k of output e: x[k * stride + first], or with part0 out[e] for k 0 and the rest one
// part lower in x.
fn part(k: u32, stride: u32, first: u32, e: u32) -> f32 {
  if (p.part0 == 0u) { return x[k * stride + first]; }
  if (k == 0u) { return out[e]; }
  return x[(k - 1u) * stride + first];
}

// reduce_splits' bias and epilogue on the sum s of output e.
fn finish_split(e: u32, sum: f32) { out[e] = epilogue(e, sum); }

@compute @workgroup_size(64)
fn reduce_splits(@builtin(global_invocation_id) gid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>) {
  let e = flat_index(gid, nwg);
  if (e >= p.count + p.tail) { return; }
  // the parts of output e: x[first + k * stride], k < splits (the tail's after all parts)
  let in_tail = e >= p.count;
  let stride = select(p.count, p.tail, in_tail);
  let first = select(e, p.splits * p.count + e - p.count, in_tail);
  // four independent running sums: four loads in flight (latency-bound with many splits)
  var s4 = vec4<f32>(0.0);
  var k = 0u;
  for (; k + 4u <= p.splits; k += 4u) {
    s4 += vec4<f32>(part(k, stride, first, e), part(k + 1u, stride, first, e),
                    part(k + 2u, stride, first, e), part(k + 3u, stride, first, e));
  }
  var s = (s4.x + s4.y) + (s4.z + s4.w);
  for (; k < p.splits; k++) { s += part(k, stride, first, e); }
  finish(e, s);
}

// out[e] by finish_split, or the tail's out2[e - count] (a plain sum).
fn finish(e: u32, s: f32) {
  if (e >= p.count) {
    out2[e - p.count] = s;
  } else {
    finish_split(e, s);
  }
}

// reduce_splits for few outputs of many parts on GPU adapters (ops/gemm.reduce_splits: the
// split-K weight gradients of small matrices, e.g. [64, 64] over 256 parts, where a thread an
// output ran ~4 K threads of 256 dependent loads). LANES threads an output: lane l sums parts
// l, l + LANES, ...; the lanes' sums are added in lane order from workgroup memory. A workgroup
// holds 256 / LANES outputs; neighbouring threads read neighbouring outputs of one part.
override LANES: u32 = 16u;

@compute @workgroup_size(256)
fn reduce_splits_lanes(@builtin(workgroup_id) wid: vec3<u32>,
                       @builtin(num_workgroups) nwg: vec3<u32>,
                       @builtin(local_invocation_index) lid: u32) {
  let per = 256u / LANES;
  let e = (wid.x + wid.y * nwg.x) * per + lid % per;
  let inside = e < p.count + p.tail;
  let in_tail = e >= p.count;
  let stride = select(p.count, p.tail, in_tail);
  let first = select(e, p.splits * p.count + e - p.count, in_tail);
  var s4 = vec4<f32>(0.0);
  var k = lid / per;
  if (inside) {
    for (; k + 3u * LANES < p.splits; k += 4u * LANES) {
      s4 += vec4<f32>(part(k, stride, first, e), part(k + LANES, stride, first, e),
                      part(k + 2u * LANES, stride, first, e),
                      part(k + 3u * LANES, stride, first, e));
    }
    for (; k < p.splits; k += LANES) { s4.x += part(k, stride, first, e); }
  }
  red[lid] = (s4.x + s4.y) + (s4.z + s4.w);
  workgroupBarrier();
  if (lid < per && inside) {
    var s = 0.0;
    for (var l = 0u; l < LANES; l++) { s += red[l * per + lid]; }
    finish(e, s);
  }
}

// channel_sum on CPU adapters (ops/gemm.py): a thread per channel, no workgroup memory or
// barriers (SwiftShader runs a workgroup with barriers as coroutines: ~0.2 ms each, whatever
// its elements). Each plane (o, c) is summed in four running lanes (elements i, i+1, i+2, i+3
// of a step), and the plane sums are added in order, so the rounding error grows with
// inner / 4 + outer, not the count.
@compute @workgroup_size(64)
fn channel_sum_rows(@builtin(global_invocation_id) gid: vec3<u32>,
                    @builtin(num_workgroups) nwg: vec3<u32>) {
  let c = flat_index(gid, nwg);
  if (c >= p.C) { return; }
  var total = 0.0;
  for (var o = 0u; o < p.outer; o++) {
    let base = (o * p.C + c) * p.inner;
    var s4 = vec4<f32>(0.0);
    var i = 0u;
    for (; i + 4u <= p.inner; i += 4u) {
      s4 += vec4<f32>(x[base + i], x[base + i + 1u], x[base + i + 2u], x[base + i + 3u]);
    }
    var s = (s4.x + s4.y) + (s4.z + s4.w);
    for (; i < p.inner; i++) { s += x[base + i]; }
    total += s;
  }
  out[c] = total;
}
