"""PyTorch's top-level namespace (`import lazyten as torch`; `torch.zeros(2, 3)`,
`torch.no_grad()`, `torch.float32`, `torch.save(model.state_dict(), path)`): torch's names,
argument names, order and defaults -> the Tensor classmethod or method that does it.

Here: creation, dtypes, grad mode, seeding, devices and state-dict files; the ops
(`torch.exp`, `torch.sum`, `torch.cat`...) are functions_ops.py's, re-exported. lazyten/
__init__.py imports this module when one of its names is first asked for. The dtype aliases
`float int bool` and the ops `abs max sum...` shadow Python's builtins: this module's code
spells those `builtins.<name>`. Divergences from PyTorch: docs/ops.md.
"""
from __future__ import annotations
import builtins
import contextlib
import os
from typing import TYPE_CHECKING, Any, Callable, cast

import numpy as np

from codegen.dtypes import DType, as_dtype, dtypes
from lazyten.elementwise import broadcast_shape
from lazyten.functions_ops import *  # noqa: F403 (the ops: their names are that module's __all__)
from lazyten.functions_ops import __all__ as _OPS, as_input, check_out
from lazyten.nn.state import safe_load, safe_save
from lazyten.switches import no_grad
from lazyten.tensor import Tensor
from runtimes import canonical, get_runtime

if TYPE_CHECKING:
    from runtimes.cuda import CUDARuntime


# ---- creation ----
def tensor(data: Any, *, dtype: Any = None, device: Any = None,
           requires_grad: builtins.bool = False) -> Tensor:
    """torch.tensor: a new leaf holding `data` (Python numbers and lists: float32 / int64 /
    bool, as PyTorch; numpy arrays keep their dtype). A Tensor given is detached."""
    if isinstance(data, Tensor):  # a value: no copy needed, only no graph
        out = data.detach()
        out = out if device is None and dtype is None else out.to(device=device, dtype=dtype)
        return out.requires_grad_(requires_grad)
    return Tensor(data, device=device, dtype=dtype, requires_grad=requires_grad)


def as_tensor(data: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """torch.as_tensor: a Tensor with that dtype and device is returned as it is."""
    if isinstance(data, Tensor):
        same_dtype = dtype is None or as_dtype(dtype) == data.dtype
        same_device = device is None or canonical(device) == data.device
        return data if same_dtype and same_device else data.to(device=device, dtype=dtype)
    return Tensor(data, device=device, dtype=dtype)


def from_numpy(ndarray: np.ndarray) -> Tensor:
    """torch.from_numpy: the array's values with its dtype (copied: no shared memory)."""
    if not isinstance(ndarray, np.ndarray):
        raise TypeError(f"lazyten.from_numpy expects a numpy.ndarray, got {type(ndarray).__name__}")
    return Tensor(ndarray)


def _shape(name: str, shape: tuple, size: Any) -> tuple:
    """The size of a creation call: `zeros(2, 3)`, `zeros((2, 3))` or `zeros(size=(2, 3))`."""
    if size is None:
        return shape
    if shape:
        raise TypeError(f"lazyten.{name}: give the size once, positionally or as size=")
    return tuple(size) if isinstance(size, (tuple, list)) else (size,)


def _no_generator(name: str, generator: Any) -> None:
    if generator is not None:
        raise TypeError(f"lazyten.{name}: generator= is not supported: lazyten has one "
                        f"random generator, seeded by lazyten.manual_seed(seed)")


def _sized(name: str) -> Callable[..., Tensor]:
    """torch.<name>(*size, dtype=, device=, requires_grad=) as Tensor.<name>(*size, ...)."""
    def make(*shape: Any, size: Any = None, dtype: Any = None, device: Any = None,
             requires_grad: builtins.bool = False, generator: Any = None,
             out: Any = None) -> Tensor:
        check_out(name, out)
        _no_generator(name, generator)
        return getattr(Tensor, name)(*_shape(name, shape, size), dtype=dtype, device=device,
                                     requires_grad=requires_grad)
    make.__name__ = make.__qualname__ = name
    make.__doc__ = f"torch.{name}(*size, dtype=None, device=None, requires_grad=False): Tensor.{name}."
    return make


zeros, ones, empty = _sized("zeros"), _sized("ones"), _sized("empty")
rand, randn = _sized("rand"), _sized("randn")


def full(size: Any, fill_value: Any, *, dtype: Any = None, device: Any = None,
         requires_grad: builtins.bool = False, out: Any = None) -> Tensor:
    """torch.full: the dtype of fill_value (bool, int64, float32) unless dtype= is given."""
    check_out("full", out)
    return Tensor.full(size, fill_value, dtype=dtype, device=device, requires_grad=requires_grad)


def arange(start: Any = 0, end: Any = None, step: Any = 1, *, dtype: Any = None,
           device: Any = None, requires_grad: builtins.bool = False, out: Any = None) -> Tensor:
    """torch.arange: int64 for integer arguments, else float32."""
    check_out("arange", out)
    return Tensor.arange(start, end, step, dtype=dtype, device=device, requires_grad=requires_grad)


def linspace(start: Any, end: Any, steps: builtins.int, *, dtype: Any = None, device: Any = None,
             requires_grad: builtins.bool = False, out: Any = None) -> Tensor:
    """torch.linspace: `steps` values from start to end, both exact."""
    check_out("linspace", out)
    return Tensor.linspace(start, end, steps, dtype=dtype, device=device,
                           requires_grad=requires_grad)


def logspace(start: Any, end: Any, steps: builtins.int, base: Any = 10.0, *, dtype: Any = None,
             device: Any = None, requires_grad: builtins.bool = False, out: Any = None) -> Tensor:
    """torch.logspace: base ** linspace(start, end, steps)."""
    check_out("logspace", out)
    return Tensor.logspace(start, end, steps, base, dtype=dtype, device=device,
                           requires_grad=requires_grad)


def eye(n: builtins.int, m: builtins.int | None = None, *, dtype: Any = None, device: Any = None,
        requires_grad: builtins.bool = False, out: Any = None) -> Tensor:
    """torch.eye: an n x m identity (float32 unless dtype= is given)."""
    check_out("eye", out)
    return Tensor.eye(n, m, dtype=dtype, device=device, requires_grad=requires_grad)


def randint(*args: Any, size: Any = None, low: Any = None, high: Any = None,
            generator: Any = None, dtype: Any = None, device: Any = None,
            requires_grad: builtins.bool = False, out: Any = None) -> Tensor:
    """torch.randint(high, size) or randint(low, high, size): int64 in [low, high)."""
    check_out("randint", out)
    _no_generator("randint", generator)
    if size is None and not (args and isinstance(args[-1], (tuple, list))):
        raise TypeError(f"lazyten.randint takes (high, size) or (low, high, size) with size a "
                        f"tuple, as PyTorch; got {args}")
    return Tensor.randint(*args, size=size, low=low, high=high, dtype=dtype, device=device,
                          requires_grad=requires_grad)


def randperm(n: builtins.int, *, generator: Any = None, dtype: Any = None, device: Any = None,
             requires_grad: builtins.bool = False, out: Any = None) -> Tensor:
    """torch.randperm: a random permutation of 0..n-1 (int64), drawn from lazyten's generator
    (so manual_seed repeats it, and a @jit replay draws anew, as for Tensor.rand)."""
    check_out("randperm", out)
    _no_generator("randperm", generator)
    return Tensor._random((n,), lambda rng, shape: rng.permutation(shape[0]),
                          dtypes.int64 if dtype is None else dtype, device, requires_grad)


def normal(mean: Any = 0.0, std: Any = 1.0, size: Any = None, *, generator: Any = None,
           dtype: Any = None, device: Any = None, requires_grad: builtins.bool = False,
           out: Any = None) -> Tensor:
    """torch.normal: normal(mean, std, size) with numbers, or elementwise normal(mean, std)
    where either is a tensor (broadcast; no gradient reaches mean or std, as PyTorch's
    gradients there are zero)."""
    check_out("normal", out)
    _no_generator("normal", generator)
    tensors = [v for v in (mean, std) if isinstance(v, Tensor)]
    if not tensors:
        if size is None:
            raise TypeError("lazyten.normal(mean, std) with numbers needs size=, as PyTorch")
        shape = tuple(size) if isinstance(size, (tuple, list)) else (size,)
        return Tensor.normal(*shape, mean=mean, std=std, dtype=dtype, device=device,
                             requires_grad=requires_grad)
    if size is not None:
        raise TypeError("lazyten.normal(mean, std): size= is only for numbers mean and std")
    like = tensors[0]
    noise = Tensor.randn(*broadcast_shape(*(v.shape for v in tensors)), device=like.device,
                         dtype=like.dtype if like.dtype.is_float else None)
    values = [v.detach() if isinstance(v, Tensor) else v for v in (mean, std)]
    return noise * values[1] + values[0]


def bernoulli(input: Tensor, p: Any = None, *, generator: Any = None, out: Any = None) -> Tensor:
    """torch.bernoulli: 1 with probability input (or p), else 0, in input's dtype."""
    x = as_input("bernoulli", input, out)
    _no_generator("bernoulli", generator)
    draws = Tensor.rand(*x.shape, device=x.device, dtype=x.dtype if x.dtype.is_float else None)
    return (draws < (x.detach() if p is None else p)).cast(x.dtype)


def _like(name: str) -> Callable[..., Tensor]:
    """torch.<name>(input, dtype=, device=, requires_grad=) as input.<name>(...)."""
    def make(input: Tensor, *, dtype: Any = None, device: Any = None,
             requires_grad: builtins.bool = False) -> Tensor:
        given = {k: v for k, v in (("dtype", dtype), ("device", device)) if v is not None}
        return getattr(as_input(name, input), name)(requires_grad=requires_grad, **given)
    make.__name__ = make.__qualname__ = name
    make.__doc__ = f"torch.{name}: input's shape, dtype and device unless given; Tensor.{name}."
    return make


zeros_like, ones_like, empty_like = _like("zeros_like"), _like("ones_like"), _like("empty_like")
rand_like, randn_like = _like("rand_like"), _like("randn_like")


def full_like(input: Tensor, fill_value: Any, *, dtype: Any = None, device: Any = None,
              requires_grad: builtins.bool = False) -> Tensor:
    """torch.full_like: input's shape, dtype and device unless given."""
    given = {k: v for k, v in (("dtype", dtype), ("device", device)) if v is not None}
    return as_input("full_like", input).full_like(fill_value, requires_grad=requires_grad, **given)


def randint_like(input: Tensor, low: Any = 0, high: Any = None, *, dtype: Any = None,
                 device: Any = None, requires_grad: builtins.bool = False) -> Tensor:
    """torch.randint_like(input, high) or (input, low, high): input's shape and dtype."""
    x = as_input("randint_like", input)
    low, high = (0, low) if high is None else (low, high)
    return Tensor.randint(low, high, x.shape, dtype=x.dtype if dtype is None else dtype,
                          device=x.device if device is None else device, requires_grad=requires_grad)


tril_indices, triu_indices = Tensor.tril_indices, Tensor.triu_indices  # torch's arguments


def is_tensor(obj: Any) -> builtins.bool:
    """torch.is_tensor: whether obj is a lazyten Tensor."""
    return isinstance(obj, Tensor)


def manual_seed(seed: builtins.int) -> None:
    """torch.manual_seed: reseed lazyten's one generator (returns None, not a Generator)."""
    Tensor.manual_seed(seed)


# ---- grad mode (per thread, as PyTorch's) ----
def is_grad_enabled() -> builtins.bool:
    """torch.is_grad_enabled: False inside no_grad()."""
    return not Tensor.no_grad


def _set_grad(enabled: builtins.bool) -> None:
    Tensor.no_grad = not enabled


def enable_grad(func: Callable | None = None) -> Any:
    """torch.enable_grad: record gradients inside the block or the decorated function."""
    block = Tensor.no_grad(False)  # the no_grad switch set to False for a block
    return block if func is None else block(func)


class set_grad_enabled:
    """torch.set_grad_enabled(mode): as a call it sets the mode at once; as a block or a
    decorator it sets it inside and restores the previous mode after."""

    def __init__(self, mode: builtins.bool) -> None:
        self.previous, self.mode = is_grad_enabled(), builtins.bool(mode)
        _set_grad(self.mode)

    def __enter__(self) -> None:
        _set_grad(self.mode)

    def __exit__(self, *exc_info: Any) -> None:
        _set_grad(self.previous)

    def __call__(self, func: Callable) -> Callable:
        _set_grad(self.previous)  # a decorator changes the mode only while func runs
        return Tensor.no_grad(not self.mode)(func)


class _Unchanged(contextlib.ContextDecorator):
    """A block (or decorator) that changes nothing: inference_mode(False)."""

    def __enter__(self) -> _Unchanged:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        return None


def inference_mode(mode: Any = True) -> Any:
    """torch.inference_mode: lazyten's no_grad (there is no separate inference mode);
    inference_mode(False) changes nothing. A block or a decorator, with or without ()."""
    if callable(mode):
        return no_grad(mode)
    return no_grad() if mode else _Unchanged()


# ---- dtypes ----
dtype = DType
float32, float, float16, half = dtypes.float32, dtypes.float32, dtypes.float16, dtypes.float16
bfloat16, float64, double = dtypes.bfloat16, dtypes.float64, dtypes.float64
int8, int16, short, int32, int = dtypes.int8, dtypes.int16, dtypes.int16, dtypes.int32, dtypes.int32
int64, long, bool = dtypes.int64, dtypes.int64, dtypes.bool
uint8, uint16, uint32, uint64 = dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64


def get_default_dtype() -> DType:
    """torch.get_default_dtype: the dtype of floats made from Python numbers (float32)."""
    return dtypes.default_float


# ---- devices ----
class device(str):
    """torch.device("cuda:1") or device("cuda", 1): lazyten's canonical device name (a str,
    so `.to()`, `device=` and `x.device == device` take it), with torch's `.type` and
    `.index`. Unknown names raise ValueError; creating one does not open the device."""
    type: str  # "cpu", "cuda", "opencl"...
    _index: builtins.int | None

    def __new__(cls, name: Any, index: builtins.int | None = None) -> device:
        if isinstance(name, device) and index is None:
            return name
        full_name = str(name) if index is None else f"{name}:{index}"
        made = super().__new__(cls, canonical(full_name))
        kind, _, number = full_name.partition(":")
        made.type, made._index = canonical(kind).lower(), builtins.int(number) if number else None
        return made

    @property
    def index(self) -> builtins.int | None:  # type: ignore[override]
        """The device number given (None if none was), as torch's; it hides str.index."""
        return self._index

    def __repr__(self) -> str:
        index = "" if self.index is None else f", index={self.index}"
        return f"device(type={self.type!r}{index})"


class _Cuda:
    """torch.cuda's questions, answered by lazyten's CUDA runtime."""

    @staticmethod
    def is_available() -> builtins.bool:
        """Whether lazyten's CUDA runtime opens (which, unlike PyTorch's, opens device 0)."""
        try:
            get_runtime("CUDA")
        except Exception:  # a missing library, driver or device: the runtime says which
            return False
        return True

    @staticmethod
    def device_count() -> builtins.int:
        """The number of CUDA devices (0 where the runtime does not open)."""
        if not _Cuda.is_available():
            return 0
        runtime = cast("CUDARuntime", get_runtime("CUDA"))
        return runtime.cu.ints("cuDeviceGetCount", 1)[0]

    @staticmethod
    def manual_seed(seed: builtins.int) -> None:
        """lazyten has one generator for every device: the same as lazyten.manual_seed."""
        Tensor.manual_seed(seed)

    manual_seed_all = manual_seed


cuda = _Cuda()


# ---- state-dict files: safetensors only, never pickle ----
_PICKLE_MAGIC = (b"PK\x03\x04", b"\x80")  # torch.save's zip archive, a bare pickle


def save(obj: Any, f: str | os.PathLike) -> None:
    """torch.save of a state dict ({name: Tensor}, e.g. model.state_dict()) as a safetensors
    file (nn.state.safe_save); anything else is a TypeError: lazyten never pickles."""
    if not isinstance(obj, dict):
        raise TypeError(f"lazyten.save saves a state dict ({{name: Tensor}}, such as "
                        f"model.state_dict()) as safetensors; got {type(obj).__name__} "
                        f"(lazyten never pickles)")
    for key, value in obj.items():
        if not isinstance(key, str) or not isinstance(value, Tensor):
            raise TypeError(f"lazyten.save: a state dict maps str names to Tensors; entry "
                            f"{key!r} is {type(value).__name__} (nested dicts, numbers and "
                            f"other objects cannot be saved: lazyten never pickles)")
    if not isinstance(f, (str, os.PathLike)):
        raise TypeError(f"lazyten.save writes to a path, got {type(f).__name__}")
    safe_save(obj, f)


def load(f: str | os.PathLike, map_location: Any = None, *,
         weights_only: builtins.bool | None = None) -> dict[str, Tensor]:
    """torch.load of a safetensors file (what lazyten.save writes) -> {name: Tensor} on
    `map_location` or the default device; checked, never unpickled (always weights_only)."""
    if not isinstance(f, (str, os.PathLike)):
        raise TypeError(f"lazyten.load reads a path, got {type(f).__name__}")
    if map_location is not None and not isinstance(map_location, str):
        raise TypeError(f"lazyten.load: map_location must be a device name such as 'cpu', got "
                        f"{type(map_location).__name__}")
    with open(f, "rb") as file:
        head = file.read(4)
    if head.startswith(_PICKLE_MAGIC):
        raise ValueError(f"{os.fspath(f)!r} is a PyTorch pickle checkpoint: lazyten reads "
                         f"only safetensors files and never unpickles (save it with "
                         f"safetensors.torch.save_file(state_dict, path) in PyTorch)")
    return safe_load(f, device=map_location)


__all__ = [
    "tensor", "as_tensor", "from_numpy", "zeros", "ones", "empty", "rand", "randn", "full",
    "arange", "linspace", "logspace", "eye", "randint", "randperm", "normal", "bernoulli",
    "zeros_like", "ones_like", "empty_like", "rand_like", "randn_like", "full_like",
    "randint_like", "tril_indices", "triu_indices", "is_tensor", "manual_seed",
    "no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled", "inference_mode",
    "dtype", "float32", "float", "float16", "half", "bfloat16", "float64", "double", "int8",
    "int16", "short", "int32", "int", "int64", "long", "bool", "uint8", "uint16", "uint32",
    "uint64", "get_default_dtype", "device", "cuda", "save", "load",
] + _OPS
