"""How the C dialects spell values (codegen/renderer/cstyle.py renders the kernels): type
names, exact literals, conversions that wrap like numpy, bit casts, and half and bfloat16
kept in memory as their bits. A dialect overrides the class attributes and the half hooks.
"""
from __future__ import annotations
import math

from codegen.dtypes import DType, dtypes, round_float
from codegen.renderer.c_helpers import bf16_through_double

_UNSIGNED = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}


class CValues:
    """The value spellings every C dialect shares."""
    float_bits = ""                      # float -> unsigned int, the same bits
    bits_float = ""                      # unsigned int -> float, the same bits
    double_bits = ""                     # double -> 64-bit integer, the same bits
    bits_double = ""                     # 64-bit integer -> double, the same bits
    suffixes: dict[DType, str] = {dtypes.uint32: "u", dtypes.int64: "LL", dtypes.uint64: "ULL"}
    types: dict[DType, str] = {
        dtypes.bool: "bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char",
        dtypes.int16: "short", dtypes.uint16: "unsigned short", dtypes.int32: "int",
        dtypes.uint32: "unsigned int", dtypes.int64: "long long",
        dtypes.uint64: "unsigned long long", dtypes.float16: "float", dtypes.bfloat16: "float",
        dtypes.float32: "float", dtypes.float64: "double"}
    mem_types: dict[DType, str] = {dtypes.bool: "unsigned char", dtypes.float16: "unsigned short",
                                   dtypes.bfloat16: "unsigned short"}
    vector_types = {dtypes.float32: "float", dtypes.int32: "int", dtypes.uint32: "uint"}  # + lanes

    def load_half(self, buf: str, idx: str) -> str:
        raise NotImplementedError

    def store_half(self, buf: str, idx: str, value: str) -> str:
        raise NotImplementedError

    def round_half(self, x: str, src: DType) -> str:
        """A float (or double) value rounded to the nearest half, as a float."""
        raise NotImplementedError

    def to_bits(self, x: str, dtype: DType) -> str:
        """The bits of a value as the unsigned integer type of its size."""
        unsigned = self.types[_UNSIGNED[dtype.itemsize]]
        if dtype == dtypes.bfloat16:
            return f"(({unsigned})({self.float_bits}({x}) >> 16))"
        if dtype == dtypes.float16:
            return self.half_bits(x)
        if dtype == dtypes.float32:
            return f"{self.float_bits}({x})"
        if dtype == dtypes.float64:
            return f"(({unsigned}){self.double_bits}({x}))"
        return f"(({unsigned})({x}))"

    def from_bits(self, bits: str, dtype: DType) -> str:
        """An unsigned integer's bits read as `dtype` (of the same size)."""
        if dtype == dtypes.bfloat16:
            return f"bf2f({bits})"
        if dtype == dtypes.float16:
            return self.bits_half(bits)
        if dtype == dtypes.float32:
            return f"{self.bits_float}({bits})"
        if dtype == dtypes.float64:
            return f"{self.bits_double}({bits})"
        return f"(({self.types[dtype]})({bits}))"

    def half_bits(self, x: str) -> str:
        raise NotImplementedError

    def bits_half(self, bits: str) -> str:
        raise NotImplementedError

    def inf(self, dtype: DType) -> str:
        return "INFINITY" if dtype != dtypes.float64 else "((double)INFINITY)"

    def nan(self, dtype: DType) -> str:
        return "NAN" if dtype != dtypes.float64 else "((double)NAN)"

    def shift_left(self, a: str, b: str, dtype: DType) -> str:
        """a << b wrapping in dtype: C leaves a negative << undefined and widens narrow
        types to int (where 255 << 24 overflows), so shift as an unsigned int, cast back."""
        wide = "unsigned " + (self.types[dtypes.int64] if dtype.itemsize == 8 else "int")
        return f"(({self.types[dtype]})(({wide}){a}<<{b}))"

    def mem_type(self, dtype: DType) -> str:
        """How a dtype is stored in buffers (bool as a byte, half and bfloat16 as bits)."""
        return self.mem_types.get(dtype, self.types[dtype])

    def const(self, value: float, dtype: DType) -> str:
        """An exact literal: floats with enough digits to round-trip, ints with a suffix."""
        if dtype == dtypes.bool:
            return "1" if value else "0"
        if dtype.is_int:
            return self._int_const(int(value), dtype)
        return self._float_const(value, dtype)

    def _int_const(self, value: int, dtype: DType) -> str:
        value, suffix = dtypes.wrap(value, dtype), self.suffixes.get(dtype, "")
        if value == dtypes.min(dtype) and value < 0 and dtype.itemsize >= 4:
            return f"({self.types[dtype]})({value + 1}{suffix}-1)"  # -2^31 is no literal
        return f"({value}{suffix})" if value < 0 else f"{value}{suffix}"

    def _float_const(self, value: float, dtype: DType) -> str:
        value = round_float(value, dtype)  # too big for the dtype is inf, as in C
        if math.isnan(value):
            return self.nan(dtype)
        if math.isinf(value):
            return self.inf(dtype) if value > 0 else f"(-{self.inf(dtype)})"
        if dtype == dtypes.float64:
            text = repr(value)
        else:  # rounded to the dtype above; half and bfloat16 values are exact in float
            text = f"{value:.9g}"
        if "." not in text and "e" not in text:
            text += ".0"
        text += "" if dtype == dtypes.float64 else "f"
        return f"({text})" if value < 0 or text.startswith("-") else text

    def cast(self, x: str, src: DType, dst: DType) -> str:
        """The C expression for x converted from src to dst (out-of-range floats wrap)."""
        if src == dtypes.bfloat16:  # a float in registers
            src = dtypes.float32
        if dst == dtypes.bool:
            return f"({x}!=0)"
        if dst == dtypes.bfloat16:
            if bf16_through_double(src):
                return f"round_bf_d((double)({x}))"
            return f"round_bf((float)({x}))"
        if src.is_float and dst == dtypes.uint64:  # [2**63, 2**64) unsigned, negatives wrap
            return (f"({x} >= {self.const(2.0 ** 63, src)} ? ({self.types[dst]})({x}) : "
                    f"({self.types[dst]})({self.types[dtypes.int64]})({x}))")
        if dst == dtypes.float16:
            if src == dtypes.float64:
                return self.round_half(x, src)
            return x if src == dtypes.float16 else self.round_half(f"(float)({x})", dtypes.float32)
        if src.is_float and dst.is_int and dst.itemsize < 8:  # wrap like numpy, via 64 bits
            return f"({self.types[dst]})({self.types[dtypes.int64]})({x})"
        return f"({self.types[dst]})({x})"

    def type_of(self, dtype: DType) -> str:
        """The C type of a value: a scalar's, or a native vector's (float4)."""
        if dtype.count == 1:
            return self.types[dtype]
        return f"{self.vector_types[dtype.scalar]}{dtype.count}"
