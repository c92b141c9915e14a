"""Input tensors: random values as short numpy source text, and non-contiguous layouts.

An input is a realized buffer (`b3 = Tensor(np.array(...))`, which assign may write in
place), sometimes read through a view that is not contiguous (`x4 = b3.flip(0)`: permuted,
flipped, sliced with an offset, strided forwards or backwards, or expanded), so kernels
see every kind of ShapeTracker. Values are literals when few, else a seeded numpy
generator expression: both are printed in a reproducer and evaluated here from the text.
A bfloat16 input is float32 text passed with `dtype=dtypes.bfloat16` (lazyten rounds it
on the host); the reference holds those values rounded by tests/helpers.rne_bf16.
"""
from __future__ import annotations
import math

import numpy as np

from .model import Input, Interp, Ref, Step, Var, int_range, is_float, np_dtype, to_dtype

LITERAL_MAX = 12  # inputs with at most this many elements are printed as literals
VIEW_CHANCE = 35  # percent of inputs read through a non-contiguous view


def _float_values(g, lo, hi, seed: int, shape) -> tuple[str, float, float, int | None]:
    """(numpy source, lo, hi, grid exponent) of float values."""
    rng = f"np.random.default_rng({seed})"
    if lo is None:
        if g.grad:
            lo, hi = g.pick([(-2.0, 2.0), (-1.0, 1.0), (0.5, 2.0)])
        else:
            choice = g.pick(["uniform", "uniform", "unit", "ties", "quarters", "integers"])
            if choice == "ties":  # few distinct values: ties for max and argmax
                return f"{rng}.integers(-2, 3, {shape})", -2.0, 2.0, 0
            if choice == "quarters":
                return f"({rng}.integers(-8, 9, {shape}) * 0.25)", -2.0, 2.0, -2
            if choice == "integers":
                return f"{rng}.integers(-40, 41, {shape})", -40.0, 40.0, 0
            lo, hi = (-3.0, 3.0) if choice == "uniform" else (-1.0, 1.0)
    if not g.grad and g.chance(30) and math.ceil(lo * 4) <= math.floor(hi * 4):
        a, b = math.ceil(lo * 4), math.floor(hi * 4)
        return f"({rng}.integers({a}, {b + 1}, {shape}) * 0.25)", a / 4, b / 4, -2
    return f"{rng}.uniform({lo}, {hi}, {shape})", lo, hi, None


def _int_values(g, dtype, lo, hi, seed: int, shape) -> tuple[str, int, int]:
    rng = f"np.random.default_rng({seed})"
    if dtype == "bool":
        return f"({rng}.integers(0, 2, {shape}) == 1)", 0, 1
    dmin, dmax = int_range(dtype)
    if lo is None:
        lo, hi = g.pick([(-5, 5), (0, 9), (-100, 100), (dmin, dmax)])
    lo, hi = max(int(lo), dmin), min(int(hi), dmax)
    wide = ", dtype=np.uint64" if hi >= 2 ** 63 else ""  # past int64, numpy's default
    return f"{rng}.integers({lo}, {hi}, {shape}, endpoint=True{wide})", lo, hi


def literal(arr: np.ndarray) -> str:
    if arr.size == 0:
        return f"np.zeros({arr.shape}, dtype=np.{arr.dtype.name})"
    return f"np.array({arr.tolist()!r}, dtype=np.{arr.dtype.name})"


def _layout(g, shape: tuple[int, ...]) -> tuple[tuple[int, ...], str, str]:
    """(base shape, lazyten view suffix, numpy view suffix) of a random non-contiguous view."""
    ndim = len(shape)
    kind = g.pick(["permute", "flip", "slice", "step", "expand"])
    if kind == "permute" and ndim >= 2:
        order = g.permutation(range(ndim))
        base = [0] * ndim
        for i, o in enumerate(order):
            base[o] = shape[i]
        args = ", ".join(map(str, order))
        return tuple(base), f".permute({args})", f".transpose({args})"
    if kind == "flip" and ndim >= 1:
        axes = g.subset(range(ndim), min_size=1)
        return shape, f".flip({', '.join(map(str, axes))})", f"[{_flip_index(ndim, axes)}]"
    if kind == "slice" and ndim >= 1:
        index = ", ".join("1:-1" for _ in shape)
        return tuple(s + 2 for s in shape), f"[{index}]", f"[{index}]"
    if kind == "step" and ndim >= 1:
        index = ", ".join("1::2" if i % 2 == 0 else "-2::-2" for i in range(ndim))
        return tuple(2 * s + 1 for s in shape), f"[{index}]", f"[{index}]"
    if ndim >= 1:  # expand: some dims (and maybe leading ones) broadcast from size 1
        lead = g.int(0, ndim - 1) if g.chance(30) else 0
        base = tuple(1 if g.chance(50) else s for s in shape[lead:])
        return base, f".expand({shape})", f"__broadcast__{shape}"
    return shape, "", ""


def _flip_index(ndim: int, axes) -> str:
    return ", ".join("::-1" if i in axes else ":" for i in range(ndim))


def _numpy_view(arr: np.ndarray, view: str) -> np.ndarray:
    if view.startswith("__broadcast__"):
        return np.broadcast_to(arr, eval(view[len("__broadcast__"):])).copy()
    return eval(f"arr{view}", {"arr": arr}) if view else arr


def make_input(g, shape, dtype: str, lo=None, hi=None, layout=None) -> Var:
    """Add an input (and its view) to the program and the pool; return the view's Var."""
    view = layout if layout is not None else (g.chance(VIEW_CHANCE) and len(shape) > 0)
    base_shape, lazy_view, np_view = _layout(g, shape) if view else (shape, "", "")
    seed = g.int(0, 9999)
    grid = 0
    if is_float(dtype):
        src, lo, hi, grid = _float_values(g, lo, hi, seed, base_shape)
    else:
        src, lo, hi = _int_values(g, dtype, lo, hi, seed, base_shape)
    src = f"{src}.astype(np.{np_dtype(dtype).name})" if dtype != "bool" else src
    array = eval(src, {"np": np})
    assert array.shape == tuple(base_shape) and array.dtype == np_dtype(dtype), (src, shape)
    if dtype == "bfloat16":
        array = to_dtype(array, dtype)  # the values the tensor holds
    if array.size <= LITERAL_MAX:
        src = literal(array)
    name = g.name("b" if view else "x")
    requires_grad = g.grad and is_float(dtype)
    g.prog.inputs[name] = Input(name, src, array, requires_grad)
    grad_kw = ", requires_grad=True" if requires_grad else ""
    grad_kw += ", dtype=dtypes.bfloat16" if dtype == "bfloat16" else ""
    leaves = frozenset([name]) if requires_grad else frozenset()
    leaf = Var(name, tuple(base_shape), dtype, lo, hi, grid=grid, buffer=True, leaves=leaves)

    def ref_leaf(interp: Interp, name=name) -> Ref:
        return Ref(np.array(interp.leaves[name]))

    g.add(Step("input", f"Tensor({src}, device=DEV{grad_kw})", ref_leaf, leaf))
    if not view:
        return leaf
    out = leaf.but(name=g.name(), shape=tuple(shape), buffer=False)

    def ref_view(interp: Interp, leaf=name) -> Ref:
        return Ref(_numpy_view(interp.env[leaf].val, np_view))

    g.add(Step("input", f"{name}{lazy_view}", ref_view, out))
    return out
