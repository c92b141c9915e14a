"""Time one kernel as two source trees compile it: their LLVM IR, side by side, one process.

    python tools/kernel_ab.py /path/to/base/tree softmax:64x1000 layernorm:256x1023 ...

For each case (softmax, log_softmax or layernorm over the last axis of a rows x width
float32 input, layernorm with weight and bias) each tree's last kernel is rendered in a
child process (DEBUG=4, DISABLE_CACHE=1, PYTHONPATH=the tree), then both are compiled with
this tree's LLVMCompiler and called through ctypes on the same numpy arrays, on one
thread, in turn: 7 rounds of up to 300 calls each, the best call of each. Kernel time
only: no Python, no thread hand-off. Cases whose last kernel is not a row kernel (a split
reduce) are skipped. Used for D60's figures.
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
x = Tensor(np.zeros((rows, width), np.float32))
w, b = Tensor(np.ones(width, np.float32)), Tensor(np.zeros(width, np.float32))
out = {"softmax": lambda: x.softmax(-1), "log_softmax": lambda: x.log_softmax(-1),
       "layernorm": lambda: F.layer_norm(x, (width,), w, b)}[op]()
out.realize()
"""


def kernel_ir(tree: str, op: str, rows: int, width: int) -> tuple[str, int]:
    """(LLVM IR of the last kernel `tree` makes for the case, its global size)."""
    env = dict(os.environ, PYTHONPATH=tree, DEBUG="4", DISABLE_CACHE="1")
    # cwd too: `python -c` puts the working directory first on sys.path
    run = subprocess.run([sys.executable, "-c", _CHILD, op, str(rows), str(width)], env=env,
                         cwd=tree, capture_output=True, text=True, check=True)
    text = run.stdout + run.stderr
    source = text.rsplit("--- source of", 1)[1].split("\n", 1)[1]
    source = re.split(r"\n(?:---|\*\*\*)", source, maxsplit=1)[0]
    sizes = re.findall(r"global (\d+)\s", text)
    return source, int(sizes[-1])


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
    rows, width = map(int, shape.split("x"))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, width)).astype(np.float32)
    weight, bias = rng.standard_normal((2, width)).astype(np.float32)
    calls, times, outs = [], [], []
    for i, tree in enumerate((base, os.getcwd())):
        src, size = kernel_ir(tree, op, rows, width)
        if not re.search(r"define void @R_", src):
            return f"{case:24s} not a row kernel: skipped"
        fn, buffers = _load(engine, src, f"ab{i}_{op}_{rows}_{width}")
        out = np.zeros_like(x)
        args = [out.ctypes.data, x.ctypes.data, weight.ctypes.data, bias.ctypes.data][:buffers]
        calls.append((fn, args, size))
        times.append(float("inf"))
        outs.append(out)
    repeat = max(5, min(300, int(3e6 / (rows * width))))
    for _ in range(7):
        for i, (fn, args, size) in enumerate(calls):
            for _ in range(repeat):
                start = time.perf_counter()
                fn(*args, 0, size)
                times[i] = min(times[i], time.perf_counter() - start)
    diff = float(np.nanmax(np.abs(outs[0] - outs[1])))
    return (f"{case:24s} base {times[0] * 1e6:9.1f} us  this tree {times[1] * 1e6:9.1f} us  "
            f"{times[0] / times[1]:5.2f}x  (outputs differ by {diff:.1e})")


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), target_machine())
    for case in sys.argv[2:]:
        print(compare(os.path.abspath(sys.argv[1]), case, engine), flush=True)


if __name__ == "__main__":
    main()
