"""Renderers: LinearKernel -> ProgramSpec (source text plus launch facts).

A renderer is passed in by the runtime; codegen never picks a device.
"""
from __future__ import annotations
import functools
import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable

from codegen.dtypes import DType
from codegen.linearizer import LinearKernel
from codegen.target import Target
from codegen.uops import UOp, UOps


@dataclass
class ProgramSpec:
    """What a runtime needs to compile and launch one kernel."""
    name: str
    src: str
    global_size: list[int]
    local_size: list[int]
    buf_dtypes: list[DType]
    var_names: list[str] = field(default_factory=list)
    flops: int = 0
    mem_bytes: int = 0
    function: str = ""  # the function's name in src, when the renderer does not use `name`

    @property
    def entry(self) -> str:
        """The symbol a runtime looks up in the compiled binary."""
        return self.function or self.name


def named_after_body(spec: ProgramSpec, definition: str) -> ProgramSpec:
    """`spec` with its function named after a hash of its source, keeping the kind's
    letter (`E_<hash>`); `definition` is how the source spells the name where the
    function is defined, with `{}` for the name. Kernels that differ only in their name
    (Adam's update of every parameter: the length is the loop bound or the launch size)
    are then one source, compiled once [D42]; `spec.name` stays the readable `E_30720`."""
    body = spec.src.replace(definition.format(spec.name), definition.format(""), 1)
    spec.function = f"{spec.name[0]}_{hashlib.sha256(body.encode()).hexdigest()[:16]}"
    spec.src = body.replace(definition.format(""), definition.format(spec.function), 1)
    return spec


class Renderer:
    """Base class: a renderer names its target (what the passes may assume) and renders
    a kernel."""
    target = Target("loops")

    def render(self, kernel: LinearKernel) -> str:
        raise NotImplementedError

    @functools.cached_property
    def _rules(self) -> dict[UOps, Callable[[Any, UOp], None]]:
        """uop kind -> the renderer's `_render_<kind>` method (bound once per renderer); a
        kind it has no method for is missing, and rendering it raises."""
        methods = {op: getattr(self, f"_render_{op.name.lower()}", None) for op in UOps}
        return {op: method for op, method in methods.items() if method is not None}

    def program(self, kernel: LinearKernel) -> ProgramSpec:
        """Render and package with the launch facts."""
        return ProgramSpec(kernel.name, self.render(kernel), kernel.global_size,
                           kernel.local_size, kernel.buf_dtypes, kernel.var_names,
                           kernel.flops, kernel.mem_bytes)
