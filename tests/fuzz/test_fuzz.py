"""Differential fuzzing: random lazy programs against the numpy reference, on every device.

CI runs a fixed number of programs from a fixed seed. FUZZ_SECONDS=N runs as many as fit
in N seconds (per test), FUZZ_SEED=S starts from another seed, FUZZ_SHRINK=1 stops at the
first failure and lets hypothesis shrink it to a minimal program. A failure prints each
distinct problem with a program that reproduces it.
"""
from __future__ import annotations
import time

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings

from codegen.helpers import getenv
from runtimes import get_runtime

from fuzz.gen import programs
from fuzz.run import check_forward, check_gradients

# programs per test in CI: sized so the fuzzer adds about a minute to the suite on 2 cores
FORWARD_EXAMPLES = {"CPU": 60, "OPENCL": 25}
GRADIENT_EXAMPLES = {"CPU": 25, "OPENCL": 10}
CHUNK = 20  # programs per hypothesis run in the timed mode (one seed each)
SHOWN = 6  # distinct failures printed in full


def _devices() -> list:
    params = ["CPU"]
    try:
        get_runtime("OPENCL")
        params.append("OPENCL")
    except Exception as e:  # a missing package or driver: report, don't fail
        params.append(pytest.param("OPENCL", marks=pytest.mark.skip(reason=f"OPENCL: {e}")))
    return params


def fuzz(strategy, check, examples: int) -> None:
    """Run `check` on programs drawn from `strategy`; fail listing every distinct problem."""
    base_seed, seconds, shrink = getenv("FUZZ_SEED", 0), getenv("FUZZ_SECONDS", 0), \
        getenv("FUZZ_SHRINK", 0)
    failures: dict[str, tuple[int, str]] = {}
    count = [0]

    def run_chunk(chunk_seed: int, n: int) -> None:
        @seed(chunk_seed)
        @settings(max_examples=n, deadline=None, database=None, derandomize=False,
                  phases=[Phase.generate, Phase.shrink] if shrink else [Phase.generate],
                  suppress_health_check=list(HealthCheck), print_blob=False)
        @given(strategy)
        def one(prog):
            count[0] += 1
            failure = check(prog)
            if failure is None:
                return
            if shrink:
                raise AssertionError(str(failure))
            key = failure.category + ": " + failure.detail.splitlines()[0].split(":")[0]
            failures.setdefault(key, (chunk_seed, str(failure)))
        one()

    if seconds <= 0:
        run_chunk(base_seed, examples)
    else:
        start, chunk = time.perf_counter(), 0
        while time.perf_counter() - start < seconds:
            run_chunk(base_seed + chunk, CHUNK)
            chunk += 1
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
