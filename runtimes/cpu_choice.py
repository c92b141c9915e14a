"""Serial or split: the choice for a CPU kernel near the thread bound [D58], made by
timing calls both ways (runtimes/cpu_llvm.py asks it on each call of such a kernel). A
kernel keeps two: one for calls that find the worker threads awake (spinning after a
split kernel), one for calls that would have to wake them (D97)."""
from __future__ import annotations
import math

_TRIALS = 3  # calls of each way in the first round; the faster is kept
_RECHECK = (16, 1024)  # then one more of each after 16 calls, 32, ... up to every 1024


class ThreadChoice:
    """Serial or split for one kernel near the thread bound [D58]. A round of calls times
    both ways: the first round _TRIALS calls of each, alternating; later rounds one of
    each, after 16 calls, 32, ... up to every 1024. After each round the way with the
    faster best time is kept: the best time is what the way costs undisturbed, and a
    choice made while the second core was busy (another process; torch's threads still
    spinning after its own op, in a side-by-side run) is so corrected at the first round
    that runs undisturbed, instead of lasting as long as the process. A round begins with
    an untimed split call: it wakes the workers, so a timed split call measures what a
    run of split kernels costs, not a wake-up (after a long stretch of serial calls the
    workers sleep, and a wake-up timed as split's cost kept a kernel serial). With `wake`
    False (the choice for calls that find the workers asleep, D97) a round has no such
    call: there a wake-up is what a split call costs."""
    __slots__ = ("best", "split", "calls", "countdown", "gap", "first")

    def __init__(self, wake: bool = True) -> None:
        self.best = [math.inf, math.inf]  # serial, split: the best time of each way
        self.split = False  # the choice: split the outer loop across the threads
        self.first: list[bool | None] = [None] if wake else []  # a round's first calls
        # the rest of this round's calls (True: split, False: serial; None: an untimed split)
        self.calls: list[bool | None] = self.first + [True, False] * _TRIALS
        self.countdown = 0  # calls until the next round
        self.gap = _RECHECK[0]

    def next_way(self) -> tuple[bool, bool]:
        """(split, timed) for this call. Threads may call one kernel at once: a round's
        call that another thread took first leaves this one untimed (list.pop is atomic)."""
        if not self.calls:
            self.countdown -= 1
            if self.countdown > 0:
                return self.split, False
            self.calls = self.first + [True, False]
        try:
            way = self.calls.pop(0)
        except IndexError:
            return self.split, False
        return (True, False) if way is None else (way, True)

    def record(self, split: bool, seconds: float) -> None:
        """A timed call's time; after a round's last, the choice."""
        self.best[split] = min(self.best[split], seconds)
        if not self.calls:
            self.split = self.best[1] < self.best[0]
            self.countdown, self.gap = self.gap, min(2 * self.gap, _RECHECK[1])
