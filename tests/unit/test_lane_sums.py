"""The end of a reduce along vector lanes (codegen/lane_sums.py): accumulators combined
together give the same bits as each combined alone, in fewer ops.

The emitter here computes: a "uop" is a numpy array (a vector) or a 0-d one (a scalar),
and each alu call is counted. Float32 sums of random values round differently in any
other order, so equal bits mean the same pairs in the same order.
"""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from codegen import lane_sums
from codegen.ops import BinaryOps


class Counting:
    """alu / vectorize / extract on numpy values, counting the alu calls."""
    def __init__(self):
        self.ops = 0

    def alu(self, op, dtype, a, b):
        self.ops += 1
        return np.float32(a + b) if op is BinaryOps.ADD else np.maximum(a, b)

    def vectorize(self, lanes):
        return np.array(lanes, dtype=np.float32)

    def extract(self, x, lane):
        return x if x.ndim == 0 else x[lane]


class Dtype:
    """What `dtype_of` reads of a uop here: its lane count (and equality)."""
    def __init__(self, count):
        self.count = count

    def vec(self, n):
        return Dtype(n)

    def __eq__(self, other):
        return self.count == other.count


def _dtype_of(x):
    return Dtype(1 if np.ndim(x) == 0 else len(x))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 20), lanes=st.sampled_from([2, 4, 8, 16, 32]),
       op=st.sampled_from([BinaryOps.ADD, BinaryOps.MAX]), seed=st.integers(0, 2**16))
def test_accumulators_together_give_the_bits_of_each_alone(monkeypatch, n, lanes, op, seed):
    monkeypatch.setattr(lane_sums, "dtype_of", _dtype_of)
    rng = np.random.default_rng(seed)
    accs = [(rng.standard_normal(lanes) * 10.0 ** rng.integers(-3, 4)).astype(np.float32)
            for _ in range(n)]
    alone, together = Counting(), Counting()
    expected = [lane_sums.alone(alone, op, a) for a in accs]
    got = lane_sums.across_lanes(together, op, accs)
    assert len(got) == n
    np.testing.assert_array_equal(np.array(got, np.float32).view(np.uint32),
                                  np.array(expected, np.float32).view(np.uint32))
    if n >= 2:  # a group of two or more shares its ops
        assert together.ops < alone.ops
    if n == lanes == 16:  # a 4 x 4 dot-product tile: 15 vector ops where alone took 64
        assert (together.ops, alone.ops) == (15, 64)
