"""LinearKernel -> LLVM IR text for the CPU.

Signature: `void name(ptr noalias data0, ..., i64 core_start, i64 core_end)`; the outer
loop runs [core_start, core_end) so a runtime can split it across threads (`piece_loop`
renders the loop a thread runs to take its share). Loops are SSA phi loops; accumulators
are allocas that LLVM's SROA turns into registers.

bfloat16 lives in memory as i16 and in registers as float: a load widens the bits, and
every op computes in float and rounds to the nearest bfloat16 (even on ties) with integer
instructions (`_round_bf16`), which vectorise and need no libcall or CPU feature.
"""
from __future__ import annotations
import hashlib
import struct

from codegen.dtypes import DType, dtypes, round_float
from codegen.linearizer import KernelOptions, LinearKernel
from codegen.ops import BinaryOps, TernaryOps, UnaryOps
from codegen.renderer import ProgramSpec, Renderer, llvm_math
from codegen.uops import UOp, UOps

LLVM_TYPES = {dtypes.bool: "i1", dtypes.int8: "i8", dtypes.uint8: "i8", dtypes.int16: "i16",
              dtypes.uint16: "i16", dtypes.int32: "i32", dtypes.uint32: "i32",
              dtypes.int64: "i64", dtypes.uint64: "i64", dtypes.float16: "half",
              dtypes.bfloat16: "float", dtypes.float32: "float", dtypes.float64: "double"}
_MEM_TYPES = {dtypes.bool: "i8", dtypes.bfloat16: "i16"}  # where memory differs from registers
_UNROLL_MAX = 4  # longest loop LLVM may unroll (a 2 x 2 pool window); see render()
_FSUFFIX = {dtypes.float16: "f16", dtypes.float32: "f32", dtypes.float64: "f64"}


def ltype(dtype: DType) -> str:
    """The LLVM type of a value: a scalar, or a vector `<N x T>`."""
    scalar = LLVM_TYPES[dtype.scalar]
    return scalar if dtype.count == 1 else f"<{dtype.count} x {scalar}>"


def mem_type(dtype: DType) -> str:
    """How a dtype is stored in memory (bool is a byte, bfloat16 its 16 bits)."""
    scalar = _MEM_TYPES.get(dtype.scalar)
    if scalar is None:
        return ltype(dtype)
    return scalar if dtype.count == 1 else f"<{dtype.count} x {scalar}>"


def _like(dtype: DType, scalar: DType) -> DType:
    """`scalar`, with as many lanes as `dtype`."""
    return scalar.vec(dtype.count) if dtype.count > 1 else scalar


def llvm_const(value, dtype: DType) -> str:
    """An exact LLVM literal: floats as hex so no digit is lost; vectors are splats."""
    if dtype.count > 1:
        return f"splat ({LLVM_TYPES[dtype.scalar]} {llvm_const(value, dtype.scalar)})"
    if dtype == dtypes.bool:
        return "true" if value else "false"
    if dtype.is_int:
        return str(dtypes.wrap(value, dtype))
    value = round_float(value, dtype)  # too big for the dtype is inf
    if dtype == dtypes.float16:
        return "0xH%04X" % struct.unpack("<H", struct.pack("<e", value))[0]
    # LLVM writes float literals as the double they widen to
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", value))[0]


def _suffix(dtype: DType) -> str:
    """The type part of an overloaded intrinsic's name: f32, v16f32, i64..."""
    suffix = _FSUFFIX.get(dtype.scalar) or LLVM_TYPES[dtype.scalar]
    return f"v{dtype.count}{suffix}" if dtype.count > 1 else suffix


def _intrinsic(name: str, dtype: DType, nargs: int, used: set) -> str:
    ty, fn = ltype(dtype), f"@llvm.{name}.{_suffix(dtype)}"
    used.add(f"declare {ty} {fn}({', '.join([ty] * nargs)})")
    return f"call {ty} {fn}"


def _alu(op, dtype: DType, src_dtype: DType, args: list[str], used: set,
         flags: str = "contract") -> str:
    """The right-hand side of one instruction for `op` on operands of `src_dtype`.

    Float add and mul carry fast-math `flags`: `contract` (a*b+c may become one fma,
    rounding once) everywhere, and `reassoc` on a reduce's accumulation so LLVM may split
    it into vector lanes and several partial sums."""
    t, f = ltype(src_dtype), src_dtype.is_float
    boolean = src_dtype.scalar == dtypes.bool
    u = src_dtype.is_unsigned or boolean
    a = args[0]
    b = args[1] if len(args) > 1 else None
    if op is BinaryOps.ADD:
        if boolean:
            return f"or {t} {a}, {b}"
        return f"{'fadd ' + flags if f else 'add'} {t} {a}, {b}"
    if op is BinaryOps.MUL:
        return f"{'fmul ' + flags if f else ('and' if boolean else 'mul')} {t} {a}, {b}"
    if op is BinaryOps.FDIV:  # no fast-math flags: `arcp` would allow a * (1/b)
        return f"fdiv {t} {a}, {b}"
    if op is BinaryOps.IDIV:
        return f"{'fdiv' if f else ('udiv' if u else 'sdiv')} {t} {a}, {b}"
    if op is BinaryOps.MOD:
        return f"{'frem' if f else ('urem' if u else 'srem')} {t} {a}, {b}"
    if op is BinaryOps.MAX:
        if boolean:
            return f"or {t} {a}, {b}"
        name = "maximum" if f else ("umax" if u else "smax")
        return f"{_intrinsic(name, src_dtype, 2, used)}({t} {a}, {t} {b})"
    if op is BinaryOps.CMPLT:
        return f"fcmp olt {t} {a}, {b}" if f else f"icmp {'ult' if u else 'slt'} {t} {a}, {b}"
    if op is BinaryOps.CMPNE:
        return f"fcmp une {t} {a}, {b}" if f else f"icmp ne {t} {a}, {b}"
    if op in (BinaryOps.AND, BinaryOps.OR, BinaryOps.XOR):
        return f"{op.name.lower()} {t} {a}, {b}"
    if op is BinaryOps.SHL:
        return f"shl {t} {a}, {b}"
    if op is BinaryOps.SHR:
        return f"{'lshr' if u else 'ashr'} {t} {a}, {b}"
    if op is TernaryOps.WHERE:
        cond = ltype(dtypes.bool.vec(dtype.count) if dtype.count > 1 else dtypes.bool)
        return f"select {cond} {a}, {ltype(dtype)} {b}, {ltype(dtype)} {args[2]}"
    if op is TernaryOps.MULACC:
        return f"{_intrinsic('fmuladd', src_dtype, 3, used)}({t} {a}, {t} {b}, {t} {args[2]})"
    if op is UnaryOps.NEG:
        return f"fneg {t} {a}" if f else (f"xor {t} {a}, {llvm_const(True, src_dtype)}"
                                         if boolean else f"sub {t} {llvm_const(0, src_dtype)}, {a}")
    if op is UnaryOps.RECIP:
        return f"fdiv {t} {llvm_const(1.0, src_dtype)}, {a}"
    if op in _IR_MATH and src_dtype.scalar == dtypes.float32:
        name, defs = _IR_MATH[op](src_dtype.count)
        used.update(defs)
        return f"call {t} {name}({t} {a})"
    names = {UnaryOps.SQRT: "sqrt", UnaryOps.EXP2: "exp2", UnaryOps.EXP: "exp",
             UnaryOps.LOG2: "log2", UnaryOps.SIN: "sin", UnaryOps.COS: "cos"}
    return f"{_intrinsic(names[op], src_dtype, 1, used)}({t} {a})"


# ops whose result needs no rounding: it is one of the operands or its negation
_EXACT_OPS = {BinaryOps.MAX, UnaryOps.NEG, TernaryOps.WHERE, BinaryOps.MOD}


def _from_bf16(bits: str, dtype: DType, emit) -> str:
    """bfloat16 bits (i16) as the float they encode: the upper half of a float's bits."""
    i32 = _like(dtype, dtypes.int32)
    wide = emit(f"zext {mem_type(dtype)} {bits} to {ltype(i32)}")
    shifted = emit(f"shl {ltype(i32)} {wide}, {llvm_const(16, i32)}")
    return emit(f"bitcast {ltype(i32)} {shifted} to {ltype(dtype)}")


# float32 functions written in IR (vectorisable); other dtypes call the LLVM intrinsics
_IR_MATH = {UnaryOps.EXP2: llvm_math.exp2, UnaryOps.EXP: llvm_math.exp,
            UnaryOps.LOG2: llvm_math.log2}


def _cast(src: DType, dst: DType, x: str, emit, used: set) -> str:
    """Emit the instructions that convert `x` from src to dst; the result's name.
    bfloat16 values are floats in registers: casts from them are casts from float32."""
    if src.scalar == dtypes.bfloat16:
        src = _like(src, dtypes.float32)
    ts, td, zero = ltype(src), ltype(dst), llvm_const(0, src)
    if dst.scalar == dtypes.bool:
        return emit(f"fcmp une {ts} {x}, {zero}" if src.is_float else f"icmp ne {ts} {x}, {zero}")
    if dst.scalar == dtypes.bfloat16:
        return _to_bf16(src, x, emit, used)
    if src == dtypes.float64 and dst == dtypes.float16:  # no libcall: see _F64_TO_F16
        return emit(f"call half @lazyten_f64_to_f16(double {x})")
    if src.is_float and dst.is_float:
        if ts == td:  # bfloat16 to float32: the register already holds the value
            return x
        op = "fpext" if dst.itemsize > src.itemsize else "fptrunc"
        return emit(f"{op} {ts} {x} to {td}")
    if src.is_float:  # wide signed conversion first, so unsigned targets wrap like numpy
        if dst.itemsize < 8:
            wide = ltype(_like(src, dtypes.int64))
            return emit(f"trunc {wide} {emit(f'fptosi {ts} {x} to {wide}')} to {td}")
        if dst.scalar == dtypes.uint64:  # [2**63, 2**64) needs fptoui; negatives wrap
            big = emit(f"fcmp oge {ts} {x}, {llvm_const(2.0 ** 63, src)}")
            unsigned = emit(f"fptoui {ts} {x} to {td}")  # poison below 0, never selected
            return emit(f"select {ltype(_like(src, dtypes.bool))} {big}, {td} {unsigned}, "
                        f"{td} {emit(f'fptosi {ts} {x} to {td}')}")
        return emit(f"fptosi {ts} {x} to {td}")
    unsigned = src.is_unsigned or src.scalar == dtypes.bool
    if dst.is_float:
        return emit(f"{'uitofp' if unsigned else 'sitofp'} {ts} {x} to {td}")
    if ts == td:
        return emit(f"add {ts} {x}, {zero}")
    if dst.itemsize < src.itemsize:
        return emit(f"trunc {ts} {x} to {td}")
    return emit(f"{'zext' if unsigned else 'sext'} {ts} {x} to {td}")


def _bitcast(src: DType, dst: DType, x: str, emit) -> str:
    """The bits of `x` read as dst (same itemsize). A bfloat16 register is a float whose
    upper half holds the bits, so it is shifted into (or out of) an i16 first."""
    if src.scalar == dtypes.bfloat16:
        f32, i32 = _like(src, dtypes.float32), _like(src, dtypes.int32)
        bits = emit(f"bitcast {ltype(f32)} {x} to {ltype(i32)}")
        high = emit(f"lshr {ltype(i32)} {bits}, {llvm_const(16, i32)}")
        x, src = emit(f"trunc {ltype(i32)} {high} to {mem_type(src)}"), _like(src, dtypes.int16)
    if dst.scalar == dtypes.bfloat16:
        if src.scalar != dtypes.int16:
            x = emit(f"bitcast {ltype(src)} {x} to {ltype(_like(src, dtypes.int16))}")
        return _from_bf16(x, dst, emit)
    return x if ltype(src) == ltype(dst) else emit(f"bitcast {ltype(src)} {x} to {ltype(dst)}")


def _to_bf16(src: DType, x: str, emit, used: set) -> str:
    """`x` rounded once to bfloat16 (as a float). Values that float holds exactly are
    widened to float; the rest go through double and `_to_float_odd`, whose round-to-odd
    makes the final rounding the only one that matters (as for _F64_TO_F16)."""
    f32, f64 = _like(src, dtypes.float32), _like(src, dtypes.float64)
    if src.is_float:
        wide = src if src.itemsize >= 4 else f32
        if src.itemsize < 4:
            x = emit(f"fpext {ltype(src)} {x} to {ltype(f32)}")
    else:
        wide = f32 if src.itemsize <= 2 else f64
        unsigned = src.is_unsigned or src.scalar == dtypes.bool
        x = emit(f"{'uitofp' if unsigned else 'sitofp'} {ltype(src)} {x} to {ltype(wide)}")
    if wide.scalar == dtypes.float64:
        x = _to_float_odd(x, f64, emit, used)
    return _round_bf16(x, f32, emit)


def _to_float_odd(x: str, f64: DType, emit, used: set) -> str:
    """A double rounded to float toward zero, with the last bit set where that was
    inexact (round to odd): rounding the result again to fewer than 22 bits rounds once."""
    d, f, i, b = ltype(f64), ltype(_like(f64, dtypes.float32)), ltype(_like(f64, dtypes.int32)), \
        ltype(_like(f64, dtypes.bool))
    near = emit(f"fptrunc {d} {x} to {f}")
    back = emit(f"fpext {f} {near} to {d}")
    exact = emit(f"fcmp oeq {d} {back}, {x}")
    bits = emit(f"bitcast {f} {near} to {i}")
    fabs = _intrinsic("fabs", f64, 1, used)
    over = emit(f"fcmp ogt {d} {emit(f'{fabs}({d} {back})')}, {emit(f'{fabs}({d} {x})')}")
    toward0 = emit(f"sub {i} {bits}, {emit(f'zext {b} {over} to {i}')}")
    odd = emit(f"or {i} {toward0}, {llvm_const(1, _like(f64, dtypes.int32))}")
    return emit(f"bitcast {i} {emit(f'select {b} {exact}, {i} {bits}, {i} {odd}')} to {f}")


def _bf16_bits(x: str, f32: DType, emit) -> str:
    """The float `x` rounded to the nearest bfloat16, even on ties, as the i32 whose upper
    half holds the bfloat16 (lower half zero). NaN stays NaN (made quiet, sign kept);
    values past the largest bfloat16 round to inf."""
    i32 = _like(f32, dtypes.int32)
    i, f, b = ltype(i32), ltype(f32), ltype(_like(f32, dtypes.bool))
    bits = emit(f"bitcast {f} {x} to {i}")
    odd = emit(f"and {i} {emit(f'lshr {i} {bits}, {llvm_const(16, i32)}')}, {llvm_const(1, i32)}")
    up = emit(f"add {i} {bits}, {emit(f'add {i} {odd}, {llvm_const(0x7FFF, i32)}')}")
    quiet = emit(f"or {i} {bits}, {llvm_const(0x400000, i32)}")
    nan = emit(f"fcmp uno {f} {x}, {x}")
    return emit(f"and {i} {emit(f'select {b} {nan}, {i} {quiet}, {i} {up}')}, "
                f"{llvm_const(-65536, i32)}")


def _round_bf16(x: str, f32: DType, emit) -> str:
    """The float `x` rounded to bfloat16, as a float."""
    return emit(f"bitcast {ltype(_like(f32, dtypes.int32))} {_bf16_bits(x, f32, emit)} "
                f"to {ltype(f32)}")


# double -> half without the __truncdfhf2 libcall (MCJIT does not link it): round to float
# with round-to-odd (truncate toward zero, set the last bit if inexact), then to half, so
# the value is rounded once, exactly as a direct conversion would
_F64_TO_F16 = """define internal half @lazyten_f64_to_f16(double %x) alwaysinline {
  %f = fptrunc double %x to float
  %back = fpext float %f to double
  %exact = fcmp oeq double %back, %x
  %bits = bitcast float %f to i32
  %ax = call double @llvm.fabs.f64(double %x)
  %ab = call double @llvm.fabs.f64(double %back)
  %over = fcmp ogt double %ab, %ax
  %dec = zext i1 %over to i32
  %toward0 = sub i32 %bits, %dec
  %odd = or i32 %toward0, 1
  %sel = select i1 %exact, i32 %bits, i32 %odd
  %r = bitcast i32 %sel to float
  %h = fptrunc float %r to half
  ret half %h
}
declare double @llvm.fabs.f64(double)"""


class LLVMRenderer(Renderer):
    """Renders CPU kernels as LLVM IR (opaque pointers, LLVM 15+)."""
    kernel_options = KernelOptions(gpu=False, tile=256, pack=64, split_reduce=32)

    def program(self, kernel: LinearKernel) -> ProgramSpec:
        """The function is named after its body, so kernels that differ only in their
        name (Adam's update of every parameter: the length is the loop bound, an
        argument) are one source, compiled once."""
        spec = super().program(kernel)
        body = spec.src.replace(f"@{kernel.name}(", "@(", 1)
        spec.function = f"{kernel.name[0]}_{hashlib.sha256(body.encode()).hexdigest()[:16]}"
        spec.src = body.replace("@(", f"@{spec.function}(", 1)
        return spec

    def render(self, kernel: LinearKernel) -> str:
        r: dict[UOp, str] = {}
        args, prologue, body, used = [], [], [], set()
        block = ["entry"]
        phis: dict[UOp, tuple[int, str]] = {}
        counter = [0]
        no_unroll: list[str] = []  # loop metadata: one distinct id per loop
        accumulations = {id(u.vin[1]) for u in kernel.uops if u.uop is UOps.ACC_UPDATE and u.arg}

        def fresh(prefix: str = "v") -> str:
            counter[0] += 1
            return f"%{prefix}{counter[0]}"

        def emit(rhs: str) -> str:
            name = fresh()
            body.append(f"  {name} = {rhs}")
            return name

        def gep(u: UOp) -> str:
            buf, idx = u.vin[0], u.vin[1]
            return emit(f"getelementptr inbounds {mem_type(buf.arg[1])}, ptr {r[buf]}, "
                        f"{LLVM_TYPES[idx.dtype]} {r[idx]}")

        for u in kernel.uops:
            if u.uop is UOps.DEFINE_GLOBAL:
                r[u] = f"%{u.arg[0]}"
                args.append(f"ptr noalias align 16 {r[u]}")
            elif u.uop is UOps.DEFINE_VAR:
                r[u] = f"%{u.arg}"
                args.append(f"{LLVM_TYPES[u.dtype]} {r[u]}")
            elif u.uop is UOps.CONST:
                r[u] = llvm_const(u.arg, u.dtype)
            elif u.uop is UOps.LOOP:
                label = fresh("loop")[1:]
                body.append(f"  br label %{label}")
                body.append(f"{label}:")
                r[u] = fresh("i")
                phis[u] = (len(body), label)
                body.append(f"  {r[u]} = phi {LLVM_TYPES[u.dtype]} [{r[u.vin[0]]}, %{block[0]}]")
                block[0] = label
            elif u.uop is UOps.END:
                loop = u.vin[0]
                ty = LLVM_TYPES[loop.dtype]
                nxt = emit(f"add nsw {ty} {r[loop]}, 1")
                cond = emit(f"icmp slt {ty} {nxt}, {r[loop.vin[1]]}")
                at, label = phis[loop]
                body[at] = body[at] + f", [{nxt}, %{block[0]}]"
                # LLVM may fully unroll short constant loops (pool windows, conv taps);
                # unrolling longer ones buys little over our tiles and costs compile time
                end = loop.vin[1]
                short = end.uop is UOps.CONST and loop.vin[0].uop is UOps.CONST and \
                    end.arg - loop.vin[0].arg <= _UNROLL_MAX
                meta = ""
                if not short:
                    k = len(no_unroll) + 1
                    no_unroll.append(f"!{k} = distinct !{{!{k}, !0}}")
                    meta = f", !llvm.loop !{k}"
                body.append(f"  br i1 {cond}, label %{label}, label %{label}_exit{meta}")
                body.append(f"{label}_exit:")
                block[0] = f"{label}_exit"
            elif u.uop is UOps.DEFINE_ACC:
                r[u] = fresh("acc")
                ty = ltype(u.dtype)
                prologue.append(f"  {r[u]} = alloca {ty}, align 64")
                body.append(f"  store {ty} {llvm_const(u.arg, u.dtype)}, ptr {r[u]}")
            elif u.uop is UOps.ACC_READ:
                r[u] = emit(f"load {ltype(u.dtype)}, ptr {r[u.vin[0]]}")
            elif u.uop is UOps.ACC_UPDATE:
                acc, val = u.vin
                body.append(f"  store {ltype(acc.dtype)} {r[val]}, ptr {r[acc]}")
            elif u.uop is UOps.LOAD:
                r[u] = self._load(u, r, emit, gep, used)
            elif u.uop is UOps.STORE:
                val, dt = r[u.vin[2]], u.vin[2].dtype
                if dt.scalar == dtypes.bool:
                    val = emit(f"zext {ltype(dt)} {val} to {mem_type(dt)}")
                elif dt.scalar == dtypes.bfloat16:
                    i32 = ltype(_like(dt, dtypes.int32))
                    high = emit(f"lshr {i32} {_bf16_bits(val, _like(dt, dtypes.float32), emit)}, "
                                f"{llvm_const(16, _like(dt, dtypes.int32))}")
                    val = emit(f"trunc {i32} {high} to {mem_type(dt)}")
                ptr = gep(u)
                body.append(f"  store {mem_type(dt)} {val}, ptr {ptr}, align {dt.itemsize}")
            elif u.uop is UOps.ALU:
                src_dtype = u.vin[-1].dtype if u.arg is TernaryOps.WHERE else u.vin[0].dtype
                if src_dtype.scalar == dtypes.bfloat16:  # computed in float, rounded after
                    src_dtype = _like(src_dtype, dtypes.float32)
                flags = "reassoc contract" if id(u) in accumulations else "contract"
                r[u] = emit(_alu(u.arg, u.dtype, src_dtype, [r[v] for v in u.vin], used, flags))
                if u.dtype.scalar == dtypes.bfloat16 and u.arg not in _EXACT_OPS:
                    r[u] = _round_bf16(r[u], src_dtype, emit)
            elif u.uop is UOps.VECTORIZE:
                r[u] = self._vectorize(u, r, emit)
            elif u.uop is UOps.EXTRACT:
                r[u] = emit(f"extractelement {ltype(u.vin[0].dtype)} {r[u.vin[0]]}, i32 {u.arg}")
            elif u.uop is UOps.CAST:
                if (u.vin[0].dtype, u.dtype) == (dtypes.float64, dtypes.float16):
                    used.add(_F64_TO_F16)
                r[u] = _cast(u.vin[0].dtype, u.dtype, r[u.vin[0]], emit, used)
            elif u.uop is UOps.BITCAST:
                r[u] = _bitcast(u.vin[0].dtype, u.dtype, r[u.vin[0]], emit)
            else:
                raise NotImplementedError(f"LLVM renderer has no rule for {u.uop}")
        lines = [f"define void @{kernel.name}({', '.join(args)}) #0 {{", "entry:"]
        lines += prologue + body + ["  ret void", "}"]
        lines += sorted(used)
        lines.append('attributes #0 = { nounwind "no-trapping-math"="true" "prefer-vector-width"="512" }')
        if no_unroll:
            lines += ['!0 = !{!"llvm.loop.unroll.disable"}'] + no_unroll
        return "\n".join(lines) + "\n"

    @staticmethod
    def _vectorize(u: UOp, r: dict, emit) -> str:
        ty, scalar = ltype(u.dtype), ltype(u.dtype.scalar)
        if all(v is u.vin[0] for v in u.vin):  # a splat
            one = emit(f"insertelement {ty} poison, {scalar} {r[u.vin[0]]}, i32 0")
            return emit(f"shufflevector {ty} {one}, {ty} poison, <{u.dtype.count} x i32> "
                        "zeroinitializer")
        vec = "poison"
        for k, v in enumerate(u.vin):
            vec = emit(f"insertelement {ty} {vec}, {scalar} {r[v]}, i32 {k}")
        return vec

    @staticmethod
    def _load(u: UOp, r: dict, emit, gep, used: set) -> str:
        dt = u.dtype
        if len(u.vin) == 3 and u.vin[2].dtype.count > 1:  # a gate per lane: masked load
            idx = u.vin[1]  # no inbounds: lane 0 may lie outside the buffer (masked off)
            ptr = emit(f"getelementptr {mem_type(dt.scalar)}, ptr {r[u.vin[0]]}, "
                       f"{LLVM_TYPES[idx.dtype]} {r[idx]}")
            stored = _like(dt, dtypes.uint16) if dt.scalar == dtypes.bfloat16 else dt
            ty, mask = mem_type(dt), ltype(u.vin[2].dtype)
            fn = f"@llvm.masked.load.{_suffix(stored)}.p0"
            used.add(f"declare {ty} {fn}(ptr, i32 immarg, {mask}, {ty})")
            val = emit(f"call {ty} {fn}(ptr {ptr}, i32 {dt.itemsize}, {mask} {r[u.vin[2]]}, "
                       f"{ty} zeroinitializer)")
            return _from_bf16(val, dt, emit) if dt.scalar == dtypes.bfloat16 else val
        if len(u.vin) == 3:  # gated: read index 0 where invalid, then select zero
            valid, idx = r[u.vin[2]], u.vin[1]
            safe = emit(f"select i1 {valid}, {LLVM_TYPES[idx.dtype]} {r[idx]}, "
                        f"{LLVM_TYPES[idx.dtype]} 0")
            ptr = emit(f"getelementptr inbounds {mem_type(dt.scalar)}, ptr {r[u.vin[0]]}, "
                       f"{LLVM_TYPES[idx.dtype]} {safe}")
        else:
            ptr = gep(u)
        val = emit(f"load {mem_type(dt)}, ptr {ptr}, align {dt.itemsize}")
        if dt.scalar == dtypes.bool:
            byte = dtypes.int8.vec(dt.count) if dt.count > 1 else dtypes.int8
            val = emit(f"icmp ne {mem_type(dt)} {val}, {llvm_const(0, byte)}")
        elif dt.scalar == dtypes.bfloat16:
            val = _from_bf16(val, dt, emit)
        if len(u.vin) == 3:
            zero = llvm_const(False if dt.scalar == dtypes.bool else 0, dt)
            val = emit(f"select i1 {r[u.vin[2]]}, {ltype(dt)} {val}, {ltype(dt)} {zero}")
        return val


PLAIN = "; plain: emit as written, at -O0\n"  # first line of support code (piece loops)


def piece_loop(buffers: int) -> str:
    """`pieces_N(ptr kernel, ptr data0, ..., ptr next, i64 n, i64 chunks)`, for kernels
    with N buffers: cut [0, n) into `chunks` pieces (piece k is [n*k/chunks,
    n*(k+1)/chunks)) and call `kernel` on whichever piece an atomic increment of `*next`
    hands out, until none is left. Every thread makes one call, and a thread that starts
    late or loses its core takes fewer pieces. One such loop serves every kernel with N
    buffers, so it costs no compile time per kernel (inside each kernel's module, LLVM
    took about 7 ms more per kernel). Empty pieces (chunks > n) are skipped: a kernel's
    loops run at least once. The source starts with PLAIN: optimising it gains nothing
    (one atomic add and one call per piece) and -O3 code generation took 7 ms per loop."""
    ptrs = [f"ptr %data{i}" for i in range(buffers)]
    return PLAIN + "\n".join([
        f"define void @pieces_{buffers}("
        f"{', '.join(['ptr %kernel'] + ptrs + ['ptr %next', 'i64 %n', 'i64 %chunks'])}) {{",
        "entry:", "  br label %take",
        "take:",
        "  %k = atomicrmw add ptr %next, i64 1 monotonic",
        "  %done = icmp sge i64 %k, %chunks",
        "  br i1 %done, label %exit, label %run",
        "run:",
        "  %lo = mul i64 %k, %n", "  %start = sdiv i64 %lo, %chunks",
        "  %k1 = add i64 %k, 1", "  %hi = mul i64 %k1, %n", "  %end = sdiv i64 %hi, %chunks",
        "  %empty = icmp sge i64 %start, %end",
        "  br i1 %empty, label %take, label %call",
        "call:",
        f"  call void %kernel({', '.join(ptrs + ['i64 %start', 'i64 %end'])})",
        "  br label %take",
        "exit:", "  ret void", "}"]) + "\n"
