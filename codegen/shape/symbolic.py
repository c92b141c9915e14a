"""Symbolic integer index expressions with bounds, simplified as they are built.

Contract:
- A `Node` is an immutable integer expression over `Variable`s. Its `min`/`max` are sound: for
  every assignment of the variables within their own [min, max], min <= value <= max.
- Operators (`+ - * // %`, `lt`, `ge`) and the builders `sum_nodes`/`and_nodes` simplify while
  building. Every rewrite is exact for all variable values within their bounds, with Python
  floor semantics for `//` and `%` (bounds may be negative). When a rule is not provably exact
  it is not applied.
- The node classes and their fields are an interface: renderers dispatch on `type(node)` through
  `node.render(ops, ctx)`. NumNode(b), Variable(expr, min, max), MulNode(a, b: int),
  DivNode(a, b: int > 0) floor division, ModNode(a, b: int > 0) floor modulo, SumNode(nodes),
  LtNode(a, b: int) -> 0/1, AndNode(nodes) -> 1 if every node is nonzero else 0.
- Constants are always NumNode. `==` is structural and returns bool; `hash` agrees with it.
- `substitute` and `eval` assume values lie within each variable's bounds (the simplifications
  already used those bounds).
- The rewrites of `//`, `%` and `<` on sums, where most of the index simplification
  happens, are in sum_rules.py.
"""
from __future__ import annotations
import math
import operator
from typing import Any, Callable, Iterable, Union

# node type -> entry(node, table, ctx); an entry receives a node of its own key's type, which
# a dict's type cannot express per key, so entries take the node as Any
RenderOps = dict[type["Node"], Callable[[Any, "RenderOps", Any], Any]]
NodeLike = Union["Node", int]


def _node(x: NodeLike) -> Node:
    """Wrap an int as a NumNode; pass nodes through."""
    return x if isinstance(x, Node) else NumNode(operator.index(x))


def _const(x: NodeLike) -> int:
    """The int value of an int or a NumNode; TypeError for anything else."""
    if isinstance(x, NumNode):
        return x.b
    if isinstance(x, Node):
        raise TypeError(f"expected a constant, got the expression {x}")
    return operator.index(x)


def _divisor(x: NodeLike) -> int:
    """A positive int divisor (floor division/modulo are only defined for those here)."""
    b = _const(x)
    if b <= 0:
        raise ValueError(f"divisor must be a positive int, got {b}")
    return b


def _ceildiv(a: int, b: int) -> int:
    """ceil(a / b) for b > 0."""
    return -((-a) // b)


class Node:
    """Base class of symbolic integer expressions."""
    min: int
    max: int

    # ---- identity and rendering ----
    @property
    def key(self) -> str:
        """Canonical string used for structural equality and hashing (includes var bounds)."""
        k: str | None = self.__dict__.get("_key")
        if k is None:
            k = self.__dict__["_key"] = self.render(_KEY_OPS)
        return k

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Node) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def render(self, ops: RenderOps | None = None, ctx: Any = None) -> Any:
        """Render with a table keyed by node type; each entry renders its own children."""
        table = PY_OPS if ops is None else ops
        return table[type(self)](self, table, ctx)

    def __str__(self) -> str:
        return str(self.render())

    __repr__ = __str__

    def children(self) -> list[Node]:
        """Direct sub-expressions (the `a` of unary nodes, the `nodes` of n-ary ones)."""
        a = self.__dict__.get("a")
        return [a] if a is not None else list(self.__dict__.get("nodes", []))

    def vars(self) -> set[Variable]:
        """Every Variable in the expression."""
        out: set[Variable] = set()
        for c in self.children():
            out |= c.vars()
        return out

    # ---- arithmetic ----
    def __add__(self, other: NodeLike) -> Node:
        return sum_nodes([self, other])

    def __radd__(self, other: NodeLike) -> Node:
        return sum_nodes([other, self])

    def __sub__(self, other: NodeLike) -> Node:
        return self + (-_node(other))

    def __rsub__(self, other: NodeLike) -> Node:
        return _node(other) + (-self)

    def __neg__(self) -> Node:
        return self._mul(-1)

    def __mul__(self, other: NodeLike) -> Node:
        if isinstance(other, Node) and not isinstance(other, NumNode):
            if isinstance(self, NumNode):
                return other._mul(self.b)
            raise TypeError(f"cannot multiply two non-constant nodes {self} and {other}")
        return self._mul(_const(other))

    __rmul__ = __mul__

    def __floordiv__(self, other: NodeLike) -> Node:
        b = _divisor(other)
        if b == 1:
            return self
        if self.min // b == self.max // b:  # floor is monotone: one block means a constant
            return NumNode(self.min // b)
        return self._div(b)

    def __mod__(self, other: NodeLike) -> Node:
        b = _divisor(other)
        if b == 1:
            return NumNode(0)
        if self.min // b == self.max // b:  # x % b == x - k*b with the constant block k
            return self - (self.min // b) * b
        return self._mod(b)

    def lt(self, b: NodeLike) -> Node:
        """1 if self < b else 0."""
        if isinstance(b, Node) and not isinstance(b, NumNode):
            return (self - b).lt(0)
        c = _const(b)
        if self.max < c:
            return NumNode(1)
        if self.min >= c:
            return NumNode(0)
        return self._lt(c)

    def ge(self, b: NodeLike) -> Node:
        """1 if self >= b else 0 (built as -self < 1 - b, so it stays an LtNode)."""
        if isinstance(b, Node) and not isinstance(b, NumNode):
            return (self - b).ge(0)
        return (-self).lt(1 - _const(b))

    # per-class rewrite hooks, called once constant/bounds shortcuts are exhausted
    def _mul(self, b: int) -> Node:
        if b == 0:
            return NumNode(0)
        return self if b == 1 else MulNode(self, b)

    def _div(self, b: int) -> Node:
        return DivNode(self, b)

    def _mod(self, b: int) -> Node:
        return ModNode(self, b)

    def _lt(self, b: int) -> Node:
        return LtNode(self, b)

    # ---- evaluation and substitution (render tables at the bottom of the module) ----
    def eval(self, env: dict[str, int]) -> int:
        """Value with variables taken from `env` (name -> int)."""
        value: int = self.render(_EVAL_OPS, env)
        return value

    def substitute(self, mapping: dict[Variable, NodeLike]) -> Node:
        """Replace variables (values must respect the replaced variables' bounds)."""
        node: Node = self.render(_SUBST_OPS, mapping)
        return node


class NumNode(Node):
    """An integer constant."""

    def __init__(self, b: int):
        self.b = operator.index(b)
        self.min = self.max = self.b

    def _mul(self, b: int) -> Node:
        return NumNode(self.b * b)


class Variable(Node):
    """A named integer in [min, max]; a single-valued range collapses to a NumNode."""

    # mypy wants __new__ to return the class; Variable("i", 3, 3) is NumNode(3) by design
    def __new__(cls, expr: str | None = None, min: int = 0,  # type: ignore[misc]
                max: int | None = None) -> Node:
        if max is not None and min == max:  # (copy/pickle call __new__ with no arguments)
            return NumNode(min)
        return super().__new__(cls)

    def __init__(self, expr: str, min: int, max: int):
        assert min <= max, f"empty range [{min}, {max}] for variable {expr}"
        self.expr, self.min, self.max = expr, operator.index(min), operator.index(max)

    def vars(self) -> set[Variable]:
        return {self}


class MulNode(Node):
    """a * b for an int b."""

    def __init__(self, a: Node, b: int):
        self.a, self.b = a, b
        lo, hi = a.min * b, a.max * b
        self.min, self.max = min(lo, hi), max(lo, hi)

    def _mul(self, b: int) -> Node:
        return self.a._mul(self.b * b)  # (a*b)*c -> a*(b*c)

    def _div(self, b: int) -> Node:
        g = math.gcd(self.b, b)  # (a*g*c)//(g*d) == (a*c)//d exactly
        return self.a._mul(self.b // g) // (b // g) if g > 1 else DivNode(self, b)

    def _mod(self, b: int) -> Node:
        if self.b % b == 0:
            return NumNode(0)
        if self.b > 0 and b % self.b == 0:  # (a*c) % (c*d) == (a % d) * c
            return (self.a % (b // self.b))._mul(self.b)
        return ModNode(self, b)

    def _lt(self, b: int) -> Node:
        if self.b > 0:  # a*c < b  <=>  a < ceil(b/c)
            return self.a.lt(_ceildiv(b, self.b))
        if self.b < -1:  # (-a)*k < b  <=>  -a < ceil(b/k)
            return self.a._mul(-1).lt(_ceildiv(b, -self.b))
        return LtNode(self, b)


class DivNode(Node):
    """Floor division a // b for an int b > 0."""

    def __init__(self, a: Node, b: int):
        assert b > 0, f"DivNode needs a positive divisor, got {b}"
        self.a, self.b = a, b
        self.min, self.max = a.min // b, a.max // b

    def _div(self, b: int) -> Node:
        return self.a // (self.b * b)  # floor(floor(x/a)/b) == floor(x/(a*b))

    def _lt(self, b: int) -> Node:
        return self.a.lt(b * self.b)  # floor(x/d) < b  <=>  x < b*d


class ModNode(Node):
    """Floor modulo a % b for an int b > 0 (result in [0, b))."""

    def __init__(self, a: Node, b: int):
        assert b > 0, f"ModNode needs a positive divisor, got {b}"
        self.a, self.b = a, b
        if a.min // b == a.max // b:
            self.min, self.max = a.min % b, a.max % b
        else:
            self.min, self.max = 0, b - 1

    def _mod(self, b: int) -> Node:
        return self.a % b if self.b % b == 0 else ModNode(self, b)  # (x % (k*b)) % b == x % b


class SumNode(Node):
    """Sum of terms; built by sum_nodes, which keeps at most one constant (last)."""

    def __init__(self, nodes: list[Node]):
        self.nodes = list(nodes)
        self.min, self.max = sum(n.min for n in nodes), sum(n.max for n in nodes)

    def _mul(self, b: int) -> Node:
        return sum_nodes([n._mul(b) for n in self.nodes]) if b not in (0, 1) else super()._mul(b)

    # floor division, modulo and comparison of sums: the index-math rewrites (sum_rules.py)
    def _div(self, b: int) -> Node:
        return sum_rules.div(self, b)

    def _mod(self, b: int) -> Node:
        return sum_rules.mod(self, b)

    def _lt(self, b: int) -> Node:
        return sum_rules.lt(self, b)


class LtNode(Node):
    """1 if a < b else 0, for an int b."""

    def __init__(self, a: Node, b: int):
        self.a, self.b = a, b
        self.min, self.max = int(a.max < b), int(a.min < b)


class AndNode(Node):
    """1 if every node is nonzero else 0."""

    def __init__(self, nodes: list[Node]):
        self.nodes = list(nodes)
        self.min = int(all(n.min > 0 or n.max < 0 for n in nodes))
        self.max = int(not any(n.min == n.max == 0 for n in nodes))


def sum_nodes(nodes: Iterable[NodeLike]) -> Node:
    """Sum with nested sums flattened, like terms combined and constants folded."""
    terms: dict[str, tuple[Node, int]] = {}  # base key -> (base, coefficient), first-seen order
    const = 0
    stack = [(_node(n), 1) for n in reversed(list(nodes))]
    while stack:
        n, mul = stack.pop()
        if isinstance(n, NumNode):
            const += n.b * mul
        elif isinstance(n, SumNode):
            stack.extend((c, mul) for c in reversed(n.nodes))
        elif isinstance(n, MulNode):
            stack.append((n.a, mul * n.b))
        else:  # a base term: like terms share a key
            k = n.key
            seen = terms.get(k)
            terms[k] = (n, mul) if seen is None else (seen[0], seen[1] + mul)
    out = [base._mul(c) for base, c in terms.values() if c != 0]
    if not out:
        return NumNode(const)
    if len(out) == 1 and const == 0:
        return out[0]
    return SumNode(out + ([NumNode(const)] if const else []))


def and_nodes(nodes: Iterable[NodeLike]) -> Node:
    """Logical AND: drops certainly-nonzero nodes, 0 if any node is 0, merges x<a and x<b."""
    flat: list[Node] = []
    for n in map(_node, nodes):
        flat.extend(n.nodes if isinstance(n, AndNode) else [n])
    out: dict[str, Node] = {}
    for n in flat:
        if n.min > 0 or n.max < 0:
            continue
        if n.min == n.max == 0:
            return NumNode(0)
        if isinstance(n, LtNode):  # x<a and x<b == x<min(a,b)
            k = "<" + n.a.key
            tighter = out.get(k)
            if not isinstance(tighter, LtNode) or n.b < tighter.b:
                out[k] = n
        else:
            out.setdefault(n.key, n)
    items = list(out.values())
    if not items:
        return NumNode(1)
    if len(items) == 1 and 0 <= items[0].min and items[0].max <= 1:
        return items[0]  # already 0/1 valued
    return AndNode(items)


def sym_infer(node: NodeLike, env: dict[str, int]) -> int:
    """Evaluate a node (or pass an int through) with variable values from `env`."""
    return node.eval(env) if isinstance(node, Node) else operator.index(node)


def _join(sep: str) -> Callable[[Any, RenderOps, Any], str]:
    """Render entry for n-ary nodes."""
    return lambda n, ops, ctx: "(" + sep.join(c.render(ops, ctx) for c in n.nodes) + ")"


PY_OPS: RenderOps = {
    NumNode: lambda n, ops, ctx: str(n.b),
    Variable: lambda n, ops, ctx: n.expr,
    MulNode: lambda n, ops, ctx: f"({n.a.render(ops, ctx)}*{n.b})",
    DivNode: lambda n, ops, ctx: f"({n.a.render(ops, ctx)}//{n.b})",
    ModNode: lambda n, ops, ctx: f"({n.a.render(ops, ctx)}%{n.b})",
    SumNode: _join("+"),
    LtNode: lambda n, ops, ctx: f"({n.a.render(ops, ctx)}<{n.b})",
    AndNode: _join(" and "),
}
# variables with the same name but different bounds are different nodes
_KEY_OPS: RenderOps = {**PY_OPS, Variable: lambda n, ops, ctx: f"{n.expr}[{n.min}:{n.max}]"}

_EVAL_OPS: RenderOps = {
    NumNode: lambda n, ops, env: n.b,
    Variable: lambda n, ops, env: env[n.expr],
    MulNode: lambda n, ops, env: n.a.render(ops, env) * n.b,
    DivNode: lambda n, ops, env: n.a.render(ops, env) // n.b,
    ModNode: lambda n, ops, env: n.a.render(ops, env) % n.b,
    SumNode: lambda n, ops, env: sum(c.render(ops, env) for c in n.nodes),
    LtNode: lambda n, ops, env: int(n.a.render(ops, env) < n.b),
    AndNode: lambda n, ops, env: int(all(c.render(ops, env) for c in n.nodes)),
}
# substitution rebuilds through the simplifying operators
_SUBST_OPS: RenderOps = {
    NumNode: lambda n, ops, m: n,
    Variable: lambda n, ops, m: _node(m[n]) if n in m else n,
    MulNode: lambda n, ops, m: n.a.render(ops, m) * n.b,
    DivNode: lambda n, ops, m: n.a.render(ops, m) // n.b,
    ModNode: lambda n, ops, m: n.a.render(ops, m) % n.b,
    SumNode: lambda n, ops, m: sum_nodes([c.render(ops, m) for c in n.nodes]),
    LtNode: lambda n, ops, m: n.a.render(ops, m).lt(n.b),
    AndNode: lambda n, ops, m: and_nodes([c.render(ops, m) for c in n.nodes]),
}


# the sum rewrites build nodes of every class above, so they are imported last
from codegen.shape import sum_rules  # noqa: E402
