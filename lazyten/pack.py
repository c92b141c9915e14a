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
or is small (under `_MIN_BYTES`; `_MIN_GATHERED` where l is not contiguous, as in a
transposed B, whose lanes would be gathered one by one). Walking r then reads P
contiguously, whatever the layout of the original (B, or a transposed B). The copy costs
one pass over B (about 2 ms for 1024 x 1024 floats); it pays for itself when B is
re-read by many tile rows. A transposed B whose row no panel divides gets its last
panel padded with zeros (300 columns: five panels of 64, D68); the kernel pads its row
to match (codegen/opt/tiling.py's `_pad_long_row`).
"""
from __future__ import annotations

from codegen.helpers import prod
from codegen.attention import is_attention_kernel
from codegen.kernel import is_row_kernel
from codegen.ops import BufferOps, LazyOp, LoadOps, MemBuffer, ReduceOps
from codegen.shape.shapetracker import ShapeTracker
from codegen.shape.view import View
from lazyten.lazy import LazyBuffer
from lazyten.schedule_item import ScheduleItem
from runtimes import get_runtime

_MIN_STRIDE = 256          # elements between consecutive reduce steps
_MIN_BYTES = 1 << 18       # smaller operands stay in cache anyway
_MIN_GATHERED = 1 << 14    # smaller operands not contiguous along the lanes are cheap to gather


def pack_schedule(items: list[ScheduleItem]) -> list[ScheduleItem]:
    """The schedule with pack kernels inserted before the kernels that benefit."""
    out = []
    for item in items:
        width = _pack_width(item)
        if width:
            item, pack_item = _pack(item, width)
            if pack_item is not None:
                out.append(pack_item)
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


def _pack(item: ScheduleItem, width: int) -> tuple[ScheduleItem, ScheduleItem | None]:
    """(kernel item reading the packed copy, the copy's item), or (item, None)."""
    ast = item.ast
    assert ast is not None, "_pack_width passes only kernel items"
    reduce = next(n for n in ast.walk() if isinstance(n.op, ReduceOps))
    full = next((n.arg.st.shape for n in reduce.walk() if n.op is BufferOps.LOAD), None)
    if full is None:
        return item, None
    out_view = ast.arg.st.views[-1]
    # the tile's vector lanes run along the axis the output is contiguous in
    lane_axis = next((i for i, (f, o, s) in enumerate(zip(full, out_view.shape,
                                                          out_view.strides))
                      if f == o and s == 1 and f > 1), None)
    if lane_axis is None or len(ast.arg.st.views) != 1:
        return item, None
    out_axes = [i for i, (f, o) in enumerate(zip(full, out_view.shape)) if f == o]
    if sum(full[i] > 1 for i in out_axes) < 2:  # no output axis to re-read an operand along
        return item, None
    uses: dict[int, int] = {}
    for n in ast.walk():
        if n.op is BufferOps.LOAD:
            uses[n.arg.idx] = uses.get(n.arg.idx, 0) + 1
    cached = get_runtime(item.out.device).renderer.target.cached_bytes
    for leaf in reduce.walk():
        if leaf.op is not BufferOps.LOAD or uses[leaf.arg.idx] != 1:
            continue
        found = _reduce_axis(leaf.arg, lane_axis, out_axes, width, cached)
        if found is None:
            continue
        red_axis, batch = found
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
        packed = LazyBuffer(src.device, ShapeTracker.from_shape(read.shape), src.dtype,
                            LoadOps.CONTIGUOUS, (src,))
        load = LazyOp(BufferOps.LOAD, (), MemBuffer(1, src.dtype, read))
        copy = LazyOp(BufferOps.STORE, (load,),
                      MemBuffer(0, src.dtype, ShapeTracker.from_shape(read.shape)))
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
        return ScheduleItem(new_ast, item.out, inputs), ScheduleItem(copy, packed, [src])
    return item, None


def _reduce_axis(buf: MemBuffer, lane_axis: int, out_axes: list[int], width: int,
                 cached: int) -> tuple[int, tuple[int, ...]] | None:
    """(the reduce axis, the batch axes) of a load worth packing, else None: it moves
    along `lane_axis`, one reduce axis, and output axes the panels are copied for (a
    batched matmul's batch: one set of panels per batch). A batch's operand that fits in
    `cached` bytes (the L1 cache) is re-read from there: packing it costs more than it
    saves (4x4x128x32 attention's k^T, 16 KB a head: 0.24 ms read in place, 0.30 packed)."""
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
    small = size < (_MIN_GATHERED if gathered else _MIN_BYTES)
    # a row no panel divides is padded with zeros only where it would be gathered:
    # contiguous lanes read in place as well (784 x 256: 0.50 ms in place, 0.52 + 0.03 packed)
    if friendly or lanes < width or (lanes % width and not gathered) or small or \
            (batch and panels <= cached):
        return None
    return red_axis, batch
