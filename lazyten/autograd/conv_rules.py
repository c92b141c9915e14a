"""Which layout a conv takes on a device: the rules conv.py's forward and weight gradient
ask (pure decisions on shapes and the target, no graph built here). Each names the
decision record that measured it; conv.py builds what they choose.
"""
from __future__ import annotations

from codegen.helpers import prod
from codegen.lanes import FULL, HALF, row_fill
from codegen.target import Target
from runtimes import get_runtime


def unfolds_row_taps(device: str, shape: tuple, weight, spec) -> bool:
    """Whether a conv's forward copies its input unfolded along the row's taps and runs as
    a conv of one tap a row over kw x the channels (`_row_taps_unfolded`): on a CPU,
    where the output's rows fill half a register or less while its rows and positions
    together make whole vectors (8 x 8, 4 x 4: ahead of channel lanes too, 8x512x4 6.7
    -> 1.9 ms, 16x128x8 1.15 -> 0.93), or fill more of them and channel lanes are not
    taken (rows of 7, 49 positions in 4 vectors, lose to channel lanes: 8x256x7 2.7 ->
    3.3); with a stride of 1 along the row, 128 output channels a group or more and 2^24
    multiply-adds (the copy is kw x the input, D86's terms). The unfolded input's rows are
    the output's, so a window over them walks the output's rows and positions as one
    axis (`_conv`'s `unfolded`) [D126]."""
    target = get_runtime(device).renderer.target
    kernel, nd = weight.shape[2:], len(weight.shape) - 2
    if target.gpu or target.lanes <= 1 or nd < 2 or kernel[-1] < 2 or spec.stride[-1] != 1:
        return False
    out = out_sizes(shape, kernel, spec)
    cout = weight.shape[0] // spec.groups
    use = weight_use(weight, shape[0], tuple(out))
    plane = row_fill(out[-2] * out[-1], target.lanes)
    if not (row_fill(out[-1], target.lanes) <= HALF < plane and cout >= PAD_CHANNELS and
            use[1] >= PAD_WORK):
        return False
    return plane == 1.0 or not channel_lanes(device, cout, out[-1], 1, HALF, use)


def out_sizes(shape: tuple, kernel: tuple, spec) -> list[int]:
    """The output's spatial sizes of a conv of an input of `shape` by `kernel`."""
    return [(i + b + a - d * (k - 1) - 1) // s + 1 for i, (b, a), k, s, d in
            zip(shape[2:], spec.padding, kernel, spec.stride, spec.dilation)]


def weight_use(weight, bs: int, out_sp: tuple) -> tuple[int, int]:
    """(bytes, multiply-adds) of a conv's weight: the bytes of one output channel's
    weights, and the conv's work."""
    size = prod(weight.shape)
    return size // weight.shape[0] * weight.dtype.itemsize, size * bs * prod(out_sp)


def channel_lanes(device: str, cout: int, width: int, stride: int, least: float,
                   weight: tuple[int, int] = (0, 0)) -> bool:
    """Whether the CPU tile should take its vector lanes across output channels: where the
    output's rows fill less than `least` of a register (or are read at a stride: each
    lane a gathered load) and the channels (per group) fill one [D66]. The forward asks
    for half a register (rows of 8 lanes ran as fast as channel lanes, and cost no
    copy), the weight gradient, whose other choice is lanes along those rows in its
    reduce, for 3/4 (FULL). A forward (`weight`: the bytes of one output channel's
    weights, and the conv's multiply-adds) whose rows leave any lane idle (14 of 16, 28
    of 32) takes them too where whole vectors divide its channels (the tile would keep a
    row of 3/4 else), two or more of them (a row's tile shares each input vector across 4
    channels, which one vector of channels cannot match: 8x16x56 0.47 -> 0.52 ms with
    it), a block of a vector of channels fits half the L2, and the copy's launch is paid
    back (PAD_WORK, as D86's: 1x32x13 ran 0.058 -> 0.111 ms with it): the tile then
    unrolls a row of positions per weight vector (tiling.py `_row_of_positions`), which
    streams the block's weights from the L2 [D125, D127: a block of 1821 input channels,
    1 MB, read from L3 for each row, 1x1821-32x28 4.4-5.1 -> 5.1-6.1 ms]."""
    target = get_runtime(device).renderer.target
    if target.gpu or target.lanes <= 1:
        return False
    rows = row_fill(width, target.lanes) if stride == 1 else 0.0
    if rows < 1.0 and cout % target.lanes == 0 and cout >= 2 * target.lanes and \
            0 < weight[0] * target.lanes <= target.l2_bytes // 2 and weight[1] >= PAD_WORK:
        return True
    return rows < least and FULL <= row_fill(cout, target.lanes) and cout >= target.lanes


def pads_into_memory_on(device: str, shape: tuple, cout: int, kernel: tuple, spec) -> bool:
    """pads_into_memory for the device's target."""
    return pads_into_memory(get_runtime(device).renderer.target, shape, cout, kernel, spec)


def pads_into_memory(target: Target, shape: tuple, cout: int, kernel: tuple, spec) -> bool:
    """Whether a conv's forward reads its input (of `shape`) padded in memory rather than
    through a padded view. On a CPU whose tile walks output rows of a quarter to half a
    register (half a vector of lanes along the row, or channel lanes with the input
    broadcast), the window loads are masked at the borders, and on AVX-512 those masks
    cost a fifth of the kernel: one copy of the input takes them away. The copy is one
    pass over the input, paid back where the conv has `PAD_CHANNELS` output channels or
    more (multiply-adds per input element and tap) and `PAD_WORK` multiply-adds in all
    [D86]."""
    if not any(b or a for b, a in spec.padding) or \
            any(b < 0 or a < 0 for b, a in spec.padding):
        return False
    if target.gpu or target.lanes <= 1 or cout // spec.groups < PAD_CHANNELS:
        return False
    out = out_sizes(shape, kernel, spec)
    work = shape[0] * cout * shape[1] // spec.groups * prod(out) * prod(kernel)
    return target.lanes < 4 * out[-1] <= 2 * target.lanes and work >= PAD_WORK


# (pads_into_memory, D86) AVX-512, fwd including the copy, the view's time / the copy's:
# 64 output channels 1.04-1.05x (8x64x8, 16x64x8), 16-32 0.75-0.82x; 128-512 1.10-1.27x;
# rows of 4 (a quarter register) 0.95x; under 2^24 multiply-adds the launch of the copy
# is not paid back (4x64x8: 9.4M, 0.89x)
PAD_CHANNELS = 128
PAD_WORK = 1 << 24


def batch_chunk(device: str, bs: int, channels: tuple[int, int], out_sp: tuple, spec,
                 itemsize: int, work: int) -> int:
    """Images a weight gradient sums in one piece of its reduce. Its CPU tile (4 output x 4
    input channels, lanes along the output's rows) streams 8 rows of all the batch's
    positions for each of its taps; past the L1 they come from the L2 every time
    (8x256x14: 115 GFLOP/s). Where pieces of whole images keep those 8 rows within the
    L1 (`Target.cached_bytes`), the batch is summed in the largest such pieces and the
    pieces added (8x256x14 12.9 -> 9.7 ms) [D128]: for 16 channels or more in and out
    (`channels`: a group's), 2^24 multiply-adds (the pieces' sum is one more kernel) and
    dilation 1, at stride 1 for rows that take no channel lanes (a tile with channel lanes
    ran 174 GFLOP/s already there). A strided conv's tile, whatever its lanes, streams the
    output gradient of all the batch for each input channel and tap, and gets the pieces
    too (32x32-64x32 stride 2: 13.7 -> 5.5 ms, D148); else the whole batch."""
    target = get_runtime(device).renderer.target
    strided = any(s != 1 for s in spec.stride)
    if target.gpu or target.lanes <= 1 or min(channels) < CHUNK_CHANNELS or \
            work < PAD_WORK or any(d != 1 for d in spec.dilation) or \
            (not strided and channel_lanes(device, channels[1], out_sp[-1], 1, FULL)):
        return bs
    image = 8 * prod(out_sp) * itemsize
    if bs * image <= target.cached_bytes:  # the whole batch fits: pieces gain nothing
        return bs  # (4x256-512x8 stride 2 ran 7.1 -> 7.8 ms in pieces of 2)
    fits = [b for b in range(1, bs) if bs % b == 0 and b * image <= target.cached_bytes]
    return max(fits, default=bs)


CHUNK_CHANNELS = 16
