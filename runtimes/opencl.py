"""OpenCL runtime through pyopencl: OpenCL C source -> program binary -> timed launches.

`OPENCL:N` is the N-th device counting across every platform (`OPENCL` is `OPENCL:0`).
Launch sizes from the renderer are work-groups and work-group sizes per dim; OpenCL wants
total work-items, so the Program multiplies them. Events on a profiling queue time kernels.
The kernels are lowered for the device's type (`device_target`): a CPU (pocl) as a CPU
driven through work-items, anything else as a GPU (D56).
"""
from __future__ import annotations
import functools

from codegen.helpers import getenv
from codegen.renderer import ProgramSpec
from codegen.renderer.opencl import OpenCLRenderer
from codegen.target import Target, gpu, work_item_cpu
from runtimes.base import Allocator, Compiler, Program, Runtime


def _pyopencl():
    try:
        import pyopencl
    except ImportError as e:
        raise RuntimeError("OPENCL needs the pyopencl package (pip install pyopencl) and a "
                           "driver, e.g. pip install pocl-binary-distribution") from e
    return pyopencl


class OpenCLDevice:
    """One device with its context and in-order profiling queue."""

    def __init__(self, index: int):
        cl = self.cl = _pyopencl()
        try:
            devices = [d for p in cl.get_platforms() for d in p.get_devices()]
        except cl.Error as e:  # no ICD loader or no platform at all
            raise RuntimeError(f"OPENCL: no OpenCL platform found ({e}); install a driver, "
                               "e.g. pip install pocl-binary-distribution") from e
        if index >= len(devices):
            raise RuntimeError(f"OPENCL:{index} does not exist: {len(devices)} OpenCL device(s) "
                               "found; install a driver, e.g. pip install pocl-binary-distribution")
        self.index, self.device = index, devices[index]
        self.context = cl.Context([self.device])
        self.queue = cl.CommandQueue(self.context, self.device,
                                     properties=cl.command_queue_properties.PROFILING_ENABLE)


def device_target(dev: OpenCLDevice) -> Target:
    """What the passes may assume, from the device's type: a CPU (pocl) gets loops of
    work-items without group reduces (D56), anything else the GPU target.
    OPENCL_TARGET=gpu or cpu overrides the choice (to see the other kind's kernels)."""
    d = dev.device
    local = min(256, d.max_work_group_size)
    kind = getenv("OPENCL_TARGET", "") or ("cpu" if d.type & dev.cl.device_type.CPU else "gpu")
    if kind not in ("cpu", "gpu"):
        raise ValueError(f"OPENCL_TARGET={kind!r}: expected 'cpu' or 'gpu'")
    if kind == "cpu":
        return work_item_cpu("OPENCL", d.max_compute_units, local)
    return gpu("OPENCL", local_size=local, local_memory=min(48 << 10, d.local_mem_size),
               max_local=tuple(d.max_work_item_sizes)[:3], max_group=d.max_work_group_size)


class OpenCLAllocator(Allocator):
    """cl.Buffer objects; copies block, so host memory may be reused as soon as they return."""

    def __init__(self, dev: OpenCLDevice):
        super().__init__()
        self.dev = dev

    def _alloc(self, nbytes: int):
        return self.dev.cl.Buffer(self.dev.context, self.dev.cl.mem_flags.READ_WRITE, nbytes)

    def _free(self, opaque) -> None:
        opaque.release()

    def copyin(self, dest, src: memoryview) -> None:
        self.dev.cl.enqueue_copy(self.dev.queue, dest, src, is_blocking=True)

    def copyout(self, dest: memoryview, src) -> None:
        self.dev.cl.enqueue_copy(self.dev.queue, dest, src, is_blocking=True)

    def copy_within(self, dest, src, offset: int, nbytes: int) -> None:
        """A run of device memory copied on the queue, after the kernels before it (a
        slice made its own buffer: lazyten/varying.py)."""
        self.dev.cl.enqueue_copy(self.dev.queue, dest, src, byte_count=nbytes, src_offset=offset)


class OpenCLCompiler(Compiler):
    """OpenCL C -> the driver's program binary; the key names the device and driver.
    Builds run on the compile pool: the driver releases the GIL while it builds, and
    a worker process (which opens device `index` itself) builds beside this one."""
    threaded = True

    def __init__(self, index: str = "0", dev: OpenCLDevice | None = None):
        super().__init__()
        dev = self.dev = dev if dev is not None else OpenCLDevice(int(index))
        self.worker_args = (str(dev.index),)
        d = dev.device
        # OpenCL lets single-precision `/` and sqrt be off by up to 3 ulp unless asked
        # (FDIV promises IEEE division); devices that cannot do it exactly do not offer it
        exact = d.single_fp_config & dev.cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT
        self.options = ["-cl-fp32-correctly-rounded-divide-sqrt"] if exact else []
        self.key = (f"opencl-{d.platform.name}-{d.name}-{d.version}-{d.driver_version}"
                    f"{''.join(' ' + o for o in self.options)}")

    def compile(self, src: str) -> bytes:
        cl, dev = self.dev.cl, self.dev.device
        program = cl.Program(self.dev.context, src)
        try:
            program.build(options=self.options, devices=[dev])
        except cl.Error as e:
            log = program.get_build_info(dev, cl.program_build_info.LOG)
            raise RuntimeError(build_failure(str(e), log)) from e
        return bytes(program.get_info(cl.program_info.BINARIES)[0])


def build_failure(error: str, log: str) -> str:
    """The message for a failed build: the driver's error and log, and where the log shows
    a driver whose compiler does not know this CPU, what to install instead."""
    message = f"OpenCL build failed: {error}\n--- build log ---\n{log}"
    if "unknown target CPU" in log:
        message += ("\nhint: this OpenCL driver's compiler does not know this CPU (the pocl 3.0 "
                    "of pocl-binary-distribution, LLVM 14, predates AMD Zen 5): install a newer "
                    "pocl, e.g. Debian's pocl-opencl-icd; `python tools/opencl_check.py` lists "
                    "the devices that build")
    return message


class OpenCLProgram(Program):
    """A kernel loaded from its binary; returns seconds (from events) when asked to wait."""

    def __init__(self, spec: ProgramSpec, binary: bytes, dev: OpenCLDevice):
        super().__init__(spec, binary)
        self.dev = dev
        program = dev.cl.Program(dev.context, [dev.device], [binary]).build()
        self.kernel = dev.cl.Kernel(program, spec.entry)

    def __call__(self, *bufs, global_size, local_size, wait=False):
        for i, buf in enumerate(bufs):
            self.kernel.set_arg(i, buf)
        work_items = [g * l for g, l in zip(global_size, local_size)]
        event = self.dev.cl.enqueue_nd_range_kernel(self.dev.queue, self.kernel, work_items,
                                                    list(local_size))
        if not wait:
            return None
        event.wait()
        return (event.profile.end - event.profile.start) * 1e-9


class OpenCLRuntime(Runtime):
    """An OpenCL device; synchronize waits for its queue."""

    def __init__(self, name: str, dev: OpenCLDevice):
        super().__init__(name, OpenCLAllocator(dev), OpenCLCompiler(dev=dev),
                         functools.partial(OpenCLProgram, dev=dev),
                         OpenCLRenderer(device_target(dev)))
        self.dev = dev

    def synchronize(self) -> None:
        self.dev.queue.finish()


def make_runtime(name: str = "OPENCL") -> Runtime:
    """The OpenCL device `name` ("OPENCL" or "OPENCL:N")."""
    _, _, index = name.partition(":")
    return OpenCLRuntime(name, OpenCLDevice(int(index or 0)))
