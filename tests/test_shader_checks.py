"""The native backend's shader modules (``wgpu_native._shader_module``): wgpu-native's trusted
entry point with ``RUNTIME_CHECKS`` = BoundsChecks alone. Index clamps stay (an index past a
function- or workgroup-scope array reads its last element, as a plain module's would), loops
run to their bound without naga's forced loop counter, and bad WGSL still raises wgpu-py's
validation error."""

import struct

import numpy as np
import pytest

wgpu_native = pytest.importorskip("webgpu_trainer.engine.backends.wgpu_native")
wgpu = pytest.importorskip("wgpu")

_PROBE = """
@group(0) @binding(0) var<storage, read> idx: array<u32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
var<workgroup> shared_vals: array<f32, 8>;

@compute @workgroup_size(8)
fn main(@builtin(local_invocation_index) lid: u32) {
  var local_vals = array<f32, 4>(1.5, 2.5, 3.5, 4.5);
  shared_vals[lid] = 10.0 + f32(lid);
  workgroupBarrier();
  if (lid == 0u) {
    out[0] = local_vals[idx[0]];   // idx[0] = 9: past the 4 values
    out[1] = shared_vals[idx[1]];  // idx[1] = 1000: past the 8 values
    var s = 0.0;
    var i = 0u;
    loop {                         // idx[2] iterations, ended by a break
      if (i >= idx[2]) { break; }
      s += f32(i);
      i++;
    }
    out[2] = s;
    for (var k = 0u; k < idx[3]; k++) { out[3] += 0.5; }
  }
}
"""


def _probe(dev, indices):
    """out[0..3] of ``_PROBE`` for idx = ``indices`` on the native device ``dev``."""
    d = dev.device
    module = wgpu_native._shader_module(d, _PROBE, "probe")
    pipe = d.create_compute_pipeline(layout="auto", compute={"module": module,
                                                              "entry_point": "main"})
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
    ibuf = d.create_buffer_with_data(data=struct.pack("4I", *indices), usage=usage)
    obuf = d.create_buffer(size=16, usage=usage)
    group = d.create_bind_group(layout=pipe.get_bind_group_layout(0), entries=[
        {"binding": 0, "resource": {"buffer": ibuf}},
        {"binding": 1, "resource": {"buffer": obuf}}])
    enc = d.create_command_encoder()
    cpass = enc.begin_compute_pass()
    cpass.set_pipeline(pipe)
    cpass.set_bind_group(0, group)
    cpass.dispatch_workgroups(1)
    cpass.end()
    d.queue.submit([enc.finish()])
    return np.frombuffer(d.queue.read_buffer(obuf), np.float32)


def test_this_wgpu_py_takes_the_trusted_path():
    """The pinned wgpu-py has the entry point; without it the engine would silently fall back
    to the plain (loop-bounded, 16-22% slower on the H200's conv models) modules."""
    assert wgpu_native.RUNTIME_CHECKS == 1  # BoundsChecks, not ForceLoopBounding (2)
    assert hasattr(wgpu_native._libf, "wgpuDeviceCreateShaderModuleTrusted")


def test_index_clamps_and_loops(device):
    """Out-of-range indices read the last element (naga's Restrict policy, kept); a 100-trip
    loop ended by a break and a 7-trip for loop give their sums (float64 reference)."""
    got = _probe(device, (9, 1000, 100, 7))
    assert got[0] == 4.5
    assert got[1] == 17.0
    assert got[2] == float(np.arange(100, dtype=np.float64).sum())
    assert got[3] == 3.5


def test_in_range_indices_read_their_element(device):
    got = _probe(device, (2, 5, 0, 0))
    assert list(got) == [3.5, 15.0, 0.0, 0.0]


def test_invalid_wgsl_raises_a_validation_error_naming_the_problem(device):
    with pytest.raises(Exception, match="expected to be `u32`") as err:
        wgpu_native._shader_module(
            device.device, "@compute @workgroup_size(1) fn main() { let x: u32 = 1.5; }", "bad")
    assert type(err.value).__name__ == "GPUValidationError"
