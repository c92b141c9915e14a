"""torch.nn's transformer stacks and decoder layer, with its parameter names: a
TransformerEncoder / TransformerDecoder holds `num_layers` independent copies of the layer
it is given (`layers.0.self_attn.in_proj_weight`, ...) and an optional final `norm`; a
TransformerDecoderLayer is self-attention over the target (`self_attn`), attention to
the encoder's output (`multihead_attn`) and a feed-forward block (`linear1`, `linear2`),
each with a residual, dropout and a LayerNorm (`norm1`-`norm3`): after the residual
(norm_first=False, PyTorch's default) or on the block's input. Masks as
attention_layers.py's (True or -inf: do not attend). Transformer is torch's whole
encoder-decoder model built from these stacks, each ending in a LayerNorm."""
from __future__ import annotations
import copy
from typing import Any, Callable

import numpy as np

from lazyten.errors import ShapeError
from lazyten.nn import Dropout, LayerNorm, init
from lazyten.nn.attention_layers import (MultiheadAttention, TransformerEncoderLayer,
                                         TransformerLayer)
from lazyten.nn.container import ModuleList
from lazyten.nn.module import Module
from lazyten.tensor import Tensor

__all__ = ["TransformerEncoder", "TransformerDecoderLayer", "TransformerDecoder", "Transformer"]


def _copies(layer: Module, num_layers: int) -> ModuleList:
    """`num_layers` copies of `layer`, each with parameters of its own (as torch's
    stacks deep-copy theirs: the same initial values, trained apart)."""
    if num_layers < 1:
        raise ValueError(f"num_layers must be at least 1, got {num_layers}")
    return ModuleList([copy.deepcopy(layer) for _ in range(num_layers)])


class TransformerEncoder(Module):
    """`num_layers` copies of `encoder_layer` applied in turn, then `norm` if given."""

    def __init__(self, encoder_layer: Module, num_layers: int, norm: Module | None = None,
                 enable_nested_tensor: bool = True, mask_check: bool = True):
        super().__init__()
        self.layers, self.num_layers, self.norm = _copies(encoder_layer, num_layers), num_layers, norm

    def forward(self, src: Tensor, mask: Tensor | None = None,
                src_key_padding_mask: Tensor | None = None,
                is_causal: bool | None = None) -> Tensor:
        out = src
        for layer in self.layers:
            out = layer(out, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                        is_causal=bool(is_causal))
        return out if self.norm is None else self.norm(out)


class TransformerDecoderLayer(TransformerLayer):
    """Self-attention over the target, attention to `memory`, a feed-forward block."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: str | Callable = "relu",
                 layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True):
        super().__init__()
        self._build(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                    batch_first, norm_first, bias, cross=True)

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, tgt_key_padding_mask: Tensor | None = None,
                memory_key_padding_mask: Tensor | None = None, tgt_is_causal: bool = False,
                memory_is_causal: bool = False) -> Tensor:
        x = tgt
        own = (tgt_mask, tgt_key_padding_mask, tgt_is_causal)
        other = (memory_mask, memory_key_padding_mask, memory_is_causal)
        if self.norm_first:
            x = x + self._attend(self.self_attn, self.norm1(x), None, *own, self.dropout1)
            x = x + self._attend(self.multihead_attn, self.norm2(x), memory, *other,
                                 self.dropout2)
            return x + self._feed_forward(self.norm3(x))
        x = self.norm1(x + self._attend(self.self_attn, x, None, *own, self.dropout1))
        x = self.norm2(x + self._attend(self.multihead_attn, x, memory, *other, self.dropout2))
        return self.norm3(x + self._feed_forward(x))

    @staticmethod
    def _attend(attention: MultiheadAttention, x: Tensor, memory: Tensor | None, mask,
                key_padding_mask, is_causal: bool, dropout: Dropout) -> Tensor:
        """`x` attending to itself (memory None) or to `memory`, then dropout."""
        kv = x if memory is None else memory
        out, _ = attention(x, kv, kv, key_padding_mask=key_padding_mask, need_weights=False,
                           attn_mask=mask, is_causal=bool(is_causal))
        return dropout(out)

    def _feed_forward(self, x: Tensor) -> Tensor:
        return self._feed_forward_block(x, self.dropout3)


class TransformerDecoder(Module):
    """`num_layers` copies of `decoder_layer` applied in turn over the target, each
    attending to the same `memory`, then `norm` if given."""

    def __init__(self, decoder_layer: Module, num_layers: int, norm: Module | None = None):
        super().__init__()
        self.layers, self.num_layers, self.norm = _copies(decoder_layer, num_layers), num_layers, norm

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, tgt_key_padding_mask: Tensor | None = None,
                memory_key_padding_mask: Tensor | None = None,
                tgt_is_causal: bool | None = None, memory_is_causal: bool = False) -> Tensor:
        out = tgt
        for layer in self.layers:
            out = layer(out, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                        tgt_key_padding_mask=tgt_key_padding_mask,
                        memory_key_padding_mask=memory_key_padding_mask,
                        tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal)
        return out if self.norm is None else self.norm(out)


class Transformer(Module):
    """torch.nn.Transformer: `encoder`, a TransformerEncoder of num_encoder_layers
    TransformerEncoderLayers and a final LayerNorm (`encoder.norm`), and `decoder`, a
    TransformerDecoder likewise (`decoder.norm`), or custom_encoder / custom_decoder in
    their place. As torch's, every parameter of more than one dim (custom ones included)
    is then redrawn xavier-uniform, in place. forward(src, tgt, ...) is
    decoder(tgt, encoder(src)) with the masks passed on; shapes (S, N, E) and (T, N, E),
    (N, S, E) with batch_first, or unbatched (S, E)."""

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: str | Callable = "relu",
                 custom_encoder: Any = None, custom_decoder: Any = None,
                 layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True):
        super().__init__()
        layer_args = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                      batch_first, norm_first, bias)
        norm_args = (d_model, layer_norm_eps, bias)
        self.encoder = custom_encoder if custom_encoder is not None else TransformerEncoder(
            TransformerEncoderLayer(*layer_args), num_encoder_layers, _final_norm(*norm_args))
        self.decoder = custom_decoder if custom_decoder is not None else TransformerDecoder(
            TransformerDecoderLayer(*layer_args), num_decoder_layers, _final_norm(*norm_args))
        self._reset_parameters()
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first

    def _reset_parameters(self) -> None:
        """xavier_uniform_ on every parameter of more than one dim, as torch's."""
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None,
                tgt_mask: Tensor | None = None, memory_mask: Tensor | None = None,
                src_key_padding_mask: Tensor | None = None,
                tgt_key_padding_mask: Tensor | None = None,
                memory_key_padding_mask: Tensor | None = None,
                src_is_causal: bool | None = None, tgt_is_causal: bool | None = None,
                memory_is_causal: bool = False) -> Tensor:
        batch_dim = 0 if self.batch_first else 1
        if src.ndim == 3 and src.shape[batch_dim] != tgt.shape[batch_dim]:
            raise ShapeError(f"the batch number of src {src.shape} and tgt {tgt.shape} must "
                             f"be equal")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise ShapeError(f"the feature number of src {src.shape} and tgt {tgt.shape} "
                             f"must be equal to d_model {self.d_model}")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device: str | None = None,
                                        dtype: Any = None) -> Tensor:
        """(sz, sz) float mask: -inf above the diagonal (a later position), 0 elsewhere."""
        mask = np.triu(np.full((sz, sz), -np.inf, dtype=np.float32), 1)
        return Tensor(mask, device=device, dtype=dtype)


def _final_norm(d_model: int, eps: float, bias: bool) -> LayerNorm:
    """The LayerNorm after a stack (without its bias when bias=False, as torch's)."""
    norm = LayerNorm(d_model, eps=eps)
    if not bias:
        norm.bias = None
    return norm
