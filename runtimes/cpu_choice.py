"""Serial or split: the choice for a CPU kernel near the thread bound [D58], made by
timing calls both ways (runtimes/cpu_llvm.py asks it on each call of such a kernel). A
kernel keeps two: one for calls that find the worker threads awake (spinning after a
split kernel), one for calls that would have to wake them (D97). And how many pieces a
split takes (`pieces`, D135)."""
from __future__ import annotations
import math
import time
from typing import Any, Iterable

_TRIALS = 3  # timed calls of each way in a round; its median is the way's time that round
_RECHECK = (16, 1024)  # rounds after 16 calls, 32, ... up to every 1024
_PIECES_PER_THREAD = 16  # most pieces of a split kernel's outer loop per thread (D41, D74)
_WORK_PER_PIECE = 1 << 17  # least work (flops, or 4-byte words moved) a piece gets (D135)


def pieces(work: int, n: int, threads: int) -> int:
    """How many pieces a kernel of `work` splits its outer loop [0, n) into on `threads`
    threads (n >= threads): up to _PIECES_PER_THREAD a thread, so one that starts late or
    runs slow leaves its pieces to the others, but none with less than _WORK_PER_PIECE of
    work, since each piece handed out costs about 0.3 us (the claim, the call: a 65536-
    element update split 17.8 us in 32 pieces, 10.0 in 2), and a multiple of the threads,
    so taken in turn each thread walks one share (D102)."""
    most = min(n, threads * _PIECES_PER_THREAD, max(threads, work // _WORK_PER_PIECE))
    return most - most % threads


class ThreadChoice:
    """Serial or split for one kernel near the thread bound [D58]. A round times _TRIALS
    calls of each way, in rounds after 16 calls, 32, ... up to every 1024; a way's time is
    the lowest median of its rounds, and the faster way is kept. The median, since a split
    call's time varies by itself (a worker late to its piece, rows another core wrote
    last): its best call is not what it costs (a 64 x 1000 layernorm: split at best 10.6
    us, at its median 15.5, serial 11.9 either way). The lowest over rounds, since a round
    run while the second core was busy (another process; torch's threads still spinning
    after its own op, in a side-by-side run) would otherwise decide until the next one.
    Each way's timed calls follow an untimed call of that way (D124): they measure a run
    of that way, its rows where that way left them; timed in turn, each serial call first
    fetched the rows the split call's worker had written (that layernorm's serial calls
    at 20.9 us, where a run of them takes 11.9). The untimed split call also wakes the
    workers (after a long stretch of serial calls they sleep, and a wake-up timed as
    split's cost kept a kernel serial). With `wake` False (the choice for calls that find
    the workers asleep, D97) a round times the two ways in turn with no untimed calls:
    there a wake-up is what a split call costs."""
    __slots__ = ("best", "split", "calls", "countdown", "gap", "wake", "times")

    def __init__(self, wake: bool = True) -> None:
        self.best = [math.inf, math.inf]  # serial, split: the lowest median of each way
        self.split = False  # the choice: split the outer loop across the threads
        self.wake = wake
        self.times: tuple[list[float], list[float]] = ([], [])  # this round's, by way
        self.calls = self._round()  # the rest of this round's calls: (split, timed)
        self.countdown = 0  # calls until the next round
        self.gap = _RECHECK[0]

    def _round(self) -> list[tuple[bool, bool]]:
        if self.wake:
            return [(True, False)] + [(True, True)] * _TRIALS + \
                [(False, False)] + [(False, True)] * _TRIALS
        return [(True, True), (False, True)] * _TRIALS

    def next_way(self) -> tuple[bool, bool]:
        """(split, timed) for this call. Threads may call one kernel at once: a round's
        call that another thread took first leaves this one untimed (list.pop is atomic)."""
        if not self.calls:
            self.countdown -= 1
            if self.countdown > 0:
                return self.split, False
            self.calls = self._round()
        try:
            return self.calls.pop(0)
        except IndexError:
            return self.split, False

    def record(self, split: bool, seconds: float) -> None:
        """A timed call's time; after a round's last, the choice."""
        self.times[split].append(seconds)
        if not self.calls:
            for way, times in enumerate(self.times):
                if times:
                    self.best[way] = min(self.best[way], sorted(times)[len(times) // 2])
                    times.clear()
            self.split = self.best[1] < self.best[0]
            self.countdown, self.gap = self.gap, min(2 * self.gap, _RECHECK[1])


class Sequence:
    """`serial`: whether CPU kernels run serial whatever their thread bounds and choices,
    set while a sequence of launches that chose so runs (SequenceChoice). One for the
    process: a sequence run on another thread at the same time runs that way too (the same
    results; only its speed changes)."""
    __slots__ = ("serial",)

    def __init__(self) -> None:
        self.serial = False


SEQUENCE = Sequence()


class SequenceChoice:
    """For a sequence of launches run again and again (a plan of the engine, a jit replay)
    with kernels near the thread bound: whether its kernels split as they do alone (the
    large ones always, those near the bound as each one's ThreadChoice picks, D58 and D97)
    or all run serial, by timing whole runs of the sequence each way, in turn, as
    ThreadChoice's rounds with `wake` False (D134). A kernel's own choice times its calls
    alone: it misses what a split costs the kernels after it (its output half in the other
    core's cache), the wake-ups of workers that slept between kernels, and the choosing
    itself; a whole run pays them all (nn.LSTM's training step at batch 32, 89
    near-bound kernels of 208: 0.5 ms slower split than on one thread)."""
    __slots__ = ("choice",)

    def __init__(self) -> None:
        self.choice = ThreadChoice(wake=False)

    def begin(self) -> tuple[bool, float]:
        """Before a run: its way set; (the way, the start if the run is timed, else 0.0)."""
        split, timed = self.choice.next_way()
        SEQUENCE.serial = not split
        return split, time.perf_counter() if timed else 0.0

    def end(self, split: bool, start: float, finished: bool) -> None:
        """After a run (`finished`: whole; a run an error stopped is not timed)."""
        SEQUENCE.serial = False
        if start and finished:
            self.choice.record(split, time.perf_counter() - start)


def sequence_choice(programs: Iterable[Any]) -> SequenceChoice | None:
    """A SequenceChoice for a sequence of these programs if two or more of them are near
    the thread bound (one alone chooses in the sequence's context already), else None."""
    return SequenceChoice() if sum(getattr(p, "near_bound", False) for p in programs) >= 2 \
        else None
