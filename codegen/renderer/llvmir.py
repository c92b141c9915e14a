"""LinearKernel -> LLVM IR text for the CPU.

Signature: `void name(ptr noalias data0, ..., i64 core_start, i64 core_end)`; the outer
loop runs [core_start, core_end) so a runtime can split it across threads (the CPU's
crew calls it on pieces: runtimes/cpu_crew.py). Loops are SSA phi loops; accumulators
are allocas that LLVM's SROA turns into registers.

Each uop kind has a `_render_<kind>` method. Types and constants are spelled in
llvm_types.py, ALU instructions in llvm_alu.py, casts and bfloat16 rounding in llvm_casts.py.
"""
from __future__ import annotations

from codegen.dtypes import DType, dtypes
from codegen.linearizer import LinearKernel
from codegen.target import Target, host_cpu
from codegen.ops import EXACT_OPS, TernaryOps, UnaryOps
from codegen.renderer import ProgramSpec, Renderer, named_after_body
from codegen.renderer.llvm_alu import alu
from codegen.renderer.llvm_masks import masked_load
from codegen.renderer.llvm_casts import (bf16_bits, from_bf16, render_bitcast, render_cast,
                                         round_to_bf16)
from codegen.renderer.llvm_types import LLVM_TYPES, like, llvm_const, ltype, mem_type, suffix
from codegen.uops import UOp, UOps, dtype_of

_UNROLL_MAX = 4  # longest loop LLVM may unroll (a 2 x 2 pool window); see _loop_metadata
# LLVM's loop vectorizer interleaves a long innermost loop of a large scalar kernel with a
# long chain (a series: exp, log, sin) this many vectors at a time: see _loop_metadata [D144]
_INTERLEAVE, _INTERLEAVE_STEPS, _INTERLEAVE_WORK = 4, 256, 1 << 14
_SERIES = {UnaryOps.EXP, UnaryOps.EXP2, UnaryOps.LOG2, UnaryOps.SIN, UnaryOps.COS}
# ops whose result needs no rounding: it is one of the operands or its negation
_ATTRIBUTES = 'attributes #0 = {{ nounwind "no-trapping-math"="true" "prefer-vector-width"="{}" }}'


class _LLVMKernel:
    """One kernel being written: the IR name of each uop's value and the lines so far."""

    def __init__(self, kernel: LinearKernel) -> None:
        self.kernel = kernel
        self.names: dict[UOp, str] = {}
        self.args: list[str] = []
        self.prologue: list[str] = []  # allocas, at the top of the entry block
        self.body: list[str] = []
        self.used: set[str] = set()    # declarations and helper functions the body calls
        self.block = "entry"           # the basic block being written
        self.phis: dict[UOp, tuple[int, str]] = {}  # loop -> (body line of its phi, its label)
        self.counter = 0               # numbers the names, so each is unique
        self.no_unroll: list[str] = []  # loop metadata: one distinct id per loop
        self.open: list[UOp] = []       # the loops being written, innermost last
        self.outer: set[UOp] = set()    # loops with a loop inside them
        # whether LLVM's loop vectorizer interleaves a long innermost loop (D144)
        self.interleave = any(u.op is UOps.ALU and u.arg in _SERIES for u in kernel.uops) and \
            not any(u.dtype is not None and u.dtype.count > 1 for u in kernel.uops)
        # the values stored into an accumulator by a reduce that may be reassociated
        self.accumulations = {id(u.src[1]) for u in kernel.uops
                              if u.op is UOps.ACC_UPDATE and u.arg}

    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"%{prefix}{self.counter}"

    def emit(self, rhs: str) -> str:
        """Append `%vN = rhs` and return the new name."""
        name = self.fresh()
        self.body.append(f"  {name} = {rhs}")
        return name

    def gep(self, buf: UOp, idx: UOp) -> str:
        """The address of buf[idx]."""
        return self.emit(f"getelementptr inbounds {mem_type(buf.arg[1])}, ptr {self.names[buf]}, "
                         f"{LLVM_TYPES[dtype_of(idx)]} {self.names[idx]}")


class LLVMRenderer(Renderer):
    """Renders CPU kernels as LLVM IR (opaque pointers, LLVM 15+), for a CPU target
    (default: this machine's, `host_cpu()`)."""

    def __init__(self, target: Target | None = None):
        self.target = target or host_cpu()

    def program(self, kernel: LinearKernel) -> ProgramSpec:
        """The function is named after its body (D42)."""
        return named_after_body(super().program(kernel), "@{}(")

    def render(self, kernel: LinearKernel) -> str:
        k, rules = _LLVMKernel(kernel), self._rules
        for u in kernel.uops:
            rule = rules.get(u.op)
            if rule is None:
                raise NotImplementedError(f"LLVM renderer has no rule for {u.op}")
            rule(k, u)
        lines = [f"define void @{kernel.name}({', '.join(k.args)}) #0 {{", "entry:",
                 *k.prologue, *k.body, "  ret void", "}", *sorted(k.used),
                 _ATTRIBUTES.format(self.target.vector_bits)]
        if k.no_unroll:
            lines += ['!0 = !{!"llvm.loop.unroll.disable"}'] + k.no_unroll
        return "\n".join(lines) + "\n"

    def _render_define_global(self, k: _LLVMKernel, u: UOp) -> None:
        k.names[u] = f"%{u.arg[0]}"
        k.args.append(f"ptr noalias align 16 {k.names[u]}")

    def _render_define_var(self, k: _LLVMKernel, u: UOp) -> None:
        k.names[u] = f"%{u.arg}"
        k.args.append(f"{LLVM_TYPES[dtype_of(u)]} {k.names[u]}")

    def _render_const(self, k: _LLVMKernel, u: UOp) -> None:
        k.names[u] = llvm_const(u.arg, dtype_of(u))

    def _render_loop(self, k: _LLVMKernel, u: UOp) -> None:
        """A block headed by the loop variable's phi; END adds the back edge's value."""
        label = k.fresh("loop")[1:]
        start, end = u.src
        if start.op is UOps.CONST and end.op is UOps.CONST:
            k.body += [f"  br label %{label}", f"{label}:"]
        else:  # bounds only known at run time (a thread's piece, a peeled segment of it)
            ty = LLVM_TYPES[dtype_of(u)]
            enter = k.emit(f"icmp slt {ty} {k.names[start]}, {k.names[end]}")
            k.body += [f"  br i1 {enter}, label %{label}, label %{label}_exit", f"{label}:"]
        k.names[u] = k.fresh("i")
        k.outer.update(k.open[-1:])
        k.open.append(u)
        k.phis[u] = (len(k.body), label)
        k.body.append(f"  {k.names[u]} = phi {LLVM_TYPES[dtype_of(u)]} "
                      f"[{k.names[u.src[0]]}, %{k.block}]")
        k.block = label

    def _render_end(self, k: _LLVMKernel, u: UOp) -> None:
        loop = u.src[0]
        ty = LLVM_TYPES[dtype_of(loop)]
        nxt = k.emit(f"add nsw {ty} {k.names[loop]}, 1")
        cond = k.emit(f"icmp slt {ty} {nxt}, {k.names[loop.src[1]]}")
        at, label = k.phis[loop]
        k.body[at] = k.body[at] + f", [{nxt}, %{k.block}]"
        k.body += [f"  br i1 {cond}, label %{label}, label %{label}_exit"
                   f"{self._loop_metadata(k, loop)}", f"{label}_exit:"]
        k.block = f"{label}_exit"
        k.open.remove(loop)

    def _render_if(self, k: _LLVMKernel, u: UOp) -> None:
        label = k.names[u] = k.fresh("if")[1:]
        k.body += [f"  br i1 {k.names[u.src[0]]}, label %{label}, label %{label}_end",
                   f"{label}:"]
        k.block = label

    def _render_endif(self, k: _LLVMKernel, u: UOp) -> None:
        label = k.names[u.src[0]]
        k.body += [f"  br label %{label}_end", f"{label}_end:"]
        k.block = f"{label}_end"

    @staticmethod
    def _loop_metadata(k: _LLVMKernel, loop: UOp) -> str:
        """LLVM may fully unroll short constant loops (pool windows, conv taps); unrolling
        longer ones buys little over our tiles and costs compile time, so they get
        `llvm.loop.unroll.disable`. In a kernel without vectors of its own (LLVM's loop
        vectorizer makes them: runtimes/llvm_build.py) that evaluates a series (an exp, a
        log, a sine: a chain of multiply-adds), an innermost loop of at least
        _INTERLEAVE_STEPS steps (where the bound is known at run time only: the kernel's
        outer size) in a kernel of at least _INTERLEAVE_WORK (its outer size times the
        loop's) also gets `llvm.loop.interleave.count`: LLVM's own count for a loop of more
        than a few instructions is 1, so a chain such as gelu's (an exp, a division and a
        Horner series, 40 steps deep) ran one vector at a time, its latency exposed [D144]."""
        start, end = loop.src
        known = start.op is UOps.CONST and end.op is UOps.CONST
        if known and end.arg - start.arg <= _UNROLL_MAX:
            return ""
        n = len(k.no_unroll) + 1
        outer = k.kernel.global_size[0]
        steps = end.arg - start.arg if known else outer
        interleave = k.interleave and loop not in k.outer and steps >= _INTERLEAVE_STEPS and \
            (steps * outer if known else steps) >= _INTERLEAVE_WORK
        more = f', !{{!"llvm.loop.interleave.count", i32 {_INTERLEAVE}}}' if interleave else ""
        k.no_unroll.append(f"!{n} = distinct !{{!{n}, !0{more}}}")
        return f", !llvm.loop !{n}"

    def _render_define_acc(self, k: _LLVMKernel, u: UOp) -> None:
        k.names[u] = k.fresh("acc")
        ty = ltype(dtype_of(u))
        k.prologue.append(f"  {k.names[u]} = alloca {ty}, align 64")
        k.body.append(f"  store {ty} {llvm_const(u.arg, dtype_of(u))}, ptr {k.names[u]}")

    def _render_acc_read(self, k: _LLVMKernel, u: UOp) -> None:
        k.names[u] = k.emit(f"load {ltype(dtype_of(u))}, ptr {k.names[u.src[0]]}")

    def _render_acc_update(self, k: _LLVMKernel, u: UOp) -> None:
        acc, val = u.src
        k.body.append(f"  store {ltype(dtype_of(acc))} {k.names[val]}, ptr {k.names[acc]}")

    def _render_store(self, k: _LLVMKernel, u: UOp) -> None:
        """A store; with a fourth source (a gate per lane: the padding of a padded row), an
        llvm.masked.store that writes only the valid lanes."""
        dtype = dtype_of(u.src[2])
        val = self._to_memory(k, k.names[u.src[2]], dtype)
        if len(u.src) == 4:
            self._masked_store(k, u, val, dtype)
            return
        ptr = k.gep(u.src[0], u.src[1])
        k.body.append(f"  store {mem_type(dtype)} {val}, ptr {ptr}, align {dtype.itemsize}")

    @staticmethod
    def _masked_store(k: _LLVMKernel, u: UOp, val: str, dtype: DType) -> None:
        gate = u.src[3]
        idx = u.src[1]  # no inbounds: lanes past the buffer's end are masked off
        ptr = k.emit(f"getelementptr {mem_type(dtype.scalar)}, ptr {k.names[u.src[0]]}, "
                     f"{LLVM_TYPES[dtype_of(idx)]} {k.names[idx]}")
        stored = like(dtype, dtypes.uint16) if dtype.scalar == dtypes.bfloat16 else dtype
        ty, mask = mem_type(dtype), ltype(dtype_of(gate))
        fn = f"@llvm.masked.store.{suffix(stored)}.p0"
        k.used.add(f"declare void {fn}({ty}, ptr, i32 immarg, {mask})")
        k.body.append(f"  call void {fn}({ty} {val}, ptr {ptr}, i32 {dtype.itemsize}, "
                      f"{mask} {k.names[gate]})")

    @staticmethod
    def _to_memory(k: _LLVMKernel, val: str, dtype: DType) -> str:
        """A register value as it is stored: bool as a byte, bfloat16 as its 16 bits."""
        if dtype.scalar == dtypes.bool:
            return k.emit(f"zext {ltype(dtype)} {val} to {mem_type(dtype)}")
        if dtype.scalar != dtypes.bfloat16:
            return val
        i32 = like(dtype, dtypes.int32)
        high = k.emit(f"lshr {ltype(i32)} {bf16_bits(val, like(dtype, dtypes.float32), k.emit)}, "
                      f"{llvm_const(16, i32)}")
        return k.emit(f"trunc {ltype(i32)} {high} to {mem_type(dtype)}")

    def _render_alu(self, k: _LLVMKernel, u: UOp) -> None:
        src_dtype = dtype_of(u.src[-1] if u.arg is TernaryOps.WHERE else u.src[0])
        if src_dtype.scalar == dtypes.bfloat16:  # computed in float, rounded after
            src_dtype = like(src_dtype, dtypes.float32)
        flags = "reassoc contract" if id(u) in k.accumulations else "contract"
        dtype = dtype_of(u)
        k.names[u] = k.emit(alu(u.arg, dtype, src_dtype, [k.names[v] for v in u.src], k.used,
                                flags, self.target.scalef))
        if dtype.scalar == dtypes.bfloat16 and u.arg not in EXACT_OPS:
            k.names[u] = round_to_bf16(k.names[u], src_dtype, k.emit)

    def _render_vectorize(self, k: _LLVMKernel, u: UOp) -> None:
        dtype = dtype_of(u)
        ty, scalar = ltype(dtype), ltype(dtype.scalar)
        if all(v is u.src[0] for v in u.src):  # a splat
            one = k.emit(f"insertelement {ty} poison, {scalar} {k.names[u.src[0]]}, i32 0")
            k.names[u] = k.emit(f"shufflevector {ty} {one}, {ty} poison, <{dtype.count} x i32> "
                                "zeroinitializer")
            return
        sources = list(dict.fromkeys(v.src[0] for v in u.src if v.op is UOps.EXTRACT))
        if len(sources) <= 2 and all(v.op is UOps.EXTRACT for v in u.src) and \
                len({dtype_of(v) for v in sources}) == 1:  # lanes of two vectors: one shuffle
            src_ty = ltype(dtype_of(sources[0]))
            width = dtype_of(sources[0]).count
            mask = ", ".join(f"i32 {sources.index(v.src[0]) * width + v.arg}" for v in u.src)
            second = k.names[sources[1]] if len(sources) == 2 else "poison"
            k.names[u] = k.emit(f"shufflevector {src_ty} {k.names[sources[0]]}, {src_ty} "
                                f"{second}, <{dtype.count} x i32> <{mask}>")
            return
        vec = "poison"
        for lane, v in enumerate(u.src):
            vec = k.emit(f"insertelement {ty} {vec}, {scalar} {k.names[v]}, i32 {lane}")
        k.names[u] = vec

    def _render_extract(self, k: _LLVMKernel, u: UOp) -> None:
        vec = u.src[0]
        k.names[u] = k.emit(f"extractelement {ltype(dtype_of(vec))} {k.names[vec]}, i32 {u.arg}")

    def _render_cast(self, k: _LLVMKernel, u: UOp) -> None:
        x = u.src[0]
        k.names[u] = render_cast(dtype_of(x), dtype_of(u), k.names[x], k.emit, k.used)

    def _render_bitcast(self, k: _LLVMKernel, u: UOp) -> None:
        x = u.src[0]
        k.names[u] = render_bitcast(dtype_of(x), dtype_of(u), k.names[x], k.emit)

    # ---- loads: plain, gated (a select of the index and of the value), masked per lane ----
    def _render_load(self, k: _LLVMKernel, u: UOp) -> None:
        dtype = dtype_of(u)
        if len(u.src) == 3 and dtype_of(u.src[2]).count > 1:
            k.names[u] = self._masked_load(k, u, dtype)
            return
        ptr = self._gated_address(k, u, dtype) if len(u.src) == 3 else k.gep(u.src[0], u.src[1])
        val = self._from_memory(k, k.emit(f"load {mem_type(dtype)}, ptr {ptr}, "
                                          f"align {dtype.itemsize}"), dtype)
        if len(u.src) == 3:
            zero = llvm_const(False if dtype.scalar == dtypes.bool else 0, dtype)
            val = k.emit(f"select i1 {k.names[u.src[2]]}, {ltype(dtype)} {val}, "
                         f"{ltype(dtype)} {zero}")
        k.names[u] = val

    @staticmethod
    def _gated_address(k: _LLVMKernel, u: UOp, dtype: DType) -> str:
        """Where invalid, read index 0 (the value is replaced by zero after the load)."""
        valid, idx = k.names[u.src[2]], u.src[1]
        ity = LLVM_TYPES[dtype_of(idx)]
        safe = k.emit(f"select i1 {valid}, {ity} {k.names[idx]}, {ity} 0")
        return k.emit(f"getelementptr inbounds {mem_type(dtype.scalar)}, "
                      f"ptr {k.names[u.src[0]]}, {ity} {safe}")

    @staticmethod
    def _from_memory(k: _LLVMKernel, val: str, dtype: DType) -> str:
        """A loaded value in its register type: bool from a byte, bfloat16 from its bits."""
        if dtype.scalar == dtypes.bool:
            byte = dtypes.int8.vec(dtype.count) if dtype.count > 1 else dtypes.int8
            return k.emit(f"icmp ne {mem_type(dtype)} {val}, {llvm_const(0, byte)}")
        if dtype.scalar == dtypes.bfloat16:
            return from_bf16(val, dtype, k.emit)
        return val

    def _masked_load(self, k: _LLVMKernel, u: UOp, dtype: DType) -> str:
        """A vector load with a gate per lane (llvm_masks.py) [D71]."""
        idx = u.src[1]  # no inbounds: lane 0 may lie outside the buffer (masked off)
        ptr = k.emit(f"getelementptr {mem_type(dtype.scalar)}, ptr {k.names[u.src[0]]}, "
                     f"{LLVM_TYPES[dtype_of(idx)]} {k.names[idx]}")
        stored = like(dtype, dtypes.uint16) if dtype.scalar == dtypes.bfloat16 else dtype
        val = masked_load(k.emit, k.used, ptr, u.src[2], k.names[u.src[2]], stored,
                          self.target.vector_bits)
        return from_bf16(val, dtype, k.emit) if dtype.scalar == dtypes.bfloat16 else val
