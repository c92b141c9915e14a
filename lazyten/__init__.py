"""lazyten: a small deep-learning compiler. Lazy tensors, fused kernels, LLVM/OpenCL/CUDA."""
from codegen.dtypes import dtypes
from lazyten.tensor import Tensor, no_grad

__all__ = ["Tensor", "dtypes", "no_grad"]
