"""Reads of padding alone (D159): a base read through a view with no valid element (a
pad shrunk back to its padding) is the constant 0 in the kernel, and a `where` whose
condition is then one constant keeps only the side it picks. Such a read neither makes
the buffer an input nor pins where the kernel's loads are rebased (D120), so a recurrent
layer's per-step kernels are the same kernel at every step."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from codegen.ops import BufferOps
from lazyten import Tensor, nn
from lazyten.schedule import create_schedule


def kernels(*ts: Tensor) -> list:
    return [item for item in create_schedule([t.lazydata for t in ts]) if item.ast is not None]


def dead_leaves(items: list) -> list:
    """The LOADs and CONSTs of these kernels that read through a view with no valid element."""
    return [node for item in items for node in item.ast.walk()
            if node.op in (BufferOps.LOAD, BufferOps.CONST)
            and any(v.invalid for v in node.arg.st.views)]


def test_a_read_of_padding_alone_is_no_input():
    """x padded on the right and read only where its padding lies: x is no kernel's input,
    and the `where` over a padded mask read there keeps its other side."""
    rng = np.random.default_rng(0)
    xn, zn = rng.standard_normal((8, 64)).astype(np.float32), rng.standard_normal((8, 64)).astype(np.float32)
    x, z = Tensor(xn).realize(), Tensor(zn).realize()
    mask = Tensor(np.ones((8, 64), np.bool_)).pad(((0, 0), (0, 64)))
    joined = x.pad(((0, 0), (0, 64))) + z.pad(((0, 0), (64, 0)))
    y = joined[:, 64:] * 2 + mask.where(x.pad(((0, 0), (0, 64))).exp(), 1.0)[:, 64:]
    items = kernels(y)
    assert not dead_leaves(items)
    assert all(b is not x.lazydata.base for item in items for b in item.inputs)
    np.testing.assert_allclose(y.numpy(), zn * 2 + 1, rtol=1e-6)


@settings(max_examples=40, deadline=None)
@given(widths=st.lists(st.integers(1, 9), min_size=2, max_size=4), data=st.data(),
       op=st.sampled_from(["exp", "add1", "mul2", "where"]))
def test_pieces_of_a_join_read_back_match_numpy(widths, data, op):
    """A `cat` of pieces, an op over it (one that maps 0 to 0 or not, a `where` on a mask
    joined the same way), read back in slices that may lie inside one piece: no kernel
    reads through a view with nothing valid, and the values are numpy's."""
    rng = np.random.default_rng(sum(widths) * 7 + len(widths))
    parts = [rng.standard_normal((3, w)).astype(np.float32) for w in widths]
    masks = [rng.random((3, w)) > 0.5 for w in widths]
    joined = Tensor.cat(*[Tensor(p) for p in parts], dim=1)
    joinedn = np.concatenate(parts, axis=1)
    if op == "exp":
        body, bodyn = joined.exp(), np.exp(joinedn)
    elif op == "add1":
        body, bodyn = joined + 1, joinedn + 1
    elif op == "mul2":
        body, bodyn = joined * 2, joinedn * 2
    else:
        mask = Tensor.cat(*[Tensor(m) for m in masks], dim=1)
        body, bodyn = mask.where(joined, -joined), np.where(np.concatenate(masks, axis=1), joinedn, -joinedn)
    total = sum(widths)
    start = data.draw(st.integers(0, total - 1))
    stop = data.draw(st.integers(start + 1, total))
    out = (body[:, start:stop] * 3).pad(((0, 0), (1, 1)))[:, 1:-1] + 1
    assert not dead_leaves(kernels(out))
    np.testing.assert_allclose(out.numpy(), bodyn[:, start:stop] * 3 + 1, rtol=1e-5, atol=1e-6)


def _lstm_backward_kernels(steps: int) -> set:
    """The distinct kernels (rebased ASTs) of a bidirectional LSTM's training backward over
    `steps` time steps."""
    Tensor.manual_seed(0)
    lstm = nn.LSTM(8, 16, bidirectional=True)
    x = Tensor(np.random.default_rng(1).standard_normal((steps, 2, 8)).astype(np.float32),
               requires_grad=True)
    out, _ = lstm(x)
    (out * out).sum().backward()
    grads = [x.grad] + [p.grad for p in lstm.parameters()]
    return {item.ast for item in kernels(*grads)}


def test_a_recurrent_layers_kernels_do_not_grow_with_its_steps():
    """Each step of a recurrence reads its inputs at offsets that move with the step, and
    some of its kernels read a chunk's gradient where it is all padding: with those reads
    the zero they are, the rebased kernels of 24 steps are those of 16 (the steps near
    either end differ; before, 85 and 123: the padding's loads sat at offset 0 and kept
    every step's offsets in its kernel)."""
    assert len(_lstm_backward_kernels(24)) == len(_lstm_backward_kernels(16))


def test_a_scalar_read_through_an_empty_padded_view_schedules():
    """A scalar's gradient through an empty slice of a tile: a 0-d view whose padding sits
    in a view below the last, joined with the scalar's other gradient. The scheduler's
    count of a join's pieces indexed the 0-d view's axes and raised IndexError (the
    fuzzer, FUZZ_SEED=3881); the empty slice's gradient is 0."""
    x = Tensor(np.array(1.5, dtype=np.float64), requires_grad=True)
    empty = x.tile((1, 1))[-2:-2:-1, -1].log2()
    w = np.float64(0.75)
    loss = (x * Tensor(w)).sum() + (empty * Tensor(np.zeros((0,)))).sum()
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), w)
    assert empty.numpy().shape == (0,)
