"""Recurrent layers: RNN, LSTM and GRU, and their one-step cells, with torch.nn's
arguments, parameter names (`weight_ih_l0`, `weight_hh_l0`, `bias_ih_l0`, `bias_hh_l0`,
`..._reverse` for the second direction; a cell's `weight_ih`, ...), gate order (LSTM: input,
forget, cell, output; GRU: reset, update, new), shapes and initialisation (every weight
and bias uniform in +-1/sqrt(hidden_size)), so a torch state dict loads as it is.

A layer's input projection is one matmul over every time step (x @ W_ih^T + biases for
the whole sequence), and only h @ W_hh^T runs step by step: a step costs one small matmul
and the gates' elementwise math, as in PyTorch's own kernels. LSTM's proj_size is not
supported.
"""
from __future__ import annotations
import math
from typing import Any

from lazyten.autograd.composite import Composite
from lazyten.autograd.recurrence import Recurrence
from lazyten.nn.module import Module
from lazyten.tensor import Tensor

__all__ = ["RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell"]

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _uniform(shape: tuple[int, ...], bound: float) -> Tensor:
    return Tensor.uniform(*shape, low=-bound, high=bound, requires_grad=True)


def _halves(state: Tensor) -> tuple[Tensor, Tensor]:
    """h and c of an LSTM state [h | c]."""
    h, c = state.split(state.shape[-1] // 2, -1)
    return h, c


def _biases(mode: str, b_ih: Tensor | None, b_hh: Tensor | None
            ) -> tuple[Tensor | None, Tensor | None]:
    """The biases a step adds: both in the input projection, but GRU's b_hh, which stays
    inside the reset gate."""
    if b_ih is not None and b_hh is not None and mode != "GRU":
        return b_ih + b_hh, None
    return b_ih, b_hh


def _lstm_cell(x: Tensor, state: Tensor, w_hh: Tensor) -> Tensor:
    """One LSTM step on state [h | c] (N, 2H): the next [h' | c']. `x` is this step's input
    projection, x_t W_ih^T + b_ih + b_hh."""
    h, c = _halves(state)
    i, f, g, o = (x + h.linear(w_hh)).chunk(4, -1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return (o.sigmoid() * c.tanh()).cat(c, dim=-1)


def _gru_cell(x: Tensor, h: Tensor, w_hh: Tensor, *b_hh: Tensor) -> Tensor:
    """One GRU step: `x` is x_t W_ih^T + b_ih; b_hh (if any) stays inside the reset gate."""
    xr, xz, xn = x.chunk(3, -1)
    hr, hz, hn = h.linear(w_hh, b_hh[0] if b_hh else None).chunk(3, -1)
    r, z = (xr + hr).sigmoid(), (xz + hz).sigmoid()
    n = (xn + r * hn).tanh()
    return n + z * (h - n)  # (1 - z) * n + z * h


def _rnn_cell(x: Tensor, h: Tensor, w_hh: Tensor, relu: bool) -> Tensor:
    pre = x + h.linear(w_hh)
    return pre.relu() if relu else pre.tanh()


def _rnn_tanh_cell(x: Tensor, h: Tensor, w_hh: Tensor) -> Tensor:
    return _rnn_cell(x, h, w_hh, relu=False)


def _rnn_relu_cell(x: Tensor, h: Tensor, w_hh: Tensor) -> Tensor:
    return _rnn_cell(x, h, w_hh, relu=True)


# each mode's step, a function of (x_t, state, W_hh[, b_hh]) (module-level: a Composite's
# body is traced once per shapes and arguments)
_CELLS = {"LSTM": _lstm_cell, "GRU": _gru_cell, "RNN_TANH": _rnn_tanh_cell,
          "RNN_RELU": _rnn_relu_cell}


def _step(mode: str, x: Tensor, state: Tensor, w_hh: Tensor, b_hh: Tensor | None) -> Tensor:
    """One time step as one Composite (a traced call: one graph node forward, one per
    gradient backward); `state` is h, or [h | c] for an LSTM; b_hh is given only where the
    cell takes it (a GRU's, `_biases`)."""
    return x.apply(Composite, state, w_hh, *([] if b_hh is None else [b_hh]), body=_CELLS[mode])


def _hidden_size(hidden_size: int, input_size: int) -> None:
    if not isinstance(hidden_size, int) or hidden_size <= 0 or input_size <= 0:
        raise ValueError(f"input_size {input_size} and hidden_size {hidden_size} must be "
                         f"positive integers")


def _mode(name: str, nonlinearity: str) -> str:
    if name != "RNN":
        return name
    if nonlinearity not in ("tanh", "relu"):
        raise ValueError(f"unknown nonlinearity {nonlinearity!r} (tanh or relu)")
    return f"RNN_{nonlinearity.upper()}"


class _RNNBase(Module):
    """A stack of `num_layers` recurrent layers, each one or two directions; the input
    (L, N, input_size), (N, L, input_size) with batch_first, or unbatched (L, input_size)."""
    name = ""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 nonlinearity: str = "tanh", bias: bool = True, batch_first: bool = False,
                 dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0):
        super().__init__()
        _hidden_size(hidden_size, input_size)
        if not isinstance(num_layers, int) or num_layers <= 0:
            raise ValueError(f"num_layers must be a positive integer, got {num_layers}")
        if not 0 <= dropout <= 1:
            raise ValueError(f"dropout must be in [0, 1], got {dropout}")
        if proj_size:
            raise NotImplementedError("LSTM's proj_size is not supported")
        self.mode = _mode(self.name, nonlinearity)
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.bidirectional, self.proj_size = bidirectional, proj_size
        directions = 2 if bidirectional else 1
        gates, bound = _GATES[self.mode] * hidden_size, 1 / math.sqrt(hidden_size)
        self._flat_weights_names: list[str] = []
        for layer in range(num_layers):
            for direction in range(directions):
                suffix = f"_l{layer}" + ("_reverse" if direction else "")
                width = input_size if layer == 0 else hidden_size * directions
                shapes: list[tuple[str, tuple[int, ...]]] = [
                    ("weight_ih", (gates, width)), ("weight_hh", (gates, hidden_size))]
                if bias:
                    shapes += [("bias_ih", (gates,)), ("bias_hh", (gates,))]
                for name, shape in shapes:
                    setattr(self, name + suffix, _uniform(shape, bound))
                    self._flat_weights_names.append(name + suffix)

    @property
    def all_weights(self) -> list[list[Tensor]]:
        """Each layer and direction's [weight_ih, weight_hh(, bias_ih, bias_hh)]."""
        per = 4 if self.bias else 2
        names = self._flat_weights_names
        return [[getattr(self, n) for n in names[i:i + per]] for i in range(0, len(names), per)]

    def flatten_parameters(self) -> None:
        """PyTorch's cuDNN weight packing: nothing to do here (kept so code that calls it runs)."""

    def forward(self, input: Tensor, hx: Any = None):
        if not isinstance(input, Tensor):
            raise TypeError(f"{type(self).__name__} expects a Tensor input, got "
                            f"{type(input).__name__} (packed sequences are not supported)")
        if input.ndim not in (2, 3):
            raise ValueError(f"{type(self).__name__} expects a 2-d (unbatched) or 3-d input, "
                             f"got shape {input.shape}")
        batched = input.ndim == 3
        x = input if batched else input.unsqueeze(1)
        if self.batch_first and batched:
            x = x.transpose(0, 1)
        if x.shape[2] != self.input_size:
            raise ValueError(f"{type(self).__name__}: input of shape {input.shape} has "
                             f"{x.shape[2]} features, expected input_size {self.input_size}")
        if x.shape[0] == 0:  # (as PyTorch: a recurrence needs a step)
            raise ValueError(f"{type(self).__name__}: input of shape {input.shape} has no "
                             f"time steps (a sequence length of at least 1 is needed)")
        h0, c0 = self._initial(hx, x, batched)
        directions, weights = 2 if self.bidirectional else 1, self.all_weights
        last_h: list[Tensor] = []
        last_c: list[Tensor] = []
        for layer in range(self.num_layers):
            outs = []
            for direction in range(directions):
                k = layer * directions + direction
                seq, h, c = self._layer(x, weights[k], h0[k],
                                        None if c0 is None else c0[k], reverse=direction == 1)
                outs.append(seq)
                last_h.append(h)
                if c is not None:
                    last_c.append(c)
            x = outs[0] if directions == 1 else outs[0].cat(outs[1], dim=2)
            if self.dropout and self.training and layer < self.num_layers - 1:
                with Tensor.train(True):  # the module's mode, whatever the thread's is
                    x = x.dropout(self.dropout)
        out = x.transpose(0, 1) if self.batch_first and batched else x
        h_n = Tensor.stack(last_h, 0)
        c_n = Tensor.stack(last_c, 0) if last_c else None
        if not batched:
            out, h_n = out.squeeze(1), h_n.squeeze(1)
            c_n = None if c_n is None else c_n.squeeze(1)
        return (out, (h_n, c_n)) if self.mode == "LSTM" else (out, h_n)

    def _initial(self, hx: Any, x: Tensor, batched: bool) -> tuple[Tensor, Tensor | None]:
        """h_0 (and c_0), each (num_layers * directions, N, hidden_size): given or zeros."""
        directions = 2 if self.bidirectional else 1
        shape = (self.num_layers * directions, x.shape[1], self.hidden_size)
        lstm = self.mode == "LSTM"
        if hx is None:
            zeros = Tensor.zeros(*shape, dtype=x.dtype, device=x.device)
            return zeros, (zeros if lstm else None)
        given = list(hx) if lstm else [hx]
        if lstm and len(given) != 2:
            raise ValueError("LSTM's hx is a tuple (h_0, c_0)")
        states = []
        for name, t in zip(("h_0", "c_0"), given):
            t = t if batched else t.unsqueeze(1)
            if tuple(t.shape) != shape:
                want = shape if batched else (shape[0], shape[2])
                raise ValueError(f"{type(self).__name__}: {name} has shape {tuple(t.shape)}, "
                                 f"expected {want}")
            states.append(t)
        return states[0], (states[1] if lstm else None)

    def _layer(self, x: Tensor, weights: list[Tensor], h: Tensor, c: Tensor | None,
               reverse: bool) -> tuple[Tensor, Tensor, Tensor | None]:
        """One direction of one layer over the sequence x (L, N, width): (outputs (L, N,
        hidden_size), last h, last c)."""
        w_ih, w_hh = weights[0], weights[1]
        b_ih, b_hh = _biases(self.mode, *((weights[2], weights[3]) if self.bias else
                                          (None, None)))
        state = h if c is None else h.cat(c, dim=-1)
        # every step's projection in one matmul, then the steps as one Recurrence
        states = x.linear(w_ih, b_ih).apply(
            Recurrence, state, w_hh, *([] if b_hh is None else [b_hh]), cell=_CELLS[self.mode],
            hidden=self.hidden_size, additive=self.mode != "GRU", reverse=reverse)
        last = states[0 if reverse else -1]
        if c is None:
            return states, last, None
        h, c = _halves(last)
        return _halves(states)[0], h, c

    def extra_repr(self) -> str:
        text = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            text += f", num_layers={self.num_layers}"
        if self.mode == "RNN_RELU":
            text += ", nonlinearity='relu'"
        for name, default in (("bias", True), ("batch_first", False), ("dropout", 0.0),
                              ("bidirectional", False)):
            if getattr(self, name) != default:
                text += f", {name}={getattr(self, name)}"
        return text


class RNN(_RNNBase):
    """Elman RNN: h_t = tanh (or relu) of x_t W_ih^T + b_ih + h_(t-1) W_hh^T + b_hh.
    forward(input, h_0=None) -> (output, h_n)."""
    name = "RNN"


class LSTM(_RNNBase):
    """LSTM: gates i, f, g, o from x_t W_ih^T + b_ih + h W_hh^T + b_hh; c' = f c + i g,
    h' = o tanh(c'). forward(input, (h_0, c_0)=None) -> (output, (h_n, c_n))."""
    name = "LSTM"

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 proj_size: int = 0):
        super().__init__(input_size, hidden_size, num_layers, "tanh", bias, batch_first,
                         dropout, bidirectional, proj_size)


class GRU(_RNNBase):
    """GRU: r, z from x and h; n = tanh(x W_in^T + b_in + r (h W_hn^T + b_hn));
    h' = (1 - z) n + z h. forward(input, h_0=None) -> (output, h_n)."""
    name = "GRU"

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False):
        super().__init__(input_size, hidden_size, num_layers, "tanh", bias, batch_first,
                         dropout, bidirectional)


class _CellBase(Module):
    """One step of a recurrent layer: input (N, input_size) or unbatched (input_size,)."""
    name = ""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh"):
        super().__init__()
        _hidden_size(hidden_size, input_size)
        self.mode = _mode(self.name, nonlinearity)
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        gates, bound = _GATES[self.mode] * hidden_size, 1 / math.sqrt(hidden_size)
        self.weight_ih = _uniform((gates, input_size), bound)
        self.weight_hh = _uniform((gates, hidden_size), bound)
        self.bias_ih = _uniform((gates,), bound) if bias else None
        self.bias_hh = _uniform((gates,), bound) if bias else None

    def forward(self, input: Tensor, hx: Any = None):
        if input.ndim not in (1, 2) or input.shape[-1] != self.input_size:
            raise ValueError(f"{type(self).__name__} expects an input of shape (N, "
                             f"{self.input_size}) or ({self.input_size},), got {input.shape}")
        batched = input.ndim == 2
        x = input if batched else input.unsqueeze(0)
        lstm = self.mode == "LSTM"
        shape = (x.shape[0], self.hidden_size)
        if hx is None:
            zeros = Tensor.zeros(*shape, dtype=x.dtype, device=x.device)
            states = [zeros, zeros] if lstm else [zeros]
        else:
            states = [t if batched else t.unsqueeze(0) for t in (hx if lstm else [hx])]
            if len(states) != (2 if lstm else 1) or any(tuple(t.shape) != shape for t in states):
                raise ValueError(f"{type(self).__name__}: hidden state shapes "
                                 f"{[tuple(t.shape) for t in states]}, expected {shape}")
        b_ih, b_hh = _biases(self.mode, self.bias_ih, self.bias_hh)
        state = states[0].cat(states[1], dim=-1) if lstm else states[0]
        h = _step(self.mode, x.linear(self.weight_ih, b_ih), state, self.weight_hh, b_hh)
        h, c = _halves(h) if lstm else (h, None)
        if not batched:
            h, c = h.squeeze(0), (None if c is None else c.squeeze(0))
        return (h, c) if lstm else h

    def extra_repr(self) -> str:
        text = f"{self.input_size}, {self.hidden_size}" + ("" if self.bias else ", bias=False")
        return text + (", nonlinearity='relu'" if self.mode == "RNN_RELU" else "")


class RNNCell(_CellBase):
    """h' = tanh (or relu) of x W_ih^T + b_ih + h W_hh^T + b_hh."""
    name = "RNN"


class LSTMCell(_CellBase):
    """One LSTM step: forward(input, (h, c)=None) -> (h', c')."""
    name = "LSTM"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
        super().__init__(input_size, hidden_size, bias)


class GRUCell(_CellBase):
    """One GRU step: forward(input, h=None) -> h'."""
    name = "GRU"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
        super().__init__(input_size, hidden_size, bias)
