"""lazyten: a small deep-learning compiler. Lazy tensors, fused kernels, LLVM/OpenCL/CUDA."""
from codegen.dtypes import dtypes
from lazyten.tensor import Tensor, no_grad

__all__ = ["Tensor", "dtypes", "no_grad"]
from lazyten.jit import jit  # noqa: E402

__all__.append("jit")
