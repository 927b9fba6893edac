"""Shape functions: sprat-internal ops for TFLite's integer kernels (``Tfl*``).

The TFLite frontend emits them for full-integer models, where TFLite's fixed-point
requantisation differs from ONNX's float multiplier by 1 LSB on some values; their semantics and
sources are in ``sprat.backends.reference.ops_tflite``. Pooling ops are NHWC by definition (TFLite
is), the others elementwise or over the last axis.
"""

from __future__ import annotations

import numpy as np

from ...dtypes import CODE_TO_NUMPY
from ...errors import ShapeError
from .nn import broadcast_shapes

_Q8 = (np.dtype(np.int8), np.dtype(np.uint8))
_I32 = np.dtype(np.int32)


def _q8(op: str, x) -> np.dtype:
    dt = np.dtype(x.dtype)
    if dt not in _Q8:
        raise ShapeError(f"{op}: expected an int8 or uint8 input, got {dt}")
    return dt


def _to(op: str, to) -> np.dtype:
    dt = CODE_TO_NUMPY.get(int(to))
    if dt is None or dt not in _Q8 + (_I32,):
        raise ShapeError(f"{op}: output type code {to} is not int8, uint8 or int32")
    return np.dtype(dt)


def tfl_requantize(ins, axis=-1, to=3, **_):
    """TflRequantize(x (*S) int8/uint8/int32, multiplier, shift, bias?) -> (*S) of type ``to``;
    multiplier/shift/bias have 1 or S[axis] elements."""
    op = "TflRequantize"
    x = ins[0]
    if np.dtype(x.dtype) not in _Q8 + (_I32,):
        raise ShapeError(f"{op}: x must be int8, uint8 or int32, got {np.dtype(x.dtype)}")
    shape = tuple(x.shape)
    n = shape[axis] if shape else 1
    for name, p in zip(("multiplier", "shift", "bias"), ins[1:4]):
        if p is None:
            continue
        if np.dtype(p.dtype) != _I32:
            raise ShapeError(f"{op}: {name} must be int32, got {np.dtype(p.dtype)}")
        size = int(np.prod(p.shape, dtype=np.int64))
        if size not in (1, n):
            raise ShapeError(f"{op}: {name} has {size} elements, expected 1 or {n} (axis {axis} "
                             f"of {shape})")
    return [(shape, _to(op, to))]


def tfl_rescale(ins, axis=-1, to=3, **_):
    """TflRescale(x (*S) int32, scale float64, bias int32?) -> (*S) of type ``to``; scale and
    bias have 1 or S[axis] elements."""
    op = "TflRescale"
    x = ins[0]
    if np.dtype(x.dtype) != _I32:
        raise ShapeError(f"{op}: x must be int32, got {np.dtype(x.dtype)}")
    shape = tuple(x.shape)
    n = shape[axis] if shape else 1
    _per_channel(op, [ins[1], ins[2] if len(ins) > 2 else None], ("scale", "bias"), n,
                 (np.float64, np.int32))
    return [(shape, _to(op, to))]


def _per_channel(op: str, ins, names, n: int, dtypes) -> None:
    for name, p, dt in zip(names, ins, dtypes):
        if p is None:
            continue
        if np.dtype(p.dtype) != np.dtype(dt):
            raise ShapeError(f"{op}: {name} must be {np.dtype(dt)}, got {np.dtype(p.dtype)}")
        size = int(np.prod(p.shape, dtype=np.int64))
        if size not in (1, n):
            raise ShapeError(f"{op}: {name} has {size} elements, expected 1 or {n}")


def tfl_conv(ins, to=3, output_zero_point=0, qmin=-128, qmax=127, **conv_attrs):
    """TflConv(x (N, C, *S), w (M, C/group, *K) uint8/int8, x_zero_point, w_zero_point?,
    multiplier, shift (int32, 1 or M), bias (int32, 1 or M)?) -> (N, M, *S_out) of type ``to``
    (ConvInteger's shape)."""
    from .quant import conv_integer

    (shape, _), = conv_integer(list(ins[:4]), **conv_attrs)
    _per_channel("TflConv", ins[4:7], ("multiplier", "shift", "bias"), int(shape[1]),
                 (_I32, _I32, _I32))
    return [(shape, _to("TflConv", to))]


def tfl_fully_connected(ins, to=3, output_zero_point=0, qmin=-128, qmax=127):
    """TflFullyConnected(x (N, K), w (K, O) uint8/int8, x_zero_point, w_zero_point?, scale
    (float64, 1 or O), bias (int32, 1 or O)?) -> (N, O) of type ``to`` (MatMulInteger's
    shape)."""
    from .quant import matmul_integer

    (shape, _), = matmul_integer(list(ins[:4]))
    _per_channel("TflFullyConnected", ins[4:6], ("scale", "bias"), int(shape[-1]),
                 (np.float64, _I32))
    return [(shape, _to("TflFullyConnected", to))]


def tfl_binary(ins, **_):
    """TflAdd / TflSub / TflMul / TflPrelu(a, b) int8/uint8 of one dtype -> the broadcast shape,
    a's dtype."""
    a, b = ins[0], ins[1]
    dt = _q8("TflAdd/TflMul", a)
    if np.dtype(b.dtype) != dt:
        raise ShapeError(f"TflAdd/TflMul: inputs differ in type ({dt}, {np.dtype(b.dtype)})")
    return [(broadcast_shapes(a.shape, b.shape), dt)]


def tfl_pool_2d(ins, kernel_shape=(1, 1), strides=(1, 1), pads=(0, 0, 0, 0), **_):
    """TflAveragePool2D / TflMaxPool2D: x NHWC int8/uint8 -> (N, OH, OW, C), pads [top, left,
    bottom, right]; OH = (H + top + bottom - KH) // SH + 1."""
    x = ins[0]
    dt = _q8("TflPool2D", x)
    if len(x.shape) != 4:
        raise ShapeError(f"TflPool2D: expected an NHWC input, got shape {tuple(x.shape)}")
    n, h, w, c = x.shape
    oh = (h + pads[0] + pads[2] - kernel_shape[0]) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - kernel_shape[1]) // strides[1] + 1
    if oh < 1 or ow < 1 or min(strides) < 1:
        raise ShapeError(f"TflPool2D: kernel {tuple(kernel_shape)} does not fit input "
                         f"{tuple(x.shape)} with pads {tuple(pads)}")
    return [((n, oh, ow, c), dt)]


def tfl_resize_bilinear(ins, sizes=(1, 1), **_):
    """TflResizeBilinear: x NHWC int8/uint8 -> (N, sizes[0], sizes[1], C), x's dtype."""
    x = ins[0]
    dt = _q8("TflResizeBilinear", x)
    if len(x.shape) != 4 or min(sizes) < 1:
        raise ShapeError(f"TflResizeBilinear: expected an NHWC input and positive sizes, got "
                         f"{tuple(x.shape)} and {tuple(sizes)}")
    return [((x.shape[0], int(sizes[0]), int(sizes[1]), x.shape[3]), dt)]


def tfl_lookup(ins, **_):
    """TflLookup(x int8/uint8, table (256,) of x's dtype) -> x's shape and dtype."""
    x, table = ins[0], ins[1]
    dt = _q8("TflLookup", x)
    if tuple(table.shape) != (256,) or np.dtype(table.dtype) != dt:
        raise ShapeError(f"TflLookup: table must be (256,) {dt}, got {tuple(table.shape)} "
                         f"{np.dtype(table.dtype)}")
    return [(tuple(x.shape), dt)]


def tfl_softmax(ins, **_):
    """TflSoftmax(x int8/uint8) -> x's shape and dtype (over the last axis)."""
    x = ins[0]
    if not x.shape:
        raise ShapeError("TflSoftmax: x must have rank >= 1")
    return [(tuple(x.shape), _q8("TflSoftmax", x))]


def tfl_quantize(ins, to=3, **_):
    """TflQuantize(x float32) -> x's shape, ONNX type ``to`` (int8/uint8)."""
    x = ins[0]
    if np.dtype(x.dtype).kind != "f":
        raise ShapeError(f"TflQuantize: x must be float, got {np.dtype(x.dtype)}")
    return [(tuple(x.shape), _to("TflQuantize", to))]


SHAPES = {
    "TflRequantize": tfl_requantize,
    "TflRescale": tfl_rescale,
    "TflConv": tfl_conv,
    "TflFullyConnected": tfl_fully_connected,
    "TflAdd": tfl_binary,
    "TflSub": tfl_binary,
    "TflMul": tfl_binary,
    "TflPrelu": tfl_binary,
    "TflAveragePool2D": tfl_pool_2d,
    "TflMaxPool2D": tfl_pool_2d,
    "TflResizeBilinear": tfl_resize_bilinear,
    "TflLookup": tfl_lookup,
    "TflSoftmax": tfl_softmax,
    "TflQuantize": tfl_quantize,
}
