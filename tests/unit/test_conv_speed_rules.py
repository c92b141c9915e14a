"""The CPU rules that made 3x3 convolutions fast (issue 15, D57), against numpy.

An output row no vector divides is padded to whole vectors (OptOps.PAD_OUT: masked loads,
masked stores); later unrolls are ranked by loads per accumulator update, within the
vector registers; a tile that shares loads pads its reduce to whole vectors from one
vector on; a padded sum of products needs no mask; a masked load whose live lanes are
contiguous is one vector load. Each test checks that the rule fired (so it can fail when
the rule is off) and compares with a numpy im2col convolution or einsum gradients at odd
widths, on sliced, transposed and broadcast inputs.
"""
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from codegen.kernel import Kernel, Opt, OptError, OptOps
from codegen.linearizer import Linearizer
from codegen.opt import optimize
from codegen.opt.simplify import simplify
from codegen.opt.tiling import tile_budget
from codegen.target import cpu
from codegen.uops import UOps
from lazyten import Tensor
from lazyten.schedule import create_schedule
from tests.gradcheck import check_grad, spaced
from tests.unit.test_opt import _last_item, _run

WIDTHS = st.sampled_from([17, 20, 28, 30, 37, 56])
TOL = {np.float32: 1e-4, np.float64: 1e-10}


def rnd(shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def im2col_conv(x, w, b=None, padding=1):
    """Stride-1 conv as one matrix product over the windows of the padded input."""
    kh, kw = w.shape[2:]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    cols = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))
    out = np.einsum("ncyxij,ocij->noyx", cols, w.astype(np.float64))
    return out if b is None else out + b.reshape(1, -1, 1, 1)


def conv_grads(x, w, g, padding=1):
    """(dx, dw) of sum(g * conv(x, w)) by the adjoint, tap by tap."""
    kh, kw = w.shape[2:]
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    oh, ow = g.shape[2:]
    gx, gw = np.zeros_like(xp), np.zeros_like(w)
    for ky in range(kh):
        for kx in range(kw):
            gw[:, :, ky, kx] = np.einsum("bohw,bchw->oc", g, xp[:, :, ky:ky + oh, kx:kx + ow])
            gx[:, :, ky:ky + oh, kx:kx + ow] += np.einsum("bohw,oc->bchw", g, w[:, :, ky, kx])
    h, wd = x.shape[2:]
    return gx[:, :, padding:padding + h, padding:padding + wd], gw


def lowered(t: Tensor, index: int = -1) -> Kernel:
    """A kernel of t's schedule, optimised for an AVX-512 CPU (16 float lanes); it must
    emit without error."""
    target = cpu(512)
    k = optimize(Kernel(create_schedule([t.lazydata])[index].ast), target)
    Linearizer(k, target).linearize()
    return k


def _padded(row: int) -> int:
    return row + -row % 16


def ops_of(k: Kernel) -> list[OptOps]:
    return [o.op for o in k.applied]


# ---- PAD_OUT: output rows padded to whole vectors ----
@settings(max_examples=12, deadline=None)
@given(width=WIDTHS, n=st.sampled_from([1, 2, 8]), cin=st.sampled_from([1, 3, 16]),
       cout=st.sampled_from([2, 5, 8]), padding=st.sampled_from([0, 1]),
       dtype=st.sampled_from([np.float32, np.float64]))
@example(width=28, n=2, cin=3, cout=8, padding=1, dtype=np.float32)
def test_conv_rows_pad_to_whole_vectors(width, n, cin, cout, padding, dtype):
    """A conv whose output rows no vector divides pads them: full 16-lane vectors, the
    last one masked on load and store, and the values match numpy."""
    x, w = rnd((n, cin, 6, width), dtype), rnd((cout, cin, 3, 3), dtype, 1)
    b = rnd((cout,), dtype, 2)
    out = Tensor(x).conv2d(Tensor(w), Tensor(b), padding=padding)
    k = lowered(out)
    row, budget = width + 2 * padding - 2, tile_budget(Kernel(k.ast), cpu(512))
    if row > 16 and row % 16 and _padded(row) <= budget:
        assert OptOps.PAD_OUT in ops_of(k) and k.lanes == 16, k.applied
    elif _padded(row) > budget:  # a small kernel: no room for a whole row of accumulators
        assert OptOps.PAD_OUT not in ops_of(k), k.applied
    np.testing.assert_allclose(out.numpy(), im2col_conv(x, w, b, padding), rtol=TOL[dtype],
                               atol=TOL[dtype])


@settings(max_examples=8, deadline=None)
@given(width=WIDTHS, layout=st.sampled_from(["sliced", "transposed", "broadcast"]))
def test_padded_rows_of_views(width, layout):
    """Non-contiguous inputs: a sliced input, a transposed one (its rows walk memory with a
    stride), a weight broadcast over output channels."""
    if layout == "sliced":
        xs = rnd((2, 4, 7, width + 5))
        x, xn = Tensor(xs)[:, 1:, :, 3:3 + width], xs[:, 1:, :, 3:3 + width]
    elif layout == "transposed":
        xs = rnd((2, 3, width, 7))
        x, xn = Tensor(xs).transpose(2, 3), xs.transpose(0, 1, 3, 2)
    else:
        xn = rnd((2, 3, 7, width))
        x = Tensor(xn)
    wn = rnd((1, 3, 3, 3), seed=1)
    w = Tensor(wn).expand(4, 3, 3, 3)
    out = x.conv2d(w, padding=1)
    np.testing.assert_allclose(out.numpy(), im2col_conv(xn, np.broadcast_to(wn, (4, 3, 3, 3))),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m,n,k", [(64, 33, 256), (128, 20, 64), (512, 60, 16), (96, 47, 300)])
def test_matmul_with_odd_columns_pads_its_rows(m, n, k):
    """Any tiled reduce, not only a conv: a matmul whose column count no vector divides
    pads it (when the kernel has the work for a whole row of accumulators); an
    elementwise op after the reduce (a bias, broadcast) reads the padded row."""
    a, b, bias = rnd((m, k)), rnd((k, n), seed=1), rnd((n,), seed=2)
    out = (Tensor(a) @ Tensor(b) + Tensor(bias)).relu()
    assert OptOps.PAD_OUT in ops_of(lowered(out)), lowered(out).applied
    ref = np.maximum(a.astype(np.float64) @ b + bias, 0)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4)


def test_integer_division_after_the_reduce_is_not_padded():
    """Padded lanes compute on zeros: an integer division there would trap."""
    a = np.random.default_rng(0).integers(-5, 6, (8, 20)).astype(np.int32)
    b = np.random.default_rng(1).integers(1, 6, (20, 20)).astype(np.int32)
    out = (Tensor(a) @ Tensor(b)) // (Tensor(a).sum(1, keepdim=True) + 100)
    k = lowered(out)
    assert OptOps.PAD_OUT not in ops_of(k), k.applied
    ref = (a.astype(np.int64) @ b) // (a.sum(1, keepdims=True) + 100)
    np.testing.assert_array_equal(out.numpy(), ref)


def test_padded_stores_are_masked():
    """A padded row is unrolled whole; the copy whose lanes cross the row's end stores
    through a mask (one gate per lane), the copy inside the row plainly; no load of the
    input (a window view, whose index wraps past the row's end) is gathered. (24 output
    channels, no whole vectors: the row keeps the lanes, D125.)"""
    x, w = rnd((4, 32, 20, 30)), rnd((24, 32, 3, 3), seed=1)
    k = lowered(Tensor(x).conv2d(Tensor(w), padding=1))
    assert OptOps.PAD_OUT in ops_of(k), k.applied
    uops = Linearizer(k, cpu(512)).linearize().uops
    stores = [u for u in uops if u.op is UOps.STORE]
    gated = [u for u in stores if len(u.src) == 4]
    assert gated and all(u.src[3].dtype.count == 16 for u in gated), k.applied
    assert 2 * len(gated) == len(stores), (k.applied, len(gated), len(stores))
    scalar_loads = [u for u in uops if u.op is UOps.LOAD and u.dtype.count == 1 and
                    u.src[0].arg[0] == "data1"]
    assert not scalar_loads, f"{len(scalar_loads)} input loads gathered: {k.applied}"


def test_pad_out_refuses_what_it_cannot_pad():
    """An axis a vector divides, a reduce axis, a second pad of the row or of the other
    axis and a pad after an unroll are refused; a padded kernel runs and matches the
    unpadded one."""
    a, b = Tensor(rnd((8, 32))), Tensor(rnd((32, 20), seed=1))
    item = _last_item(a @ b)
    k = Kernel(item.ast)
    for opt in simplify(k, cpu(512)):
        k.apply(opt)
    assert k.full_shape == (8, 20, 32)
    for bad in (Opt(OptOps.PAD_OUT, 0, 8), Opt(OptOps.PAD_OUT, 2, 16)):
        assert not k.can_apply(bad), bad
    padded = k.copy()
    padded.apply(Opt(OptOps.PAD_OUT, 1, 16))
    assert padded.full_shape == (8, 32, 32)
    assert not padded.can_apply(Opt(OptOps.PAD_OUT, 1, 64)), "the row is padded already"
    both = padded.copy()  # one other axis may be padded too (a matmul's rows, D68)
    both.apply(Opt(OptOps.PAD_OUT, 0, 16))
    assert both.full_shape == (16, 32, 32) and not both.can_apply(Opt(OptOps.PAD_OUT, 0, 32))
    up = k.copy()
    up.apply(Opt(OptOps.UPCAST, 0, 4))
    with pytest.raises(OptError):
        up.apply(Opt(OptOps.PAD_OUT, 1, 16))
    for opts in ([Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.LANES, 3, 16)],
                 [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.LANES, 3, 16), Opt(OptOps.UPCAST, 0, 4)],
                 [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.LANES, 3, 16), Opt(OptOps.UPCAST, 1, 2)]):
        t = padded.copy()
        for opt in opts:
            t.apply(opt)
        got = _run(t, item, cpu(512)).reshape(8, 20)
        np.testing.assert_allclose(got, a.numpy() @ b.numpy(), rtol=1e-5, atol=1e-5)


# ---- the tile: loads per update, registers ----
def test_conv_tile_shares_input_loads_within_the_registers():
    """The conv tile unrolls output channels (the input's vector loads are shared by
    every channel; the old ranking took more positions first, which share only the
    weight's broadcast), and its accumulators fit half the vector registers. (36 output
    channels, no whole vectors of 8 or 16 lanes: the row keeps the lanes, D125, whatever
    the host's width, which decides the conv's layout before this 512-bit lowering.)"""
    x, w = Tensor(rnd((2, 64, 28, 28))), Tensor(rnd((36, 64, 3, 3), seed=1))
    k = lowered(x.conv2d(w, padding=1))
    ups = [o for o in k.applied if o.op is OptOps.UPCAST]
    assert ups[0].axis == 3 and any(o.axis == 1 for o in ups[1:]), k.applied
    registers = np.prod(k.upcasts[:-1]) * -(-k.lanes // 16)
    assert registers <= cpu(512).tile // 16, k.applied


def test_half_width_rows_keep_to_the_registers():
    """8-wide rows take 8 lanes (half a register) where the output channels are too few for
    lanes of their own (D66); the tile still counts registers, not floats: at most 16
    accumulators."""
    x, w = Tensor(rnd((8, 32, 8, 8))), Tensor(rnd((8, 32, 3, 3), seed=1))
    out = x.conv2d(w, padding=1)
    k = lowered(out)
    assert k.lanes == 8 and np.prod(k.upcasts[:-1]) <= 16, k.applied
    np.testing.assert_allclose(out.numpy(), im2col_conv(x.numpy(), w.numpy()), rtol=1e-4,
                               atol=1e-4)


# ---- the gradients ----
@settings(max_examples=8, deadline=None)
@given(width=st.sampled_from([14, 20, 28, 30]), cin=st.sampled_from([1, 3]),
       cout=st.sampled_from([2, 4]), dtype=st.sampled_from([np.float32, np.float64]))
@example(width=14, cin=3, cout=4, dtype=np.float32)
def test_padded_weight_and_input_gradients(width, cin, cout, dtype):
    """The weight gradient's reduce rows pad to whole vectors in a tile that shares loads
    where 3/4 of the lanes are busy (14, 28, 30; not 20); the input gradient's output
    rows pad too; both match numpy."""
    xn, wn = rnd((2, cin, 6, width), dtype), rnd((cout, cin, 3, 3), dtype, 1)
    gn = rnd((2, cout, 6, width), dtype, 2)
    x, w = Tensor(xn, requires_grad=True), Tensor(wn, requires_grad=True)
    (x.conv2d(w, padding=1) * Tensor(gn)).sum().backward()
    dw = lowered(w.grad)
    if width % 16 and 4 * width >= 3 * _padded(width):
        assert dw.padded and dw.reduce_lanes and dw.lanes == 16, dw.applied
    gx, gw = conv_grads(xn.astype(np.float64), wn.astype(np.float64), gn.astype(np.float64))
    tol = TOL[dtype] * (10 if dtype == np.float32 else 1)
    np.testing.assert_allclose(x.grad.numpy(), gx, rtol=tol, atol=tol)
    np.testing.assert_allclose(w.grad.numpy(), gw, rtol=tol, atol=tol)


@pytest.mark.parametrize("kernel,padding,stride,dilation", [
    (1, 2, 1, 1), (3, 3, 1, 1), (3, 2, 2, 1), (3, (2, 0), 1, 2), (2, 1, 2, 1)])
def test_input_gradient_with_padding_beyond_the_kernel(kernel, padding, stride, dilation):
    """The input gradient pads the output gradient by reach - padding, cropping where the
    padding reaches further than the kernel: finite differences agree."""
    rng = np.random.default_rng(3)
    x, w, b = spaced(rng, (2, 2, 5, 6), (3, 2, kernel, kernel), (3,))
    check_grad(lambda a, c, d: a.conv2d(c, d, padding=padding, stride=stride,
                                        dilation=dilation), x, w, b)


def test_a_padded_sum_of_products_needs_no_mask():
    """After a reduce PAD, every leaf reads 0 in the padding: a sum of products adds no
    select there, a sum of exp (1 at a zero) keeps it; both match numpy."""
    target = replace(cpu(512))
    xn, yn = rnd((6, 300)), rnd((300,), seed=1)
    for expr, ref, masked in [(lambda x, y: (x * y).sum(1), (xn * yn).sum(1), False),
                              (lambda x, y: (x * y).exp().sum(1), np.exp(xn * yn).sum(1), True)]:
        out = expr(Tensor(xn), Tensor(yn))
        k = optimize(Kernel(create_schedule([out.lazydata])[-1].ast), target)
        assert k.padded, k.applied
        uops = Linearizer(k, target).linearize().uops
        wheres = [u for u in uops if u.op is UOps.ALU and u.arg.name == "WHERE"]
        assert bool(wheres) == masked, (masked, len(wheres))
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("width", [7, 70])
def test_a_reduce_that_divides_integers_is_not_padded(width):
    """The padding computes on zeros (constants too): an integer division there is
    undefined. Found by the fuzzer: uint8 cummin of x // 3, whose 7-wide reduce (a tile
    sharing loads) was padded and came out all zeros."""
    xn = np.random.default_rng(3291).integers(0, 100, (3, width), endpoint=True).astype(np.uint8)
    out = (Tensor(xn) // 3).cummin(1).values
    for t in (out, (Tensor(yn := np.random.default_rng(1).integers(1, 9, (5, width)).astype(
            np.int32)) * 7 // Tensor(yn)).sum(1)):
        k = lowered(t)
        divides = any(n.op.name in ("IDIV", "MOD") for n in k.ast.walk())
        assert not (divides and (k.padded or OptOps.PAD_OUT in ops_of(k))), k.applied
    np.testing.assert_array_equal(out.numpy(), np.minimum.accumulate(xn // 3, axis=1))
    total = (Tensor(yn) * 7 // Tensor(yn)).sum(1)
    np.testing.assert_array_equal(total.numpy(), (yn * 7 // yn).sum(1))


@pytest.mark.parametrize("bits,width,lanes,pad", [
    (256, 28, 8, True), (256, 20, 8, True), (256, 12, 8, True),
    (256, 24, 8, False), (256, 14, 8, True), (512, 24, 8, False), (512, 28, 16, True)])
def test_weight_gradient_rows_take_full_vectors_where_half_is_narrow(bits, width, lanes, pad):
    """A weight gradient's reduce rows that half a vector divides keep half a vector
    where that is 8 lanes (AVX-512: LeNet's 24-wide rows were slower padded to 32), but
    pad to whole vectors where half a vector is 4 lanes (AVX2's xmm, half its multiply-add
    width) and 3/4 of the padded lanes are busy: a 16 x 64 x 28 conv's weight gradient
    26.0 -> 14.8 ms on AVX2. Numerics: test_padded_weight_and_input_gradients (on this
    machine's own vector width)."""
    x = Tensor(rnd((2, 3, 6, width)), requires_grad=True)
    w = Tensor(rnd((8, 3, 3, 3), seed=1), requires_grad=True)
    (x.conv2d(w, padding=1) * Tensor(rnd((2, 8, 6, width), seed=2))).sum().backward()
    target = cpu(bits)
    k = optimize(Kernel(create_schedule([w.grad.lazydata])[-1].ast), target)
    Linearizer(k, target).linearize()
    got = [(o.op, o.amount) for o in k.applied if o.op in (OptOps.PAD, OptOps.REDUCE_LANES)]
    assert got == ([(OptOps.PAD, lanes)] if pad else []) + [(OptOps.REDUCE_LANES, lanes)], \
        f"{bits} bits, {width} wide: {k.applied}"
