"""The program generator: a hypothesis strategy that draws small random lazy programs.

A program starts with 1-3 input tensors (random shapes of 0-4 dims, sizes 1-7 and now and
then 0, any dtype, some of them non-contiguous views of realized buffers) and applies up
to MAX_OPS ops, each drawn from the op classes in WEIGHTS and applied to tensors of the
live pool (or to fresh inputs of a shape the op needs). Each op knows the domain it is
safe on (no overflow, no division by values near 0, comparisons only of exact values), so
every generated program has one right answer. A failing program is shrunk by minimize.py
(or, with FUZZ_SHRINK=1, by hypothesis).

For local triage set a class's weight to 0 here, or FUZZ_OFF=assign,index (a comma list).
"""
from __future__ import annotations
import math

from hypothesis import strategies as st

from codegen.helpers import getenv
from .model import INTS, Interp, NoPromotion, Program, Step, Var
from .inputs import make_input
from .ops_compat import OPS as COMPAT
from .ops_elementwise import OPS as ELEMENTWISE
from .ops_logic import OPS as LOGIC
from .ops_reduce import OPS as REDUCE
from .ops_shape import OPS as SHAPE
from .ops_state import OPS as STATE

MAX_OPS = 8  # ops per program: small programs compile few, small kernels
MAX_SIDE = 7
CHAIN = 60  # percent of operand picks that take the newest fitting tensor: deeper chains
# how often each op class is drawn, relative to the others (0 turns a class off)
WEIGHTS = {
    "elementwise": 8, "compare": 3, "where": 2, "cast": 3, "reduce": 5, "movement": 7,
    "slice": 3, "matmul": 2, "cat": 2, "index": 2, "assign": 3, "clone": 1, "realize": 2,
}
# ops whose derivative is defined almost everywhere, for the gradient programs
GRAD_CLASSES = ("elementwise", "compare", "where", "reduce", "movement", "slice", "matmul",
                "cat", "index", "clone", "realize")


def switched_off() -> set[str]:
    """Op classes or single ops (draw names: div, math, pow...) named in FUZZ_OFF."""
    return {name.strip() for name in str(getenv("FUZZ_OFF", "")).split(",") if name.strip()}


def enabled_weights(grad: bool) -> dict[str, int]:
    off = switched_off()
    return {k: w for k, w in WEIGHTS.items()
            if w > 0 and k not in off and (not grad or k in GRAD_CLASSES)}


class Gen:
    """The state of one program being drawn: the live pool and the steps so far."""

    def __init__(self, draw, grad: bool, weights: dict[str, int]):
        self.draw, self.grad, self.weights = draw, grad, weights
        self.pool: dict[str, Var] = {}
        self.prog = Program(grad=grad)
        self.count = 0
        self.float_dtype = self.pick(["float32", "float64"]) if grad else None

    # ---- drawing primitives ----
    def int(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))

    def pick(self, seq):
        seq = list(seq)
        return seq[self.draw(st.integers(0, len(seq) - 1))]

    def chance(self, percent: int) -> bool:
        return self.draw(st.integers(0, 99)) < percent

    def subset(self, seq, min_size: int = 0) -> list:
        seq = list(seq)
        return [x for i, x in enumerate(seq) if self.draw(st.booleans()) or i < min_size]

    def permutation(self, seq) -> list:
        return self.draw(st.permutations(list(seq)))

    def name(self, prefix: str = "x") -> str:
        self.count += 1
        return f"{prefix}{self.count - 1}"

    # ---- the pool ----
    def var(self, pred=lambda v: True) -> Var | None:
        """A pool var satisfying pred: often the newest one (so ops chain and fuse), else any.
        A var without bounds (the mean over an empty axis is nan) is never an operand: the
        draws reason about intervals."""
        found = [v for v in self.pool.values() if not math.isnan(v.lo) and pred(v)]
        if not found:
            return None
        return found[-1] if self.chance(CHAIN) else self.pick(found)

    def add(self, step: Step) -> Step:
        self.prog.steps.append(step)
        if step.out is not None:
            self.pool[step.out.name] = step.out
        return step

    def new(self, shape, dtype: str, lo: float, hi: float, sources=(), **kw) -> Var:
        """The Var of an op's result; exact only if every source is."""
        leaves = frozenset().union(*[s.leaves for s in sources]) if sources else frozenset()
        kw.setdefault("exact", all(s.exact for s in sources))
        return Var(self.name(), tuple(shape), dtype, float(lo), float(hi), leaves=leaves, **kw)

    # ---- shapes and dtypes ----
    def side(self, allow_zero: bool = True) -> int:
        if allow_zero and self.chance(3):
            return 0
        return self.int(1, 4 if self.grad else MAX_SIDE)

    def shape(self, min_dims: int = 0, max_dims: int = 4) -> tuple[int, ...]:
        max_dims = min(max_dims, 3) if self.grad else max_dims
        return tuple(self.side() for _ in range(self.int(min_dims, max(min_dims, max_dims))))

    def dtype(self) -> str:
        if self.grad:
            return self.float_dtype
        return self.pick(("float32",) * 3 + ("float16", "float64", "bfloat16") + INTS +
                         ("bool", "int32"))

    # ---- inputs ----
    def input(self, shape=None, dtype=None, lo=None, hi=None, layout=None) -> Var:
        """A fresh input tensor (maybe a view of a realized buffer) added to the pool."""
        shape = self.shape() if shape is None else tuple(shape)
        dtype = self.dtype() if dtype is None else dtype
        return make_input(self, shape, dtype, lo, hi, layout)

    def operand(self, pred, shape=None, dtype=None, lo=None, hi=None, fresh: int = 25) -> Var:
        """A pool var satisfying pred, or (sometimes, or when none does) a fresh input."""
        found = self.var(pred)
        if found is None or self.chance(fresh):
            return self.input(shape, dtype, lo, hi)
        return found


def _op_table(grad: bool) -> tuple[list, dict[str, int]]:
    """The (name, class, draw function) of every op switched on, and the class weights."""
    weights, off = enabled_weights(grad), switched_off()
    table = []
    for name, kind, fn, smooth in ELEMENTWISE + LOGIC + REDUCE + SHAPE + STATE + COMPAT:
        if kind in weights and (smooth or not grad) and name not in off:
            table.append((name, kind, fn))
    return table, weights


@st.composite
def programs(draw, grad: bool = False, max_ops: int = MAX_OPS) -> Program:
    """A random program; with grad=True only differentiable float programs."""
    table, weights = _op_table(grad)
    g = Gen(draw, grad, weights)
    for _ in range(g.int(1, 3)):
        g.input()
    # each op class gets its weight, shared among its ops
    by_kind: dict[str, list] = {}
    for _, kind, fn in table:
        by_kind.setdefault(kind, []).append(fn)
    kinds = [k for k in weights if k in by_kind for _ in range(weights[k])]
    if not kinds:
        raise ValueError(f"FUZZ_OFF={','.join(sorted(switched_off()))} leaves no op to draw")
    for _ in range(g.int(1, max_ops)):
        for _attempt in range(4):  # an op may not fit the pool; try another
            fn = g.pick(by_kind[g.pick(kinds)])
            try:
                if fn(g) is not None:
                    break
            except NoPromotion:  # uint64 with a signed type: lazyten raises TypeError
                continue
    names = list(g.pool)
    order = g.permutation(names)
    cuts = sorted(set(g.subset(range(1, len(order)))))
    bounds = [0] + cuts + [len(order)]
    g.prog.final = [order[a:b] for a, b in zip(bounds, bounds[1:]) if g.chance(70)]
    g.prog.read_order = g.permutation(names)
    g.prog.outputs = dict(g.pool)
    if grad:  # the newest float result and some others: a loss over every intermediate
        # would make each one a kernel output, and nothing would fuse
        usable = [n for n in names if g.pool[n].dtype.startswith("float") and g.pool[n].leaves]
        leaf = [n for n in usable if n in g.prog.inputs][:1]  # so the loss requires grad
        g.prog.loss = sorted(set(leaf + usable[-1:] + g.subset(usable)), key=usable.index)
    return g.prog


def reference(prog: Program, mode: str = "check", leaves: dict | None = None) -> Interp:
    """Run a program's numpy reference: every live name's Ref in interp.env."""
    interp = Interp(mode, {k: v.array for k, v in prog.inputs.items()} if leaves is None
                    else leaves)
    for step in prog.steps:
        result = step.ref(interp)
        if step.out is not None:
            interp.env[step.out.name] = result
    return interp


