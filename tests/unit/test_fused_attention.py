"""Fused attention (lazyten/fuse_attention.py, codegen/attention.py, D62): softmax(q k^T * s
+ mask) @ v is one kernel on a loop target, chosen by the algebra of the online softmax, not
by a function name. The results match numpy at odd sizes (keys not a multiple of the
vector width, head dims 1..96), with non-contiguous and broadcast q, k, v, masks and
scales; whatever the rewrite would change keeps its three kernels; gradients stay right."""
import io
import math
from contextlib import redirect_stderr

import numpy as np
import pytest
from hypothesis import given, strategies as st

from codegen.attention import is_attention_kernel
from codegen.kernel import is_row_kernel
from lazyten import Context, Tensor
from lazyten.schedule import create_schedule
from tests.gradcheck import check_grad
from tests.helpers import fast


@pytest.fixture(autouse=True)
def _fuse_every_attention(monkeypatch):
    """These tests check the fused kernel at small sizes, which the default rule keeps
    apart (one head's scores fit the L2 cache: test_the_rule_fuses_where_scores_leave_l2);
    FUSE_ATTENTION is read when a graph is first scheduled, so the cache starts empty."""
    from lazyten import schedule_cache
    monkeypatch.setattr(schedule_cache, "_SCHEDULES", {})
    with Context(FUSE_ATTENTION=2):
        yield


def _asts(t: Tensor) -> list:
    return [i.ast for i in create_schedule([t.lazydata]) if i.ast is not None]


def _fused(t: Tensor) -> bool:
    return any(is_attention_kernel(a) for a in _asts(t))


def _ref(q, k, v, scale=None, mask=None):
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    with np.errstate(invalid="ignore"):
        e = np.exp(s - s.max(-1, keepdims=True))
        return (e / e.sum(-1, keepdims=True)) @ v


def _by_hand(q, k, v, scale):
    return (q @ k.transpose(-2, -1) * scale).softmax(-1) @ v


def _data(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def test_attention_is_one_kernel():
    """Three kernels (scores, softmax rows, P @ v) become one, plus a copy of k^T; the
    hand-written form and scaled_dot_product_attention alike."""
    q, k, v = (Tensor(a) for a in _data((2, 3, 40, 16), (2, 3, 40, 16), (2, 3, 40, 16)))
    for out in (_by_hand(q, k, v, 0.25), q.scaled_dot_product_attention(k, v)):
        asts = _asts(out)
        assert sum(map(is_attention_kernel, asts)) == 1 and len(asts) <= 2, \
            f"expected one attention kernel (and a copy of k), got {len(asts)} kernels"
        assert not any(is_row_kernel(a) for a in asts if not is_attention_kernel(a))


@pytest.mark.parametrize("keys", [1, 2, 15, 16, 17, 33, 64, 100])
@pytest.mark.parametrize("depth,width", [(1, 1), (3, 5), (8, 8), (64, 64), (96, 96), (17, 40)])
def test_matches_numpy_at_odd_sizes(keys, depth, width):
    q, k, v = _data((2, 5, depth), (2, keys, depth), (2, keys, width), seed=keys + depth)
    out = _by_hand(Tensor(q), Tensor(k), Tensor(v), 0.3)
    assert _fused(out) or keys == 1  # a softmax over one key is no reduce
    np.testing.assert_allclose(out.numpy(), _ref(q, k, v, 0.3), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("scale", [1e-3, 0.125, 1.0, 30.0])
def test_scales_and_large_scores(scale):
    """Scores up to ~1e3 apart: the running max rescales without overflow."""
    q, k, v = _data((3, 33, 8), (3, 50, 8), (3, 50, 7), seed=2)
    out = _by_hand(Tensor(q * 4), Tensor(k * 4), Tensor(v), scale)
    np.testing.assert_allclose(out.numpy(), _ref(q * 4, k * 4, v, scale), rtol=1e-4, atol=1e-5)


def test_non_contiguous_and_broadcast_inputs():
    """q transposed, k a permuted view, v a transposed view, k and v shared by every
    head (a batch axis of 1 broadcast), a 2-d query."""
    q, k, v = _data((4, 2, 20, 12), (1, 31, 12), (1, 10, 31), seed=3)
    tq = Tensor(np.ascontiguousarray(q.transpose(0, 1, 3, 2))).transpose(-1, -2)
    tk = Tensor(np.ascontiguousarray(k.transpose(2, 1, 0))).permute(2, 1, 0)
    tv = Tensor(v).transpose(-1, -2)
    out = tq.scaled_dot_product_attention(tk, tv)
    assert _fused(out)
    np.testing.assert_allclose(out.numpy(), _ref(q, k, v.swapaxes(-1, -2)), rtol=2e-5, atol=2e-5)
    q2 = Tensor(q[0, 0]).scaled_dot_product_attention(Tensor(k[0]), Tensor(v[0].T))
    np.testing.assert_allclose(q2.numpy(), _ref(q[0, 0], k[0], v[0].T), rtol=2e-5, atol=2e-5)


def test_self_attention_reads_one_buffer():
    """q, k and v one tensor (q @ q^T): the transposed copy is an extra input."""
    (x,) = _data((2, 37, 24), seed=4)
    t = Tensor(x)
    out = t.scaled_dot_product_attention(t, t)
    assert _fused(out)
    np.testing.assert_allclose(out.numpy(), _ref(x, x, x), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("kind", ["causal", "bool", "float", "causal_rect"])
def test_masks(kind):
    """Causal and boolean masks (-inf where masked, whole blocks of keys masked at the
    start of a row) and an added float mask."""
    lq, s = (37, 37) if kind != "causal_rect" else (20, 45)
    q, k, v = _data((2, 3, lq, 16), (2, 3, s, 16), (2, 3, s, 9), seed=5)
    rng = np.random.default_rng(6)
    if kind.startswith("causal"):
        mask = np.tril(np.ones((lq, s), bool))
        out = Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), is_causal=True)
    elif kind == "bool":
        mask = rng.random((lq, s)) < 0.7
        mask[:, 0] = True
        out = Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), attn_mask=Tensor(mask))
    else:
        mask = rng.standard_normal((1, 3, lq, s)).astype(np.float32)
        out = Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), attn_mask=Tensor(mask))
    assert _fused(out)
    np.testing.assert_allclose(out.numpy(), _ref(q, k, v, mask=mask), rtol=2e-5, atol=2e-5)


def test_a_row_masked_whole_is_nan_as_unfused():
    """Every key masked: 0/0, NaN, as the three kernels give (and PyTorch)."""
    q, k, v = _data((1, 4, 8), (1, 20, 8), (1, 20, 3), seed=7)
    mask = np.ones((4, 20), bool)
    mask[2] = False
    out = Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), attn_mask=Tensor(mask))
    got = out.numpy()
    assert np.isnan(got[0, 2]).all() and not np.isnan(np.delete(got[0], 2, 0)).any()
    np.testing.assert_allclose(np.delete(got[0], 2, 0), np.delete(_ref(q, k, v, mask=mask)[0], 2, 0),
                               rtol=2e-5, atol=2e-5)


REFUSED = {
    "sigmoid": lambda s, v: s.sigmoid() @ v,                          # not exp(s - max)
    "exp_twice": lambda s, v: ((s - s.max(-1, keepdim=True).values) * 2).exp() @ v,
    "max_over_queries": lambda s, v: (s - s.max(-2, keepdim=True).values).exp() @ v,
    "squared": lambda s, v: (s.softmax(-1) ** 2) @ v,
    "log_softmax": lambda s, v: s.log_softmax(-1) @ v,
    "sum_not_exp": lambda s, v: (s / s.sum(-1, keepdim=True)) @ v,
}
REFS = {
    "sigmoid": lambda s: 1 / (1 + np.exp(-s)),
    "exp_twice": lambda s: np.exp(2 * (s - s.max(-1, keepdims=True))),
    "max_over_queries": lambda s: np.exp(s - s.max(-2, keepdims=True)),
    "squared": lambda s: (np.exp(s - s.max(-1, keepdims=True)) /
                          np.exp(s - s.max(-1, keepdims=True)).sum(-1, keepdims=True)) ** 2,
    "log_softmax": lambda s: s - s.max(-1, keepdims=True) - np.log(
        np.exp(s - s.max(-1, keepdims=True)).sum(-1, keepdims=True)),
    "sum_not_exp": lambda s: s / s.sum(-1, keepdims=True),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_the_rule_refuses_what_the_rewrite_would_change(name):
    """A function of the scores other than exp(s - max over the keys), or the weights read
    twice, keeps today's kernels (and their values)."""
    q, k, v = _data((2, 9, 6), (2, 21, 6), (2, 21, 5), seed=8)
    out = REFUSED[name](Tensor(q) @ Tensor(k).transpose(-1, -2), Tensor(v))
    assert not _fused(out), f"{name} must not be fused"
    s = q.astype(np.float64) @ k.astype(np.float64).swapaxes(-1, -2)
    np.testing.assert_allclose(out.numpy(), REFS[name](s) @ v, rtol=1e-4, atol=1e-5)


def test_weights_that_are_an_output_stay_unfused():
    q, k, v = (Tensor(a) for a in _data((2, 9, 6), (2, 21, 6), (2, 21, 5), seed=9))
    weights = (q @ k.transpose(-1, -2)).softmax(-1)
    out = weights @ v
    assert not any(is_attention_kernel(i.ast) for i in create_schedule(
        [out.lazydata, weights.lazydata]) if i.ast is not None)


def test_half_precision_and_float64():
    q, k, v = _data((2, 19, 24), (2, 35, 24), (2, 35, 40), seed=10)
    half = Tensor(q).half().scaled_dot_product_attention(Tensor(k).half(), Tensor(v).half())
    np.testing.assert_allclose(half.numpy().astype(np.float64), _ref(q, k, v), rtol=2e-2, atol=2e-3)
    dbl = [Tensor(a.astype(np.float64)) for a in (q, k, v)]
    out = dbl[0].scaled_dot_product_attention(dbl[1], dbl[2])
    assert _fused(out)
    np.testing.assert_allclose(out.numpy(), _ref(q, k, v), rtol=1e-11, atol=1e-12)


def test_debug2_says_what_is_saved():
    """DEBUG=2 names the bytes of scores and weights the fused kernel does not move."""
    q, k, v = (Tensor(a) for a in _data((1, 2, 64, 16), (1, 2, 64, 16), (1, 2, 64, 16), seed=11))
    err = io.StringIO()
    with Context(DEBUG=2), redirect_stderr(err):
        q.scaled_dot_product_attention(k, v).realize()
    assert "MB less traffic" in err.getvalue(), err.getvalue()[-2000:]


def test_clang_scalar_loops():
    """A loop target without vectors (the C backend): one key at a time."""
    pytest.importorskip("shutil").which("cc") or pytest.skip("no C compiler")
    q, k, v = _data((2, 7, 5), (2, 19, 5), (2, 19, 3), seed=12)
    try:
        out = Tensor(q, device="CLANG").scaled_dot_product_attention(
            Tensor(k, device="CLANG"), Tensor(v, device="CLANG"))
        got = out.numpy()
    except RuntimeError as e:  # no compiler found by the runtime
        pytest.skip(str(e))
    np.testing.assert_allclose(got, _ref(q, k, v), rtol=2e-5, atol=2e-5)


@fast(25)
@given(st.integers(1, 3), st.integers(1, 20), st.integers(1, 40), st.integers(1, 20),
       st.integers(1, 20), st.booleans(), st.booleans(), st.integers(0, 2**16))
def test_hypothesis_shapes_and_layouts(batch, lq, keys, depth, width, tq, tv, seed):
    q, k, v = _data((batch, lq, depth), (batch, keys, depth), (batch, keys, width), seed=seed)
    tq_ = Tensor(np.ascontiguousarray(q.swapaxes(-1, -2))).transpose(-1, -2) if tq else Tensor(q)
    tv_ = Tensor(np.ascontiguousarray(v.swapaxes(-1, -2))).transpose(-1, -2) if tv else Tensor(v)
    out = tq_.scaled_dot_product_attention(Tensor(k), tv_)
    np.testing.assert_allclose(out.numpy(), _ref(q, k, v), rtol=5e-5, atol=5e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_gradients(causal):
    """The backward keeps the unfused kernels (the weights are kept for it); the forward
    the finite differences evaluate is the fused one. float64, odd sizes."""
    rng = np.random.default_rng(13)
    q, k, v = rng.standard_normal((2, 7, 5)), rng.standard_normal((2, 11, 5)), \
        rng.standard_normal((2, 11, 3))
    check_grad(lambda a, b, c: a.scaled_dot_product_attention(b, c, is_causal=causal), q, k, v)
    check_grad(lambda a, b, c: _by_hand(a, b, c, 0.7), q, k, v, seed=1)


def test_forward_of_a_gradient_graph_is_unfused_and_right():
    """With requires_grad the weights are read by the backward too: no fusion, and the
    gradients equal those computed from the unfused forward."""
    q, k, v = _data((1, 2, 9, 4), (1, 2, 13, 4), (1, 2, 13, 6), seed=14)
    tq, tk, tv = (Tensor(a, requires_grad=True) for a in (q, k, v))
    out = tq.scaled_dot_product_attention(tk, tv)
    out.sum().backward()
    np.testing.assert_allclose(out.numpy(), _ref(q, k, v), rtol=2e-5, atol=2e-5)
    assert tq.grad is not None and np.isfinite(tq.grad.numpy()).all()


def test_one_column_stores_one_float():
    """E == 1: the output row is one float, and the column vector's lanes past it must not
    be stored (a 16-wide store there wrote 60 bytes past the buffer: heap corruption
    that only MALLOC_CHECK_ saw)."""
    from codegen.linearizer import linearize
    from codegen.renderer.llvmir import LLVMRenderer
    from codegen.uops import UOps
    q, k, v = (Tensor(a) for a in _data((2, 5, 3), (2, 19, 3), (2, 19, 1), seed=15))
    ast = next(a for a in _asts(_by_hand(q, k, v, 0.5)) if is_attention_kernel(a))
    uops = linearize(ast, LLVMRenderer().target).uops
    stores = [u for u in uops if u.op is UOps.STORE]
    assert stores and all(u.src[2].dtype.count == 1 for u in stores)


@pytest.mark.parametrize("bits", [256, 512])
def test_whole_blocks_of_keys_load_without_checks(bits):
    """203 keys are 6 whole blocks of 32 (AVX2) or 3 of 64 (AVX-512) and a padded last
    one. The whole blocks are their own loop, where every load is unmasked: one masked loop
    over all the blocks ran 8.3 ms against 0.9 split (2x4x200x48 on AVX2). The last block's
    loop masks the keys past 203 (values: test_matches_numpy_at_odd_sizes)."""
    from codegen.linearizer import linearize
    from codegen.renderer.llvmir import LLVMRenderer
    from codegen.target import cpu
    from codegen.uops import UOps
    # (8 queries: a whole number of groups of rows; 7 would pad the rows, and the column
    # sums of the padded group's rows, which live in the output, load with a row check)
    q, k, v = (Tensor(a) for a in _data((2, 8, 48), (2, 203, 48), (2, 203, 48), seed=3))
    ast = next(a for a in _asts(_by_hand(q, k, v, 0.5)) if is_attention_kernel(a))
    uops = linearize(ast, LLVMRenderer(cpu(bits)).target).uops
    loops = [i for i, u in enumerate(uops) if u.op is UOps.LOOP and u.arg == "jb"]
    assert len(loops) == 2, f"expected a loop of whole key blocks and one of the last: {loops}"
    ends = [i for i, u in enumerate(uops) if u.op is UOps.END and u.src[0] is uops[loops[0]]]
    whole = uops[loops[0]:ends[0]]
    gated = [u for u in whole if u.op is UOps.LOAD and len(u.src) > 2]
    assert not gated, f"{len(gated)} gated loads in the loop over whole blocks"
    assert any(u.op is UOps.LOAD and len(u.src) > 2 for u in uops[ends[0]:]), \
        "the last block's loads should be gated"

@pytest.mark.parametrize("bits,depth,rows", [(512, 32, 4), (512, 64, 4), (256, 32, 2),
                                             (256, 64, 2), (128, 32, 2)])
def test_a_group_of_rows_keeps_its_scores_in_registers(bits, depth, rows):
    """A group's scores (4 vectors of keys a row) take at most half the target's vector
    registers: AVX-512 takes 4 rows at depth 32, AVX2 2 (4 rows' 16 score vectors filled
    all 16 registers and spilled: 0.71-0.74 -> 0.44-0.59 ms at 4x4x128x32); the column
    accumulators bound it too (AVX2 at depth 64: 8 vectors a row, 2 rows). The output is
    the same either way (the other tests)."""
    from codegen.attention_kernel import AttentionLinearizer
    from codegen.attention import attention_parts
    from codegen.target import cpu
    q, k, v = (Tensor(a) for a in _data((2, 16, depth), (2, 40, depth), (2, 40, depth), seed=4))
    ast = next(a for a in _asts(_by_hand(q, k, v, 0.5)) if is_attention_kernel(a))
    parts = attention_parts(ast)
    assert parts is not None
    assert AttentionLinearizer(parts, ast, cpu(bits)).copies == rows


@pytest.mark.parametrize("queries,width,rows", [(197, 64, 4), (7, 16, 4), (5, 1, 1), (3, 8, 2)])
def test_a_group_of_rows_pads_the_last_query_axis(queries, width, rows):
    """197 queries (a ViT's) are 49 groups of 4 rows and a padded one, not 197 groups of
    1 (each group loads every key and value once: 1.46 -> 0.86 ms at 1x12x197x64); the
    padded rows store nothing. One column (a scalar store the CPU cannot gate) keeps
    groups that divide the queries; fewer queries than 4 take 2 a group."""
    from codegen.attention_kernel import AttentionLinearizer
    from codegen.attention import attention_parts
    from codegen.target import cpu
    shapes = ((1, 3, queries, 64), (1, 3, 40, 64), (1, 3, 40, width))
    q, k, v = _data(*shapes, seed=6)
    out = _by_hand(*(Tensor(a) for a in (q, k, v)), 0.125)
    ast = next(a for a in _asts(out) if is_attention_kernel(a))
    parts = attention_parts(ast)
    assert parts is not None
    linearizer = AttentionLinearizer(parts, ast, cpu(512))
    assert linearizer.copies == rows
    assert linearizer.rows[-1] == -(-queries // rows) * rows
    np.testing.assert_allclose(out.numpy(), _ref(q, k, v, 0.125), rtol=2e-5, atol=2e-5)


def test_the_rule_fuses_where_scores_leave_l2():
    """By default (FUSE_ATTENTION=1) an attention is fused where one head's scores (rows
    of queries by keys, float32) are more than the target's L2 cache holds, else kept as
    its kernels (faster there: D101); DEBUG=2 says which and why. Both give the same
    values."""
    from runtimes import get_runtime
    l2 = get_runtime("CPU").renderer.target.l2_bytes
    for keys, fused in ((l2 // (4 * 64) - 8, False), (l2 // (4 * 64) + 8, True)):
        q, k, v = _data((2, 64, 8), (2, keys, 8), (2, keys, 8), seed=keys)
        with Context(FUSE_ATTENTION=1):
            out = _by_hand(*(Tensor(a) for a in (q, k, v)), 0.3)
            assert _fused(out) == fused, (keys, l2)
            err = io.StringIO()
            with Context(DEBUG=2), redirect_stderr(err):
                got = out.numpy()
        said = "MB less traffic" if fused else "fit the L2 cache"
        assert said in err.getvalue(), err.getvalue()[-2000:]
        np.testing.assert_allclose(got, _ref(q, k, v, 0.3), rtol=2e-5, atol=2e-5)


def test_jit_replays_the_fused_kernel():
    """The JIT records the copy of k and the attention kernel and replays them on new
    inputs (third call on)."""
    from lazyten import jit

    @jit
    def f(q, k, v):
        return q.scaled_dot_product_attention(k, v, is_causal=True).realize()
    for i in range(4):
        q, k, v = _data((2, 3, 21, 8), (2, 3, 21, 8), (2, 3, 21, 8), seed=20 + i)
        got = f(*(Tensor(a).realize() for a in (q, k, v))).numpy()
        np.testing.assert_allclose(got, _ref(q, k, v, mask=np.tril(np.ones((21, 21), bool))),
                                   rtol=2e-5, atol=2e-5)


def test_assign_of_an_attention():
    """The result assigned into a tensor (also one of the inputs): right values."""
    q, k, v = _data((2, 9, 8), (2, 21, 8), (2, 21, 8), seed=30)
    tq, tk, tv = (Tensor(a).realize() for a in (q, k, v))
    target = Tensor(np.zeros((2, 9, 8), np.float32)).realize()
    target.assign(tq.scaled_dot_product_attention(tk, tv)).realize()
    np.testing.assert_allclose(target.numpy(), _ref(q, k, v), rtol=2e-5, atol=2e-5)
    tq.assign(tq.scaled_dot_product_attention(tk, tv)).realize()
    np.testing.assert_allclose(tq.numpy(), _ref(q, k, v), rtol=2e-5, atol=2e-5)
