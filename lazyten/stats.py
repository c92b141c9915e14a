"""Vector norms and (std|var, mean) pairs with PyTorch's names: Tensor -> Tensor(s).

norm follows torch.norm / torch.linalg.vector_norm: 'fro' and 2 are sqrt(sum(x^2)), inf and
-inf the max and min of |x|, 0 the count of non-zeros, any other p (sum |x|^p)^(1/p).
Mixed into Tensor.
"""
from __future__ import annotations
import math

from lazyten.aliases import keywords
from lazyten.mixin import TensorMixin


class StatsMixin(TensorMixin):
    """norm, std_mean, var_mean."""

    @keywords(axis="dim")
    def norm(self, p="fro", dim=None, keepdim: bool = False):
        """torch.norm for vectors: p in 'fro', a number, inf or -inf over `dim` (all dims)."""
        if not self.dtype.is_float:
            raise TypeError(f"norm needs a floating point tensor, got {self.dtype.name}")
        if isinstance(p, str):
            if p != "fro":
                raise ValueError(f"norm: p={p!r} is not supported (use 'fro' or a number)")
            if dim is not None and not isinstance(dim, int) and len(dim) > 2:
                raise ValueError(f"norm: p='fro' takes at most 2 dims, got dim={dim}")
            p = 2
        if isinstance(p, bool) or not isinstance(p, (int, float)):
            raise TypeError(f"norm: p must be 'fro' or a number, got {p!r}")
        x = self.abs()
        if p == math.inf:
            return x.max(axis=dim, keepdim=keepdim)
        if p == -math.inf:
            return x.min(axis=dim, keepdim=keepdim)
        if p == 0:
            return (self != 0).cast(self.dtype).sum(axis=dim, keepdim=keepdim)
        if p == 1:
            return x.sum(axis=dim, keepdim=keepdim)
        if p == 2:
            total = self.square().sum(axis=dim, keepdim=keepdim)
            zero = total == 0  # sqrt'(0) is inf: PyTorch's subgradient there is 0
            return zero.where(0.0, zero.where(1.0, total).sqrt())
        return (x ** p).sum(axis=dim, keepdim=keepdim) ** (1 / p)

    @keywords(axis="dim")
    def var_mean(self, dim=None, keepdim: bool = False, correction: int = 1):
        """(var, mean) over `dim`, as torch.var_mean."""
        return (self.var(axis=dim, keepdim=keepdim, correction=correction),
                self.mean(axis=dim, keepdim=keepdim))

    @keywords(axis="dim")
    def std_mean(self, dim=None, keepdim: bool = False, correction: int = 1):
        """(std, mean) over `dim`, as torch.std_mean."""
        return (self.std(axis=dim, keepdim=keepdim, correction=correction),
                self.mean(axis=dim, keepdim=keepdim))
