"""What the fuzzer knows about values, and the reference interpreter's arithmetic.

A `Var` is the generator's static knowledge of one tensor: shape, dtype, an interval that
holds every value, and whether the value is *exact* (lazyten must produce it bit for bit:
inputs, movement, comparisons, integer math, IEEE-rounded ops such as division and casts,
and float sums and products whose every partial result is representable). Inexact values
are compared within an error bound that the reference computes element by element.

A `Ref` is the reference's value of one tensor: the numpy array (in the tensor's dtype, or
float64 in finite-difference mode) and an array bounding the absolute error of any
faithful implementation (None when exact). numpy has no bfloat16: a bfloat16 value is a
float32 array of exact bfloat16 values (`to_dtype` rounds with tests/helpers.rne_bf16).
"""
from __future__ import annotations
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from tests.helpers import rne_bf16

FLOATS = ("float16", "bfloat16", "float32", "float64")
INTS = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")
DTYPES = ("bool",) + INTS + FLOATS
# significand bits, implicit one included
MANTISSA = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}
UNIT = {d: 2.0 ** -MANTISSA[d] for d in FLOATS}  # unit roundoff: half an ulp of 1
# smallest normal: FTZ devices flush below (bfloat16 has float32's exponent range)
TINY = {d: float(np.finfo("float32" if d == "bfloat16" else d).tiny) for d in FLOATS}
# 16-bit float sums are expected to accumulate in float32 (as PyTorch does); others in their own
ACCUMULATE = {"float16": "float32", "bfloat16": "float32", "float32": "float32",
              "float64": "float64"}
# largest magnitude a float value may reach in a program: far from overflow, so products stay finite
LIMIT = {"float16": 2.0e3, "bfloat16": 1.0e6, "float32": 1.0e6, "float64": 1.0e6}


class NoPromotion(TypeError):
    """lazyten (like PyTorch) refuses to promote these dtypes: the generator skips the op."""


def np_dtype(dtype: str) -> np.dtype:
    """The numpy dtype of a reference value (bfloat16: float32 holding its values)."""
    return np.dtype("float32" if dtype == "bfloat16" else dtype)


def to_dtype(z, dtype: str) -> np.ndarray:
    """numpy's astype, rounding to bfloat16 for "bfloat16"."""
    return rne_bf16(z) if dtype == "bfloat16" else np.asarray(z).astype(dtype)


def is_float(dtype: str) -> bool:
    return dtype in FLOATS


def is_int(dtype: str) -> bool:
    return dtype in INTS


def int_range(dtype: str) -> tuple[int, int]:
    if dtype == "bool":
        return 0, 1
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def promote(a: str, b: str) -> str:
    """PyTorch's result dtype of a binary op between tensors of dtypes a and b."""
    if a == b:
        return a
    if is_float(a) or is_float(b):
        if is_float(a) and is_float(b):
            return "float32" if {a, b} == {"float16", "bfloat16"} else max(a, b, key=FLOATS.index)
        return a if is_float(a) else b
    if a == "bool" or b == "bool":
        return b if a == "bool" else a
    if "uint64" in (a, b) and not (a.startswith("u") and b.startswith("u")):
        raise NoPromotion(f"{a} with {b}")  # numpy would give float64; lazyten raises
    return np.promote_types(a, b).name


def scalar_dtype(tensor: str, scalar) -> str:
    """PyTorch's result dtype of `tensor op python_scalar`."""
    if isinstance(scalar, bool):
        return tensor
    if isinstance(scalar, int):
        return "int64" if tensor == "bool" else tensor
    return tensor if is_float(tensor) else "float32"


def dyadic_exponent(value: float) -> int | None:
    """q with value = k * 2**q for a small integer k (|k| < 2**12), or None."""
    if value == 0:
        return 0
    for q in range(0, -12, -1):
        k = value / 2.0 ** q
        if k == int(k) and abs(k) < 2 ** 12:
            return q
    return None


@dataclass(frozen=True)
class Var:
    """Static facts about one live tensor of a program."""
    name: str
    shape: tuple[int, ...]
    dtype: str
    lo: float  # every value lies in [lo, hi] (for inexact floats up to the error bound)
    hi: float
    exact: bool = True
    grid: int | None = None  # floats: every value is a multiple of 2**grid (None: unknown)
    buffer: bool = False  # a realized tensor with its own memory: assign writes in place
    leaves: frozenset = field(default_factory=frozenset)  # grad leaves it depends on

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape)) if self.shape else 1

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def bound(self) -> float:
        return max(abs(self.lo), abs(self.hi))

    def but(self, **kw) -> Var:
        return replace(self, **kw)


def representable(dtype: str, grid: int | None, bound: float) -> bool:
    """Whether multiples of 2**grid up to `bound` are all exact in `dtype` (ints: in range)."""
    if not is_float(dtype):
        lo, hi = int_range(dtype)
        return -bound >= lo and bound <= hi
    if grid is None or bound > LIMIT[dtype]:
        return False
    return bound * 2.0 ** -grid <= 2.0 ** MANTISSA[dtype] and grid >= -14


@dataclass
class Ref:
    """The reference value of one tensor and its elementwise error bound (None: exact)."""
    val: np.ndarray
    err: np.ndarray | None = None

    def f64(self) -> np.ndarray:
        return self.val.astype(np.float64)

    def e(self) -> np.ndarray:
        return np.zeros(self.val.shape) if self.err is None else self.err


class Interp:
    """The reference interpreter's arithmetic. In "check" mode every result is rounded to its
    dtype and carries an error bound; in "fd" mode floats stay float64 and unrounded (a
    smooth function for finite differences)."""

    def __init__(self, mode: str = "check", leaves: dict | None = None):
        self.mode, self.leaves, self.env = mode, dict(leaves or {}), {}

    @property
    def fd(self) -> bool:
        return self.mode == "fd"

    def rho(self, dtype: str, z) -> np.ndarray:
        """The rounding error of storing the float64 values z in dtype."""
        return UNIT[dtype] * np.abs(z) + TINY[dtype]

    def out(self, z, dtype: str, err=None, exact: bool = False) -> Ref:
        """Round the float64 (or integer) result z to dtype; err is the error before rounding."""
        z = np.asarray(z)
        if not is_float(dtype):
            return Ref(z.astype(dtype))
        if self.fd:
            return Ref(z.astype(np.float64))
        with np.errstate(over="ignore", invalid="ignore"):
            val = to_dtype(z, dtype)
        if exact:
            return Ref(val)
        base = np.zeros(z.shape) if err is None else np.broadcast_to(err, z.shape)
        return Ref(val, base + self.rho(dtype, z))

    def cast(self, ref: Ref, dtype: str) -> Ref:
        """A value converted to dtype as lazyten's promotion does (rounding, exact)."""
        if (ref.val.dtype == np_dtype(dtype) and dtype != "bfloat16") or \
                (self.fd and is_float(dtype) and ref.val.dtype == np.float64):
            return ref  # (a float32 array may hold a float32 or a bfloat16: round to the latter)
        if is_float(dtype) and not is_float(ref.val.dtype.name):  # one rounding, not two
            return Ref(ref.val.astype(np.float64) if self.fd else to_dtype(ref.val, dtype))
        if is_float(dtype):
            new = self.out(ref.f64(), dtype, exact=True)
            return Ref(new.val, None if ref.err is None else ref.err + self.rho(dtype, ref.f64()))
        if dtype == "bool":
            return Ref(ref.val != 0)
        return Ref(np.trunc(ref.val).astype(dtype) if is_float(ref.val.dtype.name) else
                   ref.val.astype(dtype))


@dataclass
class Step:
    """One line of a program. `src` is lazyten Python (an expression assigned to `out`, or a
    statement when out is None); `ref(interp)` computes the same thing with numpy."""
    kind: str  # the op class, for tuning and reports
    src: str
    ref: Callable[[Interp], Ref | None]
    out: Var | None = None
    rebinds: str | None = None  # assign: the name whose value this step replaces

    def line(self) -> str:
        return self.src if self.out is None or self.rebinds else f"{self.out.name} = {self.src}"


@dataclass
class Input:
    """A leaf array: its numpy source text (evaluated, so text and values agree)."""
    name: str
    src: str
    array: np.ndarray
    requires_grad: bool = False


@dataclass
class Program:
    steps: list[Step] = field(default_factory=list)
    inputs: dict[str, Input] = field(default_factory=dict)
    final: list[list[str]] = field(default_factory=list)  # realize groups, in order
    read_order: list[str] = field(default_factory=list)  # .numpy() order
    bad_index: set = field(default_factory=set)  # results of out-of-range indexing: IndexError
    grad: bool = False
    loss: list[str] = field(default_factory=list)  # gradient programs: the outputs the loss sums
    outputs: dict[str, Var] = field(default_factory=dict)  # every live name at the end

    @property
    def expect_error(self) -> bool:
        return bool(self.bad_index)

    def source(self, device: str = "CPU") -> str:
        from .run import render  # rendering lives beside execution
        return render(self, device)

    def __repr__(self) -> str:
        return "\n" + self.source()


