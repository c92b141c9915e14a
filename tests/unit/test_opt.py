"""Optimisation passes whose decisions are data (codegen/kernel.py, codegen/opt/).

Every change to a kernel is an `Opt` applied by `Kernel.apply`: the decisions replay on a
fresh Kernel to the same code, NOOPT=1 applies none, a target's vector width reaches the
code, and any sequence of applicable decisions (drawn at random, not only those the
passes choose) computes what numpy does.
"""
from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from codegen.kernel import Kernel, Opt, OptOps
from codegen.linearizer import Linearizer, linearize
from codegen.opt import apply_opts, optimize
from codegen.opt.simplify import simplify
from codegen.target import cpu, gpu
from codegen.uops import UOps
from lazyten import Context, Tensor
from lazyten.realize import launch, run_schedule
from lazyten.schedule import create_schedule
from runtimes import Buffer, get_runtime


def _rnd(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _programs():
    """(lazy result, numpy reference) pairs whose last kernel has a reduce, a masked or
    upsampled read, or a plain elementwise body."""
    a, b = _rnd((24, 40)), _rnd((40, 32), 1)
    x = _rnd((2, 3, 8, 12), 2)
    up = np.repeat(x, 2, axis=3)
    r = _rnd((6, 37), 3)
    rng = np.random.default_rng(4)
    gi, ia, gg = rng.integers(0, 37, (6, 16)), rng.integers(0, 12, 20), _rnd((20, 16), 5)
    return [
        # values under the reduce whose padding is no identity (exp(0 - 1), 0 > x - 9)
        ((Tensor(r) - 1).exp().sum(axis=1), np.exp(r - 1).sum(axis=1)),
        ((Tensor(r) - 9).amax(axis=1), (r - 9).max(axis=1)),
        ((Tensor(a) @ Tensor(b)).relu(), np.maximum(a @ b, 0)),
        (Tensor(x).pad((1, 2, 0, 1)).sum(axis=2), np.pad(x, ((0, 0),) * 2 + ((0, 1), (1, 2))).sum(2)),
        (Tensor(x).max(axis=(0, 3)), x.max(axis=(0, 3), keepdims=True).reshape(3, 8)),
        (Tensor(x).reshape(2, 3, 8, 12, 1).expand(2, 3, 8, 12, 2).reshape(2, 3, 8, 24) * 2,
         up * 2),
        # picks by index (D69): an indirect load whose row comes from data along any axis
        # the decisions make lanes or tiles, and a reduce under `if` (a weight gradient's
        # form, compared with values that are no range: against a range it is a scatter,
        # D153, which no Kernel decides)
        (Tensor(r).gather(1, Tensor(gi)), np.take_along_axis(r, gi, 1)),
        ((Tensor(ia).reshape(20, 1, 1) == Tensor(np.arange(12)).reshape(1, 12, 1)).where(
            Tensor(gg).reshape(20, 1, 16), 0).sum(0),
         ((ia[:, None, None] == np.arange(12)[None, :, None]) * gg[:, None, :]).sum(0)),
    ]


def _run(k: Kernel, item, target) -> np.ndarray:
    """Lower `k` as it is, compile and run it on the item's (realized) inputs."""
    runtime = get_runtime("CPU")
    spec = runtime.renderer.program(Linearizer(k, target).linearize())
    program = runtime.program(spec, runtime.compiler.compile_cached(spec.name, spec.src))
    out = Buffer(runtime, int(np.prod(item.out.shape)), item.out.dtype)
    launch(spec, program, [out] + [b.realized for b in item.inputs], "CPU")
    result = np.empty(item.out.shape, np.float32)
    out.copyout(memoryview(result).cast("B"))
    return result


def _last_item(t: Tensor):
    """The kernel that computes t, with everything before it run (its inputs realized)."""
    items = create_schedule([t.lazydata])
    run_schedule(items[:-1])
    return items[-1]


def test_decisions_replay_to_the_same_code():
    target = get_runtime("CPU").renderer.target
    for t, _ in _programs():
        ast = create_schedule([t.lazydata])[-1].ast
        k = optimize(Kernel(ast), target)
        again = apply_opts(Kernel(ast), list(k.applied))
        src = get_runtime("CPU").renderer.render(Linearizer(k, target).linearize())
        assert src == get_runtime("CPU").renderer.render(Linearizer(again, target).linearize())


def test_noopt_applies_no_decision_and_computes_the_same():
    a, b = _rnd((33, 64)), _rnd((64, 48), 1)
    ast = create_schedule([(Tensor(a) @ Tensor(b)).lazydata])[-1].ast
    target = get_runtime("CPU").renderer.target
    assert linearize(ast, target).opts, "the passes decide something for a matmul"
    with Context(NOOPT=1):
        assert linearize(ast, target).opts == []
        out = (Tensor(a) @ Tensor(b) + 0.5).numpy()
    np.testing.assert_allclose(out, a @ b + 0.5, rtol=1e-4, atol=1e-4)


def test_noopt_is_part_of_the_program_caches_key(tmp_path):
    """A program compiled with the passes on is not reused with NOOPT=1, from memory or
    from the disk cache (it was: NOOPT=1 ran the tuned kernel and DEBUG=3 printed no
    decisions for it)."""
    from lazyten import programs
    a, b = _rnd((33, 64)), _rnd((64, 48), 1)
    ast = create_schedule([(Tensor(a) @ Tensor(b)).lazydata])[-1].ast
    renderer = get_runtime("CPU").renderer
    with Context(CACHEDIR=str(tmp_path)):
        tuned, _ = programs.get_program(ast, "CPU")
        with Context(NOOPT=1):
            plain = renderer.program(linearize(ast, renderer.target)).src
            from_memory, _ = programs.get_program(ast, "CPU")
            programs._PROGRAMS.clear()
            from_disk, _ = programs.get_program(ast, "CPU")
    assert tuned.src != plain
    assert from_memory.src == plain and from_disk.src == plain


def test_the_vector_width_comes_from_the_target():
    """A machine with AVX2 gets 8-lane vectors and a 4 x 32 tile; with AVX-512, 16 and 4 x 64."""
    a, b = Tensor(_rnd((128, 128))), Tensor(_rnd((128, 128), 1))
    ast = create_schedule([(a @ b).lazydata])[-1].ast
    for bits, lanes in ((256, 8), (512, 16)):
        kernel = linearize(ast, cpu(bits))
        accs = [u.dtype.count for u in kernel.uops if u.op is UOps.DEFINE_ACC]
        assert set(accs) == {lanes} and sum(accs) == cpu(bits).tile, (bits, accs)
        assert any(o.op is OptOps.LANES and o.amount == lanes for o in kernel.opts)


def test_the_outer_loop_may_re_read_what_stays_in_l2():
    """x @ w.T with x 1024 x 512 and w 128 x 512: a block of rows re-reads all of w (256
    KB), a block of columns all of x (2 MB). Where w fits in half the L2 cache, rows stay
    the outer loop although they re-read more elements (D34: about 20% faster on AVX2);
    with a smaller L2, the columns go outermost, as they did before L2 was counted."""
    x, w = Tensor(_rnd((1024, 512))), Tensor(_rnd((128, 512), 1))
    ast = create_schedule([(x @ w.T).lazydata])[-1].ast
    outer = {}
    for l2 in (512 << 10, 256 << 10):
        kernel = linearize(ast, replace(cpu(256, threads=2), l2_bytes=l2))
        outer[l2] = [o for o in kernel.opts if o.op is OptOps.OUTER]
    assert outer[512 << 10] == [] and len(outer[256 << 10]) == 1, outer


def test_a_strided_conv_takes_lanes_where_no_input_gathers():
    """A stride-2 conv's output row reads its input every other element: lanes along it
    gather a load per lane (the tile chose them and ran at half the speed of lanes along
    the output channels, whose weight is contiguous). Checked at odd sizes too."""
    from lazyten.nn import functional as F
    target = get_runtime("CPU").renderer.target
    for n, cin, cout, size in ((8, 32, 64, 32), (2, 5, 24, 15)):
        x, w = Tensor(_rnd((n, cin, size, size))), Tensor(_rnd((cout, cin, 3, 3), 1))
        ast = create_schedule([F.conv2d(x, w, stride=2, padding=1).lazydata])[-1].ast
        k = optimize(Kernel(ast), target)
        lane = len(k.full_shape) - 1
        assert k.lanes >= 8, (k.full_shape, k.applied)  # (24 channels: 8 of 16 lanes)
        assert all(k.strides(key, lane) in (0, 1, None) for key in k.loads), k.applied


def test_a_conv_tile_looks_one_unroll_ahead():
    """After its row lanes, a 3x3 conv's tile unrolled the row again (7 times: 8 loads for
    7 accumulator updates) where output channels then positions would need 6 for 8; the
    unroll after the lanes now looks one further unroll ahead. 16x32x7: 66 -> 136
    GFLOP/s on AVX2. (At 56, 40 output channels: with whole vectors of them the tile takes
    channel lanes and a row of positions instead, trading loads for weight reuse, D125.)"""
    from codegen.opt.tile_measures import loads_per_update as _loads_per_update
    from lazyten.nn import functional as F
    target = get_runtime("CPU").renderer.target  # the one whose lanes the conv was laid out for
    for n, c, cout, size in ((16, 32, 32, 7), (4, 64, 40, 56), (3, 24, 24, 13)):
        x, w = Tensor(_rnd((n, c, size, size))), Tensor(_rnd((cout, c, 3, 3), 1))
        ast = create_schedule([F.conv2d(x, w, padding=1).lazydata])[-1].ast
        k = optimize(Kernel(ast), target)
        assert _loads_per_update(k, target) <= 0.75, (size, k.applied)


def test_the_l2_size_is_read_from_sysfs(tmp_path):
    from codegen.target import _host_l2_bytes
    for i, (level, size) in enumerate((("1", "32K"), ("2", "1024K"), ("3", "32768K"))):
        (tmp_path / f"index{i}").mkdir()
        (tmp_path / f"index{i}" / "level").write_text(level + "\n")
        (tmp_path / f"index{i}" / "size").write_text(size + "\n")
    assert _host_l2_bytes(str(tmp_path)) == 1 << 20
    (tmp_path / "index1" / "size").write_text("2M\n")
    assert _host_l2_bytes(str(tmp_path)) == 2 << 20
    assert _host_l2_bytes(str(tmp_path / "none")) == 0
    from codegen.target import _host_cache_bytes
    assert _host_cache_bytes(3, str(tmp_path)) == 32 << 20
    assert _host_cache_bytes(4, str(tmp_path)) == 0


def test_a_gpu_target_gets_work_groups_and_no_tiles():
    ast = create_schedule([(Tensor(_rnd((64, 100))).sum(axis=1)).lazydata])[-1].ast
    kernel = linearize(ast, gpu("TEST", local_size=64))
    assert {o.op for o in kernel.opts} <= {OptOps.MERGE, OptOps.SQUEEZE, OptOps.LOCAL,
                                            OptOps.GROUP, OptOps.FLATTEN}
    assert kernel.local_size == [64] and kernel.global_size == [1]
    long = create_schedule([(Tensor(_rnd((4, 4096))).sum(axis=1)).lazydata])[-1].ast
    assert [o.op for o in linearize(long, gpu("TEST", local_size=64)).opts][-1] is OptOps.GROUP


def _candidates(k: Kernel) -> list[Opt]:
    """Every decision of the CPU kinds that could apply to k now."""
    opts = []
    for axis in range(k.n_global):
        size = k.full_shape[axis]
        opts += [Opt(OptOps.UPCAST, axis, d) for d in range(2, min(size, 16) + 1) if size % d == 0]
        opts.append(Opt(OptOps.OUTER, axis))
    if k.upcasts and not k.lanes:
        opts.append(Opt(OptOps.LANES, len(k.full_shape) - 1, k.upcasts[-1]))
    if k.n_reduce and not k.lanes:
        axis = k.n_global + k.n_reduce - 1
        size = k.full_shape[axis]
        opts += [Opt(OptOps.REDUCE_LANES, 0, d) for d in (2, 4, 8, 16) if size % d == 0]
        opts += [Opt(OptOps.PAD, axis, d) for d in (4, 8, 16) if size % d and not k.padded]
    return opts


@settings(max_examples=60, deadline=None)
@given(program=st.integers(0, 7), picks=st.lists(st.integers(0, 10**6), max_size=5))
def test_any_applicable_decisions_compute_the_same(program, picks):
    """The generator behind the passes' bugs: random decisions, not only the chosen ones."""
    t, want = _programs()[program]
    item = _last_item(t)
    target = replace(cpu(512), tile=0)
    k = Kernel(item.ast)
    apply_opts(k, simplify(k, target))
    for pick in picks:
        options = [o for o in _candidates(k) if k.can_apply(o)]
        if not options:
            break
        k.apply(options[pick % len(options)])
    np.testing.assert_allclose(_run(k, item, target), want.reshape(item.out.shape),
                               rtol=1e-4, atol=1e-4, err_msg=str([str(o) for o in k.applied]))
