"""Learning-rate schedules with torch.optim.lr_scheduler's names and closed forms:
`lazyten.optim.lr_scheduler.StepLR(opt, step_size=10)`, then `sched.step()` once per
epoch after `opt.step()`. A schedule only calls `opt.set_lr`, which copies the new value
into the optimiser's 0-d lr tensor: no kernel of the step changes (lazyten/optim.py).

Each schedule is a function of the epoch count t (`last_epoch`) and the initial
learning rate, written in closed form; PyTorch's chained updates give the same values
up to rounding when only `step()` sets the rate.
"""
from __future__ import annotations
import math
from typing import Callable

__all__ = ["LRScheduler", "LambdaLR", "StepLR", "MultiStepLR", "ExponentialLR",
           "CosineAnnealingLR", "LinearLR"]


class LRScheduler:
    """Base: `factor(t)` times the initial learning rate, set at construction (t = 0) and
    by every `step()`."""

    def __init__(self, optimizer, last_epoch: int = -1):
        if not hasattr(optimizer, "set_lr"):
            raise TypeError(f"{type(self).__name__} needs a lazyten optimizer, got "
                            f"{type(optimizer).__name__}")
        self.optimizer = optimizer
        self.base_lr = optimizer.get_lr()
        self.last_epoch = last_epoch
        self.step()

    def factor(self, t: int) -> float:
        raise NotImplementedError

    def get_last_lr(self) -> list[float]:
        return [self._last_lr]

    def step(self) -> None:
        self.last_epoch += 1
        self._last_lr = self.base_lr * self.factor(self.last_epoch)
        self.optimizer.set_lr(self._last_lr)

    def state_dict(self) -> dict:
        return {k: v for k, v in vars(self).items() if k not in ("optimizer", "lr_lambda")}

    def load_state_dict(self, state: dict) -> None:
        vars(self).update(state)


class LambdaLR(LRScheduler):
    def __init__(self, optimizer, lr_lambda: Callable[[int], float], last_epoch: int = -1):
        self.lr_lambda = lr_lambda
        super().__init__(optimizer, last_epoch)

    def factor(self, t: int) -> float:
        return self.lr_lambda(t)


class StepLR(LRScheduler):
    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def factor(self, t: int) -> float:
        return self.gamma ** (t // self.step_size)


class MultiStepLR(LRScheduler):
    def __init__(self, optimizer, milestones: list[int], gamma: float = 0.1, last_epoch: int = -1):
        self.milestones, self.gamma = sorted(milestones), gamma
        super().__init__(optimizer, last_epoch)

    def factor(self, t: int) -> float:
        return self.gamma ** sum(t >= m for m in self.milestones)


class ExponentialLR(LRScheduler):
    def __init__(self, optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def factor(self, t: int) -> float:
        return self.gamma ** t


class CosineAnnealingLR(LRScheduler):
    """eta_min + (lr - eta_min) (1 + cos(pi t / T_max)) / 2 (SGDR without restarts)."""

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def factor(self, t: int) -> float:
        cosine = (1 + math.cos(math.pi * t / self.T_max)) / 2
        return (self.eta_min + (self.base_lr - self.eta_min) * cosine) / self.base_lr \
            if self.base_lr else 0.0


class LinearLR(LRScheduler):
    """start_factor to end_factor linearly over total_iters epochs, then end_factor."""

    def __init__(self, optimizer, start_factor: float = 1 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1):
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise ValueError(f"LinearLR factors must be in (0, 1] and [0, 1], got "
                             f"{start_factor}, {end_factor}")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def factor(self, t: int) -> float:
        done = min(t, self.total_iters) / self.total_iters if self.total_iters else 1.0
        return self.start_factor + (self.end_factor - self.start_factor) * done
