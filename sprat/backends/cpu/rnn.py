"""LSTM (ONNX LSTM-14) on the cpu backend: one GEMM for the input projection of every time
step, then per step one small GEMV for the recurrence and one fused pass for the gates; the
whole recurrence of every direction is one compiled call (``lstm`` in ``compiled/dense.pxi``,
no Python per step), and the two directions of a bidirectional LSTM run on two threads when the
session has them.

Handles what exported models use: forward, reverse and bidirectional directions, optional
bias, initial_h and initial_c, layout 0, default activations (Sigmoid, Tanh, Tanh), no clip,
no peepholes, input_forget 0, and ``sequence_lens`` absent or all equal to the sequence length.
Other LSTMs run on the reference backend.
"""

from __future__ import annotations

import numpy as np

from ..base import WorkspaceSpec
from ._base import CpuKernel
from .compiled import kernels as ck

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
        d = self.dirs
        ck.lstm(xw.reshape(d, -1), self.r, self.r_trans, self.bias, h.reshape(d, -1),
                c.reshape(d, -1), y.reshape(d, -1), gates.reshape(d, -1), self.reverse, seq,
                batch, hid, self.par)
        if self.n_outs > 0 and outs[0].size:
            outs[0][...] = y.transpose(1, 0, 2, 3)
        if self.n_outs > 1:
            outs[1][...] = h
        if self.n_outs > 2:
            outs[2][...] = c
