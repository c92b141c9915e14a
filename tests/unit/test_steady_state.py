"""Eager code run again in the same way costs no scheduling: a training step repeated on
batches of the same shapes finds every schedule in the schedule cache: nothing is
scheduled or compiled anew. (That a reused schedule computes what a fresh one does is
test_schedule_cache.py's; tools/model_fuzz.py compares these models with PyTorch.)

The models are tools/model_fuzz.py's random models (vectors with BatchNorm1d and
LayerNorm, convolutions with BatchNorm2d / GroupNorm / pooling, Conv1d, embeddings with
attention, transformer encoder layers; SGD variants and Adam variants), trained by
lazyten alone.
"""
import numpy as np
import pytest

import lazyten
from lazyten import Tensor
from lazyten.lazy import pending_assigns
from lazyten.realize import Stats
from lazyten.schedule_cache import CacheStats
from tools import model_fuzz


def test_assigns_are_pending_in_the_order_they_were_made():
    """The order of a realize's outputs is part of the schedule cache's key: pending
    in-place updates must come in a fixed order (a WeakSet's follows addresses)."""
    targets = [Tensor(np.zeros(3, np.float32)).realize() for _ in range(40)]
    updates = [t.assign(t + i).lazydata for i, t in enumerate(reversed(targets))]
    assert pending_assigns() == updates
    lazyten.Tensor.realize(*[Tensor(u) for u in updates])
    assert pending_assigns() == []


# 27: two BatchNorm1d layers (six running-stat updates pending at once), which missed
# the cache on most steps while pending assigns came out of a WeakSet
@pytest.mark.parametrize("seed", [27, 0, 2, 3, 5, 9, 11, 14])
def test_a_repeated_training_step_schedules_nothing_new(seed):
    s = model_fuzz.spec(np.random.default_rng(seed))
    s["batch"] = max(s["batch"], 3)  # BatchNorm needs more than one value per channel
    rng = np.random.default_rng(seed)
    batches = [model_fuzz.data(s, rng) for _ in range(2)] * 3
    model = model_fuzz.build(lazyten.nn, lazyten.nn.functional, s)
    model.train()
    opt = model_fuzz.optimizer(lazyten.optim, list(model.parameters()), s["opt"])
    step = model_fuzz.train_step(lazyten.nn.functional, model, opt, s)
    losses, new = [], []
    for x, y in batches:
        misses, lowered = CacheStats.misses, Stats.lowered
        losses.append(step(Tensor(x), Tensor(y)).item())
        new.append((CacheStats.misses - misses, Stats.lowered - lowered))
    assert all(n == (0, 0) for n in new[2:]), f"{s['kind']} model {seed}: (schedules, " \
        f"compiles) made per step {new}"
    assert np.all(np.isfinite(losses))
