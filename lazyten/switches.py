"""Per-thread switches: autograd recording (`no_grad`) and training mode.

`Tensor.no_grad` / `Tensor.training` read as 0 or 1 (ints, so `if Tensor.no_grad` costs
what a bool does), can be assigned (`Tensor.no_grad = True`, tinygrad's spelling), and can
be called: `with Tensor.no_grad():` and `@Tensor.no_grad()` set the switch for a block or
a function, as `lazyten.no_grad()` and `Tensor.train()` do.
"""
from __future__ import annotations
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Protocol


# Autograd and training mode are per thread (as in PyTorch): one thread's no_grad() or
# train() never changes what another computes, and a new thread starts with autograd on
# and training off. They are context variables (each thread has its own context; so does
# each asyncio task), read through Tensor's metaclass in about 50 ns, once per op.
_NO_GRAD: ContextVar[bool] = ContextVar("no_grad", default=False)
_TRAINING: ContextVar[bool] = ContextVar("training", default=False)


class _Flag(int):
    """A switch's value (0 or 1, so `if Tensor.no_grad` costs what a bool does) that can
    also be called: `with Tensor.no_grad():` and `@Tensor.no_grad()` set it for a block."""
    var: ContextVar[bool]

    def __call__(self, mode: bool = True):
        if callable(mode):  # @Tensor.no_grad without parentheses
            return _switched(self.var, True)(mode)
        return _switched(self.var, mode)

    def __repr__(self) -> str:
        return repr(bool(self))


def _flags(var: ContextVar[bool]) -> tuple[_Flag, _Flag]:
    off, on = _Flag(0), _Flag(1)
    off.var = on.var = var
    return off, on


class Switch(Protocol):
    """What `switch` makes, as the type checker should see it: a descriptor whose value is
    a _Flag (a `property` at run time; typed as a property, its value would be Any)."""
    def __get__(self, instance: object, owner: Any = None, /) -> _Flag: ...
    def __set__(self, instance: object, value: object, /) -> None: ...
    def __delete__(self, instance: object, /) -> None: ...


def switch(var: ContextVar[bool]) -> Switch:
    """A class-level property for the calling thread's value of `var` (`del` resets it)."""
    flags = _flags(var)

    def write(cls: type, value: object) -> None:
        var.set(bool(value))

    def reset(cls: type) -> None:
        var.set(False)
    return property(lambda cls: flags[var.get()], write, reset)


@contextmanager
def _switched(var: ContextVar[bool], mode: bool = True):
    """Inside this block (in this thread) `var` is `mode`; also a decorator."""
    previous = var.get()
    var.set(bool(mode))
    try:
        yield
    finally:
        var.set(previous)


def training_mode(mode: bool = True):
    """Inside this block this thread's Tensor.training is `mode` (dropout and batchnorm
    read it); `with Tensor.train():` or `@Tensor.train()`."""
    return _switched(_TRAINING, mode)


def no_grad(fn=None):
    """Inside this block (in this thread) no autograd graph is recorded: `with no_grad():`,
    `@no_grad()` or `@no_grad`; the same as Tensor.no_grad()."""
    return _switched(_NO_GRAD, True) if fn is None else _switched(_NO_GRAD, True)(fn)

