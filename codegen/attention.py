"""Attention kernels (D62): softmax(scores) @ v in one kernel, the scores never in memory.

The form. Every leaf views one index space F = rows + (keys J, depth D, width E); the
STORE views rows + (1, 1, E). The kernel stores, per row and column e,

    f(SUM_j(EXP(A_j - MAX_j(A)) * c * w_je))

where A_j is the score of key j (elementwise ops of leaves that ignore D and E, and of at
most one SUM over D of leaves that ignore E: q . k), c a product of row values (leaves
that ignore J and D, and SUM_j(EXP(A_j - MAX_j(A))), the softmax's normaliser), w_je a
product of reduce-free values that ignore D (v), and f elementwise ops of leaves that
ignore J and D. `attention_parts` recognises the form by this algebra alone (what an op
is, which axes a leaf moves along), not by how the user wrote it; anything else is not
an attention kernel.

The rewrite (online softmax). SUM_j(EXP(A_j - M) * w_j) with M = MAX_j(A) is the same
value whichever row constant M is, once divided by the same SUM_j(EXP(A_j - M)); so one
pass over the keys keeps a running max m, the running sum l of EXP(A_j - m) and the
running accumulator acc_e, and rescales both by EXP(m_old - m_new) when the max grows:

    for each row (threads split the rows):
        m = -inf, l = 0, acc[e] = 0
        for each block of W keys (vector lanes along the keys):
            s = SUM_d(q_d * k_jd) for the W keys      (inner loop over d)
            a = A(s); m_new = max(m, max over the block of a)
            corr = exp(m - m_new); p = exp(a - m_new)
            l = l * corr + p; acc[e] = acc[e] * corr + SUM over the block of p_j * w_je
        store f(acc[e] * c(l))

A max that is still -inf (every key so far masked) counts as 0 there, so a masked block
adds 0 and rescales nothing. Keys past J (the last, partial block) score -inf.
"""
from __future__ import annotations
from dataclasses import dataclass, field

from codegen.kernel import leaves
from codegen.ops import BinaryOps, BufferOps, LazyOp, MemBuffer, ReduceOps, UnaryOps

_MAX_WIDTH = 256  # E: accumulators per row (vectors of W) past this would spill


@dataclass
class AttentionParts:
    """The pieces of an attention kernel's AST (see the module docstring)."""
    rows: tuple[int, ...]
    keys: int
    depth: int
    width: int
    outer: LazyOp            # SUM_j(EXP(A - M) * c * w)
    exp: LazyOp              # EXP(A - MAX_j(A))
    score: LazyOp            # A
    inner: LazyOp | None     # SUM_d inside A
    row_factors: list[LazyOp] = field(default_factory=list)    # c
    value_factors: list[LazyOp] = field(default_factory=list)  # w


def _factors(node: LazyOp) -> list[LazyOp]:
    """The factors of a product tree."""
    if node.op is BinaryOps.MUL:
        return _factors(node.src[0]) + _factors(node.src[1])
    return [node]


def _above(node: LazyOp) -> tuple[list[LazyOp], list[LazyOp]]:
    """(leaves, reduces) of `node`'s expression, not looking under a reduce."""
    found, reduces, stack, seen = [], [], [node], set()
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if isinstance(n.op, ReduceOps):
            reduces.append(n)
        elif n.op in (BufferOps.LOAD, BufferOps.CONST):
            found.append(n)
        else:
            stack.extend(n.src)
    return found, reduces


def _ignores(leaf: LazyOp, axes: tuple[int, ...]) -> bool:
    """Does the leaf read the same element (and validity) along every axis in `axes`?"""
    strides = leaf.arg.st.real_strides()
    return all(strides[a] == 0 for a in axes)


def exp_minus_max(node: LazyOp, axes: tuple[int, ...]) -> LazyOp | None:
    """The MAX of EXP(A - MAX_axes(A)) (either order of the ADD), else None."""
    if node.op is not UnaryOps.EXP or node.src[0].op is not BinaryOps.ADD:
        return None
    for a, b in (node.src[0].src, node.src[0].src[::-1]):
        if b.op is UnaryOps.NEG and b.src[0].op is ReduceOps.MAX and \
                b.src[0].arg == axes and b.src[0].src[0] == a:
            return b.src[0]
    return None


def _exp_parts(node: LazyOp, axis: int) -> LazyOp | None:
    """A of EXP(A - MAX_axis(A)) (either order of the ADD), else None."""
    found = exp_minus_max(node, (axis,))
    return None if found is None else found.src[0]


def attention_parts(ast: LazyOp) -> AttentionParts | None:
    """The parts of an attention kernel, or None if `ast` is not one (the rule, D62)."""
    full = _index_space(ast)
    if full is None:
        return None
    n = len(full) - 3
    aj, ad, ae = n, n + 1, n + 2
    top_leaves, tops = _above(ast.src[0])
    if len(tops) != 1 or tops[0].op is not ReduceOps.SUM or tops[0].arg != (aj,) or \
            not all(_ignores(x, (aj, ad)) for x in top_leaves):
        return None
    outer = tops[0]
    exps = [f for f in _factors(outer.src[0]) if _exp_parts(f, aj) is not None]
    score = _exp_parts(exps[0], aj) if len(exps) == 1 else None
    if score is None:
        return None
    parts = AttentionParts(full[:n], full[aj], full[ad], full[ae], outer, exps[0], score, None)
    for f in _factors(outer.src[0]):
        if f is not parts.exp and not _sort_factor(parts, f, aj, ad):
            return None
    return parts if _score_ok(parts, aj, ad, ae) else None


def _index_space(ast: LazyOp) -> tuple[int, ...] | None:
    """rows + (J, D, E) if every leaf views it, the store views rows + (1, 1, E) of floats
    and nothing reads the output (the kernel keeps its sums there), else None."""
    if ast.op is not BufferOps.STORE or not isinstance(ast.arg, MemBuffer) or \
            not ast.arg.dtype.is_float:
        return None
    found = [n for n in leaves(ast) if n.op is not BufferOps.STORE]
    shapes = {n.arg.st.shape for n in found}
    if len(shapes) != 1 or any(n.op is BufferOps.LOAD and n.arg.idx == ast.arg.idx for n in found):
        return None
    full: tuple[int, ...] = shapes.pop()
    n = len(full) - 3
    if n < 0 or ast.arg.st.shape != full[:n] + (1, 1, full[-1]) or full[-1] > _MAX_WIDTH:
        return None
    return full


def _sort_factor(parts: AttentionParts, f: LazyOp, aj: int, ad: int) -> bool:
    """File a factor of the outer sum as a value (w) or a row value (c); False if neither."""
    found, reduces = _above(f)
    if not reduces:
        if all(_ignores(x, (ad,)) for x in found):
            parts.value_factors.append(f)
            return True
        return False
    if all(r.op is ReduceOps.SUM and r.arg == (aj,) and r.src[0] == parts.exp
           for r in reduces) and all(_ignores(x, (aj, ad)) for x in found):
        parts.row_factors.append(f)
        return True
    return False


def _score_ok(parts: AttentionParts, aj: int, ad: int, ae: int) -> bool:
    """A ignores E; it holds at most one reduce, a SUM over D of reduce-free values that
    ignore E; outside that sum it ignores D. Scores are floats."""
    found, reduces = _above(parts.score)
    if len(reduces) > 1 or not all(_ignores(x, (ad, ae)) for x in found):
        return False
    if reduces:
        inner = reduces[0]
        under, deeper = _above(inner.src[0])
        if inner.op is not ReduceOps.SUM or inner.arg != (ad,) or deeper or \
                not all(_ignores(x, (ae,)) for x in under):
            return False
        parts.inner = inner
    elif parts.depth != 1:
        return False
    return True


def is_attention_kernel(ast: LazyOp) -> bool:
    return attention_parts(ast) is not None
