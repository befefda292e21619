"""PyTorch's default parameter initialisation, the same bits on every engine and host.

What each parameter starts from is defined once, by its op family (``init(node, graph)`` in
``ops/conv.py``, ``gemm.py``, ``matmul.py``, ``batchnorm.py``, ``layernorm.py``): ``(tensor,
"uniform", fan_in)`` for torch's ``kaiming_uniform_(a=sqrt(5))`` weights and their biases,
both ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), or ``(tensor, "fill", value)`` (normalisation scale 1,
bias 0, running mean 0, running variance 1). Parameters no rule names keep the model's values;
the first rule naming a tensor wins (a weight shared by two nodes).

``rules(graph)`` turns those into ``Rule``s; the GPU (``Plan.init_weights``, shaders/init.wgsl)
and the numpy engine (``cpu.cpu_engine``, cpu/philox.py) apply them with the same generator,
Philox-4x32-10 keyed by the seed, one stream per tensor (its index in the bundle + 1), and the
same exact float32 mapping (``scale`` = float32(bound * 2^-23), see shaders/lib/philox.wgsl), so a
seed gives bit-identical initial weights in the browser, natively and on the CPU.

Example: SeedNet's first rules are ``Rule('conv1.weight', uniform, bound=0.333...)`` and
``Rule('conv1.bias', uniform, bound=0.333...)`` (fan_in 1 * 3 * 3).
"""

import math

from .ops import OPS


class Rule:
    """How tensor ``name`` starts: ``kind`` "uniform" (U[-bound, bound), ``scale`` = bound *
    2^-23 for the generator) or "fill" (every element ``value``); ``stream`` is the generator's
    stream of this tensor (its index in the bundle's tensors + 1)."""

    __slots__ = ("name", "kind", "stream", "bound", "value")

    def __init__(self, name: str, kind: str, stream: int, bound: float = 0.0,
                 value: float = 0.0):
        self.name, self.kind, self.stream = name, kind, stream
        self.bound, self.value = bound, value

    @property
    def scale(self) -> float:
        """bound * 2^-23 (exact in float64; rounded once to float32 by both engines)."""
        return self.bound / 8388608.0

    def __repr__(self):
        what = f"bound={self.bound!r}" if self.kind == "uniform" else f"value={self.value!r}"
        return f"Rule({self.name!r}, {self.kind}, {what})"


def uniform_bound(fan_in: int) -> float:
    """torch.nn.init.kaiming_uniform_(a=sqrt(5))'s bound, also the bias bound of nn.Linear /
    nn.Conv2d: gain sqrt(2 / (1 + 5)) * sqrt(3 / fan_in) = 1 / sqrt(fan_in)."""
    return 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0


def rules(graph) -> list:
    """The ``Rule`` of every parameter or buffer of ``graph`` (an ``engine.graph.Graph``) that
    PyTorch's default init defines, in graph order."""
    streams = {name: k + 1 for k, name in enumerate(graph.tensors)}
    out, seen = [], set()
    for node in graph.nodes:
        family = OPS.get(node["op_type"])
        for name, kind, v in getattr(family, "init", lambda n, g: [])(node, graph):
            if name in seen:
                continue
            seen.add(name)
            if kind == "uniform":
                out.append(Rule(name, kind, streams[name], bound=uniform_bound(v)))
            else:
                out.append(Rule(name, kind, streams[name], value=float(v)))
    return out
