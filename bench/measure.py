"""Timing: warm up, then time repeated calls within a time budget and take the median.

`measure(fn)` calls `fn` `warmup` times (the first call compiles, captures a JIT, fills
allocator caches), optionally checks the first warm-up result, then times `repeat`
further calls. Fast workloads get more timed calls: timing goes on until `fill` seconds
of timed calls (at most `max_runs` calls), so a millisecond kernel is not judged on three
noisy samples. Slow ones get fewer: timing stops once `budget` seconds have been spent
(after at least `min_runs` calls), and a call expected to end past `deadline` (a
time.monotonic() value) or more than `timed_limit` seconds after the warm-up ended is
never started. If not even one timed call fits before `deadline`, the last warm-up call
is reported instead and the result says so in `note`; `timed_limit` alone always allows
one timed call.

Each timed call is a fresh call of `fn` (for lazyten: build the graph, realize it), timed
as wall clock with time.perf_counter(). The garbage collector is off during each call,
so a collection never lands inside one timing; a full collection runs before the timed
calls and a cheap young-generation one between them (a full one per call would cost
more than the call itself in a process that has imported torch).

`measure_paired(sides)` times several implementations of one workload in one process,
in alternating rounds (`python -m bench --paired`): what the ratio of two separate
measurements cannot show on a machine whose speed changes from minute to minute.
"""
from __future__ import annotations
import gc
import os
import statistics
import time
from typing import Any, Callable, NamedTuple


class Unavailable(Exception):
    """A workload cannot run here (a missing library or feature); the message says why."""


class Side(NamedTuple):
    """What is timed: the call, its warm-up calls, `check` (of the first warm-up call's
    value) and `after` (run after each call, inside its timing); one side of a paired
    measurement."""
    fn: Callable[[], Any]
    warmup: int = 1
    check: Callable[[Any], dict] | None = None
    after: Callable[[], None] | None = None


def measure(fn: Callable[[], Any], *, warmup: int = 1, repeat: int = 5, budget: float = 5.0,
            fill: float | None = None, max_runs: int = 100, min_runs: int = 3,
            deadline: float | None = None, timed_limit: float | None = None,
            check: Callable[[Any], dict] | None = None,
            after: Callable[[], None] | None = None) -> dict:
    """Time `fn`; returns a JSON-able dict (see the module docstring).

    check: called with the first warm-up call's return value; its dict is stored under
    "check". after: called after each call inside the timing (for example, to wait for a
    device) so the call's work is complete when the clock stops."""
    start = time.monotonic()
    result: dict = {}
    warm_times = _warm_up(Side(fn, warmup, check, after), result)
    times: list[float] = []
    fill = budget / 5 if fill is None else fill
    if timed_limit is not None:
        relative = time.monotonic() + timed_limit
        deadline = relative if deadline is None else min(deadline, relative)
    gc_was_enabled = gc.isenabled()
    gc.collect()
    try:
        while len(times) < max(repeat, max_runs):
            spent = sum(times)
            if len(times) >= repeat and (spent >= fill or len(times) >= max_runs):
                break
            if len(times) >= min(min_runs, repeat) and spent >= budget:
                break
            expected = times[-1] if times else warm_times[-1]
            if deadline is not None and time.monotonic() + expected > deadline:
                if times or timed_limit is None or time.monotonic() > deadline:
                    break
            times.append(_timed_call(fn, after, gc_was_enabled))
    finally:
        if gc_was_enabled:
            gc.enable()
    note = ""
    if not times:
        times = [warm_times[-1]]
        note = ("1 run, the warm-up itself" + (" (includes compiling)" if len(warm_times) == 1
                                               else "") + ": too slow to repeat in the time limit")
    result.update(_summary(times, warm_times, start))
    if note:
        result["note"] = note
    return result


def _warm_up(side: Side, result: dict) -> list[float]:
    """The side's warm-up calls, timed; the first one's value checked into `result`."""
    warm_times: list[float] = []
    for i in range(max(side.warmup, 1)):
        gc.collect()
        t0 = time.perf_counter()
        out = side.fn()
        if side.after is not None:
            side.after()
        warm_times.append(time.perf_counter() - t0)
        if i == 0 and side.check is not None:
            try:
                result["check"] = side.check(out)
            except Exception as e:  # a failed check is reported, never fatal
                result["check"] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        del out
    return warm_times


def _timed_call(fn: Callable[[], Any], after: Callable[[], None] | None,
                gc_was_enabled: bool) -> float:
    """One timed call: a young-generation collection first, none during it."""
    gc.collect(1)
    gc.disable()
    t0 = time.perf_counter()
    out = fn()
    if after is not None:
        after()
    seconds = time.perf_counter() - t0
    if gc_was_enabled:
        gc.enable()
    del out
    return seconds


def _summary(times: list[float], warm_times: list[float], start: float) -> dict:
    return {
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
        "runs": len(times),
        "times_s": times,
        "warmup_s": warm_times,
        "total_s": time.monotonic() - start,
        "loadavg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }


def measure_paired(sides: dict[str, Side], *, repeat: int = 5, budget: float = 5.0,
                   rounds: int = 5, max_runs: int = 100,
                   deadline: float | None = None) -> dict[str, dict]:
    """Time several implementations of one workload side by side: each is warmed up,
    then `rounds` rounds time a block of calls of each in turn (about budget / rounds
    seconds per side and round, at least `repeat` and at most about `max_runs` calls in
    all). A busy spell of the machine so lands on every side, not on whichever ran at
    that moment, and each side runs beside the others' threads, as in a program that uses
    both. Returns measure's dict per side ("paired": the number of rounds)."""
    start = time.monotonic()
    results: dict[str, dict] = {name: {} for name in sides}
    warm = {name: _warm_up(side, results[name]) for name, side in sides.items()}
    times: dict[str, list[float]] = {name: [] for name in sides}
    block = budget / rounds
    per_round, most = max(1, -(-repeat // rounds)), max(1, max_runs // rounds)
    gc_was_enabled = gc.isenabled()
    gc.collect()
    try:
        for _ in range(rounds):
            for name, side in sides.items():
                spent, calls = 0.0, 0
                expected = times[name][-1] if times[name] else warm[name][-1]
                while calls < per_round or (spent + expected < block and calls < most):
                    if deadline is not None and time.monotonic() + expected > deadline:
                        break
                    expected = _timed_call(side.fn, side.after, gc_was_enabled)
                    times[name].append(expected)
                    spent, calls = spent + expected, calls + 1
    finally:
        if gc_was_enabled:
            gc.enable()
    for name in sides:
        taken = times[name] or [warm[name][-1]]
        results[name].update(_summary(taken, warm[name], start))
        results[name]["paired"] = rounds
        if not times[name]:
            results[name]["note"] = "1 run, the warm-up itself: too slow to repeat in the time limit"
    return results


def compare(actual, expected, rtol: float, atol_scale: float) -> dict:
    """Compare two arrays with tolerance rtol*|x| + atol_scale*max|expected|."""
    import numpy as np
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if actual.shape != expected.shape:
        return {"ok": False, "error": f"shape {actual.shape} != expected {expected.shape}"}
    scale = float(np.max(np.abs(expected))) if expected.size else 0.0
    err = np.abs(actual - expected)
    ok = bool(np.all(err <= rtol * np.abs(expected) + atol_scale * scale)) and \
        bool(np.all(np.isfinite(actual)))
    rel = float(np.max(err) / scale) if scale else float(np.max(err, initial=0.0))
    return {"ok": ok, "max_abs_err": float(np.max(err, initial=0.0)), "max_err_over_scale": rel}
