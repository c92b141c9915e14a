"""Copies of short runs from lines far apart (codegen/opt/elementwise.py `block_runs`,
D166): a copy into panels of a few rows (pack.py's P[i // 8, r, i % 8]) walks the rows
in blocks of 8, its blocks outermost, so the rest of each cache line is read while the
line is still in cache. The decision where it must apply and where it must not; values
against numpy for odd sizes, other dtypes, non-contiguous and broadcast inputs."""
import numpy as np
from hypothesis import given, strategies as st

from codegen.kernel import Kernel, OptOps
from codegen.opt import optimize
from codegen.target import cpu
from lazyten import Tensor
from lazyten.schedule import create_schedule
from tests.helpers import fast

AVX512, AVX2 = cpu(512), cpu(256)


def _rnd(shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _panels(x: np.ndarray, width: int) -> np.ndarray:
    """x (..., rows, cols) as panels (..., cols // width, rows, width)."""
    *batch, rows, cols = x.shape
    return np.ascontiguousarray(np.swapaxes(x.reshape(*batch, rows, cols // width, width), -3, -2))


def _lazy_panels(t: Tensor, width: int) -> Tensor:
    *batch, rows, cols = t.shape
    n = len(batch)
    order = tuple(range(n)) + (n + 1, n, n + 2)
    return t.reshape(*batch, rows, cols // width, width).permute(*order).contiguous()


def _decisions(t: Tensor, target) -> list:
    ast = [i.ast for i in create_schedule([t.lazydata]) if i.ast is not None][-1]
    return [(o.op, o.amount) for o in optimize(Kernel(ast), target).applied]


def test_a_copy_into_panels_of_8_rows_walks_blocks_of_rows():
    t = _lazy_panels(Tensor(_rnd((4, 512, 256))), 8)  # runs of 32 bytes, lines 1 KB apart
    for target in (AVX512, AVX2):
        assert _decisions(t, target) == [(OptOps.UPCAST, 8), (OptOps.OUTER, 0)]


def test_runs_of_a_whole_line_or_more_are_left_as_they_are():
    t = _lazy_panels(Tensor(_rnd((512, 256))), 16)  # 64-byte runs: whole lines
    assert OptOps.OUTER not in [op for op, _ in _decisions(t, AVX512)]
    near = _lazy_panels(Tensor(_rnd((64, 8))), 4)  # lines 32 bytes apart: no jump
    assert OptOps.OUTER not in [op for op, _ in _decisions(near, AVX512)]


@given(batch=st.sampled_from([(), (1,), (3,), (2, 2)]), rows=st.sampled_from([8, 12, 20, 64, 9]),
       cols=st.sampled_from([32, 48, 96, 40]), width=st.sampled_from([2, 4, 8]),
       dtype=st.sampled_from([np.float32, np.float16, np.int32, np.float64]),
       seed=st.integers(0, 100))
@fast(25)
def test_panel_copies_equal_numpy(batch, rows, cols, width, dtype, seed):
    x = _rnd((*batch, rows, cols), seed, dtype)
    np.testing.assert_array_equal(_lazy_panels(Tensor(x), width).numpy(), _panels(x, width))


@given(rows=st.sampled_from([16, 24, 33]), seed=st.integers(0, 100))
@fast(15)
def test_panels_of_non_contiguous_and_broadcast_inputs(rows, seed):
    x = _rnd((64, rows), seed)
    flipped = Tensor(x).T.flip(0)  # (rows, 64), read backwards and transposed
    np.testing.assert_array_equal(_lazy_panels(flipped, 8).numpy(), _panels(x.T[::-1], 8))
    row = _rnd((1, 128), seed + 1)
    wide = Tensor(row).expand(rows, 128) * 2 + Tensor(_rnd((rows, 128), seed + 2))
    want = np.broadcast_to(row, (rows, 128)) * 2 + _rnd((rows, 128), seed + 2)
    np.testing.assert_allclose(_lazy_panels(wide, 8).numpy(), _panels(want, 8), rtol=1e-6)


def test_a_weight_gradient_over_many_tokens():
    """dy^T packed into panels of 8 rows (D73), then the matmul: against numpy."""
    x, dy = _rnd((2048, 96)), _rnd((2048, 40), 1)
    w = Tensor(_rnd((40, 96), 2), requires_grad=True)
    (Tensor(x) @ w.T * Tensor(dy)).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), dy.T.astype(np.float64) @ x, rtol=1e-4, atol=1e-3)

