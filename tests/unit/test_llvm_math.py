"""exp2 / exp / log2 written in LLVM IR (codegen/renderer/llvm_math.py) against numpy.

They replace libm calls for float32 on the CPU, scalar loops and vector lanes alike, so
they are checked over the whole float32 range: normal, subnormal and overflowing results,
and the special inputs (0, -0, inf, -inf, NaN, negatives).
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lazyten import Tensor

SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, 2.0, 0.5, -1.0, 1e-45, 1e-40, 3e38]


def ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Distance in float32 ulps of `want` (float64), NaN and inf must match exactly."""
    with np.errstate(over="ignore", invalid="ignore"):
        want32 = want.astype(np.float32)
        dist = np.abs(got.astype(np.float64) - want)
    same_special = (np.isnan(got) & np.isnan(want32)) | ((got == want32) & np.isinf(want32))
    spacing = np.spacing(np.abs(want32).astype(np.float32)).astype(np.float64)
    dist = dist / spacing
    return np.where(same_special, 0.0, np.where(np.isinf(want32) | np.isnan(want32), np.inf, dist))


def test_exp2_whole_range():
    x = np.concatenate([np.linspace(-160, 130, 200_003), SPECIAL]).astype(np.float32)
    got = Tensor(x).exp2().numpy()
    with np.errstate(over="ignore"):
        want = np.exp2(x.astype(np.float64))
    err = ulps(got, want)
    assert err.max() <= 1.0, f"exp2({x[err.argmax()]}) = {got[err.argmax()]}, want {want[err.argmax()]}"


def test_exp_whole_range():
    """The Cody-Waite split keeps exp within an ulp; exp2(x * log2(e)) was 62 ulps off."""
    x = np.concatenate([np.linspace(-110, 90, 200_003), SPECIAL]).astype(np.float32)
    got = Tensor(x).exp().numpy()
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(np.float64))
    err = ulps(got, want)
    assert err.max() <= 1.0, f"exp({x[err.argmax()]}) = {got[err.argmax()]}, want {want[err.argmax()]}"


def test_log2_whole_range():
    pos = np.geomspace(1e-45, 3.4e38, 200_003)
    x = np.concatenate([pos, np.linspace(0.5, 2.0, 10_001), -pos[::1000], SPECIAL]).astype(np.float32)
    got = Tensor(x).log2().numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        want = np.log2(x.astype(np.float64))
    err = ulps(got, want)
    assert err.max() <= 2.5, f"log2({x[err.argmax()]}) = {got[err.argmax()]}, want {want[err.argmax()]}"


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-80, 80, width=32), min_size=1, max_size=40))  # normal results
def test_exp_log_round_trip(values):
    x = np.array(values, np.float32)
    got, want = Tensor(x).exp().numpy(), np.exp(x.astype(np.float64))
    assert ulps(got, want).max() <= 1.0
    pos = np.abs(x) + np.float32(1e-3)
    np.testing.assert_allclose(Tensor(pos).log().numpy(), np.log(pos), rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("fn", ["exp2", "exp", "log2"])
def test_on_vector_lanes(fn):
    """Inside a tiled reduce the functions run on <16 x float> vectors."""
    rng = np.random.default_rng(0)
    a, b = rng.random((8, 24)).astype(np.float32), rng.random((24, 32)).astype(np.float32)
    got = getattr(Tensor(a)[:, :, None] * Tensor(b)[None], fn)().sum(axis=1).numpy()
    want = getattr(np, fn)(a[:, :, None].astype(np.float64) * b[None]).sum(axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-5)


_ENGINES: list = []  # the compiled code lives as long as its engine: kept for the run


def _vector_function(fn: str, lanes: int, scalef: bool, flags: bool = False):
    """exp or exp2 of llvm_math on <lanes x float>, compiled alone: f(in, out, vectors);
    `flags`: x86 only, the call clears MXCSR's exception flags first and returns them
    after (run(x) is then (out, flags))."""
    import ctypes
    import llvmlite.binding as llvm
    from codegen.renderer import llvm_math
    from runtimes.cpu_host import target_machine
    from runtimes.cpu_llvm import LLVMCompiler
    name, definitions = getattr(llvm_math, fn)(lanes, scalef)
    t = "float" if lanes == 1 else f"<{lanes} x float>"
    entry = f"f_{fn}_{lanes}_{int(scalef)}_{int(flags)}"  # function names are process-wide
    clear = ["  %m = alloca i32", "  call void @llvm.x86.sse.stmxcsr(ptr %m)",
             "  %old = load i32, ptr %m", f"  %clr = and i32 %old, {~_MXCSR_FLAGS}",
             "  store i32 %clr, ptr %m", "  call void @llvm.x86.sse.ldmxcsr(ptr %m)"]
    read = ["  call void @llvm.x86.sse.stmxcsr(ptr %m)", "  %new = load i32, ptr %m",
            f"  %fl = and i32 %new, {_MXCSR_FLAGS}", "  ret i32 %fl",
            "declare void @llvm.x86.sse.stmxcsr(ptr)", "declare void @llvm.x86.sse.ldmxcsr(ptr)"]
    src = "\n".join([
        f"define {'i32' if flags else 'void'} @{entry}(ptr %src, ptr %dst, i64 %n) {{", "entry:",
        *(clear if flags else []), "  br label %loop", "loop:",
        "  %i = phi i64 [0, %entry], [%j, %loop]",
        f"  %off = mul i64 %i, {lanes}",
        "  %p = getelementptr float, ptr %src, i64 %off",
        "  %q = getelementptr float, ptr %dst, i64 %off",
        f"  %x = load {t}, ptr %p, align 4", f"  %y = call {t} {name}({t} %x)",
        f"  store {t} %y, ptr %q, align 4",
        "  %j = add i64 %i, 1", "  %more = icmp slt i64 %j, %n",
        "  br i1 %more, label %loop, label %exit", "exit:",
        *(read[:4] if flags else ["  ret void"]), "}", *(read[4:] if flags else []), *definitions])
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), target_machine())
    engine.add_object_file(llvm.ObjectFileRef.from_data(LLVMCompiler().compile(src)))
    engine.finalize_object()
    _ENGINES.append(engine)
    call = ctypes.CFUNCTYPE(ctypes.c_int32 if flags else None, ctypes.c_void_p, ctypes.c_void_p,
                            ctypes.c_int64)(engine.get_function_address(entry))

    def run(x: np.ndarray):
        x = np.ascontiguousarray(x[: len(x) // lanes * lanes], np.float32)
        out = np.empty_like(x)
        raised = call(x.ctypes.data, out.ctypes.data, len(x) // lanes)
        return (out, raised) if flags else out
    return run


_MXCSR_FLAGS = 0x3F   # MXCSR's sticky exception flags (invalid ... precision)
_UNDERFLOW = 0x10


@pytest.mark.parametrize("lanes", [1, 16])
@pytest.mark.parametrize("scalef", [False, True])
@pytest.mark.parametrize("fn,zero,subnormal", [("exp", [-np.inf, -1e4, -104.0, -500.0], -100.0),
                                               ("exp2", [-np.inf, -1e4, -150.0, -155.0], -140.3)])
def test_a_result_that_rounds_to_zero_takes_no_underflow(fn, zero, subnormal, lanes, scalef):
    """exp(x <= -104) and exp2(x <= -150) are 0: scaling the polynomial down to it underflows,
    which x86 handles in a microcode assist (a causal softmax's exp(-inf) ran 7x slower),
    so those lanes scale 0 instead and MXCSR's underflow flag stays clear [D129]. A
    subnormal result that rounds still underflows (the flag shows the probe works)."""
    import platform
    from codegen.target import host_cpu
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("MXCSR is x86's")
    if scalef and not host_cpu().scalef:
        pytest.skip("the host has no AVX-512 vscalefps")
    run = _vector_function(fn, lanes, scalef, flags=True)
    out, raised = run(np.array(zero * 4, np.float32))
    assert (out == 0).all() and not np.signbit(out).any(), out
    assert not raised & _UNDERFLOW, hex(raised)
    out, raised = run(np.full(16, subnormal, np.float32))
    assert raised & _UNDERFLOW and (0 < out).all() and (out < 2.0 ** -126).all(), (hex(raised), out)


@pytest.mark.parametrize("lanes", [1, 4, 8, 16])
@pytest.mark.parametrize("fn,low,high", [("exp", -110, 90), ("exp2", -160, 130)])
def test_vscalef_whole_range(fn, low, high, lanes):
    """With AVX-512, 2^n is one vscalefps (vectors; NaN runs through unguarded) or
    llvm.ldexp (scalar code, vectorised by LLVM into vscalefps) [D60]: the same ulps,
    subnormals, overflow and special values as the two-factor scaling, bit for bit."""
    from codegen.target import host_cpu
    if not host_cpu().scalef:
        pytest.skip("the host has no AVX-512 vscalefps")
    x = np.concatenate([np.linspace(low, high, 200_000), SPECIAL * lanes]).astype(np.float32)
    run = _vector_function(fn, lanes, True)
    got, x = run(x), x[: len(x) // lanes * lanes]
    with np.errstate(over="ignore"):
        want = getattr(np, fn)(x.astype(np.float64))
    err = ulps(got, want)
    assert err.max() <= 1.0, f"{fn}({x[err.argmax()]}) = {got[err.argmax()]}, want {want[err.argmax()]}"
    plain = _vector_function(fn, lanes, False)
    np.testing.assert_array_equal(got, plain(x))  # bit for bit, NaN where NaN


# NaNs of both signs, quiet and signalling, with payload bits all over the mantissa: the
# functions read integers from float bits, and a NaN's payload must not turn into a number
_NAN_BITS = [0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FC00002, 0x7FC003FE,
             0x7FFFFFFF, 0xFFFFFFFF, 0x7FA5A5A5, 0xFFD0F0F0, 0x7F800200, 0x7FC7FC01]


@pytest.mark.parametrize("lanes", [1, 4, 8, 16])
@pytest.mark.parametrize("fn", ["exp", "exp2", "log2"])
def test_every_nan_stays_nan(fn, lanes):
    nans = np.array(_NAN_BITS * 4, np.uint32).view(np.float32)
    assert np.isnan(_vector_function(fn, lanes, False)(nans)).all()
    assert np.isnan(getattr(Tensor(nans), fn)().numpy()).all()


def test_avx512_forms_are_valid_ir():
    """The vscalefps and ldexp forms only run on AVX-512 hosts (test_vscalef_whole_range);
    on any host they must at least parse, verify and compile for an AVX-512 target."""
    import llvmlite.binding as llvm
    from codegen.renderer import llvm_math
    machine = llvm.Target.from_triple("x86_64-unknown-linux-gnu").create_target_machine(
        cpu="skylake-avx512", features="+avx512f,+avx512vl,+fma,+avx2", opt=2)
    for fn in ("exp", "exp2"):
        for lanes in (1, 4, 8, 16):
            name, definitions = getattr(llvm_math, fn)(lanes, True)
            t = "float" if lanes == 1 else f"<{lanes} x float>"
            src = "\n".join([f"define {t} @f({t} %x) {{", f"  %y = call {t} {name}({t} %x)",
                             f"  ret {t} %y", "}", *definitions])
            module = llvm.parse_assembly(src)
            module.verify()
            assert machine.emit_assembly(module)
