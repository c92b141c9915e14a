"""Elementwise Tensor methods: broadcasting, type promotion, arithmetic, activations.

Everything here reduces to the primitive unary/binary/ternary ops through the autograd
Functions in function.py. Mixed into Tensor.
"""
from __future__ import annotations
import functools

from codegen.dtypes import dtypes, promote, scalar_result
from codegen.ops import BinaryOps
from lazyten.aliases import keywords
from lazyten import activation_bodies as A
from lazyten.autograd import primitives as F
from lazyten.autograd.composite import Composite
from lazyten.autograd.special import Pow, Special
from lazyten.errors import ArgumentError, DTypeError, ShapeError
from lazyten.lazy import LazyBuffer
from lazyten.mathfn import gelu, gelu_slope, gelu_tanh, gelu_tanh_slope
from lazyten.mixin import TensorMixin
from lazyten.power import float_pow, int_tensor_power


@functools.lru_cache(maxsize=4096)  # eager code broadcasts the same shapes on every call
def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """numpy broadcasting of several shapes, with an error that names them."""
    ndim = max(len(s) for s in shapes)
    padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
    out = []
    for sizes in zip(*padded):
        big = {s for s in sizes if s != 1}
        if len(big) > 1:
            raise ShapeError(f"shapes {' and '.join(map(str, shapes))} cannot be broadcast "
                             "together")
        out.append(big.pop() if big else (0 if 0 in sizes else 1))
    return tuple(out)


# mixed dtypes promote by PyTorch's rules on every op (about 2 us each): the answer per
# pair is kept (a promotion that raises is not cached, so it raises every time)
_promoted = functools.lru_cache(maxsize=None)(promote)


def broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Does `shape` broadcast to exactly `target` (numpy rules, in one direction)?"""
    try:
        return broadcast_shape(shape, target) == target
    except ValueError:
        return False


class ElementwiseMixin(TensorMixin):
    """Arithmetic, comparisons, logic and activation functions."""

    # ---- broadcasting ----
    def _to_tensor(self, other, dtype, shape: tuple[int, ...] = ()):
        """`other` as a Tensor: a Python number becomes a constant of `shape`."""
        tensor_type = type(self)
        if isinstance(other, tensor_type):
            return other
        if not isinstance(other, (bool, int, float)):
            other = getattr(other, "item", lambda: other)()
            if not isinstance(other, (bool, int, float)):
                raise TypeError(f"cannot combine a Tensor with {type(other).__name__}")
        return tensor_type._wrap(LazyBuffer.const_like(other, shape, dtype, self.device))

    def _broadcasted(self, other, reverse: bool = False, match_dtype: bool = True):
        """(x, y) broadcast to one shape (and promoted to one dtype)."""
        lazy = self.lazydata
        if not isinstance(other, type(self)):
            return self._with_number(other, reverse, match_dtype)
        if other.lazydata.device != lazy.device:
            raise ValueError(f"tensors on different devices: {self.device} and {other.device}")
        dtype = lazy.dtype if lazy.dtype is other.lazydata.dtype else \
            _promoted(lazy.dtype, other.lazydata.dtype)
        x, y = (other, self) if reverse else (self, other)
        if match_dtype:  # an operand already of `dtype` goes in as it is: no Same node
            x = x if x.lazydata.dtype is dtype or x.dtype == dtype else x.cast(dtype)
            y = y if y.lazydata.dtype is dtype or y.dtype == dtype else y.cast(dtype)
        if x.lazydata.shape == y.lazydata.shape:
            return x, y
        shape = broadcast_shape(x.shape, y.shape)
        return x._broadcast_to(shape), y._broadcast_to(shape)

    def _with_number(self, other, reverse: bool, match_dtype: bool):
        """_broadcasted with a number: it becomes a constant at this tensor's shape and the
        result's dtype at once (what broadcasting and promotion would give), so only this
        tensor may need a cast."""
        if not isinstance(other, (bool, int, float)) and hasattr(other, "item"):
            other = other.item()  # a numpy scalar acts as a Python number, as in PyTorch
        lazy = self.lazydata
        dtype = scalar_result(lazy.dtype, other)
        const = type(self)._wrap(LazyBuffer.const_like(other, lazy.shape, dtype, lazy.device))
        x = self if not match_dtype or lazy.dtype is dtype or lazy.dtype == dtype \
            else self.cast(dtype)
        return (const, x) if reverse else (x, const)

    def _broadcast_to(self, shape: tuple[int, ...]):
        if self.shape == shape:
            return self
        padded = (1,) * (len(shape) - self.ndim) + self.shape
        if not self.requires_grad or type(self).no_grad:  # no gradient: views, no Functions
            return type(self)._wrap(self.lazydata.reshape(padded).expand(shape))
        # the shapes are known to broadcast: the primitives at once, with no `Same` node for
        # a reshape that changes nothing (Tensor.expand's checks would make one)
        x = self if padded == self.shape else self.apply(F.Reshape, shape=padded)
        return x.apply(F.Expand, shape=shape)

    # ---- arithmetic ----
    def add(self, other, reverse: bool = False):
        x, y = self._broadcasted(other, reverse)
        return x.apply(F.Add, y)

    def sub(self, other, reverse: bool = False):
        x, y = self._broadcasted(other, reverse)
        if x.dtype == dtypes.bool:
            raise DTypeError("subtraction of bool tensors is not supported (as in PyTorch): "
                            "use ~ or logical_not() to invert a mask, ^ for 'differs'")
        return x.apply(F.Sub, y)

    def mul(self, other, reverse: bool = False):
        x, y = self._broadcasted(other, reverse)
        return x.apply(F.Mul, y)

    def div(self, other, reverse: bool = False, rounding_mode: str | None = None):
        """True division (integers give floats), or "trunc"/"floor" rounding as PyTorch."""
        if rounding_mode is None and not self.dtype.is_float and not isinstance(other, type(self)):
            # a Python number must not become the integer tensor's dtype first: uint8 / -1
            # would divide by 255
            return self.cast(dtypes.default_float).div(other, reverse)
        x, y = self._broadcasted(other, reverse)
        if rounding_mode == "trunc":
            return x._int_divmod(y)[0] if not x.dtype.is_float else x.apply(F.Div, y).trunc()
        if rounding_mode == "floor":
            return x.floordiv(y)
        if rounding_mode is not None:
            raise ArgumentError(f"rounding_mode must be None, 'trunc' or 'floor', "
                             f"got {rounding_mode!r}")
        if not x.dtype.is_float:
            x, y = x.cast(dtypes.default_float), y.cast(dtypes.default_float)
        return x.apply(F.Div, y)

    def _int_divmod(self, y):
        """C division of integers (quotient toward zero, remainder with the dividend's sign).
        Division by zero gives 0 and INT_MIN // -1 wraps, as numpy: the hardware would trap."""
        if self.dtype == dtypes.bool:
            raise TypeError("integer division is not defined for bool tensors")
        zero = y == 0
        minus_one = (y == -1) if not self.dtype.is_unsigned else None
        unsafe = zero if minus_one is None else zero | minus_one
        safe = unsafe.where(y.ones_like(), y)
        q = self.apply(F.BinaryNoGrad, safe, op=BinaryOps.IDIV)
        r = self.apply(F.BinaryNoGrad, safe, op=BinaryOps.MOD)  # x % 1 == 0 where unsafe
        if minus_one is not None:
            q = minus_one.where(-self, q)
        return zero.where(q.zeros_like(), q), r

    def _float_divmod(self, y):
        """numpy's floor division and remainder of floats (npy_divmod): exact remainders,
        quotients consistent with them; x // 0 is x / 0 and x % 0 is nan. A zero remainder
        has the divisor's sign and a zero quotient that of x / y, as numpy's and Python's
        (-0.0 // 1.0 is -0.0, as PyTorch's too; -0.0 % 2.0 is 0.0, where PyTorch's is -0.0)."""
        x, y = self.detach(), y.detach()
        fmod = x.apply(F.BinaryNoGrad, y, op=BinaryOps.MOD)
        fix = (fmod != 0) & ((y < 0) != (fmod < 0))
        mod = fix.where(fmod + y, fmod)
        zero = mod.zeros_like()
        mod = (mod == 0).where((y < 0).where(-zero, zero), mod)
        div = (x - fmod) / y
        div = fix.where(div - 1, div)
        floor = div.floor()
        floor = (div - floor > 0.5).where(floor + 1, floor)
        floor = (div == 0).where(x / y * 0.0, floor)
        floordiv = (y == 0).where(x / y, floor)
        return floordiv, mod

    def floordiv(self, other, reverse: bool = False):
        """Python's // : rounds toward minus infinity, for ints and floats."""
        x, y = self._broadcasted(other, reverse)
        if x.dtype.is_float:
            return x._float_divmod(y)[0]
        q, r = x._int_divmod(y)
        fix = (r != 0) & ((r < 0) != (y < 0))
        return fix.where(q - 1, q)

    def mod(self, other, reverse: bool = False):
        """Python's % : the result takes the divisor's sign."""
        x, y = self._broadcasted(other, reverse)
        if x.dtype.is_float:
            floordiv, out = x._float_divmod(y)
            if x.requires_grad or y.requires_grad:  # d/dx = 1, d/dy = -(x // y)
                out = out + (x - x.detach()) - (y - y.detach()) * floordiv
            return out
        r = x._int_divmod(y)[1]
        return ((r != 0) & ((r < 0) != (y < 0))).where(r + y, r)

    def pow(self, exponent, reverse: bool = False):
        """x ** y with numpy's results (exact integer powers, negative bases, zeros, nan/inf)
        and PyTorch's gradients (lazyten/power.py)."""
        is_number = isinstance(exponent, (int, float)) and not isinstance(exponent, bool)
        if not reverse and is_number and float(exponent).is_integer() and abs(exponent) <= 64:
            x = self.cast(scalar_result(self.dtype, exponent))
            if x.dtype.is_int and exponent < 0:
                raise ArgumentError(f"integers to negative integer powers are not allowed "
                                 f"(tensor of {x.dtype.name} ** {exponent})")
            if x.dtype.is_float and x.dtype.opmath != x.dtype:  # 16-bit: one rounding, as torch
                return x.float().apply(Pow, power=int(exponent), tensor=type(self)).cast(x.dtype)
            return x.apply(Pow, power=int(exponent), tensor=type(self))
        x, y = self._broadcasted(exponent, reverse)
        if x.dtype.is_int:  # exact, wrapping: repeated squaring
            return int_tensor_power(x, y)
        if not x.dtype.is_float:  # bool: in float64, rounded back
            return float_pow(x.double(), y.double()).round().cast(x.dtype)
        if x.dtype.opmath != x.dtype:
            return x.float().apply(Pow, y.float(), tensor=type(self)).cast(x.dtype)
        return x.apply(Pow, y, tensor=type(self))

    def __add__(self, o): return self.add(o)
    def __radd__(self, o): return self.add(o, True)
    def __sub__(self, o): return self.sub(o)
    def __rsub__(self, o): return self.sub(o, True)
    def __mul__(self, o): return self.mul(o)
    def __rmul__(self, o): return self.mul(o, True)
    def __truediv__(self, o): return self.div(o)
    def __rtruediv__(self, o): return self.div(o, True)
    def __floordiv__(self, o): return self.floordiv(o)
    def __rfloordiv__(self, o): return self.floordiv(o, True)
    def __mod__(self, o): return self.mod(o)
    def __rmod__(self, o): return self.mod(o, True)
    def __pow__(self, o): return self.pow(o)
    def __rpow__(self, o): return self.pow(o, True)
    def __matmul__(self, o): return self.matmul(o)
    def __rmatmul__(self, o): return self._to_tensor(o, self.dtype).matmul(self)
    def __neg__(self): return self.neg()
    def __abs__(self): return self.abs()
    # in place, as add_ and friends (inplace.py): PyTorch's rules for leaves and dtypes
    def __iadd__(self, o): return self.add_(o)
    def __isub__(self, o): return self.sub_(o)
    def __imul__(self, o): return self.mul_(o)
    def __itruediv__(self, o): return self.div_(o)

    def where(self, x, y):
        """cond.where(x, y): x where cond is true, else y (broadcast)."""
        tensor_type = type(self)
        # a bool condition goes in as it is (an input of the op, never given a gradient)
        cond = self if self.lazydata.dtype is dtypes.bool else self.cast(dtypes.bool)
        if isinstance(x, tensor_type):
            x, y = x._broadcasted(y)
        elif isinstance(y, tensor_type):
            y, x = y._broadcasted(x)
        else:
            dtype = promote(_py_dtype(x), _py_dtype(y))
            x, y = cond._to_tensor(x, dtype), cond._to_tensor(y, dtype)
        if cond.lazydata.shape != x.lazydata.shape:  # (x and y have one shape already)
            shape = broadcast_shape(cond.shape, x.shape)
            cond, x, y = cond._broadcast_to(shape), x._broadcast_to(shape), y._broadcast_to(shape)
        return cond.apply(F.Where, x, y)

    def maximum(self, other):
        x, y = self._broadcasted(other)
        return x.apply(F.Maximum, y)

    def minimum(self, other):
        x, y = self._broadcasted(other)
        if x.dtype == dtypes.bool:
            return x & y
        if x.dtype.is_int:
            return ~((~x).maximum(~y))
        return -((-x).maximum(-y))

    @keywords(min="min_", max="max_")
    def clip(self, min_=None, max_=None):
        """Clamp into [min_, max_] (PyTorch's `clamp(min=, max=)` spelling works too)."""
        if min_ is None and max_ is None:
            raise ArgumentError("clip needs min_ or max_ (clamp: min= or max=)")
        out = self if min_ is None else self.maximum(min_)
        out = out if max_ is None else out.minimum(max_)
        if not self.requires_grad or any(isinstance(b, type(self)) for b in (min_, max_)):
            return out  # tensor bounds: ties share the gradient, as PyTorch's
        # number bounds: PyTorch's clamp passes the gradient where min_ <= x <= max_ (its
        # bounds included; hardtanh and relu6 exclude them: _inside(strict=True))
        return self._inside(min_, max_, strict=False).where(self, out.detach())

    def _inside(self, low, high, strict: bool):
        """Where low < x < high (strict) or low <= x <= high; a None bound is no bound."""
        inside = None
        if low is not None:
            inside = self > low if strict else self >= low
        if high is not None:
            below = self < high if strict else self <= high
            inside = below if inside is None else inside & below
        return inside

    clamp = clip

    # ---- unary math ----
    def _float(self):
        return self if self.dtype.is_float else self.cast(dtypes.default_float)

    def neg(self):
        if self.dtype == dtypes.bool:
            raise DTypeError("negation of a bool tensor: use logical_not() or ~")
        return self.apply(F.Neg)

    def _opmath(self, fn):
        """fn on this tensor as a float; halves go through float32 (as PyTorch computes
        them), since exp(x) = exp2(x / ln2) in half precision loses about |x| ulps."""
        dtype = self.lazydata.dtype
        if dtype.is_float and dtype.opmath is dtype:  # float32, float64: the common case
            return fn(self)
        x = self._float()
        return fn(x.float()).cast(x.dtype) if x.dtype.opmath != x.dtype else fn(x)

    def reciprocal(self): return self._float().apply(F.Reciprocal)
    def sqrt(self): return self._float().apply(F.Sqrt)
    def rsqrt(self): return self.sqrt().reciprocal()
    def exp(self): return self._opmath(lambda x: x.apply(F.Exp))
    def log(self): return self._opmath(lambda x: x.apply(F.Log))
    def exp2(self): return self._opmath(lambda x: x.apply(F.Exp2))
    def log2(self): return self._opmath(lambda x: x.apply(F.Log2))
    def sin(self): return self._opmath(lambda x: x.apply(F.Sin))
    def cos(self): return self._opmath(lambda x: x.apply(F.Cos))
    def tan(self): return self.sin() / self.cos()
    def square(self): return self * self

    def abs(self):
        if self.dtype == dtypes.bool or self.dtype.is_unsigned:  # -x would wrap
            return self._same()
        return self.relu() + (-self).relu() if self.dtype.is_float else self.maximum(-self)

    def sign(self):
        if self.dtype == dtypes.bool:
            return self._same()
        out = (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype)
        return self.isnan().where(self, out) if self.dtype.is_float else out

    def trunc(self):
        """Through an integer: int32 for 16- and 32-bit floats, whose values below 2**23 (the
        only ones not kept as they are) fit, and which vectorises where a conversion to
        int64 does not (AVX2: 4 instructions an element; gelu's kernel 30% faster)."""
        if not self.dtype.is_float:
            return self._same()
        through = dtypes.int32 if self.dtype.itemsize <= 4 else dtypes.int64
        return self._round_like(self.cast(through).cast(self.dtype))

    def _round_like(self, rounded):
        """Rounding has zero gradient; keep values exact at huge magnitudes and nan/inf."""
        # every float at or above 2**mantissa_bits is an integer already
        exact = {dtypes.float16: 2.0 ** 10, dtypes.bfloat16: 2.0 ** 7,
                 dtypes.float32: 2.0 ** 23}.get(self.dtype, 2.0 ** 52)
        keep = (self.abs() >= exact) | self.isnan()
        # a rounded value has its input's sign, also when it is zero (trunc(-0.4) is -0.0)
        return keep.where(self, rounded.detach().copysign(self.detach())).detach()

    def floor(self):
        if not self.dtype.is_float:
            return self._same()
        t = self.trunc()
        return (t > self).where(t - 1, t).detach()

    def ceil(self):
        if not self.dtype.is_float:
            return self._same()
        t = self.trunc()
        return (t < self).where(t + 1, t).detach()

    def round(self):
        """Round half to even, as numpy and PyTorch do."""
        if not self.dtype.is_float:
            return self._same()
        t = self.trunc()
        frac = (self - t).abs()  # exact: x and trunc(x) share their leading bits
        odd = t.apply(F.BinaryNoGrad, t.full_like(2.0), op=BinaryOps.MOD) != 0
        away = (frac > 0.5) | ((frac == 0.5) & odd)
        return self._round_like(away.where(t + (self > 0).where(1.0, -1.0).cast(self.dtype), t))

    # ---- activations ----
    def relu(self): return self.apply(F.Relu)
    def sigmoid(self): return self._opmath(lambda x: x.apply(F.Sigmoid))
    def tanh(self): return self._opmath(lambda x: x.apply(F.Tanh))
    def relu6(self): return self.hardtanh(0, 6)
    def leakyrelu(self, neg_slope: float = 0.01):
        return self._activation(A.leakyrelu, neg_slope=neg_slope)
    def elu(self, alpha: float = 1.0): return self._activation(A.elu, alpha=alpha)
    def celu(self, alpha: float = 1.0): return self._activation(A.celu, alpha=alpha)
    def softplus(self, beta: float = 1.0): return self._activation(A.softplus, beta=beta)
    def softsign(self): return self._activation(A.softsign)
    def gelu(self, approximate: str = "none"):
        """x * Phi(x), Phi the normal CDF (as 0.5 * erfc(-x / sqrt 2): no cancellation for
        x << 0), with PyTorch's gradient Phi(x) + x phi(x) (one traced node each way,
        traced.py); or PyTorch's tanh approximation with approximate="tanh"."""
        if approximate == "tanh":
            return self._opmath(lambda x: x.apply(Special, value=gelu_tanh,
                                                  slope=gelu_tanh_slope, tensor=type(x)))
        if approximate != "none":
            raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
        return self._opmath(lambda x: x.apply(Special, value=gelu, slope=gelu_slope,
                                              tensor=type(x)))
    def quick_gelu(self): return self._activation(A.quick_gelu)
    def mish(self): return self._activation(A.mish)
    def swish(self): return self._activation(A.swish)
    silu = swish
    def hardsigmoid(self, alpha: float = 1 / 6, beta: float = 0.5):
        return self._activation(A.hardsigmoid, alpha=alpha, beta=beta)
    def hardswish(self): return self._activation(A.hardswish)

    def _activation(self, body, **kwargs):
        """An activation of several ops (activation_bodies.py) as one traced call, on this
        tensor as a float (halves through float32, `_opmath`)."""
        return self._opmath(lambda x: x.apply(Composite, body=body, **kwargs))

    def hardtanh(self, min_val: float = -1, max_val: float = 1):
        """clip(x, min_val, max_val), with PyTorch's hardtanh gradient: 1 strictly inside
        the bounds, 0 at them (clamp's includes them)."""
        out = self.maximum(min_val).minimum(max_val)
        if not self.requires_grad:
            return out
        return self._inside(min_val, max_val, strict=True).where(self, out.detach())
    def lerp(self, end, weight): return self + (end - self) * weight


def _py_dtype(value):
    if isinstance(value, bool):
        return dtypes.bool
    if isinstance(value, int):
        return dtypes.int64
    if isinstance(value, float):
        return dtypes.default_float
    return value.dtype
