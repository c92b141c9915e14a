"""Dims and int arguments, checked as PyTorch checks them: the one place every Tensor
method normalises a `dim` (or `axis`), a tuple of them, or an int count.

`as_int` accepts anything with `__index__` (numpy integers, one-element integer tensors)
but no bool or float: a TypeError naming the argument. A dim of a tensor with `ndim` dims
is in [-ndim, ndim) and comes back non-negative; a 0-d tensor takes 0 and -1, as in
PyTorch. Out of range is an IndexError naming the dim and ndim. The spellings `dim=` /
`axis=` are aliases.py's `keywords`.
"""
from __future__ import annotations
import operator
from typing import Any


def as_int(value: Any, what: str) -> int:
    """A Python int from an int-like (numpy integers too); bools and floats are errors."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{what} must be an int, got {value!r}")
    return operator.index(value)


def norm_dim(dim: Any, ndim: int, what: str = "dim") -> int:
    """`dim` in [0, ndim) (0 for a 0-d tensor), from one in [-ndim, ndim)."""
    if type(dim) is int and -ndim <= dim < ndim:  # the common case, checked at once
        return dim % ndim
    dim = as_int(dim, what)
    if not -max(ndim, 1) <= dim < max(ndim, 1):
        raise IndexError(f"{what} {dim} is out of range for a tensor with {ndim} dims")
    return dim % max(ndim, 1)


def _sorted_dims(axis: tuple, ndim: int) -> bool:
    """Whether `axis` holds ints only, increasing, within [0, ndim)."""
    last = -1
    for a in axis:  # (a loop: this runs once per normalisation op)
        if type(a) is not int or a <= last:
            return False
        last = a
    return last < ndim


def norm_axes(axis: Any, ndim: int) -> tuple[int, ...]:
    """A reduction's `axis` (None: all; an int; a tuple or list of ints) as sorted,
    distinct, non-negative dims; () for a 0-d tensor (which takes axis 0 or -1)."""
    if axis is None:
        return tuple(range(ndim))
    if type(axis) is int and -ndim <= axis < ndim:  # the common case, checked fast
        return (axis % ndim,)
    if type(axis) is tuple and axis and _sorted_dims(axis, ndim):
        return axis  # already sorted, distinct and in range (layer_norm's trailing dims)
    if hasattr(axis, "__index__"):
        axes = (axis,)
    elif isinstance(axis, (tuple, list)):
        axes = tuple(axis)
    else:
        raise TypeError(f"axis must be an int or a tuple of ints, got {axis!r}")
    if any(isinstance(a, bool) or not hasattr(a, "__index__") for a in axes):
        raise TypeError(f"axis must be an int or a tuple of ints, got {axis!r}")
    out = [norm_dim(a, ndim, "axis") for a in axes]
    if len(set(out)) != len(out):
        raise ValueError(f"axis {axis} repeats a dimension")
    return tuple(sorted(out)) if ndim else ()
