"""CLANG runtime: C source -> shared object from the system C compiler, run through ctypes.

The compiler is $CC, else the first of cc, clang, gcc on PATH; no compiler raises a
RuntimeError, so the device shows as unavailable. Flags keep IEEE results (no -ffast-math,
no FMA contraction; see docs/numerics.md). The binary is the .so's bytes (the base class
caches them on disk); a Program writes them to a private temp dir to dlopen them. The outer
loop of a kernel runs [core_start, core_end): THREADS worker threads take pieces of it
(ctypes releases the GIL during the call).
"""
from __future__ import annotations
import atexit
import ctypes
import functools
import os
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor


from codegen.helpers import getenv
from codegen.renderer import ProgramSpec
from codegen.renderer.clang import ClangRenderer
from runtimes.base import Compiler, HostAllocator, Program, Runtime

FLAGS = ["-O2", "-shared", "-fPIC", "-ffp-contract=off", "-fno-math-errno",
         "-fvisibility=hidden", "-std=c99", "-w"]
_MIN_WORK_PER_THREAD = 1 << 16  # below this many flops or words per thread, stay serial


def find_compiler() -> str:
    """$CC, else the first of cc, clang, gcc on PATH; RuntimeError if none."""
    for name in [getenv("CC", "")] + ["cc", "clang", "gcc"]:
        path = shutil.which(name) if name else None
        if path:
            return path
    raise RuntimeError("CLANG needs a C compiler: none of $CC, cc, clang, gcc is on PATH")


class ClangCompiler(Compiler):
    """C -> shared-object bytes; the key names the compiler's version and the flags. Made
    with no arguments in a compile worker process (runtimes/compile_worker.py)."""
    threaded = True  # compiles on the pool's threads, and with more cores in its workers

    def __init__(self, cc: str | None = None, tmp: str | None = None):
        super().__init__()
        self.cc, self.tmp = cc or find_compiler(), tmp  # tmp None: the system's temp dir
        try:
            version = subprocess.run([self.cc, "--version"], capture_output=True, text=True,
                                     check=True, timeout=30).stdout.splitlines()[0]
        except (OSError, subprocess.SubprocessError, IndexError) as e:
            raise RuntimeError(f"CLANG: the C compiler {self.cc} does not run: {e}") from e
        self.key = f"clang-{version}-{os.uname().machine}-{' '.join(FLAGS)}"

    def compile(self, src: str) -> bytes:
        with tempfile.TemporaryDirectory(dir=self.tmp) as work:
            out = os.path.join(work, "kernel.so")
            done = subprocess.run([self.cc, *FLAGS, "-x", "c", "-", "-o", out, "-lm"],
                                  input=src, capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"{self.cc} failed ({done.returncode}):\n{done.stderr}")
            with open(out, "rb") as f:
                return f.read()


class ClangProgram(Program):
    """A kernel dlopened from its shared object and called through ctypes."""

    def __init__(self, spec: ProgramSpec, binary: bytes, runtime: ClangRuntime):
        super().__init__(spec, binary)
        self.runtime = runtime
        fd, path = tempfile.mkstemp(suffix=".so", dir=runtime.tmp)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(binary)
            self.lib = ctypes.CDLL(path)  # the mapping outlives the file
        finally:
            os.unlink(path)
        argtypes = [ctypes.c_void_p] * len(spec.buf_dtypes) + [ctypes.c_int64] * len(spec.var_names)
        self.fn = getattr(self.lib, spec.entry)
        self.fn.argtypes, self.fn.restype = argtypes, None
        self.threaded = spec.var_names == ["core_start", "core_end"]
        self.work = max(spec.flops, spec.mem_bytes // 4)

    def __call__(self, *bufs, global_size, local_size, wait=False):
        ptrs = [b[1] for b in bufs]
        start, n = time.perf_counter(), global_size[0]
        threads = min(getenv("THREADS", os.cpu_count() or 1), n) if self.threaded else 1
        if not self.threaded:
            self.fn(*ptrs)
        elif threads <= 1 or self.work < threads * _MIN_WORK_PER_THREAD:
            self.fn(*ptrs, 0, n)
        else:  # one contiguous piece per thread
            cuts = [n * i // threads for i in range(threads + 1)]
            pool = self.runtime.pool(threads)
            list(pool.map(lambda i: self.fn(*ptrs, cuts[i], cuts[i + 1]), range(threads)))
        return time.perf_counter() - start if wait else None


class ClangRuntime(Runtime):
    """The host CPU through C; owns the private temp dir and the worker threads."""

    def __init__(self, name: str, cc: str):
        self.tmp = tempfile.mkdtemp(prefix="lazyten-clang-")
        super().__init__(name, HostAllocator(), ClangCompiler(cc, self.tmp),
                         functools.partial(ClangProgram, runtime=self), ClangRenderer())
        atexit.register(shutil.rmtree, self.tmp, ignore_errors=True)
        self._pool: tuple[int, ThreadPoolExecutor] | None = None

    def pool(self, threads: int) -> ThreadPoolExecutor:
        """Worker threads for the outer-loop split (made on first use, grown when asked)."""
        if self._pool is None or self._pool[0] < threads:
            self._pool = (threads, ThreadPoolExecutor(threads, thread_name_prefix="lazyten-clang"))
        return self._pool[1]


def make_runtime(name: str = "CLANG") -> Runtime:
    """The host CPU, through the system C compiler."""
    if ":" in name and name.split(":")[1] not in ("", "0"):
        raise RuntimeError(f"{name} does not exist: CLANG has one device, CLANG:0")
    return ClangRuntime(name, find_compiler())
