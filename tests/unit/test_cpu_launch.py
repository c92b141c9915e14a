"""The CPU's launchers (runtimes/cpu_launch.py, codegen/renderer/llvm_launch.py): builtins
made from native code that call a kernel, with their arguments checked."""
import sys

import llvmlite.binding as llvm
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from codegen.renderer.llvm_launch import launchers_ir
from lazyten import Tensor
from lazyten.realize import Capture
from runtimes.cpu_host import Host
from runtimes.cpu_llvm import CPUProgram, SupportCompiler


def add_kernel(n: int):
    """x, y, out (float32, n elements) and the captured program of out = x + y with its
    spec; out starts as zeros (written in place by an assign)."""
    rng = np.random.default_rng(n)
    x = Tensor(rng.standard_normal(n, dtype=np.float32)).realize()
    y = Tensor(rng.standard_normal(n, dtype=np.float32)).realize()
    out = Tensor(np.zeros(n, np.float32)).realize()
    Capture.items = []
    try:
        out.assign(x + y).realize()
        (spec, program, buffers), = Capture.items
    finally:
        Capture.items = None
    return x, y, out, spec, program, [b.ensure_allocated() for b in buffers]


@pytest.mark.parametrize("buffers", [1, 2, 3, 7, 16])
def test_launcher_ir_verifies(buffers):
    mod = llvm.parse_assembly(launchers_ir(buffers))
    mod.verify()
    assert {f.name for f in mod.functions if not f.is_declaration} == \
        {f"launch_{buffers}", f"call_{buffers}"}


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 3000))
def test_a_kernel_called_through_its_launcher_matches_numpy(n):
    x, y, out, spec, program, memory = add_kernel(n)
    assert program.native is not None, "this CPython has the C API the launchers use"
    np.testing.assert_array_equal(out.numpy(), x.numpy() + y.numpy())
    out.assign(out * 0).realize()
    bounds = (0, spec.global_size[0]) if program.threaded else ()
    program.native(program.address, *bounds, *memory)
    np.testing.assert_array_equal(out.numpy(), x.numpy() + y.numpy())


def test_bad_arguments_raise_and_never_call_the_kernel():
    """A wrong count, memory that is not the allocator's (block, address) and an address
    that is not an int raise Python errors; the output is left as it was."""
    x, y, out, spec, program, memory = add_kernel(37)
    out.assign(out * 0).realize()
    launch, bounds = program.native, ((0, spec.global_size[0]) if program.threaded else ())
    with pytest.raises(TypeError, match="takes"):
        launch(program.address, *bounds, *memory[:-1])
    with pytest.raises(TypeError, match="takes"):
        launch(program.address, *bounds, *memory, memory[0])
    with pytest.raises(SystemError):
        launch(program.address, *bounds, memory[0], memory[1], 12345)
    with pytest.raises(IndexError):
        launch(program.address, *bounds, memory[0], memory[1], (memory[2][0],))
    with pytest.raises(TypeError):
        launch(program.address, *bounds, memory[0], memory[1], (None, "not an address"))
    with pytest.raises(TypeError):
        launch("not an address", *bounds, *memory)
    np.testing.assert_array_equal(out.numpy(), np.zeros(37, np.float32))


def test_launches_leave_reference_counts_as_they_were():
    """A launcher returns None with a reference of its own (a missing one would free None
    in the end) and takes none of its arguments'. (None's count moves a little with
    whatever else the process does; one reference per call too many or too few would
    move it by the 1000 calls.)"""
    x, y, out, spec, program, memory = add_kernel(64)
    bounds = (0, spec.global_size[0]) if program.threaded else ()
    counts = [sys.getrefcount(m) for m in memory]
    nones = sys.getrefcount(None)
    for _ in range(1000):
        assert program.native(program.address, *bounds, *memory) is None
    assert abs(sys.getrefcount(None) - nones) < 100
    assert [sys.getrefcount(m) for m in memory] == counts


def test_without_launchers_programs_run_through_ctypes():
    """Where CPython's C API cannot be found (another Python), a program has no launcher
    and calls its kernel through ctypes, with the same results."""
    x, y, out, spec, program, memory = add_kernel(300)
    host = Host(SupportCompiler())
    host.native = False  # what resolve_c_api() found
    plain = CPUProgram(spec, program.binary, host)
    assert plain.native is None
    out.assign(out * 0).realize()
    plain(*memory, global_size=spec.global_size, local_size=spec.local_size)
    np.testing.assert_array_equal(out.numpy(), x.numpy() + y.numpy())
    out.assign(out * 0).realize()
    plain.launcher(spec.global_size, spec.local_size)(*memory)
    np.testing.assert_array_equal(out.numpy(), x.numpy() + y.numpy())
