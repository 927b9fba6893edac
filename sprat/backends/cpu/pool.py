"""MaxPool / AveragePool in NHWC (``_layout="NHWC"``), 1-D and 2-D windows.

ONNX MaxPool-12 / AveragePool-22: attrs auto_pad, ceil_mode, dilations, kernel_shape, pads,
strides (+ count_include_pad for AveragePool, storage_order for MaxPool). Window geometry comes
from ``sprat.ir.shapes.nn.pool_geometry`` (the shape function's own rule). The second MaxPool
output (Indices) is not produced here: such nodes stay on the reference backend.
The Numba kernel vectorises over the channels of one output pixel.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ...ir.shapes.nn import pool_geometry
from ._base import CpuKernel
from ._jit import njit
from ._math import ACT, FAST, acc_max, act_inplace, act_of


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def _pool_rows(x, y, lo, hi, H, W, C, OH, OW, kh, kw, sh, sw, dh, dw, ph, pw, he, we, is_max,
               include_pad, code, a, b):
    for q in range(lo, hi):
        n = q // OH
        oh = q - n * OH
        cnt_h = 0
        for i in range(kh):
            ih = oh * sh - ph + i * dh
            if (ih >= 0 and ih < H) or (include_pad and ih < he):
                cnt_h += 1
        for ow in range(OW):
            yo = y[(q * OW + ow) * C:(q * OW + ow + 1) * C]
            cnt_w = 0
            for j in range(kw):
                iw = ow * sw - pw + j * dw
                if (iw >= 0 and iw < W) or (include_pad and iw < we):
                    cnt_w += 1
            init = -np.inf if is_max else 0.0
            for c in range(C):
                yo[c] = init
            for i in range(kh):
                ih = oh * sh - ph + i * dh
                if ih < 0 or ih >= H:
                    continue
                for j in range(kw):
                    iw = ow * sw - pw + j * dw
                    if iw < 0 or iw >= W:
                        continue
                    s = ((n * H + ih) * W + iw) * C
                    xs = x[s:s + C]
                    if is_max:
                        for c in range(C):
                            yo[c] = acc_max(yo[c], xs[c])
                    else:
                        for c in range(C):
                            yo[c] += xs[c]
            if not is_max:
                inv = np.float32(1.0) / np.float32(max(1, cnt_h * cnt_w))
                for c in range(C):
                    yo[c] *= inv
        if code != 0:
            act_inplace(y[q * OW * C:(q + 1) * OW * C], code, a, b)


@njit(cache=True, error_model="numpy", nogil=True, parallel=True)
def pool2d(x, y, N, H, W, C, OH, OW, kh, kw, sh, sw, dh, dw, ph, pw, he, we, is_max,
           include_pad, nt, code, a, b):
    """Output rows (n, oh) split over ``nt`` slots; ``he``/``we``: end of the padded extent."""
    rows = N * OH
    for t in prange(nt):
        _pool_rows(x, y, t * rows // nt, (t + 1) * rows // nt, H, W, C, OH, OW, kh, kw, sh, sw,
                   dh, dw, ph, pw, he, we, is_max, include_pad, code, a, b)


class PoolKernel(CpuKernel):
    """MaxPool (one output) and AveragePool over NHWC float32, with a fused activation."""

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
        self.bound_call(ws, (x, y), lambda: (pool2d, (x.reshape(-1), y.reshape(-1), *self.args,
                                                  self.threads, code, a, b)))
