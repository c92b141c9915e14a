"""Laziness, fusion (kernel counts), compute-once, and the kernel caches."""
import functools
import gc
import os
import subprocess
import sys

import time

import numpy as np
import pytest

from lazyten import Tensor
from lazyten.realize import Capture, Stats
from runtimes import CompileError, get_runtime
from runtimes.cpu_host import Host
from runtimes.cpu_llvm import LLVMCompiler


def count_kernels(fn):
    before = Stats.kernels
    out = fn()
    return Stats.kernels - before, out


def rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_fifty_ops_run_nothing_until_numpy():
    x, y = rnd(8, 16), rnd(8, 16, seed=1)
    before = Stats.kernels
    a, b = Tensor(x), Tensor(y)
    ref_a, ref_b = x.copy(), y.copy()
    for i in range(25):
        a = (a * 0.9 + b).relu() if i % 2 else a - b * 0.1
        ref_a = np.maximum(ref_a * 0.9 + ref_b, 0) if i % 2 else ref_a - ref_b * 0.1
    out = a.sum(axis=1).sqrt()
    assert Stats.kernels == before, "building the graph launched kernels"
    repr(out)
    assert Stats.kernels == before, "__repr__ realized"
    np.testing.assert_allclose(out.numpy(), np.sqrt(ref_a.sum(1)), rtol=1e-4)
    assert Stats.kernels > before


@pytest.mark.parametrize("build,expected", [
    ("elementwise chain", 1),
    ("reduce with elementwise around it", 1),
    ("linear + relu", 1),
    ("movement ops on inputs", 1),
])
def test_kernel_counts(build, expected):
    a, b, c = Tensor(rnd(16, 32)), Tensor(rnd(16, 32, seed=1)), Tensor(rnd(16, 32, seed=2))
    x, w, bias = Tensor(rnd(8, 32)), Tensor(rnd(32, 16, seed=3)), Tensor(rnd(16, seed=4))
    graphs = {
        "elementwise chain": lambda: ((a * b + c).exp() * 2 - a.sqrt().abs()).maximum(b),
        "reduce with elementwise around it": lambda: (a * b + c).sum(axis=1).abs().sqrt(),
        "linear + relu": lambda: (x @ w + bias).relu(),
        "movement ops on inputs": lambda: a.T.flip(0)[::2] + b.T[::-2].pad(((0, 0), (0, 0))),
    }
    n, out = count_kernels(lambda: graphs[build]().realize())
    assert n == expected
    assert out.numpy().shape == graphs[build]().numpy().shape


def test_softmax_kernels_and_value():
    x = rnd(8, 50)
    n, out = count_kernels(lambda: Tensor(x).softmax(-1).realize())
    assert n <= 3
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(out.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_buffer_read_by_several_consumers_is_computed_once():
    t = Tensor(rnd(16, 32))
    s = t.sum(axis=1, keepdim=True)          # one reduce, expanded into two consumers
    n, _ = count_kernels(lambda: Tensor.realize(t - s, t * s))
    assert n == 3  # the sum once, then one kernel per consumer
    x = t * 3 + 1                            # shared subexpression inside one kernel
    src = _source_of(lambda: (x * x + x).realize())
    assert src.count("fmul") <= 3


def _source_of(fn):
    from lazyten import programs as engine
    before = set(engine._PROGRAMS)
    fn()
    new = [v for k, v in engine._PROGRAMS.items() if k not in before]
    return new[-1][0].src if new else ""


def test_pad_of_exp_is_zero_in_the_padding():
    x = rnd(4, 5)
    out = Tensor(x).exp().pad(((1, 1), (2, 0))).numpy()
    np.testing.assert_allclose(out, np.pad(np.exp(x), ((1, 1), (2, 0))), rtol=1e-6)


def test_compile_error_includes_source():
    runtime = get_runtime("CPU")
    with pytest.raises(CompileError) as info:
        runtime.compiler.compile_checked("broken", "define void @broken() {\n  nonsense\n}\n")
    assert "nonsense" in str(info.value) and "broken" in str(info.value)


SCRIPT = """
import numpy as np
from lazyten import Tensor
from lazyten.realize import Capture, Stats
from runtimes import get_runtime
x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
assert np.allclose(((x * 2 + 1).sum(axis=0)).numpy(), (np.arange(12).reshape(3, 4) * 2 + 1).sum(0))
print(get_runtime("CPU").compiler.compiled, Stats.lowered)
"""


def test_disk_cache_second_process_compiles_nothing(tmp_path):
    """The second process neither compiles nor lowers: programs are cached by AST."""
    env = dict(os.environ, CACHEDIR=str(tmp_path), PYTHONPATH=os.getcwd())
    env.pop("DISABLE_CACHE", None)
    first = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True)
    second = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert first.stdout.split()[0] != "0" and first.stdout.split()[1] != "0"
    assert second.stdout.split() == ["0", "0"], "a warm process compiled or lowered kernels"
    off = subprocess.run([sys.executable, "-c", SCRIPT], env=dict(env, DISABLE_CACHE="1"),
                         capture_output=True, text=True)
    assert off.stdout.split()[0] != "0"


def test_memory_cache_reuses_compiled_kernels():
    from lazyten.realize import Stats as S
    a = Tensor(rnd(5, 7))
    (a * 3 + 2).realize()
    lowered = S.lowered
    (Tensor(rnd(5, 7, seed=9)) * 3 + 2).realize()
    assert S.lowered == lowered


def test_debug2_prints_one_line_per_kernel():
    code = ("from lazyten import Tensor\n"
            "a = Tensor.randn(64, 32); b = Tensor.randn(32, 16)\n"
            "((a @ b).relu() + 1).sum(axis=1).numpy()\n")
    env = dict(os.environ, DEBUG="2", PYTHONPATH=os.getcwd())
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    lines = [l for l in res.stderr.splitlines() if l.startswith("*** ")]
    kernels = [l for l in lines if "total" not in l]
    assert len(kernels) == 2 and all("GFLOP/s" in l and "CPU" in l for l in kernels)
    assert lines[-1].startswith("*** total: 2 kernels")
    assert "r_64_16_32" in kernels[0]


def _near_bound_program():
    """A captured kernel with a few times the work one thread wants: (spec, program,
    buffers' memory, its first result)."""
    a = Tensor(rnd(600, 500)).realize()
    Capture.items = []
    try:
        first = ((a * 1.5).exp() + 1).realize()
        (spec, program, buffers), = Capture.items
    finally:
        Capture.items = None
    return spec, program, [b.ensure_allocated() for b in buffers], first


def test_a_kernel_whose_serial_time_a_wake_up_matches_has_a_choice():
    """A split call that finds the workers asleep pays a wake-up (30-40 us on the 2-core
    machine), as a training step's few larger kernels do after its long serial stretches:
    nn_lstm's recurrent weight gradient (4.2M multiply-adds) ran 73 us split where serial
    took 35. Kernels up to 16M of work (a split saves at most half their 40-160 us) get
    the timed choice, cold and warm; past that they split."""
    def program_of(rows):
        a = Tensor(rnd(rows, 4096)).realize()
        Capture.items = []
        try:
            (a * 1.5 + 1).realize()
            (_, program, _), = Capture.items
        finally:
            Capture.items = None
        return program
    chosen = program_of(512)  # 2M elements, two ops each: 64 times the per-thread bound
    assert chosen.work == 1 << 22 and chosen.choice is not None and chosen.cold is not None
    assert program_of(4096).choice is None  # 32M: split


def test_cpu_kernel_near_the_thread_bound_times_both_ways_then_keeps_one():
    """A kernel with a few times the work one thread wants runs its first calls serial
    and split in turn, timed, then keeps the faster (the hand-off to the worker threads
    can cost more than it saves: LeNet's jitted b64 step 2.8 -> 2.2 ms). Both ways give
    the same bits, and the choice is made within the trials."""
    from runtimes import cpu_choice
    spec, program, ptrs, first = _near_bound_program()
    assert program.threaded and not program.serial and program.choice is not None
    program.workers_asleep = lambda helpers: False  # the choice for calls finding them spinning
    program.choice = cpu_choice.ThreadChoice()
    expected = first.numpy().copy()
    for _ in range(len(cpu_choice.ThreadChoice().calls)):  # the first round's calls
        program(*ptrs, global_size=spec.global_size, local_size=spec.local_size)
        np.testing.assert_array_equal(first.numpy(), expected)
    choice = program.choice
    assert not choice.calls and choice.split == (choice.best[1] < choice.best[0])
    for _ in range(3 * cpu_choice._RECHECK[0]):  # through a re-check: still the same bits
        program(*ptrs, global_size=spec.global_size, local_size=spec.local_size)
        np.testing.assert_array_equal(first.numpy(), expected)


def test_thread_choice_times_again_and_corrects_a_choice_made_on_a_busy_machine():
    """A choice made while the second core was busy (another process; torch's threads
    spinning after its own op, in a side-by-side run) is not kept for the process's
    life: one call each way is timed again after 16 calls, 32, ... and the choice is
    remade from each way's best time. Here split is slow during the first trials and
    fast after: the kernel is back on two threads after the first re-check."""
    from runtimes import cpu_choice
    spec, program, ptrs, first = _near_bound_program()
    expected = first.numpy().copy()
    real_pieces, real_here = program.run_pieces, program.here
    calls = {"split": 0}

    def pieces(*args):  # busy for the first trials, then much faster than serial
        calls["split"] += 1
        time.sleep(0.02 if calls["split"] <= cpu_choice._TRIALS else 0.0)
        real_pieces(*args)

    def serial(*args):
        time.sleep(0.005)
        real_here(*args)
    program.run_pieces, program.here = pieces, serial
    program.workers_asleep = lambda helpers: False
    try:
        program.choice = cpu_choice.ThreadChoice()
        calls["split"] = -1  # the round's untimed first call
        for _ in range(len(program.choice.calls)):
            program(*ptrs, global_size=spec.global_size, local_size=spec.local_size)
        assert program.choice.split is False  # the busy trials picked serial
        for _ in range(cpu_choice._RECHECK[0] - 1 + len(cpu_choice.ThreadChoice().calls)):
            program(*ptrs, global_size=spec.global_size, local_size=spec.local_size)
        assert program.choice.split is True
        before = calls["split"]
        program(*ptrs, global_size=spec.global_size, local_size=spec.local_size)
        assert calls["split"] == before + 1  # an untimed call takes the new choice
    finally:
        program.run_pieces, program.here = real_pieces, real_here
    np.testing.assert_array_equal(first.numpy(), expected)


def test_thread_choice_under_calls_from_several_threads():
    """Python threads may launch one kernel at once: its choice's rounds are shared, a
    call that finds the round taken runs untimed, and every call computes the same bits."""
    import threading
    from runtimes import cpu_choice
    spec, program, ptrs, first = _near_bound_program()
    expected = first.numpy().copy()
    program.choice = cpu_choice.ThreadChoice()
    errors: list[BaseException] = []

    def calls():
        try:
            for _ in range(60):
                program(*ptrs, global_size=spec.global_size, local_size=spec.local_size)
        except BaseException as e:  # noqa: B036 - reported below
            errors.append(e)
    threads = [threading.Thread(target=calls) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(t < float("inf") for t in program.choice.best)
    np.testing.assert_array_equal(first.numpy(), expected)


def test_thread_choice_spaces_its_re_checks_out():
    """The calls of a round: an untimed split call (it wakes the workers), _TRIALS timed
    split calls, an untimed serial call, _TRIALS timed serial calls (each way timed in a
    run of it, D124); rounds start after 16 calls, 32, ... at most every 1024: a long run
    pays for few slow calls."""
    from runtimes.cpu_choice import ThreadChoice, _RECHECK, _TRIALS
    choice, calls = ThreadChoice(), []
    for _ in range(6000):
        split, timed = choice.next_way()
        calls.append((split, timed))
        if timed:
            choice.record(split, 1.0 if split else 2.0)  # split always faster
    one = [(True, False)] + [(True, True)] * _TRIALS + [(False, False)] + [(False, True)] * _TRIALS
    assert calls[:len(one)] == one
    starts = [i for i in range(len(calls)) if calls[i:i + len(one)] == one]
    between = [way for a, b in zip(starts, starts[1:]) for way in calls[a + len(one):b]]
    assert choice.split is True and set(between) == {(True, False)}  # untimed, the choice
    assert starts[:2] == [0, len(one) - 1 + _RECHECK[0]]
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert gaps[:3] == [len(one) - 1 + k * _RECHECK[0] for k in (1, 2, 4)]
    assert max(gaps) == len(one) - 1 + _RECHECK[1]


def test_thread_choice_goes_by_each_ways_median_not_its_best_call():
    """A split call's time varies by itself (a worker late to its piece, rows another core
    wrote last): a way is timed by the median of its round's calls, so a split that is
    fast once and slow as a rule loses to a steady serial way (D124: a 64 x 1000
    layernorm ran split at 15.5 us a call, its best call 10.6, serial 11.9). The lowest
    median over rounds is kept: a slow round (a busy machine) does not undo a choice."""
    from runtimes.cpu_choice import ThreadChoice
    choice = ThreadChoice()
    split_times = iter([1.0, 5.0, 5.0, 1.0, 6.0, 6.0] + [9.0] * 100)
    for _ in range(200):
        split, timed = choice.next_way()
        if timed:
            choice.record(split, next(split_times) if split else 2.0)
    assert choice.split is False and choice.best == [2.0, 5.0]
    cold = ThreadChoice(wake=False)  # (no untimed calls: a wake-up is part of the cost)
    assert all(timed for _, timed in cold.calls)


def test_a_call_that_would_wake_the_workers_has_a_choice_of_its_own():
    """D97: a near-bound kernel called when the workers sleep (an eager op after a pause
    longer than their spin) chooses with a ThreadChoice of its own, whose split trials
    include the wake-up (15-20 us, more than such a kernel saves: a 64 x 1000 layernorm
    42 -> 32 us a call, THREADS=1 28); calls that find them spinning keep the other."""
    from runtimes import cpu_choice
    spec, program, ptrs, first = _near_bound_program()
    expected = first.numpy().copy()
    real_pieces, real_here = program.run_pieces, program.here
    ways: list[str] = []

    def pieces(*args):  # a split call that must wake a worker: slower than serial
        ways.append("split")
        time.sleep(0.004)
        real_pieces(*args)

    def serial(*args):
        ways.append("serial")
        time.sleep(0.002)
        real_here(*args)
    program.run_pieces, program.here = pieces, serial
    program.workers_asleep = lambda helpers: True
    program.called = -1.0  # (the capture's call just ran it: no loop of it, D97's addendum)
    try:
        warm = program.choice = cpu_choice.ThreadChoice()
        cold = program.cold = cpu_choice.ThreadChoice(wake=False)
        for _ in range(2 * cpu_choice._TRIALS + 4):
            program(*ptrs, global_size=spec.global_size, local_size=spec.local_size)
            np.testing.assert_array_equal(first.numpy(), expected)
    finally:
        program.run_pieces, program.here = real_pieces, real_here
    # the cold round has no untimed wake-up call: split and serial in turn, then serial
    assert ways == ["split", "serial"] * cpu_choice._TRIALS + ["serial"] * 4, ways
    assert cold.split is False and cold.best[0] < cold.best[1]
    assert warm.best == [float("inf"), float("inf")]  # never asked


def test_a_loop_of_one_kernel_goes_by_the_choice_for_spinning_workers(monkeypatch):
    """Serial calls let the workers sleep, so in a loop of one near-bound kernel each call
    found them asleep and used the cold choice, which pays a wake-up on every split: such
    a loop stayed serial until the cold choice's next round, up to 1024 calls (64 x 1000
    softmax after torch's ops: 28 us a call, where split runs 20). A call less than the
    workers' spin (SPIN_US) after the kernel's previous one uses the warm choice; one
    further apart the cold one. Results are the same either way."""
    from types import SimpleNamespace
    from runtimes import cpu_choice, cpu_llvm
    spec, program, ptrs, first = _near_bound_program()
    expected = first.numpy().copy()
    asked: list[str] = []

    class Spy(cpu_choice.ThreadChoice):
        __slots__ = ("name",)

        def next_way(self):
            asked.append(self.name)
            return super().next_way()
    program.choice, program.cold = Spy(), Spy(wake=False)
    program.choice.name, program.cold.name = "warm", "cold"
    program.called = -1.0
    program.workers_asleep = lambda helpers: True
    clock = [1000.0]
    monkeypatch.setattr(cpu_llvm, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    spin = cpu_llvm._threading()[1] * 1e-6
    for gap in [0.0, spin / 2, spin / 2, spin * 10, spin / 4]:
        clock[0] += gap
        program(*ptrs, global_size=spec.global_size, local_size=spec.local_size)
        np.testing.assert_array_equal(first.numpy(), expected)
    assert asked == ["cold", "warm", "warm", "cold", "warm"], asked


def test_the_crew_says_whether_a_job_would_wait_for_a_worker():
    """`Crew.asleep`: after a job the worker serves (spins) for SPIN_US, then sleeps; a
    job then would wait for its wake-up. flags[SERVING + i] say which (runtimes/cpu_crew.py).
    (A job need not wake a worker whose spin ends as it is posted: the caller may take
    every piece itself. So jobs are posted until the worker is seen serving.)"""
    spec, program, ptrs, first = _near_bound_program()
    crew = program.host.crew()
    served, deadline = False, time.monotonic() + 2.0
    while not served and time.monotonic() < deadline:
        program.run_pieces([p[1] for p in ptrs], spec.global_size[0], 4, 1, 2000)
        for _ in range(20):  # (sleeping releases the GIL: a woken worker takes it)
            time.sleep(0.0001)
            served = served or not crew.asleep(1)
    assert served, "no job found the worker serving"
    deadline = time.monotonic() + 1.0
    while not crew.asleep(1) and time.monotonic() < deadline:
        time.sleep(0.001)
    assert crew.asleep(1), "the worker still serves a second after a 2 ms spin"
    assert crew.asleep(len(crew.wakeups) + 1)  # a worker not yet started


def test_cpu_host_refuses_a_function_the_binary_lacks():
    """Looking up a symbol the object file does not define raises; calling the address 0
    it would otherwise give kills the process."""
    compiler = LLVMCompiler()
    binary = compiler.compile("define void @present() {\nentry:\n  ret void\n}\n")
    host = Host(compiler)
    assert host.load("present", binary) != 0
    with pytest.raises(RuntimeError, match="no function 'absent'"):
        host.load("absent", binary)
    # an engine frees the target machine it was given: this host's engine must not have
    # taken the one every compile uses (compiling after it is gone crashed the process)
    del host
    gc.collect()
    assert compiler.compile("define void @again() {\nentry:\n  ret void\n}\n")


def test_cpu_kernel_with_more_buffers_than_the_shared_piece_functions():
    """Piece functions for up to 16 buffers come with the crew; a kernel with more buffers
    gets its own, and still splits across threads correctly."""
    arrays = [rnd(300, 1000, seed=i) for i in range(17)]
    Capture.items = []
    try:
        out = functools.reduce(lambda a, b: a + b, [Tensor(a) for a in arrays]).realize()
        (spec, program, _), = Capture.items
    finally:
        Capture.items = None
    assert len(spec.buf_dtypes) == 18 and program.threaded
    np.testing.assert_allclose(out.numpy(), np.sum(arrays, axis=0), rtol=1e-5, atol=1e-5)


def test_the_crew_writes_only_the_flags_it_is_given(monkeypatch):
    """crew_serve's flags are the ones its caller passes, nothing past them: the spin
    calibration handed it a single int64 while it wrote the serving flag 256 slots
    further (D97), a heap write that crashed the process now and then, later, in the
    garbage collector (seen twice: a test run, a benchmark child). The calibration runs
    here on flags inside a block of sentinels; only its own slots may change."""
    import ctypes
    from runtimes import cpu_crew
    _, program, _, _ = _near_bound_program()
    crew = program.host.crew()
    block = (ctypes.c_int64 * 1024)(*[7] * 1024)

    def buffers():
        mailbox = (ctypes.c_int64 * 24)()
        flag, serving = (ctypes.c_int64.from_buffer(block, 8 * i) for i in (100, 101))
        flag.value = serving.value = 0
        return mailbox, flag, serving
    monkeypatch.setattr(cpu_crew, "_calibration_buffers", buffers)
    assert crew._calibrate() > 0
    assert (block[100], block[101]) == (1, 0)  # said asleep, no longer serving
    assert [i for i, v in enumerate(block) if v != 7 and i not in (100, 101)] == []
