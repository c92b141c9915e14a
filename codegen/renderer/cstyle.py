"""LinearKernel -> C-style kernel source. OpenCL C, CUDA C and plain C are small dialects.

Two kinds of target. GPU dialects (`Target(gpu=True)`, OpenCL, CUDA) get SPECIAL
work-item indices and must spell them in `specials`. Loop dialects (`gpu=False`, CLANG)
get the global dims as LOOPs: the outer one runs over two int64 DEFINE_VAR arguments after
the buffers, [core_start, core_end), the others over their full size, so the runtime calls
the kernel with (buffers..., 0, n), or splits [0, n) into pieces run on several threads.

Each uop becomes one C statement (a named value), so a dialect only supplies spellings:
types, the kernel and buffer prefixes, work-item indices, the barrier, and op-table
entries (op -> function of operand strings and the operands' dtype -> C expression).

Conventions every dialect shares:
- IDIV and MOD truncate toward zero, as C does; float MAX propagates NaN like numpy.
- FDIV is C's `/`, which must be IEEE division: a runtime whose compiler relaxes it by
  default passes the option that makes it exact (OpenCL: -cl-fp32-correctly-rounded-divide-sqrt).
- bool is one byte in memory (`unsigned char`), `bool` in registers.
- half and bfloat16 are storage only: loaded to float, computed in float and rounded back
  after every op (float holds enough bits for this to equal native 16-bit arithmetic), so
  no device needs fp16 or bf16 arithmetic support. bfloat16 is rounded by the helpers in
  `_BF16` (integer instructions, ties to even); a dialect only spells the float <-> uint
  bit casts (`float_bits`, `bits_float`).
- Unsigned types are C's unsigned types: `/`, `%`, `>>` and `<` on them are unsigned.
- SPECIAL names its work-item index: gidx<d> global, lidx<d> local, grp<d> group, in dim d.
  Where a dim is launched wider than its SPECIAL's size, extra work-items return at once.
- Group reduce: in a kernel with a local index, each work-item's accumulator holds a partial
  result; the first read of it after its loop combines the partials through local memory
  with a barrier tree, and only work-item 0 stores.
"""
from __future__ import annotations
import math
from typing import Callable

from codegen.dtypes import DType, dtypes, round_float
from codegen.helpers import prod
from codegen.linearizer import LinearKernel
from codegen.target import gpu
from codegen.ops import BinaryOps, TernaryOps, UnaryOps
from codegen.renderer import Renderer
from codegen.uops import UOp, UOps


# bfloat16 <-> float, written once for every dialect: {F} and {U} are the dialect's
# float -> bits and bits -> float casts. A value goes to bfloat16 rounded to nearest, ties
# to even; NaN stays NaN (quiet, sign kept); past the largest bfloat16 it is inf.
# round_bf_d rounds a double to float toward zero, setting the last bit where inexact
# (round to odd), so the one rounding to bfloat16 after it is the only one that counts.
_BF16 = [
    "float bf2f(unsigned short b) {{ return {U}(((unsigned int)b) << 16); }}",
    "unsigned short f2bf(float f) {{ unsigned int u = {F}(f); if (f != f) return "
    "(unsigned short)((u >> 16) | 0x40u); return (unsigned short)((u + 0x7FFFu + "
    "((u >> 16) & 1u)) >> 16); }}",
    "float round_bf(float f) {{ return bf2f(f2bf(f)); }}",
]
_BF16_DOUBLE = [
    "float round_bf_d(double d) {{ float f = (float)d; double back = (double)f; "
    "unsigned int u = {F}(f); if (back != d) {{ if (fabs(back) > fabs(d)) u -= 1u; "
    "u |= 1u; }} return round_bf({U}(u)); }}",
]
# C promotes these to int before multiplying: 65535 * 65535 would overflow int (undefined)
_NARROW_UNSIGNED = (dtypes.uint8, dtypes.uint16)
_UNSIGNED = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}
_EXACT_OPS = {BinaryOps.MAX, UnaryOps.NEG, TernaryOps.WHERE, BinaryOps.MOD}  # no rounding


def _max(a: str, b: str, dtype: DType) -> str:
    if dtype == dtypes.bool:
        return f"({a}|{b})"
    if dtype.is_float:  # a NaN on either side wins, as numpy.maximum
        return f"(({a}!={a} || {a}>{b}) ? {a} : {b})"
    return f"({a}>{b} ? {a} : {b})"


class HalfFunctions:
    """half through functions the dialect's prelude defines: h2f (16 bits -> float) and
    f2h / d2h (float / double -> 16 bits, to nearest even). For CUDA and CLANG."""

    def load_half(self, buf: str, idx: str) -> str:
        return f"h2f({buf}[{idx}])"

    def store_half(self, buf: str, idx: str, value: str) -> str:
        return f"{buf}[{idx}] = f2h({value})"

    def half_bits(self, x: str) -> str:  # exact: x holds a half value
        return f"f2h({x})"

    def bits_half(self, bits: str) -> str:
        return f"h2f({bits})"

    def round_half(self, x: str, src: DType) -> str:
        return f"h2f({'d2h' if src == dtypes.float64 else 'f2h'}({x}))"


class CStyleRenderer(Renderer):
    """Renders kernels as C; dialects override the class attributes below."""
    target = gpu("GPU", local_size=256)
    kernel_prefix = ""                   # before `void name(...)`
    buffer_prefix = ""                   # address space of buffer arguments
    smem_prefix = ""                     # address space of the group-reduce scratch array
    barrier = ""                         # wait for the work-group, local memory visible
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
    specials: dict[str, Callable[[int], str]] = {}   # "gidx"/"lidx"/"grp" -> index expression
    code_for_op: dict = {
        UnaryOps.EXP2: lambda x, dt: f"exp2({x})",
        UnaryOps.EXP: lambda x, dt: f"exp({x})",
        UnaryOps.LOG2: lambda x, dt: f"log2({x})",
        UnaryOps.SIN: lambda x, dt: f"sin({x})",
        UnaryOps.COS: lambda x, dt: f"cos({x})",
        UnaryOps.SQRT: lambda x, dt: f"sqrt({x})",
        UnaryOps.RECIP: lambda x, dt: f"(1.0f/{x})",
        UnaryOps.NEG: lambda x, dt: f"(!{x})" if dt == dtypes.bool else f"(-{x})",
        BinaryOps.ADD: lambda a, b, dt: f"({a}+{b})",
        BinaryOps.MUL: lambda a, b, dt: f"((unsigned int){a}*{b})" if dt in _NARROW_UNSIGNED
        else f"({a}*{b})",
        BinaryOps.FDIV: lambda a, b, dt: f"({a}/{b})",
        BinaryOps.IDIV: lambda a, b, dt: f"({a}/{b})",
        BinaryOps.MOD: lambda a, b, dt: f"fmod({a}, {b})" if dt.is_float else f"({a}%{b})",
        BinaryOps.MAX: _max,
        BinaryOps.CMPLT: lambda a, b, dt: f"({a}<{b})",
        BinaryOps.CMPNE: lambda a, b, dt: f"({a}!={b})",
        BinaryOps.AND: lambda a, b, dt: f"({a}&{b})",
        BinaryOps.OR: lambda a, b, dt: f"({a}|{b})",
        BinaryOps.XOR: lambda a, b, dt: f"({a}^{b})",
        BinaryOps.SHR: lambda a, b, dt: f"({a}>>{b})",  # signed: arithmetic on every target
        TernaryOps.WHERE: lambda c, a, b, dt: f"({c} ? {a} : {b})",
        TernaryOps.MULACC: lambda a, b, c, dt: f"(({a}*{b})+{c})",
    }

    # ---- dialect hooks ----
    def prelude(self, kernel: LinearKernel) -> list[str]:
        """Lines before the kernel: pragmas, includes, helper functions."""
        return []

    def bf16_helpers(self, kernel: LinearKernel) -> list[str]:
        """The bfloat16 helpers the kernel needs, in this dialect's spelling."""
        if not uses(kernel, dtypes.bfloat16):
            return []
        lines = _BF16 + (_BF16_DOUBLE if needs_double_bf16(kernel) else [])
        return [line.format(F=self.float_bits, U=self.bits_float) for line in lines]

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

    # ---- shared rendering ----
    def shift_left(self, a: str, b: str, dtype: DType) -> str:
        """a << b wrapping in dtype: C leaves a negative << undefined and widens narrow
        types to int (where 255 << 24 overflows), so shift as an unsigned int, cast back."""
        wide = "unsigned " + (self.types[dtypes.int64] if dtype.itemsize == 8 else "int")
        return f"(({self.types[dtype]})(({wide}){a}<<{b}))"

    def mem_type(self, dtype: DType) -> str:
        return self.mem_types.get(dtype, self.types[dtype])

    def const(self, value, dtype: DType) -> str:
        """An exact literal: floats with enough digits to round-trip, ints with a suffix."""
        if dtype == dtypes.bool:
            return "1" if value else "0"
        if dtype.is_int:
            value, suffix = dtypes.wrap(value, dtype), self.suffixes.get(dtype, "")
            if value == dtypes.min(dtype) and value < 0 and dtype.itemsize >= 4:
                return f"({self.types[dtype]})({value + 1}{suffix}-1)"  # -2^31 is no literal
            return f"({value}{suffix})" if value < 0 else f"{value}{suffix}"
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
        if src == dtypes.bfloat16:  # a float in registers
            src = dtypes.float32
        if dst == dtypes.bool:
            return f"({x}!=0)"
        if dst == dtypes.bfloat16:
            if src == dtypes.float64 or (src.is_int and src.itemsize >= 4):
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

    def render(self, kernel: LinearKernel) -> str:
        r: dict[UOp, str] = {}
        args: list[str] = []
        prologue: list[str] = []
        body: list[str] = []
        depth = [1]
        counter = [0]
        acc_depth: dict[UOp, int] = {}
        acc_op: dict[UOp, object] = {}
        lidx: list[str] = []

        def emit(line: str) -> None:
            body.append("  " * depth[0] + line)

        def value(u: UOp, expr: str) -> None:
            counter[0] += 1
            r[u] = f"v{counter[0]}"
            emit(f"{self.types[u.dtype]} {r[u]} = {expr};")

        for u in kernel.uops:
            if u.uop is UOps.DEFINE_GLOBAL:
                r[u] = u.arg[0]
                args.append(f"{self.buffer_prefix}{self.mem_type(u.arg[1])}* {r[u]}")
            elif u.uop is UOps.DEFINE_VAR:
                r[u] = u.arg
                args.append(f"{self.types[u.dtype]} {r[u]}")
            elif u.uop is UOps.SPECIAL:
                name, size = u.arg
                kind, dim = name.rstrip("0123456789"), int(name[len(name.rstrip("0123456789")):])
                if kind not in self.specials:
                    raise NotImplementedError(
                        f"{type(self).__name__} has no spelling for work-item index {kind}; "
                        "a target without work-items uses Target(gpu=False) (loops)")
                r[u] = name
                emit(f"{self.types[u.dtype]} {name} = ({self.types[u.dtype]})"
                     f"{self.specials[kind](dim)};")
                if kind == "lidx":
                    lidx.append(name)
                launched = kernel.global_size[dim] * kernel.local_size[dim]
                if kind == "gidx" and launched > size:
                    emit(f"if ({name} >= {size}) return;")
            elif u.uop is UOps.CONST:
                r[u] = self.const(u.arg, u.dtype)
            elif u.uop is UOps.LOOP:
                counter[0] += 1
                r[u] = f"{u.arg}_{counter[0]}"
                emit(f"for ({self.types[u.dtype]} {r[u]} = {r[u.vin[0]]}; {r[u]} < "
                     f"{r[u.vin[1]]}; {r[u]}++) {{")
                depth[0] += 1
            elif u.uop is UOps.END:
                depth[0] -= 1
                emit("}")
            elif u.uop is UOps.DEFINE_ACC:
                counter[0] += 1
                r[u], acc_depth[u] = f"acc{counter[0]}", depth[0]
                emit(f"{self.types[u.dtype]} {r[u]} = {self.const(u.arg, u.dtype)};")
            elif u.uop is UOps.ACC_READ:
                acc = u.vin[0]
                if lidx and acc in acc_op and depth[0] == acc_depth[acc]:
                    self._group_combine(acc, acc_op.pop(acc), lidx[0], kernel, r, prologue, emit)
                value(u, r[acc])
            elif u.uop is UOps.ACC_UPDATE:
                acc, val = u.vin
                acc_op[acc] = val.arg
                emit(f"{r[acc]} = {r[val]};")
            elif u.uop is UOps.LOAD:
                buf, idx = r[u.vin[0]], r[u.vin[1]]
                expr = (self.load_half(buf, idx) if u.dtype == dtypes.float16 else
                        f"bf2f({buf}[{idx}])" if u.dtype == dtypes.bfloat16 else
                        f"({buf}[{idx}]!=0)" if u.dtype == dtypes.bool else f"{buf}[{idx}]")
                if len(u.vin) == 3:  # gated: never touch memory where not valid
                    expr = f"({r[u.vin[2]]} ? {expr} : {self.const(0, u.dtype)})"
                value(u, expr)
            elif u.uop is UOps.STORE:
                buf, idx, val = r[u.vin[0]], r[u.vin[1]], u.vin[2]
                if val.dtype == dtypes.float16:
                    line = self.store_half(buf, idx, r[val]) + ";"
                elif val.dtype == dtypes.bfloat16:
                    line = f"{buf}[{idx}] = f2bf({r[val]});"
                else:
                    line = f"{buf}[{idx}] = ({self.mem_type(val.dtype)})({r[val]});"
                emit(f"if ({lidx[0]} == 0) {line}" if lidx else line)
            elif u.uop is UOps.ALU:
                src = u.vin[-1].dtype if u.arg is TernaryOps.WHERE else u.vin[0].dtype
                if u.arg is BinaryOps.SHL:
                    expr = self.shift_left(r[u.vin[0]], r[u.vin[1]], src)
                else:
                    expr = self.code_for_op[u.arg](*[r[v] for v in u.vin], src.opmath)
                if u.dtype == dtypes.float16:
                    expr = self.round_half(expr, dtypes.float32)
                elif u.dtype == dtypes.bfloat16 and u.arg not in _EXACT_OPS:
                    expr = f"round_bf({expr})"
                value(u, expr)
            elif u.uop is UOps.CAST:
                value(u, self.cast(r[u.vin[0]], u.vin[0].dtype, u.dtype))
            elif u.uop is UOps.BITCAST:
                value(u, self.from_bits(self.to_bits(r[u.vin[0]], u.vin[0].dtype), u.dtype))
            else:
                raise NotImplementedError(f"C renderer has no rule for {u.uop}")
        head = f"{self.kernel_prefix}void {kernel.name}({', '.join(args)}) {{"
        return "\n".join([*self.prelude(kernel), head, *prologue, *body, "}"]) + "\n"

    def _group_combine(self, acc: UOp, op, lidx: str, kernel: LinearKernel, r: dict,
                       prologue: list[str], emit) -> None:
        """Combine the work-group's partial accumulators in local memory (a barrier tree)."""
        size, scratch = prod(kernel.local_size), f"red_{r[acc]}"
        prologue.append(f"  {self.smem_prefix}{self.mem_type(acc.dtype)} {scratch}[{size}];")
        emit(f"{scratch}[{lidx}] = {r[acc]};")
        emit(self.barrier)
        emit(f"for (int s = {size // 2}; s > 0; s >>= 1) {{")
        mine, other = f"{scratch}[{lidx}]", f"{scratch}[{lidx}+s]"
        emit(f"  if ({lidx} < s) {mine} = {self.code_for_op[op](mine, other, acc.dtype)};")
        emit(f"  {self.barrier}")
        emit("}")
        emit(f"{r[acc]} = {scratch}[0];")


def uses(kernel: LinearKernel, dtype: DType) -> bool:
    """Whether any value or buffer of the kernel has this dtype (to pick helpers, pragmas)."""
    return dtype in kernel.buf_dtypes or any(u.dtype == dtype for u in kernel.uops)


def needs_double_bf16(kernel: LinearKernel) -> bool:
    """Whether a cast to bfloat16 goes through double (from float64 or a 32/64-bit int)."""
    return any(u.uop is UOps.CAST and u.dtype == dtypes.bfloat16 and
               (u.vin[0].dtype == dtypes.float64 or
                (u.vin[0].dtype.is_int and u.vin[0].dtype.itemsize >= 4)) for u in kernel.uops)
