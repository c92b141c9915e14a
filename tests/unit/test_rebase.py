"""Loads rebased to a window of their buffer (lazyten/rebase.py, D120): kernels that differ
only in where they read a buffer are one kernel, and every path that launches one (a
fresh schedule, a cached plan, a JIT replay) passes the window, against numpy."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from codegen.dtypes import dtypes
from lazyten import Tensor, jit
from lazyten.schedule import create_schedule
from runtimes import get_runtime

REBASES = getattr(get_runtime("CPU").allocator, "offset", None) is not None


def kernels(t: Tensor) -> list:
    return [item for item in create_schedule([t.lazydata]) if item.ast is not None]


def test_the_steps_of_a_sequence_are_one_kernel():
    """y[t] of a value computed in the same schedule, for each t: the per-step kernels
    read y at offsets t * 512 elements, and are one AST once rebased (16 before)."""
    xn = np.random.default_rng(0).standard_normal((16, 8, 64)).astype(np.float32)
    y = Tensor(xn) * 2 + 1
    z = Tensor.stack([(y[t] * 3).sum(-1) for t in range(16)], 0)
    steps = [item for item in kernels(z) if item.ast.arg.st.shape[0] == 8]
    assert len(steps) == 16
    if REBASES:
        assert len({item.ast for item in steps}) == 1
        assert sorted((item.shifts or (0,))[0] for item in steps) == [t * 512 * 4 for t in range(16)]
    np.testing.assert_allclose(z.numpy(), ((xn * 2 + 1) * 3).sum(-1), rtol=1e-5, atol=1e-5)


def test_a_range_read_by_value_keeps_its_offsets():
    """An arange's buffer is read by value as an index (D69): never a window."""
    r = Tensor.arange(200)
    items = kernels((r[100:150] * 2).cast(dtypes.float32))
    assert all(not any(item.shifts) for item in items)
    np.testing.assert_array_equal(((r[100:150] * 2).numpy()), np.arange(100, 150) * 2)


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 40), cols=st.integers(1, 70), data=st.data(),
       dtype=st.sampled_from([np.float32, np.float64, np.int8, np.int32]),
       computed=st.booleans(), pad=st.integers(0, 3))
def test_windows_at_any_offset_read_what_the_slices_hold(rows, cols, data, dtype, computed, pad):
    """Slices of a realized or computed buffer at random offsets (padded or not), added,
    match numpy; every shift is a whole number of 64 bytes."""
    rng = np.random.default_rng(rows * 131 + cols)
    xn = (rng.standard_normal((rows, cols)) * 20).astype(dtype)
    x = Tensor(xn)
    base = x + x if computed else x
    basen = xn + xn if computed else xn
    r0 = data.draw(st.integers(0, rows - 1))
    r1 = data.draw(st.integers(r0 + 1, rows))
    c0 = data.draw(st.integers(0, cols - 1))
    c1 = data.draw(st.integers(c0 + 1, cols))
    a, an = base[r0:r1, c0:c1], basen[r0:r1, c0:c1]
    b, bn = base[rows - (r1 - r0):, cols - (c1 - c0):], basen[rows - (r1 - r0):, cols - (c1 - c0):]
    out = (a + b).pad(((pad, 0), (0, pad)))
    want = np.pad(an + bn, ((pad, 0), (0, pad)))
    for item in kernels(out):
        assert all(s % 64 == 0 and s >= 0 for s in item.shifts)
    np.testing.assert_array_equal(out.numpy(), want)


def test_a_cached_plan_passes_the_windows():
    """The third call of the same eager code runs its schedule's plan: new data, the
    windows of the new buffers."""
    rng = np.random.default_rng(1)
    for _ in range(4):
        xn = rng.standard_normal((8, 64)).astype(np.float32)
        x = Tensor(xn)
        out = (x * 2)[5] + (x * 2)[2] * 3
        np.testing.assert_allclose(out.numpy(), xn[5] * 2 + xn[2] * 6, rtol=1e-5, atol=1e-6)


def test_a_jit_replay_passes_windows_of_its_new_inputs():
    """A captured kernel that reads its input through windows reads the next call's
    input, not the captured one."""
    @jit
    def f(x):
        return (x[5] + x[2] * 3).realize()
    rng = np.random.default_rng(2)
    for _ in range(5):
        xn = rng.standard_normal((8, 64)).astype(np.float32)
        np.testing.assert_allclose(f(Tensor(xn)).numpy(), xn[5] + xn[2] * 3, rtol=1e-5, atol=1e-6)


def test_the_steps_of_a_sequence_share_one_kernel_object():
    """The schedule (and the cache's template of it) keeps one AST object for the steps'
    equal kernels, and a second schedule of the same graph (the cache's) reads them at the
    same shifts: not each step's own copy (16 copies before, each its own tree)."""
    xn = np.random.default_rng(0).standard_normal((16, 8, 64)).astype(np.float32)
    first = None
    for _ in range(2):
        y = Tensor(xn) * 2 + 1
        z = Tensor.stack([(y[t] * 3).sum(-1) for t in range(16)], 0)
        steps = [item for item in kernels(z) if item.ast.arg.st.shape[0] == 8]
        if REBASES:
            assert len({id(item.ast) for item in steps}) == 1
        shifts = [item.shifts for item in steps]
        assert first is None or shifts == first
        first = shifts
    np.testing.assert_allclose(z.numpy(), ((xn * 2 + 1) * 3).sum(-1), rtol=1e-5, atol=1e-5)
