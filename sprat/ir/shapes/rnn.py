"""Shape functions: recurrent ops (RNN, GRU, LSTM), ONNX opset 14 forms (``layout`` attribute).

Outputs, for ``layout=0``: Y (seq, num_directions, batch, hidden), Y_h and Y_c
(num_directions, batch, hidden); for ``layout=1``: Y (batch, seq, num_directions, hidden), Y_h and
Y_c (batch, num_directions, hidden). Every output is returned; a node uses the ones it names.
"""

from __future__ import annotations

from ...errors import ShapeError

_DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}


def _rnn_shapes(ins, gates: int, n_outputs: int, direction: str, hidden_size, layout: int):
    x, w, r = ins[0], ins[1], ins[2]
    if direction not in _DIRECTIONS:
        raise ShapeError(f"unknown direction {direction!r}; expected forward, reverse or "
                         "bidirectional")
    nd = _DIRECTIONS[direction]
    if len(x.shape) != 3:
        raise ShapeError(f"X must be 3-D, got {x.shape}")
    seq, batch, inp = (x.shape[1], x.shape[0], x.shape[2]) if layout else x.shape
    h = int(hidden_size) if hidden_size is not None else r.shape[-1]
    if tuple(w.shape) != (nd, gates * h, inp):
        raise ShapeError(f"W shape {w.shape}, expected {(nd, gates * h, inp)}")
    if tuple(r.shape) != (nd, gates * h, h):
        raise ShapeError(f"R shape {r.shape}, expected {(nd, gates * h, h)}")
    b = ins[3] if len(ins) > 3 else None
    if b is not None and tuple(b.shape) != (nd, 2 * gates * h):
        raise ShapeError(f"B shape {b.shape}, expected {(nd, 2 * gates * h)}")
    if layout:
        y, state = (batch, seq, nd, h), (batch, nd, h)
    else:
        y, state = (seq, nd, batch, h), (nd, batch, h)
    return [(y, x.dtype)] + [(state, x.dtype)] * (n_outputs - 1)


def lstm(ins, activation_alpha=None, activation_beta=None, activations=None, clip=None,
         direction="forward", hidden_size=None, input_forget=0, layout=0):
    """LSTM-14: X, W (D, 4H, I), R (D, 4H, H), B?, sequence_lens?, initial_h?, initial_c?, P?
    -> Y, Y_h, Y_c."""
    return _rnn_shapes(ins, 4, 3, direction, hidden_size, layout)


def gru(ins, activation_alpha=None, activation_beta=None, activations=None, clip=None,
        direction="forward", hidden_size=None, layout=0, linear_before_reset=0):
    """GRU-14: X, W (D, 3H, I), R (D, 3H, H), B?, sequence_lens?, initial_h? -> Y, Y_h."""
    return _rnn_shapes(ins, 3, 2, direction, hidden_size, layout)


def rnn(ins, activation_alpha=None, activation_beta=None, activations=None, clip=None,
        direction="forward", hidden_size=None, layout=0):
    """RNN-14: X, W (D, H, I), R (D, H, H), B?, sequence_lens?, initial_h? -> Y, Y_h."""
    return _rnn_shapes(ins, 1, 2, direction, hidden_size, layout)


SHAPES = {
    "LSTM": lstm,
    "GRU": gru,
    "RNN": rnn,
}
