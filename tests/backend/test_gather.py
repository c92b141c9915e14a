"""Picks by integer indices (D69): `x[idx]`, gather, Embedding and the losses' label picks
read the picked elements through indirect loads, and an Embedding's weight gradient
accumulates under a branch. Every result is compared with numpy on every device; the
path-taken checks look at the kernel ASTs and uops, which do not depend on timing."""
import re

import numpy as np
import pytest
from hypothesis import given, strategies as st

from codegen.dtypes import dtypes
from codegen.kernel import OptOps
from codegen.linearizer import linearize
from codegen.ops import BufferOps, ReduceOps
from codegen.scatter import is_scatter
from codegen.uops import UOps
from lazyten import Tensor, nn
from lazyten.schedule import create_schedule
from lazyten.schedule_item import loop_target
from runtimes import get_runtime
from tests.helpers import NP, fast


def _sums(t: Tensor) -> int:
    """SUMs in the kernels that would realize `t` (schedules only: runs nothing). A pick is
    one before the rewrite; after it, an indirect load (or a plain one where the table
    does not vary along the picked dim)."""
    return sum(1 for item in create_schedule([t.lazydata]) if item.ast is not None
               for n in item.ast.walk() if n.op is ReduceOps.SUM)


def _indirect_loads(t: Tensor) -> int:
    return sum(1 for item in create_schedule([t.lazydata]) if item.ast is not None
               for n in item.ast.walk() if n.op is BufferOps.LOAD and n.src)


def _branches(t: Tensor) -> tuple[int, int]:
    """(IF blocks, tiled reduce kernels) in the kernels that would realize `t`: a reduce
    branches only where a tile shares the condition (a target that tiles)."""
    target = get_runtime(t.device).renderer.target
    kernels = [linearize(item.ast, target) for item in create_schedule([t.lazydata])
               if item.ast is not None]
    tiled = sum(1 for k in kernels if k.name.startswith("r_") and
                any(o.op in (OptOps.UPCAST, OptOps.LANES) for o in k.opts))
    return sum(1 for k in kernels for u in k.uops if u.op is UOps.IF), tiled


def _table(rng, shape, dtype, layout):
    """(Tensor, ndarray) of `shape`: contiguous, transposed in memory, or broadcast."""
    if layout == "broadcast":
        row = rng.standard_normal((1,) + shape[1:]) * 4
        arr = np.broadcast_to(row, shape).astype(NP[dtype])
        return Tensor(row.astype(NP[dtype])).expand(shape), arr
    arr = (rng.standard_normal(shape) * 4).astype(NP[dtype])
    if layout == "transposed":
        return Tensor(np.ascontiguousarray(arr.T)).T, arr
    return Tensor(arr), arr


TABLES = [dtypes.float32, dtypes.float16, dtypes.float64, dtypes.int32, dtypes.bool]
LAYOUTS = ["contiguous", "transposed", "broadcast"]


@fast(16)
@given(n=st.integers(1, 9), m=st.integers(1, 7), k=st.integers(1, 6),
       dtype=st.sampled_from(TABLES), layout=st.sampled_from(LAYOUTS),
       index_dtype=st.sampled_from([dtypes.int64, dtypes.int32, dtypes.uint8]),
       seed=st.integers(0, 99))
def test_index_by_tensor(device, n, m, k, dtype, layout, index_dtype, seed):
    rng = np.random.default_rng(seed)
    t, arr = _table(rng, (n, m), dtype, layout)
    t = t.to(device)
    low = 0 if index_dtype == dtypes.uint8 else -n
    idx = rng.integers(low, n, k).astype(NP[index_dtype])
    out = t[Tensor(idx, device=device)]
    assert _sums(out) == 0, "x[idx] should read the picked rows directly"
    np.testing.assert_array_equal(out.numpy(), arr[idx])
    cols = rng.integers(-m, m, k).astype(np.int64)
    both = t[Tensor(idx, device=device), Tensor(cols, device=device)]
    np.testing.assert_array_equal(both.numpy(), arr[idx, cols])
    np.testing.assert_array_equal(t[:, Tensor(cols, device=device)].numpy(), arr[:, cols])


@fast(16)
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=3), data=st.data(),
       dtype=st.sampled_from(TABLES), seed=st.integers(0, 99))
def test_gather(device, shape, data, dtype, seed):
    rng = np.random.default_rng(seed)
    shape = tuple(shape)
    dim = data.draw(st.integers(0, len(shape) - 1))
    arr = (rng.standard_normal(shape) * 4).astype(NP[dtype])
    index_shape = tuple(data.draw(st.integers(1, s)) if d != dim else data.draw(st.integers(1, 5))
                        for d, s in enumerate(shape))
    idx = rng.integers(0, shape[dim], index_shape)
    out = Tensor(arr, device=device).gather(dim, Tensor(idx, device=device))
    assert _sums(out) == 0
    ref = np.take_along_axis(arr[tuple(slice(0, s) if d != dim else slice(None)
                                       for d, s in enumerate(index_shape))], idx, dim)
    np.testing.assert_array_equal(out.numpy(), ref)


@fast(10)
@given(vocab=st.integers(1, 70), width=st.integers(1, 40), tokens=st.lists(st.integers(1, 6),
       min_size=1, max_size=2), seed=st.integers(0, 99))
def test_embedding_forward_and_backward(device, vocab, width, tokens, seed):
    rng = np.random.default_rng(seed)
    emb = nn.Embedding(vocab, width)
    emb.weight = Tensor(rng.standard_normal((vocab, width)).astype(np.float32), device=device,
                        requires_grad=True)
    idx = rng.integers(0, vocab, tokens)
    g = rng.standard_normal(tuple(tokens) + (width,)).astype(np.float32)
    out = emb(Tensor(idx, device=device))
    assert _sums(out) == 0, "the forward should read the picked rows, not reduce"
    assert _indirect_loads(out) == (vocab > 1)
    np.testing.assert_array_equal(out.numpy(), emb.weight.numpy()[idx])
    (out * Tensor(g, device=device)).sum().backward()
    ref = np.zeros((vocab, width), np.float32)
    np.add.at(ref, idx.reshape(-1), g.reshape(-1, width))
    np.testing.assert_allclose(emb.weight.grad.numpy(), ref, rtol=1e-5, atol=1e-5)


def test_embedding_weight_gradient_branches(device):
    """Where the weight gradient is a one-hot sum (a GPU: a loop target scatters it, D153),
    it skips the rows of tokens that do not pick them: one compare per (row, token), the
    width's loads and adds under `if` (fails where they run always)."""
    emb = nn.Embedding(300, 64)
    emb.weight = Tensor(np.ones((300, 64), np.float32), device=device, requires_grad=True)
    idx = Tensor(np.arange(40) % 300, device=device)
    g = Tensor(np.ones((40, 64), np.float32), device=device)
    (emb(idx) * g).sum().backward()
    if loop_target(device):
        assert any(is_scatter(item.ast) for item in create_schedule([emb.weight.grad.lazydata]))
    else:
        branches, tiled = _branches(emb.weight.grad)
        assert branches >= tiled
    np.testing.assert_array_equal(emb.weight.grad.numpy()[:41], (np.arange(300) < 40)[:41, None]
                                  * np.ones((41, 64), np.float32))


def test_out_of_range_still_raises(device):
    table = Tensor(np.arange(12, dtype=np.float32).reshape(4, 3), device=device)
    emb = nn.Embedding(4, 3)
    emb.weight = Tensor(np.ones((4, 3), np.float32), device=device, requires_grad=True)
    bad = Tensor(np.array([1, 4]), device=device)
    for make in (lambda: table[bad], lambda: table.gather(0, Tensor(np.array([[0, 9, 1]]),
                                                                    device=device)),
                 lambda: table[Tensor(np.array([-5]), device=device)], lambda: emb(bad)):
        with pytest.raises(IndexError):
            make().numpy()
    out = emb(bad)
    out.sum().backward()
    with pytest.raises(IndexError):
        emb.weight.grad.numpy()


def test_inf_elsewhere_in_the_table_does_not_leak(device):
    """Only the picked row is read: an inf in another row stays out (the one-hot matmul
    gave 0 * inf = nan in every output)."""
    w = np.ones((5, 3), np.float32)
    w[2] = np.inf
    emb = nn.Embedding(5, 3)
    emb.weight = Tensor(w, device=device)
    np.testing.assert_array_equal(emb(Tensor(np.array([0, 4]), device=device)).numpy(),
                                  np.ones((2, 3), np.float32))


@fast(8)
@given(rows=st.integers(1, 9), classes=st.integers(1, 12), seed=st.integers(0, 99))
def test_one_hot_and_cross_entropy(device, rows, classes, seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, rows)
    np.testing.assert_array_equal(Tensor(labels, device=device).one_hot(classes).numpy(),
                                  np.eye(classes, dtype=np.int64)[labels])
    logits = rng.standard_normal((rows, classes))
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    loss = Tensor(logits, device=device).cross_entropy(Tensor(labels, device=device))
    np.testing.assert_allclose(loss.numpy(), -logp[np.arange(rows), labels].mean(), rtol=1e-9, atol=1e-12)


def test_masked_sum_branches_and_stays_exact(device):
    """A tiled sum of where(c, x, 0) with c the same along the tile runs x under `if c`."""
    rng = np.random.default_rng(1)
    a = rng.integers(0, 5, 50)
    b = rng.integers(0, 5, 30)
    x = rng.standard_normal((50, 64)).astype(np.float32)
    c = Tensor(a, device=device).reshape(50, 1, 1) == Tensor(b, device=device).reshape(1, 30, 1)
    out = c.where(Tensor(x, device=device).reshape(50, 1, 64), 0).sum(0)
    branches, tiled = _branches(out)
    assert branches >= tiled >= (device == "CPU")
    ref = ((a[:, None, None] == b[None, :, None]) * x[:, None, :]).sum(0)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-5)


def test_table_not_affine_along_the_pick_keeps_the_sum(device):
    """A table whose rows are not evenly spaced in memory (a transpose reshaped across its
    rows) keeps the one-hot sum, and its values."""
    arr = np.arange(24, dtype=np.float32).reshape(4, 6)
    t = Tensor(arr, device=device).T.reshape(4, 6)
    idx = np.array([3, 0, 2, 2])
    out = t[Tensor(idx, device=device)]
    assert _sums(out) == 1
    np.testing.assert_array_equal(out.numpy(), arr.T.reshape(4, 6)[idx])


def test_jitted_embedding_step(device):
    """Replays read new indices: the pick comes from data, not from the capture."""
    import lazyten
    rng = np.random.default_rng(3)
    w = rng.standard_normal((20, 8)).astype(np.float32)
    emb = nn.Embedding(20, 8)
    emb.weight = Tensor(w, device=device, requires_grad=True)

    @lazyten.jit
    def step(idx):
        out = emb(idx)
        out.sum().backward()
        grad = emb.weight.grad
        emb.weight.grad = None
        return out.realize(), grad.realize()
    for _ in range(4):
        idx = rng.integers(0, 20, 6)
        out, grad = step(Tensor(idx, device=device))
        np.testing.assert_array_equal(out.numpy(), w[idx])
        ref = np.zeros_like(w)
        np.add.at(ref, idx, 1.0)
        np.testing.assert_array_equal(grad.numpy(), ref)


def test_few_picks_from_a_long_table_are_not_split(device):
    """One token of a 20000-row table: few outputs and a long reduce, which the splitter
    (split.py) would cut in two stages; a pick stays whole and becomes a load."""
    w = np.arange(20000 * 4, dtype=np.float32).reshape(20000, 4)
    emb = nn.Embedding(20000, 4)
    emb.weight = Tensor(w, device=device)
    out = emb(Tensor(np.array([12345]), device=device))
    assert _sums(out) == 0
    np.testing.assert_array_equal(out.numpy(), w[[12345]])


def test_cuda_renders_picks_and_guards():
    """Renderer only (no GPU needed): CUDA C for an indirect load (64-bit index math) and
    for a guarded accumulation (a work-item tile shares the condition, as on pocl)."""
    from codegen.renderer.cuda import CUDARenderer
    from codegen.target import work_item_cpu
    rng = np.random.default_rng(0)
    emb = nn.Embedding(300, 64)
    emb.weight = Tensor(rng.standard_normal((300, 64)).astype(np.float32))
    out = emb(Tensor(rng.integers(0, 300, 40)))
    c = Tensor(rng.integers(0, 5, 50)).reshape(50, 1, 1) == \
        Tensor(rng.integers(0, 5, 30)).reshape(1, 30, 1)
    masked = c.where(Tensor(rng.standard_normal((50, 1, 64)).astype(np.float32)), 0).sum(0)
    renderer = CUDARenderer()
    sources = []
    for t, target in ((out, renderer.target), (masked, work_item_cpu("CUDA", 4))):
        for item in create_schedule([t.lazydata]):
            if item.ast is not None:
                sources.append(renderer.render(linearize(item.ast, target)))
    text = "\n".join(sources)
    assert re.search(r"if \(\w+\) \{", text) and "long long" in text, text[-2000:]


@pytest.mark.parametrize("n", [5, 70000])  # a cached range, and one too long to cache
def test_a_range_updated_in_place_is_no_longer_a_range(device, n):
    x = Tensor(np.arange(n, dtype=np.float32) * 10, device=device)
    idx = Tensor(np.array([0, 2, 4]), device=device)
    r = Tensor.arange(n, device=device)
    r += 1
    doubled = Tensor.arange(n, device=device)
    doubled.assign(doubled * 2).realize()
    for rng, values in ((r, np.arange(n) + 1), (doubled, np.arange(n) * 2)):
        picked = (idx.unsqueeze(-1) == rng).where(x, 0).sum(-1)
        ref = ((np.array([0, 2, 4])[:, None] == values) * (np.arange(n) * 10.0)).sum(-1)
        np.testing.assert_array_equal(picked.numpy(), ref)


@fast(6)
@given(vocab=st.integers(2, 30), width=st.integers(1, 20), tokens=st.integers(1, 12),
       seed=st.integers(0, 99))
def test_pick_gradients_match_finite_differences(vocab, width, tokens, seed):
    """float64 gradients of an Embedding's table, x[idx] and gather (CPU: the guarded
    weight gradient is a tiled kernel there)."""
    from tests.gradcheck import check_grad
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((vocab, width))
    idx = rng.integers(-vocab, vocab, tokens)
    emb = nn.Embedding(vocab, width)

    def embed(w):
        emb.weight = w
        return emb(Tensor(idx % vocab))
    check_grad(embed, table, seed=seed)
    check_grad(lambda w: w[Tensor(idx)], table, seed=seed)
    cols = rng.integers(0, width, (vocab, 3))
    check_grad(lambda w: w.gather(1, Tensor(cols)), table, seed=seed)
