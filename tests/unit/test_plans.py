"""Plans (lazyten/realize.py, D78): a graph whose structure was scheduled and run before
is launched from its cached schedule's plan, with no ScheduleItems and no program
lookups. It must compute what the engine's general path computes, raise the same index
errors, and step aside wherever that path decides something per run (an ASSIGN's copy
on write, recording for @jit, DEBUG=2's timing, changed settings)."""
import numpy as np
import pytest

import lazyten
from lazyten import Tensor
from lazyten.realize import Stats
from lazyten.jit import jit


def runs(fn, times: int):
    """fn() realized `times` times; (results as numpy, plans launched)."""
    before = Stats.plans
    out = [fn(i).numpy() for i in range(times)]
    return out, Stats.plans - before


def test_a_graph_seen_twice_runs_its_plan_from_the_third_time():
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((7, 13)).astype(np.float32) for _ in range(4)]
    w = rng.standard_normal((13, 5)).astype(np.float32)
    W = Tensor(w)
    got, plans = runs(lambda i: ((Tensor(xs[i]) @ W).relu() * 2 + 1).sum(axis=0), 4)
    assert plans == 2, "calls 3 and 4 run the plan"
    for x, out in zip(xs, got):
        np.testing.assert_allclose(out, ((np.maximum(x @ w, 0) * 2 + 1)).sum(0), rtol=1e-5, atol=1e-5)


def test_a_plan_reads_index_checks():
    """gather's index check is a kernel of the plan: an index out of range on the plan's
    run raises, and keeps raising on the next read."""
    x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    good = [np.array([[0, 3], [1, 2], [3, 0]]), np.array([[1, 1], [2, 3], [0, 0]])] * 2
    got, plans = runs(lambda i: x.gather(1, Tensor(good[i])) * 2, 4)
    assert plans == 2
    for idx, out in zip(good, got):
        np.testing.assert_array_equal(out, np.take_along_axis(np.arange(12.).reshape(3, 4), idx, 1) * 2)
    bad = x.gather(1, Tensor(np.array([[0, 4], [1, 2], [3, 0]]))) * 2
    before = Stats.plans
    with pytest.raises(IndexError, match="index 4 is out of range"):
        bad.realize()
    assert Stats.plans == before + 1, "the bad index was found by the plan"
    with pytest.raises(IndexError):
        bad.numpy()


def test_a_plan_makes_the_schedules_own_buffers():
    """x @ W.T packs W.T into panels first: a buffer the schedule makes for itself."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((256, 784)).astype(np.float32)
    xs = [rng.standard_normal((64, 784)).astype(np.float32) for _ in range(3)]
    W = Tensor(w)
    got, plans = runs(lambda i: Tensor(xs[i]) @ W.T, 3)
    assert plans == 1
    for x, out in zip(xs, got):
        np.testing.assert_allclose(out, x @ w.T, rtol=1e-4, atol=1e-3)


def test_assign_keeps_copy_on_write():
    """An ASSIGN's schedule has no plan: whether the old value is copied depends on what
    is alive at that run."""
    x = Tensor(np.zeros(5, np.float32))
    readers = []
    for _ in range(4):
        readers.append(x * 1)  # lazy: reads x's value before this update
        x.assign(x + 1).realize()
    np.testing.assert_array_equal(x.numpy(), np.full(5, 4.0))
    for i, r in enumerate(readers):
        np.testing.assert_array_equal(r.numpy(), np.full(5, float(i)))


def test_plans_step_aside_for_settings_debug_and_recording(capsys):
    a = Tensor(np.ones(6, np.float32))
    for _ in range(3):
        (a * 3 - 1).realize()
    before = Stats.plans
    with lazyten.Context(NOOPT=1):  # other settings: other programs
        np.testing.assert_array_equal((a * 3 - 1).numpy(), np.full(6, 2.0))
    with lazyten.Context(DEBUG=2):  # every launch timed and printed
        (a * 3 - 1).realize()
    assert "E_6" in capsys.readouterr().err
    f = jit(lambda t: (t * 3 - 1).realize())
    outs = [f(Tensor(np.full(6, float(i), np.float32))).numpy() for i in range(4)]
    assert Stats.plans == before, "no plan ran under other settings, DEBUG=2 or a capture"
    for i, out in enumerate(outs):
        np.testing.assert_array_equal(out, np.full(6, 3.0 * i - 1))
    (a * 3 - 1).realize()
    assert Stats.plans == before + 1


def test_a_plan_keeps_its_programs_alive():
    """A plan outlives the program cache's entries (LRU eviction, a cleared cache): its
    launches must keep their programs, whose engines hold the code they call. A launch
    that held only the ctypes function called freed code once its engine went (a
    segfault in the test suite, after another test had emptied the cache)."""
    import gc
    import weakref
    from lazyten import programs as engine
    from lazyten.schedule_cache import lookup
    xs = [np.arange(31 * 3, dtype=np.float32).reshape(31, 3) * (i - 2) for i in range(5)]
    make = lambda i: (Tensor(xs[i]) * 3.5 - 1).sum(1)  # noqa: E731
    got, plans = runs(make, 3)
    assert plans == 1
    template = lookup([make(0).lazydata])[2]
    assert template is not None and template.plan
    alive = [weakref.ref(engine.get_program(ast, "CPU")[1]) for ast, *_ in template.items]
    engine._PROGRAMS.clear()
    gc.collect()
    assert all(ref() is not None for ref in alive), "the plan's programs were freed"
    got, plans = runs(lambda i: make(i + 3), 2)
    assert plans == 2
    for x, out in zip(xs[3:], got):
        np.testing.assert_allclose(out, (x * 3.5 - 1).sum(1), rtol=1e-6)
