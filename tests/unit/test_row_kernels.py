"""Row kernels (schedule rule 5, codegen/rows.py, D55): a reduce over the trailing axes
that only one elementwise kernel reads, one value per row, is computed inside that
kernel, row by row. softmax, log_softmax and layernorm become one kernel each; the
results match numpy at odd widths, with non-contiguous and broadcast inputs, NaN and
infinities, and whatever does not qualify keeps its own kernel."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from codegen.kernel import is_row_kernel
from codegen.ops import ReduceOps
from codegen.target import work_item_cpu
from lazyten import Context, Tensor, schedule_cache
from lazyten.schedule import create_schedule
from tests.gradcheck import check_grad
from runtimes import get_runtime
from tests.helpers import fast


def _kernels(t: Tensor) -> list:
    return [i.ast for i in create_schedule([t.lazydata]) if i.ast is not None]


def _reduces(ast) -> int:
    return sum(isinstance(n.op, ReduceOps) for n in ast.walk())


def _softmax(a, axis=-1):
    e = np.exp(a - a.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def _log_softmax(a, axis=-1):
    s = a - a.max(axis, keepdims=True)
    return s - np.log(np.exp(s).sum(axis, keepdims=True))


def _layernorm(a, eps=1e-5):
    y = a - a.mean(-1, keepdims=True)
    return y / np.sqrt((y * y).mean(-1, keepdims=True) + eps)


OPS = {"softmax": (lambda t: t.softmax(-1), _softmax),
       "log_softmax": (lambda t: t.log_softmax(-1), _log_softmax),
       "layernorm": (lambda t: t.layernorm(), _layernorm),
       "centre": (lambda t: t - t.mean(-1, keepdim=True), lambda a: a - a.mean(-1, keepdims=True))}


@pytest.mark.parametrize("name", list(OPS))
def test_a_row_op_is_one_kernel(name):
    """Before rule 5, softmax was three kernels (max, sum, the output) and read x three
    times; now one kernel holds both reduces."""
    ours, _ = OPS[name]
    asts = _kernels(ours(Tensor(np.ones((6, 1000), np.float32))))
    assert len(asts) == 1 and is_row_kernel(asts[0])
    assert _reduces(asts[0]) == {"softmax": 2, "log_softmax": 2, "layernorm": 2, "centre": 1}[name]


@pytest.mark.parametrize("name", list(OPS))
@pytest.mark.parametrize("width", [1, 2, 4, 5, 7, 9, 15, 16, 17, 33, 63, 65, 100, 1000, 1003])
def test_row_ops_match_numpy_at_odd_widths(name, width):
    ours, ref = OPS[name]
    a = np.random.default_rng(width).standard_normal((5, width)).astype(np.float32) * 3
    np.testing.assert_allclose(ours(Tensor(a)).numpy(), ref(a.astype(np.float64)),
                               rtol=2e-5, atol=2e-5)


def _view(draw, a: np.ndarray):
    """A (Tensor, ndarray) pair viewing `a` as it is, transposed, flipped or sliced."""
    kind = draw(st.sampled_from(["plain", "transpose", "flip", "slice", "broadcast"]))
    t = Tensor(a)
    if kind == "transpose":
        return t.T.contiguous().T if a.ndim == 2 else t, a
    if kind == "flip":
        return t.flip(a.ndim - 1), np.flip(a, a.ndim - 1)
    if kind == "slice" and a.shape[-1] > 2:
        return t[..., 1:-1], a[..., 1:-1]
    if kind == "broadcast":  # one row read by every row of a batch
        return t[:1].expand(*a.shape), np.broadcast_to(a[:1], a.shape)
    return t, a


@fast(30)
@given(data=st.data())
def test_row_kernels_match_numpy(data):
    """Random shapes (leading axes, widths around vector sizes), views of the input, a
    broadcast affine after the op, and float16/float32/float64."""
    lead = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=2))
    width = data.draw(st.sampled_from([3, 16, 31, 33, 64, 97, 130]))
    dtype = data.draw(st.sampled_from([np.float32, np.float64, np.float16]))
    name = data.draw(st.sampled_from(list(OPS)))
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    a = (rng.standard_normal((*lead, width)) * 4).astype(dtype)
    t, a = _view(data.draw, a)
    ours, ref = OPS[name]
    w = rng.standard_normal(a.shape[-1]).astype(dtype)
    out = (ours(t) * Tensor(w) + 1).numpy()
    expected = ref(np.asarray(a, np.float64)) * w.astype(np.float64) + 1
    tol = 2e-2 if dtype == np.float16 else 1e-4 if dtype == np.float32 else 1e-10
    assert out.dtype == dtype
    np.testing.assert_allclose(out, expected, rtol=tol, atol=tol)


@fast(10)
@given(data=st.data())
def test_wide_row_kernels_match_numpy(data):
    """Rows long enough to stream several at once (256 and more) and to be padded, row
    counts that 8, 4 or 2 divide or none does, views, and the three ops."""
    rows = data.draw(st.sampled_from([2, 6, 8, 12, 16]))
    width = data.draw(st.sampled_from([256, 257, 300, 1000, 1024, 1033]))
    name = data.draw(st.sampled_from(["softmax", "log_softmax", "layernorm"]))
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    t, a = _view(data.draw, (rng.standard_normal((rows, width)) * 3).astype(np.float32))
    ours, ref = OPS[name]
    np.testing.assert_allclose(ours(t).numpy(), ref(np.asarray(a, np.float64)), rtol=2e-5,
                               atol=2e-6)


def test_nan_and_infinity_in_a_row():
    """A NaN makes its row NaN (max propagates it, as numpy's); a row of -inf is NaN in
    softmax (0 / 0, as PyTorch); +inf is NaN too (inf - inf)."""
    a = np.random.default_rng(0).standard_normal((4, 37)).astype(np.float32)
    a[0, 5], a[1, :], a[2, 36] = np.nan, -np.inf, np.inf
    with np.errstate(invalid="ignore"):
        expected = _softmax(a.astype(np.float64))
    np.testing.assert_allclose(Tensor(a).softmax(-1).numpy(), expected, rtol=1e-5, atol=1e-6)


def test_what_does_not_qualify_keeps_its_kernel():
    """A reduce that is an output itself, is read by two kernels, or reduces leading axes
    is materialised as before; the results still match."""
    a = np.random.default_rng(1).standard_normal((8, 40)).astype(np.float32)
    x = Tensor(a)
    s = x.sum(-1, keepdim=True)
    y = x - s
    items = [i for i in create_schedule([y.lazydata, s.lazydata]) if i.ast is not None]
    assert len(items) == 2 and not any(is_row_kernel(i.ast) for i in items)
    Tensor.realize(y, s)
    np.testing.assert_allclose(y.numpy(), a - a.sum(-1, keepdims=True), rtol=1e-5, atol=1e-5)
    # reduced over the leading axis: a column walk, left to the tiled kernels
    col = x - x.mean(0, keepdim=True)
    assert not any(is_row_kernel(ast) for ast in _kernels(col))
    np.testing.assert_allclose(col.numpy(), a - a.mean(0, keepdims=True), rtol=1e-5, atol=1e-5)
    # two kernels read the mean (one through a flip): it stays a buffer both read
    m = x.mean(-1, keepdim=True)
    two = (x - m).relu().sum(-1) + (x.flip(0) * m).sum(-1)
    expected = np.maximum(a - a.mean(-1, keepdims=True), 0).sum(-1) + \
        (np.flip(a, 0) * a.mean(-1, keepdims=True)).sum(-1)
    np.testing.assert_allclose(two.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_a_row_value_also_read_through_another_view_stays_a_buffer():
    """`x * s + s.flip(0)` reads s one value per row and, flipped, another row's value: a
    row kernel computes only its own row's, so s keeps its kernel. (The first version of
    rule 5 checked only the first read it met, and this came out wrong.)"""
    a = np.random.default_rng(5).standard_normal((8, 40)).astype(np.float32)
    sa = a.sum(-1, keepdims=True)
    for flipped_first in (False, True):  # whichever read the scheduler meets first
        x = Tensor(a)
        s = x.sum(-1, keepdim=True)
        y = s.flip(0) + x * s if flipped_first else x * s + s.flip(0)
        assert len(_kernels(y)) == 2
        np.testing.assert_allclose(y.numpy(), a * sa + np.flip(sa, 0), rtol=1e-5, atol=1e-5)


def test_a_row_value_another_kernel_reads_stays_a_buffer_and_the_rest_join():
    """The mean is read by a column sum too: it keeps its kernel and the row kernel reads
    it from memory, while the row's own sum (read only there) joins the row kernel (before,
    the whole group was refused: three kernels for the row output). Layernorm's backward
    is this shape: its weight gradient reads the row's mean and rstd."""
    a = np.random.default_rng(2).standard_normal((8, 33)).astype(np.float32)
    x = Tensor(a)
    m = x.mean(-1, keepdim=True)
    row = (x - m) * (x - m).square().sum(-1, keepdim=True)
    col = ((x - m) * 2).sum(0)
    items = [i.ast for i in create_schedule([row.lazydata, col.lazydata]) if i.ast is not None]
    rows = [ast for ast in items if is_row_kernel(ast)]
    assert len(items) == 3 and len(rows) == 1 and _reduces(rows[0]) == 1, \
        f"expected mean, column sum and a row kernel with one reduce, got {len(items)} kernels"
    Tensor.realize(row, col)
    centred = a.astype(np.float64) - a.mean(-1, keepdims=True)
    np.testing.assert_allclose(row.numpy(), centred * (centred ** 2).sum(-1, keepdims=True),
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(col.numpy(), (centred * 2).sum(0), rtol=1e-4, atol=1e-4)


def test_rows_longer_than_the_limit_are_not_fused():
    from lazyten import schedule_cache, schedule_rows
    a = np.random.default_rng(2).standard_normal((2, 300)).astype(np.float32)
    old = schedule_rows.ROW_MAX
    try:  # the schedule cache would hand back a schedule made under the usual limit
        schedule_rows.ROW_MAX = 256
        schedule_cache._SCHEDULES.clear()
        asts = _kernels(Tensor(a).softmax(-1))
    finally:
        schedule_rows.ROW_MAX = old
        schedule_cache._SCHEDULES.clear()
    assert len(asts) > 1 and not any(is_row_kernel(ast) for ast in asts)


def test_work_item_cpu_targets_keep_separate_kernels(monkeypatch):
    """Rule 5 holds on a GPU with local memory (D94: one row kernel, a work-group per
    row); a CPU driven through work-items (pocl: no group reduces, D56) keeps a kernel
    per reduce."""
    x = Tensor(np.ones((4, 64), np.float32), device="NULL_CUDA")
    asts = _kernels(x.softmax(-1))
    assert len(asts) == 1 and is_row_kernel(asts[0])
    runtime = get_runtime("NULL_CUDA")
    monkeypatch.setattr(runtime.renderer, "target", work_item_cpu("NULL_CUDA", 2))
    monkeypatch.setattr(schedule_cache, "_SCHEDULES", {})
    asts = _kernels(Tensor(np.ones((4, 64), np.float32), device="NULL_CUDA").softmax(-1))
    assert len(asts) == 3 and not any(is_row_kernel(ast) for ast in asts)


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "layernorm"])
def test_row_op_gradients(name):
    """The backward passes reduce over rows too (sum(g * y) read per row): against float64
    finite differences, at an odd width."""
    ours, _ = OPS[name]
    rng = np.random.default_rng(3)
    check_grad(ours, rng.standard_normal((3, 19)))


def test_noopt_row_kernel_matches():
    """With NOOPT=1 (no lanes, no padding) the row kernel's scalar loops agree."""
    a = np.random.default_rng(4).standard_normal((3, 50)).astype(np.float32)
    with Context(NOOPT=1):
        out = Tensor(a).softmax(-1).numpy()
    np.testing.assert_allclose(out, _softmax(a.astype(np.float64)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("rows,width", [(8, 1000), (16, 1003), (24, 260), (8, 4096)])
@pytest.mark.parametrize("sliced", [False, True])
def test_several_rows_at_once_with_a_padded_row(rows, width, sliced):
    """8 rows at a time, a padded last vector, exp read back from the output row: the
    read-back of the last, partial vector once ran before the sum's loop had stored it
    (the load of a row's constant address was hoisted out of the loops: garbage and NaN
    in the last lanes of every row)."""
    base = np.random.default_rng(width).standard_normal((rows + 4, width + 7)).astype(np.float32)
    t, a = (Tensor(base)[2:rows + 2, 3:width + 3], base[2:rows + 2, 3:width + 3]) if sliced \
        else (Tensor(base[:rows, :width].copy()), base[:rows, :width])
    a = a.astype(np.float64)
    for name in ("softmax", "log_softmax", "layernorm"):
        ours, ref = OPS[name]
        np.testing.assert_allclose(ours(t).numpy(), ref(a), rtol=2e-5, atol=2e-6, err_msg=name)


def test_softmax_computes_exp_once_per_element():
    """The sum's loop stores exp(x - max) into the output row and the store loop scales it
    in place: one exp per element, not two (the row is still in the cache)."""
    from codegen.linearizer import linearize
    from codegen.ops import UnaryOps
    from codegen.target import cpu
    from codegen.uops import UOps
    from codegen.kernel import OptOps
    for rows in (5, 8):  # one row at a time; eight at once (one copy of the loops per row)
        (ast,) = _kernels(Tensor(np.ones((rows, 64), np.float32)).softmax(-1))
        kernel = linearize(ast, cpu(512))  # (AVX2's registers hold one row: test below)
        copies = np.prod([o.amount for o in kernel.opts if o.op is OptOps.UPCAST], dtype=int)
        exps = [u for u in kernel.uops if u.op is UOps.ALU and u.arg is UnaryOps.EXP]
        assert len(exps) == copies == (1 if rows == 5 else 8)


@pytest.mark.parametrize("bits", [128, 256, 512])
@pytest.mark.parametrize("width", [17, 100, 128, 129, 300, 1000])
def test_rows_at_once_by_what_the_row_computes(bits, width):
    """Several rows at once hide exp's latency (softmax, log_softmax) where the registers
    hold them (AVX-512's 32: eight rows; AVX2's 16 hold one row: eight spilled, measured
    slower), or where the row is short (up to 16 vectors: four rows, whatever spills); a
    row of plain sums (layernorm) takes four, whose chains of adds no longer wait on each
    other (D83)."""
    from codegen.kernel import OptOps
    from codegen.linearizer import linearize
    from codegen.target import cpu
    target = cpu(bits)
    short = width <= 16 * target.lanes
    for name, exp_or_log in (("softmax", True), ("log_softmax", True), ("layernorm", False)):
        (ast,) = _kernels(OPS[name][0](Tensor(np.ones((16, width), np.float32))))
        rows = [o.amount for o in linearize(ast, target).opts if o.op is OptOps.UPCAST]
        walked = width % (target.lanes // 2) == 0 or width >= 4 * target.lanes  # in vectors
        want = ([4] if walked else []) if not exp_or_log else \
            [8] if target.vector_registers >= 32 else [4] if short else []
        assert rows == want, f"{name} x {width} on {bits} bits: rows {rows}"


@pytest.mark.parametrize("rows,threads,want", [(16, 1, [4]), (6, 1, [2]), (7, 1, []), (4, 1, [2]),
                                               (8, 2, [4]), (28, 8, [2]), (16, 8, [2]), (12, 8, [])])
def test_plain_rows_at_once_leave_the_threads_rows(rows, threads, want):
    """A layernorm's row kernel takes four rows at once (else two) only where the rows
    left give each thread some: its outer loop is what the threads split (D83)."""
    from codegen.kernel import OptOps
    from codegen.linearizer import linearize
    from codegen.target import cpu
    (ast,) = _kernels(OPS["layernorm"][0](Tensor(np.ones((rows, 1000), np.float32))))
    opts = linearize(ast, cpu(256, threads)).opts
    assert [o.amount for o in opts if o.op is OptOps.UPCAST] == want


@pytest.mark.parametrize("rows,width,threads,want", [
    (4096, 1000, 2, []), (8192, 512, 2, []), (4096, 1000, 8, [4]), (1024, 768, 2, [4]),
    (1024, 768, 1, []), (2048, 2000, 2, [4]), (64, 1000, 2, [4])])
def test_plain_rows_at_once_only_from_the_cache_or_long(rows, width, threads, want):
    """Four rows of plain sums at once read four interleaved streams: from memory (an input
    over two L2 caches a thread) short rows ran at half the speed of one row after another
    on AVX-512, so they go one at a time; rows of 8000 bytes or more, or an input the
    threads' L2 caches hold, keep four (D85). The target's L2 is 1 MB here."""
    from dataclasses import replace
    from codegen.kernel import OptOps
    from codegen.linearizer import linearize
    from codegen.target import cpu
    x = Tensor.empty(rows, width)
    (ast,) = _kernels(OPS["layernorm"][0](x))
    target = replace(cpu(512, threads), l2_bytes=1 << 20)
    opts = linearize(ast, target).opts
    assert [o.amount for o in opts if o.op is OptOps.UPCAST] == want, (rows, width, opts)


@pytest.mark.parametrize("op,rows,width,l3,want", [
    ("softmax", 4096, 1000, 32 << 20, []), ("log_softmax", 8192, 512, 32 << 20, []),
    ("softmax", 2048, 1000, 32 << 20, [8]), ("softmax", 1024, 3000, 32 << 20, [8]),
    ("softmax", 4096, 1000, 0, [8]), ("log_softmax", 64, 1000, 32 << 20, [8])])
def test_exp_rows_at_once_only_while_the_shared_cache_holds_them(op, rows, width, l3, want):
    """A softmax's rows at once read as interleaved short streams too: where its input and
    output exceed half the shared cache (from memory) it walks one row at a time, 1.06-1.59x
    faster on AVX-512 (D85); rows of 8000 bytes or more, smaller inputs, and a target whose
    shared cache is unknown keep eight."""
    from dataclasses import replace
    from codegen.kernel import OptOps
    from codegen.linearizer import linearize
    from codegen.target import cpu
    (ast,) = _kernels(OPS[op][0](Tensor.empty(rows, width)))
    opts = linearize(ast, replace(cpu(512, 2), l2_bytes=1 << 20, l3_bytes=l3)).opts
    assert [o.amount for o in opts if o.op is OptOps.UPCAST] == want, (op, rows, width, opts)


@pytest.mark.parametrize("op,rows,width,threads,want", [
    ("log_softmax", 8, 50257, 2, [4]), ("softmax", 8, 10000, 2, [4]), ("softmax", 2, 50257, 2, []),
    ("softmax", 4, 50257, 4, []), ("softmax", 8, 50257, 1, [8]), ("softmax", 8, 1000, 2, [8]),
    ("softmax", 64, 1000, 2, [8]), ("log_softmax", 16, 4097, 8, [2])])
def test_exp_rows_at_once_leave_every_thread_rows(op, rows, width, threads, want):
    """Rows taken at once are one piece of the outer loop the threads split: eight rows of
    50257 taken at once ran on one thread (log_softmax 8 x 50257 163 -> 86 us on the 2-core
    machine with four). A kernel of 32K elements or more leaves each thread rows; a small
    one (8 x 1000) keeps eight, as it runs on one thread anyway."""
    from dataclasses import replace
    from codegen.kernel import OptOps
    from codegen.linearizer import linearize
    from codegen.target import cpu
    (ast,) = _kernels(OPS[op][0](Tensor.empty(rows, width)))
    opts = linearize(ast, replace(cpu(512, threads), l2_bytes=1 << 20, l3_bytes=32 << 20)).opts
    assert [o.amount for o in opts if o.op is OptOps.UPCAST] == want, (op, rows, width, opts)
    x = np.random.default_rng(rows).standard_normal((rows, width)).astype(np.float32)
    got = OPS[op][0](Tensor(x)).numpy()
    shifted = x - x.max(-1, keepdims=True)
    log = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    np.testing.assert_allclose(got, np.exp(log) if op == "softmax" else log, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("shape,axis", [((3, 0), -1), ((0, 3), -1), ((2, 0, 4), 1)])
def test_softmax_over_an_empty_axis_is_empty(shape, axis):
    """As PyTorch: softmax and log_softmax over a zero-size axis give an empty tensor of
    the input's shape (this raised 'max of an empty tensor'); the gradient is empty too."""
    for name in ("softmax", "log_softmax"):
        t = Tensor(np.zeros(shape, np.float32), requires_grad=True)
        out = getattr(t, name)(axis)
        assert out.shape == shape and out.numpy().shape == shape
        out.sum().backward()
        assert t.grad.numpy().shape == shape


@pytest.mark.parametrize("width,lanes", [(100, 16), (511, 16), (512, 32), (1000, 32),
                                         (1023, 32), (1024, 64), (4097, 64)])
def test_a_row_walked_alone_keeps_several_accumulators(width, lanes):
    """A row kernel that takes one row at a time (layernorm over rows that neither 4 nor 2
    divides) walks the row several vectors at once from 32 vectors on, so each reduce has
    2 or 4 independent accumulators (D60); shorter rows keep one vector. Rows with exp
    take several rows instead."""
    from codegen.kernel import OptOps
    from codegen.linearizer import linearize
    from codegen.target import cpu
    (ast,) = _kernels(OPS["layernorm"][0](Tensor(np.ones((3, width), np.float32))))
    opts = linearize(ast, cpu(512)).opts
    assert [o.amount for o in opts if o.op is OptOps.REDUCE_LANES] == [lanes]
    (ast,) = _kernels(OPS["softmax"][0](Tensor(np.ones((8, width), np.float32))))
    assert [o.amount for o in linearize(ast, cpu(512)).opts if o.op is OptOps.REDUCE_LANES] == [16]


@pytest.mark.parametrize("width,lanes", [(4, None), (5, 8), (7, 8), (9, 16), (24, 8), (33, 16),
                                         (63, 16), (100, 16)])
def test_narrow_rows_with_exp_pad_to_whole_vectors(width, lanes):
    """A row that computes exp or log per element pads to whole vectors from 5 wide: one
    vector exp instead of one per element (softmax 4096 x 33: 197 -> 97 us, log_softmax
    4096 x 7: 120 -> 68); rows up to 4 wide keep LLVM's own loop (4096 x 4: 13 us against
    49 padded). A width that 8 divides keeps its exact lanes; plain sums (layernorm) stay
    as they were (D54: padding loses below 4 vectors there)."""
    from codegen.kernel import OptOps
    from codegen.linearizer import linearize
    from codegen.target import cpu
    for name in ("softmax", "log_softmax"):
        (ast,) = _kernels(OPS[name][0](Tensor(np.ones((16, width), np.float32))))
        opts = linearize(ast, cpu(512)).opts
        got = [o.amount for o in opts if o.op is OptOps.REDUCE_LANES]
        assert got == ([] if lanes is None else [lanes]), f"{name} x {width}: lanes {got}"
        assert any(o.op is OptOps.PAD for o in opts) == (lanes is not None and width % lanes != 0)
    (ast,) = _kernels(OPS["layernorm"][0](Tensor(np.ones((16, width), np.float32))))
    assert not any(o.op is OptOps.PAD for o in linearize(ast, cpu(512)).opts) or width >= 64


@pytest.mark.parametrize("width", [5, 7, 9, 33, 50])
@pytest.mark.parametrize("view", ["plain", "slice", "transpose", "broadcast"])
def test_narrow_padded_rows_match_numpy(width, view):
    """Padded narrow rows with exp, 8 rows at once, read through views, and their
    gradients (the backward's rows compute exp too for log_softmax)."""
    a = np.random.default_rng(width).standard_normal((24, width)) * 3
    t = Tensor(a.astype(np.float32), requires_grad=True)
    if view == "slice":
        x, ref = t[:, : width - 1] if width > 5 else t, a[:, : width - 1] if width > 5 else a
    elif view == "transpose":
        t = Tensor(np.ascontiguousarray(a.T).astype(np.float32), requires_grad=True)
        x, ref = t.T, a
    elif view == "broadcast":
        t = Tensor(a[:1].astype(np.float32), requires_grad=True)
        x, ref = t.expand(24, width), np.broadcast_to(a[:1], (24, width))
    else:
        x, ref = t, a
    for name in ("softmax", "log_softmax"):
        ours, numpy_op = OPS[name]
        np.testing.assert_allclose(ours(x).numpy(), numpy_op(ref), rtol=2e-5, atol=2e-5)
    check_grad(lambda v: v.log_softmax(-1), np.ascontiguousarray(ref[:8]))


@pytest.mark.parametrize("width", [511, 512, 513, 700, 1023, 1025, 2049, 3000, 4097])
@pytest.mark.parametrize("view", ["plain", "slice", "transpose", "broadcast"])
def test_wide_accumulators_match_numpy(width, view):
    """Rows several vectors per step, padded or whole, read through views, for every row
    op (layernorm and x - mean take the wide steps; softmax's rows check the rest)."""
    rng = np.random.default_rng(width)
    base = (rng.standard_normal((6, width + 2)) * 3 + 1).astype(np.float32)
    if view == "slice":
        t, a = Tensor(base)[1:5, 1:-1], base[1:5, 1:-1]
    elif view == "transpose":
        t, a = Tensor(base[:, :width].T.copy()).T, base[:, :width]
    elif view == "broadcast":
        t, a = Tensor(base[:1, :width]).expand(5, width), np.broadcast_to(base[:1, :width], (5, width))
    else:
        t, a = Tensor(base[:, :width].copy()), base[:, :width]
    for name, (ours, ref) in OPS.items():
        np.testing.assert_allclose(ours(t).numpy(), ref(np.asarray(a, np.float64)), rtol=2e-5,
                                   atol=2e-5, err_msg=name)
