"""LinearKernel -> LLVM IR text for the CPU.

Signature: `void name(ptr noalias data0, ..., i64 core_start, i64 core_end)`; the outer
loop runs [core_start, core_end) so a runtime can split it across threads (`piece_loop`
renders the loop a thread runs to take its share). Loops are SSA phi loops; accumulators
are allocas that LLVM's SROA turns into registers.

Types and constants are spelled in llvm_types.py; casts and bfloat16 rounding are in
llvm_casts.py.
"""
from __future__ import annotations
import hashlib

from codegen.dtypes import DType, dtypes
from codegen.linearizer import LinearKernel
from codegen.target import Target, host_cpu
from codegen.ops import BinaryOps, TernaryOps, UnaryOps
from codegen.renderer import ProgramSpec, Renderer, llvm_math
from codegen.renderer.llvm_casts import (F64_TO_F16, bf16_bits, from_bf16, render_bitcast,
                                         render_cast, round_to_bf16)
from codegen.renderer.llvm_types import (LLVM_TYPES, intrinsic, like, llvm_const, ltype,
                                         mem_type, suffix)
from codegen.uops import UOp, UOps

_UNROLL_MAX = 4  # longest loop LLVM may unroll (a 2 x 2 pool window); see render()


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
        return f"{intrinsic(name, src_dtype, 2, used)}({t} {a}, {t} {b})"
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
        return f"{intrinsic('fmuladd', src_dtype, 3, used)}({t} {a}, {t} {b}, {t} {args[2]})"
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
    return f"{intrinsic(names[op], src_dtype, 1, used)}({t} {a})"


# ops whose result needs no rounding: it is one of the operands or its negation
_EXACT_OPS = {BinaryOps.MAX, UnaryOps.NEG, TernaryOps.WHERE, BinaryOps.MOD}


# float32 functions written in IR (vectorisable); other dtypes call the LLVM intrinsics
_IR_MATH = {UnaryOps.EXP2: llvm_math.exp2, UnaryOps.EXP: llvm_math.exp,
            UnaryOps.LOG2: llvm_math.log2}


class LLVMRenderer(Renderer):
    """Renders CPU kernels as LLVM IR (opaque pointers, LLVM 15+), for a CPU target
    (default: this machine's, `host_cpu()`)."""

    def __init__(self, target: Target | None = None):
        self.target = target or host_cpu()

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
                    i32 = ltype(like(dt, dtypes.int32))
                    high = emit(f"lshr {i32} {bf16_bits(val, like(dt, dtypes.float32), emit)}, "
                                f"{llvm_const(16, like(dt, dtypes.int32))}")
                    val = emit(f"trunc {i32} {high} to {mem_type(dt)}")
                ptr = gep(u)
                body.append(f"  store {mem_type(dt)} {val}, ptr {ptr}, align {dt.itemsize}")
            elif u.uop is UOps.ALU:
                src_dtype = u.vin[-1].dtype if u.arg is TernaryOps.WHERE else u.vin[0].dtype
                if src_dtype.scalar == dtypes.bfloat16:  # computed in float, rounded after
                    src_dtype = like(src_dtype, dtypes.float32)
                flags = "reassoc contract" if id(u) in accumulations else "contract"
                r[u] = emit(_alu(u.arg, u.dtype, src_dtype, [r[v] for v in u.vin], used, flags))
                if u.dtype.scalar == dtypes.bfloat16 and u.arg not in _EXACT_OPS:
                    r[u] = round_to_bf16(r[u], src_dtype, emit)
            elif u.uop is UOps.VECTORIZE:
                r[u] = self._vectorize(u, r, emit)
            elif u.uop is UOps.EXTRACT:
                r[u] = emit(f"extractelement {ltype(u.vin[0].dtype)} {r[u.vin[0]]}, i32 {u.arg}")
            elif u.uop is UOps.CAST:
                if (u.vin[0].dtype, u.dtype) == (dtypes.float64, dtypes.float16):
                    used.add(F64_TO_F16)
                r[u] = render_cast(u.vin[0].dtype, u.dtype, r[u.vin[0]], emit, used)
            elif u.uop is UOps.BITCAST:
                r[u] = render_bitcast(u.vin[0].dtype, u.dtype, r[u.vin[0]], emit)
            else:
                raise NotImplementedError(f"LLVM renderer has no rule for {u.uop}")
        lines = [f"define void @{kernel.name}({', '.join(args)}) #0 {{", "entry:"]
        lines += prologue + body + ["  ret void", "}"]
        lines += sorted(used)
        lines.append('attributes #0 = { nounwind "no-trapping-math"="true" '
                     f'"prefer-vector-width"="{self.target.vector_bits}" }}')
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
            stored = like(dt, dtypes.uint16) if dt.scalar == dtypes.bfloat16 else dt
            ty, mask = mem_type(dt), ltype(u.vin[2].dtype)
            fn = f"@llvm.masked.load.{suffix(stored)}.p0"
            used.add(f"declare {ty} {fn}(ptr, i32 immarg, {mask}, {ty})")
            val = emit(f"call {ty} {fn}(ptr {ptr}, i32 {dt.itemsize}, {mask} {r[u.vin[2]]}, "
                       f"{ty} zeroinitializer)")
            return from_bf16(val, dt, emit) if dt.scalar == dtypes.bfloat16 else val
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
            val = from_bf16(val, dt, emit)
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
