"""Gradients and scratch share GPU buffers when they are never needed at the same time.

A training step runs ``fwd_train``, ``loss``, ``bwd`` in order. The gradient of an activation
(``"d" + name``, ``"dlogp"``, a use's contribution ``"dX@node"``) is written by its consumers'
backward and read by its producer's backward; outside that stretch of dispatches its contents
are dead; so are an op's scratch buffers (split-K parts, padded copies) outside the op.
While ``Plan.build`` runs, each of them is a ``Slot`` (a buffer not made yet) and
``Builder.kernel`` defers the bind groups that name one (``Pending``); ``resolve`` then
measures each slot's live range (first to last dispatch that binds it) and packs the slots
into shared device buffers (``assign``: slots whose ranges overlap get different buffers or
disjoint byte ranges of one, never one buffer when a dispatch binds both), then makes the
deferred bind groups, each slot bound as a View of its bytes. Every kernel writes the whole
of what it makes each step (a buffer also carries the previous step's values otherwise), and
a slot read before anything writes it keeps a zeroed buffer of its own, so sharing changes no
number: tests/test_pool.py checks bit-identical steps against unshared buffers.

Minimum GPU memory of a trainer that keeps every activation: parameters, their gradients,
the optimizer's state, the activations, and the most gradient bytes live at one dispatch;
``resolve`` returns that peak (``peak_bytes``) so benchmarks/memory.py can set the plan's
total against it. Standard library only.
"""

from .backends.base import ALIGN, View, round_up


class Slot:
    """A gradient buffer of ``nbytes`` (rounded as the backends round: a multiple of 4, at
    least 16; ``label``: as the device buffer would be named) that ``resolve`` maps onto a
    shared device buffer."""

    __slots__ = ("size", "label", "buffer", "offset", "keep")

    def __init__(self, nbytes: int, label: str):
        self.size, self.label, self.buffer = max(16, round_up(nbytes)), label, None
        self.offset = 0  # bytes into ``buffer`` (resolve)
        self.keep = False  # True: read after the step, so a buffer of its own


class Pending:
    """A dispatch whose bind group names a ``Slot``: ``pipe``, ``binds`` (buffers, Views or
    Slots), ``groups``, ``writable`` (per bind: a read_write storage binding); bound by
    ``resolve``."""

    __slots__ = ("pipe", "binds", "groups", "writable")

    def __init__(self, pipe, binds, groups, writable):
        self.pipe, self.binds, self.groups, self.writable = pipe, binds, groups, writable


def names_slot(binds) -> bool:
    """Whether any entry of ``binds`` is a Slot or a View of one."""
    return any(isinstance(b, Slot) or isinstance(b, View) and isinstance(b.buffer, Slot)
               for b in binds)


def _slots_of(entry) -> list:
    """[(slot, writable)] of a Pending dispatch's bindings (empty for a bound dispatch)."""
    if not isinstance(entry, Pending):
        return []
    return [(b if isinstance(b, Slot) else b.buffer, w)
            for b, w in zip(entry.binds, entry.writable)
            if isinstance(b, Slot) or isinstance(b, View) and isinstance(b.buffer, Slot)]


def assign(ranges: dict, apart=frozenset(), offsets: bool = True) -> tuple:
    """Pack live ranges into shared buffers. ``ranges``: {slot: (first, last)} dispatch
    indices, inclusive; ``apart``: frozensets of two slots one dispatch binds together (WebGPU
    refuses a buffer bound writable and read-only in one dispatch, whatever the ranges, so
    these never share a buffer). Returns ``(groups, place)``: ``groups`` the byte size of each
    shared buffer, ``place`` {slot: (group index, byte offset, a multiple of ALIGN)}. Greedy by
    size (Pisarchyk and Lee, "Efficient Memory Management for Deep Neural Net Inference",
    2020): the largest slot first, each at the lowest offset of the first buffer where it fits
    beside the slots whose ranges overlap its own, else into a new buffer of its size; so a
    buffer is as large as its first slot (none is larger than a buffer of one slot would be),
    and smaller slots live at the same time share it ("shared objects" with offsets).
    ``offsets`` False: a buffer holds one slot at a time, at offset 0 (``Builder.POOL_OFFSETS``,
    the A/B: slots live at once in one buffer make the backend order the dispatches that write
    them by a barrier, as SINK_PER_DISPATCH found for shared sinks; not timed yet)."""
    groups, place, members = [], {}, []
    for slot in sorted(ranges, key=lambda s: (-s.size, ranges[s][0], s.label)):
        first, last = ranges[slot]
        spot = None
        for g, taken in enumerate(members):
            if any(frozenset((slot, other)) in apart for other in taken):
                continue
            busy = sorted((place[o][1], place[o][1] + o.size) for o in taken
                          if not (last < ranges[o][0] or ranges[o][1] < first))
            if busy and not offsets:
                continue
            at = 0
            for lo, hi in busy:
                if at + slot.size <= lo:
                    break
                at = max(at, round_up(hi, ALIGN))
            if at + slot.size <= groups[g]:
                spot = (g, at)
                break
        if spot is None:
            spot = (len(groups), 0)
            groups.append(slot.size)
            members.append([])
        members[spot[0]].append(slot)
        place[slot] = spot
    return groups, place


def peak_bytes(ranges: dict) -> int:
    """The most slot bytes live at one dispatch (the least any sharing can reach)."""
    events = {}
    for slot, (first, last) in ranges.items():
        events[first] = events.get(first, 0) + slot.size
        events[last + 1] = events.get(last + 1, 0) - slot.size
    live = peak = 0
    for k in sorted(events):
        live += events[k]
        peak = max(peak, live)
    return peak


def resolve(dev, lists: list, tensors, offsets: bool = True) -> dict:
    """Give every Slot a device buffer and bind every Pending dispatch, in place.

    ``lists``: every dispatch list of the plan, those of the training step first in the order
    they run (fwd_train, loss, bwd), then the evaluation's (fwd_eval, head): one timeline, so
    two slots share a buffer only when no program uses both at once (a slot of both programs
    stays live from its first use in training to its last in evaluation). ``tensors``: the
    Tensors whose ``buf`` may be a Slot (the gradients; replaced by the device buffer).
    Returns ``{"slots", "bytes" (the shared buffers, labelled "pool.<k>:<label of its largest
    slot>"), "peak" (peak_bytes of every shared slot), "grad_peak" (of the gradients'),
    "unshared" (the shared slots' own sizes summed)}``."""
    grad_slots = {t.buf for t in tensors if isinstance(t.buf, Slot)}
    ranges, zero, apart = {}, set(), set()
    for i, entry in enumerate(e for lst in lists for e in lst):
        bound = _slots_of(entry)
        for slot, writable in bound:
            if slot not in ranges and not writable or slot.keep:
                zero.add(slot)  # read before anything writes it (it must stay all zeros), or
                # read after the step: a buffer of its own
            first, _ = ranges.get(slot, (i, i))
            ranges[slot] = (first, i)
        apart.update(frozenset((a, b)) for a, _ in bound for b, _ in bound if a is not b)
    for slot in zero:
        del ranges[slot]
    groups, place = assign(ranges, frozenset(apart), offsets)
    largest = {}  # group -> its largest slot, whose label the buffer carries
    for slot, (g, _) in place.items():
        if g not in largest or slot.size > largest[g].size:
            largest[g] = slot
    bufs = [dev.buffer(size, f"pool.{k}:{largest[k].label}") for k, size in enumerate(groups)]
    for slot, (g, at) in place.items():
        slot.buffer, slot.offset = bufs[g], at
    for slot in zero:
        slot.buffer = dev.buffer(slot.size, slot.label)
    bound = {}  # one bind group per deferred dispatch, however many lists hold it
    for lst in lists:
        for k, entry in enumerate(lst):
            if isinstance(entry, Pending):
                if id(entry) not in bound:
                    bound[id(entry)] = _bind(dev, entry)
                lst[k] = bound[id(entry)]
    for t in tensors:
        if isinstance(t.buf, Slot):
            t.buf, t.offset = t.buf.buffer, t.offset + t.buf.offset
    return {"slots": len(ranges) + len(zero), "bytes": sum(groups), "peak": peak_bytes(ranges),
            "grad_peak": peak_bytes({s: r for s, r in ranges.items() if s in grad_slots}),
            "unshared": sum(s.size for s in ranges)}


def _bind(dev, entry):
    binds = [View(b.buffer, b.offset, b.size) if isinstance(b, Slot) else
             View(b.buffer.buffer, b.buffer.offset + b.offset, b.nbytes) if isinstance(b, View)
             and isinstance(b.buffer, Slot) else b for b in entry.binds]
    return (entry.pipe, dev.bind(entry.pipe, binds), entry.groups)
