"""Debugging aids: `with Context(DEBUG=N):` scopes a setting to a block and thread, the
DEBUG=3/5 dumps, and DEBUG_DIR's files."""
import contextlib
import io
import threading

import numpy as np

from codegen.helpers import getenv
from lazyten import Context, Tensor


def _kernel_lines(fn) -> list[str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        fn()
    return [line for line in err.getvalue().splitlines() if line.startswith("***")]


def test_debug_is_scoped_to_the_block(monkeypatch):
    monkeypatch.delenv("DEBUG", raising=False)
    getenv.cache_clear()
    size = 11 + np.random.default_rng().integers(1000)  # a kernel no other test launched

    def run(n):
        return lambda: (Tensor(np.ones(n, np.float32)) * 5).realize()
    with Context(DEBUG=2):
        inside = _kernel_lines(run(size))
    outside = _kernel_lines(run(size + 1))
    assert len(inside) == 1 and f"E_{size}" in inside[0], f"DEBUG=2 printed {inside}"
    assert outside == [], f"outside the block nothing is printed, got {outside}"


def test_a_jit_replay_prints_its_kernels_under_debug_2(monkeypatch):
    """A replay reads DEBUG once per call, and prints one line per launch then only."""
    from lazyten import jit
    monkeypatch.delenv("DEBUG", raising=False)
    getenv.cache_clear()
    size = 1011 + np.random.default_rng().integers(1000)
    step = jit(lambda t: (t * 3 + 1).sum(0))
    x = Tensor(np.ones((size, 3), np.float32)).realize()
    for _ in range(3):  # plain, captured, then replayed
        step(x)
    quiet = _kernel_lines(lambda: step(x))
    with Context(DEBUG=2):
        loud = _kernel_lines(lambda: step(x))
    assert quiet == [], f"a replay without DEBUG printed {quiet}"
    assert len(loud) >= 1 and all("GFLOP/s" in line for line in loud), loud
    np.testing.assert_allclose(step(x).numpy(), np.full(3, 4.0 * size))


def test_contexts_nest_and_override_the_environment(monkeypatch):
    monkeypatch.setenv("COMPILE_WORKER_JOBS", "7")
    getenv.cache_clear()
    try:
        assert getenv("COMPILE_WORKER_JOBS", 2000) == 7
        with Context(COMPILE_WORKER_JOBS=3, DEBUG=1):
            assert getenv("COMPILE_WORKER_JOBS", 2000) == 3 and getenv("DEBUG", 0) == 1
            with Context(DEBUG=4):
                assert getenv("DEBUG", 0) == 4 and getenv("COMPILE_WORKER_JOBS", 2000) == 3
            assert getenv("DEBUG", 0) == 1
        assert getenv("COMPILE_WORKER_JOBS", 2000) == 7
    finally:
        getenv.cache_clear()


def test_a_context_belongs_to_its_thread():
    seen = []
    started, release = threading.Event(), threading.Event()

    def other():
        started.wait()
        seen.append(getenv("DEBUG", 0))
        release.set()
    thread = threading.Thread(target=other)
    thread.start()
    with Context(DEBUG=3):
        started.set()
        release.wait(10)
    thread.join()
    assert seen == [getenv("DEBUG", 0)] and seen[0] != 3


def test_debug5_numbers_uops_and_operands_name_earlier_lines():
    size = 3 + np.random.default_rng().integers(1000)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), Context(DEBUG=5):
        (Tensor(np.ones((size, 5), np.float32)).sum(1) * 2).realize()
    text = err.getvalue()
    ir = text.split("--- linear IR of")[1].split("\n---")[0].splitlines()[1:]
    assert ir, f"no linear IR printed:\n{text[:2000]}"
    for i, line in enumerate(ir):
        number, _, rest = line.strip().partition(" ")
        assert int(number) == i, line
        operands = rest[rest.index("[") + 1:rest.index("]")]
        for ref in filter(None, (o.strip() for o in operands.split(","))):
            assert 0 <= int(ref) < i, f"uop {i} reads {ref}, not an earlier uop: {line}"


def test_debug3_prints_the_ast_also_for_a_kernel_from_the_disk_cache(tmp_path):
    """A second process finds the kernel in the disk cache and skips lowering; DEBUG=3
    must still show its AST."""
    import os
    import subprocess
    import sys
    program = ("import numpy as np\nfrom lazyten import Tensor\n"
               "(Tensor(np.ones((3, 5), np.float32)).sum(1) * 2).realize()\n")
    env = dict(os.environ, CACHEDIR=str(tmp_path), DEBUG="3")
    runs = [subprocess.run([sys.executable, "-c", program], env=env, capture_output=True,
                           text=True, timeout=300) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
    assert "--- AST of" in runs[0].stderr
    assert "--- AST of" in runs[1].stderr and "from the program cache" in runs[1].stderr, \
        f"the cached run printed no AST:\n{runs[1].stderr[-2000:]}"
    decisions = [run.stderr.split("--- decisions of")[1].split("\n---")[0].split("\n***")[0]
                 for run in runs]
    assert decisions[0] == decisions[1], "the cached run prints the same decisions"


def test_debug_dir_writes_each_stage_named_so_two_runs_diff(tmp_path):
    import os
    import subprocess
    import sys
    program = ("import numpy as np\nfrom lazyten import Tensor\n"
               "(Tensor(np.ones((3, 5), np.float32)).sum(1) * 2).realize()\n"
               "(Tensor(np.ones((4, 5), np.float32)) + 1).realize()\n")
    for run in ("a", "b"):  # b finds everything in a's disk cache, and still writes the files
        env = dict(os.environ, CACHEDIR=str(tmp_path / "cache"), DEBUG_DIR=str(tmp_path / run))
        done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
    files = sorted(os.listdir(tmp_path / "a"))
    assert files == sorted(os.listdir(tmp_path / "b")), "the two runs name their files alike"
    kernels = {f.rsplit(".", 1)[0] for f in files}
    assert len(kernels) == 2 and {f.rsplit(".", 1)[1] for f in files} == \
        {"ast", "opts", "uops", "src"}
    for name in files:
        a, b = (tmp_path / "a" / name).read_text(), (tmp_path / "b" / name).read_text()
        assert a == b and a.strip(), f"{name} differs between identical runs or is empty"
    reduce = next(k for k in kernels if k.startswith("r_"))
    assert "SUM" in (tmp_path / "a" / f"{reduce}.ast").read_text()
    assert "MERGE" in (tmp_path / "a" / f"{reduce}.opts").read_text() or \
        "(none)" in (tmp_path / "a" / f"{reduce}.opts").read_text()
