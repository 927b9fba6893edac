"""ConvTranspose in NHWC for the upsampling case kernel == stride (e.g. 2x2 stride 2).

Then the output windows do not overlap: each input pixel's channel vector times the packed
weights (C, kh*kw*M) gives its kh x kw output block, so the op is one GEMM per block of input
rows into a scratch buffer, scattered into the output with bias, residual and activation fused.
The kernel is compiled (``compiled/conv.pxi``: ``conv_transpose``).
ONNX ConvTranspose-22: X (N, C, H, W), W (C, M/group, kH, kW), optional B (M). Supported here:
group 1, dilations 1, no pads / output_padding (after resolving auto_pad and output_shape with
the shape function's own rule); everything else stays on the reference backend.
"""

from __future__ import annotations

import numpy as np

from ...ir.shapes.nn import conv_transpose_geometry
from ._base import CpuKernel, scratch
from ._epilogue import empty_f32
from ._math import ACT, act_of
from .compiled import kernels as ck
from .conv import GEMM_ROWS, _rows_per_block, views


def _geometry(node, x_shape, w_shape):
    a = node.attrs
    return conv_transpose_geometry(
        list(x_shape[1:3]), list(w_shape[2:]), a.get("strides"), a.get("dilations"),
        a.get("pads"), a.get("auto_pad", "NOTSET"), a.get("output_padding"),
        a.get("output_shape"))


class ConvTransposeKernel(CpuKernel):
    """NHWC ConvTranspose with kernel == stride (non-overlapping upsampling)."""

    flat_run = "call"

    @classmethod
    def supports(cls, node, ins) -> bool:
        a = node.attrs
        if a.get("_layout") != "NHWC" or a.get("_activation") not in ACT:
            return False
        n_in = len(ins) - (1 if a.get("_residual") else 0)
        x, w = ins[0], ins[1]
        bias = ins[2] if n_in > 2 else None
        if x is None or w is None or w.value is None or len(x.shape) != 4 or len(w.shape) != 4:
            return False
        if x.dtype != np.float32 or w.dtype != np.float32 or int(a.get("group", 1)) != 1:
            return False
        if bias is not None and (bias.value is None or bias.dtype != np.float32):
            return False
        if w.shape[0] != x.shape[3]:
            return False
        _, pb, pe, st, dl, op = _geometry(node, x.shape, w.shape)
        return (list(st) == list(w.shape[2:]) and dl == [1, 1] and pb == [0, 0]
                and pe == [0, 0] and op == [0, 0])

    def prepare(self, ins, outs):
        node = self.node
        self.has_res = bool(node.attrs.get("_residual"))
        n_in = len(ins) - (1 if self.has_res else 0)
        n, h, w, c = ins[0].shape
        wv = np.asarray(ins[1].value, np.float32)
        m, kh, kw = wv.shape[1:]
        self.w = self.shared("w", lambda: np.ascontiguousarray(
            wv.transpose(0, 2, 3, 1)).ravel())  # (C, kh, kw, M)
        self.packed = () if np.may_share_memory(self.w, ins[1].value) else (1,)
        bias = ins[2] if n_in > 2 else None
        self.bias = np.tile(np.zeros(m, np.float32) if bias is None  # (kw, M): one scatter run
                            else np.ascontiguousarray(bias.value, np.float32).reshape(m), kw)
        self.act = act_of(node)
        self.empty = empty_f32()
        nt = self.threads
        self.rows = _rows_per_block(n, h, max(1, GEMM_ROWS // w), nt)
        self.dims = (n, h, w, c, m, kh, kw)
        self.workspaces = (scratch(nt, self.rows * w * kh * kw * m),)

    def run(self, ins, outs, ws):
        x, y = ins[0], outs[0]
        r = ins[-1] if self.has_res else None
        self.bound_call(ws, (x, y, r), lambda: self._args_for(x, y, r, ws.buffers[0]))

    def _args_for(self, x, y, r, acc):
        code, a, b = self.act
        res = self.empty if r is None else r.reshape(-1)
        return ck.conv_transpose, views((self.threads, x.reshape(-1), self.w, self.bias, res,
                                         self.has_res, y.reshape(-1), *self.dims, self.rows,
                                         acc, code, a, b))
