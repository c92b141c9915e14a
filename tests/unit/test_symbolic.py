"""Symbolic index expressions: brute-force semantics, bound soundness and key simplifications."""
import itertools

import pytest
from hypothesis import given, settings, strategies as st

from codegen.shape.symbolic import (AndNode, DivNode, LtNode, ModNode, MulNode, NumNode, SumNode,
                                    Variable, and_nodes, sum_nodes, sym_infer)

NAMES = ("a", "b", "c")


@st.composite
def variables(draw):
    """Three variables with small, possibly negative ranges."""
    out = []
    for name in NAMES:
        lo = draw(st.integers(-8, 8))
        out.append(Variable(name, lo, lo + draw(st.integers(1, 6))))
    return out


def build(data, vs, depth):
    """A random expression as (node, reference function of an env dict)."""
    if depth == 0 or data.draw(st.integers(0, 3)) == 0:
        if data.draw(st.booleans()):
            v = data.draw(st.sampled_from(vs))
            return v, lambda env, name=v.expr: env[name]
        k = data.draw(st.integers(-9, 9))
        return NumNode(k), lambda env: k
    op = data.draw(st.sampled_from(["add", "addi", "radd", "sub", "rsub", "neg", "mul", "rmul",
                                    "div", "mod", "lt", "ltn", "ge", "gen", "and", "sum"]))
    x, fx = build(data, vs, depth - 1)
    if op in ("add", "sub", "ltn", "gen", "and", "sum"):
        y, fy = build(data, vs, depth - 1)
    k = data.draw(st.integers(-9, 9))
    d = data.draw(st.integers(1, 7))
    if op == "add":
        return x + y, lambda e: fx(e) + fy(e)
    if op == "addi":
        return x + k, lambda e: fx(e) + k
    if op == "radd":
        return k + x, lambda e: k + fx(e)
    if op == "sub":
        return x - y, lambda e: fx(e) - fy(e)
    if op == "rsub":
        return k - x, lambda e: k - fx(e)
    if op == "neg":
        return -x, lambda e: -fx(e)
    if op == "mul":
        return x * k, lambda e: fx(e) * k
    if op == "rmul":
        return k * x, lambda e: k * fx(e)
    if op == "div":
        return x // d, lambda e: fx(e) // d
    if op == "mod":
        return x % d, lambda e: fx(e) % d
    if op == "lt":
        return x.lt(k), lambda e: int(fx(e) < k)
    if op == "ltn":
        return x.lt(y), lambda e: int(fx(e) < fy(e))
    if op == "ge":
        return x.ge(k), lambda e: int(fx(e) >= k)
    if op == "gen":
        return x.ge(y), lambda e: int(fx(e) >= fy(e))
    if op == "and":  # AndNode is meant for 0/1 conditions
        cx, cy = x.lt(k), y.ge(d)
        return and_nodes([cx, cy]), lambda e: int(fx(e) < k and fy(e) >= d)
    return sum_nodes([x, y, k]), lambda e: fx(e) + fy(e) + k


def envs(vs):
    """Every assignment of the variables within their bounds."""
    for vals in itertools.product(*(range(v.min, v.max + 1) for v in vs)):
        yield dict(zip(NAMES, vals))


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_random_expressions_match_python(data):
    vs = data.draw(variables())
    node, ref = build(data, vs, 4)
    text = str(node)
    for env in envs(vs):
        want = ref(env)
        assert node.eval(env) == want, (text, env)
        assert sym_infer(node, env) == want
        assert node.min <= want <= node.max, (text, env, node.min, node.max)
        assert int(eval(text, {}, dict(env))) == want, (text, env)  # default render is Python


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_substitute_matches_eval(data):
    vs = data.draw(variables())
    node, ref = build(data, vs, 3)
    a = vs[0]
    value = data.draw(st.integers(a.min, a.max))
    narrow = Variable("d", a.min, a.max)  # same range, new name
    subst_const, subst_var = node.substitute({a: value}), node.substitute({a: narrow})
    assert "a" not in {v.expr for v in subst_const.vars() | subst_var.vars()}
    for env in envs(vs):
        env_a = {**env, "a": value}
        assert subst_const.eval(env) == ref(env_a)
        assert subst_var.eval({**env, "d": env["a"]}) == ref(env)


def test_key_simplifications():
    i, j = Variable("i", 0, 7), Variable("j", 0, 3)
    assert str((i * 4 + j) // 4) == "i"  # keeps kernels free of div/mod on aligned indexes
    assert str((i * 4 + j) % 4) == "j"
    assert str(i * 4 + j) == "((i*4)+j)"
    assert str(i * 4 + i * 2) == "(i*6)"
    assert str((i * 2) * 3) == "(i*6)"
    assert str(i * 0) == "0" and (i * 1) is i and (i + 0) is i
    assert str((i // 2) // 3) == "(i//6)"
    assert str((i % 12) % 4) == "(i%4)"
    assert str(j // 4) == "0" and (j % 4) is j
    assert str((i * 8 + j * 2) // 2) == "((i*4)+j)"
    assert str((i * 4 + j) // 2) == "((i*2)+(j//2))"
    assert str(i + 3 - 3) == "i"
    assert str(3 - i) == "((i*-1)+3)"
    assert str(i.lt(5)) == "(i<5)"
    assert str(and_nodes([i.lt(5), j.lt(2)])) == "((i<5) and (j<2))"
    assert str(and_nodes([i.lt(5), i.lt(3)])) == "(i<3)"
    assert (i * 4 + j).lt(8) == i.lt(2)  # mask on a merged axis stays one compare
    assert ((i // 2).lt(3)) == i.lt(6)
    # a remainder that never carries: (6a + b) with 0 <= b < 6, over 12 (windowed views)
    a, b = Variable("a", 0, 9), Variable("b", 0, 5)
    assert str((a * 6 + b) // 12) == "(a//2)"
    assert str((a * 6 + b) % 12) == "(((a%2)*6)+b)"
    # conv windows built by repeat: 29*kx over 28 is 28*kx + kx, and kx + ox never carries
    ox, kx, oy = Variable("ox", 0, 23), Variable("kx", 0, 4), Variable("oy", 0, 23)
    flat = oy * 168 + ox + kx * 29
    assert str(flat % 28) == "(ox+kx)"
    assert str(flat // 28) == "((oy*6)+kx)"


def test_constants_and_bounds_decide():
    i = Variable("i", 0, 7)
    assert isinstance(sum_nodes([1, 2, NumNode(3)]), NumNode) and sum_nodes([1, 2]).b == 3
    assert i.lt(8) == NumNode(1) and i.lt(0) == NumNode(0) and i.ge(0) == NumNode(1)
    assert and_nodes([NumNode(1), i.lt(3)]) == i.lt(3)
    assert and_nodes([NumNode(0), i.lt(3)]) == NumNode(0)
    assert and_nodes([]) == NumNode(1)
    assert Variable("z", 2, 2) == NumNode(2)
    neg = Variable("n", -4, -1)
    assert neg // 4 == NumNode(-1) and str(neg % 4) == "(n+4)"
    assert (neg * -3).min == 3 and (neg * -3).max == 12
    m = Variable("m", -5, 5)
    assert isinstance(m // 3, DivNode) and (m // 3).min == -2 and (m // 3).max == 1
    assert isinstance(m % 3, ModNode) and ((m % 3).min, (m % 3).max) == (0, 2)


def test_structure_equality_and_hash():
    i, j = Variable("i", 0, 7), Variable("j", 0, 3)
    e1, e2 = i * 4 + j, i * 4 + j
    assert e1 == e2 and hash(e1) == hash(e2) and {e1: 1}[e2] == 1
    assert e1 != i * 4 + j + 1 and Variable("i", 0, 8) != i
    assert isinstance(e1, SumNode) and isinstance(i * 3, MulNode) and isinstance(i.lt(3), LtNode)
    assert isinstance(and_nodes([i.lt(3), j.lt(2)]), AndNode)
    assert e1.vars() == {i, j} and NumNode(3).vars() == set()


def test_render_with_custom_table():
    i, j = Variable("i", 0, 7), Variable("j", 0, 3)
    ops = {NumNode: lambda n, ops, ctx: n.b, Variable: lambda n, ops, ctx: ctx[n.expr],
           MulNode: lambda n, ops, ctx: n.a.render(ops, ctx) * n.b,
           SumNode: lambda n, ops, ctx: sum(c.render(ops, ctx) for c in n.nodes)}
    assert (i * 4 + j + 2).render(ops, {"i": 3, "j": 1}) == 15


def test_invalid_operations_raise():
    i, j = Variable("i", 0, 7), Variable("j", 0, 3)
    with pytest.raises(TypeError):
        i * j
    assert str(i * NumNode(3)) == "(i*3)" and str(NumNode(3) * i) == "(i*3)"
    with pytest.raises(ValueError):
        i // 0
    with pytest.raises(ValueError):
        i % -2
    with pytest.raises(TypeError):
        i // j
