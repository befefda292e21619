// ONNX Resize over the last two axes of [N, C, H, W] (ops/resize.py), nearest and linear. The
// table `tab` (f32, made on the host) holds per output row oy the taps [i0, i1, w0, w1] at
// 4*oy, per output column ox at tw + 4*ox; then per axis the inverse: starts (input length + 1
// entries, at hs / ws) and (output position, weight) pairs (at he / we): the pairs
// [starts[i], starts[i+1]) are the output positions reading input position i.
//   resize_forward:  y[p, oy, ox] = sum_{a, b} wy_a(oy) wx_b(ox) x[p, iy_a(oy), ix_b(ox)]
//   resize_backward: dx[p, iy, ix] = sum_{(oy, wy) of iy} wy sum_{(ox, wx) of ix} wx dy[p, oy, ox]
// (positions are stored as f32: exact below 2^24).

struct Params {
  n: u32, H: u32, W: u32, OH: u32,
  OW: u32, tw: u32, hs: u32, he: u32,
  ws: u32, we: u32, _p0: u32, _p1: u32,
}

//!include index

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> tab: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(64)
fn resize_forward(@builtin(global_invocation_id) gid: vec3<u32>,
                  @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = flat_index(gid, nwg);
  if (t >= p.n) { return; }
  let ox = t % p.OW;
  let oy = (t / p.OW) % p.OH;
  let base = t / (p.OW * p.OH) * p.H * p.W;
  let ty = vec4<f32>(tab[4u * oy], tab[4u * oy + 1u], tab[4u * oy + 2u], tab[4u * oy + 3u]);
  let k = p.tw + 4u * ox;
  let tx = vec4<f32>(tab[k], tab[k + 1u], tab[k + 2u], tab[k + 3u]);
  let r0 = base + u32(ty.x) * p.W;
  let r1 = base + u32(ty.y) * p.W;
  let x0 = u32(tx.x);
  let x1 = u32(tx.y);
  out[t] = ty.z * (tx.z * x[r0 + x0] + tx.w * x[r0 + x1])
         + ty.w * (tx.z * x[r1 + x0] + tx.w * x[r1 + x1]);
}

// x = dy [N, C, OH, OW], out = dx [N, C, H, W].
@compute @workgroup_size(64)
fn resize_backward(@builtin(global_invocation_id) gid: vec3<u32>,
                   @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = flat_index(gid, nwg);
  if (t >= p.n) { return; }
  let ix = t % p.W;
  let iy = (t / p.W) % p.H;
  let base = t / (p.W * p.H) * p.OH * p.OW;
  let b0 = u32(tab[p.ws + ix]);
  let b1 = u32(tab[p.ws + ix + 1u]);
  var s = 0.0;
  for (var a = u32(tab[p.hs + iy]); a < u32(tab[p.hs + iy + 1u]); a++) {
    let row = base + u32(tab[p.he + 2u * a]) * p.OW;
    var r = 0.0;
    for (var e = b0; e < b1; e++) {
      r += tab[p.we + 2u * e + 1u] * x[row + u32(tab[p.we + 2u * e])];
    }
    s += tab[p.he + 2u * a + 1u] * r;
  }
  out[t] = s;
}
