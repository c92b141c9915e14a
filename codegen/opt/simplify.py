"""Shape simplification: fewer, longer loops. Every target runs it."""
from __future__ import annotations

from codegen.kernel import Kernel, Opt, OptOps
from codegen.target import Target


def simplify(k: Kernel, target: Target) -> list[Opt]:
    """Drop the size-1 axes, then merge neighbours of the same kind (both global or both
    reduce) from the innermost out, wherever every tracker walks the pair as one axis."""
    t, opts = k.copy(), []
    squeeze = Opt(OptOps.SQUEEZE, why="size-1 axes are no loops")
    if 1 in t.full_shape and t.can_apply(squeeze):
        t.apply(squeeze)
        opts.append(squeeze)
    for i in reversed(range(len(t.full_shape) - 1)):
        merge = Opt(OptOps.MERGE, i, why="every view walks the two axes as one")
        if t.can_apply(merge):
            t.apply(merge)
            opts.append(merge)
    return opts
