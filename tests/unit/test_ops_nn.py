"""Neural-network forward ops against numpy: matmul/dot/linear with batching and
broadcasting, conv1d/2d/3d (stride, padding incl. asymmetric, dilation, groups, bias),
conv_transpose2d, max_pool2d and avg_pool2d, checked against direct-loop references."""
import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

from codegen.dtypes import dtypes
from lazyten import Tensor
from helpers import (LAYOUTS, NP, assert_tensor, conv_ref, conv_transpose_ref, fast,
                     make_layout, pool_ref, tensor_and_array)

F32 = dtypes.float32


# ======================================================================================
# matmul
# ======================================================================================
@given(data=st.data(), dtype=st.sampled_from([F32, dtypes.float64, dtypes.int32, dtypes.int8,
                                             dtypes.float16]))
@fast(20)
def test_matmul_shapes_batching_and_dtypes(data, dtype):
    shapes = data.draw(hnp.mutually_broadcastable_shapes(
        signature=np.matmul.signature, max_dims=2, min_side=1, max_side=4))
    sx, sy = shapes.input_shapes
    low, high = (-3, 3) if dtype.is_float else (None, None)
    x, xa = data.draw(tensor_and_array(sx, dtype, low=low, high=high))
    y, ya = data.draw(tensor_and_array(sy, dtype, low=low, high=high))
    if dtype.is_float:
        expected = np.matmul(xa.astype(np.float64), ya.astype(np.float64)).astype(NP[dtype])
    else:
        expected = np.matmul(xa, ya)  # integer products wrap in the dtype
    assert expected.shape == shapes.result_shape
    tol = {dtypes.float16: 1e-2, F32: 1e-5, dtypes.float64: 1e-12}.get(dtype)
    assert_tensor(x @ y, expected, dtype=dtype, rtol=tol, atol=tol)
    assert_tensor(x.matmul(y), expected, dtype=dtype, rtol=tol, atol=tol)


@pytest.mark.parametrize("sx,sy", [((3,), (3,)), ((4,), (4, 2)), ((2, 4), (4,)),
                                   ((2, 3, 4), (4,)), ((4,), (5, 4, 2)), ((1, 3), (3, 1)),
                                   ((2, 1, 3, 4), (5, 4, 2)), ((1,), (1,))])
def test_matmul_1d_cases_and_dot(sx, sy):
    rng = np.random.default_rng(0)
    xa, ya = rng.standard_normal(sx).astype(np.float32), rng.standard_normal(sy).astype(np.float32)
    assert_tensor(Tensor(xa) @ Tensor(ya), np.matmul(xa, ya), rtol=1e-5, atol=1e-6)
    assert_tensor(Tensor(xa).dot(Tensor(ya)), np.matmul(xa, ya), rtol=1e-5, atol=1e-6)


def test_matmul_promotes_mixed_dtypes_and_handles_special_values():
    a = np.array([[1, 2], [3, 4]], np.int32)
    b = np.array([[0.5, np.inf], [np.nan, -1.0]], np.float32)
    with np.errstate(all="ignore"):
        expected = a.astype(np.float32) @ b
    assert_tensor(Tensor(a) @ Tensor(b), expected)


def test_matmul_bool_is_logical_like_numpy():
    a = np.array([[True, False], [False, False]])
    b = np.array([[True, True], [True, False]])
    assert_tensor(Tensor(a) @ Tensor(b), a @ b, exact=True)


def test_linear():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 5)).astype(np.float32)
    w = rng.standard_normal((4, 5)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    assert_tensor(Tensor(x).linear(Tensor(w), Tensor(b)), x @ w.T + b, rtol=1e-5, atol=1e-6)
    assert_tensor(Tensor(x).linear(Tensor(w)), x @ w.T, rtol=1e-5, atol=1e-6)


# ======================================================================================
# convolution
# ======================================================================================
@st.composite
def conv_case(draw, nd: int, max_side: int):
    """Random conv arguments whose output is not empty, in every padding form."""
    groups = draw(st.integers(1, 2))
    cin_g, cout_g = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    kernel = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    stride = tuple(draw(st.integers(1, 2)) for _ in range(nd))
    dilation = tuple(draw(st.integers(1, 2)) for _ in range(nd))
    pairs = [(draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(nd)]
    form = draw(st.sampled_from(["int", "per_dim", "pairs", "flat"]))
    if form == "int":
        padding = pairs[0][0]
        pairs = [(padding, padding)] * nd
    elif form == "per_dim":
        padding = tuple(p for p, _ in pairs)
        pairs = [(p, p) for p in padding]
    elif form == "pairs":
        padding = [tuple(p) for p in pairs]
    else:  # PyTorch's F.pad order: last dim first
        padding = tuple(v for pair in reversed(pairs) for v in pair)
    spatial = []
    for k, d, (b, a) in zip(kernel, dilation, pairs):
        need = max(1, d * (k - 1) + 1 - b - a)
        spatial.append(draw(st.integers(need, max(need, max_side))))
    return dict(n=draw(st.integers(1, 2)), groups=groups, cin=cin_g * groups,
                cout=cout_g * groups, cin_g=cin_g, kernel=kernel, stride=stride,
                dilation=dilation, padding=padding, pairs=pairs, spatial=tuple(spatial),
                bias=draw(st.booleans()), layout=draw(st.sampled_from(LAYOUTS)))


def _conv_inputs(case, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((case["n"], case["cin"]) + case["spatial"]).astype(np.float32)
    w = rng.standard_normal((case["cout"], case["cin_g"]) + case["kernel"]).astype(np.float32)
    b = rng.standard_normal(case["cout"]).astype(np.float32) if case["bias"] else None
    return x, w, b


def _check_conv(case, method):
    x, w, b = _conv_inputs(case)
    xt = make_layout(x, case["layout"])
    kwargs = dict(groups=case["groups"], stride=case["stride"], dilation=case["dilation"],
                  padding=case["padding"])
    out = getattr(xt, method)(Tensor(w), None if b is None else Tensor(b), **kwargs)
    expected = conv_ref(x, w, b, stride=case["stride"], padding=case["pairs"],
                        dilation=case["dilation"], groups=case["groups"])
    assert_tensor(out, expected.astype(np.float32), rtol=1e-4, atol=1e-4)


@given(case=conv_case(2, 5))
@fast(15)
def test_conv2d(case):
    _check_conv(case, "conv2d")


@given(case=conv_case(1, 7))
@fast(12)
def test_conv1d(case):
    _check_conv(case, "conv1d")


@given(case=conv_case(3, 4))
@fast(8)
def test_conv3d(case):
    _check_conv(case, "conv3d")


def test_conv2d_known_values_and_int_stride_forms():
    x = np.arange(2 * 3 * 6 * 5, dtype=np.float32).reshape(2, 3, 6, 5) / 10
    w = (np.arange(4 * 3 * 3 * 2, dtype=np.float32).reshape(4, 3, 3, 2) - 30) / 7
    b = np.array([1.0, -1.0, 0.5, 0.0], np.float32)
    for kw in [dict(), dict(stride=2), dict(padding=1), dict(padding=(2, 0)), dict(dilation=2),
               dict(stride=(2, 1), padding=((1, 0), (0, 2)), dilation=(1, 2))]:
        ref_kw = dict(kw)
        if isinstance(kw.get("padding"), tuple) and isinstance(kw["padding"][0], int):
            ref_kw["padding"] = list(kw["padding"])
        expected = conv_ref(x, w, b, **ref_kw).astype(np.float32)
        assert_tensor(Tensor(x).conv2d(Tensor(w), Tensor(b), **kw), expected, rtol=1e-4, atol=1e-4)


def test_conv2d_float64_and_depthwise():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 4, 5, 5))
    w = rng.standard_normal((8, 1, 3, 3))
    expected = conv_ref(x, w, groups=4, padding=1)
    assert_tensor(Tensor(x).conv2d(Tensor(w), groups=4, padding=1), expected, rtol=1e-10,
                  atol=1e-10)


@st.composite
def conv_transpose_case(draw):
    groups = draw(st.integers(1, 2))
    cin_g, cout_g = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    kernel = tuple(draw(st.integers(1, 3)) for _ in range(2))
    stride = tuple(draw(st.integers(1, 3)) for _ in range(2))
    dilation = tuple(draw(st.integers(1, 2)) for _ in range(2))
    spatial = tuple(draw(st.integers(1, 4)) for _ in range(2))
    padding, output_padding = [], []
    for k, s, d, i in zip(kernel, stride, dilation, spatial):
        full = (i - 1) * s + d * (k - 1) + 1
        padding.append(draw(st.integers(0, min(2, (full - 1) // 2))))
        output_padding.append(draw(st.integers(0, max(s, d) - 1)))
    return dict(n=draw(st.integers(1, 2)), groups=groups, cin=cin_g * groups, cout_g=cout_g,
                kernel=kernel, stride=stride, dilation=dilation, padding=tuple(padding),
                output_padding=tuple(output_padding), spatial=spatial, bias=draw(st.booleans()))


@given(case=conv_transpose_case())
@fast(15)
def test_conv_transpose2d(case):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((case["n"], case["cin"]) + case["spatial"]).astype(np.float32)
    w = rng.standard_normal((case["cin"], case["cout_g"]) + case["kernel"]).astype(np.float32)
    b = rng.standard_normal(case["cout_g"] * case["groups"]).astype(np.float32) \
        if case["bias"] else None
    kwargs = {k: case[k] for k in ("groups", "stride", "dilation", "padding", "output_padding")}
    out = Tensor(x).conv_transpose2d(Tensor(w), None if b is None else Tensor(b), **kwargs)
    expected = conv_transpose_ref(x, w, b, **kwargs)
    assert_tensor(out, expected.astype(np.float32), rtol=1e-4, atol=1e-4)


def test_conv_transpose2d_int_arguments():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 2, 3, 3)).astype(np.float32)
    w = rng.standard_normal((2, 3, 3, 3)).astype(np.float32)
    out = Tensor(x).conv_transpose2d(Tensor(w), stride=2, padding=1, output_padding=1)
    expected = conv_transpose_ref(x, w, stride=2, padding=1, output_padding=1)
    assert out.shape == (1, 3, 6, 6)
    assert_tensor(out, expected.astype(np.float32), rtol=1e-4, atol=1e-4)


# ======================================================================================
# pooling
# ======================================================================================
@st.composite
def pool_case(draw):
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = draw(st.one_of(st.none(), st.integers(1, 3),
                            st.tuples(st.integers(1, 3), st.integers(1, 3))))
    dilation = draw(st.sampled_from([1, 1, 2, (1, 2)]))
    dil = (dilation, dilation) if isinstance(dilation, int) else dilation
    padding = draw(st.sampled_from([0, 0, 1, (1, 0)]))
    pad = (padding, padding) if isinstance(padding, int) else padding
    pad = tuple(min(p, k // 2) for p, k in zip(pad, kernel))  # PyTorch: pad <= kernel / 2
    lead = draw(st.sampled_from([(1, 2), (2,), (2, 1)]))
    spatial = tuple(draw(st.integers(max(1, d * (k - 1) + 1 - 2 * p), 6))
                    for k, d, p in zip(kernel, dil, pad))
    return dict(kernel=kernel, stride=stride, dilation=dilation, padding=pad,
                shape=lead + spatial)


@pytest.mark.parametrize("op", ["max", "avg"])
@given(data=st.data(), case=pool_case())
@fast(20)
def test_pool2d(op, data, case):
    t, arr = data.draw(tensor_and_array(case["shape"], F32))
    fn = getattr(t, f"{op}_pool2d")
    out = fn(kernel_size=case["kernel"], stride=case["stride"], dilation=case["dilation"],
             padding=case["padding"])
    expected = pool_ref(arr, case["kernel"], case["stride"], padding=case["padding"],
                        dilation=case["dilation"], op=op)
    assert_tensor(out, expected.astype(np.float32), rtol=1e-5, atol=1e-6)


def test_pool2d_defaults_and_special_values():
    x = np.arange(2 * 6 * 6, dtype=np.float32).reshape(1, 2, 6, 6)
    x[0, 0, 0, 0], x[0, 1, 5, 5], x[0, 0, 3, 3] = np.nan, -np.inf, np.inf
    for op in ("max", "avg"):
        expected = pool_ref(x, (2, 2), op=op).astype(np.float32)
        assert_tensor(getattr(Tensor(x), f"{op}_pool2d")(), expected)
        expected = pool_ref(x, 3, 2, padding=1, op=op).astype(np.float32)
        assert_tensor(getattr(Tensor(x), f"{op}_pool2d")(3, stride=2, padding=1), expected)


def test_windows_with_a_stride_longer_than_the_input():
    x = np.arange(2 * 9, dtype=np.float32).reshape(1, 2, 3, 3)
    expected = pool_ref(x, (1, 1), 3, dilation=(1, 2), op="avg").astype(np.float32)
    assert_tensor(Tensor(x[..., :1, :1]).avg_pool2d((1, 1), stride=3, dilation=(1, 2)),
                  pool_ref(x[..., :1, :1], (1, 1), 3, dilation=(1, 2), op="avg").astype(np.float32))
    assert_tensor(Tensor(x).max_pool2d((2, 1), stride=5, dilation=(2, 1)),
                  pool_ref(x, (2, 1), 5, dilation=(2, 1)).astype(np.float32))
    assert_tensor(Tensor(x).avg_pool2d((1, 1), stride=3, dilation=(1, 2)), expected)
    w = np.ones((1, 2, 2, 2), np.float32)
    assert_tensor(Tensor(x).conv2d(Tensor(w), stride=4, dilation=2),
                  conv_ref(x, w, stride=4, dilation=2).astype(np.float32))


def test_pool2d_integer_input_keeps_max_dtype():
    x = np.arange(16, dtype=np.int32).reshape(1, 4, 4)
    assert_tensor(Tensor(x).max_pool2d(2), pool_ref(x, 2).astype(np.int32))
    assert_tensor(Tensor(x).avg_pool2d(2), pool_ref(x, 2, op="avg").astype(np.float32))
    assert_tensor(Tensor(x - 20).max_pool2d(3, stride=1, padding=1),
                  pool_ref(x - 20, 3, 1, padding=1).astype(np.int32))
