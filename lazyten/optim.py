"""Optimisers: read each parameter's `.grad`, write the new value into the parameter's own
buffer with `Tensor.assign`.

Parameters and optimiser state (momentum, Adam's moments, the step count, the learning
rate) are realized buffers that keep their storage across steps. `step()` builds every
update lazily and realizes them all in one call, so the scheduler sees the whole update
at once. The update is the same kernels on the same buffers every step, so from the
third step on it is replayed (lazyten/jit.py) instead of built: no graph, no schedule,
no Python per parameter (D59). Formulas and argument names follow PyTorch's SGD, Adam and
AdamW (`betas=`, `amsgrad`, `maximize`, `dampening`, `param_groups[0]["lr"]`).
"""
from __future__ import annotations
import math
import sys

import numpy as np

from codegen.dtypes import dtypes
from codegen.helpers import dedup
from codegen.ops import LoadOps
from lazyten.autograd.engine import take_roots
from lazyten.jit import JitError, TinyJit
from lazyten.lazy import pending_assigns
from lazyten import lr_scheduler  # noqa: F401  # lazyten.optim.lr_scheduler, as torch.optim's
from lazyten.nn.state import get_state_dict, load_state_dict, realize_owned
from lazyten.realize import realize
from lazyten.tensor import Tensor, no_grad, to_numpy_dtype

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam",
           "Adadelta"]
# `from lazyten.optim.lr_scheduler import StepLR` as from torch.optim (this is a module, not
# a package: the import statement finds the submodule here)
sys.modules[__name__ + ".lr_scheduler"] = lr_scheduler


def _zeros_like(t: Tensor) -> Tensor:
    """A realized zero buffer shaped like `t` (filled from the host: no kernel)."""
    return Tensor(np.zeros(t.shape, dtype=to_numpy_dtype(t.dtype)), device=t.device, dtype=t.dtype)


class Optimizer:
    """Base: holds the parameters that need gradients and the learning rate.

    `lr` is a 0-d float32 Tensor, so changing it (`opt.set_lr(0.01)`) changes no kernel of
    the step. Subclasses implement `_update() -> tensors written`."""

    def __init__(self, params: list[Tensor], lr: float):
        params = dedup(params)
        for p in params:
            if p.requires_grad is None:  # tinygrad's convention: unset means "train me"
                p.requires_grad = True
        self.params: list[Tensor] = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError("optimizer got no parameters that require grad")
        realize_owned(self.params)
        # float64 where a parameter is float64: a float32 lr moved its steps 1e-8 relatively
        wide = any(p.dtype == dtypes.float64 for p in self.params)
        self._lr_dtype = np.float64 if wide else np.float32
        self.lr = Tensor(np.array(lr, dtype=self._lr_dtype), device=self.params[0].device)
        self._host_lr = [float(lr)]  # the value as given (a list: not a setting of the replay key)

    def set_lr(self, lr: float) -> None:
        """A new learning rate, copied from the host (the step's kernels stay the same)."""
        value = Tensor(np.array(lr, dtype=self._lr_dtype), device=self.lr.device)
        self.lr.assign(value).realize()
        self._host_lr[0] = float(lr)

    def get_lr(self) -> float:
        """The learning rate as last given (`lr` holds it rounded to its dtype), unless
        a loaded state replaced the lr tensor's value."""
        stored = float(self.lr.item())
        if stored != float(np.array(self._host_lr[0], dtype=self._lr_dtype)):
            self._host_lr[0] = stored
        return self._host_lr[0]

    @property
    def param_groups(self) -> list[ParamGroup]:
        """PyTorch's view of the settings: one group, `opt.param_groups[0]["lr"] = 0.01`
        sets the learning rate (a scheduler's habit), other keys set the attribute."""
        return [ParamGroup(self)]

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop every gradient (set_to_none=False: zeros instead, as PyTorch's)."""
        for p in self.params:
            p.grad = None if set_to_none or p.grad is None else p.grad.zeros_like()

    def state_dict(self) -> dict[str, Tensor]:
        """Every state tensor by name (moments, step count, lr, parameters), as
        nn.state.get_state_dict(opt); `load_state_dict` reads it back."""
        return get_state_dict(self)

    def load_state_dict(self, state_dict: dict[str, Tensor]) -> None:
        load_state_dict(self, state_dict)

    def step(self) -> None:
        """Apply one update to every parameter that has a gradient."""
        with no_grad():
            grads = [p.grad for p in self.params if p.grad is not None]
            if not grads:
                return
            key = self._replay_key(grads)
            roots = take_roots()
            if roots:  # what backward() was called on, computed with the gradients it
                lazy = [g for g in grads if not g.lazydata.is_realized]  # needs (D167)
                for g in lazy:  # (each gradient as the replay takes it: its own memory)
                    g.replace(g.contiguous())
                roots[0].realize(*roots[1:], *lazy)
            if key is None or key != self._key:  # something the capture fixed has changed
                self._key = key
                self._replay = None if key is None else TinyJit(self._apply, read_views=True)
            if self._replay is None:
                self._apply(grads)
                return
            try:
                self._replay(grads)
            except JitError:  # a gradient changed in a way the key does not see: start over
                self._key = self._replay = None
                self._apply(grads)

    _key: tuple | None = None
    _replay: TinyJit | None = None

    def _apply(self, grads: list[Tensor]) -> None:
        """Build the update (`_update` reads each parameter's `.grad`: `grads` are those,
        passed so that a replay takes this step's) and realize it in one call: the
        scheduler runs every read of a parameter's old value before the update that
        overwrites it (copying it first where two updates read each other's parameter)."""
        written = self._update()
        try:
            Tensor.realize(*written)
        except BaseException:  # an update that did not run is dropped, not left
            for t in written:  # pending (a bad label would raise on every read)
                if t.lazydata.base.realized is None and t.lazydata.op is LoadOps.ASSIGN:
                    t.lazydata = t.lazydata.src[1]
            raise

    def _replay_key(self, grads: list[Tensor]) -> tuple | None:
        """What a replay of the update depends on beyond the gradients' values: which
        parameters have one, each gradient's shape, dtype, device, flag and view (a
        realized gradient is read in place, often a transposed view), the memory of
        every parameter and state tensor (a tensor given new memory, `p.replace(...)` or a
        loaded state, must not be written through the old one), and the settings
        (numbers such as betas or momentum, fixed in the kernels). None when a parameter
        or state tensor does not own realized memory: then the step runs as written."""
        pending = pending_assigns()
        if pending:  # this thread's lazy in-place updates land first (a jit would too)
            realize(pending)
        memory = []
        for t in self._state():
            lb = t.lazydata
            if lb._base is not None or lb.realized is None:
                return None
            memory.append(id(lb.realized))
        settings = tuple(sorted((k, v) for k, v in vars(self).items()
                                if type(v) in (int, float, bool)))
        return (tuple([p.grad is not None for p in self.params]), tuple(memory), settings,
                tuple([(g.shape, g.dtype, g.device, bool(g.requires_grad), g.lazydata.st)
                       for g in grads]))

    def _state(self) -> list[Tensor]:
        """Every tensor the update reads or writes besides the gradients."""
        return self.params + [self.lr]

    def _update(self) -> list[Tensor]:
        raise NotImplementedError

    def _grad(self, p: Tensor, grad: Tensor) -> Tensor:
        """`grad`, p's gradient, detached, checked, cast to p's dtype, negated to maximize."""
        g = grad.detach()
        if g.shape != p.shape:
            raise ValueError(f"gradient shape {g.shape} != parameter shape {p.shape}")
        g = g.cast(p.dtype)
        return -g if getattr(self, "maximize", False) else g

    def _lr(self, p: Tensor) -> Tensor:
        return self.lr.cast(p.dtype).to(p.device)


class SGD(Optimizer):
    """p -= lr * g, with PyTorch's L2 weight decay, momentum (with dampening) and Nesterov
    momentum; `maximize` ascends."""

    def __init__(self, params: list[Tensor], lr: float = 1e-3, momentum: float = 0.0,
                 dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False,
                 *, maximize: bool = False):
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("nesterov momentum needs momentum > 0 and zero dampening")
        super().__init__(params, lr)
        self.momentum, self.weight_decay, self.nesterov = momentum, weight_decay, nesterov
        self.dampening, self.maximize = dampening, maximize
        self.buffers = [_zeros_like(p) for p in self.params] if momentum else []
        # PyTorch's first momentum step takes g whole (no dampening): 0 until a step ran
        self.started = Tensor(np.zeros((), np.float32), device=self.params[0].device) \
            if dampening else None

    def _state(self) -> list[Tensor]:
        return super()._state() + self.buffers + ([self.started] if self.started is not None else [])

    def _update(self) -> list[Tensor]:
        written = [self.lr]
        damp = 1 - self.dampening * self.started if self.started is not None else None
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            g = self._grad(p, p.grad)
            if self.weight_decay:
                g = g + self.weight_decay * p.detach()
            if self.momentum:
                fresh = g if damp is None else g * damp.cast(p.dtype).to(p.device)
                buf = self.buffers[i].assign(self.buffers[i] * self.momentum + fresh)
                g = g + buf * self.momentum if self.nesterov else buf
                written.append(buf)
            written.append(p.assign(p.detach() - self._lr(p) * g))
        if self.started is not None:
            written.append(self.started.assign(self.started.ones_like()))
        return written


class Adam(Optimizer):
    """Adam (Kingma & Ba) with bias correction; weight_decay is PyTorch's L2 form
    (added to the gradient). AdamW sets `decoupled` to shrink the weights instead."""
    decoupled = False

    def __init__(self, params: list[Tensor], lr: float = 1e-3, b1: float = 0.9,
                 b2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.0,
                 amsgrad: bool = False, *, betas: tuple[float, float] | None = None,
                 maximize: bool = False):
        if isinstance(b1, (tuple, list)):  # PyTorch's positional order: (params, lr, betas)
            betas = b1
        if betas is not None:  # PyTorch's spelling of b1, b2
            b1, b2 = betas
        if not (0 <= b1 < 1 and 0 <= b2 < 1):
            raise ValueError(f"Adam betas must be in [0, 1), got {b1}, {b2}")
        super().__init__(params, lr)
        self.b1, self.b2, self.eps, self.weight_decay = b1, b2, eps, weight_decay
        self.amsgrad, self.maximize = amsgrad, maximize
        self.t = Tensor(np.zeros((), dtype=np.int32), device=self.params[0].device)
        self.m = [_zeros_like(p) for p in self.params]
        self.v = [_zeros_like(p) for p in self.params]
        # amsgrad: the largest second moment so far, which the step divides by
        self.v_max = [_zeros_like(p) for p in self.params] if amsgrad else []

    def _state(self) -> list[Tensor]:
        return super()._state() + [self.t] + self.m + self.v + self.v_max

    def _bias_correction(self, beta: float, p: Tensor, made: dict) -> Tensor | float:
        """1 - beta**t, computed on the device from the step count (no per-step constant);
        one graph per (beta, dtype, device) in a step, shared by the parameters (`made`,
        local to the step: kept after it, the graphs would hold the old step count)."""
        if beta == 0:
            return 1.0
        key = (beta, p.dtype, p.device)
        if key not in made:
            made[key] = 1 - (self.t.cast(p.dtype).to(p.device) * math.log(beta)).exp()
        return made[key]

    def _update(self) -> list[Tensor]:
        self.t.assign(self.t + 1)
        corrections: dict[tuple, Tensor] = {}
        written = [self.lr, self.t]
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            g, lr, weights = self._grad(p, p.grad), self._lr(p), p.detach()
            if self.weight_decay and not self.decoupled:
                g = g + self.weight_decay * weights
            if self.weight_decay and self.decoupled:
                weights = weights * (1 - lr * self.weight_decay)
            m = self.m[i].assign(self.m[i] * self.b1 + g * (1 - self.b1))
            v = self.v[i].assign(self.v[i] * self.b2 + g.square() * (1 - self.b2))
            written += [m, v]
            if self.amsgrad:
                v = self.v_max[i].assign(self.v_max[i].maximum(v))
                written.append(v)
            # PyTorch's form: the scalars fold into one step size and one divisor, so an
            # element costs a square root and two divisions (three with m / (1 - b1^t))
            step = lr / self._bias_correction(self.b1, p, corrections)
            bc2 = self._bias_correction(self.b2, p, corrections)
            root = bc2.sqrt() if isinstance(bc2, Tensor) else math.sqrt(bc2)
            written.append(p.assign(weights - step * (m / (v.sqrt() / root + self.eps))))
        return written


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): p *= 1 - lr * weight_decay."""
    decoupled = True

    def __init__(self, params: list[Tensor], lr: float = 1e-3, b1: float = 0.9,
                 b2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.01,
                 amsgrad: bool = False, *, betas: tuple[float, float] | None = None,
                 maximize: bool = False):
        super().__init__(params, lr, b1, b2, eps, weight_decay, amsgrad, betas=betas,
                         maximize=maximize)


class ParamGroup(dict):
    """One entry of `Optimizer.param_groups`: the settings as PyTorch names them; writing
    a key writes the optimiser ("lr" through `set_lr`, "betas" as b1 and b2)."""

    def __init__(self, opt: Optimizer):
        settings = {k: v for k, v in vars(opt).items() if type(v) in (int, float, bool)}
        if "b1" in settings:
            settings["betas"] = (settings.pop("b1"), settings.pop("b2"))
        super().__init__(params=opt.params, lr=opt.get_lr(), **settings)
        self.opt = opt

    def __setitem__(self, key: str, value) -> None:
        if key == "lr":
            self.opt.set_lr(value)
        elif key == "betas":
            self.opt.b1, self.opt.b2 = value  # type: ignore[attr-defined]
        elif key in self and key != "params":
            setattr(self.opt, key, value)
        else:
            raise KeyError(f"param_groups: {key!r} is not a setting of {type(self.opt).__name__}")
        super().__setitem__(key, value)


from lazyten.optim_more import RMSprop, Adagrad, Adamax, NAdam, RAdam, Adadelta  # noqa: E402
