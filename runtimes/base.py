"""The runtime interface: Allocator, Compiler, Program, Runtime, and device Buffers.

A runtime module supplies one of each. Allocator: alloc/free/copyin/copyout of raw
bytes (with an LRU cache of freed blocks). Compiler: source -> binary, cached on disk by
source hash and compiler version, and the lowered program (spec and binary) by AST, as
verified data (runtimes/disk_cache.py). Program: a loaded binary, called with buffers and
launch sizes; returns seconds when asked to wait. Imports codegen only.
"""
from __future__ import annotations
import functools
import hashlib
import pathlib
import itertools
from collections import OrderedDict, defaultdict
from concurrent.futures import Future
from typing import Any, Callable

import numpy as np

from codegen.dtypes import DType, dtypes
from codegen.helpers import codegen_version, getenv
from codegen.renderer import ProgramSpec, Renderer
from runtimes.compile_error import CompileError
from runtimes.compile_pool import CompilePool
from runtimes.disk_cache import DiskCache


class Allocator:
    """Raw device memory. Freed blocks are kept by size for reuse, up to ALLOC_CACHE_MB
    bytes in all; past that the blocks freed longest ago go back to the device. LRU and
    ALLOC_CACHE_MB are read when the allocator is made (its device's first use): a
    buffer is freed on every eager op, so `free` reads no setting, and the common paths
    are a list pop and a list append (each size's list holds (when freed, block), oldest
    first; only an eviction looks across sizes)."""

    def __init__(self) -> None:
        self.cache: dict[int, list[tuple[int, Any]]] = defaultdict(list)  # size -> blocks
        self.cached_bytes = 0
        self.live = 0  # blocks handed out and not yet freed: the memory-leak tests read it
        self._tokens = itertools.count()
        self.keep = bool(getenv("LRU", 1))
        self.limit = getenv("ALLOC_CACHE_MB", 1024) << 20

    def alloc(self, nbytes: int) -> Any:
        self.live += 1
        blocks = self.cache[nbytes]
        if blocks:
            self.cached_bytes -= nbytes
            return blocks.pop()[1]
        return self._alloc(nbytes)

    def free(self, opaque: Any, nbytes: int) -> None:
        self.live -= 1
        if not self.keep:
            self._free(opaque)
            return
        self.cache[nbytes].append((next(self._tokens), opaque))
        self.cached_bytes += nbytes
        if self.cached_bytes > self.limit:
            self._evict()

    def _evict(self) -> None:
        """Give blocks back to the device, the one freed longest ago first, until the
        cache is within its limit."""
        while self.cached_bytes > self.limit:
            size = min((blocks[0][0], size) for size, blocks in self.cache.items() if blocks)[1]
            self.cached_bytes -= size
            self._free(self.cache[size].pop(0)[1])

    # a runtime implements these four
    def _alloc(self, nbytes: int) -> Any:
        raise NotImplementedError

    def _free(self, opaque: Any) -> None:
        pass

    def copyin(self, dest: Any, src: memoryview) -> None:
        raise NotImplementedError

    def copyout(self, dest: memoryview, src: Any) -> None:
        raise NotImplementedError


def cache_dir() -> pathlib.Path:
    """Where compiled kernels live: $CACHEDIR, else ~/.cache/lazyten."""
    return pathlib.Path(getenv("CACHEDIR", str(pathlib.Path.home() / ".cache" / "lazyten")))


_DISK_CACHES: dict[pathlib.Path, DiskCache] = {}


def disk_cache() -> DiskCache:
    """The disk cache at `cache_dir()` (one per directory and process: it remembers what
    it has warned about)."""
    root = cache_dir()
    if root not in _DISK_CACHES:
        _DISK_CACHES[root] = DiskCache(root)
    return _DISK_CACHES[root]


def spec_to_json(spec: ProgramSpec) -> dict:
    """A ProgramSpec as plain JSON values (for the program cache)."""
    return {"name": spec.name, "src": spec.src, "global_size": list(spec.global_size),
            "local_size": list(spec.local_size),
            "buf_dtypes": [[d.name, d.count] for d in spec.buf_dtypes],
            "var_names": list(spec.var_names), "flops": spec.flops,
            "mem_bytes": spec.mem_bytes, "function": spec.function}


def spec_from_json(meta: dict) -> ProgramSpec:
    """The ProgramSpec `spec_to_json` wrote; ValueError if any field is not what it wrote."""
    def field(name: str, kind: type):
        value = meta.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ValueError(f"program cache entry: {name} is {value!r}")
        return value

    def ints(name: str) -> list[int]:
        values = field(name, list)
        if len(values) > 8 or not all(type(v) is int and 0 <= v < 1 << 31 for v in values):
            raise ValueError(f"program cache entry: {name} is {values!r}")
        return values
    dtype_list = []
    for item in field("buf_dtypes", list):
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)
                and type(item[1]) is int and 1 <= item[1] <= 64):
            raise ValueError(f"program cache entry: buffer dtype {item!r}")
        try:
            dtype = dtypes.from_name(item[0])
        except TypeError as e:
            raise ValueError(f"program cache entry: {e}") from None
        dtype_list.append(dtype if item[1] == 1 else dtype.vec(item[1]))
    names = field("var_names", list)
    if not all(isinstance(n, str) for n in names):
        raise ValueError(f"program cache entry: var_names is {names!r}")
    return ProgramSpec(field("name", str), field("src", str), ints("global_size"),
                       ints("local_size"), dtype_list, names, field("flops", int),
                       field("mem_bytes", int), field("function", str))


class HostAllocator(Allocator):
    """Host memory for the CPU-side runtimes: (numpy bytes, address), 64-byte aligned for
    vector loads (a ctypes array type per size cost 10 us an allocation)."""

    ALIGN = 64  # bytes every block starts on (a window moves by whole ones: lazyten/rebase.py)

    def _alloc(self, nbytes: int):
        raw = np.empty(nbytes + self.ALIGN, dtype=np.uint8)
        block = raw[(-raw.ctypes.data) % self.ALIGN:][:nbytes]
        return (block, block.ctypes.data)

    def copyin(self, dest, src: memoryview) -> None:
        if src.format == "B" and src.ndim == 1:  # bytes to bytes, with no numpy views (a
            dest[0].data[:src.nbytes] = src      # lifted constant's upload: 0.6 us less)
        else:
            dest[0][:src.nbytes] = np.frombuffer(src, dtype=np.uint8)

    def offset(self, buf, nbytes: int):
        """The memory `nbytes` into `buf`, as a kernel argument (a window, D120)."""
        return (buf[0], buf[1] + nbytes)

    def copy_within(self, dest, src, offset: int, nbytes: int) -> None:
        """`nbytes` of `src` from byte `offset` into `dest` (a window of a buffer made its
        own: lazyten/varying.py). Runtimes without it leave windows to their kernels."""
        dest[0][:nbytes] = src[0][offset:offset + nbytes]

    def copyout(self, dest: memoryview, src) -> None:
        if dest.format == "B" and dest.ndim == 1:  # bytes to bytes, with no numpy views
            dest[:] = src[0].data[:dest.nbytes]    # (what .numpy() passes: 1 us less)
        else:
            np.frombuffer(dest, dtype=np.uint8)[:] = src[0][:dest.nbytes]


class Compiler:
    """Source -> binary. `key` names the compiler and version; it is part of the cache key.
    A compiler whose `compile` may run on a worker thread sets `threaded`: the engine
    then lowers the next kernels while this one compiles, and worker processes build
    with `type(compiler)(*compiler.worker_args)`."""
    key = "base"
    threaded = False
    worker_args: tuple[str, ...] = ()  # what a compile worker process constructs it with

    def __init__(self) -> None:
        self.compiled = 0  # real compilations (cache misses), for the cache tests
        # by source digest, the most recently used COMPILER_CACHE binaries: one process
        # compiles a source once while it is in use
        self._memo: OrderedDict[str, bytes] = OrderedDict()
        self._pool: CompilePool | None = None

    def compile(self, src: str) -> bytes:
        """The backend: source -> binary (any exception on failure)."""
        raise NotImplementedError

    def worker_class(self) -> str:
        """"module:Class" that a compile worker process constructs with `worker_args` and
        calls `compile` on: this compiler's own class, unless it names a lighter one
        that builds the same (a worker that imports less starts sooner)."""
        cls = type(self)
        return f"{cls.__module__}:{cls.__qualname__}"

    def submit(self, name: str, src: str) -> Future:
        """compile_cached, on the compile pool's threads if the compiler is `threaded`
        (the caches are read here: CompilePool)."""
        done: Future = Future()
        if self.threaded:
            binary = self.lookup(src)
            if binary is None:
                if self._pool is None:
                    self._pool = CompilePool(self)
                return self._pool.submit(name, src)
            done.set_result(binary)
            return done
        try:
            done.set_result(self.compile_cached(name, src))
        except Exception as e:
            done.set_exception(e)
        return done

    def result(self, job: Future) -> bytes:
        """The binary of a job `submit` returned. With a compile pool this thread compiles
        queued jobs until that one is done, and caches what was compiled
        (CompilePool.result): call it once every kernel of a batch is submitted."""
        return self._pool.result(job) if self._pool is not None else job.result()

    def compile_cached(self, name: str, src: str) -> bytes:
        """The binary from the caches, else compiled here and cached."""
        binary = self.lookup(src)
        if binary is None:
            binary = self.compile_checked(name, src)
            self.store(name, src, binary)
        return binary

    def compile_checked(self, name: str, src: str) -> bytes:
        """compile, with any failure raised as a CompileError that shows the source."""
        try:
            return self.compile(src)
        except CompileError:
            raise
        except Exception as e:  # the backend's own error type varies
            raise CompileError(name, str(e), src) from e

    def _cache_key(self, src: str) -> str:
        return f"{self.key}\n{src}"

    def lookup(self, src: str) -> bytes | None:
        """The binary for `src` from the memory cache, then the disk cache (unless
        DISABLE_CACHE=1); None if neither has it."""
        digest = hashlib.sha256(self._cache_key(src).encode()).hexdigest()
        if digest in self._memo:
            self._memo.move_to_end(digest)
            return self._memo[digest]
        found = None if getenv("DISABLE_CACHE", 0) else disk_cache().get("kernels", self._cache_key(src))
        if found is not None:
            self._remember(digest, found[1])
            return found[1]
        return None

    def store(self, name: str, src: str, binary: bytes) -> None:
        """A binary just compiled, into both caches."""
        self.compiled += 1
        if not getenv("DISABLE_CACHE", 0):
            disk_cache().put("kernels", self._cache_key(src), {"name": name}, binary)
        self._remember(hashlib.sha256(self._cache_key(src).encode()).hexdigest(), binary)

    def _remember(self, digest: str, binary: bytes) -> None:
        self._memo[digest] = binary
        while len(self._memo) > getenv("COMPILER_CACHE", 1024):
            self._memo.popitem(last=False)

    # lowered programs by AST: a new process skips linearizing and rendering too
    def _program_key(self, ast_key: str) -> str:
        return f"{self.key}\n{codegen_version()}\n{ast_key}"

    def load_program(self, ast_key: str) -> tuple[ProgramSpec, bytes] | None:
        """(spec, binary) saved for this AST (a repr of its key plus the renderer), if any."""
        if getenv("DISABLE_CACHE", 0):
            return None
        found = disk_cache().get("programs", self._program_key(ast_key))
        if found is None:
            return None
        try:
            return spec_from_json(found[0]), found[1]
        except ValueError as e:  # a well-formed entry with a malformed spec: lower again
            disk_cache().drop("programs", self._program_key(ast_key), str(e))
            return None

    def save_program(self, ast_key: str, spec: ProgramSpec, binary: bytes) -> None:
        if not getenv("DISABLE_CACHE", 0):
            disk_cache().put("programs", self._program_key(ast_key), spec_to_json(spec), binary)


class Program:
    """A loaded kernel. Called with device buffers; returns seconds if wait=True.
    `near_bound`: a CPU kernel near the thread bound, which a sequence of launches may
    run serial (runtimes/cpu_choice.py, D134)."""
    near_bound = False

    def __init__(self, spec: ProgramSpec, binary: bytes):
        self.spec, self.name, self.binary = spec, spec.name, binary

    def __call__(self, *bufs: Any, global_size: list[int], local_size: list[int],
                 wait: bool = False) -> float | None:
        raise NotImplementedError

    def launcher(self, global_size: list[int], local_size: list[int]) -> Callable[..., Any]:
        """A launch of this program with these sizes, called with the buffers' memory
        alone (what the engine's plans keep, D78); a runtime may return something
        cheaper than a call with keywords."""
        return functools.partial(self, global_size=global_size, local_size=local_size)

    def serial_launcher(self, global_size: list[int], local_size: list[int]) -> Callable[..., Any]:
        """`launcher` for a run of a sequence that chose to run every kernel on the calling
        thread (D134): a runtime without that choice gives its launcher."""
        return self.launcher(global_size, local_size)


class Runtime:
    """One device: its allocator, compiler, Program maker and renderer. `program(spec,
    binary)` makes a Program: the class itself, or a partial that adds per-device state.
    `computes` is False for a device whose kernels compute no values (NULL): the engine
    then reads no index-check flags from it."""
    computes = True

    def __init__(self, name: str, allocator: Allocator, compiler: Compiler,
                 program: Callable[[ProgramSpec, bytes], Program], renderer: Renderer):
        self.name, self.allocator, self.compiler = name, allocator, compiler
        self.program, self.renderer = program, renderer

    def synchronize(self) -> None:
        """Wait for queued work (CPU runs synchronously)."""


class Buffer:
    """`size` elements of `dtype` on a device; memory is allocated on first use."""
    __slots__ = ("runtime", "size", "dtype", "nbytes", "_buf", "__weakref__")

    def __init__(self, runtime: Runtime, size: int, dtype: DType):
        self.runtime, self.size, self.dtype = runtime, size, dtype
        self.nbytes = size * dtype.itemsize
        self._buf: Any = None

    @property
    def device(self) -> str:
        return self.runtime.name

    def ensure_allocated(self) -> Any:
        if self._buf is None:
            self._buf = self.runtime.allocator.alloc(self.nbytes or 1)
        return self._buf

    def copyin(self, data: memoryview) -> Buffer:
        assert data.nbytes == self.nbytes, f"copyin of {data.nbytes} bytes into {self.nbytes}"
        self.runtime.allocator.copyin(self.ensure_allocated(), data)
        return self

    def copyout(self, dest: memoryview) -> memoryview:
        self.runtime.synchronize()
        self.runtime.allocator.copyout(dest, self.ensure_allocated())
        return dest

    def __del__(self):
        try:  # (a try costs nothing where nothing is raised: this runs once per eager op)
            buf = self._buf
        except AttributeError:  # not set: __init__ failed
            return
        if buf is not None:
            self._buf = None
            self.runtime.allocator.free(buf, self.nbytes or 1)

    def __repr__(self) -> str:
        return f"<Buffer {self.device} {self.size} {self.dtype.name}>"


class Window:
    """A buffer's memory from a byte offset on, passed to a kernel whose loads of it were
    rebased to that offset (lazyten/rebase.py, D120): a kernel argument, never owned (the
    buffer frees its memory, and lives as long as this)."""
    __slots__ = ("base", "shift", "runtime", "_buf")

    def __init__(self, base: Buffer, shift: int):
        self.base, self.shift, self.runtime = base, shift, base.runtime
        allocator: Any = base.runtime.allocator  # (one with `offset`: lazyten/rebase.py)
        self._buf = allocator.offset(base.ensure_allocated(), shift)

    @property
    def device(self) -> str:
        return self.runtime.name

    def ensure_allocated(self) -> Any:
        return self._buf
