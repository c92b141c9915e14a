"""Time one kernel as two source trees compile it: their LLVM IR, side by side, one process.

    python tools/kernel_ab.py /path/to/base/tree softmax:64x1000 layernorm:256x1023 ...
    python tools/kernel_ab.py /path/to/base/tree nn:512x300x300 tn:300x512x300 nt:...

For each case (softmax, log_softmax or layernorm over the last axis of a rows x width
float32 input, layernorm with weight and bias; or a matmul M x K x N: nn is a @ b, tn
a.T @ b, nt a @ b.T) each tree's last kernel is rendered in a child process (DEBUG=4,
DISABLE_CACHE=1, PYTHONPATH=the tree), then both are compiled with this tree's
LLVMCompiler and called through ctypes on the same numpy arrays, on one thread, in turn,
one call of each per round (50 to 2000 rounds by size): printed are each tree's best
call and the median over rounds of base / this tree (above 1: this tree is faster; calls
in turn make the ratio hold on a machine whose speed drifts). Kernel time only: no
Python, no thread hand-off. Norm cases whose last kernel is not a row kernel (a split
reduce) are skipped. A matmul's last kernel may read a packed operand (a packing kernel
ran before it): every input buffer holds the same random floats, big enough for either
layout, and the line says so (outputs differ where the two trees' layouts do). Used for D60's
and D147's figures.
"""
from __future__ import annotations
import ctypes
import os
import re
import subprocess
import sys
import time

import numpy as np
import llvmlite.binding as llvm

from runtimes.cpu_host import target_machine
from runtimes.cpu_llvm import LLVMCompiler

_CHILD = """
import sys, numpy as np
from lazyten import Tensor
import lazyten.nn.functional as F
op, rows, width = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if op in ("nn", "tn", "nt"):
    m, k, n = rows, width, int(sys.argv[4])
    a = Tensor(np.zeros((k, m) if op == "tn" else (m, k), np.float32))
    b = Tensor(np.zeros((n, k) if op == "nt" else (k, n), np.float32))
    ((a.T if op == "tn" else a) @ (b.T if op == "nt" else b)).realize()
    sys.exit(0)
x = Tensor(np.zeros((rows, width), np.float32))
w, b = Tensor(np.ones(width, np.float32)), Tensor(np.zeros(width, np.float32))
out = {"softmax": lambda: x.softmax(-1), "log_softmax": lambda: x.log_softmax(-1),
       "layernorm": lambda: F.layer_norm(x, (width,), w, b)}[op]()
out.realize()
"""


def kernel_ir(tree: str, op: str, sizes: list[int]) -> tuple[str, int, int]:
    """(LLVM IR of the last kernel `tree` makes for the case, its global size, the number
    of kernels the case ran)."""
    env = dict(os.environ, PYTHONPATH=tree, DEBUG="4", DISABLE_CACHE="1")
    # cwd too: `python -c` puts the working directory first on sys.path
    run = subprocess.run([sys.executable, "-c", _CHILD, op, *map(str, sizes)], env=env,
                         cwd=tree, capture_output=True, text=True, check=True)
    text = run.stdout + run.stderr
    source = text.rsplit("--- source of", 1)[1].split("\n", 1)[1]
    source = re.split(r"\n(?:---|\*\*\*)", source, maxsplit=1)[0]
    sizes = re.findall(r"global (\d+)[x\s]", text)
    return source, int(sizes[-1]), len(sizes)


def _load(engine, src: str, tag: str):
    src = re.sub(r"define void @(\w+)\(", rf"define void @{tag}_\1(", src, count=1)
    name = re.search(r"define void @(\w+)\((.*?)\)", src)
    assert name is not None
    engine.add_object_file(llvm.ObjectFileRef.from_data(LLVMCompiler().compile(src)))
    engine.finalize_object()
    buffers = name.group(2).count("ptr")
    types = [ctypes.c_void_p] * buffers + [ctypes.c_int64] * 2
    return ctypes.CFUNCTYPE(None, *types)(engine.get_function_address(name.group(1))), buffers


def compare(base: str, case: str, engine) -> str:
    op, shape = case.split(":")
    sizes = [int(n) for n in shape.split("x")]
    rng = np.random.default_rng(0)
    if op in ("nn", "tn", "nt"):
        m, k, n = sizes
        x = np.zeros((m, n), np.float32)
        inputs = [rng.standard_normal(2 * (m * k + k * n)).astype(np.float32) for _ in range(3)]
    else:
        x = rng.standard_normal(sizes).astype(np.float32)
        inputs = [x, *rng.standard_normal((2, sizes[1])).astype(np.float32)]
    calls, times, outs, packed = [], [], [], False
    for i, tree in enumerate((base, os.getcwd())):
        src, size, kernels = kernel_ir(tree, op, sizes)
        packed |= kernels > 1
        if op not in ("nn", "tn", "nt") and not re.search(r"define void @R_", src):
            return f"{case:24s} not a row kernel: skipped"
        fn, buffers = _load(engine, src, f"ab{i}_{op}_{'_'.join(map(str, sizes))}")
        out = np.zeros_like(x)
        args = [out.ctypes.data] + [a.ctypes.data for a in inputs][:buffers - 1]
        calls.append((fn, args, size))
        times.append(float("inf"))
        outs.append(out)
    ratios = []
    for _ in range(max(50, min(2000, int(3e7 / x.size)))):
        took = []
        for i, (fn, args, size) in enumerate(calls):
            start = time.perf_counter()
            fn(*args, 0, size)
            took.append(time.perf_counter() - start)
            times[i] = min(times[i], took[-1])
        ratios.append(took[0] / took[1])
    diff = float(np.nanmax(np.abs(outs[0] - outs[1])))
    same = " (a packed operand)" if packed else ""
    return (f"{case:24s} base {times[0] * 1e6:9.1f} us  this tree {times[1] * 1e6:9.1f} us  "
            f"median ratio {float(np.median(ratios)):5.2f}x  (outputs differ by {diff:.1e}{same})")


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), target_machine())
    for case in sys.argv[2:]:
        print(compare(os.path.abspath(sys.argv[1]), case, engine), flush=True)


if __name__ == "__main__":
    main()
