"""A sequence of launches run again and again (an engine plan, a jit replay) with CPU
kernels near the thread bound times whole runs split and serial, and keeps the faster
(runtimes/cpu_choice.py, D134)."""
import numpy as np
import pytest

from codegen.helpers import Context
from lazyten import Tensor, jit
from lazyten.schedule_cache import _SCHEDULES
from runtimes import cpu_choice
import runtimes.cpu_crew as cpu_crew


def rows(n: int, width: int = 1024, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, width)).astype(np.float32)


def centred_exp(x: Tensor) -> Tensor:
    """A reduce over the rows and an elementwise kernel over x: two kernels near the
    thread bound at 512 x 1024."""
    return x.exp().sum(0, keepdim=True) * x


def expected(x: np.ndarray) -> np.ndarray:
    return np.exp(x).sum(0, keepdims=True) * x


@pytest.fixture
def crew_jobs(monkeypatch):
    """The jobs posted to the worker threads while the test runs (a split kernel's)."""
    jobs = []
    real = cpu_crew.Crew.run

    def run(self, values, chunks, helpers, spin_us):
        jobs.append(chunks)
        return real(self, values, chunks, helpers, spin_us)
    monkeypatch.setattr(cpu_crew.Crew, "run", run)
    return jobs


def plan_of(x: Tensor):
    """The engine's plan for centred_exp(x) (made on the second run of its schedule)."""
    _SCHEDULES.clear()
    for _ in range(3):
        centred_exp(x).realize()
    plans = [t.plan for t in _SCHEDULES.values() if t.plan]
    assert len(plans) == 1
    return plans[0]


def decided(choice: cpu_choice.SequenceChoice, split: bool) -> None:
    """Make `choice` as if its rounds had found `split` faster, with no round for a while."""
    choice.choice.calls, choice.choice.split, choice.choice.countdown = [], split, 10 ** 9


def test_a_plan_with_near_bound_kernels_has_a_sequence_choice_and_one_without_none():
    with Context(THREADS=2):
        assert plan_of(Tensor(rows(512)).realize()).threads is not None
        assert plan_of(Tensor(rows(8)).realize()).threads is None  # too small to split


def test_a_plan_chosen_serial_runs_no_kernel_on_the_workers(crew_jobs):
    """Whole runs found faster serial: every kernel of the plan runs on this thread (no job
    for the workers), the large ones too, with the same values; chosen split, its kernels
    split again as they do alone (a large kernel always)."""
    data = rows(512)
    x = Tensor(data).realize()
    with Context(THREADS=2):
        plan = plan_of(x)
        decided(plan.threads, split=False)
        crew_jobs.clear()
        for _ in range(3):
            np.testing.assert_allclose(centred_exp(x).numpy(), expected(data), rtol=1e-5)
        assert crew_jobs == []
        assert not cpu_choice.SEQUENCE.serial, "the way is reset after each run"
        big = Tensor(rows(8192, seed=1)).realize()  # 32 MB: always split, alone
        crew_jobs.clear()
        centred_exp(big).realize()
        assert crew_jobs, "a large kernel outside the plan still splits"


def test_whole_runs_are_timed_each_way_and_the_faster_kept(monkeypatch):
    """The first runs alternate split and serial, timed; slower split runs leave the plan
    serial, slower serial runs leave it split; an error stops a run untimed."""
    for slow_split in (True, False):
        choice = cpu_choice.SequenceChoice()
        clock = [0.0]
        monkeypatch.setattr(cpu_choice.time, "perf_counter", lambda: clock[0])
        for _ in range(2 * cpu_choice._TRIALS):
            way, start = choice.begin()
            assert cpu_choice.SEQUENCE.serial == (not way)
            clock[0] += 2.0 if way == slow_split else 1.0
            choice.end(way, start, finished=True)
            assert not cpu_choice.SEQUENCE.serial
        assert choice.choice.split == (not slow_split)
    way, start = choice.begin()
    choice.end(way, start, finished=False)  # not recorded
    assert choice.choice.times == ([], [])


def test_a_jit_replay_chosen_serial_runs_no_kernel_on_the_workers(crew_jobs):
    """The same for a jit replay: made with its launchers, serial when so decided."""
    data = rows(512)

    @jit
    def step(x):
        return centred_exp(x)
    with Context(THREADS=2):
        for _ in range(3):
            out = step(Tensor(data))
        replay = step._replay
        assert replay is not None and replay.threads is not None
        decided(replay.threads, split=False)
        crew_jobs.clear()
        for seed in range(3):
            other = rows(512, seed=seed + 5)
            out = step(Tensor(other))
            np.testing.assert_allclose(out.numpy(), expected(other), rtol=1e-5)
        assert crew_jobs == []



def refuse_python_launches(monkeypatch) -> None:
    """From now on, fail any launch of a CPU kernel through Python (`split`, `here`)."""
    from runtimes.cpu_llvm import CPUProgram

    def refuse(self, *args, **kwargs):
        raise AssertionError("a serial run went through Python to launch a kernel")
    monkeypatch.setattr(CPUProgram, "split", refuse)
    monkeypatch.setattr(CPUProgram, "here", refuse)


def test_a_plan_or_replay_chosen_serial_calls_each_kernel_natively(monkeypatch):
    """A serial run calls each kernel's own launcher over its whole outer loop, with no
    Python deciding, per launch, to run it here (bilstm's step: 236 such launches a step);
    the values are the same."""
    data = rows(512)
    x = Tensor(data).realize()

    @jit
    def step(x):
        return centred_exp(x)
    with Context(THREADS=2):
        plan = plan_of(x)
        for _ in range(3):
            step(Tensor(data))
        replay = step._replay
        assert replay is not None and replay.threads is not None
        decided(plan.threads, split=False)
        decided(replay.threads, split=False)
        refuse_python_launches(monkeypatch)
        for seed in range(3):
            other = rows(512, seed=seed + 7)
            np.testing.assert_allclose(centred_exp(Tensor(other).realize()).numpy(),
                                       expected(other), rtol=1e-5)
            np.testing.assert_allclose(step(Tensor(other)).numpy(), expected(other), rtol=1e-5)
