"""A padded conv's input copied into padded memory (D86), against numpy.

Where the CPU tile walks output rows a quarter to half a register wide, every window load
of a padded view is masked at the borders (a fifth of the kernel on AVX-512); a conv with
enough channels and work reads its input padded in memory instead. The rule is checked
on AVX-512 and AVX2 targets; the values are checked with the thresholds lowered, so that
small convs take the copy, at odd widths, stride 2, dilation, groups, uneven padding,
float64, non-contiguous inputs, the mixed-dtype path, and gradients.
"""
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import lazyten.autograd.conv_rules as conv_rules
from codegen.ops import BufferOps
from codegen.target import cpu, gpu
from lazyten import Tensor
from lazyten.autograd.conv import Conv
from lazyten.autograd.conv_rules import pads_into_memory
from lazyten.schedule import create_schedule
from tests.unit.test_conv_speed_rules import conv_grads, rnd


def _spec(padding=1, stride=1, dilation=1, groups=1):
    return Conv.Spec(groups, (stride, stride), (dilation, dilation), [(padding, padding)] * 2)


@pytest.mark.parametrize("bits,n,cin,cout,width,spec,want", [
    (512, 8, 256, 256, 8, _spec(), True),        # half a register of row: masked half vectors
    (512, 8, 256, 256, 5, _spec(), True),        # channel lanes, the input broadcast
    (512, 16, 256, 256, 4, _spec(), False),      # a quarter register: the copy did not pay
    (512, 8, 128, 128, 9, _spec(), False),       # a whole (partial) register: masks are free
    (512, 8, 128, 128, 16, _spec(), False),
    (512, 8, 64, 64, 8, _spec(), False),         # 64 channels: the copy took what it saved
    (512, 1, 128, 128, 8, _spec(), False),       # under 2^24 multiply-adds: the launch
    (512, 8, 256, 256, 8, _spec(padding=0), False),  # nothing to mask
    (512, 8, 128, 256, 14, _spec(stride=2), True),   # 7 outputs a row
    (512, 8, 256, 256, 8, _spec(groups=4), False),   # 64 channels a group
    (256, 8, 256, 256, 4, _spec(), True),        # AVX2: 4 is half its 8 lanes
    (256, 8, 256, 256, 8, _spec(), False),
])
def test_which_convs_pad_into_memory(bits, n, cin, cout, width, spec, want):
    assert pads_into_memory(cpu(bits), (n, cin, width, width), cout, (3, 3), spec) == want


def test_no_padded_copy_on_a_gpu():
    assert not pads_into_memory(gpu("GPU"), (8, 256, 8, 8), 256, (3, 3), _spec())


def _masked_input_loads(out: Tensor) -> list[bool]:
    """For the conv kernel (the last reduce of out's schedule): whether each load of a
    4-d or wider buffer reads through a view with a mask."""
    items = [i for i in create_schedule([out.lazydata]) if i.ast is not None]
    conv = [i for i in items if any(n.op.name == "SUM" for n in i.ast.walk())][-1]
    return [any(v.mask is not None for v in n.arg.st.views) for n in conv.ast.walk()
            if n.op is BufferOps.LOAD and len(n.arg.st.shape) >= 8]


def test_a_wide_conv_on_narrow_rows_reads_no_mask():
    """8 x 256 x 8 x 8 with padding 1 on AVX-512 (the rule's own shape): the conv kernel
    reads the padded copy without masks; a 16-wide one still reads the padded view."""
    x, w = Tensor.empty(8, 256, 8, 8), Tensor.empty(256, 256, 3, 3)
    narrow = _masked_input_loads(x.conv2d(w, padding=1))
    wide = _masked_input_loads(Tensor.empty(8, 256, 16, 16).conv2d(w, padding=1))
    if pads_into_memory(conv_rules.get_runtime("CPU").renderer.target, (8, 256, 8, 8), 256,
                        (3, 3), _spec()):
        assert narrow and not any(narrow), narrow
    assert any(wide), wide


def _ref(x, w, padding, stride, dilation, groups):
    """numpy conv in float64: every tap of the padded input, at the strided positions."""
    (pt, pb), (pl, pr) = padding
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    n, cin, hp, wp = xp.shape
    cout, cin_g, kh, kw = w.shape
    oh = (hp - dilation * (kh - 1) - 1) // stride + 1
    ow = (wp - dilation * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, cout, oh, ow))
    per = cout // groups
    for o in range(cout):
        g = o // per
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, g * cin_g:(g + 1) * cin_g,
                           i * dilation:i * dilation + stride * (oh - 1) + 1:stride,
                           j * dilation:j * dilation + stride * (ow - 1) + 1:stride]
                out[:, o] += np.einsum("nchw,c->nhw", patch, w[o, :, i, j].astype(np.float64))
    return out


@settings(max_examples=25, deadline=None)
@given(width=st.integers(3, 12), height=st.integers(1, 6), stride=st.sampled_from([1, 2]),
       dilation=st.sampled_from([1, 2]), groups=st.sampled_from([1, 2]),
       pads=st.tuples(*[st.integers(0, 2)] * 4), layout=st.sampled_from(["plain", "sliced",
                                                                        "transposed"]),
       dtype=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 99))
@example(width=8, height=4, stride=1, dilation=1, groups=1, pads=(1, 1, 1, 1), layout="plain",
         dtype=np.float32, seed=0)
@example(width=7, height=3, stride=2, dilation=2, groups=2, pads=(2, 0, 1, 2),
         layout="transposed", dtype=np.float64, seed=1)
def test_padded_copy_matches_numpy(monkeypatch, width, height, stride, dilation, groups, pads,
                                   layout, dtype, seed):
    """With the thresholds lowered every padded conv whose rows qualify takes the copy:
    the values, and the gradients of the input, weight and bias, are numpy's."""
    monkeypatch.setattr(conv_rules, "PAD_CHANNELS", 1)
    monkeypatch.setattr(conv_rules, "PAD_WORK", 1)
    rng = np.random.default_rng(seed)
    n, cin, cout = 2, 2 * groups, 3 * groups
    xn = rng.standard_normal((n, cin, height, width)).astype(dtype)
    wn = rng.standard_normal((cout, cin // groups, 3, 3)).astype(dtype)
    bn = rng.standard_normal(cout).astype(dtype)
    if layout == "sliced":  # every other column of a wider input
        wide = rng.standard_normal((n, cin, height, 2 * width)).astype(dtype)
        xn, x = wide[..., ::2], Tensor(wide, requires_grad=True)
        leaf, x = x, x[..., ::2]
    elif layout == "transposed":  # an input stored (n, cin, width, height)
        stored = np.ascontiguousarray(xn.transpose(0, 1, 3, 2))
        leaf = Tensor(stored, requires_grad=True)
        x = leaf.transpose(2, 3)
    else:
        leaf = x = Tensor(xn, requires_grad=True)
    padding = ((pads[0], pads[1]), (pads[2], pads[3]))
    if min(height + pads[0] + pads[1], width + pads[2] + pads[3]) < 2 * dilation + 1:
        return  # no output position
    w, b = Tensor(wn, requires_grad=True), Tensor(bn, requires_grad=True)
    out = x.conv2d(w, b, stride=stride, dilation=dilation, groups=groups,
                   padding=(pads[2], pads[3], pads[0], pads[1]))  # PyTorch's flat order
    want = _ref(xn, wn, padding, stride, dilation, groups) + bn[None, :, None, None]
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(out.numpy(), want, rtol=tol, atol=tol)
    grad = rng.standard_normal(want.shape)
    (out * Tensor(grad.astype(dtype))).sum().backward()
    np.testing.assert_allclose(b.grad.numpy(), grad.sum((0, 2, 3)), rtol=tol, atol=tol)
    # the conv is linear in x and in w: <grad, conv(x, w)> = <x.grad, x> = <w.grad, w>
    # (a sliced leaf's other columns have no gradient), each side in float64
    lin = float((grad * (want - bn[None, :, None, None])).sum())
    got = float((leaf.grad.numpy().astype(np.float64) *
                 (leaf.numpy().astype(np.float64))).sum())
    wgot = float((w.grad.numpy().astype(np.float64) * wn).sum())
    bound = (1e-3 if dtype == np.float32 else 1e-8) * (1 + abs(lin))
    assert abs(got - lin) <= bound and abs(wgot - lin) <= bound, (got, wgot, lin)


@pytest.mark.parametrize("padding", [1, 2])
def test_padded_copy_gradients_match_numpy(monkeypatch, padding):
    """The gradients of a conv that took the copy, against conv_grads (numpy, float64)."""
    monkeypatch.setattr(conv_rules, "PAD_CHANNELS", 1)
    monkeypatch.setattr(conv_rules, "PAD_WORK", 1)
    xn, wn = rnd((2, 3, 6, 8)), rnd((4, 3, 3, 3), seed=1)
    g = rnd((2, 4, 6 + 2 * padding - 2, 8 + 2 * padding - 2), seed=2)
    x, w = Tensor(xn, requires_grad=True), Tensor(wn, requires_grad=True)
    (x.conv2d(w, padding=padding) * Tensor(g)).sum().backward()
    gx, gw = conv_grads(xn, wn, g, padding)
    np.testing.assert_allclose(x.grad.numpy(), gx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(w.grad.numpy(), gw, rtol=1e-4, atol=1e-4)


def test_mixed_dtypes_take_the_copy_too(monkeypatch):
    """The Tensor-op path (an input and weight of different dtypes) pads by the same rule."""
    monkeypatch.setattr(conv_rules, "PAD_CHANNELS", 1)
    monkeypatch.setattr(conv_rules, "PAD_WORK", 1)
    xn, wn = rnd((2, 3, 5, 8)), rnd((4, 3, 3, 3), np.float64, 1)
    out = Tensor(xn).conv2d(Tensor(wn), padding=1)
    want = _ref(xn, wn, ((1, 1), (1, 1)), 1, 1, 1)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)
