"""Differential fuzzing: random lazy programs against the numpy reference, on every device;
also each program as a @jit function called with new inputs (replays against eager values).

CI runs a fixed number of programs from a fixed seed. FUZZ_SECONDS=N runs as many as fit
in N seconds (per test), FUZZ_SEED=S starts from another seed, FUZZ_SHRINK=1 stops at the
first failure and lets hypothesis shrink it to a minimal program, FUZZ_REPORT=path appends
every distinct failure to a file, FUZZ_TRACE=path writes each program to a file before it
runs (the last one is what crashed a process). A failure prints each distinct problem with
a program that reproduces it.
"""
from __future__ import annotations
import os
import time

import pytest
from hypothesis import HealthCheck, Phase, find, given, seed, settings

from codegen.helpers import getenv
from runtimes import get_runtime

from fuzz.gen import programs
from fuzz.minimize import minimize
from fuzz.run import check_forward, check_gradients, check_jit, check_repeat

# programs per test in CI: sized so the fuzzer adds about a minute to the suite on 2 cores
FORWARD_EXAMPLES = {"CPU": 600, "OPENCL": 60, "CLANG": 60, "CUDA": 60}
GRADIENT_EXAMPLES = {"CPU": 300, "OPENCL": 20, "CLANG": 20, "CUDA": 20}
JIT_EXAMPLES = {"CPU": 150, "OPENCL": 10, "CLANG": 10, "CUDA": 10}
REPEAT_EXAMPLES = {"CPU": 150, "OPENCL": 10, "CLANG": 10, "CUDA": 10}
CHUNK = 20  # programs per hypothesis run in the timed mode (one seed each)
SHOWN = 6  # distinct failures printed in full
MINIMIZE_SECONDS = (5, 20)  # shrinking each distinct failure, and all of them, per test


def _devices() -> list:
    params = ["CPU"]
    for name in ("OPENCL", "CLANG", "CUDA"):
        try:
            get_runtime(name)
            params.append(name)
        except Exception as e:  # a missing package, driver or compiler: report, don't fail
            params.append(pytest.param(name, marks=pytest.mark.skip(reason=f"{name}: {e}")))
    return params


def fuzz(strategy, check, examples: int) -> None:
    """Run `check` on programs drawn from `strategy`; fail listing every distinct problem."""
    base_seed, seconds, shrink = getenv("FUZZ_SEED", 0), getenv("FUZZ_SECONDS", 0), \
        getenv("FUZZ_SHRINK", 0)
    failures: dict[str, tuple[int, str]] = {}
    count = [0]
    trace = getenv("FUZZ_TRACE", "")
    shrink_left = [MINIMIZE_SECONDS[1] if seconds <= 0 else max(MINIMIZE_SECONDS[1], seconds / 4)]

    def run_chunk(chunk_seed: int, n: int) -> None:
        @seed(chunk_seed)
        @settings(max_examples=n, deadline=None, database=None, derandomize=False,
                  phases=[Phase.generate, Phase.shrink] if shrink else [Phase.generate],
                  suppress_health_check=list(HealthCheck), print_blob=False)
        @given(strategy)
        def one(prog):
            count[0] += 1
            if trace:  # the program about to run, for a crash that kills the process
                with open(trace, "w") as out:
                    out.write(f"# FUZZ_SEED={chunk_seed}, program {count[0]}\n{prog}\n")
            failure = check(prog)
            if failure is None:
                return
            if shrink:
                raise AssertionError(str(failure))
            if failure.key not in failures:
                start = time.perf_counter()
                budget = min(MINIMIZE_SECONDS[0], shrink_left[0])
                small = minimize(prog, check, failure.key, budget) if budget > 0 else prog
                shrink_left[0] -= time.perf_counter() - start
                failures[failure.key] = (chunk_seed, str(check(small) or failure))
        one()

    if seconds <= 0:
        run_chunk(base_seed, examples)
    else:
        start, chunk = time.perf_counter(), 0
        while time.perf_counter() - start < seconds:
            run_chunk(base_seed + chunk, CHUNK)
            chunk += 1
    report = getenv("FUZZ_REPORT", "")
    if report:
        with open(report, "a") as out:
            out.write(f"# {os.environ.get('PYTEST_CURRENT_TEST', '')}: {count[0]} programs, "
                      f"{len(failures)} distinct failures\n")
            for key, (s, text) in failures.items():
                out.write(f"\n===== {key} (FUZZ_SEED={s})\n{text}\n")
    if failures:
        shown = [f"=== {key} (FUZZ_SEED={s})\n{text}" for key, (s, text) in
                 list(failures.items())[:SHOWN]]
        pytest.fail(f"{len(failures)} distinct failures in {count[0]} programs:\n"
                    + "\n".join(f"  {k}" for k in failures) + "\n\n" + "\n\n".join(shown),
                    pytrace=False)


@pytest.mark.parametrize("device", _devices())
def test_forward_programs_match_numpy(device):
    fuzz(programs(), lambda prog: check_forward(prog, device), FORWARD_EXAMPLES[device])


@pytest.mark.parametrize("device", _devices())
def test_gradients_match_finite_differences(device):
    fuzz(programs(grad=True), lambda prog: check_gradients(prog, device),
         GRADIENT_EXAMPLES[device])


@pytest.mark.parametrize("device", _devices())
def test_jitted_programs_match_numpy(device):
    """Each program as a @jit function of its inputs, called with new input values."""
    fuzz(programs(), lambda prog: check_jit(prog, device), JIT_EXAMPLES[device])


@pytest.mark.parametrize("device", _devices())
def test_repeated_programs_match_numpy(device):
    """Each program as a plain function called again with new input values: the cached
    schedule and the engine's plan must compute what the first call computes."""
    fuzz(programs(), lambda prog: check_repeat(prog, device), REPEAT_EXAMPLES[device])


# ---- the oracle itself: a planted error must be reported ----
def _program_with(kind: str, grad: bool = False):
    """The simplest program with an op of `kind` acting on a float input."""
    return find(programs(grad=grad), lambda p: any(
        s.kind == kind and s.out is not None and s.out.dtype.startswith("float") and
        s.out.numel > 0 for s in p.steps),
        settings=settings(database=None, max_examples=2000, derandomize=True,
                          suppress_health_check=list(HealthCheck)))


def _plant(prog, kind: str, when) -> str:
    """Make the reference of the first `kind` step wrong (doubled, plus one) where when(interp)."""
    step = next(s for s in prog.steps if s.kind == kind and s.out is not None)
    right = step.ref

    def wrong(interp):
        ref = right(interp)
        return type(ref)(ref.val * 2 + 1, ref.err) if when(interp) else ref
    step.ref = wrong
    return step.out.name


def test_a_planted_wrong_value_is_reported():
    prog = _program_with("elementwise")
    name = _plant(prog, "elementwise", lambda interp: True)
    failure = check_forward(prog, "CPU")
    assert failure is not None and failure.category == "wrong value" and name in failure.detail, \
        f"a reference doubled at {name} went unnoticed: {failure}\n{prog.source()}"


def test_a_planted_wrong_derivative_is_reported():
    prog = _program_with("elementwise", grad=True)
    _plant(prog, "elementwise", lambda interp: interp.fd)  # only the finite differences change
    failure = check_gradients(prog, "CPU")
    assert failure is not None and failure.category == "wrong gradient", \
        f"a doubled derivative went unnoticed: {failure}\n{prog.source()}"


@pytest.mark.parametrize("check, category", [(check_jit, "jit"), (check_repeat, "repeat")])
def test_a_planted_wrong_value_is_reported_when_called_again(check, category):
    """Under @jit and called again eagerly: a wrong value on any call is reported."""
    prog = _program_with("elementwise")
    name = _plant(prog, "elementwise", lambda interp: True)
    failure = check(prog, "CPU")
    assert failure is not None and failure.category == f"{category} wrong value" and \
        name in failure.detail, f"a reference doubled at {name} went unnoticed: {failure}"
