"""lazyten: a small deep-learning compiler. Lazy tensors, fused kernels, LLVM/OpenCL/CUDA."""
from codegen.dtypes import dtypes
from codegen.helpers import Context
from lazyten.jit import jit
from lazyten.tensor import Tensor, no_grad

__all__ = ["Context", "Tensor", "dtypes", "jit", "no_grad"]
