"""Rewrites of floor division, modulo and `<` on sums: where index math gets simple.

A sum's terms are base*coefficient plus one constant. Terms whose coefficient is a
multiple of the divisor leave a floor division exactly; a common factor divides out; a
coefficient larger than the divisor splits into a multiple plus a remainder; and a group
of small terms that provably never carries past a factor of the divisor drops out. Each
rewrite is exact for every value within the variables' bounds (see symbolic.py's
contract); when none applies, a DivNode/ModNode/LtNode keeps the sum as it is.
"""
from __future__ import annotations
import math

from codegen.shape.symbolic import (DivNode, LtNode, ModNode, MulNode, Node, NumNode, SumNode,
                                    sum_nodes)


def _coef(t: Node) -> int:
    """Coefficient of a sum term (terms are base*coef or a bare base)."""
    return t.b if isinstance(t, MulNode) else 1


def _divide_coef(t: Node, g: int) -> Node:
    """A sum term with its coefficient divided by g, which must divide it exactly."""
    if isinstance(t, MulNode):
        return t.a._mul(t.b // g)
    assert g == 1, f"{g} does not divide the coefficient 1 of {t}"
    return t


def _split_const(nodes: list[Node]) -> tuple[list[Node], int]:
    """Separate the non-constant terms of a sum from its constant."""
    return [t for t in nodes if not isinstance(t, NumNode)], \
        sum(t.b for t in nodes if isinstance(t, NumNode))


def _wrap_coefs(nodes: list[Node], b: int) -> list[Node]:
    """Split each term c*x with c > b into (c - c%b)*x + (c%b)*x: the first part is a
    multiple of b (it leaves a floor division or vanishes in a mod), the second may now
    be small enough never to carry. Window views need this: 29*kx over 28 is kx + 28*kx."""
    out: list[Node] = []
    for t in nodes:
        c = _coef(t)
        if isinstance(t, MulNode) and c > b and c % b:
            out += [t.a._mul(c - c % b), t.a._mul(c % b)]
        else:
            out.append(t)
    return out


def _bounded_split(terms: list[Node], const: int,
                   b: int) -> tuple[int, list[Node], list[Node]] | None:
    """(g, big, small) with g a proper factor of b, every big term's coefficient a
    multiple of g, and the small terms plus const within [0, g); else None. Then
    floor((g*Y + s) / b) == floor(Y / (b/g)) and (g*Y + s) % b == g*(Y % (b/g)) + s."""
    for g in sorted({math.gcd(b, _coef(t)) for t in terms}, reverse=True):
        if g in (1, b):
            continue
        big = [t for t in terms if _coef(t) % g == 0]
        small = [t for t in terms if _coef(t) % g != 0]
        if const + sum(t.min for t in small) >= 0 and const + sum(t.max for t in small) < g:
            return g, big, small
    return None


def div(node: SumNode, b: int) -> Node:
    """floor(sum / b)."""
    terms, const = _split_const(_wrap_coefs(node.nodes, b))
    # terms whose coefficient is a multiple of b leave the floor exactly:
    # floor((k*b + r)/b) == k + floor(r/b) for any integers k, r
    quot = [_divide_coef(t, b) for t in terms if _coef(t) % b == 0]
    rest = [t for t in terms if _coef(t) % b != 0]
    qconst, rconst = const // b, const % b
    split = _bounded_split(rest, rconst, b)
    if split is not None:  # the small terms never carry into the quotient
        g, big, _ = split
        high = sum_nodes([_divide_coef(t, g) for t in big])
        return sum_nodes(quot + [qconst]) + high // (b // g)
    g = math.gcd(b, rconst, *(_coef(t) for t in rest))
    if g > 1:  # floor(g*y / (g*d)) == floor(y/d)
        rest_node = sum_nodes([_divide_coef(t, g) for t in rest] + [rconst // g])
        return sum_nodes(quot + [qconst]) + rest_node // (b // g)
    if not quot and qconst == 0:
        return DivNode(node, b)
    return sum_nodes(quot + [qconst]) + sum_nodes(rest + [rconst]) // b


def mod(node: SumNode, b: int) -> Node:
    """sum mod b (floor semantics)."""
    terms, const = _split_const(_wrap_coefs(node.nodes, b))
    rest = [t for t in terms if _coef(t) % b != 0]  # multiples of b vanish mod b
    split = _bounded_split(rest, const % b, b)
    if split is not None:
        g, big, small = split
        high = sum_nodes([_divide_coef(t, g) for t in big]) % (b // g)
        return high._mul(g) + sum_nodes(small + [const % b])
    g = math.gcd(b, const % b, *(_coef(t) for t in rest))
    if g > 1:  # (g*y) % (g*d) == g * (y % d)
        inner = sum_nodes([_divide_coef(t, g) for t in rest] + [(const % b) // g])
        return (inner % (b // g))._mul(g)
    if len(rest) == len(terms) and const == const % b:
        return ModNode(node, b)
    return sum_nodes(rest + [const % b]) % b


def lt(node: SumNode, b: int) -> Node:
    """1 if sum < b else 0."""
    terms, const = _split_const(node.nodes)
    if const:
        return sum_nodes(terms).lt(b - const)
    for g in _common_factors(terms):
        divided = _lt_divided(terms, g, b)
        if divided is not None:
            return divided
    return LtNode(node, b)


def _common_factors(terms: list[Node]) -> list[int]:
    """Factors worth dividing a comparison by, largest first: every coefficient's magnitude
    above 1, and the gcd of all of them when that is above 1."""
    coefs = [_coef(t) for t in terms]
    cands = {abs(c) for c in coefs if abs(c) > 1} | {math.gcd(*coefs)}
    return sorted((g for g in cands if g > 1), reverse=True)


def _lt_divided(terms: list[Node], g: int, b: int) -> Node | None:
    """sum(terms) < b as y < k, where the terms with coefficients divisible by g sum to g*y and
    the rest sum to r: g*y + r < b  <=>  y < ceil((b - r)/g), exact when that bound is the same
    over r's whole range. None when it is not, or when no term is a multiple of g."""
    big = [t for t in terms if _coef(t) % g == 0]
    small = [t for t in terms if _coef(t) % g != 0]
    if not big:
        return None
    rmin, rmax = sum(t.min for t in small), sum(t.max for t in small)
    if (rmin - b) // g != (rmax - b) // g:
        return None
    return sum_nodes([_divide_coef(t, g) for t in big]).lt(-((rmin - b) // g))
