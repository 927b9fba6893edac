"""LSTM (ONNX LSTM-14) on the cpu backend: one GEMM for the input projection of every time
step, then per step one small GEMM for the recurrence and one fused Numba pass for the gates.

Handles what exported models use: forward, reverse and bidirectional directions, optional
bias, initial_h and initial_c, layout 0, default activations (Sigmoid, Tanh, Tanh), no clip,
no peepholes, input_forget 0, and ``sequence_lens`` absent or all equal to the sequence length.
Other LSTMs run on the reference backend.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._base import CpuKernel
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
        if self.memory == "low" and w.dtype == r.dtype == np.float32:
            # NOTE: ScheduleConfig(memory="low"): no packed copies; matmul reads the
            # transposed views through BLAS's transpose flag
            self.wt = [w[d].T for d in range(self.dirs)]
            self.rt = [r[d].T for d in range(self.dirs)]
        else:
            self.wt = self.shared("wt", lambda: [np.ascontiguousarray(w[d].T, dtype=np.float32)
                                                 for d in range(self.dirs)])
            self.rt = self.shared("rt", lambda: [np.ascontiguousarray(r[d].T, dtype=np.float32)
                                                 for d in range(self.dirs)])
        b = ins[3].value if len(ins) > 3 and ins[3] is not None else None
        if b is None:
            self.bias = [np.zeros(four_h, np.float32) for _ in range(self.dirs)]
        else:
            self.bias = [(b[d, :four_h] + b[d, four_h:]).astype(np.float32)
                         for d in range(self.dirs)]
        self.has_h0 = len(ins) > 5 and ins[5] is not None
        self.has_c0 = len(ins) > 6 and ins[6] is not None
        # scratch, once per shape
        self.xw = np.empty((seq, batch, four_h), np.float32)
        self.gates = np.empty((batch, four_h), np.float32)
        self.h = np.empty((batch, self.hidden), np.float32)
        self.c = np.empty((batch, self.hidden), np.float32)
        self.y = np.empty((seq, batch, self.hidden), np.float32)
        self.n_outs = len(outs)

    def run(self, ins, outs):
        x = ins[0]
        seq, batch, hid = self.seq, self.batch, self.hidden
        x2 = x.reshape(seq * batch, x.shape[2])
        y_out = outs[0] if self.n_outs > 0 else None
        for d in range(self.dirs):
            np.matmul(x2, self.wt[d], out=self.xw.reshape(seq * batch, 4 * hid))
            if self.has_h0:
                self.h[...] = ins[5][d]
            else:
                self.h.fill(0.0)
            if self.has_c0:
                self.c[...] = ins[6][d]
            else:
                self.c.fill(0.0)
            steps = range(seq - 1, -1, -1) if self.reverse[d] else range(seq)
            for t in steps:
                np.matmul(self.h, self.rt[d], out=self.gates)
                _lstm_cell(self.gates, self.xw[t], self.bias[d], self.c, self.h, self.y[t])
            if y_out is not None and y_out.size:
                y_out[:, d] = self.y
            if self.n_outs > 1:
                outs[1][d] = self.h
            if self.n_outs > 2:
                outs[2][d] = self.c
