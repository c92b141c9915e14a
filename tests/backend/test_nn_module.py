"""nn.Module.to(device) on every device: parameters, buffers and gradients move in place
(the Tensor objects stay, so an optimiser's references stay valid), values are kept, and
a model trained on the device matches the same model trained on the CPU."""
import numpy as np
import pytest

from lazyten import Tensor, nn
from lazyten.optim import SGD

_rng = np.random.default_rng(5)
INIT = {"0.weight": _rng.uniform(-0.5, 0.5, (4, 8)).astype(np.float32),
        "0.bias": _rng.uniform(-0.5, 0.5, 4).astype(np.float32),
        "1.weight": np.ones(4, np.float32), "1.bias": np.zeros(4, np.float32),
        "1.running_mean": np.zeros(4, np.float32), "1.running_var": np.ones(4, np.float32),
        "1.num_batches_tracked": np.zeros((), np.int64),
        "3.weight": _rng.uniform(-0.5, 0.5, (1, 4)).astype(np.float32),
        "3.bias": _rng.uniform(-0.5, 0.5, 1).astype(np.float32)}


def small_model() -> nn.Sequential:
    model = nn.Sequential(nn.Linear(8, 4), nn.BatchNorm1d(4), nn.Tanh(), nn.Linear(4, 1))
    model.load_state_dict(INIT)
    return model


def test_to_moves_parameters_buffers_and_grads_in_place(device):
    model = small_model()
    held = list(model.parameters()) + list(model.buffers())
    model[0].weight.grad = Tensor.ones(4, 8)
    assert model.to(device) is model
    assert [id(t) for t in list(model.parameters()) + list(model.buffers())] == \
        [id(t) for t in held]
    for name, t in model.state_dict().items():
        assert t.device == device, name
        assert t.lazydata._base is None and t.lazydata.realized is not None, name
        np.testing.assert_array_equal(t.numpy(), INIT[name], err_msg=name)
    assert model[0].weight.grad.device == device
    np.testing.assert_array_equal(model[0].weight.grad.numpy(), np.ones((4, 8)))


def test_training_after_to_matches_the_cpu(device):
    x = np.random.default_rng(4).standard_normal((6, 8)).astype(np.float32)
    results = {}
    for where in ("CPU", device):
        model = small_model().to(where)
        opt = SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            loss = model(Tensor(x, device=where)).square().mean()
            loss.backward()
            opt.step()
        results[where] = (loss.item(), model[1].running_mean.numpy(), model[3].weight.numpy())
    cpu, dev = results["CPU"], results[device]
    assert dev[0] == pytest.approx(cpu[0], rel=1e-4)
    np.testing.assert_allclose(dev[1], cpu[1], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(dev[2], cpu[2], rtol=1e-4, atol=1e-6)
