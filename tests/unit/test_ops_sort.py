"""sort, argsort, topk, cummax, cummin, logcumsumexp and index_select against numpy and
plain-Python references (stable order, NaN as the largest value, PyTorch's tie rules), over
hypothesis-drawn shapes, dtypes, layouts, ties and NaN; gradients against float64 finite
differences."""
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from codegen.dtypes import dtypes
from lazyten import Tensor
from lazyten.realize import Stats
from gradcheck import check_grad, spaced
from helpers import ALL, FLOATS, NP, assert_tensor, fast, make_layout, shapes

LAYOUT = st.sampled_from(("contiguous", "permute", "flip", "step"))


@st.composite
def tied_arrays(draw, dtype, min_dims=1, max_dims=3, max_side=5):
    """Arrays with many ties (values from a handful) and, for floats, NaN and +-inf."""
    shape = draw(shapes(min_dims=min_dims, max_dims=max_dims, max_side=max_side))
    size = int(np.prod(shape))
    if dtype == dtypes.bool:
        pool = [False, True]
    elif dtype.is_float:
        pool = [-1.5, 0.0, 2.0, 3.25, -np.inf, np.inf, np.nan]
    else:
        info = np.iinfo(NP[dtype])
        pool = [int(info.min), 0, 1, 2, int(info.max)]
    values = draw(st.lists(st.sampled_from(pool), min_size=size, max_size=size))
    return np.array(values, dtype=NP[dtype]).reshape(shape)


def _sort_key(value, descending: bool):
    """A Python sort key: NaN is the largest value (PyTorch)."""
    value = value.item() if hasattr(value, "item") else value
    nan = isinstance(value, float) and math.isnan(value)
    if descending:
        return (0, 0) if nan else (1, -value)
    return (1, 0) if nan else (0, value)


def ref_argsort(a: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """Stable argsort along axis by Python's (stable) sorted."""
    moved = np.moveaxis(a, axis, -1)
    out = np.empty(moved.shape, dtype=np.int64)
    for index in np.ndindex(moved.shape[:-1]):
        row = moved[index]
        out[index] = sorted(range(len(row)), key=lambda i: _sort_key(row[i], descending))
    return np.moveaxis(out, -1, axis)


def ref_cum_extreme(a: np.ndarray, axis: int, largest: bool):
    """PyTorch's cummax/cummin loop: take x_i if it is NaN, or if the running value is not
    NaN and x_i >= (<=) it: ties pick the last index, NaN sticks (the last NaN's index)."""
    moved = np.moveaxis(a, axis, -1)
    values, indices = np.empty_like(moved), np.empty(moved.shape, dtype=np.int64)
    for index in np.ndindex(moved.shape[:-1]):
        row = moved[index]
        best, at = row[0], 0
        for i, x in enumerate(row):
            x_nan = a.dtype.kind == "f" and np.isnan(x)
            best_nan = a.dtype.kind == "f" and np.isnan(best)
            if x_nan or (not best_nan and (x >= best if largest else x <= best)):
                best, at = x, i
            values[index + (i,)], indices[index + (i,)] = best, at
    return np.moveaxis(values, -1, axis), np.moveaxis(indices, -1, axis)


# ---- sort / argsort / topk ----
@given(data=st.data(), dtype=st.sampled_from(ALL), descending=st.booleans(), layout=LAYOUT)
@fast(14)
def test_sort_matches_stable_reference(data, dtype, descending, layout):
    a = data.draw(tied_arrays(dtype))
    axis = data.draw(st.integers(-a.ndim, a.ndim - 1))
    t = make_layout(a, layout)
    values, indices = t.sort(dim=axis, descending=descending)
    order = ref_argsort(a, axis, descending)
    assert_tensor(indices, order, dtype=dtypes.int64)
    assert_tensor(values, np.take_along_axis(a, order, axis), dtype=dtype, exact=True)
    assert_tensor(t.argsort(axis, descending=descending), order, dtype=dtypes.int64)


@given(data=st.data(), dtype=st.sampled_from([dtypes.int32, dtypes.float32, dtypes.float16]))
@fast(8)
def test_ascending_sort_matches_numpy_stable(data, dtype):
    a = data.draw(tied_arrays(dtype, max_dims=2))
    t = Tensor(a)
    np.testing.assert_array_equal(t.argsort().numpy(), np.argsort(a, axis=-1, kind="stable"))
    np.testing.assert_array_equal(t.sort(stable=True).values.numpy(),
                                  np.sort(a, axis=-1, kind="stable"))


@given(data=st.data(), dtype=st.sampled_from(ALL), largest=st.booleans())
@fast(12)
def test_topk_is_the_head_of_the_stable_sort(data, dtype, largest):
    a = data.draw(tied_arrays(dtype))
    axis = data.draw(st.integers(-a.ndim, a.ndim - 1))
    k = data.draw(st.integers(0, a.shape[axis]))
    values, indices = Tensor(a).topk(k, dim=axis, largest=largest)
    order = np.take(ref_argsort(a, axis, largest), np.arange(k), axis=axis)
    assert_tensor(indices, order, dtype=dtypes.int64)
    assert_tensor(values, np.take_along_axis(a, order, axis), dtype=dtype, exact=True)


def test_sort_results_are_named_and_accept_axis():
    t = Tensor([[3.0, 1.0, 2.0]])
    result = t.sort(axis=1, descending=True)
    assert result.values.tolist() == [[3.0, 2.0, 1.0]] and result.indices.tolist() == [[0, 2, 1]]
    assert t.topk(2).indices.tolist() == [[0, 2]]
    assert t.topk(2, sorted=False).values.tolist() == [[3.0, 2.0]]  # always sorted
    with pytest.raises(TypeError, match="both dim"):
        t.sort(dim=0, axis=1)


def test_sort_edge_shapes():
    scalar = Tensor(2.5)
    values, indices = scalar.sort()
    assert values.shape == () and values.item() == 2.5 and indices.item() == 0
    assert scalar.argsort().shape == () and scalar.argsort(descending=True).item() == 0
    assert scalar.topk(1).values.item() == 2.5 and scalar.topk(0).values.shape == (0,)
    assert scalar.cummax(0).indices.item() == 0 and scalar.cummin(-1).values.item() == 2.5
    empty = Tensor(np.zeros((2, 0), np.float32))
    assert empty.sort().values.shape == (2, 0) and empty.topk(0).indices.shape == (2, 0)
    assert Tensor(np.zeros((0, 3), np.float32)).sort(0).indices.shape == (0, 3)
    for fn in (lambda x: x.cummax(0).indices, lambda x: x.cummin(1).values,
               lambda x: x.logcumsumexp(0), lambda x: x.sort(0).values):
        assert fn(Tensor(np.zeros((0, 0), np.float32))).numpy().shape == (0, 0)


def test_sort_bad_arguments():
    t = Tensor([[1.0, 2.0, 3.0]])
    with pytest.raises(IndexError, match="k=4 is out of range"):
        t.topk(4)
    with pytest.raises(IndexError, match="out of range"):
        t.topk(-1)
    with pytest.raises(IndexError, match="dim 2 is out of range"):
        t.sort(2)
    with pytest.raises(TypeError, match="k must be an int"):
        t.topk(1.5)


@pytest.mark.parametrize("fn", [
    lambda x: x.sort(dim=1).values, lambda x: x.sort(dim=0, descending=True).values,
    lambda x: x.topk(2, dim=1).values, lambda x: x.topk(2, dim=0, largest=False).values])
def test_sort_gradient_flows_to_the_picked_elements(fn):
    check_grad(fn, *spaced(np.random.default_rng(1), (3, 4)))


def test_sort_gradient_reaches_only_topk_elements():
    x = Tensor([[1.0, 5.0, 3.0, 4.0]], requires_grad=True)
    x.topk(2).values.sum().backward()
    assert x.grad.tolist() == [[0.0, 1.0, 0.0, 1.0]]


# ---- scans ----
@given(data=st.data(), dtype=st.sampled_from(ALL), largest=st.booleans(), layout=LAYOUT)
@fast(14)
def test_cummax_cummin_match_pytorch_loop(data, dtype, largest, layout):
    a = data.draw(tied_arrays(dtype))
    axis = data.draw(st.integers(-a.ndim, a.ndim - 1))
    t = make_layout(a, layout)
    values, indices = t.cummax(axis) if largest else t.cummin(dim=axis)
    ref_values, ref_indices = ref_cum_extreme(a, axis, largest)
    assert_tensor(indices, ref_indices, dtype=dtypes.int64)
    assert_tensor(values, ref_values, dtype=dtype, exact=True)
    if dtype != dtypes.bool:
        accumulate = np.maximum.accumulate if largest else np.minimum.accumulate
        np.testing.assert_array_equal(values.numpy(), accumulate(a, axis=axis))


def test_cummax_ties_pick_the_last_index_and_nan_sticks():
    values, indices = Tensor([1.0, 3.0, 3.0, 2.0, float("nan"), 5.0, float("nan")]).cummax(0)
    np.testing.assert_array_equal(values.numpy(), [1, 3, 3, 3, np.nan, np.nan, np.nan])
    assert indices.tolist() == [0, 1, 2, 2, 4, 4, 6]
    assert Tensor([2, 1, 1, 3]).cummin(0).indices.tolist() == [0, 1, 2, 2]


@pytest.mark.parametrize("fn", [lambda x: x.cummax(1).values, lambda x: x.cummin(0).values,
                                lambda x: x.logcumsumexp(1), lambda x: x.logcumsumexp(0)])
def test_scan_gradients(fn):
    check_grad(fn, *spaced(np.random.default_rng(2), (3, 5), amp=4.0))


@given(data=st.data(), dtype=st.sampled_from(FLOATS))
@fast(10)
def test_logcumsumexp_matches_numpy(data, dtype):
    shape = data.draw(shapes(min_dims=1, max_dims=3))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    a = np.random.default_rng(data.draw(st.integers(0, 99))).uniform(-30, 30, shape)
    a = a.astype(NP[dtype])
    expected = np.logaddexp.accumulate(a.astype(np.float64), axis=axis)
    tol = {dtypes.float16: 2e-3, dtypes.float32: 2e-6, dtypes.float64: 1e-12}[dtype]
    assert_tensor(Tensor(a).logcumsumexp(axis), expected.astype(NP[dtype]), dtype=dtype,
                  rtol=tol, atol=tol)


def test_logcumsumexp_is_stable_and_handles_inf():
    big = np.array([1000.0, 1000.0, -1000.0, 990.0], np.float32)
    np.testing.assert_allclose(Tensor(big).logcumsumexp(0).numpy(),
                               np.logaddexp.accumulate(big.astype(np.float64)), rtol=1e-6)
    small = np.array([-1000.0, -2000.0, -999.0], np.float32)  # a global max would lose these
    np.testing.assert_allclose(Tensor(small).logcumsumexp(0).numpy(),
                               np.logaddexp.accumulate(small.astype(np.float64)), rtol=1e-6)
    inf = float("inf")
    out = Tensor([-inf, -inf, 0.0, inf, 1.0]).logcumsumexp(0).numpy()
    np.testing.assert_array_equal(out, [-inf, -inf, 0.0, inf, inf])
    assert Tensor([1, 2, 3]).logcumsumexp(0).dtype == dtypes.float32


# ---- index_select ----
@given(data=st.data(), dtype=st.sampled_from(ALL), layout=LAYOUT)
@fast(10)
def test_index_select_matches_numpy_take(data, dtype, layout):
    a = data.draw(tied_arrays(dtype))
    axis = data.draw(st.integers(-a.ndim, a.ndim - 1))
    index = data.draw(st.lists(st.integers(0, a.shape[axis] - 1), max_size=6))
    index = np.array(index, dtype=np.int64)
    out = make_layout(a, layout).index_select(axis, Tensor(index))
    assert_tensor(out, np.take(a, index, axis=axis), dtype=dtype, exact=True)


def test_index_select_out_of_range_raises_at_realize():
    t = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    out = t.index_select(1, Tensor([0, 3]))
    with pytest.raises(IndexError, match="index_select along dim 1: index 3"):
        out.numpy()
    with pytest.raises(IndexError, match="index -1"):  # negative indices are errors, as torch
        t.index_select(0, [-1]).numpy()
    with pytest.raises(TypeError, match="integer"):
        t.index_select(0, Tensor([0.0]))
    with pytest.raises(ValueError, match="1-d"):
        t.index_select(0, Tensor([[0]]))


def test_index_select_gradient():
    check_grad(lambda x: x.index_select(1, Tensor([2, 0, 2])),
               *spaced(np.random.default_rng(3), (2, 4)))


# ---- multinomial ----
def chi_square_bound(df: int, z: float = 4.75) -> float:
    """The chi-square quantile with df degrees of freedom at about 1 - 1e-6 (z = 4.75
    standard deviations; Wilson-Hilferty): a correct sampler fails one run in a million."""
    c = 2 / (9 * df)
    return df * (1 - c + z * math.sqrt(c)) ** 3


def assert_distribution(samples: np.ndarray, probs: np.ndarray, what: str):
    """Chi-square goodness of fit over the categories with probability > 0; a category of
    probability 0 must never appear."""
    counts = np.bincount(samples.reshape(-1), minlength=len(probs))
    assert counts[probs == 0].sum() == 0, f"{what}: zero-weight categories drawn: {counts}"
    if (probs > 0).sum() == 1:  # one possible category: nothing else may appear (above)
        return
    expected = samples.size * probs[probs > 0]
    stat = float((((counts[probs > 0] - expected) ** 2) / expected).sum())
    bound = chi_square_bound(int((probs > 0).sum()) - 1)
    assert stat < bound, f"{what}: chi-square {stat:.1f} >= {bound:.1f} (counts {counts}, " \
                         f"expected {expected.round(1)})"


def test_multinomial_with_replacement_follows_the_weights():
    Tensor.manual_seed(11)
    weights = np.array([0.1, 0.0, 0.3, 0.6, 1.0], np.float32)
    samples = Tensor(weights).multinomial(20000, replacement=True)
    assert samples.dtype == dtypes.int64 and samples.shape == (20000,)
    assert_distribution(samples.numpy(), weights / weights.sum(), "1-d")
    rows = np.array([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 5.0, 0.0], [4.0, 3.0, 2.0, 1.0]])
    samples = Tensor(rows).multinomial(6000, replacement=True).numpy()
    assert samples.shape == (3, 6000)
    for r in range(3):
        assert_distribution(samples[r], rows[r] / rows[r].sum(), f"row {r}")


def test_multinomial_without_replacement_draws_in_weighted_order():
    Tensor.manual_seed(12)
    weights = np.array([1.0, 2.0, 0.0, 3.0, 4.0])
    p = weights / weights.sum()
    samples = Tensor(np.tile(weights, (6000, 1))).multinomial(2).numpy()
    assert samples.shape == (6000, 2) and (samples[:, 0] != samples[:, 1]).all()
    assert_distribution(samples[:, 0], p, "first draw")
    # the second draw: P(j) = sum over i != j of p_i * p_j / (1 - p_i)
    second = np.array([sum(p[i] * p[j] / (1 - p[i]) for i in range(5) if i != j)
                       for j in range(5)])
    assert_distribution(samples[:, 1], second, "second draw")
    everything = Tensor(np.tile(weights, (50, 1))).multinomial(4).numpy()
    assert (np.sort(everything, axis=1) == [0, 1, 3, 4]).all()


def test_multinomial_is_reproducible_from_the_seed():
    weights = Tensor([1.0, 2.0, 3.0, 4.0])
    Tensor.manual_seed(5)
    first = weights.multinomial(8, replacement=True).tolist()
    Tensor.manual_seed(5)
    assert weights.multinomial(8, replacement=True).tolist() == first


def test_multinomial_bad_weights():
    with pytest.raises(ValueError, match="cannot draw 4 samples without replacement from 3"):
        Tensor([1.0, 1.0, 1.0]).multinomial(4)
    with pytest.raises(TypeError, match="floating point"):
        Tensor([1, 2]).multinomial(1)
    with pytest.raises(ValueError, match="1-d or 2-d"):
        Tensor(np.ones((2, 2, 2), np.float32)).multinomial(1)
    with pytest.raises(ValueError, match="positive"):
        Tensor([1.0]).multinomial(0)
    for weights, samples, replacement in [([1.0, 0.0, 0.0], 2, False), ([1.0, -1.0], 1, True),
                                          ([0.0, 0.0], 1, True), ([1.0, float("nan")], 1, True),
                                          ([[1.0, 1.0], [0.0, 0.0]], 1, False)]:
        out = Tensor(weights).multinomial(samples, replacement=replacement)
        with pytest.raises(IndexError, match="multinomial: a row of weights"):
            out.numpy()


# ---- kernel counts ----
@pytest.mark.parametrize("name,fn,most", [
    ("sort", lambda t: t.sort(1), 3),  # ranks, then values and indices
    ("argsort", lambda t: (t.argsort(1),), 2), ("topk", lambda t: t.topk(3, dim=1), 3),
    ("cummax", lambda t: t.cummax(1), 4), ("logcumsumexp", lambda t: (t.logcumsumexp(1),), 2),
    ("index_select", lambda t: (t.index_select(1, Tensor([1, 0])),), 2)])  # + the index flag
def test_kernel_counts(name, fn, most):
    t = Tensor(np.random.default_rng(0).standard_normal((4, 9)).astype(np.float32)).realize()
    outs = fn(t)
    before = Stats.kernels
    Tensor.realize(*outs)
    count = Stats.kernels - before
    assert count <= most, f"{name} of a realized (4, 9) tensor: expected <= {most} kernels, " \
                          f"got {count}"


def _lower_median_ref(arr: np.ndarray, dim: int):
    """numpy reference: the (n-1)//2-th of a stable sort with NaN largest; NaN (and the
    first NaN's index) where the row holds one, as torch.median."""
    order = np.argsort(arr, axis=dim, kind="stable")  # numpy sorts NaN last too
    pos = (arr.shape[dim] - 1) // 2
    idx = np.take(order, pos, axis=dim)
    val = np.take_along_axis(arr, np.expand_dims(idx, dim), dim).squeeze(dim)
    if arr.dtype.kind == "f":
        nan = np.isnan(arr)
        has = nan.any(dim)
        val = np.where(has, np.nan, val)
        idx = np.where(has, nan.argmax(dim), idx)
    return val, idx


@given(data=st.data(), dtype=st.sampled_from([dtypes.float32, dtypes.int32, dtypes.float64]),
       layout=LAYOUT)
@fast(15)
def test_median_and_kthvalue_match_references(data, dtype, layout):
    arr = data.draw(tied_arrays(dtype))
    t = make_layout(arr, layout, data.draw)
    dim = data.draw(st.integers(0, arr.ndim - 1))
    val, idx = _lower_median_ref(arr, dim)
    got = t.median(dim)
    np.testing.assert_array_equal(got.values.numpy(), val)
    np.testing.assert_array_equal(got.indices.numpy(), idx)
    whole = _lower_median_ref(arr.reshape(-1), 0)[0]
    np.testing.assert_array_equal(t.median().numpy(), whole)
    k = data.draw(st.integers(1, arr.shape[dim]))
    order = np.argsort(arr, axis=dim, kind="stable")
    want_i = np.take(order, k - 1, axis=dim)
    out = t.kthvalue(k, dim, keepdim=True)
    np.testing.assert_array_equal(out.indices.numpy(), np.expand_dims(want_i, dim))
    np.testing.assert_array_equal(out.values.numpy(),
                                  np.take_along_axis(arr, np.expand_dims(want_i, dim), dim))
    with pytest.raises(IndexError, match="kthvalue"):
        t.kthvalue(arr.shape[dim] + 1, dim)


def test_frac_and_scatter_add_as_pytorch():
    x = np.array([-2.5, -0.3, 0.0, 1.75, -0.0])
    np.testing.assert_array_equal(Tensor(x).frac().numpy(), x - np.trunc(x))
    with pytest.raises(TypeError, match="floats only"):
        Tensor(np.arange(3)).frac()
    base = np.arange(12.0).reshape(3, 4)
    idx = np.array([[0, 1, 0, 2], [2, 2, 1, 0]])
    src = np.arange(8.0).reshape(2, 4) + 100
    want = base.copy()
    for i in range(2):
        for j in range(4):
            want[idx[i, j], j] += src[i, j]
    np.testing.assert_array_equal(Tensor(base).scatter_add(0, Tensor(idx), Tensor(src)).numpy(), want)
