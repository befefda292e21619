// The embedding lookup (ops/embed.py): ONNX Gather(table, token ids, axis=0) with the ids
// computed at run time (the model's input, u32). The table x is viewed as [rows, inner], the
// output as [count, inner]; an id outside [0, rows) is clamped to the nearest row.
//
//   embed_forward:  out[j*inner + i] = x[clamp(ids[j])*inner + i]
//   the table's gradient (x = dy; the scatter-add of PyTorch's embedding backward without
//   atomics, bit-reproducible), in three dispatches:
//   embed_links:    per id j, links[j] = the next j' > j with the same row (count if none),
//                   links[count + j] = 1 when no j' < j has its row (j heads its row's chain)
//   embed_zero:     out = 0 (rows no id selects keep a zero gradient)
//   embed_backward: per (head j, column i): out[row(j)*inner + i] = sum along the chain from
//                   j, increasing, of x[j'*inner + i]

struct Params { n: u32, inner: u32, count: u32, rows: u32 }

//!include index

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<storage, read_write> links: array<u32>;  // [2 * count]

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
fn embed_links(@builtin(global_invocation_id) gid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>) {
  let j = flat_index(gid, nwg);
  if (j >= p.count) { return; }
  let r = row_of(j);
  var next = p.count;
  for (var k = j + 1u; k < p.count; k++) {
    if (row_of(k) == r) { next = k; break; }
  }
  var head = 1u;
  for (var k = j; k > 0u; k--) {
    if (row_of(k - 1u) == r) { head = 0u; break; }
  }
  links[j] = next;
  links[p.count + j] = head;
}

@compute @workgroup_size(64)
fn embed_zero(@builtin(global_invocation_id) gid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = flat_index(gid, nwg);
  if (t >= p.n) { return; }
  out[t] = 0.0;
}

@compute @workgroup_size(64)
fn embed_backward(@builtin(global_invocation_id) gid: vec3<u32>,
                  @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = flat_index(gid, nwg);
  if (t >= p.n) { return; }
  let i = t % p.inner;
  let j = t / p.inner;
  if (links[p.count + j] == 0u) { return; }
  var s = 0.0;
  var k = j;
  loop {
    s += x[k * p.inner + i];
    k = links[k];
    if (k >= p.count) { break; }
  }
  out[row_of(j) * p.inner + i] = s;
}
