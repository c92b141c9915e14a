"""lazyten: a small deep-learning compiler. Lazy tensors, fused kernels, LLVM/OpenCL/CUDA."""
import importlib
import types

from codegen.dtypes import dtypes
from codegen.helpers import Context
from lazyten.jit import jit
from lazyten.tensor import Tensor, no_grad

__all__ = ["Context", "Tensor", "dtypes", "jit", "no_grad"]

_SUBMODULES = ("nn", "optim", "utils")  # `lazyten.optim.Adam` after `import lazyten`, as in PyTorch
# submodules named like a torch function: `lazyten.tensor([1, 2])`, `lazyten.einsum(...)`
_CALLABLE_SUBMODULES = ("tensor", "einsum", "split", "scatter")


class _CallableModule(types.ModuleType):
    """A submodule that shares its name with a PyTorch function (lazyten/tensor.py and
    torch.tensor): it stays the module (`from lazyten.tensor import Tensor`), and calling
    it calls the function of lazyten/functions.py."""

    def __call__(self, *args, **kwargs):
        name = self.__name__.rpartition(".")[2]
        return getattr(importlib.import_module("lazyten.functions"), name)(*args, **kwargs)


for _name in _CALLABLE_SUBMODULES:
    importlib.import_module(f"lazyten.{_name}").__class__ = _CallableModule  # loaded: no cost
del _name


def __getattr__(name: str):
    """Submodules and PyTorch's top-level functions (`lazyten.zeros`, `lazyten.float32`,
    lazyten/functions.py), imported on first use so that `import lazyten` stays quick."""
    if name in _SUBMODULES:
        return importlib.import_module(f"lazyten.{name}")
    if not name.startswith("__"):
        functions = importlib.import_module("lazyten.functions")
        if name in functions.__all__:
            value = getattr(functions, name)
            globals()[name] = value  # found directly from now on
            return value
    raise AttributeError(f"module 'lazyten' has no attribute {name!r}")


def __dir__() -> list[str]:
    functions = importlib.import_module("lazyten.functions")
    return sorted(set(globals()) | set(_SUBMODULES) | set(functions.__all__))

