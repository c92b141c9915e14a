"""lazyten: a small deep-learning compiler. Lazy tensors, fused kernels, LLVM/OpenCL/CUDA."""
import importlib

from codegen.dtypes import dtypes
from codegen.helpers import Context
from lazyten.jit import jit
from lazyten.tensor import Tensor, no_grad

__all__ = ["Context", "Tensor", "dtypes", "jit", "no_grad"]

_SUBMODULES = ("nn", "optim")  # `lazyten.optim.Adam` after `import lazyten`, as in PyTorch


def __getattr__(name: str):
    """Submodules a PyTorch user reaches as attributes, imported on first use so that
    `import lazyten` stays as quick as before."""
    if name in _SUBMODULES:
        return importlib.import_module(f"lazyten.{name}")
    raise AttributeError(f"module 'lazyten' has no attribute {name!r}")
