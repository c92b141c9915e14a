"""NVRTC for the CUDA runtime (runtimes/cuda.py): CUDA C -> CUBIN for the device's sm_XY,
the NVRTC log in the error where a compile fails."""
from __future__ import annotations
import ctypes
from ctypes import byref, c_char_p, c_size_t, c_void_p
from typing import TYPE_CHECKING

from runtimes.base import Compiler

if TYPE_CHECKING:
    from runtimes.cuda import CUDARuntime


class CUDACompiler(Compiler):
    """CUDA C -> CUBIN with NVRTC for this device's architecture."""

    def __init__(self, dev: CUDARuntime):
        super().__init__()
        self.dev = dev
        self.key = f"cuda-nvrtc{'.'.join(map(str, dev.nvrtc_version))}-sm_{dev.arch}"

    def compile(self, src: str) -> bytes:
        nvrtc, prog = self.dev.nvrtc, c_void_p()
        nvrtc("nvrtcCreateProgram", byref(prog), src.encode(), b"kernel.cu", 0, None, None)
        try:
            arch = f"--gpu-architecture=sm_{self.dev.arch}"  # CUBIN: the driver JITs nothing
            try:
                nvrtc("nvrtcCompileProgram", prog, 1, (c_char_p * 1)(arch.encode()))
            except RuntimeError as e:
                log = self._read(prog, "ProgramLog").rstrip(b"\0").decode(errors="replace")
                raise RuntimeError(f"{e}\n--- NVRTC log ---\n{log}") from e
            return self._read(prog, "CUBIN")
        finally:
            nvrtc("nvrtcDestroyProgram", byref(prog))

    def _read(self, prog: c_void_p, what: str) -> bytes:
        """nvrtcGet<what>Size, then nvrtcGet<what>: the log or the CUBIN."""
        size = c_size_t()
        self.dev.nvrtc(f"nvrtcGet{what}Size", prog, byref(size))
        out = ctypes.create_string_buffer(size.value)
        self.dev.nvrtc(f"nvrtcGet{what}", prog, out)
        return out.raw
