"""What op families build with: ``Tensor`` (a view of a device buffer with its shape) and the
plan's ``Builder`` (``await b.kernel(...)`` appends one dispatch; scratch, saved tensors, the
adapter-dependent kernel choices such as ``TILED``). ``plan.py`` owns both."""

from . import pool
from .backends import shaders
from .errors import OffsetLimitError
from .backends.base import View, groups_1d


class Tensor:
    """A tensor on the device: ``shape`` (list of int), float32 or uint32, in ``buf`` at byte
    ``offset`` (a multiple of 256 when nonzero)."""

    __slots__ = ("shape", "buf", "offset", "numel")

    def __init__(self, shape, buf, offset=0):
        self.shape, self.buf, self.offset = list(shape), buf, offset
        n = 1
        for d in self.shape:
            n *= d
        self.numel = n

    @property
    def nbytes(self) -> int:
        return 4 * self.numel

    def binding(self):
        return View(self.buf, self.offset, self.nbytes) if self.offset or self.numel == 0 \
            else View(self.buf, 0, max(self.nbytes, 4))


class Builder:
    """What op functions see: ``await b.kernel(...)`` appends one dispatch to ``b.current``."""

    def __init__(self, plan):
        self.plan = plan
        self.dev = plan.dev
        self.current = []
        self.P, self.G, self.step = plan.P, plan.G, plan.step
        self.dummy = plan.dev.buffer(16, "dummy")
        self.dummy_u32 = plan.dev.buffer(16, "dummy_u32")
        self.sink = plan.dev.buffer(16, "sink")  # placeholders of unbound slots (kernel)
        self._sinks = {}  # binding -> sink: Dawn refuses two writable bindings of one buffer
        self._saves: dict = {}
        self.save_sizes: dict = {}
        self._temps = {}

    def unread(self, name) -> bool:
        """Whether nothing reads activation ``name`` after the op writing it: no node of the
        plan's graph, not the graph output, not a name the caller keeps (``keep_acts``). An
        op may then leave such an output unwritten (an LSTM's Y_h / Y_c a model ignores)."""
        plan = self.plan
        graph = plan.graph
        return bool(name) and not graph.consumers.get(name) and name != graph.output and \
            name not in getattr(plan, "keep_acts", ())

    def fused(self, node) -> frozenset:
        """Which of a ReLU's passes the plan fused across ``node`` and an in-place Relu next to
        it: "forward" (a FUSES_RELU_FORWARD op applies the Relu after it; for that Relu: its
        producer did), "backward" (a TAKES_RELU_GRAD op masks its input gradient by the Relu
        before it; for that Relu: its consumer did, or the sum of its uses' gradients,
        ``fusion.relu_sums``). Empty when nothing was fused."""
        plan, name, out = self.plan, node["name"], set()
        if node["op_type"] == "Relu":
            producer = plan.graph.producer.get(node["inputs"][0], {}).get("name")
            if producer in plan.fused_relu:
                out.add("forward")
            if name in plan.relu_grad_fused.values() or name in plan.relu_sum_fused.values():
                out.add("backward")
        else:
            if name in plan.fused_relu:
                out.add("forward")
            if name in plan.relu_grad_fused:
                out.add("backward")
        return frozenset(out)

    async def kernel(self, shader, entry, groups, *, params: dict, constants: dict | None = None,
                     **slots):
        """Build (once) and record one dispatch of ``entry`` in ``shaders/<shader>.wgsl`` over
        ``groups`` workgroups, specialised by the WGSL ``override`` ``constants``.

        ``params`` sets the fields of the shader's ``struct Params`` by name (packed by
        ``shaders.pack``); ``slots`` bind the other group-0 variables by their WGSL names, each
        a ``Tensor``, a buffer or a ``View``. A storage slot left out (or given None) gets a
        placeholder: ``dummy_u32`` for ``u32`` elements, else ``dummy`` (read-only) or
        a ``sink`` of its own per binding (read_write). Example::

            await b.kernel("unary", "unary_forward", groups_1d(n), params=dict(n=n, op=1, ...),
                           x=ins[0], out=outs[0])

        Raises ParamsError naming the shader and the field or slot that does not fit;
        OffsetLimitError naming the largest bound tensor when a count does not fit 32 bits
        (a batch too large: the error the trainer's Start and the memory estimate show).
        """
        pipe = await self.dev.pipeline(shader, entry, constants)
        try:
            data = shaders.pack(shader, params)
        except shaders.ParamsRangeError as exc:
            tensors = [t for t in slots.values() if isinstance(t, Tensor)]
            if exc.value < 0 or not tensors:
                raise
            big = max(tensors, key=lambda t: t.numel)
            raise OffsetLimitError(self._name(big), big.nbytes, getattr(self.plan, "batch", None),
                                   exc.value) from None
        ubuf = self.dev.buffer(len(data), f"{shader}.{entry}.params", uniform=True)
        self.dev.write(ubuf, data)
        binds, layout = [], shaders.slots(shader)
        for binding, kind, name, wgsl in layout:
            buf = slots.pop(name, None)
            if binding == 0:
                if buf is not None or kind != "uniform":
                    raise shaders.ParamsError(f"shader {shader!r}: binding 0 must be the "
                                              f"uniform Params, set through params=")
                buf = ubuf
            elif buf is None:
                if kind == "uniform":
                    raise shaders.ParamsError(f"shader {shader!r}: uniform slot {name!r} "
                                              "is not bound")
                buf = self.dummy_u32 if "u32>" in wgsl else \
                    self._sink(binding, shader) if kind == "storage" else self.dummy
            binds.append(buf.binding() if isinstance(buf, Tensor) else buf)
        if slots:
            names = ", ".join(name for _, _, name, _ in layout[1:])
            raise shaders.ParamsError(f"shader {shader!r}: no binding named "
                                      f"{sorted(slots)[0]!r} (slots: {names})")
        if pool.names_slot(binds):  # a shared gradient buffer: bound once the plan is built
            self.current.append(pool.Pending(pipe, binds, groups,
                                             [kind == "storage" for _, kind, _, _ in layout]))
        else:
            self.current.append((pipe, self.dev.bind(pipe, binds), groups))

    def _name(self, t: Tensor) -> str:
        """The plan's name of tensor ``t`` (an activation, "d" + one for its gradient, a
        weight), else its buffer's label (a shared buffer's without "pool.<k>:"), else its
        shape."""
        for prefix, table in (("", "acts"), ("d", "grads"), ("", "weights")):
            for name, x in getattr(self.plan, table, {}).items():
                if x.buf is t.buf and x.offset == t.offset:
                    return prefix + name
        label = str(getattr(t.buf, "label", "") or "")
        return label.split(":", 1)[-1] if label else str(t.shape)

    def _sink(self, binding: int, shader: str = ""):
        """The placeholder of an unbound read_write slot: one buffer per binding index, as
        WebGPU refuses a dispatch whose writable bindings alias (loss.wgsl: metrics, rows);
        with ``SINK_PER_DISPATCH`` (GPU adapters) a 16-byte buffer of the dispatch's own, so
        that no two dispatches write one buffer they do not share otherwise (a shared sink is
        a write-after-write hazard: the backend orders the dispatches by a barrier)."""
        per = self.SINK_PER_DISPATCH
        if self.tiled and (per is True or (per and shader in per)):
            return self.dev.buffer(16, f"sink{binding}")
        if not self._sinks:
            self._sinks[binding] = self.sink
        if binding not in self._sinks:
            self._sinks[binding] = self.dev.buffer(16, f"sink{binding}")
        return self._sinks[binding]

    # Unbound read_write slots get a sink of their own per dispatch on GPU adapters (_sink):
    # True for every shader, a tuple for those shaders; False: one per binding index (A/B).
    # H200 (``2026-12-04-h200-s22-fold-transposes-sinks.json``), ms, ("gemm",) / True / False:
    # encoder 64 0.498 / 0.488 / 0.522, encoder 1000 1.628 / 1.585 / 1.639, ResNet-18 64
    # 14.32 / 14.83 / 14.32 (every shader cost ResNet-18 3.5%), ViT within 1%.
    SINK_PER_DISPATCH = ("gemm",)

    # Workgroup-memory tiled kernels (GEMM, convolution) instead of the register-blocked ones
    # with no workgroup memory. None: on GPUs, not on CPU adapters (SwiftShader, lavapipe),
    # where workgroup memory and barriers cost more than the reuse brings. Tests force True.
    TILED = None

    @property
    def tiled(self) -> bool:
        if self.TILED is None:
            return not getattr(self.dev, "is_cpu", False)
        return bool(self.TILED)

    # Dropout on GPU adapters with n a multiple of 4 loads and stores vec4s (dropout.wgsl
    # apply4, ops/dropout.py); False: apply's four scalar accesses a thread (A/B).
    DROPOUT_VEC4 = True

    # Split-K sums of few outputs (ops/gemm.split_lanes) run several threads an output on GPU
    # adapters (reduce.wgsl reduce_splits_lanes); False: a thread an output (A/B).
    REDUCE_LANES = True

    # An Expand's gradient with few outputs of long sums (ops/layout.expand_lanes) runs several
    # threads an output on GPU adapters (layout.wgsl sum_expanded_lanes); False: a thread an
    # output, long sums split in parts added by reduce_splits (A/B).
    EXPAND_LANES = True

    # reduce_vec4.wgsl reduce_splits4 (four outputs a thread from vec4 loads) on GPU adapters for
    # at least 4 * SPLIT_THREADS outputs, a multiple of 4, with no tail (ops/gemm.reduce_splits);
    # False: a thread an output (A/B).
    REDUCE_VEC4 = True

    # The GEMM's narrow workgroup-memory tiles (ops/gemm.tile_shape: 128 x 64) for tall
    # outputs 33-64 wide summed over k >= 128; False: the untiled kernel there (A/B).
    GEMM_NARROW = True

    # Workgroups a tiled GEMM's split-K aims for (ops/gemm.matmul): an output of fewer tiles
    # has its sum over k split into parts until it has about this many (H200, 2026-12-05: 256
    # against 512, the MLP's four tiled products at batch 1000 0.095-0.117 ms against
    # 0.114-0.133, its step 0.789 -> 0.743 ms, the other zoo models within their spread).
    GEMM_TILE_TARGET = 256
    # Products summed over at most this many k (a transformer's d_model of 64): with op(B)'s
    # rows contiguous (dY W: an input gradient) the untiled kernel even for large outputs;
    # read across its rows (X W^T), outputs 33-64 wide take 128 x 128 tiles where they are at
    # least GEMM_TILE_TARGET / 2 (ops/gemm.tile_shape). H100, 2026-12-07, us
    # (``2026-12-07-h100-s39-gemm-enc.json``): [28000, 256] x 64 nn 99.5 tiled / 69.6
    # untiled; [28000, 64] x 64 nt 45.8 untiled / 34.3 tiled (cuBLAS 33.7). GPU ms a step
    # (``*-s39-sk-*``): encoder at 1000 1.328 -> 1.277, ViT at 1000 4.874 -> 4.737. None: off.
    # (Weight gradients over 28,000 tokens on tiles were faster alone, [256, 64] 100.7 -> 67.4
    # us, but the encoder's step at 1000 went 1.277 -> 1.339: not kept.)
    GEMM_SHORT_K = 64
    # ... but an output that would need split-K with k below this runs on the untiled kernel
    # (H200, 2026-12-05: the MLP's dW at batch 64, [1024, 1024] over k 64, 0.040 ms tiled in
    # 4 parts, 0.018 untiled; ops/gemm.matmul); None: tiled (A/B).
    GEMM_SPLIT_MIN_K = 128
    # A tiled GEMM's split-K part 0 written straight into the output, the other parts added to
    # it in place in the same order (gemm.wgsl / reduce.wgsl part0): a part's scratch fewer
    # (the MLP at batch 1000: 4.1 MB of its 16.4); False: every part in scratch (A/B).
    GEMM_PART0_IN_OUT = True

    # A Gelu's backward taken by the Gemm after it: its input gradient kernel multiplies dA by
    # the slope the Gelu's training forward left in its input's buffer (fusion.gelu_grads,
    # gemm.wgsl GELU_GRAD, gelu_slope.wgsl); False: the Gelu's own pass (A/B).
    FUSE_GELU_GRAD = True

    # matmul_tiled loads aligned operands as vec4 (ops/gemm._vec_bits); False: four scalar
    # loads each (A/B).
    GEMM_VEC4 = True

    # matmul_tiled's tiles at the edge of out load as those inside it, rows / columns past the
    # edge clamped to the last (gemm.wgsl EDGE_CLAMP); False: every load of an edge tile
    # tested and selected value by value (A/B).
    GEMM_EDGE_CLAMP = True

    # The untiled GEMM on GPU adapters reads operands that are both aligned as vec4s
    # (gemm.wgsl matmul_vec); False: matmul's scalar loads (A/B).
    GEMM_VEC_UNTILED = True

    # A Linear's bias gradient summed by its weight gradient's GEMM from the dY values it loads
    # (gemm.wgsl BSUM, ops/gemm.matmul) on GPU adapters, the split parts by the same
    # reduce_splits; False: channel_sum, its own pass over dY (A/B).
    GEMM_BIAS_SUM = True

    # Outputs of at most this many values summed over 32..4096 k with k contiguous in both
    # operands (a classifier's head, the MLP's products at batch 64), or over at most
    # GEMM_KPAR_STRIDED_K otherwise, run on gemm.wgsl matmul_kpar (k strided: matmul_kpar_t)
    # on GPU adapters: KL threads
    # share each 4x4 block's sum, one dispatch (ops/gemm.kpar_lanes). H100: a [64, 10] head
    # over k 1024 17.3 -> 10.1 us. None: the untiled kernel, split-K, reduce_splits (A/B).
    GEMM_KPAR = 65536
    # ... k strided (a weight gradient dY^T X over the batch's tokens): at most this many k and
    # GEMM_KPAR_STRIDED_OUT outputs, the workgroup's blocks as neighbouring threads (gemm.wgsl
    # matmul_kpar_t: a warp reads neighbouring blocks' vec4 at one k) rather than a block's
    # lanes (GEMM_KPAR_ORDER False, A/B), up to GEMM_KPAR_STRIDED_LANES lanes (8 to 256). H100,
    # 2026-12-07, GPU ms a step at batch 64 with k up to 256 / 2048 (all outputs): encoder
    # (dW over 1,792 tokens) 0.368-0.370 / 0.356, LSTM 0.227 / 0.221, MLP (dX [64, 1024]
    # over 1024, 65,536 outputs) 0.167 / 0.171; with k to 20,000 and 256 lanes the ViT
    # (16,640 tokens) 0.994 -> 1.166 (``2026-12-07-h100-s39-kp-*``). Up to 8,192 with 64
    # lanes: the ViT at 64 (4,160 tokens, 98 -> 90 dispatches) 1.010-1.022 -> 0.990 (wall
    # 1.108-1.113 -> 1.077; ``2026-12-07-h100-s40-kp8k-1``).
    GEMM_KPAR_STRIDED_K = 8192
    GEMM_KPAR_STRIDED_OUT = 16384
    GEMM_KPAR_ORDER = True
    GEMM_KPAR_STRIDED_LANES = 64

    # MatMul products with no batch dims left (after folding) run on the Gemm's kernels on GPU
    # adapters (ops/matmul.batched); False: the batched kernel (A/B).
    MATMUL_GEMM = True

    # Batched MatMul products of more than this many 4x4 blocks a batch index whose operands
    # fit 16 KiB, whole or (few batch indices) in chunks of k, on a workgroup per batch index
    # from workgroup memory (ops/matmul._wg_chunk; None: A/B; tests set 0).
    MATMUL_WG = 128

    # An RNN with no initial state zeroes its state rows in its first sequence dispatch
    # (rnn.wgsl flags 256) instead of an init_state dispatch; False: A/B.
    RNN_ZERO_STATE_IN_SEQ = True

    # LSTM/GRU forward steps read R transposed on GPU adapters (ops/rnn.forward); False: A/B.
    RNN_TRANSPOSED_R = True
    # MatMul (of a weight, or its Transpose) + bias Add as one Gemm between views
    # (engine/rewrites/linears.py); False: op by op (A/B).
    FOLD_LINEARS = True
    # Dropouts of constant ratio 0 as Identity views (engine/rewrites/dropouts.py: no dispatch
    # forward or backward); False: A/B.
    FOLD_DROPOUTS = True
    # The erf GELU written as Div, Erf, Add, Mul, Mul as one Gelu (engine/rewrites/gelu.py);
    # False: A/B.
    FOLD_GELU = True
    # Chains of Slice / Concat / Transpose / views over one weight (torch's LSTM gate reorder)
    # as one Gather each (engine/rewrites/weight_layouts.py); False: op by op (A/B).
    FOLD_WEIGHT_LAYOUTS = True
    # ... also chains joining weights next to each other in the blob (an LSTM's two biases
    # Concat-ed) as one Gather over a span tensor (weight_layouts._span); False: A/B.
    WEIGHT_SPANS = True
    # ... and a node's several such Gathers over neighbouring weights (an LSTM's W, R and B) as
    # one Gather and views of its parts (engine/rewrites/gather_joins.py); False: A/B.
    JOIN_WEIGHT_GATHERS = True
    # Gathers of every index of an activation's axis, one constant index each (the packed q/k/v
    # of nn.MultiheadAttention) as one Split (engine/rewrites/splits.py); False: A/B.
    FOLD_SPLITS = True
    # Muls by a scalar constant before or after a MatMul as its scale (engine/rewrites/
    # scales.py: attention's 1 / sqrt(d)); False: A/B.
    FOLD_SCALES = True
    # Transposes (rank >= 3) that only feed MatMuls, or that only read one, as the product's
    # strides (engine/rewrites/transposes.py: attention's head split and merge); False: A/B.
    FOLD_TRANSPOSES = True
    # ... after moving Transposes past the Reshapes that split their dims and composing
    # consecutive ones (transposes._commute: MultiheadAttention's head split); False: A/B.
    COMMUTE_TRANSPOSES = True
    # Transposes and Expands read only by a Concat as the Concat's strides
    # (engine/rewrites/concats.py: a ViT's class token and patch tokens); False: A/B.
    FOLD_CONCAT_READS = True
    # MatMul -> Softmax -> MatMul as one FusedAttention node (engine/rewrites/attention.py,
    # ops/attention.py: one dispatch forward, two backward); False: the three ops (A/B).
    FUSE_ATTENTION = True
    # ... only where it has at least this many query rows (samples x heads x queries; 0:
    # always). H100, 2026-12-07, GPU ms a step fused / not (attention.wgsl with det_exp, the
    # same bits on every host): encoder (28 tokens, 4 heads) at 1000 (112,000 rows) 1.317 /
    # 1.431, ViT (65 tokens) 4.80 / 5.04. At batch 64 (7,168 and 16,640 rows, a few warps an
    # SM: each thread's chain over the keys is the time) a thread a row was 0.381 / 0.388 and
    # 1.092 / 1.057; with the keys split over 8 and 4 threads (ATTENTION_LANE_THREADS) 0.369
    # / 0.387 and 0.992 / 1.060 (``2026-12-07-h100-s39-att-*``), hence 0.
    ATTENTION_MIN_ROWS = 0
    # ... with up to 8 threads a row (keys split between them, attention.wgsl LANES) while
    # the rows alone are fewer threads than this, on GPU adapters (ops/attention.lanes); None:
    # one a row (A/B). 131,072 (8 lanes for the ViT at 64) 1.190; 262,144 (2 and 4 lanes at
    # batch 1000) ViT 4.93 -> 5.15, encoder 1.36 -> 1.47.
    ATTENTION_LANE_THREADS = 65536
    # LSTM/GRU sequences on the 256-thread *_seq_wide kernels on GPU adapters (ops/rnn._wide).
    RNN_SEQ_WIDE = True
    # ... each thread's values of R in registers there, for H a multiple of 4 up to 64
    # (ops/rnn._registers); False: read from storage every step (A/B).
    RNN_R_REGISTERS = True
    # ... and then up to 4 samples a workgroup (rnn.wgsl NB) while at least this many
    # workgroups remain: each R value read from registers NB times a step, fewer workgroups to
    # keep resident (ops/rnn._rows); None: one sample a workgroup (A/B).
    RNN_ROWS_MIN_GROUPS = 128
    # LSTM/GRU x-projections as tiled GEMMs on GPU adapters (ops/rnn._xproj); False: A/B.
    RNN_XPROJ_GEMM = True
    # A forward LSTM's dW and dR as products on the Gemm's kernels (GPU adapters); False: A/B.
    RNN_GEMM_GRADS = True
    # LSTM/GRU backward writes the gates' gradients over the saved gates (rnn.wgsl flags 64:
    # each unit reads its step's gates before writing their gradients at the same offsets), no
    # [D, T, N, 4H] scratch (28.7 MB of the zoo's LSTM at batch 1000); False: A/B.
    RNN_DG_IN_PLACE = True
    # A one-direction, not reversed LSTM's x-projections made in its gates buffer, each step's
    # gates written over its own (rnn.wgsl forward flags 64): no [T, N, 4H] scratch; False: A/B.
    RNN_XP_IN_PLACE = True
    # An LSTM's sequence kernels load each step's inputs a step ahead and keep the cell / dc
    # carry in a register (ops/rnn._ahead, rnn.wgsl flags 128). False: loaded in the step (A/B).
    RNN_AHEAD = True

    # Tap blocks of 8 per workgroup of conv2d.wgsl weight_grad (1, 2 or 4): they share the
    # workgroup's dy tile, read once from memory instead of once per block.
    WEIGHT_GRAD_BLOCKS = 4
    # Threads of that kernel to aim for: the output pixels split into chunks (split-K, added by
    # reduce_splits) until about this many run. 12 or 16 output channels a thread, not 8,
    # and the bias gradient summed in it, were measured slower (H100, SeedNet at batch 1000:
    # the 3rd layer's 316 us -> 335-338 and 556; results 2026-12-06-h100-s31-wgrad-*).
    WEIGHT_GRAD_THREADS = 2048 * 64

    # A BatchNormalization's batch statistics on GPU adapters in one pass over x: each part's
    # sum and squares about its own mean, added by Chan et al.'s update (batchnorm.wgsl
    # stats_parts, stats_finish: 2 dispatches). False: the mean, then the squares about it
    # (sum_x, mean_finish, sum_sq, var_finish: 4 dispatches, x read twice; A/B).
    BN_STATS_PARTS = True

    # The GPU weight gradient of a padded convolution reads a zero-padded copy of the input
    # (one pass) instead of testing the bounds of every tap (ops/conv.py; False: A/B). The
    # forward measured slower so (H200, ResNet-8 batch 1000: 10.2 against 9.6 ms/step).
    PADDED_WEIGHT_GRAD = True
    # A convolution's bias gradient summed beside its weight gradient where conv2d_wgrad.wgsl
    # splits the pixels in parts (BIAS_TAP: a tap of value 1, its parts the reduction's tail)
    # instead of channel_sum + reduce_splits; False: A/B.
    CONV_BIAS_TAP = True

    # Convolutions as implicit GEMM (shaders/conv_gemm.wgsl, ops/conv_gemm.py) on GPU adapters
    # where the product's rows, columns and sum are each at least this long (out channels,
    # batch x pixels or taps, taps x in channels); None: the direct kernels always. Tests set 1.
    # 64: 64-127 channel layers on 64 x 128 tiles (H200, against 128: ResNet-18 at batch 64 /
    # 256 17.07 / 56.84 -> 16.83 / 55.06 ms/step, ResNet-8 at 64 / 1000 2.19 / 11.23 -> 1.94 /
    # 10.88; results *-s18-tile-*). 32 loses: 32-channel layers on 64 x 64 tiles made ResNet-8
    # at batch 1000 14.37 and MobileNetV2 13.88 (against 13.21) ms/step.
    CONV_GEMM_MIN = 64

    # A residual Add's gradient shared with its input through views (plan._passing_add: a
    # Linear's product reshaped back to tokens; False: a copy, A/B).
    GRAD_THROUGH_VIEWS = True
    # ... and an Add's gradient shared with its input of the output's shape when the other
    # input broadcasts (fusion.passes_grad: a position embedding; False: a copy, A/B).
    GRAD_THROUGH_BROADCAST_ADD = True
    # The cross_entropy / nll_log head's LogSoftmax backward inside the loss's dispatch
    # (plan.Plan.build, losses.nll_loss through_log_softmax; False: its own dispatch, A/B).
    FUSE_LOSS_HEAD = True
    # ... and its forward too, on GPU adapters for rows of 8-32 classes (losses.takes_scores:
    # loss.wgsl nll FROM_SCORES, the same bits as softmax.wgsl forward_seg; one dispatch a
    # step fewer; False: the head's own forward dispatch, A/B).
    FUSE_LOSS_SOFTMAX = True
    # nll (loss.wgsl) as several workgroups on GPU adapters, each writing a share of dx
    # (ops/losses.nll_groups); False: one workgroup (A/B).
    NLL_WIDE = True
    # A Clip of constant bounds that alone reads a BatchNormalization's output (ReLU6 in a
    # MobileNet) applied by that layer's forward and its gradient by the layer's backward
    # (fusion.clips_after; False: the Clip's own dispatches, A/B).
    FUSE_CLIP = True

    # A tensor read twice (a residual stream: LayerNorm and the Add) gets the sum of its two
    # gradient contributions from its first reader's backward when that op's card says
    # GRAD_ADDEND (Plan._sum_in_backward; False: elementwise add_to, A/B).
    SUM_IN_BACKWARD = True
    # Adam / AdamW on GPU adapters four elements a thread from vec4 loads (adam_vec4.wgsl,
    # train/optim.py; the same bits as adam's one a thread); False: adam (A/B).
    OPTIM_VEC4 = True
    # The numerical guard inside the optimizer's update, which reads every gradient anyway
    # (train/guard.Guard.in_update, optim.wgsl GUARD; False: guard.wgsl's own dispatch, A/B).
    GUARD_IN_UPDATE = True

    # LayerNorm rows of 8-255 values on SEG threads each on GPU adapters (ops/layernorm.py;
    # False: a thread a row, A/B), and its Scale / B gradients over this many threads there
    # (parts of the rows; the CPU adapters keep ``splits``). H100 (2026-12-07,
    # ``2026-12-07-h100-s36-ln-*``), ms of GPU time at batch 1000, 2^18 / 2^16 / 2^14 threads:
    # ViT 5.09 / 5.04 / 5.12, encoder 1.429 / 1.423 / 1.436 (d 64: 4,062 or 1,750 parts of
    # 16 rows against 1,024 / 256 of more); batch 64 the same (too few rows to differ).
    LN_SEG = True
    LN_PARAM_THREADS = 1 << 16
    # Those parts of a Scale / B as long as the row folded by one reduce_splits with a tail
    # (ops/layernorm._param_grads_one_fold; False: two channel_sum folds, A/B).
    LN_PARAM_TAIL = True
    # Per-column sums of more than this many rows (bias gradients over tokens) in parts of the
    # rows over COLUMN_SUM_THREADS threads first on GPU adapters (ops/gemm.column_parts; None:
    # A/B; tests set small ones). 512 (was 4096; H100 2026-12-06, ``*-s34-reduce4-*``): the
    # MLP's bias gradients over 1000 rows, its step at batch 1000 0.630-0.633 -> 0.627 ms of
    # GPU time, the other models unchanged.
    COLUMN_SUMS = 512
    COLUMN_SUM_THREADS = 1 << 18
    # The gradient of a binary op's operand that spans the output (the other one broadcast)
    # by binary.wgsl backward_full, grid-stride (False: the summing kernel, A/B).
    BINARY_FULL = True

    # A Split whose parts are contiguous runs of its input (nn.MultiheadAttention's q/k/v)
    # as views of it and of its gradient (fusion.split_offsets; False: copies, A/B).
    SPLIT_VIEWS = True

    # The input gradient of a strided convolution by stride classes on the implicit GEMM
    # (conv_gemm.strided_input_grad) from this many dx channels (None: conv2d.wgsl
    # backward_input, A/B). Lower than CONV_GEMM_MIN: backward_input reaches ~3 TFLOP/s on
    # an H200 (ResNet-18's stride-2 3x3 layers at batch 1000, 12 ms each).
    CONV_GEMM_STRIDED_MIN = 32

    # Elements per thread of the grid-stride elementwise kernels (ReLU, BatchNorm's normalize,
    # ...): one-element workgroups are launch-bound on GPUs (measured on an H200: 115 us for
    # 11.6 M elements, 5x the memory time) and on CPU adapters alike (lavapipe, SeedNet at batch
    # 64: BatchNorm's backward_input 119 -> 28 ms, normalize 79 -> 23 ms).
    ELEMENTS_PER_THREAD = 8

    def elementwise_groups(self, n: int) -> tuple:
        """Workgroups of 64 for a grid-stride kernel over ``n`` elements."""
        per = self.ELEMENTS_PER_THREAD
        return groups_1d((n + per - 1) // per)

    # Elements per workgroup of the two-level per-channel sums (BatchNorm, bias gradients).
    # None: 4096 on GPUs; one workgroup per channel on CPU adapters, where many workgroups with
    # barriers cost more than they bring (measured on SwiftShader: 3x slower).
    REDUCE_CHUNK = None

    # Elements per block (at least) of BatchNorm's per-channel sums on CPU adapters
    # (ops/batchnorm.py ``blocks``, shaders/lib/bn_blocks.wgsl): a thread per (channel,
    # block), no barriers. Tests set small ones to reach the partial-block branches.
    BN_BLOCK = 64
    # ... up to this many elements a channel (N x H x W); past it the one-workgroup-a-channel
    # barrier-tree kernels, whose loads SwiftShader runs faster once their barriers are paid
    # for: SeedNet at batch 1000 (676k a channel) in headless Chromium took 7.5 / 7.9 s/step
    # with them, 12.3 / 10.4 with the blocks; at batch 64 (43k) 586 / 564 against 520 / 545.
    BN_BLOCKED_MAX = 1 << 17

    def reduce_parts(self, elements: int) -> int:
        """How many workgroups share one channel's sum over ``elements`` values."""
        chunk = self.REDUCE_CHUNK
        if chunk is None:
            chunk = 1 << 30 if getattr(self.dev, "is_cpu", False) else 4096
        return max(1, min(1024, (elements + chunk - 1) // chunk))

    # Threads a split-K reduction aims for on GPU adapters (``splits``): fewer parts mean
    # fewer partial sums to add, and below the target a dispatch less can be worth more than
    # the idle multiprocessors (H200: ~10 us a dispatch at small batches).
    SPLIT_THREADS = 65536

    def splits(self, threads: int, length: int, min_per_split: int) -> int:
        """How many parts to split a reduction of ``length`` into so ~enough threads run."""
        target = 2048 if getattr(self.dev, "is_cpu", False) else self.SPLIT_THREADS
        if threads >= target:
            return 1
        return max(1, min((target + threads - 1) // threads, length // min_per_split, 256))

    # While the plan is being built, scratch and gradients are ``pool.Slot``s packed into
    # shared buffers by their live ranges once every dispatch is known (plan.py ends the
    # build with ``pool.resolve``); afterwards (the optimizer, the guard, the norms) they are
    # buffers of their own. POOL False: a buffer per gradient and scratch (benchmarks' A/B).
    POOL = True
    # ... smaller slots at offsets inside a larger shared buffer beside others live at once
    # (pool.assign; ResNet-8 at 64 85.4 -> 79.3 MB, encoder at 1000 249 -> 231); False: one
    # slot at a time a buffer (A/B: a buffer two live slots share orders their dispatches).
    POOL_OFFSETS = True
    pooling = False

    def grad_addend(self, node, k: int):
        """The gradient tensor ``node``'s backward adds to the gradient it writes for input
        ``k`` (the sum of that input's two uses, ``Plan._sum_in_backward``), else None."""
        return self.plan.addends.get((node["name"], k))

    def scratch(self, nfloats: int, label: str = "scratch"):
        """``nfloats`` float32 of scratch for what one op's dispatches pass between them in a
        step (split-K parts, a zero-padded input, an RNN's input projection): the op writes
        all of it before reading it."""
        if self.pooling:
            return pool.Slot(4 * nfloats, label)
        return self.dev.buffer(4 * nfloats, label)

    def temp(self, nfloats: int, slot: str = "scratch"):
        """Scratch for partial sums that the very next dispatch reduces (split-K parts); a
        second ``slot`` name for what one op's dispatches read while the first holds their
        parts (conv.py: a zero-padded input). A ``scratch`` while the plan is being built;
        after it, one buffer per ``slot``, replaced by a larger one when a use needs more."""
        if self.pooling:
            return self.scratch(nfloats, slot)
        buf = self._temps.get(slot)
        if buf is None or buf.size < 4 * nfloats:
            buf = self._temps[slot] = self.dev.buffer(4 * nfloats, slot)
        return buf

    @property
    def saved_labels(self) -> set:
        """The labels of the ``save`` buffers (the memory estimate's part "saved")."""
        return set(self._saves)

    def save(self, node, nfloats: int, what: str = "save"):
        """A per-node buffer shared by the training and eval programs (batch statistics,
        repacked weights), created on first use; its size is ``save_sizes[id(buffer)]``."""
        key = node["name"] + "." + what
        if key not in self._saves:
            buf = self.dev.buffer(4 * nfloats, key)
            self._saves[key] = buf
            self.save_sizes[id(buf)] = nfloats
        return self._saves[key]

    def offset_of(self, t) -> int:
        """Element offset of a weight tensor inside P (and G)."""
        return t.offset // 4

    def constant(self, name, default=None):
        c = self.plan.graph.constants.get(name)
        return c["values"][0] if c and c.get("values") else default

    def salt(self, node) -> int:
        """The Philox salt of ``node`` (a Dropout): its index + 1 in the model as given
        (``plan.source``; the folds of engine/rewrites/ move nodes in ``plan.graph``), as the
        numpy engine counts (cpu/engine.py), so both drop the same units."""
        source = getattr(self.plan, "source", None) or self.plan.graph
        for k, n in enumerate(source.nodes):
            if n["name"] == node["name"] and n["op_type"] == node["op_type"]:
                return k + 1
        return self.plan.graph.nodes.index(node) + 1
