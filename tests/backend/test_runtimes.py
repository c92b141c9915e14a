"""The runtime objects themselves: timed launches, compile errors that show the build log
and the source, compile-cache keys, device selection, and the NULL runtime's counting."""
import re

import numpy as np
import pytest

from codegen.dtypes import dtypes
from lazyten import Tensor
from lazyten.realize import get_program
from lazyten.schedule import create_schedule
from runtimes import RUNTIMES, CompileError, get_runtime


def _opencl():
    try:
        return get_runtime("OPENCL")
    except Exception as e:
        pytest.skip(f"OPENCL unavailable: {e}")


def test_timed_launch_returns_seconds(device):
    x = Tensor(np.ones(1000, np.float32), device=device)
    out = (x * 3).lazydata
    item = [s for s in create_schedule([out]) if s.ast is not None][0]
    spec, program = get_program(item.ast, device)
    out_buf = out.allocate()
    seconds = program(out_buf.ensure_allocated(), x.lazydata.buffer().ensure_allocated(),
                      global_size=spec.global_size, local_size=spec.local_size, wait=True)
    assert isinstance(seconds, float) and 0 <= seconds < 10
    host = np.empty(1000, np.float32)
    out_buf.copyout(memoryview(host).cast("B"))
    np.testing.assert_array_equal(host, 3)


def test_opencl_compile_error_shows_log_and_source():
    runtime = _opencl()
    src = "__kernel void broken(__global float* a) { a[0] = undefined_name; }\n"
    with pytest.raises(CompileError) as info:
        runtime.compiler.compile_checked("broken", src)
    text = str(info.value)
    assert "undefined_name" in info.value.log        # the driver's build log
    assert "broken" in text and "   1 __kernel void broken" in text  # numbered source
    assert "hint" not in text                       # an error in the source is not the driver's


def test_opencl_driver_that_does_not_know_the_cpu_gets_a_hint():
    # what pocl 3.0 (LLVM 14) logs on a CPU newer than its LLVM (AMD Zen 5): every build fails
    from runtimes.opencl import build_failure
    log = "error: unknown target CPU 'generic'\nDevice pthread-AMD EPYC failed to build the program"
    text = build_failure("clBuildProgram failed: BUILD_PROGRAM_FAILURE", log)
    assert log in text and "pocl-opencl-icd" in text and "tools/opencl_check.py" in text
    assert "hint" not in build_failure("clBuildProgram failed", "error: use of undeclared identifier")


def test_opencl_cache_key_names_device_and_driver():
    runtime = _opencl()
    device = runtime.dev.device
    assert device.name in runtime.compiler.key and device.driver_version in runtime.compiler.key


def test_opencl_device_index_out_of_range():
    _opencl()
    with pytest.raises(RuntimeError, match="OPENCL:99 does not exist"):
        get_runtime("OPENCL:99")


def test_opencl_half_without_fp16_extension():
    runtime = _opencl()  # vload_half/vstore_half are core OpenCL: no cl_khr_fp16 needed
    x = np.array([0.1, 65504, 6e-8, -2.5], np.float16)
    got = (Tensor(x, device=runtime.name) * 2).numpy()
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got, x * np.float16(2))  # 65504 * 2 overflows to inf


def test_null_runtime_counts_launches():
    null = get_runtime("NULL")
    before = null.launches
    x = Tensor(np.arange(6, dtype=np.float32), device="NULL")
    ((x + 1) * 2).sum().realize()
    assert null.launches - before == 1  # one fused reduce kernel
    (x.reshape(2, 3) @ x.reshape(3, 2)).realize()
    assert null.launches - before == 2
    spec, _ = get_program(create_schedule([(x - 1).lazydata])[-1].ast, "NULL")
    # rendered as OpenCL C, though nothing compiles it
    assert re.search(r"__kernel (__attribute__\(\(reqd_work_group_size\(\d+, 1, 1\)\)\) )?void E_",
                     spec.src), spec.src


@pytest.mark.parametrize("name", list(RUNTIMES))
def test_runtime_modules_follow_the_interface(name):
    from importlib import import_module
    from runtimes import Allocator, Compiler, Program
    module = import_module(RUNTIMES[name])
    assert callable(module.make_runtime)
    kinds = {Allocator, Compiler, Program}
    found = {base for obj in vars(module).values() if isinstance(obj, type)
             for base in kinds if issubclass(obj, base) and obj is not base}
    assert found == kinds, f"{name} lacks one of Allocator, Compiler, Program"


def test_bool_and_half_buffers_are_one_and_two_bytes(device):
    for dtype, nbytes in ((dtypes.bool, 1), (dtypes.float16, 2)):
        t = Tensor(np.zeros(5, dtype=np.dtype(dtype.fmt)), device=device)
        assert t.lazydata.buffer().nbytes == 5 * nbytes
        assert (t.cast(dtypes.int32) + 1).numpy().tolist() == [1] * 5
