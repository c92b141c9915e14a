"""Padding modes beyond a constant: reflect, replicate and circular, built from views.

Each padded axis is a cat of up to three views of the input: a flipped slice (reflect),
an expanded edge (replicate) or the opposite end (circular) on either side of it. No gather.
`pad_modes` serves Tensor.pad(mode=...); PaddingMixin adds tinygrad's pad2d; `flat_pairs`
reads PyTorch's flat padding order for Tensor.pad and the conv and pooling paddings.
Mixed into Tensor.
"""
from __future__ import annotations
from lazyten.errors import ShapeError, UnknownModeError
from lazyten.mixin import TensorMixin

MODES = ("constant", "reflect", "replicate", "circular")


def check_mode(mode: str) -> None:
    """An unknown mode is a NotImplementedError (PyTorch's) that is also a ValueError."""
    if mode not in MODES:
        raise UnknownModeError(f"padding mode must be one of {MODES}, got {mode!r}")


def flat_pairs(flat: list[int] | tuple[int, ...], ndim: int) -> list[tuple[int, int]]:
    """PyTorch's flat padding (last_before, last_after, second_last_before, ...) as one
    (before, after) pair per dim of `ndim` (the leading dims it does not reach get (0, 0))."""
    pairs = [(0, 0)] * ndim
    for i in range(len(flat) // 2):
        pairs[ndim - 1 - i] = (flat[2 * i], flat[2 * i + 1])
    return pairs


def pad_modes(x, pairs: list[tuple[int, int]], mode: str):
    """x padded by non-negative (before, after) per axis with a non-constant `mode`."""
    check_mode(mode)
    for axis, (before, after) in enumerate(pairs):
        if before == after == 0:
            continue
        n = x.shape[axis]
        if mode == "reflect" and (before >= n or after >= n):
            raise ShapeError(f"reflect padding ({before}, {after}) of dim {axis} must be less "
                             f"than its size {n} (shape {x.shape})")
        if mode == "circular" and (before > n or after > n):
            raise ShapeError(f"circular padding ({before}, {after}) of dim {axis} must not "
                             f"exceed its size {n} (shape {x.shape})")
        if mode == "replicate" and n == 0:
            raise ShapeError(f"replicate padding of dim {axis} needs a non-empty dim "
                             f"(shape {x.shape})")
        pieces = [p for p in (_side(x, axis, before, mode, True), x,
                              _side(x, axis, after, mode, False)) if p is not None]
        x = pieces[0].cat(*pieces[1:], dim=axis)
    return x


def _side(x, axis: int, width: int, mode: str, before: bool):
    """The `width` elements added on one side of `axis`, as a view of x (None if 0)."""
    if width == 0:
        return None
    n = x.shape[axis]

    def take(start: int, stop: int):
        return x.shrink([(start, stop) if d == axis else (0, s) for d, s in enumerate(x.shape)])
    if mode == "reflect":  # the edge itself is not repeated
        return (take(1, width + 1) if before else take(n - 1 - width, n - 1)).flip(axis)
    if mode == "replicate":
        edge = take(0, 1) if before else take(n - 1, n)
        return edge.expand(tuple(width if d == axis else s for d, s in enumerate(x.shape)))
    return take(n - width, n) if before else take(0, width)  # circular


class PaddingMixin(TensorMixin):
    """pad2d."""

    def pad2d(self, padding, value: float = 0.0):
        """tinygrad's pad2d: (left, right, top, bottom) on the last two dims (negative crops)."""
        padding = tuple(padding)
        if len(padding) != 4 or self.ndim < 2:
            raise ValueError(f"pad2d needs (left, right, top, bottom) and at least 2 dims, got "
                             f"{padding} for shape {self.shape}")
        return self.pad(padding, value=value)
