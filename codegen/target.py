"""Target descriptions: what the optimisation passes may assume about a device.

Every renderer names one `Target`. The passes (codegen/opt/) and the schedule passes
(lazyten/pack.py, lazyten/split.py) read it and nothing else about the device, so the
tuning of a kernel is a function of (kernel AST, target). `host_cpu()` reads the CPU's
vector width and thread count from the machine it runs on; the rest are stated defaults.
"""
from __future__ import annotations
import os
import pathlib
from dataclasses import dataclass, replace

from codegen.dtypes import dtypes
from codegen.helpers import getenv

_VECTOR_BITS = (("avx512f", 512), ("avx", 256), ("sse2", 128), ("neon", 128), ("asimd", 128))
_VECTOR_REGISTERS = {512: 32, 256: 16, 128: 16}  # x86-64: zmm0-31, ymm0-15, xmm0-15
# the element types whose loads and stores the GPU dialects write as vectors (float4, int2)
VECTOR_MEMORY = (dtypes.float32, dtypes.int32, dtypes.uint32)


@dataclass(frozen=True)
class Target:
    """Facts and budgets for one device's kernels.

    CPU (loop) targets: `vector_bits` wide registers, `vector_registers` of them; a reduce
    may keep `tile` accumulators in registers (half the registers, so loads have room);
    a matmul's strided operand is packed into panels `pack` floats wide (4 vectors); a long
    reduce with few outputs is cut into at most `split_reduce` chunks so `threads` threads
    share it; an input under `cached_bytes` (the L1 data cache) is cheap to re-read, and
    one under half of `l2_bytes` (a core's own L2 cache, also holding what streams past)
    cheaper than one that must come from L3 or memory; what does not fit `l3_bytes`
    comes from memory.
    GPU targets: work-groups of up to `local_size` work-items, at most `max_global`
    work-groups per hardware dim and at most `max_local` work-items per dim in one,
    `local_memory` bytes shared in a work-group (0: none worth using, so no group
    reduce), `item_tile` accumulators per work-item (0: one), and `elementwise_items`
    outputs per work-item of an elementwise kernel (0: one), as the lanes of a vector
    load or store up to `vector_memory` bytes where the buffers allow (D98). A row kernel's work-group
    (D94) gives each work-item about `row_items` elements of the row (the nearest power
    of two of work-items), and has at most `max_group` (the device's limit; 0:
    `local_size`)."""
    name: str
    gpu: bool = False
    vector_bits: int = 0           # 0: no explicit vectors (the backend vectorises, or none)
    vector_registers: int = 0
    tile: int = 0                  # most scalar accumulators of a tiled reduce (0: no tiling)
    pack: int = 0                  # panel width of a packed matmul operand (0: no packing)
    split_reduce: int = 0          # most chunks of a split reduce (0: no splitting)
    threads: int = 1
    cached_bytes: int = 32 << 10
    l2_bytes: int = 256 << 10
    l3_bytes: int = 0              # the last-level cache the cores share (0: not known)
    local_size: int = 1            # work-group size (1: no work-groups)
    max_global: tuple[int, ...] = (2**31 - 1, 65535, 65535)
    max_local: tuple[int, ...] = (1024, 1024, 64)
    elementwise_items: int = 0     # outputs per work-item of an elementwise GPU kernel (0: one)
    local_memory: int = 0
    item_tile: int = 0             # most accumulators one work-item keeps (0: no tile)
    row_items: int = 16            # a row kernel's elements per work-item (GPU, D94)
    max_group: int = 0             # most work-items in one work-group (0: local_size)
    row_held: int = 56             # a row kernel's steps per work-item held in registers, at most
    row_chunk: int = 8             # a longer share's steps per loop iteration (GPU, D96)
    row_online: bool = True        # a looping softmax row takes its max and sum in one walk
    warp: int = 0                  # work-items that exchange registers (CUDA: 32; 0: none)
    vector_memory: int = 0         # bytes of the widest vector load / store (GPU: 16, float4)
    min_items: int = 0             # work-items a GPU kernel keeps after tiling (0: the passes')
    scalef: bool = False           # AVX-512's vscalefps (x * 2^y in one instruction) for exp

    @property
    def lanes(self) -> int:
        """float32 values in one vector register (the widest vector the passes form)."""
        return self.vector_bits // 32


def with_fields(target: Target, fields: str) -> Target:
    """`target` with the fields that `fields` names changed ("row_held=0,row_chunk=3"):
    to try settings (`python -m bench --target`) or to reach a pass's other paths on small
    shapes (TARGET_FIELDS, read when a device is first opened). Integer values; a
    tuple field takes them joined by `x`."""
    changes: dict[str, object] = {}
    for part in filter(None, fields.replace(" ", "").split(",")):
        key, _, value = part.partition("=")
        if key not in target.__dataclass_fields__ or key == "name" or not value:
            raise ValueError(f"target field {part!r}: expected NAME=INT with NAME one of "
                             f"{', '.join(f for f in target.__dataclass_fields__ if f != 'name')}")
        old = getattr(target, key)
        changes[key] = tuple(int(v) for v in value.split("x")) if isinstance(old, tuple) \
            else type(old)(int(value))
    return replace(target, **changes)  # type: ignore[arg-type]


def host_cpu(name: str = "CPU") -> Target:
    """This machine's CPU, from LLVM's reading of its features (AVX-512: 16 float lanes,
    AVX2: 8, SSE2 or NEON: 4). `CPU_VECTOR_BITS` overrides the width (to see the code
    another machine would get). `scalef` where the host has AVX-512 (F and VL) and the
    width is 512."""
    bits = getenv("CPU_VECTOR_BITS", 0) or _host_vector_bits()
    target = cpu(bits, os.cpu_count() or 1, name)
    return replace(target, scalef=bits == 512 and _host_has("avx512f", "avx512vl"),
                   l2_bytes=_host_l2_bytes() or target.l2_bytes,
                   l3_bytes=_host_cache_bytes(3) or target.l3_bytes)


def cpu(vector_bits: int, threads: int = 1, name: str = "CPU") -> Target:
    """A CPU with vector registers `vector_bits` wide."""
    if vector_bits not in _VECTOR_REGISTERS:
        raise ValueError(f"CPU vector width {vector_bits} bits: expected one of "
                         f"{sorted(_VECTOR_REGISTERS)}")
    lanes, registers = vector_bits // 32, _VECTOR_REGISTERS[vector_bits]
    return Target(name, gpu=False, vector_bits=vector_bits, vector_registers=registers,
                  tile=registers // 2 * lanes, pack=4 * lanes, split_reduce=32, threads=threads)


def _host_l2_bytes(caches: str = "/sys/devices/system/cpu/cpu0/cache") -> int:
    """The size of the first CPU's level-2 cache as Linux describes it (sysfs), or 0."""
    return _host_cache_bytes(2, caches)


def _host_cache_bytes(level: int, caches: str = "/sys/devices/system/cpu/cpu0/cache") -> int:
    """The size of the first CPU's cache of `level` as Linux describes it (sysfs), or 0."""
    for index in sorted(pathlib.Path(caches).glob("index*")):
        try:
            if (index / "level").read_text().strip() != str(level):
                continue
            size = (index / "size").read_text().strip().upper()
        except OSError:
            return 0
        scale = {"K": 1 << 10, "M": 1 << 20}.get(size[-1:], 1)
        digits = size.rstrip("KM")
        return int(digits) * scale if digits.isdigit() else 0
    return 0


def _host_vector_bits() -> int:
    import llvmlite.binding as llvm
    features = llvm.get_host_cpu_features()
    return next((bits for name, bits in _VECTOR_BITS if features.get(name)), 128)


def _host_has(*names: str) -> bool:
    import llvmlite.binding as llvm
    features = llvm.get_host_cpu_features()
    return all(features.get(name) for name in names)


def gpu(name: str, local_size: int = 256, local_memory: int = 48 << 10,
        max_local: tuple[int, ...] = (1024, 1024, 64),
        max_global: tuple[int, ...] = (2**31 - 1, 65535, 65535), max_group: int = 0,
        warp: int = 0) -> Target:
    """A GPU: work-items, each with a register tile of up to 32 accumulators (a reduce)
    or 4 outputs (elementwise), no explicit vectors; the launch limits are CUDA's unless
    the runtime read the device's own. Measured on an H100 (D89): a 4096 matmul 4.2
    TFLOP/s with one output per work-item, 13.6 with 16, 16.2 with 32, 9.5 with 64; an
    elementwise chain 0.73 -> 0.77 of the copy bandwidth with 4 outputs."""
    return Target(name, gpu=True, local_size=local_size, local_memory=local_memory,
                  item_tile=32, elementwise_items=4, max_local=max_local,
                  max_global=max_global, max_group=max_group, warp=warp, vector_memory=16)


def work_item_cpu(name: str, threads: int, local_size: int = 256) -> Target:
    """A CPU driven through work-items (an OpenCL CPU driver such as pocl, D56). A
    work-group runs as a loop over its work-items on one thread, and local memory is
    ordinary memory whose barriers cut that loop into pieces: so no group reduce (a long
    reduce with few outputs is split into chunks, as on the CPU target), and each
    work-item keeps a register tile of accumulators (independent chains the driver's
    compiler can schedule, and vectorise where the tile is contiguous)."""
    return Target(name, gpu=True, local_size=local_size, local_memory=0, split_reduce=32,
                  threads=threads, item_tile=8)
