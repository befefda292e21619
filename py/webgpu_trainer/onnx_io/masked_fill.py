"""An import stage after the token masks (:func:`masked_fill`): ``masked_fill`` by a mask that
is a constant.

A causal mask kept as a registered buffer and applied with
``scores.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))`` (nanoGPT's style) exports
as Where(cond, value, x), whose condition is computed from initializers, Constant nodes and
static dims only and whose ``value`` is a constant too. The engine trains no Where, so such a
node becomes

    x * keep + fill,   keep = Cast(Not(cond)) as x's dtype,   fill = Where(cond, value, 0),

whose ``keep`` and ``fill`` the fold stage evaluates to constants; its gradient dx = dy * keep
is Where's. The float initializers that only the conditions and fill values of such Wheres
read, through nodes that nothing else reads (a buffer each block of a model registers, which
the TorchScript exporter stores once and Identity-copies to the others; a fill tensor the
dynamo exporter stores as an initializer), are constants (``constant_reason``): a mask is not
trained. One that anything else reads stays a parameter, and a condition computed from it is
refused by the fold (a mask that would change as the parameter trains).
``torch.where(cond, x, value)`` (x as Where's X) is the same with cond for Not(cond). The two
agree wherever x is finite; where x is +-inf under the mask, x * 0 gives NaN (Where gives
``value``). A Where whose condition depends on the model's input is left as it is (the op
check names it).
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from .constants import _DEFAULT_DOMAINS, _FLOAT_TYPES, _NEVER_FOLD
from .protos import _node_names
from .state import ImportState


def masked_fill(s: ImportState) -> None:
    """Every Where of a constant condition and one constant branch rewritten as above; a note
    names them."""
    g = s.g
    varying = {i.name for i in g.input if i.name not in s.init}
    out, done = [], []
    for n, name in zip(g.node, s.names):
        ins = [i for i in n.input if i]
        if n.op_type in ("Shape", "Size") and n.domain in _DEFAULT_DOMAINS:
            out.append(n)  # dims only: the fold stage folds those that are static
            continue
        if n.op_type in _NEVER_FOLD or n.domain not in _DEFAULT_DOMAINS or \
                any(i in varying for i in ins):
            new, x_slot = _rewrite(s, n, name, varying)
            if new is None:
                varying.update(o for o in n.output if o)
                out.append(n)
                continue
            done.append((n, name, x_slot))
            varying.update(new[-1].output)
            out.extend(new)
            continue
        out.append(n)
    if not done:
        return
    _mask_constants(s, done)
    del g.node[:]
    g.node.extend(out)
    s.names = _node_names(g)
    s.notes.append("masked_fill by a constant mask (Where) became x * keep + fill, the mask "
                   "folded into constants: " + ", ".join(name for _, name, _ in done))


def _dtype_of(s: ImportState, value: str) -> int:
    """The element type of the constant ``value`` (an initializer or a Constant node's
    output; Where's X and Y share it with x), else FLOAT."""
    if value in s.init:
        return s.init[value].data_type
    for n in s.g.node:
        if n.op_type == "Constant" and value in n.output:
            for a in n.attribute:
                if a.name == "value":
                    return a.t.data_type
    return TensorProto.FLOAT


def _rewrite(s: ImportState, n, name: str, varying: set) -> tuple[list | None, int]:
    """(the nodes replacing Where node ``n``, the input of ``n`` that is x) when its condition
    and one branch are constants (not in ``varying``), else (None, -1)."""
    if n.op_type != "Where" or n.domain not in _DEFAULT_DOMAINS or len(n.input) != 3:
        return None, -1
    cond, a, b = n.input
    if cond in varying or (a in varying) == (b in varying):
        return None, -1
    x, value, keep_when = (b, a, "not") if b in varying else (a, b, "cond")
    dtype = _dtype_of(s, value)
    p = f"{name}.masked_fill"
    nodes = []
    keep_src = cond
    if keep_when == "not":
        nodes.append(helper.make_node("Not", [cond], [f"{p}.not"], name=f"{p}.not"))
        keep_src = f"{p}.not"
    zero = numpy_helper.from_array(np.zeros((), helper.tensor_dtype_to_np_dtype(dtype)),
                                   f"{p}.zero")
    branches = [value, f"{p}.zero"] if keep_when == "not" else [f"{p}.zero", value]
    nodes += [
        helper.make_node("Cast", [keep_src], [f"{p}.keep"], to=dtype, name=f"{p}.keep"),
        helper.make_node("Constant", [], [f"{p}.zero"], value=zero, name=f"{p}.zero"),
        helper.make_node("Where", [cond] + branches, [f"{p}.fill"], name=f"{p}.fill"),
        helper.make_node("Mul", [x, f"{p}.keep"], [f"{p}.kept"], name=f"{p}.mul"),
        helper.make_node("Add", [f"{p}.kept", f"{p}.fill"], list(n.output), name=name),
    ]
    return nodes, 2 if keep_when == "not" else 1


def _mask_constants(s: ImportState, done: list) -> None:
    """The float initializers that only the rewritten Wheres' conditions and fill values read
    (directly, or through nodes whose outputs nothing else reads) become constants
    (``s.constant_reason``), so the fold stage evaluates the masks."""
    g = s.g
    x_slot = {id(n): k for n, _, k in done}
    readers: dict[str, list] = {}
    for n in g.node:
        for k, i in enumerate(n.input):
            if i:
                readers.setdefault(i, []).append((n, k))
    makers = {o: n for n in g.node for o in n.output if o}
    cone, todo = {}, [i for n, _, x in done for k, i in enumerate(n.input) if k != x]
    while todo:
        n = makers.get(todo.pop())
        if n is not None and id(n) not in cone:
            cone[id(n)] = n
            if n.op_type not in ("Shape", "Size"):  # which reads dims only
                todo.extend(i for i in n.input if i)
    outputs = {o.name for o in g.output}

    def only_mask(value, inside) -> bool:
        """Whether every reader of ``value`` is a mask-only node or a Where's mask slot."""
        return value not in outputs and all(
            id(r) in inside or x_slot.get(id(r), k) != k
            for r, k in readers.get(value, []))

    inside = set(cone)
    while True:  # drop the nodes an output of which something else reads, until none is left
        drop = {i for i in inside if not all(only_mask(o, inside) for o in cone[i].output if o)}
        if not drop:
            break
        inside -= drop
    names = [name for _, name, _ in done]
    which = f"the mask of node {names[0]}" if len(names) == 1 else \
        f"the masks of nodes {', '.join(names[:3])}{' ...' if len(names) > 3 else ''}"
    for name, t in s.init.items():
        if t.data_type in _FLOAT_TYPES and name in readers and only_mask(name, inside):
            s.constant_reason[name] = f"read only to compute {which} (masked_fill): a buffer"
