"""Reference kernels: quantization ops.

Quantize: ``y = saturate(round_half_to_even(x / scale) + zero_point)``; dequantize:
``y = (x - zero_point) * scale``; scales/zero points are per-tensor, per-axis or blocked (expanded
to x's shape by :func:`_expand`). Integer matmul/conv accumulate exactly in int64 on
``x - zero_point`` (the float Conv reference, ``ops_nn.conv``, does the im2col), then QLinear ops
requantize the accumulator with the float32 multiplier ``x_scale * w_scale / y_scale`` as
onnxruntime does. Source: the ONNX operator spec (QuantizeLinear-21/23, DequantizeLinear-21/23,
DynamicQuantizeLinear-11, MatMulInteger-10, QLinearMatMul-21, ConvInteger-10, QLinearConv-10).
"""

from __future__ import annotations

import numpy as np

from ...ir.shapes.quant import output_dtype_of
from .ops_nn import conv

_I64 = np.int64


def _expand(p: np.ndarray, x_shape, axis: int, block_size: int) -> np.ndarray:
    """Scale or zero point ``p`` broadcastable against ``x_shape`` (per-tensor/axis/blocked)."""
    p = np.asarray(p)
    if block_size == 0 and p.size == 1 and p.ndim <= 1:
        return p.reshape(())
    a = axis % len(x_shape)
    if block_size == 0:
        return p.reshape((-1,) + (1,) * (len(x_shape) - a - 1))
    p = np.repeat(p, block_size, axis=a)
    return np.take(p, np.arange(x_shape[a]), axis=a)


def _saturate(v: np.ndarray, dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.clip(v, info.min, info.max).astype(dtype)


def quantize_linear(x, y_scale, y_zero_point=None, axis=1, block_size=0, output_dtype=0,
                    saturate=1, precision=0):
    """QuantizeLinear-21/23. x (*S) float/int32, y_scale, y_zero_point optional -> y (*S).

    Rounds half to even and saturates to the output type (uint8/int8/uint16/int16; the zero
    point's dtype, else ``output_dtype``, else uint8).
    """
    if y_zero_point is not None:
        dt = np.dtype(y_zero_point.dtype)
    elif output_dtype:
        dt = output_dtype_of("QuantizeLinear", output_dtype)
    else:
        dt = np.dtype(np.uint8)
    work = np.float64 if x.dtype == np.float64 else np.float32
    s = _expand(y_scale, x.shape, axis, block_size).astype(work)
    v = np.rint(x.astype(work) / s)
    if y_zero_point is not None:
        v = v + _expand(y_zero_point, x.shape, axis, block_size).astype(work)
    return _saturate(v, dt)


def dequantize_linear(x, x_scale, x_zero_point=None, axis=1, block_size=0, output_dtype=0):
    """DequantizeLinear-21/23. x (*S) int, x_scale, x_zero_point optional -> y (*S) float
    (``output_dtype`` when nonzero, else the scale's dtype)."""
    dt = output_dtype_of("DequantizeLinear", output_dtype) if output_dtype else x_scale.dtype
    v = x.astype(_I64)
    if x_zero_point is not None:
        v = v - _expand(x_zero_point, x.shape, axis, block_size).astype(_I64)
    work = np.float64 if dt == np.float64 else np.float32
    s = _expand(x_scale, x.shape, axis, block_size).astype(work)
    return (v.astype(work) * s).astype(dt)


def dynamic_quantize_linear(x):
    """DynamicQuantizeLinear-11. x float32 -> (y uint8, y_scale () float32, y_zero_point () uint8).

    ``scale = (max(0, max x) - min(0, min x)) / 255``, ``zp = saturate(round(-min / scale))``;
    an all-zero (or empty) x gives scale 1, zero point 0 and y 0 (as onnxruntime does).
    """
    lo = min(0.0, float(x.min())) if x.size else 0.0
    hi = max(0.0, float(x.max())) if x.size else 0.0
    scale = np.float32((np.float32(hi) - np.float32(lo)) / np.float32(255))
    if scale == 0:
        return (np.zeros(x.shape, np.uint8), np.asarray(1.0, np.float32),
                np.asarray(0, np.uint8))
    zp = _saturate(np.rint(np.float32(0) - np.float32(lo) / scale), np.uint8)
    y = _saturate(np.rint(x / scale) + np.float32(zp), np.uint8)
    return y, np.asarray(scale, np.float32), np.asarray(zp, np.uint8)


def _row_zp(zp, a):
    """Zero point / scale of A: scalar or per-row (M,) -> broadcastable against A (..., M, K)."""
    zp = np.asarray(zp)
    if zp.size == 1 or a.ndim < 2:
        return zp.reshape(())
    return zp.reshape(-1, 1)


def _col_zp(zp):
    """Zero point / scale of B: scalar, per-column (N,) or (..., 1, N) -> broadcastable
    against (..., K, N)."""
    zp = np.asarray(zp)
    return zp.reshape(()) if zp.size == 1 else zp


def _imatmul(a, b, a_zp, b_zp):
    av = a.astype(_I64)
    bv = b.astype(_I64)
    if a_zp is not None:
        av = av - _row_zp(a_zp, a).astype(_I64)
    if b_zp is not None:
        bv = bv - _col_zp(b_zp).astype(_I64)
    return np.matmul(av, bv)


def matmul_integer(A, B, a_zero_point=None, b_zero_point=None):
    """MatMulInteger-10. A (..., M, K), B (..., K, N) uint8/int8 -> Y int32,
    ``Y = (A - a_zero_point) @ (B - b_zero_point)`` (zero points scalar or per-row/column)."""
    return _imatmul(A, B, a_zero_point, b_zero_point).astype(np.int32)


def _requantize(acc, multiplier, y_zero_point):
    """``saturate(round(float32(acc) * multiplier) + y_zero_point)`` in y_zero_point's dtype."""
    v = np.rint(acc.astype(np.float32) * multiplier.astype(np.float32))
    v = v + np.asarray(y_zero_point).astype(np.float32)
    return _saturate(v, np.asarray(y_zero_point).dtype)


def qlinear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
    """QLinearMatMul-21: ``y = saturate(round((a - a_zp) @ (b - b_zp) * a_scale * b_scale /
    y_scale) + y_zp)``; a's scale/zero point scalar or per-row, b's scalar or per-column."""
    acc = _imatmul(a, b, a_zero_point, b_zero_point)
    mult = (_row_zp(a_scale, a).astype(np.float32) * _col_zp(b_scale).astype(np.float32)
            / np.asarray(y_scale, np.float32).reshape(()))
    return _requantize(acc, np.asarray(mult, np.float32), np.asarray(y_zero_point).reshape(()))


def _iconv(x, x_zp, w, w_zp, b, attrs):
    xv = x.astype(_I64)
    if x_zp is not None:
        xv = xv - np.asarray(x_zp).astype(_I64).reshape(())
    wv = w.astype(_I64)
    if w_zp is not None:
        wz = np.asarray(w_zp).astype(_I64)
        wv = wv - (wz.reshape(()) if wz.size == 1 else wz.reshape((-1,) + (1,) * (w.ndim - 1)))
    # NOTE: padding (x - x_zp) with 0 equals padding x with x_zp, as the spec requires.
    return conv(xv, wv, None if b is None else b.astype(_I64), **attrs)


def conv_integer(x, w, x_zero_point=None, w_zero_point=None, **attrs):
    """ConvInteger-10: ``Conv(x - x_zero_point, w - w_zero_point)`` accumulated exactly, int32.
    x (N, C, *S), w (M, C/group, *K) uint8/int8; Conv-11 attributes."""
    return _iconv(x, x_zero_point, w, w_zero_point, None, attrs).astype(np.int32)


def qlinear_conv(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point,
                 B=None, **attrs):
    """QLinearConv-10: ``y = saturate(round((Conv(x - x_zp, w - w_zp) + B) * x_scale * w_scale
    / y_scale) + y_zp)``; w's scale/zero point scalar or per output channel (M,)."""
    acc = _iconv(x, x_zero_point, w, w_zero_point, B, attrs)
    ws = np.asarray(w_scale, np.float32)
    ws = ws.reshape(()) if ws.size == 1 else ws.reshape((-1,) + (1,) * (x.ndim - 2))
    mult = (np.asarray(x_scale, np.float32).reshape(()) * ws
            / np.asarray(y_scale, np.float32).reshape(()))
    return _requantize(acc, np.asarray(mult, np.float32), np.asarray(y_zero_point).reshape(()))


def qlinear_lookup(X, table, axis=1):
    """QLinearLookup (sprat-internal, made by ``passes.fuse_qdq`` from DequantizeLinear ->
    per-channel float ops -> QuantizeLinear): ``Y[..., c, ...] = table[c, X - min(X's type)]``
    along ``axis`` (table (C, 256), or (1, 256) for every channel)."""
    axis = axis % X.ndim
    idx = X.astype(np.int64) - np.iinfo(X.dtype).min
    rows = np.arange(X.shape[axis]).reshape((-1,) + (1,) * (X.ndim - axis - 1))
    if table.shape[0] == 1:
        rows = np.zeros_like(rows)
    return table[rows, idx]


OPS = {
    "QLinearLookup": qlinear_lookup,
    "QuantizeLinear": quantize_linear,
    "DequantizeLinear": dequantize_linear,
    "DynamicQuantizeLinear": dynamic_quantize_linear,
    "MatMulInteger": matmul_integer,
    "QLinearMatMul": qlinear_matmul,
    "ConvInteger": conv_integer,
    "QLinearConv": qlinear_conv,
}
