"""The optimizer update's mask (``Plan.owners``, shaders/optim.wgsl ``owner``): a u32 per block
of weight elements instead of a float per element. Decoded as the shader decodes it, it must
give every element exactly the owner the per-element rule gives (0: not trainable; else 1, or
1 + the guard's index of its tensor), for the blob's 256-byte alignment, for offsets aligned
less (smaller blocks, down to one element), for spans and frozen tensors."""

from types import SimpleNamespace

import numpy as np
import pytest

from webgpu_trainer.engine.plan import Plan


def _plan(layout, trainable, spans=()):
    """A stand-in plan: ``layout`` [(name, element offset, numel)], the blob as long as the
    last tensor's end rounded up to 64 elements; ``spans`` [(name, offset, numel, members)]."""
    tensors = {n: {"name": n, "offset": 4 * o, "nbytes": 4 * k} for n, o, k in layout}
    for n, o, k, members in spans:
        tensors[n] = {"name": n, "offset": 4 * o, "nbytes": 4 * k, "members": members}
    end = max(o + k for _, o, k in layout)
    graph = SimpleNamespace(tensors=tensors)
    return SimpleNamespace(graph=graph, trainable=set(trainable), wbytes=4 * (-(-end // 64) * 64))


def _decode(shift, data, n):
    """optim.wgsl ``owner`` for elements 0 .. n - 1."""
    words = np.frombuffer(data, np.uint32).astype(np.int64)
    i = np.arange(n)
    m = words[i >> shift]
    return np.where((i & ((1 << shift) - 1)) < (m & 127), m >> 7, 0)


def _want(plan, index):
    out = np.zeros(plan.wbytes // 4, np.int64)
    for name in plan.trainable:
        t = plan.graph.tensors[name]
        if "members" not in t:
            out[t["offset"] // 4:(t["offset"] + t["nbytes"]) // 4] = 1 + (index or {}).get(
                name, 0)
    return out


LAYOUTS = {
    # name: (layout, trainable, spans, the expected shift)
    "blob_aligned": ([("a", 0, 30), ("b", 64, 5), ("c", 128, 200), ("d", 384, 64)],
                     "abcd", (), 6),
    "a_frozen_one_between": ([("a", 0, 70), ("b", 128, 3), ("c", 192, 1)], "ac", (), 6),
    "aligned_to_16_bytes": ([("a", 0, 6), ("b", 8, 3), ("c", 12, 100)], "abc", (), 2),
    "one_element_offsets": ([("a", 0, 3), ("b", 3, 2), ("c", 5, 1), ("d", 6, 9)], "abd", (), 0),
    "a_span_over_members": ([("a", 0, 20), ("b", 64, 20)], ["a", "b", "s"],
                            [("s", 0, 84, ["a", "b"])], 6),
}


@pytest.mark.parametrize("guarded", [False, True])
@pytest.mark.parametrize("case", list(LAYOUTS))
def test_owner_of_every_element(case, guarded):
    layout, trainable, spans, shift = LAYOUTS[case]
    plan = _plan(layout, trainable, spans)
    index = {n: k for k, n in enumerate(sorted(set(trainable) - {"s"}))} if guarded else None
    got_shift, data = Plan.owners(plan, index)
    n = plan.wbytes // 4
    assert got_shift == shift
    assert len(data) == 4 * -(-n // (1 << shift))
    assert np.array_equal(_decode(got_shift, data, n), _want(plan, index))


def test_too_many_tensors_refused():
    plan = _plan([("a", 0, 1)], "a")
    with pytest.raises(ValueError, match="2\\^25"):
        Plan.owners(plan, {"a": (1 << 25) - 1})


@pytest.mark.parametrize("layout", [
    [("a", 0, 70), ("b", 64, 10)],  # b starts inside a's last block
    [("a", 0, 8), ("b", 4, 2)],  # b inside a, offsets aligned less
])
def test_overlapping_tensors_refused(layout):
    """Two trainable tensors over the same elements would share a block's owner: refused,
    naming both (a span over members is the one sanctioned overlap, above)."""
    plan = _plan(layout, "ab")
    with pytest.raises(ValueError, match="a and b overlap"):
        Plan.owners(plan)
