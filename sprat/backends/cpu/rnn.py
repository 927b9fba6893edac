"""LSTM (ONNX LSTM-14) on the cpu backend: one GEMM for the input projection of every time
step, then per step one small GEMM for the recurrence and one fused Numba pass for the gates;
the whole recurrence of a direction is one Numba call (no Python per step), and the two
directions of a bidirectional LSTM run on two threads when the session has them.

Handles what exported models use: forward, reverse and bidirectional directions, optional
bias, initial_h and initial_c, layout 0, default activations (Sigmoid, Tanh, Tanh), no clip,
no peepholes, input_forget 0, and ``sequence_lens`` absent or all equal to the sequence length.
Other LSTMs run on the reference backend.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..base import WorkspaceSpec
from ._base import CpuKernel
from ._jit import njit
from ._math import FAST, sigmoid32, tanh32


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def _lstm_cell(gates, xw, bias, c, h, y):
    """gates (B, 4H) = h_prev @ R^T on entry; adds xw (B, 4H) and bias (4H), then updates c, h
    (B, H) in place and writes h into y (B, H). Gate order i, o, f, c (ONNX)."""
    nb, four_h = gates.shape
    hid = four_h // 4
    for b in range(nb):
        g = gates[b]
        x = xw[b]
        cb = c[b]
        hb = h[b]
        yb = y[b]
        for k in range(hid):
            i = sigmoid32(g[k] + x[k] + bias[k])
            o = sigmoid32(g[hid + k] + x[hid + k] + bias[hid + k])
            f = sigmoid32(g[2 * hid + k] + x[2 * hid + k] + bias[2 * hid + k])
            z = tanh32(g[3 * hid + k] + x[3 * hid + k] + bias[3 * hid + k])
            cv = f * cb[k] + i * z
            cb[k] = cv
            hv = o * tanh32(cv)
            hb[k] = hv
            yb[k] = hv


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def _recurrence(h, r, r_trans, gates):
    """gates (B, 4H) = h (B, H) @ R^T, ``r`` flat: R^T packed (H, 4H) (one contiguous
    multiply-add per hidden unit), or R itself (4H, H) when ``r_trans`` (a dot product per
    gate). A GEMV per batch row: BLAS GEMM with one row repacks R every call."""
    nb, hid = h.shape
    four_h = gates.shape[1]
    for b in range(nb):
        g = gates[b]
        hb = h[b]
        if r_trans:
            for j in range(four_h):
                row = r[j * hid:(j + 1) * hid]
                acc = np.float32(0.0)
                for k in range(hid):
                    acc += row[k] * hb[k]
                g[j] = acc
        else:
            for j in range(four_h):
                g[j] = 0.0
            k4 = hid - hid % 4
            for k in range(0, k4, 4):  # NOTE: four rows per pass: a quarter of the g traffic
                h0, h1, h2, h3 = hb[k], hb[k + 1], hb[k + 2], hb[k + 3]
                r0 = r[k * four_h:(k + 1) * four_h]
                r1 = r[(k + 1) * four_h:(k + 2) * four_h]
                r2 = r[(k + 2) * four_h:(k + 3) * four_h]
                r3 = r[(k + 3) * four_h:(k + 4) * four_h]
                for j in range(four_h):
                    g[j] += h0 * r0[j] + h1 * r1[j] + h2 * r2[j] + h3 * r3[j]
            for k in range(k4, hid):
                hk = hb[k]
                row = r[k * four_h:(k + 1) * four_h]
                for j in range(four_h):
                    g[j] += hk * row[j]


@njit(cache=True, error_model="numpy", nogil=True)
def _lstm_direction(xw, r, r_trans, bias, h, c, y, gates, reverse):
    """One direction's recurrence: for each step t (backwards when ``reverse``),
    ``gates = h @ R^T`` (``_recurrence``), then the gate pass. xw (seq, B, 4H) input
    projections; h, c (B, H) initial states, updated; y (seq, B, H) receives every h."""
    seq = xw.shape[0]
    for s in range(seq):
        t = seq - 1 - s if reverse else s
        _recurrence(h, r, r_trans, gates)
        _lstm_cell(gates, xw[t], bias, c, h, y[t])


@njit(cache=True, error_model="numpy", nogil=True, parallel=True)
def _lstm_directions(xw, r, r_trans, bias, h, c, y, gates, reverse):
    """Both directions at once (leading axis 2 on every argument), one thread each."""
    for d in prange(2):
        _lstm_direction(xw[d], r[d], r_trans, bias[d], h[d], c[d], y[d], gates[d], reverse[d])


_DEFAULT_ACTS = (["Sigmoid", "Tanh", "Tanh"], ["Sigmoid", "Tanh", "Tanh"] * 2)


class LSTMKernel(CpuKernel):
    """ONNX LSTM: X [seq, batch, input], W [dirs, 4H, input], R [dirs, 4H, H], B [dirs, 8H];
    outputs Y [seq, dirs, batch, H], Y_h and Y_c [dirs, batch, H]."""

    @classmethod
    def supports(cls, node, ins) -> bool:
        a = node.attrs
        if any(k.startswith("_") for k in a) or a.get("layout", 0) != 0:
            return False
        if a.get("clip") is not None or a.get("input_forget", 0) != 0:
            return False
        acts = a.get("activations")
        if acts is not None and list(acts) not in _DEFAULT_ACTS:
            return False
        x, w, r = ins[0], ins[1], ins[2]
        if x.dtype != np.float32 or w.value is None or r.value is None:
            return False
        b = ins[3] if len(ins) > 3 else None
        if b is not None and b.value is None:
            return False
        seq_lens = ins[4] if len(ins) > 4 else None
        if seq_lens is not None and (seq_lens.value is None
                                     or np.any(seq_lens.value != x.shape[0])):
            return False
        peep = ins[7] if len(ins) > 7 else None
        return peep is None

    def prepare(self, ins, outs):
        x, w, r = ins[0], ins[1].value, ins[2].value
        self.dirs, four_h, _ = w.shape
        self.hidden = four_h // 4
        seq, batch, n_in = x.shape
        self.seq, self.batch = seq, batch
        direction = self.node.attrs.get("direction", "forward")
        self.reverse = [False, True] if direction == "bidirectional" else [direction == "reverse"]
        self.r_trans = self.memory == "low" and w.dtype == r.dtype == np.float32
        if self.r_trans:
            # NOTE: ScheduleConfig(memory="low"): no packed copies; the input projection reads
            # W^T as a view, the recurrence R through BLAS's transpose flag
            self.wt = [w[d].T for d in range(self.dirs)]
            self.r = np.ascontiguousarray(r, np.float32).reshape(self.dirs, -1)
        else:
            self.wt = self.shared("wt", lambda: [np.ascontiguousarray(w[d].T, dtype=np.float32)
                                                 for d in range(self.dirs)])
            self.r = self.shared("rt_all", lambda: np.stack([
                np.ascontiguousarray(r[d].T, dtype=np.float32).reshape(-1)
                for d in range(self.dirs)]))
        b = ins[3].value if len(ins) > 3 and ins[3] is not None else None
        if b is None:
            self.bias = np.zeros((self.dirs, four_h), np.float32)
        else:
            self.bias = np.ascontiguousarray(b[:, :four_h] + b[:, four_h:], np.float32)
        self.has_h0 = len(ins) > 5 and ins[5] is not None
        self.has_c0 = len(ins) > 6 and ins[6] is not None
        # scratch, once per shape, one slice per direction
        d = self.dirs
        f32 = np.dtype(np.float32)
        self.workspaces = tuple(WorkspaceSpec(s, f32) for s in (  # xw, gates, h, c, y
            (d, seq, batch, four_h), (d, batch, four_h), (d, batch, self.hidden),
            (d, batch, self.hidden), (d, seq, batch, self.hidden)))
        self.rev = np.array(self.reverse, np.bool_)
        self.n_outs = len(outs)
        # NOTE: two threads only pay when a direction has real work (the launch costs ~5 us)
        self.par = d == 2 and self.threads >= 2 and seq * four_h * self.hidden >= (1 << 18)

    def run(self, ins, outs, ws):
        x = ins[0]
        seq, batch, hid = self.seq, self.batch, self.hidden
        xw, gates, h, c, y = ws.buffers
        x2 = x.reshape(seq * batch, x.shape[2])
        for d in range(self.dirs):
            np.matmul(x2, self.wt[d], out=xw[d].reshape(seq * batch, 4 * hid))
        if self.has_h0:
            h[...] = ins[5]
        else:
            h.fill(0.0)
        if self.has_c0:
            c[...] = ins[6]
        else:
            c.fill(0.0)
        if self.par:
            _lstm_directions(xw, self.r, self.r_trans, self.bias, h, c, y, gates, self.rev)
        else:
            for d in range(self.dirs):
                _lstm_direction(xw[d], self.r[d], self.r_trans, self.bias[d], h[d], c[d], y[d],
                                gates[d], self.reverse[d])
        if self.n_outs > 0 and outs[0].size:
            outs[0][...] = y.transpose(1, 0, 2, 3)
        if self.n_outs > 1:
            outs[1][...] = h
        if self.n_outs > 2:
            outs[2][...] = c
