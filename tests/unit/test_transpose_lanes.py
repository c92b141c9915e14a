"""Transposing copies (codegen/opt/elementwise.py `transpose_lanes`, codegen/emit.py
`_transposed`): an input read strided along the output's contiguous axis and contiguous
along another is read as one vector per lane and transposed in registers. Values against
numpy for odd and whole-block shapes, permutes of 3-d tensors, mixed with contiguous
operands and casts; the decision is checked where it must apply."""
import numpy as np
from hypothesis import given, strategies as st

from codegen.kernel import Kernel, OptOps
from codegen.opt import optimize
from codegen.target import cpu
from lazyten import Tensor
from lazyten.schedule import create_schedule
from tests.helpers import fast

AVX512, AVX2 = cpu(512), cpu(256)


def _rnd(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_a_transposing_copy_reads_blocks_and_transposes_them():
    t = Tensor(_rnd((64, 48))).T.contiguous()
    ast = [i.ast for i in create_schedule([t.lazydata]) if i.ast is not None][-1]
    for target in (AVX512, AVX2):
        k = optimize(Kernel(ast), target)
        ops = [(o.op, o.amount) for o in k.applied]
        assert ops == [(OptOps.UPCAST, target.lanes)] * 2 + [(OptOps.LANES, target.lanes)], ops


@given(rows=st.sampled_from([16, 32, 48, 7, 33]), cols=st.sampled_from([16, 64, 5, 40]),
       seed=st.integers(0, 100))
@fast(20)
def test_transposed_values(rows, cols, seed):
    x = _rnd((rows, cols), seed)
    y = _rnd((cols, rows), seed + 1)
    np.testing.assert_array_equal(Tensor(x).T.contiguous().numpy(), x.T)
    got = (Tensor(x).T * 2 + Tensor(y)).numpy()
    np.testing.assert_allclose(got, x.T * 2 + y, rtol=1e-6)
    np.testing.assert_array_equal(Tensor(x).T.cast("float16").numpy(), x.T.astype(np.float16))


@given(perm=st.permutations([0, 1, 2]), shape=st.sampled_from([(16, 32, 16), (4, 16, 48),
                                                                (32, 3, 16), (5, 16, 17)]))
@fast(20)
def test_permuted_3d_values(perm, shape):
    x = _rnd(shape)
    np.testing.assert_array_equal(Tensor(x).permute(*perm).contiguous().numpy(),
                                  np.transpose(x, perm))


def test_a_matmul_with_a_packed_transposed_operand():
    """x @ w.T at 256 rows packs w into panels: a transposing copy."""
    x, w = _rnd((256, 784)), _rnd((256, 784), 1)
    np.testing.assert_allclose((Tensor(x) @ Tensor(w).T).numpy(), x @ w.T, rtol=1e-4,
                               atol=1e-3)
