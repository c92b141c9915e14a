"""CUDA launches through a builtin function made from LLVM-compiled code (D99).

A launch through ctypes marshals cuLaunchKernel's eleven arguments on every call (and
checks the current context in a second call): 7.4 us of host time per launch on an
H200's host, where the rest of a jitted replay's step is about 2. `cuda_launch`
(codegen/renderer/llvm_launch.py) takes a launch record, the fixed part of a launch
(the driver functions, the context, the CUfunction, grid, block, argument block),
and the buffers' device pointers, and makes both driver calls itself; calling it costs
what calling a builtin does, as the CPU's launchers (runtimes/cpu_launch.py).

`native_launch()` compiles it once per process (its object code is cached like the
CPU's support code) and gives None where it cannot be made: no CPython C API to
link against, or driver functions that are not C functions (a test's fake driver). The
CUDA program then launches through ctypes, as before.
"""
from __future__ import annotations
import ctypes
import sys
from typing import Any, Callable

from codegen.helpers import debug_level
from codegen.renderer.llvm_launch import CUDA_RECORD, cuda_launch_ir
from runtimes.cuda_api import arg_block, dims3

_LAUNCH: list[Any] = []  # [the builtin or None], once made
_HOSTS: list[Any] = []   # the host whose engine holds its code, for the process's life


def native_launch() -> Callable[..., int] | None:
    """The process's `cuda_launch` builtin, or None where none can be made (no C API, or
    LLVM could not build or load it: the launches then go through ctypes, DEBUG=1 says
    why)."""
    if not _LAUNCH:
        try:
            _LAUNCH.append(_make())
        except Exception as e:  # llvmlite's errors vary: any failure keeps ctypes
            if debug_level() >= 1:
                print(f"lazyten: CUDA launches through ctypes ({type(e).__name__}: {e})",
                      file=sys.stderr)
            _LAUNCH.append(None)
    return _LAUNCH[0]


def _make() -> Callable[..., int] | None:
    from runtimes.cpu_host import Host  # llvmlite: loaded with the first CUDA device
    from runtimes.cpu_launch import builtin, resolve_c_api
    from runtimes.cpu_llvm import SupportCompiler
    if not resolve_c_api():
        return None
    host = Host(SupportCompiler())
    address, _ = host.load("cuda_launch", host.support.compile_cached("cuda_launch",
                                                                       cuda_launch_ir()))
    _HOSTS.append(host)
    return builtin("cuda_launch", address)


def c_address(function: Any) -> int | None:
    """The address of a C function from a ctypes library, or None (not a C function)."""
    try:
        return ctypes.cast(function, ctypes.c_void_p).value
    except ctypes.ArgumentError:
        return None


class LaunchRecord:
    """What `cuda_launch` reads of one launch (CUDA_RECORD's slots), kept as long as the
    launch may be called: the driver's functions, `context`, `function`, the grid and
    block (3 each), and an argument block of `values` and `params` (runtimes/cuda_api.py
    `arg_block`) for `arity` buffers."""

    def __init__(self, driver: list[int], context: int, function: int, grid: list[int],
                 block: list[int], values: ctypes.Array, params: ctypes.Array) -> None:
        slots = [*driver, context, function, *grid, *block, ctypes.addressof(values),
                 ctypes.addressof(params), len(values)]
        assert len(slots) == len(CUDA_RECORD), "a launch record has every slot"
        self.slots = (ctypes.c_uint64 * len(slots))(*slots)
        self.block = (values, params)  # the argument block lives as long as the record
        self.address = ctypes.addressof(self.slots)


class LaunchRecords:
    """A kernel's launch records, one per (grid, block, buffer count), made on first use."""

    def __init__(self, driver: list[int], context: int, function: int) -> None:
        self.driver, self.context, self.function = driver, context, function
        self.records: dict[tuple, LaunchRecord] = {}

    def at(self, global_size: list[int], local_size: list[int], arity: int) -> int:
        """The address of the record of a launch of these sizes on `arity` buffers."""
        key = (*global_size, None, *local_size, arity)
        record = self.records.get(key)
        if record is None:
            record = self.records[key] = LaunchRecord(
                self.driver, self.context, self.function, dims3(global_size),
                dims3(local_size), *arg_block(arity))
        return record.address
