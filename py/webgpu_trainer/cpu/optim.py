"""The optimizers of ``webgpu_trainer.optim`` on the CPU: numpy float32 updates over the flat
weight vector, with torch.optim's semantics (PyTorch 2.x docs, the "Algorithm" box of each).

Each class subclasses its GPU twin (same name, constructor, hyper-parameter names and
validation, ``scalars``, ``follow`` for OneCycleLR's momentum / beta1 cycling, and the same
state format), and replaces the WGSL dispatch by ``step``:

    opt = make("adam", 1e-3, betas=(0.9, 0.99), clip_grad_norm=1.0)
    opt.follow(lr_at)              # optional: momentum / beta1 from the schedule (OneCycleLR)
    opt.attach_flat(n, mask)       # n float32 elements, mask [n] (1 trainable, 0 left alone)
    opt.step(P, G, t, lr_at(t))    # in place on P (float32 [n]); G float32 [n]

``P`` / ``G`` are laid out like the bundle's weight blob (as the GPU's ``P`` / ``G`` buffers);
elements whose mask is 0 (BatchNorm running statistics, padding) are never touched. Every
arithmetic step is float32, in the order of shaders/optim.wgsl. ``clip_grad_norm`` > 0 scales
the gradient by ``min(1, max_norm / (||G * mask||_2 + 1e-6))`` first
(torch.nn.utils.clip_grad_norm_; the norm is summed in float64, ``last_grad_norm`` keeps it).

The state (``state_bytes`` / ``load_state_bytes``, or the synchronous ``state_blob`` /
``load_state_blob``) is byte-compatible with the GPU optimizer's: a checkpoint written by one
backend restores into the other. CPython only (numpy).
"""

import numpy as np

from ..engine.train import optim as gpu

f32 = np.float32


class _Arrays:
    """The ``dev`` the GPU optimizer's state (de)serialisation talks to: buffers are numpy
    arrays here."""

    async def read(self, buf, offset=0, size=None):
        raw = buf.tobytes()
        return raw[offset:] if size is None else raw[offset:offset + size]

    def write(self, buf, data):
        buf[:] = np.frombuffer(bytes(data), "<f4", len(buf))


_ARRAYS = _Arrays()


def _sync(coro):
    """Run a coroutine that never suspends (state_bytes over numpy arrays) to its result."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    raise RuntimeError("coroutine suspended")


class NumpyOptimizer:
    """The numpy half of every CPU optimizer (mixed in before the GPU class)."""

    def attach_flat(self, n: int, mask) -> None:
        """State arrays for ``n`` float32 elements (the states of ``self.states``, initial
        values ``state_init``); ``mask`` [n]: nonzero where trainable."""
        self.n = int(n)
        mask = np.asarray(mask).reshape(-1)
        if mask.size != self.n:
            raise ValueError(f"mask has {mask.size} elements, expected {n}")
        self.idx = np.flatnonzero(mask)
        self.runs = _runs(self.idx)
        self.slots = [np.full(self.n, init, f32) if used else None
                      for used, init in zip(self.states, self.state_init)]
        self.s1, self.s2, self.s3 = self.slots
        self.last_grad_norm = None
        self.attached = True

    async def attach(self, plan):
        raise TypeError(f"{type(self).__module__}.{self.name} runs on numpy: use "
                        "attach_flat(n, mask), not attach(plan)")

    def state_buffers(self):
        return [buf for buf, used in zip(self.slots, self.states) if used]

    async def state_bytes(self, dev=None) -> bytes:
        """The state in the GPU optimizer's format (``optim.Optimizer.state_bytes``)."""
        return await gpu.Optimizer.state_bytes(self, _ARRAYS)

    def load_state_bytes(self, dev, data) -> None:
        """Restore what ``state_bytes`` (of either backend) saved; ValueError on a mismatch."""
        gpu.Optimizer.load_state_bytes(self, _ARRAYS, data)

    def state_blob(self) -> bytes:
        return _sync(self.state_bytes())

    def load_state_blob(self, data) -> None:
        self.load_state_bytes(None, data)

    def step(self, P, G, t: int, lr: float) -> None:
        """One optimizer step ``t`` (1-based) at learning rate ``lr``, in place on ``P``: one
        update per run of consecutive trainable elements (slices: views, where an index array
        gathered and scattered every state array; SeedNet's Adam 2.6 -> 0.9 ms a step)."""
        scale = None
        if self.clip_grad_norm > 0:
            norm = float(np.sqrt(np.sum(np.square(G[self.idx], dtype=np.float64))))
            self.last_grad_norm = norm
            scale = f32(min(1.0, self.clip_grad_norm / (norm + 1e-6)))
        a0, a1, a2 = self.scalars(t, lr)
        for run in self.runs:
            g = G[run] if scale is None else G[run] * scale
            P[run] = self._update(run, P[run], g, t, f32(lr), f32(a0), f32(a1), f32(a2))

    def _update(self, idx, w, g, t, lr, a0, a1, a2):
        raise NotImplementedError


def _runs(idx) -> list:
    """The slices of consecutive values of the sorted index array ``idx``."""
    if not idx.size:
        return []
    cut = np.flatnonzero(np.diff(idx) != 1) + 1
    return [slice(int(idx[a]), int(idx[b - 1]) + 1)
            for a, b in zip(np.r_[0, cut], np.r_[cut, idx.size])]


class SGD(NumpyOptimizer, gpu.SGD):
    __doc__ = gpu.SGD.__doc__

    def _update(self, idx, w, g, t, lr, a0, a1, momentum):
        g = g + f32(self.weight_decay) * w
        if momentum != 0:
            buf = g if t <= 1 else momentum * self.s1[idx] + f32(1.0 - self.dampening) * g
            self.s1[idx] = buf
            g = g + momentum * buf if self.nesterov else buf
        return w - lr * g


class Adam(NumpyOptimizer, gpu.Adam):
    __doc__ = gpu.Adam.__doc__

    def _update(self, idx, w, g, t, lr, a0, a1, beta1):
        wd = f32(self.weight_decay)
        if self.decoupled:
            w = w * (f32(1.0) - lr * wd)
        else:
            g = g + wd * w
        beta2 = f32(self.betas[1])
        m = beta1 * self.s1[idx] + (f32(1.0) - beta1) * g
        v = beta2 * self.s2[idx] + (f32(1.0) - beta2) * g * g
        self.s1[idx], self.s2[idx] = m, v
        if self.amsgrad:
            v = np.maximum(self.s3[idx], v)
            self.s3[idx] = v
        return w - a0 * m / (np.sqrt(v) / a1 + f32(self.eps))


class Adagrad(NumpyOptimizer, gpu.Adagrad):
    __doc__ = gpu.Adagrad.__doc__

    def _update(self, idx, w, g, t, lr, clr, a1, a2):
        g = g + f32(self.weight_decay) * w
        s = self.s1[idx] + g * g
        self.s1[idx] = s
        return w - clr * g / (np.sqrt(s) + f32(self.eps))


class RMSprop(NumpyOptimizer, gpu.RMSprop):
    __doc__ = gpu.RMSprop.__doc__

    def _update(self, idx, w, g, t, lr, a0, a1, momentum):
        g = g + f32(self.weight_decay) * w
        alpha = f32(self.alpha)
        v = alpha * self.s1[idx] + (f32(1.0) - alpha) * g * g
        self.s1[idx] = v
        if self.centered:
            ga = alpha * self.s3[idx] + (f32(1.0) - alpha) * g
            self.s3[idx] = ga
            avg = np.sqrt(v - ga * ga) + f32(self.eps)
        else:
            avg = np.sqrt(v) + f32(self.eps)
        if momentum > 0:
            buf = momentum * self.s2[idx] + g / avg
            self.s2[idx] = buf
            return w - lr * buf
        return w - lr * g / avg


class Adadelta(NumpyOptimizer, gpu.Adadelta):
    __doc__ = gpu.Adadelta.__doc__

    def _update(self, idx, w, g, t, lr, a0, a1, a2):
        g = g + f32(self.weight_decay) * w
        rho, eps = f32(self.rho), f32(self.eps)
        v = rho * self.s1[idx] + (f32(1.0) - rho) * g * g
        self.s1[idx] = v
        u = self.s2[idx]
        delta = np.sqrt(u + eps) / np.sqrt(v + eps) * g
        self.s2[idx] = rho * u + (f32(1.0) - rho) * delta * delta
        return w - lr * delta


_CPU = {gpu.SGD: SGD, gpu.Adam: Adam, gpu.Adagrad: Adagrad, gpu.RMSprop: RMSprop,
        gpu.Adadelta: Adadelta}
NAMES = gpu.NAMES


def make(name: str, lr: float, momentum: float = 0.0, weight_decay: float | None = None,
         **extra):
    """The numpy optimizer named ``name``: ``optim.make``'s arguments, names, defaults and
    errors (ValueError for an unknown name or keyword), as the class of this module."""
    twin = gpu.make(name, lr, momentum, weight_decay, **extra)
    opt = object.__new__(_CPU[type(twin)])
    opt.__dict__.update(vars(twin))
    return opt
