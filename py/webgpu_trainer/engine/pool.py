"""Gradient buffers shared by tensors whose gradients are never needed at the same time.

A training step runs ``fwd_train``, ``loss``, ``bwd`` in order. The gradient of an activation
(``"d" + name``, ``"dlogp"``, a use's contribution ``"dX@node"``) is written by its consumers'
backward and read by its producer's backward; outside that stretch of dispatches its contents
are dead. ``Plan.build`` therefore makes each such gradient a ``Slot`` (a buffer not made yet);
``Builder.kernel`` defers the bind groups that name a slot (``Pending``); ``resolve`` then
measures each slot's live range (first to last dispatch that binds it, over the whole step)
and packs the slots into as few device buffers as an interval allocation finds (the classic
register-allocation view of buffer reuse: slots whose ranges overlap get different buffers),
then makes the deferred bind groups. Every kernel writes the whole of the gradient it makes
each step (a buffer also carries the previous step's values otherwise), so sharing changes no
number: tests/test_pool.py checks bit-identical steps against unshared buffers.

Minimum GPU memory of a trainer that keeps every activation: parameters, their gradients,
the optimizer's state, the activations, and the most gradient bytes live at one dispatch;
``resolve`` returns that peak (``peak_bytes``) so benchmarks/memory.py can set the plan's
total against it. Standard library only.
"""

from .backends.base import View, round_up


class Slot:
    """A gradient buffer of ``nbytes`` (rounded as the backends round: a multiple of 4, at
    least 16; ``label``: as the device buffer would be named) that ``resolve`` maps onto a
    shared device buffer."""

    __slots__ = ("size", "label", "buffer")

    def __init__(self, nbytes: int, label: str):
        self.size, self.label, self.buffer = max(16, round_up(nbytes)), label, None


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


def assign(ranges: dict) -> tuple:
    """Pack live ranges into shared buffers. ``ranges``: {slot: (first, last)} dispatch
    indices, inclusive. Returns ``(groups, owner)``: ``groups`` the byte size of each shared
    buffer, ``owner`` {slot: group index}. Slots are taken by first use; a slot takes the free
    buffer that fits it with the least room left over, else grows the largest free one, else
    opens a new buffer."""
    groups, owner, free, busy = [], {}, [], []  # busy: (last, group)
    for slot in sorted(ranges, key=lambda s: (ranges[s][0], -s.size)):
        first, last = ranges[slot]
        for end, g in [x for x in busy if x[0] < first]:
            busy.remove((end, g))
            free.append(g)
        fits = [g for g in free if groups[g] >= slot.size]
        if fits:
            g = min(fits, key=lambda k: groups[k])
        elif free:
            g = max(free, key=lambda k: groups[k])
            groups[g] = slot.size
        else:
            g = len(groups)
            groups.append(slot.size)
        if g in free:
            free.remove(g)
        owner[slot] = g
        busy.append((last, g))
    return groups, owner


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


def resolve(dev, step: list, others: list, tensors) -> dict:
    """Give every Slot a device buffer and bind every Pending dispatch, in place.

    ``step``: the dispatch lists of the training step in the order they run (fwd_train,
    loss, bwd); ``others``: lists also holding dispatches (fwd_eval, head), whose slots get
    buffers of their own; ``tensors``: the Tensors whose ``buf`` may be a Slot (replaced by
    the device buffer). Returns ``{"slots", "bytes" (shared buffers), "peak" (peak_bytes),
    "unshared" (the slots' own sizes summed)}``."""
    ranges, order, zero = {}, [e for lst in step for e in lst], set()
    for i, entry in enumerate(order):
        for slot, writable in _slots_of(entry):
            if slot not in ranges and not writable:
                zero.add(slot)  # read before anything writes it: it must stay all zeros
            first, _ = ranges.get(slot, (i, i))
            ranges[slot] = (first, i)
    pinned = zero | {s for lst in others for e in lst for s, _ in _slots_of(e)} - set(ranges)
    groups, owner = assign({s: r for s, r in ranges.items() if s not in pinned})
    bufs = [dev.buffer(size, f"dpool.{k}") for k, size in enumerate(groups)]
    for slot, g in owner.items():
        slot.buffer = bufs[g]
    for slot in pinned:
        slot.buffer = dev.buffer(slot.size, slot.label)
    bound = {}  # one bind group per deferred dispatch, however many lists hold it
    for lst in (*step, *others):
        for k, entry in enumerate(lst):
            if isinstance(entry, Pending):
                if id(entry) not in bound:
                    bound[id(entry)] = _bind(dev, entry)
                lst[k] = bound[id(entry)]
    for t in tensors:
        if isinstance(t.buf, Slot):
            t.buf = t.buf.buffer
    return {"slots": len(ranges) + len(pinned), "bytes": sum(groups), "peak": peak_bytes(ranges),
            "unshared": sum(s.size for s in ranges)}


def _bind(dev, entry):
    binds = [b.buffer if isinstance(b, Slot) else
             View(b.buffer.buffer, b.offset, b.nbytes) if isinstance(b, View) and
             isinstance(b.buffer, Slot) else b for b in entry.binds]
    return (entry.pipe, dev.bind(entry.pipe, binds), entry.groups)
