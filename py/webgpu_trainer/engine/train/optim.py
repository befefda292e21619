"""Optimizers with torch.optim's names, defaults and semantics, one dispatch per step.

Each optimizer states its WGSL entry point (shaders/optim.wgsl), its hyper-parameters as the
kernel's uniform, and the per-step scalars (``scalars(t, lr) -> (a0, a1, a2)``); the base class
owns the state buffers and the dispatch. ``clip_grad_norm`` > 0 adds gradient clipping by the
global norm (torch.nn.utils.clip_grad_norm_(params, max_norm)) computed on the GPU in two
reduction dispatches before the update; no readback.

The state saves and restores through ``await opt.state_bytes(dev)`` /
``opt.load_state_bytes(dev, data)`` (a small JSON header, then each state buffer's float32s).

The momentum (SGD, RMSprop) and Adam's beta1 are per-step scalars (``a2`` of the step uniform),
so a schedule can change them between steps as torch's OneCycleLR(cycle_momentum=True) does:
``opt.follow(schedule)`` (``schedulers``; call it before ``attach`` when the optimizer was built
with momentum 0, so that the momentum buffer exists) takes them from ``schedule.momentum_at(t)``.

The hyper-parameters are not checked here: a run's are checked once, with every other option,
by ``engine/config`` (``config.parse``); the constructors trust them, as the trainers do.
"""

import json
import struct

from ..backends.base import groups_1d, round_up

AMSGRAD, CENTERED, GUARD = 1, 2, 4  # Params.flags bits of shaders/optim.wgsl
_MAGIC = b"WGTOPT1\n"
_PARTS = 256  # most level-1 workgroups of the gradient-norm reduction



def _fields(nesterov=0, decoupled=0, flags=0, momentum=0.0, dampening=0.0, weight_decay=0.0,
            eps=0.0, beta1=0.0, beta2=0.0) -> dict:
    """optim.wgsl's Params from ``nesterov`` to ``beta2`` (0 where an optimizer has none)."""
    return dict(nesterov=nesterov, decoupled=decoupled, flags=flags, momentum=momentum,
                dampening=dampening, weight_decay=weight_decay, eps=eps, beta1=beta1, beta2=beta2)

class Optimizer:
    """Base: ``await opt.attach(plan)`` builds state buffers and the update dispatch.

    ``states`` names the state buffers S1, S2, S3 the optimizer uses (None: unused, bound to a
    16-byte placeholder); ``state_init`` their initial values."""

    entry = ""
    states = ("", "", "")
    state_init = (0.0, 0.0, 0.0)
    cycles = None  # what torch's OneCycleLR(cycle_momentum=True) drives: "momentum" | "beta1"

    def __init__(self, lr: float, weight_decay: float = 0.0, clip_grad_norm: float = 0.0):
        self.lr, self.weight_decay = float(lr), float(weight_decay)
        self.clip_grad_norm = float(clip_grad_norm)
        self.momentum_at = None  # step -> momentum / beta1 (or None), set by follow()
        self.attached = False

    @property
    def name(self) -> str:
        return type(self).__name__

    def params(self) -> dict:
        """The uniform's fields from ``nesterov`` to ``beta2`` (see Params in optim.wgsl)."""
        return _fields(eps=1e-8, beta1=0.9, beta2=0.999, weight_decay=self.weight_decay)

    def uniform(self, n: int) -> dict:
        """Every field of optim.wgsl's Params for ``n`` weights."""
        return dict(self.params(), n=n, max_norm=self.clip_grad_norm, parts=self._parts(n))

    @staticmethod
    def _parts(n: int) -> int:
        return max(1, min(_PARTS, (n + 255) // 256))

    def base_momentum(self) -> float:
        """The momentum / beta1 given to the constructor (0 where there is none)."""
        return 0.0

    def momentum_of(self, t: int) -> float:
        """The momentum (SGD, RMSprop) or beta1 (Adam) of step ``t``: the schedule's when
        ``follow`` installed one, else the constructor's."""
        if self.momentum_at is not None:
            m = self.momentum_at(t)
            if m is not None:
                return float(m)
        return self.base_momentum()

    def follow(self, schedule):
        """Take each step's momentum / beta1 from ``schedule.momentum_at(t)`` when the schedule
        cycles it (torch's OneCycleLR with cycle_momentum=True, which overwrites the optimizer's
        ``momentum`` or ``betas[0]`` before every step); a schedule that does not is ignored.
        Raises ValueError with torch's message for optimizers that have neither (Adagrad,
        Adadelta), and when called after ``attach`` on an optimizer that has no momentum buffer
        (built with momentum 0). Returns ``self``."""
        cycling = getattr(schedule, "cycles_momentum", False)
        if cycling and self.cycles is None:
            raise ValueError(f"{self.name}: optimizer must support momentum or beta1 with "
                             "`cycle_momentum` option enabled")
        before, old = tuple(self.states), self.momentum_at
        self.momentum_at = schedule.momentum_at if cycling else None
        if self.attached and tuple(self.states) != before:
            self.momentum_at = old
            raise ValueError(f"{self.name} was built with momentum 0: call follow(schedule) "
                             "before attach() (the momentum buffer is made there)")
        return self

    def scalars(self, t: int, lr: float):
        """``(a0, a1, a2)`` of step ``t`` (see each kernel in optim.wgsl); ``a2`` is the
        step's momentum / beta1."""
        return (0.0, 1.0, self.momentum_of(t))

    async def attach(self, plan, guard=None):
        """Make the state buffers and record the update (``dispatches``: the clipping norm's two,
        then the update). ``guard`` (``guard.Guard`` of ``plan``, or None): the update flags
        its non-finite gradients when ``guard.in_update`` allows, and the guard records no
        dispatch of its own."""
        dev, n = plan.dev, plan.wbytes // 4
        self.n = n
        self.slots = []
        for k, (used, init) in enumerate(zip(self.states, self.state_init)):
            buf = dev.buffer(round_up(4 * n, 16) if used else 16, f"optim.s{k + 1}")
            if used and init:
                dev.write(buf, struct.pack("<f", init) * n)
            self.slots.append(buf)
        self.s1, self.s2, self.s3 = self.slots
        watch = guard.in_update(plan) if guard is not None else None
        shift, owners = plan.owners(watch)
        self.mask = dev.buffer(len(owners), "optim.mask")
        dev.write(self.mask, owners)
        self.clip = dev.buffer(4 * (2 + _PARTS), "optim.clip")
        b = plan.builder
        b.current = []
        params = dict(self.uniform(n), shift=shift)
        if watch is not None:
            params["flags"] |= GUARD
        # unread without GUARD, but bound: a guard's flags, else 16 bytes
        flags = guard.flags if guard is not None else dev.buffer(16, "optim.flags")
        binds = dict(params=params, st=plan.step, P=plan.P, G=plan.G, S1=self.s1, S2=self.s2,
                     mask=self.mask, S3=self.s3, clip=self.clip, flags=flags)
        if self.clip_grad_norm > 0:
            await b.kernel("optim", "grad_sumsq", (self._parts(n), 1, 1), **binds)
            await b.kernel("optim", "grad_norm", (1, 1, 1), **binds)
        if self.entry == "adam" and b.tiled and b.OPTIM_VEC4:  # P, G, S1-3 whole vec4s
            await b.kernel("adam_vec4", "adam4", groups_1d((n + 3) // 4), params=params,
                           st=plan.step, P4=plan.P, G4=plan.G, S14=self.s1, S24=self.s2,
                           mask=self.mask, S34=self.s3, clip=self.clip, flags=flags)
        else:
            await b.kernel("optim", self.entry, groups_1d(n), **binds)
        self.dispatches = b.current
        self.attached = True

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
        self.momentum, self.dampening, self.nesterov = momentum, dampening, nesterov

    cycles = "momentum"

    @property
    def states(self):
        used = self.momentum or self.momentum_at is not None
        return ("momentum_buffer" if used else "", "", "")

    def base_momentum(self):
        return float(self.momentum)

    def params(self):
        return _fields(nesterov=int(self.nesterov), momentum=self.momentum,
                       dampening=self.dampening, weight_decay=self.weight_decay)


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
        return _fields(decoupled=int(self.decoupled), flags=AMSGRAD if self.amsgrad else 0,
                       weight_decay=self.weight_decay, eps=self.eps, beta1=self.betas[0],
                       beta2=self.betas[1])

    cycles = "beta1"

    def base_momentum(self):
        return float(self.betas[0])

    def scalars(self, t, lr):
        beta1 = self.momentum_of(t)  # torch: bias_correction1 = 1 - beta1 ** step, current beta1
        bc1 = 1.0 - beta1 ** t
        bc2 = 1.0 - self.betas[1] ** t
        return (lr / bc1, bc2 ** 0.5, beta1)


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
        return _fields(weight_decay=self.weight_decay, eps=self.eps)

    def scalars(self, t, lr):
        return (lr / (1.0 + (t - 1) * self.lr_decay), 1.0, 0.0)

    def momentum_of(self, t):
        return 0.0


class RMSprop(Optimizer):
    """torch.optim.RMSprop(lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0,
    centered=False): v = alpha v + (1 - alpha) g^2; centered subtracts the squared running
    mean of g; the step is g / (sqrt(v~) + eps), through a momentum buffer when momentum > 0
    (torch.optim.RMSprop docs, "Algorithm")."""

    entry = "rmsprop"

    def __init__(self, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0,
                 centered=False, clip_grad_norm=0.0):
        super().__init__(lr, weight_decay, clip_grad_norm)
        self.alpha, self.eps, self.momentum = float(alpha), float(eps), float(momentum)
        self.centered = bool(centered)

    cycles = "momentum"

    @property
    def states(self):
        used = self.momentum > 0 or self.momentum_at is not None
        return ("square_avg", "momentum_buffer" if used else "",
                "grad_avg" if self.centered else "")

    def base_momentum(self):
        return self.momentum

    def params(self):
        return _fields(flags=CENTERED if self.centered else 0, momentum=self.momentum,
                       weight_decay=self.weight_decay, eps=self.eps, beta2=self.alpha)


class Adadelta(Optimizer):
    """torch.optim.Adadelta(lr=1.0, rho=0.9, eps=1e-6, weight_decay=0):
    v = rho v + (1 - rho) g^2; delta = sqrt(u + eps) / sqrt(v + eps) g;
    u = rho u + (1 - rho) delta^2; w -= lr delta (torch.optim.Adadelta docs, "Algorithm")."""

    entry = "adadelta"
    states = ("square_avg", "acc_delta", "")

    def __init__(self, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0, clip_grad_norm=0.0):
        super().__init__(lr, weight_decay, clip_grad_norm)
        self.rho, self.eps = float(rho), float(eps)

    def params(self):
        return _fields(weight_decay=self.weight_decay, eps=self.eps, beta2=self.rho)

    def momentum_of(self, t):
        return 0.0


NAMES = ("sgd", "adam", "adamw", "adagrad", "rmsprop", "adadelta")


def make(name: str, lr: float, momentum: float = 0.0, weight_decay: float | None = None,
         **extra):
    """The optimizer named ``name`` (one of ``NAMES``), torch.optim's keyword names in ``extra``
    (e.g. ``betas``, ``eps``, ``amsgrad``, ``alpha``, ``centered``, ``rho``, ``nesterov``,
    ``dampening``, ``lr_decay``) plus ``clip_grad_norm`` (0 = off). ``momentum`` is used by SGD
    and RMSprop only; ``weight_decay`` None is torch's default (AdamW 1e-2, the others 0).
    Raises ValueError for an unknown name or keyword."""
    name = name.lower()
    if weight_decay is None:
        weight_decay = 1e-2 if name == "adamw" else 0.0
    try:
        if name == "sgd":
            return SGD(lr, momentum=momentum, weight_decay=weight_decay, **extra)
        if name == "adam":
            return Adam(lr, weight_decay=weight_decay, **extra)
        if name == "adamw":
            return Adam(lr, weight_decay=weight_decay, decoupled=True, **extra)
        if name == "adagrad":
            return Adagrad(lr, weight_decay=weight_decay, **extra)
        if name == "rmsprop":
            return RMSprop(lr, momentum=momentum, weight_decay=weight_decay, **extra)
        if name == "adadelta":
            return Adadelta(lr, weight_decay=weight_decay, **extra)
    except TypeError as exc:
        raise ValueError(f"optimizer {name!r}: {exc}") from None
    raise ValueError(f"unknown optimizer {name!r}: choose one of {', '.join(NAMES)}")
