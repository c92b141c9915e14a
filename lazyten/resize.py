"""Tensor.interpolate: PyTorch's nearest / nearest-exact / (bi|tri)linear resampling.

(N, C, *spatial) -> (N, C, *size). Source indices and weights are computed on the host
with PyTorch's formulas (in its opmath precision: float32 for float32 and float16 inputs),
so they are constants; each spatial axis is then resampled on its own: nearest is one
gather, linear two gathers and a weighted sum. A gather of constant indices is a view
where the indices allow it (identity, or each input repeated k times) and a constant
one-hot select + sum otherwise: only the two neighbours of an output are ever read, so an
inf elsewhere never meets a 0 weight (as a dense weight-matrix matmul would make NaN).
Weights that are exactly 0 drop their term too, so an inf neighbour it skips stays out.
Mixed into Tensor.
"""
from __future__ import annotations
import math

import numpy as np

from codegen.dtypes import dtypes
from lazyten.mixin import TensorMixin

MODES = {"nearest": None, "nearest-exact": None, "linear": 1, "bilinear": 2, "trilinear": 3}


def _scale(in_size: int, out_size: int, scale, align_corners: bool, dt):
    """PyTorch's area_pixel_compute_scale."""
    if align_corners:
        return dt(in_size - 1) / dt(out_size - 1) if out_size > 1 else dt(0)
    return dt(1.0 / scale) if scale is not None and scale > 0 else dt(in_size) / dt(out_size)


def _nearest_index(in_size: int, out_size: int, scale, exact: bool) -> np.ndarray:
    """PyTorch's nearest_idx / nearest_neighbor_exact_compute_source_index (float math)."""
    dst = np.arange(out_size, dtype=np.float32)
    if out_size == in_size:
        return np.arange(out_size)
    if out_size == 2 * in_size and not exact:
        return np.arange(out_size) >> 1
    s = _scale(in_size, out_size, scale, False, np.float32)
    src = np.floor((dst + np.float32(0.5)) * s if exact else dst * s)
    return np.minimum(src.astype(np.int64), in_size - 1)


def _linear_index(in_size: int, out_size: int, scale, align_corners: bool, dt):
    """PyTorch's compute_source_index_and_lambda: (i0, i1, w0, w1) per output position."""
    s = _scale(in_size, out_size, scale, align_corners, dt)
    dst = np.arange(out_size, dtype=dt)
    src = s * dst if align_corners else np.maximum(s * (dst + dt(0.5)) - dt(0.5), dt(0))
    i0 = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    w1 = np.clip(src - i0.astype(dt), dt(0), dt(1)).astype(dt)
    i1 = i0 + (i0 < in_size - 1)
    return i0, i1, (dt(1) - w1).astype(dt), w1


def _take(x, axis: int, index: np.ndarray, care: np.ndarray | None = None):
    """x indexed along `axis` by constant indices (only those where `care` matter): a view
    for a strided run or a clipped repeat (PyTorch's integer-factor patterns), else a
    constant one-hot select + sum."""
    n, m = x.shape[axis], len(index)
    care = np.ones(m, bool) if care is None else care
    j = np.arange(m)
    cared = np.flatnonzero(care)
    if len(cared) == 0:
        return _slice(x, axis, 0, 0, m)
    # a strided run a, a + k, a + 2k, ... (identity, integer down-sampling)
    first = cared[0]
    step = (index[cared[1]] - index[first]) // (cared[1] - first) if len(cared) > 1 else 1
    start = index[first] - first * step
    if step >= 0 and 0 <= start and start + (m - 1) * step < n and \
            (start + j * step == index)[care].all():
        return _slice(x, axis, start, step, m)
    # each input repeated k times, shifted by c, clipped at the ends (up-sampling)
    for k in sorted({max(2, m // max(n, 1)), max(2, -(-m // max(n, 1)))}):
        for c in range(-2 * k, 2 * k + 1):
            if (np.clip((j + c) // k, 0, n - 1) == index)[care].all():
                return _clipped_repeat(x, axis, k, c, m)
    onehot = type(x)(index[:, None] == np.arange(n)[None, :], device=x.device)
    onehot = onehot.reshape((m, n) + (1,) * (x.ndim - axis - 1))
    picked = onehot.where(x.unsqueeze(axis), 0).sum(axis=axis + 1)
    return picked.cast(x.dtype) if picked.dtype != x.dtype else picked


def _slice(x, axis: int, start: int, step: int, count: int):
    """Elements start, start + step, ... (count of them) along axis, as views."""
    if step == 0:
        one = x._slice_axis(axis, start, start + 1, 1)
        return one.expand(x.shape[:axis] + (count,) + x.shape[axis + 1:])
    return x._slice_axis(axis, start, start + (count - 1) * step + 1, step)


def _clipped_repeat(x, axis: int, k: int, c: int, m: int):
    """out[j] = x[clip((j + c) // k, 0, n - 1)]: repeat each element k times (a view), pad
    with copies of the ends, and take m elements from c."""
    n, rest = x.shape[axis], x.shape[axis + 1:]
    x = x.reshape(x.shape[:axis + 1] + (1,) + rest)
    x = x.expand(x.shape[:axis + 1] + (k,) + rest).reshape(x.shape[:axis] + (n * k,) + rest)
    before, after = max(0, -c), max(0, c + m - n * k)
    if before or after:
        x = x.pad([(0, 0)] * axis + [(before, after)] + [(0, 0)] * len(rest), mode="replicate")
    return x._slice_axis(axis, c + before, c + before + m, 1)


def _weights(x, axis: int, w: np.ndarray):
    """A constant per-position weight along `axis`, broadcast against x."""
    shape = (len(w),) + (1,) * (x.ndim - axis - 1)
    return type(x)(w, device=x.device).cast(x.dtype).reshape(shape)


def _linear_axis(x, axis: int, out_size: int, scale, align_corners: bool):
    in_size = x.shape[axis]
    if in_size == out_size:
        return x
    dt = np.float64 if x.dtype == dtypes.float64 else np.float32
    i0, i1, w0, w1 = _linear_index(in_size, out_size, scale, align_corners, dt)
    out = None
    for idx, w in ((i0, w0), (i1, w1)):
        if not w.any():
            continue
        term = _take(x, axis, idx, care=w != 0) * _weights(x, axis, w)
        if not w.all():  # a 0 weight reads nothing: an inf or NaN there stays out
            shape = (len(w),) + (1,) * (x.ndim - axis - 1)
            term = type(x)(w != 0, device=x.device).reshape(shape).where(term, 0)
        out = term if out is None else out + term
    return out


class ResizeMixin(TensorMixin):
    """interpolate."""

    def interpolate(self, size=None, scale_factor=None, mode: str = "nearest",
                    align_corners: bool | None = None, recompute_scale_factor: bool | None = None):
        """torch.nn.functional.interpolate for (N, C, *spatial) inputs of 1-3 spatial dims."""
        if mode not in MODES:
            raise ValueError(f"interpolate mode must be one of {list(MODES)}, got {mode!r}")
        nd, mode_dims = self.ndim - 2, MODES[mode]
        if not 1 <= nd <= 3:
            raise ValueError(f"interpolate needs a 3-d, 4-d or 5-d (N, C, *spatial) input, "
                             f"got shape {self.shape}")
        if mode_dims is not None and mode_dims != nd:
            raise ValueError(f"interpolate mode {mode!r} needs a {mode_dims + 2}-d input, "
                             f"got shape {self.shape}")
        if mode_dims is None and align_corners is not None:
            raise ValueError(f"align_corners can only be set with the linear modes, not {mode!r}")
        if mode_dims is not None and not self.dtype.is_float:
            raise TypeError(f"interpolate mode {mode!r} needs a float input, got "
                            f"{self.dtype.name}")
        in_sp = self.shape[2:]
        if (size is None) == (scale_factor is None):
            raise ValueError("interpolate needs exactly one of size and scale_factor")
        if size is not None:
            if recompute_scale_factor:
                raise ValueError("recompute_scale_factor needs scale_factor, not size")
            size = (size,) * nd if isinstance(size, int) else tuple(size)
            if len(size) != nd or any(not isinstance(s, int) or s <= 0 for s in size):
                raise ValueError(f"interpolate size {size} does not fit {nd} spatial dims "
                                 f"of input {self.shape} (positive ints)")
            scales: tuple[float | None, ...] = (None,) * nd
        else:
            factors = (scale_factor,) * nd if isinstance(scale_factor, (int, float)) \
                else tuple(scale_factor)
            if len(factors) != nd or any(not s > 0 for s in factors):
                raise ValueError(f"interpolate scale_factor {scale_factor} does not fit {nd} "
                                 f"spatial dims of input {self.shape} (positive numbers)")
            size = tuple(math.floor(i * float(s)) for i, s in zip(in_sp, factors))
            if any(s <= 0 for s in size):
                raise ValueError(f"interpolate scale_factor {scale_factor} makes an empty "
                                 f"output {size} from input {self.shape}")
            scales = (None,) * nd if recompute_scale_factor else factors
        if 0 in in_sp:
            raise ValueError(f"interpolate of an empty spatial dim: input {self.shape}")
        x = self
        for d in range(nd):
            axis = 2 + d
            if mode_dims is None:
                index = _nearest_index(in_sp[d], size[d], scales[d], mode == "nearest-exact")
                x = _take(x, axis, index)
            else:
                x = _linear_axis(x, axis, size[d], scales[d], bool(align_corners))
        return x
