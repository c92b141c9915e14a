"""A jitted function that makes tensors from host data (Tensor(numpy), arange, a Python
list) and updates them in place: a replay does not upload again, so each replay must
start from the uploaded values, not from the last call's result. Found by a helper's
review: `t = Tensor.arange(4, dtype="float32"); t += x; return t * 1` returned 3, 4, 5, 6
on its third call with x = 2 (the capture's memory kept call 2's sum). The generator
below draws such functions and compares every call with the same function run eagerly."""
import numpy as np
from hypothesis import given, settings, strategies as st

from lazyten import Tensor, jit


def test_a_range_updated_in_place_starts_afresh_each_replay():
    @jit
    def f(x):
        t = Tensor.arange(4, dtype="float32")
        t += x
        return t * 1
    for i in range(5):
        got = f(Tensor(np.full(4, float(i), np.float32))).numpy()
        np.testing.assert_array_equal(got, np.arange(4) + i)


def test_a_cached_integer_range_read_by_a_capture_stays_a_constant():
    """An eager in-place update of another arange tensor must not reach the replay."""
    @jit
    def f(x):
        return x + Tensor.arange(4)
    zeros = Tensor(np.zeros(4, np.int64))
    for _ in range(3):
        f(zeros)
    other = Tensor.arange(4)
    other += 100
    np.testing.assert_array_equal(f(zeros).numpy(), np.arange(4))
    np.testing.assert_array_equal(other.numpy(), np.arange(4) + 100)


def test_parameters_updated_in_place_still_accumulate():
    """State from outside the call (a parameter) is not reset by the fix."""
    w = Tensor(np.zeros(3, np.float32)).realize()

    @jit
    def step(x):
        w.assign(w + x)
        return w * 1
    for i in range(1, 5):
        np.testing.assert_array_equal(step(Tensor(np.ones(3, np.float32))).numpy(), np.full(3, i))


# a jitted function body: (how the local tensor is made, the in-place updates applied to it)
_MAKE = st.sampled_from(["numpy", "list", "arange_int", "arange_float", "zeros", "full"])
_UPDATE = st.tuples(st.sampled_from(["iadd", "imul", "setitem", "assign"]),
                    st.integers(0, 3))


def _local(make: str):
    if make == "numpy":
        return Tensor(np.array([1.5, -2.0, 3.0, 0.5], np.float32))
    if make == "list":
        return Tensor([4.0, 3.0, 2.0, 1.0])
    if make == "arange_int":
        return Tensor.arange(4)
    if make == "arange_float":
        return Tensor.arange(1, 5, dtype="float32")
    if make == "zeros":
        return Tensor.zeros(4)
    return Tensor.full((4,), 2.5)


def _body(make: str, updates, x):
    t = _local(make)
    x = x.cast(t.dtype)
    for kind, i in updates:
        if kind == "iadd":
            t += x
        elif kind == "imul":
            t *= 2
        elif kind == "setitem":
            t[i] = x[i] * 3
        else:
            t.assign(t - x)
    return t + x


@settings(max_examples=25, deadline=None)
@given(make=_MAKE, updates=st.lists(_UPDATE, min_size=1, max_size=4),
       values=st.lists(st.integers(-3, 3), min_size=4, max_size=4))
def test_jitted_local_tensors_match_eager(make, updates, values):
    jitted = jit(lambda x: _body(make, updates, x))
    for call, v in enumerate(values):
        x = np.arange(4, dtype=np.float32) * v + call
        want = _body(make, updates, Tensor(x)).numpy()
        got = jitted(Tensor(x)).numpy()
        np.testing.assert_array_equal(got, want, err_msg=f"call {call}")


def _noisy(x):
    """Random numbers of several kinds, and a dropout mask, drawn inside the function."""
    return (x.dropout(0.5, training=True) + Tensor.rand(3, 4) + Tensor.randn(4) +
            Tensor.uniform(3, 4, low=-2, high=2, dtype="bfloat16").float() +
            Tensor.randint(0, 9, size=(4,)).float())


def test_random_numbers_are_drawn_anew_each_replay_as_eager_draws_them():
    """They were drawn at capture and every replay reused them: a jitted training step
    applied one dropout mask forever."""
    x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4) + 1)
    Tensor.manual_seed(7)
    want = [_noisy(x).numpy() for _ in range(5)]
    Tensor.manual_seed(7)
    jitted = jit(_noisy)
    got = [jitted(x).numpy() for _ in range(5)]
    for call, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_array_equal(g, w, err_msg=f"call {call}")
    assert not np.array_equal(got[3], got[4])


def test_a_local_tensor_read_before_its_update_reads_the_upload():
    """Found by the jit fuzzer (tests/fuzz, check_jit): the old value of an assign that
    reads its target shifted is copied before the assign, and a kernel that reads the
    tensor before it is updated runs first too: both read the previous call's result while
    the upload was put back only before the assign."""
    @jit
    def f(x):
        t = Tensor(np.arange(12).reshape(4, 3))
        before = t * 1
        t.assign(t.pad(((1, -1), (0, 0))))
        return t + x, before
    for i in range(4):
        got, before = f(Tensor(np.full((4, 3), i)))
        want = np.pad(np.arange(12).reshape(4, 3), ((1, 0), (0, 0)))[:4] + i
        np.testing.assert_array_equal(got.numpy(), want)
        np.testing.assert_array_equal(before.numpy(), np.arange(12).reshape(4, 3))
