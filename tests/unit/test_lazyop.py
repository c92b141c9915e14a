"""Kernel AST nodes (codegen/ops.py LazyOp): keys, hashes, printing and rewriting cost time
linear in the DAG, never in the tree it unfolds to.

`(y * 3).round()` reads y several times, so n of them in a row read x about 4**n ways:
the key was a nested tuple of the tree and `repr(ast.key())` (the program cache's key)
took 18.8 s at n = 3 and over a minute at n = 4.
"""
import numpy as np
import pytest

import lazyten.schedule as schedule_module
from codegen.linearizer import linearize
from codegen.ops import BinaryOps, BufferOps, LazyOp, MemBuffer, UnaryOps
from codegen.renderer.llvmir import LLVMRenderer
from codegen.dtypes import dtypes
from codegen.shape.shapetracker import ShapeTracker
from lazyten import Tensor
from lazyten.schedule import create_schedule


def chain(n: int, x: Tensor) -> Tensor:
    y = x
    for _ in range(n):
        y = (y * 3).round()
    return y


@pytest.fixture(autouse=True)
def one_kernel_per_chain(monkeypatch):
    """These tests need the whole chain in one kernel (30 rounds are 750 ops deep, 25 per
    round): lift the scheduler's depth bound (rule 6), which would cut it into several."""
    monkeypatch.setattr(schedule_module, "_DEPTH_MAX", 10**6)


def kernel_ast(out: Tensor) -> LazyOp:
    (item,) = [i for i in create_schedule([out.lazydata]) if i.ast is not None]
    return item.ast


def test_repeated_round_chain_has_linear_keys():
    x = Tensor(np.random.default_rng(0).random(16).astype(np.float32))
    asts = {n: kernel_ast(chain(n, x)) for n in (10, 20, 30)}
    # one row per distinct subtree (a nested tuple of the tree has 3 entries at the top)
    rows, nodes = len(asts[30].key()), len(asts[30].walk())
    assert 30 < rows <= nodes, f"{rows} key rows for {nodes} nodes: not one row per subtree"
    for what, measure in (("nodes", lambda a: len(a.walk())), ("key rows", lambda a: len(a.key())),
                          ("key text", lambda a: len(repr(a.key()))),
                          ("printed lines", lambda a: len(repr(a).splitlines()))):
        m10, m20, m30 = (measure(asts[n]) for n in (10, 20, 30))
        # counts grow by exactly the same step; text also by the digits of longer row
        # numbers (quadratic growth would make the second step 5/3 of the first)
        linear = (m20 - m10 <= m30 - m20 <= 1.05 * (m20 - m10)) if what == "key text" \
            else m30 - m20 == m20 - m10
        assert linear, f"{what} grow faster than linearly: {m10}, {m20}, {m30}"


def test_repeated_round_chain_lowers_to_linear_uops_and_computes():
    x = np.random.default_rng(1).random(16).astype(np.float32)
    counts = []
    for n in (10, 20, 30):
        out = chain(n, Tensor(x))
        kernel = linearize(kernel_ast(out), LLVMRenderer().target)
        counts.append(len(kernel.uops))
        want = x.copy()
        for _ in range(n):
            want = np.round(want * np.float32(3))
        np.testing.assert_array_equal(out.numpy(), want)
    assert counts[2] - counts[1] == counts[1] - counts[0], f"uops per kernel: {counts}"


def _leaf(idx: int = 1) -> LazyOp:
    return LazyOp(BufferOps.LOAD, (), MemBuffer(idx, dtypes.float32, ShapeTracker.from_shape((4,))))


def test_key_is_structural_whatever_the_sharing():
    """One shared node or two equal ones: the same kernel, so the same key and hash."""
    shared = LazyOp(UnaryOps.EXP2, (_leaf(),))
    one = LazyOp(BinaryOps.ADD, (shared, shared))
    two = LazyOp(BinaryOps.ADD, (LazyOp(UnaryOps.EXP2, (_leaf(),)), LazyOp(UnaryOps.EXP2, (_leaf(),))))
    assert one == two and hash(one) == hash(two) and one.key() == two.key()
    other = LazyOp(BinaryOps.ADD, (shared, LazyOp(UnaryOps.EXP2, (_leaf(2),))))
    assert one != other and one.key() != other.key()
    assert LazyOp(BinaryOps.ADD, (shared, _leaf())) != LazyOp(BinaryOps.ADD, (_leaf(), shared))


def test_printing_shows_a_shared_node_once():
    shared = LazyOp(UnaryOps.EXP2, (_leaf(),))
    text = repr(LazyOp(BinaryOps.MUL, (shared, LazyOp(UnaryOps.NEG, (shared,)))))
    assert text.count("EXP2") == 1 and text.count("[0]") == 2, text


def test_replace_keeps_sharing():
    leaf, new = _leaf(), _leaf(3)
    node = leaf
    for _ in range(40):  # 2**40 paths to the leaf
        node = LazyOp(BinaryOps.ADD, (node, node))
    replaced = node.replace(leaf, new)
    assert len(replaced.walk()) == len(node.walk()) == 41
    assert replaced.walk()[0] is new


def test_a_walked_ast_is_freed_without_the_cycle_collector():
    """walk(), key() and hash() cache what they find on the node, but nothing that refers
    back to it: a dropped AST is freed by reference counting alone (a cached walk holding
    the node itself left every dropped kernel for the collector: ~250 000 objects of
    bilstm's schedule a full collection had to find, D159's session)."""
    import gc
    import weakref
    from codegen.dtypes import dtypes
    from codegen.ops import BinaryOps, BufferOps, LazyOp, MemBuffer
    from codegen.shape.shapetracker import ShapeTracker
    st = ShapeTracker.from_shape((4,))
    load = LazyOp(BufferOps.LOAD, (), MemBuffer(1, dtypes.float32, st))
    ast = LazyOp(BufferOps.STORE, (LazyOp(BinaryOps.ADD, (load, load)),),
                 MemBuffer(0, dtypes.float32, st))
    assert ast.walk()[-1] is ast and len(ast.walk()) == 3
    hash(ast), ast.key()
    alive = weakref.ref(ast)
    enabled = gc.isenabled()
    gc.disable()
    try:
        del ast
        assert alive() is None
    finally:
        if enabled:
            gc.enable()
