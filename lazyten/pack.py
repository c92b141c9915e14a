"""Packing: copy a reduce's strided operand into panels before the kernel reads it.

A tiled CPU matmul (see codegen/opt/tiling.py's `tile`) computes a tile of outputs 64 columns
wide and walks the reduce axis. Its right-hand operand B[k, j] is read as 64 contiguous
floats per k, but consecutive k are a whole row apart: every step of the reduce touches
a new page, hardware prefetchers do not follow, and rows a power of two apart fight for
the same cache sets. BLAS libraries pack B first; so does this pass.

Rule (for devices whose target asks for it with `Target.pack`, the CPU): in a
kernel with a reduce, a load that reads one buffer through a single unmasked view that
depends on the axis `l` the output is contiguous in (the tile's vector lanes), one
reduce axis `r` and maybe batch axes `b` (output axes: a batched matmul's, attention's
batch and heads), and is re-read along another output axis (a matmul's B does not
depend on the row), is replaced by a read of a packed copy
P[b..., l // W, r, l % W] (W = the pack width), made by one extra copy kernel scheduled just
before, unless it already reads well (stride 1 along l and under `_MIN_STRIDE` along r)
or is small (fits the L2 cache, `Target.l2_bytes`: it is re-read from there as fast as
from panels, D107; `_MIN_GATHERED` where l is not contiguous, as in a
transposed B, whose lanes would be gathered one by one). Walking r then reads P
contiguously, whatever the layout of the original (B, or a transposed B). The copy costs
one pass over B (about 2 ms for 1024 x 1024 floats); it pays for itself when B is
re-read by many tile rows. A transposed B whose row no panel divides gets its last
panel padded with zeros (300 columns: five panels of 64, D68); the kernel pads its row
to match (codegen/opt/tiling.py's `_pad_long_row`).

Not where the kernel can read B in place as dot products (every walked input contiguous
along a long reduce: x @ W.T, Linear's forward) and re-reads it for fewer than
`_DOT_ROWS` output rows: there the copy costs more than it saves (D82).

The same copy serves the left operand where it is contiguous along the output's rows and
strided along the reduce (a weight gradient's dy^T, D73): P[b..., i // 8, r, i % 8], so
the tile's row broadcasts of one reduce step are adjacent. A batch of reduce axes that
merge into one ((batch, tokens) of Linear's weight gradient) is merged first.
"""
from __future__ import annotations
from dataclasses import replace

from codegen.helpers import prod
from codegen.attention import is_attention_kernel
from codegen.kernel import Kernel, is_row_kernel
from codegen.opt.reduce_rows import dot_products
from codegen.ops import BufferOps, ConstBuffer, LazyOp, LoadOps, MemBuffer, ReduceOps
from codegen.shape.shapetracker import ShapeTracker
from codegen.shape.view import View
from codegen.target import Target
from lazyten.lazy import LazyBuffer
from lazyten.schedule_item import ScheduleItem
from runtimes import get_runtime

_MIN_STRIDE = 256          # elements between consecutive reduce steps
_MIN_BYTES = 1 << 18       # smaller operands stay in cache anyway (or the L2's size, if larger)
_MIN_GATHERED = 1 << 14    # smaller operands not contiguous along the lanes are cheap to gather
_L2_ROWS = 64              # output rows that re-read an operand past half the L2 (D130)
_ROW_PANEL = 8             # rows of a transposed A's panels
# an operand the tile can read in place as dot products (codegen/opt/reduce_rows.py's
# `dot_products`) is packed only when re-read for this many output rows or more: end to
# end on AVX2 (pack + kernel against the dot-product kernel), 32 x 300 x 300 0.22 ->
# 0.14 ms, 64 x 512 x 512 0.47 -> 0.28, 128 x 300 x 300 0.27 -> 0.24; from 256 rows the
# panels win (256 x 128 x 384 0.25 packed, 0.30 in place; 1024 x 128 x 512 0.95, 1.54)
_DOT_ROWS = 256


# the panels made so far in one schedule, by the value they copy and how they read it
Made = dict[tuple[LazyBuffer, ShapeTracker], LazyBuffer]


def pack_schedule(items: list[ScheduleItem]) -> list[ScheduleItem]:
    """The schedule with pack kernels inserted before the kernels that benefit. Kernels
    that pack the same value the same way share one copy (an RNN's weight, read by every
    time step's matmul, is copied once a step, not once a time step): a LazyBuffer is a
    value that never changes, and the copy comes before the first kernel that reads it."""
    out: list[ScheduleItem] = []
    made: Made = {}
    for item in items:
        width = _pack_width(item)
        while width:  # B's panels, then a transposed A's (a packed leaf is not packed again)
            packed = _pack(item, width, made)
            if packed is None:
                break
            item, copies = packed
            out.extend(copies)
        out.append(item)
    return out


def _pack_width(item: ScheduleItem) -> int:
    if item.ast is None or \
            all(prod(b.shape) * b.dtype.itemsize < _MIN_GATHERED for b in item.inputs):
        return 0
    width = get_runtime(item.out.device).renderer.target.pack
    if not width or not any(isinstance(n.op, ReduceOps) for n in item.ast.walk()) or \
            is_row_kernel(item.ast) or is_attention_kernel(item.ast):  # they walk rows
        return 0
    return width


def _pack(item: ScheduleItem, width: int,
          made: Made) -> tuple[ScheduleItem, list[ScheduleItem]] | None:
    """(kernel item reading a packed copy, the copy's item unless `made` has the copy
    already), or None where no operand is packed."""
    assert item.ast is not None, "_pack_width passes only kernel items"
    ast = _merged_reduce(item.ast)
    reduce = next(n for n in ast.walk() if isinstance(n.op, ReduceOps))
    full = next((n.arg.st.shape for n in reduce.walk() if n.op is BufferOps.LOAD), None)
    if full is None:
        return None
    out_view = ast.arg.st.views[-1]
    # the tile's vector lanes run along the axis the output is contiguous in
    lane_axis = next((i for i, (f, o, s) in enumerate(zip(full, out_view.shape,
                                                          out_view.strides))
                      if f == o and s == 1 and f > 1), None)
    if lane_axis is None or len(ast.arg.st.views) != 1:
        return None
    out_axes = [i for i, (f, o) in enumerate(zip(full, out_view.shape)) if f == o]
    if sum(full[i] > 1 for i in out_axes) < 2:  # no output axis to re-read an operand along
        return None
    uses: dict[int, int] = {}
    for n in ast.walk():
        if n.op is BufferOps.LOAD:
            uses[n.arg.idx] = uses.get(n.arg.idx, 0) + 1
    target = get_runtime(item.out.device).renderer.target
    dots = dot_products(Kernel(ast), target)  # the tile's own rule
    for leaf in reduce.walk():
        if leaf.op is not BufferOps.LOAD or uses[leaf.arg.idx] != 1:
            continue
        if dots and _rereads(leaf.arg, out_axes) < _DOT_ROWS:
            continue  # the tile reads it in place as dot products
        for axis, panel in [(lane_axis, width)] + [(a, _ROW_PANEL) for a in out_axes
                                                   if a != lane_axis and full[a] > 1]:
            if axis != lane_axis and leaf.arg.st.real_strides()[axis] != 1:
                continue  # rows are packed only where they are contiguous (a transposed A)
            found = _reduce_axis(leaf.arg, axis, out_axes, panel, target)
            if found is not None:
                return _packed(item, ast, leaf, full, axis, panel, *found, made)
    return None


def _packed(item: ScheduleItem, ast: LazyOp, leaf: LazyOp, full: tuple[int, ...], lane_axis: int,
            width: int, red_axis: int, batch: tuple[int, ...],
            made: Made) -> tuple[ScheduleItem, list[ScheduleItem]]:
    """The kernel item (`ast`, reading `leaf` from panels `width` wide along `lane_axis`),
    and the item of the copy that makes them (none if `made` has them)."""
    src = item.inputs[leaf.arg.idx - 1]
    view = leaf.arg.st.views[0]
    lanes, steps = full[lane_axis], full[red_axis]
    bshape = tuple(full[b] for b in batch)
    nb = len(batch)
    # the copy: P[b..., l // W, r, l % W] = src[offset + b.. + r * stride_r + l * stride_l],
    # 0 in the last panel past the row's end
    plane = View.create((*bshape, steps, lanes), (*(view.strides[b] for b in batch),
                        view.strides[red_axis], view.strides[lane_axis]), view.offset)
    padded = lanes + -lanes % width
    swap = (*range(nb), nb + 1, nb, nb + 2)  # (steps, panels) <-> (panels, steps)
    read = ShapeTracker((plane,)).pad(((0, 0),) * (nb + 1) + ((0, padded - lanes),)) \
        .reshape((*bshape, steps, padded // width, width)).permute(swap)
    copies: list[ScheduleItem] = []
    packed = made.get((src, read))
    if packed is None:
        packed = made[(src, read)] = LazyBuffer(src.device, ShapeTracker.from_shape(read.shape),
                                                src.dtype, LoadOps.CONTIGUOUS, (src,))
        load = LazyOp(BufferOps.LOAD, (), MemBuffer(1, src.dtype, read))
        copy = LazyOp(BufferOps.STORE, (load,),
                      MemBuffer(0, src.dtype, ShapeTracker.from_shape(read.shape)))
        copies.append(ScheduleItem(copy, packed, [src]))
    # the kernel reads P back in its own index space: (batch..., r, l), in full's order
    st = ShapeTracker.from_shape(read.shape).permute(swap).reshape((*bshape, steps, padded))
    st = st.shrink(tuple((0, s) for s in (*bshape, steps, lanes)))
    axes = [*batch, red_axis, lane_axis]
    st = st.permute(tuple(sorted(range(len(axes)), key=lambda i: axes[i])))
    shape = [1] * len(full)
    for a in axes:
        shape[a] = full[a]
    st = st.reshape(tuple(shape)).expand(full)
    new_leaf = MemBuffer(leaf.arg.idx, leaf.arg.dtype, st)
    inputs = list(item.inputs)
    inputs[leaf.arg.idx - 1] = packed
    new_ast = ast.replace(leaf, LazyOp(BufferOps.LOAD, (), new_leaf))
    return ScheduleItem(new_ast, item.out, inputs), copies


def _rereads(buf: MemBuffer, out_axes: list[int]) -> int:
    """How many times the kernel reads `buf` whole: the output positions it ignores."""
    strides = buf.st.real_strides()
    return prod(buf.st.shape[i] for i in out_axes if strides[i] == 0)


def _merged_reduce(ast: LazyOp) -> LazyOp:
    """`ast` with its reduce's adjacent axes merged into one where every view walks them
    as one (a batch and its tokens: a weight gradient's (16, 64) as 1024), so a packed
    panel has one reduce axis to follow; `ast` itself where they do not merge."""
    reduce = next(n for n in ast.walk() if isinstance(n.op, ReduceOps))
    axes = reduce.arg
    if len(axes) < 2 or tuple(axes) != tuple(range(axes[0], axes[0] + len(axes))):
        return ast
    full = next((n.arg.st.shape for n in reduce.walk() if n.op is BufferOps.LOAD), None)
    if full is None:
        return ast
    first, last = axes[0], axes[-1] + 1
    out = full[:first] + (1,) * len(axes) + full[last:]
    shapes = {full: full[:first] + (prod(full[first:last]),) + full[last:],
              out: out[:first] + (1,) + out[last:]}
    done: dict[int, LazyOp] = {}
    for node in ast.walk():
        arg = node.arg
        if isinstance(arg, (MemBuffer, ConstBuffer)):
            if arg.st.shape not in shapes:
                return ast
            st = arg.st.reshape(shapes[arg.st.shape])
            if len(st.views) != len(arg.st.views):
                return ast
            arg = replace(arg, st=st)
        elif node is reduce:
            arg = (first,)
        done[id(node)] = LazyOp(node.op, tuple(done[id(s)] for s in node.src), arg)
    return done[id(ast)]


def _reduce_axis(buf: MemBuffer, lane_axis: int, out_axes: list[int], width: int,
                 target: Target) -> tuple[int, tuple[int, ...]] | None:
    """(the reduce axis, the batch axes) of a load worth packing, else None: it moves
    along `lane_axis`, one reduce axis, and output axes the panels are copied for (a
    batched matmul's batch: one set of panels per batch). A batch's operand with
    contiguous lanes that fits in `target.cached_bytes` (the L1 cache) is re-read from
    there: packing it costs more than it saves. One whose lanes would be gathered
    (attention's k^T, its lanes the rows of k) is packed however small a batch's share:
    in place, each step of the reduce builds its vector a lane at a time (16 loads and
    inserts for 16 FMAs on AVX-512), and at 100 keys the tile took 4 lanes at a time
    (D103); 4x4x128x32's q @ k^T on one thread: 204 us in place, 7 + 107 packed (D141)."""
    if len(buf.st.views) != 1 or buf.st.views[0].mask is not None:
        return None
    view = buf.st.views[0]
    moving = [i for i, s in enumerate(view.strides) if s != 0]
    if lane_axis not in moving:
        return None
    # it pays only when the operand is re-read: the kernel has an output axis it ignores
    if not any(view.strides[i] == 0 and view.shape[i] > 1 for i in out_axes):
        return None
    reduce = [i for i in moving if i not in out_axes]
    batch = tuple(i for i in moving if i in out_axes and i != lane_axis)
    if len(reduce) != 1:  # two output axes and no reduce: a broadcast operand, no panel
        return None
    red_axis = reduce[0]
    lanes, steps = view.shape[lane_axis], view.shape[red_axis]
    friendly = view.strides[lane_axis] == 1 and abs(view.strides[red_axis]) < _MIN_STRIDE
    panels = lanes * steps * buf.dtype.itemsize
    size = panels * prod(view.shape[b] for b in batch)
    gathered = view.strides[lane_axis] != 1
    small = size < _MIN_GATHERED if gathered else _read_in_place(size, view, out_axes, target)
    # a row no panel divides is padded with zeros only where it would be gathered:
    # contiguous lanes read in place as well (784 x 256: 0.50 ms in place, 0.52 + 0.03 packed)
    if friendly or lanes < width or (lanes % width and not gathered) or small or \
            (batch and panels <= target.cached_bytes and not gathered):
        return None
    return red_axis, batch


def _read_in_place(size: int, view: View, out_axes: list[int], target: Target) -> bool:
    """Whether an operand of `size` bytes with contiguous lanes, seen through `view`, is
    read in place (`out_axes`: the kernel's output axes; those the view ignores are the
    output rows that read it again): contiguous lanes read from the L2 as fast as from
    panels, so packing an operand that fits there only adds its copy (D107: 32 x 256 x
    256 50 -> 30 us, 128 x 512 x 512 337 -> 307, a weight gradient 256 x 1024 x 256 710 ->
    616); a larger one pays where its rows are far apart (256 x 2048 x 2048: 10.8 ms
    packed, 12.9 in place), and so does one past half the L2 that 64 output rows or more
    read again (D130: 128 x 1024 x 512 830 -> 533 us, a weight gradient 879 -> 588)."""
    rows = prod(view.shape[i] for i in out_axes if view.strides[i] == 0)
    return size <= max(_MIN_BYTES, target.l2_bytes // 2) or \
        (size <= target.l2_bytes and rows < _L2_ROWS)
