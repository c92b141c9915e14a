"""torch.nn.utils.rnn's padding, as `lazyten.nn.utils.rnn` (nn/utils.py registers it):
`pad_sequence` takes a list of (L_i, *) Tensors and gives one (max L, B, *) Tensor, or
(B, max L, *) with batch_first, each sequence padded with `padding_value` on the right (or
the left) of its length axis. Built from Tensor.pad and Tensor.stack, so gradients flow
back to each sequence."""
from __future__ import annotations
from typing import Sequence

from lazyten.errors import ShapeError
from lazyten.tensor import Tensor

__all__ = ["pad_sequence"]


def pad_sequence(sequences: Sequence[Tensor] | Tensor, batch_first: bool = False,
                 padding_value: float = 0.0, padding_side: str = "right") -> Tensor:
    """Stack sequences of different lengths, padding each to the longest: (L, B, *), or
    (B, L, *) with batch_first; padding_side 'right' (after the values) or 'left'."""
    if padding_side not in ("right", "left"):
        raise ValueError(f"pad_sequence: padding_side must be 'right' or 'left', "
                         f"got {padding_side!r}")
    seqs = list(sequences.unbind(0) if isinstance(sequences, Tensor) else sequences)
    if not seqs:
        raise ValueError("pad_sequence: received an empty list of sequences")
    if any(s.ndim == 0 for s in seqs) or len({s.shape[1:] for s in seqs}) > 1:
        raise ShapeError(f"pad_sequence: sequences must be (L, *) with equal trailing "
                         f"shapes, got {[s.shape for s in seqs]}")
    longest = max(s.shape[0] for s in seqs)
    padded = []
    for s in seqs:
        missing = longest - s.shape[0]
        side = (0, missing) if padding_side == "right" else (missing, 0)
        pairs = [side] + [(0, 0)] * (s.ndim - 1)
        padded.append(s.pad(pairs, value=padding_value) if missing else s)
    return Tensor.stack(*padded, dim=0 if batch_first else 1)
