"""Softmax, LayerNormalization and BatchNormalization (inference), compiled
(``softmax``, ``layernorm``, ``channel_affine`` in ``compiled/dense.pxi``).

- Softmax-13 along ``axis``: rows (axis last) use eight max lanes and the vectorisable exp;
  a middle axis runs as (O, L, I) vectorised over I. LogSoftmax likewise.
- LayerNormalization-17 over the trailing dims from ``axis`` (Y only): two-pass mean/variance
  per row in float32 (the row is in L1), then ``(x - mean) * inv * scale + bias``.
- BatchNormalization-15, training_mode 0, constant statistics: folded at prepare into a per
  channel ``y = x * s + t`` (NCHW, or NHWC with ``_layout="NHWC"``), with fused residual and
  activation.
- LRN-13 in NHWC (``lrn_nhwc`` in ``compiled/data.pxi``): per pixel, prefix sums of the squares
  over the channels in double, then ``x * (bias + alpha / size * window sum) ^ -beta``.
"""

from __future__ import annotations

import numpy as np

from ._base import PARALLEL_MIN_ELEMENTS, CpuKernel, scratch
from ._epilogue import empty_f32, tiled_bias
from ._math import ACT, act_of
from .compiled import kernels as ck


def _plain(node) -> bool:
    a = node.attrs
    return (a.get("_layout") is None and not a.get("_residual")
            and a.get("_activation") is None)


def split_axis(shape, axis) -> tuple[int, int, int]:
    """``(outer, n, inner)``: ``shape`` as the values before ``axis``, along it and after it."""
    axis = axis % len(shape)
    o = int(np.prod(shape[:axis], dtype=np.int64))
    i = int(np.prod(shape[axis + 1:], dtype=np.int64))
    return o, int(shape[axis]), i


class SoftmaxKernel(CpuKernel):
    """Softmax-13 / LogSoftmax-13 of float32 along one axis."""

    flat_run = "call"

    @classmethod
    def supports(cls, node, ins) -> bool:
        x = ins[0]
        return (_plain(node) and x is not None and x.dtype == np.float32 and len(x.shape) >= 1
                and x.size > 0)

    def prepare(self, ins, outs):
        self.dims = split_axis(ins[0].shape, int(self.node.attrs.get("axis", -1)))
        self.log = self.node.op_type == "LogSoftmax"
        self.nt = self.threads if ins[0].size >= PARALLEL_MIN_ELEMENTS else 1

    def run(self, ins, outs, ws):
        x, y = ins[0], outs[0]
        o, l_, i = self.dims
        self.bound_call(ws, (x, y), lambda: (ck.softmax, (
            x.reshape(-1), y.reshape(-1), o, l_, i, self.log, self.nt)))


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
        # NOTE: a one-value Scale or B is spread by run before its bound call
        self.flat_run = "call" if self.full_scale and (self.full_bias or not self.has_bias) \
            else None
        self.bind_constants(ins, (1, 2))

    def run(self, ins, outs, ws):
        s_in = self.arg(ins, 1)
        b_in = self.arg(ins, 2) if self.has_bias else None
        if not self.full_scale:  # NOTE: a one-value Scale or B may be a graph input
            self.ones.fill(s_in.reshape(-1)[0])
        if b_in is not None and not self.full_bias:
            self.zeros.fill(b_in.reshape(-1)[0])
        x, y = ins[0], outs[0]
        self.bound_call(ws, (x, y, s_in, b_in), lambda: self._call(x, y, s_in, b_in))

    def _call(self, x, y, s_in, b_in):
        scale = s_in.reshape(-1) if self.full_scale else self.ones
        bias = b_in.reshape(-1) if b_in is not None and self.full_bias else self.zeros
        return ck.layernorm, (x.reshape(-1), y.reshape(-1), self.rows, self.D, scale, bias,
                              self.eps, self.nt)


class BatchNormKernel(CpuKernel):
    """BatchNormalization-15 inference with constant scale/B/mean/var, NCHW or NHWC."""

    flat_run = "call"

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
        x, y = ins[0], outs[0]
        r = ins[-1] if self.has_res else None
        self.bound_call(ws, (x, y, r), lambda: self._call(x, y, r))

    def _call(self, x, y, r):
        o, c, i = self.dims
        code, pa, pb = self.act
        res = self.empty if r is None else r.reshape(-1)
        return ck.channel_affine, (x.reshape(-1), y.reshape(-1), o, c, i, self.s, self.b, res,
                                   self.has_res, code, pa, pb, self.nt)


class LRNKernel(CpuKernel):
    """LRN-13 of float32 NHWC data (``_layout="NHWC"``: channels last, the window runs along
    the contiguous axis); attrs alpha, beta, bias, size."""

    @classmethod
    def supports(cls, node, ins) -> bool:
        a = node.attrs
        x = ins[0] if ins else None
        return (a.get("_layout") == "NHWC" and not a.get("_residual")
                and a.get("_activation") is None and x is not None
                and x.dtype == np.float32 and len(x.shape) >= 2 and int(a.get("size", 0)) >= 1)

    def prepare(self, ins, outs):
        a = self.node.attrs
        shape = ins[0].shape
        self.c = int(shape[-1])
        self.rows = int(np.prod(shape[:-1], dtype=np.int64))
        self.size = int(a["size"])
        self.params = (float(a.get("bias", 1.0)), float(a.get("alpha", 1e-4)),
                       float(a.get("beta", 0.75)))
        self.nt = self.threads if self.rows * self.c >= PARALLEL_MIN_ELEMENTS else 1
        self.workspaces = (scratch(self.nt, self.c + 1, np.float64),)

    def run(self, ins, outs, ws):
        ck.lrn_nhwc(self.nt, ins[0].reshape(-1), outs[0].reshape(-1), self.rows, self.c,
                    self.size, *self.params, ws.buffers[0])
