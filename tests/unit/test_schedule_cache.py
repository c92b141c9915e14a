"""The schedule cache: eager code run again reuses its schedule, rebound to new buffers.

A reused schedule must give exactly what scheduling afresh gives; anything the scheduler
decides from (constants, views, which buffers are realized, shapes, dtypes) must change
the key; graphs with copies are never cached.
"""
import os
import subprocess
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lazyten import Tensor
from runtimes import get_runtime
from lazyten import schedule_cache as S
from lazyten.schedule import create_schedule
from tests.helpers import assert_matmul


def rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def scheduled(t: Tensor) -> list:
    return create_schedule([t.lazydata])


def test_same_structure_reuses_the_asts_with_new_buffers():
    x, y = Tensor(rnd(8, 16)).realize(), Tensor(rnd(8, 16, seed=1)).realize()
    first = scheduled((x * 2 + 1).sum(axis=1))
    again = scheduled((y * 2 + 1).sum(axis=1))
    assert [i.ast for i in again] == [i.ast for i in first]
    assert all(a.ast is b.ast for a, b in zip(first, again)), "the cached ASTs are reused"
    assert again[-1].inputs[0] is y.lazydata.base and first[-1].inputs[0] is x.lazydata.base
    assert again[-1].out is not first[-1].out


def test_what_the_scheduler_reads_changes_the_key():
    x = Tensor(rnd(8, 16)).realize()
    a = scheduled((x * 2 + 1).sum(axis=1))
    b = scheduled((x * 3 + 1).sum(axis=1))          # another constant
    c = scheduled((x.T * 2 + 1).sum(axis=1))        # another view
    d = scheduled((x.cast("float64") * 2 + 1).sum(axis=1))  # another dtype
    asts = [s[-1].ast for s in (a, b, c, d)]
    assert len({id(t) for t in asts}) == 4 and len(set(asts)) == 4
    mid = x * 2
    e = scheduled((mid + 1).sum(axis=1))
    mid.realize()  # now an input, not fused
    f = scheduled((mid + 1).sum(axis=1))
    assert e[-1].ast != f[-1].ast and len(f[-1].inputs) == 1 and f[-1].inputs[0] is mid.lazydata.base


def test_packed_operands_get_a_fresh_copy_each_time():
    k = 2 * max(get_runtime("CPU").renderer.target.l2_bytes, 1 << 18) // (4 * 256)
    a, b = rnd(32, k), rnd(k, 256, seed=1)  # B twice the L2: packed (D107)
    outs = []
    for _ in range(2):
        out = Tensor(a).realize() @ Tensor(b).realize()
        items = scheduled(out)
        assert len(items) == 2, "B is packed by one extra kernel"
        outs.append(items)
        assert_matmul(out.numpy(), a, b)
    assert outs[0][0].out is not outs[1][0].out
    assert outs[1][1].inputs[1] is outs[1][0].out


def test_repeated_assigns_reuse_the_schedule_and_stay_correct():
    """An optimiser step run again (in-place assigns) reuses its schedule; an assign
    whose value reads the target through another view still materialises it first."""
    w_np, g_np = rnd(5, 5), rnd(5, 5, seed=1)  # a shape and step no other test uses
    w, g = Tensor(w_np).realize(), Tensor(g_np).realize()
    ref = w_np.astype(np.float64)
    for step in range(3):
        update = w.assign(w - g * 0.37)
        key, _ = S._signature([update.lazydata])
        assert key is not None and (key in S._SCHEDULES) == (step > 0)
        update.realize()
        ref = ref - g_np * 0.37
    np.testing.assert_allclose(w.numpy(), ref, rtol=1e-6, atol=1e-6)
    for _ in range(3):
        w.assign(w.T + 1).realize()
        ref = ref.T + 1
    np.testing.assert_allclose(w.numpy(), ref, rtol=1e-6, atol=1e-6)


@settings(max_examples=30, deadline=None)
@given(ops=st.lists(st.sampled_from(["sigmoid", "relu", "sum0", "sum1", "T", "pad", "mul"]),
                    min_size=1, max_size=5),
       seed=st.integers(0, 3))
def test_repeated_eager_code_matches_numpy(ops, seed):
    """Run the same op sequence three times on new data: the second and third runs hit
    the cache and must still match numpy."""
    for run in range(3):
        data = rnd(6, 6, seed=seed + run) * 0.5
        t, ref = Tensor(data), data.astype(np.float64)
        for op in ops:
            if op == "sigmoid":
                t, ref = t.sigmoid(), 1 / (1 + np.exp(-ref))
            elif op == "relu":
                t, ref = t.relu(), np.maximum(ref, 0)
            elif op == "sum0":
                t = t.sum(axis=0, keepdim=True).expand(6, 6)
                ref = np.broadcast_to(ref.sum(0, keepdims=True), (6, 6))
            elif op == "sum1":
                t, ref = t.sum(axis=1, keepdim=True) * t, ref.sum(1, keepdims=True) * ref
            elif op == "T":
                t, ref = t.T, ref.T
            elif op == "pad":
                t, ref = t.pad(((1, 0), (0, 1)))[:6, 1:], np.pad(ref, ((1, 0), (0, 1)))[:6, 1:]
            else:
                t, ref = t * t + 1, ref * ref + 1
        np.testing.assert_allclose(t.numpy(), ref, rtol=1e-4, atol=1e-4)


def test_a_pickled_dtype_finds_its_twin_in_another_process():
    """DTypes keep their hash once computed. One pickled in a saved program (in a process
    with another PYTHONHASHSEED) must still hash like the loading process's own dtype,
    or dict lookups keyed by dtype would miss."""
    def run(code: str, seed: str, stdin: str = "") -> str:
        return subprocess.run([sys.executable, "-c", code], input=stdin, capture_output=True,
                              text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}).stdout
    saved = run("import pickle; from codegen.dtypes import dtypes; hash(dtypes.float32); "
                "print(pickle.dumps(dtypes.float32).hex())", "1")
    found = run("import pickle, sys; from codegen.dtypes import dtypes; "
                "d = pickle.loads(bytes.fromhex(sys.stdin.read())); "
                "print({dtypes.float32: 'found'}.get(d), d == dtypes.float32)", "2", saved)
    assert found.split() == ["found", "True"]


def test_signed_zero_constants_are_different_kernels():
    """-0.0 == 0.0 in Python, but 1/x tells them apart: neither the schedule cache nor the
    kernel cache may hand one's kernel to the other."""
    x = rnd(5)
    for zero in (-0.0, 0.0, -0.0):
        with np.errstate(divide="ignore"):
            want = 1 / (x * np.float32(zero))
        np.testing.assert_array_equal((1 / (Tensor(x) * zero)).numpy(), want)


def test_sharing_is_part_of_the_key():
    """Two graphs alike node for node but for which nodes are shared (one exp read twice,
    or two equal exps; one input read twice, or two inputs) have different keys, and each
    computes its own value when the cache serves it again."""
    x, y = Tensor(rnd(4, 7)).realize(), Tensor(rnd(4, 7, seed=1)).realize()

    def shared(a, b):
        e = a.exp()
        return e * e + b

    def unshared(a, b):
        return a.exp() * b.exp() + b

    keys = set()
    for build in (shared, unshared):
        for a, b in ((x, y), (x, x), (y, x)):
            for _ in range(2):  # the second time from the cache
                key, _ = S._signature([build(a, b).lazydata])
                keys.add(key)
                want = (np.exp(a.numpy().astype(np.float64)) * np.exp(
                    (a if build is shared else b).numpy().astype(np.float64)) + b.numpy())
                np.testing.assert_allclose(build(a, b).numpy(), want, rtol=1e-5)
    # shared(x, y) and shared(y, x) are one structure; so are unshared's; (x, x) differs
    assert len(keys) == 4


def test_unrealized_saved_values_are_not_part_of_the_key():
    """A traced forward's GRAPH node may hold values of its graph that a later expansion
    reads (D80); only realized ones are read, so only they are keyed: a node whose saved
    values are all unrealized schedules as one with none (a traced BatchNorm's first step
    keyed `()` for them and missed the cache on its second step)."""
    a = Tensor(np.arange(6, dtype=np.float32)).realize()
    node = (a * 2 + 1).lazydata
    plain, _ = S._signature([node])
    node.base.saved = {7: (a * 3).lazydata}  # not realized: never read
    assert S._signature([node])[0] == plain
    value = (a * 3).realize().lazydata
    node.base.saved = {7: value}  # realized: read by the expansion, so keyed
    assert S._signature([node])[0] != plain
