"""lazyten.nn.init (lazyten/nn/init.py) against PyTorch's documented formulas, written out
here: fixed fills (constant_, eye_, dirac_) exactly against numpy; gains and fans against
their formulas; random fills by their bounds and moments over thousands of draws from a
fixed seed (tolerances several standard errors wide), trunc_normal_ against the truncated
normal's exact mean and variance, orthogonal_ by W W^T = gain^2 I; the tensor is changed in
place (same object and memory, requires_grad kept, no graph); PyTorch's errors."""
import math
import warnings

import numpy as np
import pytest

import lazyten
from codegen.dtypes import dtypes
from lazyten import Tensor, nn, optim
from lazyten.nn import init


def param(*shape, dtype=None):
    """A realized leaf that requires grad, as a layer's parameter is."""
    return Tensor.empty(*shape, dtype=dtype, requires_grad=True).realize()


def fans(shape):
    field = math.prod(shape[2:])
    return shape[1] * field, shape[0] * field


def test_the_module_is_nn_init_with_torch_names():
    import lazyten.nn.init as module
    assert module is nn.init is lazyten.nn.init is init
    for name in ("calculate_gain", "uniform_", "normal_", "trunc_normal_", "constant_", "ones_",
                 "zeros_", "eye_", "dirac_", "xavier_uniform_", "xavier_normal_",
                 "kaiming_uniform_", "kaiming_normal_", "orthogonal_", "sparse_",
                 "_calculate_fan_in_and_fan_out"):
        assert callable(getattr(init, name, None)), f"nn.init.{name} is missing"


# ---- gains and fans ----
@pytest.mark.parametrize("nonlinearity, param_, expected", [
    ("linear", None, 1.0), ("conv1d", None, 1.0), ("conv2d", None, 1.0), ("conv3d", None, 1.0),
    ("conv_transpose1d", None, 1.0), ("conv_transpose2d", None, 1.0),
    ("conv_transpose3d", None, 1.0), ("sigmoid", None, 1.0), ("tanh", None, 5 / 3),
    ("relu", None, math.sqrt(2)), ("relu", 7, math.sqrt(2)), ("selu", None, 0.75),
    ("leaky_relu", None, math.sqrt(2 / (1 + 0.01 ** 2))), ("leaky_relu", 0, math.sqrt(2)),
    ("leaky_relu", 0.2, math.sqrt(2 / 1.04)), ("leaky_relu", math.sqrt(5), math.sqrt(1 / 3))])
def test_calculate_gain_formulas(nonlinearity, param_, expected):
    assert init.calculate_gain(nonlinearity, param_) == pytest.approx(expected, rel=1e-15)


def test_calculate_gain_errors():
    with pytest.raises(ValueError, match="Unsupported nonlinearity gelu"):
        init.calculate_gain("gelu")
    for bad in (True, "0.1", [0.1]):
        with pytest.raises(ValueError, match="negative_slope .* not a valid number"):
            init.calculate_gain("leaky_relu", bad)


@pytest.mark.parametrize("shape", [(3, 5), (7, 2, 4), (6, 4, 3, 2), (2, 3, 2, 2, 5), (0, 4)])
def test_fans_are_channels_times_receptive_field(shape):
    assert init._calculate_fan_in_and_fan_out(Tensor.empty(*shape)) == fans(shape)


@pytest.mark.parametrize("fn", [init._calculate_fan_in_and_fan_out, init.xavier_uniform_,
                                init.xavier_normal_, init.kaiming_uniform_,
                                init.kaiming_normal_])
@pytest.mark.parametrize("shape", [(5,), ()])
def test_fans_of_fewer_than_two_dims_raise(fn, shape):
    with pytest.raises(ValueError, match=rf"fewer than 2 dimensions \(shape \({shape[0] if shape else ''}"):
        fn(Tensor.empty(*shape))


@pytest.mark.parametrize("fn", [init.kaiming_uniform_, init.kaiming_normal_])
def test_kaiming_modes(fn):
    with pytest.raises(ValueError, match=r"Mode fan_avg not supported, please use one of "
                                         r"\['fan_in', 'fan_out'\]"):
        fn(param(4, 3), mode="fan_avg")
    Tensor.manual_seed(1)
    upper = fn(param(400, 100), mode="FAN_OUT").numpy()  # as PyTorch: any case
    Tensor.manual_seed(1)
    lower = fn(param(400, 100), mode="fan_out").numpy()
    np.testing.assert_array_equal(upper, lower)


# ---- fixed values ----
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float16, dtypes.int32])
def test_constant_ones_zeros_exact(dtype):
    t = Tensor(np.arange(12).reshape(3, 4), dtype=dtype).realize()
    for fn, expected in ((lambda x: init.constant_(x, 2.75), 2.75), (init.ones_, 1),
                         (init.zeros_, 0), (lambda x: init.constant_(x, -3), -3)):
        out = fn(t)
        if not dtype.is_float:
            expected = int(expected)  # PyTorch's fill_ truncates toward zero
        assert out is t and t.dtype == dtype
        np.testing.assert_array_equal(t.numpy(), np.full((3, 4), expected))


@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (4, 4), (1, 1), (0, 3)])
def test_eye_matches_numpy(shape):
    t = param(*shape)
    assert init.eye_(t) is t
    np.testing.assert_array_equal(t.numpy(), np.eye(*shape))


@pytest.mark.parametrize("shape", [(4,), (2, 2, 2)])
def test_eye_needs_two_dims(shape):
    with pytest.raises(ValueError, match=rf"Only tensors with 2 dimensions .*{shape}"):
        init.eye_(Tensor.empty(*shape))


def dirac_reference(shape, groups):
    """PyTorch's description, loop by loop: in each group, out channel d takes in channel d
    at the centre of the kernel."""
    out = np.zeros(shape)
    per_group = shape[0] // groups
    centre = tuple(s // 2 for s in shape[2:])
    for g in range(groups):
        for d in range(min(per_group, shape[1])):
            out[(g * per_group + d, d) + centre] = 1
    return out


@pytest.mark.parametrize("shape, groups", [((4, 4, 3), 1), ((6, 3, 5), 1), ((3, 6, 2), 1),
                                           ((6, 2, 3, 3), 2), ((4, 4, 3, 4), 1),
                                           ((6, 1, 3, 3, 3), 3), ((8, 2, 1, 2, 3), 4)])
def test_dirac_matches_the_loop(shape, groups):
    t = param(*shape)
    assert init.dirac_(t, groups) is t
    np.testing.assert_array_equal(t.numpy(), dirac_reference(shape, groups))


def test_dirac_convolution_passes_its_input_through():
    x = np.random.default_rng(0).standard_normal((2, 3, 6, 6)).astype(np.float32)
    conv = nn.Conv2d(3, 3, 3, padding=1, bias=False)
    init.dirac_(conv.weight)
    np.testing.assert_allclose(conv(Tensor(x)).numpy(), x, rtol=1e-6, atol=1e-6)


def test_dirac_errors():
    with pytest.raises(ValueError, match=r"Only tensors with 3, 4, or 5 dimensions .*\(3, 4\)"):
        init.dirac_(Tensor.empty(3, 4))
    with pytest.raises(ValueError, match="dim 0 must be divisible by groups"):
        init.dirac_(Tensor.empty(3, 4, 3), groups=2)


# ---- random values: bounds and moments ----
SHAPES = [(256, 512), (64, 32, 9), (64, 32, 3, 3), (32, 16, 3, 3, 3)]  # >= 13824 elements


def check_uniform(values, bound, what):
    """Inside +-bound, reaching near it, with the mean 0 and std bound / sqrt(3)."""
    n, std = values.size, bound / math.sqrt(3)
    assert np.abs(values).max() <= bound * (1 + 1e-6), f"{what}: outside +-{bound}"
    assert np.abs(values).max() > bound * 0.99, f"{what}: does not reach the bound {bound}"
    assert abs(values.mean()) < 5 * std / math.sqrt(n), f"{what}: mean {values.mean()}"
    assert values.std() == pytest.approx(std, rel=0.03), f"{what}: std, bound {bound}"


def check_normal(values, std, what):
    n = values.size
    assert abs(values.mean()) < 5 * std / math.sqrt(n), f"{what}: mean {values.mean()}"
    assert values.std() == pytest.approx(std, rel=0.04), f"{what}: expected std {std}"
    kurtosis = np.mean(values ** 4) / values.var() ** 2  # 3 for a normal, 1.8 for a uniform
    assert kurtosis == pytest.approx(3, abs=0.3), f"{what}: kurtosis {kurtosis}, not normal"


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("gain", [1.0, 5 / 3])
def test_xavier(shape, gain):
    fan_in, fan_out = fans(shape)
    std = gain * math.sqrt(2 / (fan_in + fan_out))
    Tensor.manual_seed(11)
    check_uniform(init.xavier_uniform_(param(*shape), gain).numpy(), math.sqrt(3) * std,
                  f"xavier_uniform_ {shape}")
    check_normal(init.xavier_normal_(param(*shape), gain=gain).numpy(), std,
                 f"xavier_normal_ {shape}")


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("a, mode, nonlinearity, gain", [
    (0, "fan_in", "leaky_relu", math.sqrt(2)), (math.sqrt(5), "fan_in", "leaky_relu",
                                                math.sqrt(1 / 3)),
    (0, "fan_out", "relu", math.sqrt(2)), (0.3, "fan_out", "tanh", 5 / 3)])
def test_kaiming(shape, a, mode, nonlinearity, gain):
    fan = dict(zip(("fan_in", "fan_out"), fans(shape)))[mode]
    std = gain / math.sqrt(fan)
    Tensor.manual_seed(12)
    w = init.kaiming_uniform_(param(*shape), a=a, mode=mode, nonlinearity=nonlinearity)
    check_uniform(w.numpy(), math.sqrt(3) * std, f"kaiming_uniform_ {shape} {mode}")
    w = init.kaiming_normal_(param(*shape), a, mode, nonlinearity)
    check_normal(w.numpy(), std, f"kaiming_normal_ {shape} {mode}")


def test_uniform_and_normal():
    Tensor.manual_seed(13)
    v = init.uniform_(param(200, 100), -1.5, 2.5).numpy()
    assert v.min() >= -1.5 and v.max() <= 2.5 and v.min() < -1.49 and v.max() > 2.49
    assert v.mean() == pytest.approx(0.5, abs=0.02) and v.std() == pytest.approx(4 / 12 ** .5, rel=0.02)
    v = init.normal_(param(200, 100), mean=3.0, std=0.5).numpy()
    check_normal(v - 3.0, 0.5, "normal_(3, 0.5)")
    v = init.uniform_(param(20000)).numpy()  # defaults: [0, 1)
    assert 0 <= v.min() < 0.01 and 0.99 < v.max() < 1


def test_random_fill_errors():
    with pytest.raises(RuntimeError, match=r"from=1 > to=0"):
        init.uniform_(param(3), 1, 0)
    with pytest.raises(RuntimeError, match=r"std >= 0.0, but found std -1"):
        init.normal_(param(3), 0, -1)
    for fn in (init.uniform_, init.normal_, init.trunc_normal_, init.orthogonal_,
               lambda t: init.sparse_(t, 0.5), init.xavier_uniform_, init.kaiming_normal_):
        with pytest.raises(NotImplementedError, match="int64"):
            fn(Tensor(np.zeros((3, 4), np.int64)))
    with pytest.raises(TypeError, match="numpy.random.Generator"):
        init.normal_(param(3), generator=123)
    with pytest.raises(TypeError, match="lazyten Tensor"):
        init.zeros_(np.zeros(3))


def test_zero_element_tensors_are_a_no_op():
    for fn in (init.kaiming_uniform_, init.kaiming_normal_):
        with pytest.warns(UserWarning, match="zero-element tensors is a no-op"):
            assert fn(param(0)).shape == (0,)  # no fan error, as PyTorch
    for fn in (init.xavier_uniform_, init.uniform_, init.orthogonal_, init.zeros_):
        assert fn(param(0, 4)).shape == (0, 4)


# ---- trunc_normal_ ----
def truncated_moments(mean, std, a, b):
    """The mean and variance of N(mean, std^2) conditioned on [a, b]."""
    def pdf(z):
        return 0.0 if math.isinf(z) else math.exp(-z * z / 2) / math.sqrt(2 * math.pi)

    def cdf(z):
        return 0.5 * (1 + math.erf(z / math.sqrt(2)))
    lo, hi = (a - mean) / std, (b - mean) / std
    mass = cdf(hi) - cdf(lo)
    shift = (pdf(lo) - pdf(hi)) / mass
    lo_term = 0.0 if math.isinf(lo) else lo * pdf(lo)
    hi_term = 0.0 if math.isinf(hi) else hi * pdf(hi)
    var = 1 + (lo_term - hi_term) / mass - shift ** 2
    return mean + std * shift, std * std * var


@pytest.mark.parametrize("mean, std, a, b", [
    (0.0, 1.0, -2.0, 2.0), (0.0, 0.02, -0.04, 0.04), (1.0, 2.0, -0.5, 0.25),
    (0.0, 1.0, 0.0, 1.0), (0.0, 1.0, 3.0, math.inf), (0.0, 1.0, -math.inf, -4.0),
    (0.0, 1.0, 0.5, 0.75), (0.0, 1.0, -0.25, 0.125), (2.0, 1.0, -math.inf, math.inf),
    (0.0, -1.0, -1.0, 0.5)])  # a negative std draws what |std| does
def test_trunc_normal_bounds_and_moments(mean, std, a, b):
    Tensor.manual_seed(14)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tails: mean far from [a, b]
        v = init.trunc_normal_(param(100, 200), mean, std, a, b).numpy().astype(np.float64)
    assert v.min() >= np.float32(a) and v.max() <= np.float32(b), f"outside [{a}, {b}]"
    expected_mean, expected_var = truncated_moments(mean, abs(std), a, b)
    spread = math.sqrt(expected_var)
    assert abs(v.mean() - expected_mean) < 5 * spread / math.sqrt(v.size), \
        f"mean {v.mean()}, truncated normal's {expected_mean}"
    assert v.var() == pytest.approx(expected_var, rel=0.05), f"variance, [{a}, {b}]"


def test_trunc_normal_defaults_edge_cases_and_errors():
    v = init.trunc_normal_(param(50000)).numpy()  # N(0, 1) on [-2, 2]
    assert -2 <= v.min() < -1.99 and 1.99 < v.max() <= 2
    v = init.trunc_normal_(param(10), mean=5.0, std=0.0, a=-1.0, b=1.0).numpy()
    np.testing.assert_array_equal(v, np.ones(10))  # no spread: the mean clamped into [a, b]
    np.testing.assert_array_equal(init.trunc_normal_(param(5), a=0.5, b=0.5).numpy(),
                                  np.full(5, 0.5))
    with pytest.warns(UserWarning, match="mean is more than 2 std from"):
        init.trunc_normal_(param(4), mean=10.0)
    with pytest.raises(RuntimeError, match="a=2.0 > b=1.0"):
        init.trunc_normal_(param(4), a=2.0, b=1.0)


# ---- orthogonal_ and sparse_ ----
@pytest.mark.parametrize("shape", [(6, 6), (4, 9), (9, 4), (8, 3, 2, 2), (3, 2, 2, 2, 2)])
@pytest.mark.parametrize("gain", [1.0, 2.5])
def test_orthogonal(shape, gain):
    w = init.orthogonal_(param(*shape), gain).numpy().astype(np.float64)
    rows = w.reshape(shape[0], -1)
    small = min(rows.shape)
    gram = rows @ rows.T if rows.shape[0] <= rows.shape[1] else rows.T @ rows
    np.testing.assert_allclose(gram, gain ** 2 * np.eye(small), atol=2e-5 * gain ** 2)


def test_orthogonal_draws_differ_and_signs_are_balanced():
    Tensor.manual_seed(15)
    diagonals = np.array([np.diag(init.orthogonal_(param(3, 3)).numpy()) for _ in range(200)])
    assert abs(np.mean(diagonals > 0) - 0.5) < 0.1, "Q's columns should not favour a sign"
    assert len({tuple(np.round(d, 5)) for d in diagonals}) == 200


def test_orthogonal_needs_two_dims():
    with pytest.raises(ValueError, match=r"Only tensors with 2 or more dimensions .*\(5,\)"):
        init.orthogonal_(param(5))


@pytest.mark.parametrize("rows, sparsity, std", [(10, 0.3, 0.01), (7, 0.5, 1.0), (5, 0.0, 0.1),
                                                 (4, 1.0, 0.1)])
def test_sparse_zeros_per_column(rows, sparsity, std):
    Tensor.manual_seed(16)
    v = init.sparse_(param(rows, 3000), sparsity, std).numpy()
    zeros = math.ceil(sparsity * rows)
    np.testing.assert_array_equal((v == 0).sum(axis=0), np.full(3000, zeros))
    if zeros < rows:
        kept = v[v != 0]
        assert kept.std() == pytest.approx(std, rel=0.03) and abs(kept.mean()) < 5 * std / kept.size ** .5
        picked = (v == 0).mean(axis=1)  # each row zeroed about as often as the others
        np.testing.assert_allclose(picked, zeros / rows, atol=0.05)
    with pytest.raises(ValueError, match=r"Only tensors with 2 dimensions .*\(3, 4, 5\)"):
        init.sparse_(param(3, 4, 5), 0.1)


# ---- in place: the same object, memory and leaf ----
IN_PLACE = {
    "uniform_": lambda t: init.uniform_(t, -1, 1), "normal_": init.normal_,
    "trunc_normal_": lambda t: init.trunc_normal_(t, std=0.02), "constant_": lambda t: init.constant_(t, 0.5),
    "ones_": init.ones_, "zeros_": init.zeros_, "eye_": init.eye_,
    "xavier_uniform_": init.xavier_uniform_, "xavier_normal_": init.xavier_normal_,
    "kaiming_uniform_": init.kaiming_uniform_, "kaiming_normal_": init.kaiming_normal_,
    "orthogonal_": init.orthogonal_, "sparse_": lambda t: init.sparse_(t, 0.5)}


@pytest.mark.parametrize("name", sorted(IN_PLACE))
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float16])
def test_same_tensor_memory_and_leaf(name, dtype):
    t = Tensor(np.full((4, 6), 7.0), dtype=dtype, requires_grad=True).realize()
    memory = t.lazydata.realized
    IN_PLACE[name](t)  # outside no_grad: the function itself may change the leaf
    init.ones_(t)  # updates after the first must write into the same memory too
    out = IN_PLACE[name](t)
    assert out is t, f"{name} returned another tensor"
    assert not np.any(t.numpy() == 7.0), f"{name} left old values"
    assert t.lazydata.realized is memory, f"{name} moved the tensor to new memory"
    assert t.dtype == dtype and t.requires_grad and t._ctx is None and t.grad is None
    new = t.numpy().astype(np.float64)
    (t * t).sum().backward()  # a leaf still: d/dt sum(t^2) = 2 t, at the new values
    np.testing.assert_allclose(t.grad.numpy(), 2 * new, rtol=1e-3)


def test_an_optimiser_built_before_trains_the_new_values():
    layer = nn.Linear(5, 3)
    weight, bias = layer.weight, layer.bias
    opt = optim.SGD(layer.parameters(), lr=0.1)
    init.constant_(layer.weight, 0.5)
    init.zeros_(layer.bias)
    assert layer.weight is weight and layer.bias is bias
    x = np.random.default_rng(1).standard_normal((4, 5)).astype(np.float32)
    opt.zero_grad()
    layer(Tensor(x)).sum().backward()
    opt.step()
    # d(sum of outputs)/dW has every row the column sums of x, d/db is the batch size
    np.testing.assert_allclose(layer.weight.numpy(), 0.5 - 0.1 * np.tile(x.sum(0), (3, 1)),
                               rtol=1e-6)
    np.testing.assert_allclose(layer.bias.numpy(), np.full(3, -0.4), rtol=1e-6)


def test_a_model_loop_as_torch_code_writes_it():
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
                          nn.Linear(8 * 4 * 4, 10))
    Tensor.manual_seed(17)
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.constant_(m.weight, 1)
            nn.init.constant_(m.bias, 0)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0, 0.01)
            nn.init.zeros_(m.bias)
    np.testing.assert_array_equal(model[1].weight.numpy(), np.ones(8))
    np.testing.assert_array_equal(model[4].bias.numpy(), np.zeros(10))
    out = model(Tensor.randn(2, 3, 6, 6))
    assert out.shape == (2, 10) and np.isfinite(out.numpy()).all()


# ---- reproducibility ----
@pytest.mark.parametrize("name", ["uniform_", "normal_", "trunc_normal_", "xavier_uniform_",
                                  "kaiming_normal_", "orthogonal_", "sparse_"])
def test_manual_seed_and_generator_reproduce_draws(name):
    def draw(seed=None, generator=None):
        if seed is not None:
            Tensor.manual_seed(seed)
        fn = IN_PLACE[name]
        t = param(5, 8)
        if generator is not None:
            kwargs = {"sparsity": 0.5} if name == "sparse_" else {}
            fn = getattr(init, name)
            return fn(t, generator=generator, **kwargs).numpy()
        return fn(t).numpy()
    first, again, other = draw(seed=3), draw(seed=3), draw(seed=4)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other), f"{name}: seeds 3 and 4 drew the same values"
    mine = draw(generator=np.random.default_rng(5))
    np.testing.assert_array_equal(mine, draw(seed=99, generator=np.random.default_rng(5)))
    assert not np.array_equal(mine, draw(generator=np.random.default_rng(6)))
