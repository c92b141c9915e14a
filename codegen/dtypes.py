"""Data types and PyTorch-style type promotion.

A DType names a scalar type; every backend maps it to its own spelling. Promotion follows
PyTorch: bool < integers < floating point; mixing an integer with a float gives the float
type; two floats give the wider (float16 with bfloat16 gives float32); two integers give
the narrowest type that holds both (uint8 + int8 -> int16, uint16 + int32 -> int32).
PyTorch refuses to promote uint16/32/64 with any other integer type; here they follow
numpy (uint32 + int8 -> int64, bool + uint16 -> uint16), except that uint64 with a signed
type raises TypeError (numpy's float64 would silently lose bits).

bfloat16 and float16 are storage types: kernels compute them in float32 and round the
result back after every op (`DType.opmath`).
"""
from __future__ import annotations
import builtins
import math
import struct
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, order=True)
class DType:
    """A scalar type: `priority` orders types for promotion, `itemsize` is bytes."""
    priority: int
    itemsize: int
    name: str
    fmt: str  # numpy / struct type character
    count: int = 1  # lanes: more than 1 is a vector of the scalar type (CPU codegen only)
    # the kind, read on every op: plain attributes set once (a property is a Python call)
    is_float: bool = field(init=False, repr=False, compare=False)
    is_int: bool = field(init=False, repr=False, compare=False)
    is_unsigned: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        floating = self.name in ("float16", "bfloat16", "float32", "float64")
        object.__setattr__(self, "is_float", floating)
        object.__setattr__(self, "is_int", not floating and self.name != "bool")
        object.__setattr__(self, "is_unsigned", self.name in ("uint8", "uint16", "uint32", "uint64"))

    def __eq__(self, other: object) -> bool:  # dtypes are compared on every op: identity first
        if self is other:
            return True
        if type(other) is not DType:
            return NotImplemented
        # field by field, the name first: two different dtypes differ there (no tuples made)
        return self.name == other.name and self.count == other.count and \
            self.priority == other.priority and self.itemsize == other.itemsize and \
            self.fmt == other.fmt

    def __hash__(self) -> int:  # part of every AST and program-cache key: computed once
        h: int | None = self.__dict__.get("_hash")
        if h is None:
            h = self.__dict__["_hash"] = hash((self.priority, self.itemsize, self.count))
        return h

    def __getstate__(self) -> dict[str, Any]:  # a pickled DType (saved program) rehashes on load
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    def __repr__(self) -> str:
        return f"dtypes.{self.name}" + (f".vec({self.count})" if self.count > 1 else "")

    def vec(self, count: int) -> DType:
        """The vector of `count` lanes of this scalar type."""
        return DType(self.priority, self.itemsize, self.name, self.fmt, count)

    @property
    def scalar(self) -> DType:
        return DType(self.priority, self.itemsize, self.name, self.fmt)

    @property
    def opmath(self) -> DType:
        """The dtype kernels and reductions compute this one in (PyTorch's opmath type):
        float32 for the 16-bit floats, which are rounded back after every op."""
        return dtypes.float32 if self.name in ("float16", "bfloat16") else self


class dtypes:
    """Namespace of every supported dtype (its names shadow `int`, `float` and `bool` in its
    body, so its annotations spell the built-in types `builtins.int`, `builtins.float`)."""
    bool = DType(0, 1, "bool", "?")
    int8 = DType(1, 1, "int8", "b")
    uint8 = DType(2, 1, "uint8", "B")
    int16 = DType(3, 2, "int16", "h")
    uint16 = DType(4, 2, "uint16", "H")
    int32 = DType(5, 4, "int32", "i")
    uint32 = DType(6, 4, "uint32", "I")
    int64 = DType(7, 8, "int64", "q")
    uint64 = DType(8, 8, "uint64", "Q")
    float16 = DType(9, 2, "float16", "e")
    # numpy has no bfloat16: fmt is the 16-bit pattern's storage type (see lazyten.creation)
    bfloat16 = DType(10, 2, "bfloat16", "H")
    float32 = DType(11, 4, "float32", "f")
    float64 = DType(12, 8, "float64", "d")
    half, float, double, bf16 = float16, float32, float64, bfloat16
    int, long, short, char, uchar = int32, int64, int16, int8, uint8
    default_float = float32
    default_int = int64  # PyTorch's default for Python ints

    @staticmethod
    def all() -> list[DType]:
        return [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16,
                dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64, dtypes.float16,
                dtypes.bfloat16, dtypes.float32, dtypes.float64]

    @staticmethod
    def from_name(name: str) -> DType:
        """Look a dtype up by its name or alias ("float32", "float", "half", "long"...)."""
        value = getattr(dtypes, str(name), None)
        if not isinstance(value, DType):
            known = ", ".join(d.name for d in dtypes.all())
            raise TypeError(f"unknown dtype {name!r}; known dtypes: {known}")
        return value

    @staticmethod
    def min(dtype: DType) -> builtins.float:
        """Smallest value of a dtype (-inf for floats)."""
        if dtype.is_float:
            return float("-inf")
        if dtype == dtypes.bool:
            return False
        bits = dtype.itemsize * 8
        return 0 if dtype.is_unsigned else -(1 << (bits - 1))

    @staticmethod
    def max(dtype: DType) -> builtins.float:
        """Largest value of a dtype (inf for floats)."""
        if dtype.is_float:
            return float("inf")
        if dtype == dtypes.bool:
            return True
        bits = dtype.itemsize * 8
        return (1 << bits) - 1 if dtype.is_unsigned else (1 << (bits - 1)) - 1

    @staticmethod
    def wrap(value: builtins.int, dtype: DType) -> builtins.int:
        """An integer reduced into the dtype's range modulo 2**bits, as C converts it."""
        bits = dtype.itemsize * 8
        value = builtins.int(value) & ((1 << bits) - 1)
        return value - (1 << bits) if not dtype.is_unsigned and value >> (bits - 1) else value


_SIGNED = {1: dtypes.int8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}


def promote(a: DType, b: DType) -> DType:
    """The dtype PyTorch gives a binary op between tensors of dtypes a and b."""
    if a == b:
        return a
    if a.is_float or b.is_float:
        if a.is_float and b.is_float:
            if {a.name, b.name} == {"float16", "bfloat16"}:
                return dtypes.float32  # neither holds the other's values
            return max(a, b)
        return a if a.is_float else b
    if a == dtypes.bool or b == dtypes.bool:
        return b if a == dtypes.bool else a
    if a.is_unsigned == b.is_unsigned:
        return max(a, b)
    unsigned, signed = (a, b) if a.is_unsigned else (b, a)
    if signed.itemsize > unsigned.itemsize:
        return signed
    if unsigned.itemsize == 8:
        raise TypeError(f"no integer dtype holds both {a.name} and {b.name} (PyTorch refuses "
                        f"this promotion too): cast one of them first")
    return _SIGNED[2 * unsigned.itemsize]  # uint8 + int8 -> int16, as PyTorch and numpy


def round_bf16(value: float) -> float:
    """A Python float rounded to the nearest bfloat16 (even on ties; NaN stays NaN)."""
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        return value
    # a float64 has 52 fraction bits, bfloat16 7: round away the low 45, but only for
    # normal bfloat16 magnitudes; below 2**-126 round on the fixed bfloat16 subnormal grid
    if abs(value) < 2.0 ** -126:  # round() ties to even; the product is exact
        return math.copysign(round(value * 2.0 ** 133) * 2.0 ** -133, value)
    bits = struct.unpack("<Q", struct.pack("<d", value))[0]
    low = bits & ((1 << 45) - 1)
    bits -= low
    if low > 1 << 44 or (low == 1 << 44 and bits >> 45 & 1):
        bits += 1 << 45
    out = struct.unpack("<d", struct.pack("<Q", bits))[0]
    return out if abs(out) < 2.0 ** 128 else math.copysign(math.inf, value)


def round_float(value: float, dtype: DType) -> float:
    """A Python float rounded to a float dtype (to nearest, even on ties); a value that
    rounds past the dtype's largest finite number is an infinity, as in C."""
    value = float(value)
    if dtype == dtypes.bfloat16:
        return round_bf16(value)
    if dtype not in (dtypes.float16, dtypes.float32):
        return value
    fmt = "<e" if dtype == dtypes.float16 else "<f"
    try:  # struct rounds as C's cast does, and refuses only what rounds to infinity
        rounded: float = struct.unpack(fmt, struct.pack(fmt, value))[0]
        return rounded
    except OverflowError:
        return math.copysign(math.inf, value)


def scalar_result(t: DType, scalar: object) -> DType:
    """The dtype of `tensor op python_scalar`: the tensor's, unless the scalar's kind is higher."""
    if isinstance(scalar, bool):
        return t
    if isinstance(scalar, int):
        return dtypes.int64 if t == dtypes.bool else t
    if isinstance(scalar, float):
        return t if t.is_float else dtypes.default_float
    raise TypeError(f"cannot combine a tensor of {t} with {type(scalar).__name__} {scalar!r}")


def as_dtype(value: object) -> DType:
    """Accept a DType, a dtype name, or a numpy dtype; raise TypeError otherwise."""
    if isinstance(value, DType):
        return value
    name = getattr(value, "name", None) if not isinstance(value, str) else value
    if name is None and isinstance(value, type):  # Python's types, or numpy's (np.float64)
        numpy_type = value.__module__ == "numpy"
        name = {bool: "bool", int: "int64", float: "float32"}.get(
            value, value.__name__.rstrip("_") if numpy_type else None)
    if name is None:
        raise TypeError(f"unknown dtype {value!r}")
    return dtypes.from_name(name)
