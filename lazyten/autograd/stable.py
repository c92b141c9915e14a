"""Values read by several kernels that must see the same bits: `stable_values` on
LazyBuffers, and `Stable`, the Function that applies it to a Tensor (identity gradient).

Used where one kernel compares x with something computed from x in another kernel: a
max's backward (primitives.Max), a sort's ranks and picks (sorting.py), argmax (reduce.py).
"""
from __future__ import annotations

from codegen.dtypes import dtypes
from codegen.helpers import prod
from codegen.ops import BinaryOps, LoadOps, ReduceOps, TernaryOps, UnaryOps
from lazyten.autograd.function import Function
from lazyten.lazy import LazyBuffer
from lazyten.traced import CompositeOps
from lazyten.graph_expand import graph_of


# Float ops whose result is the same bit for bit in whichever kernel computes it: exact
# ones (fmod is exact too), and for float32/float64 the correctly rounded ADD and MUL as
# long as no MUL feeds an ADD, which a backend may contract into one fma in one kernel and
# not in another. Ops with a bool or integer result are exact. Division and the
# transcendental ops are not here: backends may approximate them, differently per kernel.
_EXACT = {UnaryOps.NEG, UnaryOps.CAST, BinaryOps.MAX, BinaryOps.MOD, TernaryOps.WHERE}
_ROUNDED = {BinaryOps.ADD, BinaryOps.MUL}


def stable_values(x: LazyBuffer) -> LazyBuffer:
    """`x`, or a stored copy of it, such that every kernel that reads the result sees the
    same values bit for bit.

    The scheduler inlines an elementwise graph into each kernel that reads it, and two
    kernels may round it differently (an fma in one, a multiply and an add in the other).
    A max's backward compares the input with the maximum: both must come from the same
    values, or whole rows lose their gradient. Leaves (realized buffers, constants, load
    ops, reduces: a reduce read by a reduce is always stored) read the same memory
    everywhere; so does an inlined graph of the ops above. Anything else is computed once
    into memory: the base, or the view when it reads fewer elements (a shrink of a large
    base)."""
    if _reproducible(x.base):
        return x
    if x._base is None or prod(x.shape) <= prod(x.base.shape):
        return x.materialize()
    return x.base.materialize()._view(x.st)


def _reproducible(root: LazyBuffer) -> bool:
    stack, seen = [root], set()
    while stack:
        base = stack.pop()
        if id(base) in seen or base.realized is not None or \
                isinstance(base.op, (LoadOps, ReduceOps)):
            continue
        seen.add(id(base))
        if base.op is CompositeOps.GRAPH:  # a traced Function's node: the graph it stands for
            stack.append(graph_of(base))
            continue
        if base.dtype.is_float and base.op not in _EXACT:
            if base.op not in _ROUNDED or base.dtype not in (dtypes.float32, dtypes.float64):
                return False  # (halves may be computed in float32 and rounded late)
            if base.op is BinaryOps.ADD and any(_under(s, BinaryOps.MUL) for s in base.src):
                return False
        stack.extend(s.base for s in base.src)
    return True


def _under(lb: LazyBuffer, op) -> bool:
    """Is `lb` an inlined `op`, possibly behind negations and casts (which a backend can
    fold into an fma too)?"""
    base = lb.base
    while base.realized is None and base.op in (UnaryOps.NEG, UnaryOps.CAST, CompositeOps.GRAPH):
        base = graph_of(base) if base.op is CompositeOps.GRAPH else base.src[0].base
    return base.realized is None and base.op is op


class Stable(Function):
    """The input, stored if needed so that every kernel reading it sees the same bits (a
    rank compares x with x in one kernel, the picks read x in another); gradient: identity."""
    def forward(self, x):
        return stable_values(x)

    def backward(self, grad):
        return grad
