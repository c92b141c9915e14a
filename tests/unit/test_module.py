"""lazyten.nn.Module: parameter discovery, state-dict names (PyTorch's, written out by hand
from its naming rules), loading, train/eval against numpy, to(device), and a PyTorch-style
training loop checked against the same loop in numpy."""
from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given, strategies as st

import lazyten
from lazyten import Tensor, nn
from lazyten.nn.state import get_parameters, get_state_dict, safe_load, safe_save
from lazyten.optim import SGD
from helpers import fast


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(),
                                      nn.MaxPool2d(2))
        self.blocks = nn.ModuleList([nn.Linear(8, 8), nn.LayerNorm(8)])
        self.head = nn.Sequential(OrderedDict(fc=nn.Linear(8, 4, bias=False),
                                              drop=nn.Dropout(0.1)))
        self.emb = nn.Embedding(10, 8)
        self.register_buffer("steps", Tensor(np.zeros(1, np.float32)))
        self.gn = nn.GroupNorm(2, 8, affine=False)
        self.scale = nn.Parameter(Tensor(np.ones(1, np.float32)))


# PyTorch's state_dict of the same architecture: a module's parameters (in registration
# order), then its buffers, then each child's entries; Sequential / ModuleList children are
# "0", "1", ...; BatchNorm adds running_mean, running_var, num_batches_tracked.
NET_KEYS = [
    "scale", "steps",
    "features.0.weight", "features.0.bias",
    "features.1.weight", "features.1.bias", "features.1.running_mean",
    "features.1.running_var", "features.1.num_batches_tracked",
    "blocks.0.weight", "blocks.0.bias", "blocks.1.weight", "blocks.1.bias",
    "head.fc.weight", "emb.weight",
]


def test_state_dict_keys_are_pytorchs():
    net = Net()
    assert list(net.state_dict()) == NET_KEYS
    assert list(get_state_dict(net)) == NET_KEYS  # the plain-object helper agrees
    assert [n for n, _ in net.named_buffers()] == [
        "steps", "features.1.running_mean", "features.1.running_var",
        "features.1.num_batches_tracked"]
    assert [n for n, _ in net.named_parameters()] == [
        k for k in NET_KEYS if k != "steps" and "running" not in k and "num_batches" not in k]
    assert net.state_dict()["blocks.1.weight"] is net.blocks[1].weight
    assert list(net.head.state_dict(prefix="head.")) == ["head.fc.weight"]


def test_discovery_of_nested_lists_dicts_and_shared_modules():
    class Plainish(nn.Module):
        def __init__(self):
            super().__init__()
            shared = nn.Linear(2, 2)
            self.layers = [shared, nn.Linear(2, 3)]        # a plain list is walked too
            self.named = {"a": shared, "b": [nn.Linear(3, 1)]}
            self._private = nn.Linear(2, 2)                # "_" names are never registered
            self.config = {"depth": 2}
            self.register_buffer("cache", Tensor.zeros(2), persistent=False)
            self.me = self                                  # a cycle is fine
    m = Plainish()
    keys = list(m.state_dict())
    assert keys == ["layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias",
                    "named.a.weight", "named.a.bias", "named.b.0.weight", "named.b.0.bias"]
    params = list(m.parameters())
    assert len(params) == 6 and params[0] is m.layers[0].weight  # shared once
    assert [n for n, _ in m.named_buffers()] == ["cache"]          # moves, not saved
    assert [n for n, _ in m.named_children()] == ["layers.0", "layers.1", "named.b.0", "me"]
    assert len(list(m.modules())) == 4
    assert len(list(m.named_modules(remove_duplicate=False))) == 5  # shared twice, self once
    assert len(get_parameters(m)) == 6


def test_registration_rules():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = Tensor.ones(2, requires_grad=True)
            self.b = Tensor.ones(2)            # no requires_grad: a buffer
            self.opt = None
    m = M()
    assert [n for n, _ in m.named_parameters()] == ["w"]
    assert [n for n, _ in m.named_buffers()] == ["b"] and m.b.requires_grad is False
    m.w = Tensor.zeros(2)                      # a name keeps its kind (PyTorch)
    assert [n for n, _ in m.named_parameters()] == ["w"] and m.w.requires_grad is True
    m.w = None                                 # an empty slot stays registered, unlisted
    assert list(m.parameters()) == [] and list(m.state_dict()) == ["b"]
    del m.b
    assert list(m.state_dict()) == []
    m.register_parameter("p", Tensor.ones(1))
    assert m.p.requires_grad is True and list(m.state_dict()) == ["p"]
    for bad in ("", "a.b", "_x", 3, "training"):
        with pytest.raises(KeyError):
            m.register_buffer(bad, Tensor.ones(1))
    with pytest.raises(TypeError, match="must be a Tensor"):
        m.register_buffer("x", np.ones(1))
    with pytest.raises(TypeError, match="not a Module"):
        m.add_module("y", Tensor.ones(1))
    with pytest.raises(KeyError, match="attribute 'p' already exists"):
        m.register_buffer("p", Tensor.ones(1))
    m.register_buffer("b2", Tensor.ones(1))
    m.register_buffer("b2", Tensor.zeros(1), persistent=False)  # a buffer may replace one
    assert "b2" not in m.state_dict()
    p = nn.Parameter(Tensor.ones(3) * 2)
    assert p.requires_grad is True and p._ctx is None


def test_assigning_before_init_is_a_clear_error():
    class Forgot(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(2, 2)
    with pytest.raises(AttributeError, match=r"super\(\).__init__\(\)"):
        Forgot()


def test_sequential_and_module_list():
    a, b, c = nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)
    seq = nn.Sequential(a, b, c)
    assert len(seq) == 3 and list(seq) == [a, b, c] and seq[-1] is c and seq[0] is a
    assert list(seq[1:].state_dict()) == ["2.weight", "2.bias"]  # names kept, as PyTorch
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    ref = np.maximum(x @ a.weight.numpy().T + a.bias.numpy(), 0) @ c.weight.numpy().T
    np.testing.assert_allclose(seq(Tensor(x)).numpy(), ref + c.bias.numpy(), rtol=1e-5,
                               atol=1e-6)
    with pytest.raises(IndexError, match="index 3 is out of range for a Sequential of 3"):
        seq[3]
    with pytest.raises(TypeError, match="item '1' is int"):
        nn.Sequential(a, 1)
    seq.append(nn.Tanh())
    assert len(seq) == 4 and "(3): Tanh()" in repr(seq)

    ml = nn.ModuleList([a])
    ml.append(c)
    ml.extend([b])
    ml.insert(0, nn.Identity())
    assert [type(m).__name__ for m in ml] == ["Identity", "Linear", "Linear", "ReLU"]
    assert list(ml.state_dict()) == ["1.weight", "1.bias", "2.weight", "2.bias"]
    del ml[0]
    ml[2] = nn.Linear(1, 1)
    assert list(ml.state_dict())[:2] == ["0.weight", "0.bias"] and len(ml) == 3
    assert isinstance(ml[1:], nn.ModuleList) and len(ml[1:]) == 2
    with pytest.raises(TypeError, match="ModuleList item 0 is str"):
        nn.ModuleList(["x"])
    with pytest.raises(NotImplementedError, match="ModuleList has no forward"):
        ml(Tensor.ones(1))


@given(ops=st.lists(st.tuples(st.sampled_from(["append", "insert", "del", "set", "slice"]),
                              st.integers(-6, 6)), max_size=12))
@fast(25)
def test_module_list_against_a_shadow_list(ops):
    pool = [nn.Identity() for _ in range(8)]
    ml, shadow = nn.ModuleList(), []
    for i, (op, idx) in enumerate(ops):
        module = pool[i % len(pool)]
        n = len(shadow)
        if op == "append":
            ml.append(module)
            shadow.append(module)
        elif op == "insert":
            ml.insert(idx, module)
            shadow.insert(idx, module)
        elif op == "slice":
            assert list(ml[idx:]) == shadow[idx:]
        elif -n <= idx < n:
            if op == "del":
                del ml[idx]
                del shadow[idx]
            else:
                ml[idx] = module
                shadow[idx] = module
        else:
            with pytest.raises(IndexError, match=f"index {idx} is out of range"):
                ml[idx]
        assert list(ml) == shadow and len(ml) == len(shadow)
        assert [name for name, _ in ml._children()] == [str(k) for k in range(len(shadow))]


def test_repr_is_pytorch_like():
    text = repr(Net())
    assert text.startswith("Net(\n  (features): Sequential(\n    (0): Conv2d(3, 8, kernel_size=")
    assert "(1): BatchNorm2d(8, eps=1e-05, momentum=0.1, affine=True" in text
    assert "(fc): Linear(in_features=8, out_features=4, bias=False)" in text
    assert "(drop): Dropout(p=0.1)" in text and text.endswith("\n)")


def test_load_state_dict_checks_and_copies_in_place():
    src, dst = Net(), Net()
    storage = {k: v.lazydata.base.realized for k, v in dst.state_dict().items()}
    assert dst.load_state_dict(src.state_dict()) == ([], [])
    for name, t in dst.state_dict().items():
        np.testing.assert_array_equal(t.numpy(), src.state_dict()[name].numpy(), err_msg=name)
        assert t.lazydata.base.realized is storage[name], f"{name} lost its storage"
    good = {k: Tensor(v.numpy()) for k, v in src.state_dict().items()}
    with pytest.raises(KeyError, match=r"into Net: missing keys \['emb.weight'\], "
                                       r"unexpected keys \['emb.weights'\]"):
        dst.load_state_dict({**{k: v for k, v in good.items() if k != "emb.weight"},
                             "emb.weights": good["emb.weight"]})
    with pytest.raises(ValueError, match=r"'blocks.0.weight' has shape \(8, 2\) .* \(8, 8\)"):
        dst.load_state_dict({**good, "blocks.0.weight": Tensor.ones(8, 2)})
    with pytest.raises(TypeError, match="'features.1.num_batches_tracked' has dtype float32"):
        dst.load_state_dict({**good,
                             "features.1.num_batches_tracked": Tensor(np.zeros((), np.float32))})
    emb = np.full((10, 8), 3.0, np.float32)
    result = dst.load_state_dict({"emb.weight": emb, "extra": Tensor.ones(1)}, strict=False)
    assert result.unexpected_keys == ["extra"] and len(result.missing_keys) == len(NET_KEYS) - 1
    np.testing.assert_array_equal(dst.emb.weight.numpy(), emb)


def test_state_dict_round_trips_through_safetensors(tmp_path):
    src, dst = Net(), Net()
    src.features[1].running_mean.assign(Tensor(np.arange(8, dtype=np.float32))).realize()
    safe_save(src.state_dict(), tmp_path / "net.safetensors")
    dst.load_state_dict(safe_load(tmp_path / "net.safetensors"))
    for name, t in dst.state_dict().items():
        np.testing.assert_array_equal(t.numpy(), src.state_dict()[name].numpy(), err_msg=name)


# ---- training mode ----
class DropNet(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.drop = nn.Dropout(p)

    def forward(self, x):
        return self.drop(x)


def _check_dropout(out: np.ndarray, x: np.ndarray, p: float) -> float:
    """Every element is 0 or x / (1 - p); return the fraction dropped."""
    kept = out != 0
    np.testing.assert_allclose(out[kept], x[kept] / (1 - p), rtol=1e-6)
    return 1 - kept.mean()


def test_module_dropout_follows_the_module_mode():
    x = np.random.default_rng(0).uniform(1, 2, (64, 64)).astype(np.float32)
    net = DropNet(0.25)
    assert net.training and net.drop.training and not Tensor.training
    dropped = _check_dropout(net(Tensor(x)).numpy(), x, 0.25)  # on by default, as PyTorch
    assert 0.2 < dropped < 0.3
    net.eval()
    assert not net.drop.training
    np.testing.assert_array_equal(net(Tensor(x)).numpy(), x)
    with Tensor.train():  # the module's mode wins for module layers
        np.testing.assert_array_equal(net(Tensor(x)).numpy(), x)
    net.train()
    assert 0.2 < _check_dropout(net(Tensor(x)).numpy(), x, 0.25) < 0.3


def test_standalone_dropout_follows_tensor_training_until_switched():
    x = np.random.default_rng(1).uniform(1, 2, (64, 64)).astype(np.float32)
    drop = nn.Dropout(0.5)  # outside any Module: the tinygrad rule
    assert not drop.training
    np.testing.assert_array_equal(drop(Tensor(x)).numpy(), x)
    np.testing.assert_array_equal(Tensor(x).dropout(0.5).numpy(), x)
    with Tensor.train():
        assert drop.training
        assert 0.4 < _check_dropout(drop(Tensor(x)).numpy(), x, 0.5) < 0.6
        assert 0.4 < _check_dropout(Tensor(x).dropout(0.5).numpy(), x, 0.5) < 0.6
    drop.train()  # switched explicitly: its own mode from now on
    assert 0.4 < _check_dropout(drop(Tensor(x)).numpy(), x, 0.5) < 0.6
    joined = nn.Dropout(0.5)
    nn.Sequential(joined)  # joining a Module: training, as a new PyTorch module
    assert joined.training and not Tensor.training


def np_batchnorm(x, mean, var, w, b, eps=1e-5):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * w.reshape(shape) \
        + b.reshape(shape)


def test_module_batchnorm_train_and_eval_against_numpy():
    rng = np.random.default_rng(2)
    net = nn.Sequential(nn.BatchNorm2d(3, momentum=0.2))
    bn = net[0]
    bn.weight.assign(Tensor(rng.uniform(0.5, 2, 3).astype(np.float32))).realize()
    bn.bias.assign(Tensor(rng.standard_normal(3).astype(np.float32))).realize()
    w, b = bn.weight.numpy(), bn.bias.numpy()
    running_mean, running_var = np.zeros(3), np.ones(3)
    for step in range(3):
        x = (rng.standard_normal((4, 3, 5, 5)) * (step + 1) + step).astype(np.float32)
        out = net(Tensor(x)).numpy()  # training by default: batch statistics
        mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
        np.testing.assert_allclose(out, np_batchnorm(x, mean, var, w, b), rtol=1e-4, atol=1e-4)
        running_mean = 0.8 * running_mean + 0.2 * mean
        running_var = 0.8 * running_var + 0.2 * x.var(axis=(0, 2, 3), ddof=1)
    np.testing.assert_allclose(bn.running_mean.numpy(), running_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(), running_var, rtol=1e-5, atol=1e-6)
    assert bn.num_batches_tracked.item() == 3
    net.eval()
    out = net(Tensor(x)).numpy()
    np.testing.assert_allclose(out, np_batchnorm(x, running_mean, running_var, w, b),
                               rtol=1e-4, atol=1e-4)
    assert bn.num_batches_tracked.item() == 3  # eval leaves the statistics alone


def test_batchnorm_module_under_jit_matches_eager():
    rng = np.random.default_rng(3)
    data = [rng.standard_normal((8, 2, 3, 3)).astype(np.float32) * (i + 1) for i in range(5)]

    def run(use_jit):
        net = nn.Sequential(nn.BatchNorm2d(2))
        step = lazyten.jit(lambda x: net(x).sum().realize()) if use_jit else \
            (lambda x: net(x).sum().realize())
        outs = [step(Tensor(x)).item() for x in data]
        return outs, net[0].running_mean.numpy(), net[0].running_var.numpy()
    plain, jitted = run(False), run(True)
    np.testing.assert_allclose(jitted[0], plain[0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(jitted[1], plain[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(jitted[2], plain[2], rtol=1e-5, atol=1e-6)


# ---- other methods ----
def test_zero_grad_requires_grad_and_apply():
    net = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 1))
    net(Tensor.ones(4, 3)).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad(set_to_none=False)
    assert all((p.grad.numpy() == 0).all() and p.grad.shape == p.shape
               for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())
    seen = []
    assert net.apply(lambda m: seen.append(type(m).__name__)) is net
    assert seen == ["Linear", "Linear", "Sequential"]
    with pytest.raises(ValueError, match="must be a bool"):
        net.train("no")


_rng = np.random.default_rng(5)
SMALL_INIT = {"0.weight": _rng.uniform(-0.5, 0.5, (4, 8)).astype(np.float32),
              "0.bias": _rng.uniform(-0.5, 0.5, 4).astype(np.float32),
              "2.weight": _rng.uniform(-0.5, 0.5, (1, 4)).astype(np.float32),
              "2.bias": _rng.uniform(-0.5, 0.5, 1).astype(np.float32)}


# ---- a PyTorch-style training loop ----
class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(8, 4)
        self.act = nn.Tanh()
        self.out = nn.Linear(4, 1)

    def forward(self, x):
        return self.out(self.act(self.hidden(x)))


def numpy_sgd_losses(x, y, p, lr, steps):
    """The same network and loop in float64 numpy, backpropagated by hand."""
    w1, b1, w2, b2 = (p[k].astype(np.float64) for k in ("0.weight", "0.bias", "2.weight",
                                                         "2.bias"))
    losses = []
    for _ in range(steps):
        h = np.tanh(x @ w1.T + b1)
        pred = h @ w2.T + b2
        losses.append(float(np.mean((pred - y) ** 2)))
        g_pred = 2 * (pred - y) / pred.size
        g_w2, g_b2 = g_pred.T @ h, g_pred.sum(0)
        g_pre = (g_pred @ w2) * (1 - h ** 2)
        g_w1, g_b1 = g_pre.T @ x, g_pre.sum(0)
        w1, b1, w2, b2 = w1 - lr * g_w1, b1 - lr * g_b1, w2 - lr * g_w2, b2 - lr * g_b2
    return losses


def test_pytorch_style_training_loop_matches_numpy():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((32, 8)).astype(np.float32)
    y = np.sin(x[:, :1]) + 0.5 * x[:, 1:2]
    model = MLP()
    names = {"hidden.weight": "0.weight", "hidden.bias": "0.bias", "out.weight": "2.weight",
             "out.bias": "2.bias"}
    model.load_state_dict({k: Tensor(SMALL_INIT[v]) for k, v in names.items()})
    opt = SGD(model.parameters(), lr=0.1)
    criterion = nn.MSELoss()
    losses = []
    for _ in range(60):
        opt.zero_grad()
        loss = criterion(model(Tensor(x)), Tensor(y.astype(np.float32)))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    expected = numpy_sgd_losses(x.astype(np.float64), y, SMALL_INIT, 0.1, 60)
    np.testing.assert_allclose(losses, expected, rtol=1e-4, atol=1e-6)
    assert losses[-1] < 0.3 * losses[0], losses  # it fits the data


def test_double_float_half_and_to_a_dtype_cast_floating_state_in_place():
    """model.double() / float() / half() / to(dtype) as PyTorch's: every floating-point
    parameter, buffer and gradient cast, integer buffers (BatchNorm's count) kept, each
    Tensor object the same (an optimiser's list stays valid); a non-float dtype raises."""
    from codegen.dtypes import dtypes
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    x = Tensor(np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32))
    net(x).sum().backward()
    params = list(net.parameters())
    before = {k: v.numpy() for k, v in net.state_dict().items()}
    assert net.double() is net
    assert [id(p) for p in net.parameters()] == [id(p) for p in params]
    for k, v in net.state_dict().items():
        want = np.float64 if before[k].dtype == np.float32 else before[k].dtype
        assert v.numpy().dtype == want, k
        np.testing.assert_array_equal(v.numpy(), before[k].astype(want))
    assert all(p.grad is None or p.grad.dtype == dtypes.float64 for p in params)
    net.to(dtypes.float16)
    assert net.state_dict()["1.num_batches_tracked"].dtype == dtypes.int64
    assert all(p.dtype == dtypes.float16 for p in params)
    net.float()
    out = net(x)
    assert out.dtype == dtypes.float32 and np.isfinite(out.numpy()).all()
    with pytest.raises(TypeError, match="floating-point"):
        net.to(dtypes.int32)
