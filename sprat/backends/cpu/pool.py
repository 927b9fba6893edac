"""MaxPool / AveragePool in NHWC (``_layout="NHWC"``), 1-D and 2-D windows.

ONNX MaxPool-12 / AveragePool-22: attrs auto_pad, ceil_mode, dilations, kernel_shape, pads,
strides (+ count_include_pad for AveragePool, storage_order for MaxPool). Window geometry comes
from ``sprat.ir.shapes.nn.pool_geometry`` (the shape function's own rule). The second MaxPool
output (Indices) is not produced here: such nodes stay on the reference backend.
The compiled kernel (``compiled/data.pxi``) vectorises over the channels of one output pixel.
"""

from __future__ import annotations

import numpy as np

from ...ir.shapes.nn import pool_geometry
from ._base import PARALLEL_MIN_ELEMENTS, CpuKernel
from ._math import ACT, act_of
from .compiled import kernels as ck

_Q8 = (np.dtype(np.uint8), np.dtype(np.int8))


class PoolKernel(CpuKernel):
    """MaxPool (one output) and AveragePool over NHWC float32, with a fused activation; and
    MaxPool over NHWC uint8 / int8 (a QOperator model's pool between quantized convs: the max
    of the window's values inside the map, exact), on the TFLite pool kernel
    (``ck.tfl_pool``, whose window is clipped to the map as ONNX's padding is ignored)."""

    flat_run = "call"

    @classmethod
    def supports(cls, node, ins) -> bool:
        x = ins[0]
        if node.attrs.get("_layout") != "NHWC" or node.attrs.get("_residual"):
            return False
        if node.attrs.get("_activation") not in ACT:
            return False
        k = node.attrs.get("kernel_shape")
        if x is None or k is None or len(k) != len(x.shape) - 2 or len(node.outputs) != 1:
            return False
        if x.dtype in _Q8:
            return cls._int_geometry(node, tuple(x.shape)) is not None
        return x.dtype == np.float32 and len(x.shape) in (3, 4)

    @staticmethod
    def _geometry(node, shape):
        """(spatial, kernel, out, pads begin, pads end, strides, dilations), 1-D as 2-D."""
        a = node.attrs
        one_d = len(shape) == 3
        spatial = [shape[1]] if one_d else list(shape[1:3])
        k = [int(v) for v in a["kernel_shape"]]
        out, pb, pe, st, dl = pool_geometry(spatial, k, a.get("strides"), a.get("dilations"),
                                            a.get("pads"), a.get("auto_pad", "NOTSET"),
                                            a.get("ceil_mode", 0))
        if one_d:
            return ([1] + spatial, [1] + k, [1] + out, [0] + pb, [0] + pe, [1] + st, [1] + dl)
        return spatial, k, out, pb, pe, st, dl

    @classmethod
    def _int_geometry(cls, node, shape):
        """``ck.tfl_pool``'s geometry of an 8-bit MaxPool (NHWC rank 4, dilation 1, every
        window overlapping the map), or None."""
        if node.op_type != "MaxPool" or len(shape) != 4 or node.attrs.get("_activation"):
            return None
        spatial, k, out, pb, _, st, dl = cls._geometry(node, shape)
        if any(d != 1 for d in dl) or min(out) < 1 or any(
                p >= kk or (o - 1) * s - p >= n for p, kk, o, s, n in zip(pb, k, out, st, spatial)):
            return None
        return (shape[0], spatial[0], spatial[1], shape[3], out[0], out[1], k[0], k[1], st[0],
                st[1], pb[0], pb[1])

    def prepare(self, ins, outs):
        a = self.node.attrs
        shape = ins[0].shape
        self.int8 = ins[0].dtype in _Q8
        if self.int8:
            geom = self._int_geometry(self.node, tuple(shape))
            signed = ins[0].dtype == np.int8
            # NOTE: kind 1 int8, 2 uint8; the clamp is the type's range (no-op)
            self.args = (2 - signed, *geom, -128 if signed else 0, 127 if signed else 255)
            rows = geom[0] * geom[4]
            work = int(np.prod(outs[0].shape, dtype=np.int64)) * geom[6] * geom[7]
            self.nt = self.threads if rows > 1 and work >= PARALLEL_MIN_ELEMENTS else 1
            return
        spatial, k, out, pb, pe, st, dl = self._geometry(self.node, shape)
        n, c = shape[0], shape[-1]
        self.args = (n, spatial[0], spatial[1], c, out[0], out[1], k[0], k[1], st[0], st[1],
                     dl[0], dl[1], pb[0], pb[1], spatial[0] + pe[0], spatial[1] + pe[1],
                     self.node.op_type == "MaxPool", bool(a.get("count_include_pad", 0)))
        self.act = act_of(self.node)

    def run(self, ins, outs, ws):
        x, y = ins[0], outs[0]
        if self.int8:
            kind, *geom = self.args
            self.bound_call(ws, (x, y), lambda: (ck.tfl_pool, (
                self.nt, False, x.reshape(-1).view(np.uint8), kind,
                y.reshape(-1).view(np.uint8), *geom)))
            return
        code, a, b = self.act
        self.bound_call(ws, (x, y), lambda: (ck.pool2d, (x.reshape(-1), y.reshape(-1), *self.args,
                                                  self.threads, code, a, b)))
