"""How CPU kernels are built (runtimes/llvm_build.py, D77, D108): LLVM's own loop
vectorizer runs only on kernels the passes left scalar, its SLP vectorizer on every
kernel (a tile's scalar epilogue is the same code per output), and the compiler's cache
key names the recipe and OPT, so a binary built another way is never reused."""
import llvmlite.binding as llvm
import numpy as np
import pytest

from codegen.linearizer import linearize
from lazyten import Tensor
from lazyten.schedule import create_schedule
from runtimes import get_runtime
from runtimes.cpu_llvm import LLVMCompiler
from runtimes.llvm_build import build, llvm_vectorizes, target_machine


def source(out: Tensor) -> str:
    renderer = get_runtime("CPU").renderer
    return renderer.program(linearize(create_schedule([out.lazydata])[-1].ast, renderer.target)).src


def built_with(src: str, vectorizers: bool, slp: bool | None = None) -> bytes:
    """`src` built as `build` does, with LLVM's loop vectorizer on or off, and its SLP
    vectorizer so too unless `slp` says otherwise."""
    machine = target_machine()
    mod = llvm.parse_assembly(src)
    tuning = llvm.create_pipeline_tuning_options(speed_level=3)
    tuning.loop_vectorization = vectorizers
    tuning.slp_vectorization = vectorizers if slp is None else slp
    builder = llvm.create_pass_builder(machine, tuning)
    builder.getModulePassManager().run(mod, builder)
    return machine.emit_object(mod)


def kernels() -> dict[str, Tensor]:
    a = Tensor(np.ones((64, 96), np.float32))
    b = Tensor(np.ones((96, 128), np.float32))
    x = Tensor(np.ones((300, 32), np.float32))
    w = Tensor(np.ones((300, 100), np.float32))
    return {"matmul": a @ b, "softmax": a.softmax(-1),
            # Linear's x @ W.T, which LLVM's SLP vectorizer rearranged (D77)
            "linear": Tensor(np.ones((32, 100), np.float32)) @ w.T,
            # its dot products end in one scalar tanh per output, which SLP puts in vectors
            "linear_tanh": (Tensor(np.ones((32, 100), np.float32)) @ w.T).tanh(),
            # a transposed copy: no lanes (the output is strided along every input's rows)
            "transpose": (x.T * 2).contiguous()}


@pytest.mark.parametrize("name, vector", [("matmul", True), ("linear", True), ("softmax", True),
                                          ("linear_tanh", True), ("transpose", False)])
def test_llvm_vectorizes_only_kernels_the_passes_left_scalar(name, vector):
    src = source(kernels()[name])
    assert llvm_vectorizes(src) is not vector, src[:400]
    # what `build` makes is the build with LLVM's loop vectorizer on exactly for scalar
    # kernels, and its SLP vectorizer on for all
    assert build(src, target_machine()) == built_with(src, vectorizers=not vector, slp=True)


def test_a_tiles_scalar_epilogue_is_built_with_slp():
    """The case above can fail: a Linear whose dot products end in tanh is built
    otherwise without the SLP vectorizer (D108: 64 x 300 x 300 226 -> 126 us)."""
    src = source(kernels()["linear_tanh"])
    assert built_with(src, False, slp=True) != built_with(src, False, slp=False)


def test_vectorizers_change_the_binaries_they_are_kept_for():
    """The cases above can fail: with and without LLVM's vectorizers, the scalar
    transposed copy and Linear's matmul ending in tanh are built differently. (Linear's
    plain matmul no longer is: its dot products' lanes are combined in vectors already,
    D115, where SLP had rearranged them, D77.)"""
    for name in ("transpose", "linear_tanh"):
        src = source(kernels()[name])
        assert built_with(src, True) != built_with(src, False), name


def test_cache_key_names_the_recipe_and_opt(monkeypatch):
    from codegen.helpers import getenv
    key = LLVMCompiler().key
    monkeypatch.setenv("OPT", "1")
    getenv.cache_clear()
    try:
        other = LLVMCompiler().key
    finally:
        monkeypatch.delenv("OPT")
        getenv.cache_clear()
    assert "recipe" in key and key.endswith("-O3") and other.endswith("-O1") and key != other
