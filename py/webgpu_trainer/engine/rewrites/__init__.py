"""Graph rewrites ``Plan.build`` applies before it allocates, each the same numbers as the ops
it replaces and each behind a ``Builder`` flag (A/B): ``dropouts`` (a Dropout of ratio 0 ->
an Identity view), ``linears`` (MatMul of a weight, or of
its Transpose, + bias Add -> one Gemm between views), ``gelu`` (the erf GELU's five ops -> one
Gelu), ``weight_layouts`` (a Slice / Concat / Transpose chain over one weight -> one Gather),
``gather_joins`` (a node's several such Gathers over neighbouring weights -> one Gather and
views of its parts),
``splits`` (Gathers of every index of an activation's axis -> one Split), ``scales`` (a Mul by
a scalar constant next to a MatMul -> the product's scale), ``transposes`` (Transposes next to
MatMuls -> the product's strides), ``concats`` (Transposes and Expands read only by a
Concat -> the Concat's strides), ``attention`` (MatMul -> Softmax -> MatMul -> one
FusedAttention, an op type only rewrites make: ``ops.RUNS``).
Each takes and returns a ``graph.Graph`` (the same object when nothing changes) and leaves the
activation names in ``keep`` (what a caller reads after a step)."""


def sole_reader(graph, name, keep):
    """The one node that reads ``name``, when ``name`` is not the graph output nor in ``keep``;
    else None (what a rewrite may fold away)."""
    users = graph.consumers.get(name, [])
    if len(users) != 1 or name == graph.output or name in keep:
        return None
    return users[0]
