"""A long innermost loop of a scalar CPU kernel that evaluates a series (exp, log, sin)
is interleaved by LLVM's loop vectorizer, several vectors a step (D144): LLVM's own
count for a loop of more than a few instructions is 1, and gelu's chain ran one vector
at a time. Kernels with lanes of their own, short loops and kernels without a series
keep LLVM's count (the interleaved copy doubles a kernel's compile time)."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import lazyten.nn.functional as F
from codegen.linearizer import linearize
from lazyten import Tensor
from lazyten.schedule import create_schedule
from runtimes import get_runtime
from runtimes.llvm_build import build, llvm_vectorizes, target_machine

_MARK = "llvm.loop.interleave.count"
_BIG = (64, 3072)  # 196608 elements: one flat loop of that many steps


def source(out: Tensor) -> str:
    renderer = get_runtime("CPU").renderer
    return renderer.program(linearize(create_schedule([out.lazydata])[-1].ast, renderer.target)).src


def _x(shape, seed=0) -> Tensor:
    return Tensor(np.random.default_rng(seed).normal(0, 2, shape).astype(np.float32))


SERIES = {"exp": lambda x: x.exp(), "gelu": lambda x: x.gelu(), "sigmoid": lambda x: x.sigmoid(),
          "log": lambda x: x.abs().log(), "silu": F.silu}
# more series ops, checked for values only (some are lanes kernels of their own: sin, cos)
MORE = {"tanh": (lambda x: x.tanh(), np.tanh), "erf": (lambda x: x.erf(), np.vectorize(math.erf)),
        "exp2": (lambda x: x.exp2(), np.exp2), "log2": (lambda x: x.abs().log2(), lambda v: np.log2(abs(v))),
        "softplus": (F.softplus, lambda v: np.logaddexp(0, v)), "cos": (lambda x: x.cos(), np.cos),
        "sin": (lambda x: x.sin(), np.sin)}


@pytest.mark.parametrize("name", sorted(SERIES))
@pytest.mark.parametrize("broadcast", [False, True])
def test_a_long_scalar_loop_with_a_series_is_interleaved(name, broadcast):
    """One flat loop, or (a row added to every row) a loop over the rows and, inside it,
    one of 3072 steps."""
    x = _x(_BIG) + _x(_BIG[1:], seed=1) if broadcast else _x(_BIG)
    src = source(SERIES[name](x))
    assert _MARK in src, src[:600]
    assert llvm_vectorizes(src)  # the build runs LLVM's loop vectorizer on it: the mark's reader
    # and the mark changes what LLVM builds (it is read, not ignored)
    plain = src.replace(f', !{{!"{_MARK}", i32 4}}', "")
    assert plain != src and build(plain, target_machine()) != build(src, target_machine())


@pytest.mark.parametrize("case", ["short", "short rows", "short loops", "no series", "reduce"])
def test_other_kernels_keep_llvms_count(case):
    out = {"short": lambda: _x((8, 100)).gelu(),          # 800 steps: under the bound
           # 4 rows of 3072 steps: a long loop, but 12288 steps in all
           "short rows": lambda: (_x((4, 3072)) + _x((3072,), seed=1)).gelu(),
           # rows of 99 steps, 17000 in all
           "short loops": lambda: (_x((172, 99)) + _x((99,), seed=1)).gelu(),
           "no series": lambda: _x(_BIG) * 3 + 1,         # a multiply-add: memory bound
           "reduce": lambda: _x(_BIG).exp().sum(-1)}[case]()
    src = source(out)
    assert _MARK not in src, src[:600]


@settings(max_examples=12, deadline=None)
@given(n=st.integers(16384 - 40, 16384 + 140), op=st.sampled_from(sorted(SERIES)),
       strided=st.booleans())
def test_interleaved_kernels_match_numpy_at_every_remainder(n, op, strided):
    """Sizes around the bound, each remainder of the interleaved step (32 or 64 elements),
    on contiguous and strided (every other element) inputs."""
    a = np.random.default_rng(n).normal(0, 2, 2 * n if strided else n).astype(np.float32)
    x = Tensor(a)
    if strided:
        x, a = x[::2], a[::2]
    ref = {"exp": np.exp, "log": lambda v: np.log(np.abs(v)),
           "sigmoid": lambda v: 1 / (1 + np.exp(-v)), "silu": lambda v: v / (1 + np.exp(-v)),
           "gelu": lambda v: v * 0.5 * (1 + _erf(v / np.sqrt(2)))}[op](a.astype(np.float64))
    np.testing.assert_allclose(SERIES[op](x).numpy(), ref, rtol=2e-6 if op != "gelu" else 1e-5,
                               atol=1e-6)


_erf = np.vectorize(math.erf, otypes=[float])


@settings(max_examples=10, deadline=None)
@given(rows=st.integers(40, 80), cols=st.integers(290, 520), op=st.sampled_from(sorted(MORE)),
       layout=st.sampled_from(["plain", "transposed", "broadcast"]))
def test_more_series_ops_match_numpy_on_long_loops(rows, cols, op, layout):
    """Kernels on both sides of the bound (11600 to 41600 steps; a broadcast's rows of
    290-520) on contiguous, transposed and broadcast inputs."""
    rng = np.random.default_rng(rows * cols)
    a = rng.normal(0, 2, (rows, cols)).astype(np.float32)
    x = Tensor(a)
    if layout == "transposed":
        x, a = Tensor(np.ascontiguousarray(a.T)).T, a
    if layout == "broadcast":  # a row added to every row, inside the kernel
        b = rng.normal(0, 1, (cols,)).astype(np.float32)
        x, a = x + Tensor(b), a + b
    fn, ref = MORE[op]
    np.testing.assert_allclose(fn(x).numpy(), ref(a.astype(np.float64)), rtol=1e-5, atol=2e-6)
