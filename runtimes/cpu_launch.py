"""Launchers: kernels called through Python builtins made from LLVM-compiled code
(codegen/renderer/llvm_launch.py says why and what they take).

`Host.launcher(buffers, bounds)` (runtimes/cpu_host.py) gives the builtin for kernels
with that many buffers, with thread bounds or without, compiled and loaded on first use
(the object code is cached like the crew's). `builtin` makes one with CPython's
`PyCFunction_NewEx` from a method definition that must outlive it: definitions are kept
for the life of the process, as the host keeps the engines holding their code. Where the
C API cannot be found (`resolve_c_api` is False), programs are called through ctypes.
"""
from __future__ import annotations
import ctypes
from typing import Any, Callable

import llvmlite.binding as llvm

from codegen.renderer.llvm_launch import C_API, C_DATA

_METH_FASTCALL = 0x0080


class _MethodDef(ctypes.Structure):  # CPython's PyMethodDef
    _fields_ = [("ml_name", ctypes.c_char_p), ("ml_meth", ctypes.c_void_p),
                ("ml_flags", ctypes.c_int), ("ml_doc", ctypes.c_char_p)]


_DEFINITIONS: list[_MethodDef] = []  # every builtin's definition, kept for the process's life


def resolve_c_api() -> bool:
    """Tell LLVM where this process's CPython functions and data are; False if it has
    none of them to give (then there are no launchers)."""
    try:
        api = ctypes.pythonapi
        for name, _ in C_API:
            llvm.add_symbol(name, ctypes.cast(getattr(api, name), ctypes.c_void_p).value)
        data = {"_Py_NoneStruct": id(None),
                "PyExc_TypeError": ctypes.addressof(ctypes.c_void_p.in_dll(api, "PyExc_TypeError"))}
        for name, _ in C_DATA:
            llvm.add_symbol(name, data[name])
        new = api.PyCFunction_NewEx
    except (AttributeError, ValueError, OSError):
        return False
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    return True


def builtin(name: str, address: int) -> Callable[..., Any]:
    """The builtin function whose C code (METH_FASTCALL) is at `address`."""
    definition = _MethodDef(name.encode(), address, _METH_FASTCALL, None)
    _DEFINITIONS.append(definition)
    return ctypes.pythonapi.PyCFunction_NewEx(ctypes.addressof(definition), None, None)
