"""``Device.read_spans``: several spans of several buffers in one readback, each the same bytes
as its own ``read``, after the work submitted before it (natively; the page's trainer reads its
metrics and guard flags through the JS backend's, exercised by every browser training test)."""

import asyncio
import random

import pytest

from webgpu_trainer.engine.train.guard import NONE


def test_spans_equal_single_reads(device):
    rng = random.Random(7)
    a, b = device.buffer(64, "a"), device.buffer(40, "b")
    da, db = rng.randbytes(64), rng.randbytes(40)
    device.write(a, da)
    device.write(b, db)
    spans = [(a, 0, 64), (b, 8, 12), (a, 60, 4), (b, 0, 6)]  # 6: a size not a multiple of 4
    got = asyncio.run(device.read_spans(spans))
    assert got == [da, db[8:20], da[60:64], db[:6]]
    # a single read copies whole words (natively a size must be a multiple of 4)
    assert got == [asyncio.run(device.read(buf, off, -(-n // 4) * 4))[:n]
                   for buf, off, n in spans]


def test_spans_see_the_work_submitted_before(device):
    """A write queued after a read_spans' first submit is not in its bytes; one before is."""
    buf = device.buffer(16, "c")
    device.write(buf, bytes(range(16)))
    first = asyncio.run(device.read_spans([(buf, 0, 16)]))[0]
    device.write(buf, bytes(16))
    second = asyncio.run(device.read_spans([(buf, 0, 16)]))[0]
    assert (first, second) == (bytes(range(16)), bytes(16))


@pytest.mark.parametrize("bad", [False, True])
def test_guard_reads_with_the_metrics(bad):
    """``Guard.bad_of`` on the flags' bytes answers as ``first_bad`` (the earliest step)."""
    from types import SimpleNamespace
    from webgpu_trainer.engine.train.guard import Guard
    g = Guard.__new__(Guard)
    g.tensors = [("w", "fc1"), ("b", "fc1"), ("w2", "fc2")]
    flags = [NONE, 7, 5] if bad else [NONE] * 3
    raw = b"".join(f.to_bytes(4, "little") for f in flags)
    g.flags = SimpleNamespace()
    assert g.span() == (g.flags, 0, 12)
    assert g.bad_of(raw) == ((5, "w2", "fc2") if bad else None)


def test_a_span_past_the_end_raises_and_the_device_goes_on(device):
    """A span beyond its buffer's end raises a ValueError naming the span, the buffer and
    the overrun before anything is copied (the browser's WebGPU would report it only at a
    later submit); so does an offset not a multiple of 4; the device reads correctly after."""
    buf = device.buffer(40, "short")
    device.write(buf, bytes(range(40)))
    with pytest.raises(ValueError, match=r"span 1 overruns buffer 'short' \(40 bytes\): 16 "
                       r"bytes from byte offset 32 end 8 bytes past it"):
        asyncio.run(device.read_spans([(buf, 0, 8), (buf, 32, 16)]))
    with pytest.raises(ValueError, match="span 0 overruns"):  # 6 bytes copy as 8
        asyncio.run(device.read_spans([(buf, 36, 6)]))
    with pytest.raises(ValueError, match=r"byte offset 2 \(an offset is a multiple of 4"):
        asyncio.run(device.read_spans([(buf, 2, 4)]))
    with pytest.raises(ValueError, match=r"byte offset -4 \("):
        asyncio.run(device.read_spans([(buf, -4, 4)]))
    with pytest.raises(ValueError, match=r"span 0 of buffer 'short': -4 bytes"):
        asyncio.run(device.read_spans([(buf, 0, -4)]))
    assert asyncio.run(device.read_spans([(buf, 32, 8)])) == [bytes(range(32, 40))]
