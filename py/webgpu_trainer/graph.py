"""The model description (see docs/ARCHITECTURE.md) as a graph with static shapes.

Runs in Pyodide: standard library only.
"""

SUPPORTED = ("Conv", "Relu", "BatchNormalization", "Flatten", "Gemm", "Dropout", "LogSoftmax",
             "Identity")


class GraphError(ValueError):
    """The model cannot be planned: names the node, its op and the problem."""


class Graph:
    """Nodes, tensors and constants of a model description, and its shapes for a batch size.

    ``graph``: the JSON dict of ``onnx_io.load_bundle``. Raises GraphError listing every node
    whose op is not supported, before any GPU work.
    """

    def __init__(self, graph: dict):
        self.desc = graph
        self.name = graph.get("name", "model")
        self.nodes = graph["nodes"]
        self.tensors = {t["name"]: t for t in graph["tensors"]}
        self.constants = graph.get("constants", {})
        self.input = graph["inputs"][0]
        self.output = graph["outputs"][0]["name"]
        bad = [f"{n['name']} ({n['op_type']})" for n in self.nodes
               if n["op_type"] not in SUPPORTED]
        if bad:
            raise GraphError("unsupported ops for training: " + ", ".join(bad))
        self.consumers: dict = {}
        self.producer = {o: n for n in self.nodes for o in n["outputs"] if o}
        for n in self.nodes:
            for name in n["inputs"]:
                if name:
                    self.consumers.setdefault(name, []).append(n)

    def weight_nbytes(self) -> int:
        """Bytes of the weight blob: the end of its last tensor."""
        return max((t["offset"] + t["nbytes"] for t in self.tensors.values()), default=0)

    def shapes(self, batch: int) -> dict:
        """Shape of every activation for a batch of ``batch`` samples: ``{name: [dims]}``.

        Raises GraphError naming the node when shapes do not fit (e.g. a wrong input size).
        """
        shapes = {name: list(t["shape"]) for name, t in self.tensors.items()}
        dims = [batch if not isinstance(d, int) else d for d in self.input["shape"]]
        shapes[self.input["name"]] = dims
        for name, c in self.constants.items():
            shapes[name] = list(c["shape"])
        for n in self.nodes:
            try:
                outs = _infer(n, [shapes.get(i) if i else None for i in n["inputs"]])
            except (IndexError, KeyError, TypeError, ZeroDivisionError) as exc:
                raise GraphError(f"node {n['name']} ({n['op_type']}): cannot infer shape: {exc}")
            for name, shape in zip(n["outputs"], outs):
                if name:
                    shapes[name] = shape
        return shapes


def conv_out(size: int, k: int, stride: int, pad0: int, pad1: int, dil: int) -> int:
    """Output length of a convolution or pooling window (ONNX Conv, auto_pad NOTSET)."""
    return (size + pad0 + pad1 - dil * (k - 1) - 1) // stride + 1


def _infer(node: dict, ins: list) -> list:
    op, a = node["op_type"], node.get("attrs", {})
    x = ins[0]
    if op == "Conv":
        w = ins[1]
        kh, kw = w[2], w[3]
        pads = a.get("pads", [0, 0, 0, 0])
        st, dl = a.get("strides", [1, 1]), a.get("dilations", [1, 1])
        if x[1] != w[1] * a.get("group", 1):
            raise GraphError(f"node {node['name']} (Conv): input has {x[1]} channels, weight "
                             f"{w} expects {w[1] * a.get('group', 1)}")
        oh = conv_out(x[2], kh, st[0], pads[0], pads[2], dl[0])
        ow = conv_out(x[3], kw, st[1], pads[1], pads[3], dl[1])
        if oh <= 0 or ow <= 0:
            raise GraphError(f"node {node['name']} (Conv): input {x} too small for kernel")
        return [[x[0], w[0], oh, ow]]
    if op == "Gemm":
        m = x[1] if a.get("transA", 0) else x[0]
        k = x[0] if a.get("transA", 0) else x[1]
        b = ins[1]
        kb, n = (b[1], b[0]) if a.get("transB", 0) else (b[0], b[1])
        if k != kb:
            raise GraphError(f"node {node['name']} (Gemm): inner sizes differ, A {x} vs B {b}")
        return [[m, n]]
    if op == "Flatten":
        axis = a.get("axis", 1) % len(x) if x else 1
        lead = 1
        for d in x[:axis]:
            lead *= d
        rest = 1
        for d in x[axis:]:
            rest *= d
        return [[lead, rest]]
    if op == "BatchNormalization":
        return [list(x), [x[1]], [x[1]]]
    if op == "Dropout":
        return [list(x), list(x)]
    return [list(x)]  # Relu, LogSoftmax, Identity
