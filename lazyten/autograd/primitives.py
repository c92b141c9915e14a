"""The primitive autograd Functions: each forward beside its backward, both written
directly in LazyBuffer ops (`e`, `r`, movement ops, `loadop`), one Function per Tensor
primitive: unary, binary, ternary, reduce, movement, and the copies (contiguous, clone,
to another device).

Functions whose forward is a composite of Tensor ops are in special.py and conv.py.
"""
from __future__ import annotations
import math

from codegen.dtypes import dtypes
from codegen.ops import BinaryOps, LoadOps, ReduceOps, TernaryOps, UnaryOps
from lazyten.autograd.function import Function, keeps_nothing
from lazyten.autograd.stable import stable_values
from lazyten.autograd.tanh import Tanh  # noqa: F401  (a unary primitive: F.Tanh)
from lazyten.lazy import LazyBuffer


# ---- unary ----
class Contiguous(Function):
    def forward(self, x):
        return x.contiguous()

    def backward(self, grad):
        return grad


class Materialize(Function):
    """Stored once, forward and backward: a level of a pairwise tree whose recomputation,
    inlined into every later kernel, would grow with the tree."""
    def forward(self, x):
        return x.materialize()

    def backward(self, grad):
        return grad.materialize()


class Cast(Function):
    def forward(self, x, dtype):
        self.input_dtype = x.dtype
        return x.cast(dtype)

    def backward(self, grad):
        return grad.cast(self.input_dtype)


class Neg(Function):
    def forward(self, x):
        return x.e(UnaryOps.NEG)

    def backward(self, grad):
        return grad.e(UnaryOps.NEG)


class Reciprocal(Function):
    def forward(self, x):
        self.ret = x.e(UnaryOps.RECIP)
        return self.ret

    def backward(self, grad):  # d(1/x) = -1/x^2
        return grad.e(UnaryOps.NEG).e(BinaryOps.MUL, self.ret).e(BinaryOps.MUL, self.ret)


class Sin(Function):
    def forward(self, x):
        self.x = x
        return x.e(UnaryOps.SIN)

    def backward(self, grad):
        return self.x.e(UnaryOps.COS).e(BinaryOps.MUL, grad)


class Cos(Function):
    def forward(self, x):
        self.x = x
        return x.e(UnaryOps.COS)

    def backward(self, grad):
        return self.x.e(UnaryOps.SIN).e(UnaryOps.NEG).e(BinaryOps.MUL, grad)


class Relu(Function):
    traced = True  # one graph node forward, one backward (traced_graph.py)

    def forward(self, x):
        self.ret = x.e(BinaryOps.MAX, x.const(0))
        return self.ret

    def backward(self, grad):
        positive = self.ret.const(0).e(BinaryOps.CMPLT, self.ret).cast(grad.dtype)
        return positive.e(BinaryOps.MUL, grad)


class Log(Function):
    def forward(self, x):
        self.x = x
        return x.e(UnaryOps.LOG2).e(BinaryOps.MUL, x.const(math.log(2)))

    def backward(self, grad):
        return grad.e(BinaryOps.MUL, self.x.e(UnaryOps.RECIP))


class Exp(Function):
    def forward(self, x):
        self.ret = x.e(UnaryOps.EXP)
        return self.ret

    def backward(self, grad):
        return self.ret.e(BinaryOps.MUL, grad)


class Exp2(Function):
    def forward(self, x):
        self.ret = x.e(UnaryOps.EXP2)
        return self.ret

    def backward(self, grad):
        return self.ret.e(BinaryOps.MUL, grad).e(BinaryOps.MUL, grad.const(math.log(2)))


class Log2(Function):
    def forward(self, x):
        self.x = x
        return x.e(UnaryOps.LOG2)

    def backward(self, grad):
        return grad.e(BinaryOps.MUL, self.x.e(BinaryOps.MUL, self.x.const(math.log(2)))
                      .e(UnaryOps.RECIP))


class Sqrt(Function):
    def forward(self, x):
        self.ret = x.e(UnaryOps.SQRT)
        return self.ret

    def backward(self, grad):
        return grad.e(BinaryOps.MUL, self.ret.e(BinaryOps.MUL, self.ret.const(2)).e(UnaryOps.RECIP))


class Sigmoid(Function):
    traced = True

    def forward(self, x):  # 1 / (1 + e^-x), or e^x / (1 + e^x) where e^-x would overflow
        e = x.e(BinaryOps.MAX, x.e(UnaryOps.NEG)).e(UnaryOps.NEG).e(UnaryOps.EXP)
        one_plus = e.e(BinaryOps.ADD, e.const(1))
        negative = x.e(BinaryOps.CMPLT, x.const(0))
        self.ret = negative.e(TernaryOps.WHERE, e.e(BinaryOps.FDIV, one_plus),
                              one_plus.e(UnaryOps.RECIP))
        return self.ret

    def backward(self, grad):
        one_minus = self.ret.const(1).e(BinaryOps.ADD, self.ret.e(UnaryOps.NEG))
        return self.ret.e(BinaryOps.MUL, one_minus).e(BinaryOps.MUL, grad)


# ---- binary (inputs already broadcast to one shape and dtype) ----
class Less(Function):
    def forward(self, x, y):
        return x.e(BinaryOps.CMPLT, y)

    def backward(self, grad):
        return None, None


class NotEqual(Function):
    def forward(self, x, y):
        return x.e(BinaryOps.CMPNE, y)

    def backward(self, grad):
        return None, None


class Equal(Function):
    """x == y as not (x != y): one node for what `!=` and `logical_not` built."""
    def forward(self, x, y):
        differ = x.e(BinaryOps.CMPNE, y)
        return differ.e(BinaryOps.XOR, differ.const(True))

    def backward(self, grad):
        return None, None


class Add(Function):
    def forward(self, x, y):
        return x.e(BinaryOps.ADD, y)

    def backward(self, grad):
        return grad, grad


class Sub(Function):
    def forward(self, x, y):
        return x.e(BinaryOps.ADD, y.e(UnaryOps.NEG))

    def backward(self, grad):
        return grad, grad.e(UnaryOps.NEG)


class Mul(Function):
    def forward(self, x, y):
        self.x, self.y = x, y
        return x.e(BinaryOps.MUL, y)

    def backward(self, grad):
        return (self.y.e(BinaryOps.MUL, grad) if self.needs_input_grad[0] else None,
                self.x.e(BinaryOps.MUL, grad) if self.needs_input_grad[1] else None)


class Div(Function):
    """IEEE division of floats (x * (1/y) would round twice: 26% of float32 quotients
    were an ulp off)."""

    def forward(self, x, y):
        self.y = y
        self.ret = x.e(BinaryOps.FDIV, y)
        return self.ret

    def backward(self, grad):  # d/dx = 1/y, d/dy = -x/y^2 = -(1/y)(x/y): no y*y to overflow
        gx = grad.e(BinaryOps.FDIV, self.y)
        gy = gx.e(BinaryOps.MUL, self.ret).e(UnaryOps.NEG) if self.needs_input_grad[1] else None
        return gx if self.needs_input_grad[0] else None, gy


class Maximum(Function):
    traced = True

    def forward(self, x, y):
        self.x, self.y = x, y
        self.ret = x.e(BinaryOps.MAX, y)
        return self.ret

    def backward(self, grad):  # ties share the gradient, as PyTorch does
        x_wins = self.y.e(BinaryOps.CMPLT, self.x).cast(grad.dtype)
        tie = self.x.e(BinaryOps.CMPNE, self.y).e(BinaryOps.CMPNE, self.x.const(True).cast(dtypes.bool))
        share = x_wins.e(BinaryOps.ADD, tie.cast(grad.dtype).e(BinaryOps.MUL, grad.const(0.5)))
        gx = share.e(BinaryOps.MUL, grad)
        gy = grad.const(1).e(BinaryOps.ADD, share.e(UnaryOps.NEG)).e(BinaryOps.MUL, grad)
        return gx, gy


class BinaryNoGrad(Function):
    """IDIV, MOD, AND, OR, XOR: integer or logical, no gradient."""

    def forward(self, x, y, op):
        return x.e(op, y)

    def backward(self, grad):
        return None, None


class Where(Function):
    def forward(self, cond, x, y):
        self.cond = cond
        return cond.e(TernaryOps.WHERE, x, y)

    def backward(self, grad):
        zero = grad.const(0)
        return (None,
                self.cond.e(TernaryOps.WHERE, grad, zero) if self.needs_input_grad[1] else None,
                self.cond.e(TernaryOps.WHERE, zero, grad) if self.needs_input_grad[2] else None)


# ---- reduce ----
class Sum(Function):
    """Sum over `axis`, kept as size-1 dims, then reshaped to `shape` (one node for what
    PyTorch's keepdim=False gives: eager code makes one Function and one Tensor)."""

    def forward(self, x, axis, shape):
        self.input_shape = x.shape
        self.kept = x.r(ReduceOps.SUM, axis)
        return self.kept.reshape(shape)

    def backward(self, grad):
        return grad.reshape(self.kept.shape).expand(self.input_shape)


class Mean(Sum):
    """Sum over `axis` divided by `count`, the number of elements summed: one node for
    the Sum and the division by a constant that `sum / count` built (mean runs in losses
    and normalisations of every eager step); the graph is that of Sum and Div."""

    def forward(self, x, axis, shape, count):
        total = super().forward(x, axis, shape)
        self.count = total.const(count)
        return total.e(BinaryOps.FDIV, self.count)

    def backward(self, grad):
        return super().backward(grad.e(BinaryOps.FDIV, self.count))


class Max(Function):
    def forward(self, x, axis, shape):
        if self.requires_grad:  # the backward's mask compares x with the maximum
            x = stable_values(x)
        self.x, self.ret, self.axis = x, x.r(ReduceOps.MAX, axis), axis
        return self.ret.reshape(shape)

    def backward(self, grad):  # split among the maxima, as PyTorch's amax does
        grad = grad.reshape(self.ret.shape)
        hit = self.x.e(BinaryOps.CMPNE, self.ret.expand(self.x.shape))
        mask = hit.e(BinaryOps.CMPNE, hit.const(True)).cast(grad.dtype)
        count = mask.r(ReduceOps.SUM, self.axis).expand(self.x.shape)
        return mask.e(BinaryOps.MUL, count.e(UnaryOps.RECIP)).e(BinaryOps.MUL, grad.expand(self.x.shape))


# ---- movement ----
class Reshape(Function):
    held_values = keeps_nothing  # (a view: its backward reads no values)
    def forward(self, x, shape):
        self.input_shape = x.shape
        return x.reshape(shape)

    def backward(self, grad):
        return grad.reshape(self.input_shape)


class Permute(Function):
    held_values = keeps_nothing  # (a view: its backward reads no values)
    def forward(self, x, order):
        self.order = order
        return x.permute(order)

    def backward(self, grad):
        inverse = tuple(sorted(range(len(self.order)), key=self.order.__getitem__))
        return grad.permute(inverse)


class Expand(Function):
    held_values = keeps_nothing  # (a view: its backward reads no values)
    def forward(self, x, shape):
        self.input_shape = x.shape
        return x.expand(shape)

    def backward(self, grad):
        axis = tuple(i for i, (a, b) in enumerate(zip(self.input_shape, grad.shape)) if a != b)
        return grad.r(ReduceOps.SUM, axis) if axis else grad


class Pad(Function):
    held_values = keeps_nothing  # (a view: its backward reads no values)
    def forward(self, x, arg):
        self.shape, self.arg = x.shape, arg  # (the shrink back is worked out only if needed)
        return x.pad(arg)

    def backward(self, grad):
        return grad.shrink(tuple([(p[0], s + p[0]) for s, p in zip(self.shape, self.arg)]))


class Shrink(Function):
    """A window of each axis, then (`shape`) a reshape of it: an int index or a piece of
    unbind drops its axis in the same node (one Function, where a Shrink and a Reshape
    would be two, forward and backward)."""
    held_values = keeps_nothing  # (a view: its backward reads no values)
    def forward(self, x, arg, shape=None):
        self.shape, self.arg = x.shape, arg  # (the pad back is worked out only if needed)
        return x.shrink(arg) if shape is None else x.shrink(arg).reshape(shape)

    def backward(self, grad):
        window = tuple([e - b for b, e in self.arg])
        if grad.shape != window:
            grad = grad.reshape(window)
        return grad.pad(tuple([(p[0], s - p[1]) for s, p in zip(self.shape, self.arg)]))


class Flip(Function):
    held_values = keeps_nothing  # (a view: its backward reads no values)
    def forward(self, x, axis):
        self.arg = tuple(-1 if i in axis else 1 for i in range(len(x.shape)))
        return x.stride(self.arg)

    def backward(self, grad):
        return grad.stride(self.arg)


# ---- identities and copies ----
class Same(Function):
    """The identity, for `Tensor._same` on a tensor that needs a gradient."""
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        return x

    def backward(self, grad):
        return grad


class Clone(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        return LazyBuffer.loadop(LoadOps.CONTIGUOUS, x.shape, x.dtype, x.device, src=(x,))

    def backward(self, grad):
        return grad


class ToDevice(Function):
    """Gradient of a device copy (Tensor.to, which makes the copy): copy the gradient back."""

    def __init__(self, device: str, needs: list[bool]):
        super().__init__(needs)
        self.device = device

    def backward(self, grad):
        return grad.copy_to_device(self.device)
