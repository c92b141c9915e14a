"""Neural-network Tensor methods: matmul, convolutions, normalisation (pooling.py pools).

Convolution and pooling windows are views (expand + reshape + shrink), never an im2col
copy: the conv kernel multiplies a windowed view of the input by the weight and reduces.
Mixed into Tensor.
"""
from __future__ import annotations
import functools
import math

from codegen.dtypes import dtypes, promote
from codegen.helpers import make_pair
from lazyten.autograd.composite import Composite
from lazyten.autograd.conv import Conv, ConvTranspose, dilate, transposed_weight
from lazyten.autograd.matmul import Linear, Matmul
from lazyten.autograd.norm import BatchNorm, LayerNorm
from lazyten.autograd.views import Moves
from lazyten.dims import norm_axes
from lazyten.elementwise import broadcast_shape
from lazyten.errors import ShapeError
from lazyten.index_check import check_index
from lazyten.mixin import TensorMixin
from lazyten.padding import flat_pairs


def _one_linear(x, w, b) -> bool:
    """Whether `linear` is one Function (autograd/matmul.py's Linear): a batch of rows,
    a 2-d weight that fits and a bias of its rows, all of one float dtype that computes
    in itself. Everything else (errors included) takes matmul and the add."""
    dtype = x.dtype
    return (x.ndim >= 2 and w.ndim == 2 and x.shape[-1] == w.shape[1] and w.dtype is dtype
            and dtype.is_float and dtype.opmath is dtype
            and (b is None or (type(b) is type(x) and b.dtype is dtype and b.shape == w.shape[:1])))


class NNMixin(TensorMixin):
    """matmul, linear, convolutions, the windows pooling reads (`_pool`), normalisation,
    dropout, one_hot."""

    # ---- matmul ----
    def matmul(self, other):
        """PyTorch's matmul: 1-d, 2-d and batched, with broadcasting of batch dims."""
        x, w = self, other
        if type(w) is type(x):  # the common case at once: one float dtype computed in itself,
            # at least 2-d each, equal batch dims (or one side without any)
            xs, ws, dt = x.lazydata.shape, w.lazydata.shape, x.lazydata.dtype
            if len(xs) >= 2 and len(ws) >= 2 and xs[-1] == ws[-2] and dt.is_float and \
                    dt is w.lazydata.dtype and dt.opmath is dt and \
                    (len(xs) == 2 or len(ws) == 2 or xs[:-2] == ws[:-2]):
                return x.apply(Matmul, w)
        if x.ndim == 0 or w.ndim == 0:
            raise ShapeError(f"matmul needs at least 1-d tensors, got {x.shape} and {w.shape}")
        if x.shape[-1] != w.shape[-2 if w.ndim > 1 else 0]:
            raise ShapeError(f"matmul shape mismatch: {x.shape} @ {w.shape}")
        try:
            broadcast_shape(x.shape[:-2], w.shape[:-2])
        except ValueError:
            raise ShapeError(f"matmul batch dims do not broadcast: {x.shape} @ {w.shape}") from None
        if x.dtype != w.dtype:
            dt = promote(x.dtype, w.dtype)
            x, w = x.cast(dt), w.cast(dt)
        squeeze_x, squeeze_w = x.ndim == 1, w.ndim == 1
        if squeeze_x:
            x = x.reshape(1, -1)
        if squeeze_w:
            w = w.reshape(-1, 1)
        if x.dtype != dtypes.bool and x.dtype.opmath is x.dtype:
            # one Function: (..., n, 1, k) * (..., 1, m, k) summed over k in x's dtype
            # (integer products wrap, as numpy's and PyTorch's do)
            out = x.apply(Matmul, w)
        else:
            k = x.shape[-1]
            xr = x.reshape(x.shape[:-1] + (1, k))
            wr = w.transpose(-1, -2)
            wr = wr.reshape(wr.shape[:-2] + (1,) + wr.shape[-2:])
            if x.dtype == dtypes.bool:  # numpy: any(x and w) over the contracted dim
                out = (xr & wr).sum(-1) > 0
            else:  # accumulate halves in float32, as PyTorch does
                out = (xr.float() * wr.float()).sum(-1).cast(x.dtype)
        if squeeze_x:
            out = out.reshape(out.shape[:-2] + out.shape[-1:])
        if squeeze_w:
            out = out.reshape(out.shape[:-1])
        return out

    def dot(self, other):
        return self.matmul(other)

    def linear(self, weight, bias=None):
        """x @ weight.T + bias, with weight laid out (out_features, in_features)."""
        if _one_linear(self, weight, bias):
            return self.apply(Linear, weight) if bias is None else self.apply(Linear, weight, bias)
        out = self.matmul(weight.T)
        return out + bias if bias is not None else out

    # ---- windows ----
    def _pool(self, kernel: tuple[int, ...], stride, dilation):
        """(..., *spatial) -> (..., *out, *kernel) as a view of the input.

        Without autograd the whole chain of movement ops is one memoized ShapeTracker
        transform (the same code run on the tracker), so a model that builds the same
        windows every step pays for them once; with autograd it runs on a ViewChain, one
        Function for the chain."""
        nd = len(kernel)
        stride, dilation = make_pair(stride, nd), make_pair(dilation, nd)
        kernel = tuple(kernel)
        if not self.requires_grad or type(self).no_grad:
            st = _window_st(self.lazydata.st, kernel, stride, dilation)
            return type(self)._wrap(self.lazydata._view(st))
        # with autograd, the chain is one node whose backward undoes its views (D61)
        return self.apply(Moves, moves=lambda chain: _windows(chain, kernel, stride, dilation))


    @staticmethod
    def _padding(padding, nd: int) -> list[tuple[int, int]]:
        """int, per-dim ints, or per-dim (before, after) pairs -> per-dim pairs."""
        if isinstance(padding, int):
            return [(padding, padding)] * nd
        given, padding = padding, list(padding)
        if len(padding) == nd and all(isinstance(p, int) for p in padding):
            return [(p, p) for p in padding]
        if len(padding) == 2 * nd and all(isinstance(p, int) for p in padding):  # PyTorch flat
            return flat_pairs(padding, nd)
        if len(padding) == nd:
            return [tuple(p) for p in padding]
        raise ValueError(f"padding {given} does not fit {nd} spatial dims")

    # ---- convolution ----
    def conv2d(self, weight, bias=None, groups: int = 1, stride=1, dilation=1, padding=0):
        """N-d convolution (the weight's rank picks 1-d, 2-d or 3-d), PyTorch semantics."""
        nd = weight.ndim - 2
        bs, cin = self.shape[:2] if self.ndim >= 2 else (None, None)
        cout, cin_g = weight.shape[:2]
        if self.ndim != nd + 2:
            raise ShapeError(f"conv input {self.shape} needs {nd + 2} dims for weight "
                             f"{weight.shape}")
        if cin != cin_g * groups or cout % groups:
            raise ShapeError(f"conv channels: input {self.shape}, weight {weight.shape}, "
                             f"groups={groups}")
        if bias is not None and bias.shape != (cout,):
            raise ShapeError(f"conv bias shape {bias.shape} != ({cout},)")
        conv = Conv.Spec(groups, make_pair(stride, nd), make_pair(dilation, nd),
                         tuple(self._padding(padding, nd)))
        if self.dtype.is_float and weight.dtype == self.dtype:  # gradients as convs
            return self._conv_function(Conv, weight, bias, spec=conv, tensor=type(self))
        out = Conv.forward_tensors(self, weight, conv)
        return out if bias is None else out + bias.reshape((1, cout) + (1,) * nd)

    def _conv_function(self, fn, weight, bias, **kwargs):
        """Conv or ConvTranspose applied to this tensor and `weight`, the bias an input of
        the Function where it has this tensor's dtype (its gradient then sums the output
        gradient the Function materialises, D152), else added after (promoted by `+`)."""
        own = bias is not None and bias.dtype == self.dtype
        out = self.apply(fn, weight, *([bias] if own else []), **kwargs)
        if own or bias is None:
            return out
        return out + bias.reshape((1, out.shape[1]) + (1,) * (out.ndim - 2))

    def conv1d(self, weight, bias=None, **kw):
        return self.conv2d(weight, bias, **kw)

    def conv3d(self, weight, bias=None, **kw):
        return self.conv2d(weight, bias, **kw)

    def conv_transpose2d(self, weight, bias=None, groups: int = 1, stride=1, dilation=1,
                         padding=0, output_padding=0):
        """Transposed convolution: dilate the input by the stride, pad, convolve with the
        flipped, transposed weight (laid out (cin, cout/groups, *k) as PyTorch)."""
        nd = weight.ndim - 2
        kernel = weight.shape[2:]
        stride, dilation = make_pair(stride, nd), make_pair(dilation, nd)
        output_padding = make_pair(output_padding, nd)
        pads = self._padding(padding, nd)
        if self.ndim != nd + 2 or self.shape[1] != weight.shape[0]:
            raise ShapeError(f"conv_transpose input {self.shape} does not fit weight "
                             f"{weight.shape}")
        out = [(i - 1) * s - pb - pa + d * (k - 1) + op + 1 for i, k, s, d, (pb, pa), op in
               zip(self.shape[2:], kernel, stride, dilation, pads, output_padding)]
        if any(o <= 0 for o in out):
            raise ValueError(f"conv_transpose of input {self.shape} with weight {weight.shape}, "
                             f"stride {stride}, padding {pads} and dilation {dilation} "
                             f"has output size {tuple(out)}: padding is too large")
        cout = weight.shape[1] * groups
        if bias is not None and bias.shape != (cout,):
            raise ShapeError(f"conv_transpose bias shape {bias.shape} != ({cout},)")
        if any(s > 1 for s in stride) and all(d == 1 for d in dilation) and \
                self.dtype.is_float and weight.dtype == self.dtype:
            # the input gradient of the conv it transposes, phase by phase (D150)
            return self._conv_function(ConvTranspose, weight, bias, tensor=type(self),
                                       spec=Conv.Spec(groups, stride, dilation, tuple(pads)),
                                       shape=(self.shape[0], cout, *out))
        full = [(d * (k - 1) - pb, d * (k - 1) - pa + op)
                for k, d, (pb, pa), op in zip(kernel, dilation, pads, output_padding)]
        return dilate(self, stride).conv2d(transposed_weight(weight, groups), bias,
                                           groups=groups, dilation=dilation, padding=full)

    # ---- normalisation and regularisation ----
    def layernorm(self, axis=-1, eps: float = 1e-5):
        """(x - mean) / sqrt(var + eps) over `axis` (biased variance, as PyTorch)."""
        return self._layer_norm(axis, eps, None, None)

    def _layer_norm(self, axis, eps: float, weight, bias):
        """layernorm over `axis`, then `* weight` and `+ bias` where given (broadcast as the
        operators broadcast them): one LayerNorm Function for float32 and float64 inputs
        whose parameters share their dtype and shape fits x, else the Tensor chain."""
        params = [p for p in (weight, bias) if p is not None]
        own = self.lazydata.dtype
        if own.is_float and own.opmath is not own:
            # 16-bit floats: computed in float32 and rounded once to the dtype the chain
            # gives, as PyTorch (x - mean rounded to float16 lost small outputs' precision)
            dtype = self.dtype
            for p in params:
                dtype = promote(dtype, p.dtype) if isinstance(p, type(self)) else dtype
            up = [p.float() if isinstance(p, type(self)) and p.dtype.opmath != p.dtype else p
                  for p in (weight, bias)]
            return self.float()._layer_norm(axis, eps, *up).cast(dtype)
        if self._one_layer_norm(params):
            return self.apply(LayerNorm, *params, axes=norm_axes(axis, self.ndim), eps=eps,
                              affine=(weight is not None, bias is not None))
        y = self - self.mean(axis, keepdim=True)
        out = y * (y.square().mean(axis, keepdim=True) + eps).rsqrt()
        out = out * weight if weight is not None else out
        return out + bias if bias is not None else out

    def _batch_norm_train(self, weight, bias, eps: float):
        """Batch normalisation over every axis but 1 with the batch's statistics, then the
        per-channel `weight` and `bias` where given: (output, mean, biased variance), the
        statistics of shape (C,) and without a gradient (for the running ones). One
        BatchNorm Function for float32 and float64 (its backward the closed form), else
        the Tensor chain."""
        axes = (0,) + tuple(range(2, self.ndim))
        channels = (1, self.shape[1]) + (1,) * (self.ndim - 2)
        params = [p.reshape(channels) for p in (weight, bias) if p is not None]
        if self._one_layer_norm(params):
            # the statistics as two traced calls (graph nodes: each is a few ops with their
            # constants, and a small model's BatchNorm forward is mostly that Python)
            value = self.detach()
            mean = value.apply(Composite, body=_batch_mean, axes=axes)
            var = value.apply(Composite, mean, body=_batch_variance, axes=axes)
            out = self.apply(BatchNorm, mean, var, *params, axes=axes, eps=eps,
                             affine=(weight is not None, bias is not None))
            return out, mean.reshape(self.shape[1]), var.reshape(self.shape[1])
        mean = self.mean(axis=axes)
        var = (self - mean.reshape(channels)).square().mean(axis=axes)
        out = self.batchnorm(weight, bias, mean.cast(self.dtype),
                             (var + eps).rsqrt().cast(self.dtype))
        return out, mean.detach(), var.detach()

    def _one_layer_norm(self, params: list) -> bool:
        """Can LayerNorm take these inputs: x a float32 or float64 with elements, each
        parameter a Tensor of its dtype and device that broadcasts to x's shape."""
        lazy = self.lazydata
        dtype, shape = lazy.dtype, lazy.shape
        if not dtype.is_float or dtype.opmath is not dtype or not shape or 0 in shape:
            return False
        for p in params:
            if not isinstance(p, type(self)) or p.lazydata.dtype is not dtype or \
                    p.lazydata.device != lazy.device or len(p.lazydata.shape) > len(shape):
                return False
            tail = shape[len(shape) - len(p.lazydata.shape):]
            if p.lazydata.shape != tail and \
                    any(a != b and a != 1 for a, b in zip(p.lazydata.shape, tail)):
                return False
        return True

    def batchnorm(self, weight, bias, mean, invstd, axis=1):
        shape = tuple(s if i == axis else 1 for i, s in enumerate(self.shape))
        x = self - mean.reshape(shape)
        if weight is not None:
            x = x * weight.reshape(shape)
        x = x * invstd.reshape(shape)
        return x + bias.reshape(shape) if bias is not None else x

    def dropout(self, p: float = 0.5, training: bool | None = None):
        """Zero each element with probability p, scale the rest by 1/(1-p); only in training
        (`training`, or Tensor.training when None)."""
        if not 0 <= p <= 1:
            raise ValueError(f"dropout probability must be in [0, 1], got {p}")
        if not (type(self).training if training is None else training) or p == 0:
            return self
        if p == 1:  # everything dropped, as PyTorch: input * 0
            return self * 0
        keep = type(self).rand(*self.shape, device=self.device) >= p
        return keep.where(self, 0) * (1 / (1 - p))

    def one_hot(self, num_classes: int):
        ar = type(self).arange(num_classes, device=self.device)
        onehot = check_index(self.unsqueeze(-1) == ar, self, num_classes, "one_hot")
        return onehot.cast(dtypes.int64)


def _batch_mean(x, axes: tuple[int, ...]):
    """x's mean over `axes`, kept as size-1 axes (a BatchNorm's batch statistic)."""
    return x.mean(axes, keepdim=True)


def _batch_variance(x, mean, axes: tuple[int, ...]):
    """x's biased variance over `axes` about `mean` (kept axes)."""
    return (x - mean).square().mean(axes, keepdim=True)


def _windows(src, kernel: tuple[int, ...], stride: tuple, dilation: tuple):
    """The window chain on a Tensor or a ShapeTracker (both have the movement methods):
    (..., *spatial) -> (..., *out, *kernel)."""
    nd = len(kernel)
    lead, spatial = tuple(src.shape[:-nd]), tuple(src.shape[-nd:])
    out = [(i - d * (k - 1) - 1) // s + 1 for i, k, s, d in zip(spatial, kernel, stride, dilation)]
    if any(o <= 0 for o in out):
        raise ShapeError(f"window {kernel} (dilation {dilation}) is larger than input {spatial}")
    x = src
    if all(k <= s for k, s in zip(kernel, stride)) and all(d == 1 for d in dilation):
        # non-overlapping windows: crop/pad to out*stride, split, keep the first k
        x = x.pad([(0, 0)] * len(lead) + [(0, o * s - i) for o, s, i in zip(out, stride, spatial)])
        x = x.reshape(lead + tuple(v for o, s in zip(out, stride) for v in (o, s)))
        x = x.shrink([(0, s) for s in lead] + [r for o, k in zip(out, kernel) for r in ((0, o), (0, k))])
        n = len(lead)
        order = list(range(n)) + [n + 2 * i for i in range(nd)] + [n + 2 * i + 1 for i in range(nd)]
        return x.permute(order)
    # overlapping windows: repeat each axis e times, then a row of length i+d per tap
    reps = [math.ceil(k * (i + d) / i) for k, i, d in zip(kernel, spatial, dilation)]
    x = x.reshape(lead + tuple(v for i in spatial for v in (1, i)))
    x = x.expand(lead + tuple(v for e, i in zip(reps, spatial) for v in (e, i)))
    x = x.reshape(lead + tuple(e * i for e, i in zip(reps, spatial)))
    x = x.shrink([(0, s) for s in lead] + [(0, k * (i + d)) for k, i, d in zip(kernel, spatial, dilation)])
    x = x.reshape(lead + tuple(v for k, i, d in zip(kernel, spatial, dilation) for v in (k, i + d)))
    # a stride longer than a row (i + d) needs a longer row; the tail is never picked
    x = x.pad([(0, 0)] * len(lead) + [r for o, s, i, d in zip(out, stride, spatial, dilation)
                                      for r in ((0, 0), (0, max(0, o * s - i - d)))])
    x = x.shrink([(0, s) for s in lead] + [r for k, o, s in zip(kernel, out, stride)
                                            for r in ((0, k), (0, o * s))])
    x = x.reshape(lead + tuple(v for k, o, s in zip(kernel, out, stride) for v in (k, o, s)))
    x = x.shrink([(0, s) for s in lead] + [r for k, o in zip(kernel, out)
                                            for r in ((0, k), (0, o), (0, 1))])
    x = x.reshape(lead + tuple(v for k, o in zip(kernel, out) for v in (k, o)))
    n = len(lead)
    order = list(range(n)) + [n + 2 * i + 1 for i in range(nd)] + [n + 2 * i for i in range(nd)]
    return x.permute(order)


class _Moves:
    """A ShapeTracker with the Tensor's movement signatures (negative padding crops)."""

    def __init__(self, st):
        self.st, self.shape = st, st.shape

    def reshape(self, shape):
        return _Moves(self.st.reshape(tuple(shape)))

    def expand(self, shape):
        return _Moves(self.st.expand(tuple(shape)))

    def permute(self, order):
        return _Moves(self.st.permute(tuple(order)))

    def shrink(self, arg):
        return _Moves(self.st.shrink(tuple(arg)))

    def pad(self, arg):
        crop = tuple((max(0, -b), s - max(0, -a)) for (b, a), s in zip(arg, self.shape))
        return _Moves(self.st.shrink(crop).pad(tuple((max(0, b), max(0, a)) for b, a in arg)))


@functools.lru_cache(maxsize=4096)
def _window_st(st, kernel: tuple[int, ...], stride: tuple, dilation: tuple):
    return _windows(_Moves(st), kernel, stride, dilation).st
