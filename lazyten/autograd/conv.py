"""Conv: convolution as one autograd Function whose gradients are convolutions, and the
moves it shares with nnops.py's conv_transpose (dilate, transposed_weight).

Conv's forward and backward are written in LazyBuffer ops (the `_` helpers at the end
mirror the Tensor functions above op for op, so the graph is what the Tensor ops built,
without a Function and a Tensor per op); the Tensor functions serve conv_transpose and
mixed-dtype convolutions, which need autograd through them. Windows are views made by
Tensor._pool (nnops.py), never an im2col copy.
"""
from __future__ import annotations
import itertools
from typing import NamedTuple

from codegen.dtypes import dtypes
from codegen.helpers import prod
from codegen.lanes import FULL, HALF
from codegen.ops import BinaryOps, ReduceOps
from lazyten.autograd import conv_rules as rules
from lazyten.autograd.function import Function
from lazyten.elementwise import broadcast_shape
from runtimes import get_runtime


def dilate(x, stride: tuple):
    """Insert s-1 zeros between neighbouring elements along each spatial axis."""
    if all(s == 1 for s in stride):
        return x
    bs, c, sp = x.shape[0], x.shape[1], x.shape[2:]
    x = x.reshape((bs, c) + tuple(v for i in sp for v in (i, 1)))
    x = x.pad([(0, 0), (0, 0)] + [r for s in stride for r in ((0, 0), (0, s - 1))])
    x = x.reshape((bs, c) + tuple(i * s for i, s in zip(sp, stride)))
    return x.shrink([(0, bs), (0, c)] + [(0, (i - 1) * s + 1) for i, s in zip(sp, stride)])


def transposed_weight(w, groups: int):
    """(g*a, b, *k) -> (g*b, a, *k): swap the channel roles within each group, flip taps."""
    nd, (a, b), kernel = w.ndim - 2, w.shape[:2], w.shape[2:]
    w = w.reshape((groups, a // groups, b) + kernel).transpose(1, 2)
    return w.flip(*range(3, 3 + nd)).reshape((groups * b, a // groups) + kernel)


def grouped_windows(x, kernel: tuple, spec):
    """Windows of the padded input, (bs, groups, 1, cin/groups, *out, *kernel)."""
    nd = len(kernel)
    xw = x.pad([(0, 0), (0, 0)] + list(spec.padding))._pool(kernel, spec.stride, spec.dilation)
    return xw.reshape((x.shape[0], spec.groups, 1, x.shape[1] // spec.groups) +
                      xw.shape[2:2 + nd] + kernel)


class Conv(Function):
    """Convolution as one autograd node whose gradients are convolutions themselves.

    Left to generic autograd, the input gradient of a windowed view is an overlap-add
    through a three-view ShapeTracker (every load unravels its index with div/mod: 0.2
    GFLOP/s). Here it is the transposed convolution: the output gradient, dilated by
    the stride and padded, convolved with the flipped, per-group transposed weight, a
    windowed view like the forward pass, which the CPU tiles. The weight gradient is the
    reduce generic autograd would build (windows of x times the output gradient, summed
    over batch and output positions). `tensor` is the Tensor class the ops run on."""

    traced = True

    class Spec(NamedTuple):
        groups: int
        stride: tuple
        dilation: tuple
        padding: tuple  # (before, after) per spatial dim (a tuple: the Spec is a trace key)

    def forward(self, x, w, *bias, spec, tensor):
        self.x, self.w, self.spec, self.tensor = x, w, spec, tensor
        return _biased(_conv(x, w, spec, tensor), bias)

    @staticmethod
    def forward_tensors(x, weight, spec):
        """The convolution in Tensor ops (mixed or integer dtypes: no Conv node)."""
        nd = weight.ndim - 2
        unfolded = rules.unfolds_row_taps(x.device, x.shape, weight, spec)
        if unfolded:  # (as `_conv`: D126)
            x, weight, spec = _row_taps_unfolded(x, weight, spec, type(x))
        kernel, bs, cout = weight.shape[2:], x.shape[0], weight.shape[0]
        if rules.pads_into_memory_on(x.device, x.shape, cout, kernel, spec):
            x, spec = x.pad([(0, 0), (0, 0)] + list(spec.padding)).contiguous(), \
                spec._replace(padding=((0, 0),) * nd)
        xw = grouped_windows(x, kernel, spec)
        out_sp = xw.shape[4:4 + nd]
        row = prod(out_sp[-2:]) if unfolded and nd > 1 else out_sp[-1]
        lanes = rules.channel_lanes(x.device, cout // spec.groups, row, spec.stride[-1],
                                    HALF, rules.weight_use(weight, bs, out_sp))
        xw, w, axes = _weight_in_lanes(xw, weight, spec.groups, lanes)
        return (xw * w).sum(axis=axes).reshape((bs, cout) + out_sp)

    def backward(self, grad):
        x, w, tensor = self.x, self.w, self.tensor
        # the output gradient is read once per kernel tap by both gradient convolutions:
        # materialise it rather than recompute what produced it (relu, pooling) 25 times
        g = grad.materialize()
        groups, stride, dilation, padding = self.spec
        nd, kernel, out_sp = len(w.shape) - 2, w.shape[2:], g.shape[2:]
        grad_x = grad_w = None
        if self.needs_input_grad[0] and any(st > 1 for st in stride) and \
                all(d == 1 for d in dilation):
            grad_x = _phase_input_grad(g, w, x.shape, self.spec, tensor)
        elif self.needs_input_grad[0]:
            # pad the dilated g so that a stride-1 conv yields exactly the input's positions:
            # the full gradient over the padded input, shifted by the forward's padding
            # (a negative pad crops gradient rows that only reach padding). Cropping the
            # conv's output instead would compute the padding's gradient and throw it away
            reach = [d * (k - 1) for k, d in zip(kernel, dilation)]
            full = [xi + pb + pa for xi, (pb, pa) in zip(x.shape[2:], padding)]
            tail = [f - r - 1 - (o - 1) * s for f, r, o, s in zip(full, reach, out_sp, stride)]
            pads = [(r - pb, r + t - pa) for r, t, (pb, pa) in zip(reach, tail, padding)]
            # materialised with its zeros: windows over a padded view would need a mask
            # per tap (a diagonal band, not one view); over memory they are one view
            gd = _dilated_padded(g, stride, pads)
            grad_x = _conv(gd, _transposed_weight(w, groups), Conv.Spec(
                groups, (1,) * nd, dilation, ((0, 0),) * nd), tensor)
        if self.needs_input_grad[1]:
            grad_w = _weight_grad(x, g, w.shape, self.spec, tensor)
        return (grad_x, grad_w, *_bias_grad(g, self.needs_input_grad[2:]))


class ConvTranspose(Function):
    """A strided transposed convolution (dilation 1) as one autograd node. It is the input
    gradient of the convolution `spec` describes (input `shape`, weight w laid out as
    PyTorch's transposed weight: (in, out / groups, *kernel) is a conv's (out, in / groups,
    *kernel)), so its forward is `_phase_input_grad`: stride^nd small convolutions over x
    as it is, where convolving x dilated with zeros did stride^nd times the work through
    masked reads (a 2x2 stride-2 upsampling at 3 GFLOP/s). Its gradients are that
    convolution of the output gradient (dx) and the convolution's weight gradient with
    the roles of input and output gradient swapped (dw) [D150]."""

    traced = True

    def forward(self, x, w, *bias, spec, shape, tensor):
        self.x, self.w, self.spec, self.tensor = x, w, spec, tensor
        return _biased(_phase_input_grad(x, w, shape, spec, tensor), bias)

    def backward(self, grad):
        g = grad.materialize()  # (read by every gradient, the weights' once per tap)
        need_x, need_w = self.needs_input_grad[:2]
        grad_x = _conv(g, self.w, self.spec, self.tensor) if need_x else None
        grad_w = _weight_grad(g, self.x, self.w.shape, self.spec, self.tensor) if need_w else None
        return (grad_x, grad_w, *_bias_grad(g, self.needs_input_grad[2:]))


def _biased(out, bias: tuple):
    """A conv's output plus its bias (if any) along the channels, as `out + b.reshape(1,
    c, 1, ...)` builds it. The bias is the conv Function's input, so its gradient reads
    the output gradient the Function materialises for the others: summed outside, it
    recomputed that gradient's chain inside its own reduce (a gated conv's sigmoid and
    tanh derivatives, every position of the batch: 40% of a WaveNet step's kernels, D152)."""
    if not bias:
        return out
    shape = (1, out.shape[1]) + (1,) * (len(out.shape) - 2)
    return out.e(BinaryOps.ADD, bias[0].reshape(shape).expand(out.shape))


def _bias_grad(g, needs: list[bool]) -> tuple:
    """The bias's gradient (the output gradient summed over all but the channels), as a
    one-element tuple where the Function has a bias, else empty."""
    if not needs:
        return ()
    return (_sum(g, (0,) + tuple(range(2, len(g.shape)))) if needs[0] else None,)


# ---- the same ops on LazyBuffers (Conv's forward and backward): each builds what the
# Tensor op it mirrors builds without autograd, so the graph is the same (D61) ----
def _weight_grad(x, g, w_shape: tuple, spec, tensor):
    """The weight gradient: windows of x times the output gradient g, summed over the
    batch and the output positions, in chunks of `batch_chunk` images (conv_rules.py) where
    that splits the batch (each chunk's sum a slice of one kernel's output, then those added)."""
    nd, kernel, groups = len(w_shape) - 2, w_shape[2:], spec.groups
    bs, cout, out_sp = x.shape[0], w_shape[0], g.shape[2:]
    chunk = rules.batch_chunk(x.device, bs, (x.shape[1] // groups, cout // groups), out_sp,
                              spec, x.dtype.itemsize, prod(w_shape) * bs * prod(out_sp))
    if chunk < bs and any(b or a for b, a in spec.padding):
        x, spec = _padded_in_memory(x, spec)
    xw = _grouped_windows(x, kernel, spec, tensor)
    if rules.channel_lanes(x.device, cout // groups, out_sp[-1], spec.stride[-1], FULL):
        g = _channels_inner(g)
    gr = g.reshape((bs, groups, cout // groups, 1) + out_sp + (1,) * nd)
    if chunk == bs:
        return _sum(_mul(xw, gr), (0,) + tuple(range(4, 4 + nd))).reshape(w_shape)
    xw, gr = (t.reshape((bs // chunk, chunk) + t.shape[1:]) for t in (xw, gr))
    parts = _sum(_mul(xw, gr), (1,) + tuple(range(5, 5 + nd)))
    return _sum(parts, (0,)).reshape(w_shape)


def _conv(x, weight, spec, tensor, unfolded: bool = False):
    """forward_tensors in LazyBuffer ops; `unfolded`: x is a conv's input unfolded along
    its row's taps (`_row_taps_unfolded`), whose output rows and positions are one row."""
    nd, kernel = len(weight.shape) - 2, weight.shape[2:]
    bs, cout = x.shape[0], weight.shape[0]
    if not unfolded and rules.unfolds_row_taps(x.device, x.shape, weight, spec):
        xs, taps, one_tap = _row_taps_unfolded(x, weight, spec, tensor)
        return _conv(xs, taps, one_tap, tensor, unfolded=True)
    if rules.pads_into_memory_on(x.device, x.shape, cout, kernel, spec):
        x, spec = _padded_in_memory(x, spec)
    xw = _grouped_windows(x, kernel, spec, tensor)
    row = prod(xw.shape[2 + nd:4 + nd]) if unfolded and nd > 1 else xw.shape[3 + nd]
    out_sp = xw.shape[4:4 + nd]
    lanes = rules.channel_lanes(x.device, cout // spec.groups, row, spec.stride[-1], HALF,
                                rules.weight_use(weight, bs, out_sp))
    xw, w, axes = _weight_in_lanes(xw, weight, spec.groups, lanes)
    return _sum(_mul(xw, w), axes).reshape((bs, cout) + out_sp)


def _weight_in_lanes(xw, weight, groups: int, lanes: bool):
    """(windows, weight, reduce axes) of a forward conv's product: the weight as (1,
    groups, out a group, in a group, 1..., *kernel) against windows (batch, groups, 1, in
    a group, *out, *kernel); with channel `lanes`, the weight copied in blocks of a
    vector of output channels (or all of a group's where no vector divides them)
    innermost (`_channels_blocked`), and both seen with an axis of blocks before the
    lanes' [D127]."""
    nd, kernel = len(weight.shape) - 2, weight.shape[2:]
    cout_g, cin_g = weight.shape[0] // groups, weight.shape[1]
    if not lanes:
        w = weight.reshape((1, groups, cout_g, cin_g) + (1,) * nd + kernel)
        return xw, w, (3,) + tuple(range(4 + nd, 4 + 2 * nd))
    block = get_runtime(weight.device).renderer.target.lanes
    block = block if cout_g % block == 0 else cout_g
    w = _channels_blocked(weight, groups, block)
    w = w.reshape((1, groups, cout_g // block, block, cin_g) + (1,) * nd + kernel)
    xw = xw.reshape(xw.shape[:2] + (1,) + xw.shape[2:])
    return xw, w, (4,) + tuple(range(5 + nd, 5 + 2 * nd))


def _row_taps_unfolded(x, weight, spec, tensor):
    """(input, weight, spec) of the same conv with the row's kw taps as input channels: the
    input padded and copied as (batch, channels x kw, *rows, output row), where channel
    c x kw + j holds the window's tap j (x[..., p + j d] at position p), and the weight
    (out, in x kw, *kernel[:-1], 1) to match; no padding left, dilation 1 along the row."""
    nd, kernel = len(weight.shape) - 2, weight.shape[2:]
    padded = _pad(x, [(0, 0), (0, 0)] + list(spec.padding))
    if isinstance(x, tensor):  # (forward_tensors' Tensors, or `_conv`'s LazyBuffers)
        taps = padded._pool(kernel[-1:], (1,), spec.dilation[-1:])
    else:
        taps = tensor._wrap(padded)._pool(kernel[-1:], (1,), spec.dilation[-1:]).lazydata
    rank = len(taps.shape)  # (batch, channels, *rows, output row, tap)
    xs = taps.permute((0, 1, rank - 1) + tuple(range(2, rank - 1))).contiguous()
    xs = xs.reshape((x.shape[0], x.shape[1] * kernel[-1]) + xs.shape[3:])
    w = weight.permute((0, 1, nd + 1) + tuple(range(2, nd + 1)))
    w = w.reshape((weight.shape[0], weight.shape[1] * kernel[-1]) + kernel[:-1] + (1,))
    return xs, w, spec._replace(padding=((0, 0),) * nd, dilation=spec.dilation[:-1] + (1,))


def _channels_blocked(weight, groups: int, block: int):
    """A weight (out, in a group, *kernel) copied as (groups, blocks, in a group, *kernel,
    `block` output channels) and seen as (groups, blocks, block, in a group, *kernel): a
    tile with lanes across a block of output channels reads its weight in one contiguous
    stream over the reduce [D127]."""
    shape = (groups, weight.shape[0] // groups // block, block) + weight.shape[1:]
    rank = len(shape)
    order = (0, 1) + tuple(range(3, rank)) + (2,)
    back = tuple(order.index(i) for i in range(rank))
    return weight.reshape(shape).permute(order).contiguous().permute(back)


def _channels_inner(g):
    """The weight gradient's output gradient g (batch, channels, *positions) copied with
    its channels innermost in memory, seen in its own shape: the CPU tile may then take
    vector lanes across output channels, which fill every lane whatever the image's width,
    one vector load per position, the input broadcast [D66]. (The forward's weight takes
    blocks of channels instead: `_channels_blocked`.)"""
    order = (0,) + tuple(range(2, len(g.shape))) + (1,)
    back = tuple(order.index(i) for i in range(len(order)))
    return g.permute(order).contiguous().permute(back)


def _padded_in_memory(x, spec):
    """(x padded by spec's padding and copied, spec with no padding left): the windows
    over it need no masks (D86, D128)."""
    nd = len(spec.padding)
    return _pad(x, [(0, 0), (0, 0)] + list(spec.padding)).contiguous(), \
        spec._replace(padding=((0, 0),) * nd)


def _grouped_windows(x, kernel: tuple, spec, tensor):
    """grouped_windows in LazyBuffer ops (the windows are Tensor._pool's memoised view)."""
    nd = len(kernel)
    padded = _pad(x, [(0, 0), (0, 0)] + list(spec.padding))
    xw = tensor._wrap(padded)._pool(kernel, spec.stride, spec.dilation).lazydata
    return xw.reshape((x.shape[0], spec.groups, 1, x.shape[1] // spec.groups) +
                      xw.shape[2:2 + nd] + kernel)


def _pad(x, pads: list):
    """Tensor.pad with zeros: the positive amounts grow first, then negative ones crop (a
    crop may take padding: 2 before and -2 after keeps one element of one)."""
    if any(b > 0 or a > 0 for b, a in pads):
        x = x.pad(tuple((max(b, 0), max(a, 0)) for b, a in pads))
    if any(b < 0 or a < 0 for b, a in pads):
        x = x.shrink(tuple((-min(b, 0), s + min(a, 0)) for (b, a), s in zip(pads, x.shape)))
    return x


def _mul(x, y):
    """x * y of one rank, broadcast to one shape."""
    if x.shape == y.shape:
        return x.e(BinaryOps.MUL, y)
    shape = broadcast_shape(x.shape, y.shape)
    return x.expand(shape).e(BinaryOps.MUL, y.expand(shape))


def _sum(x, axes: tuple[int, ...]):
    """Tensor.sum over sorted `axes`, dropping them; 16-bit floats add in float32."""
    shape = tuple(s for i, s in enumerate(x.shape) if i not in axes)
    if x.dtype.opmath is x.dtype:
        return x.r(ReduceOps.SUM, axes).reshape(shape)
    return x.cast(dtypes.float32).r(ReduceOps.SUM, axes).reshape(shape).cast(x.dtype)


def _dilated_padded(g, stride: tuple, pads: list):
    """g dilated by `stride` (s-1 zeros between neighbours), then padded by `pads` (a
    negative amount crops), in its own memory. Strided, it is built as (blocks, s) per
    axis: g's element i lands in block i + q at offset r, where q, r = divmod(before, s),
    so the copy reads g through one view with interval masks; the dilation's own views
    (pad, then merge the padded axis) index it with divisions and remainders, which ran
    at 1.2 GB/s [D66]."""
    sp = g.shape[2:]
    if all(s == 1 for s in stride):
        return _pad(g, [(0, 0), (0, 0)] + pads).contiguous()
    full = [(o - 1) * s + 1 + before + after for o, s, (before, after) in zip(sp, stride, pads)]
    blocks = [-(-f // s) for f, s in zip(full, stride)]
    x = _into_blocks(g, stride, [before for before, _ in pads], blocks).contiguous()
    return _out_of_blocks(x, stride, full)


def _into_blocks(g, stride: tuple, starts: list[int], blocks: list[int]):
    """g's element i (per spatial axis) at position start + s*i of a (blocks, s) layout:
    block i + q, offset r (q, r = divmod(start, s)); zeros elsewhere. One view with
    interval masks, where dilating by the views (pad, merge the padded axis) indexes with
    divisions and remainders."""
    bs, c, sp = g.shape[0], g.shape[1], g.shape[2:]
    grid = [(0, 0), (0, 0)]
    for o, s, start, b in zip(sp, stride, starts, blocks):
        q, r = divmod(start, s)
        grid += [(q, b - o - q), (r, s - 1 - r)]
    return _pad(g.reshape((bs, c) + tuple(v for o in sp for v in (o, 1))), grid)


def _out_of_blocks(x, stride: tuple, sizes: list[int]):
    """A contiguous (blocks, s) layout seen as one axis per pair, cut to `sizes`."""
    bs, c, blocks = x.shape[0], x.shape[1], x.shape[2::2]
    x = x.reshape((bs, c) + tuple(b * s for b, s in zip(blocks, stride)))
    return x.shrink(((0, bs), (0, c)) + tuple((0, f) for f in sizes))


def _phase_input_grad(g, w, x_shape: tuple, spec, tensor):
    """The input gradient of a strided conv (dilation 1), phase by phase. The padded
    input's position j = s*m + q (phase q = j mod s, per axis) takes only the taps
    k = q + s*t: grad[j] = sum_t g[m - t] w[q + s*t], a stride-1 conv of g with the
    flipped taps of its phase. So each phase is one conv over g as it is (no zeros), and
    the phases interleave into the input's positions: s^nd convs of 1/s^nd of the taps
    each, where convolving the dilated g (3/4 zeros at stride 2) did s^nd times the work.
    The phases are summed in a (blocks, s) layout per axis, each one padded into its
    offset (interval masks, one kernel), then seen as the input's shape [D66]."""
    groups, stride, _, padding = spec
    nd, kernel, out_sp = len(stride), w.shape[2:], g.shape[2:]
    sp = x_shape[2:]
    blocks = [-(-i // st) for i, st in zip(sp, stride)]
    total = None
    for phase in itertools.product(*[range(st) for st in stride]):
        taps, firsts, counts = [], [], []
        for q, st, k, i, (before, _) in zip(phase, stride, kernel, sp, padding):
            taps.append(len(range(q, k, st)))
            firsts.append(-(-(before - q) // st))  # the first m whose j is an input position
            counts.append((before + i - 1 - q) // st - firsts[-1] + 1)
        if min(taps) == 0 or min(counts) <= 0:
            continue  # no tap, or no input position, in this phase
        wq = w.shrink(((0, w.shape[0]), (0, w.shape[1])) + tuple(
            (q, q + st * (t - 1) + 1) for q, st, t in zip(phase, stride, taps)))
        wq = wq.stride((1, 1) + tuple(stride))
        pads = [(t - 1 - m0, n + t - 1 - o - (t - 1 - m0))
                for t, m0, n, o in zip(taps, firsts, counts, out_sp)]
        part = _conv(_pad(g, [(0, 0), (0, 0)] + pads), _transposed_weight(wq, groups),
                     Conv.Spec(groups, (1,) * nd, (1,) * nd, ((0, 0),) * nd), tensor)
        # m' is the input position s*m0 + q - before + s*m' (the phase's first one on)
        part = _into_blocks(part, stride, [st * m0 + q - before for q, st, m0, (before, _)
                                           in zip(phase, stride, firsts, padding)], blocks)
        total = part if total is None else total.e(BinaryOps.ADD, part)
    if total is None:  # no tap reaches any input position: the gradient is zero
        return type(g).const_like(0.0, tuple(x_shape), g.dtype, g.device)
    return _out_of_blocks(total.materialize(), stride, list(sp))


def _transposed_weight(w, groups: int):
    """transposed_weight in LazyBuffer ops (a flip is a stride of -1)."""
    nd, (a, b), kernel = len(w.shape) - 2, w.shape[:2], w.shape[2:]
    w = w.reshape((groups, a // groups, b) + kernel).permute((0, 2, 1) + tuple(range(3, 3 + nd)))
    w = w.stride((1, 1, 1) + (-1,) * nd)
    return w.reshape((groups * b, a // groups) + kernel)
