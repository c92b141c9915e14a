"""Autograd mode, training mode and the JIT's capture belong to one thread: two threads,
interleaved with barriers, never see each other's switches or record each other's work."""
import threading

import numpy as np

import lazyten
from lazyten import Tensor, no_grad

TIMEOUT = 60


def run_together(*fns):
    """Run each function on its own thread; re-raise the first failure."""
    errors = []

    def guarded(fn):
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - re-raised on the test's thread
            errors.append(e)
    threads = [threading.Thread(target=guarded, args=(fn,)) for fn in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    if errors:
        raise errors[0]


def test_no_grad_in_one_thread_leaves_autograd_on_in_another():
    """Thread A sits inside no_grad() while thread B builds a graph: B's result requires
    grad and backward gives the right gradient; A's ops record nothing. (no_grad was
    process-wide: B got a result without a graph.)"""
    barrier = threading.Barrier(2, timeout=TIMEOUT)
    x_np = np.arange(1, 5, dtype=np.float32)

    def a():
        x = Tensor(x_np, requires_grad=True)
        with no_grad():
            barrier.wait()  # B runs while A is inside no_grad
            barrier.wait()
            y = x * 3
            assert Tensor.no_grad and not y.requires_grad and y._ctx is None
        assert not Tensor.no_grad

    def b():
        barrier.wait()
        try:
            assert not Tensor.no_grad
            x = Tensor(x_np, requires_grad=True)
            loss = (x * x).sum()
            assert loss.requires_grad, "thread A's no_grad() turned off autograd here"
            loss.backward()
            np.testing.assert_allclose(x.grad.numpy(), 2 * x_np)
        finally:
            barrier.wait()
    run_together(a, b)


def test_no_grad_set_in_b_does_not_leak_into_a_and_new_threads_start_with_autograd_on():
    barrier = threading.Barrier(2, timeout=TIMEOUT)
    seen = {}

    def a():
        barrier.wait()
        seen["a"] = Tensor.no_grad  # while B has set it
        barrier.wait()

    def b():
        Tensor.no_grad = True  # the attribute spelling, without a with-block
        barrier.wait()
        barrier.wait()
        seen["b"] = Tensor.no_grad
        del Tensor.no_grad
    with no_grad():
        run_together(a, b)
        assert Tensor.no_grad
    assert seen == {"a": False, "b": True}
    assert not Tensor.no_grad


def test_training_mode_is_per_thread():
    """Thread A trains (dropout drops) while thread B evaluates (dropout is the
    identity, BatchNorm uses its running statistics)."""
    from lazyten import nn
    barrier = threading.Barrier(2, timeout=TIMEOUT)
    x_np = np.ones((64, 2, 2, 2), np.float32) * np.arange(64, dtype=np.float32)[:, None, None, None]

    def a():
        with Tensor.train():
            barrier.wait()
            barrier.wait()
            dropped = Tensor(x_np).dropout(0.5).numpy()
            assert Tensor.training and (dropped == 0).any()

    def b():
        barrier.wait()
        try:
            assert not Tensor.training, "thread A's train() switched on training here"
            np.testing.assert_array_equal(Tensor(x_np).dropout(0.5).numpy(), x_np)
            bn = nn.BatchNorm2d(2)  # eval: running mean 0, var 1
            np.testing.assert_allclose(bn(Tensor(x_np)).numpy(), x_np / np.sqrt(1 + 1e-5),
                                       rtol=1e-6)
        finally:
            barrier.wait()
    run_together(a, b)


def test_jit_capture_records_only_its_own_thread():
    """While thread A's function is being captured, thread B adds 1 to its own tensor.
    A's replays must not repeat B's kernel (the capture was process-wide: every replay
    added 1 to B's tensor again)."""
    barrier = threading.Barrier(2, timeout=TIMEOUT)
    counter = Tensor(np.zeros(3, np.float32)).realize()
    counter.assign(counter + 1).realize()  # compile B's kernel up front
    counter.assign(counter - 1).realize()
    calls = [0]

    def f(x):
        calls[0] += 1
        y = (x * 2).realize()
        if calls[0] == 2:  # inside the capture
            barrier.wait()  # B launches now
            barrier.wait()
        return (y + 1).realize()
    jitted = lazyten.jit(f)
    data = [np.full(3, i, np.float32) for i in range(6)]
    results = []

    def a():
        results.extend(jitted(Tensor(x)) for x in data)

    def b():
        barrier.wait()
        counter.assign(counter + 1).realize()
        barrier.wait()
    run_together(a, b)
    np.testing.assert_array_equal(counter.numpy(), np.ones(3, np.float32),
                                  err_msg="A's replays ran B's kernel")
    for x, got in zip(data, results):
        np.testing.assert_array_equal(got.numpy(), x * 2 + 1)


def test_two_threads_capture_at_the_same_time():
    """Two jitted functions captured at once on two threads, each launching kernels
    while the other's capture is open: each replays exactly its own."""
    barrier = threading.Barrier(2, timeout=TIMEOUT)

    def make(scale):
        calls = [0]

        def f(x):
            calls[0] += 1
            y = (x * scale).realize()
            if calls[0] == 2:
                barrier.wait()  # both captures are open here
            return (y + scale).realize()
        return lazyten.jit(f)
    jitted = {2.0: make(2.0), 3.0: make(3.0)}
    rng = np.random.default_rng(0)
    data = [rng.standard_normal(5).astype(np.float32) for _ in range(6)]
    results = {}

    def worker(scale):
        return lambda: results.__setitem__(scale, [jitted[scale](Tensor(x)) for x in data])
    run_together(worker(2.0), worker(3.0))
    for scale, outs in results.items():
        for x, got in zip(data, outs):
            np.testing.assert_allclose(got.numpy(), x * scale + scale, rtol=1e-6)


def test_one_jitted_function_called_from_two_threads():
    """Calls of one jitted function from two threads take turns: each call's result is
    its own input's, though the replays share the capture's intermediate buffers."""
    jitted = lazyten.jit(lambda x: ((x * 2).exp().sum(axis=1) + 1).realize())
    rng = np.random.default_rng(1)
    data = {k: [rng.standard_normal((64, 256)).astype(np.float32) * 0.1 for _ in range(15)]
            for k in "ab"}
    results = {}

    def worker(k):
        return lambda: results.__setitem__(
            k, [jitted(Tensor(x)).numpy() for x in data[k]])
    run_together(worker("a"), worker("b"))
    for k in "ab":
        for x, got in zip(data[k], results[k]):
            np.testing.assert_allclose(got, np.exp(x * 2).sum(axis=1) + 1, rtol=1e-5)
