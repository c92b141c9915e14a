"""nn.RNN, nn.LSTM, nn.GRU and their cells against a numpy transcription of PyTorch's
documented equations (float64), gradients against central differences of it.

The reference knows nothing of lazyten's layout (one projection for the whole sequence,
biases folded together): it runs each step from the documented formulas.
"""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from lazyten import Tensor, nn


def _sigmoid(v):
    return 1 / (1 + np.exp(-v))


def ref_step(mode, x, h, c, w_ih, w_hh, b_ih, b_hh):
    xi = x @ w_ih.T + (0 if b_ih is None else b_ih)
    hh = h @ w_hh.T + (0 if b_hh is None else b_hh)
    if mode == "LSTM":
        i, f, g, o = np.split(xi + hh, 4, -1)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        return _sigmoid(o) * np.tanh(c), c
    if mode == "GRU":
        (xr, xz, xn), (hr, hz, hn) = np.split(xi, 3, -1), np.split(hh, 3, -1)
        r, z = _sigmoid(xr + hr), _sigmoid(xz + hz)
        n = np.tanh(xn + r * hn)
        return (1 - z) * n + z * h, None
    return (np.tanh(xi + hh) if mode == "tanh" else np.maximum(xi + hh, 0)), None


def ref_forward(mode, p, x, h0, c0, layers, directions, batch_first):
    """x (L, N, W) (or (N, L, W) with batch_first); p: name -> array."""
    x = x.transpose(1, 0, 2) if batch_first else x
    hs, cs = [], []
    for layer in range(layers):
        outs = []
        for d in range(directions):
            k, sfx = layer * directions + d, f"_l{layer}" + ("_reverse" if d else "")
            h, c = h0[k], None if c0 is None else c0[k]
            seq = [None] * x.shape[0]
            for t in (reversed(range(x.shape[0])) if d else range(x.shape[0])):
                h, c = ref_step(mode, x[t], h, c, p["weight_ih" + sfx], p["weight_hh" + sfx],
                                p.get("bias_ih" + sfx), p.get("bias_hh" + sfx))
                seq[t] = h
            outs.append(np.stack(seq))
            hs.append(h)
            cs.append(c)
        x = np.concatenate(outs, -1)
    out = x.transpose(1, 0, 2) if batch_first else x
    return out, np.stack(hs), (np.stack(cs) if mode == "LSTM" else None)


KINDS = {"tanh": ("RNN", {}), "relu": ("RNN", {"nonlinearity": "relu"}), "LSTM": ("LSTM", {}),
         "GRU": ("GRU", {})}


def make(mode, input_size, hidden, **kw):
    cls, extra = KINDS[mode]
    return getattr(nn, cls)(input_size, hidden, **extra, **kw)


def params64(model):
    return {name: t.numpy().astype(np.float64) for name, t in model.named_parameters()}


def run(model, x, hx):
    out = model(x if isinstance(x, Tensor) else Tensor(x.astype(np.float32)), hx)
    h = out[1][0] if isinstance(out[1], tuple) else out[1]
    c = out[1][1] if isinstance(out[1], tuple) else None
    return out[0], h, c


@settings(max_examples=25, deadline=None)
@given(mode=st.sampled_from(sorted(KINDS)), layers=st.integers(1, 2), bidirectional=st.booleans(),
       batch_first=st.booleans(), bias=st.booleans(), batched=st.booleans(),
       given_state=st.booleans(), length=st.integers(1, 5), batch=st.integers(1, 3),
       inference=st.booleans(), seed=st.integers(0, 2**16))
def test_layers_match_the_documented_equations(mode, layers, bidirectional, batch_first, bias,
                                               batched, given_state, length, batch, inference,
                                               seed):
    rng = np.random.default_rng(seed)
    model = make(mode, 3, 4, num_layers=layers, bias=bias, batch_first=batch_first,
                 bidirectional=bidirectional)
    d = 2 if bidirectional else 1
    shape = ((batch, length, 3) if batch_first else (length, batch, 3)) if batched else (length, 3)
    x = rng.standard_normal(shape)
    state_shape = (layers * d, batch, 4) if batched else (layers * d, 4)
    h0 = rng.standard_normal(state_shape) if given_state else np.zeros(state_shape)
    c0 = rng.standard_normal(state_shape) if given_state else np.zeros(state_shape)
    hx = None
    if given_state:
        h0t, c0t = Tensor(h0.astype(np.float32)), Tensor(c0.astype(np.float32))
        hx = (h0t, c0t) if mode == "LSTM" else h0t
    with Tensor.no_grad(inference):  # (no gradient recorded: a trace of the forward alone)
        out, h, c = run(model, x, hx)
    # unbatched: (L, W) is a batch of one, and batch_first does not apply
    ex, bf = (x, batch_first) if batched else (x[:, None], False)
    hb = h0 if batched else h0[:, None]
    cb = c0 if batched else c0[:, None]
    want = ref_forward(mode, params64(model), ex, hb, cb if mode == "LSTM" else None, layers, d, bf)
    want_out = want[0] if batched else want[0][:, 0]
    np.testing.assert_allclose(out.numpy(), want_out, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(h.numpy(), want[1] if batched else want[1][:, 0], rtol=1e-4, atol=1e-5)
    if mode == "LSTM":
        np.testing.assert_allclose(c.numpy(), want[2] if batched else want[2][:, 0],
                                   rtol=1e-4, atol=1e-5)
    assert out.shape == want_out.shape


@pytest.mark.parametrize("mode", sorted(KINDS))
def test_gradients_match_central_differences(mode):
    """Input, initial state and every parameter of a two-layer bidirectional layer."""
    rng = np.random.default_rng(7)
    model = make(mode, 3, 4, num_layers=2, bidirectional=True)
    x, h0, c0, wo, wh, wc = (rng.standard_normal(s) for s in
                             [(4, 2, 3), (4, 2, 4), (4, 2, 4), (4, 2, 8), (4, 2, 4), (4, 2, 4)])
    p = params64(model)
    lstm = mode == "LSTM"

    def loss(p, x, h0, c0):
        out, h, c = ref_forward(mode, p, x, h0, c0 if lstm else None, 2, 2, False)
        return (out * wo).sum() + (h * wh).sum() + ((c * wc).sum() if lstm else 0.0)

    xt, h0t, c0t = (Tensor(a.astype(np.float32), requires_grad=True) for a in (x, h0, c0))
    out, h, c = run(model, xt, (h0t, c0t) if lstm else h0t)
    total = (out * Tensor(wo.astype(np.float32))).sum() + (h * Tensor(wh.astype(np.float32))).sum()
    if lstm:
        total = total + (c * Tensor(wc.astype(np.float32))).sum()
    total.backward()

    def numeric(array, write):
        grad = np.zeros_like(array)
        for i in np.ndindex(array.shape):
            keep = array[i]
            array[i] = keep + 1e-6
            up = write()
            array[i] = keep - 1e-6
            down = write()
            array[i] = keep
            grad[i] = (up - down) / 2e-6
        return grad

    args = {"x": x, "h0": h0, "c0": c0}
    got = {"x": xt.grad, "h0": h0t.grad, "c0": c0t.grad}
    for name in ("x", "h0") + (("c0",) if lstm else ()):
        want = numeric(args[name], lambda: loss(p, args["x"], args["h0"], args["c0"]))
        np.testing.assert_allclose(got[name].numpy(), want, rtol=2e-3, atol=2e-4, err_msg=name)
    for name, t in model.named_parameters():
        want = numeric(p[name], lambda: loss(p, x, h0, c0))
        np.testing.assert_allclose(t.grad.numpy(), want, rtol=2e-3, atol=2e-4, err_msg=name)


@pytest.mark.parametrize("mode", sorted(KINDS))
@pytest.mark.parametrize("batched", [True, False])
def test_cells_are_one_step(mode, batched):
    rng = np.random.default_rng(3)
    cls = {"tanh": nn.RNNCell, "relu": nn.RNNCell, "LSTM": nn.LSTMCell, "GRU": nn.GRUCell}[mode]
    cell = cls(5, 6, nonlinearity="relu") if mode == "relu" else cls(5, 6)
    shape = (3, 5) if batched else (5,)
    x, h, c = rng.standard_normal(shape), rng.standard_normal(shape[:-1] + (6,)), \
        rng.standard_normal(shape[:-1] + (6,))
    p = params64(cell)
    want_h, want_c = ref_step(mode, x, h, c if mode == "LSTM" else None, p["weight_ih"],
                              p["weight_hh"], p["bias_ih"], p["bias_hh"])
    ht, ct = Tensor(h.astype(np.float32)), Tensor(c.astype(np.float32))
    got = cell(Tensor(x.astype(np.float32)), (ht, ct) if mode == "LSTM" else ht)
    got_h = got[0] if mode == "LSTM" else got
    np.testing.assert_allclose(got_h.numpy(), want_h, rtol=1e-4, atol=1e-5)
    if mode == "LSTM":
        np.testing.assert_allclose(got[1].numpy(), want_c, rtol=1e-4, atol=1e-5)
    none = cell(Tensor(x.astype(np.float32)))  # no state: zeros
    want0 = ref_step(mode, x, 0 * h, 0 * c if mode == "LSTM" else None, p["weight_ih"],
                     p["weight_hh"], p["bias_ih"], p["bias_hh"])[0]
    np.testing.assert_allclose((none[0] if mode == "LSTM" else none).numpy(), want0,
                               rtol=1e-4, atol=1e-5)


def test_parameter_names_shapes_and_initialisation_are_torchs():
    """torch.nn.LSTM(10, 20, num_layers=2, bidirectional=True)'s state dict, by the docs."""
    model = nn.LSTM(10, 20, num_layers=2, bidirectional=True)
    names = [f"{w}_l{k}{s}" for k in range(2) for s in ("", "_reverse")
             for w in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
    shapes = {"weight_ih_l0": (80, 10), "weight_ih_l1": (80, 40), "weight_hh_l0": (80, 20),
              "bias_ih_l0": (80,)}
    state = model.state_dict()
    assert list(state) == names
    for name, shape in shapes.items():
        assert tuple(state[name].shape) == shape and tuple(state[name + "_reverse"].shape) == shape
    bound = 1 / math.sqrt(20)
    for t in model.parameters():
        values = t.numpy()
        assert np.abs(values).max() <= bound and values.std() > bound / 4
    gru = nn.GRUCell(3, 5, bias=False)
    assert [n for n, _ in gru.named_parameters()] == ["weight_ih", "weight_hh"]
    assert tuple(gru.weight_ih.shape) == (15, 3)


def test_bad_input_names_the_shapes():
    with pytest.raises(ValueError, match=r"\(2, 3, 7\).*input_size 5"):
        nn.GRU(5, 4)(Tensor.zeros(2, 3, 7))
    with pytest.raises(ValueError, match=r"h_0 has shape \(1, 3, 5\), expected \(1, 3, 4\)"):
        nn.RNN(5, 4)(Tensor.zeros(2, 3, 5), Tensor.zeros(1, 3, 5))
    with pytest.raises(ValueError, match="tuple"):
        nn.LSTM(5, 4)(Tensor.zeros(2, 3, 5), Tensor.zeros(1, 3, 4))
    with pytest.raises(ValueError, match="2-d .* or 3-d"):
        nn.LSTM(5, 4)(Tensor.zeros(5))
    with pytest.raises(NotImplementedError, match="proj_size"):
        nn.LSTM(5, 4, proj_size=2)
    with pytest.raises(ValueError, match="nonlinearity"):
        nn.RNN(5, 4, nonlinearity="sigmoid")
    with pytest.raises(ValueError, match=r"\(N, 5\)"):
        nn.LSTMCell(5, 4)(Tensor.zeros(2, 6))
    with pytest.raises(ValueError, match=r"\(2, 0, 5\) has no time steps"):
        nn.LSTM(5, 4, batch_first=True)(Tensor.zeros(2, 0, 5))
    with pytest.raises(TypeError, match="packed sequences"):
        nn.LSTM(5, 4)([Tensor.zeros(2, 5)])


def test_dropout_between_layers_only_in_training():
    model = nn.LSTM(3, 4, num_layers=2, dropout=0.5)
    x = Tensor(np.random.default_rng(0).standard_normal((3, 2, 3)).astype(np.float32))
    model.eval()
    first, second = model(x)[0].numpy(), model(x)[0].numpy()
    np.testing.assert_array_equal(first, second)
    model.train()
    Tensor.manual_seed(1)
    a = model(x)[0].numpy()
    Tensor.manual_seed(2)
    b = model(x)[0].numpy()
    assert not np.array_equal(a, b)  # the dropout mask between the layers differs


def _cell_of(mode, model):
    """The cell module with `model`'s first-layer weights (the same Tensors)."""
    cls = {"tanh": nn.RNNCell, "relu": nn.RNNCell, "LSTM": nn.LSTMCell, "GRU": nn.GRUCell}[mode]
    cell = cls(model.input_size, model.hidden_size, **({"nonlinearity": "relu"} if mode == "relu" else {}))
    for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
        setattr(cell, name, getattr(model, name + "_l0"))
    return cell


@settings(max_examples=20, deadline=None)
@given(mode=st.sampled_from(sorted(KINDS)), length=st.integers(1, 6), batch=st.integers(1, 5),
       width=st.integers(1, 4), hidden=st.integers(1, 7), frozen=st.sampled_from(
           ["", "weight_hh_l0", "weight_ih_l0", "bias_hh_l0"]),
       x_grad=st.booleans(), h_grad=st.booleans(), realized=st.booleans(),
       seed=st.integers(0, 2 ** 16))
def test_layer_gradients_are_the_stepped_cells(mode, length, batch, width, hidden, frozen,
                                               x_grad, h_grad, realized, seed):
    """The layer's backward through time (lazyten/autograd/recurrence.py: the steps'
    gradients in one walk, W_hh's as one matmul) gives what autograd through the cell
    module stepped by hand gives, for every leaf that needs a gradient: odd sizes, some
    parameters frozen, the input or the first state without a gradient, the loss realized
    before the backward is built or not (a traced call's backward then reads the values
    its forward saved, D80, D161)."""
    rng = np.random.default_rng(seed)
    model = make(mode, width, hidden)
    if frozen:
        getattr(model, frozen).requires_grad = False
    x = rng.standard_normal((length, batch, width)).astype(np.float32)
    h0, c0, wo = (rng.standard_normal(s).astype(np.float32)
                  for s in [(batch, hidden), (batch, hidden), (length, batch, hidden)])
    lstm = mode == "LSTM"
    grads = []
    for stepped in (False, True):
        xt = Tensor(x, requires_grad=x_grad)
        ht, ct = Tensor(h0, requires_grad=h_grad), Tensor(c0, requires_grad=h_grad)
        if stepped:
            cell, state, outs = _cell_of(mode, model), (ht, ct) if lstm else ht, []
            for t in range(length):
                state = cell(xt[t], state)
                outs.append(state[0] if lstm else state)
            out, last = Tensor.stack(outs, 0), state
        else:
            out, last = model(xt, (ht[None], ct[None]) if lstm else ht[None])
        loss = (out * Tensor(wo)).sum() + (last[1].sum() if lstm else 0)
        for p in model.parameters():
            p.grad = None
        if realized:
            loss.realize()
        loss.backward()
        leaves = [xt, ht, ct] + list(model.parameters())
        grads.append([None if t.grad is None else t.grad.numpy() for t in leaves])
    for i, (got, want) in enumerate(zip(*grads)):
        assert (got is None) == (want is None), i
        if got is not None:
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=str(i))


@pytest.mark.parametrize("mode", ["LSTM", "tanh"])
def test_the_recurrent_weights_gradient_is_one_matmul(mode):
    """Where a step adds h W_hh^T to its input projection (RNN, LSTM), W_hh's gradient is
    one reduce over every step and the batch (sum_t dx_t^T h_(t-1)); autograd through the
    steps made one per step, each over the batch alone, and a chain of adds."""
    from lazyten.schedule import create_schedule
    model = make(mode, 3, 5)
    x = Tensor(np.random.default_rng(0).standard_normal((6, 2, 3)).astype(np.float32))
    model(x)[0].square().sum().backward()
    w = model.weight_hh_l0
    items = create_schedule([w.grad.lazydata])
    reduces = [item for item in items if item.ast is not None  # (kept dims: (G, H, 1))
               and tuple(s for s in item.out.shape if s != 1) == w.shape
               and any(op.op.name == "SUM" for op in item.ast.walk())]
    assert len(reduces) == 1


def _graph_size(*roots):
    """The unrealized bases under `roots` (LazyBuffers), views walked through."""
    seen, stack, size = set(), list(roots), 0
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node._base is not None:
            stack.append(node._base)
        elif node.realized is None:
            size += 1
            stack.extend(node.src)
    return size


@pytest.mark.parametrize("mode", sorted(KINDS))
def test_a_layers_graph_does_not_grow_with_its_length(mode):
    """A layer's sequence is one traced call (D161): its forward is one graph node and each
    gradient one more, whatever the number of steps, so building a training step's graph
    (and the schedule cache's walk of it) costs the same for 3 steps as for 12. Each step
    built its cell's node forward and its gradients' backward before."""
    rng = np.random.default_rng(0)
    sizes = []
    for length in (3, 12):
        model = make(mode, 3, 4, num_layers=2, bidirectional=True)
        x = Tensor(rng.standard_normal((length, 2, 3)).astype(np.float32), requires_grad=True)
        out = model(x)[0]
        forward = _graph_size(out.lazydata)
        out.square().sum().backward()
        grads = [t.grad.lazydata for t in [x, *model.parameters()]]
        sizes.append((forward, _graph_size(*grads)))
    assert sizes[0] == sizes[1]


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_a_traced_layer_under_jit_and_accumulating_is_the_layer_built_step_by_step(mode):
    """D161's traced layer against the same layer with tracing off (GRAPH_TRACE=0: every
    step built as written): a two-layer bidirectional batch-first layer with a first
    state that needs a gradient, gradients accumulated over two backward passes, and a
    jit-compiled training step replayed on new inputs."""
    from codegen.helpers import Context
    from lazyten import jit

    def run(trace):
        got = []
        with Context(GRAPH_TRACE=trace):
            Tensor.manual_seed(0)
            model = make(mode, 5, 7, num_layers=2, bidirectional=True, batch_first=True)
            rng = np.random.default_rng(1)
            x = Tensor(rng.standard_normal((3, 6, 5)).astype(np.float32), requires_grad=True)
            h0 = Tensor(rng.standard_normal((4, 3, 7)).astype(np.float32), requires_grad=True)
            for scale in (1.0, 0.5):  # (the second backward adds to the gradients)
                out, _ = model(x * scale, (h0, h0 * 0.5) if mode == "LSTM" else h0)
                (out * out).sum().backward()
            got += [x.grad.numpy(), h0.grad.numpy()] + [p.grad.numpy() for p in model.parameters()]
            cell = make(mode, 5, 7)
            params = list(cell.parameters())

            @jit
            def step(seq):
                for p in params:
                    p.grad = None
                loss = cell(seq)[0].square().mean()
                loss.backward()
                return loss.realize(), *[p.grad.realize() for p in params]
            for _ in range(4):  # (captured on the second call, replayed after)
                seq = Tensor(rng.standard_normal((6, 3, 5)).astype(np.float32))
                got += [t.numpy() for t in step(seq)]
        return got
    for traced, built in zip(run(1), run(0)):
        np.testing.assert_allclose(traced, built, rtol=1e-4, atol=1e-5)
