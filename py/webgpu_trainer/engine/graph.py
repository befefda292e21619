"""The model description (see docs/ARCHITECTURE.md) as a graph with static shapes.

Runs in Pyodide: standard library only. Shapes come from each op family's ``infer``
(``ops/``); ``supported()`` lists the ONNX op_types the engine trains.
"""

from .errors import GraphError
from .ops import OPS, RUNS
from .ops import embed as lookup
from .ops.layout_rules import with_batch

__all__ = ["Graph", "GraphError", "supported"]


class Graph:
    """Nodes, tensors and constants of a model description, and its shapes for a batch size.

    ``graph``: the JSON dict of ``onnx_io.load_bundle``. Raises GraphError listing every node
    whose op is not supported, before any GPU work. ``internal``: the graph of a rewrite
    (``engine/rewrites``), whose nodes may also be the op types only rewrites make
    (``ops.RUNS``).
    """

    def __init__(self, graph: dict, internal: bool = False):
        self.desc = graph
        self.name = graph.get("name", "model")
        self.nodes = graph["nodes"]
        self.tensors = {t["name"]: t for t in graph["tensors"]}
        self.constants = graph.get("constants", {})
        self.input = graph["inputs"][0]
        self.output = graph["outputs"][0]["name"]
        known = RUNS if internal else OPS
        bad = [f"{n['name']} ({n['op_type']})" for n in self.nodes
               if n["op_type"] not in known]
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
        lookup.check_indices(self)
        shapes = {name: list(t["shape"]) for name, t in self.tensors.items()}
        dims = [batch if not isinstance(d, int) else d for d in self.input["shape"]]
        shapes[self.input["name"]] = dims
        for name, c in self.constants.items():
            shapes[name] = list(c["shape"])
        for n in self.nodes:
            ins = [shapes.get(i) if i else None for i in n["inputs"]]
            consts = [self.constants[i]["values"] if i in self.constants else None
                      for i in n["inputs"]]
            if n["op_type"] == "Expand":  # an Expand to the batch (``batch_axes``)
                consts[1] = with_batch(n, consts[1], batch)
            try:
                outs = RUNS[n["op_type"]].infer(n, ins, consts)
            except GraphError:
                raise
            except (IndexError, KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
                raise GraphError(f"node {n['name']} ({n['op_type']}): cannot infer shape from "
                                 f"inputs {ins}: {exc!r}") from exc
            for name, shape in zip(n["outputs"], outs):
                if name:
                    shapes[name] = shape
        return shapes


def supported() -> tuple:
    """The ONNX op_types the engine trains (forward and backward), sorted."""
    return tuple(sorted(OPS))
