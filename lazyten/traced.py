"""Pointwise composites as one graph node (D72).

A special function (erf, erfc, expm1, gelu's value and slope, ...) is written once as a
composition of Tensor ops (mathfn.py), which is easy to read and to check, but eager code
paid for it on every call: erfc built 120 Tensor ops, each an autograd-free Function, a
LazyBuffer and a constant or two, about 0.75 ms of Python, and the schedule cache's key
walked them all again. Here such a function is run once per (function, dtypes, device,
shape) on placeholder inputs of that shape, and the graph it builds is kept as a
`Pointwise` program: a list of instructions over its inputs and constants. Each later
call makes one LazyBuffer whose op is `CompositeOps.POINTWISE` and whose argument is that
program; the scheduler treats it as one elementwise op that costs `ops` ops and is
`depth` deep, and the kernel builder expands it into the same AST the Tensor ops would
have built (the values are bit for bit the same: tests/unit/test_traced.py).

A function is traced only if what it computes is fixed by `key` and the inputs' dtypes,
device and shape: the callers pass the function itself as the key where it is
module-level, and `code_key` gives one for a function without closure cells (its code and
defaults). A function whose graph is not pointwise (a reduce, a movement of a computed
value, a realized buffer it reads, an index check) is refused once and then always run
as written.
"""
from __future__ import annotations
from contextvars import ContextVar
from typing import Any, Callable

from codegen.dtypes import DType
from codegen.helpers import getenv
from codegen.ops import BinaryOps, BufferOps, ConstBuffer, LazyOp, LoadOps, TernaryOps, UnaryOps, _Op
from codegen.shape.shapetracker import ShapeTracker
from lazyten.lazy import LazyBuffer, broadcast_scalar

_DEPTH_MAX = 128  # deeper compositions stay as written (the scheduler cuts deep chains)

# set while a trace (here or traced_graph.py's) records a function's graph: a traced
# Function called inside it runs as written, so that the trace sees its primitive nodes
# (a GRAPH node inside would refuse the whole trace: gelu's composite calls relu)
RECORDING: ContextVar[bool] = ContextVar("recording", default=False)


class CompositeOps(_Op):
    """Lazy graph only: POINTWISE (arg: a Pointwise) is its sources run through a traced
    composition of elementwise ops; INPUT (arg: its position) is a placeholder of a trace;
    GRAPH (arg: a traced_graph.Subgraph) a Function's forward, rebuilt over its sources
    before anything is scheduled."""
    POINTWISE = 1
    INPUT = 2
    GRAPH = 3


class Pointwise:
    """A traced composition: `program` lists instructions, each one of ("in", i) (the
    i-th input), ("const", value, dtype), or (op, arg, operand positions), operands
    before their users; the last is the result, of `dtype`. `ops` is how many
    elementwise ops it computes per element, `depth` its longest chain. Compared by
    identity: there is one per traced (function, dtypes, device, shape)."""

    def __init__(self, name: str, program: tuple, dtype: DType):
        # the inputs the program reads, renumbered in that order (a kernel's AST must
        # read every source the node names: an unread one would shift the buffers)
        self.inputs = sorted({ins[1] for ins in program if ins[0] == "in"})
        number = {i: n for n, i in enumerate(self.inputs)}
        program = tuple([("in", number[ins[1]]) if ins[0] == "in" else ins for ins in program])
        self.name, self.program, self.dtype = name, program, dtype
        depths: list[int] = []
        for ins in program:
            depths.append(1 + max([depths[j] for j in ins[2]], default=0)
                          if isinstance(ins[0], _Op) else 0)
        self.ops = sum(1 for ins in program if isinstance(ins[0], _Op))
        self.depth = max(depths, default=0)

    def __repr__(self) -> str:
        return f"<Pointwise {self.name}: {self.ops} ops>"

    def expand(self, srcs: tuple[LazyOp, ...], const_st: ShapeTracker) -> LazyOp:
        """The AST of this composition over the sources' ASTs; constants are read
        through `const_st` (a zero-strided view of the kernel's index space)."""
        nodes: list[LazyOp] = []
        for ins in self.program:
            if ins[0] == "in":
                nodes.append(srcs[ins[1]])
            elif ins[0] == "const":
                nodes.append(LazyOp(BufferOps.CONST, (), ConstBuffer(ins[1], ins[2], const_st)))
            else:
                nodes.append(LazyOp(ins[0], tuple([nodes[j] for j in ins[2]]), ins[1]))
        return nodes[-1]


class NotPointwise(Exception):
    """The traced graph is not a composition of elementwise ops of the inputs."""


# (key, dtypes, device, shape) -> the traced program, or None where the function is refused
_TRACES: dict[tuple, Pointwise | None] = {}


def code_key(fn: Callable) -> tuple | None:
    """What fixes a function's behaviour when it reads no closure cells: its code and
    defaults (a lambda written in a method is a new object each call, with the same
    code). None for a closure: its cells may hold anything."""
    if getattr(fn, "__closure__", None) is not None or not hasattr(fn, "__code__"):
        return None
    return (fn.__code__, fn.__defaults__)


def pointwise(fn: Callable, key: Any, wrap: Callable, *inputs: LazyBuffer) -> LazyBuffer:
    """fn(*inputs) (same-shaped LazyBuffers, made Tensors by `wrap`) as one POINTWISE
    node, traced the first time `key` meets these dtypes, device and shape; as fn itself
    where it cannot be traced (key None, POINTWISE_TRACE=0, a refused function)."""
    program = None
    if key is not None and getenv("POINTWISE_TRACE", 1):
        device, shape = inputs[0].device, inputs[0].shape
        full = (key, tuple([x.dtype for x in inputs]), device, shape)
        try:
            program = _TRACES[full]
        except KeyError:
            if len(_TRACES) >= getenv("TRACE_CACHE", 4096):
                _TRACES.clear()
            program = _TRACES[full] = _trace(fn, wrap, [x.dtype for x in inputs], device, shape)
        except TypeError:  # an unhashable default value: run as written
            program = None
    if program is None:
        return fn(*[wrap(x) for x in inputs]).lazydata
    srcs = tuple([inputs[i] for i in program.inputs])
    if program.program[-1][0] == "in":  # the function returns an input as it is
        return srcs[program.program[-1][1]]
    return LazyBuffer(srcs[0].device, ShapeTracker.from_shape(srcs[0].shape), program.dtype,
                      CompositeOps.POINTWISE, srcs, program)


def _trace(fn: Callable, wrap: Callable, dtypes: list[DType], device: str,
           shape: tuple[int, ...]) -> Pointwise | None:
    """fn traced on placeholders of `shape`: at the inputs' own shape, so a reduce or a
    movement shows as one (a placeholder of shape () hides them: x.max() of a scalar is
    x), and Python code that reads the shape is traced for this shape."""
    st = ShapeTracker.from_shape(shape)
    holders = [LazyBuffer(device, st, d, CompositeOps.INPUT, (), i) for i, d in enumerate(dtypes)]
    recording = RECORDING.set(True)
    try:
        out = fn(*[wrap(h) for h in holders]).lazydata
        program = _program(out, shape)
    except NotPointwise:
        return None
    finally:
        RECORDING.reset(recording)
    traced = Pointwise(getattr(fn, "__qualname__", "fn"), program, out.dtype)
    # a constant (no input read) stays as written: a node needs a source for its shape
    return traced if traced.inputs and traced.depth <= _DEPTH_MAX else None


def _program(out: LazyBuffer, shape: tuple[int, ...]) -> tuple:
    """The instructions of the graph under `out`, operands first: every value of the
    inputs' shape, read element for element (constants through a plain broadcast)."""
    position: dict[int, int] = {}
    program: list[tuple] = []
    stack: list[tuple[LazyBuffer, bool]] = [(_base_of(out, shape), False)]
    while stack:
        base, ready = stack.pop()
        if id(base) in position:
            continue
        if not ready and base.src:
            stack.append((base, True))
            stack.extend((_base_of(s, shape), False) for s in reversed(base.src))
            continue
        if base.op is CompositeOps.INPUT:
            program.append(("in", base.arg))
        elif base.op is LoadOps.CONST:
            program.append(("const", base.arg, base.dtype))
        else:
            operands = [position[id(s.base)] for s in base.src]
            if base.op is CompositeOps.POINTWISE:  # a traced function inside: inlined
                position[id(base)] = _inline(base.arg, operands, program)
                continue
            program.append((base.op, base.arg, tuple(operands)))
        position[id(base)] = len(program) - 1
    if position[id(out.base)] != len(program) - 1:  # an inner function's input, returned
        raise NotPointwise("the result is not the last instruction")
    return tuple(program)


def _base_of(lb: LazyBuffer, shape: tuple[int, ...]) -> LazyBuffer:
    base = lb.base
    if lb.shape != shape or base.realized is not None or base.checks or base.op not in _TRACEABLE:
        raise NotPointwise(f"{lb} is not an elementwise value of the inputs")
    if lb is not base and not (base.op is LoadOps.CONST and lb.st == broadcast_scalar(shape)):
        raise NotPointwise(f"{lb} reads its base through a movement")
    return base


def _inline(inner: Pointwise, operands: list[int], program: list) -> int:
    """Append `inner`'s instructions on `operands`; the position of its result."""
    local: list[int] = []
    for ins in inner.program:
        if ins[0] == "in":
            local.append(operands[ins[1]])
            continue
        if ins[0] != "const":
            ins = (ins[0], ins[1], tuple([local[j] for j in ins[2]]))
        local.append(len(program))
        program.append(ins)
    return local[-1]


_TRACEABLE = frozenset((*UnaryOps, *BinaryOps, *TernaryOps, LoadOps.CONST, CompositeOps.INPUT,
                        CompositeOps.POINTWISE))


def expand(base: LazyBuffer, srcs: tuple[LazyOp, ...], st: ShapeTracker) -> LazyOp:
    """The kernel builder's AST of a POINTWISE base read at kernel index space `st`."""
    return base.arg.expand(srcs, broadcast_scalar(base.shape) + st)
