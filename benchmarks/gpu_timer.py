"""GPU timing through timestamp queries (wgpu-py), for the benchmarks (not the engine).

``open_device()`` makes the engine's native device with the "timestamp-query" feature when the
adapter has it (wgpu-py's adapter is asked for it while the engine's ``Device`` is created), and
counts every buffer the engine allocates (``dev.ledger``: ``[(label, bytes)]``).
``Timer(dev).passes(programs)`` runs each program as one compute pass with a timestamp at its
start and end, all in one submit, and returns the GPU time of each pass in milliseconds.
"""

from __future__ import annotations

import time

import wgpu
from wgpu.backends.wgpu_native import _api


def open_device():
    """The engine's wgpu-py Device with timestamp queries (if the adapter offers them) and a
    buffer ledger. Works with any version of the engine (it patches wgpu-py, not the engine)."""
    from webgpu_trainer.engine.backends.wgpu_native import Device

    original = _api.GPUAdapter.request_device_sync

    def with_timestamps(self, **kw):
        if "timestamp-query" in self.features:
            kw["required_features"] = list(kw.get("required_features") or []) + [
                "timestamp-query"]
        return original(self, **kw)

    _api.GPUAdapter.request_device_sync = with_timestamps
    try:
        dev = Device()
    finally:
        _api.GPUAdapter.request_device_sync = original
    dev.timestamps = "timestamp-query" in dev.device.features
    dev.ledger = []
    plain = dev.buffer

    def counted(nbytes, label="", uniform=False):
        buf = plain(nbytes, label, uniform)
        dev.ledger.append((label, buf.size))
        return buf

    dev.buffer = counted
    return dev


class Timer:
    """Per-pass GPU times (ms) of lists of recorded dispatches, by timestamp queries; falls back
    to wall-clock time of the whole submit (spread evenly) without the feature."""

    def __init__(self, dev, max_passes: int = 1024):
        self.dev, self.n = dev, max_passes
        if dev.timestamps:
            d = dev.device
            self.qs = d.create_query_set(type="timestamp", count=2 * max_passes)
            self.resolved = d.create_buffer(size=16 * max_passes, usage=(
                wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC))
            self.period = _api.lib.wgpuQueueGetTimestampPeriod(d.queue._internal) or 1.0

    def passes(self, programs: list) -> list:
        """GPU ms of each program (a list of (pipeline, bind_group, counts)) as its own pass."""
        dev = self.dev
        assert len(programs) <= self.n
        if not dev.timestamps:
            t0 = time.perf_counter()
            dev.submit(programs)
            dev.device.queue.read_buffer(self.dev.buffer(16, "timer.fence"), 0, 4)
            return [1000 * (time.perf_counter() - t0) / len(programs)] * len(programs)
        enc = dev.device.create_command_encoder()
        for i, prog in enumerate(programs):
            cpass = enc.begin_compute_pass(timestamp_writes={
                "query_set": self.qs, "beginning_of_pass_write_index": 2 * i,
                "end_of_pass_write_index": 2 * i + 1})
            for pipe, bg, (x, y, z) in prog:
                cpass.set_pipeline(pipe)
                cpass.set_bind_group(0, bg)
                cpass.dispatch_workgroups(x, y, z)
            cpass.end()
        enc.resolve_query_set(self.qs, 0, 2 * len(programs), self.resolved, 0)
        dev.device.queue.submit([enc.finish()])
        raw = dev.device.queue.read_buffer(self.resolved, 0, 16 * len(programs))
        ticks = memoryview(raw).cast("Q")
        return [(ticks[2 * i + 1] - ticks[2 * i]) * self.period / 1e6
                for i in range(len(programs))]


def median(values):
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])
