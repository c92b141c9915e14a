"""Conv: convolution as one autograd Function whose gradients are convolutions, and the
moves it shares with nnops.py's conv_transpose (dilate, transposed_weight).

Tensors in, Tensors out (the forward runs on the Tensor class it is given); windows are
views made by Tensor._pool (nnops.py), never an im2col copy.
"""
from __future__ import annotations
from typing import NamedTuple

from lazyten.autograd.function import Function


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

    class Spec(NamedTuple):
        groups: int
        stride: tuple
        dilation: tuple
        padding: list  # (before, after) per spatial dim

    def forward(self, x, w, spec, tensor):
        self.x, self.w, self.spec, self.tensor = x, w, spec, tensor
        # (`_wrap`: op results made into Tensors without __init__'s argument checks)
        return self.forward_tensors(tensor._wrap(x), tensor._wrap(w), spec).lazydata

    @staticmethod
    def forward_tensors(x, weight, spec):
        nd, kernel = weight.ndim - 2, weight.shape[2:]
        bs, cout, cin_g = x.shape[0], weight.shape[0], weight.shape[1]
        xw = grouped_windows(x, kernel, spec)
        out_sp = xw.shape[4:4 + nd]
        w = weight.reshape((1, spec.groups, cout // spec.groups, cin_g) + (1,) * nd + kernel)
        axes = (3,) + tuple(range(4 + nd, 4 + 2 * nd))
        return (xw * w).sum(axis=axes).reshape((bs, cout) + out_sp)

    def backward(self, grad):
        tensor = self.tensor
        x, w = tensor._wrap(self.x), tensor._wrap(self.w)
        # the output gradient is read once per kernel tap by both gradient convolutions:
        # materialise it rather than recompute what produced it (relu, pooling) 25 times
        g = tensor._wrap(grad.materialize())
        groups, stride, dilation, padding = self.spec
        nd, kernel = w.ndim - 2, w.shape[2:]
        bs, cout = x.shape[0], w.shape[0]
        out_sp = g.shape[2:]
        grad_x = grad_w = None
        if self.needs_input_grad[0]:
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
            gd = dilate(g, stride).pad([(0, 0), (0, 0)] + pads).contiguous()
            grad_x = Conv.forward_tensors(gd, transposed_weight(w, groups), Conv.Spec(
                groups, (1,) * nd, dilation, [(0, 0)] * nd)).lazydata
        if self.needs_input_grad[1]:
            xw = grouped_windows(x, kernel, self.spec)
            gr = g.reshape((bs, groups, cout // groups, 1) + out_sp + (1,) * nd)
            axes = (0,) + tuple(range(4, 4 + nd))
            grad_w = (xw * gr).sum(axis=axes).reshape(w.shape).lazydata
        return grad_x, grad_w
