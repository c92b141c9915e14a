"""Model state: find a model's Tensors, load them from a state dict, and save/load the
safetensors format.

`get_state_dict(model)` walks attributes, lists, tuples and dicts and names each Tensor
by its dotted path (`layers.0.weight`), as PyTorch does; a Module on the way gives its
own `state_dict()` (nn/module.py), so the names agree. Files follow the safetensors
spec (https://github.com/huggingface/safetensors): an 8-byte little-endian header length,
a JSON header {name: {dtype, shape, data_offsets}} (plus an optional "__metadata__" map
of strings), then the tensors' bytes, little-endian, packed with no holes. Only numpy and
the standard library are used, and the files read back in other tools. Every format dtype
lazyten has is read and written (BOOL, U8-U64, I8-I64, F16, BF16, F32, F64); bfloat16
travels as its raw bits, so a file round-trips bit for bit (NaN payloads included).
"""
from __future__ import annotations
import json
import os
import struct
from typing import Any

import numpy as np

from codegen.dtypes import DType, dtypes
from codegen.helpers import prod
from codegen.ops import LoadOps
from lazyten.lazy import LazyBuffer
from lazyten.creation import default_device, storage_numpy_dtype
from lazyten.nn.module import Module, load_tensors, owns_buffer
from lazyten.tensor import Tensor
from runtimes import Buffer, canonical, get_runtime

__all__ = ["get_parameters", "get_state_dict", "load_state_dict", "safe_save", "safe_load",
           "safe_load_metadata", "owns_buffer", "realize_owned"]

SAFETENSORS_DTYPES: dict[DType, str] = {
    dtypes.bool: "BOOL", dtypes.int8: "I8", dtypes.uint8: "U8", dtypes.int16: "I16",
    dtypes.uint16: "U16", dtypes.int32: "I32", dtypes.uint32: "U32", dtypes.int64: "I64",
    dtypes.uint64: "U64", dtypes.float16: "F16", dtypes.bfloat16: "BF16",
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
    if isinstance(obj, Module):
        out.update(obj.state_dict(prefix=f"{name}." if name else ""))
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
    load_tensors(get_state_dict(obj), state_dict, strict)


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
                                           src=(lazy,))
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
        raw = t.bitcast(dtypes.uint16) if t.dtype == dtypes.bfloat16 else t  # its bits
        arrays[name] = raw.numpy().astype(
            storage_numpy_dtype(t.dtype).newbyteorder("<"), copy=False)
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
    """The header dict and where the data section starts. The header is JSON of the form
    {name: {"dtype", "shape", "data_offsets"}, "__metadata__": {str: str}}: at most 3
    levels deep, no key twice, at most _MAX_HEADER bytes."""
    if len(raw) < 8:
        raise ValueError(f"{path}: too short to be a safetensors file ({len(raw)} bytes)")
    (length,) = struct.unpack("<Q", bytes(raw[:8]))
    if length > _MAX_HEADER:
        raise ValueError(f"{path}: safetensors header length {length} is over the limit of "
                         f"{_MAX_HEADER} bytes")
    if 8 + length > len(raw):
        raise ValueError(f"{path}: safetensors header length {length} does not fit the file "
                         f"of {len(raw)} bytes")
    try:
        header = json.loads(bytes(raw[8:8 + length]).decode("utf-8"),
                            object_pairs_hook=_no_duplicates)
    except RecursionError:
        raise ValueError(f"{path}: safetensors header JSON is nested deeper than the format "
                         f"allows (3 levels)") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: safetensors header is not valid JSON: {e}") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: safetensors header must be a JSON object")
    return header, 8 + length


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"safetensors header: key {key!r} appears twice")
            seen.add(key)
    return out


def _entries(header: dict, size: int, path) -> list[tuple[str, DType, tuple[int, ...], int, int]]:
    """(name, dtype, shape, begin, end) of every tensor, checked against the format: known
    dtypes, shapes of non-negative integers that match the byte counts, offsets in order
    that tile the data section with no overlap and no hole."""
    meta = header.get("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise ValueError(f"{path}: safetensors __metadata__ must map strings to strings")
    out = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        where = f"{path}: tensor {name!r}"
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise ValueError(f"{where}: an entry has exactly the keys dtype, shape and "
                             f"data_offsets, got {info!r}"[:500])
        dtype = _FROM_CODE.get(info["dtype"]) if isinstance(info["dtype"], str) else None
        if dtype is None:
            raise ValueError(f"{where}: unknown dtype {info['dtype']!r} (known dtypes: "
                             f"{', '.join(_FROM_CODE)})"[:500])
        shape, offsets = info["shape"], info["data_offsets"]
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise ValueError(f"{where}: shape must be a list of non-negative integers, "
                             f"got {shape!r}"[:500])
        if not isinstance(offsets, list) or len(offsets) != 2 or \
                not all(type(o) is int and o >= 0 for o in offsets):
            raise ValueError(f"{where}: data_offsets must be two non-negative integers, "
                             f"got {offsets!r}"[:500])
        begin, end = offsets
        if begin > end:
            raise ValueError(f"{where}: data_offsets [{begin}, {end}] are out of order")
        if end > size:
            raise ValueError(f"{where}: data_offsets [{begin}, {end}] run past the data "
                             f"section of {size} bytes")
        nbytes = prod(shape) * dtype.itemsize
        if end - begin != nbytes:
            raise ValueError(f"{where}: shape {shape} of {dtype.name} is {nbytes} bytes but "
                             f"data_offsets [{begin}, {end}] hold {end - begin}")
        out.append((name, dtype, tuple(shape), begin, end))
    position, previous = 0, None
    for name, _, _, begin, end in sorted(out, key=lambda e: (e[3], e[4])):
        if begin < position:
            raise ValueError(f"{path}: tensor {name!r} at [{begin}, {end}] overlaps tensor "
                             f"{previous!r}, which ends at {position}")
        if begin > position:
            raise ValueError(f"{path}: a hole of {begin - position} bytes before tensor "
                             f"{name!r} (the data section must be packed)")
        position, previous = end, name
    if position != size:
        raise ValueError(f"{path}: the data section has {size - position} bytes after the "
                         f"last tensor (holes are not allowed)")
    return out


def safe_load_metadata(path: str | os.PathLike) -> dict[str, str]:
    """The optional "__metadata__" map of a safetensors file ({} if absent)."""
    with open(path, "rb") as f:
        head = f.read(8)
        (length,) = struct.unpack("<Q", head) if len(head) == 8 else (0,)
        header, _ = _read_header(head + f.read(min(length, _MAX_HEADER)), path)
    meta = header.get("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise ValueError(f"{path}: safetensors __metadata__ must map strings to strings")
    return dict(meta)


def safe_load(path: str | os.PathLike, device: str | None = None) -> dict[str, Tensor]:
    """Read a safetensors file into realized Tensors (names in file order). The file is
    checked against the format first (see `_entries`); a file that breaks a rule raises
    ValueError naming the tensor and the rule, and nothing is loaded."""
    raw = np.fromfile(path, dtype=np.uint8)
    header, start = _read_header(raw, path)
    data = raw[start:]
    runtime = get_runtime(canonical(device) if device is not None else default_device())
    out: dict[str, Tensor] = {}
    for name, dtype, shape, begin, end in _entries(header, len(data), path):
        buffer = Buffer(runtime, prod(shape), dtype)
        if end > begin:
            little = data[begin:end].view(storage_numpy_dtype(dtype).newbyteorder("<"))
            native = little.astype(storage_numpy_dtype(dtype), copy=False)
            buffer.copyin(native.view(np.uint8).data)
        out[name] = Tensor._wrap(LazyBuffer.from_buffer(buffer, shape))
    return out
