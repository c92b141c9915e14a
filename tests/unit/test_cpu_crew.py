"""The CPU's worker threads (runtimes/cpu_crew.py): jobs posted to a mailbox, pieces taken
in native code, workers that spin between jobs and sleep when idle."""
import os
import threading
import time

import llvmlite.binding as llvm
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from codegen.helpers import Context
from lazyten import Tensor
from lazyten.realize import Capture
import runtimes.cpu_choice as cpu_choice
import runtimes.cpu_crew as cpu_crew
import runtimes.cpu_host as cpu_host


def in_place_add(rows: int, cols: int = 64):
    """A tensor of zeros and the split kernel that adds 1 to it in place: a piece run
    twice shows as 2 more, a piece skipped as 0 more."""
    x = Tensor(np.zeros((rows, cols), np.float32)).realize()
    Capture.items = []
    try:
        x.assign(x + 1).realize()
        (spec, program, buffers), = Capture.items
    finally:
        Capture.items = None
    assert program.threaded
    return x, program, [b.ensure_allocated()[1] for b in buffers], spec.global_size[0]


@pytest.mark.parametrize("rows", [1, 7, 37, 200])
def test_every_row_runs_once_whatever_the_pieces(rows):
    """With any number of pieces (one, fewer than the threads, more than the rows), on
    four threads at once, every row of the kernel's outer loop runs exactly once."""
    x, program, ptrs, n = in_place_add(rows)
    expected = 1
    for chunks in (1, 2, 3, max(n // 3, 1), n, 4 * n + 1):
        program.run_pieces(ptrs, n, chunks, helpers=3)
        expected += 1
        np.testing.assert_array_equal(x.numpy(), np.full((rows, 64), expected, np.float32))


@pytest.mark.parametrize("threads,chunks", [(2, 8), (2, 6), (4, 8), (3, 7), (1, 5)])
def test_pieces_taken_in_turn_walk_one_share_per_thread(threads, chunks):
    """The j-th piece taken runs block (j % T) * (chunks / T) + j // T of the outer loop
    where T (in the record above the chunks) divides the chunks, else block j: threads
    taking pieces in turn each walk one contiguous share, the same rows every call (D102:
    64 x 1000 softmax on 2 cores 18.7 -> 12-14.5 us). Piece by piece, on this thread."""
    import ctypes
    x, program, ptrs, n = in_place_add(chunks)  # one row per block
    record = (ctypes.c_int64 * 8)(program.piece, program.address, n, chunks | threads << 32,
                                  ptrs[0])
    piece = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(program.piece)
    share = chunks // threads if chunks % threads == 0 else None
    for j in range(chunks):
        before = x.numpy()[:, 0].copy()
        piece(ctypes.addressof(record), j)
        ran = np.flatnonzero(x.numpy()[:, 0] != before)
        block = j if share is None else (j % threads) * share + j // threads
        assert ran.tolist() == [block], (j, ran)


jobs = st.lists(st.tuples(st.integers(0, 2), st.integers(1, 70), st.integers(1, 3),
                          st.sampled_from([0, 5, 300])), min_size=1, max_size=40)


@settings(deadline=None, max_examples=300)
@given(work=st.integers(0, 1 << 30), extra=st.integers(0, 1 << 20), threads=st.integers(1, 16))
def test_pieces_scale_with_the_kernels_work(work, extra, threads):
    """A split hands out a multiple of the threads, one piece a thread at least, at most 16
    a thread and no more than the loop has, and pieces of _WORK_PER_PIECE at least where
    it gives a thread more than one (each piece handed out costs its claim and call). (The
    loop has a row a thread at least: split runs on min(THREADS, n) threads.)"""
    n = threads + extra
    count = cpu_choice.pieces(work, n, threads)
    assert count % threads == 0 and threads <= count <= min(n, 16 * threads)
    assert count == threads or work // count >= cpu_choice._WORK_PER_PIECE
    if work >= 16 * threads * cpu_choice._WORK_PER_PIECE and n >= 16 * threads:
        assert count == 16 * threads


def test_a_small_split_kernel_hands_out_a_piece_a_thread(monkeypatch):
    """A kernel just over the thread bound (a 512 x 512 add: 1 MB moved) is cut into as
    many pieces as its work fills (4 on two threads), where every kernel took 16 a
    thread (32 hand-outs of ~0.3 us each: a 65536-element update ran 17.8 us split, 10.0
    in one piece a thread)."""
    x = Tensor(np.zeros((512, 512), np.float32)).realize()
    Capture.items = []
    try:
        (x + 1).realize()
        (spec, program, buffers), = Capture.items
    finally:
        Capture.items = None
    taken = []
    monkeypatch.setattr(program, "run_pieces", lambda ptrs, n, chunks, *rest: taken.append(chunks))
    monkeypatch.setattr(program, "choice", None)  # (split, not timed both ways)
    with Context(THREADS=2):
        program.split(spec.global_size[0], *[b.ensure_allocated() for b in buffers])
    assert taken == [program.work // cpu_choice._WORK_PER_PIECE // 2 * 2] == [4]


@settings(max_examples=25, deadline=None)
@given(jobs)
def test_back_to_back_jobs_run_every_piece_once(sequence):
    """Jobs on three buffers in a random order, each in 1-70 pieces with 1-3 helpers and
    workers that sleep at once (0), soon (5 us) or spin (300 us): a worker that woke late
    or read a record while it was rewritten must not run a piece of a finished job (that
    would add 1 to a buffer twice, or race the next job on it)."""
    targets = [in_place_add(rows) for rows in (5, 37, 200)]
    expected = [1, 1, 1]  # the capture's own call
    for which, chunks, helpers, spin_us in sequence:
        x, program, ptrs, n = targets[which]
        with Context(SPIN_US=spin_us):
            program.run_pieces(ptrs, n, chunks, helpers)
        expected[which] += 1
        got = x.numpy()  # every piece is finished when run_pieces returns
        assert (got == expected[which]).all(), \
            f"expected every element {expected[which]}, got {np.unique(got)}"
    for (x, *_), count in zip(targets, expected):
        assert (x.numpy() == count).all(), f"a late piece changed a buffer: {np.unique(x.numpy())}"


def test_idle_workers_spin_then_sleep_and_are_woken():
    """After a job a worker polls the mailbox for SPIN_US (no wake-up needed for the next
    job), then sleeps; a job posted to a sleeping worker wakes it (else it would never
    take part again: the second half of this test waits on its flag)."""
    x, program, ptrs, n = in_place_add(400)
    crew = cpu_host._CREW
    with Context(SPIN_US=200_000):
        program.run_pieces(ptrs, n, 64, 1)
    time.sleep(0.05)
    assert crew.flags[0] == 0, "a worker slept within its spin window"
    with Context(SPIN_US=0):
        program.run_pieces(ptrs, n, 64, 1)
    deadline = time.time() + 10
    while crew.flags[0] != 1 and time.time() < deadline:
        time.sleep(0.001)
    assert crew.flags[0] == 1, "an idle worker with no spin window did not go to sleep"
    with Context(SPIN_US=200_000):
        program.run_pieces(ptrs, n, 64, 1)  # posts to a sleeper: it must be woken
    deadline = time.time() + 10
    while crew.flags[0] != 0 and time.time() < deadline:
        time.sleep(0.001)
    assert crew.flags[0] == 0, "a sleeping worker was not woken by a new job"
    np.testing.assert_array_equal(x.numpy(), np.full((400, 64), 4, np.float32))


def test_two_python_threads_split_kernels_at_the_same_time():
    """Callers on two threads share the crew: their jobs run one at a time, each whole."""
    targets = [in_place_add(300), in_place_add(301)]
    errors = []

    def caller(x, program, ptrs, n):
        try:
            for _ in range(200):
                program.run_pieces(ptrs, n, 16, 1)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
    threads = [threading.Thread(target=caller, args=t) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and not any(t.is_alive() for t in threads)
    for x, *_ in targets:
        np.testing.assert_array_equal(x.numpy(), np.full(x.shape, 201, np.float32))


def test_a_forked_child_hires_its_own_workers():
    """A forked child has none of its parent's threads: it starts a crew of its own (or it
    would post jobs no worker takes, and wait for sleepers that do not exist)."""
    if not hasattr(os, "fork"):
        return
    x, program, ptrs, n = in_place_add(300)
    program.run_pieces(ptrs, n, 16, 1)  # the parent's crew has a worker
    pid = os.fork()
    if pid == 0:  # the child: exit code 0 if its split kernel was right
        try:
            with Context(SPIN_US=0):
                for _ in range(3):
                    program.run_pieces(ptrs, n, 16, 1)
            os._exit(0 if (x.numpy() == 5).all() else 1)
        except BaseException:  # noqa: BLE001
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0, f"the child's split kernel failed ({status})"
    np.testing.assert_array_equal(x.numpy(), np.full((300, 64), 2, np.float32))


def test_support_code_asks_for_the_spin_hint_of_the_machine():
    """x86 spins with `pause`, AArch64 with `yield`; other machines spin without a hint."""
    from codegen.renderer.llvm_crew import support_ir
    assert "@llvm.x86.sse2.pause()" in support_ir("x86_64-unknown-linux-gnu", 2)
    assert "@llvm.aarch64.hint(i32 1)" in support_ir("aarch64-unknown-linux-gnu", 2)
    other = support_ir("riscv64-unknown-linux-gnu", 2)
    assert "pause" not in other and "hint" not in other and "define void @piece_2" in other
    llvm.parse_assembly(other).verify()  # valid IR without a hint too


def test_a_split_kernel_returns_after_the_workers_pieces():
    """run_pieces returns only when every piece is finished, the workers' included: the
    pieces here are slow (a sine per element), so a caller that
    returned after its own share would read rows a worker is still writing."""
    x = Tensor(np.zeros((8, 1 << 16), np.float32)).realize()
    Capture.items = []
    try:
        x.assign(x + 1 + (x * 0).sin()).realize()
        (spec, program, buffers), = Capture.items
    finally:
        Capture.items = None
    ptrs, n = [b.ensure_allocated()[1] for b in buffers], spec.global_size[0]
    for expected in range(2, 12):
        program.run_pieces(ptrs, n, 8, 1)  # 8 pieces of about 0.4 ms
        got = x.numpy()
        assert (got == expected).all(), f"run {expected - 1}: rows {np.unique(got)}, not {expected}"


def private_crew():
    """A crew of its own (the process's stays as it is), with the job of in_place_add(400)
    to run on it: `job(spin_us)` runs it on one worker and this thread."""
    from runtimes.cpu_crew import Crew
    x, program, ptrs, n = in_place_add(400)
    shared = cpu_host._CREW
    crew = Crew(shared.functions, shared.keep, shared.runner)

    def job(spin_us: int) -> None:
        crew.run([program.piece, program.address, n, 64 | 2 << 32, *ptrs], 64, 1, spin_us)
    return crew, job, x


def wait_for(condition, seconds: float = 10.0) -> bool:
    deadline = time.time() + seconds
    while not condition() and time.time() < deadline:
        time.sleep(0.001)
    return condition()


def test_stop_ends_every_spin_at_once():
    """At exit the crew ends its workers' spins and native sleeps and waits until they are
    out of native code (the engine holding that code may be freed after): with a 100 s
    spin window they are all asleep in Python within a fraction of a second, and jobs
    after it still run (they wake the workers in Python)."""
    crew, job, x = private_crew()
    with Context(SPIN_US=100_000_000):
        job(100_000_000)
    assert wait_for(lambda: crew.flags[cpu_crew.SERVING] == 1), "the worker should be polling"
    start = time.monotonic()
    crew.stop(timeout=5)
    assert all(out.is_set() for out in crew.outs), "a worker still in native code after stop()"
    assert all(crew.flags[i] == 1 for i in range(len(crew.wakeups))), \
        f"workers not asleep after stop(): flags {list(crew.flags[:len(crew.wakeups)])}"
    assert time.monotonic() - start < 1
    for _ in range(3):
        job(0)
    np.testing.assert_array_equal(x.numpy(), np.full((400, 64), 5, np.float32))


def test_a_worker_asleep_in_native_code_is_woken_by_the_post():
    """Where the C library's syscall is known (Linux on x86-64 and AArch64), an idle worker
    sleeps on a futex and the job's post wakes it, in native code: nothing goes through
    its Python queue (a worker woken there must take the GIL before it can serve, D133).
    Elsewhere it sleeps in Python, and the post leaves the wake-up to the queue."""
    import platform
    import sys
    crew, job, x = private_crew()
    native = sys.platform.startswith("linux") and platform.machine().lower() in ("x86_64", "aarch64")
    assert (crew.futex is not None) == native
    job(0)
    assert wait_for(lambda: crew.flags[0] == 1), "an idle worker with no spin did not sleep"
    assert wait_for(lambda: crew.flags[cpu_crew.SERVING] == 0)
    put = []
    queue = crew.wakeups[0]

    class Recording:
        def put(self, item):
            put.append(item)
            queue.put(item)
    crew.wakeups[0] = Recording()
    job(200_000)  # posted to the sleeper: it must be woken, and then spin
    assert wait_for(lambda: crew.flags[cpu_crew.SERVING] == 1), "the worker was not woken"
    assert bool(put) != native, f"queue wake-ups: {len(put)} (native sleep: {native})"
    crew.stop()
    np.testing.assert_array_equal(x.numpy(), np.full((400, 64), 3, np.float32))


@pytest.fixture(params=["builtin", "ctypes"])
def crew_way(request):
    """The crew's jobs posted through the crew_run builtin (one call), or through ctypes
    (two calls, where no builtin can be made): both must run every piece once."""
    in_place_add(3)  # the crew exists
    crew = cpu_host._CREW
    native = crew.native
    if request.param == "builtin":
        assert native is not None, "this CPython has the C API: the crew_run builtin is made"
    else:
        crew.native = None
    try:
        yield request.param
    finally:
        crew.native = native


@settings(max_examples=15, deadline=None)
@given(jobs)
def test_both_ways_of_posting_run_every_piece_once(crew_way, sequence):
    """As test_back_to_back_jobs_run_every_piece_once, through each way of posting."""
    targets = [in_place_add(rows) for rows in (5, 37, 200)]
    expected = [1, 1, 1]
    for which, chunks, helpers, spin_us in sequence:
        x, program, ptrs, n = targets[which]
        with Context(SPIN_US=spin_us):
            program.run_pieces(ptrs, n, chunks, helpers)
        expected[which] += 1
        assert (x.numpy() == expected[which]).all(), (crew_way, np.unique(x.numpy()))


def test_crew_run_refuses_bad_arguments_before_posting():
    """The crew_run builtin with too few arguments, or a record value that is no int,
    raises TypeError and posts nothing (the mailbox's job word is unchanged)."""
    in_place_add(3)
    crew = cpu_host._CREW
    assert crew.native is not None
    crew._record(8)
    before = crew.mailbox[0]
    with pytest.raises(TypeError, match="crew_run takes"):
        crew.runner(1, 2, 3)
    with pytest.raises(TypeError):
        crew.native((crew.seq << 32) | 2, 0, 1, 2, crew.record_address, 0, "kernel", 4, 2)
    assert crew.mailbox[0] == before


def test_a_refused_job_raises_and_the_crew_goes_on():
    """A job whose record holds a value that is no int: Crew.run raises TypeError without
    waiting for pieces of a job that was never posted, and the next job runs whole."""
    x, program, ptrs, n = in_place_add(37)
    crew = cpu_host._CREW
    assert crew.native is not None
    with pytest.raises(TypeError):
        crew.run([program.piece, program.address, n, 4, "memory"], 4, 1, 300)
    program.run_pieces(ptrs, n, 4, 1)
    np.testing.assert_array_equal(x.numpy(), np.full((37, 64), 2, np.float32))
