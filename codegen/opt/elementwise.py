"""CPU pass for elementwise kernels: explicit vector lanes where LLVM's loop vectoriser
gives up (a load whose index is not affine along the innermost axis, or is masked along
it). Reduces are tiled in codegen/opt/tiling.py.
"""
from __future__ import annotations

from codegen.kernel import Kernel, Opt, OptOps
from codegen.target import Target


def gather_lanes(k: Kernel, target: Target) -> list[Opt]:
    """An elementwise kernel is left to LLVM's loop vectoriser, unless a load's index is
    not affine along the innermost axis (an upsampled gradient reads x // 2) or a
    contiguous load is masked along it (a padded copy): the vectoriser gives up there,
    so that axis becomes explicit vector lanes. Such a load reads the span its lanes
    touch once and shuffles, or is one masked vector load (codegen/linearizer.py)."""
    if k.reduceop is not None or not target.tile or not k.full_shape:
        return []
    axis = len(k.full_shape) - 1
    if k.strides(k.out_key, axis) != 1 or not any(_needs_lanes(k, key, axis) for key in k.mem):
        return []
    size, wide = k.full_shape[axis], target.lanes
    lanes = next((d for d in (wide, wide // 2) if d and size % d == 0),
                 size if wide // 2 < size <= wide else 0)
    upcast = Opt(OptOps.UPCAST, axis, lanes, "a load LLVM's vectoriser gives up on")
    if not lanes or not k.can_apply(upcast):
        return []
    return [upcast, Opt(OptOps.LANES, axis + 1, lanes, "explicit lanes for that load")]


def _needs_lanes(k: Kernel, key: int, axis: int) -> bool:
    stride = k.strides(key, axis)
    tangled = stride is None and len(k.sts[key].views) > 1
    masked = stride == 1 and k.strides(key, axis, ignore_valid=False) is None
    return tangled or masked
