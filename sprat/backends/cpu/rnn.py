"""LSTM and GRU (ONNX LSTM-14, GRU-14) on the cpu backend: one GEMM for the input projection of
every time step, then per step one GEMV of the state against the recurrence weight (packed once
in panels, ``pack_recurrence``) and one vectorised pass for the gates; the whole op
(projection, states, recurrence, outputs) is one compiled call (``lstm`` and ``gru`` in
``compiled/rnn.pxi``, no Python per step). With two threads the two directions of a
bidirectional op run side by side, or the threads share each direction's input projection.

Handles what exported models use: forward, reverse and bidirectional directions, optional
bias and initial states, layout 0, default activations (LSTM: Sigmoid, Tanh, Tanh; GRU:
Sigmoid, Tanh), no clip, and ``sequence_lens`` absent or all equal to the sequence length;
LSTM without peepholes and with input_forget 0; GRU with either ``linear_before_reset``.
Others run on the reference backend.
"""

from __future__ import annotations

import itertools

import numpy as np

from ...weights import empty_aligned
from ..base import WorkspaceSpec
from ._base import CpuKernel
from ._epilogue import empty_f32
from .compiled import kernels as ck
from .linalg import pack_panels

_DEFAULT_ACTS = (["Sigmoid", "Tanh", "Tanh"], ["Sigmoid", "Tanh", "Tanh"] * 2)
_GRU_ACTS = (["Sigmoid", "Tanh"], ["Sigmoid", "Tanh"] * 2)


def _plain_recurrence(node, ins, acts) -> bool:
    """The attributes and inputs both kernels handle (see the module docstring)."""
    a = node.attrs
    if any(k.startswith("_") for k in a) or a.get("layout", 0) != 0:
        return False
    if a.get("clip") is not None:
        return False
    if a.get("activations") is not None and list(a["activations"]) not in acts:
        return False
    x, w, r = ins[0], ins[1], ins[2]
    if x is None or x.dtype != np.float32 or w.value is None or r.value is None:
        return False
    b = ins[3] if len(ins) > 3 else None
    if b is not None and b.value is None:
        return False
    seq_lens = ins[4] if len(ins) > 4 else None
    return seq_lens is None or (seq_lens.value is not None
                                and not np.any(seq_lens.value != x.shape[0]))


def pack_recurrence(rt: np.ndarray) -> np.ndarray:
    """R^T (H, N) float32 as ``ck.lstm`` / ``ck.gru`` read it (``R_PANELS``): ceil(N / RNN_NR)
    panels, panel p holding ``R^T[:, p*NR:(p+1)*NR]`` row after row, zero past N; flat."""
    nr = ck.RNN_NR
    k, n = rt.shape
    npan = -(-n // nr)
    padded = np.zeros((k, npan * nr), np.float32)
    padded[:, :n] = rt
    return np.ascontiguousarray(padded.reshape(k, npan, nr).transpose(1, 0, 2)).reshape(-1)


def _aligned_rows(rows) -> np.ndarray:
    """The equal-length float32 ``rows`` as one (len(rows), n) array whose rows start on
    64-byte boundaries: a panel row of 64 floats read unaligned spans five cache lines, not
    four (the H = 128 LSTM step streamed R^T at ~88 GB/s from L2 against ~150 aligned)."""
    n = rows[0].size
    pitch = -(-n // 16) * 16
    out = empty_aligned((len(rows), pitch))
    for d, row in enumerate(rows):
        out[d, :n] = row
        out[d, n:] = 0.0
    return out


#: units per slot of a unit-split direction are multiples of this (as ``rnn.pxi`` cuts them):
#: 8 lanes of the LSTM cell; a GRU slot's 3u projection columns on a 32-column W panel
UNIT_GRAIN = {4: 8, 3: 32}


def unit_slots(hid: int, slots: int, gates: int) -> list[tuple[int, int]]:
    """The units ``[k0, k1)`` of each of ``slots`` slots, as ``rnn.pxi`` cuts them."""
    grain = UNIT_GRAIN[gates]
    bounds = [s * hid // slots // grain * grain for s in range(slots)] + [hid]
    return list(itertools.pairwise(bounds))


def unit_order(hid: int, slots: int, gates: int) -> np.ndarray:
    """The ``gates * hid`` gate columns in slot order for ``ck.lstm`` / ``ck.gru``'s
    ``units``: slot s holds the columns of each gate (ONNX order) for its units, so one slot's
    projection, GEMV, cell and state touch a contiguous block; the identity for one slot."""
    cols = []
    for k0, k1 in unit_slots(hid, slots, gates):
        for g in range(gates):
            cols.extend(range(g * hid + k0, g * hid + k1))
    return np.asarray(cols, np.int64)


def pack_weights(kernel, w, r, slots: int = 1) -> tuple[int, np.ndarray, np.ndarray]:
    """``(w_mode, W, R)`` of every direction, one 64-byte aligned row each, shared per model
    (the tag names the slot count: sessions of other thread counts share the model's packs),
    columns in ``unit_order`` of ``slots``: W^T in ``linalg.pack_panels``' panels where the
    packed GEMM runs (``W_PANELS``), else W^T row-major (``W_T``); R^T in
    ``pack_recurrence``'s panels, each slot's columns on their own -- a GRU's as two sets, its
    z, r columns then its h columns. Declares W and R packed (``Kernel.packed``: their mapped
    pages are given back)."""
    dirs, n, _ = w.shape
    hid = r.shape[2]
    gates = n // hid
    kernel.packed = (1, 2)
    order = unit_order(hid, slots, gates)
    tag = f"_units{slots}"

    def wt(d):
        return np.ascontiguousarray(np.asarray(w[d], np.float32).T[:, order])

    if ck.packed_avx512():
        w_mode, wp = ck.W_PANELS, kernel.shared("w_panels" + tag, lambda: _aligned_rows([
            pack_panels(wt(d)) for d in range(dirs)]))
    else:
        w_mode, wp = ck.W_T, kernel.shared("wt_all" + tag, lambda: _aligned_rows([
            wt(d).reshape(-1) for d in range(dirs)]))

    def recurrence(d):
        rt = np.asarray(r[d], np.float32).T
        sets = []
        for k0, k1 in unit_slots(hid, slots, gates):
            cols = [np.arange(g * hid + k0, g * hid + k1) for g in range(gates)]
            if gates == 4:
                sets.append(pack_recurrence(rt[:, np.concatenate(cols)]))
            else:
                sets.append(pack_recurrence(rt[:, np.concatenate(cols[:2])]))
                sets.append(pack_recurrence(rt[:, cols[2]]))
        return np.concatenate(sets)

    return w_mode, wp, kernel.shared("r_panels" + tag, lambda: _aligned_rows([
        recurrence(d) for d in range(dirs)]))


# NOTE: with two threads, one direction's input projection (seq * batch * input * gates*H
# multiply-adds) is split over them from this size on: a parallel region costs ~5 us, the
# GEMM runs ~80 multiply-adds per ns, so 2^20 of them (~13 us) already gain more than that
PROJECT_SPLIT_MACS = 1 << 20

# NOTE: each step of a direction reads all of R^T (G H^2 floats); split over the threads, each
# keeps its part in its own L2 and streams half, at the price of a barrier a step (two for a
# GRU without linear_before_reset). bench/kernels.py's rnn family at 2 threads, split against
# not (ms): LSTM H=64 (16 Ki floats a barrier) 0.124 / 0.091, GRU H=64 lbr0 (6 Ki) 0.197 /
# 0.065, GRU H=128 batch 4 lbr0 (24 Ki) 0.327 / 0.262; GRU H=128 lbr1 (48 Ki) 0.466 / 0.552,
# LSTM H=128 (64 Ki) 0.550 / 0.698, GRU H=256 lbr0 (96 Ki) 0.660 / 0.884, H=512 ~3x faster
SPLIT_BARRIER_FLOATS = 1 << 15
# NOTE: a bidirectional op on two threads runs its directions side by side instead, while each
# direction's R^T fits in a core's L2 with room to spare (H=256: LSTM 0.76 ms side by side
# against 0.87 split, GRU 0.57 / 0.71); above, the two directions streaming R^T from L3 at
# once lose to the split (LSTM H=512 batch 4: 20.5 ms against 5.4)
SIDE_BY_SIDE_BYTES = 1 << 20


# NOTE: and only over enough steps to pay for the parallel region (~5 us to start): the split
# saves ~0.7 us a step at H=128 (LSTM, 200 steps: 0.70 -> 0.55 ms); silero-vad's LSTMs run
# one step per call
SPLIT_MIN_STEPS = 8


def split_slots(threads: int, gates: int, hid: int, barriers: int, dirs: int,
                seq: int) -> int:
    """Slots a direction's units are split in (0: not split), for ``threads`` threads,
    ``gates`` gates, ``hid`` units, ``barriers`` barriers a step, ``dirs`` directions and
    ``seq`` steps."""
    floats = gates * hid * hid
    if threads < 2 or floats < SPLIT_BARRIER_FLOATS * barriers or seq < SPLIT_MIN_STEPS:
        return 0
    if dirs == 2 and 4 * floats <= SIDE_BY_SIDE_BYTES:
        return 0
    return threads if hid >= UNIT_GRAIN[gates] * threads else 0


class LSTMKernel(CpuKernel):
    """ONNX LSTM: X [seq, batch, input], W [dirs, 4H, input], R [dirs, 4H, H], B [dirs, 8H];
    outputs Y [seq, dirs, batch, H], Y_h and Y_c [dirs, batch, H]."""

    flat_run = "call"

    #: the recurrence's SIMD path, as ``ck.lstm`` takes it (tests force the lower ones)
    path = 2

    @classmethod
    def supports(cls, node, ins) -> bool:
        if node.attrs.get("input_forget", 0) != 0 or not _plain_recurrence(node, ins,
                                                                            _DEFAULT_ACTS):
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
            # W as stored through BLAS's transpose flag, the recurrence R by dot products
            self.w_mode, self.r_mode = ck.W_AS_IS, ck.R_AS_IS
            self.w = np.ascontiguousarray(w, np.float32).reshape(self.dirs, -1)
            self.r = np.ascontiguousarray(r, np.float32).reshape(self.dirs, -1)
        hid = self.hidden
        self.units = 0 if self.r_trans else split_slots(self.threads, 4, hid, 1, self.dirs, seq)
        if not self.r_trans:
            self.r_mode = ck.R_PANELS
            self.w_mode, self.w, self.r = pack_weights(self, w, r, max(1, self.units))
        b = ins[3].value if len(ins) > 3 and ins[3] is not None else None
        if b is None:
            self.bias = np.zeros((self.dirs, four_h), np.float32)
        else:
            self.bias = np.ascontiguousarray(b[:, :four_h] + b[:, four_h:], np.float32)
        if self.units:
            self.bias = np.ascontiguousarray(self.bias[:, unit_order(hid, self.units, 4)])
        self.has_h0 = len(ins) > 5 and ins[5] is not None
        self.has_c0 = len(ins) > 6 and ins[6] is not None
        # scratch, once per shape, one slice per direction
        d = self.dirs
        f32 = np.dtype(np.float32)
        self.workspaces = tuple(WorkspaceSpec(s, f32) for s in (  # xw, gates, h, c (, h2)
            (d, seq * batch * four_h), (d, batch * four_h), (d, batch * self.hidden),
            (d, batch * self.hidden), *([(d, batch * self.hidden)] if self.units else [])))
        self.n_in = n_in
        self.empty = empty_f32()
        # NOTE: two threads only pay when a direction has real work (the launch costs ~5 us)
        self.par = d == 2 and self.threads >= 2 and seq * four_h * self.hidden >= (1 << 18)
        self.nt = (self.threads if seq * batch * n_in * four_h >= PROJECT_SPLIT_MACS
                   else 1)

    def run(self, ins, outs, ws):
        x = ins[0]
        h0 = ins[5] if self.has_h0 else None
        c0 = ins[6] if self.has_c0 else None
        self.bound_call(ws, (x, h0, c0, *outs), lambda: self._call(x, h0, c0, outs,
                                                                   ws.buffers))

    def _call(self, x, h0, c0, outs, buffers):
        # NOTE: absent or empty outputs get an empty array: the compiled call skips them
        wanted = [outs[k] if k < len(outs) and outs[k] is not None and outs[k].size else None
                  for k in range(3)]
        flat = [self.empty if a is None else a.reshape(-1) for a in [h0, c0] + wanted]
        return ck.lstm, (x.reshape(-1), self.w, self.w_mode, self.r, self.r_mode, self.bias,
                         *flat, *buffers[:4], self.reverse, self.seq, self.batch, self.n_in,
                         self.hidden, self.par, self.nt, self.units,
                         buffers[4] if self.units else None, self.path)


class GRUKernel(CpuKernel):
    """ONNX GRU: X [seq, batch, input], W [dirs, 3H, input], R [dirs, 3H, H], B [dirs, 6H],
    initial_h [dirs, batch, H]; outputs Y [seq, dirs, batch, H] and Y_h [dirs, batch, H]."""

    flat_run = "call"

    #: the recurrence's SIMD path, as ``ck.gru`` takes it (tests force the lower ones)
    path = 2

    @classmethod
    def supports(cls, node, ins) -> bool:
        return _plain_recurrence(node, ins, _GRU_ACTS)

    def prepare(self, ins, outs):
        x, w, r = ins[0], ins[1].value, ins[2].value
        self.dirs, three_h, _ = w.shape
        hid = self.hidden = three_h // 3
        self.seq, self.batch, self.n_in = x.shape
        direction = self.node.attrs.get("direction", "forward")
        self.reverse = [False, True] if direction == "bidirectional" else [direction == "reverse"]
        self.lbr = bool(self.node.attrs.get("linear_before_reset", 0))
        self.units = split_slots(self.threads, 3, hid, 1 if self.lbr else 2, self.dirs,
                                 self.seq)
        self.w_mode, self.w, self.r = pack_weights(self, w, r, max(1, self.units))
        b = ins[3].value if len(ins) > 3 and ins[3] is not None else None
        b = np.zeros((self.dirs, 2 * three_h), np.float32) if b is None else b
        # NOTE: z and r take both biases at the projection; Rbh sits inside r * (...) with
        # linear_before_reset and is added after the recurrence product without
        self.bias = np.ascontiguousarray(np.concatenate(
            [b[:, :2 * hid] + b[:, three_h:three_h + 2 * hid], b[:, 2 * hid:three_h]], axis=1),
            np.float32)
        if self.units:
            self.bias = np.ascontiguousarray(self.bias[:, unit_order(hid, self.units, 3)])
        self.rbh = np.ascontiguousarray(b[:, three_h + 2 * hid:], np.float32)
        self.has_h0 = len(ins) > 5 and ins[5] is not None
        d, nb, seq = self.dirs, self.batch, self.seq
        f32 = np.dtype(np.float32)
        self.workspaces = tuple(WorkspaceSpec(s, f32) for s in (  # xw, gates, rh, h (, h2)
            (d, seq * nb * three_h), (d, nb * three_h), (d, nb * hid), (d, nb * hid),
            *([(d, nb * hid)] if self.units else [])))
        self.empty = empty_f32()
        self.par = d == 2 and self.threads >= 2 and seq * three_h * hid >= (1 << 18)
        self.nt = (self.threads if seq * nb * self.n_in * three_h >= PROJECT_SPLIT_MACS
                   else 1)

    def run(self, ins, outs, ws):
        x = ins[0]
        h0 = ins[5] if self.has_h0 else None
        self.bound_call(ws, (x, h0, *outs), lambda: self._call(x, h0, outs, ws.buffers))

    def _call(self, x, h0, outs, buffers):
        wanted = [outs[k] if k < len(outs) and outs[k] is not None and outs[k].size else None
                  for k in range(2)]
        flat = [self.empty if a is None else a.reshape(-1) for a in [h0] + wanted]
        return ck.gru, (x.reshape(-1), self.w, self.w_mode, self.r, self.bias, self.rbh, *flat,
                        *buffers[:4], self.reverse, self.seq, self.batch, self.n_in,
                        self.hidden, self.lbr, self.par, self.nt, self.units,
                        buffers[4] if self.units else None, self.path)
