// The embedding lookup (ops/embed.py): ONNX Gather(table, token ids, axis=0) with the ids
// computed at run time (the model's input, u32). The table x is viewed as [rows, inner], the
// output as [count, inner]; an id outside [0, rows) is clamped to the nearest row.
//
//   embed_forward:  out[j*inner + i] = x[clamp(ids[j])*inner + i]
//   embed_backward: out[a*inner + i] = sum over j with clamp(ids[j]) == a, increasing j, of
//                   x[j*inner + i]   (x = dy; the table's gradient, scatter-add without atomics:
//                   one thread per (row, column), bit-reproducible)

struct Params { n: u32, inner: u32, count: u32, rows: u32 }

//!include index

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

fn row_of(j: u32) -> u32 {
  return min(ids[j], p.rows - 1u);
}

@compute @workgroup_size(64)
fn embed_forward(@builtin(global_invocation_id) gid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = flat_index(gid, nwg);
  if (t >= p.n) { return; }
  let i = t % p.inner;
  out[t] = x[row_of(t / p.inner) * p.inner + i];
}

@compute @workgroup_size(64)
fn embed_backward(@builtin(global_invocation_id) gid: vec3<u32>,
                  @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = flat_index(gid, nwg);
  if (t >= p.n) { return; }
  let i = t % p.inner;
  let a = t / p.inner;
  var s = 0.0;
  for (var j = 0u; j < p.count; j++) {
    if (row_of(j) == a) { s += x[j * p.inner + i]; }
  }
  out[t] = s;
}
