"""Masked vector loads wider than one register (D71).

A pad whose live lanes start in the middle of a vector (a circular pad's wrapped columns:
lanes 4 and 5 of 6) is a masked load whose first register's lanes are all off. LLVM 22's
x86 backend, splitting such a load itself, read the masked-off lanes (float64 and int64
on AVX2: <6 x double> is two registers) or aborted the process on an assertion. The LLVM
renderer now splits a wider masked load into register-sized loads. The structural test
holds on any host (it renders for 128-, 256- and 512-bit targets); the value tests fail
on an AVX2 host without the split (the differential fuzzer found the first, FUZZ_SEED=0).
"""
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codegen.dtypes import dtypes
from codegen.linearizer import linearize
from codegen.ops import BinaryOps
from codegen.renderer.llvm_masks import masked_load
from codegen.renderer.llvmir import LLVMRenderer
from codegen.target import cpu
from codegen.uops import UOp, UOps
from lazyten import Tensor
from lazyten.schedule import create_schedule

_MASKED = re.compile(r"call <(\d+) x (\w+)> @llvm\.masked\.load")
_BITS = {"double": 64, "i64": 64, "float": 32, "i32": 32, "i16": 16, "half": 16, "i8": 8}


def _sources(out: Tensor, bits: int) -> list[str]:
    renderer = LLVMRenderer(cpu(bits))
    return [renderer.program(linearize(item.ast, renderer.target)).src
            for item in create_schedule([out.lazydata]) if item.ast is not None]


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.float32, np.float16])
def test_no_masked_load_is_wider_than_a_register(dtype):
    """On a 256-bit target the pad's 6-lane rows take explicit lanes (E_3_6: UPCAST and
    LANES 6): a <6 x double> is two registers, a <6 x float> one."""
    bits = 256
    x = Tensor(np.arange(6 * 3, dtype=dtype).reshape(6, 3))
    loads = [(int(n), ty) for src in _sources(x.pad(((3, 0), (1, 2)), mode="circular"), bits)
             for n, ty in _MASKED.findall(src)]
    assert loads, "expected the wrapped columns to be read by masked vector loads"
    wide = [(n, ty) for n, ty in loads if n * _BITS[ty] > bits]
    assert not wide, f"masked loads wider than a {bits}-bit register: {wide}"


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.uint64, np.float32, np.float16])
def test_circular_pad_found_by_the_fuzzer(dtype):
    a = np.random.default_rng(92).integers(0, 1000, (8, 5, 9, 5)).astype(dtype)
    pads = ((3, 0), (0, 0), (0, 0), (1, 2))
    got = Tensor(a)[1:-1, 1:-1, 1:-1, 1:-1].pad(pads, mode="circular").numpy()
    np.testing.assert_array_equal(got, np.pad(a[1:-1, 1:-1, 1:-1, 1:-1], pads, mode="wrap"))


@pytest.mark.parametrize("dtype", [np.float64, np.int64])
def test_circular_pads_of_short_rows(dtype):
    """Every circular pad of a short last axis, rows 1-5 wide, 2 rows: the wrapped lanes'
    window starts at every position of the padded row."""
    for width in range(1, 6):
        a = np.arange(2 * width, dtype=dtype).reshape(2, width) + 1
        for before in range(width + 1):
            for after in range(width + 1):
                pads = ((1, 0), (before, after))
                got = Tensor(a).pad(pads, mode="circular").numpy()
                np.testing.assert_array_equal(got, np.pad(a, pads, mode="wrap"),
                                              err_msg=f"width {width}, pads {pads}")


_NP_MODE = {"constant": "constant", "circular": "wrap", "reflect": "reflect", "replicate": "edge"}


@settings(max_examples=40, deadline=None)
@given(data=st.data(), dtype=st.sampled_from([np.float64, np.int64, np.float32, np.int16]),
       mode=st.sampled_from(sorted(_NP_MODE)))
def test_pads_of_narrow_rows_match_numpy(data, dtype, mode):
    """Pads of the last one or two axes of narrow, sliced inputs: the lanes the elementwise
    pass forms along a short padded row have windows that start anywhere in a vector."""
    shape = tuple(data.draw(st.lists(st.integers(2, 7), min_size=2, max_size=3), label="shape"))
    sizes = (shape[-2], shape[-1] - 1)  # the last axis is sliced below
    # reflect pads less than the axis, circular at most the axis
    most = [size - 1 if mode == "reflect" else size if mode == "circular" else 4
            for size in sizes]
    pads = [(0, 0)] * (len(shape) - 2) + [
        (data.draw(st.integers(0, m)), data.draw(st.integers(0, m))) for m in most]
    a = (np.arange(np.prod(shape)) % 97 + 1).astype(dtype).reshape(shape)
    x = Tensor(a)[..., 1:]  # a view: the row is read through a tracker with an offset
    got = x.pad(pads, mode=mode).numpy()
    np.testing.assert_array_equal(got, np.pad(a[..., 1:], pads, mode=_NP_MODE[mode]))


def test_gather_gradient_repeated_reads_no_stale_lanes():
    """x.gather(1, index) of a 4x4 float64, backward: the gradient's rows 1-3 are a padded
    row's masked-off lanes. On AVX2 each 8-lane copy is two registers, the second all off;
    LLVM made that register a plain load, so every third step (when the allocator handed
    back a used buffer) rows 1-3 held old values (found by tests/unit/test_grad.py)."""
    rng = np.random.default_rng(0)
    x0, g0 = rng.standard_normal((4, 4)), rng.standard_normal((1, 4))
    index = rng.integers(0, 4, (1, 4))
    want = np.zeros((4, 4))
    np.add.at(want, (np.zeros((1, 4), int), index), g0)
    for step in range(9):
        x = Tensor(x0, requires_grad=True)
        (x.gather(1, Tensor(index)) * Tensor(g0)).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), want, err_msg=f"step {step}")


def _bool_lanes(values: list) -> UOp:
    """A bool vector uop: constant lanes, and None for a lane only known at run time."""
    unknown = UOp(UOps.DEFINE_VAR, dtypes.bool, (), "g")
    return UOp(UOps.VECTORIZE, dtypes.bool.vec(len(values)), tuple(
        unknown if v is None else UOp(UOps.CONST, dtypes.bool, (), v) for v in values))


@pytest.mark.parametrize("lanes, wide, single", [
    ([True] * 4 + [False] * 4, 1, 0),              # the second register all off: not loaded
    ([False] * 4 + [None] * 2 + [False] * 2, 0, 2),  # the first all off (the circular pad);
    ([None] * 8, 2, 0), ([False] * 8, 0, 0),       # the second partly: its 2 lanes alone
    ([None, False, False, False] * 2, 0, 2)])
def test_registers_known_off_are_not_loaded(lanes, wide, single):
    """A register all off is not loaded; one partly known off is loaded lane by lane (LLVM
    22 at O3 dropped a lane of such a `<4 x double>` load: D71's addendum); the rest as
    one register each."""
    lines: list[str] = []

    def emit(rhs: str) -> str:
        lines.append(rhs)
        return f"%v{len(lines)}"
    gate = UOp(UOps.ALU, dtypes.bool.vec(8), (_bool_lanes(lanes), _bool_lanes([None] * 8)),
               BinaryOps.AND)
    masked_load(emit, set(), "%p", gate, "%mask", dtypes.float64.vec(8), 256)
    calls = [line for line in lines if "@llvm.masked.load" in line]
    registers = [call for call in calls if "<4 x double>" in call]
    lanes_alone = [call for call in calls if "<1 x double>" in call]
    assert (len(registers), len(lanes_alone)) == (wide, single) and \
        len(calls) == wide + single, f"{lanes}: {calls}"
