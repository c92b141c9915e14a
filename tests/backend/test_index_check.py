"""Out-of-range indices raise IndexError (naming the op, the index and the valid range)
when the result is realized, on every device; in-range indices give numpy's answers."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import lazyten
from lazyten import Tensor, nn, optim
from tests.helpers import fast

N = 5  # the size of the indexed dimension in every case below


def _ops(device):
    """name -> (lazyten op on an index array, numpy reference, lowest valid index)."""
    table = np.arange(N * 3, dtype=np.float32).reshape(N, 3)
    logits = np.linspace(-1, 1, 4 * N, dtype=np.float32).reshape(4, N)
    t = Tensor(table, device=device)
    lg = Tensor(logits, device=device)

    def ce_ref(idx):
        logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        return -logp[np.arange(4), idx].mean()
    emb = nn.Embedding(N, 3)
    emb.weight = t
    return {
        "tensor index": (lambda i: t[Tensor(i, device=device)], lambda i: table[i], -N, (4,)),
        "gather": (lambda i: t.T.gather(1, Tensor(i.reshape(1, 4), device=device)),
                   lambda i: table.T[[0], i.reshape(1, 4)], 0, (4,)),
        "one_hot": (lambda i: Tensor(i, device=device).one_hot(N),
                    lambda i: np.eye(N, dtype=np.int64)[i], 0, (4,)),
        "Embedding": (lambda i: emb(Tensor(i, device=device)), lambda i: table[i], 0, (4,)),
        "cross entropy class label": (
            lambda i: lg.sparse_categorical_crossentropy(Tensor(i, device=device)), ce_ref, 0, (4,)),
    }


OPS = ["tensor index", "gather", "one_hot", "Embedding", "cross entropy class label"]


@pytest.mark.parametrize("op", OPS)
@fast(8)
@given(data=st.data())
def test_out_of_range_index_raises_when_realized(device, op, data):
    make, _, low, shape = _ops(device)[op]
    bad = data.draw(st.sampled_from([low - 1, low - 7, N, N + 3]), label="bad index")
    idx = np.array(data.draw(st.lists(st.integers(max(low, 0), N - 1), min_size=4, max_size=4)))
    idx[data.draw(st.integers(0, 3))] = bad
    result = make(idx.astype(np.int32))  # building the graph does not raise
    for _ in range(2):  # and realizing it again raises again
        with pytest.raises(IndexError) as info:
            result.numpy()
        message = str(info.value)
        assert op in message and str(bad) in message and f"{low} to {N - 1}" in message, message


@pytest.mark.parametrize("op", OPS)
@fast(6)
@given(data=st.data())
def test_in_range_indices_match_numpy(device, op, data):
    make, reference, low, shape = _ops(device)[op]
    idx = np.array(data.draw(st.lists(st.integers(low, N - 1), min_size=4, max_size=4)),
                   dtype=np.int32)
    np.testing.assert_allclose(make(idx).numpy(), reference(idx), rtol=1e-5, atol=1e-6)


def test_a_bad_label_stops_the_training_step_before_the_update(device):
    w = Tensor(np.ones((3, 4), np.float32), device=device, requires_grad=True)
    opt = optim.SGD([w], lr=0.1)
    x = Tensor(np.ones((2, 3), np.float32), device=device)
    loss = (x @ w).sparse_categorical_crossentropy(Tensor([1, 12], device=device))
    loss.backward()
    with pytest.raises(IndexError, match="index 12"):
        opt.step()
    np.testing.assert_array_equal(w.numpy(), np.ones((3, 4)), err_msg="a bad label updated w")


def test_jit_replay_checks_every_call(device):
    table = Tensor(np.arange(10, dtype=np.float32).reshape(5, 2), device=device).realize()

    @lazyten.jit
    def pick(idx):
        return (table[idx] * 2).realize()

    for good in ([0, 1], [4, 3], [2, 2]):
        np.testing.assert_array_equal(pick(Tensor(good, device=device)).numpy(),
                                      np.arange(10).reshape(5, 2)[good] * 2)
    with pytest.raises(IndexError, match="index 7"):
        pick(Tensor([0, 7], device=device)).numpy()


@pytest.mark.parametrize("make", [
    lambda x, i: x[:0, i],                 # the result is empty: no data, still a bad index
    lambda x, i: (x[:0, i] * 2).sum(0),    # an empty reduce folds to a constant
    lambda x, i: x[:, i][:0],
], ids=["empty result", "empty reduce", "sliced to empty"])
def test_a_bad_index_raises_even_when_the_result_is_empty(device, make):
    x = Tensor(np.arange(2 * N, dtype=np.float32).reshape(2, N), device=device)
    with pytest.raises(IndexError, match=f"index {N + 7} is out of range"):
        make(x, Tensor([1, N + 7], device=device)).numpy()
    with pytest.raises(IndexError):
        np.arange(2 * N).reshape(2, N)[:0, [1, N + 7]]  # numpy agrees
    good = make(x, Tensor([1, N - 1], device=device)).numpy()
    expected = make(np.arange(2 * N, dtype=np.float32).reshape(2, N), np.array([1, N - 1]))
    np.testing.assert_array_equal(good, expected)
