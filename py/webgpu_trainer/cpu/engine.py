"""Forward, loss and backward of a whole model description with numpy (any DAG).

``Engine(graph, params, dtype)`` runs the nodes of ``graph`` (the bundle dict of
``onnx_io.load_bundle``) in order; the backward walks them in reverse and ADDS the gradient
contributions of every use of a tensor (residual adds, shared weights).
"""

import numpy as np

from ..engine.ops.losses import final_op, resolve
from . import KERNELS
from .losses import criterion
from .softmax import log_softmax


class Context:
    """What op functions see: ``train`` (bool), ``dtype``, ``opset`` (the model's, set by the
    engine), ``keep`` ({Dropout node name: bool mask} to replay, optional), ``key`` ((seed,
    step): draw dropout masks from Philox as the GPU does, cpu/philox.py) with ``salt`` (the
    running node's index + 1, set by the engine), else ``rng`` (numpy Generator for masks), and
    ``updates`` ({running-statistic name: new value}, filled by training-mode
    BatchNormalization), ``input`` (the graph input's name, set by the engine: no gradient
    flows into it), ``batch`` (the batch size, set by the engine: an Expand to the batch)."""

    def __init__(self, train, dtype, keep=None, rng=None, key=None):
        self.train, self.dtype, self.keep = train, dtype, keep or {}
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.key, self.salt = key, 0
        self.updates: dict = {}
        self.input, self.batch = None, None


def params_from_blob(graph: dict, blob: bytes, dtype=np.float64) -> dict:
    """{tensor name: array of ``dtype``} from the bundle's weight blob (float32 little-endian)."""
    return {t["name"]: np.frombuffer(blob, "<f4", t["nbytes"] // 4, t["offset"])
            .reshape(t["shape"]).astype(dtype) for t in graph["tensors"]}


def blob_from_params(graph: dict, params: dict, nbytes: int | None = None) -> bytes:
    """The weight blob (bundle layout) holding ``params`` as float32."""
    end = max((t["offset"] + t["nbytes"] for t in graph["tensors"]), default=0)
    out = bytearray(max(end, nbytes or 0))
    for t in graph["tensors"]:
        arr = np.ascontiguousarray(params[t["name"]], "<f4")
        out[t["offset"]:t["offset"] + t["nbytes"]] = arr.tobytes()
    return bytes(out)


class Engine:
    """The numpy engine for one model.

    ``graph``: bundle dict; ``params``: {tensor name: array} (all tensors of ``graph``);
    ``dtype``: np.float64 (oracle) or np.float32 (training); ``trainable``: names that get
    gradients (default: role "param").
    """

    def __init__(self, graph: dict, params: dict, dtype=np.float64, trainable=None):
        self.graph, self.dtype = graph, dtype
        bad = [f"{n['name']} ({n['op_type']})" for n in graph["nodes"]
               if n["op_type"] not in KERNELS]
        if bad:
            raise NotImplementedError("the numpy engine has no kernel for: " + ", ".join(bad))
        self.params = {k: np.asarray(v, dtype) for k, v in params.items()}
        roles = {t["name"]: t["role"] for t in graph["tensors"]}
        self.trainable = set(trainable) if trainable is not None else \
            {n for n, r in roles.items() if r == "param"}
        self.constants = {}
        for name, c in graph.get("constants", {}).items():
            kind = dtype if c["dtype"].startswith("float") else np.int64
            self.constants[name] = np.asarray(c["values"], kind).reshape(c["shape"])
        self.input = graph["inputs"][0]["name"]
        self.output = graph["outputs"][0]["name"]

    def forward(self, x, train=False, keep=None, rng=None, key=None):
        """(values {name: array} of every tensor, caches {node name: cache}, ctx). Dropout
        masks: ``keep`` (replayed), else Philox with ``key`` = (seed, step) as on the GPU, else
        ``rng``."""
        ctx = Context(train, self.dtype, keep, rng, key)
        ctx.opset = self.graph.get("opset", 17)
        ctx.input = self.input  # backward kernels may skip the graph input's gradient
        ctx.batch = len(x)
        vals = {**self.params, **self.constants, self.input: np.asarray(x, self.dtype)}
        caches = {}
        for k, node in enumerate(self.graph["nodes"]):
            ctx.salt = k + 1
            ins = [vals[i] if i else None for i in node["inputs"]]
            outs, caches[node["name"]] = KERNELS[node["op_type"]].forward(node, ins, ctx)
            for name, v in zip(node["outputs"], outs):
                if name:
                    vals[name] = v
        return vals, caches, ctx

    def head(self):
        """The "auto" loss of the GPU plan: "nll" when the model ends in LogSoftmax over
        [batch, classes], "nll_log" when it ends in Softmax, else "cross_entropy"."""
        return resolve("auto", final_op(self.graph))["loss"]

    def scores(self, spec) -> str:
        """The tensor a resolved loss ``spec`` reads: the final Softmax's input for nll_log
        (NLL of log(softmax(z)) = cross_entropy of z), else the output."""
        if spec["loss"] != "nll_log":
            return self.output
        return next(n for n in self.graph["nodes"] if self.output in n["outputs"])["inputs"][0]

    def step(self, x, labels, train=True, keep=None, rng=None, loss=None, key=None):
        """Forward, loss and, when ``train``, backward.

        ``loss``: the loss spec of ``webgpu_trainer.ops.losses`` (None: "auto", the rule of
        ``head``), applied to the raw output (nll_log: to the final Softmax's input); ``keep`` /
        ``key`` / ``rng``: see ``forward``. Returns a dict: ``acts`` {activation: value},
        ``dacts`` {activation: gradient}, ``grads`` {trainable tensor: gradient}, ``buffers``
        {running statistic: new value}, ``loss`` (float), ``acc`` (fraction of argmax == label),
        ``logp`` [B, C] (the output when the model ends in LogSoftmax, log_softmax of the
        Softmax's input for nll_log, else log_softmax of the output), ``spec`` (the resolved loss
        spec). Raises ValueError for a bad spec.
        """
        vals, caches, ctx = self.forward(x, train, keep, rng, key)
        out = vals[self.output]
        if out.ndim != 2:
            raise NotImplementedError(f"output {self.output} has shape {list(out.shape)}: "
                                      "the losses need [batch, classes]")
        ends_in = final_op(self.graph)
        spec = resolve(loss, ends_in, out.shape[1])
        scores = self.scores(spec)
        value, d, acc = criterion(spec, vals[scores], labels)
        logp = out if ends_in == "LogSoftmax" else log_softmax(vals[scores], axis=1) \
            if spec["loss"] == "nll_log" else log_softmax(out, axis=1)
        acts = {k: v for k, v in vals.items() if k not in self.params and k not in self.constants}
        res = {"acts": acts, "dacts": {}, "grads": {}, "buffers": dict(ctx.updates),
               "loss": value, "acc": acc, "logp": logp, "spec": spec}
        if not train:
            return res
        grads = {scores: d}  # nll_log: the final Softmax gets no gradient, its input does
        for node in reversed(self.graph["nodes"]):
            douts = [grads.get(o) if o else None for o in node["outputs"]]
            if all(d is None for d in douts):
                continue
            ins = [vals[i] if i else None for i in node["inputs"]]
            outs = [vals.get(o) if o else None for o in node["outputs"]]
            dins = KERNELS[node["op_type"]].backward(node, ins, outs, caches[node["name"]],
                                                     douts, ctx)
            for name, g in zip(node["inputs"], dins):
                if g is None or not name or name in self.constants or name == self.input:
                    continue
                if name in self.params and name not in self.trainable:
                    continue
                grads[name] = grads[name] + g if name in grads else g
        res["dacts"] = {k: v for k, v in grads.items() if k in acts}
        res["grads"] = {k: v for k, v in grads.items() if k in self.params}
        return res
