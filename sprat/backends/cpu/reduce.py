"""Reductions over one contiguous block of axes: ReduceMean/Sum/Max/Min, GlobalAverage/MaxPool.

The input is viewed as (O, R, I) with the reduced axes in R (size-1 axes ignored), so the same
Numba kernel serves a last-axis reduction (I == 1: rows with vector lanes), an NHWC global pool
((N, H*W, C): column sums vectorised over C) and a middle-axis reduction. Sums accumulate in
float64 (a 640x640 global average would lose 1e-3 in float32).
ONNX ReduceMean/ReduceSum/ReduceMax/ReduceMin-18 (axes as the optional second input, keepdims,
noop_with_empty_axes); GlobalAveragePool-1 / GlobalMaxPool-1 (NCHW or ``_layout="NHWC"``).
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ._base import PARALLEL_MIN_ELEMENTS, CpuKernel, scratch
from ._jit import njit
from ._math import FAST, acc_max, acc_min, fmax, fmin

SUM, MEAN, MAX, MIN = range(4)
OPS = {"ReduceSum": SUM, "ReduceMean": MEAN, "ReduceMax": MAX, "ReduceMin": MIN,
       "GlobalAveragePool": MEAN, "GlobalMaxPool": MAX}
CHUNK = 512


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def _row(xr, op):
    n = xr.size
    if op == SUM or op == MEAN:
        s = 0.0
        for i in range(n):
            s += np.float64(xr[i])
        return s / n if op == MEAN else s
    m = xr[0]
    if op == MAX:
        for i in range(1, n):
            m = fmax(m, xr[i])
    else:
        for i in range(1, n):
            m = fmin(m, xr[i])
    return m


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def _columns(x, yr, at, R, I, op):
    """yr[:n] = reduce over r of x[r*I : r*I + n] (x starts at the block's first element)."""
    n = yr.size
    if op == SUM or op == MEAN:
        a = at[:n]
        x0 = x[:n]
        for i in range(n):
            a[i] = x0[i]
        for r in range(1, R):
            xr = x[r * I:r * I + n]
            for i in range(n):
                a[i] += xr[i]
        scale = 1.0 / R if op == MEAN else 1.0
        for i in range(n):
            yr[i] = a[i] * scale
    else:
        x0 = x[:n]
        for i in range(n):
            yr[i] = x0[i]
        for r in range(1, R):
            xr = x[r * I:r * I + n]
            if op == MAX:
                for i in range(n):
                    yr[i] = acc_max(yr[i], xr[i])
            else:
                for i in range(n):
                    yr[i] = acc_min(yr[i], xr[i])


@njit(cache=True, error_model="numpy", nogil=True, parallel=True)
def reduce_ori(x, y, O, R, I, op, nt, acc):
    """y(O, I) = reduce over R of x(O, R, I); ``acc`` is float64 scratch (nt, CHUNK)."""
    if I == 1:
        for t in prange(nt):
            for o in range(t * O // nt, (t + 1) * O // nt):
                y[o] = _row(x[o * R:(o + 1) * R], op)
        return
    nch = (I + CHUNK - 1) // CHUNK
    items = O * nch
    for t in prange(nt):
        for it in range(t * items // nt, (t + 1) * items // nt):
            o = it // nch
            i0 = (it - o * nch) * CHUNK
            n = min(CHUNK, I - i0)
            _columns(x[o * R * I + i0:], y[o * I + i0:o * I + i0 + n], acc[t], R, I, op)


def collapse_reduce(shape, axes):
    """(O, R, I) for reducing ``axes`` of ``shape``, or None if they are not one block."""
    dims = [(d, i in axes) for i, d in enumerate(shape) if d != 1]
    flags = [r for _, r in dims]
    if True in flags:
        first, last = flags.index(True), len(flags) - 1 - flags[::-1].index(True)
        if not all(flags[first:last + 1]):
            return None
    else:
        first, last = len(dims), len(dims) - 1
    prod = lambda ds: int(np.prod([d for d, _ in ds], dtype=np.int64))
    return prod(dims[:first]), prod(dims[first:last + 1]), prod(dims[last + 1:])


def _axes(node, ins):
    """Normalised reduced axes (sorted tuple), or None when not known at prepare time."""
    op = node.op_type
    x = ins[0]
    r = len(x.shape)
    if op.startswith("Global"):
        if node.attrs.get("_layout") == "NHWC":
            return tuple(range(1, r - 1))
        return tuple(range(2, r))
    axes = None
    if len(ins) > 1 and ins[1] is not None:
        if ins[1].value is None:
            return None
        axes = [int(a) for a in np.asarray(ins[1].value).reshape(-1)]
    elif "axes" in node.attrs:  # NOTE: opset < 18 spelling, in case the frontend keeps it
        axes = [int(a) for a in node.attrs["axes"]]
    if not axes:
        if node.attrs.get("noop_with_empty_axes", 0):
            return ()
        return tuple(range(r))
    return tuple(sorted(a % r for a in axes))


class ReduceKernel(CpuKernel):
    """Float32 Reduce{Sum,Mean,Max,Min} and Global{Average,Max}Pool over one block of axes."""

    @classmethod
    def supports(cls, node, ins) -> bool:
        x = ins[0]
        if x is None or x.dtype != np.float32 or x.size == 0:
            return False
        if node.attrs.get("_residual") or node.attrs.get("_activation") is not None:
            return False
        layout = node.attrs.get("_layout")
        if layout is not None and not (layout == "NHWC" and node.op_type.startswith("Global")):
            return False
        axes = _axes(node, ins)
        return axes is not None and collapse_reduce(x.shape, axes) is not None

    def prepare(self, ins, outs):
        self.op = OPS[self.node.op_type]
        o, r, i = collapse_reduce(ins[0].shape, _axes(self.node, ins))
        self.dims = (o, r, i)
        self.nt = self.threads if ins[0].size >= PARALLEL_MIN_ELEMENTS else 1
        self.workspaces = (scratch(self.nt, CHUNK, np.float64),)

    def run(self, ins, outs, ws):
        x, y = ins[0], outs[0]
        o, r, i = self.dims
        self.bound_call(ws, (x, y), lambda: (reduce_ori, (x.reshape(-1), y.reshape(-1), o, r, i,
                                                      self.op, self.nt, ws.buffers[0])))
