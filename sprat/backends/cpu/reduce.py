"""Reductions over one contiguous block of axes: ReduceMean/Sum/Max/Min, GlobalAverage/MaxPool.

The input is viewed as (O, R, I) with the reduced axes in R (size-1 axes ignored), so the same
compiled kernel (``compiled/data.pxi``) serves a last-axis reduction (I == 1: rows with vector
lanes), an NHWC global pool ((N, H*W, C): column sums vectorised over C) and a middle-axis
reduction. Sums accumulate in
float64 (a 640x640 global average would lose 1e-3 in float32).
ONNX ReduceMean/ReduceSum/ReduceMax/ReduceMin-18 (axes as the optional second input, keepdims,
noop_with_empty_axes); GlobalAveragePool-1 / GlobalMaxPool-1 (NCHW or ``_layout="NHWC"``).
"""

from __future__ import annotations

import numpy as np

from ._base import PARALLEL_MIN_ELEMENTS, CpuKernel, scratch
from .compiled import kernels as ck

SUM, MEAN, MAX, MIN = ck.SUM, ck.MEAN, ck.MAX_, ck.MIN_
OPS = {"ReduceSum": SUM, "ReduceMean": MEAN, "ReduceMax": MAX, "ReduceMin": MIN,
       "GlobalAveragePool": MEAN, "GlobalMaxPool": MAX}
CHUNK = ck.REDUCE_CHUNK


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

    flat_run = "call"

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
        self.bound_call(ws, (x, y), lambda: (ck.reduce_ori, (x.reshape(-1), y.reshape(-1), o, r, i,
                                                      self.op, self.nt, ws.buffers[0])))
