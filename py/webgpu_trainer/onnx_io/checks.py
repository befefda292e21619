"""The import's checks, before and after folding: stored tensor data, opset, graph structure,
``onnx.checker``, dead nodes, the one MNIST input, the ops (mapped, trainable, domain) and the
dtypes of initializers used as data. A part of ``load._Importer``."""
from __future__ import annotations

import onnx
from onnx import TensorProto

from .constants import (_DEFAULT_DOMAINS, _FLOAT_TYPES, _FOLD_ONLY, IMPORT_OPS, MAX_OPSET,
                        MIN_OPSET, MNIST_DIMS, TESTED_OPSETS)
from .protos import _attr, _dims, _dtype_name, _type_name
from .read import _tensor_problems


class _Checks:
    """File-level, graph and op checks of ``_Importer`` (problems and notes)."""

    def _check_tensor_data(self) -> bool:
        found = []
        g = self.model.graph
        for t in g.initializer:
            found += _tensor_problems(t, f"initializer {t.name!r}", self.base, self.file_size)
        for n in g.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.TENSOR:
                    found += _tensor_problems(a.t, f"node {n.name or n.op_type} attribute "
                                              f"{a.name!r}", self.base, self.file_size)
        if g.sparse_initializer:
            found.append(f"sparse initializers are not supported: "
                         f"{[s.values.name for s in g.sparse_initializer]}")
        self.problems += found
        return not found

    def _load_external(self) -> None:
        if not any(t.data_location == TensorProto.EXTERNAL for t in self.model.graph.initializer):
            return
        try:
            onnx.external_data_helper.load_external_data_for_model(self.model, self.base)
        except Exception as e:  # noqa: BLE001
            self.problems.append(f"external data could not be read: {e}")

    def _check_opset(self) -> None:
        if self.opset == 0:
            self.problems.append("the model imports no opset of the default ONNX domain")
        elif self.opset < MIN_OPSET:
            self.problems.append(f"opset {self.opset} is too old: re-export with "
                                 f"opset_version between {TESTED_OPSETS[0]} and "
                                 f"{TESTED_OPSETS[1]}")
        elif self.opset > MAX_OPSET:
            self.problems.append(f"opset {self.opset} is newer than the importer knows (it "
                                 f"reads opsets {MIN_OPSET}-{MAX_OPSET}, and the trained "
                                 "model is exported at the model's own opset): re-export "
                                 f"with opset_version between {TESTED_OPSETS[0]} and "
                                 f"{TESTED_OPSETS[1]}")
        elif not TESTED_OPSETS[0] <= self.opset <= TESTED_OPSETS[1]:
            self.notes.append(f"opset {self.opset} is outside the tested range "
                              f"{TESTED_OPSETS[0]}-{TESTED_OPSETS[1]}")

    def _check_structure(self) -> bool:
        """Every node input is defined before use (a truncated or shuffled graph is not)."""
        g = self.g
        known = {i.name for i in g.input} | set(self.init) | {""}
        bad = []
        for n, name in zip(g.node, self.names):
            for x in n.input:
                if x not in known:
                    bad.append(f"node {name} ({n.op_type}) uses {x!r}, which no graph input, "
                               "initializer or earlier node defines (truncated or unsorted "
                               "graph?)")
            known.update(n.output)
        for o in g.output:
            if o.name not in known:
                bad.append(f"graph output {o.name!r} is not produced by any node")
        if not g.node:
            bad.append("the graph has no nodes")
        self.problems += bad[:20] + ([f"... and {len(bad) - 20} more undefined tensors"]
                                     if len(bad) > 20 else [])
        return not bad

    def _check_onnx(self) -> None:
        """onnx.checker: structural errors and type errors (strict shape inference) are
        problems; other shape-inference complaints only a note (the folder infers again)."""
        def first_line(e):
            text = str(e).strip()
            return text.splitlines()[0] if text else type(e).__name__
        try:
            onnx.checker.check_model(self.model)
        except Exception as e:  # noqa: BLE001 - ValidationError and friends
            self.problems.append(f"the ONNX checker rejects the model: {first_line(e)}")
            return
        try:
            onnx.checker.check_model(self.model, full_check=True)
        except Exception as e:  # noqa: BLE001 - InferenceError
            if "type" in str(e).lower():
                self.problems.append(f"the ONNX checker rejects the model: {first_line(e)}")
            else:
                self.notes.append(f"ONNX shape inference reports: {first_line(e)}")

    def _dead_nodes(self) -> set:
        """Names of the nodes no graph output depends on (exporters leave some behind)."""
        need = {o.name for o in self.g.output}
        dead = set()
        for n, name in reversed(list(zip(self.g.node, self.names))):
            if any(o and o in need for o in n.output):
                need.update(x for x in n.input if x)
            else:
                dead.add(name)
        return dead

    def _check_inputs(self) -> dict | None:
        """The one data input, bound to MNIST dims: {"name", "batch", "dims", "dtype"}."""
        real = [i for i in self.g.input if i.name not in self.init]
        if not real:
            self.problems.append("the model has no input (it needs one image input "
                                 "[N, 1, 28, 28] or [N, 784])")
            return None
        if len(real) > 1:
            self.problems.append(f"the model has {len(real)} inputs "
                                 f"{[i.name for i in real]}; the trainer feeds exactly one "
                                 "image input [N, 1, 28, 28] or [N, 784]")
        vi = real[0]
        ok = True
        elem = vi.type.tensor_type.elem_type
        if not vi.type.HasField("tensor_type"):
            self.problems.append(f"input {vi.name!r} is not a tensor")
            return None
        if elem not in _FLOAT_TYPES:
            self.problems.append(f"input {vi.name!r} has dtype {_dtype_name(elem)}; the trainer "
                                 "feeds normalised float32 images")
            ok = False
        elif elem != TensorProto.FLOAT:
            self.notes.append(f"input {vi.name!r} is {_dtype_name(elem)}; the engine feeds and "
                              "computes float32")
        dims = _dims(vi)
        if dims is None:
            self.problems.append(f"input {vi.name!r} declares no shape; the trainer needs "
                                 "[N, 1, 28, 28] or [N, 784]")
            return None
        per = dims[1:]
        bound = None
        for want in MNIST_DIMS:
            if len(per) == len(want) and all(not isinstance(d, int) or d == w
                                             for d, w in zip(per, want)):
                bound = want
                break
        if not dims or bound is None:
            sample = "x".join(str(d) for d in per) if per else "a scalar"
            self.problems.append(
                f"input {vi.name!r} has shape {dims} ({sample} per sample, rank {len(dims)}) "
                "but MNIST images are 1x28x28: the model must take [N, 1, 28, 28] or [N, 784]")
            return None
        if any(not isinstance(d, int) for d in per):
            self.notes.append(f"input {vi.name!r} dims {dims} bound to {['N'] + bound}")
        batch = dims[0]
        if isinstance(batch, int) and batch <= 0:
            batch = None
        return {"name": vi.name, "batch": batch, "dims": list(bound), "ok": ok,
                "symbol": batch if isinstance(batch, str) else "N"}

    def _check_ops(self) -> None:
        from ..engine.graph import supported
        trainable = set(supported())
        unsupported, untrainable, domains = [], [], []
        for n, name in zip(self.g.node, self.names):
            if name in self.folded or n.op_type == "Constant" and n.domain in _DEFAULT_DOMAINS:
                continue
            dom = n.domain or "ai.onnx"
            where = f"node {name} ({n.op_type}, {dom} opset {self.opsets.get(dom, '?')})"
            if n.domain not in _DEFAULT_DOMAINS:
                domains.append(f"unknown op domain {n.domain!r}: {where}")
            elif n.op_type in _FOLD_ONLY and n.op_type != "Cast":
                if not self.fold_ran:
                    continue  # the problems that stopped folding are reported already
                why = self.fold_failures.get(name, "its inputs are computed from activations")
                unsupported.append(f"unsupported op: {where} could not be folded to a "
                                   f"constant: {why}")
            elif n.op_type == "Cast" and self._cast_is_float(n):
                continue
            elif n.op_type not in IMPORT_OPS:
                unsupported.append(f"unsupported op: {where}")
            elif self.check_trainable and n.op_type not in trainable:
                untrainable.append(f"cannot train yet: {where}: the engine has no kernel for "
                                   f"{n.op_type}")
        self.problems += domains + unsupported + untrainable
        if unsupported or untrainable:
            self.hints.append("ops the engine trains: " + ", ".join(sorted(trainable)))

    def _cast_is_float(self, n) -> bool:
        to = _attr(n, "to")
        return to in _FLOAT_TYPES

    def _check_dtype(self, t: TensorProto, name: str, uses: list) -> bool:
        """False (and a problem) for an initializer the trainer cannot use as data."""
        if t.data_type in _FLOAT_TYPES:
            return True
        users = ", ".join(f"{nm} ({n.op_type})" for n, nm, _ in uses[:3])
        tn = _type_name(t.data_type)
        if "FLOAT" in tn:
            self.problems.append(f"initializer {name!r} has dtype {tn}, which the trainer "
                                 f"cannot convert (used by {users}): re-export in float32")
        elif t.data_type in (TensorProto.INT8, TensorProto.UINT8, TensorProto.INT4,
                             TensorProto.UINT4):
            self.problems.append(f"initializer {name!r} is {tn} {list(t.dims)} used as data by "
                                 f"{users}: quantized (int8/uint8) weights are not supported; "
                                 "export the float32 model")
        else:
            self.problems.append(f"initializer {name!r} is {tn} {list(t.dims)} used as data by "
                                 f"{users}: only float tensors can be data")
        return False
