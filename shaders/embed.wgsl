// The embedding lookup (ops/embed.py): ONNX Gather(table, token ids, axis=0) with the ids
// computed at run time (the model's input, u32). The table x is viewed as [rows, inner], the
// output as [count, inner]; an id outside [0, rows) is clamped to the nearest row.
//
//   embed_forward:  out[j*inner + i] = x[clamp(ids[j])*inner + i]
//   the table's gradient (x = dy; the scatter-add of PyTorch's embedding backward without
//   atomics, bit-reproducible): the ids' positions sorted by (row, position) with a merge
//   sort (O(count log^2 count) reads in all), then each row's run summed in increasing position:
//   embed_iota:     links[j] = j (sorted runs of width 1)
//   embed_merge:    per element of links[src..], its place in the merge of its run of width
//                   `width` with the neighbouring run (a binary search there), written to
//                   links[dst..]; ceil(log2(count)) passes, src / dst alternating halves
//   embed_zero:     out = 0 (rows no id selects keep a zero gradient)
//   embed_backward: per (sorted place q heading its row's run, column i):
//                   out[row*inner + i] = sum over the run, increasing, of x[j*inner + i]

struct Params { n: u32, inner: u32, count: u32, rows: u32, width: u32, src: u32, dst: u32 }
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

// Whether id position a sorts before position b: by row, then by position (a stable sort).
fn before(a: u32, b: u32) -> bool {
  let ra = row_of(a);
  let rb = row_of(b);
  return ra < rb || (ra == rb && a < b);
}

@compute @workgroup_size(64)
fn embed_iota(@builtin(global_invocation_id) gid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>) {
  let j = flat_index(gid, nwg);
  if (j >= p.count) { return; }
  links[j] = j;
}

@compute @workgroup_size(64)
fn embed_merge(@builtin(global_invocation_id) gid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>) {
  let q = flat_index(gid, nwg);
  if (q >= p.count) { return; }
  let e = links[p.src + q];
  let run = q / p.width;
  let start = run * p.width;
  var lo = start + p.width;  // the partner run [lo, hi): the next one, or the previous one
  if ((run & 1u) == 1u) { lo = start - p.width; }
  let hi = min(lo + p.width, p.count);
  var a = lo;  // binary search: how many of the partner's elements sort before e
  var b = max(lo, hi);
  while (a < b) {
    let mid = (a + b) / 2u;
    if (before(links[p.src + mid], e)) { a = mid + 1u; } else { b = mid; }
  }
  let merged = (run & ~1u) * p.width;
  links[p.dst + merged + (q - start) + (a - lo)] = e;
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
  let q = t / p.inner;
  let r = row_of(links[p.src + q]);
  if (q > 0u && row_of(links[p.src + q - 1u]) == r) { return; }
  var s = 0.0;
  for (var k = q; k < p.count; k++) {
    let j = links[p.src + k];
    if (row_of(j) != r) { break; }
    s += x[j * p.inner + i];
  }
  out[r * p.inner + i] = s;
}
