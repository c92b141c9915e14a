"""Model state: find a model's Tensors, load them from a state dict, and save/load the
safetensors format.

`get_state_dict(model)` walks attributes, lists, tuples and dicts and names each Tensor
by its dotted path (`layers.0.weight`), as PyTorch does. Files follow the safetensors
spec (https://github.com/huggingface/safetensors): an 8-byte little-endian header length,
a JSON header {name: {dtype, shape, data_offsets}} (plus an optional "__metadata__" map
of strings), then the tensors' bytes, little-endian, packed with no holes. Only numpy and
the standard library are used, and the files read back in other tools.
"""
from __future__ import annotations
import json
import os
import struct
from typing import Any

import numpy as np

from codegen.dtypes import DType, dtypes
from codegen.ops import LoadOps
from lazyten.lazy import LazyBuffer
from lazyten.tensor import Tensor, to_numpy_dtype

__all__ = ["get_parameters", "get_state_dict", "load_state_dict", "safe_save", "safe_load",
           "safe_load_metadata", "owns_buffer", "realize_owned"]

SAFETENSORS_DTYPES: dict[DType, str] = {
    dtypes.bool: "BOOL", dtypes.int8: "I8", dtypes.uint8: "U8", dtypes.int16: "I16",
    dtypes.int32: "I32", dtypes.int64: "I64", dtypes.float16: "F16",
    dtypes.float32: "F32", dtypes.float64: "F64",
}
_FROM_CODE = {code: dtype for dtype, code in SAFETENSORS_DTYPES.items()}
_MAX_HEADER = 100 * 1024 * 1024  # the reference implementation's limit


# ---- walking a model ----
def get_state_dict(obj: Any, prefix: str = "") -> dict[str, Tensor]:
    """Every Tensor reachable from `obj` by attributes, list/tuple items and dict values,
    named by its dotted path. Attributes starting with "_" are private and skipped."""
    out: dict[str, Tensor] = {}
    _walk(obj, prefix, out, set())
    return out


def _walk(obj: Any, name: str, out: dict[str, Tensor], ancestors: set[int]) -> None:
    """A shared layer is listed under each of its names (as PyTorch does); only a cycle
    back to an object on the current path stops the walk."""
    if isinstance(obj, Tensor):
        out[name] = obj
        return
    if id(obj) in ancestors:
        return
    if isinstance(obj, (list, tuple)):
        children = [(str(i), v) for i, v in enumerate(obj)]
    elif isinstance(obj, dict):
        children = [(str(k), v) for k, v in obj.items()]
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        children = [(k, v) for k, v in vars(obj).items() if not k.startswith("_")]
    else:
        return
    ancestors.add(id(obj))
    for key, value in children:
        _walk(value, f"{name}.{key}" if name else key, out, ancestors)
    ancestors.discard(id(obj))


def get_parameters(obj: Any) -> list[Tensor]:
    """The distinct Tensors reachable from `obj` (a Tensor shared by two layers once)."""
    unique: dict[int, Tensor] = {}
    for t in get_state_dict(obj).values():
        unique.setdefault(id(t), t)
    return list(unique.values())


def load_state_dict(obj: Any, state_dict: dict[str, Tensor], strict: bool = True) -> None:
    """Copy `state_dict` into the model's tensors (in place where they own a buffer).

    strict: every model tensor must be present and no extra key may appear. Shapes and
    dtypes must match exactly. All copies run in one realize at the end."""
    model = get_state_dict(obj)
    missing = sorted(set(model) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(model))
    if strict and (missing or unexpected):
        raise KeyError(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}")
    updated = []
    for name, target in model.items():
        if name not in state_dict:
            continue
        value = state_dict[name]
        if not isinstance(value, Tensor):
            value = Tensor(np.asarray(value), device=target.device)
        if value.shape != target.shape:
            raise ValueError(f"load_state_dict: {name!r} has shape {value.shape} in the state "
                             f"dict but {target.shape} in the model")
        if value.dtype != target.dtype:
            raise TypeError(f"load_state_dict: {name!r} has dtype {value.dtype.name} in the "
                            f"state dict but {target.dtype.name} in the model")
        if value is target:
            continue
        value = value.detach().to(target.device)
        if owns_buffer(target):
            target.assign(value)  # same storage, so views and optimisers stay valid
        else:  # a copy of its own, never a view of the state dict's tensor
            target.lazydata = LazyBuffer.loadop(LoadOps.CONTIGUOUS, value.shape, value.dtype,
                                                value.device, srcs=(value.lazydata,))
        updated.append(target)
    if updated:
        Tensor.realize(*updated)


def owns_buffer(t: Tensor) -> bool:
    """Is `t` a realized buffer of its own (not a view, not pending), so assign is in place?"""
    return t.lazydata._base is None and t.lazydata.realized is not None


def realize_owned(tensors: list[Tensor]) -> None:
    """Give each tensor a realized buffer of its own (copying views and constants), in one
    realize, so that later `assign`s update that storage in place."""
    todo = []
    for t in tensors:
        if owns_buffer(t):
            continue
        lazy = t.lazydata
        if lazy._base is not None or lazy.op is LoadOps.CONST:
            t.lazydata = LazyBuffer.loadop(LoadOps.CONTIGUOUS, t.shape, t.dtype, t.device,
                                           srcs=(lazy,))
        todo.append(t)  # an unrealized base (a pending assign too) becomes its own buffer
    if todo:
        Tensor.realize(*todo)


# ---- safetensors ----
def safe_save(state_dict: dict[str, Tensor], path: str | os.PathLike,
              metadata: dict[str, str] | None = None) -> None:
    """Write `state_dict` to `path` as a safetensors file."""
    arrays = {}
    for name, t in state_dict.items():
        if not isinstance(name, str) or name == "__metadata__":
            raise ValueError(f"safetensors tensor names must be strings other than "
                             f"'__metadata__', got {name!r}")
        if t.dtype not in SAFETENSORS_DTYPES:
            raise TypeError(f"{name!r}: dtype {t.dtype.name} has no safetensors code")
        arrays[name] = t.numpy().astype(
            to_numpy_dtype(t.dtype).newbyteorder("<"), copy=False)
    # largest items first keeps every tensor aligned to its itemsize with no gaps
    # between tensors (the spec forbids holes in the data section)
    order = sorted(arrays, key=lambda n: (-arrays[n].dtype.itemsize, n))
    header: dict[str, Any] = {}
    if metadata:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise TypeError("safetensors metadata must map strings to strings")
        header["__metadata__"] = dict(metadata)
    offset = 0
    for name in order:
        arr = arrays[name]
        header[name] = {"dtype": SAFETENSORS_DTYPES[state_dict[name].dtype],
                        "shape": list(arr.shape), "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # pad with spaces so the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name in order:
            f.write(arrays[name].tobytes())


def _read_header(raw: bytes | np.ndarray, path) -> tuple[dict, int]:
    if len(raw) < 8:
        raise ValueError(f"{path}: too short to be a safetensors file")
    (length,) = struct.unpack("<Q", bytes(raw[:8]))
    if length > _MAX_HEADER or 8 + length > len(raw):
        raise ValueError(f"{path}: safetensors header length {length} does not fit the file "
                         f"of {len(raw)} bytes")
    try:
        header = json.loads(bytes(raw[8:8 + length]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: safetensors header is not valid JSON: {e}") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: safetensors header must be a JSON object")
    return header, 8 + length


def safe_load_metadata(path: str | os.PathLike) -> dict[str, str]:
    """The optional "__metadata__" map of a safetensors file ({} if absent)."""
    with open(path, "rb") as f:
        head = f.read(8)
        (length,) = struct.unpack("<Q", head) if len(head) == 8 else (0,)
        header, _ = _read_header(head + f.read(min(length, _MAX_HEADER)), path)
    return dict(header.get("__metadata__", {}))


def safe_load(path: str | os.PathLike, device: str | None = None) -> dict[str, Tensor]:
    """Read a safetensors file into realized Tensors (names in file order)."""
    raw = np.fromfile(path, dtype=np.uint8)
    header, start = _read_header(raw, path)
    data = raw[start:]
    out: dict[str, Tensor] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = _FROM_CODE[info["dtype"]]
            shape = tuple(int(s) for s in info["shape"])
            begin, end = (int(o) for o in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{path}: bad safetensors entry for {name!r}: {info!r} "
                             f"(known dtypes: {', '.join(_FROM_CODE)})") from None
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if not 0 <= begin <= end <= len(data) or end - begin != nbytes:
            raise ValueError(f"{path}: {name!r} has data_offsets [{begin}, {end}] but needs "
                             f"{nbytes} bytes of a {len(data)}-byte data section")
        arr = data[begin:end].view(to_numpy_dtype(dtype).newbyteorder("<")).reshape(shape)
        out[name] = Tensor(arr.astype(to_numpy_dtype(dtype)), device=device)
    return out
