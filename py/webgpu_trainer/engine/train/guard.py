"""The numerical guard (standard library only: it runs in the browser too).

Per parameter tensor, the first step whose gradient holds a NaN or an Inf: flagged by the
optimizer's update as it reads each gradient (``shaders/optim.wgsl`` GUARD, ``Builder.
GUARD_IN_UPDATE``), or by one dispatch of its own after backward (``shaders/guard.wgsl``). The
trainer reads the flags together with the metrics ring, so a healthy step has no readback
stall. ``tensors`` lists the
trainable tensors in graph order (of the first node that uses each), with that node's name.
"""

import struct

from ..backends.base import WORKGROUP

NONE = 0xFFFFFFFF  # flag value of a tensor whose gradients have always been finite
MAX_GROUPS_X = 128  # workgroups striding over one tensor


def watched(graph, trainable) -> list:
    """``[(tensor name, node name)]``: the ``trainable`` tensors of ``graph`` in graph order of
    the first node that uses each (the order the guard reports them in, on every engine)."""
    out, seen = [], set()
    for node in graph.nodes:
        for name in node["inputs"]:
            # a span (rewrites/weight_layouts): its trainable members, in blob order
            members = graph.tensors.get(name, {}).get("members", [name])
            for m in members:
                if m in trainable and m not in seen:
                    seen.add(m)
                    out.append((m, node["name"]))
    spans = {n for n in trainable if "members" in graph.tensors.get(n, {})}
    for name in sorted(set(trainable) - seen - spans):  # a parameter no node uses
        out.append((name, "?"))
    return out


class Guard:
    """``await Guard.build(plan)``; ``dispatches`` go after the backward pass (none once
    ``in_update`` handed the test to the optimizer)."""

    @classmethod
    async def build(cls, plan):
        self = cls()
        dev, graph = plan.dev, plan.graph
        self.dev = dev
        # the model as given (plan.source): the tensors and node names the numpy engine
        # reports, whatever the rewrites folded (spans are not the model's own tensors)
        own = {n for n in plan.trainable if "members" not in graph.tensors[n]}
        self.tensors = watched(getattr(plan, "source", None) or graph, own)
        n = max(len(self.tensors), 1)
        table = []
        for name, _ in self.tensors:
            t = graph.tensors[name]
            table += [t["offset"] // 4, t["nbytes"] // 4]
        self.table = dev.buffer(4 * max(len(table), 4), "guard.table")
        if table:
            dev.write(self.table, struct.pack(f"<{len(table)}I", *table))
        self.flags = dev.buffer(4 * n, "guard.flags")
        self.reset()
        biggest = max([c for c in table[1::2]] or [1])
        groups_x = max(1, min((biggest + WORKGROUP - 1) // WORKGROUP, MAX_GROUPS_X))
        b = plan.builder
        b.current = []
        if self.tensors:
            await b.kernel("guard", "check", (groups_x, len(self.tensors), 1),
                           params={"tensors": len(self.tensors)}, st=plan.step, G=plan.G,
                           table=self.table, flags=self.flags)
        self.dispatches = b.current
        return self

    def in_update(self, plan) -> dict | None:
        """Hand the test to the optimizer's update (``Builder.GUARD_IN_UPDATE``; drops this
        guard's dispatch): ``{tensor name: index in tensors}`` for the update's mask
        (``plan.owners``), which flags a non-finite gradient element with 1 + its tensor's
        index. None (and the guard keeps its dispatch) when the flag is off or the indices would
        not fit the mask."""
        if not plan.builder.GUARD_IN_UPDATE or len(self.tensors) >= 1 << 24:
            return None
        self.dispatches = []
        return {name: k for k, (name, _) in enumerate(self.tensors)}

    def reset(self):
        self.dev.write(self.flags, struct.pack("<I", NONE) * max(len(self.tensors), 1))

    def span(self):
        """``(flags buffer, 0, nbytes)``: what ``first_bad`` reads (``Device.read_spans``), or
        None without tensors to test."""
        return (self.flags, 0, 4 * len(self.tensors)) if self.tensors else None

    def bad_of(self, raw: bytes):
        """``first_bad``'s answer from the flags' bytes ``raw`` (``span``)."""
        flags = struct.unpack(f"<{len(self.tensors)}I", raw)
        step = min(flags)
        if step == NONE:
            return None
        k = flags.index(step)
        return step, self.tensors[k][0], self.tensors[k][1]

    async def first_bad(self):
        """``None`` when every gradient so far was finite, else ``(step, tensor, node)``: the
        earliest step with a non-finite gradient and the first tensor (graph order) flagged at
        that step."""
        if not self.tensors:
            return None
        return self.bad_of(await self.dev.read(*self.span()))
