"""An import stage after the token masks (:func:`masked_fill`): ``masked_fill`` by a mask that
is a constant.

A causal mask kept as a registered buffer and applied with
``scores.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))`` (nanoGPT's style) exports
as Where(cond, value, x), whose condition is computed from initializers, Constant nodes and
static dims only and whose ``value`` is a constant too. The engine trains no Where, so such a
node becomes

    x * keep + fill,   keep = Cast(Not(cond)) as float32,   fill = Where(cond, value, 0),

whose ``keep`` and ``fill`` the fold stage evaluates to constants (the float initializers read
only to compute the condition, such as that buffer, are constants: ``constant_reason``); its
gradient dx = dy * keep is Where's. ``torch.where(cond, x, value)`` (x as Where's X) is the
same with cond for Not(cond). The two agree wherever x is finite; where x is +-inf under the
mask, x * 0 gives NaN (Where gives ``value``). A Where whose condition depends on the model's
input is left as it is (the op check names it).
"""
from __future__ import annotations

from onnx import TensorProto, helper

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
            new = _rewrite(n, name, varying)
            if new is None:
                varying.update(o for o in n.output if o)
                out.append(n)
                continue
            done.append(name)
            varying.update(new[-1].output)
            out.extend(new)
            _mask_buffers(s, n.input[0], name)
            continue
        out.append(n)
    if not done:
        return
    del g.node[:]
    g.node.extend(out)
    s.names = _node_names(g)
    s.notes.append("masked_fill by a constant mask (Where) became x * keep + fill, the mask "
                   "folded into constants: " + ", ".join(done))


def _rewrite(n, name: str, varying: set) -> list | None:
    """The nodes replacing Where node ``n`` when its condition and one branch are constants
    (not in ``varying``), else None."""
    if n.op_type != "Where" or n.domain not in _DEFAULT_DOMAINS or len(n.input) != 3:
        return None
    cond, a, b = n.input
    if cond in varying or (a in varying) == (b in varying):
        return None
    x, value, keep_when = (b, a, "not") if b in varying else (a, b, "cond")
    p = f"{name}.masked_fill"
    nodes = []
    keep_src = cond
    if keep_when == "not":
        nodes.append(helper.make_node("Not", [cond], [f"{p}.not"], name=f"{p}.not"))
        keep_src = f"{p}.not"
    zero = helper.make_tensor(f"{p}.zero", TensorProto.FLOAT, [], [0.0])
    branches = [f"{p}.value", f"{p}.zero"] if keep_when == "not" else \
        [f"{p}.zero", f"{p}.value"]
    nodes += [
        helper.make_node("Cast", [keep_src], [f"{p}.keep"], to=TensorProto.FLOAT,
                         name=f"{p}.keep"),
        helper.make_node("Cast", [value], [f"{p}.value"], to=TensorProto.FLOAT,
                         name=f"{p}.value"),
        helper.make_node("Constant", [], [f"{p}.zero"], value=zero, name=f"{p}.zero"),
        helper.make_node("Where", [cond] + branches, [f"{p}.fill"], name=f"{p}.fill"),
        helper.make_node("Mul", [x, f"{p}.keep"], [f"{p}.kept"], name=f"{p}.mul"),
        helper.make_node("Add", [f"{p}.kept", f"{p}.fill"], list(n.output), name=name),
    ]
    return nodes


def _mask_buffers(s: ImportState, cond: str, where: str) -> None:
    """The float initializers that only the nodes computing ``cond`` read become constants
    (``s.constant_reason``), so the fold stage evaluates the condition."""
    makers = {o: n for n in s.g.node for o in n.output if o}
    cone, todo = set(), [cond]
    while todo:
        n = makers.get(todo.pop())
        if n is not None and id(n) not in cone:
            cone.add(id(n))
            if n.op_type not in ("Shape", "Size"):  # which reads dims only
                todo.extend(i for i in n.input if i)
    inside = {i for n in s.g.node if id(n) in cone for i in n.input}
    outside = {i for n in s.g.node if id(n) not in cone for i in n.input} | \
        {o.name for o in s.g.output}
    for name in inside - outside:
        t = s.init.get(name)
        if t is not None and t.data_type in _FLOAT_TYPES:
            s.constant_reason[name] = (f"read only to compute the mask of node {where} "
                                       "(masked_fill): a buffer")
