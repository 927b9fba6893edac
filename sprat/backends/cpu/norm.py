"""Softmax, LayerNormalization and BatchNormalization (inference) in Numba.

- Softmax-13 along ``axis``: rows (axis last) use eight max lanes and the vectorisable exp;
  a middle axis runs as (O, L, I) vectorised over I. LogSoftmax likewise.
- LayerNormalization-17 over the trailing dims from ``axis`` (Y only): two-pass mean/variance
  per row in float32 (the row is in L1), then ``(x - mean) * inv * scale + bias``.
- BatchNormalization-15, training_mode 0, constant statistics: folded at prepare into a per
  channel ``y = x * s + t`` (NCHW, or NHWC with ``_layout="NHWC"``), with fused residual and
  activation.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ._base import PARALLEL_MIN_ELEMENTS, CpuKernel, scratch
from ._epilogue import empty_f32, residual_act, tiled_bias
from ._jit import njit
from ._math import ACT, FAST, acc_max, act_of, exp32

CHUNK = 512


def _plain(node) -> bool:
    a = node.attrs
    return (a.get("_layout") is None and not a.get("_residual")
            and a.get("_activation") is None)


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def _rowmax(xr):
    m = xr[0]
    for i in range(1, xr.size):
        v = xr[i]
        m = max(m, v)
    return m


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def _softmax_rows(x, y, lo, hi, L, log):
    for r in range(lo, hi):
        xr = x[r * L:(r + 1) * L]
        yr = y[r * L:(r + 1) * L]
        m = _rowmax(xr)
        s = np.float32(0.0)
        if log:
            for i in range(L):
                s += exp32(xr[i] - m)
            shift = m + np.log(s)
            for i in range(L):
                yr[i] = xr[i] - shift
        else:
            for i in range(L):
                e = exp32(xr[i] - m)
                yr[i] = e
                s += e
            inv = np.float32(1.0) / s
            for i in range(L):
                yr[i] *= inv


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def _softmax_cols(x, y, lo, hi, L, I, log, m, s):
    nch = (I + CHUNK - 1) // CHUNK
    for it in range(lo, hi):
        o = it // nch
        i0 = (it - o * nch) * CHUNK
        n = min(CHUNK, I - i0)
        base = o * L * I + i0
        mm = m[:n]
        ss = s[:n]
        xr = x[base:base + n]
        for i in range(n):
            mm[i] = xr[i]
        for k in range(1, L):
            xr = x[base + k * I:base + k * I + n]
            for i in range(n):
                mm[i] = acc_max(mm[i], xr[i])
        for i in range(n):
            ss[i] = 0.0
        for k in range(L):
            xr = x[base + k * I:base + k * I + n]
            yr = y[base + k * I:base + k * I + n]
            if log:
                for i in range(n):
                    ss[i] += exp32(xr[i] - mm[i])
            else:
                for i in range(n):
                    e = exp32(xr[i] - mm[i])
                    ss[i] += e
                    yr[i] = e
        if log:
            for i in range(n):
                ss[i] = mm[i] + np.log(ss[i])
        else:
            for i in range(n):
                ss[i] = np.float32(1.0) / ss[i]
        for k in range(L):
            xr = x[base + k * I:base + k * I + n]
            yr = y[base + k * I:base + k * I + n]
            if log:
                for i in range(n):
                    yr[i] = xr[i] - ss[i]
            else:
                for i in range(n):
                    yr[i] *= ss[i]


@njit(cache=True, error_model="numpy", nogil=True, parallel=True)
def softmax(x, y, O, L, I, log, nt, scratch):
    """Softmax (or LogSoftmax) of x viewed (O, L, I) along L; ``scratch`` (nt, 2*CHUNK)."""
    if I == 1:
        for t in prange(nt):
            _softmax_rows(x, y, t * O // nt, (t + 1) * O // nt, L, log)
    else:
        items = O * ((I + CHUNK - 1) // CHUNK)
        for t in prange(nt):
            _softmax_cols(x, y, t * items // nt, (t + 1) * items // nt, L, I, log,
                          scratch[t, :CHUNK], scratch[t, CHUNK:])


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def _layernorm_rows(x, y, lo, hi, D, scale, bias, eps):
    for r in range(lo, hi):
        xr = x[r * D:(r + 1) * D]
        yr = y[r * D:(r + 1) * D]
        s = np.float32(0.0)
        for i in range(D):
            s += xr[i]
        mean = s / np.float32(D)
        v = np.float32(0.0)
        for i in range(D):
            d = xr[i] - mean
            v += d * d
        inv = np.float32(1.0) / np.sqrt(v / np.float32(D) + np.float32(eps))
        for i in range(D):
            yr[i] = (xr[i] - mean) * inv * scale[i] + bias[i]


@njit(cache=True, error_model="numpy", nogil=True, parallel=True)
def layernorm(x, y, rows, D, scale, bias, eps, nt):
    """Rows of length D: ``y = (x - mean) / sqrt(var + eps) * scale + bias``."""
    for t in prange(nt):
        _layernorm_rows(x, y, t * rows // nt, (t + 1) * rows // nt, D, scale, bias, eps)


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def _affine_block(xr, yr, rr, s, b, C, I, has_res, code, pa, pb):
    """One (C, I) block, I > 1 (NCHW; NHWC goes by ``_affine_runs``):
    ``yr = act(xr * s[c] + b[c] + rr)``."""
    for c in range(C):
        xc = xr[c * I:(c + 1) * I]
        yc = yr[c * I:(c + 1) * I]
        sc = s[c]
        sh = b[c]
        for i in range(I):
            yc[i] = xc[i] * sc + sh
    residual_act(yr, rr, has_res, code, pa, pb)


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def _affine_runs(x, y, res, lo_run, hi_run, total, st, bt, has_res, code, pa, pb):
    """NHWC runs of ``st.size`` floats (``st``/``bt``: scale and shift tiled per pixel): one
    contiguous pass each, so 24 channels do not pay a call per pixel."""
    L = st.size
    for q in range(lo_run, hi_run):
        lo = q * L
        n = min(L, total - lo)
        xr = x[lo:lo + n]
        yr = y[lo:lo + n]
        for k in range(n):
            yr[k] = xr[k] * st[k] + bt[k]
        residual_act(yr, res[lo:lo + n], has_res, code, pa, pb)


@njit(cache=True, error_model="numpy", nogil=True, parallel=True)
def channel_affine(x, y, O, C, I, s, b, res, has_res, code, pa, pb, nt):
    """x viewed (O, C, I): ``y = act(x * s[c] + b[c] + res)`` (NHWC: I == 1; NCHW: O == N).
    ``s``/``b`` hold the C values repeated (``tiled_bias``): NHWC runs over as many pixels at
    once. Work items are (o, channel) planes when there are fewer blocks than threads."""
    if I == 1:
        total = O * C
        runs = (total + s.size - 1) // s.size
        for t in prange(nt):
            _affine_runs(x, y, res, t * runs // nt, (t + 1) * runs // nt, total, s, b, has_res,
                         code, pa, pb)
    elif O >= nt:
        for t in prange(nt):
            for o in range(t * O // nt, (t + 1) * O // nt):
                lo = o * C * I
                hi = lo + C * I
                _affine_block(x[lo:hi], y[lo:hi], res[lo:hi], s, b, C, I, has_res, code,
                              pa, pb)
    else:
        planes = O * C
        for t in prange(nt):
            for q in range(t * planes // nt, (t + 1) * planes // nt):
                c = q % C
                lo = q * I
                hi = lo + I
                _affine_block(x[lo:hi], y[lo:hi], res[lo:hi], s[c:c + 1], b[c:c + 1], 1, I,
                              has_res, code, pa, pb)


def _split_axis(shape, axis):
    axis = axis % len(shape)
    o = int(np.prod(shape[:axis], dtype=np.int64))
    i = int(np.prod(shape[axis + 1:], dtype=np.int64))
    return o, int(shape[axis]), i


class SoftmaxKernel(CpuKernel):
    """Softmax-13 / LogSoftmax-13 of float32 along one axis."""

    @classmethod
    def supports(cls, node, ins) -> bool:
        x = ins[0]
        return (_plain(node) and x is not None and x.dtype == np.float32 and len(x.shape) >= 1
                and x.size > 0)

    def prepare(self, ins, outs):
        self.dims = _split_axis(ins[0].shape, int(self.node.attrs.get("axis", -1)))
        self.log = self.node.op_type == "LogSoftmax"
        self.nt = self.threads if ins[0].size >= PARALLEL_MIN_ELEMENTS else 1
        self.workspaces = (scratch(self.nt, 2 * CHUNK),)

    def run(self, ins, outs, ws):
        o, l_, i = self.dims
        softmax(ins[0].reshape(-1), outs[0].reshape(-1), o, l_, i, self.log, self.nt,
                ws.buffers[0])


class LayerNormKernel(CpuKernel):
    """LayerNormalization-17 (output Y only) with Scale/B matching the normalised shape."""

    @classmethod
    def supports(cls, node, ins) -> bool:
        x = ins[0]
        if not _plain(node) or len(node.outputs) != 1 or x is None or x.dtype != np.float32:
            return False
        if len(x.shape) == 0:
            return False
        axis = int(node.attrs.get("axis", -1)) % len(x.shape)
        d = int(np.prod(x.shape[axis:], dtype=np.int64))
        for k in (1, 2):
            p = ins[k] if k < len(ins) else None
            if p is not None and (p.dtype != np.float32 or p.size not in (1, d)):
                return False
        return ins[1] is not None and d > 0

    def prepare(self, ins, outs):
        shape = ins[0].shape
        axis = int(self.node.attrs.get("axis", -1)) % len(shape)
        self.D = int(np.prod(shape[axis:], dtype=np.int64))
        self.rows = int(np.prod(shape[:axis], dtype=np.int64))
        self.eps = float(self.node.attrs.get("epsilon", 1e-5))
        self.nt = self.threads if ins[0].size >= PARALLEL_MIN_ELEMENTS else 1
        self.has_bias = len(ins) > 2 and ins[2] is not None
        self.ones = np.ones(self.D, np.float32)
        self.zeros = np.zeros(self.D, np.float32)
        self.full_scale = ins[1].size == self.D
        self.full_bias = self.has_bias and ins[2].size == self.D
        self.bind_constants(ins, (1, 2))

    def run(self, ins, outs, ws):
        scale = self.arg(ins, 1).reshape(-1)
        if not self.full_scale:
            self.ones.fill(scale[0])
            scale = self.ones
        bias = self.zeros
        if self.has_bias:
            bias = self.arg(ins, 2).reshape(-1)
            if not self.full_bias:
                self.zeros.fill(bias[0])
                bias = self.zeros
        layernorm(ins[0].reshape(-1), outs[0].reshape(-1), self.rows, self.D, scale, bias,
                  self.eps, self.nt)


class BatchNormKernel(CpuKernel):
    """BatchNormalization-15 inference with constant scale/B/mean/var, NCHW or NHWC."""

    @classmethod
    def supports(cls, node, ins) -> bool:
        x = ins[0]
        layout = node.attrs.get("_layout")
        if layout not in (None, "NHWC") or node.attrs.get("_activation") not in ACT:
            return False
        if x is None or x.dtype != np.float32 or len(x.shape) < 2 or len(node.outputs) != 1:
            return False
        if node.attrs.get("training_mode", 0):
            return False
        c = x.shape[-1] if layout == "NHWC" else x.shape[1]
        for k in range(1, 5):
            p = ins[k]
            if p is None or p.value is None or p.size != c:
                return False
        if node.attrs.get("_residual"):
            return ins[5] is not None and tuple(ins[5].shape) == tuple(x.shape)
        return True

    def prepare(self, ins, outs):
        shape = ins[0].shape
        nhwc = self.node.attrs.get("_layout") == "NHWC"
        eps = float(self.node.attrs.get("epsilon", 1e-5))
        scale, bias, mean, var = (np.asarray(ins[k].value, np.float64).reshape(-1)
                                  for k in range(1, 5))
        s = scale / np.sqrt(var + eps)
        c = s.size
        self.s = tiled_bias(s.astype(np.float32))
        self.b = tiled_bias((bias - mean * s).astype(np.float32))
        if nhwc:
            self.dims = (int(np.prod(shape[:-1], dtype=np.int64)), c, 1)
        else:
            self.dims = (shape[0], c, int(np.prod(shape[2:], dtype=np.int64)))
        self.act = act_of(self.node)
        self.has_res = bool(self.node.attrs.get("_residual"))
        self.empty = empty_f32()
        self.nt = self.threads if ins[0].size >= PARALLEL_MIN_ELEMENTS else 1

    def run(self, ins, outs, ws):
        o, c, i = self.dims
        code, pa, pb = self.act
        res = ins[-1].reshape(-1) if self.has_res else self.empty
        channel_affine(ins[0].reshape(-1), outs[0].reshape(-1), o, c, i, self.s, self.b, res,
                       self.has_res, code, pa, pb, self.nt)
