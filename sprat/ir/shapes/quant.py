"""Shape functions: quantization ops.

QuantizeLinear / DequantizeLinear (opset 21+: per-tensor, per-axis and blocked scales),
DynamicQuantizeLinear, MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv. Quantized
element types: uint8, int8, uint16, int16 (and int32 as a DequantizeLinear input); float8, int4
and uint4 are not sprat dtypes and raise ShapeError naming the type. Source: the ONNX operator
spec (QuantizeLinear-21/23, DequantizeLinear-21/23, DynamicQuantizeLinear-11,
MatMulInteger-10, QLinearMatMul-21, ConvInteger-10, QLinearConv-10).
"""

from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from .nn import conv, matmul

_U8 = np.dtype(np.uint8)
_I32 = np.dtype(np.int32)
_F32 = np.dtype(np.float32)
QUANT_TYPES = tuple(np.dtype(t) for t in (np.uint8, np.int8, np.uint16, np.int16))
# TensorProto codes of element types sprat has no dtype for (float8 variants, int4, uint4, ...).
_UNSUPPORTED_CODES = {16: "bfloat16", 17: "float8e4m3fn", 18: "float8e4m3fnuz",
                      19: "float8e5m2", 20: "float8e5m2fnuz", 21: "uint4", 22: "int4",
                      23: "float4e2m1", 24: "float8e8m0", 25: "uint2", 26: "int2"}


def output_dtype_of(op: str, code: int) -> np.dtype:
    """Numpy dtype of an ``output_dtype`` attribute code (TensorProto.DataType).

    Raises ShapeError for float8/int4/uint4/... (no sprat dtype) and unknown codes.
    """
    from ...dtypes import CODE_TO_NUMPY
    if code in _UNSUPPORTED_CODES:
        raise ShapeError(f"{op}: element type {_UNSUPPORTED_CODES[code]} is not supported "
                         f"by sprat")
    if code not in CODE_TO_NUMPY:
        raise ShapeError(f"{op}: unknown output_dtype code {code}")
    return CODE_TO_NUMPY[code]


def _check_qtype(op: str, dtype, allowed=QUANT_TYPES) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in allowed:
        raise ShapeError(f"{op}: quantized element type {dt} is not supported "
                         f"(supported: {', '.join(str(a) for a in allowed)})")
    return dt


def check_scale(op: str, x_shape, scale_shape, axis: int, block_size: int) -> None:
    """Checks a scale/zero-point shape against ``x_shape`` for the three quantization forms.

    Per-tensor: scalar or (1,); per-axis: (x_shape[axis],); blocked (block_size > 0): the rank
    of x, ``ceil(x_shape[axis] / block_size)`` on ``axis`` and x's dims elsewhere.
    Raises ShapeError on a mismatch or an out-of-range axis.
    """
    x_shape, scale_shape = tuple(x_shape), tuple(scale_shape)
    if block_size < 0:
        raise ShapeError(f"{op}: block_size must be >= 0, got {block_size}")
    if block_size == 0 and (scale_shape == () or scale_shape == (1,)):
        return
    r = len(x_shape)
    if not -r <= axis < r:
        raise ShapeError(f"{op}: axis {axis} out of range for rank {r}")
    a = axis % r
    if block_size == 0:
        if scale_shape != (x_shape[a],):
            raise ShapeError(f"{op}: per-axis scale shape {scale_shape}, expected "
                             f"({x_shape[a]},) for input {x_shape}, axis {axis}")
        return
    want = x_shape[:a] + (-(-x_shape[a] // block_size),) + x_shape[a + 1:]
    if scale_shape != want:
        raise ShapeError(f"{op}: blocked scale shape {scale_shape}, expected {want} for input "
                         f"{x_shape}, axis {axis}, block_size {block_size}")


def quantize_linear(ins, axis=1, block_size=0, output_dtype=0, saturate=1, precision=0):
    """QuantizeLinear-21/23: x (*S) float, y_scale, y_zero_point optional -> y (*S).

    y's dtype: the zero point's, else ``output_dtype`` when nonzero, else uint8. Raises
    ShapeError for mismatched scale/zero-point shapes or an unsupported element type.
    """
    op = "QuantizeLinear"
    x, scale = ins[0], ins[1]
    zp = ins[2] if len(ins) > 2 else None
    if np.dtype(x.dtype).kind != "f" and np.dtype(x.dtype) != _I32:
        raise ShapeError(f"{op}: x must be float or int32, got {np.dtype(x.dtype)}")
    check_scale(op, x.shape, scale.shape, axis, block_size)
    if zp is not None:
        check_scale(op, x.shape, zp.shape, axis, block_size)
        dt = np.dtype(zp.dtype)
        if output_dtype and output_dtype_of(op, output_dtype) != dt:
            raise ShapeError(f"{op}: output_dtype {output_dtype_of(op, output_dtype)} differs "
                             f"from the zero point's {dt}")
    elif output_dtype:
        dt = output_dtype_of(op, output_dtype)
    else:
        dt = _U8
    return [(tuple(x.shape), _check_qtype(op, dt))]


def dequantize_linear(ins, axis=1, block_size=0, output_dtype=0):
    """DequantizeLinear-21/23: x (*S) int, x_scale, x_zero_point optional -> y (*S).

    y's dtype: ``output_dtype`` when nonzero, else the scale's. int32 x takes no nonzero zero
    point (the spec). Raises ShapeError for mismatched shapes or an unsupported element type.
    """
    op = "DequantizeLinear"
    x, scale = ins[0], ins[1]
    zp = ins[2] if len(ins) > 2 else None
    _check_qtype(op, x.dtype, QUANT_TYPES + (_I32,))
    check_scale(op, x.shape, scale.shape, axis, block_size)
    if zp is not None:
        check_scale(op, x.shape, zp.shape, axis, block_size)
        if np.dtype(zp.dtype) != np.dtype(x.dtype):
            raise ShapeError(f"{op}: zero point {np.dtype(zp.dtype)} differs from x "
                             f"{np.dtype(x.dtype)}")
    dt = output_dtype_of(op, output_dtype) if output_dtype else np.dtype(scale.dtype)
    if dt.kind != "f":
        raise ShapeError(f"{op}: output must be floating point, got {dt}")
    return [(tuple(x.shape), dt)]


def dynamic_quantize_linear(ins):
    """DynamicQuantizeLinear-11: x (*S) float32 -> y (*S) uint8, y_scale () float32,
    y_zero_point () uint8."""
    x = ins[0]
    if np.dtype(x.dtype) != _F32:
        raise ShapeError(f"DynamicQuantizeLinear: x must be float32, got {np.dtype(x.dtype)}")
    return [(tuple(x.shape), _U8), ((), _F32), ((), _U8)]


def _check_zp_vec(op, name, zp, n, col=False):
    """Scalar, (1,) or (n,); with ``col`` (B's parameters) also (..., 1, n) / (..., 1, 1)."""
    if zp is None:
        return
    s = tuple(zp.shape)
    if s in ((), (1,), (n,)):
        return
    if col and len(s) >= 2 and s[-2] == 1 and s[-1] in (1, n):
        return
    raise ShapeError(f"{op}: {name} shape {s}, expected (), (1,) or ({n},)"
                     + (f" or (..., 1, {n})" if col else ""))


def matmul_integer(ins):
    """MatMulInteger-10: A (..., M, K), B (..., K, N) uint8/int8, zero points scalar or
    per-row (M,) / per-column (N,) -> Y int32 (numpy.matmul broadcasting)."""
    op = "MatMulInteger"
    a, b = ins[0], ins[1]
    _check_qtype(op, a.dtype, QUANT_TYPES[:2])
    _check_qtype(op, b.dtype, QUANT_TYPES[:2])
    (shape, _), = matmul(ins[:2])
    _check_zp_vec(op, "a_zero_point", ins[2] if len(ins) > 2 else None,
                  a.shape[-2] if len(a.shape) > 1 else 1)
    _check_zp_vec(op, "b_zero_point", ins[3] if len(ins) > 3 else None,
                  b.shape[-1] if len(b.shape) > 1 else 1, col=True)
    return [(shape, _I32)]


def qlinear_matmul(ins):
    """QLinearMatMul-21: a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp -> y (matmul shape),
    dtype of y_zero_point (uint8/int8)."""
    op = "QLinearMatMul"
    a, b, yzp = ins[0], ins[3], ins[7]
    _check_qtype(op, a.dtype, QUANT_TYPES[:2])
    _check_qtype(op, b.dtype, QUANT_TYPES[:2])
    (shape, _), = matmul([a, b])
    _check_zp_vec(op, "a_scale", ins[1], a.shape[-2] if len(a.shape) > 1 else 1)
    _check_zp_vec(op, "b_scale", ins[4], b.shape[-1] if len(b.shape) > 1 else 1, col=True)
    _check_zp_vec(op, "b_zero_point", ins[5], b.shape[-1] if len(b.shape) > 1 else 1, col=True)
    return [(shape, _check_qtype(op, yzp.dtype, QUANT_TYPES[:2]))]


def conv_integer(ins, **attrs):
    """ConvInteger-10: x (N, C, *S), w (M, C/group, *K) uint8/int8, x_zero_point scalar,
    w_zero_point scalar or (M,) -> y (N, M, *S_out) int32. Conv attributes as Conv-11."""
    op = "ConvInteger"
    x, w = ins[0], ins[1]
    _check_qtype(op, x.dtype, QUANT_TYPES[:2])
    _check_qtype(op, w.dtype, QUANT_TYPES[:2])
    (shape, _), = conv([x, w], **attrs)
    _check_zp_vec(op, "w_zero_point", ins[3] if len(ins) > 3 else None, w.shape[0])
    return [(shape, _I32)]


def qlinear_conv(ins, **attrs):
    """QLinearConv-10: x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B (M,) int32
    optional -> y (N, M, *S_out), dtype of y_zero_point. Conv attributes as Conv-11."""
    op = "QLinearConv"
    x, w = ins[0], ins[3]
    _check_qtype(op, x.dtype, QUANT_TYPES[:2])
    _check_qtype(op, w.dtype, QUANT_TYPES[:2])
    b = ins[8] if len(ins) > 8 else None
    if b is not None and np.dtype(b.dtype) != _I32:
        raise ShapeError(f"{op}: bias must be int32, got {np.dtype(b.dtype)}")
    (shape, _), = conv([x, w, b], **attrs)
    _check_zp_vec(op, "w_scale", ins[4], w.shape[0])
    yzp = ins[7] if len(ins) > 7 else None
    dt = _U8 if yzp is None else _check_qtype(op, yzp.dtype, QUANT_TYPES[:2])
    return [(shape, dt)]


def qlinear_lookup(ins, axis=1):
    """QLinearLookup (sprat-internal, made by ``passes.fuse_qdq``): X (*S) uint8/int8, table
    (C, 256) uint8/int8 with C 1 or X.shape[axis] -> Y (*S), the table's dtype."""
    op = "QLinearLookup"
    x, table = ins[0], ins[1]
    _check_qtype(op, x.dtype, QUANT_TYPES[:2])
    _check_qtype(op, table.dtype, QUANT_TYPES[:2])
    r = len(x.shape)
    if not -r <= axis < r:
        raise ShapeError(f"{op}: axis {axis} out of range for rank {r}")
    rows = (1, x.shape[axis % r])
    if len(table.shape) != 2 or table.shape[1] != 256 or table.shape[0] not in rows:
        raise ShapeError(f"{op}: table shape {tuple(table.shape)}, expected (1, 256) or "
                         f"({rows[1]}, 256) for input {tuple(x.shape)}, axis {axis}")
    return [(tuple(x.shape), np.dtype(table.dtype))]


SHAPES = {
    "QLinearLookup": qlinear_lookup,
    "QuantizeLinear": quantize_linear,
    "DequantizeLinear": dequantize_linear,
    "DynamicQuantizeLinear": dynamic_quantize_linear,
    "MatMulInteger": matmul_integer,
    "QLinearMatMul": qlinear_matmul,
    "ConvInteger": conv_integer,
    "QLinearConv": qlinear_conv,
}
