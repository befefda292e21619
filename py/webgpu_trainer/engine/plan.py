"""The compiled training step: every buffer, pipeline and bind group built once.

``Plan.build`` turns a ``Graph`` and a batch size into lists of dispatches (forward in training
and eval mode, loss, backward) over buffers allocated once. The trainer wraps them with the data
and optimizer dispatches into programs and replays one program per step, so per-step Python work
is O(1) bridge calls. Weights, running statistics and gradients live in two flat buffers laid out
exactly like the bundle's weight blob (``P`` and ``G``); ``owners`` marks trainable elements.
"""

import math
import struct

from .backends.base import groups_1d, round_up
from .builder import Builder, Tensor
from .graph import Graph
from . import fusion, init, pool
from .rewrites import (attention, concats, dropouts, gather_joins, gelu, linears, scales,
                       splits, transposes, weight_layouts)
from .ops import RUNS, VIEWS, losses, softmax

METRICS_RING = 64  # metrics slots (loss, accuracy) kept on the GPU between readbacks
STEP_BYTES = 32  # the Step uniform (shaders/lib/step.wgsl)
# The loss (or the LogSoftmax head the loss reads) as a use of the graph output: an output that
# other nodes read too gets one gradient buffer per use, summed, like any tensor.
LOSS_USE = {"name": "loss/use", "op_type": "Loss", "inputs": [], "outputs": [None]}


def pack_step(step: int, offset: int, seed: int, lr: float, a=(0.0, 0.0, 0.0)) -> bytes:
    """The 32-byte ``Step`` uniform of shaders/lib/step.wgsl for optimizer step ``step`` (1-based):
    batch ``offset`` into the epoch order, ``seed`` (taken mod 2**32), the metrics slot
    ``(step - 1) % METRICS_RING``, learning rate ``lr`` and the optimizer scalars ``a`` (a0..a2,
    ``optim.Optimizer.scalars``)."""
    slot = (max(step, 1) - 1) % METRICS_RING
    return struct.pack("<IIIIffff", step, offset, seed & 0xFFFFFFFF, slot, lr, *a)


class Plan:
    """Buffers and dispatch lists of one model at one batch size. Build with ``await
    Plan.build(dev, graph, batch, loss=spec)`` (``spec``: see ``ops/losses.py``; None = "auto":
    NLLLoss(mean) after a final LogSoftmax, NLL of log(output) after a final Softmax, else
    CrossEntropyLoss(mean)); ``loss_spec`` is the resolved spec. ``fwd_train``, ``fwd_eval``,
    ``head`` (the LogSoftmax the plan adds over the raw output when the model does not end in
    one, for evaluation; over the final Softmax's input ``scores`` for nll_log; else empty),
    ``loss`` (the loss on the raw output with its gradient and the metrics), ``bwd`` are lists of
    ``(pipeline, bind_group, workgroups)``. ``acts[logp]`` holds the log-probabilities after
    ``head``; ``loss_input`` names the activation the loss reads (``logp`` for
    cross_entropy, the raw output otherwise). ``weights``: an existing flat weight buffer to use
    as ``P`` (an eval-only plan reading another plan's weights, ``GpuEngine.probe``).
    ``keep_acts``: activation names the caller reads after a step, which the plan's folds
    (``linears``, ``gelu``, ``weight_layouts``, ``splits``, ``scales``, ``transposes``,
    ``concats``: ``graph`` is then the folded model, ``source`` the one given) keep."""

    @classmethod
    async def build(cls, dev, graph: Graph, batch: int, trainable=None, loss=None,
                    weights=None, keep_grads=(), keep_acts=()):
        self = cls()
        self.source = graph  # the model as given: init rules, names (the plan may fold)
        keep = set(keep_acts) | (set(keep_grads) if keep_grads is not True else set())
        if Builder.FOLD_DROPOUTS:
            graph = dropouts.fold(graph, graph.shapes(batch), keep)
        if Builder.FOLD_LINEARS:
            graph = linears.fold(graph, graph.shapes(batch), keep)
        if Builder.FOLD_GELU:
            graph = gelu.fold(graph, graph.shapes(batch), keep)
        if Builder.FOLD_WEIGHT_LAYOUTS:
            graph = weight_layouts.fold(graph, graph.shapes(batch), keep)
        if Builder.JOIN_WEIGHT_GATHERS:
            graph = gather_joins.fold(graph, graph.shapes(batch), keep)
        if Builder.FOLD_SPLITS:
            graph = splits.fold(graph, graph.shapes(batch), keep)
        if Builder.FOLD_SCALES:
            graph = scales.fold(graph, graph.shapes(batch), keep)
        if Builder.FOLD_TRANSPOSES:
            graph = transposes.fold(graph, graph.shapes(batch), keep)
        if Builder.FOLD_CONCAT_READS:
            graph = concats.fold(graph, graph.shapes(batch), keep)
        if Builder.FUSE_ATTENTION:
            graph = attention.fold(graph, graph.shapes(batch), keep,
                                   min_rows=Builder.ATTENTION_MIN_ROWS)
        self.dev, self.graph, self.batch = dev, graph, batch
        self.keep_grads, self.keep_acts = keep_grads, set(keep_acts)
        self.shapes = graph.shapes(batch)
        self.loss_request = loss
        wbytes = round_up(max(graph.weight_nbytes(), 16), 4)
        # P and G as whole vec4s (adam_vec4.wgsl reads them so); wbytes of them are the blob's
        self.P = weights if weights is not None else dev.buffer(round_up(wbytes, 16), "weights")
        self.G = dev.buffer(round_up(wbytes, 16), "grads")
        self.step = dev.buffer(STEP_BYTES, "step", uniform=True)
        self.metrics = dev.buffer(8 * METRICS_RING, "metrics")
        self.wbytes = wbytes
        self.weights = {n: Tensor(t["shape"], self.P, t["offset"])
                        for n, t in graph.tensors.items()}
        # a span (rewrites/weight_layouts) trains when any of its members does
        self.trainable = {n for n, t in graph.tensors.items() if t["role"] == "param"
                          and (trainable is None or n in trainable or
                               any(m in trainable for m in t.get("members", ())))}
        self.const_tensors = {}
        self._allocate()
        self.fused_relu = fusion.relu_forwards(self)
        self.relu_grad_fused = fusion.relu_grads(self)
        self.relu_sum_fused = fusion.relu_sums(self)
        self.clip_fused = fusion.clips_after(self)
        for clip, _, _ in self.clip_fused.values():  # never made: the layer reads dClip's
            self.grads.pop(clip["inputs"][0], None)
        self.gelu_grad_fused = fusion.gelu_grads(self)
        for _, chain in self.gelu_grad_fused.values():  # never made: the Gemm writes dt
            for name in chain:
                self.grads.pop(name, None)
        b = self.builder = Builder(self)
        b.pooling = Builder.POOL
        for mode in ("train", "eval"):
            b.current = []
            for node in graph.nodes:
                if node["op_type"] in RUNS:
                    await RUNS[node["op_type"]].forward(b, node, self._ins(node), self._outs(node),
                                                       mode == "train")
            setattr(self, f"fwd_{mode}", b.current)
        b.current = []
        if self.head_node:  # log-probabilities for evaluation (and CrossEntropy's LogSoftmax)
            await softmax.forward(b, self.head_node, [self.acts[self.scores]],
                                  [self.acts[self.logp]], True)
        self.head = list(b.current)
        spec, src = self.loss_spec, self.acts[self.loss_input]
        dscores = self._grad_of(self.scores, self.final_softmax, 0) if self.final_softmax \
            else self._grad_of(self.scores, self._loss_use(self.scores))
        head_backward = self.loss_input == self.logp and self.head_node is not None \
            and dscores is not None
        # A LogSoftmax's backward inside the loss's dispatch (losses.nll_loss
        # through_log_softmax): the head's, or the model's own final one under "nll".
        through, dz = self._loss_through(b, src, dscores if head_backward else None)
        self.loss_through = through
        also = None
        if through is self.head_node and through is not None:  # no d loss / d logp buffer
            self.grads.pop(self.logp, None)
        # Where the loss writes its gradient: a scratch buffer when nothing upstream trains.
        dsrc = self._grad_of(self.loss_input, self._loss_use(self.loss_input))
        if through is not None:
            dsrc, also = dz, (dsrc if through is not self.head_node else None)
        dsrc = dsrc or Tensor(src.shape, b.scratch(src.numel))
        # CrossEntropy = the head's LogSoftmax, then NLL (on GPU adapters both in the loss's
        # one dispatch: losses.takes_scores); the others read the raw output.
        scores = self.acts[self.scores] if through is not None and through is self.head_node \
            and losses.takes_scores(b, *src.shape) else None  # (``also`` is None then)
        b.current = list(self.head) if self.loss_input == self.logp and scores is None else []
        if spec["loss"] in ("cross_entropy", "nll", "nll_log"):
            await losses.nll_loss(b, spec, src, self.labels, dsrc, self.metrics,
                                  self.class_weight, through_log_softmax=through is not None,
                                  also_dlogp=also, scores=scores)
        else:
            await losses.elementwise_loss(b, spec, src, self.labels, dsrc, self.metrics)
        self.loss = b.current
        b.current = []
        if head_backward and through is None:
            await softmax.backward(b, self.head_node, [self.acts[self.scores]],
                                   [self.acts[self.logp]], [dscores], [self.grads[self.logp]])
        for node in reversed(graph.nodes):
            for o in node["outputs"]:
                if o in self.contrib_of:
                    await self._sum_contributions(b, o, self.grads[o])
            if node is not through and (any(self.grads.get(o) for o in node["outputs"] if o)
                                        or self.clip_grad(node) is not None):
                await RUNS[node["op_type"]].backward(
                    b, node, self._ins(node), self._outs(node),
                    [self._grad_of(name, node, k) for k, name in enumerate(node["inputs"])],
                    [self.grads.get(o) for o in node["outputs"]])
        for name in self.weights:
            if name in self.contrib_of:
                await self._sum_contributions(b, name, self._grad_of(name))
        self.bwd = b.current
        self.grad_pool = pool.resolve(dev, [self.fwd_train, self.loss, self.bwd,
                                            self.fwd_eval, self.head],
                                      [*self.grads.values(), *self.contrib.values()],
                                      b.POOL_OFFSETS)
        b.pooling = False
        return self

    def clip_grad(self, node):
        """The output gradient of the Clip that ``node`` runs (``fusion.clips_after``), or
        None."""
        fused = self.clip_fused.get(node["name"])
        return None if fused is None else self.grads.get(fused[0]["outputs"][0])

    def _loss_through(self, b, src, dscores):
        """``(node, dz)``: the LogSoftmax whose backward the loss's dispatch does and where
        it writes that LogSoftmax's input gradient, else ``(None, None)``. ``dscores``: the
        head's input gradient when the head's backward would run. Otherwise, under "nll", the
        model's own final LogSoftmax when the loss alone reads its output and its input gets
        a gradient (the loss then writes both gradients). Rows short enough for the loss's one
        workgroup, and on CPU adapters the rows its backward would sum in order
        (``losses.fuses_head``); ``Builder.FUSE_LOSS_HEAD``."""
        if not Builder.FUSE_LOSS_HEAD or self.loss_spec["loss"] not in (
                "cross_entropy", "nll", "nll_log") or not losses.fuses_head(b, *src.shape):
            return None, None
        if dscores is not None:
            return self.head_node, dscores
        g = self.graph
        node = g.producer.get(g.output)
        if (self.loss_spec["loss"] != "nll" or self.head_node is not None or node is None
                or losses.final_op(g.desc) != "LogSoftmax"
                or g.consumers.get(g.output)):
            return None, None
        dz = self._grad_of(node["inputs"][0], node, 0)
        return (node, dz) if dz is not None else (None, None)

    def _gbuf(self, nbytes: int, label: str):
        """The gradient buffer named ``label``: a ``pool.Slot`` shared with gradients live at
        other times (``_allocate`` keeps those ``keep_grads`` names in buffers of their own)."""
        if not Builder.POOL:
            return self.dev.buffer(nbytes, label)
        return pool.Slot(nbytes, label)

    async def _sum_contributions(self, b, name, total):
        """total = sum of the gradient contributions of every use of ``name``; masked by
        ``name`` > 0 when ``name`` is a ReLU's output whose backward is fused here."""
        parts = self.contrib_of[name]
        n = total.numel
        mask = name in self.relu_sum_fused
        relu_out = self.acts[name] if mask else None
        last = len(parts) == 2
        await b.kernel("elementwise", "add_to", b.elementwise_groups(n),
                       params={"n": n, "mask": int(mask and last)}, a=total, b=parts[0],
                       c=parts[1], d=relu_out if last else None)
        for k, part in enumerate(parts[2:], 3):
            last = k == len(parts)
            await b.kernel("elementwise", "accumulate", b.elementwise_groups(n),
                           params={"n": n, "mask": int(mask and last)}, a=total, b=part,
                           d=relu_out if last else None)

    def _ins(self, node):
        return [self.acts.get(i) or self.weights.get(i) or self._constant(i) if i else None
                for i in node["inputs"]]

    def _constant(self, name):
        """A constant of the model description as a float32 device tensor (made once)."""
        c = self.graph.constants.get(name)
        if c is None:
            return None
        if name not in self.const_tensors:
            values = [float(v) for v in c["values"]]
            t = Tensor(c["shape"], self.dev.buffer(4 * max(len(values), 1), name))
            if values:
                self.dev.write(t.buf, struct.pack(f"<{len(values)}f", *values))
            self.const_tensors[name] = t
        return self.const_tensors[name]

    def _outs(self, node):
        return [self.acts.get(o) if o else None for o in node["outputs"]]

    def _loss_use(self, name):
        """``LOSS_USE`` when ``name`` is the graph output (the loss's use of it), else None."""
        return LOSS_USE if name == self.graph.output else None

    def _grad_of(self, name, node=None, k=0):
        """Where the backward of ``node`` writes the gradient of its input ``k`` (``name``):
        the tensor's gradient, or this use's own buffer when ``name`` has several uses."""
        if not name:
            return None
        if node is not None and (node["name"], k) in self.contrib:
            return self.contrib[(node["name"], k)]
        if name in self.weights:
            return Tensor(self.weights[name].shape, self.G, self.weights[name].offset) \
                if name in self.trainable else None
        return self.grads.get(name)

    def _allocate(self):
        """Activation buffers (ReLU in place, Flatten/Identity as views), the loss head's and
        their gradients, allocated in that order."""
        needs = self._allocate_acts()
        self._allocate_loss()
        self._allocate_grads(needs)
        keep = self.keep_grads
        for name, t in self.grads.items():  # what the caller reads after the step
            if isinstance(t.buf, pool.Slot) and (keep is True or name in keep):
                t.buf.keep = True

    def _allocate_acts(self) -> set:
        """The input, label and activation buffers (ReLU in place, Flatten/Identity as views);
        returns the names of the tensors that need a gradient."""
        g, dev, shapes = self.graph, self.dev, self.shapes
        inp = g.input["name"]
        self.input = Tensor(shapes[inp], dev.buffer(4 * math.prod(shapes[inp]), inp))
        self.labels = Tensor([self.batch], dev.buffer(4 * self.batch, "labels"))
        self.acts = {inp: self.input}
        needs = set()
        for node in g.nodes:
            ins = [i for i in node["inputs"] if i]
            if any(i in needs or i in self.trainable for i in ins):
                needs.update(o for o in node["outputs"] if o)
            for k, out in enumerate(node["outputs"]):
                if not out or out in self.acts:
                    continue
                src = self.acts.get(node["inputs"][0])
                part = self._split_part(node, k, src)
                if part is not None:  # a part of a Split: a view into its input
                    self.acts[out] = Tensor(shapes[out], src.buf, src.offset + part)
                    continue
                if src is None and k == 0 and node["op_type"] in VIEWS:
                    src = self.weights.get(node["inputs"][0])  # a view of a weight: in P
                alias = k == 0 and src is not None and (
                    node["op_type"] in VIEWS or (
                        node["op_type"] == "Relu" and src.buf is not self.input.buf
                        and src.buf is not self.P and self._sole_reader(node["inputs"][0])))
                if alias:
                    self.acts[out] = Tensor(shapes[out], src.buf, src.offset)
                elif node["op_type"] == "BatchNormalization" and k > 0:
                    continue  # running statistics outputs: updated in place in P
                elif node["op_type"] == "Dropout" and k > 0:
                    continue  # mask output: not materialised
                else:
                    self.acts[out] = Tensor(shapes[out],
                                            dev.buffer(4 * math.prod(shapes[out]), out))
        return needs

    def _allocate_loss(self):
        """The loss spec, its class weights and the LogSoftmax head the plan adds."""
        g, dev, shapes = self.graph, self.dev, self.shapes
        # The loss (ops/losses.py) on the raw output [batch, classes]: "auto" = NLLLoss(mean)
        # when the model ends in LogSoftmax, NLL of log(output) when it ends in Softmax, else
        # CrossEntropyLoss(mean). CrossEntropy is the NLL (with label smoothing) of a
        # LogSoftmax the plan adds over the raw output (``scores``); that LogSoftmax also gives
        # the evaluation its log-probabilities when the model has none. For nll_log the
        # LogSoftmax reads the final Softmax's input z instead (log(softmax(z)) fused): the
        # Softmax then gets no gradient and the LogSoftmax's backward feeds z.
        if len(shapes[g.output]) != 2:
            raise NotImplementedError(f"output {g.output} has shape {shapes[g.output]}: "
                                      "the losses need [batch, classes]")
        ends_in = losses.final_op(g.desc)
        classes = shapes[g.output][1]
        self.loss_spec = spec = losses.resolve(self.loss_request, ends_in, classes)
        self.class_weight = None
        if spec["weight"] is not None:
            self.class_weight = Tensor([classes], dev.buffer(4 * classes, "loss.weight"))
            dev.write(self.class_weight.buf, struct.pack(f"<{classes}f", *spec["weight"]))
        self.head_node = None
        self.scores = self.logp = self.loss_input = g.output
        self.final_softmax = None  # the Softmax node nll_log reads through
        if spec["loss"] == "nll_log":
            self.final_softmax = g.producer[g.output]
            self.scores = self.final_softmax["inputs"][0]
        if ends_in != "LogSoftmax" or spec["loss"] in ("cross_entropy", "nll_log"):
            self.logp = "loss/log_softmax"
            if spec["loss"] in ("cross_entropy", "nll_log"):
                self.loss_input = self.logp
            self.head_node = {"name": "loss/LogSoftmax", "op_type": "LogSoftmax",
                              "inputs": [self.scores], "outputs": [self.logp],
                              "attrs": {"axis": 1}}
            self.acts[self.logp] = Tensor(shapes[g.output],
                                          dev.buffer(4 * math.prod(shapes[g.output]), self.logp))

    def _allocate_grads(self, needs):
        """Gradient buffers of the tensors in ``needs`` and of the trainable parameters' uses."""
        g, shapes = self.graph, self.shapes
        # Uses of each tensor that needs a gradient; a tensor used more than once gets one
        # gradient buffer per use (contrib), summed before its producer's backward runs.
        uses: dict = {}
        for node in g.nodes:
            for k, name in enumerate(node["inputs"]):
                if name and (name in needs or name in self.trainable):
                    uses.setdefault(name, []).append((node, k))
        if g.output in needs and self.final_softmax is None:  # the loss reads the output
            uses.setdefault(g.output, []).insert(0, (LOSS_USE, 0))
        multi = {name for name, u in uses.items() if len(u) > 1}
        shared: dict = {}  # Add output -> the gradient buffer of its single-use inputs
        self.contrib, self.contrib_of = {}, {}
        self.grads = {}
        if self.loss_input == self.logp and self.head_node:
            self.grads[self.logp] = Tensor(shapes[g.output], self._gbuf(
                4 * math.prod(shapes[g.output]), "dlogp"))
        for node in g.nodes:
            for k, out in enumerate(node["outputs"]):
                if (k and not fusion.card_says(node, "GRAD_EVERY_OUTPUT")) or out not in needs \
                        or out not in self.acts or node is self.final_softmax:
                    continue
                src = node["inputs"][0]
                part = self._split_part(node, k, self.acts.get(src))
                if part is not None and src in self.grads and src not in multi:
                    # a Split part's gradient: its place in the input's (the Split then
                    # writes nothing for it, ops/layout.py)
                    self.grads[out] = Tensor(self.shapes[out], self.grads[src].buf,
                                             self.grads[src].offset + part)
                elif self.acts[out].buf is self.acts.get(src, Tensor([], None)).buf and \
                        src in self.grads and src not in multi:
                    self.grads[out] = Tensor(self.shapes[out], self.grads[src].buf,
                                             self.grads[src].offset)
                elif node["op_type"] in VIEWS and k == 0 and src in self.trainable and \
                        src not in multi:  # a weight's only use is this view: its part of G
                    self.grads[out] = Tensor(self.shapes[out], self.G, self.weights[src].offset)
                else:
                    self.grads[out] = Tensor(self.shapes[out], self._grad_buffer(
                        out, uses, shared))
        self.addends = {}
        for name in multi:
            shape = self.shapes[name]
            self.contrib_of[name] = []
            first = self._sums_in_backward(name, uses[name])
            for node, k in uses[name]:
                out = node["outputs"][0]
                if first and (node, k) == uses[name][0]:
                    part = None  # decided below, once the other use's part is known
                elif node["op_type"] in VIEWS and k == 0 and out in self.grads:
                    part = self.grads[out]  # a view's contribution is its output gradient
                elif fusion.passes_grad(node, self.shapes, k) and out in self.grads:
                    part = self.grads[out]  # so is a residual Add's (ops/binary.py skips it)
                else:
                    part = Tensor(shape, self._gbuf(4 * math.prod(shape),
                                                    f"d{name}@{node['name']}"))
                self.contrib[(node["name"], k)] = part
                self.contrib_of[name].append(part)
            if first:
                self._first_sums(name, uses[name][0], shape)

    def _first_sums(self, name, use, shape):
        """Make the first reader ``use`` (node, input index) of ``name`` write the sum of the
        two uses' gradients into ``name``'s gradient, reading the other use's part as its
        addend (``addends``); unless that part is the reader's own output gradient (y = h +
        LayerNorm(h): the Add passes dY to both), which one dispatch cannot bind twice: then
        the reader gets a buffer of its own and the parts are added as before."""
        node, k = use
        other = self.contrib_of[name][1]
        dy = self.grads.get(node["outputs"][0])
        if dy is None or other.buf is dy.buf:
            own = Tensor(shape, self._gbuf(4 * math.prod(shape), f"d{name}@{node['name']}"))
            self.contrib[(node["name"], k)] = self.contrib_of[name][0] = own
            return
        self.contrib[(node["name"], k)] = self.contrib_of[name][0] = self.grads[name]
        self.addends[(node["name"], k)] = self.contrib_of.pop(name)[1]

    def _sums_in_backward(self, name, uses) -> bool:
        """Whether the first reader of ``name`` (the last backward among its ``uses``, [(node,
        input index)] in graph order) writes the sum of the two uses' gradients itself: two
        uses of an activation by different nodes, the first an op whose card says
        GRAD_ADDEND at input 0 (``Builder.grad_addend`` hands it the second's gradient),
        ``name`` not an in-place ReLU's output (whose sum masks, ``fusion.relu_sums``).
        ``Builder.SUM_IN_BACKWARD``; False: elementwise add_to (A/B)."""
        if not Builder.SUM_IN_BACKWARD or len(uses) != 2 or name not in self.grads:
            return False
        (node, k), (other, _) = uses
        made = self.graph.producer.get(name)
        if node is LOSS_USE or other is node or k != 0 or made is None or \
                not fusion.card_says(node, "GRAD_ADDEND"):
            return False
        return not (made["op_type"] == "Relu" and
                    self.acts[name].buf is self.acts[made["inputs"][0]].buf)

    def _grad_buffer(self, name, uses, shared):
        """A gradient buffer of its own for tensor ``name``, or, when its one use is an Add
        that passes its gradient through (``fusion.passes_grad``), directly or through views
        (``_passing_add``), the buffer of that Add's output gradient (``shared``: Add output
        -> buffer, made by the first of its inputs; the Add's backward then writes nothing
        for it, ops/binary.py). ``uses``: tensor -> its [(node, input index)]."""
        mine = shared.get(name)
        add = self._passing_add(name, uses)
        if add is not None:
            total = add["outputs"][0]
            if total not in shared:
                shared[total] = mine or self._gbuf(4 * math.prod(self.shapes[total]),
                                                   "d" + total)
            if mine is None or mine is shared[total]:
                return shared[total]
        return mine or self._gbuf(4 * math.prod(self.shapes[name]), "d" + name)

    def _passing_add(self, name, uses):
        """The Add that passes its output gradient through (``fusion.passes_grad``) to
        ``name``: the one use of ``name``, or of the last of a chain of views from it (each
        view the one use of the tensor before it, its output that tensor's buffer: a
        Linear's product reshaped back to tokens before a residual Add), else None. The views'
        gradients are then that buffer too (``_allocate_grads``), so the Add copies nothing.
        ``Builder.GRAD_THROUGH_VIEWS`` False: the Add's own inputs only (A/B)."""
        for _ in range(16):
            u = uses.get(name, [])
            if len(u) != 1:
                return None
            node, k = u[0]
            if fusion.passes_grad(node, self.shapes, k):
                return node
            out = node["outputs"][0] if node["outputs"] else None
            act, view = self.acts.get(name), self.acts.get(out)
            if (not Builder.GRAD_THROUGH_VIEWS or node["op_type"] not in VIEWS or k != 0
                    or act is None or view is None or view.buf is not act.buf
                    or view.offset != act.offset):
                return None
            name = out
        return None

    def _split_part(self, node, k, src):
        """The byte offset of output ``k`` of ``node`` in its input ``src`` when ``node`` is a
        Split whose outputs can be views of the input (``fusion.split_offsets``; the input an
        activation, every part's offset a multiple of 256 bytes), else None."""
        if node["op_type"] != "Split" or src is None or src.buf is self.P or \
                not Builder.SPLIT_VIEWS:
            return None
        offs = fusion.split_offsets(node, self.shapes, self.graph.constants)
        if offs is None or any((src.offset + o) % 256 for o in offs):
            return None
        return offs[k]

    def _sole_reader(self, name) -> bool:
        """Whether one node reads the data of ``name``: counting the readers of every tensor
        that shares its buffer through views (Flatten, Reshape, ..., a Split's parts), so an
        in-place ReLU never overwrites what another node still reads. The model output is
        never overwritten."""
        g = self.graph
        root = name
        while root in g.producer and (g.producer[root]["op_type"] in VIEWS or self._split_part(
                g.producer[root], 0, self.acts.get(g.producer[root]["inputs"][0])) is not None):
            root = g.producer[root]["inputs"][0]

        def readers(t):
            if t == g.output:
                return 2
            count = 0
            for c in g.consumers.get(t, []):
                for k, i in enumerate(c["inputs"]):
                    if i != t:
                        continue
                    if c["op_type"] in VIEWS and k == 0:
                        count += readers(c["outputs"][0])
                    elif k == 0 and self._split_part(c, 0, self.acts.get(t)) is not None:
                        count += sum(readers(o) for o in c["outputs"] if o)
                    else:
                        count += 1
            return count
        return readers(root) == 1

    def owners(self, index: dict | None = None) -> tuple[int, bytes]:
        """The update's ``mask`` (shaders/optim.wgsl ``owner``): one u32 per block of
        2**``shift`` weight elements, 0 where the block holds no trainable element (buffers,
        frozen tensors, padding), else ``(1 + index[name]) << 7 | count`` (``index``: the
        guard's tensor indices; None: 0 for every tensor) for the tensor whose elements are the
        block's first ``count``. ``shift`` is the largest up to 6 (64 elements: the weight
        blob's 256-byte alignment, onnx_io ALIGN) that every trainable tensor's element offset
        is a multiple of, so no block holds two tensors. Returns ``(shift, bytes)``: 1/64 of
        a float per element where the blob is aligned. Raises ValueError past 2^25 tensors, or
        when two trainable tensors (spans' members aside) overlap in the blob."""
        own = sorted((self.graph.tensors[n] for n in self.trainable
                      if "members" not in self.graph.tensors[n]), key=lambda t: t["offset"])
        shift = 6
        for t in own:
            while (t["offset"] // 4) % (1 << shift):
                shift -= 1
        size = 1 << shift
        out = bytearray(4 * -(-(self.wbytes // 4) // size))
        for before, t in zip(own, own[1:]):
            if t["offset"] < before["offset"] + before["nbytes"]:
                raise ValueError(f"trainable tensors {before['name']} and {t['name']} overlap "
                                 f"in the weight blob (byte offsets {before['offset']} and "
                                 f"{t['offset']})")
        for t in own:
            k = (index or {}).get(t["name"], 0)
            if k + 1 >= 1 << 25:
                raise ValueError(f"{k + 1} trainable tensors: the update's mask holds < 2^25")
            first, count = t["offset"] // 4 // size, t["nbytes"] // 4
            full, rest = divmod(count, size)
            out[4 * first:4 * (first + full)] = struct.pack("<I", (k + 1) << 7 | size) * full
            if rest:
                struct.pack_into("<I", out, 4 * (first + full), (k + 1) << 7 | rest)
        return shift, bytes(out)

    async def init_weights(self, seed: int):
        """PyTorch's default init of every parameter an op family defines it for
        (``init.rules``), drawn on the GPU by shaders/init.wgsl from Philox keyed by ``seed``:
        the bits the numpy engine draws too. Other parameters keep the model's values."""
        b = self.builder
        b.current = []
        for rule in init.rules(self.source):
            t = self.weights[rule.name]
            if rule.kind == "uniform":
                await b.kernel("init", "uniform_fill", groups_1d((t.numel + 3) // 4),
                               params=dict(n=t.numel, seed=seed, stream=rule.stream,
                                           value=rule.scale), out=t)
            else:
                await b.kernel("init", "fill", groups_1d(t.numel),
                               params=dict(n=t.numel, seed=0, stream=0, value=rule.value), out=t)
        self.dev.submit([self.dev.program(b.current)])
