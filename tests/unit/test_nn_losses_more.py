"""The losses added for PyTorch models (nn/functional_losses.py, nn/loss_layers.py) against
float64 numpy references from PyTorch's documented formulas, every reduction, gradients
against finite differences, and the loss modules' settings and buffers."""
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

import lazyten.nn.functional as F
from gradcheck import check_grad
from lazyten import Tensor, nn


def reduce_ref(loss, reduction):
    return {"mean": loss.mean(), "sum": loss.sum(), "none": loss}[reduction]


def logsig(x):
    return -np.logaddexp(0, -x)


def inputs(seed, shape=(4, 5)):
    rng = np.random.default_rng(seed)
    x, t = rng.standard_normal(shape), rng.standard_normal(shape)
    sign = np.where(rng.standard_normal(shape) > 0, 1.0, -1.0)
    prob = np.abs(rng.standard_normal(shape))
    prob[0, 0] = 0.0  # a zero target probability: kl_div's 0 * log 0 = 0
    return x, t, sign, prob


def cos_ref(a, b):
    dot = (a * b).sum(1)
    return dot / np.sqrt(((a * a).sum(1) + 1e-12) * ((b * b).sum(1) + 1e-12))


def dist_ref(a, b):
    return np.sqrt(((a - b + 1e-6) ** 2).sum(-1))


def stirling(t):
    safe = np.where(t > 1, t, 1)
    return np.where(t > 1, safe * np.log(safe) - safe + 0.5 * np.log(2 * math.pi * safe), 0)


# name: (call with lazyten's F, numpy per-element loss), both from (x, t, sign, prob)
CASES = {
    "smooth_l1": (lambda f, x, t, s, p, r: f.smooth_l1_loss(x, t, reduction=r, beta=0.5),
                  lambda x, t, s, p: np.where(np.abs(x - t) < 0.5, (x - t) ** 2,
                                              np.abs(x - t) - 0.25)),
    "huber": (lambda f, x, t, s, p, r: f.huber_loss(x, t, reduction=r, delta=0.7),
              lambda x, t, s, p: np.where(np.abs(x - t) < 0.7, 0.5 * (x - t) ** 2,
                                          0.7 * (np.abs(x - t) - 0.35))),
    "kl_div": (lambda f, x, t, s, p, r: f.kl_div(x, p, reduction=r),
               lambda x, t, s, p: np.where(p > 0, p * np.log(np.where(p > 0, p, 1)), 0) - p * x),
    "kl_div_log": (lambda f, x, t, s, p, r: f.kl_div(x, t, reduction=r, log_target=True),
                   lambda x, t, s, p: np.exp(t) * (t - x)),
    "soft_margin": (lambda f, x, t, s, p, r: f.soft_margin_loss(x, s, reduction=r),
                    lambda x, t, s, p: np.log1p(np.exp(-s * x))),
    "margin_ranking": (lambda f, x, t, s, p, r: f.margin_ranking_loss(x, t, s, 0.3, reduction=r),
                       lambda x, t, s, p: np.maximum(0, -s * (x - t) + 0.3)),
    "hinge": (lambda f, x, t, s, p, r: f.hinge_embedding_loss(x, s, 0.5, reduction=r),
              lambda x, t, s, p: np.where(s == 1, x, np.maximum(0, 0.5 - x))),
    "poisson": (lambda f, x, t, s, p, r: f.poisson_nll_loss(x, 3 * p, full=True, reduction=r),
                lambda x, t, s, p: np.exp(x) - 3 * p * x + stirling(3 * p)),
    "poisson_rate": (lambda f, x, t, s, p, r: f.poisson_nll_loss(p + 0.1, t.abs(),
                                                                log_input=False, reduction=r),
                     lambda x, t, s, p: p + 0.1 - np.abs(t) * np.log(p + 0.1 + 1e-8)),
    "gaussian": (lambda f, x, t, s, p, r: f.gaussian_nll_loss(x, t, p + 0.1, full=True,
                                                              reduction=r),
                 lambda x, t, s, p: 0.5 * (np.log(p + 0.1) + (x - t) ** 2 / (p + 0.1)
                                           + np.log(2 * math.pi))),
    "cosine_embedding": (lambda f, x, t, s, p, r: f.cosine_embedding_loss(x, t, s[:, 0], 0.2,
                                                                          reduction=r),
                         lambda x, t, s, p: np.where(s[:, 0] == 1, 1 - cos_ref(x, t),
                                                     np.maximum(0, cos_ref(x, t) - 0.2))),
    "triplet": (lambda f, x, t, s, p, r: f.triplet_margin_loss(x, t, p, swap=True, reduction=r),
                lambda x, t, s, p: np.maximum(dist_ref(x, t) - np.minimum(
                    dist_ref(x, p), dist_ref(t, p)) + 1, 0)),
    "multilabel_soft_margin": (
        lambda f, x, t, s, p, r: f.multilabel_soft_margin_loss(x, (s + 1) / 2, reduction=r),
        lambda x, t, s, p: -((s + 1) / 2 * logsig(x) + (1 - s) / 2 * logsig(-x)).mean(-1)),
}


@pytest.mark.parametrize("name", sorted(CASES))
@given(reduction=st.sampled_from(["mean", "sum", "none"]), seed=st.integers(0, 1000))
def test_loss_values(name, reduction, seed):
    call, ref = CASES[name]
    arrays = inputs(seed)
    out = call(F, *[Tensor(a) for a in arrays], reduction)
    np.testing.assert_allclose(out.numpy(), reduce_ref(ref(*arrays), reduction), rtol=1e-9,
                               atol=1e-12, err_msg=f"{name}, reduction={reduction}")


# which of (input, target, prob) each loss differentiates
WRT = {"smooth_l1": [0, 1], "huber": [0, 1], "kl_div": [0, 2], "kl_div_log": [0, 1],
       "soft_margin": [0], "margin_ranking": [0, 1], "hinge": [0], "poisson": [0],
       "poisson_rate": [1, 2], "gaussian": [0, 1, 2], "cosine_embedding": [0, 1],
       "triplet": [0, 1, 2], "multilabel_soft_margin": [0]}


@pytest.mark.parametrize("name", sorted(CASES))
def test_loss_gradients(name):
    call, _ = CASES[name]
    x, t, s, p = inputs(11)
    check_grad(lambda a, b, c: call(F, a, b, Tensor(s), c, "sum"), x, t, p + 0.05,
               wrt=WRT[name])


def test_kl_div_batchmean_and_legacy_flags():
    x, _, _, p = inputs(3)
    per = np.where(p > 0, p * np.log(np.where(p > 0, p, 1)), 0) - p * x
    np.testing.assert_allclose(F.kl_div(Tensor(x), Tensor(p), reduction="batchmean").numpy(),
                               per.sum() / 4, rtol=1e-12)
    np.testing.assert_allclose(F.smooth_l1_loss(Tensor(x), Tensor(p), size_average=False).numpy(),
                               F.smooth_l1_loss(Tensor(x), Tensor(p), reduction="sum").numpy())


def test_gaussian_nll_var_shapes_and_clamp():
    rng = np.random.default_rng(4)
    x, t = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    v = np.abs(rng.standard_normal(3)) + 0.1  # one variance per row (last dim dropped)
    ref = 0.5 * (np.log(v[:, None]) + (x - t) ** 2 / v[:, None])
    np.testing.assert_allclose(F.gaussian_nll_loss(Tensor(x), Tensor(t), Tensor(v),
                                                   reduction="none").numpy(), ref, rtol=1e-12)
    tiny = np.full((3, 4), 1e-9)  # clamped to eps in the value, the gradient passes through
    vt = Tensor(tiny, requires_grad=True)
    out = F.gaussian_nll_loss(Tensor(x), Tensor(t), vt, eps=1e-6, reduction="sum")
    np.testing.assert_allclose(out.numpy(), (0.5 * (np.log(1e-6) + (x - t) ** 2 / 1e-6)).sum(),
                               rtol=1e-12)
    out.backward()
    np.testing.assert_allclose(vt.grad.numpy(), 0.5 * (1 / 1e-6 - (x - t) ** 2 / 1e-12),
                               rtol=1e-9)
    with pytest.raises(ValueError, match="var"):
        F.gaussian_nll_loss(Tensor(x), Tensor(t), Tensor(v[:2]))


def test_loss_modules_match_functionals_and_keep_weights_as_buffers():
    x, t, s, p = inputs(5)
    X, T, S, P = map(Tensor, (x, t, s, p))
    probs = 1 / (1 + np.exp(-x))
    pairs = [
        (nn.L1Loss(reduction="sum"), (X, T), np.abs(x - t).sum()),
        (nn.SmoothL1Loss(beta=0.5), (X, T), F.smooth_l1_loss(X, T, beta=0.5).numpy()),
        (nn.HuberLoss(delta=0.7), (X, T), F.huber_loss(X, T, delta=0.7).numpy()),
        (nn.KLDivLoss(reduction="batchmean"), (X, P), F.kl_div(X, P, reduction="batchmean")
         .numpy()),
        (nn.BCELoss(), (Tensor(probs), Tensor((s + 1) / 2)),
         -np.mean((s + 1) / 2 * np.log(probs) + (1 - s) / 2 * np.log(1 - probs))),
        (nn.BCEWithLogitsLoss(), (X, Tensor((s + 1) / 2)),
         -np.mean((s + 1) / 2 * logsig(x) + (1 - s) / 2 * logsig(-x))),
        (nn.SoftMarginLoss(), (X, S), np.log1p(np.exp(-s * x)).mean()),
        (nn.MarginRankingLoss(0.3), (X, T, S), np.maximum(0, -s * (x - t) + 0.3).mean()),
        (nn.HingeEmbeddingLoss(), (X, S), np.where(s == 1, x, np.maximum(0, 1 - x)).mean()),
        (nn.TripletMarginLoss(), (X, T, P), np.maximum(dist_ref(x, t) - dist_ref(x, p) + 1,
                                                       0).mean()),
    ]
    for module, args, ref in pairs:
        np.testing.assert_allclose(module(*args).numpy(), ref, rtol=1e-9,
                                   err_msg=type(module).__name__)
    logp = x - np.log(np.exp(x).sum(1, keepdims=True))
    target = np.array([0, 3, 4, 1])
    w = np.array([1.0, 2.0, 0.5, 1.0, 3.0])
    nll = nn.NLLLoss(Tensor(w))
    ref = -(w[target] * logp[range(4), target]).sum() / w[target].sum()
    np.testing.assert_allclose(nll(Tensor(logp), Tensor(target)).numpy(), ref, rtol=1e-12)
    # PyTorch registers weight and pos_weight as buffers: they are in the state dict
    assert list(nll.state_dict()) == ["weight"]
    assert list(nn.BCEWithLogitsLoss(Tensor(w), pos_weight=Tensor(w)).state_dict()) == \
        ["weight", "pos_weight"]
    assert list(nn.BCELoss().state_dict()) == []
    with pytest.raises(ValueError, match="reduction"):
        nn.L1Loss(reduction="batchmean")
    assert nn.L1Loss(size_average=False).reduction == "sum"
