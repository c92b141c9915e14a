"""A jitted function's arguments and results as trees (lazyten/jit.py): the flattened
leaves of its arguments, which a replay checks against the capture's, and the tensors of
a return value, which each replay puts back into a fresh copy of the capture's."""
from __future__ import annotations
from typing import Any, NamedTuple

import numpy as np

from lazyten.tensor import Tensor


class JitError(ValueError):
    """A jitted function was called with arguments its capture cannot replay."""


class TensorSpec(NamedTuple):
    """What a replay needs to stay the same about a tensor argument."""
    shape: tuple
    dtype: Any
    device: str
    requires_grad: bool
    same_as: str | None  # an earlier argument with the same buffer
    view: Any  # read_views: how the memory is read, (its ShapeTracker, memory size)


def tensor_spec(t: Tensor, path: str, first: dict[int, str], read_views: bool) -> TensorSpec:
    earlier = first.setdefault(id(t.lazydata.buffer()), path)
    view = (t.lazydata.st, t.lazydata.buffer().size) if read_views else None
    return TensorSpec(t.shape, t.dtype, t.device, bool(t.requires_grad),
                      None if earlier == path else earlier, view)


class Container(NamedTuple):
    kind: type
    keys: tuple  # indices of a list or tuple, keys of a dict


ABSENT = object()


def flatten(value: Any, path: str, out: list[tuple[str, Any]]) -> None:
    """Flatten an argument into (path, leaf): tensors, other values, and before each
    list, tuple or dict a Container with its type and keys."""
    if isinstance(value, (list, tuple)):
        out.append((path, Container(type(value), tuple(range(len(value))))))
        for i, item in enumerate(value):
            flatten(item, f"{path}[{i}]", out)
    elif isinstance(value, dict):
        keys = sorted_keys(value)
        out.append((path, Container(type(value), tuple(keys))))
        for key in keys:
            flatten(value[key], f"{path}[{key!r}]", out)
    elif isinstance(value, np.ndarray):
        raise JitError(f"argument {path} of a jitted function is a numpy array, whose data "
                       "the capture would freeze: pass a Tensor")
    else:
        out.append((path, value))


def sorted_keys(d: dict) -> list:
    """A dict's keys in an order that does not depend on how it was built."""
    try:
        return sorted(d)
    except TypeError:
        return sorted(d, key=repr)


def same_value(old: Any, new: Any) -> bool:
    """Equal as arguments: the same type and ==, NaN equal to NaN."""
    if old is new:
        return True
    if type(old) is not type(new):
        return False
    try:
        return bool(old == new) or bool(old != old and new != new)
    except Exception:  # noqa: BLE001 - not comparable counts as changed
        return False


def show(leaf: Any) -> str:
    if leaf is ABSENT:
        return "absent"
    if isinstance(leaf, TensorSpec):
        notes = ["requires_grad"] * leaf.requires_grad + \
            [f"the same tensor as {leaf.same_as}"] * (leaf.same_as is not None)
        return f"a Tensor {leaf.shape} {leaf.dtype.name} on {leaf.device}" + \
            (f" ({', '.join(notes)})" if notes else "")
    if isinstance(leaf, Container):
        return f"a {leaf.kind.__name__} of {len(leaf.keys)}" + \
            (f" with keys {list(leaf.keys)}" if issubclass(leaf.kind, dict) else "")
    text = repr(leaf)
    return text if len(text) <= 80 else text[:77] + "..."


def collect(value: Any, out: list[Tensor]) -> None:
    """The tensors in a return value, in the order _rebuild puts them back."""
    if isinstance(value, Tensor):
        out.append(value)
    elif isinstance(value, (list, tuple)):
        for item in value:
            collect(item, out)
    elif isinstance(value, dict):
        for item in value.values():
            collect(item, out)


def rebuild(value: Any, tensors) -> Any:
    """`value` with each tensor replaced by the next of `tensors`."""
    if isinstance(value, Tensor):
        return next(tensors)
    if isinstance(value, list):
        return [rebuild(item, tensors) for item in value]
    if isinstance(value, tuple):
        items = [rebuild(item, tensors) for item in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    if isinstance(value, dict):
        out = {key: rebuild(item, tensors) for key, item in value.items()}
        return out if type(value) is dict else type(value)(out)
    return value
