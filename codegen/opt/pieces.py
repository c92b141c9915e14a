"""CPU pass for a join computed in place (a `cat` of computed pieces, D117, D145): its
pieces side by side in one iteration, where they share the work they recompute (D149).

A stored join's loop is otherwise cut where its pieces' gates switch (codegen/peel.py
`mask_plan`, D122), and each segment computes its own piece: what two pieces both read
through their own graphs is computed once per piece. An LSTM step's gate gradients are
four pieces of one (N, 4H) join, each recomputing the step's gates and cell from the
pre-activations: 18 exps an element of the state in the four segments, where one
iteration over all four needs 7. Where the gates switch at every multiple of one period
P along an axis of n * P (n pieces of P, each with its own gates), that axis is split
into the n pieces as upcast copies, P apart (STRIDE_UPCAST): in each copy every gate
folds to true or false (its piece's position is a number), and the copies' common values
are one uop each (the uop graph's CSE), so the iteration computes each shared value once
for all n pieces. Pieces that share nothing cost what their segments did (one loop of P
with n loads and stores an iteration instead of n loops), so the rule does not try to
tell them apart.
"""
from __future__ import annotations

from codegen.kernel import Kernel, Opt, OptOps
from codegen.peel import read_terms, switches
from codegen.shape.symbolic import Node, NumNode, Variable
from codegen.target import Target

PIECES_MAX = 8   # most pieces a join's axis is split into (each a copy of the body)
PIECE_MIN = 8    # the narrowest piece along the innermost axis: its loop is still a vector's


def interleave_pieces(k: Kernel, target: Target) -> list[Opt]:
    """STRIDE_UPCAST of the axis along which an elementwise kernel's read gates switch at
    every multiple of one period, 2 to PIECES_MAX pieces of PIECE_MIN or more."""
    if not _gated(k, target):
        return []
    gidx: list[Node] = [Variable(f"gidx{i}", 0, s - 1) if s > 1 else NumNode(0)
                        for i, s in enumerate(k.global_shape)]
    terms = read_terms(k, gidx, None, [()])
    for axis, var in enumerate(gidx):
        if not isinstance(var, Variable):
            continue  # (a loop of one)
        mine = [t for t in terms if var.expr in {v.expr for v in t.vars()}]
        pieces = _pieces(mine, var, k.global_shape[axis], axis == len(gidx) - 1) if mine else None
        if pieces is not None:
            opt = Opt(OptOps.STRIDE_UPCAST, axis, pieces, f"{pieces} pieces of "
                      f"{k.global_shape[axis] // pieces}, side by side: their shared work once")
            return [opt] if k.can_apply(opt) else []
    return []


def _gated(k: Kernel, target: Target) -> bool:
    """An elementwise CPU kernel, not yet upcast, with a leaf read through a mask."""
    if k.reduceop is not None or k.rows or k.group or k.upcasts or target.gpu:
        return False
    return any(v.mask is not None for st in k.sts.values() for v in st.views)


def _pieces(terms: list[Node], var: Variable, size: int, inner: bool) -> int | None:
    """How many pieces of one width the gates `terms` cut the loop of `var` into, each
    with its own gates; None where they cut it otherwise (a switch inside an iteration,
    uneven pieces, more than PIECES_MAX, or pieces narrower than PIECE_MIN along the
    innermost axis: a piece of rows keeps its rows' inner loops)."""
    runs = switches(terms, var, 0, size)
    if not 2 <= len(runs) <= PIECES_MAX or any(values is None for _, _, values in runs):
        return None
    period = size // len(runs)
    if any(hi - lo != period for lo, hi, _ in runs) or (inner and period < PIECE_MIN):
        return None
    return len(runs)
