"""@jit replays captured kernels: same results, no scheduling, clear errors on new shapes;
parameters updated in place keep their storage, and memory stays flat over many steps.
Each call's results are values of their own (kept results never change), whatever is
returned (lazy, nested, a view, an input or a parameter, non-tensors); tensors nested in
arguments are inputs, and a changed non-tensor argument raises JitError naming it.
Threads: tests/unit/test_threads.py."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lazyten
from lazyten import Tensor
from lazyten.jit import JitError
from lazyten.realize import Stats
from runtimes import get_runtime


def make_model(seed=0):
    rng = np.random.default_rng(seed)
    w1 = Tensor(rng.standard_normal((6, 8)).astype(np.float32) * 0.3, requires_grad=True)
    w2 = Tensor(rng.standard_normal((8, 3)).astype(np.float32) * 0.3, requires_grad=True)
    return [w1.realize(), w2.realize()]


def train_step_fn(params, lr=0.1):
    def step(x, y):
        w1, w2 = params
        for p in params:
            p.grad = None
        loss = (x @ w1).relu().matmul(w2).sparse_categorical_crossentropy(y)
        loss.backward()
        with lazyten.no_grad():
            for p in params:
                p.assign(p.detach() - p.grad * lr)
        return loss.realize(*params)
    return step


def batches(n, seed=1):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        yield (rng.standard_normal((4, 6)).astype(np.float32),
               rng.integers(0, 3, 4).astype(np.int32))


def test_jitted_training_matches_unjitted_and_does_no_scheduling():
    plain_params, jit_params = make_model(), make_model()
    plain = train_step_fn(plain_params)
    jitted = lazyten.jit(train_step_fn(jit_params))
    storage = [p.lazydata.base.realized for p in jit_params]
    for i, (x, y) in enumerate(batches(6)):
        expected = plain(Tensor(x), Tensor(y)).item()
        xt, yt = Tensor(x), Tensor(y)
        before = Stats.schedules
        got = jitted(xt, yt).item()
        if i >= 2:
            assert Stats.schedules == before, "replay scheduled work"
        assert got == pytest.approx(expected, rel=1e-5)
    for p, q in zip(plain_params, jit_params):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-6)
    assert [p.lazydata.base.realized for p in jit_params] == storage, "assign changed storage"


def test_jit_rejects_new_shapes_and_dtypes():
    f = lazyten.jit(lambda x: (x * 2).realize())
    for _ in range(3):
        f(Tensor(np.ones((2, 3), np.float32)))
    with pytest.raises(JitError, match=r"\(2, 3\)"):
        f(Tensor(np.ones((3, 3), np.float32)))
    with pytest.raises(JitError, match="float64"):
        f(Tensor(np.ones((2, 3), np.float64)))


def test_memory_stays_flat_over_300_steps():
    params = make_model()
    step = train_step_fn(params, lr=0.01)
    allocator = get_runtime("CPU").allocator
    live = []
    for i, (x, y) in enumerate(batches(300)):
        step(Tensor(x), Tensor(y))
        if i in (50, 299):
            live.append(allocator.live)
    assert live[1] <= live[0], f"live device buffers grew from {live[0]} to {live[1]}"


# ---- each call's results are its own values ----
def _inputs(n, shape=(3, 4), seed=2):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]


def test_results_kept_from_every_call_hold_their_own_values():
    """Results collected in a list (the PyTorch idiom) each hold their call's value; they
    all showed the last call's when every call returned the same Tensor objects."""
    f = lazyten.jit(lambda x: ((x * 2).sum().realize(), (x + 1).realize()))
    data = _inputs(6)
    kept = [f(Tensor(x)) for x in data]
    for i, (x, (total, plus)) in enumerate(zip(data, kept)):
        assert total.item() == pytest.approx(float((x * 2).sum()), rel=1e-5), f"call {i + 1}"
        np.testing.assert_allclose(plus.numpy(), x + 1, rtol=1e-6, err_msg=f"call {i + 1}")


def test_training_step_losses_collected_in_a_list():
    """Losses of a jitted training step kept in a list and read after the loop equal the
    unjitted step's, one by one."""
    plain = train_step_fn(make_model())
    jitted = lazyten.jit(train_step_fn(make_model()))
    data = list(batches(6))
    expected = [plain(Tensor(x), Tensor(y)).item() for x, y in data]
    losses = [jitted(Tensor(x), Tensor(y)) for x, y in data]
    assert [loss.item() for loss in losses] == pytest.approx(expected, rel=1e-5)


def test_unrealized_return_values_are_computed_inside_each_call():
    """A return value the function leaves lazy (nested in a dict and a tuple) is realized
    inside the capture and replayed, so it is not the capture call's stale value."""
    def f(x):
        return {"double": x * 2, "pair": (x.sum(), x.exp())}
    jitted = lazyten.jit(f)
    data = _inputs(5)
    kept = [jitted(Tensor(x)) for x in data]
    for i, (x, out) in enumerate(zip(data, kept)):
        assert out["double"].lazydata.is_realized and out["pair"][1].lazydata.is_realized
        np.testing.assert_allclose(out["double"].numpy(), x * 2, err_msg=f"call {i + 1}")
        np.testing.assert_allclose(out["pair"][0].numpy(), x.sum(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(out["pair"][1].numpy(), np.exp(x), rtol=1e-5)


def test_returned_views_keep_their_shape_and_layout():
    """A returned view (transpose of a kernel's output) comes back as the same view of
    each call's own buffer."""
    jitted = lazyten.jit(lambda x: (x * 3).realize().T[1:])
    data = _inputs(4)
    kept = [jitted(Tensor(x)) for x in data]
    for x, out in zip(data, kept):
        np.testing.assert_allclose(out.numpy(), (x * 3).T[1:], rtol=1e-6)


def test_returned_views_at_other_offsets_of_one_buffer_keep_their_offsets():
    """Two returned windows of one output at different offsets (`y[2:3]`, `y[None, 1]`):
    reading them realizes a copy of each, and the second's offset, differing from the
    first's in a graph of the same structure, makes it a kernel input (D105), which
    rewrote the view in place. The replay rebuilt its returns from those very views and
    read element 0 (fuzzer, FUZZ_SEED=4319): it keeps what it returns as it was."""
    def f(x):
        y = x[1:] * 2
        return y[2:3], y, y[None, 1]
    jitted = lazyten.jit(f)
    data = _inputs(5, shape=(5,))
    for i, x in enumerate(data):
        third, whole, second = jitted(Tensor(x))
        y = x[1:] * 2
        for got, want in [(third, y[2:3]), (whole, y), (second, y[None, 1])]:
            np.testing.assert_array_equal(got.numpy(), want, err_msg=f"call {i + 1}")


@st.composite
def _windows(draw):
    """A 2-d output's shape and 2-4 windows of it, as index tuples: rows, columns, single
    elements and strided runs, often of one shape at different offsets (what makes a
    window a kernel input when it is read, D105)."""
    rows, cols = draw(st.integers(2, 6)), draw(st.integers(3, 9))
    picks = []
    for _ in range(draw(st.integers(2, 4))):
        kind = draw(st.sampled_from(["row", "col", "run", "element", "strided"]))
        r, c = draw(st.integers(0, rows - 1)), draw(st.integers(0, cols - 2))
        picks.append({"row": (r,), "col": (slice(None), c), "run": (r, slice(c, c + 2)),
                      "element": (None, r, c), "strided": (slice(None, None, 2), c)}[kind])
    return (rows, cols), picks


@settings(max_examples=20, deadline=None)
@given(case=_windows(), realize_inside=st.booleans(), jit=st.booleans())
def test_returned_windows_of_one_output_hold_their_values_on_every_call(case, realize_inside,
                                                                       jit):
    """The generator for D114's siblings: windows of one kernel's output at any offsets,
    returned together (some realized inside the call), read after each of five calls
    with new inputs, against numpy; jitted, and eagerly (the schedule cache's plans)."""
    shape, picks = case

    def f(x):
        y = x * 2 + 1
        views = [y[p] for p in picks]
        if realize_inside:
            views[0].realize()
        return (*views, y)
    jitted = lazyten.jit(f) if jit else f
    for i, x in enumerate(_inputs(5, shape=shape)):
        got = jitted(Tensor(x))
        y = x * 2 + 1
        for index, value, want in zip(picks + [()], got, [y[p] for p in picks] + [y]):
            np.testing.assert_array_equal(value.numpy(), want, err_msg=f"call {i + 1}, {index}")


def test_returning_an_input_or_a_parameter_gives_a_snapshot():
    """A return value that aliases memory from outside the call (an input, a parameter
    updated in place) is copied: call 3's result keeps call 3's value after call 4, and
    an input the caller changes later does not change it."""
    w = Tensor(np.zeros(4, np.float32)).realize()

    def f(x):
        w.assign(w + x)
        return x, w, w.reshape(2, 2)
    jitted = lazyten.jit(f)
    data = _inputs(5, shape=(4,))
    inputs = [Tensor(x) for x in data]
    kept = [jitted(t) for t in inputs]
    inputs[2].assign(Tensor(np.full(4, 7, np.float32))).realize()
    for i, (x, (got_x, got_w, got_w22)) in enumerate(zip(data, kept)):
        expected_w = np.sum(data[:i + 1], axis=0)
        np.testing.assert_allclose(got_x.numpy(), x, err_msg=f"input of call {i + 1}")
        np.testing.assert_allclose(got_w.numpy(), expected_w, rtol=1e-5, atol=1e-6,
                                   err_msg=f"parameter after call {i + 1}")
        np.testing.assert_allclose(got_w22.numpy(), expected_w.reshape(2, 2), rtol=1e-5,
                                   atol=1e-6)
    np.testing.assert_allclose(w.numpy(), np.sum(data, axis=0), rtol=1e-5, atol=1e-6)


def test_non_tensor_and_constant_return_values():
    jitted = lazyten.jit(lambda x: (x.sum(), "tag", 3, None, Tensor.ones(2)))
    for x in _inputs(4):
        total, tag, n, nothing, ones = jitted(Tensor(x))
        assert (tag, n, nothing) == ("tag", 3, None)
        assert total.item() == pytest.approx(float(x.sum()), rel=1e-5, abs=1e-6)
        np.testing.assert_array_equal(ones.numpy(), np.ones(2, np.float32))


def test_replay_allocates_only_the_returned_buffers():
    """Each replay makes a buffer for the returned loss and nothing else: memory stays
    flat over many jitted steps while old results are dropped."""
    step = lazyten.jit(train_step_fn(make_model(), lr=0.01))
    allocator = get_runtime("CPU").allocator
    live = []
    for i, (x, y) in enumerate(batches(200)):
        step(Tensor(x), Tensor(y))
        if i in (20, 199):
            live.append(allocator.live)
    assert live[1] <= live[0], f"live device buffers grew from {live[0]} to {live[1]}"


# ---- arguments ----
def test_tensors_nested_in_arguments_are_inputs():
    """Tensors inside lists, tuples and dicts are inputs, swapped on every replay; they
    were baked in as the capture call's buffers."""
    def f(pair, named, scale=1.0):
        a, b = pair
        return (a * named["w"] + b * named["nested"][0]).sum() * scale
    jitted = lazyten.jit(f)
    data = _inputs(20)
    for i in range(5):
        a, b, w, v = data[4 * i:4 * i + 4]
        got = jitted([Tensor(a), Tensor(b)], {"w": Tensor(w), "nested": (Tensor(v),)})
        assert got.item() == pytest.approx(float((a * w + b * v).sum()), rel=1e-5), f"call {i + 1}"


def test_changed_non_tensor_argument_raises_naming_it():
    """A Python number is frozen into the capture: changing it raises JitError naming the
    argument (it was silently ignored)."""
    jitted = lazyten.jit(lambda x, scale: (x * scale).realize())
    x = Tensor(np.ones(3, np.float32))
    for _ in range(3):
        np.testing.assert_array_equal(jitted(x, 2.0).numpy(), np.full(3, 2, np.float32))
    with pytest.raises(JitError, match=r"argument scale was 2\.0 when captured and is 3\.0"):
        jitted(x, 3.0)
    with pytest.raises(JitError, match="argument scale"):
        jitted(x, 2)  # an int is not the float 2.0: it would make other kernels
    nested = lazyten.jit(lambda x, opts: (x * opts["k"][0]).realize())
    for _ in range(3):
        nested(x, {"k": [2.0]})
    with pytest.raises(JitError, match=r"opts\['k'\]\[0\]"):
        nested(x, {"k": [5.0]})
    with pytest.raises(JitError, match="numpy array"):
        jitted(np.ones(3, np.float32), 2.0)
    with pytest.raises(JitError, match=r"argument scale was 2\.0 when captured and is a Tensor"):
        jitted(x, Tensor(2.0))
    with pytest.raises(JitError, match=r"argument opts\['k'\] was a list of 1 .* a list of 2"):
        nested(x, {"k": [2.0, 1.0]})


def test_keyword_order_and_defaults_do_not_matter():
    def f(x, y, scale=2.0):
        return ((x - y) * scale).realize()
    jitted = lazyten.jit(f)
    data = _inputs(8)
    calls = [lambda a, b: jitted(Tensor(a), Tensor(b)),
             lambda a, b: jitted(y=Tensor(b), x=Tensor(a)),
             lambda a, b: jitted(x=Tensor(a), y=Tensor(b), scale=2.0),
             lambda a, b: jitted(Tensor(a), scale=2.0, y=Tensor(b))]
    for i, call in enumerate(calls):
        a, b = data[2 * i], data[2 * i + 1]
        np.testing.assert_allclose(call(a, b).numpy(), (a - b) * 2, rtol=1e-6)


def test_inputs_that_were_the_same_tensor_must_stay_so():
    """Captured with f(a, a), the replay cannot tell the two inputs apart: f(b, c) raises
    (it silently used one of them for both)."""
    jitted = lazyten.jit(lambda x, y: (x - y).realize())
    a = Tensor(np.ones(3, np.float32))
    for _ in range(3):
        np.testing.assert_array_equal(jitted(a, a).numpy(), np.zeros(3, np.float32))
    with pytest.raises(JitError, match="the same tensor as x"):
        jitted(Tensor(np.ones(3, np.float32)), Tensor(np.zeros(3, np.float32)))


def test_view_and_lazy_inputs_are_made_contiguous():
    jitted = lazyten.jit(lambda x: (x + 1).realize())
    for x in _inputs(4, shape=(4, 3)):
        view = Tensor(x.T.copy()).T  # a permuted view
        np.testing.assert_allclose(jitted(view).numpy(), x + 1, rtol=1e-6)
        np.testing.assert_allclose(jitted(Tensor(x) * 1).numpy(), x + 1, rtol=1e-6)


def test_reshaped_inputs_are_read_in_place():
    """A reshape of a realized tensor is already in memory order: the jit reads its base's
    memory (it used to ask the view for a buffer of its own and fail)."""
    jitted = lazyten.jit(lambda x: (x * 2).realize())
    for x in _inputs(4, shape=(4, 3)):
        flat = Tensor(x.reshape(-1)).realize().reshape(4, 3)
        np.testing.assert_allclose(jitted(flat).numpy(), x * 2, rtol=1e-6)


# ---- in-place updates ----
def test_pending_in_place_updates_belong_to_their_call():
    """An assign the function leaves unrealized is realized inside each call, and one
    left pending before a call is realized before it: the capture neither drops the
    call's update nor replays an older one."""
    acc = Tensor(np.zeros(3, np.float32)).realize()

    def f(x):
        acc.assign(acc + x)  # never realized by the function itself
        return None
    jitted = lazyten.jit(f)
    data = _inputs(5, shape=(3,))
    acc.assign(acc + 100)  # pending when call 1 starts
    for x in data:
        assert jitted(Tensor(x)) is None
    np.testing.assert_allclose(acc.numpy(), 100 + np.sum(data, axis=0), rtol=1e-5)


def test_batchnorm_running_stats_under_jit_match_eager():
    """BatchNorm updates its running statistics lazily and finishes the last step's
    update at the start of the next: under the capture that replayed call 1's update on
    every call and dropped the others."""
    from lazyten import nn
    rng = np.random.default_rng(3)
    data = [rng.standard_normal((8, 2, 3, 3)).astype(np.float32) * (i + 1) for i in range(5)]

    def run(use_jit):
        bn = nn.BatchNorm2d(2)

        def step(x):
            with Tensor.train():
                return bn(x).sum().realize()
        fn = lazyten.jit(step) if use_jit else step
        outs = [fn(Tensor(x)).item() for x in data]
        return outs, bn.running_mean.numpy(), bn.running_var.numpy()
    plain, jitted = run(False), run(True)
    assert jitted[0] == pytest.approx(plain[0], rel=1e-4, abs=1e-4)
    np.testing.assert_allclose(jitted[1], plain[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(jitted[2], plain[2], rtol=1e-5, atol=1e-6)


def test_nested_jit_runs_inside_the_outer_capture():
    """A jitted function called inside another's capture is recorded by it (the inner
    capture ended the outer one, whose later kernels were then never replayed)."""
    inner = lazyten.jit(lambda x: (x * 2).realize())
    outer = lazyten.jit(lambda x: (inner(x) + 1).realize())
    for x in _inputs(5):
        np.testing.assert_allclose(outer(Tensor(x)).numpy(), x * 2 + 1, rtol=1e-6)


def _second_device():
    for name in ("OPENCL", "CUDA"):
        try:
            get_runtime(name)
            return name
        except Exception:  # noqa: BLE001 - not installed here
            continue
    pytest.skip("no second device (OPENCL or CUDA) to copy to")


def test_copies_between_devices_are_replayed():
    """A device copy inside the function is part of the capture (only kernels were
    recorded: the replay reused the capture call's copy)."""
    other = _second_device()
    jitted = lazyten.jit(lambda x: ((x + 1).to(other) * 2).to("CPU").realize())
    for i, x in enumerate(_inputs(5)):
        np.testing.assert_allclose(jitted(Tensor(x, device="CPU")).numpy(), (x + 1) * 2,
                                   rtol=1e-6, err_msg=f"call {i + 1}")


def test_feeding_each_result_back_as_the_next_input():
    """h = f(h, x): each call's input is the previous call's result (its own buffer,
    including the capture call's), and no call's result changes afterwards."""
    w = Tensor(np.float32([[0.5, -0.25], [0.25, 0.5]])).realize()
    step = lazyten.jit(lambda h, x: (h @ w + x).tanh())
    data = _inputs(6, shape=(1, 2))
    h, kept, expected, h_np = Tensor(np.zeros((1, 2), np.float32)), [], [], np.zeros((1, 2))
    for x in data:
        h = step(h, Tensor(x))
        h_np = np.tanh(h_np @ w.numpy() + x)
        kept.append(h)
        expected.append(h_np)
    for i, (got, want) in enumerate(zip(kept, expected)):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6, err_msg=f"call {i + 1}")


def test_tensors_taken_from_parameters_between_calls_keep_their_values():
    """Lazy clones, views and lazy expressions of the parameters, made before each jitted
    call (the capture's included), keep the values the parameters had then, read at the
    end, as when the step is not jitted (replays overwrote the memory under them)."""
    params = make_model()
    step = lazyten.jit(train_step_fn(params))
    kept = []
    for x, y in batches(5):
        expected = [p.numpy() for p in params]
        kept.append((expected, [p.clone() for p in params], params[0].T, params[1] * 2))
        step(Tensor(x), Tensor(y))
        assert not np.array_equal(params[0].numpy(), expected[0]), "the step updated nothing"
    for i, (expected, clones, view, doubled) in enumerate(kept):
        for k, (c, e) in enumerate(zip(clones, expected)):
            np.testing.assert_array_equal(c.numpy(), e, err_msg=f"clone of param {k} before call {i + 1}")
        np.testing.assert_array_equal(view.numpy(), expected[0].T, err_msg=f"view before call {i + 1}")
        np.testing.assert_array_equal(doubled.numpy(), expected[1] * 2, err_msg=f"before call {i + 1}")


def test_returning_a_view_taken_before_an_update():
    """A view of a parameter taken inside the function before it is updated is the old
    value (copied on write inside the capture): each call returns the parameter as it was
    before that call."""
    w = Tensor(np.zeros(4, np.float32)).realize()

    def f(x):
        before = w.reshape(2, 2)
        w.assign(w + x)
        return before
    jitted = lazyten.jit(f)
    data = _inputs(5, shape=(4,))
    kept = [jitted(Tensor(x)) for x in data]
    for i, got in enumerate(kept):
        np.testing.assert_allclose(got.numpy(), sum(data[:i], np.zeros(4)).reshape(2, 2),
                                   rtol=1e-5, atol=1e-6, err_msg=f"call {i + 1}")


def test_a_jitted_method_and_a_failed_capture():
    """A method can be jitted (its object is an argument that must stay the same); a
    capture whose call raises is taken again on the next call."""
    class Model:
        def __init__(self):
            self.w = Tensor(np.float32([1, 2, 3])).realize()
            self.fail = False

        @lazyten.jit
        def __call__(self, x):
            if self.fail:
                raise RuntimeError("failing on purpose")
            return (x * self.w).sum().realize()
    model = Model()
    data = _inputs(6, shape=(3,))
    assert model(Tensor(data[0])).item() == pytest.approx(float(data[0] @ [1, 2, 3]), rel=1e-5)
    model.fail = True
    with pytest.raises(RuntimeError, match="on purpose"):
        model(Tensor(data[1]))
    model.fail = False
    for x in data[2:]:
        assert model(Tensor(x)).item() == pytest.approx(float(x @ [1, 2, 3]), rel=1e-5)
    with pytest.raises(JitError, match="argument self"):
        Model()(Tensor(data[0]))


def test_a_replay_launches_through_launchers_made_once_and_counts_them(monkeypatch):
    """A replay calls each kernel through its program's launcher (the plans' cheap call,
    D78), made on the first replay and kept; the statistics count every kernel it ran,
    as launching them one by one did."""
    from runtimes.cpu_llvm import CPUProgram
    made, calls = [], []
    real = CPUProgram.launcher

    def launcher(self, global_size, local_size):
        inner = real(self, global_size, local_size)
        made.append(self.spec.name)

        def call(*bufs):
            calls.append(self.spec.name)
            return inner(*bufs)
        return call
    monkeypatch.setattr(CPUProgram, "launcher", launcher)

    @lazyten.jit
    def f(x):
        return ((x * 2).realize() + 1).exp().realize()
    xs = [Tensor(np.full(37, i, np.float32), device="CPU") for i in range(5)]  # (CPU programs)
    for x in xs[:2]:  # the capture, and the call that checks it
        f(x)
    made_by = []
    for n, x in enumerate(xs[2:], start=2):  # replays
        k0, calls[:] = Stats.kernels, []
        out = f(x).numpy()
        np.testing.assert_allclose(out, np.exp(np.full(37, 2 * n + 1, np.float32)), rtol=1e-6)
        assert len(calls) == 2 and Stats.kernels - k0 == 2, (calls, Stats.kernels - k0)
        made_by.append(len(made))
    assert made_by[0] >= 2 and made_by[1] == made_by[2] == made_by[0], made_by
