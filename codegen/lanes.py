"""How an index spreads across vector lanes: the linearizer asks whether a load's lanes
read contiguous memory (one vector load), a short span at constant offsets (one load and
a shuffle), or neither (a gather, lane by lane)."""
from __future__ import annotations

from codegen.shape.symbolic import Node, NumNode, SumNode, Variable, sum_nodes

MAX_WINDOW = 64              # widest span one vector load may read to gather its lanes
ROW_VECTORS = 4              # an output row up to this many vectors pads to whole ones (D57)
FULL = 0.75                  # lanes that fill at least this share of a register fill it
HALF = 0.5                   # half a register of lanes: as fast as full ones in a conv (D66)


def row_fill(size: int, lanes: int) -> float:
    """The share of vector lanes busy when an axis of `size` is walked in vectors of up to
    `lanes`: whole vectors where they divide it; a row up to ROW_VECTORS vectors padded to
    whole ones (D57: 28 -> 28/32); a row under one vector as one partial vector (14 ->
    14/16); else the widest power of two that divides it, in one register (8 -> 8/16)."""
    if lanes <= 1 or size % lanes == 0:
        return 1.0
    padded = size + -size % lanes
    if size <= padded <= ROW_VECTORS * lanes:
        return size / padded
    width = lanes
    while size % width:
        width //= 2
    return width / lanes


def lane_window(idx: Node, lane: Variable, lanes: int) -> tuple[Node, list[int]] | None:
    """(start, offset of each lane) when the lanes read at constant offsets within a short
    span: contiguous lanes, a stride-2 pool window, an upsampled gradient (k // 2), a
    flip."""
    start = _plus_lane(idx, lane)
    if start is not None:
        return start, list(range(lanes))
    at0 = idx.substitute({lane: 0})
    offsets = [0]
    for k in range(1, lanes):
        step = idx.substitute({lane: k}) - at0
        if not isinstance(step, NumNode):
            return None
        offsets.append(step.b)
    low = min(offsets)
    if max(offsets) - low >= MAX_WINDOW:
        return None
    return at0 + low, [k - low for k in offsets]


def _plus_lane(idx: Node, lane: Variable) -> Node | None:
    """`rest` when idx is `lane + rest` and rest does not depend on the lane (recognised
    without substituting), else None."""
    terms = idx.nodes if isinstance(idx, SumNode) else [idx]
    is_lane = [t is lane or t == lane for t in terms]
    rest = [t for t, own in zip(terms, is_lane) if not own]
    if sum(is_lane) != 1 or any(lane in t.vars() for t in rest):
        return None
    return sum_nodes(rest) if rest else NumNode(0)


def along_lanes(idx: Node, lane: Variable, lanes: int) -> Node | None:
    """idx at lane 0 if idx steps by exactly 1 per lane, else None."""
    window = lane_window(idx, lane, lanes)
    return window[0] if window is not None and window[1] == list(range(lanes)) else None


def live_along_lanes(idx: Node, valid: Node, lane: Variable, lanes: int) -> Node | None:
    """idx at lane 0 if every lane that may be valid reads idx(0) + lane, else None: the
    lanes a padded axis masks off may index anywhere (they are never read), as the lanes
    past a padded reduce's end do through a window view [D57]."""
    live = [k for k in range(lanes) if valid.substitute({lane: k}).max != 0]
    if not live:
        return None
    first = idx.substitute({lane: live[0]})
    for k in live[1:]:
        step = idx.substitute({lane: k}) - first
        if not isinstance(step, NumNode) or step.b != k - live[0]:
            return None
    return first - live[0]
