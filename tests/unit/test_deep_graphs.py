"""Deep lazy graphs: a loop that updates a tensor thousands of times without realizing it,
or calls backward() again and again, builds a chain of ops thousands deep. The scheduler
cuts it into kernels of bounded depth (rule 6, `_DEPTH_MAX`): before that rule, a chain of
about 330 additions raised RecursionError from the kernel builder."""
import numpy as np
from hypothesis import given, settings, strategies as st

import lazyten.schedule as schedule_module
from codegen.ops import LazyOp
from lazyten import Tensor
from lazyten.schedule import create_schedule


def ast_depth(ast: LazyOp) -> int:
    """The longest path from the store to a leaf, walked without recursion."""
    deepest, stack, seen = 0, [(ast, 1)], set()
    while stack:
        node, depth = stack.pop()
        if (id(node), depth) in seen:
            continue
        seen.add((id(node), depth))
        deepest = max(deepest, depth)
        stack.extend((src, depth + 1) for src in node.src)
    return deepest


def test_a_long_chain_of_additions_realizes():
    x = Tensor(np.zeros(5, np.float32))
    for _ in range(3000):
        x = x + 1
    np.testing.assert_array_equal(x.numpy(), np.full(5, 3000, np.float32))


def test_every_kernel_of_a_long_chain_is_shallow():
    x = Tensor(np.arange(6, dtype=np.float32))
    for i in range(1000):
        x = x * 0.5 + i
    items = [i for i in create_schedule([x.lazydata]) if i.ast is not None]
    assert len(items) > 1
    # the store and the loads add a level or two to the inlined ops
    assert max(ast_depth(i.ast) for i in items) <= schedule_module._DEPTH_MAX + 3


def test_backward_called_many_times_accumulates_into_a_deep_graph():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((8, 5)).astype(np.float32)
    labels = rng.integers(0, 5, 8).astype(np.int32)
    x = Tensor(logits, requires_grad=True)
    y = Tensor(labels)
    for _ in range(400):  # gradient accumulation without realizing the gradient
        x.sparse_categorical_crossentropy(y).backward()
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(8), labels] -= 1
    np.testing.assert_allclose(x.grad.numpy(), 400 * p / 8, rtol=1e-4, atol=1e-5)


def test_gradient_through_a_long_chain():
    x = Tensor(np.array([0.5, -1.0, 2.0]), requires_grad=True)  # float64
    y = x
    for _ in range(1500):
        y = y * 1.001 + 0.01
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full(3, 1.001 ** 1500), rtol=1e-12)


# one step of a random program: (kind, constant, which earlier value it also reads)
_STEP = st.tuples(st.sampled_from(["add", "mul", "max", "mix", "sqrt"]),
                  st.floats(0.25, 2.0), st.integers(0, 10**6))


@settings(max_examples=15, deadline=None)
@given(steps=st.lists(_STEP, min_size=150, max_size=900))
def test_random_deep_programs_match_numpy(steps):
    """Each step reads the last value and an earlier one (a DAG, not only a chain)."""
    start = np.linspace(-2, 3, 7)  # float64: the comparison is about structure, not rounding
    values, want = [Tensor(start)], [start]
    for kind, c, pick in steps:
        j = pick % len(values)
        a, b, na, nb = values[-1], values[j], want[-1], want[j]
        if kind == "add":
            out, ref = a + c, na + c
        elif kind == "mul":
            out, ref = a * (c / 2), na * (c / 2)
        elif kind == "max":
            out, ref = a.maximum(b), np.maximum(na, nb)
        elif kind == "mix":
            out, ref = a * 0.5 + b * 0.25, na * 0.5 + nb * 0.25
        else:
            out, ref = (a.abs() + c).sqrt(), np.sqrt(np.abs(na) + c)
        values.append(out)
        want.append(ref)
    np.testing.assert_allclose(values[-1].numpy(), want[-1], rtol=1e-9, atol=1e-12)


def test_the_bound_leaves_model_sized_kernels_alone(monkeypatch):
    """Four layernorm + gelu blocks and their gradient fuse into a kernel ~200 ops deep
    (three were, before D137 made gelu shallower): the same kernels with the bound as
    without it."""
    def kernels():
        x = Tensor(np.random.default_rng(2).standard_normal((4, 8)).astype(np.float32),
                   requires_grad=True)
        x.layernorm().gelu().layernorm().gelu().layernorm().gelu().layernorm().gelu().sum().backward()
        return [i.ast for i in create_schedule([x.grad.lazydata]) if i.ast is not None]
    bounded = kernels()
    monkeypatch.setattr(schedule_module, "_DEPTH_MAX", 10**6)
    free = kernels()
    assert len(bounded) == len(free) and max(ast_depth(a) for a in free) > 150


# ---- wide graphs: a base read through many views (rule 4, D93) ----
def _reads(t: Tensor) -> list[int]:
    """Memory reads (load leaves) of each kernel of t's schedule."""
    from codegen.kernel import leaves
    return [sum(1 for n in leaves(i.ast) if n.op.name == "LOAD")
            for i in create_schedule([t.lazydata]) if i.ast is not None]


def test_a_reflect_pad_of_a_circular_pad_is_not_one_huge_kernel():
    """Found by the fuzzer (FUZZ_SEED=12213): one kernel of 651 reads, 16 s to build and
    compile; jitted, past the fuzzer's 30 s limit."""
    rng = np.random.default_rng(252)
    x0 = rng.integers(0, 9, (2, 2, 4, 3), endpoint=True).astype(np.uint16)
    x = Tensor(x0).pad(((0, 0), (2, 1), (3, 3), (3, 0)), mode="circular").bitcast("int16")
    y = x.pad(((1, 0), (0, 1), (3, 3), (2, 2)), mode="reflect")
    assert max(_reads(y)) <= schedule_module._VIEW_LEAVES_MAX, _reads(y)
    want = np.pad(np.pad(x0, ((0, 0), (2, 1), (3, 3), (3, 0)), mode="wrap").view(np.int16),
                  ((1, 0), (0, 1), (3, 3), (2, 2)), mode="reflect")
    np.testing.assert_array_equal(y.numpy(), want)


MODES = {"reflect": "reflect", "circular": "wrap", "replicate": "edge", "constant": "constant"}


@given(shape=st.lists(st.integers(2, 5), min_size=2, max_size=3),
       pads=st.lists(st.tuples(st.sampled_from(sorted(MODES)), st.integers(0, 1),
                               st.integers(0, 2)), min_size=2, max_size=4))
@settings(max_examples=15, deadline=None)
def test_stacked_pads_stay_in_bounded_kernels(shape, pads):
    """The siblings: pads of every mode stacked, each padding every axis by up to 2 (never
    more than the axis allows reflect), against numpy; no kernel over the bound."""
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    t, want = Tensor(x), x
    for mode, lo, hi in pads:
        widths = tuple((min(lo, s - 1), min(hi, s - 1)) for s in want.shape)
        t = t.pad(widths, mode=mode)
        want = np.pad(want, widths, mode=MODES[mode])
    assert max(_reads(t), default=0) <= schedule_module._VIEW_LEAVES_MAX, _reads(t)
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-6)
