"""Tensor.scaled_dot_product_attention, as torch.nn.functional's: (q, k, v) -> attention.

softmax(q @ k^T * scale + bias) @ v, with the bias from a boolean mask (True keeps: -inf
where False), a float mask (added) or is_causal (keep key j <= query i, aligned at the
top-left as PyTorch's reference for L != S). Dropout on the weights only when dropout_p > 0,
whatever the training mode, as PyTorch. Batch dims broadcast. Mixed into Tensor.
"""
from __future__ import annotations
import math

from codegen.dtypes import dtypes
from lazyten.elementwise import broadcast_shape
from lazyten.errors import ArgumentError, ShapeError
from lazyten.mixin import TensorMixin


class AttentionMixin(TensorMixin):
    """scaled_dot_product_attention."""

    def scaled_dot_product_attention(self, key, value, attn_mask=None, dropout_p: float = 0.0,
                                     is_causal: bool = False, scale: float | None = None,
                                     enable_gqa: bool = False):
        """query (..., L, E), key (..., S, E), value (..., S, Ev) -> (..., L, Ev).
        enable_gqa: key and value with fewer heads (dim -3) than the query are repeated to
        its count, each head kept for query_heads // key_heads query heads, as PyTorch."""
        query = self
        if query.ndim < 2 or key.ndim < 2 or value.ndim < 2:
            raise ShapeError(f"attention needs (..., L, E) tensors, got query {query.shape}, "
                             f"key {key.shape}, value {value.shape}")
        if enable_gqa:
            key, value = _repeat_heads(query, key), _repeat_heads(query, value)
        (lq, eq), (s, ek), (sv, _) = query.shape[-2:], key.shape[-2:], value.shape[-2:]
        if eq != ek or s != sv:
            raise ShapeError(f"attention shapes do not fit: query {query.shape}, key "
                             f"{key.shape}, value {value.shape} (need E of query == E of key, "
                             f"S of key == S of value)")
        try:
            broadcast_shape(query.shape[:-2], key.shape[:-2], value.shape[:-2])
        except ValueError:
            raise ShapeError(f"attention batch dims do not broadcast: query {query.shape}, "
                             f"key {key.shape}, value {value.shape}") from None
        if is_causal and attn_mask is not None:
            raise ArgumentError("attention takes attn_mask or is_causal=True, not both")
        scale = 1 / math.sqrt(eq) if scale is None else scale
        scores = (query @ key.transpose(-2, -1)) * scale
        if is_causal:
            attn_mask = type(self)._tri_mask(lq, s, device=self.device)
        if attn_mask is not None:
            try:
                broadcast_shape(attn_mask.shape, scores.shape)
            except ValueError:
                raise ShapeError(f"attn_mask of shape {attn_mask.shape} does not broadcast to "
                                 f"the scores {scores.shape}") from None
            if attn_mask.dtype == dtypes.bool:
                scores = attn_mask.where(scores, float("-inf"))
            else:
                scores = scores + attn_mask
        weights = scores.softmax(-1)
        if dropout_p > 0:
            weights = weights.dropout(dropout_p, training=True)
        return weights @ value


def _repeat_heads(query, kv):
    """kv with its heads (dim -3) repeated to the query's count (grouped-query attention)."""
    if query.ndim < 3 or kv.ndim < 3:
        raise ShapeError(f"enable_gqa needs (..., heads, L, E) tensors, got query {query.shape} "
                         f"and {kv.shape}")
    heads, kv_heads = query.shape[-3], kv.shape[-3]
    if heads == kv_heads:
        return kv
    if kv_heads == 0 or heads % kv_heads:
        raise ShapeError(f"enable_gqa: query heads {heads} (shape {query.shape}) must be a "
                         f"multiple of key/value heads {kv_heads} (shape {kv.shape})")
    return kv.repeat_interleave(heads // kv_heads, dim=-3)
