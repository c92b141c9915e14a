"""Can this machine's OpenCL driver build and run a kernel? Lists every device and tries each.

    python tools/opencl_check.py        # exit 0 when OPENCL:0 (what DEVICE=OPENCL uses) works

.ci/run asks before the tests: pocl-binary-distribution's pocl (3.0, LLVM 14) names the
CPU to its compiler by LLVM's host-CPU lookup, which gives `generic` for CPUs newer than
LLVM 14 (AMD Zen 5), and clang 14 refuses `-target-cpu generic` for x86: every build then
fails with "unknown target CPU 'generic'". Where device 0 fails, CI installs Debian's pocl
(3.1, LLVM 15), which names the CPU by the kernel library its features select.
"""
from __future__ import annotations
import sys

import numpy as np

SRC = "__kernel void add_one(__global float* a) { int i = get_global_id(0); a[i] = a[i] + 1.0f; }"


def try_device(cl, device) -> str | None:
    """None when a kernel builds and runs right on `device`, else what went wrong."""
    ctx = cl.Context([device])
    queue = cl.CommandQueue(ctx, device)
    program = cl.Program(ctx, SRC)
    try:
        program.build(devices=[device])
    except cl.Error:
        return program.get_build_info(device, cl.program_build_info.LOG).strip() or "build failed"
    host = np.arange(8, dtype=np.float32)
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=host)
    program.add_one(queue, host.shape, None, buf)
    out = np.empty_like(host)
    cl.enqueue_copy(queue, out, buf, is_blocking=True)
    return None if np.array_equal(out, host + 1) else f"wrong result {out}"


def main() -> int:
    try:
        import pyopencl as cl
        devices = [d for p in cl.get_platforms() for d in p.get_devices()]
    except Exception as e:  # no pyopencl, no ICD loader, no platform
        print(f"OpenCL: no device ({type(e).__name__}: {e})")
        return 1
    if not devices:
        print("OpenCL: no device")
        return 1
    failures = []
    for i, d in enumerate(devices):
        why = try_device(cl, d)
        failures.append(why)
        state = "ok" if why is None else f"FAILS: {why.splitlines()[0]}"
        print(f"OPENCL:{i}  {d.platform.version} | {d.name}: {state}")
    return 0 if failures[0] is None else 1


if __name__ == "__main__":
    sys.exit(main())
