// Parameter initialisation on the GPU, identical on every host for a given seed:
//   uniform_fill: out[i] = lo + (hi - lo) * u(seed, salt, i)  (PyTorch's default Conv/Linear init is
//            U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias: kaiming_uniform_(a=sqrt(5)))
//   fill:    out[i] = lo
// u is the PCG hash of Jarzynski & Olano (JCGT 2020) mapped to [0, 1).

struct Params { n: u32, seed: u32, salt: u32, _p0: u32, lo: f32, hi: f32, _p1: u32, _p2: u32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;

fn pcg(v: u32) -> u32 {
  let s = v * 747796405u + 2891336453u;
  let w = ((s >> ((s >> 28u) + 4u)) ^ s) * 277803737u;
  return (w >> 22u) ^ w;
}

@compute @workgroup_size(64)
fn uniform_fill(@builtin(global_invocation_id) gid: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.x + gid.y * nwg.x * 64u;
  if (i >= p.n) { return; }
  let u = f32(pcg(i ^ pcg(p.salt ^ pcg(p.seed))) >> 8u) * (1.0 / 16777216.0);
  out[i] = p.lo + (p.hi - p.lo) * u;
}

@compute @workgroup_size(64)
fn fill(@builtin(global_invocation_id) gid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.x + gid.y * nwg.x * 64u;
  if (i < p.n) { out[i] = p.lo; }
}
