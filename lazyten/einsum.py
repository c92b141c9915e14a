"""Tensor.einsum: Einstein summation (PyTorch's / numpy's subscripts) from views and reduces.

subscripts + operands -> one Tensor. A label repeated within one operand takes a diagonal
as a view (flatten the pair, pad one row, reshape, keep column 0); operands are then
permuted into one label order, multiplied with broadcasting and summed, left to right, each
label summed as soon as no later operand and not the output needs it. Mixed into Tensor.
"""
from __future__ import annotations
from codegen.dtypes import dtypes, promote
from lazyten.errors import ArgumentError, ShapeError
from lazyten.mixin import TensorMixin

_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _parse_term(term: str, subscripts: str) -> tuple[list[str], bool]:
    """'ab...c' -> (['a', 'b', '...', 'c'], has_ellipsis); bad characters are a ValueError."""
    labels, i = [], 0
    while i < len(term):
        if term.startswith("...", i):
            if "..." in labels:
                raise ArgumentError(f"einsum {subscripts!r}: more than one '...' in term {term!r}")
            labels.append("...")
            i += 3
        elif term[i] in _LETTERS:
            labels.append(term[i])
            i += 1
        else:
            raise ArgumentError(f"einsum {subscripts!r}: invalid subscript {term[i]!r} in term "
                             f"{term!r} (letters a-z, A-Z and '...' only)")
    return labels, "..." in labels


def _expand_ellipsis(labels: list[str], ndim: int, nell: int | None) -> list:
    """Replace '...' by labels (0, 1, ..) of the broadcast dims, right-aligned to `nell`."""
    if "..." not in labels:
        return labels
    at = labels.index("...")
    k = ndim - (len(labels) - 1)
    width = k if nell is None else nell
    return labels[:at] + [width - k + j for j in range(k)] + labels[at + 1:]


def _diagonal(x, labels: list):
    """Take the diagonal of every label repeated within one operand, as views."""
    labels = list(labels)
    while len(set(labels)) != len(labels):
        label = next(lb for lb in labels if labels.count(lb) > 1)
        i = labels.index(label)
        j = labels.index(label, i + 1)
        n = x.shape[i]
        rest = [d for d in range(x.ndim) if d not in (i, j)]
        x = x.permute(rest + [i, j]).reshape(tuple(x.shape[d] for d in rest) + (n * n,))
        # element (k, k) of the pair sits at k * (n + 1): pad one row, keep column 0
        x = x.pad([(0, 0)] * (x.ndim - 1) + [(0, n)]).reshape(x.shape[:-1] + (n, n + 1))
        x = x.shrink([(0, s) for s in x.shape[:-1]] + [(0, 1)]).reshape(x.shape[:-1])
        labels = [labels[d] for d in rest] + [label]
    return x, labels


class EinsumMixin(TensorMixin):
    """einsum."""

    @classmethod
    def einsum(cls, subscripts: str, *operands):
        """torch.einsum: explicit ('ij,jk->ik') or implicit output, '...', diagonals."""
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = tuple(operands[0])
        if not isinstance(subscripts, str):
            raise TypeError(f"einsum subscripts must be a str, got {subscripts!r}")
        if not operands or not all(isinstance(t, cls) for t in operands):
            raise TypeError(f"einsum {subscripts!r} needs Tensor operands, got "
                            f"{[type(t).__name__ for t in operands]}")
        spec = subscripts.replace(" ", "")
        if spec.count("->") > 1:
            raise ArgumentError(f"einsum {subscripts!r}: more than one '->'")
        lhs, arrow, rhs = spec.partition("->")
        terms = lhs.split(",")
        if len(terms) != len(operands):
            raise ArgumentError(f"einsum {subscripts!r} has {len(terms)} operand terms but "
                             f"{len(operands)} operands were given")
        parsed = [_parse_term(t, subscripts) for t in terms]
        for (labels, ell), t, term in zip(parsed, operands, terms):
            named = len(labels) - ell
            if (t.ndim != named) if not ell else (t.ndim < named):
                raise ShapeError(f"einsum {subscripts!r}: term {term!r} names {named} dims "
                                 f"{'or more ' if ell else ''}but operand has shape {t.shape}")
        nell = max([t.ndim - (len(lb) - 1) for (lb, ell), t in zip(parsed, operands) if ell],
                   default=0)
        in_labels = [_expand_ellipsis(lb, t.ndim, nell) for (lb, _), t in zip(parsed, operands)]
        sizes: dict = {}
        for labels, t, term in zip(in_labels, operands, terms):
            for lb in dict.fromkeys(labels):
                dims = {s for l2, s in zip(labels, t.shape) if l2 == lb}
                if len(dims) > 1:
                    raise ShapeError(f"einsum {subscripts!r}: label {lb!r} repeats in term "
                                     f"{term!r} with different sizes (shape {t.shape})")
                s, known = dims.pop(), sizes.get(lb, 1)
                if s != known and 1 not in (s, known):
                    what = f"label {lb!r}" if isinstance(lb, str) else "'...' dims"
                    raise ShapeError(f"einsum {subscripts!r}: {what} has sizes {known} and {s} "
                                     f"(operand shapes {[o.shape for o in operands]})")
                sizes[lb] = s if known == 1 else known
        counts: dict = {}
        for labels in in_labels:
            for lb in labels:
                counts[lb] = counts.get(lb, 0) + 1
        if arrow:
            out_parsed, _ = _parse_term(rhs, subscripts)  # no '...': those dims are summed
            out = _expand_ellipsis(out_parsed, len(out_parsed) - 1 + nell, nell)
            for lb in out:
                if out.count(lb) > 1:
                    raise ArgumentError(f"einsum {subscripts!r}: output label {lb!r} repeats")
                if lb not in counts:
                    raise ArgumentError(f"einsum {subscripts!r}: output label {lb!r} is not in "
                                     f"any input term")
        else:
            out = list(range(nell)) + sorted(lb for lb in counts
                                            if isinstance(lb, str) and counts[lb] == 1)
        return _contract(list(operands), in_labels, out, sizes)


def _contract(operands: list, in_labels: list, out: list, sizes: dict):
    """Multiply the operands (labels unique per operand by now) and sum what `out` lacks."""
    dtype = operands[0].dtype
    for t in operands[1:]:
        dtype = promote(dtype, t.dtype)
    logical = dtype == dtypes.bool  # numpy: any of the ands, a count > 0
    # halves multiply and accumulate in float32 and round once, as matmul (and PyTorch's bmm)
    work = dtypes.int64 if logical else dtypes.float32 if dtype.is_float and dtype.itemsize < 4 \
        else dtype
    order = list(out) + [lb for lb in sizes if lb not in out]
    acc, acc_labels = None, []
    for k, (t, labels) in enumerate(zip(operands, in_labels)):
        # each operand takes the promoted dtype first (as PyTorch's einsum): a uint16 taken
        # straight to float32 kept bits a bfloat16 operand's product rounds away
        t = t.cast(dtype) if t.dtype != dtype else t
        t, labels = _diagonal(t.cast(work) if t.dtype != work else t, labels)
        later = {lb for lbs in in_labels[k + 1:] for lb in lbs} | set(out)
        if acc is None:
            acc, acc_labels = t, labels
        else:
            union = [lb for lb in order if lb in acc_labels or lb in labels]
            acc = _aligned(acc, acc_labels, union) * _aligned(t, labels, union)
            acc_labels = union
        done = [i for i, lb in enumerate(acc_labels) if lb not in later]
        if done:
            acc = acc.sum(axis=tuple(done), dtype=work) if not work.is_float else \
                acc.sum(axis=tuple(done))
            acc_labels = [lb for i, lb in enumerate(acc_labels) if i not in done]
    acc = _aligned(acc, acc_labels, out).expand(tuple(sizes[lb] for lb in out))
    return acc > 0 if logical else acc.cast(dtype) if acc.dtype != dtype else acc


def _aligned(t, labels: list, order: list):
    """Permute t's dims into `order` and insert size-1 dims for the labels it lacks."""
    present = [lb for lb in order if lb in labels]
    t = t.permute([labels.index(lb) for lb in present]) if present != labels else t
    return t.reshape(tuple(t.shape[present.index(lb)] if lb in labels else 1 for lb in order))
