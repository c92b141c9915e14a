"""A schedule pass: bases that compute the same thing from the same sources become one.

Two unrealized bases with the same op, argument, dtype, shape and device over the same
sources, each read through the same view, hold the same values; the scheduler would
compute both (each inlined into its readers, or each stored). They arise where a traced
Function's gradients are rebuilt (lazyten/traced_graph.py): a gradient that is also an
intermediate value of another gradient (an LSTM step's gradient of its gate inputs, read
by the step's input gradient and by the hidden state's) is rebuilt as the gradient's node
and again inside the other's graph, and an LSTM's backward computed it three times.
Here, sources first, each base gets the class of its key (its sources named by their
classes), and every reader of a class's member reads the class's representative instead:
an output if the class has one (the caller holds it), else the first member met. Members
that are outputs stay what they are; every other member is then read by nothing.

The rewrite lasts while the schedule is made: `merge_duplicates` returns what it changed
and `restore` puts it back (a base the schedule leaves unrealized, such as a pending
update's source, keeps the graph it was built with, and so the schedule-cache key it
had: eager code repeated finds its schedule at once).

Left alone: load ops other than constants (a copy, a write in place, an allocation),
bases with index checks or their flags, and arguments that cannot be hashed. A traced
forward's node and the values inside it (D80's `saved` and `origin`) may be merged:
what is not computed is not saved, and a later backward computes it again, as it does
any value not saved. Ops are deterministic (random numbers are a function of their
inputs), so a merged graph computes what the graph as built does.
"""
from __future__ import annotations

from codegen.ops import LoadOps
from lazyten.lazy import LazyBuffer


Changes = list[tuple[LazyBuffer, tuple[LazyBuffer, ...]]]


def merge_duplicates(outs: list[LazyBuffer]) -> Changes:
    """Rewrite the unrealized graph below `outs` so that equal bases are read as one; the
    bases whose sources changed, with the sources they had."""
    order = sources_first(outs)
    if len(order) < 2:
        return []
    keep = {id(o.base) for o in outs}
    classes: dict[int, int] = {}          # id(base) -> its class
    keys: dict[tuple, int] = {}           # key -> class
    members: dict[int, list[LazyBuffer]] = {}
    for base in order:
        key = _key(base, classes)
        try:
            cls = keys.setdefault(key, len(keys)) if key is not None else -len(classes) - 1
        except TypeError:  # an argument that cannot be hashed: a class of its own
            cls = -len(classes) - 1
        classes[id(base)] = cls
        members.setdefault(cls, []).append(base)
    rep: dict[int, LazyBuffer] = {}  # id(member) -> the base its readers read instead
    for group in members.values():
        if len(group) < 2:
            continue
        first = next((b for b in group if id(b) in keep), group[0])
        for b in group:
            if b is not first:
                rep[id(b)] = first
    changes: Changes = []
    if not rep:
        return changes
    for base in order:
        srcs = tuple([_read(src, rep) for src in base.src])
        if any(new is not old for new, old in zip(srcs, base.src)):
            changes.append((base, base.src))
            base.src = srcs
    return changes


def restore(changes: Changes) -> None:
    """The sources `merge_duplicates` changed, back as they were (a base realized since
    has no graph left to restore)."""
    for base, srcs in changes:
        if base.realized is None:
            base.src = srcs


def _read(src: LazyBuffer, rep: dict[int, LazyBuffer]) -> LazyBuffer:
    """`src` (a base or a view of one) over its base's representative."""
    to = rep.get(id(src.base))
    if to is None:
        return src
    return to if src._base is None else to._view(src.st)


def _key(base: LazyBuffer, classes: dict[int, int]) -> tuple | None:
    """What `base` computes, its sources named by class; None where it must stay apart
    (a key whose argument cannot be hashed stays apart where it is looked up)."""
    if isinstance(base.op, LoadOps) and base.op is not LoadOps.CONST or base.checks or \
            base.index_check is not None:
        return None
    srcs = []
    for src in base.src:
        view = src._base
        of = src if view is None else view
        cls = classes.get(id(of)) if of.realized is None else id(of)
        if cls is None:
            return None
        srcs.append((of.realized is not None, cls, None if view is None else src.st))
    arg = base.arg
    return (base.op, repr(arg) if type(arg) is float else arg,  # -0.0 is not 0.0
            base.dtype, base.st, base.device, tuple(srcs))


def sources_first(outs: list[LazyBuffer]) -> list[LazyBuffer]:
    """The unrealized bases below `outs`, each after its sources (and index-check flags)."""
    order: list[LazyBuffer] = []
    seen: set[int] = set()
    stack: list[tuple[LazyBuffer, bool]] = [(o.base, False) for o in outs]
    while stack:  # iterative: graphs from long training loops get deep
        base, done = stack.pop()
        if done:
            order.append(base)
            continue
        if id(base) in seen or base.realized is not None:
            continue
        seen.add(id(base))
        stack.append((base, True))
        stack.extend((src.base, False) for src in base.src)
        stack.extend((flag, False) for flag in base.checks)
    return order
