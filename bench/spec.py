"""The benchmark records: `Workload` (what one benchmark is) and `Target` (one goal).

Imports nothing from bench, so every registry module (workloads.py, layers.py) can use it.
"""
from __future__ import annotations
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Target:
    """One goal. kind "speed": speed ratio against `against` (its time / lazyten's time)
    must be >= threshold. kind "seconds": lazyten's time must be < threshold."""
    text: str
    kind: str
    threshold: float
    against: str | None = None

    def evaluate(self, lazy_s: float | None, base_s: float | None,
                 lower_bound: bool = False) -> tuple[float | None, bool | None]:
        """(the value compared, passed?), or (None, None) when a figure is missing.
        lower_bound: lazy_s is only a lower bound (lazyten hit its time limit), which
        still decides a miss when even the bound misses."""
        if lazy_s is None or lazy_s <= 0:
            return None, None
        if self.kind == "seconds":
            value = lazy_s
            ok = value < self.threshold
        else:
            if base_s is None:
                return None, None
            value = base_s / lazy_s
            ok = value >= self.threshold
        if lower_bound and ok:
            return None, None
        return value, ok


@dataclass(frozen=True)
class Workload:
    name: str
    group: str
    desc: str
    flops: float = 0.0        # floating-point operations per call (GFLOP/s column)
    nbytes: float = 0.0       # minimum bytes moved per call (GB/s column, when no flops)
    items: int = 0            # images per call (img/s column, training)
    baselines: tuple[str, ...] = ()   # of "numpy", "torch", "torch_compile"
    baseline_key: str = ""    # workloads sharing one baseline measurement
    targets: tuple[Target, ...] = ()
    deadline: tuple[float, float] = (60.0, 30.0)  # lazyten child's time limit: full, quick
    quick: bool = True        # part of --quick (else only when named in --only)
    default: bool = True      # part of a run without --only (else only when named, or --all)
    calls: int = 1            # operations per timed call; times are divided by it (per op)
    params: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        return self.baseline_key or self.name

    def rate(self, seconds: float | None) -> tuple[float | None, str]:
        """Throughput for a time, and its unit."""
        if self.flops:
            return (self.flops / seconds / 1e9 if seconds else None), "GFLOP/s"
        if self.nbytes:
            return (self.nbytes / seconds / 1e9 if seconds else None), "GB/s"
        if self.items:
            return (self.items / seconds if seconds else None), "img/s"
        return None, ""
