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
from lazyten.autograd.composite import Composite
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


# How one axis is resampled, found once per (sizes, scale, mode, dtype) on the host and
# kept (`_axis_plan`): eager code resizes the same shapes every step, and finding a
# pattern (below) takes tens of numpy calls, about 0.3 ms of a bilinear 2x upsample.
# A pick is ("slice", start, step), ("repeat", k, c) or ("onehot", index); a term is
# (pick, weight or None, nonzero mask or None), the weights and mask read-only arrays.
_PLANS: dict[tuple, tuple] = {}
_CONSTS: dict[tuple, object] = {}  # (plan key, term, kind, device, dtype, rank) -> Tensor
_KEEP = 512  # entries of each cache before it starts again


def _pick(n: int, index: np.ndarray, care: np.ndarray | None = None) -> tuple:
    """How to index a length-n axis by constant indices (only those where `care` matter):
    a strided run or a clipped repeat (PyTorch's integer-factor patterns), both views,
    else a one-hot select + sum."""
    m = len(index)
    care = np.ones(m, bool) if care is None else care
    j = np.arange(m)
    cared = np.flatnonzero(care)
    if len(cared) == 0:
        return ("slice", 0, 0)
    # a strided run a, a + k, a + 2k, ... (identity, integer down-sampling)
    first = cared[0]
    step = (index[cared[1]] - index[first]) // (cared[1] - first) if len(cared) > 1 else 1
    start = index[first] - first * step
    if step >= 0 and 0 <= start and start + (m - 1) * step < n and \
            (start + j * step == index)[care].all():
        return ("slice", int(start), int(step))
    # each input repeated k times, shifted by c, clipped at the ends (up-sampling)
    for k in sorted({max(2, m // max(n, 1)), max(2, -(-m // max(n, 1)))}):
        for c in range(-2 * k, 2 * k + 1):
            if (np.clip((j + c) // k, 0, n - 1) == index)[care].all():
                return ("repeat", k, c)
    return ("onehot", _frozen(index))


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def _axis_plan(in_size: int, out_size: int, scale, align_corners: bool, mode: str,
               dt) -> tuple:
    """The terms whose sum resamples one axis (see `_PLANS`)."""
    key = (in_size, out_size, scale, align_corners, mode, dt)
    plan = _PLANS.get(key)
    if plan is None:
        if len(_PLANS) >= _KEEP:
            _PLANS.clear()
        plan = _PLANS[key] = _make_plan(*key)
    return plan


def _make_plan(in_size: int, out_size: int, scale, align_corners: bool, mode: str, dt) -> tuple:
    if mode in ("nearest", "nearest-exact"):
        index = _nearest_index(in_size, out_size, scale, mode == "nearest-exact")
        return ((_pick(in_size, index), None, None),)
    terms = []
    i0, i1, w0, w1 = _linear_index(in_size, out_size, scale, align_corners, dt)
    for idx, w in ((i0, w0), (i1, w1)):
        if not w.any():
            continue
        # a 0 weight reads nothing: an inf or NaN there stays out
        terms.append((_pick(in_size, idx, care=w != 0), _frozen(w),
                      None if w.all() else _frozen(w != 0)))
    return tuple(terms)


def _take(x, axis: int, pick: tuple, m: int, key: tuple):
    """x indexed along `axis` as `pick` says, m elements (`key`: the term's, for the
    one-hot constant)."""
    if pick[0] == "slice":
        return _slice(x, axis, pick[1], pick[2], m)
    if pick[0] == "repeat":
        return _clipped_repeat(x, axis, pick[1], pick[2], m)
    index, n = pick[1], x.shape[axis]
    onehot = _const(x, index[:, None] == np.arange(n)[None, :],
                    (m, n) + (1,) * (x.ndim - axis - 1), key + ("onehot",))
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


def _const(x, values: np.ndarray, shape: tuple[int, ...], key: tuple):
    """A constant (weights in x's dtype, a mask as bools) of `shape` on x's device: uploaded
    once per plan term, device, dtype and shape, then reused (an upload per call was about
    10 us each). Frozen (lazy.py): it is ours and never written, so a trace may read it."""
    key = key + (x.device, x.dtype, shape)
    found = _CONSTS.get(key)
    if found is None:
        if len(_CONSTS) >= _KEEP:
            _CONSTS.clear()
        made = type(x)(values, device=x.device)
        made.lazydata.base.frozen = True
        if made.dtype.is_float and made.dtype != x.dtype:  # (16-bit floats: their opmath's)
            made = made.cast(x.dtype)
        found = _CONSTS[key] = made.reshape(shape)
    return found


def _resample_axis(x, axis: int, out_size: int, scale, align_corners: bool, mode: str):
    in_size = x.shape[axis]
    if in_size == out_size and MODES[mode] is not None:  # (linear: nothing to mix)
        return x
    dt = np.float64 if x.dtype == dtypes.float64 else np.float32
    plan_key = (in_size, out_size, scale, align_corners, mode, dt)
    along = (out_size,) + (1,) * (x.ndim - axis - 1)
    out = None
    for i, (pick, w, mask) in enumerate(_axis_plan(*plan_key)):
        term = _take(x, axis, pick, out_size, plan_key + (i,))
        if w is not None:
            term = term * _const(x, w, along, plan_key + (i, "weight"))
        if mask is not None:  # a 0 weight reads nothing: an inf or NaN there stays out
            term = _const(x, mask, along, plan_key + (i, "mask")).where(term, 0)
        out = term if out is None else out + term
    return out


def _resample(x, size: tuple[int, ...], scales: tuple, align_corners: bool, mode: str):
    """x resampled axis by axis: interpolate's body, run as written or as one Composite
    (fixed by its arguments and x's shape, dtype and device)."""
    for d in range(len(size)):
        x = _resample_axis(x, 2 + d, size[d], scales[d], align_corners, mode)
    return x


def _views_only(in_sp: tuple[int, ...], size: tuple[int, ...], scales: tuple, mode: str) -> bool:
    """Whether nearest resampling is views of the input only (then it runs as written: a
    trace of a view is refused)."""
    return MODES[mode] is None and all(
        _axis_plan(i, o, s, False, mode, np.float32)[0][0][0] != "onehot"
        for i, o, s in zip(in_sp, size, scales))


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
        args = (tuple(size), tuple(scales), bool(align_corners), mode)
        if _views_only(in_sp, *args[:2], mode):
            return _resample(self, *args)
        # one traced call: one graph node forward and one backward, where the resampling
        # is tens of ops (a bilinear 2x upsample: about 40 each way)
        return self.apply(Composite, body=_resample, size=args[0], scales=args[1],
                          align_corners=args[2], mode=mode)
