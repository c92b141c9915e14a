"""A representative run of the Tensor op suite on every device, against numpy: the fused,
strided, padded and reduced kernels real models produce (matmul, conv2d, pooling,
softmax, indexing, integer floor division, a backward pass)."""
import numpy as np

from lazyten import Tensor


def rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def close(got, want, rtol=1e-4, atol=1e-5):
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def conv2d_ref(x, w, padding):
    x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    n, _, h, wd = x.shape
    co, _, kh, kw = w.shape
    out = np.zeros((n, co, h - kh + 1, wd - kw + 1), np.float32)
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,oc->nohw", x[:, :, i:i + out.shape[2], j:j + out.shape[3]],
                             w[:, :, i, j])
    return out


def test_matmul(device):
    a, b = rnd(64, 48), rnd(48, 33, seed=1)
    close((Tensor(a, device=device) @ Tensor(b, device=device)).numpy(), a @ b)
    a, b = rnd(2, 3, 8, 5), rnd(5, 7, seed=1)  # batched, broadcast
    close((Tensor(a, device=device) @ Tensor(b, device=device)).numpy(), a @ b)


def test_half_matmul(device):
    a, b = rnd(16, 40).astype(np.float16), rnd(40, 8, seed=1).astype(np.float16)
    got = (Tensor(a, device=device) @ Tensor(b, device=device)).numpy()
    assert got.dtype == np.float16
    close(got.astype(np.float32), a.astype(np.float32) @ b.astype(np.float32), rtol=1e-2, atol=1e-2)


def test_conv2d_and_pooling(device):
    x, w, bias = rnd(2, 3, 9, 9), rnd(4, 3, 3, 3, seed=1), rnd(4, seed=2)
    out = Tensor(x, device=device).conv2d(Tensor(w, device=device), Tensor(bias, device=device),
                                          padding=1)
    want = conv2d_ref(x, w, 1) + bias.reshape(1, 4, 1, 1)
    close(out.numpy(), want)
    pooled = out.max_pool2d(2).numpy()
    close(pooled, want[:, :, :8, :8].reshape(2, 4, 4, 2, 4, 2).max(axis=(3, 5)))


def test_softmax_and_log_softmax(device):
    x = rnd(8, 50) * 5
    e = np.exp(x - x.max(-1, keepdims=True))
    close(Tensor(x, device=device).softmax(-1).numpy(), e / e.sum(-1, keepdims=True))
    close(Tensor(x, device=device).log_softmax(-1).numpy(),
          np.log(e / e.sum(-1, keepdims=True)), atol=1e-4)


def test_getitem_and_movement(device):
    x = rnd(10, 12)
    t = Tensor(x, device=device)
    close(t[1:9:3, ::-2].numpy(), x[1:9:3, ::-2])
    close(t[:, 3].numpy(), x[:, 3])
    close(t[[0, 7, 3]].numpy(), x[[0, 7, 3]])
    close(t.pad(((1, 2), (0, 1))).flip(1).numpy(), np.pad(x, ((1, 2), (0, 1)))[:, ::-1])
    close(t.cat(t * 2, dim=0).numpy(), np.concatenate([x, x * 2], 0))


def test_argmax_cumsum_and_statistics(device):
    x = rnd(6, 9)
    t = Tensor(x, device=device)
    np.testing.assert_array_equal(t.argmax(axis=1).numpy(), x.argmax(axis=1))
    close(t.cumsum(axis=1).numpy(), x.cumsum(axis=1))
    close(t.mean(axis=0).numpy(), x.mean(axis=0))
    close(t.var(axis=1).numpy(), x.var(axis=1, ddof=1))


def test_elementwise_chain(device):
    x = rnd(5, 7) * 3
    t = Tensor(x, device=device)
    want = 1 / (1 + np.exp(-x)) * np.tanh(x) + np.where(x > 0.5, np.sqrt(np.abs(x)), x ** 2)
    close((t.sigmoid() * t.tanh() + (t > 0.5).where(t.abs().sqrt(), t * t)).numpy(), want)


def test_integer_floor_division_and_mod(device):
    a = np.array([7, -7, 7, -7, 0, 13, -1], dtype=np.int32)
    b = np.array([2, 2, -2, -2, 3, 5, 3], dtype=np.int32)
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    np.testing.assert_array_equal((ta // tb).numpy(), a // b)   # floors, like Python
    np.testing.assert_array_equal((ta % tb).numpy(), a % b)


def test_backward(device):
    x, w = rnd(4, 6), rnd(6, 3, seed=1)
    tw = Tensor(w, device=device, requires_grad=True)
    h = Tensor(x, device=device) @ tw
    h.relu().sum().backward()
    close(tw.grad.numpy(), x.T @ (x @ w > 0).astype(np.float32))


def test_cross_entropy(device):
    size = 37
    logits, labels = rnd(size, 10), np.arange(size) % 10
    got = Tensor(logits, device=device).sparse_categorical_crossentropy(
        Tensor(labels, device=device)).numpy()
    e = np.exp(logits - logits.max(-1, keepdims=True))
    logp = np.log(e / e.sum(-1, keepdims=True))
    close(got, np.float32(-logp[np.arange(size), labels].mean()), atol=1e-4)
