"""Reduces over a row that no vector divides (issue 15): OptOps.PAD against numpy.

A contiguous reduce at least 4 vectors long whose length is no multiple of the vector
width is padded to whole vectors: the loop runs over the whole vectors without masks and
the last, partial vector is taken after it, with masked loads and the reduce's identity
in the padding (D54). The tests compare softmax, log_softmax, layernorm, sums and maxes
with numpy at widths with every remainder, on sliced, transposed and broadcast inputs and
in float32, float16 and float64; they check the pass chose PAD where the rule says, so
they exercise it, and that a padded max of negative numbers or a sum of exp (whose value
at a padded, zero input is not the identity) comes out right.
"""
from dataclasses import replace

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from codegen.kernel import Kernel, Opt, OptError, OptOps
from codegen.linearizer import Linearizer
from codegen.opt import apply_opts, optimize
from codegen.opt.simplify import simplify
from codegen.target import cpu
from codegen.uops import UOps
from lazyten import Tensor
from lazyten.schedule import create_schedule
from tests.unit.test_opt import _run

WIDTHS = st.sampled_from([64, 65, 79, 100, 255, 257, 1000, 1001, 1733])
DTYPES = st.sampled_from([np.float32, np.float16, np.float64])
TOL = {np.float32: 1e-5, np.float16: 2e-3, np.float64: 1e-12}


def rnd(shape, dtype=np.float32, seed=0):
    return (np.random.default_rng(seed).standard_normal(shape) * 3).astype(dtype)


def lowered(t: Tensor, index: int = -1) -> Kernel:
    """A kernel of t's schedule, optimised for an AVX-512 CPU (16 float lanes)."""
    target = cpu(512)
    k = optimize(Kernel(create_schedule([t.lazydata])[index].ast), target)
    Linearizer(k, target).linearize()  # emits without error
    return k


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


REFS = {
    "sum": lambda x: x.sum(-1),
    "max": lambda x: x.max(-1),
    "softmax": _softmax,
    "log_softmax": lambda x: np.log(_softmax(x)),
    "layernorm": lambda x: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5),
}
OPS = {
    "sum": lambda t: t.sum(-1), "max": lambda t: t.amax(-1), "softmax": lambda t: t.softmax(-1),
    "log_softmax": lambda t: t.log_softmax(-1), "layernorm": lambda t: t.layernorm(-1),
}


def check(out: Tensor, x: np.ndarray, op: str, dtype) -> None:
    want = REFS[op](x.astype(np.float64))
    scale = max(1.0, float(np.abs(want).max())) if op == "sum" else 1.0  # sums of ~1000 terms
    np.testing.assert_allclose(out.numpy().astype(np.float64), want, rtol=TOL[dtype],
                               atol=TOL[dtype] * scale, err_msg=f"{op} {x.shape} {dtype}")


@settings(max_examples=30, deadline=None)
@given(rows=st.sampled_from([1, 3, 8, 16]), width=WIDTHS, op=st.sampled_from(list(OPS)),
       dtype=DTYPES)
@example(rows=16, width=1000, op="softmax", dtype=np.float32)
@example(rows=8, width=257, op="max", dtype=np.float16)  # one valid lane in the last vector
def test_row_ops_at_odd_widths(rows, width, op, dtype):
    x = rnd((rows, width), dtype)
    check(OPS[op](Tensor(x)), x, op, dtype)


@settings(max_examples=25, deadline=None)
@given(width=WIDTHS, layout=st.sampled_from(["sliced", "transposed", "broadcast_row",
                                             "broadcast_rows", "strided"]),
       op=st.sampled_from(list(OPS)), dtype=DTYPES)
@example(width=1000, layout="sliced", op="softmax", dtype=np.float32)
@example(width=100, layout="broadcast_row", op="layernorm", dtype=np.float64)
def test_row_ops_on_views(width, layout, op, dtype):
    """Inputs that are not a contiguous block: a slice (offset rows), a transpose (the
    reduce walks a stride), a row broadcast to every output, outputs broadcast over rows,
    every other column."""
    base = rnd((12, width + 7), dtype)
    t = Tensor(base)
    views = {
        "sliced": (t[2:10, 3:width + 3], base[2:10, 3:width + 3]),
        "transposed": (Tensor(base.T.copy())[3:width + 3].T, base[:, 3:width + 3]),
        "broadcast_row": (t[0:1, :width].expand(8, width), np.broadcast_to(base[0:1, :width], (8, width))),
        "broadcast_rows": (t[:, :width].reshape(1, 12, width).expand(2, 12, width),
                           np.broadcast_to(base[:, :width], (2, 12, width))),
        "strided": (Tensor(rnd((8, 2 * width), dtype))[:, ::2], rnd((8, 2 * width), dtype)[:, ::2]),
    }
    view, x = views[layout]
    check(OPS[op](view), np.ascontiguousarray(x), op, dtype)


def test_the_pass_pads_odd_rows_and_only_them():
    """Widths the vector divides keep 16 exact lanes; odd rows long enough to stream
    several at once (256 or more) are padded to 16 lanes; short rows are left to LLVM
    (measured no faster padded, D54)."""
    for width, padded in ((1024, False), (1000, True), (1001, True), (257, True), (255, False),
                          (65, False), (24, False)):
        k = lowered(Tensor(rnd((64, width))).sum(-1))
        assert k.padded == padded, (width, k.applied)
        if padded:
            assert k.lanes == 16 and k.reduce_lanes and len(k.upcasts) == 2, (width, k.applied)
    # the sum of exp of softmax over rows longer than a row kernel takes, 2 x 50257 (split
    # into 29 chunks of 3466: 8 rows are too few to share between threads, split.py)
    k = lowered(Tensor(rnd((8, 2 * 50257))).softmax(-1), 2)
    assert k.padded and k.lanes == 16 and k.upcasts == [8, 16], k.applied


def test_the_loop_has_no_masks_and_the_last_vector_has():
    """The reduce loop's body loads whole vectors; only the peeled last step is masked."""
    target = cpu(512)
    k = optimize(Kernel(create_schedule([Tensor(rnd((8, 1000))).amax(-1).lazydata])[-1].ast),
                 target)
    uops = Linearizer(k, target).linearize().uops
    depth, masked_in_loop, masked_after = 0, 0, 0
    for u in uops:
        depth += u.op is UOps.LOOP
        depth -= u.op is UOps.END
        if u.op is UOps.LOAD and len(u.src) == 3:
            masked_in_loop += depth > 1
            masked_after += depth <= 1
    assert masked_in_loop == 0 and masked_after == 8, (masked_in_loop, masked_after)


@settings(max_examples=20, deadline=None)
@given(width=st.sampled_from([5, 17, 40, 100, 129]), amount=st.sampled_from([2, 4, 8, 16]),
       lanes=st.sampled_from([0, 2, 4, 8, 16]), rows=st.sampled_from([0, 2]),
       op=st.sampled_from(["expsum", "negmax"]))
def test_any_pad_and_lanes_compute_the_same(width, amount, lanes, rows, op):
    """PAD with any amount, then any reduce lanes that divide the padded axis (or none),
    with or without rows at once: the last vector may hold no valid lane at all."""
    x = rnd((4, width))
    t = (Tensor(x) - 1).exp().sum(-1) if op == "expsum" else (Tensor(x) - 20).amax(-1)
    want = np.exp(x - 1).sum(-1) if op == "expsum" else (x - 20).max(-1)
    item = create_schedule([t.lazydata])[-1]
    target = replace(cpu(512), tile=0)
    k = Kernel(item.ast)
    apply_opts(k, simplify(k, target))
    pad = Opt(OptOps.PAD, k.n_global + k.n_reduce - 1, amount)
    if width % amount == 0:
        assert not k.can_apply(pad), "nothing to pad: PAD does not apply"
        return
    apply_opts(k, ([Opt(OptOps.UPCAST, 0, rows)] if rows else []) + [pad])
    if lanes and k.full_shape[-1] % lanes == 0:
        k.apply(Opt(OptOps.REDUCE_LANES, 0, lanes))
    np.testing.assert_allclose(_run(k, item, target), want.reshape(item.out.shape), rtol=1e-5,
                               atol=1e-5, err_msg=str([str(o) for o in k.applied]))


def test_a_padded_reduce_keeps_its_axes():
    """After PAD the reduce axes merge no more (the peeled step is the last of the
    innermost axis), a second PAD and a GROUP are refused."""
    x = Tensor(rnd((4, 6, 70)))
    k = Kernel(create_schedule([x.sum(axis=(1, 2)).lazydata])[-1].ast)
    k.apply(Opt(OptOps.PAD, 2, 16))
    for opt in (Opt(OptOps.MERGE, 1), Opt(OptOps.PAD, 2, 16), Opt(OptOps.GROUP, 0, 16)):
        try:
            k.copy().apply(opt)
        except OptError:
            continue
        raise AssertionError(f"{opt} applied to a padded reduce")


def test_a_padded_reduce_inside_an_outer_reduce_loop():
    """Two reduce axes that do not merge: the partial last vector of the inner one is
    taken inside the outer loop, once per outer step."""
    x = rnd((5, 8, 90))
    out = Tensor(x).sum(axis=(0, 2))
    k = lowered(out)
    assert k.padded and len(k.reduce_shape) == 2, k.applied
    np.testing.assert_allclose(out.numpy(), x.sum(axis=(0, 2)), rtol=1e-5, atol=1e-4)


def test_special_values_in_the_last_partial_vector():
    """NaN, inf and -inf in the peeled step and in the loop propagate as numpy's do."""
    x = rnd((8, 1000))
    x[0, -1], x[1, 500], x[2, -1], x[3, -3], x[4, :] = np.nan, np.nan, np.inf, -np.inf, -np.inf
    with np.errstate(invalid="ignore"):
        np.testing.assert_equal(Tensor(x).amax(-1).numpy(), x.max(-1))
        np.testing.assert_allclose(Tensor(x).sum(-1).numpy(), x.sum(-1), rtol=1e-5)
