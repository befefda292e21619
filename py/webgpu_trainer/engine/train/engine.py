"""The Engine interface: what ``loop.Trainer`` drives. Two engines implement it,
``gpu_engine.GpuEngine(dev)`` (WebGPU: the browser, wgpu-py natively; each step one queue
submit of a prebuilt program, metrics read back asynchronously from a ring on the GPU) and
``cpu.cpu_engine.CpuEngine()`` (numpy float32, ``--device cpu``); ``tests/test_layers.py``
checks both against ``Engine``.

The Trainer owns what a run means (epochs, shuffles, schedules, metrics, validation, Stop);
the engine owns the weights and computes steps. Methods are coroutines except
``write_weights``, ``set_augment`` and ``set_order``.
"""

from typing import Protocol


class Engine(Protocol):
    """A training engine (see the module docstring). Set by ``build``: ``wbytes`` (bytes of
    the flat weights), ``classes``, ``loss_spec`` (the loss resolved); by ``load_data``:
    ``eval_chunk`` (images per ``eval_outputs`` call, a multiple of the batch)."""

    optim: object  # the module whose ``make`` builds the optimizer (torch.optim semantics)
    dev: object  # what the optimizer's ``state_bytes(dev)`` takes
    memory_bytes: int | None  # bytes of the device buffers the run made; None without a GPU
    data_limit: int | None  # the most bytes of one data buffer (data.chunks); None: no limit
    wbytes: int
    classes: int
    loss_spec: dict
    eval_chunk: int

    async def build(self, graph, batch: int, loss, trainable, seed: int):
        """Compile for the ``Graph`` at ``batch``: ``loss`` a loss spec (``ops/losses.py``),
        ``trainable`` None (all) or a set of parameter names, ``seed`` the run's (dropout)."""

    def write_weights(self, blob: bytes) -> None:
        """Set the flat weights: ``wbytes`` bytes (the bundle's blob padded: the checkpoint
        format of both engines); ValueError on a size mismatch."""

    async def read_weights(self, nbytes: int | None = None) -> bytes:
        """The flat weights (the first ``nbytes``; None: all ``wbytes``)."""

    async def init_weights(self, seed: int) -> None:
        """PyTorch's default init, the same bits on every engine (``engine/init.py``)."""

    async def attach(self, opt) -> None:
        """Use the optimizer ``opt`` (made by ``optim.make``) for the steps."""

    async def load_data(self, train, evals: dict, table) -> None:
        """The training ``Split``, ``evals`` (``{"validation": Split, "test": Split}``, each
        evaluated whole; validation may be absent) and the pixel -> input ``table``."""

    def set_augment(self, augment) -> None:
        """Augment the training batches from now on: ``(pad, flip)`` (``augment.resolve``;
        RandomCrop padding, RandomHorizontalFlip) or None (off). Before ``load_data``."""

    def set_order(self, perm) -> None:
        """This epoch's training order (image indices)."""

    async def step(self, t: int, offset: int, lr: float) -> bool:
        """Optimizer step ``t`` on the batch at ``offset`` of the order, returning with at most
        two steps in flight (no readback); True: read the metrics now (the host saw a
        non-finite value)."""

    async def metrics(self, first: int, last: int):
        """``([(loss, acc)] of steps first..last, guard)``: guard None or ``(step, tensor,
        node)`` of the first non-finite gradient."""

    async def eval_outputs(self, what: str, lo: int, hi: int):
        """``(log-probabilities, loss rows)``: float32 bytes [hi - lo, classes] of an eval-mode
        forward over images lo..hi-1 of the split ``what`` ("validation" or "test"; ``lo`` a
        multiple of ``eval_chunk``)."""

    async def probe(self, images, outputs) -> dict:
        """Eval-mode forward of uint8 ``images`` on the current weights: ``{name: float32
        bytes}`` of the activations named (or ``probe.LOGP``); safe between two steps."""

    async def norms(self) -> list:
        """Per parameter (graph order): ``{name, layer, numel, weight, grad}``, the L2 norms of
        its weights and last gradient (grad None: frozen)."""
