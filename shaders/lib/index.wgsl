// The flat thread index of a 1-D dispatch of workgroups of 64 (ops: groups_1d): past 65535
// workgroups the grid folds into y, so thread t is gid.x + gid.y * (threads along x).
fn flat_index(gid: vec3<u32>, nwg: vec3<u32>) -> u32 { return gid.x + gid.y * nwg.x * 64u; }

// Threads in the whole dispatch: the step of a grid-stride loop.
fn grid_stride(nwg: vec3<u32>) -> u32 { return nwg.x * nwg.y * 64u; }

// The channel of a one-workgroup-per-channel dispatch (ops: groups_per_channel): past 65535
// channels they fold into z. Workgroups with channel_of(...) >= C have nothing to do.
fn channel_of(wid: vec3<u32>, nwg: vec3<u32>) -> u32 { return wid.x + wid.z * nwg.x; }
