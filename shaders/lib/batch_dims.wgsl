// Up to four batch dims as a vec4 (sizes, and each operand's element strides, 0 where it
// broadcasts): matmul.wgsl, attention.wgsl.

// The multi-index of flat index i over sizes s (w fastest).
fn unflatten(i: u32, s: vec4<u32>) -> vec4<u32> {
  var z = i;
  let i3 = z % s.w;
  z = z / s.w;
  let i2 = z % s.z;
  z = z / s.z;
  let i1 = z % s.y;
  return vec4<u32>(z / s.y, i1, i2, i3);
}

// The element offset of multi-index idx with these strides.
fn offset(idx: vec4<u32>, strides: vec4<u32>) -> u32 {
  let v = idx * strides;
  return v.x + v.y + v.z + v.w;
}
