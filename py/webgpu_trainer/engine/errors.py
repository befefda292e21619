"""Errors of the engine, shared by graph.py and the op families (no imports: no cycles)."""


class GraphError(ValueError):
    """The model cannot be planned: names the node, its op and the problem."""
