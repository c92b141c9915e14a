"""Native code writes only where its caller said it may (the finder of D97's heap write).

The crew's functions and the launch builtins are LLVM IR that write into memory Python
owns (ctypes arrays). A write past an array is silent until something else, later, trips
on the damage (a segfault in the garbage collector): so each entry point runs here on
arrays placed inside a block of sentinels, and the test lists every slot that changed
outside the ones its contract names. (crew_serve: tests/unit/test_engine.py;
cuda_launch: tests/backend/test_cuda.py.)
"""
import ctypes

from runtimes.cpu_crew import Crew
from tests.unit.test_engine import _near_bound_program

SENTINEL = 7


def _block(n: int = 1024) -> ctypes.Array:
    return (ctypes.c_int64 * n)(*[SENTINEL] * n)


def _at(block: ctypes.Array, slot: int) -> int:
    return ctypes.addressof(block) + 8 * slot


def _changed(block: ctypes.Array, before: list[int], allowed: set[int]) -> list[int]:
    """The slots that changed since `before` outside `allowed`."""
    return [i for i, (v, w) in enumerate(zip(block, before)) if v != w and i not in allowed]


def _crew() -> Crew:
    _, program, _, _ = _near_bound_program()
    return program.host.crew()


def test_crew_post_writes_its_mailbox_slots_flags_and_woken_only():
    """Both ways of waking: with mailbox slot 18 empty it counts the sleepers for Python's
    queues; with the C library's syscall there (D133) it wakes their futexes itself and
    counts none. It reads slots 18 and 19 and writes neither."""
    crew = _crew()
    for futex in (None, crew.futex):
        block = _block()
        mailbox, flags, woken = 0, 100, 200  # where each array starts in the block
        for i, asleep in enumerate((1, 0, 1)):
            block[flags + i], block[woken + i] = asleep, 0
        block[mailbox + 18], block[mailbox + 19] = futex if futex is not None else (0, 0)
        word = 5 << 32  # job 5, no pieces: nobody takes anything
        before = list(block)
        count = crew.post(_at(block, mailbox), word, 123, _at(block, flags), 3,
                          _at(block, woken))
        by_queue = [1, 0, 1] if futex is None else [0, 0, 0]
        assert count == sum(by_queue)
        assert [block[woken + i] for i in range(3)] == by_queue  # who Python must wake
        assert [block[flags + i] for i in range(3)] == [0, 0, 0]  # (now being woken)
        assert (block[mailbox], block[mailbox + 8], block[mailbox + 17]) == (word, 0, 123)
        allowed = {mailbox, mailbox + 8, mailbox + 17} | {flags + i for i in range(3)} | \
            {woken + i for i in range(3)}
        assert _changed(block, before, allowed) == []


def test_crew_work_without_a_syscall_writes_its_two_flags_only():
    """crew_work with mailbox slot 18 empty serves once and returns, as crew_serve."""
    crew, block = _crew(), _block()
    block[0], block[17], block[18] = 0, 0, 0  # no job, no spin, no native sleep
    before = list(block)
    crew.work(_at(block, 0), _at(block, 300), _at(block, 301), 1)
    assert (block[300], block[301]) == (1, 0)
    assert _changed(block, before, {300, 301}) == []


def test_crew_finish_of_a_finished_job_writes_nothing():
    crew, block = _crew(), _block()
    block[0], block[8] = 5 << 32, 4  # no pieces left, four finished
    before = list(block)
    crew.finish(_at(block, 0), 4)
    assert _changed(block, before, set()) == []


def test_crew_serve_writes_its_two_flags_only():
    crew, block = _crew(), _block()
    block[0], block[17] = 0, 0  # no job, no spin: it says "asleep" at once
    before = list(block)
    crew.serve(_at(block, 0), _at(block, 300), _at(block, 301), 1)
    assert (block[300], block[301]) == (1, 0)
    assert _changed(block, before, {300, 301}) == []


def test_a_job_record_has_room_for_every_value():
    """crew_run writes each value of a job into the crew's record (`Crew._record`)."""
    crew = _crew()
    for n in (1, 31, 32, 33, 70):
        assert len(crew._record(n)) >= n
