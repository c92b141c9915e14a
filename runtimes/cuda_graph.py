"""CUDA graphs (issue 16, item 4; D91): a replayed jit capture as one graph of kernel
nodes. The graph API is looked up on first use (`graph_call`): a driver without it leaves
the jit launching kernel by kernel."""
from __future__ import annotations
import ctypes
from ctypes import POINTER, byref, c_int, c_size_t, c_uint, c_uint64, c_void_p
from typing import TYPE_CHECKING

from runtimes.cuda_api import _P, arg_block, dims3

if TYPE_CHECKING:
    from runtimes.cuda import CUDAProgram, CUDARuntime

# the graph API (CUDA 11.4+): kernel nodes through the _v2 entry points
# where the driver has them (CUDA 12+), else the first ones; the parameter block is the
# _v2 struct either way (the first is its prefix)
_GRAPH = {"cuGraphCreate": [_P, c_uint], "cuGraphInstantiateWithFlags": [_P, c_void_p, c_uint64],
          "cuGraphLaunch": [c_void_p, c_void_p], "cuGraphExecDestroy": [c_void_p],
          "cuGraphDestroy": [c_void_p],
          "cuGraphAddKernelNode": [_P, c_void_p, _P, c_size_t, c_void_p],
          "cuGraphExecKernelNodeSetParams": [c_void_p, c_void_p, c_void_p]}


class _KernelNodeParams(ctypes.Structure):
    """CUDA_KERNEL_NODE_PARAMS_v2: a launch as a graph node (kern and ctx left NULL: the
    function's own context)."""
    _fields_ = [("func", c_void_p), ("gridDimX", c_uint), ("gridDimY", c_uint),
                ("gridDimZ", c_uint), ("blockDimX", c_uint), ("blockDimY", c_uint),
                ("blockDimZ", c_uint), ("sharedMemBytes", c_uint),
                ("kernelParams", POINTER(c_void_p)), ("extra", POINTER(c_void_p)),
                ("kern", c_void_p), ("ctx", c_void_p)]


class CUDAGraph:
    """Kernel launches replayed as one CUDA graph (issue 16, item 4): a chain of kernel
    nodes, each after the one before, launched on the default stream with one driver
    call. `set_args(i, pointers)` changes node i's buffers (a jit's new inputs and
    outputs) in the instantiated graph; the driver copies the arguments when it is called,
    so the argument block is reused."""

    def __init__(self, dev: CUDARuntime, launches: list[tuple[CUDAProgram, list[int]]]):
        self.dev, self.graph, self.exec = dev, c_void_p(), c_void_p()
        self.nodes: list[c_void_p] = []
        self.params: list[_KernelNodeParams] = []
        self.args: list[tuple[ctypes.Array, ctypes.Array]] = []
        graph_call(dev, "cuGraphCreate", byref(self.graph), 0)
        try:
            for program, pointers in launches:
                node, deps = c_void_p(), (c_void_p * 1)(*[n.value for n in self.nodes[-1:]])
                params = self._params(program, pointers)
                graph_call(dev, "cuGraphAddKernelNode", byref(node), self.graph,
                              deps if self.nodes else None, len(self.nodes[-1:]), byref(params))
                self.nodes.append(node)
                self.params.append(params)
            graph_call(dev, "cuGraphInstantiateWithFlags", byref(self.exec), self.graph, 0)
        except BaseException:
            self.close()
            raise

    def _params(self, program: CUDAProgram, pointers: list[int]) -> _KernelNodeParams:
        args, block = arg_block(len(pointers))
        args[:] = pointers
        self.args.append((args, block))
        grid, local = dims3(program.launch[0]), dims3(program.launch[1])
        return _KernelNodeParams(program.function, *grid, *local, 0,
                                 ctypes.cast(block, POINTER(c_void_p)), None, None, None)

    def set_args(self, i: int, pointers: list[int]) -> None:
        args, _ = self.args[i]
        args[:] = pointers
        graph_call(self.dev, "cuGraphExecKernelNodeSetParams", self.exec, self.nodes[i],
                           byref(self.params[i]))

    def launch(self) -> None:
        graph_call(self.dev, "cuGraphLaunch", self.exec, None)

    def close(self) -> None:
        if self.exec.value:
            graph_call(self.dev, "cuGraphExecDestroy", self.exec)
            self.exec = c_void_p()
        if self.graph.value:
            graph_call(self.dev, "cuGraphDestroy", self.graph)
            self.graph = c_void_p()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # at exit the driver may be gone
            pass


def graph_call(dev: CUDARuntime, name: str, *args) -> None:
    """A call of the graph API (_GRAPH) on `dev`; RuntimeError where the driver lacks it."""
    if dev.graph_calls is None:
        calls = {}
        for fn_name, argtypes in _GRAPH.items():
            fn = getattr(dev.cu.lib, fn_name + "_v2", None) or getattr(dev.cu.lib, fn_name, None)
            if fn is None:
                raise RuntimeError(f"CUDA graphs: the driver has no {fn_name}")
            fn.argtypes, fn.restype = argtypes, c_int
            calls[fn_name] = fn
        dev.graph_calls = calls
    dev.make_current()
    status = dev.graph_calls[name](*args)
    if status:
        dev.cu.raise_for(name, status)
