"""Learning-rate schedulers with torch.optim.lr_scheduler's names, defaults and arithmetic, as
pure functions of the optimizer step (standard library only: this runs in Pyodide).

``lr_at(t)`` is the learning rate of optimizer step ``t`` (1-based), the value torch's optimizer
holds in ``param_groups[0]["lr"]`` when it takes that step. StepLR, ExponentialLR and
CosineAnnealingLR are stepped once per epoch in torch's usual loop (``scheduler.step()`` after
each epoch), so step ``t`` uses the schedule's epoch ``(t - 1) // steps_per_epoch``
(``interval="step"`` steps them per batch instead); OneCycleLR is stepped per batch, so step
``t`` uses its ``last_epoch = t - 1``. The epoch-wise schedulers replay torch's recursive
(chainable) ``get_lr`` form, not the closed form, so the values match torch's bit for bit up
to the order of float operations.

``momentum_at(t)`` is the momentum (SGD, RMSprop) or beta1 (Adam, AdamW) the schedule sets for
step ``t``, or None when it leaves momentum alone (every scheduler but OneCycleLR with
``cycle_momentum``); ``cycles_momentum`` says which. ``optim.Optimizer.follow(schedule)`` wires it
into an optimizer.

``make(cfg, steps_per_epoch)`` builds the scheduler of a trainer config: ``cfg["lr"]``
and optional ``cfg["scheduler"]``, e.g. ``{"name": "steplr", "step_size": 1, "gamma": 0.7}``;
absent (or None) -> the constant ``cfg["lr"]``.

The arguments are not checked here (torch's run-time errors, stepping past OneCycleLR's
``total_steps``, remain): a run's are checked once by ``engine/config`` (``config.parse``, which
also checks ``total_steps`` against the run's steps before any work).
"""

import math


class Constant:
    """No scheduler: ``lr`` at every step."""

    def __init__(self, lr: float):
        self.lr = float(lr)

    cycles_momentum = False

    def lr_at(self, step: int) -> float:
        return self.lr

    def momentum_at(self, step: int):
        return None

    __call__ = lr_at


class _EpochScheduler:
    """A torch scheduler stepped once per ``steps_per_epoch`` optimizer steps (``interval``
    "epoch") or once per step ("step"); subclasses give torch's recursive ``_next``."""

    def __init__(self, lr: float, steps_per_epoch: int = 1, interval: str = "epoch"):
        self.base_lr = float(lr)
        self.per = max(1, int(steps_per_epoch)) if interval == "epoch" else 1
        self._lrs = [self.base_lr]  # lr after torch's last_epoch = k steps, k = index

    def _next(self, epoch: int, lr: float) -> float:
        raise NotImplementedError

    def lr_at_epoch(self, epoch: int) -> float:
        """The lr after ``epoch`` calls of torch's ``scheduler.step()`` (last_epoch = epoch)."""
        while len(self._lrs) <= epoch:
            self._lrs.append(self._next(len(self._lrs), self._lrs[-1]))
        return self._lrs[epoch]

    cycles_momentum = False

    def lr_at(self, step: int) -> float:
        return self.lr_at_epoch((max(int(step), 1) - 1) // self.per)

    def momentum_at(self, step: int):
        return None

    __call__ = lr_at


class StepLR(_EpochScheduler):
    """torch.optim.lr_scheduler.StepLR(step_size, gamma=0.1): lr *= gamma every ``step_size``
    epochs (lr = base_lr * gamma ** (epoch // step_size))."""

    def __init__(self, lr, step_size, gamma=0.1, steps_per_epoch=1, interval="epoch"):
        super().__init__(lr, steps_per_epoch, interval)
        self.step_size, self.gamma = int(step_size), float(gamma)

    def _next(self, epoch, lr):
        return lr if epoch % self.step_size else lr * self.gamma


class ExponentialLR(_EpochScheduler):
    """torch.optim.lr_scheduler.ExponentialLR(gamma): lr *= gamma every epoch."""

    def __init__(self, lr, gamma, steps_per_epoch=1, interval="epoch"):
        super().__init__(lr, steps_per_epoch, interval)
        self.gamma = float(gamma)

    def _next(self, epoch, lr):
        return lr * self.gamma


class CosineAnnealingLR(_EpochScheduler):
    """torch.optim.lr_scheduler.CosineAnnealingLR(T_max, eta_min=0):
    eta_t = eta_min + (base_lr - eta_min) (1 + cos(pi T_cur / T_max)) / 2 (SGDR, Loshchilov &
    Hutter 2017, without restarts), computed with torch's recursive form (which keeps going past
    T_max as a cosine of period 2 T_max)."""

    def __init__(self, lr, T_max, eta_min=0.0, steps_per_epoch=1, interval="epoch"):
        super().__init__(lr, steps_per_epoch, interval)
        self.T_max, self.eta_min = int(T_max), float(eta_min)

    def _next(self, epoch, lr):
        T, eta = self.T_max, self.eta_min
        if (epoch - 1 - T) % (2 * T) == 0:
            return lr + (self.base_lr - eta) * (1 - math.cos(math.pi / T)) / 2
        return ((1 + math.cos(math.pi * epoch / T)) / (1 + math.cos(math.pi * (epoch - 1) / T))
                * (lr - eta) + eta)


class OneCycleLR:
    """torch.optim.lr_scheduler.OneCycleLR(max_lr, total_steps, pct_start=0.3,
    anneal_strategy="cos", cycle_momentum=True, div_factor=25, final_div_factor=1e4,
    three_phase=False, base_momentum=0.85, max_momentum=0.95), stepped per batch (Smith &
    Topin 2017, "Super-Convergence"; fastai's two phases unless ``three_phase``). lr starts at
    max_lr / div_factor (the optimizer's own lr is replaced, as in torch), rises to max_lr over
    pct_start of the steps, then anneals to initial_lr / final_div_factor.

    With ``cycle_momentum`` (torch's default) the momentum moves inversely: max_momentum ->
    base_momentum while the lr rises, back to max_momentum while it falls (three_phase: stays at
    max_momentum in the last phase). ``momentum_at(t)`` is the value torch writes into the
    optimizer's ``momentum`` (SGD, RMSprop) or ``betas[0]`` (Adam, AdamW) before step ``t``;
    the optimizer replaces its own momentum / beta1 with it (``optim.Optimizer.follow``).
    Stepping past ``total_steps`` raises ValueError as torch does."""

    def __init__(self, max_lr, total_steps=None, epochs=None, steps_per_epoch=None,
                 pct_start=0.3, anneal_strategy="cos", cycle_momentum=True, div_factor=25.0,
                 final_div_factor=1e4, three_phase=False, base_momentum=0.85,
                 max_momentum=0.95):
        if total_steps is None:
            if not epochs or not steps_per_epoch:
                raise ValueError("You must define either total_steps OR (epochs AND "
                                 "steps_per_epoch)")
            total_steps = int(epochs) * int(steps_per_epoch)
        self.total_steps = n = int(total_steps)
        self.anneal = anneal_strategy
        self.initial_lr = float(max_lr) / div_factor
        self.max_lr = float(max_lr)
        self.min_lr = self.initial_lr / final_div_factor
        self.cycle_momentum = bool(cycle_momentum)
        hi, lo = float(max_momentum), float(base_momentum)
        self.max_momentum, self.base_momentum = hi, lo
        pct = float(pct_start)
        # (end step, start lr, end lr, start momentum, end momentum), torch's _schedule_phases
        if three_phase:
            self.phases = [(float(pct * n) - 1, self.initial_lr, self.max_lr, hi, lo),
                           (float(2 * pct * n) - 2, self.max_lr, self.initial_lr, lo, hi),
                           (n - 1, self.initial_lr, self.min_lr, hi, hi)]
        else:
            self.phases = [(float(pct * n) - 1, self.initial_lr, self.max_lr, hi, lo),
                           (n - 1, self.max_lr, self.min_lr, lo, hi)]

    @property
    def cycles_momentum(self) -> bool:
        return self.cycle_momentum

    def _anneal_value(self, start, end, pct):
        if self.anneal == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def _at(self, step_num: int):
        """(lr, momentum) of torch's get_lr at ``last_epoch = step_num``."""
        if step_num > self.total_steps:
            raise ValueError(f"Tried to step {step_num} times. The specified number of total "
                             f"steps is {self.total_steps}")
        start = 0.0
        for i, (end, lo, hi, m0, m1) in enumerate(self.phases):
            if step_num <= end or i == len(self.phases) - 1:
                if end == start:  # torch divides by zero here
                    raise ValueError(f"OneCycleLR: phase {i + 1} of the cycle has no steps "
                                     f"(total_steps {self.total_steps} is too few for its "
                                     "pct_start)")
                pct = (step_num - start) / (end - start)
                return self._anneal_value(lo, hi, pct), self._anneal_value(m0, m1, pct)
            start = end
        raise AssertionError("unreachable")

    def lr_at_epoch(self, step_num: int) -> float:
        """torch's get_lr at ``last_epoch = step_num`` (batches stepped so far)."""
        return self._at(step_num)[0]

    def lr_at(self, step: int) -> float:
        return self.lr_at_epoch(max(int(step), 1) - 1)

    def momentum_at(self, step: int):
        """The momentum / beta1 of optimizer step ``step`` (1-based); None without
        ``cycle_momentum``."""
        if not self.cycle_momentum:
            return None
        return self._at(max(int(step), 1) - 1)[1]

    __call__ = lr_at


NAMES = {"steplr": StepLR, "exponentiallr": ExponentialLR,
         "cosineannealinglr": CosineAnnealingLR, "onecyclelr": OneCycleLR}
_ALIASES = {"step": "steplr", "exponential": "exponentiallr", "cosine": "cosineannealinglr",
            "cosineannealing": "cosineannealinglr", "onecycle": "onecyclelr"}


def make(cfg: dict, steps_per_epoch: int = 1):
    """The ``lr_at(step)`` callable of a trainer config: ``cfg["lr"]`` and optional
    ``cfg["scheduler"]`` = ``{"name": ..., **torch's keyword arguments}`` (names as torch's
    classes, case-insensitive, also "step", "exponential", "cosine", "onecycle"), every argument
    stated (``config.RunConfig.trainer_config()`` resolves OneCycleLR's ``max_lr`` and
    ``total_steps``). Raises ValueError for an unknown name or keyword."""
    lr = float(cfg["lr"])
    spec = cfg.get("scheduler")
    if not spec:
        return Constant(lr)
    kwargs = {k: v for k, v in spec.items() if k != "name"}
    key = str(spec.get("name", "")).lower().replace("_", "")
    key = _ALIASES.get(key, key)
    if key not in NAMES:
        raise ValueError(f"unknown scheduler {spec.get('name')!r}: choose one of "
                         f"{', '.join(c.__name__ for c in NAMES.values())}")
    try:
        if key == "onecyclelr":
            if "epochs" in kwargs:
                kwargs.setdefault("steps_per_epoch", int(steps_per_epoch))
            return OneCycleLR(**kwargs)
        return NAMES[key](lr, steps_per_epoch=steps_per_epoch, **kwargs)
    except TypeError as exc:
        raise ValueError(f"scheduler {spec.get('name')!r}: {exc}") from None
