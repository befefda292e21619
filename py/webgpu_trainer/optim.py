"""Optimizers with torch.optim's names, defaults and semantics, one dispatch per step.

Each optimizer states its WGSL entry point (shaders/optim.wgsl), its hyper-parameters as the
kernel's uniform, and the per-step scalars (``scalars(t, lr) -> (a0, a1, a2)``); the base class
owns the state buffers and the dispatch.
"""

from .backends.base import groups_1d, pack_params


class Optimizer:
    """Base: ``await opt.attach(plan)`` builds state buffers and the update dispatch."""

    entry = ""
    initial_state = 0.0

    def __init__(self, lr: float, weight_decay: float = 0.0):
        if lr <= 0:
            raise ValueError(f"lr must be positive, got {lr}")
        self.lr, self.weight_decay = float(lr), float(weight_decay)

    def uniform(self, n: int) -> bytes:
        return pack_params(n, 0, 0, 0, 0.0, 0.0, self.weight_decay, 1e-8, 0.9, 0.999, 0, 0)

    def scalars(self, t: int, lr: float):
        return (0.0, 1.0, 0.0)

    async def attach(self, plan):
        dev, n = plan.dev, plan.wbytes // 4
        self.s1 = dev.buffer(4 * n, "optim.s1")
        self.s2 = dev.buffer(4 * n, "optim.s2")
        if self.initial_state:
            import struct
            dev.write(self.s1, struct.pack("<f", self.initial_state) * n)
        self.mask = dev.buffer(4 * n, "optim.mask")
        dev.write(self.mask, plan.mask_bytes())
        b = plan.builder
        b.current = []
        await b.kernel("optim", self.entry, self.uniform(n),
                       [plan.step, plan.P, plan.G, self.s1, self.s2, self.mask], groups_1d(n))
        self.dispatches = b.current

    def state_buffers(self):
        return [self.s1, self.s2]


class SGD(Optimizer):
    """torch.optim.SGD(lr, momentum=0, dampening=0, weight_decay=0, nesterov=False)."""

    entry = "sgd"

    def __init__(self, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
        super().__init__(lr, weight_decay)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        self.momentum, self.dampening, self.nesterov = momentum, dampening, nesterov

    def uniform(self, n):
        return pack_params(n, int(self.nesterov), 0, 0, float(self.momentum),
                           float(self.dampening), self.weight_decay, 0.0, 0.0, 0.0, 0, 0)


class Adam(Optimizer):
    """torch.optim.Adam(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0); AdamW when
    ``decoupled`` (torch.optim.AdamW, weight_decay 1e-2 there)."""

    entry = "adam"

    def __init__(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 decoupled=False):
        super().__init__(lr, weight_decay)
        self.betas, self.eps, self.decoupled = betas, eps, decoupled

    def uniform(self, n):
        return pack_params(n, 0, int(self.decoupled), 0, 0.0, 0.0, self.weight_decay,
                           float(self.eps), float(self.betas[0]), float(self.betas[1]), 0, 0)

    def scalars(self, t, lr):
        bc1 = 1.0 - self.betas[0] ** t
        bc2 = 1.0 - self.betas[1] ** t
        return (lr / bc1, bc2 ** 0.5, 0.0)


class Adagrad(Optimizer):
    """torch.optim.Adagrad(lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0,
    eps=1e-10)."""

    entry = "adagrad"

    def __init__(self, lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0,
                 eps=1e-10):
        super().__init__(lr, weight_decay)
        self.lr_decay, self.eps = lr_decay, eps
        self.initial_state = float(initial_accumulator_value)

    def uniform(self, n):
        return pack_params(n, 0, 0, 0, 0.0, 0.0, self.weight_decay, float(self.eps), 0.0, 0.0,
                           0, 0)

    def scalars(self, t, lr):
        return (lr / (1.0 + (t - 1) * self.lr_decay), 1.0, 0.0)


def make(name: str, lr: float, momentum: float = 0.0, weight_decay: float = 0.0):
    """The optimizer named ``name`` ("sgd", "adam", "adamw", "adagrad"). Raises ValueError."""
    name = name.lower()
    if name == "sgd":
        return SGD(lr, momentum=momentum, weight_decay=weight_decay)
    if name == "adam":
        return Adam(lr, weight_decay=weight_decay)
    if name == "adamw":
        return Adam(lr, weight_decay=weight_decay or 1e-2, decoupled=True)
    if name == "adagrad":
        return Adagrad(lr, weight_decay=weight_decay)
    raise ValueError(f"unknown optimizer {name!r}: choose sgd, adam, adamw or adagrad")
