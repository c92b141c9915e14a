"""Device registry: device name -> runtime module, imported only when first asked for.

`get_runtime("OPENCL:1")` returns the Runtime for that device, created once. Asking for
an unknown or unavailable device raises a RuntimeError/ValueError that says what is
missing. To add a runtime, add one line to RUNTIMES (see docs/porting.md).
"""
from __future__ import annotations
import functools
import importlib
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runtimes.base import Allocator, Buffer, CompileError, Compiler, Program, Runtime

_FROM_BASE = ("Allocator", "Buffer", "CompileError", "Compiler", "Program", "Runtime", "Window")


def __getattr__(name: str) -> Any:
    """runtimes.base's classes, imported when first asked for: a compile worker process
    imports runtimes.compile_worker, and with it this package, without numpy (it starts
    sooner: runtimes/llvm_build.py)."""
    if name in _FROM_BASE:
        return getattr(importlib.import_module("runtimes.base"), name)
    raise AttributeError(f"module 'runtimes' has no attribute {name!r}")

RUNTIMES = {  # device name -> module with make_runtime(name)
    "CPU": "runtimes.cpu_llvm",
    "OPENCL": "runtimes.opencl",
    "CUDA": "runtimes.cuda",
    "NULL": "runtimes.null",
    "NULL_CUDA": "runtimes.null",
    "CLANG": "runtimes.clang",
}
_OPEN: dict[str, Runtime] = {}


def canonical(device: str) -> str:
    """Normalise a device name: "cpu" -> "CPU", "opencl:0" -> "OPENCL:0", "OPENCL:0" -> "OPENCL"."""
    if not isinstance(device, str):
        raise TypeError(f"device must be a string like 'CPU' or 'OPENCL:1', got {device!r}")
    return _canonical(device)


@functools.lru_cache(maxsize=None)
def _canonical(device: str) -> str:
    name, _, index = device.upper().partition(":")
    if name == "LLVM":
        name = "CPU"
    if name not in RUNTIMES:
        raise ValueError(f"unknown device {device!r}; known devices: {', '.join(RUNTIMES)}")
    if index and not index.isdigit():
        raise ValueError(f"bad device index in {device!r}; expected e.g. {name}:1")
    return name if index in ("", "0") else f"{name}:{index}"


def get_runtime(device: str) -> Runtime:
    """The Runtime for a device, created on first use."""
    if type(device) is str and device in _OPEN:  # an open device by its canonical name
        return _OPEN[device]
    device = canonical(device)
    if device not in _OPEN:
        module = importlib.import_module(RUNTIMES[device.split(":")[0]])
        runtime = module.make_runtime(device)
        fields = os.environ.get("TARGET_FIELDS", "")
        if fields:  # the device's Target with some fields changed (codegen/target.py)
            from codegen.target import with_fields
            runtime.renderer.target = with_fields(runtime.renderer.target, fields)
        _OPEN[device] = runtime
    return _OPEN[device]


__all__ = ["Allocator", "Buffer", "CompileError", "Compiler", "Program", "Runtime",
           "RUNTIMES", "canonical", "get_runtime"]
