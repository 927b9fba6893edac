"""Reference kernels: recurrent ops (RNN, GRU, LSTM), ONNX opset 14 semantics.

The input projection ``X @ W^T + Wb`` is one matmul over all time steps; the recurrence is a
Python loop over time (inherently sequential), vectorised over the batch. Computation is in
float64 and cast back to X's dtype. ``sequence_lens``: a batch entry stops updating its state
after its length, its Y rows beyond it are 0, and Y_h/Y_c hold its last valid state; the reverse
direction starts at each entry's own last valid step.
"""

from __future__ import annotations

import numpy as np

_USES_ALPHA = {"Affine", "LeakyRelu", "ThresholdedRelu", "ScaledTanh", "HardSigmoid", "Elu"}
_USES_BETA = {"Affine", "ScaledTanh", "HardSigmoid"}
_DEFAULT_ALPHA = {"Affine": 1.0, "LeakyRelu": 0.01, "ThresholdedRelu": 1.0, "ScaledTanh": 1.0,
                  "HardSigmoid": 0.2, "Elu": 1.0}
_DEFAULT_BETA = {"Affine": 0.0, "ScaledTanh": 1.0, "HardSigmoid": 0.5}


def _sigmoid(x):
    return 0.5 * (np.tanh(0.5 * x) + 1.0)


_ACTIVATIONS = {
    "sigmoid": lambda x, a, b: _sigmoid(x),
    "tanh": lambda x, a, b: np.tanh(x),
    "relu": lambda x, a, b: np.maximum(x, 0.0),
    "affine": lambda x, a, b: a * x + b,
    "leakyrelu": lambda x, a, b: np.where(x >= 0, x, a * x),
    "thresholdedrelu": lambda x, a, b: np.where(x > a, x, 0.0),
    "scaledtanh": lambda x, a, b: a * np.tanh(b * x),
    "hardsigmoid": lambda x, a, b: np.clip(a * x + b, 0.0, 1.0),
    "elu": lambda x, a, b: np.where(x >= 0, x, a * (np.exp(x) - 1.0)),
    "softsign": lambda x, a, b: x / (1.0 + np.abs(x)),
    "softplus": lambda x, a, b: np.logaddexp(0.0, x),
}


def _activations(names, alphas, betas, defaults, n_dirs):
    """One list of callables per direction. ``activation_alpha``/``beta`` are consumed in order
    by the activations that take them (as onnxruntime); the others use the spec defaults."""
    names = list(defaults) * n_dirs if names is None or len(names) == 0 else list(names)
    if len(names) == len(defaults) and n_dirs == 2:
        names = names * 2
    if len(names) != len(defaults) * n_dirs:
        raise ValueError(f"{len(names)} activations given, expected {len(defaults) * n_dirs}")
    alphas = list(alphas or [])
    betas = list(betas or [])
    fns = []
    for name in names:
        key = next((k for k in _DEFAULT_ALPHA if k.lower() == name.lower()), name)
        a = alphas.pop(0) if key in _USES_ALPHA and alphas else _DEFAULT_ALPHA.get(key, 0.0)
        b = betas.pop(0) if key in _USES_BETA and betas else _DEFAULT_BETA.get(key, 0.0)
        try:
            fn = _ACTIVATIONS[name.lower()]
        except KeyError:
            raise ValueError(f"unknown RNN activation {name!r}") from None
        fns.append(lambda x, fn=fn, a=a, b=b: fn(x, a, b))
    k = len(defaults)
    return [fns[d * k:(d + 1) * k] for d in range(n_dirs)]


def _clip(x, clip):
    return x if clip is None else np.clip(x, -clip, clip)


def _prepare(X, W, B, sequence_lens, initial_h, layout, gates, direction, extra_states=()):
    """Common setup: (x (T, B, I), n_dirs, hidden, bias (D, 2*G*H), lens, h0, states...)."""
    x = np.asarray(X, dtype=np.float64)
    if layout:
        x = x.transpose(1, 0, 2)
    seq, batch = x.shape[:2]
    n_dirs = W.shape[0]
    hidden = W.shape[1] // gates
    bias = np.zeros((n_dirs, 2 * gates * hidden)) if B is None else B.astype(np.float64)
    lens = (np.full(batch, seq, dtype=np.int64) if sequence_lens is None
            else np.asarray(sequence_lens, dtype=np.int64))
    states = []
    for s in (initial_h,) + tuple(extra_states):
        if s is None:
            states.append(np.zeros((n_dirs, batch, hidden)))
        else:
            s = s.astype(np.float64)
            states.append(s.transpose(1, 0, 2) if layout else s)
    return x, n_dirs, hidden, bias, lens, states


def _finish(Y, states, layout, dtype):
    """(T, D, B, H) and (D, B, H) states -> outputs in the requested layout and dtype."""
    if layout:
        Y = Y.transpose(2, 0, 1, 3)
        states = [s.transpose(1, 0, 2) for s in states]
    return tuple(np.ascontiguousarray(a, dtype=dtype) for a in [Y] + list(states))


def _time_steps(seq, reverse):
    return range(seq - 1, -1, -1) if reverse else range(seq)


def _directions(direction):
    if direction == "bidirectional":
        return [False, True]
    if direction in ("forward", "reverse"):
        return [direction == "reverse"]
    raise ValueError(f"unknown direction {direction!r}")


def lstm(X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None,
         activation_alpha=None, activation_beta=None, activations=None, clip=None,
         direction="forward", hidden_size=None, input_forget=0, layout=0):
    """LSTM-14 -> (Y, Y_h, Y_c). Gate order i, o, f, c; peepholes P (D, 3H) in order i, o, f.

    i = f(Xi + Hi + Pi*C), f = f(Xf + Hf + Pf*C) (or 1 - i with ``input_forget``),
    c' = g(Xc + Hc), C = f*C + i*c', o = f(Xo + Ho + Po*C), H = o * h(C); ``clip`` bounds every
    gate's pre-activation.
    """
    x, nd, hs, bias, lens, (h_all, c_all) = _prepare(X, W, B, sequence_lens, initial_h, layout,
                                                     4, direction, (initial_c,))
    seq, batch = x.shape[:2]
    acts = _activations(activations, activation_alpha, activation_beta,
                        ["Sigmoid", "Tanh", "Tanh"], nd)
    peep = np.zeros((nd, 3 * hs)) if P is None else P.astype(np.float64)
    Y = np.zeros((seq, nd, batch, hs))
    h_out, c_out = np.empty_like(h_all), np.empty_like(c_all)
    for d, reverse in enumerate(_directions(direction)):
        f, g, h = acts[d]
        xw = x @ W[d].astype(np.float64).T + bias[d, :4 * hs] + bias[d, 4 * hs:]
        r = R[d].astype(np.float64).T
        pi, po, pf = peep[d, :hs], peep[d, hs:2 * hs], peep[d, 2 * hs:]
        ht, ct = h_all[d], c_all[d]
        for t in _time_steps(seq, reverse):
            z = xw[t] + ht @ r
            zi, zo, zf, zc = z[:, :hs], z[:, hs:2 * hs], z[:, 2 * hs:3 * hs], z[:, 3 * hs:]
            it = f(_clip(zi + pi * ct, clip))
            ft = 1.0 - it if input_forget else f(_clip(zf + pf * ct, clip))
            cn = ft * ct + it * g(_clip(zc, clip))
            ot = f(_clip(zo + po * cn, clip))
            hn = ot * h(cn)
            live = (t < lens)[:, None]
            ht = np.where(live, hn, ht)
            ct = np.where(live, cn, ct)
            Y[t, d] = np.where(live, hn, 0.0)
        h_out[d], c_out[d] = ht, ct
    return _finish(Y, [h_out, c_out], layout, X.dtype)


def gru(X, W, R, B=None, sequence_lens=None, initial_h=None, activation_alpha=None,
        activation_beta=None, activations=None, clip=None, direction="forward", hidden_size=None,
        layout=0, linear_before_reset=0):
    """GRU-14 -> (Y, Y_h). Gate order z, r, h.

    z = f(Xz + H Rz + b), r = f(Xr + H Rr + b), h' = g(Xh + (r*H) Rh + Rbh + Wbh), or with
    ``linear_before_reset`` h' = g(Xh + r*(H Rh + Rbh) + Wbh); H = (1 - z)*h' + z*H.
    """
    x, nd, hs, bias, lens, (h_all,) = _prepare(X, W, B, sequence_lens, initial_h, layout, 3,
                                               direction)
    seq, batch = x.shape[:2]
    acts = _activations(activations, activation_alpha, activation_beta, ["Sigmoid", "Tanh"], nd)
    Y = np.zeros((seq, nd, batch, hs))
    h_out = np.empty_like(h_all)
    for d, reverse in enumerate(_directions(direction)):
        f, g = acts[d]
        wb, rb = bias[d, :3 * hs], bias[d, 3 * hs:]
        xw = x @ W[d].astype(np.float64).T + wb
        r = R[d].astype(np.float64)
        r_zr, r_h = r[:2 * hs].T, r[2 * hs:].T
        ht = h_all[d]
        for t in _time_steps(seq, reverse):
            zr = xw[t, :, :2 * hs] + ht @ r_zr + rb[:2 * hs]
            zt = f(_clip(zr[:, :hs], clip))
            rt = f(_clip(zr[:, hs:], clip))
            if linear_before_reset:
                pre = xw[t, :, 2 * hs:] + rt * (ht @ r_h + rb[2 * hs:])
            else:
                pre = xw[t, :, 2 * hs:] + (rt * ht) @ r_h + rb[2 * hs:]
            hn = (1.0 - zt) * g(_clip(pre, clip)) + zt * ht
            live = (t < lens)[:, None]
            ht = np.where(live, hn, ht)
            Y[t, d] = np.where(live, hn, 0.0)
        h_out[d] = ht
    return _finish(Y, [h_out], layout, X.dtype)


def rnn(X, W, R, B=None, sequence_lens=None, initial_h=None, activation_alpha=None,
        activation_beta=None, activations=None, clip=None, direction="forward", hidden_size=None,
        layout=0):
    """RNN-14 -> (Y, Y_h): H = f(X Wi^T + H Ri^T + Wbi + Rbi), f defaults to Tanh."""
    x, nd, hs, bias, lens, (h_all,) = _prepare(X, W, B, sequence_lens, initial_h, layout, 1,
                                               direction)
    seq, batch = x.shape[:2]
    acts = _activations(activations, activation_alpha, activation_beta, ["Tanh"], nd)
    Y = np.zeros((seq, nd, batch, hs))
    h_out = np.empty_like(h_all)
    for d, reverse in enumerate(_directions(direction)):
        (f,) = acts[d]
        xw = x @ W[d].astype(np.float64).T + bias[d, :hs] + bias[d, hs:]
        r = R[d].astype(np.float64).T
        ht = h_all[d]
        for t in _time_steps(seq, reverse):
            hn = f(_clip(xw[t] + ht @ r, clip))
            live = (t < lens)[:, None]
            ht = np.where(live, hn, ht)
            Y[t, d] = np.where(live, hn, 0.0)
        h_out[d] = ht
    return _finish(Y, [h_out], layout, X.dtype)


OPS = {
    "LSTM": lstm,
    "GRU": gru,
    "RNN": rnn,
}
