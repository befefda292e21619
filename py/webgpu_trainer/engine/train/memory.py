"""GPU memory of a training run before any work: the plan's own allocations, counted.

``estimate`` builds the training step (``Plan``, ``Guard``, the optimizer's state) on a
``CountingDevice``, which records every buffer the real device would make and makes none, so the
figure is the plan's allocated bytes, not a formula. ``check`` refuses a model whose largest
buffer exceeds the adapter's ``maxStorageBufferBindingSize`` / ``maxBufferSize`` or whose total
exceeds a budget, naming the tensor and both numbers; ``largest_batch`` finds the largest batch
that passes ``check``. The uploaded dataset is not included (it is cut into chunks that fit,
``data.chunks``). Standard library only.
"""

from ..backends.base import round_up
from ..config import BY_NAME
from ..errors import OffsetLimitError, UserError
from ..graph import Graph
from ..plan import Plan
from . import optim
from .guard import Guard

# the batches ``largest_batch`` tries: the run settings' batch_size range (config schema)
MIN_BATCH, MAX_BATCH = BY_NAME["batch_size"].min, BY_NAME["batch_size"].max

# what each part of the estimate holds, by the buffer label's role in the plan
PARTS = ("params", "gradients", "optimizer", "activations", "saved", "scratch", "shared")


class LimitError(UserError, ValueError):
    """A model that does not fit the adapter's limits or the memory budget (names the numbers).
    From ``estimate`` (a batch too large for the kernels' 32-bit offsets): ``problem`` (the
    message without its "does not fit" prefix) and ``largest`` ({"name", "bytes"}: the
    tensor); else both None."""

    def __init__(self, message: str, problem: str | None = None, largest: dict | None = None):
        super().__init__(message)
        self.problem, self.largest = problem, largest


class _Buffer:
    """A buffer the counting device did not make: its label and size."""

    __slots__ = ("label", "size")

    def __init__(self, label, size):
        self.label, self.size = label, size


class CountingDevice:
    """A ``Device`` that records ``buffer`` calls (label, bytes, rounded as the backends round)
    and does no GPU work; ``buffers`` lists them in order."""

    info = {"vendor": "", "architecture": "", "device": "counting", "description": ""}

    def __init__(self, is_cpu: bool = False, limits: dict | None = None):
        self.is_cpu, self.limits = is_cpu, dict(limits or {})
        self.allocated, self.buffers = 0, []

    def buffer(self, nbytes: int, label: str = "", uniform: bool = False):
        """Record a buffer of ``nbytes`` (at least 16, a multiple of 4, as the backends make)."""
        buf = _Buffer(label, max(16, round_up(nbytes)))
        self.allocated += buf.size
        self.buffers.append(buf)
        return buf

    def write(self, buf, data, offset: int = 0):
        """Nothing to upload."""

    async def pipeline(self, name: str, entry: str, constants: dict | None = None):
        """A stand-in pipeline (the shader is not compiled)."""
        return (name, entry, None)

    def bind(self, pipeline, buffers: list):
        """A stand-in bind group."""
        return None

    def program(self, dispatches: list):
        """The dispatches as given."""
        return list(dispatches)

    def submit(self, programs: list, copies=()):
        """Nothing runs."""

    def run_step(self, program, uniform, data):
        """Nothing runs."""

    async def read(self, buf, offset: int = 0, nbytes: int | None = None) -> bytes:
        """Zeros: nothing ran."""
        return bytes(buf.size - offset if nbytes is None else nbytes)

    async def read_spans(self, spans: list) -> list:
        """Zeros: nothing ran."""
        return [bytes(n) for _, _, n in spans]

    async def sync(self):
        """Nothing to wait for."""

    def fence(self):
        """Nothing to wait for."""
        return None


def _run(coro):
    """Run a coroutine that never suspends (it only awaits the counting device) to its end,
    without an event loop (the page's worker already runs one)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("the memory estimate waited on something other than the counting device")


def _part(label: str, plan) -> str:
    """Which part of ``PARTS`` a buffer labelled ``label`` belongs to (the plan's labels:
    "weights", "grads", "optim.*", a tensor's name, "d" + a tensor's name, "dX@node",
    "pool.<k>:<label>": activation gradients and scratch sharing buffers by live ranges,
    engine/pool.py: the part "shared"; ``Builder.save``'s per-node buffers: "saved")."""
    if label == "weights":
        return "params"
    if label.startswith("optim."):
        return "optimizer"
    if label in plan.shapes or label == plan.logp:
        return "activations"
    if label in plan.builder.saved_labels:
        return "saved"
    if label.startswith("pool."):
        return "shared"
    if label in ("grads", "dlogp") or label.startswith("d") and (
            label[1:] in plan.shapes or "@" in label):
        return "gradients"
    return "scratch"


def estimate(desc: dict, batch: int, loss=None, trainable=None, optimizer: str = "sgd",
             momentum: float = 0.0, optimizer_args: dict | None = None,
             is_cpu: bool = False, init: bool = False) -> dict:
    """GPU bytes of the training step of the bundle graph ``desc`` at ``batch``: the buffers
    ``Plan.build``, ``Guard.build`` and the optimizer's ``attach`` make (``trainable``: None or
    a set of names; ``loss``: a loss spec; ``optimizer``, ``momentum``, ``optimizer_args``: as
    ``optim.make``'s (amsgrad adds a state); ``init``: count ``Plan.init_weights``'s uniform
    buffers too (a run from scratch); ``is_cpu``: the kernels a software adapter gets).
    Returns ``{"batch", "bytes" (total), "parts": {part: bytes} (``PARTS``), "largest":
    {"name", "bytes"} (the biggest single buffer), "buffers": [(label, bytes)]}``. Raises
    ``LimitError`` naming the tensor and its bytes when the batch is too large for the
    kernels' 32-bit offsets (the step cannot be planned, so there is no total)."""
    dev = CountingDevice(is_cpu=is_cpu)
    graph = Graph(desc)
    try:
        plan = _run(Plan.build(dev, graph, int(batch), loss=loss, trainable=trainable))
    except OffsetLimitError as exc:
        raise LimitError(f"the model does not fit this GPU: {exc}", str(exc),
                         {"name": exc.tensor, "bytes": exc.nbytes}) from None
    if init:
        _run(plan.init_weights(0))
    guard = _run(Guard.build(plan))
    _run(optim.make(optimizer, 0.01, momentum=momentum,
                    **(optimizer_args or {})).attach(plan, guard))
    parts = dict.fromkeys(PARTS, 0)
    for b in dev.buffers:
        parts[_part(b.label, plan)] += b.size
    big = max(dev.buffers, key=lambda b: b.size)
    name = big.label.split(":", 1)[1] if big.label.startswith("pool.") else big.label
    return {"batch": int(batch), "bytes": dev.allocated, "parts": parts,
            "largest": {"name": name, "bytes": big.size},
            "buffers": [(b.label, b.size) for b in dev.buffers]}


def problems(est: dict, limits: dict | None, budget: int | None = None) -> list:
    """Why ``est`` (``estimate``) does not fit: the adapter's ``limits``
    (``max_storage_buffer_binding_size``, ``max_buffer_size``) and ``budget`` (bytes, None: no
    budget). An empty list when it fits."""
    out, limits = [], limits or {}
    name, size = est["largest"]["name"], est["largest"]["bytes"]
    for key, web in (("max_storage_buffer_binding_size", "maxStorageBufferBindingSize"),
                     ("max_buffer_size", "maxBufferSize")):
        lim = limits.get(key)
        if lim and size > lim:
            out.append(f"tensor {name!r} needs {size:,} bytes at batch {est['batch']}, more than "
                       f"the adapter's {web} of {lim:,} bytes")
    if budget and est["bytes"] > budget:
        out.append(f"the training step needs {est['bytes']:,} bytes of GPU memory at batch "
                   f"{est['batch']}, more than the budget of {budget:,} bytes "
                   f"(largest tensor {name!r}: {size:,} bytes)")
    return out


def check(est: dict, limits: dict | None, budget: int | None = None) -> None:
    """Raise ``LimitError`` naming every limit ``est`` exceeds (``problems``)."""
    found = problems(est, limits, budget)
    if found:
        raise LimitError("the model does not fit this GPU: " + "; ".join(found))


def largest_batch(desc: dict, limits: dict | None, budget: int | None = None, **kw) -> int:
    """The largest batch (at most ``MAX_BATCH``) whose ``estimate`` passes ``check``; 0 when
    not even ``MIN_BATCH`` (the smallest batch a run takes) fits. ``kw`` as ``estimate``'s.
    Memory grows with the batch, so a binary search over real estimates finds it."""
    def fits(b):
        try:
            return not problems(estimate(desc, b, **kw), limits, budget)
        except ValueError:  # LimitError: a kernel's 32-bit offsets cannot count that many
            return False
    if not fits(MIN_BATCH):
        return 0
    lo, hi = MIN_BATCH, 2 * MIN_BATCH
    while hi <= MAX_BATCH and fits(hi):
        lo, hi = hi, hi * 2
    if hi > MAX_BATCH:
        return lo
    while hi - lo > 1:  # fits(lo), not fits(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo
