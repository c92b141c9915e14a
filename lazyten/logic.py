"""Bitwise ops, shifts, float classification (isnan, isinf, isfinite), masked_fill, isclose
and allclose, with PyTorch's semantics. Tensors in, a Tensor out (allclose: a Python bool).
Comparisons (`< <= > >= == !=`, results bool, no gradient), `& | ^ ~` and the logical_*
functions too. Mixed into Tensor.
"""
from __future__ import annotations
import math
import operator

from codegen.dtypes import dtypes
from codegen.ops import BinaryOps
from lazyten.autograd import primitives as F
from lazyten.elementwise import broadcasts_to
from lazyten.errors import DTypeError
from lazyten.mixin import TensorMixin


class LogicMixin(TensorMixin):
    """Bits, shifts and predicates on values."""

    # ---- comparisons and logic (results are bool; no gradient) ----
    def __lt__(self, o): return self._compare(F.Less, o, False)
    def __gt__(self, o): return self._compare(F.Less, o, True)
    def __ge__(self, o): return self._compare_or_equal(o, True)
    def __le__(self, o): return self._compare_or_equal(o, False)
    def __ne__(self, o): return self._compare(F.NotEqual, o, False)
    def __eq__(self, o):  # one node for what `!=` then `logical_not` would build
        x, y = self._broadcasted(o)
        return x.apply(F.Equal, y)

    def _compare(self, fn, other, reverse):
        x, y = self._broadcasted(other, reverse)
        return x.apply(fn, y)

    def _compare_or_equal(self, other, greater: bool):
        """x >= y (or x <= y); false where either side is NaN, as IEEE and numpy say."""
        x, y = self._broadcasted(other)
        small, big = (y, x) if greater else (x, y)
        if not x.dtype.is_float:
            return big.apply(F.Less, small).logical_not()
        return small.apply(F.Less, big) | x.apply(F.NotEqual, y).logical_not()

    def _logic(self, other, op, reverse=False):
        x, y = self._broadcasted(other, reverse)
        if x.dtype.is_float:
            raise DTypeError(f"{op.name.lower()} needs bool or integer tensors, got {x.dtype}")
        return x.apply(F.BinaryNoGrad, y, op=op)

    def __and__(self, o): return self._logic(o, BinaryOps.AND)
    def __rand__(self, o): return self._logic(o, BinaryOps.AND, True)
    def __or__(self, o): return self._logic(o, BinaryOps.OR)
    def __ror__(self, o): return self._logic(o, BinaryOps.OR, True)
    def __xor__(self, o): return self._logic(o, BinaryOps.XOR)
    def __rxor__(self, o): return self._logic(o, BinaryOps.XOR, True)

    def __invert__(self):
        if self.dtype.is_float:
            raise DTypeError(f"~ needs a bool or integer tensor, got {self.dtype}")
        return self ^ (True if self.dtype == dtypes.bool else -1)

    def logical_not(self):
        return self.cast(dtypes.bool) ^ True

    def _bools(self, o): return self.cast(dtypes.bool), self._to_tensor(o, dtypes.bool).cast(dtypes.bool)
    def logical_and(self, o): return operator.and_(*self._bools(o))
    def logical_or(self, o): return operator.or_(*self._bools(o))
    def logical_xor(self, o): return operator.xor(*self._bools(o))

    def eq(self, o): return self == o
    def ne(self, o): return self != o
    def lt(self, o): return self < o
    def gt(self, o): return self > o
    def le(self, o): return self <= o
    def ge(self, o): return self >= o

    # ---- bitwise ----
    def bitwise_and(self, other): return self._logic(other, BinaryOps.AND)
    def bitwise_or(self, other): return self._logic(other, BinaryOps.OR)
    def bitwise_xor(self, other): return self._logic(other, BinaryOps.XOR)
    def bitwise_not(self): return ~self

    def _shift(self, other, left: bool, reverse: bool = False):
        """x << y or x >> y as PyTorch: counts outside [0, bits) give 0 (<<) or the sign
        fill (>>: 0 or -1); >> is arithmetic for signed dtypes, logical for unsigned."""
        x, y = self._broadcasted(other, reverse)
        if x.dtype.is_float or x.dtype == dtypes.bool:
            name = "<<" if left else ">>"
            raise TypeError(f"{name} needs integer tensors, got {x.dtype.name}"
                            + (f" (from {self.dtype.name} and {_dtype_name(other)})"
                               if x.dtype != self.dtype or isinstance(other, type(self)) else ""))
        bits = 8 * x.dtype.itemsize
        outside = (y >= bits) if x.dtype.is_unsigned else (y < 0) | (y >= bits)
        if left:
            shifted = x.apply(F.BinaryNoGrad, outside.where(0, y), op=BinaryOps.SHL)
            return outside.where(0, shifted)
        if x.dtype.is_unsigned:
            shifted = x.apply(F.BinaryNoGrad, outside.where(0, y), op=BinaryOps.SHR)
            return outside.where(0, shifted)
        return x.apply(F.BinaryNoGrad, outside.where(bits - 1, y), op=BinaryOps.SHR)

    def lshift(self, other): return self._shift(other, True)
    def rshift(self, other): return self._shift(other, False)
    bitwise_left_shift, bitwise_right_shift = lshift, rshift
    def __lshift__(self, o): return self._shift(o, True)
    def __rshift__(self, o): return self._shift(o, False)
    def __rlshift__(self, o): return self._shift(o, True, reverse=True)
    def __rrshift__(self, o): return self._shift(o, False, reverse=True)

    # ---- classification (bool results; integers are always finite) ----
    def isnan(self):
        return self.detach() != self.detach() if self.dtype.is_float else self._all_bool(False)

    def isinf(self, detect_positive: bool = True, detect_negative: bool = True):
        if not self.dtype.is_float or not (detect_positive or detect_negative):
            return self._all_bool(False)
        x = self.detach()
        if detect_positive and detect_negative:
            return x.abs() == math.inf
        return x == (math.inf if detect_positive else -math.inf)

    def isposinf(self): return self.isinf(detect_negative=False)
    def isneginf(self): return self.isinf(detect_positive=False)

    def isfinite(self):
        if not self.dtype.is_float:
            return self._all_bool(True)
        return self.detach().abs() < math.inf  # false for nan too

    def _all_bool(self, value: bool):
        return type(self).full(self.shape, value, dtype=dtypes.bool, device=self.device)

    # ---- selection ----
    def masked_fill(self, mask, value):
        """`value` where the bool `mask` (broadcast to this shape) is true, else self; the
        result keeps self's dtype and shape, as PyTorch."""
        tensor_type = type(self)
        if not isinstance(mask, tensor_type) or mask.dtype != dtypes.bool:
            got = mask.dtype.name if isinstance(mask, tensor_type) else type(mask).__name__
            raise TypeError(f"masked_fill needs a bool mask tensor, got {got}")
        if isinstance(value, tensor_type):
            if value.ndim != 0:
                raise ValueError(f"masked_fill needs a 0-d value tensor, got shape {value.shape}")
            fill = value.cast(self.dtype)
        elif isinstance(value, (bool, int, float)):
            fill = tensor_type.full((), value, dtype=_py_dtype(value),
                                    device=self.device).cast(self.dtype)
        else:
            raise TypeError(f"masked_fill value must be a number or a 0-d tensor, "
                            f"got {type(value).__name__}")
        if not broadcasts_to(mask.shape, self.shape):
            raise ValueError(f"masked_fill: mask of shape {mask.shape} does not broadcast to "
                             f"the tensor's shape {self.shape}")
        return mask.where(fill, self)

    # ---- closeness ----
    def isclose(self, other, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False):
        """|x - y| <= atol + rtol * |y| elementwise (bool), as PyTorch: equal values
        (infinities too) are close, nan is close to nan only with equal_nan."""
        if rtol < 0 or atol < 0:
            raise ValueError(f"isclose needs non-negative tolerances, got rtol={rtol}, "
                             f"atol={atol}")
        x, y = self._broadcasted(other)
        x, y = x.detach(), y.detach()
        same = x == y
        if x.dtype == dtypes.bool:
            return same
        if equal_nan and x.dtype.is_float:
            same = same | (x.isnan() & y.isnan())
        if not x.dtype.is_float:  # |x - y| could wrap: PyTorch compares in the default float
            x, y = x.cast(dtypes.default_float), y.cast(dtypes.default_float)
        elif x.dtype.opmath != x.dtype:  # float16, bfloat16
            x, y = x.float(), y.float()
        error = (x - y).abs()
        return same | (error.isfinite() & (error <= atol + rtol * y.abs()))

    def allclose(self, other, rtol: float = 1e-05, atol: float = 1e-08,
                 equal_nan: bool = False) -> bool:
        """True when every element isclose (a Python bool, as PyTorch)."""
        return bool(self.isclose(other, rtol, atol, equal_nan).all().item())


def _py_dtype(value):
    if isinstance(value, bool):
        return dtypes.bool
    return dtypes.int64 if isinstance(value, int) else dtypes.default_float


def _dtype_name(value) -> str:
    return value.dtype.name if hasattr(value, "dtype") else type(value).__name__
