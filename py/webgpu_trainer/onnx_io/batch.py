"""The import's fourth stage, shapes that hold for any batch size (:func:`batch_shapes`): a
Reshape shape that follows the batch becomes one constant (an Expand shape too, with the
batch's axes named); a value that is one row repeated for every sample becomes that row (a
Gather's indices, the lookup then expanded to the batch; an Add / Sub / Mul / Div operand,
broadcast); other batch-dependent inputs are problems; the output must follow the batch.
Before folding, a batch baked into a static export's Reshape shapes becomes -1 (or 0 = copy)
(:func:`static_batch`, run by the fold stage)."""
from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from .protos import _attr
from .shapes import _int_list, _reshape_dims
from .state import ImportState


def _depends_on_input(s: ImportState) -> set:
    dep = {s.input["name"]}
    for n in s.g.node:
        if n.op_type not in ("Shape", "Size") and any(x in dep for x in n.input):
            dep.update(o for o in n.output if o)
    return dep


def _add_const_init(s: ImportState, base_name: str, arr: np.ndarray, base: dict) -> str:
    """A new int64 initializer in the working model (and in ``base``); its name."""
    taken = set(s.init) | {o for n in s.g.node for o in n.output}
    name, k = f"{base_name}:any_batch", 1
    while name in taken:
        k += 1
        name = f"{base_name}:any_batch{k}"
    t = numpy_helper.from_array(np.asarray(arr, np.int64), name)
    s.g.initializer.append(t)
    s.init[name] = t
    base[name] = np.asarray(arr, np.int64)
    return name


def static_batch(s: ImportState, b0: int, base: dict, shapes: dict, vals: dict) -> None:
    """A static export bakes its batch size ``b0`` into Reshape shapes ([4, -1]): make them
    hold for any batch (the batch position becomes -1, or 0 = copy when -1 is taken). Called
    by the fold stage before it folds, with the ``shapes`` and values ``vals`` at ``b0``;
    new shape constants go into ``base`` (the folder's known values)."""
    out = s.g.output[0].name if s.g.output else None
    s.static_out = shapes.get(out)
    dep = _depends_on_input(s)
    changed = []
    for n, name in zip(s.g.node, s.names):
        if n.op_type != "Reshape" or len(n.input) < 2 or n.input[0] not in dep:
            continue
        shp, dims = vals.get(n.input[1]), shapes.get(n.input[0])
        if shp is None or shp.ndim != 1 or not len(shp) or not dims or dims[0] != b0:
            continue
        if int(shp[0]) != b0:
            continue
        out = shapes.get(n.output[0])
        if out and None not in out and out[0] == b0 and len(out) == len(shp):
            new = np.array([-1] + list(out[1:]), np.int64)  # the other dims as inferred
        elif -1 not in _int_list(shp):
            new = shp.astype(np.int64).copy()
            new[0] = -1
        elif int(_attr(n, "allowzero", 0)):
            continue
        else:
            new = shp.astype(np.int64).copy()
            new[0] = 0  # copy the batch dim (allowzero is 0)
        n.input[1] = _add_const_init(s, n.input[1], new, base)
        changed.append(name)
    s.notes.append(f"the model was exported with a fixed batch size of {b0}; the "
                   "trainer uses it with any batch size" +
                   (f" (Reshape nodes {changed} keep the batch dimension)"
                       if changed else ""))


def batch_shapes(s: ImportState) -> None:
    """Stage 4 (when ``s.fold_ran``): the values that follow the batch size (``s.batchdep``).
    A Reshape shape becomes one constant that holds for any batch (:func:`_resolve_reshape`),
    an Expand shape one with ``batch_axes`` (:func:`_resolve_expand`); one row repeated for
    every sample becomes the row (:func:`_lookup_once` for a Gather's indices, a broadcast
    operand of an Add / Sub / Mul / Div where :func:`_broadcasts_back`); any other input is a
    problem. The output must be per-sample class scores that follow the batch."""
    if not s.fold_ran:
        return
    b1 = s.runs[0][0]
    after = []  # (node index, Expand node, its name): lookups expanded to the batch
    for i, (n, name) in enumerate(zip(s.g.node, s.names)):
        if name in s.folded or name in s.dead:
            continue
        for k, x in enumerate(n.input):
            if x not in s.batchdep:
                continue
            if n.op_type == "Reshape" and k == 1:
                _resolve_reshape(s, n, name, x, s.batchdep[x], s.runs)
            elif n.op_type == "Expand" and k == 1:
                _resolve_expand(s, name, x, s.batchdep[x], s.runs)
            elif n.op_type == "Resize" and k == 3 and _batch_first(s.batchdep[x], s.runs):
                # sizes = [N, C, OH, OW] from Shape(x)[:2] (F.interpolate(size=...)): the
                # batch position becomes -1, "as the input" (ops/resize.py)
                new = np.asarray(s.batchdep[x][0], np.int64).reshape(-1).copy()
                new[0] = -1
                cname = f"{x}@{name}"
                s.constants[cname] = new
                s.const_overrides[(name, k)] = cname
            elif n.op_type == "Gather" and k == 1 and \
                    (row := _batch_row(s.batchdep[x], s.runs)) is not None and \
                    (made := _lookup_once(s, n, name, x, row)) is not None:
                after.append((i, *made))
            elif n.op_type in _BROADCASTING and \
                    (row := _batch_row(s.batchdep[x], s.runs)) is not None and \
                    _broadcasts_back(s, n, k, row):
                cname = f"{x}@{name}"
                s.constants[cname] = row
                s.const_overrides[(name, k)] = cname
                s.notes.append(f"node {name} ({n.op_type}): input {k} {x!r} is the same for "
                               f"every sample ({_brief(row)}): one row, broadcast over the "
                               "batch")
            elif _zero_state(n, k, s.batchdep[x]):
                n.input[k] = ""
                s.notes.append(f"node {name} ({n.op_type}): input {k} {x!r} (zeros of the "
                               "batch's size) is left out: the initial state is zero")
            else:
                s.reported.add(name)
                s.problems.append(
                    f"node {name} ({n.op_type}) input {k} {x!r} depends on the batch size "
                    f"(it is {_brief(s.batchdep[x][0])} for a batch of {b1}): only Reshape / "
                    "Expand shapes, and values the same for every sample read by a Gather "
                    "or an Add, Sub, Mul or Div, may follow the batch")
    if after:
        nodes, names = list(s.g.node), list(s.names)
        for i, node, name in reversed(after):
            nodes.insert(i + 1, node)
            names.insert(i + 1, name)
        del s.g.node[:]
        s.g.node.extend(nodes)
        s.names[:] = names
    _check_output(s)


def _batch_row(pair, runs) -> np.ndarray | None:
    """The row ``r`` [1, ...] when the two values of ``pair`` are ``r`` repeated along a first
    axis of the batch's size (``torch.arange(t).unsqueeze(0).expand(n, t)``,
    ``torch.zeros_like(ids)``: the same indices for every sample), else None."""
    (b1, _, _, _), (b2, _, _, _) = runs
    a, b = (np.asarray(v) for v in pair)
    if a.ndim < 1 or a.shape[0] != b1 or b.shape[0] != b2 or a.shape[1:] != b.shape[1:] \
            or a.dtype != b.dtype:
        return None
    row = a[:1]
    if not (np.array_equal(a, np.broadcast_to(row, a.shape))
            and np.array_equal(b, np.broadcast_to(row, b.shape))):
        return None
    return row


_BROADCASTING = ("Add", "Sub", "Mul", "Div")  # elementwise, multidirectional broadcasting


def _dims_at(s: ImportState, run, x: str):
    """The dims of value ``x`` in ``run`` (an entry of ``s.runs``): inferred, a folded
    value's, or an initializer's; None when unknown."""
    _, shapes, vals, _ = run
    if x in shapes and shapes[x] is not None and None not in shapes[x]:
        return list(shapes[x])
    if x in vals:
        return list(np.asarray(vals[x]).shape)
    if x in s.init:
        return [int(d) for d in s.init[x].dims]
    return None


def _broadcasts_back(s: ImportState, n, k: int, row: np.ndarray) -> bool:
    """Whether input ``k`` of the elementwise ``n`` replaced by ``row`` [1, ...] leaves its
    output's dims as they were at both batch sizes (another input carries the batch), so
    broadcasting repeats the row exactly as the batch-sized value did."""
    for run in s.runs:
        dims = [row.shape if j == k else _dims_at(s, run, y) for j, y in enumerate(n.input)]
        out = _dims_at(s, run, n.output[0])
        if out is None or any(d is None for d in dims):
            return False
        try:
            if list(np.broadcast_shapes(*[tuple(d) for d in dims])) != out:
                return False
        except ValueError:
            return False
    return True


def _lookup_once(s: ImportState, n, name: str, x: str, row: np.ndarray):
    """A Gather whose indices ``x`` are one row ``row`` [1, ...] for every sample (HF-style
    position ids and token type ids): it looks the row up once, and a new Expand after it
    (``batch_axes`` [0]) repeats the result for the batch; the lookups' gradient is the sum
    over the batch, as for the repeated indices. ``(Expand node, its name)`` to insert after
    ``n``, or None (and nothing changed) when the output's dims are unknown."""
    from onnx import helper
    out = n.output[0]
    dims = s.shapes.get(out)
    if not dims or None in dims or int(_attr(n, "axis", 0)) != 0:
        return None
    taken = set(s.init) | set(s.constants) | set(s.names) | \
        {o for m in s.g.node for o in m.output}

    def fresh(base: str) -> str:
        k, new = 1, base
        while new in taken:
            k += 1
            new = f"{base}{k}"
        taken.add(new)
        return new
    idx_name, shape_name = fresh(f"{x}@{name}"), fresh(f"{out}:batch_shape")
    row_out, expand_name = fresh(f"{out}:row"), fresh(f"{name}:batch")
    s.constants[idx_name] = row.astype(np.int64)
    s.const_overrides[(name, 1)] = idx_name
    shape = np.array([1] + [int(d) for d in dims[1:]], np.int64)
    s.constants[shape_name] = shape
    s.attr_overrides[expand_name] = {"batch_axes": [0]}
    n.output[0] = row_out
    s.shapes[row_out] = [1] + list(dims[1:])
    s.notes.append(f"node {name} (Gather): its indices {x!r} are the same for every sample "
                   f"({_brief(row)}): looked up once, then expanded to the batch")
    return helper.make_node("Expand", [row_out, shape_name], [out], name=expand_name), \
        expand_name


def _brief(value, shown: int = 6) -> str:
    """A value for a message: small ones in full, others as their shape and first values
    (``shape [2, 3, 32], values 0, 0.5, 1, ... (192 in all)``)."""
    a = np.asarray(value)
    if a.size <= shown:
        return str(a.tolist())
    head = ", ".join(f"{v:g}" if isinstance(v, float) else str(v)
                     for v in a.ravel()[:shown].tolist())
    return f"shape {list(a.shape)}, values {head}, ... ({a.size:,} in all)"


def _batch_first(pair, runs) -> bool:
    """Whether the two values of ``pair`` differ only in their first entry, which is the
    batch size of each run."""
    a, b = (np.asarray(v).reshape(-1) for v in pair)
    return len(a) == len(b) > 1 and a[0] == runs[0][0] and b[0] == runs[1][0] and \
        bool(np.all(a[1:] == b[1:]))


def _zero_state(n, k: int, pair) -> bool:
    """Whether input ``k`` of ``n`` is an RNN's initial_h / initial_c of zeros whose shape
    follows the batch (torch.onnx.export's ConstantOfShape for nn.LSTM / nn.GRU without a
    given state): absent means zero, so the input can be dropped."""
    return (n.op_type in ("LSTM", "GRU") and k in (5, 6)
            and all(not np.any(np.asarray(v)) for v in pair))


def _check_output(s: ImportState) -> None:
    """The output: [N, K] class scores (K >= 2; the dataset's classes are checked when
    training starts) whose N follows the batch."""
    (b1, s1, _, _), (b2, s2, _, _) = s.runs
    out = s.g.output[0].name if s.g.output else None
    d1, d2 = s1.get(out), s2.get(out)
    if out is not None and (d1 is None or None in d1):
        static = s.static_out
        if static and None not in static:
            s.problems.append(
                f"output {out!r} has shape {static} for the exported batch size "
                f"{s.input['batch']} but does not follow the batch size (unknown for a "
                f"batch of {b1}): a batch size is fixed inside the graph; re-export with a "
                "dynamic batch axis (dynamic_axes={'input': {0: 'N'}, 'output': {0: 'N'}})")
        elif not s.problems:
            s.problems.append(f"the shape of output {out!r} cannot be inferred for a "
                              f"batch of {b1}")
    elif d1 is not None:
        if len(d1) != 2 or d1[1] < 2:
            s.problems.append(f"output {out!r} has shape {['N'] + list(d1[1:])}: "
                              "training needs [N, K] class scores, K >= 2")
        elif d1[0] != b1 or (d2 and d2[0] != b2):
            s.problems.append(
                f"output {out!r} does not follow the batch size (shape {d1} for a batch of "
                f"{b1}): a batch size is fixed inside the graph; re-export with a dynamic "
                "batch axis (dynamic_axes={'input': {0: 'N'}, 'output': {0: 'N'}})")


def _resolve_reshape(s: ImportState, n, name, x, pair, runs) -> None:
    (b1, s1, _, _), (b2, s2, _, _) = runs
    a, b = (np.asarray(v).astype(np.int64) for v in pair)
    d1, d2 = s1.get(n.input[0]), s2.get(n.input[0])
    allowzero = int(s.attr_overrides.get(name, {}).get(
        "allowzero", _attr(n, "allowzero", 0)))
    fail = (f"node {name} (Reshape): its shape {a.tolist()} (batch {b1}) / {b.tolist()} "
            f"(batch {b2}) follows the batch in a way that cannot be written as a constant")
    if a.ndim != 1 or a.shape != b.shape or not d1 or not d2 or None in d1 or None in d2:
        s.problems.append(fail)
        s.reported.add(name)
        return
    new = a.copy()
    fixed = [int(v) for v, w in zip(a, b) if v == w]
    use_zero = False
    for i in range(len(a)):
        if a[i] == b[i]:
            continue
        if (i < len(d1) and d1[i] == b1 and d2[i] == b2 and a[i] == b1 and b[i] == b2
                and not (allowzero and 0 in fixed)):
            new[i], use_zero = 0, True
        elif -1 not in fixed and -1 not in _int_list(new):
            new[i] = -1
        else:
            s.problems.append(fail)
            s.reported.add(name)
            return
    az = 0 if use_zero else allowzero
    if (_reshape_dims(d1, new, az) != _reshape_dims(d1, a, allowzero)
            or _reshape_dims(d2, new, az) != _reshape_dims(d2, b, allowzero)
            or _reshape_dims(d1, new, az) is None):
        s.problems.append(fail)
        s.reported.add(name)
        return
    if use_zero and allowzero:
        s.attr_overrides.setdefault(name, {})["allowzero"] = 0
    cname = x if x not in s.constants else f"{x}@{name}"
    prev = s.constants.get(cname)
    if prev is not None and not np.array_equal(prev, new):
        cname = f"{x}@{name}"
    s.constants[cname] = new
    s.const_overrides[(name, 1)] = cname


def _resolve_expand(s: ImportState, name, x, pair, runs) -> None:
    """An Expand to the batch (``cls.expand(N, -1, -1)``: the shape is [b, 1, 1] for a batch
    of b): the dims that are the batch size in both runs become 1 in one constant shape and
    the node gets ``batch_axes`` (the engine puts the batch size there)."""
    (b1, _, _, _), (b2, _, _, _) = runs
    a, b = (np.asarray(v).astype(np.int64) for v in pair)
    axes = [i for i in range(a.size) if a.ndim == 1 and a.shape == b.shape and a[i] != b[i]]
    if (a.ndim != 1 or a.shape != b.shape or not axes
            or any(a[i] != b1 or b[i] != b2 for i in axes)):
        s.problems.append(f"node {name} (Expand): its shape {a.tolist()} (batch {b1}) / "
                          f"{b.tolist()} (batch {b2}) follows the batch in a way that cannot "
                          "be written as a constant")
        s.reported.add(name)
        return
    new = a.copy()
    new[axes] = 1
    cname = f"{x}@{name}"
    s.constants[cname] = new
    s.const_overrides[(name, 1)] = cname
    s.attr_overrides.setdefault(name, {})["batch_axes"] = axes
