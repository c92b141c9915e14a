"""@jit: capture the kernels a function launches, then replay them on new inputs.

Call 1 runs the function normally (compiling its kernels). Call 2 runs it again while
the engine records every launch: the program and the exact buffers it touched. From call
3 on, the recorded launches are replayed with the input tensors' buffers swapped in: no
graph is built, nothing is scheduled or compiled. The function's return value is the
tensors from the captured call, whose buffers the replay overwrites.

Requirements, as with any kernel-replaying JIT: tensor inputs keep their shapes, dtypes
and devices (a change raises ValueError); parameters are updated in place (optimisers
use `assign`); host-side randomness (Tensor.rand) is frozen at capture time.
"""
from __future__ import annotations
import functools
from typing import Any, Callable

from lazyten.realize import Capture, launch
from lazyten.tensor import Tensor


class JitError(ValueError):
    """Inputs of a jitted function changed shape, dtype or device."""


class TinyJit:
    """The decorator object; see the module docstring."""

    def __init__(self, fn: Callable):
        self.fn, self.calls = fn, 0
        self.captured: list | None = None
        self.signature: list | None = None
        self.input_buffers: list = []
        self.result: Any = None
        functools.update_wrapper(self, fn)

    def reset(self) -> None:
        """Forget the capture (for example after changing the model)."""
        self.calls, self.captured, self.signature, self.result = 0, None, None, None

    def __call__(self, *args, **kwargs):
        tensors = [a for a in list(args) + list(kwargs.values()) if isinstance(a, Tensor)]
        for t in tensors:  # inputs get their own memory, outside the capture
            if not (t.lazydata._base is None and t.lazydata.is_realized):
                t.replace(t.contiguous().realize())
        signature = [(t.shape, t.dtype, t.device) for t in tensors]
        if self.signature is not None and signature != self.signature:
            raise JitError(f"jitted {self.fn.__name__} was captured for inputs {self.signature}"
                           f" but got {signature}; call .reset() to capture again")
        self.signature = signature
        buffers = [t.lazydata.buffer() for t in tensors]
        self.calls += 1
        if self.calls == 1:
            return self.fn(*args, **kwargs)
        if self.calls == 2:
            Capture.items = []
            try:
                self.result = self.fn(*args, **kwargs)
            finally:
                self.captured, Capture.items = Capture.items, None
            self.input_buffers = buffers
            return self.result
        swap = {id(old): new for old, new in zip(self.input_buffers, buffers)}
        for spec, program, bufs in self.captured:
            if spec is None:  # an index check: `program` verifies the flag
                program(*bufs)
                continue
            launch(spec, program, [swap.get(id(b), b) for b in bufs], bufs[0].device)
        return self.result


def jit(fn: Callable) -> TinyJit:
    """Decorator: capture on the second call, replay from the third."""
    return TinyJit(fn)
