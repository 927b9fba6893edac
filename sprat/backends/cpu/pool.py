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
from ._base import CpuKernel
from ._math import ACT, act_of
from .compiled import kernels as ck


class PoolKernel(CpuKernel):
    """MaxPool (one output) and AveragePool over NHWC float32, with a fused activation."""

    flat_run = "call"

    @classmethod
    def supports(cls, node, ins) -> bool:
        x = ins[0]
        if node.attrs.get("_layout") != "NHWC" or node.attrs.get("_residual"):
            return False
        if node.attrs.get("_activation") not in ACT:
            return False
        if x is None or x.dtype != np.float32 or len(x.shape) not in (3, 4):
            return False
        k = node.attrs.get("kernel_shape")
        return k is not None and len(k) == len(x.shape) - 2 and len(node.outputs) == 1

    def prepare(self, ins, outs):
        a = self.node.attrs
        shape = ins[0].shape
        one_d = len(shape) == 3
        spatial = [shape[1]] if one_d else list(shape[1:3])
        k = [int(v) for v in a["kernel_shape"]]
        out, pb, pe, st, dl = pool_geometry(spatial, k, a.get("strides"), a.get("dilations"),
                                            a.get("pads"),
                                            a.get("auto_pad", "NOTSET"),
                                            a.get("ceil_mode", 0))
        if one_d:
            spatial, k, out, pb, pe, st, dl = ([1] + spatial, [1] + k, [1] + out, [0] + pb,
                                               [0] + pe, [1] + st, [1] + dl)
        n, c = shape[0], shape[-1]
        self.args = (n, spatial[0], spatial[1], c, out[0], out[1], k[0], k[1], st[0], st[1],
                     dl[0], dl[1], pb[0], pb[1], spatial[0] + pe[0], spatial[1] + pe[1],
                     self.node.op_type == "MaxPool", bool(a.get("count_include_pad", 0)))
        self.act = act_of(self.node)

    def run(self, ins, outs, ws):
        x, y = ins[0], outs[0]
        code, a, b = self.act
        self.bound_call(ws, (x, y), lambda: (ck.pool2d, (x.reshape(-1), y.reshape(-1), *self.args,
                                                  self.threads, code, a, b)))
