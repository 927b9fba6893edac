"""Reference kernels: onnxruntime's ``com.microsoft`` quantized contrib ops (QOperator format).

Each dequantizes its inputs (``(x - zero_point) * scale``), computes the float op, and
quantizes to the output's scale and zero point (round half to even, saturate), as
onnxruntime's reference semantics do; integer products accumulate exactly in int64 first
(QGemm, MatMulIntegerToFloat, DynamicQuantizeMatMul). Source: onnxruntime's
ContribOperators.md and its CPU kernels' definitions (QLinearAdd/Mul, QLinearSigmoid,
QLinearLeakyRelu, QLinearGlobalAveragePool, QLinearAveragePool, QLinearConcat,
QLinearSoftmax, QGemm,
MatMulIntegerToFloat, DynamicQuantizeMatMul).
"""

from __future__ import annotations

import numpy as np

from .ops_nn import average_pool
from .ops_quant import _saturate, dynamic_quantize_linear

_F32 = np.float32


def _deq(x, scale, zp=None) -> np.ndarray:
    x = np.asarray(x).astype(_F32) if zp is None else (
        np.asarray(x).astype(np.int32) - np.asarray(zp).astype(np.int32)).astype(_F32)
    return x * np.asarray(scale, _F32)


def _q(v: np.ndarray, scale, zp=None, like=None) -> np.ndarray:
    dt = np.asarray(zp).dtype if zp is not None else (like if like is not None else np.uint8)
    r = np.rint(v.astype(_F32) / np.asarray(scale, _F32))
    if zp is not None:
        r = r + np.asarray(zp).astype(_F32)
    return _saturate(r, dt)


def qlinear_add(A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point=None):
    """QLinearAdd: C = quantize(dequantize(A) + dequantize(B)), numpy broadcasting."""
    return _q(_deq(A, A_scale, A_zero_point) + _deq(B, B_scale, B_zero_point), C_scale,
              C_zero_point, A.dtype)


def qlinear_mul(A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point=None):
    """QLinearMul: C = quantize(dequantize(A) * dequantize(B)), numpy broadcasting."""
    return _q(_deq(A, A_scale, A_zero_point) * _deq(B, B_scale, B_zero_point), C_scale,
              C_zero_point, A.dtype)


def qlinear_sigmoid(X, X_scale, X_zero_point=None, Y_scale=None, Y_zero_point=None):
    """QLinearSigmoid: Y = quantize(sigmoid(dequantize(X)))."""
    x = _deq(X, X_scale, X_zero_point)
    with np.errstate(over="ignore"):  # NOTE: exp(-x) = inf for x << 0 gives 0, as it should
        return _q(1.0 / (1.0 + np.exp(-x)), Y_scale, Y_zero_point, X.dtype)


def qlinear_leaky_relu(X, X_scale, X_zero_point=None, Y_scale=None, Y_zero_point=None,
                       alpha=0.01):
    """QLinearLeakyRelu: Y = quantize(leaky_relu(dequantize(X), alpha))."""
    x = _deq(X, X_scale, X_zero_point)
    return _q(np.where(x >= 0, x, x * _F32(alpha)), Y_scale, Y_zero_point, X.dtype)


def softmax_exp_table(x_scale) -> np.ndarray:
    """float32 (256,): ``exp(float32(-k) * x_scale)`` for k = 0..255, the exponential of every
    difference ``X - max(X)`` of an 8-bit input (one NumPy call: the same bits wherever used)."""
    return np.exp(-np.arange(256, dtype=_F32) * _F32(np.asarray(x_scale, _F32).reshape(())))


def qlinear_softmax(X, X_scale, x_zero_point=None, y_scale=None, y_zero_point=None, axis=-1,
                    opset=13):
    """QLinearSoftmax: Y = quantize(softmax(dequantize(X))) along ``axis``; with ``opset`` < 13
    (the Softmax-1/11 semantics the node was made from) over X coerced to 2-D at ``axis``.

    As onnxruntime's kernel computes it (``qlinear_softmax.cc``): the max is subtracted on
    the integers, so ``exp((X - max X) * x_scale)`` (the zero point cancels; one rounding
    instead of three) through the 256 values of ``softmax_exp_table``; the sum in float32 in
    ``_sum8``'s order; ``e / sum`` quantized. The cpu kernel computes the same bits."""
    table = softmax_exp_table(X_scale)
    xi = np.asarray(X).astype(np.int32)
    axis = int(axis) % max(1, xi.ndim)
    shape = xi.shape
    if int(opset) < 13:
        xi = xi.reshape(int(np.prod(shape[:axis], dtype=np.int64)), -1)
        axis = 1
    e = table[xi.max(axis=axis, keepdims=True) - xi]
    total = np.expand_dims(_sum8(np.moveaxis(e, axis, -1)), axis)
    return _q((e / total).reshape(shape), y_scale, y_zero_point, X.dtype)


def _sum8(e: np.ndarray) -> np.ndarray:
    """float32 sums along the last axis in one defined order (the cpu kernel's, 8 lanes a
    step): lane j adds the values k = j mod 8 in order (zeros past the end), then
    ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))."""
    n = e.shape[-1]
    pad = np.zeros(e.shape[:-1] + (-n % 8,), _F32)
    lanes = np.concatenate([e.astype(_F32), pad], axis=-1).reshape(e.shape[:-1] + (-1, 8))
    # NOTE: cumsum adds in order (a plain sum adds pairwise)
    lv = np.cumsum(lanes, axis=-2, dtype=_F32)[..., -1, :]
    return ((lv[..., 0] + lv[..., 1]) + (lv[..., 2] + lv[..., 3])) + (
        (lv[..., 4] + lv[..., 5]) + (lv[..., 6] + lv[..., 7]))


def qlinear_global_average_pool(X, x_scale, x_zero_point, y_scale, y_zero_point,
                                channels_last=0):
    """QLinearGlobalAveragePool as onnxruntime computes it (MLAS ``qlgavgpool.cpp``): the
    integer sum of X over the spatial axes less ``x_zero_point * HW``, times the float32
    ``x_scale / (y_scale * HW)``, rounded half to even, plus ``y_zero_point``, saturated."""
    axes = tuple(range(1, X.ndim - 1)) if channels_last else tuple(range(2, X.ndim))
    hw = int(np.prod([X.shape[a] for a in axes], dtype=np.int64))
    zx = 0 if x_zero_point is None else int(np.asarray(x_zero_point).reshape(()))
    acc = np.asarray(X).astype(np.int64).sum(axis=axes, keepdims=True) - zx * hw
    scale = _F32(np.asarray(x_scale, _F32).reshape(())) / (
        _F32(np.asarray(y_scale, _F32).reshape(())) * _F32(hw))
    r = np.rint(acc.astype(_F32) * scale)
    dt = np.asarray(y_zero_point).dtype if y_zero_point is not None else X.dtype
    if y_zero_point is not None:
        r = r + np.asarray(y_zero_point).astype(_F32)
    return _saturate(r, dt)


def qlinear_average_pool(X, x_scale, x_zero_point, y_scale, y_zero_point, channels_last=0,
                         **attrs):
    """QLinearAveragePool: AveragePool (same attributes) of dequantize(X), quantized."""
    return _q(average_pool(_deq(X, x_scale, x_zero_point), **attrs), y_scale, y_zero_point,
              X.dtype)


def qlinear_concat(Y_scale, Y_zero_point, *inputs, axis):
    """QLinearConcat: each (X, scale, zero point) requantized to Y's scale, concatenated."""
    xs = [_deq(inputs[k], inputs[k + 1], inputs[k + 2]) for k in range(0, len(inputs), 3)]
    return _q(np.concatenate(xs, axis=axis), Y_scale, Y_zero_point)


def _int_matmul(a, a_zp, b, b_zp) -> np.ndarray:
    a = np.asarray(a).astype(np.int64) - (0 if a_zp is None else np.asarray(a_zp, np.int64))
    b = np.asarray(b).astype(np.int64)
    if b_zp is not None:
        bz = np.asarray(b_zp, np.int64)
        b = b - (bz.reshape(1, -1) if bz.ndim == 1 and bz.size > 1 else bz)
    return np.matmul(a, b)


def qgemm(A, a_scale, a_zero_point, B, b_scale, b_zero_point, C=None, y_scale=None,
          y_zero_point=None, alpha=1.0, transA=0, transB=0):
    """QGemm: Y = alpha * (A - a_zp)(B - b_zp) * a_scale * b_scale + C * a_scale * b_scale
    (C int32, in the product's scale), float32 when y_scale is absent, else quantized."""
    a = A.T if transA else A
    b = B.T if transB else B
    bz = b_zero_point
    bs = np.asarray(b_scale, _F32)
    acc = _int_matmul(a, a_zero_point, b, bz)
    if C is not None:
        acc = acc + np.asarray(C, np.int64)
    y = acc.astype(_F32) * (_F32(alpha) * np.asarray(a_scale, _F32) * bs)
    if y_scale is None:
        return y.astype(_F32)
    return _q(y, y_scale, y_zero_point, np.uint8)


def matmul_integer_to_float(A, B, a_scale, b_scale, a_zero_point=None, b_zero_point=None,
                            bias=None):
    """MatMulIntegerToFloat: (A - a_zp) @ (B - b_zp) * a_scale * b_scale + bias, float32."""
    y = _int_matmul(A, a_zero_point, B, b_zero_point).astype(_F32) * (
        np.asarray(a_scale, _F32) * np.asarray(b_scale, _F32))
    return (y + bias if bias is not None else y).astype(_F32)


def dynamic_quantize_matmul(A, B, b_scale, b_zero_point=None, bias=None):
    """DynamicQuantizeMatMul: A quantized as DynamicQuantizeLinear (uint8), then as
    MatMulIntegerToFloat with B."""
    a, a_scale, a_zp = dynamic_quantize_linear(np.asarray(A, _F32))
    return matmul_integer_to_float(a, B, a_scale, b_scale, a_zp, b_zero_point, bias)


OPS = {
    "QLinearAdd": qlinear_add,
    "QLinearMul": qlinear_mul,
    "QLinearSigmoid": qlinear_sigmoid,
    "QLinearLeakyRelu": qlinear_leaky_relu,
    "QLinearGlobalAveragePool": qlinear_global_average_pool,
    "QLinearAveragePool": qlinear_average_pool,
    "QLinearConcat": qlinear_concat,
    "QLinearSoftmax": qlinear_softmax,
    "QGemm": qgemm,
    "MatMulIntegerToFloat": matmul_integer_to_float,
    "DynamicQuantizeMatMul": dynamic_quantize_matmul,
}
