"""More of torch.optim's optimisers: RMSprop, Adagrad, Adamax, NAdam, RAdam, Adadelta.

In: parameters with `.grad`. Out: `step()` writes each parameter and its state in place,
with PyTorch's arguments and update formulas, on lazyten/optim.py's Optimizer: one graph,
built on the first steps and replayed from the third (D59). Import them from
lazyten.optim (`lazyten.optim.RMSprop`), which imports this module at its end (the two
import each other: importing this module before lazyten.optim fails).

Everything a step reads besides the gradients is a realized tensor of `_state()`, so a
replay reads this step's values: the moments, and for the optimisers whose update depends
on the step count, `t` (int32) and NAdam's `mu_product`, both advanced on the device. `t`
is shared by the parameters, as Adam's: a parameter without a gradient in a step still
sees the count advance (PyTorch counts each parameter's own steps). What a step derives
from them (bias corrections, Adagrad's decayed lr, NAdam's momentum schedule, RAdam's
rectification) is written once a step into `_scalars`, a small private float64 buffer
(not saved: the next step recomputes it), by one small kernel; the parameters' kernels
read it. float64, as PyTorch's host-side Python floats: RAdam's rho_t is the
difference of two numbers near 2 / (1 - beta2) (2000 for 0.999); in float32 it was 0.004
off at step 7, its rectification 7e-4 off, and float32 parameters ended 8e-6 (relative)
off PyTorch's after 20 steps at lr 0.05 (1e-7 with the scalars in float64).
"""
from __future__ import annotations
import math

import numpy as np

from codegen.dtypes import dtypes
from lazyten.optim import Optimizer, _zeros_like
from lazyten.tensor import Tensor, to_numpy_dtype

__all__ = ["RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam", "Adadelta"]


def _require(ok: bool, what: str, value) -> None:
    """PyTorch's argument checks, with its messages."""
    if not ok:
        raise ValueError(f"Invalid {what}: {value}")


def _check_common(lr: float, eps: float, weight_decay: float) -> None:
    _require(lr >= 0, "learning rate", lr)
    _require(eps >= 0, "epsilon value", eps)
    _require(weight_decay >= 0, "weight_decay value", weight_decay)


def _check_betas(betas: tuple[float, float]) -> tuple[float, float]:
    for i, beta in enumerate(betas):
        _require(0 <= beta < 1, f"beta parameter at index {i}", beta)
    return betas[0], betas[1]


def _power(base: float, exponent: Tensor) -> Tensor:
    """base ** exponent on the device (exponent a float64 tensor, > 0 where base is 0)."""
    return (exponent * math.log(base)).exp() if base > 0 else exponent * 0.0


def _weight_decay(p: Tensor, g: Tensor, wd: float, lr: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """(weights, gradient) of p after weight decay: PyTorch's L2 form adds wd * p to the
    gradient; given `lr`, the decoupled form (AdamW's) shrinks the weights by lr * wd."""
    weights = p.detach()
    if wd and lr is not None:
        return weights * (1 - lr * wd), g
    return weights, (g + wd * weights if wd else g)


def _filled_like(p: Tensor, value: float) -> Tensor:
    """A realized buffer shaped like `p`, every element `value` (filled from the host)."""
    return Tensor(np.full(p.shape, value, dtype=to_numpy_dtype(p.dtype)), device=p.device,
                  dtype=p.dtype)


class _Stepped(Optimizer):
    """Base of the optimisers whose update depends on the step count `t`: `_per_step`
    gives the step's scalars from t (float64, 0-d), written together into `_scalars`."""
    _names: tuple[str, ...] = ()  # the step's scalars, in `_scalars`' order

    def __init__(self, params: list[Tensor], lr: float):
        super().__init__(params, lr)
        device = self.params[0].device
        self.t = Tensor(np.zeros((), dtype=np.int32), device=device)
        self._scalars = Tensor(np.zeros(len(self._names), dtype=np.float64), device=device)

    def _state(self) -> list[Tensor]:
        return super()._state() + [self.t, self._scalars]

    def _per_step(self, t: Tensor, lr: Tensor) -> dict[str, Tensor]:
        raise NotImplementedError

    def _advance(self) -> tuple[list[Tensor], dict[tuple, Tensor]]:
        """Count this step and compute its scalars (one small kernel): the tensors written,
        and an empty cache for `_scalar`."""
        self.t.assign(self.t + 1)
        values = self._per_step(self.t.cast(dtypes.float64), self.lr.cast(dtypes.float64))
        column = [values[name].reshape(1) for name in self._names]
        self._scalars.assign(column[0].cat(*column[1:]))
        return [self.lr, self.t, self._scalars], {}

    def _decoupled_lr(self, p: Tensor) -> Tensor | None:
        """The lr that shrinks the weights when weight decay is decoupled, else None."""
        return self._lr(p) if getattr(self, "decoupled_weight_decay", False) else None

    def _scalar(self, name: str, p: Tensor, made: dict[tuple, Tensor]) -> Tensor:
        """This step's scalar `name` in p's dtype and device; one graph per (name, dtype,
        device) in a step (`made`, local to the step)."""
        key = (name, p.dtype, p.device)
        if key not in made:
            made[key] = self._scalars[self._names.index(name)].cast(p.dtype).to(p.device)
        return made[key]


class RMSprop(Optimizer):
    """Divide the gradient by a running root mean square (Hinton's lecture 6.5):
    square_avg = alpha sq + (1 - alpha) g^2; `centered` subtracts the square of the
    running mean gradient; `momentum` keeps a buffer of the scaled steps."""

    def __init__(self, params: list[Tensor], lr: float = 1e-2, alpha: float = 0.99,
                 eps: float = 1e-8, weight_decay: float = 0.0, momentum: float = 0.0,
                 centered: bool = False, *, maximize: bool = False):
        _check_common(lr, eps, weight_decay)
        _require(momentum >= 0, "momentum value", momentum)
        _require(alpha >= 0, "alpha value", alpha)
        super().__init__(params, lr)
        self.alpha, self.eps, self.weight_decay = alpha, eps, weight_decay
        self.momentum, self.centered, self.maximize = momentum, centered, maximize
        self.square_avg = [_zeros_like(p) for p in self.params]
        self.grad_avg = [_zeros_like(p) for p in self.params] if centered else []
        self.momentum_buffer = [_zeros_like(p) for p in self.params] if momentum > 0 else []

    def _state(self) -> list[Tensor]:
        return super()._state() + self.square_avg + self.grad_avg + self.momentum_buffer

    def _update(self) -> list[Tensor]:
        if (self.centered and not self.grad_avg) or (self.momentum > 0 and not self.momentum_buffer):
            raise ValueError("RMSprop: centered or momentum was off when the optimizer was made "
                             "(its state was not allocated): make a new optimizer")
        written = [self.lr]
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            weights, g = _weight_decay(p, self._grad(p, p.grad), self.weight_decay)
            sq = self.square_avg[i].assign(self.square_avg[i] * self.alpha + g.square() * (1 - self.alpha))
            written.append(sq)
            if self.centered:
                mean = self.grad_avg[i].assign(self.grad_avg[i].lerp(g, 1 - self.alpha))
                written.append(mean)
                avg = (sq - mean.square()).sqrt() + self.eps
            else:
                avg = sq.sqrt() + self.eps
            step = g / avg
            if self.momentum > 0:
                step = self.momentum_buffer[i].assign(self.momentum_buffer[i] * self.momentum + step)
                written.append(step)
            written.append(p.assign(weights - self._lr(p) * step))
        return written


class Adagrad(_Stepped):
    """Per-coordinate steps lr / sqrt(sum of squared gradients) (Duchi et al.); lr_decay
    divides lr by 1 + (t - 1) lr_decay."""
    _names = ("lr",)

    def __init__(self, params: list[Tensor], lr: float = 1e-2, lr_decay: float = 0.0,
                 weight_decay: float = 0.0, initial_accumulator_value: float = 0.0,
                 eps: float = 1e-10, *, maximize: bool = False):
        _check_common(lr, eps, weight_decay)
        _require(lr_decay >= 0, "lr_decay value", lr_decay)
        _require(initial_accumulator_value >= 0, "initial_accumulator_value value",
                 initial_accumulator_value)
        super().__init__(params, lr)
        self.lr_decay, self.weight_decay, self.eps = lr_decay, weight_decay, eps
        self.initial_accumulator_value, self.maximize = initial_accumulator_value, maximize
        self.sum = [_filled_like(p, initial_accumulator_value) for p in self.params]

    def _state(self) -> list[Tensor]:
        return super()._state() + self.sum

    def _per_step(self, t: Tensor, lr: Tensor) -> dict[str, Tensor]:
        return {"lr": lr / (1 + (t - 1) * self.lr_decay)}

    def _update(self) -> list[Tensor]:
        written, made = self._advance()
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            weights, g = _weight_decay(p, self._grad(p, p.grad), self.weight_decay)
            total = self.sum[i].assign(self.sum[i] + g.square())
            step = self._scalar("lr", p, made)
            written += [total, p.assign(weights - step * (g / (total.sqrt() + self.eps)))]
        return written


class Adamax(_Stepped):
    """Adam with the infinity norm (Kingma & Ba, section 7): exp_inf = max(beta2 exp_inf,
    |g| + eps), steps lr / (1 - beta1^t) * exp_avg / exp_inf."""
    _names = ("step",)

    def __init__(self, params: list[Tensor], lr: float = 2e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, *, maximize: bool = False):
        _check_common(lr, eps, weight_decay)
        self.b1, self.b2 = _check_betas(betas)
        super().__init__(params, lr)
        self.eps, self.weight_decay, self.maximize = eps, weight_decay, maximize
        self.exp_avg = [_zeros_like(p) for p in self.params]
        self.exp_inf = [_zeros_like(p) for p in self.params]

    def _state(self) -> list[Tensor]:
        return super()._state() + self.exp_avg + self.exp_inf

    def _per_step(self, t: Tensor, lr: Tensor) -> dict[str, Tensor]:
        return {"step": lr / (1 - _power(self.b1, t))}

    def _update(self) -> list[Tensor]:
        written, made = self._advance()
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            weights, g = _weight_decay(p, self._grad(p, p.grad), self.weight_decay)
            m = self.exp_avg[i].assign(self.exp_avg[i].lerp(g, 1 - self.b1))
            u = self.exp_inf[i].assign((self.exp_inf[i] * self.b2).maximum(g.abs() + self.eps))
            step = self._scalar("step", p, made)
            written += [m, u, p.assign(weights - step * (m / u))]
        return written


class NAdam(_Stepped):
    """Adam with Nesterov momentum (Dozat): momentum mu_t = beta1 (1 - 0.96^(t psi) / 2)
    (psi = momentum_decay), mu_product their product so far (a state tensor, updated on
    the device); `decoupled_weight_decay` is NAdamW."""
    _names = ("bias_correction2", "grad_step", "avg_step")

    def __init__(self, params: list[Tensor], lr: float = 2e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum_decay: float = 4e-3,
                 decoupled_weight_decay: bool = False, *, maximize: bool = False):
        _check_common(lr, eps, weight_decay)
        _require(momentum_decay >= 0, "momentum_decay value", momentum_decay)
        self.b1, self.b2 = _check_betas(betas)
        super().__init__(params, lr)
        self.eps, self.weight_decay, self.momentum_decay = eps, weight_decay, momentum_decay
        self.decoupled_weight_decay, self.maximize = decoupled_weight_decay, maximize
        self.mu_product = Tensor(np.ones((), dtype=np.float64), device=self.params[0].device)
        self.exp_avg = [_zeros_like(p) for p in self.params]
        self.exp_avg_sq = [_zeros_like(p) for p in self.params]

    def _state(self) -> list[Tensor]:
        return super()._state() + [self.mu_product] + self.exp_avg + self.exp_avg_sq

    def _momentum(self, t: Tensor) -> Tensor:
        return self.b1 * (1 - 0.5 * _power(0.96, t * self.momentum_decay))

    def _per_step(self, t: Tensor, lr: Tensor) -> dict[str, Tensor]:
        mu, mu_next = self._momentum(t), self._momentum(t + 1)
        product = self.mu_product.assign(self.mu_product * mu)
        return {"bias_correction2": 1 - _power(self.b2, t),
                "grad_step": lr * (1 - mu) / (1 - product),
                "avg_step": lr * mu_next / (1 - product * mu_next)}

    def _update(self) -> list[Tensor]:
        written, made = self._advance()
        written.append(self.mu_product)
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            weights, g = _weight_decay(p, self._grad(p, p.grad), self.weight_decay, self._decoupled_lr(p))
            m = self.exp_avg[i].assign(self.exp_avg[i].lerp(g, 1 - self.b1))
            v = self.exp_avg_sq[i].assign(self.exp_avg_sq[i] * self.b2 + g.square() * (1 - self.b2))
            denom = (v / self._scalar("bias_correction2", p, made)).sqrt() + self.eps
            step = g * self._scalar("grad_step", p, made) + m * self._scalar("avg_step", p, made)
            written += [m, v, p.assign(weights - step / denom)]
        return written


class RAdam(_Stepped):
    """Adam with the variance of its adaptive lr rectified (Liu et al.): while the
    approximated SMA length rho_t is at most 5 the step is plain momentum SGD,
    lr * exp_avg / (1 - beta1^t); `decoupled_weight_decay` is AdamW's decay."""
    _names = ("adaptive_step", "plain_step", "rectified")

    def __init__(self, params: list[Tensor], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, decoupled_weight_decay: bool = False, *,
                 maximize: bool = False):
        _check_common(lr, eps, weight_decay)
        self.b1, self.b2 = _check_betas(betas)
        super().__init__(params, lr)
        self.eps, self.weight_decay = eps, weight_decay
        self.decoupled_weight_decay, self.maximize = decoupled_weight_decay, maximize
        self.exp_avg = [_zeros_like(p) for p in self.params]
        self.exp_avg_sq = [_zeros_like(p) for p in self.params]

    def _state(self) -> list[Tensor]:
        return super()._state() + self.exp_avg + self.exp_avg_sq

    def _per_step(self, t: Tensor, lr: Tensor) -> dict[str, Tensor]:
        bias_correction1 = 1 - _power(self.b1, t)
        beta2_t = _power(self.b2, t)
        rho_inf = 2 / (1 - self.b2) - 1
        rho = rho_inf - 2 * t * beta2_t / (1 - beta2_t)
        # NaN while rho <= 4 (and for beta2 near 0.6): only read where rho > 5
        rect = ((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho)).sqrt()
        rectified = rho > 5
        return {"adaptive_step": rectified.where(lr * rect * (1 - beta2_t).sqrt() / bias_correction1, 0.0),
                "plain_step": rectified.where(0.0, lr / bias_correction1),
                "rectified": rectified.cast(dtypes.float64)}

    def _update(self) -> list[Tensor]:
        written, made = self._advance()
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            weights, g = _weight_decay(p, self._grad(p, p.grad), self.weight_decay, self._decoupled_lr(p))
            m = self.exp_avg[i].assign(self.exp_avg[i].lerp(g, 1 - self.b1))
            v = self.exp_avg_sq[i].assign(self.exp_avg_sq[i] * self.b2 + g.square() * (1 - self.b2))
            # a select, not a sum: with eps = 0 a zero v divides 0 by 0 in the unused branch
            step = self._scalar("rectified", p, made).where(
                self._scalar("adaptive_step", p, made) / (v.sqrt() + self.eps),
                self._scalar("plain_step", p, made))
            written += [m, v, p.assign(weights - m * step)]
        return written


class Adadelta(Optimizer):
    """Zeiler's Adadelta: the step is g * sqrt(acc_delta + eps) / sqrt(square_avg + eps),
    both running averages with rate rho, scaled by lr (PyTorch's lr=1.0 is the paper's)."""

    def __init__(self, params: list[Tensor], lr: float = 1.0, rho: float = 0.9,
                 eps: float = 1e-6, weight_decay: float = 0.0, *, maximize: bool = False):
        _check_common(lr, eps, weight_decay)
        _require(0 <= rho <= 1, "rho value", rho)
        super().__init__(params, lr)
        self.rho, self.eps, self.weight_decay, self.maximize = rho, eps, weight_decay, maximize
        self.square_avg = [_zeros_like(p) for p in self.params]
        self.acc_delta = [_zeros_like(p) for p in self.params]

    def _state(self) -> list[Tensor]:
        return super()._state() + self.square_avg + self.acc_delta

    def _update(self) -> list[Tensor]:
        written = [self.lr]
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            weights, g = _weight_decay(p, self._grad(p, p.grad), self.weight_decay)
            sq = self.square_avg[i].assign(self.square_avg[i] * self.rho + g.square() * (1 - self.rho))
            # the step reads acc_delta before this step's update of it (the scheduler orders it)
            delta = (self.acc_delta[i] + self.eps).sqrt() / (sq + self.eps).sqrt() * g
            acc = self.acc_delta[i].assign(self.acc_delta[i] * self.rho + delta.square() * (1 - self.rho))
            written += [sq, acc, p.assign(weights - self._lr(p) * delta)]
        return written
