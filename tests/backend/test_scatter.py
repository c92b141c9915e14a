"""One-hot sums into rows become accumulating stores on loop targets (D153): an
Embedding's weight gradient, the backward of `x[idx]`, gather and index_select, a one-hot
matrix's transpose times a matrix, scatter_add. A generator draws the forms, sizes (odd
widths, vocabularies below the rewrite's least), dtypes and layouts of the summed values
(contiguous, transposed, broadcast) and compares with numpy's `add.at` on every device;
the path checks look at the schedule's kernel ASTs, which do not depend on timing."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from codegen.ops import ReduceOps
from codegen.uops import UOps
from codegen.scatter import is_scatter
from lazyten import Tensor, nn
from lazyten.errors import DTypeError, ShapeError
from lazyten.schedule import create_schedule
from lazyten.schedule_item import loop_target
from tests.helpers import fast

FORMS = ["embedding", "getitem", "gather0", "gather1", "onehot_matmul", "two_indices",
         "middle_dim", "index_select", "scatter_add", "scatter_add_no_self", "index_add"]


def _kernels(t: Tensor) -> tuple[int, int]:
    """(scatters, SUMs) in the kernels that would realize `t` (schedules only)."""
    asts = [item.ast for item in create_schedule([t.lazydata]) if item.ast is not None]
    return sum(map(is_scatter, asts)), \
        sum(1 for a in asts for n in a.walk() if n.op is ReduceOps.SUM)


def _values(rng, shape, dtype, layout):
    """(Tensor, ndarray) of `shape`: contiguous, transposed in memory, or broadcast along
    the first axis."""
    if layout == "broadcast":
        row = (rng.standard_normal((1,) + shape[1:]) * 4).astype(dtype)
        return Tensor(row).expand(shape), np.broadcast_to(row, shape)
    arr = (rng.standard_normal(shape) * 4).astype(dtype)
    if layout == "transposed":
        return Tensor(np.ascontiguousarray(arr.T)).T, arr
    return Tensor(arr), arr


def _case(form, device, rng, vocab, width, tokens, dtype, layout):
    """(the tensor the form computes, numpy's value of it). Values are whole numbers for
    integer dtypes."""
    def table(shape):
        return Tensor(rng.standard_normal(shape).astype(dtype), device=device,
                      requires_grad=True)
    idx = rng.integers(0, vocab, tokens)
    if form in ("embedding", "getitem", "index_select"):
        g, garr = _values(rng, (tokens, width), dtype, layout)
        ref = np.zeros((vocab, width), dtype)
        np.add.at(ref, idx, garr)
        if form == "embedding":
            emb = nn.Embedding(vocab, width)
            emb.weight = w = table((vocab, width))
            out = emb(Tensor(idx, device=device))
        else:
            w = table((vocab, width))
            out = w[Tensor(idx, device=device)] if form == "getitem" else \
                w.index_select(0, Tensor(idx, device=device))
        (out * g.to(device)).sum().backward()
        return w.grad, ref
    if form in ("gather0", "gather1"):
        gidx = rng.integers(0, vocab, (tokens, width))
        g, garr = _values(rng, (tokens, width), dtype, layout)
        ref = np.zeros((vocab, width), dtype)
        np.add.at(ref, (gidx, np.arange(width)[None].repeat(tokens, 0)), garr)
        if form == "gather1":  # along the last axis: the index's rows are the table's
            w = table((width, vocab))
            (w.gather(1, Tensor(gidx.T.copy(), device=device)) * g.T.to(device)).sum().backward()
            return w.grad, ref.T
        w = table((vocab, width))
        (w.gather(0, Tensor(gidx, device=device)) * g.to(device)).sum().backward()
        return w.grad, ref
    if form == "onehot_matmul":
        g, garr = _values(rng, (tokens, width), dtype, layout)
        ref = np.zeros((vocab, width), dtype)
        np.add.at(ref, idx, garr)
        onehot = Tensor(idx, device=device).one_hot(vocab).cast(g.dtype)
        return onehot.T @ g.to(device), ref
    if form in ("two_indices", "middle_dim"):
        g, garr = _values(rng, (tokens, width), dtype, layout)
        other = rng.integers(0, 3, tokens)
        if form == "two_indices":
            w = table((vocab, 3, width))
            out = w[Tensor(idx, device=device), Tensor(other, device=device)]
            ref = np.zeros((vocab, 3, width), dtype)
            np.add.at(ref, (idx, other), garr)
        else:  # x[:, idx] along a middle axis, the gradient of a (2, tokens, width) pick
            w = table((2, vocab, width))
            out = w[:, Tensor(idx, device=device)]
            g = g.to(device).unsqueeze(0).expand(2, tokens, width)
            ref = np.zeros((2, vocab, width), dtype)
            np.add.at(ref, (slice(None), idx), np.broadcast_to(garr, (2, tokens, width)))
        (out * g.to(device)).sum().backward()
        return w.grad, ref
    base = (rng.standard_normal((vocab, width)) * 4).astype(dtype)
    if form == "index_add":  # along the last axis, alpha 2.5
        source, sarr = _values(rng, (tokens, width), dtype, layout)
        added = np.zeros_like(base)
        np.add.at(added, idx, sarr * dtype(2.5))
        out = Tensor(base.T.copy(), device=device).index_add(1, Tensor(idx, device=device),
                                                            source.T.to(device), alpha=2.5)
        return out, (base + added).T
    # scatter_add: self plus src at index along dim 0 (index of the full width)
    sidx = rng.integers(0, vocab, (tokens, width))
    src, sarr = _values(rng, (tokens, width), dtype, layout)
    cols = np.arange(width)[None].repeat(tokens, 0)
    added = np.zeros_like(base)
    np.add.at(added, (sidx, cols), sarr)
    if form == "scatter_add":
        out = Tensor(base, device=device).scatter_add(0, Tensor(sidx, device=device),
                                                      src.to(device))
        return out, base + added
    out = Tensor(base, device=device).scatter_reduce(0, Tensor(sidx, device=device),
                                                     src.to(device), "sum", include_self=False)
    hit = np.zeros(base.shape, bool)
    hit[sidx, cols] = True
    return out, np.where(hit, added, base)


@fast(40)
@given(form=st.sampled_from(FORMS), vocab=st.integers(1, 70), width=st.integers(1, 40),
       tokens=st.integers(1, 12), dtype=st.sampled_from([np.float32, np.float64]),
       layout=st.sampled_from(["contiguous", "transposed", "broadcast"]),
       seed=st.integers(0, 999))
def test_one_hot_sums_into_rows(device, form, vocab, width, tokens, dtype, layout, seed):
    rng = np.random.default_rng(seed)
    out, ref = _case(form, device, rng, vocab, width, tokens, dtype, layout)
    scatters, sums = _kernels(out)
    if loop_target(device) and vocab >= 4:  # (one token: no sum, an elementwise one-hot)
        assert scatters == (tokens > 1) and sums == (form == "scatter_add_no_self"), \
            (scatters, sums)
    elif not loop_target(device):
        assert scatters == 0
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5 if dtype == np.float32 else 1e-12,
                               atol=1e-5 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("form", ["onehot_matmul", "scatter_add"])
def test_integers_accumulate_exactly(device, form):
    rng = np.random.default_rng(5)
    idx = rng.integers(0, 50, 400)
    g = rng.integers(-2**40, 2**40, (400, 24))
    ref = np.zeros((50, 24), np.int64)
    if form == "onehot_matmul":
        out = Tensor(idx, device=device).one_hot(50).T @ Tensor(g, device=device)
        np.add.at(ref, idx, g)
    else:
        sidx = rng.integers(0, 50, (400, 24))
        out = Tensor(ref, device=device).scatter_add(0, Tensor(sidx, device=device),
                                                     Tensor(g, device=device))
        np.add.at(ref, (sidx, np.arange(24)[None].repeat(400, 0)), g)
    assert _kernels(out)[0] == loop_target(device)
    np.testing.assert_array_equal(out.numpy(), ref)


def test_a_wide_table_split_between_threads(device):
    """Many column groups (the threads split them) and rows picked many times each."""
    rng = np.random.default_rng(2)
    idx = rng.integers(0, 40, (30, 20))  # 600 tokens onto 40 rows
    g = rng.standard_normal((30, 20, 1000)).astype(np.float32)
    emb = nn.Embedding(3000, 1000)
    emb.weight = Tensor(np.zeros((3000, 1000), np.float32), device=device, requires_grad=True)
    (emb(Tensor(idx, device=device)) * Tensor(g, device=device)).sum().backward()
    ref = np.zeros((3000, 1000), np.float64)
    np.add.at(ref, idx, g.astype(np.float64))
    np.testing.assert_allclose(emb.weight.grad.numpy(), ref, rtol=1e-5, atol=1e-4)


def test_an_inf_reaches_only_its_row(device):
    """Only the picked row adds a token's value: an inf in one token's gradient stays in
    its row (a one-hot sum gave 0 * inf = nan in every row)."""
    g = np.ones((4, 8), np.float32)
    g[1] = np.inf
    emb = nn.Embedding(10, 8)
    emb.weight = Tensor(np.ones((10, 8), np.float32), device=device, requires_grad=True)
    (emb(Tensor(np.array([2, 5, 2, 9]), device=device)) * Tensor(g, device=device)).sum().backward()
    ref = np.zeros((10, 8), np.float32)
    ref[2], ref[9], ref[5] = 2, 1, np.inf
    np.testing.assert_array_equal(emb.weight.grad.numpy(), ref)


def test_out_of_range_still_raises_in_scatter_add(device):
    base = Tensor(np.zeros((6, 3), np.float32), device=device)
    bad = Tensor(np.array([[0, 6, 1]]), device=device)
    with pytest.raises(IndexError):
        base.scatter_add(0, bad, Tensor(np.ones((1, 3), np.float32), device=device)).numpy()


def test_the_embedding_gradient_compares_no_row_with_every_token():
    """The work is the tokens' (a kernel of T x D steps), not rows x tokens: fails where the
    weight gradient is a one-hot sum (its kernel's estimate counts V x T x D)."""
    from codegen.linearizer import linearize
    from runtimes import get_runtime
    emb = nn.Embedding(5000, 64)
    emb.weight = Tensor(np.ones((5000, 64), np.float32), device="CPU", requires_grad=True)
    (emb(Tensor(np.arange(3000) % 5000, device="CPU")) *
     Tensor(np.ones((3000, 64), np.float32), device="CPU")).sum().backward()
    target = get_runtime("CPU").renderer.target
    flops = [linearize(item.ast, target).flops for item in create_schedule([emb.weight.grad.lazydata])
             if item.ast is not None]
    assert max(flops) < 10 * 3000 * 64, flops


def test_index_add_checks_its_arguments():
    x = Tensor(np.zeros((4, 5), np.float32))
    with pytest.raises(ShapeError, match=r"\(3, 5\).*\(2, 5\)"):
        x.index_add(0, Tensor(np.array([0, 1])), Tensor(np.ones((3, 5), np.float32)))
    with pytest.raises(DTypeError, match="integer tensor, got float64"):
        x.index_add(0, Tensor(np.array([0.0])), Tensor(np.ones((1, 5), np.float32)))
    with pytest.raises(DTypeError, match="float32, got float64"):
        x.index_add(0, Tensor(np.array([0])), Tensor(np.ones((1, 5))))
    with pytest.raises(IndexError):
        x.index_add(1, Tensor(np.array([5])), Tensor(np.ones((4, 1), np.float32))).numpy()
    np.testing.assert_array_equal(
        Tensor(np.float32(1)).index_add(0, Tensor(np.array([0, 0])),
                                        Tensor(np.array([2, 3], np.float32))).numpy(), 6)


@fast(10)
@given(vocab=st.integers(2, 40), width=st.integers(1, 20), tokens=st.integers(2, 30),
       pad=st.integers(-2, 1), seed=st.integers(0, 999))
def test_embedding_padding_idx(device, vocab, width, tokens, pad, seed):
    """The padding row starts at zero, and its tokens give no gradient: the others' stay
    one scatter (the padding applied before the sum, not to its result)."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, vocab, tokens)
    idx[: tokens // 3] = pad % vocab
    emb = nn.Embedding(vocab, width, padding_idx=pad)
    assert not emb.weight.numpy()[pad % vocab].any() and f"padding_idx={pad % vocab}" in repr(emb)
    w = rng.standard_normal((vocab, width)).astype(np.float32)
    emb.weight = Tensor(w, device=device, requires_grad=True)
    g = rng.standard_normal((tokens, width)).astype(np.float32)
    out = emb(Tensor(idx, device=device))
    np.testing.assert_array_equal(out.numpy(), w[idx])
    (out * Tensor(g, device=device)).sum().backward()
    keep = idx != pad % vocab
    ref = np.zeros((vocab, width), np.float32)
    np.add.at(ref, idx[keep], g[keep])
    if loop_target(device) and vocab >= 4:
        assert _kernels(emb.weight.grad) == (1, 0)
    np.testing.assert_allclose(emb.weight.grad.numpy(), ref, rtol=1e-5, atol=1e-5)


def test_embedding_rejects_what_pytorch_rejects():
    with pytest.raises(ValueError, match="padding_idx 5"):
        nn.Embedding(5, 2, padding_idx=5)
    with pytest.raises(NotImplementedError):
        nn.Embedding(5, 2, max_norm=1.0)
    with pytest.raises(IndexError):  # no negative wrap, as PyTorch's embedding
        nn.functional.embedding(Tensor(np.array([-1])), Tensor(np.ones((4, 2), np.float32))).numpy()
    with pytest.raises(ValueError, match=r"\(4,\)"):
        nn.functional.embedding(Tensor(np.array([0])), Tensor(np.ones(4, np.float32)))


@pytest.mark.parametrize("width", [100, 64, 3])
def test_a_width_no_multiple_of_the_lanes_stays_in_vectors(width):
    """A width of 100 at 8 lanes: 13 vectors, the last masked past the end (the offset is
    one for every lane), not 100 scalars (fails where the lanes must divide the width).
    Three columns are fewer than a vector's lanes: scalars."""
    from codegen.linearizer import linearize
    from codegen.target import with_fields
    from runtimes import get_runtime
    target = with_fields(get_runtime("CPU").renderer.target, "vector_bits=256")
    emb = nn.Embedding(1000, width)  # on the CPU whatever DEVICE says: a loop target's rule
    emb.weight = Tensor(np.ones((1000, width), np.float32), device="CPU", requires_grad=True)
    g = Tensor(np.ones((512, width), np.float32), device="CPU")
    (emb(Tensor(np.arange(512) * 7 % 1000, device="CPU")) * g).sum().backward()
    asts = [i.ast for i in create_schedule([emb.weight.grad.lazydata]) if is_scatter(i.ast)]
    stores = [u for u in linearize(asts[0], target).uops if u.op is UOps.STORE]
    lanes = {u.src[2].dtype.count for u in stores}
    assert lanes == ({1} if width < 8 else {8}), lanes
    np.testing.assert_array_equal(emb.weight.grad.numpy()[(np.arange(512) * 7 % 1000)[:3]],
                                  np.ones((3, width), np.float32))
