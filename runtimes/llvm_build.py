"""LLVM IR -> object code for this CPU, with llvmlite and the standard library only.

The CPU runtime's compiler (runtimes/cpu_llvm.py) builds with `build`, and a compile
worker process (runtimes/compile_worker.py) constructs `LLVMBuild` alone: importing no
numpy and none of the runtime, a worker starts in about 0.15 s instead of 0.55 (most of
a cold first step's lowering, which it should spend compiling; D43 addendum).
"""
from __future__ import annotations
import re

import llvmlite.binding as llvm

from codegen.helpers import getenv

llvm.initialize_native_target()
llvm.initialize_native_asmprinter()

RECIPE = 3  # what `build` does: part of the compiler's cache key, so a change rebuilds
_VECTOR_TYPE = re.compile(r"<\d+ x (?:float|double|half|bfloat|i\d+)>")


def llvm_vectorizes(src: str) -> bool:
    """Whether LLVM's loop vectorizer runs on this kernel: only where its IR has no vector
    type, i.e. the passes gave it no lanes [D77]. Where they did, it only rearranged the
    tile (a kernel A/B: matmuls 9-22% faster without it, the rest within noise), while
    scalar kernels need it (1.5x median, up to 6x). The SLP vectorizer runs on every
    kernel: a tile's scalar epilogue (a reduce's outputs after their lanes are summed, as
    Linear's dot products end) is the same code once per output, which it puts in vectors
    (D108: F.linear(x, w, b).tanh() at 64 x 300 x 300 233 -> 126 us)."""
    return _VECTOR_TYPE.search(src) is None


def target_machine(opt: int = 3) -> llvm.TargetMachine:
    """LLVM's code generator for this CPU. An MCJIT engine takes ownership of the one it
    is given (and frees it with itself), so every engine gets its own."""
    return llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
        opt=opt, reloc="pic", codemodel="default", jit=True)


def build(src: str, machine: llvm.TargetMachine, optimise: bool = True) -> bytes:
    """Verified, optimised (at OPT, default 3) and emitted as an object file."""
    mod = llvm.parse_assembly(src)
    mod.verify()
    if optimise:
        tuning = llvm.create_pipeline_tuning_options(speed_level=getenv("OPT", 3))
        tuning.loop_vectorization = llvm_vectorizes(src)
        tuning.slp_vectorization = True
        builder = llvm.create_pass_builder(machine, tuning)
        builder.getModulePassManager().run(mod, builder)
    return machine.emit_object(mod)


class LLVMBuild:
    """What a compile worker process runs for the CPU compiler: `compile(src)`."""

    def __init__(self) -> None:
        self.machine = target_machine()

    def compile(self, src: str) -> bytes:
        return build(src, self.machine)
