"""Shape functions: onnxruntime's ``com.microsoft`` quantized contrib ops that its quantizer
emits (QOperator format). Source: onnxruntime's ContribOperators.md (QLinearAdd, QLinearMul,
QLinearSigmoid, QLinearLeakyRelu, QLinearGlobalAveragePool, QLinearAveragePool,
QLinearConcat, QLinearSoftmax, QGemm, MatMulIntegerToFloat, DynamicQuantizeMatMul)."""

from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from .nn import average_pool, broadcast_shapes, gemm, global_pool, matmul
from .tensor import concat

DOMAIN = "com.microsoft"
_F32 = np.dtype(np.float32)


def qlinear_binary(ins, **_):
    """QLinearAdd / QLinearMul(A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp): broadcast."""
    a, b = ins[0], ins[3]
    return [(broadcast_shapes(a.shape, b.shape), a.dtype)]


def qlinear_unary(ins, **_):
    """QLinearSigmoid / QLinearLeakyRelu(X, X_scale, X_zp, Y_scale, Y_zp): X's shape; Y has
    the dtype of Y_zp (X's when absent)."""
    y_zp = ins[4] if len(ins) > 4 and ins[4] is not None else ins[0]
    return [(tuple(ins[0].shape), y_zp.dtype)]


def qlinear_softmax(ins, axis=-1, opset=13):
    """QLinearSoftmax(X, X_scale, x_zp?, y_scale, y_zp): X's shape, y_zp's dtype."""
    x = ins[0]
    if not -len(x.shape) <= int(axis) < max(1, len(x.shape)):
        raise ShapeError(f"QLinearSoftmax axis {axis} out of range for rank {len(x.shape)}")
    y_zp = ins[4] if len(ins) > 4 and ins[4] is not None else x
    return [(tuple(x.shape), y_zp.dtype)]


def qlinear_global_average_pool(ins, channels_last=0):
    x = ins[0]
    if channels_last:
        if len(x.shape) < 2:
            raise ShapeError(f"QLinearGlobalAveragePool needs rank >= 2, got {x.shape}")
        return [((x.shape[0],) + (1,) * (len(x.shape) - 2) + (x.shape[-1],), x.dtype)]
    return global_pool([x])


def qlinear_average_pool(ins, channels_last=0, **attrs):
    if channels_last:
        raise ShapeError("QLinearAveragePool with channels_last=1 is not supported")
    return average_pool([ins[0]], **attrs)


def qlinear_concat(ins, axis):
    """QLinearConcat(Y_scale, Y_zp, X0, X0_scale, X0_zp, X1, ...): concatenated Xs."""
    xs = ins[2::3]
    if not xs or len(ins) % 3 != 2:
        raise ShapeError(f"QLinearConcat needs Y_scale, Y_zp and (X, scale, zp) triples, got "
                         f"{len(ins)} inputs")
    (shape, _), = concat(xs, axis)
    return [(shape, ins[1].dtype)]


def qgemm(ins, alpha=1.0, transA=0, transB=0):
    """QGemm(A, a_scale, a_zp, B, b_scale, b_zp, C?, y_scale?, y_zp?): (M, N), float32 when
    y_scale is absent, else y_zp's dtype (uint8 when y_zp is absent)."""
    (shape, _), = gemm([ins[0], ins[3]], transA=transA, transB=transB)
    y_scale = ins[7] if len(ins) > 7 else None
    if y_scale is None:
        return [(shape, _F32)]
    y_zp = ins[8] if len(ins) > 8 else None
    return [(shape, y_zp.dtype if y_zp is not None else np.dtype(np.uint8))]


def matmul_to_float(ins):
    """MatMulIntegerToFloat(A, B, ...) / DynamicQuantizeMatMul(A, B, ...): float32 matmul."""
    (shape, _), = matmul([ins[0], ins[1]])
    return [(shape, _F32)]


SHAPES = {
    "QLinearAdd": qlinear_binary,
    "QLinearMul": qlinear_binary,
    "QLinearSigmoid": qlinear_unary,
    "QLinearLeakyRelu": qlinear_unary,
    "QLinearGlobalAveragePool": qlinear_global_average_pool,
    "QLinearAveragePool": qlinear_average_pool,
    "QLinearConcat": qlinear_concat,
    "QLinearSoftmax": qlinear_softmax,
    "QGemm": qgemm,
    "MatMulIntegerToFloat": matmul_to_float,
    "DynamicQuantizeMatMul": matmul_to_float,
}
CONTRIB_OPS = frozenset(SHAPES)
