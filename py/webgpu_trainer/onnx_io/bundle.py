"""The import's weights stage (:func:`weights`: the remaining nodes, the constants inlined as
JSON, the float initializers as tensors, params and BatchNormalization buffers with Identity
copies and running-statistic copies split off, packed into the aligned little-endian float32
weight blob) and its last stage (:func:`bundle`: the graph dict)."""
from __future__ import annotations

import os
import re

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from .constants import (_CONST_SLOTS, _DEFAULT_DOMAINS, _FLOAT_TYPES, ALIGN, FORMAT,
                        MAX_INLINE_ELEMENTS)
from .checks import check_dtype
from .initializers import frozen_list
from .protos import _type_name, _value_info
from .state import ImportState


def _small(arr: np.ndarray) -> dict:
    """A constant of the bundle: {"dtype", "shape", "values"}."""
    arr = np.asarray(arr)
    if arr.dtype.kind == "f" and arr.dtype != np.float32:
        arr = arr.astype(np.float32)
    return {"dtype": arr.dtype.name, "shape": list(arr.shape), "values": arr.reshape(-1).tolist()}


def weights(s: ImportState) -> None:
    """Stage 6: the nodes the bundle keeps (``s.keep``; Identity copies of float initializers
    become tensors of their own, ``s.derived``), the constants they read inlined
    (``s.bundle_constants``), the tensors and the weight blob (``s.tensors``, ``s.blob``),
    and the dtype problems of initializers used as data. Without an input (the checks refused
    it) only the dtypes are checked: every problem at once."""
    if s.input is None:  # no bundle; still report the initializers' dtypes
        _check_data_dtypes(s)
        return
    _keep(s)
    for n, name, ins in s.keep:  # uses of every value by the remaining nodes
        for k, x in enumerate(ins):
            if x:
                s.uses.setdefault(x, []).append((n, name, k))
    _inline_constants(s)
    roles, extra = _roles(s, _tensor_order(s))
    _readable_names(s, roles, extra)
    if s.derived:
        s.notes.append("the exporter deduplicated equal initializers into Identity "
                       f"nodes; they are separate tensors again: {sorted(s.derived)}")
    _pack(s, roles, extra)
    s.tensor_names = {t for t, _ in s.final_order}
    _check_data_uses(s)


def _inputs_of(s: ImportState, n, name) -> list[str]:
    return [s.const_overrides.get((name, k), x) for k, x in enumerate(n.input)]


def _check_data_dtypes(s: ImportState) -> None:
    """Every initializer a node uses as data (not a shape / axes / index slot) whose dtype
    the trainer cannot use, as a problem (``check_dtype``), for an import that stops
    before the bundle (an input of symbolic sample dims): every problem at once."""
    uses: dict[str, list] = {}
    for n, name in zip(s.g.node, s.names):
        for k, x in enumerate(n.input):
            if x in s.init and k not in _CONST_SLOTS.get(n.op_type, ()):
                uses.setdefault(x, []).append((n, name, k))
    for x, u in uses.items():
        t = s.init[x]
        if t.data_type not in _FLOAT_TYPES and (len(t.dims) > 0
                                                or "FLOAT" in _type_name(t.data_type)):
            check_dtype(s, t, x, u)


def _keep(s: ImportState) -> None:
    """``s.keep``: the remaining nodes with their (possibly re-pointed) inputs; an Identity of
    a float initializer is a tensor of its own instead (``s.derived``: exporters deduplicate
    equal initializers into Identity nodes; each was a separate parameter in the model)."""
    graph_outputs = {o.name for o in s.g.output}
    remaining = [(n, name) for n, name in zip(s.g.node, s.names)
                 if name not in s.folded and not (n.op_type == "Constant"
                                                  and n.domain in _DEFAULT_DOMAINS)]
    derived = s.derived
    for n, name in remaining:
        ins = _inputs_of(s, n, name)
        src = ins[0] if ins else ""
        if (n.op_type == "Identity" and (src in s.init or src in derived)
                and (src in derived or s.init[src].data_type in _FLOAT_TYPES)
                and src not in s.constants and n.output[0] not in graph_outputs):
            derived[n.output[0]] = {"identity_of": src}
            continue
        s.keep.append((n, name, ins))


def _inline_constants(s: ImportState) -> None:
    """``s.bundle_constants``: the folded constants the remaining nodes read, as JSON."""
    for x in s.uses:
        if x in s.constants:
            arr = s.constants[x]
            if arr.size > MAX_INLINE_ELEMENTS:
                s.problems.append(
                    f"constant {x!r} has {arr.size:,} values, too many to inline into the "
                    "model description: store it as an initializer")
                continue
            s.bundle_constants[x] = _small(arr)


def _tensor_order(s: ImportState) -> list[tuple[str, str]]:
    """(tensor name, initializer holding the values) of the float initializers (and their
    Identity copies) used as data, in initializer order."""
    order: list[tuple[str, str]] = []
    for t in s.g.initializer:
        if t.name in s.uses and t.name not in s.bundle_constants:
            order.append((t.name, t.name))
        for new, src in s.derived.items():
            root = src["identity_of"]
            while root in s.derived:
                root = s.derived[root]["identity_of"]
            if root == t.name and new in s.uses:
                order.append((new, t.name))
    return order


def _roles(s: ImportState, order: list) -> tuple[dict, dict]:
    """Each tensor's role ("param" or "buffer") and ``source`` (``{"identity_of"}``,
    ``{"copy_of", "node", "input"}``); ``s.final_order`` and ``s.rewire``: a running
    statistic shared with a parameter or another BatchNormalization gets its own copy."""
    roles: dict[str, str] = {}
    extra: dict[str, dict] = {}  # tensor name -> "source" of the bundle
    taken = set(s.init) | {o for n in s.g.node for o in n.output}
    for tname, src in order:
        u = s.uses[tname]
        stat = [(n, name, k) for n, name, k in u
                if n.op_type == "BatchNormalization" and k in (3, 4)]
        other = [(n, name, k) for n, name, k in u if (n, name, k) not in stat]
        if tname in s.derived:
            extra[tname] = s.derived[tname]
        if other or not stat:
            roles[tname] = "param"
            s.final_order.append((tname, src))
            copies = stat
        else:
            roles[tname] = "buffer"
            s.final_order.append((tname, src))
            copies = stat[1:]
        for n, name, k in copies:  # a running statistic must be a tensor of its own
            stat = "running_mean" if k == 3 else "running_var"
            scale = n.input[1] if len(n.input) > 1 else ""
            base = (f"{scale[:-len('.weight')]}.{stat}" if scale.endswith(".weight")
                    else f"{name}.{stat}")  # torch's name when the scale has one
            new, i = base, 1
            while new in taken:
                i += 1
                new = f"{base}{i}"
            taken.add(new)
            roles[new] = "buffer"
            extra[new] = {"copy_of": tname, "node": name, "input": k}
            s.rewire[(name, k)] = new
            s.final_order.append((new, src))
            s.notes.append(f"initializer {tname!r} is shared by {len(u)} inputs; node "
                           f"{name} input {k} (a running statistic) gets its own copy "
                           f"{new!r}")
        params = [x for x in other if roles[tname] == "param"]
        groups = _by_module(params) if len(params) > 1 else {}
        if len(groups) > 1 and _merged_constant(s.init[src]):
            _untie(s, tname, src, list(groups.values()), roles, extra, taken)
        elif len(params) > 1:
            s.notes.append(f"initializer {tname!r} is used by {len(params)} nodes: "
                           "trained as one shared (tied) parameter")
    return roles, extra


def _merged_constant(t) -> bool:
    """True when every element of initializer ``t`` is the same number (a LayerNorm's or
    BatchNorm's ones / zeros): exporters merge equal initializers (torch.onnx dynamo), so two
    layers initialised to the same constant arrive as one, which torch did not tie."""
    arr = numpy_helper.to_array(t)
    return arr.size > 1 and bool(np.all(arr == arr.reshape(-1)[0]))


def _module_path(node) -> tuple | None:
    """The torch module path of ``node`` from the dynamo exporter's
    ``pkg.torch.onnx.name_scopes`` metadata (the scopes without the op's own), e.g. ``('',
    'rnn')``; None when the node has none (TorchScript's export) or it is unreadable."""
    import ast
    scopes = next((p.value for p in node.metadata_props
                   if p.key == "pkg.torch.onnx.name_scopes"), None)
    try:
        return tuple(ast.literal_eval(scopes))[:-1] if scopes else None
    except (ValueError, SyntaxError, TypeError):
        return None


def _by_module(params: list) -> dict:
    """``{module path: [(node, name, input), ...]}`` of the nodes using one parameter, from
    ``_module_path``; ``{}`` when a node has none (TorchScript's export, which does not merge
    initializers: a shared one there is a module used twice)."""
    groups: dict = {}
    for entry in params:
        path = _module_path(entry[0])
        if path is None:
            return {}
        groups.setdefault(path, []).append(entry)
    return groups


_AUTO_NAME = re.compile(r"val_\d+")  # the dynamo exporter's name for a value it computed


def _readable_names(s: ImportState, roles: dict, extra: dict) -> None:
    """Parameters the exporter named ``val_<n>`` (an LSTM's W, R, B, computed from torch's
    ``weight_ih_l0`` ... and folded) are named ``<module path>.<ONNX input name>`` of their
    first user (``rnn.W``), or ``<node name>.<input name>`` without a module path, in the
    bundle (``source: {"renamed_from"}``: the export writes them back under the old name)."""
    taken = {t for t, _ in s.final_order} | set(s.init)
    for i, (tname, src) in enumerate(s.final_order):
        users = s.uses.get(tname, [])
        if tname != src or not users or not _AUTO_NAME.fullmatch(tname) or tname in extra:
            continue
        n, name, k = users[0]
        path = [p for p in (_module_path(n) or ()) if p]
        try:
            slots = onnx.defs.get_schema(n.op_type, domain=n.domain).inputs
            slot = slots[min(k, len(slots) - 1)].name if slots else str(k)
        except onnx.defs.SchemaError:
            slot = str(k)
        new = _unique(f"{'.'.join(path) or name}.{slot}", taken)
        s.final_order[i] = (new, src)
        roles[new] = roles.pop(tname)
        extra[new] = {"renamed_from": tname}
        for _n, user, kk in users:
            s.rewire.setdefault((user, kk), new)


def _unique(base: str, taken: set) -> str:
    """``base``, or ``base2``, ``base3``, ... : the first name not in ``taken`` (added to it)."""
    new, i = base, 1
    while new in taken:
        i += 1
        new = f"{base}{i}"
    taken.add(new)
    return new


def _untie(s: ImportState, tname: str, src: str, groups: list, roles: dict, extra: dict,
           taken: set) -> None:
    """Give each module after the first that uses the merged constant ``tname`` as a
    parameter its own trainable copy (``source: {"copy_of", "node", "input"}``,
    ``s.rewire``; ``groups``: the users by module, ``_by_module``), so that training does not
    tie layers the exporter merged (one module's own uses stay tied); a note names each."""
    count = sum(len(g) for g in groups)
    for group in groups[1:]:
        _n, name, k = group[0]
        new = _unique(f"{tname}.{name}", taken)
        roles[new] = "param"
        extra[new] = {"copy_of": tname, "node": name, "input": k}
        for _n, user, j in group:
            s.rewire[(user, j)] = new
        s.final_order.append((new, src))
        s.notes.append(f"initializer {tname!r} (every element {_first(s.init[src])}) is used "
                       f"by {count} nodes of {len(groups)} modules, as exporters merge equal "
                       f"initializers: node {name} input {k} trains its own copy {new!r}")


def _first(t) -> str:
    return f"{numpy_helper.to_array(t).reshape(-1)[0]:g}"


def _pack(s: ImportState, roles: dict, extra: dict) -> None:
    """``s.tensors`` and the weight blob ``s.blob``: each tensor (of a float dtype, checked)
    as little-endian float32 at an offset that is a multiple of ``ALIGN``."""
    chunks, offset = [], 0
    converted = []
    for tname, src in s.final_order:
        t = s.init[src]
        if not s.tensors_ok and t.data_location == TensorProto.EXTERNAL:
            continue  # its data is missing (read.py said so): what it holds is unknown
        if not check_dtype(s, t, tname, s.uses.get(tname, [])):
            continue
        if not s.tensors_ok:
            continue
        arr = numpy_helper.to_array(t)
        if t.data_type != TensorProto.FLOAT:
            converted.append(f"{tname!r} ({_type_name(t.data_type)}"
                             + (f", a copy of {src!r})" if tname != src else ")"))
        data = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        pad = (-offset) % ALIGN
        if pad:
            chunks.append(b"\0" * pad)
            offset += pad
        spec = {"name": tname, "shape": list(arr.shape), "dtype": "float32",
                "offset": offset, "nbytes": len(data), "role": roles[tname]}
        if tname in extra:
            spec["source"] = extra[tname]
        s.tensors.append(spec)
        chunks.append(data)
        offset += len(data)
    if converted:
        s.notes.append("initializers converted to float32: " + ", ".join(converted))
    s.blob, s.weights_nbytes = b"".join(chunks), offset


def _check_data_uses(s: ImportState) -> None:
    """Non-float initializers used as data (int8 weights, float8, int tables) are problems,
    as are BatchNormalization statistics and affine parameters that are not tensors."""
    for x, u in s.uses.items():
        t = s.init.get(x)
        if t is None or t.data_type in _FLOAT_TYPES or x in s.tensor_names:
            continue
        data_uses = [(n, nm, k) for n, nm, k in u if k not in _CONST_SLOTS.get(n.op_type, ())]
        if data_uses and (len(t.dims) > 0 or "FLOAT" in _type_name(t.data_type)
                          or t.data_type in (TensorProto.INT8, TensorProto.UINT8)):
            check_dtype(s, t, x, data_uses)
            s.bundle_constants.pop(x, None)
    for n, name, ins in s.keep:
        if n.op_type == "BatchNormalization":
            for k in (1, 2, 3, 4):
                x = s.rewire.get((name, k), ins[k]) if len(ins) > k else ""
                if x and x not in s.tensor_names and x not in s.derived:
                    s.problems.append(
                        f"node {name} (BatchNormalization) input {k} {x!r} must be a "
                        "float initializer (it is a constant or computed)")


def bundle(s: ImportState) -> None:
    """Stage 8: ``s.graph``, the model description (see ``load_bundle``), from what the
    earlier stages found; the outputs get the batch symbol. Nothing without an input."""
    if s.input is None:
        return
    inp = s.input
    outputs = []
    for o in s.g.output:
        vi = _value_info(o)
        d = s.shapes.get(o.name)
        if d and all(isinstance(v, int) for v in d[1:]):
            vi["shape"] = [inp["symbol"]] + list(d[1:])
        elif vi["shape"]:
            vi["shape"] = [inp["symbol"]] + list(vi["shape"][1:])
        outputs.append(vi)
    if len(outputs) > 1:
        s.notes.append(f"the model has {len(outputs)} outputs; the trainer uses the "
                       f"first, {outputs[0]['name']!r}")
    s.graph = {
        "format": FORMAT,
        "name": os.path.splitext(os.path.basename(s.path))[0],
        "opset": s.opset,
        "producer": f"{s.model.producer_name} {s.model.producer_version}".strip(),
        "doc": s.model.doc_string,
        "inputs": [{"name": inp["name"], "shape": [inp["symbol"]] + inp["dims"],
                    "dtype": inp["dtype"]}],
        "outputs": outputs,
        "tensors": s.tensors,
        "constants": s.bundle_constants,
        "nodes": s.nodes,
        "notes": s.notes,
        "frozen": frozen_list(s, s.tensor_names | {src for _, src in s.final_order},
                              s.bundle_constants),
        "alignment": ALIGN,
        "weights_nbytes": s.weights_nbytes,
    }
    layers = _built_layers(s, inp["dims"], outputs[0]["shape"][-1] if outputs else None)
    if layers is not None:
        s.graph["layers"] = layers


def _built_layers(s: ImportState, dims: list, classes) -> list | None:
    """The page builder's layer list kept in the model's ``metadata_props``
    (``onnx_io.build.SPEC_KEY``) as ``build_spec.check`` normalises it, when it still describes
    this model's input and classes and builds its graph (the same op types and weight shapes);
    None when absent, not JSON, refused by the check or another network's (an upload's
    metadata is untrusted)."""
    import json

    from .build import SPEC_KEY
    from .build_spec import check
    text = next((p.value for p in s.model.metadata_props if p.key == SPEC_KEY), None)
    try:
        layers = json.loads(text) if text and len(text) <= 65536 else None
    except (ValueError, RecursionError):
        return None
    if not isinstance(layers, list) or not isinstance(classes, int):
        return None
    chk = check(layers, list(dims), classes)
    if chk.errors:
        return None
    from .build import build_model  # the list must build this very graph: op types and weights
    try:
        built = onnx.load_from_string(build_model(chk.spec, list(dims), classes)[0]).graph
    except ValueError:
        return None

    def signature(graph):
        return ([n.op_type for n in graph.node], sorted(tuple(t.dims) for t in graph.initializer))
    return chk.spec if signature(built) == signature(s.model.graph) else None
