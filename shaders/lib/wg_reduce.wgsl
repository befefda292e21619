// Workgroup reductions over the including shader's workgroup array `red: array<RedT, WG>`
// (it declares `alias RedT` (f32 or vec2<f32>), `const WG: u32` (its workgroup size, a power
// of two) and `var<workgroup> red`). Every invocation of the workgroup calls them, in uniform
// control flow, with lid = its local invocation index. Sums are pairwise, halving: the same
// order on every adapter.

// The sum of v over the workgroup, returned to every invocation.
fn wg_sum(lid: u32, v: RedT) -> RedT {
  red[lid] = v;
  workgroupBarrier();
  for (var h = WG / 2u; h > 0u; h = h >> 1u) {
    if (lid < h) { red[lid] += red[lid + h]; }
    workgroupBarrier();
  }
  let total = red[0];
  workgroupBarrier();  // every invocation has read red[0] before it is written again
  return total;
}

// The maximum of v over the workgroup, returned to every invocation.
fn wg_max(lid: u32, v: RedT) -> RedT {
  red[lid] = v;
  workgroupBarrier();
  for (var h = WG / 2u; h > 0u; h = h >> 1u) {
    if (lid < h) { red[lid] = max(red[lid], red[lid + h]); }
    workgroupBarrier();
  }
  let total = red[0];
  workgroupBarrier();
  return total;
}

// In place: red[0] = the sum of red[0..WG), each invocation having written red[lid].
fn wg_tree_sum(lid: u32) {
  workgroupBarrier();
  for (var h = WG / 2u; h > 0u; h = h >> 1u) {
    if (lid < h) { red[lid] += red[lid + h]; }
    workgroupBarrier();
  }
}
