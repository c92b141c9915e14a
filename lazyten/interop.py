"""Conversions to numpy and Python, and PyTorch's small accessors: np.asarray(t),
float(t) / int(t) / operator.index(t), t.size(), t.dim(), t.cpu(); copy.deepcopy(t) (a
module's deep copy: nn.TransformerEncoder's layers); `t.data`, the value outside autograd
whose in-place updates land in t (D168). Mixed into Tensor.

Everything that returns data realizes the tensor (as numpy()/item() do).
"""
from __future__ import annotations
from typing import TYPE_CHECKING, Any

import numpy as np

from lazyten.dims import as_int, norm_dim
from lazyten.mixin import TensorMixin

if TYPE_CHECKING:  # same package; only for the annotations
    from lazyten.tensor import Tensor


class InteropMixin(TensorMixin):
    """numpy's array protocol, Python's number protocols and PyTorch's accessors."""

    # numpy's binary operators give way to the Tensor's (np.float32(2) * t is a Tensor)
    __array_ufunc__ = None

    def __array__(self, dtype=None, copy: bool | None = None) -> np.ndarray:
        """np.asarray(t): a realized copy (numpy 2's copy=False cannot be honoured)."""
        if copy is False:
            raise ValueError("np.asarray(tensor, copy=False): a Tensor's data lives on its "
                             "device, so converting it always copies; pass copy=None or True")
        out = self.numpy()
        return out if dtype is None else out.astype(dtype, copy=False)

    def __deepcopy__(self, memo: dict) -> Any:
        """A new tensor with a copy of the data (new memory on the same device), the same
        dtype and requires_grad, and a copy of `.grad`; as in PyTorch, only a leaf (a
        tensor made by the user, not by an op that records a gradient) can be copied.
        Without this, the copy shared or duplicated the device buffer's runtime."""
        if self._ctx is not None:
            raise RuntimeError("deepcopy of a tensor computed by an op that records a gradient "
                               "(not a leaf): detach() it first, as PyTorch requires")
        out = type(self)(self.numpy(), device=self.device, dtype=self.dtype)
        out.requires_grad = self.requires_grad
        memo[id(self)] = out
        if self.grad is not None:
            out.grad = self.grad.__deepcopy__(memo)
        return out

    def _one(self, what: str):
        if self.numel() != 1:
            raise TypeError(f"only one-element tensors can be converted to a Python {what}, "
                            f"got shape {self.shape}")
        return self.item()

    def __float__(self) -> float:
        return float(self._one("float"))

    def __int__(self) -> int:
        return int(self._one("int"))

    def __index__(self) -> int:
        if self.dtype.is_float or self.numel() != 1:
            raise TypeError(f"only integer tensors of a single element can be used as an "
                            f"index, got a {self.dtype.name} tensor of shape {self.shape}")
        return int(self.item())

    def size(self, dim: int | None = None) -> tuple[int, ...] | int:
        """The shape (a tuple), or the size of one dim, as PyTorch's size()."""
        if dim is None:
            return self.shape
        dim = as_int(dim, "size(dim): dim")
        if self.ndim == 0:  # PyTorch: a 0-d tensor has no dim to take the size of
            raise IndexError(f"size(dim): dim {dim} is out of range for a 0-d tensor")
        return self.shape[norm_dim(dim, self.ndim, f"size(dim) of shape {self.shape}: dim")]

    def dim(self) -> int:
        """The number of dims (ndim), as PyTorch's dim()."""
        return self.ndim

    def cpu(self) -> Any:
        """This tensor on the CPU device."""
        return self.to("CPU")

    @property
    def data(self) -> Tensor:
        """This tensor's value outside autograd (PyTorch's `.data`): an in-place update of
        it (`p.data.clamp_(-c, c)`, `p.data -= lr * p.grad.data`) changes this tensor,
        recording no gradient [D168]."""
        out = type(self)._wrap(self.lazydata)
        out.requires_grad, out._data_of = False, self
        return out

    @data.setter
    def data(self, value: Tensor) -> None:
        """`p.data = value`: value's value becomes this tensor's, in its own memory where
        shape, dtype and device agree (an optimiser holding p goes on), else in place of
        it; no gradient is recorded."""
        if not isinstance(value, type(self)):
            raise TypeError(f"data must be set to a Tensor, got {type(value).__name__}")
        if value.lazydata is self.lazydata:  # (`p.data -= x`: the update already landed)
            return
        if (value.shape, value.dtype, value.device) == (self.shape, self.dtype, self.device):
            self.assign(value.detach())
        else:
            self.lazydata = value.lazydata
