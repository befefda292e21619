"""Optimizers with torch.optim's names, defaults and semantics, one dispatch per step.

Each optimizer states its WGSL entry point (shaders/optim.wgsl), its hyper-parameters as the
kernel's uniform, and the per-step scalars (``scalars(t, lr) -> (a0, a1, a2)``); the base class
owns the state buffers and the dispatch. ``clip_grad_norm`` > 0 adds gradient clipping by the
global norm (torch.nn.utils.clip_grad_norm_(params, max_norm)) computed on the GPU in two
reduction dispatches before the update; no readback.

The state saves and restores through ``await opt.state_bytes(dev)`` /
``opt.load_state_bytes(dev, data)`` (a small JSON header, then each state buffer's float32s).
"""

import json
import struct

from .backends.base import groups_1d, pack_params

AMSGRAD, CENTERED = 1, 2  # Params.flags bits of shaders/optim.wgsl
_MAGIC = b"WGTOPT1\n"
_PARTS = 256  # most level-1 workgroups of the gradient-norm reduction


class Optimizer:
    """Base: ``await opt.attach(plan)`` builds state buffers and the update dispatch.

    ``states`` names the state buffers S1, S2, S3 the optimizer uses (None: unused, bound to a
    16-byte placeholder); ``state_init`` their initial values."""

    entry = ""
    states = ("", "", "")
    state_init = (0.0, 0.0, 0.0)

    def __init__(self, lr: float, weight_decay: float = 0.0, clip_grad_norm: float = 0.0):
        if lr <= 0:
            raise ValueError(f"lr must be positive, got {lr}")
        if clip_grad_norm < 0:
            raise ValueError(f"clip_grad_norm must be >= 0 (0 = off), got {clip_grad_norm}")
        self.lr, self.weight_decay = float(lr), float(weight_decay)
        self.clip_grad_norm = float(clip_grad_norm)

    @property
    def name(self) -> str:
        return type(self).__name__

    def params(self) -> tuple:
        """The uniform's fields from ``nesterov`` to ``beta2`` (see Params in optim.wgsl)."""
        return (0, 0, 0, 0.0, 0.0, self.weight_decay, 1e-8, 0.9, 0.999)

    def uniform(self, n: int) -> bytes:
        return pack_params(n, *self.params(), self.clip_grad_norm, self._parts(n))

    @staticmethod
    def _parts(n: int) -> int:
        return max(1, min(_PARTS, (n + 255) // 256))

    def scalars(self, t: int, lr: float):
        return (0.0, 1.0, 0.0)

    async def attach(self, plan):
        dev, n = plan.dev, plan.wbytes // 4
        self.n = n
        self.slots = []
        for k, (used, init) in enumerate(zip(self.states, self.state_init)):
            buf = dev.buffer(4 * n if used else 16, f"optim.s{k + 1}")
            if used and init:
                dev.write(buf, struct.pack("<f", init) * n)
            self.slots.append(buf)
        self.s1, self.s2, self.s3 = self.slots
        self.mask = dev.buffer(4 * n, "optim.mask")
        dev.write(self.mask, plan.mask_bytes())
        self.clip = dev.buffer(4 * (2 + _PARTS), "optim.clip")
        b = plan.builder
        b.current = []
        params = self.uniform(n)
        binds = [plan.step, plan.P, plan.G, self.s1, self.s2, self.mask, self.s3, self.clip]
        if self.clip_grad_norm > 0:
            await b.kernel("optim", "grad_sumsq", params, binds, (self._parts(n), 1, 1))
            await b.kernel("optim", "grad_norm", params, binds, (1, 1, 1))
        await b.kernel("optim", self.entry, params, binds, groups_1d(n))
        self.dispatches = b.current

    def state_buffers(self):
        return [buf for buf, used in zip(self.slots, self.states) if used]

    def _header(self) -> dict:
        return {"optimizer": self.name, "entry": self.entry, "elements": self.n,
                "buffers": [s for s in self.states if s]}

    async def state_bytes(self, dev) -> bytes:
        """The optimizer state for a checkpoint: ``_MAGIC``, u32 header length, the JSON header
        (optimizer class, entry point, elements per buffer, buffer names), then each state
        buffer's ``elements`` float32 (little-endian) in header order. The step count is the
        trainer's to save (it feeds ``scalars``)."""
        head = json.dumps(self._header(), sort_keys=True).encode()
        out = [_MAGIC, struct.pack("<I", len(head)), head]
        for buf in self.state_buffers():
            out.append(await dev.read(buf, 0, 4 * self.n))
        return b"".join(out)

    def load_state_bytes(self, dev, data) -> None:
        """Restore what ``state_bytes`` saved into this attached optimizer. Raises ValueError
        naming what differs (format, optimizer, state buffers, element count, length)."""
        data = bytes(data)
        if data[:len(_MAGIC)] != _MAGIC:
            raise ValueError("not an optimizer state (bad magic)")
        (hlen,) = struct.unpack_from("<I", data, len(_MAGIC))
        start = len(_MAGIC) + 4
        try:
            head = json.loads(data[start:start + hlen].decode())
        except ValueError as exc:
            raise ValueError(f"optimizer state header is not JSON: {exc}") from None
        mine = self._header()
        for key in ("optimizer", "entry", "buffers", "elements"):
            if head.get(key) != mine[key]:
                raise ValueError(f"optimizer state mismatch: {key} is {head.get(key)!r} in the "
                                 f"saved state but {mine[key]!r} here")
        body = data[start + hlen:]
        want = 4 * self.n * len(mine["buffers"])
        if len(body) != want:
            raise ValueError(f"optimizer state mismatch: {len(body)} bytes of state, "
                             f"expected {want}")
        for k, buf in enumerate(self.state_buffers()):
            dev.write(buf, body[4 * self.n * k:4 * self.n * (k + 1)])


class SGD(Optimizer):
    """torch.optim.SGD(lr, momentum=0, dampening=0, weight_decay=0, nesterov=False)."""

    entry = "sgd"

    def __init__(self, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
                 clip_grad_norm=0.0):
        super().__init__(lr, weight_decay, clip_grad_norm)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        self.momentum, self.dampening, self.nesterov = momentum, dampening, nesterov
        self.states = ("momentum_buffer" if momentum else "", "", "")

    def params(self):
        return (int(self.nesterov), 0, 0, float(self.momentum), float(self.dampening),
                self.weight_decay, 0.0, 0.0, 0.0)


class Adam(Optimizer):
    """torch.optim.Adam(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False);
    AdamW when ``decoupled`` (torch.optim.AdamW, weight_decay 1e-2 there). amsgrad keeps
    max_exp_avg_sq = max(max_exp_avg_sq, exp_avg_sq) and divides by its root (torch's form)."""

    entry = "adam"

    def __init__(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 decoupled=False, amsgrad=False, clip_grad_norm=0.0):
        super().__init__(lr, weight_decay, clip_grad_norm)
        self.betas, self.eps, self.decoupled = tuple(betas), eps, decoupled
        self.amsgrad = bool(amsgrad)
        self.states = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq" if amsgrad else "")

    @property
    def name(self):
        return "AdamW" if self.decoupled else "Adam"

    def params(self):
        return (0, int(self.decoupled), AMSGRAD if self.amsgrad else 0, 0.0, 0.0,
                self.weight_decay, float(self.eps), float(self.betas[0]), float(self.betas[1]))

    def scalars(self, t, lr):
        bc1 = 1.0 - self.betas[0] ** t
        bc2 = 1.0 - self.betas[1] ** t
        return (lr / bc1, bc2 ** 0.5, 0.0)


class Adagrad(Optimizer):
    """torch.optim.Adagrad(lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0,
    eps=1e-10)."""

    entry = "adagrad"
    states = ("sum", "", "")

    def __init__(self, lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0,
                 eps=1e-10, clip_grad_norm=0.0):
        super().__init__(lr, weight_decay, clip_grad_norm)
        self.lr_decay, self.eps = lr_decay, eps
        self.state_init = (float(initial_accumulator_value), 0.0, 0.0)

    def params(self):
        return (0, 0, 0, 0.0, 0.0, self.weight_decay, float(self.eps), 0.0, 0.0)

    def scalars(self, t, lr):
        return (lr / (1.0 + (t - 1) * self.lr_decay), 1.0, 0.0)


class RMSprop(Optimizer):
    """torch.optim.RMSprop(lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0,
    centered=False): v = alpha v + (1 - alpha) g^2; centered subtracts the squared running
    mean of g; the step is g / (sqrt(v~) + eps), through a momentum buffer when momentum > 0
    (torch.optim.RMSprop docs, "Algorithm")."""

    entry = "rmsprop"

    def __init__(self, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0,
                 centered=False, clip_grad_norm=0.0):
        super().__init__(lr, weight_decay, clip_grad_norm)
        if not 0.0 <= alpha:
            raise ValueError(f"Invalid alpha value: {alpha}")
        self.alpha, self.eps, self.momentum = float(alpha), float(eps), float(momentum)
        self.centered = bool(centered)
        self.states = ("square_avg", "momentum_buffer" if momentum > 0 else "",
                       "grad_avg" if centered else "")

    def params(self):
        return (0, 0, CENTERED if self.centered else 0, self.momentum, 0.0, self.weight_decay,
                self.eps, 0.0, self.alpha)


class Adadelta(Optimizer):
    """torch.optim.Adadelta(lr=1.0, rho=0.9, eps=1e-6, weight_decay=0):
    v = rho v + (1 - rho) g^2; delta = sqrt(u + eps) / sqrt(v + eps) g;
    u = rho u + (1 - rho) delta^2; w -= lr delta (torch.optim.Adadelta docs, "Algorithm")."""

    entry = "adadelta"
    states = ("square_avg", "acc_delta", "")

    def __init__(self, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0, clip_grad_norm=0.0):
        super().__init__(lr, weight_decay, clip_grad_norm)
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        self.rho, self.eps = float(rho), float(eps)

    def params(self):
        return (0, 0, 0, 0.0, 0.0, self.weight_decay, self.eps, 0.0, self.rho)


NAMES = ("sgd", "adam", "adamw", "adagrad", "rmsprop", "adadelta")


def make(name: str, lr: float, momentum: float = 0.0, weight_decay: float = 0.0, **extra):
    """The optimizer named ``name`` (one of ``NAMES``), torch.optim's keyword names in ``extra``
    (e.g. ``betas``, ``eps``, ``amsgrad``, ``alpha``, ``centered``, ``rho``, ``nesterov``,
    ``dampening``, ``lr_decay``) plus ``clip_grad_norm`` (0 = off). ``momentum`` is used by SGD
    and RMSprop only. Raises ValueError for an unknown name or keyword."""
    name = name.lower()
    try:
        if name == "sgd":
            return SGD(lr, momentum=momentum, weight_decay=weight_decay, **extra)
        if name == "adam":
            return Adam(lr, weight_decay=weight_decay, **extra)
        if name == "adamw":
            return Adam(lr, weight_decay=weight_decay or 1e-2, decoupled=True, **extra)
        if name == "adagrad":
            return Adagrad(lr, weight_decay=weight_decay, **extra)
        if name == "rmsprop":
            return RMSprop(lr, momentum=momentum, weight_decay=weight_decay, **extra)
        if name == "adadelta":
            return Adadelta(lr, weight_decay=weight_decay, **extra)
    except TypeError as exc:
        raise ValueError(f"optimizer {name!r}: {exc}") from None
    raise ValueError(f"unknown optimizer {name!r}: choose one of {', '.join(NAMES)}")
