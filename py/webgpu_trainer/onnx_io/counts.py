"""Parameter counts of a bundle graph for the model list (:func:`model_summary`)."""
from __future__ import annotations

import math


def model_summary(graph: dict) -> dict:
    """Counts for the model list from a bundle graph (element counts, ints).

    Returns ``{"params", "trainable", "buffers", "total", "tensors", "nodes",
    "weights_nbytes"}``: ``params`` = elements of role "param" (what torch's
    ``sum(p.numel() for p in model.parameters())`` gives), ``trainable`` = the same (the engine
    trains every param), ``buffers`` = role "buffer" (BN running stats), ``total`` = both.
    """
    def numel(t: dict) -> int:
        return math.prod(int(d) for d in t["shape"])

    params = sum(numel(t) for t in graph["tensors"] if t["role"] == "param")
    buffers = sum(numel(t) for t in graph["tensors"] if t["role"] == "buffer")
    end = max((t["offset"] + t["nbytes"] for t in graph["tensors"]), default=0)
    return {"params": params, "trainable": params, "buffers": buffers,
            "total": params + buffers, "tensors": len(graph["tensors"]),
            "nodes": len(graph["nodes"]), "weights_nbytes": graph.get("weights_nbytes", end)}
