"""QuantizeLinear and DequantizeLinear per tensor (uint8/int8 <-> float32), compiled.

ONNX QuantizeLinear-21: ``y = saturate(round_half_even(x / y_scale) + y_zero_point)``;
DequantizeLinear-21: ``y = (x - x_zero_point) * x_scale``; the same float32 operations as the
reference kernels (``ops_quant``), so the results are equal bit for bit. Per-axis and blocked
scales, other types and ``saturate=0`` run on the reference kernels. The ops are elementwise:
any layout.

Also the 8-bit tables (QLinearLookup: ``passes.fuse_qdq``'s tables, TFLite's lookups) and
onnxruntime's quantized contrib ops QLinearAdd / QLinearMul (same shapes, or one operand
broadcast over a run of axes), QLinearGlobalAveragePool (channels last), QLinearAveragePool
(NCHW, 2-D windows) and QLinearSoftmax,
each equal to its reference kernel bit for bit.
"""

from __future__ import annotations

import numpy as np

from ._base import (
    PARALLEL_MIN_DEQUANT,
    PARALLEL_MIN_ELEMENTS,
    PARALLEL_MIN_QUANT,
    CpuKernel,
    scratch,
)
from .compiled import kernels as ck
from .norm import split_axis

_Q8 = (np.dtype(np.uint8), np.dtype(np.int8))


def byte_view(a: np.ndarray):
    """``a``'s bytes as a typed memoryview object (``ck.i8_view``). NOTE: the 8-bit kernels
    build their argument tuples once per binding of their arrays (``bound_call``), with such
    views: an ndarray argument costs a buffer request per call, and on small tensors the
    calls' Python overhead was most of the time"""
    return ck.i8_view(a.reshape(-1).view(np.uint8))


def flat_view(a: np.ndarray):
    """``a`` (int32 or float32) flattened, as a typed memoryview object."""
    return ck.i8_view(a.reshape(-1))


def _scalar(info):
    if info is None or info.value is None or np.asarray(info.value).size != 1:
        return None
    return np.asarray(info.value).reshape(())


class QuantizeKernel(CpuKernel):
    """QuantizeLinear / DequantizeLinear with a constant per-tensor scale and zero point:
    float32 x -> uint8/int8 y, or uint8/int8 x -> float32 y (the scale float32)."""

    flat_run = "call"

    @classmethod
    def supports(cls, node, ins) -> bool:
        if any(k.startswith("_") for k in node.attrs) or int(node.attrs.get("block_size", 0)):
            return False
        ins = list(ins) + [None, None]
        x, s, z = ins[:3]
        sv = _scalar(s)
        if x is None or sv is None or s.dtype != np.float32:
            return False
        if z is not None and _scalar(z) is None:
            return False
        if node.op_type == "QuantizeLinear":
            out = z.dtype if z is not None else None
            if out is None:
                code = int(node.attrs.get("output_dtype", 0))
                out = np.dtype(np.uint8) if code in (0, 2) else (
                    np.dtype(np.int8) if code == 3 else None)
            return (x.dtype == np.float32 and out in _Q8
                    and int(node.attrs.get("saturate", 1)) == 1)
        return x.dtype in _Q8 and int(node.attrs.get("output_dtype", 0)) in (0, 1)

    def prepare(self, ins, outs):
        ins = list(ins) + [None, None]
        x, s, z = ins[:3]
        self.scale = float(np.float32(_scalar(s)))
        self.zp = 0.0 if z is None else float(_scalar(z))
        self.n = int(np.prod(x.shape))
        self.quantize = self.node.op_type == "QuantizeLinear"
        least = PARALLEL_MIN_QUANT if self.quantize else PARALLEL_MIN_DEQUANT
        self.nt = self.threads if self.n >= least else 1
        dt = outs[0].dtype if self.quantize else x.dtype
        self.signed = dt == np.int8

    def run(self, ins, outs, ws):
        x, y = ins[0], outs[0]
        self.bound_call(ws, (x, y), lambda: (ck.quantize8, (
            self.nt, flat_view(x), byte_view(y), self.n, self.scale, self.zp, self.signed))
            if self.quantize else (ck.dequantize8, (
                self.nt, byte_view(x), flat_view(y), self.n, self.zp, self.scale, self.signed)))


class LookupKernel(CpuKernel):
    """QLinearLookup (``passes.fuse_qdq``): uint8/int8 X through a constant per-channel table
    (C, 256) or (1, 256) along ``axis``; any layout. Also TFLite's TflLookup (LOGISTIC, TANH
    and the other 8-bit lookup-table kernels): one (256,) table, ``y = table[x - min]``."""

    flat_run = "call"

    @classmethod
    def supports(cls, node, ins) -> bool:
        if any(k.startswith("_") for k in node.attrs) or len(ins) != 2:
            return False
        x, table = ins
        return (x is not None and table is not None and table.value is not None
                and len(x.shape) >= 1 and x.dtype in _Q8 and table.dtype in _Q8)

    def prepare(self, ins, outs):
        x, table = ins
        shape = tuple(x.shape)
        axis = int(self.node.attrs.get("axis", 1)) % len(shape)
        self.outer = int(np.prod(shape[:axis]))
        self.c = shape[axis]
        self.inner = int(np.prod(shape[axis + 1:]))
        self.table = np.ascontiguousarray(table.value).reshape(-1).view(np.uint8)
        n = self.outer * self.c * self.inner
        self.nt = self.threads if n >= PARALLEL_MIN_ELEMENTS else 1
        self.signed = x.dtype == np.int8

    def run(self, ins, outs, ws):
        x, y = ins[0], outs[0]
        self.bound_call(ws, (x, y), lambda: (ck.qlinear_lookup, (
            self.nt, byte_view(x), byte_view(y), ck.i8_view(self.table), self.outer, self.c,
            self.inner, self.signed)))


def _broadcast_rows(full, other) -> tuple[int, int, int] | None:
    """``(outer, mid, inner)`` when ``other`` (a shape) broadcasts to ``full`` over one run of
    consecutive axes (``full`` = (outer, mid, inner) values, ``other`` (outer, 1, inner)), as a
    squeeze-excite scale (N, 1, 1, C) does to its map (N, H, W, C); None otherwise."""
    full, other = tuple(full), tuple(other)
    if len(other) > len(full):
        return None
    other = (1,) * (len(full) - len(other)) + other
    ones = [k for k, (f, o) in enumerate(zip(full, other)) if o != f]
    if any(other[k] != 1 for k in ones) or (ones and ones != list(range(ones[0], ones[-1] + 1))):
        return None
    if not ones:
        return 1, 1, int(np.prod(full))
    outer = int(np.prod(full[:ones[0]]))
    mid = int(np.prod(full[ones[0]:ones[-1] + 1]))
    return outer, mid, int(np.prod(full[ones[-1] + 1:]))


class QLinearBinaryKernel(CpuKernel):
    """com.microsoft QLinearAdd / QLinearMul of two uint8 (or int8) tensors with constant
    per-tensor scales and zero points, the output of the same type (onnxruntime's contrib ops;
    the reference's float32 operations, so equal bit for bit): same shapes, or one operand
    broadcast over a run of consecutive axes (``_broadcast_rows``: a squeeze-excite scale
    times its map; the operands swapped when the first is the smaller, + and * being
    commutative in float32)."""

    flat_run = "call"

    @classmethod
    def supports(cls, node, ins) -> bool:
        if any(k.startswith("_") for k in node.attrs) or len(ins) not in (7, 8):
            return False
        a, sa, za, b, sb, zb, sc = ins[:7]
        zc = ins[7] if len(ins) > 7 else None
        if a is None or b is None or a.dtype not in _Q8 or b.dtype != a.dtype:
            return False
        if tuple(a.shape) != tuple(b.shape) and _broadcast_rows(a.shape, b.shape) is None \
                and _broadcast_rows(b.shape, a.shape) is None:
            return False
        for s in (sa, sb, sc):
            if _scalar(s) is None or s.dtype != np.float32:
                return False
        return all(z is None or (_scalar(z) is not None and z.dtype == a.dtype)
                   for z in (za, zb, zc))

    def prepare(self, ins, outs):
        a, sa, za, b, sb, zb, sc = ins[:7]
        zc = ins[7] if len(ins) > 7 else None

        def f(info):
            return 0.0 if info is None else float(np.float32(_scalar(info)))

        # NOTE: the full operand first (``swap``: b is), with its parameters
        self.swap = tuple(a.shape) != tuple(outs[0].shape)
        pa, pb = (f(za), f(sa)), (f(zb), f(sb))
        self.params = (*pb, *pa, f(sc), f(zc)) if self.swap else (*pa, *pb, f(sc), f(zc))
        full, small = (b, a) if self.swap else (a, b)
        # NOTE: mid 1 (the same values, the shapes differing by leading 1s): the same-shape
        # call, split over the slots by values
        rows = _broadcast_rows(full.shape, small.shape)
        self.rows = None if rows[1] == 1 else rows
        self.n = int(np.prod(full.shape))
        self.nt = self.threads if self.n >= PARALLEL_MIN_QUANT else 1
        self.signed = a.dtype == np.int8
        self.mul = self.node.op_type == "QLinearMul"

    def run(self, ins, outs, ws):
        a, b, y = ins[0], ins[3], outs[0]
        if self.swap:
            a, b = b, a
        if self.rows is not None:
            self.bound_call(ws, (a, b, y), lambda: (ck.qlinear_binary_rows, (
                self.nt, self.mul, byte_view(a), byte_view(b), byte_view(y), *self.rows,
                self.signed, *self.params)))
            return
        self.bound_call(ws, (a, b, y), lambda: (ck.qlinear_binary, (
            self.nt, self.mul, byte_view(a), byte_view(b), byte_view(y), self.n, self.signed,
            *self.params)))


class QLinearGlobalAveragePoolKernel(CpuKernel):
    """com.microsoft QLinearGlobalAveragePool over a channels-last uint8 / int8 map (the
    layout pass's ``_layout="NHWC"``, or the op's own ``channels_last=1``), constant per-tensor
    scales and zero points: ``ck.qlinear_global_average_pool``, onnxruntime's integer form
    (``ops_contrib.qlinear_global_average_pool``), the same bytes as the reference kernel."""

    flat_run = "call"

    @classmethod
    def supports(cls, node, ins) -> bool:
        a = node.attrs
        nhwc = a.get("_layout") == "NHWC" or int(a.get("channels_last", 0))
        if not nhwc or any(k.startswith("_") and k != "_layout" for k in a) or len(ins) != 5:
            return False
        x, sx, zx, sy, zy = ins
        if x is None or x.dtype not in _Q8 or len(x.shape) < 3 or zy is None \
                or zy.dtype != x.dtype:
            return False
        return (all(_scalar(s) is not None and s.dtype == np.float32 for s in (sx, sy))
                and all(z is None or (_scalar(z) is not None and z.dtype == x.dtype)
                        for z in (zx, zy)))

    def prepare(self, ins, outs):
        x, sx, zx, sy, zy = ins
        shape = tuple(x.shape)
        self.n, self.c = shape[0], shape[-1]
        self.hw = int(np.prod(shape[1:-1]))
        # NOTE: float32 x_scale / (y_scale * HW), MLAS's order
        self.scale = float(np.float32(_scalar(sx)) / (np.float32(_scalar(sy))
                                                     * np.float32(self.hw)))
        self.xz = 0 if zx is None else int(_scalar(zx))
        self.yz = int(_scalar(zy))
        self.signed = x.dtype == np.int8
        self.nt = self.threads if self.n > 1 and self.n * self.hw * self.c >= \
            PARALLEL_MIN_ELEMENTS else 1
        self.workspaces = (scratch(1, self.nt * self.c, np.int32),)

    def run(self, ins, outs, ws):
        x, y = ins[0], outs[0]
        self.bound_call(ws, (x, y), lambda: (ck.qlinear_global_average_pool, (
            self.nt, byte_view(x), byte_view(y), self.n, self.hw, self.c, self.signed, self.xz,
            self.scale, self.yz, ws.buffers[0].reshape(-1))))


class QLinearAveragePoolKernel(CpuKernel):
    """com.microsoft QLinearAveragePool (X, x_scale, x_zp, y_scale, y_zp; AveragePool's
    attributes) over an NCHW uint8 / int8 map with 2-D windows, constant per-tensor scales and
    zero points: ``ck.qlinear_average_pool``, the reference kernel's operations
    (``ops_contrib.qlinear_average_pool``: the dequantized float32 values summed exactly,
    divided by the window's count, quantized), the same bytes. A window with no tap to count
    (``count_include_pad=0`` and pads wider than the kernel) stays on the reference."""

    flat_run = "call"

    @classmethod
    def supports(cls, node, ins) -> bool:
        a = node.attrs
        if any(k.startswith("_") for k in a) or int(a.get("channels_last", 0)) or len(ins) != 5:
            return False
        x, sx, zx, sy, zy = ins
        if (x is None or x.dtype not in _Q8 or len(x.shape) != 4
                or len(a.get("kernel_shape", ())) != 2
                or not all(_scalar(v) is not None and v.dtype == np.float32 for v in (sx, sy))
                or not all(z is None or (_scalar(z) is not None and z.dtype == x.dtype)
                           for z in (zx, zy))):
            return False
        return bool((cls._geometry(x.shape, a)[-1] > 0).all())

    @staticmethod
    def _geometry(shape, a):
        """``(out, k, pb, st, dl, count)``: the reference's pooling geometry and each output
        pixel's divisor (``ops_nn.average_pool``'s), float64 (OH * OW)."""
        from ..reference.ops_nn import _pad_spatial, _pool_setup, _windows

        sp = tuple(shape[2:])
        out, k, pb, pe, st, dl, need = _pool_setup(
            np.empty((1, 1) + sp, np.uint8), a.get("kernel_shape"), a.get("strides"),
            a.get("dilations"), a.get("pads"), a.get("auto_pad", "NOTSET"),
            int(a.get("ceil_mode", 0)))
        if int(a.get("count_include_pad", 0)):
            padded = tuple(sp[i] + pb[i] + pe[i] for i in range(2))
            ones = _pad_spatial(np.ones((1, 1) + padded), [0, 0],
                                [need[i] - padded[i] for i in range(2)], 0)
        else:
            ones = _pad_spatial(np.ones((1, 1) + sp), pb,
                                [need[i] - sp[i] - pb[i] for i in range(2)], 0)
        count = _windows(ones, out, k, st, dl).sum(axis=(-2, -1)).reshape(-1)
        return out, k, pb, st, dl, np.ascontiguousarray(count, np.float64)

    def prepare(self, ins, outs):
        x, sx, zx, sy, zy = ins
        out, k, pb, st, dl, self.count = self._geometry(x.shape, self.node.attrs)
        self.dims = (int(x.shape[0]) * int(x.shape[1]), int(x.shape[2]), int(x.shape[3]),
                     int(out[0]), int(out[1]), *k, *st, *dl, *pb)
        self.signed = x.dtype == np.int8
        # NOTE: each byte's dequantized value, by the reference's float32 operations
        raw = np.arange(256, dtype=np.uint8).view(x.dtype)
        xz = 0 if zx is None else int(_scalar(zx))
        self.table = ((raw.astype(np.int32) - xz).astype(np.float32)
                      * np.float32(_scalar(sx))).astype(np.float64)
        self.ys = float(np.float32(_scalar(sy)))
        self.yz = float(np.float32(0 if zy is None else int(_scalar(zy))))
        planes = self.dims[0]
        self.nt = self.threads if planes > 1 and planes * int(np.prod(x.shape[2:])) >= \
            PARALLEL_MIN_ELEMENTS else 1

    def run(self, ins, outs, ws):
        x, y = ins[0], outs[0]
        self.bound_call(ws, (x, y), lambda: (ck.qlinear_average_pool, (
            self.nt, byte_view(x), byte_view(y), *self.dims, self.table, self.count, self.ys,
            self.yz, self.signed)))


class QLinearSoftmaxKernel(CpuKernel):
    """com.microsoft QLinearSoftmax (X, X_scale, x_zp, y_scale, y_zp; ``axis``, ``opset``) of
    a uint8 / int8 tensor, constant per-tensor scales and zero points: ``ck.qlinear_softmax``,
    the reference kernel's operations (``ops_contrib.qlinear_softmax``: the exponentials of
    the integer differences from a row's max through one 256-value table, the sum in order),
    the same bytes. A transformer's attention probabilities in a QOperator model (ViT-tiny:
    11 ms of its run on the reference kernel)."""

    flat_run = "call"

    @classmethod
    def supports(cls, node, ins) -> bool:
        if any(k.startswith("_") for k in node.attrs) or len(ins) not in (4, 5):
            return False
        x, sx, zx, sy = ins[:4]
        zy = ins[4] if len(ins) == 5 else None
        if x is None or x.dtype not in _Q8 or len(x.shape) < 1:
            return False
        return (all(_scalar(s) is not None for s in (sx, sy))
                and all(z is None or _scalar(z) is not None for z in (zx, zy)))

    def prepare(self, ins, outs):
        from ..reference.ops_contrib import softmax_exp_table

        x, sx, _, sy = ins[:4]
        shape = tuple(x.shape)
        axis = int(self.node.attrs.get("axis", -1)) % len(shape)
        if int(self.node.attrs.get("opset", 13)) < 13:
            # NOTE: Softmax-1/11's semantics: the trailing dims from axis as one row
            shape = shape[:axis] + (int(np.prod(shape[axis:], dtype=np.int64)),)
        self.outer, self.n, self.inner = split_axis(shape, axis)
        self.table = np.ascontiguousarray(softmax_exp_table(_scalar(sx)), np.float32)
        self.ys = float(np.float32(_scalar(sy)))
        zy = ins[4] if len(ins) == 5 else None
        self.yz = 0.0 if zy is None else float(_scalar(zy))
        self.in_signed = x.dtype == np.int8
        self.out_signed = outs[0].dtype == np.int8
        total = self.outer * self.n * self.inner
        self.nt = self.threads if total >= PARALLEL_MIN_ELEMENTS else 1
        self.workspaces = (scratch(self.nt, self.n + 8),)

    def run(self, ins, outs, ws):
        x, y = ins[0], outs[0]
        self.bound_call(ws, (x, y), lambda: (ck.qlinear_softmax, (
            self.nt, byte_view(x), byte_view(y), self.outer, self.n, self.inner,
            self.in_signed, self.table, self.ys, self.yz, self.out_signed,
            ws.buffers[0])))
