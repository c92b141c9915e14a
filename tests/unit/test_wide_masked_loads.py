"""Masked loads of vectors wider than a register (codegen/renderer/llvm_masks.py), against
numpy: float64 with 8 lanes takes two AVX2 registers, and a padded row's last vector has
a register whose lanes are partly known off. Before session 28's fix, float64 3x3 convs
(padding 1) at widths 13, 21 and 29 on an AVX2 host returned garbage (1e180 and the like)
in their last column. CI runs this file on the host's width and again under
CPU_VECTOR_BITS=256 (.ci/run), where float64 vectors are two registers.
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lazyten.nn.functional as F
from lazyten import Tensor


def conv_ref(x, w, padding):
    """numpy float64 conv, stride 1."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    kh, kw = w.shape[2:]
    cols = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))
    return np.einsum("ncyxij,ocij->noyx", cols, w.astype(np.float64))


@pytest.mark.parametrize("width", [13, 21, 29, 5, 22])
def test_float64_conv_padded_rows_match_numpy(width):
    rng = np.random.default_rng(width)
    x, w = rng.standard_normal((2, 2, 8, width)), rng.standard_normal((3, 2, 3, 3))
    got = F.conv2d(Tensor(x), Tensor(w), padding=1).numpy()
    np.testing.assert_allclose(got, conv_ref(x, w, 1), rtol=1e-10, atol=1e-10)


@settings(max_examples=25, deadline=None)
@given(width=st.integers(1, 40), rows=st.integers(1, 9), taps=st.sampled_from([1, 3, 5]),
       padding=st.integers(0, 2), dtype=st.sampled_from([np.float64, np.float32]),
       cin=st.integers(1, 3), cout=st.integers(1, 4))
def test_padded_convs_match_numpy(width, rows, taps, padding, dtype, cin, cout):
    """The siblings: any width, height, taps, padding and channel counts, float64 and
    float32 (masked windows through the conv's padding and the row's)."""
    if width + 2 * padding < taps or rows + 2 * padding < taps:
        return
    rng = np.random.default_rng(width * 100 + rows)
    x = rng.standard_normal((2, cin, rows, width)).astype(dtype)
    w = rng.standard_normal((cout, cin, taps, taps)).astype(dtype)
    got = F.conv2d(Tensor(x), Tensor(w), padding=padding).numpy()
    tol = 1e-10 if dtype == np.float64 else 1e-4
    np.testing.assert_allclose(got, conv_ref(x, w, padding), rtol=tol, atol=tol)
