"""lazyten.utils.data (torch.utils.data): every batch against numpy indexing of the same
arrays; shuffled epochs as permutations; collation by torch's rules (checked against torch
2.13's default_collate when written: the expected dtypes below are torch's); splits,
subsets, concatenation, samplers and the errors."""
import collections
import subprocess
import sys

import numpy as np
import pytest

import lazyten
from lazyten import Tensor, dtypes
from lazyten.utils.data import (BatchSampler, ConcatDataset, DataLoader, Dataset, RandomSampler,
                                SequentialSampler, Subset, SubsetRandomSampler, TensorDataset,
                                default_collate, random_split)

N, D = 23, 5
X = np.arange(N * D, dtype=np.float32).reshape(N, D) / 7
Y = np.arange(N, dtype=np.int64) * 3  # label i*3: a batch's labels say which rows it holds


def _dataset(kind: str) -> TensorDataset:
    return TensorDataset(Tensor(X), Tensor(Y)) if kind == "tensor" else TensorDataset(X, Y)


def _epoch(loader) -> tuple[list, list]:
    xs, ys = [], []
    for x, y in loader:
        assert isinstance(x, Tensor) and isinstance(y, Tensor), f"batch of {type(x)}, {type(y)}"
        assert (x.dtype, y.dtype) == (dtypes.float32, dtypes.int64), f"{x.dtype}, {y.dtype}"
        xs.append(x.numpy())
        ys.append(y.numpy())
    return xs, ys


# ---- batches against numpy ----
@pytest.mark.parametrize("kind", ["tensor", "numpy"])
@pytest.mark.parametrize("batch_size,drop_last", [(1, False), (4, False), (4, True), (23, True),
                                                  (30, False), (30, True)])
def test_in_order_batches_are_numpy_slices(kind, batch_size, drop_last):
    loader = DataLoader(_dataset(kind), batch_size=batch_size, drop_last=drop_last)
    xs, ys = _epoch(loader)
    spans = [(a, min(a + batch_size, N)) for a in range(0, N, batch_size)]
    if drop_last:
        spans = [(a, b) for a, b in spans if b - a == batch_size]
    assert len(xs) == len(loader) == len(spans), f"{len(xs)} batches, len {len(loader)}"
    for x, y, (a, b) in zip(xs, ys, spans):
        np.testing.assert_array_equal(x, X[a:b])
        np.testing.assert_array_equal(y, Y[a:b])


def test_in_order_batch_of_a_tensor_is_a_view_of_it():
    t = Tensor(X)
    for x, in DataLoader(TensorDataset(t), batch_size=8):
        assert x.lazydata.base is t.lazydata, "an unshuffled batch should be a slice (no copy)"


@pytest.mark.parametrize("kind", ["tensor", "numpy"])
def test_shuffled_epochs_are_reproducible_permutations(kind):
    loader = DataLoader(_dataset(kind), batch_size=4, shuffle=True)
    lazyten.manual_seed(0)
    first, second = _epoch(loader), _epoch(loader)
    lazyten.manual_seed(0)
    again = _epoch(loader)
    orders = []
    for xs, ys in (first, second):
        assert [len(y) for y in ys] == [4] * 5 + [3]
        x, y = np.concatenate(xs), np.concatenate(ys)
        np.testing.assert_array_equal(np.sort(y), Y, err_msg="every sample once an epoch")
        np.testing.assert_array_equal(x, X[y // 3], err_msg="rows and labels picked together")
        orders.append(y)
    assert not np.array_equal(orders[0], orders[1]), "two epochs in the same order"
    assert np.array_equal(orders[0], np.concatenate(again[1])), "manual_seed(0) did not repeat it"
    assert not np.array_equal(orders[0], Y), "shuffle=True left the data in order"


def test_numpy_generator_orders_the_epoch():
    loader = DataLoader(_dataset("tensor"), batch_size=5, shuffle=True, drop_last=True,
                        generator=np.random.default_rng(7))
    ys = np.concatenate(_epoch(loader)[1])
    np.testing.assert_array_equal(ys, Y[np.random.default_rng(7).permutation(N)[:20]])


def test_dataset_views_lazy_tensors_and_in_place_updates():
    """A strided view and an unrealized tensor gather as numpy does; an update of the
    dataset's tensor shows in the next epoch (no stale host copy)."""
    base = np.arange(N * 8, dtype=np.float32).reshape(N, 8)
    viewed, lazy = Tensor(base)[:, 1::2].flip(1), Tensor(base) * 2 + 1
    padded = Tensor(base).pad(((0, 0), (1, 2)))  # a masked view: copied once, not per batch
    t = Tensor(X)
    ds = TensorDataset(viewed, lazy, padded, t, Tensor(Y))
    copies: dict = {}
    for epoch in range(2):
        for a, b, p, c, y in DataLoader(ds, batch_size=6, shuffle=True):
            i = y.numpy() // 3
            np.testing.assert_array_equal(a.numpy(), base[i][:, 1::2][:, ::-1])
            np.testing.assert_array_equal(b.numpy(), base[i] * 2 + 1)
            np.testing.assert_array_equal(p.numpy(), np.pad(base[i], ((0, 0), (1, 2))))
            np.testing.assert_array_equal(c.numpy(), X[i] if epoch == 0 else -X[i])
            copies[id(ds._views[2])] = ds._views[2]  # (kept alive: ids stay distinct)
        t.assign(Tensor(-X))
    assert len(copies) == 1, f"the padded tensor's host copy was made {len(copies)} times"


def test_requires_grad_tensor_batches_carry_gradients():
    w = Tensor(X, requires_grad=True)
    x, y = next(iter(DataLoader(TensorDataset(w, Tensor(Y)), batch_size=4, shuffle=True)))
    (x * 2).sum().backward()
    expected = np.zeros_like(X)
    expected[y.numpy() // 3] = 2
    np.testing.assert_array_equal(w.grad.numpy(), expected)


def test_batches_feed_a_jitted_step():
    @lazyten.jit
    def step(x: Tensor, y: Tensor) -> Tensor:
        return (x.sum(1) + y.float()).realize()
    for shuffle in (False, True):
        for x, y in DataLoader(_dataset("tensor"), batch_size=4, shuffle=shuffle, drop_last=True):
            i = y.numpy() // 3
            np.testing.assert_allclose(step(x, y).numpy(), X[i].sum(1) + Y[i], rtol=1e-6)


# ---- collation (torch's rules) ----
Point = collections.namedtuple("Point", "a b")


class Samples(Dataset):
    def __len__(self) -> int:
        return 7

    def __getitem__(self, i: int):
        return (np.full((2, 3), i, np.float64), i, i / 4, i % 2 == 0, np.float32(i), f"s{i}",
                {"u8": np.arange(3, dtype=np.uint8) + i, "pair": Point(i, [i, i * 1.5])},
                [i, i + 0.5])


def test_custom_dataset_collates_as_torch():
    batch = next(iter(DataLoader(Samples(), batch_size=3)))
    assert isinstance(batch, list) and len(batch) == 8, "a tuple sample collates to a list"
    arr, ints, floats, bools, f32, strs, d, mixed = batch
    idx = np.arange(3)
    expect = [(arr, np.stack([np.full((2, 3), i, np.float64) for i in idx]), dtypes.float64),
              (ints, idx, dtypes.int64), (floats, idx / 4, dtypes.float64),
              (bools, idx % 2 == 0, dtypes.bool), (f32, idx.astype(np.float32), dtypes.float32),
              (d["u8"], np.arange(3, dtype=np.uint8) + idx[:, None], dtypes.uint8)]
    for got, want, dtype in expect:
        assert isinstance(got, Tensor) and got.dtype == dtype, f"{got!r}: expected {dtype.name}"
        np.testing.assert_array_equal(got.numpy(), want)
    assert strs == ["s0", "s1", "s2"]
    assert isinstance(d, dict) and isinstance(d["pair"], Point)
    np.testing.assert_array_equal(d["pair"].a.numpy(), idx)
    b0, b1 = d["pair"].b  # a list sample stays a list of collated fields
    assert (b0.dtype, b1.dtype) == (dtypes.int64, dtypes.float64)
    np.testing.assert_array_equal(b1.numpy(), idx * 1.5)
    # numbers take the first element's type: an int first and a float later is float32
    assert [m.dtype for m in mixed] == [dtypes.int64, dtypes.float64]
    assert default_collate([1, 2.5]).dtype == dtypes.float32


def test_collate_tensor_samples_realized_lazy_and_with_gradients():
    src = Tensor(X)
    realized = [src[i] for i in (3, 1, 4)]
    lazy = [src[i] * 2 for i in (3, 1, 4)]
    for samples, scale in ((realized, 1), (lazy, 2), ([Tensor(X[i]) for i in (3, 1, 4)], 1)):
        out = default_collate(samples)
        assert out.shape == (3, D) and out.dtype == dtypes.float32
        np.testing.assert_array_equal(out.numpy(), X[[3, 1, 4]] * scale)
    w = Tensor(X, requires_grad=True)
    default_collate([w[2], w[0]]).sum().backward()
    assert w.grad.numpy()[[0, 2]].sum() == 2 * D and w.grad.numpy().sum() == 2 * D


def test_collate_errors():
    with pytest.raises(RuntimeError, match="equal size"):
        default_collate([[1, 2], [3]])
    with pytest.raises(TypeError, match="found"):
        default_collate([object(), object()])
    with pytest.raises(TypeError, match="dtype"):
        default_collate([np.array(["a"]), np.array(["b"])])


def test_subclass_getitem_getitems_and_unbatched():
    class Scaled(TensorDataset):
        def __getitem__(self, i):
            x, y = super().__getitem__(i)
            return x * 10, y
    x, y = next(iter(DataLoader(Scaled(X, Y), batch_size=3)))
    np.testing.assert_array_equal(x.numpy(), X[:3] * 10)

    class Many(Samples):
        def __getitems__(self, indices):
            return [(i * 100,) for i in indices]
    assert next(iter(DataLoader(Many(), batch_size=2)))[0].tolist() == [0, 100]
    # batch_size=None: each sample converted alone (numpy to Tensor, numbers unchanged)
    first = next(iter(DataLoader(Samples(), batch_size=None)))
    assert isinstance(first, list), "torch's default_convert makes a tuple sample a list"
    assert isinstance(first[0], Tensor) and first[0].shape == (2, 3) and first[1] == 0
    assert isinstance(first[4], Tensor) and first[4].dtype == dtypes.float32 and first[5] == "s0"


# ---- datasets and splits ----
def test_random_split_sizes_disjoint_and_reproducible():
    ds = _dataset("tensor")
    parts = random_split(ds, [10, 3, 10], generator=np.random.default_rng(1))
    assert [len(p) for p in parts] == [10, 3, 10]
    seen = np.concatenate([p.indices for p in parts])
    np.testing.assert_array_equal(np.sort(seen), np.arange(N), err_msg="disjoint, all covered")
    again = random_split(ds, [10, 3, 10], generator=np.random.default_rng(1))
    assert [p.indices for p in parts] == [p.indices for p in again]
    # torch 2.x fractions: floors 6, 6, 9, then the 2 left over to the first two subsets
    assert [len(p) for p in random_split(ds, [0.3, 0.3, 0.4])] == [7, 7, 9]
    assert [len(p) for p in random_split(ds, [0.5, 0.5])] == [12, 11]
    with pytest.raises(ValueError, match="sum"):
        random_split(ds, [10, 10])


def test_subset_and_its_loader():
    sub = Subset(_dataset("tensor"), [5, 2, 7, 11, 0])
    assert len(sub) == 5 and sub[1][1].item() == Y[2]
    xs, ys = _epoch(DataLoader(sub, batch_size=2))
    np.testing.assert_array_equal(np.concatenate(xs), X[[5, 2, 7, 11, 0]])
    lazyten.manual_seed(3)
    ys = np.concatenate(_epoch(DataLoader(sub, batch_size=2, shuffle=True))[1])
    assert sorted(ys // 3) == [0, 2, 5, 7, 11]


def test_concat_dataset():
    a, b = TensorDataset(X[:4], Y[:4]), TensorDataset(X[10:], Y[10:])
    for cat in (ConcatDataset([a, b]), a + b):
        assert len(cat) == 4 + N - 10 and cat.cumulative_sizes == [4, N - 6]
        assert cat[3][1] == Y[3] and cat[4][1] == Y[10] and cat[-1][1] == Y[-1]
    xs, ys = _epoch(DataLoader(a + b, batch_size=5))
    np.testing.assert_array_equal(np.concatenate(ys), np.concatenate([Y[:4], Y[10:]]))
    with pytest.raises(ValueError, match="exceed"):
        (a + b)[-100]


# ---- samplers ----
def test_samplers():
    ds = _dataset("numpy")
    assert list(SequentialSampler(ds)) == list(range(N))
    lazyten.manual_seed(0)
    perm = list(RandomSampler(ds))
    assert sorted(perm) == list(range(N)) and perm != list(range(N))
    drawn = list(RandomSampler(ds, replacement=True, num_samples=50))
    assert len(drawn) == 50 and set(drawn) <= set(range(N)) and len(set(drawn)) < N
    repeated = list(RandomSampler(ds, num_samples=30))  # past N: whole permutations again
    assert sorted(repeated[:N]) == list(range(N)) and len(repeated) == 30
    given = list(range(0, 40, 3))
    sub = list(SubsetRandomSampler(given))
    assert sorted(sub) == given and sub != given and all(type(i) is int for i in sub)
    assert list(BatchSampler(range(7), 3, drop_last=False)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(BatchSampler(SequentialSampler(range(7)), 3, True)) == [[0, 1, 2], [3, 4, 5]]
    assert len(BatchSampler(range(7), 3, False)) == 3 and len(BatchSampler(range(7), 3, True)) == 2


def test_loader_with_sampler_and_batch_sampler():
    ds = _dataset("tensor")
    ys = np.concatenate(_epoch(DataLoader(ds, batch_size=2, sampler=[9, 3, 3, 20, 0]))[1])
    np.testing.assert_array_equal(ys, Y[[9, 3, 3, 20, 0]])
    loader = DataLoader(ds, batch_sampler=[[1, 2], [22], [5, 6, 7]])
    assert len(loader) == 3
    assert [y.tolist() for _, y in loader] == [[3, 6], [66], [15, 18, 21]]


def test_workers_and_ignored_options_run_in_process():
    loader = DataLoader(_dataset("tensor"), batch_size=8, num_workers=4, pin_memory=True,
                        persistent_workers=True, prefetch_factor=2)
    np.testing.assert_array_equal(np.concatenate(_epoch(loader)[0]), X)


# ---- errors ----
def test_errors():
    with pytest.raises(ValueError, match=r"\(23, 5\).*\(22,\)"):
        TensorDataset(Tensor(X), Y[:-1])
    for bad in (0, -2, 1.5):
        with pytest.raises(ValueError, match="batch_size"):
            DataLoader(_dataset("numpy"), batch_size=bad)
    with pytest.raises(ValueError, match="mutually exclusive with shuffle"):
        DataLoader(_dataset("numpy"), sampler=SequentialSampler(X), shuffle=True)
    with pytest.raises(ValueError, match="batch_sampler"):
        DataLoader(_dataset("numpy"), batch_size=4, batch_sampler=[[0]])
    with pytest.raises(ValueError, match="num_workers"):
        DataLoader(_dataset("numpy"), num_workers=-1)
    with pytest.raises(TypeError, match="unexpected keyword"):
        DataLoader(_dataset("numpy"), prefetch=2)
    with pytest.raises(TypeError, match="numpy Generator"):
        DataLoader(_dataset("numpy"), shuffle=True, generator=0)
    with pytest.raises(NotImplementedError, match="__getitem__"):
        Dataset()[0]


def test_torch_spelling_in_a_new_process():
    code = ("import numpy as np, lazyten as torch\n"
            "ds = torch.utils.data.TensorDataset(torch.Tensor(np.ones((5, 2), np.float32)))\n"
            "print(len(torch.utils.data.DataLoader(ds, batch_size=2)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "3"
