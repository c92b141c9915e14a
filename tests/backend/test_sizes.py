"""Launch geometry on every device: odd, prime, empty and large sizes; reductions over
huge and tiny axes; more than three parallel axes; work-group (local memory) reductions."""
import numpy as np
import pytest

from lazyten import Tensor


def rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def close(got, want, rtol=1e-5, atol=1e-5):
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("shape", [(1,), (7919,), (1009, 13), (65537,)], ids=str)
def test_elementwise_odd_sizes(device, shape):
    x, y = rnd(*shape), rnd(*shape, seed=1)
    close((Tensor(x, device=device) * Tensor(y, device=device) + 1).numpy(), x * y + 1)


def test_zero_size(device):
    x = np.zeros((0, 5), dtype=np.float32)
    t = Tensor(x, device=device)
    assert (t + 1).numpy().shape == (0, 5)
    close(t.sum(axis=0).numpy(), np.zeros(5, np.float32))   # reducing an empty axis
    close(t.max(axis=1).numpy(), np.zeros((0,), np.float32))


def test_huge_single_reduction(device):
    x = np.random.default_rng(0).random(1 << 20).astype(np.float32)
    got = Tensor(x, device=device).sum().numpy()
    np.testing.assert_allclose(got, x.astype(np.float64).sum(), rtol=1e-4)
    m = x.copy()
    m[123457] = 7.5
    assert Tensor(m, device=device).max().item() == 7.5


def test_prime_length_reductions(device):
    x = rnd(3, 7919)
    close(Tensor(x, device=device).sum(axis=1).numpy(), x.sum(axis=1), rtol=1e-4, atol=1e-3)
    x = rnd(1021)
    close(Tensor(x, device=device).max().numpy(), x.max())


def test_reduction_over_tiny_axes(device):
    x = rnd(4099, 2)
    close(Tensor(x, device=device).sum(axis=1).numpy(), x.sum(axis=1))
    close(Tensor(x, device=device).max(axis=0).numpy(), x.max(axis=0))
    close(Tensor(rnd(5, 1, 3), device=device).sum(axis=1).numpy(), rnd(5, 1, 3).sum(axis=1))


def test_reduction_over_split_axes(device):
    x = rnd(30, 5, 70)  # reduce axes 0 and 2: not adjacent, so two reduce loops
    close(Tensor(x, device=device).sum(axis=(0, 2)).numpy(), x.sum(axis=(0, 2)), atol=1e-4)
    close(Tensor(x, device=device).max(axis=(0, 2)).numpy(), x.max(axis=(0, 2)))


def test_reduction_with_nan_and_negative_values(device):
    x = -np.abs(rnd(4, 600)) - 1  # all negative: the MAX identity must be -inf, not 0
    close(Tensor(x, device=device).max(axis=1).numpy(), x.max(axis=1))
    x[1, 300] = np.nan
    got = Tensor(x, device=device).max(axis=1).numpy()
    assert np.isnan(got[1]) and not np.isnan(got[[0, 2, 3]]).any()


def test_more_than_three_parallel_axes(device):
    x = rnd(3, 5, 7, 11, 13)  # permuted so no two axes merge: five global axes
    close(Tensor(x, device=device).permute(4, 2, 0, 3, 1).contiguous().numpy(),
          x.transpose(4, 2, 0, 3, 1))
    y = rnd(2, 3, 4, 5, 6, 7)
    t = Tensor(y, device=device).permute(5, 3, 1, 4, 2, 0)
    close((t * 2).sum(axis=5).numpy(), (y.transpose(5, 3, 1, 4, 2, 0) * 2).sum(axis=5))


def test_axis_beyond_the_second_dims_launch_limit(device):
    x = rnd(3, 70001)  # transposed: dim 1 would need 70001 work-groups (CUDA allows 65535)
    close(Tensor(x, device=device).T.contiguous().numpy(), x.T)


@pytest.mark.parametrize("m,k,n", [(257, 300, 300), (64, 100, 100), (130, 17, 1000)], ids=str)
@pytest.mark.parametrize("layout", ["nn", "tn", "nt"])
def test_matmul_sizes_no_vector_divides(device, m, k, n, layout):
    """On the CPU, rows and columns padded to whole tiles and B packed into zero-padded
    panels (D68); targets without tiles (CLANG, OpenCL) run the same graphs untiled."""
    a = rnd(k, m) if layout[0] == "t" else rnd(m, k)
    b = rnd(n, k, seed=1) if layout[1] == "t" else rnd(k, n, seed=1)
    at, bt = Tensor(a, device=device).realize(), Tensor(b, device=device).realize()
    got = ((at.T if layout[0] == "t" else at) @ (bt.T if layout[1] == "t" else bt)).numpy()
    want = (a.T if layout[0] == "t" else a) @ (b.T if layout[1] == "t" else b)
    close(got, want, rtol=1e-4, atol=1e-3)
