"""Plans with in-place updates (lazyten/plan.py `Plan._run_assigning`, D155): a cached
schedule with an ASSIGN runs from its plan, holding what the general path holds, so that
copy on write decides as it does there. A generator of update programs (a target updated
from itself, another tensor, a temporary only the graph holds, a second tensor of the
same buffer; readers of the old value kept or dropped) runs each program four times
with fresh data: the first two take the general path, the last two the plan; values
against numpy, and the copies made equal to the general path's."""
import numpy as np
from hypothesis import given, strategies as st

from lazyten import Tensor
from lazyten.realize import Stats
from lazyten import schedule_cache
from helpers import fast


def _run(case, rng):
    """One round of the program; (results, numpy's results)."""
    source, alias, keep_reader, second = case
    a0, b0, t0 = (rng.standard_normal(5).astype(np.float32) for _ in range(3))
    a, b = Tensor(a0.copy()).realize(), Tensor(b0.copy()).realize()
    target = {"same": a, "alias": Tensor(a), "detach": a.detach()}[alias]
    reader = a * 2 if keep_reader else None
    # (the value is held by the graph alone, as in `x.assign(Tensor(data))`)
    target.assign({"self": lambda: target * 0.5 + 1, "other": lambda: target + b,
                   "temporary": lambda: Tensor(t0.copy()) - target,
                   "realized temporary": lambda: Tensor(t0.copy()).realize()}[source]())
    outs = [target, a]
    if second:  # another update in the same realize, reading the first's new value
        b.assign(target * b)
        outs.append(b)
    if reader is not None:
        outs.append(reader)
    Tensor.realize(*outs)
    new = {"self": a0 * 0.5 + 1, "other": a0 + b0, "temporary": t0 - a0,
           "realized temporary": t0}[source]
    expected = [new, new if alias == "same" else a0]
    if second:
        expected.append(new * b0)
    if reader is not None:
        expected.append(a0 * 2)
    return [t.numpy() for t in outs], expected


@given(case=st.tuples(st.sampled_from(["self", "other", "temporary", "realized temporary"]),
                      st.sampled_from(["same", "alias", "detach"]), st.booleans(), st.booleans()),
       seed=st.integers(0, 2**16))
@fast(30)
def test_update_programs_run_from_plans_as_the_general_path_does(case, seed):
    rng = np.random.default_rng(seed)
    schedule_cache._SCHEDULES.clear()  # (rounds 1 and 2 on the general path, whatever ran before)
    copies, plans = [], []
    for _ in range(4):
        c, p = Stats.copies_on_write, Stats.plans
        got, expected = _run(case, rng)
        copies.append(Stats.copies_on_write - c)
        plans.append(Stats.plans - p)
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-6)
    assert plans[2] >= 1 and plans[3] >= 1, plans  # the last two rounds ran from a plan
    assert copies[2] == copies[3] == copies[1], copies  # and copied as the general path


def test_an_eager_update_loop_runs_from_a_plan():
    """`w.assign(w - lr * g)` in a loop: from the third call on one plan, no schedule made
    and no copy (nothing else reads the old w)."""
    w = Tensor(np.ones(8, np.float32)).realize()
    g = Tensor(np.full(8, 2.0, np.float32)).realize()
    for step in range(5):
        p, c = Stats.plans, Stats.copies_on_write
        w.assign(w - 0.25 * g).realize()
        if step >= 2:
            assert Stats.plans == p + 1 and Stats.copies_on_write == c
    np.testing.assert_array_equal(w.numpy(), np.full(8, 1 - 5 * 0.5, np.float32))


def test_batchnorm_running_statistics_from_a_plan_match_numpy():
    """BatchNorm's running statistics are updated in place from values its traced forward
    computed (saved on the forward's node, D80): the plan saves them as the general path
    does, and the statistics follow numpy's over the steps."""
    from lazyten import nn
    rng = np.random.default_rng(5)
    bn = nn.BatchNorm1d(3).train()
    mean, var = np.zeros(3), np.ones(3)
    for _ in range(5):
        x = rng.standard_normal((6, 3)).astype(np.float32) * 2 + 1
        p = Stats.plans
        out = bn(Tensor(x, requires_grad=True))
        out.sum().backward()
        out.realize()
        bn.running_mean.realize()
        mean = 0.9 * mean + 0.1 * x.mean(0)
        var = 0.9 * var + 0.1 * x.var(0, ddof=1)
        np.testing.assert_allclose(out.numpy(), (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5),
                                   rtol=1e-4, atol=1e-5)
    assert Stats.plans > p  # (the last step ran from plans)
    np.testing.assert_allclose(bn.running_mean.numpy(), mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(), var, rtol=1e-5, atol=1e-6)
