"""torch.nn.init: PyTorch's parameter initialisations, with its names, arguments and errors.

Each function takes an existing tensor (usually a parameter that requires grad and that a
module or an optimiser already holds), overwrites its values in place and returns it: the
same Tensor object, its memory (`assign`), dtype, device and requires_grad kept, no
gradient recorded. Random values are drawn on the host from lazyten's generator
(`Tensor.manual_seed` seeds it), or from a numpy Generator given as `generator=`, and
copied in: their distributions are PyTorch's, their bits are not. As everywhere in
lazyten, a view of another tensor is a value of its own: initialising `w[0]` leaves `w`.
"""
from __future__ import annotations
import math
import warnings
from typing import Callable

import numpy as np

from codegen.helpers import prod
from lazyten.creation import to_numpy_dtype
from lazyten.errors import ArgumentError
from lazyten.tensor import Tensor, no_grad

__all__ = ["calculate_gain", "uniform_", "normal_", "trunc_normal_", "constant_", "ones_",
           "zeros_", "eye_", "dirac_", "xavier_uniform_", "xavier_normal_",
           "kaiming_uniform_", "kaiming_normal_", "orthogonal_", "sparse_"]

Sample = Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]
_LINEAR = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
           "conv_transpose3d", "sigmoid")
_GAINS = {"tanh": 5.0 / 3, "relu": math.sqrt(2.0), "selu": 3.0 / 4}  # selu: PyTorch's choice
_MODES = ("fan_in", "fan_out")


# ---- writing into the tensor ----
def _target(tensor: Tensor, name: str, random: bool = False) -> Tensor:
    if not isinstance(tensor, Tensor):
        raise TypeError(f"nn.init.{name} takes a lazyten Tensor, got {type(tensor).__name__}")
    if random and not tensor.dtype.is_float:  # PyTorch: not implemented for 'Long'
        raise NotImplementedError(f"nn.init.{name} draws floating-point values; the tensor of "
                                  f"shape {tensor.shape} is {tensor.dtype.name}")
    return tensor


def _store(tensor: Tensor, value: Tensor) -> Tensor:
    """`value` written into tensor's memory. Realized at once: a second update of a pending
    one would replace the tensor's buffer instead of writing into it (Tensor.assign)."""
    if tensor.numel():
        with no_grad():
            tensor.assign(value.cast(tensor.dtype)).realize()
    return tensor


def _host(tensor: Tensor, values: np.ndarray) -> Tensor:
    """Host values in tensor's dtype and on its device (numpy has no bfloat16: float32)."""
    data = np.asarray(values).astype(to_numpy_dtype(tensor.dtype))
    return Tensor(data, device=tensor.device, dtype=tensor.dtype)


def _draw(tensor: Tensor, sample: Sample, generator: np.random.Generator | None) -> Tensor:
    """tensor filled with sample(rng, shape): lazyten's generator (which a JIT capture
    replays), or the one given."""
    if generator is None:
        return _store(tensor, Tensor._random(tensor.shape, sample, tensor.dtype, tensor.device,
                                             None))
    if not isinstance(generator, np.random.Generator):
        raise TypeError(f"generator must be a numpy.random.Generator or None, got "
                        f"{type(generator).__name__}")
    return _store(tensor, _host(tensor, sample(generator, tensor.shape)))


# ---- gains and fans ----
def calculate_gain(nonlinearity: str, param: int | float | None = None) -> float:
    """PyTorch's recommended gain for a nonlinearity: 1 for linear layers and sigmoid, 5/3
    for tanh, sqrt(2) for relu, sqrt(2 / (1 + slope^2)) for leaky_relu (slope 0.01 when
    `param` is None), 3/4 for selu."""
    if nonlinearity in _LINEAR:
        return 1.0
    if nonlinearity in _GAINS:
        return _GAINS[nonlinearity]
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, (int, float)) and not isinstance(param, bool):
            slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + slope ** 2))
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}: use one of "
                     f"{list(_LINEAR) + list(_GAINS) + ['leaky_relu']}")


def _calculate_fan_in_and_fan_out(tensor: Tensor) -> tuple[int, int]:
    """(shape[1], shape[0]), each times the receptive field prod(shape[2:]) (a Linear
    weight is (out, in), a conv weight (out, in / groups, *kernel))."""
    if tensor.ndim < 2:
        raise ValueError(f"Fan in and fan out can not be computed for tensor with fewer than "
                         f"2 dimensions (shape {tensor.shape})")
    receptive_field = prod(tensor.shape[2:])
    return tensor.shape[1] * receptive_field, tensor.shape[0] * receptive_field


def _calculate_correct_fan(tensor: Tensor, mode: str) -> int:
    mode = mode.lower()
    if mode not in _MODES:
        raise ValueError(f"Mode {mode} not supported, please use one of {list(_MODES)}")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


# ---- plain distributions ----
def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0,
             generator: np.random.Generator | None = None) -> Tensor:
    """Values drawn uniformly from [a, b)."""
    _target(tensor, "uniform_", random=True)
    if a > b:
        raise ArgumentError(f"uniform_ expects to return a [from, to) range, but found "
                            f"from={a} > to={b}")
    return _draw(tensor, lambda rng, shape: rng.uniform(a, b, shape), generator)


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0,
            generator: np.random.Generator | None = None) -> Tensor:
    """Values drawn from N(mean, std^2)."""
    _target(tensor, "normal_", random=True)
    if std < 0:
        raise ArgumentError(f"normal expects std >= 0.0, but found std {std}")
    return _draw(tensor, lambda rng, shape: rng.normal(mean, std, shape), generator)


def trunc_normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0,
                  b: float = 2.0, generator: np.random.Generator | None = None) -> Tensor:
    """Values drawn from N(mean, std^2) conditioned on [a, b] (absolute bounds, not in units
    of std, as PyTorch). PyTorch inverts the CDF; here rejection sampling draws the same
    distribution, whatever part of the normal [a, b] cuts out."""
    _target(tensor, "trunc_normal_", random=True)
    if a > b:
        raise ArgumentError(f"trunc_normal_ expects a <= b, but found a={a} > b={b}")
    if mean < a - 2 * std or mean > b + 2 * std:
        warnings.warn("mean is more than 2 std from [a, b] in nn.init.trunc_normal_. "
                      "The distribution of values may be incorrect.", stacklevel=2)
    scale = abs(std)  # the normal is symmetric: a negative std draws the same values

    def sample(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        if scale == 0:
            return np.full(shape, min(max(mean, a), b), dtype=np.float64)
        unit = _standard_truncated(rng, (a - mean) / scale, (b - mean) / scale, prod(shape))
        return np.clip(mean + scale * unit.reshape(shape), a, b)
    return _draw(tensor, sample, generator)


def _standard_truncated(rng: np.random.Generator, lo: float, hi: float, n: int) -> np.ndarray:
    """n draws of a standard normal conditioned on [lo, hi], by rejection (C. Robert, 1995):
    from the normal itself when [lo, hi] holds 0 and is at least 1 wide, else from a
    uniform over a short interval or an exponential over a tail, each accepting with the
    ratio of densities. Every proposal accepts at least about 1 in 5 draws."""
    if lo < 0 and hi <= 0:
        return -_standard_truncated(rng, -hi, -lo, n)
    # the exponential's best rate for a tail starting at lo (Robert's lambda*)
    rate = (lo + math.sqrt(lo * lo + 4)) / 2 if lo >= 0 else 0.0
    kept: list[np.ndarray] = []
    missing = n
    while missing > 0:
        count = 5 * missing + 16
        if lo < 0 and hi - lo >= 1:
            x = rng.standard_normal(count)
            accept = (lo <= x) & (x <= hi)
        elif lo >= 0 and rate * (hi - lo) > 1:
            x = lo + rng.standard_exponential(count) / rate
            accept = (x <= hi) & (rng.random(count) <= np.exp(-((x - rate) ** 2) / 2))
        else:  # short: uniform, against the density relative to its top on [lo, hi]
            x = rng.uniform(lo, hi, count)
            top = max(lo, 0.0)
            accept = rng.random(count) <= np.exp((top * top - x * x) / 2)
        kept.append(x[accept][:missing])
        missing -= len(kept[-1])
    return np.concatenate(kept) if kept else np.zeros(0)


# ---- fixed values ----
def constant_(tensor: Tensor, val: float) -> Tensor:
    """Every element set to `val` (cast to the tensor's dtype)."""
    _target(tensor, "constant_")
    return _store(tensor, Tensor.full(tensor.shape, val, dtype=tensor.dtype,
                                      device=tensor.device))


def ones_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 1.0)


def zeros_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 0.0)


def eye_(tensor: Tensor) -> Tensor:
    """A 2-d tensor set to the identity (ones on the main diagonal of a rectangle too)."""
    _target(tensor, "eye_")
    if tensor.ndim != 2:
        raise ValueError(f"Only tensors with 2 dimensions are supported, got shape {tensor.shape}")
    rows, cols = tensor.shape
    return _store(tensor, _host(tensor, np.eye(rows, cols)))


def dirac_(tensor: Tensor, groups: int = 1) -> Tensor:
    """A conv weight (out, in, *kernel) of 3-5 dims that passes its input through: in each
    of `groups` groups of out / groups channels, output channel d takes input channel d at
    the kernel's centre (for d below min(out / groups, in)); every other element 0."""
    _target(tensor, "dirac_")
    if tensor.ndim not in (3, 4, 5):
        raise ValueError(f"Only tensors with 3, 4, or 5 dimensions are supported, got shape "
                         f"{tensor.shape}")
    if groups < 1 or tensor.shape[0] % groups:
        raise ValueError(f"dim 0 must be divisible by groups: shape {tensor.shape}, "
                         f"groups {groups}")
    per_group = tensor.shape[0] // groups
    channels = np.arange(min(per_group, tensor.shape[1]))
    outputs = (np.arange(groups)[:, None] * per_group + channels).reshape(-1)
    inputs = np.tile(channels, groups)
    centre = tuple(size // 2 for size in tensor.shape[2:])
    values = np.zeros(tensor.shape)
    values[(outputs, inputs) + centre] = 1
    return _store(tensor, _host(tensor, values))


# ---- scaled by the fans ----
def xavier_uniform_(tensor: Tensor, gain: float = 1.0,
                    generator: np.random.Generator | None = None) -> Tensor:
    """Glorot: uniform on +-gain sqrt(6 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(_target(tensor, "xavier_uniform_"))
    bound = math.sqrt(3.0) * gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0,
                   generator: np.random.Generator | None = None) -> Tensor:
    """Glorot: normal with std gain sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(_target(tensor, "xavier_normal_"))
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return normal_(tensor, 0.0, std, generator)


def _kaiming_std(tensor: Tensor, name: str, a: float, mode: str, nonlinearity: str) -> float:
    """He: gain(nonlinearity, a) / sqrt(fan), the fan of `mode`."""
    fan = _calculate_correct_fan(_target(tensor, name), mode)
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def kaiming_uniform_(tensor: Tensor, a: float = 0, mode: str = "fan_in",
                     nonlinearity: str = "leaky_relu",
                     generator: np.random.Generator | None = None) -> Tensor:
    """He: uniform on +-sqrt(3) gain / sqrt(fan); `a` is leaky_relu's negative slope."""
    if 0 in _target(tensor, "kaiming_uniform_").shape:
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)
        return tensor
    bound = math.sqrt(3.0) * _kaiming_std(tensor, "kaiming_uniform_", a, mode, nonlinearity)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor: Tensor, a: float = 0, mode: str = "fan_in",
                    nonlinearity: str = "leaky_relu",
                    generator: np.random.Generator | None = None) -> Tensor:
    """He: normal with std gain / sqrt(fan); `a` is leaky_relu's negative slope."""
    if 0 in _target(tensor, "kaiming_normal_").shape:
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)
        return tensor
    std = _kaiming_std(tensor, "kaiming_normal_", a, mode, nonlinearity)
    return normal_(tensor, 0.0, std, generator)


# ---- structured random matrices ----
def orthogonal_(tensor: Tensor, gain: float = 1,
                generator: np.random.Generator | None = None) -> Tensor:
    """A (semi-)orthogonal matrix times gain, over the tensor seen as (shape[0], rest): the
    Q of a QR decomposition of a standard normal matrix (made tall first, transposed back),
    its columns' signs set by R's diagonal so Q is Haar-distributed. QR runs in numpy."""
    _target(tensor, "orthogonal_", random=True)
    if tensor.ndim < 2:
        raise ValueError(f"Only tensors with 2 or more dimensions are supported, got shape "
                         f"{tensor.shape}")
    if tensor.numel() == 0:
        return tensor
    rows = tensor.shape[0]
    cols = tensor.numel() // rows

    def sample(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        flat = rng.standard_normal((rows, cols))
        tall = flat.T if rows < cols else flat
        q, r = np.linalg.qr(tall)
        q *= np.where(np.diag(r) < 0, -1.0, 1.0)
        return gain * (q.T if rows < cols else q).reshape(shape)
    return _draw(tensor, sample, generator)


def sparse_(tensor: Tensor, sparsity: float, std: float = 0.01,
            generator: np.random.Generator | None = None) -> Tensor:
    """A 2-d matrix drawn from N(0, std^2), then in each column ceil(sparsity * rows)
    elements, at rows picked at random, set to 0."""
    _target(tensor, "sparse_", random=True)
    if tensor.ndim != 2:
        raise ValueError(f"Only tensors with 2 dimensions are supported, got shape {tensor.shape}")
    if not 0 <= sparsity <= 1:
        raise ValueError(f"sparsity must be in [0, 1], got {sparsity}")
    if std < 0:
        raise ArgumentError(f"normal expects std >= 0.0, but found std {std}")
    zeros = math.ceil(sparsity * tensor.shape[0])

    def sample(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        values = rng.normal(0.0, std, shape)
        rows = np.argsort(rng.random(shape), axis=0)[:zeros]  # a random permutation a column
        np.put_along_axis(values, rows, 0.0, axis=0)
        return values
    return _draw(tensor, sample, generator)
