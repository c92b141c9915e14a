"""torch.utils.data for lazyten: datasets, samplers, DataLoader and default_collate.

A sampler yields dataset indices, a BatchSampler groups them, and a DataLoader turns each
group into a batch: `collate_fn([dataset[i] for i in group])`. A TensorDataset (alone or
under a Subset) with the default collate skips the samples: each batch is one gather per
tensor, made on the host from the tensor's own memory (a CPU or CLANG tensor, or a numpy
array) straight into the batch's new buffer, and an unshuffled batch of a tensor is a
slice (a view: no copy). Random orders come from lazyten's generator (`manual_seed`) or
a numpy Generator passed as `generator=`. Workers are not processes: everything runs in
the calling process (docs/ops.md, "torch.utils.data").
"""
from __future__ import annotations
import bisect
import collections.abc
import itertools
import math
import warnings
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from codegen.dtypes import dtypes
from lazyten.tensor import Tensor
from lazyten.utils.host_batches import Index, HostView, gather_rows, host_array, new_host_tensor

__all__ = ["Dataset", "TensorDataset", "ConcatDataset", "Subset", "random_split",
           "Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler",
           "BatchSampler", "DataLoader", "default_collate", "default_convert"]

def _as_list(index: Index) -> list:
    if isinstance(index, slice):
        return list(range(index.start, index.stop))
    return index.tolist() if isinstance(index, np.ndarray) else list(index)


# ---- datasets ----
class Dataset:
    """A map-style dataset: `dataset[i]` is a sample; subclasses define `__getitem__` and
    `__len__` (as torch's, the base defines no `__len__`). `a + b` concatenates."""

    def __getitem__(self, index: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")

    def __add__(self, other: Dataset) -> ConcatDataset:
        return ConcatDataset([self, other])


class TensorDataset(Dataset):
    """Sample i is `tuple(t[i] for t in tensors)`: lazyten Tensors or numpy arrays whose
    first dims are equal (a numpy row stays numpy; a batch of it is a Tensor)."""

    def __init__(self, *tensors: Any):
        if not tensors or any(not isinstance(t, (Tensor, np.ndarray)) or t.ndim == 0 for t in tensors):
            raise TypeError(f"TensorDataset takes Tensors or numpy arrays with at least one dim, "
                            f"got {[type(t).__name__ for t in tensors]}")
        if len({t.shape[0] for t in tensors}) > 1:
            raise ValueError(f"TensorDataset: the tensors' first dims differ: shapes "
                             f"{[tuple(t.shape) for t in tensors]}")
        self.tensors = tuple(tensors)
        self._views: list[HostView | None] = [None] * len(tensors)

    def __getitem__(self, index: Any) -> tuple:
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]

    def _batch(self, index: Index) -> list:
        """default_collate of the samples `index`, as one gather per tensor."""
        return [gather_rows(t, index, self._views, k) for k, t in enumerate(self.tensors)]


class ConcatDataset(Dataset):
    """The samples of each dataset in turn."""

    def __init__(self, datasets: Iterable[Dataset]):
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("ConcatDataset: datasets should not be an empty iterable")
        self.cumulative_sizes = list(itertools.accumulate(len(d) for d in self.datasets))  # type: ignore

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, index: int) -> Any:
        if index < 0:
            if -index > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            index += len(self)
        which = bisect.bisect_right(self.cumulative_sizes, index)
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][index - start]


class Subset(Dataset):
    """The samples `indices` of `dataset`, in that order."""

    def __init__(self, dataset: Dataset, indices: Sequence[int]):
        self.dataset, self.indices = dataset, indices

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, list):
            return self.dataset[[self.indices[i] for i in index]]
        return self.dataset[self.indices[index]]

    def __len__(self) -> int:
        return len(self.indices)


def _batch_maker(dataset: Any) -> Callable[[Index], Any] | None:
    """A function from a batch's indices to its default_collate'd batch without making
    samples (a TensorDataset, or a Subset of one, whose __getitem__ is not overridden)."""
    if type(dataset).__getitem__ is TensorDataset.__getitem__:
        return dataset._batch
    if type(dataset).__getitem__ is Subset.__getitem__:
        inner = _batch_maker(dataset.dataset)
        if inner is not None:
            order = np.asarray(dataset.indices, dtype=np.int64)  # (read once an epoch)
            return lambda index: inner(order[index])
    return None


def random_split(dataset: Dataset, lengths: Sequence[int | float],
                 generator: np.random.Generator | None = None) -> list[Subset]:
    """Disjoint random Subsets of these lengths, or fractions of len(dataset) summing to 1
    (torch 2.x: floors, then the remainder one by one to the first subsets)."""
    n = len(dataset)  # type: ignore[arg-type]
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        for i, frac in enumerate(lengths):
            if not 0 <= frac <= 1:
                raise ValueError(f"Fraction at index {i} is not between 0 and 1")
        sizes = [int(math.floor(n * frac)) for frac in lengths]
        for i in range(n - sum(sizes)):
            sizes[i % len(sizes)] += 1
        for i, size in enumerate(sizes):
            if size == 0:
                warnings.warn(f"Length of split at index {i} is 0. This might result in an "
                              f"empty dataset.", stacklevel=2)
        lengths = sizes
    if sum(lengths) != n:
        raise ValueError(f"random_split: lengths {list(lengths)} sum to {sum(lengths)}, not "
                         f"to the length of the dataset ({n})")
    order = _rng(_checked(generator)).permutation(n).tolist()
    ends = list(itertools.accumulate(int(size) for size in lengths))
    return [Subset(dataset, order[end - int(size):end]) for end, size in zip(ends, lengths)]


# ---- samplers ----
def _checked(generator: Any) -> np.random.Generator | None:
    if generator is not None and not isinstance(generator, np.random.Generator):
        raise TypeError(f"generator must be a numpy Generator (np.random.default_rng(seed)) or "
                        f"None for lazyten's (lazyten.manual_seed), got {type(generator).__name__}")
    return generator


def _rng(generator: np.random.Generator | None) -> np.random.Generator:
    """`generator`, else lazyten's, read now: manual_seed replaces it."""
    return Tensor._rng if generator is None else generator


def _check_positive(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} should be a positive integer value, but got {name}={value!r}")


class Sampler:
    """Yields dataset indices. lazyten's samplers also give a whole epoch's order at once
    (`_epoch`: a numpy array, or a range when in order), which DataLoader batches."""

    def __init__(self, data_source: Any = None):
        pass

    def __iter__(self) -> Iterator[Any]:
        order = self._epoch()
        if order is None:
            raise NotImplementedError(f"{type(self).__name__} must define __iter__")
        return iter(order if isinstance(order, range) else order.tolist())

    def _epoch(self) -> np.ndarray | range | None:
        return None


class SequentialSampler(Sampler):
    def __init__(self, data_source: Any):
        self.data_source = data_source

    def __len__(self) -> int:
        return len(self.data_source)

    def _epoch(self) -> range:
        return range(len(self.data_source))


class RandomSampler(Sampler):
    """A new permutation each epoch; with `replacement`, `num_samples` independent draws;
    without, `num_samples` past len(data_source) repeats whole permutations (as torch)."""

    def __init__(self, data_source: Any, replacement: bool = False, num_samples: int | None = None,
                 generator: np.random.Generator | None = None):
        if num_samples is not None:
            _check_positive("num_samples", num_samples)
        self.data_source, self.replacement, self._num_samples = data_source, replacement, num_samples
        self.generator = _checked(generator)

    def __len__(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def _epoch(self) -> np.ndarray:
        rng, n, k = _rng(self.generator), len(self.data_source), len(self)
        if self.replacement:
            return rng.integers(0, n, size=k)
        if k == n:
            return rng.permutation(n)
        return np.concatenate([rng.permutation(n) for _ in range(-(-k // n))])[:k]


class SubsetRandomSampler(Sampler):
    """The given indices in a new random order each epoch."""

    def __init__(self, indices: Sequence[int], generator: np.random.Generator | None = None):
        self.indices, self.generator = indices, _checked(generator)

    def __len__(self) -> int:
        return len(self.indices)

    def _epoch(self) -> np.ndarray:
        order = _rng(self.generator).permutation(len(self.indices))
        return np.asarray(self.indices, dtype=np.int64)[order]


class BatchSampler(Sampler):
    """Lists of `batch_size` indices from `sampler` (the last shorter unless `drop_last`)."""

    def __init__(self, sampler: Any, batch_size: int, drop_last: bool):
        _check_positive("batch_size", batch_size)
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last!r}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self) -> Iterator[list]:
        return map(_as_list, self._indices())

    def __len__(self) -> int:
        n, size = len(self.sampler), self.batch_size
        return n // size if self.drop_last else -(-n // size)

    def _indices(self) -> Iterator[Index]:
        """The batches as slices (a sampler in order) or numpy arrays; the epoch's order
        is drawn now, not at the first batch."""
        order = self.sampler._epoch() if type(self.sampler).__iter__ is Sampler.__iter__ else None
        return self._cut(order) if order is not None else self._grouped()

    def _cut(self, order: np.ndarray | range) -> Iterator[Index]:
        n, size = len(order), self.batch_size
        for start in range(0, n - size + 1 if self.drop_last else n, size):
            if isinstance(order, range) and order.step == 1:
                yield slice(order.start + start, order.start + min(start + size, n))
            else:
                yield np.asarray(order[start:start + size], dtype=np.int64)

    def _grouped(self) -> Iterator[Index]:
        it = iter(self.sampler)
        while batch := list(itertools.islice(it, self.batch_size)):
            if len(batch) < self.batch_size and self.drop_last:
                return
            yield batch


# ---- collation ----
def default_collate(batch: list) -> Any:
    """torch's default_collate: Tensors stacked (Tensor.stack), numpy arrays stacked into one
    Tensor of their dtype, numpy scalars to a Tensor of theirs, Python floats to float64,
    ints to int64 (bools to bool), str/bytes left as a list; dicts, named tuples and
    sequences collated per field (a tuple of fields gives a list, as torch)."""
    elem = batch[0]
    if isinstance(elem, Tensor):  # realized on a host: stacked there, else lazily
        arrays = []
        for t in batch:
            a = None if t.requires_grad or t.dtype != elem.dtype else host_array(t.lazydata)
            if a is None or a.shape != elem.shape or t.device != elem.device:
                return Tensor.stack(batch)  # (one kernel, when the batch is used)
            arrays.append(a)
        return new_host_tensor((len(batch),) + elem.shape, elem.dtype, elem.device,
                           lambda out: np.stack(arrays, out=out))
    if isinstance(elem, np.ndarray):  # (string or object arrays: TypeError, unknown dtype)
        return new_host_tensor((len(batch),) + elem.shape, dtypes.from_name(elem.dtype.name),
                           Tensor._dev(None), lambda out: np.stack(batch, out=out))
    if isinstance(elem, (np.bool_, np.number)):
        return Tensor(np.array(batch))
    if isinstance(elem, float):
        return Tensor(batch, dtype=dtypes.float64)
    if isinstance(elem, int):
        return Tensor(batch)  # int64 (float32 if a later one is a float; bool for bools)
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, collections.abc.Mapping):
        return _like(elem, {key: default_collate([d[key] for d in batch]) for key in elem})
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return type(elem)(*(default_collate(list(s)) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        if any(len(e) != len(elem) for e in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        fields = [default_collate(list(s)) for s in zip(*batch)]
        return fields if isinstance(elem, tuple) else _like(elem, fields)
    raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, dicts "
                    f"or lists; found {type(elem)}")


def _like(elem: Any, values: Any) -> Any:
    """`values` in the container type of `elem` where that type can be made from them."""
    try:
        return type(elem)(values)
    except TypeError:
        return values


def default_convert(data: Any) -> Any:
    """torch's default_convert (the collate_fn of batch_size=None): numpy arrays and
    scalars to Tensors, inside dicts and sequences too; anything else unchanged."""
    if isinstance(data, (np.ndarray, np.bool_, np.number)) and data.dtype.kind not in "USOV":
        return Tensor(data)
    if isinstance(data, collections.abc.Mapping):
        return _like(data, {k: default_convert(v) for k, v in data.items()})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):  # (a list, as torch)
        return [default_convert(d) for d in data]
    return _like(data, [default_convert(d) for d in data]) if isinstance(data, list) else data


# ---- DataLoader ----
class DataLoader:
    """Batches of `dataset` (torch's arguments, in torch's order). Runs in this process:
    `num_workers > 0` is accepted and means 0; pin_memory, timeout, worker_init_fn,
    multiprocessing_context, prefetch_factor, persistent_workers, pin_memory_device and
    in_order are accepted and ignored."""

    def __init__(self, dataset: Any, batch_size: int | None = 1, shuffle: bool | None = None,
                 sampler: Any = None, batch_sampler: Any = None, num_workers: int = 0,
                 collate_fn: Callable[[Any], Any] | None = None, pin_memory: bool = False,
                 drop_last: bool = False, timeout: float = 0, worker_init_fn: Any = None,
                 multiprocessing_context: Any = None, generator: np.random.Generator | None = None,
                 *, prefetch_factor: int | None = None, persistent_workers: bool = False,
                 pin_memory_device: str = "", in_order: bool = True):
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"num_workers option should be non-negative, got {num_workers!r}")
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, "
                                 "shuffle, sampler, and drop_last")
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually "
                             "exclusive with drop_last")
        if sampler is None:
            sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        _checked(generator)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.dataset, self.batch_size, self.drop_last = dataset, batch_size, drop_last
        self.sampler, self.batch_sampler, self.generator = sampler, batch_sampler, generator
        self.num_workers, self.pin_memory = num_workers, pin_memory
        self.collate_fn = collate_fn or (default_collate if batch_sampler is not None else default_convert)

    def __len__(self) -> int:
        return len(self.batch_sampler if self.batch_sampler is not None else self.sampler)

    def __iter__(self) -> Iterator[Any]:
        """This epoch's batches (its order is drawn now, not at the first batch)."""
        if self.batch_sampler is None:  # batch_size=None: sample by sample
            return (self.collate_fn(self.dataset[i]) for i in self.sampler)
        own = type(self.batch_sampler).__iter__ is BatchSampler.__iter__
        indices = self.batch_sampler._indices() if own else iter(self.batch_sampler)
        make = _batch_maker(self.dataset) if self.collate_fn is default_collate else None
        if make is not None:
            return (make(i if isinstance(i, (slice, np.ndarray)) else np.asarray(i, dtype=np.int64))
                    for i in indices)
        many = getattr(self.dataset, "__getitems__", None)  # torch 2.x: a batch in one call
        if many is not None:
            return (self.collate_fn(many(_as_list(i))) for i in indices)
        return (self.collate_fn([self.dataset[k] for k in _as_list(i)]) for i in indices)
