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
  c_helpers.py (integer instructions, ties to even); a dialect only spells the float <-> uint
  bit casts (`float_bits`, `bits_float`).
- Unsigned types are C's unsigned types: `/`, `%`, `>>` and `<` on them are unsigned.
- SPECIAL names its work-item index: gidx<d> global, lidx<d> local, grp<d> group, in dim d.
  Where a dim is launched wider than its SPECIAL's size, extra work-items return at once.
- Group reduce: in a kernel with a local index, each work-item's accumulator holds a partial
  result; the first read of it after its loop combines the partials through local memory
  with a barrier tree, and only work-item 0 stores.
"""
from __future__ import annotations
from typing import Callable

from codegen.dtypes import DType, dtypes
from codegen.helpers import prod
from codegen.linearizer import LinearKernel
from codegen.target import VECTOR_MEMORY, gpu
from codegen.ops import EXACT_OPS, BinaryOps, Op, TernaryOps, UnaryOps
from codegen.renderer import ProgramSpec, Renderer, named_after_body
from codegen.renderer.c_helpers import BF16, BF16_DOUBLE, needs_double_bf16, uses
from codegen.renderer.c_values import CValues
from codegen.uops import UOp, dtype_of
from codegen.vector_memory import split_lanes


# C promotes these to int before multiplying: 65535 * 65535 would overflow int (undefined)
_NARROW_UNSIGNED = (dtypes.uint8, dtypes.uint16)


def _max(a: str, b: str, dtype: DType) -> str:
    if dtype == dtypes.bool:
        return f"({a}|{b})"
    if dtype.is_float:  # a NaN on either side wins, as numpy.maximum
        return f"(({a}!={a} || {a}>{b}) ? {a} : {b})"
    return f"({a}>{b} ? {a} : {b})"


class CStyleRenderer(CValues, Renderer):
    """Renders kernels as C; dialects override the class attributes below (and those of
    CValues: type names, literals, casts, bit casts)."""
    target = gpu("GPU", local_size=256)
    kernel_prefix = ""                   # before `void name(...)`
    buffer_prefix = ""                   # address space of buffer arguments
    smem_prefix = ""                     # address space of the group-reduce scratch array
    barrier = ""                         # wait for the work-group, local memory visible
    group_bound = ""                     # states a large work-group's size: {size}, {x} {y} {z}
    specials: dict[str, Callable[[int], str]] = {}   # "gidx"/"lidx"/"grp" -> index expression
    make_vector = "({type})({lanes})"    # a vector of the lanes' values (CUDA: make_float4)
    code_for_op: dict[Op, Callable[..., str]] = {  # operands..., dtype -> C
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
    }

    # ---- dialect hooks ----
    def prelude(self, kernel: LinearKernel) -> list[str]:
        """Lines before the kernel: pragmas, includes, helper functions."""
        return []

    def bf16_helpers(self, kernel: LinearKernel) -> list[str]:
        """The bfloat16 helpers the kernel needs, in this dialect's spelling."""
        if not uses(kernel, dtypes.bfloat16):
            return []
        lines = BF16 + (BF16_DOUBLE if needs_double_bf16(kernel) else [])
        return [line.format(F=self.float_bits, U=self.bits_float) for line in lines]

    def program(self, kernel: LinearKernel) -> ProgramSpec:
        """The kernel is named after its body (D42): OpenCL's and CUDA's per-parameter
        Adam updates differ only in their launch size, CLANG's in their loop bound."""
        return named_after_body(super().program(kernel), "void {}(")

    # ---- one kernel: a rule per uop kind, each adding to the _CKernel being written ----
    def render(self, kernel: LinearKernel) -> str:
        k, rules = _CKernel(kernel), self._rules
        for u in split_lanes(kernel.uops, self.native_vector):
            rule = rules.get(u.op)
            if rule is None:
                raise NotImplementedError(f"C renderer has no rule for {u.op}")
            rule(k, u)
        head = f"{self.head_prefix(kernel)}void {kernel.name}({', '.join(k.args)}) {{"
        return "\n".join([*self.prelude(kernel), head, *k.prologue, *k.body, "}"]) + "\n"

    def head_prefix(self, kernel: LinearKernel) -> str:
        """What comes before `void name(...)`: the kernel prefix, and where the kernel's
        work-group is larger than the target's usual one (a row kernel's, up to the
        device's limit), `group_bound` of its size, so that the driver's compiler keeps
        within the registers such a group leaves each work-item (unbounded, a 1024-item
        row kernel needing more than 64 registers each failed to launch on an H200,
        D96). Groups of the usual size stay unbounded: the source then does not depend
        on the launch size, and kernels differing only in it are one build (D42)."""
        size = prod(kernel.local_size)
        if not self.group_bound or size <= self.target.local_size:
            return self.kernel_prefix
        x, y, z = (list(kernel.local_size) + [1, 1])[:3]
        return self.kernel_prefix + self.group_bound.format(size=size, x=x, y=y, z=z) + " "

    def native_vector(self, dtype: DType) -> bool:
        """Whether loads and stores of `dtype` (a vector) are written as one (float4, D98):
        2 or 4 lanes of a type in VECTOR_MEMORY, within the target's `vector_memory`."""
        return dtype.scalar in VECTOR_MEMORY and dtype.count in (2, 4) and \
            dtype.itemsize * dtype.count <= self.target.vector_memory

    def _value(self, k: _CKernel, u: UOp, expr: str) -> None:
        """Name the value of `u` and declare it as `expr`."""
        k.names[u] = k.fresh("v")
        k.emit(f"{self.type_of(dtype_of(u))} {k.names[u]} = {expr};")

    def _vector_at(self, buf: str, idx: str, dtype: DType) -> str:
        """The vector of `dtype` at buf[idx] (an aligned index: D98), as an lvalue."""
        return f"*(({self.buffer_prefix}{self.type_of(dtype)}*)({buf}+{idx}))"

    def _render_vectorize(self, k: _CKernel, u: UOp) -> None:
        lanes = ", ".join(k.names[s] for s in u.src)
        self._value(k, u, self.make_vector.format(type=self.type_of(dtype_of(u)), lanes=lanes))

    def _render_extract(self, k: _CKernel, u: UOp) -> None:
        k.names[u] = f"{k.names[u.src[0]]}.{'xyzw'[u.arg]}"

    def _render_define_global(self, k: _CKernel, u: UOp) -> None:
        k.names[u] = u.arg[0]
        k.args.append(f"{self.buffer_prefix}{self.mem_type(u.arg[1])}* {k.names[u]}")

    def _render_define_var(self, k: _CKernel, u: UOp) -> None:
        k.names[u] = u.arg
        k.args.append(f"{self.types[dtype_of(u)]} {k.names[u]}")

    def _render_special(self, k: _CKernel, u: UOp) -> None:
        name, size = u.arg
        kind = name.rstrip("0123456789")
        dim = int(name[len(kind):])
        if kind not in self.specials:
            raise NotImplementedError(
                f"{type(self).__name__} has no spelling for work-item index {kind}; "
                "a target without work-items uses Target(gpu=False) (loops)")
        k.names[u] = name
        ctype = self.types[dtype_of(u)]
        k.emit(f"{ctype} {name} = ({ctype}){self.specials[kind](dim)};")
        if kind == "lidx":
            k.lidx.append(name)
        launched = k.kernel.global_size[dim] * k.kernel.local_size[dim]
        if kind == "gidx" and launched > size:
            k.emit(f"if ({name} >= {size}) return;")

    def _render_define_local(self, k: _CKernel, u: UOp) -> None:
        """A stage's local memory (codegen/stage.py), declared at the kernel's scope."""
        name, dtype, size = u.arg
        k.names[u] = name
        k.prologue.append(f"  {self.smem_prefix}{self.mem_type(dtype)} {name}[{size}];")

    def _render_barrier(self, k: _CKernel, u: UOp) -> None:
        k.emit(self.barrier)

    def _render_const(self, k: _CKernel, u: UOp) -> None:
        k.names[u] = self.const(u.arg, dtype_of(u))

    def _render_loop(self, k: _CKernel, u: UOp) -> None:
        var = k.names[u] = k.fresh(f"{u.arg}_")
        start, end = k.names[u.src[0]], k.names[u.src[1]]
        k.emit(f"for ({self.types[dtype_of(u)]} {var} = {start}; {var} < {end}; {var}++) {{")
        k.depth += 1

    def _render_end(self, k: _CKernel, u: UOp) -> None:
        k.depth -= 1
        k.emit("}")

    def _render_if(self, k: _CKernel, u: UOp) -> None:
        k.emit(f"if ({k.names[u.src[0]]}) {{")
        k.depth += 1

    _render_endif = _render_end

    def _render_define_acc(self, k: _CKernel, u: UOp) -> None:
        dtype = dtype_of(u)
        k.names[u], k.acc_depth[u] = k.fresh("acc"), k.depth
        k.emit(f"{self.types[dtype]} {k.names[u]} = {self.const(u.arg, dtype)};")

    def _render_acc_read(self, k: _CKernel, u: UOp) -> None:
        acc = u.src[0]
        if k.lidx and acc in k.acc_op and k.depth == k.acc_depth[acc]:  # after its loop
            self._group_combine(k, acc, k.acc_op.pop(acc))
        self._value(k, u, k.names[acc])

    def _render_acc_update(self, k: _CKernel, u: UOp) -> None:
        acc, val = u.src
        if u.arg != "own":  # else this work-item's own value, never combined (D96)
            k.acc_op[acc] = val.arg
        k.emit(f"{k.names[acc]} = {k.names[val]};")

    def _render_load(self, k: _CKernel, u: UOp) -> None:
        dtype = dtype_of(u)
        if dtype.count > 1:
            expr = self._vector_at(k.names[u.src[0]], k.names[u.src[1]], dtype)
            zero = self.make_vector.format(type=self.type_of(dtype), lanes=", ".join(
                [self.const(0, dtype.scalar)] * dtype.count))
        else:
            expr = self._load_expr(k.names[u.src[0]], k.names[u.src[1]], dtype)
            zero = self.const(0, dtype)
        if len(u.src) == 3:  # gated: never touch memory where not valid
            expr = f"({k.names[u.src[2]]} ? {expr} : {zero})"
        self._value(k, u, expr)

    def _load_expr(self, buf: str, idx: str, dtype: DType) -> str:
        """buf[idx] as a register value (half and bfloat16 widen to float, bool from a byte)."""
        if dtype == dtypes.float16:
            return self.load_half(buf, idx)
        if dtype == dtypes.bfloat16:
            return f"bf2f({buf}[{idx}])"
        return f"({buf}[{idx}]!=0)" if dtype == dtypes.bool else f"{buf}[{idx}]"

    def _render_store(self, k: _CKernel, u: UOp) -> None:
        buf, idx, val = k.names[u.src[0]], k.names[u.src[1]], u.src[2]
        if dtype_of(val).count > 1:
            line = f"{self._vector_at(buf, idx, dtype_of(val))} = {k.names[val]};"
        else:
            line = self._store_line(buf, idx, k.names[val], dtype_of(val))
        if len(u.src) == 4:  # a gated store (a row's last share, D94)
            line = f"if ({k.names[u.src[3]]}) {line}"
        one = k.lidx and u.arg != "each"  # a group reduce's value: work-item 0 stores it
        k.emit(f"if ({k.lidx[0]} == 0) {line}" if one else line)

    def _store_line(self, buf: str, idx: str, value: str, dtype: DType) -> str:
        """The statement buf[idx] = value, narrowing half and bfloat16 to their bits."""
        if dtype == dtypes.float16:
            return self.store_half(buf, idx, value) + ";"
        if dtype == dtypes.bfloat16:
            return f"{buf}[{idx}] = f2bf({value});"
        return f"{buf}[{idx}] = ({self.mem_type(dtype)})({value});"

    def _render_alu(self, k: _CKernel, u: UOp) -> None:
        src = dtype_of(u.src[-1] if u.arg is TernaryOps.WHERE else u.src[0])
        operands = [k.names[v] for v in u.src]
        if u.arg is BinaryOps.SHL:
            expr = self.shift_left(operands[0], operands[1], src)
        else:
            expr = self.code_for_op[u.arg](*operands, src.opmath)
        self._value(k, u, self._round_result(expr, dtype_of(u), u.arg))

    def _round_result(self, expr: str, dtype: DType, op: Op) -> str:
        """half and bfloat16 are computed in float: round the result back after every op."""
        if dtype == dtypes.float16:
            return self.round_half(expr, dtypes.float32)
        if dtype == dtypes.bfloat16 and op not in EXACT_OPS:
            return f"round_bf({expr})"
        return expr

    def _render_cast(self, k: _CKernel, u: UOp) -> None:
        x = u.src[0]
        self._value(k, u, self.cast(k.names[x], dtype_of(x), dtype_of(u)))

    def _render_bitcast(self, k: _CKernel, u: UOp) -> None:
        x = u.src[0]
        self._value(k, u, self.from_bits(self.to_bits(k.names[x], dtype_of(x)), dtype_of(u)))

    def _group_combine(self, k: _CKernel, acc: UOp, op: Op) -> None:
        """Combine the work-group's partial accumulators in local memory (a barrier tree)."""
        size, scratch, lidx = prod(k.kernel.local_size), f"red_{k.names[acc]}", k.lidx[0]
        dtype = dtype_of(acc)
        k.prologue.append(f"  {self.smem_prefix}{self.mem_type(dtype)} {scratch}[{size}];")
        k.emit(f"{scratch}[{lidx}] = {k.names[acc]};")
        k.emit(self.barrier)
        k.emit(f"for (int s = {size // 2}; s > 0; s >>= 1) {{")
        mine, other = f"{scratch}[{lidx}]", f"{scratch}[{lidx}+s]"
        k.emit(f"  if ({lidx} < s) {mine} = {self.code_for_op[op](mine, other, dtype)};")
        k.emit(f"  {self.barrier}")
        k.emit("}")
        k.emit(f"{k.names[acc]} = {scratch}[0];")


class _CKernel:
    """One kernel being written: the C name of each uop's value and the lines so far."""

    def __init__(self, kernel: LinearKernel) -> None:
        self.kernel = kernel
        self.names: dict[UOp, str] = {}
        self.args: list[str] = []
        self.prologue: list[str] = []  # declarations before the body (group-reduce scratch)
        self.body: list[str] = []
        self.depth = 1                 # indent: loops open + 1
        self.counter = 0               # numbers the names, so each is unique
        self.acc_depth: dict[UOp, int] = {}  # the depth each accumulator is defined at
        self.acc_op: dict[UOp, Op] = {}      # accumulator -> op of its update, until combined
        self.lidx: list[str] = []      # local work-item indices (a group reduce combines)

    def emit(self, line: str) -> None:
        self.body.append("  " * self.depth + line)

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"
