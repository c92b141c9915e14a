"""Vector lanes across a conv's output channels (D66), against numpy.

Where the output's rows fill no vectors (7 or 8 wide with 16 lanes, or read at a stride of
2) and the output channels do, the conv copies its weight with blocks of 16 output channels
innermost (D127) and the CPU tile takes its lanes across them: one vector load of the weight per
tap, the input broadcast. Each test checks that the rule fired (or did not) and compares
with numpy at odd widths, batch 1, channel counts that are no multiple of 16, stride 2,
on sliced, transposed and grouped inputs, forward and gradients.
"""
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from codegen.kernel import Kernel, OptOps
from codegen.lanes import row_fill
from codegen.ops import LoadOps
from lazyten import Tensor
from lazyten.schedule import create_schedule
from runtimes import get_runtime
from tests.gradcheck import check_grad, spaced
from tests.unit.test_conv_speed_rules import conv_grads, lowered, rnd

# the copy is decided for the device's own vector width; the tile here is AVX-512's
HOST16 = get_runtime("CPU").renderer.target.lanes == 16


def conv_ref(x, w, padding=1, stride=1, groups=1):
    """numpy conv: stride 1 over the padded input, then every stride-th output."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    kh, kw = w.shape[2:]
    cols = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))
    n, cin, oh, ow = cols.shape[:4]
    cols = cols.reshape(n, groups, cin // groups, oh, ow, kh, kw)
    wg = w.astype(np.float64).reshape(groups, -1, cin // groups, kh, kw)
    out = np.einsum("ngcyxij,gocij->ngoyx", cols, wg).reshape(n, -1, oh, ow)
    return out[:, :, ::stride, ::stride]


def copies(t: Tensor) -> int:
    """Kernels in t's schedule that only copy (the weight with its channels innermost)."""
    return sum(1 for item in create_schedule([t.lazydata])
               if any(n.op is LoadOps.CONTIGUOUS for n in item.ast.walk()) or
               Kernel(item.ast).reduceop is None)


def channel_lanes(k: Kernel) -> bool:
    """Whether the kernel's vector lanes run across an axis the output is not contiguous in."""
    axis = len(k.full_shape) - 1
    return k.lanes == 16 and k.strides(k.out_key, axis) != 1


@settings(max_examples=14, deadline=None)
@given(width=st.sampled_from([5, 7, 8, 9, 12, 13, 14, 28, 32]), stride=st.sampled_from([1, 2]),
       n=st.sampled_from([1, 2]), cin=st.sampled_from([1, 3, 17]),
       cout=st.sampled_from([8, 16, 20, 48]), padding=st.sampled_from([0, 1]),
       dtype=st.sampled_from([np.float32, np.float64]))
@example(width=7, stride=1, n=1, cin=3, cout=48, padding=1, dtype=np.float32)
@example(width=28, stride=2, n=2, cin=3, cout=16, padding=1, dtype=np.float32)
@example(width=28, stride=1, n=2, cin=3, cout=16, padding=1, dtype=np.float32)
@example(width=32, stride=1, n=1, cin=3, cout=48, padding=1, dtype=np.float32)
@example(width=13, stride=1, n=1, cin=17, cout=48, padding=0, dtype=np.float64)
def test_narrow_rows_take_lanes_across_channels(width, stride, n, cin, cout, padding, dtype):
    """Rows that fill no vectors and channels that do: lanes across the channels, and the
    values match numpy; rows of whole vectors keep their lanes along the row. Rows under
    half a vector (or strided) take them where the channels fill 3/4 of one (D66), rows
    with any lane idle where whole vectors divide the channels and the conv's work pays
    for the weight's copy (D125: these weights fit any L2)."""
    xn, wn = rnd((n, cin, 6, width), dtype), rnd((cout, cin, 3, 3), dtype, 1)
    out = Tensor(xn).conv2d(Tensor(wn), padding=padding, stride=stride)
    row = (width + 2 * padding - 3) // stride + 1
    fill = row_fill(row, 16) if stride == 1 else 0.0
    work = n * cout * cin * 9 * row * ((6 + 2 * padding - 3) // stride + 1)
    if HOST16:
        k = lowered(out)
        wanted = fill < 1.0 and cout % 16 == 0 and cout >= 32 and work >= 1 << 24 or \
            fill < 0.5 and cout >= 16 and row_fill(cout, 16) >= 0.75
        assert channel_lanes(k) == wanted, k.applied
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(out.numpy(), conv_ref(xn, wn, padding, stride), rtol=tol,
                               atol=tol)


@pytest.mark.parametrize("layout", ["sliced", "transposed", "weight_view"])
def test_channel_lanes_on_views(layout):
    """A sliced input, a transposed one, and a weight that is itself a view (a slice of a
    wider, transposed parameter): the copy reads the view, the conv matches numpy."""
    xs, ws = rnd((2, 20, 9, 12)), rnd((40, 32, 3, 3), seed=1)
    x, xn = Tensor(xs)[:, 2:18, 1:8, 3:10], xs[:, 2:18, 1:8, 3:10]
    w, wn = Tensor(ws)[4:36, :16], ws[4:36, :16]
    if layout == "transposed":
        x, xn = x.transpose(2, 3), xn.transpose(0, 1, 3, 2)
    if layout == "weight_view":
        w, wn = Tensor(ws.transpose(1, 0, 3, 2).copy()).transpose(0, 1)[4:36, :16].transpose(2, 3), \
            ws[4:36, :16]
    out = x.conv2d(w, padding=1)
    if HOST16:
        assert channel_lanes(lowered(out)), lowered(out).applied
    np.testing.assert_allclose(out.numpy(), conv_ref(xn, wn), rtol=1e-4, atol=1e-4)


def test_grouped_conv_lanes_within_a_group():
    """Two groups of 32 output channels: lanes across each group's channels."""
    xn, wn = rnd((2, 8, 7, 7)), rnd((64, 4, 3, 3), seed=1)
    out = Tensor(xn).conv2d(Tensor(wn), padding=1, groups=2)
    if HOST16:
        assert channel_lanes(lowered(out)), lowered(out).applied
    np.testing.assert_allclose(out.numpy(), conv_ref(xn, wn, groups=2), rtol=1e-4, atol=1e-4)


def test_the_weight_is_copied_only_where_it_pays():
    """32-wide rows fill vectors: no copy of the weight; 28-, 8- and 7-wide ones with 32
    channels do (D125; 64 images: 2^24 multiply-adds pay for the copy), but not where the
    weight is larger than the L2 (read again from L3 for every image), the conv is small
    (one 28 x 28 image) or has one vector of channels; 7-wide ones still do (D66). The
    weight gradient copies the output gradient from 8 wide down, where its reduce rows
    fill less than 3/4 of a vector. The measures are AVX-512's (16 lanes: rows of 28 fill
    7/8 of 2 vectors); an AVX2 host decides for its own 8 lanes (session 28 found this
    test's 8-lane expectations wrong: a 28-wide row copies there too)."""
    if not HOST16:
        pytest.skip("the weight copy is decided for the host's lanes; these counts are 16 lanes'")
    w = Tensor(rnd((32, 16, 3, 3)))
    for width, forward in ((32, 0), (28, 1), (8, 1), (7, 1)):
        assert copies(Tensor(rnd((64, 16, width, width))).conv2d(w, padding=1)) == forward, width
    assert copies(Tensor(rnd((1, 16, 28, 28))).conv2d(w, padding=1)) == 0
    w16 = Tensor(rnd((16, 16, 3, 3)))  # one vector of channels: the row's tile shares more
    assert copies(Tensor(rnd((64, 16, 28, 28))).conv2d(w16, padding=1)) == 0
    cin = get_runtime("CPU").renderer.target.l2_bytes // (32 * 9 * 4) + 1  # just past the L2
    big = Tensor(rnd((32, cin, 3, 3)))  # a block of 16 channels: just past half the L2
    for width, forward in ((28, 0), (8, 0), (7, 1)):
        assert copies(Tensor(rnd((1, cin, width, width))).conv2d(big, padding=1)) == \
            forward, width
    cin -= 1  # 64 channels: past the L2, but a block of 16 fills half of it (D127)
    wide = Tensor(rnd((64, cin, 3, 3)))
    assert copies(Tensor(rnd((1, cin, 28, 28))).conv2d(wide, padding=1)) == 1
    grads = []
    for width in (28, 8):
        x, wg = Tensor(rnd((1, 16, width, width))), Tensor(rnd((32, 16, 3, 3)), requires_grad=True)
        (x.conv2d(wg, padding=1) * Tensor(rnd((1, 32, width, width)))).sum().backward()
        grads.append(copies(wg.grad))  # the output gradient's own kernel, and the copy
    assert grads[1] == grads[0] + 1, grads


def _weight_stream(k: Kernel) -> int:
    """Elements of the weight one tile walks over the reduce (its lanes and reduce loops)."""
    lane_axis = len(k.full_shape) - 1
    key = next(key for key in k.loads if k.strides(key, lane_axis) == 1)
    axes = [k.n_global + i for i in range(k.n_reduce)] + [lane_axis]
    return 1 + sum((k.full_shape[a] - 1) * abs(k.strides(key, a) or 0) for a in axes)


@pytest.mark.parametrize("cout,groups", [(64, 1), (96, 1), (64, 2), (32, 2)])
def test_weight_blocks_stream_over_the_reduce(cout, groups):
    """Channel lanes read the weight copied in blocks of a vector of output channels: a
    tile's weight is one contiguous stream over the reduce (in x kh x kw x 16 elements),
    not 16 channels of every tap's whole row of channels (D127). Values against numpy."""
    cin = 8
    xn, wn = rnd((2, cin * groups, 7, 7)), rnd((cout, cin, 3, 3), seed=1)
    out = Tensor(xn).conv2d(Tensor(wn), padding=1, groups=groups)
    if HOST16:
        k = lowered(out)
        assert channel_lanes(k), k.applied
        assert _weight_stream(k) == cin * 9 * 16, k.applied
    np.testing.assert_allclose(out.numpy(), conv_ref(xn, wn, groups=groups), rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("shape,stride", [((2, 5, 7, 7), 1), ((1, 3, 8, 8), 1),
                                          ((2, 3, 14, 13), 2)])
def test_channel_lane_gradients(shape, stride):
    """Gradients of input, weight and bias through channel lanes (the input gradient's conv
    takes them too, with the flipped, transposed weight copied): against numpy's adjoint at
    stride 1, against finite differences at stride 2."""
    n, cin, h, wd = shape
    xn, wn = rnd(shape), rnd((32, cin, 3, 3), seed=1)
    if stride == 1:
        gn = rnd((n, 32, h, wd), seed=2)
        x, w = Tensor(xn, requires_grad=True), Tensor(wn, requires_grad=True)
        (x.conv2d(w, padding=1) * Tensor(gn)).sum().backward()
        gx, gw = conv_grads(xn.astype(np.float64), wn.astype(np.float64), gn.astype(np.float64))
        np.testing.assert_allclose(x.grad.numpy(), gx, rtol=1e-3, atol=1e-3)
        np.testing.assert_allclose(w.grad.numpy(), gw, rtol=1e-3, atol=1e-3)
        return
    rng = np.random.default_rng(3)
    x, w, b = spaced(rng, (1, 2, 9, 8), (16, 2, 3, 3), (16,))
    check_grad(lambda a, c, d: a.conv2d(c, d, padding=1, stride=2), x, w, b)


@settings(max_examples=30, deadline=None)
@example(sizes=[1], strides=[1, 1], pads=[(2, -2), (0, 0)])  # a crop that takes padding
@given(sizes=st.lists(st.integers(1, 6), min_size=1, max_size=2),
       strides=st.lists(st.integers(1, 3), min_size=2, max_size=2),
       pads=st.lists(st.tuples(st.integers(-2, 3), st.integers(-2, 3)), min_size=2, max_size=2))
def test_dilated_padded_gradient(sizes, strides, pads):
    """The input gradient's dilated, padded output gradient, built as blocks of the stride
    (one view, interval masks): numpy's zeros-and-slices, negative pads (crops) too."""
    from lazyten.autograd.conv import _dilated_padded
    nd = len(sizes)
    stride, pad = tuple(strides[:nd]), [tuple(p) for p in pads[:nd]]
    gn = rnd((2, 3) + tuple(sizes))
    dil = np.zeros((2, 3) + tuple((o - 1) * s + 1 for o, s in zip(sizes, stride)), np.float32)
    dil[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in stride)] = gn
    widths = [(max(b, 0), max(a, 0)) for b, a in pad]
    ref = np.pad(dil, [(0, 0), (0, 0)] + widths)
    ref = ref[(slice(None), slice(None)) + tuple(
        slice(max(-b, 0), ref.shape[2 + i] - max(-a, 0)) for i, (b, a) in enumerate(pad))]
    if min(ref.shape) <= 0:
        return
    out = Tensor._wrap(_dilated_padded(Tensor(gn).lazydata, stride, list(pad)))
    np.testing.assert_array_equal(out.numpy(), ref)


@pytest.mark.parametrize("size,lanes,fill", [
    (16, 16, 1.0), (64, 16, 1.0), (28, 16, 28 / 32), (56, 16, 56 / 64), (14, 16, 14 / 16),
    (8, 16, 0.5), (7, 16, 7 / 16), (6, 16, 6 / 16), (72, 16, 0.5), (3, 8, 3 / 8), (5, 1, 1.0)])
def test_row_fill(size, lanes, fill):
    """The share of lanes busy: whole vectors, a padded row up to 4 vectors, a partial
    vector under one, else the widest power of two dividing the row."""
    assert row_fill(size, lanes) == pytest.approx(fill)


@settings(max_examples=15, deadline=None)
@given(n=st.sampled_from([1, 2, 3, 4, 8]), c=st.sampled_from([16, 48, 64, 128, 256]),
       size=st.integers(2, 9))
@example(n=4, c=256, size=7)  # every loop under 8 iterations: one thread ran it all
def test_an_outer_loop_the_threads_can_share_when_any_loop_has_the_iterations(n, c, size):
    """Where the tile leaves every output loop under 8 iterations (a batch of 4 unrolled
    whole, 4 blocks of 64 channels, 7 x 7 pixels), a loop with at least two still goes
    outermost, so two threads share the kernel; the values match numpy."""
    xn, wn = rnd((n, c, size, size)), rnd((c, c, 3, 3), seed=1)
    out = Tensor(xn).conv2d(Tensor(wn), padding=1)
    k = lowered(out)
    if max(k.full_shape[:k.n_global]) >= 2:
        assert k.full_shape[0] >= 2, (k.full_shape, k.applied)
    # (sums of up to 2304 float32 products of about 1: absolute error ~1e-4)
    np.testing.assert_allclose(out.numpy(), conv_ref(xn, wn), rtol=1e-4, atol=1e-3)


def test_the_outer_loop_can_be_split():
    """A batch of 4 unrolled whole leaves the outer loop one iteration: another loop goes
    outermost, so the threads have pieces to share; the values match numpy. (20 channels,
    no whole vectors: the row of 14 keeps the lanes, D125.)"""
    xn, wn = rnd((4, 20, 14, 14)), rnd((20, 20, 3, 3), seed=1)
    out = Tensor(xn).conv2d(Tensor(wn), padding=1)
    k = lowered(out)
    assert k.full_shape[0] >= 2, (k.full_shape, k.applied)
    assert any(o.op.name == "OUTER" for o in k.applied), k.applied
    np.testing.assert_allclose(out.numpy(), conv_ref(xn, wn), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("width,positions", [(7, 7), (8, 8), (12, 12), (13, 13), (14, 14),
                                             (28, 14), (56, 14), (30, 15)])
def test_channel_lanes_unroll_a_row_of_positions(width, positions):
    """With lanes across output channels, the tile's next unroll is the output's row: as
    many positions as divide it, up to 16, each sharing the weight's vector loads (D125);
    the values match numpy (odd widths, batch 4; 64 input channels: the weight's slice
    over the reduce, 64 x 9 x 16 floats, is past the L1, and the conv large enough to pay
    for the weight's copy and for a tile of 16 positions)."""
    xn, wn = rnd((4, 64, 16, width)), rnd((64, 64, 3, 3), seed=1)
    out = Tensor(xn).conv2d(Tensor(wn), padding=1)
    if HOST16:  # (the weight's copy, which the AVX-512 tile reads, is the host's decision)
        k = lowered(out)
        assert channel_lanes(k), k.applied
        unrolls = [o for o in k.applied if o.op is OptOps.UPCAST]
        assert unrolls[0].amount == 16 and unrolls[1].amount == positions, k.applied
    np.testing.assert_allclose(out.numpy(), conv_ref(xn, wn), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("layout", ["sliced_transposed", "weight_view", "grouped"])
def test_idle_lane_rows_on_views(layout):
    """D125's channel lanes (rows of 14, 2^24 multiply-adds and more) on a sliced and
    transposed input, on a weight that is a slice of a wider parameter, and in groups of
    32 channels: the values match numpy."""
    xs, ws = rnd((8, 70, 16, 14)), rnd((80, 64, 3, 3), seed=1)
    x, xn = Tensor(xs)[:, 3:67, 1:15], xs[:, 3:67, 1:15]
    w, wn = Tensor(ws)[8:72], ws[8:72]
    groups = 1
    if layout == "sliced_transposed":
        x, xn = x.transpose(2, 3), xn.transpose(0, 1, 3, 2)
    if layout == "weight_view":
        w, wn = Tensor(ws.transpose(1, 0, 2, 3).copy()).transpose(0, 1)[8:72], ws[8:72]
    if layout == "grouped":
        groups, w, wn = 2, w[:, :32], wn[:, :32]
    out = x.conv2d(w, padding=1, groups=groups)
    if HOST16:
        assert channel_lanes(lowered(out)), lowered(out).applied
    np.testing.assert_allclose(out.numpy(), conv_ref(xn, wn, groups=groups), rtol=1e-4,
                               atol=1e-3)
