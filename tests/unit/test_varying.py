"""Python numbers that change from call to call (D104, D105): after two values, a constant
of a graph, or the offset of a slice of a realized tensor (`x[i]`), becomes a kernel
input, so eager code with a decayed learning rate, a moving threshold or a loop over
`x[i]` schedules and compiles once, not on every call; results equal numpy's, bit for
bit; numbers that never change stay literals.
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codegen.dtypes import dtypes
from codegen.ops import LoadOps
from lazyten import Tensor
from lazyten.programs import Stats
from lazyten.schedule_cache import CacheStats

OPS = {
    "add": (lambda t, s: t + s, lambda a, s: a + s),
    "rsub": (lambda t, s: s - t, lambda a, s: s - a),
    "mul": (lambda t, s: t * s, lambda a, s: a * s),
    "div": (lambda t, s: t / s, lambda a, s: a / s),
    "greater": (lambda t, s: t > s, lambda a, s: a > s),
    "maximum": (lambda t, s: t.maximum(s), lambda a, s: np.maximum(a, s)),
    "where": (lambda t, s: (t > 0).where(t, s), lambda a, s: np.where(a > 0, a, s)),
    "clamp": (lambda t, s: t.clamp(-1, s), lambda a, s: np.clip(a, a.dtype.type(-1), s)),
}


def rnd(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-50, 50, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("op,dtype", [(op, dtype) for op in sorted(OPS)
                                      for dtype in (np.float32, np.float64, np.int32, np.int64)
                                      if not (op == "div" and np.dtype(dtype).kind == "i")])
def test_a_changing_number_schedules_and_compiles_once(op, dtype):
    """Ten calls with ten values: at most two schedules (the first value's literal, then
    the input) and two lowered kernels; each result equals numpy's. (Integer division
    gives floats: the float dtypes cover it.)"""
    fn, ref = OPS[op]
    a = rnd((7, 33), dtype)
    t = Tensor(a)
    values = [dtype(v) for v in (3, 5, -2, 7, 11, 4, -6, 9, 1, 8)]
    misses, lowered = CacheStats.misses, Stats.lowered
    for v in values:
        got = fn(t, v.item()).numpy()
        want = ref(a, v)
        assert got.dtype == want.dtype and np.array_equal(got, want), (op, v)
    assert CacheStats.misses - misses <= 2, "a schedule per value"
    assert Stats.lowered - lowered <= 2, "a kernel per value"


def _constants(lb):
    """The CONST bases of a graph, by value (read before it is realized)."""
    found, stack = {}, [lb.base]
    while stack:
        base = stack.pop()
        if base.realized is None and base.op is LoadOps.CONST:
            found[base.arg] = base
        stack.extend(src.base for src in getattr(base, "src", ()))
    return found


def test_a_number_that_never_changes_stays_a_literal():
    """The same number on every call: the kernel keeps it as a literal (no input)."""
    from lazyten.schedule import create_schedule
    t = Tensor(rnd((16,), np.float32)).realize()
    for _ in range(3):
        g = t * 0.25
        const = _constants(g.lazydata)[0.25]
        g.realize()
        assert const.op is LoadOps.CONST and const.realized is None, "lifted"
    items = create_schedule([(t * 0.25).lazydata])
    assert len(items) == 1 and len(items[0].inputs) == 1


def test_only_the_numbers_that_change_become_inputs():
    """x * s + 0.5 with s changing: s is an input, 0.5 stays a literal."""
    from lazyten.schedule import create_schedule
    t = Tensor(rnd((16,), np.float32)).realize()
    for s in (1.0, 2.0, 3.0):
        (t * s + 0.5).realize()
    g = t * 4.0 + 0.5
    consts = _constants(g.lazydata)
    from lazyten.realize import realize
    realize([g.lazydata])  # (lifts the changing constant in place, then runs)
    assert consts[4.0].realized is not None, "the changing number is a buffer"
    assert consts[0.5].op is LoadOps.CONST and consts[0.5].realized is None, "0.5 lifted"
    np.testing.assert_array_equal(g.numpy(), t.numpy() * np.float32(4.0) + np.float32(0.5))
    items = create_schedule([(t * 5.0 + 0.5).lazydata])
    assert len(items) == 1 and len(items[0].inputs) == 1, "a fresh graph's first lookup"


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16])
def test_sixteen_bit_numbers_stay_literals(dtype):
    """A 16-bit float's constant is never lifted (its literal is not what a buffer of
    its dtype would hold): four values in a row stay literals, and each gives what it
    gives as the first value of its graph, where it is a literal for sure."""
    from lazyten import varying
    t = Tensor(rnd((9,), np.float32)).cast(dtype).realize()
    values, got = (0.1, 0.3, 0.7, 0.9), []
    for s in values:  # (from the second on, a lifted number would be a buffer)
        g = t * s
        const = next(iter(_constants(g.lazydata).values()))
        got.append(g.float().numpy())
        assert const.op is LoadOps.CONST and const.realized is None, "a 16-bit number lifted"
    for s, value in zip(values, got):
        varying._SEEN.clear()  # the next graph is the first of its structure: a literal
        np.testing.assert_array_equal(value, (t * s).float().numpy())


@settings(max_examples=25, deadline=None)
@given(op=st.sampled_from(sorted(OPS)),
       values=st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32),
                                 st.sampled_from([0.0, -0.0, 1e-45, -3.5e38])),
                       min_size=3, max_size=6))
def test_any_sequence_of_numbers_matches_numpy(op, values):
    """Changing numbers (NaN, infinities, signed zeros, subnormals among them) give
    numpy's float32 results, whatever the order."""
    fn, ref = OPS[op]
    a = rnd((5, 4), np.float32, seed=len(values))
    a[0, 0], a[1, 1] = 0.0, -0.0
    t = Tensor(a)
    for v in values:
        got = fn(t, v).numpy()
        with np.errstate(all="ignore"):
            want = ref(a, np.float32(v))
        np.testing.assert_array_equal(got, want, err_msg=f"{op} with {v!r}")


SLICES = {
    "row": (lambda t, i: t[i], lambda a, i: a[i]),
    "rows": (lambda t, i: t[i:i + 3] * 2, lambda a, i: a[i:i + 3] * a.dtype.type(2)),
    "row sum": (lambda t, i: t[i].sum(), lambda a, i: a[i].sum()),
    "plane": (lambda t, i: t[i] + t[i + 1], lambda a, i: a[i] + a[i + 1]),
}


@pytest.mark.parametrize("kind", sorted(SLICES))
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float64])
def test_a_changing_index_schedules_and_compiles_once(kind, dtype):
    """x[i] over ten i: at most two schedules and kernels; each result is numpy's."""
    fn, ref = SLICES[kind]
    a = rnd((12, 5, 7), dtype)
    t = Tensor(a).realize()
    misses, lowered = CacheStats.misses, Stats.lowered
    for i in (0, 3, 1, 7, 2, 8, 5, 4, 6, 3):
        got, want = fn(t, i).numpy(), ref(a, i)
        if kind == "row sum" and np.dtype(dtype).kind == "f":
            np.testing.assert_allclose(got, want, rtol=1e-5)
        else:
            assert np.array_equal(got, want), (kind, i)
    assert CacheStats.misses - misses <= 2, "a schedule per index"
    assert Stats.lowered - lowered <= 2, "a kernel per index"


def test_a_lifted_slice_reads_the_value_before_a_later_update():
    """Values, not aliases: a slice taken before an in-place update of its tensor reads
    the old rows, whichever is realized first, also once slices are copies (D105)."""
    a = np.arange(40, dtype=np.float32).reshape(8, 5)
    x = Tensor(a).realize()
    for i in range(3):
        (x[i] * 2).realize()  # (the offsets vary: slices are copied from here on)
    before, row = x[5] * 1, x[6]
    x.assign(x + 100).realize()
    after = x[2] * 1
    np.testing.assert_array_equal(before.numpy(), a[5])
    np.testing.assert_array_equal(row.numpy(), a[6])
    np.testing.assert_array_equal(after.numpy(), a[2] + 100)
    x += 1
    np.testing.assert_array_equal(after.numpy(), a[2] + 100)
    np.testing.assert_array_equal(x[2].numpy(), a[2] + 101)


@pytest.mark.parametrize("kind", ["column", "flipped column", "strided rows"])
def test_a_strided_slice_at_a_changing_index_compiles_once(kind):
    """A column (a batch-first sequence's step `x[:, t]`), also flipped or strided, reads
    no single run in order: the run from its lowest element to its highest is copied and
    it becomes a view of the copy at an offset that no longer moves; values follow."""
    a = rnd((6, 9, 4), np.float32)
    t = Tensor(a).realize()
    pick = {"column": (lambda x, i: x[:, i], lambda x, i: x[:, i]),
            "flipped column": (lambda x, i: x[::-1, i], lambda x, i: x[::-1, i]),
            "strided rows": (lambda x, i: x[::2, :, i], lambda x, i: x[::2, :, i])}[kind]
    misses, lowered = CacheStats.misses, Stats.lowered
    for i in (0, 2, 1, 3, 2, 0, 3, 1):
        np.testing.assert_array_equal((pick[0](t, i) * 3).numpy(),
                                      pick[1](a, i) * np.float32(3))
    assert CacheStats.misses - misses <= 2 and Stats.lowered - lowered <= 2


@settings(max_examples=25, deadline=None)
@given(values=st.lists(st.integers(-40, 40), min_size=3, max_size=3, unique=True),
       shape=st.sampled_from([(5,), (3, 4), (2, 3, 2)]), seed=st.integers(0, 2**16))
def test_a_lifted_constant_patches_the_key_as_a_fresh_walk_would_make_it(values, shape, seed):
    """Where only constants were lifted, their parts of the schedule key are patched
    instead of the graph walked again (`realized_since`): the key must be the one a fresh
    walk gives, or a lifted graph would miss its schedule or find another's."""
    from lazyten.schedule_cache import lookup
    from lazyten.varying import lift_varying
    a = rnd(shape, np.float32, seed)
    t = Tensor(a)
    lifts = 0
    for v in [x / 8 for x in values]:
        # one number changing each call, one fixed; a shared base (t + v read twice)
        inner = t + v
        out = (inner * inner - 0.25).lazydata
        found = lookup([out])
        lifted = lift_varying(found, [out])
        if lifted is not None:
            lifts += 1
            assert lifted[0] == lookup([out])[0]
            assert [id(n) for n in lifted[1]] == [id(n) for n in lookup([out])[1]]
        want = (a + np.float32(v)) * (a + np.float32(v)) - np.float32(0.25)
        np.testing.assert_allclose(Tensor._wrap(out).numpy(), want, rtol=1e-5, atol=1e-5)
    assert lifts >= 2  # the second and third calls' numbers (the first's too where an
    # earlier example left this structure with other values)


def test_a_lifted_graph_lets_go_of_its_bases_before_it_runs():
    """`x.assign(x + v)` with a new v each call: the lookup after the lift must not keep
    the graph's bases alive while the schedule runs, or x's old value looks read and is
    copied on every update (copy on write)."""
    x = Tensor(np.arange(4, dtype=np.float32))
    for v in (1.0, 2.0):  # the literal, then the lift
        x.assign(x + v).realize()
    copies = Stats.copies_on_write
    for v in (3.0, 4.0, 5.0):
        x.assign(x + v).realize()
    assert Stats.copies_on_write == copies, "a copy of an old value nothing reads"
    np.testing.assert_array_equal(x.numpy(), np.arange(4) + 15)
