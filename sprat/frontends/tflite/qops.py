"""Translators for TFLite ops on quantized (int8/uint8) activations: full-integer models.

Each reproduces TFLite's integer kernel (tensorflow/lite/kernels/internal/reference/
integer_ops/*, the ``Prepare`` of each kernel for the parameters): products accumulate exactly
in ConvInteger / MatMulInteger (ONNX; the input zero point subtracted, padding with it, as
TFLite skips padded taps) and ``TflRequantize`` applies TFLite's fixed-point multiplier, the
output zero point and the fused activation clamp; a conv or fully-connected op is one node
(``TflConv`` / ``TflFullyConnected``: the exact sums and that requantisation). Elementwise and softmax ops become the
sprat-internal ``Tfl*`` ops (``sprat.backends.reference.ops_tflite``); ops that only move bytes
(RESHAPE, CONCATENATION with equal parameters, PAD with the zero point, ...) keep their float
translators, whose ONNX ops are exact on integers. DEQUANTIZE of a runtime tensor is ONNX
DequantizeLinear (``(x - zp) * scale`` rounds once in float32 either way).

NOTE: ONNX's QLinearConv would round ``acc * (x_scale * w_scale / y_scale)`` in float; TFLite
rounds twice in fixed point (SaturatingRoundingDoublingHighMul, then RoundingDivideByPOT), so
some outputs differ by 1 LSB -- hence TflRequantize, which gives LiteRT's results exactly.
"""

from __future__ import annotations

import numpy as np

from ...dtypes import to_code
from ...errors import ConvertError
from ...ir.graph import MISSING
from . import ops
from .quant import (
    F32,
    activation_range,
    add_params,
    conv_multipliers,
    conv_scales,
    elu_f32,
    gelu_f32,
    hard_swish_table,
    leaky_relu_table,
    logistic_f32,
    lookup_table,
    mul_params,
    qrange,
    quantize_multiplier,
    scale_of,
    softmax_params,
    tanh_f32,
    zero_point_of,
)

_I32 = np.int32
#: float32 holds every integer up to this magnitude exactly
EXACT_F32 = 1 << 24


def _t(b, op, k: int, out: bool = False):
    return b.tensor(op.outputs[k] if out else op.inputs[k])


def _fused(op) -> int:
    o = op.options
    if o is None or not hasattr(o, "FusedActivationFunction"):
        return 0
    return o.FusedActivationFunction()


def _zp_const(b, name: str, t) -> int:
    return b.const_value(name, np.array(zero_point_of(t), t.dtype))


def _requantize(b, acc: int, y: int, yt, mult, shift, name: str, bias=None, fused: int = 0,
                axis: int = -1, input_zero_point: int = 0):
    lo, hi = activation_range(fused, yt)
    ins = [acc, b.const_value(f"{name}/multiplier", np.asarray(mult, _I32)),
           b.const_value(f"{name}/shift", np.asarray(shift, _I32))]
    if bias is not None:
        ins.append(bias)
    b.node("TflRequantize", ins, [y],
           {"axis": axis, "input_zero_point": int(input_zero_point),
            "output_zero_point": zero_point_of(yt), "qmin": lo, "qmax": hi,
            "to": to_code(yt.dtype)}, name)


def _bias(b, op, k: int, name: str):
    if ops._in(op, k) == MISSING:
        return None
    data = b.const(op.inputs[k])
    if data is None:
        raise ConvertError(f"operator {name!r} ({op.op}): the bias must be a constant")
    return b.const_value(f"{name}/bias", np.ascontiguousarray(data, _I32))


def _int_weights(b, op, perm, name: str):
    data = ops._const(b, op, 1, "weights", name)
    return b.const_value(f"{name}/weights", np.ascontiguousarray(data.transpose(perm)))


def _w_zero_point(b, wt, name: str):
    """ConvInteger/MatMulInteger's weight zero point: absent when all are 0 (int8 weights)."""
    zp = np.asarray(wt.zero_point)
    if not zp.any():
        return MISSING
    if zp.size > 1 and len(set(zp.tolist())) > 1:
        raise ConvertError(f"operator {name!r}: per-channel weight zero points are not "
                           "supported (TFLite requires them to be 0)")
    return b.const_value(f"{name}/w_zero_point", np.array(zp.ravel()[0], wt.dtype))


def _conv(b, op, name: str, attrs: dict, w_perm, w_scale_axis: int):
    """One TflConv node: ConvInteger's exact sums and TFLite's requantisation per output
    channel (``ops_tflite.tfl_conv``), which the cpu backend runs in its conv epilogue."""
    xt, wt, yt = _t(b, op, 0), _t(b, op, 1), _t(b, op, 0, out=True)
    mult, shift = conv_multipliers(xt, wt, yt)
    lo, hi = activation_range(_fused(op), yt)
    ins = [b.value(op.inputs[0]), _int_weights(b, op, w_perm, name),
           _zp_const(b, f"{name}/x_zero_point", xt), _w_zero_point(b, wt, name),
           b.const_value(f"{name}/multiplier", np.asarray(mult, _I32)),
           b.const_value(f"{name}/shift", np.asarray(shift, _I32))]
    bias = _bias(b, op, 2, name)
    if bias is not None:
        ins.append(bias)
    b.node("TflConv", ins, [b.value(op.outputs[0])],
           {**attrs, "output_zero_point": zero_point_of(yt), "qmin": lo, "qmax": hi,
            "to": to_code(yt.dtype)}, name)


def conv_2d(b, op, name):
    """CONV_2D int8/uint8 (reference/integer_ops/conv.h): per-channel or per-tensor weights."""
    o = op.options
    xs = ops._rank4(b, op, name)
    ws = _t(b, op, 1).shape  # OHWI
    kernel = [int(ws[1]), int(ws[2])]
    strides = [o.StrideH(), o.StrideW()]
    dil = [o.DilationHFactor(), o.DilationWFactor()]
    if ws[3] <= 0 or xs[3] % ws[3]:
        raise ConvertError(f"operator {name!r}: {xs[3]} input channels do not divide into "
                           f"groups of {ws[3]}")
    pads = (ops._same_pads(xs[1:3], kernel, strides, dil) if o.Padding() == ops.SAME
            else [0, 0, 0, 0])
    attrs = {"kernel_shape": kernel, "strides": strides, "dilations": dil, "pads": pads,
             "group": int(xs[3] // ws[3]), "_layout": "NHWC"}
    _conv(b, op, name, attrs, (0, 3, 1, 2), 0)


def depthwise_conv_2d(b, op, name):
    """DEPTHWISE_CONV_2D int8/uint8 (reference/integer_ops/depthwise_conv.h)."""
    o = op.options
    xs = ops._rank4(b, op, name)
    ws = _t(b, op, 1).shape  # [1, kh, kw, C*M]
    kernel = [int(ws[1]), int(ws[2])]
    strides = [o.StrideH(), o.StrideW()]
    dil = [o.DilationHFactor(), o.DilationWFactor()]
    if ws[3] % xs[3]:
        raise ConvertError(f"operator {name!r}: {ws[3]} output channels are not a multiple of "
                           f"{xs[3]} input channels")
    pads = (ops._same_pads(xs[1:3], kernel, strides, dil) if o.Padding() == ops.SAME
            else [0, 0, 0, 0])
    attrs = {"kernel_shape": kernel, "strides": strides, "dilations": dil, "pads": pads,
             "group": int(xs[3]), "_layout": "NHWC"}
    _conv(b, op, name, attrs, (3, 0, 1, 2), 3)


def transpose_conv(b, op, name):
    """TRANSPOSE_CONV int8 (reference/integer_ops/transpose_conv.h): ``(x - x_zp) * w``
    scattered into an int32 output, then bias and TflRequantize per channel. The scatter runs as
    ConvTranspose in float64, exact: every partial sum is an integer below 2**53."""
    o = op.options
    xt, wt, yt = _t(b, op, 2), _t(b, op, 1), _t(b, op, 0, out=True)
    if xt.dtype != np.int8:
        raise ConvertError(f"operator {name!r}: quantized TRANSPOSE_CONV on {xt.dtype} is not "
                           "supported (int8 is)")
    if len(xt.shape) != 4:
        raise ConvertError(f"operator {name!r}: expected an NHWC input, got {list(xt.shape)}")
    if np.asarray(wt.zero_point).any():
        raise ConvertError(f"operator {name!r}: int8 TRANSPOSE_CONV weights need zero points 0")
    out_hw = [int(v) for v in ops._const(b, op, 0, "output_shape", name).ravel()][1:3]
    w = np.ascontiguousarray(ops._const(b, op, 1, "weights", name).transpose(3, 0, 1, 2),
                             np.float64)  # OHWI -> [I, O, kh, kw]
    attrs = ops.transpose_conv_attrs(xt.shape[1:3], w.shape, out_hw,
                                     [o.StrideH(), o.StrideW()], o.Padding() == ops.SAME)
    x = b.value(op.inputs[2])
    x64 = b.tmp(f"{name}/x64", like=x, dtype=np.dtype(np.float64))
    b.node("Cast", [x], [x64], {"to": to_code(np.float64)}, f"{name}/cast")
    centred = b.tmp(f"{name}/centred", like=x64)
    b.node("Sub", [x64, b.const_value(f"{name}/x_zero_point",
                                      np.float64(zero_point_of(xt)))], [centred],
           name=f"{name}/sub_zero_point")
    y = b.value(op.outputs[0])
    acc64 = b.tmp(f"{name}/acc64", like=y, dtype=np.dtype(np.float64))
    b.node("ConvTranspose", [centred, b.const_value(f"{name}/weights", w)], [acc64], attrs,
           f"{name}/conv_transpose")
    acc = b.tmp(f"{name}/acc", like=y, dtype=np.dtype(np.int32))
    b.node("Cast", [acc64], [acc], {"to": to_code(np.int32)}, f"{name}/acc")
    fused = o.FusedActivationFunction() if hasattr(o, "FusedActivationFunction") else 0
    mult, shift = conv_multipliers(_t(b, op, 2), wt, yt)
    _requantize(b, acc, y, yt, mult, shift, name, _bias(b, op, 3, name), fused)


def fully_connected(b, op, name):
    """FULLY_CONNECTED int8/uint8 (reference/integer_ops/fully_connected.h): x flattened to
    (N, K), weights (O, K) per-tensor or per-channel, int32 bias."""
    o = op.options
    if o.WeightsFormat() != 0:
        raise ConvertError(f"operator {name!r}: shuffled FULLY_CONNECTED weights are not "
                           "supported")
    xt, wt, yt = _t(b, op, 0), _t(b, op, 1), _t(b, op, 0, out=True)
    x = b.value(op.inputs[0])
    n_out, n_in = (int(d) for d in wt.shape)
    xs = b.g.values[x].shape
    if len(xs) != 2 or xs[1] != n_in:
        x2 = b.tmp(f"{name}/flat", like=x, shape=(int(np.prod(xs)) // n_in, n_in))
        b.node("Reshape", [x, b.const_value(f"{name}/flat_shape", np.array([-1, n_in],
                                                                          np.int64))],
               [x2], name=f"{name}/flatten")
        x = x2
    n_rows = b.g.values[x].shape[0]
    y = b.value(op.outputs[0])
    rows = y
    if tuple(b.g.values[y].shape) != (n_rows, n_out):
        rows = b.tmp(f"{name}/rows", like=y, shape=(n_rows, n_out))
    # NOTE: LiteRT's reference FULLY_CONNECTED requantizes in double (round half away from
    # zero), not with the fixed-point multiplier of its conv kernels and optimized FC
    lo, hi = activation_range(_fused(op), yt)
    ins = [x, _int_weights(b, op, (1, 0), name), _zp_const(b, f"{name}/x_zero_point", xt),
           _w_zero_point(b, wt, name), b.const_value(f"{name}/scale", conv_scales(xt, wt, yt))]
    bias = _bias(b, op, 2, name)
    if bias is not None:
        ins.append(bias)
    b.node("TflFullyConnected", ins, [rows],
           {"output_zero_point": zero_point_of(yt), "qmin": lo, "qmax": hi,
            "to": to_code(yt.dtype)}, name)
    if rows == y:
        return
    b.node("Reshape", [rows, b.const_value(f"{name}/out_shape",
                                         np.array(b.g.values[y].shape, np.int64))], [y],
           name=f"{name}/reshape")


def batch_matmul(b, op, name):
    """BATCH_MATMUL int8 (reference/batch_matmul.h, quantized): MatMulInteger of the zero-point
    centred operands (adj_x / adj_y as Transposes), requantized per tensor; no activation."""
    lt, rt, yt = _t(b, op, 0), _t(b, op, 1), _t(b, op, 0, out=True)
    if lt.dtype != np.int8 or rt.dtype != np.int8:
        raise ConvertError(f"operator {name!r}: quantized BATCH_MATMUL needs int8 operands, got "
                           f"{lt.dtype} and {rt.dtype}")
    ins = ops.batch_matmul_inputs(b, op, name)
    ins += [_zp_const(b, f"{name}/a_zero_point", lt), _zp_const(b, f"{name}/b_zero_point", rt)]
    y = b.value(op.outputs[0])
    acc = b.tmp(f"{name}/acc", like=y, dtype=np.dtype(np.int32))
    b.node("MatMulInteger", ins, [acc], None, f"{name}/matmul")
    m, s = quantize_multiplier(scale_of(lt) * scale_of(rt) / scale_of(yt))
    _requantize(b, acc, y, yt, [m], [s], name)


def add(b, op, name):
    """ADD / SUB int8/uint8 (reference/integer_ops/add.h, reference/sub.h; the same
    parameters, add.cc / sub.cc Prepare), numpy broadcasting."""
    at, bt, yt = _t(b, op, 0), _t(b, op, 1), _t(b, op, 0, out=True)
    lo, hi = activation_range(_fused(op), yt)
    attrs = {**add_params(at, bt, yt), "qmin": lo, "qmax": hi}
    b.node("TflAdd" if op.op == "ADD" else "TflSub",
           [b.value(op.inputs[0]), b.value(op.inputs[1])], [b.value(op.outputs[0])], attrs,
           name)


def min_max(onnx_op: str):
    def compare(b, op, name):
        """MAXIMUM / MINIMUM int8/uint8 (maximum_minimum.cc): compares the stored integers,
        so all three tensors must share their quantization."""
        yt = _t(b, op, 0, out=True)
        for k in (0, 1):
            _same_params(_t(b, op, k), yt, name, op.op)
        b.node(onnx_op, [b.value(op.inputs[0]), b.value(op.inputs[1])],
               [b.value(op.outputs[0])], None, name)
    return compare


def mul(b, op, name):
    """MUL int8/uint8 (reference/integer_ops/mul.h), numpy broadcasting."""
    at, bt, yt = _t(b, op, 0), _t(b, op, 1), _t(b, op, 0, out=True)
    lo, hi = activation_range(_fused(op), yt)
    attrs = {**mul_params(at, bt, yt), "qmin": lo, "qmax": hi}
    b.node("TflMul", [b.value(op.inputs[0]), b.value(op.inputs[1])], [b.value(op.outputs[0])],
           attrs, name)


def prelu(b, op, name):
    """PRELU int8/uint8 (activations.cc PreluPrepare, reference/prelu.h): identity and alpha
    multipliers computed in float from the C float scales."""
    xt, at, yt = _t(b, op, 0), _t(b, op, 1), _t(b, op, 0, out=True)
    sx, sa, sy = (F32(scale_of(t)) for t in (xt, at, yt))
    m1, s1 = quantize_multiplier(float(sx / sy))
    m2, s2 = quantize_multiplier(float(sx * sa / sy))
    b.node("TflPrelu", [b.value(op.inputs[0]), b.value(op.inputs[1])],
           [b.value(op.outputs[0])],
           {"x_zero_point": zero_point_of(xt), "alpha_zero_point": zero_point_of(at),
            "multiplier_1": m1, "shift_1": s1, "multiplier_2": m2, "shift_2": s2,
            "output_zero_point": zero_point_of(yt)}, name)


def _pool(op_type: str):
    def pool(b, op, name):
        """AVERAGE_POOL_2D / MAX_POOL_2D int8/uint8 (reference/integer_ops/pooling.h)."""
        o = op.options
        xs = ops._rank4(b, op, name)
        kernel = [o.FilterHeight(), o.FilterWidth()]
        strides = [o.StrideH(), o.StrideW()]
        pads = (ops._same_pads(xs[1:3], kernel, strides, [1, 1]) if o.Padding() == ops.SAME
                else [0, 0, 0, 0])
        xt, yt = _t(b, op, 0), _t(b, op, 0, out=True)
        _same_params(xt, yt, name, op.op)
        lo, hi = activation_range(o.FusedActivationFunction(), yt)
        b.node(op_type, [b.value(op.inputs[0])], [b.value(op.outputs[0])],
               {"kernel_shape": kernel, "strides": strides, "pads": pads, "qmin": lo,
                "qmax": hi}, name)
    return pool


def _same_params(xt, yt, name: str, what: str) -> None:
    if scale_of(xt) != scale_of(yt) or zero_point_of(xt) != zero_point_of(yt):
        raise ConvertError(f"operator {name!r} ({what}): input and output quantization differ "
                           f"(scale {scale_of(xt)} / {scale_of(yt)}, zero point "
                           f"{zero_point_of(xt)} / {zero_point_of(yt)}); TFLite requires them "
                           "equal")


def resize_bilinear(b, op, name):
    """RESIZE_BILINEAR int8 (reference/resize_bilinear.h ResizeBilinearInteger: Q10 source
    coordinates, Q20 weights); the values pass through unscaled, so the input's and output's
    quantization must match. uint8 runs a float kernel in TFLite and is refused here."""
    o = op.options
    xt, yt = _t(b, op, 0), _t(b, op, 0, out=True)
    ops._rank4(b, op, name)
    if xt.dtype != np.int8:
        raise ConvertError(f"operator {name!r}: quantized RESIZE_BILINEAR on {xt.dtype} is not "
                           "supported (int8 is)")
    _same_params(xt, yt, name, op.op)
    size = [int(v) for v in ops._const(b, op, 1, "size", name).ravel()]
    align, half = bool(o.AlignCorners()), bool(o.HalfPixelCenters())
    if align and half:
        raise ConvertError(f"operator {name!r} ({op.op}): align_corners together with "
                           "half_pixel_centers is not supported")
    b.node("TflResizeBilinear", [b.value(op.inputs[0])], [b.value(op.outputs[0])],
           {"sizes": size, "align_corners": int(align), "half_pixel_centers": int(half)}, name)


def relu(bounds):
    def relu_x(b, op, name):
        """RELU / RELU6 / RELU_N1_TO_1 int8/uint8 (activations.cc QuantizedReluX): requantize
        to the output's parameters, clamped to the quantized bounds."""
        xt, yt = _t(b, op, 0), _t(b, op, 0, out=True)
        # NOTE: ReluPrepare divides the scales as C floats (quantize.cc divides doubles)
        m, s = quantize_multiplier(float(F32(scale_of(xt)) / F32(scale_of(yt))))
        fused = {(0.0, None): 1, (-1.0, 1.0): 2, (0.0, 6.0): 3}[bounds]
        _requantize(b, b.value(op.inputs[0]), b.value(op.outputs[0]), yt, [m], [s], name,
                    fused=fused, input_zero_point=zero_point_of(xt))
    return relu_x


def lookup(fn):
    def lut(b, op, name):
        """LOGISTIC / TANH / ELU int8/uint8: TFLite's reference kernel is a 256-entry table
        made by LUTPopulate at Prepare (activations.cc)."""
        xt, yt = _t(b, op, 0), _t(b, op, 0, out=True)
        table = lookup_table(fn, xt, yt)
        b.node("TflLookup", [b.value(op.inputs[0]), b.const_value(f"{name}/table", table)],
               [b.value(op.outputs[0])], None, name)
    return lut


def _table_op(b, op, name, table):
    b.node("TflLookup", [b.value(op.inputs[0]), b.const_value(f"{name}/table", table)],
           [b.value(op.outputs[0])], None, name)


def hard_swish(b, op, name):
    """HARD_SWISH int8/uint8: TFLite's int16 fixed-point kernel (reference/hard_swish.h)
    depends on the input value only, so it is evaluated here on all 256 of them."""
    _table_op(b, op, name, hard_swish_table(_t(b, op, 0), _t(b, op, 0, out=True)))


def leaky_relu(b, op, name):
    """LEAKY_RELU int8/uint8 (reference/leaky_relu.h QuantizeLeakyRelu), tabulated."""
    _table_op(b, op, name, leaky_relu_table(float(op.options.Alpha()), _t(b, op, 0),
                                            _t(b, op, 0, out=True)))


def gelu(b, op, name):
    """GELU int8/uint8: LUTPopulate of reference/gelu.h's float transform (activations.cc)."""
    approx = op.options is not None and bool(op.options.Approximate())
    _table_op(b, op, name, lookup_table(gelu_f32(approx), _t(b, op, 0),
                                        _t(b, op, 0, out=True)))


def softmax(b, op, name):
    """SOFTMAX int8/uint8 (reference/softmax.h, kReference): output scale 1/256, zero point
    the type's minimum, as TFLite requires."""
    xt, yt = _t(b, op, 0), _t(b, op, 0, out=True)
    lo, _ = qrange(yt.dtype)
    if zero_point_of(yt) != lo or abs(scale_of(yt) - 1 / 256) > 0.001 / 256:
        raise ConvertError(f"operator {name!r} (SOFTMAX): a quantized softmax output needs "
                           f"scale 1/256 and zero point {lo}, got {scale_of(yt)} and "
                           f"{zero_point_of(yt)}")
    beta = float(op.options.Beta()) if op.options is not None else 1.0
    b.node("TflSoftmax", [b.value(op.inputs[0])], [b.value(op.outputs[0])],
           softmax_params(beta, xt), name)


def quantize(b, op, name):
    """QUANTIZE: float -> int8/uint8 (AffineQuantize, rounding half away from zero) or int ->
    int (Requantize: TFLite's fixed-point multiplier ``x_scale / y_scale``)."""
    xt, yt = _t(b, op, 0), _t(b, op, 0, out=True)
    x, y = b.value(op.inputs[0]), b.value(op.outputs[0])
    if xt.dtype.kind == "f":
        b.node("TflQuantize", [x], [y], {"scale": scale_of(yt), "zero_point": zero_point_of(yt),
                                          "to": to_code(yt.dtype)}, name)
        return
    m, s = quantize_multiplier(scale_of(xt) / scale_of(yt))
    _requantize(b, x, y, yt, [m], [s], name, input_zero_point=zero_point_of(xt))


def dequantize(b, op, name):
    """DEQUANTIZE: constants fold as in float models; a runtime int8/uint8 tensor becomes
    DequantizeLinear (TFLite computes ``float(double(scale) * (x - zp))``, the same single
    rounding of an exact product)."""
    if ops.fold_weight_op(b, op, name):
        return
    xt = _t(b, op, 0)
    scale = b.const_value(f"{name}/scale", np.asarray(xt.scale, np.float32).reshape(()))
    b.node("DequantizeLinear", [b.value(op.inputs[0]), scale, _zp_const(b, f"{name}/zp", xt)],
           [b.value(op.outputs[0])], None, name)


def pad(b, op, name):
    """PAD / PADV2 int8/uint8: padded with the output zero point (PAD) or the constant."""
    p = ops._const(b, op, 1, "paddings", name).astype(np.int64).reshape(-1, 2)
    yt = _t(b, op, 0, out=True)
    ins = [b.value(op.inputs[0]),
           b.const_value(f"{name}/pads", np.concatenate([p[:, 0], p[:, 1]]))]
    if op.op == "PADV2" and ops._in(op, 2) != MISSING:
        ins.append(b.value(op.inputs[2]))
    else:
        ins.append(_zp_const(b, f"{name}/value", yt))
    b.node("Pad", ins, [b.value(op.outputs[0])], None, name)


def concatenation(b, op, name):
    """CONCATENATION int8/uint8: TFLite requires every input's parameters equal the output's
    (then it copies bytes)."""
    yt = _t(b, op, 0, out=True)
    for k in range(len(op.inputs)):
        _same_params(_t(b, op, k), yt, name, "CONCATENATION")
    if _fused(op):
        raise ConvertError(f"operator {name!r}: a fused activation on a quantized "
                           "CONCATENATION is not supported")
    ops.concatenation(b, op, name)


def mean(b, op, name):
    """MEAN int8/uint8 (reference/reduce.h QuantizedMeanOrSum): the int32 sum over the axes,
    less ``n * x_zp``, times ``x_scale / y_scale`` folded with ``1 / n`` into the fixed-point
    multiplier as TFLite does (``(multiplier << s) / n``, ``s = min(floor(log2 n), 32,
    31 + shift)``)."""
    xt, yt = _t(b, op, 0), _t(b, op, 0, out=True)
    axes = ops._const(b, op, 1, "axes", name).astype(np.int64).ravel()
    keep = int(bool(op.options.KeepDims())) if op.options is not None else 0
    rank = len(xt.shape)
    n = int(np.prod([xt.shape[a] for a in {int(a) % rank for a in axes}], dtype=np.int64))
    if n == 0:
        raise ConvertError(f"operator {name!r} (MEAN): reduces an empty axis")
    m, shift = quantize_multiplier(scale_of(xt) / scale_of(yt))
    s = min(n.bit_length() - 1, 32, 31 + shift)
    m, shift = ((m << s) // n), shift - s
    x = b.value(op.inputs[0])
    y = b.value(op.outputs[0])
    # NOTE: below 2^24 / 255 values a float32 sum of the bytes is the exact integer (the
    # compiled ReduceSum runs on float32; int32 runs on the reference kernel)
    exact_f32 = n * 255 < EXACT_F32
    dt = np.dtype(np.float32 if exact_f32 else np.int32)
    xs = b.tmp(f"{name}/{dt}", like=x, dtype=dt)
    b.node("Cast", [x], [xs], {"to": to_code(dt)}, f"{name}/cast")
    total = b.tmp(f"{name}/sum", like=y, dtype=dt)
    b.node("ReduceSum", [xs, b.const_value(f"{name}/axes", axes)], [total],
           {"keepdims": keep}, f"{name}/sum")
    if exact_f32:
        t32 = b.tmp(f"{name}/sum_int32", like=total, dtype=np.dtype(np.int32))
        b.node("Cast", [total], [t32], {"to": to_code(np.int32)}, f"{name}/sum_int32")
        total = t32
    _requantize(b, total, y, yt, [m], [shift], name, input_zero_point=zero_point_of(xt) * n)


def same_bytes(translate):
    """An op that only moves bytes: the float translator, exact on integers."""
    def moved(b, op, name):
        translate(b, op, name)
    moved.__doc__ = translate.__doc__
    return moved


QOPS = {
    "CONV_2D": conv_2d,
    "DEPTHWISE_CONV_2D": depthwise_conv_2d,
    "TRANSPOSE_CONV": transpose_conv,
    "FULLY_CONNECTED": fully_connected,
    "BATCH_MATMUL": batch_matmul,
    "ADD": add,
    "SUB": add,
    "MAXIMUM": min_max("Max"),
    "MINIMUM": min_max("Min"),
    "MUL": mul,
    "PRELU": prelu,
    "AVERAGE_POOL_2D": _pool("TflAveragePool2D"),
    "MAX_POOL_2D": _pool("TflMaxPool2D"),
    "RELU": relu((0.0, None)),
    "RELU6": relu((0.0, 6.0)),
    "RELU_N1_TO_1": relu((-1.0, 1.0)),
    "LOGISTIC": lookup(logistic_f32),
    "ELU": lookup(elu_f32),
    "GELU": gelu,
    "HARD_SWISH": hard_swish,
    "LEAKY_RELU": leaky_relu,
    "TANH": lookup(tanh_f32),
    "SOFTMAX": softmax,
    "QUANTIZE": quantize,
    "DEQUANTIZE": dequantize,
    "MEAN": mean,
    "PAD": pad,
    "RESIZE_BILINEAR": resize_bilinear,
    "PADV2": pad,
    "CONCATENATION": concatenation,
    "RESHAPE": same_bytes(ops.reshape),
    "SQUEEZE": same_bytes(ops.reshape),
    "EXPAND_DIMS": same_bytes(ops.reshape),
    "TRANSPOSE": same_bytes(ops.transpose),
    "SLICE": same_bytes(ops.slice_),
    "STRIDED_SLICE": same_bytes(ops.strided_slice),
    "SPLIT": same_bytes(ops.split),
    "SPLIT_V": same_bytes(ops.split),
    "GATHER": same_bytes(ops.gather),
    "PACK": same_bytes(ops.pack),
    "SHAPE": same_bytes(ops.shape),
    "DEPTH_TO_SPACE": same_bytes(ops.depth_to_space),
    "SPACE_TO_DEPTH": same_bytes(ops.space_to_depth),
}
