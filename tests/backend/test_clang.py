"""The CLANG runtime's own parts: compile errors with the compiler's log and the source,
its half conversions (integer C code) against numpy bit for bit, the thread split of the
outer loop, and loading a cached binary again. Skipped where no C compiler is on PATH."""
import numpy as np
import pytest

from codegen.helpers import Context
from lazyten import Tensor
from lazyten.realize import get_program
from lazyten.schedule import create_schedule
from runtimes import CompileError, get_runtime


@pytest.fixture(scope="module")
def clang():
    try:
        return get_runtime("CLANG")
    except RuntimeError as e:
        pytest.skip(f"CLANG unavailable: {e}")


def test_compile_error_shows_log_and_source(clang):
    src = "void broken(float* a) { a[0] = undefined_name; }\n"
    with pytest.raises(CompileError) as info:
        clang.compiler.compile_checked("broken", src)
    assert "undefined_name" in info.value.log                 # the compiler's stderr
    assert "   1 void broken(float* a)" in str(info.value)   # numbered source


def test_cache_key_names_compiler_and_flags(clang):
    assert "-ffp-contract=off" in clang.compiler.key and "-ffast-math" not in clang.compiler.key


def _same_bits(x: np.ndarray, got: np.ndarray, want: np.ndarray, what: str) -> None:
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all(), f"{what}: NaN where numpy has none, or none where it has"
    bad = np.flatnonzero(got[~nan].view(np.uint16) != want[~nan].view(np.uint16))
    assert not len(bad), (f"{what}: {len(bad)} values round unlike numpy, first "
                          f"{x[~nan][bad[0]]!r}: numpy {want[~nan][bad[0]]!r}, "
                          f"CLANG {got[~nan][bad[0]]!r}")


def test_every_half_widens_exactly(clang):
    every = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    got = Tensor(every, device="CLANG").float().numpy()
    want = every.astype(np.float32)
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all()
    assert (got[~nan].view(np.uint32) == want[~nan].view(np.uint32)).all()  # -0.0 kept


@pytest.mark.parametrize("source", [np.float32, np.float64])
def test_rounding_to_half_matches_numpy(clang, source):
    rng = np.random.default_rng(0)
    halves = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float64)
    halves = halves[np.isfinite(halves)]
    # every half, the midpoints between neighbours (ties), and values just either side
    mids = (np.sort(halves)[1:] + np.sort(halves)[:-1]) / 2
    near = np.concatenate([mids, np.nextafter(mids.astype(source), np.inf),
                           np.nextafter(mids.astype(source), -np.inf)])
    wide = rng.uniform(-7e4, 7e4, 20000) * 10.0 ** rng.integers(-12, 1, 20000)
    x = np.concatenate([halves, near, wide, [np.inf, -np.inf, np.nan, 65520, 65519.99]])
    x = x.astype(source)
    got = Tensor(x, device="CLANG").half().numpy()
    with np.errstate(over="ignore"):
        _same_bits(x, got, x.astype(np.float16), f"{np.dtype(source).name} -> float16")


def test_outer_loop_split_across_threads_matches_one_thread(clang):
    x = np.random.default_rng(1).standard_normal((1031, 517)).astype(np.float32)
    out = (Tensor(x, device="CLANG") * 3 - 1).sum(axis=1).lazydata
    item = [s for s in create_schedule([out]) if s.ast is not None][-1]
    spec, program = get_program(item.ast, "CLANG")
    assert spec.var_names == ["core_start", "core_end"] and program.threaded
    inp = Tensor(x, device="CLANG").realize().lazydata.buffer()
    results = []
    for threads in (1, 3):
        buf = out.allocate()
        with Context(THREADS=threads):
            program(buf.ensure_allocated(), inp.ensure_allocated(),
                    global_size=spec.global_size, local_size=spec.local_size, wait=True)
        host = np.empty(1031, np.float32)
        buf.copyout(memoryview(host).cast("B"))
        results.append(host)
    np.testing.assert_array_equal(results[1], results[0])  # same rows, same order of adds
    np.testing.assert_allclose(results[0], (x * 3 - 1).sum(axis=1), rtol=1e-4, atol=1e-3)


def test_a_binary_loads_twice(clang):
    x = Tensor(np.arange(8, dtype=np.float32), device="CLANG")
    spec, program = get_program(create_schedule([(x + 5).lazydata])[-1].ast, "CLANG")
    again = clang.program(spec, program.binary)  # as from the disk cache: bytes -> dlopen
    assert again.fn is not program.fn


def test_a_gpu_dialect_without_work_item_names_says_so():
    from codegen.linearizer import linearize
    from codegen.target import Target, gpu
    from codegen.renderer.clang import ClangRenderer

    class NoSpecials(ClangRenderer):
        target = gpu("NOSPECIALS", local_size=1)
    x = Tensor(np.arange(8, dtype=np.float32), device="CPU")
    ast = create_schedule([(x + 1).lazydata])[-1].ast
    kernel = linearize(ast, NoSpecials.target)
    with pytest.raises(NotImplementedError, match="gidx.*Target\\(gpu=False\\)"):
        NoSpecials().render(kernel)
    assert "for (" in ClangRenderer().render(linearize(ast, Target("loops")))
