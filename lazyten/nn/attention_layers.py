"""MultiheadAttention and TransformerEncoderLayer, torch.nn's modules with its parameter
names (`in_proj_weight`, `in_proj_bias`, `out_proj.weight`, ...; the encoder layer's
`self_attn`, `linear1`, `linear2`, `norm1`, `norm2`), initialisation and masks. The
attention itself is Tensor.scaled_dot_product_attention, or the same math spelled out when
the weights are returned (need_weights=True).

Masks follow PyTorch's MultiheadAttention, the opposite of scaled_dot_product_attention's
boolean masks: True in `attn_mask` or `key_padding_mask` means "do not attend"; a float
mask is added to the scores. Both merge into one additive mask.
"""
from __future__ import annotations
import math
from typing import Callable

from codegen.dtypes import dtypes
from lazyten.nn import Dropout, LayerNorm, Linear
from lazyten.nn.module import Module
from lazyten.nn.params import filled
from lazyten.tensor import Tensor

__all__ = ["MultiheadAttention", "TransformerEncoderLayer"]


def _additive(mask: Tensor, dtype) -> Tensor:
    """A boolean "do not attend" mask as 0 / -inf; a float mask as it is."""
    if mask.dtype == dtypes.bool:
        return mask.where(float("-inf"), 0.0).cast(dtype)
    return mask.cast(dtype)


class MultiheadAttention(Module):
    """softmax(q k^T / sqrt(head_dim) + mask) v over num_heads heads of embed_dim //
    num_heads, q, k and v projections packed in in_proj_weight (3E, E), then out_proj.
    Inputs (L, N, E), or (N, L, E) with batch_first, or unbatched (L, E). forward returns
    (output, weights): weights averaged over heads (N, L, S) when need_weights (per head
    (N, H, L, S) without average_attn_weights), else None. Dropout on the weights in
    training mode only. kdim/vdim other than embed_dim, add_bias_kv and add_zero_attn are
    not supported."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim=None, vdim=None,
                 batch_first: bool = False):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0 or embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} must be a positive multiple of num_heads "
                             f"{num_heads}")
        if add_bias_kv or add_zero_attn or kdim not in (None, embed_dim) or \
                vdim not in (None, embed_dim):
            raise NotImplementedError("MultiheadAttention: add_bias_kv, add_zero_attn and "
                                      "kdim/vdim other than embed_dim are not supported")
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        self.head_dim, self.batch_first = embed_dim // num_heads, batch_first
        self.in_proj_weight = Tensor.glorot_uniform(3 * embed_dim, embed_dim, requires_grad=True)
        self.in_proj_bias = filled((3 * embed_dim,), 0.0, True) if bias else None
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias)
        if bias:
            self.out_proj.bias = filled((embed_dim,), 0.0, True)

    def _project(self, query: Tensor, key: Tensor, value: Tensor) -> list[Tensor]:
        """q, k, v, each (N, H, len, head_dim)."""
        w, b = self.in_proj_weight, self.in_proj_bias
        if query is key and key is value:  # self-attention: one matmul
            qkv = query.linear(w, b).chunk(3, -1)
        else:
            ws, bs = w.chunk(3, 0), b.chunk(3, 0) if b is not None else (None,) * 3
            qkv = [x.linear(wi, bi) for x, wi, bi in zip((query, key, value), ws, bs)]
        n = query.shape[0]
        return [x.reshape(n, x.shape[1], self.num_heads, self.head_dim).transpose(1, 2)
                for x in qkv]

    def _mask(self, n: int, lq: int, s: int, attn_mask, key_padding_mask, is_causal: bool,
              dtype) -> Tensor | None:
        """The merged additive mask, broadcastable to (N, H, L, S), or None."""
        if is_causal and attn_mask is None:
            attn_mask = Tensor.ones(lq, s, dtype=dtypes.bool).tril(0).logical_not()
        mask = None
        if attn_mask is not None:
            if attn_mask.ndim == 3:  # (N * H, L, S)
                attn_mask = attn_mask.reshape(n, self.num_heads, lq, s)
            elif attn_mask.shape != (lq, s):
                raise ValueError(f"attn_mask of shape {attn_mask.shape} must be ({lq}, {s}) "
                                 f"or ({n * self.num_heads}, {lq}, {s})")
            mask = _additive(attn_mask, dtype)
        if key_padding_mask is not None:
            if key_padding_mask.shape != (n, s):
                raise ValueError(f"key_padding_mask of shape {key_padding_mask.shape} must "
                                 f"be ({n}, {s})")
            pad = _additive(key_padding_mask, dtype).reshape(n, 1, 1, s)
            mask = pad if mask is None else mask + pad
        return mask

    def forward(self, query: Tensor, key: Tensor, value: Tensor,
                key_padding_mask: Tensor | None = None, need_weights: bool = True,
                attn_mask: Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
        batched = query.ndim == 3
        query, key, value = self._batch_major(query, key, value, batched)
        if not batched and key_padding_mask is not None:
            key_padding_mask = key_padding_mask[None]
        n, lq, s = query.shape[0], query.shape[1], key.shape[1]
        q, k, v = self._project(query, key, value)
        mask = self._mask(n, lq, s, attn_mask, key_padding_mask, is_causal, q.dtype)
        p = self.dropout if self.training else 0.0
        weights = None
        if need_weights:
            scores = (q @ k.transpose(-2, -1)) * (1 / math.sqrt(self.head_dim))
            weights = (scores if mask is None else scores + mask).softmax(-1)
            weights = weights.dropout(p, training=True) if p > 0 else weights
            out = weights @ v
            weights = weights.mean(1) if average_attn_weights else weights
            weights = weights if batched else weights[0]
        else:
            out = q.scaled_dot_product_attention(k, v, mask, p)
        out = self.out_proj(out.transpose(1, 2).reshape(n, lq, self.embed_dim))
        if not batched:
            return out[0], weights
        return (out if self.batch_first else out.transpose(0, 1)), weights

    def _batch_major(self, query: Tensor, key: Tensor, value: Tensor,
                     batched: bool) -> list[Tensor]:
        """The inputs as (N, len, E), keeping `query is key is value` for self-attention."""
        if batched and self.batch_first:
            return [query, key, value]
        out: list[Tensor] = []
        for x in (query, key, value):
            same = [y for seen, y in zip((query, key), out) if x is seen]
            out.append(same[0] if same else x.unsqueeze(0) if not batched else x.transpose(0, 1))
        return out

    def extra_repr(self) -> str:
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
                f"dropout={self.dropout}, batch_first={self.batch_first}")


_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"relu": Tensor.relu,
                                                       "gelu": Tensor.gelu}


class TransformerLayer(Module):
    """What the encoder and decoder layers (nn/transformer.py) are made of, registered in
    torch's order (so their state dicts'): `self_attn`, for a decoder `multihead_attn`,
    `linear1`, `dropout`, `linear2`, `norm1`, `norm2` (`norm3`), `dropout1`, `dropout2`
    (`dropout3`)."""
    self_attn: MultiheadAttention
    multihead_attn: MultiheadAttention
    linear1: Linear
    linear2: Linear
    dropout: Dropout
    norm1: LayerNorm
    norm2: LayerNorm
    norm3: LayerNorm
    dropout1: Dropout
    dropout2: Dropout
    dropout3: Dropout

    def _build(self, d_model: int, nhead: int, dim_feedforward: int, dropout: float,
               activation: str | Callable, layer_norm_eps: float, batch_first: bool,
               norm_first: bool, bias: bool, cross: bool) -> None:
        if isinstance(activation, str) and activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be 'relu' or 'gelu' (or a callable), got "
                             f"{activation!r}")
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first)
        if cross:
            self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                     batch_first=batch_first)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias)
        self.norm_first = norm_first
        blocks = range(1, 4 if cross else 3)
        for i in blocks:
            norm = LayerNorm(d_model, eps=layer_norm_eps)
            if not bias:
                norm.bias = None
            setattr(self, f"norm{i}", norm)
        for i in blocks:
            setattr(self, f"dropout{i}", Dropout(dropout))
        self._activation = _ACTIVATIONS[activation] if isinstance(activation, str) \
            else activation

    def _feed_forward_block(self, x: Tensor, out_dropout: Dropout) -> Tensor:
        """linear1, activation, dropout, linear2, then `out_dropout`."""
        hidden = self.dropout(self._activation(self.linear1(x)))
        return out_dropout(self.linear2(hidden))


class TransformerEncoderLayer(TransformerLayer):
    """Self-attention then a feed-forward block (linear1, activation, dropout, linear2),
    each with a residual, dropout and a LayerNorm: after the residual (norm_first=False,
    PyTorch's default) or on the block's input (norm_first=True)."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: str | Callable = "relu",
                 layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True):
        super().__init__()
        self._build(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                    batch_first, norm_first, bias, cross=False)

    def forward(self, src: Tensor, src_mask: Tensor | None = None,
                src_key_padding_mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        x = src
        if self.norm_first:
            x = x + self._attention(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._feed_forward(self.norm2(x))
        x = self.norm1(x + self._attention(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._feed_forward(x))

    def _attention(self, x: Tensor, mask, key_padding_mask, is_causal: bool) -> Tensor:
        out, _ = self.self_attn(x, x, x, key_padding_mask=key_padding_mask, need_weights=False,
                                attn_mask=mask, is_causal=is_causal)
        return self.dropout1(out)

    def _feed_forward(self, x: Tensor) -> Tensor:
        return self._feed_forward_block(x, self.dropout2)
