"""Reference kernels: TFLite's integer (full-integer quantized) kernels, bit for bit.

TFLite's int8/uint8 kernels do not compute ``round(acc * float_multiplier)`` as ONNX's QLinear
ops do: every rescaling is a fixed-point multiply by a 32-bit quantized multiplier and a shift
(``MultiplyByQuantizedMultiplier``: gemmlowp's ``SaturatingRoundingDoublingHighMul`` then
``RoundingDivideByPOT``, two roundings), and softmax runs gemmlowp's fixed-point exp. The two
differ by 1 LSB on some values, so the TFLite frontend emits these ops (with the multipliers it
computed as TFLite's ``Prepare`` does, see ``sprat.frontends.tflite.quant``) and these kernels
reproduce LiteRT's reference kernels (``OpResolverType.BUILTIN_REF``) exactly. Integer products
accumulate exactly (ConvInteger / MatMulInteger, int64) before ``TflRequantize``.

Source: tensorflow/lite/kernels/internal/common.h (MultiplyByQuantizedMultiplier, double
rounding, the default build), reference/integer_ops/{add,mul,pooling}.h, reference/softmax.h,
gemmlowp fixedpoint/fixedpoint.h (exp_on_negative_values, one_over_one_plus_x_for_x_in_0_1),
reference/quantize.h (AffineQuantize), common.h LUTPopulate (LOGISTIC/TANH tables),
reference/resize_bilinear.h (ResizeBilinearInteger).
"""

from __future__ import annotations

import numpy as np

from ...dtypes import CODE_TO_NUMPY

_I64 = np.int64
I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1


# ---- gemmlowp / TFLite fixed-point arithmetic on int64 arrays holding int32 values -----------
def wrap32(x):
    """Two's-complement wrap to int32 (C's int32 arithmetic on this machine), kept as int64."""
    return ((np.asarray(x, _I64) + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def _trunc_div_pot(x, e: int):
    """C integer division ``x / 2**e`` (rounds toward zero)."""
    return np.where(x >= 0, x >> e, -((-x) >> e))


def srdhm(a, b):
    """gemmlowp SaturatingRoundingDoublingHighMul(a, b) for int32 a, b: the high 32 bits of
    ``2*a*b`` rounded to nearest (ties away from zero), saturating INT32_MIN * INT32_MIN."""
    a, b = np.asarray(a, _I64), np.asarray(b, _I64)
    ab = a * b
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    res = _trunc_div_pot(ab + nudge, 31)
    return np.where((a == b) & (a == I32_MIN), I32_MAX, res)


def rounding_divide_by_pot(x, exponent):
    """gemmlowp RoundingDivideByPOT: ``x / 2**exponent`` rounded to nearest, ties away from 0."""
    x = np.asarray(x, _I64)
    exponent = np.asarray(exponent, _I64)
    mask = (np.int64(1) << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + (remainder > threshold)


def multiply_by_quantized_multiplier(x, multiplier, shift):
    """TFLite MultiplyByQuantizedMultiplier (double rounding): ``x * multiplier * 2**(shift-31)``
    for int32 ``x``, a Q31 ``multiplier`` and ``shift`` in [-31, 30] (arrays broadcast)."""
    shift = np.asarray(shift, _I64)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    return rounding_divide_by_pot(srdhm(wrap32(np.asarray(x, _I64) << left), multiplier), right)


def _saturating_pot(x, exponent: int):
    """gemmlowp SaturatingRoundingMultiplyByPOT<exponent> on int32 values."""
    if exponent == 0:
        return x
    if exponent < 0:
        return rounding_divide_by_pot(x, -exponent)
    threshold = (1 << (31 - exponent)) - 1
    return np.where(x > threshold, I32_MAX, np.where(x < -threshold, I32_MIN, x << exponent))


def _fx_mul(a, b):
    return srdhm(a, b)


def _exp_on_interval(a):
    """exp(a) for a in [-1/4, 0), Q0.31 in and out."""
    constant_term, one_third = 1895147668, 715827883
    x = wrap32(a + (1 << 28))
    x2 = _fx_mul(x, x)
    x3 = _fx_mul(x2, x)
    x4 = _fx_mul(x2, x2)
    x4_over_4 = _saturating_pot(x4, -2)
    poly = _saturating_pot(wrap32(_fx_mul(wrap32(x4_over_4 + x3), one_third) + x2), -1)
    return wrap32(constant_term + _fx_mul(constant_term, wrap32(x + poly)))


_EXP_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308),
               (2, 39332535), (3, 720401), (4, 242))


def exp_on_negative_values(a, integer_bits: int):
    """gemmlowp exp_on_negative_values for a Q(integer_bits).(31-integer_bits) input <= 0;
    returns Q0.31."""
    frac = 31 - integer_bits
    one_quarter = 1 << (frac - 2)
    mask = one_quarter - 1
    a_mod_minus_quarter = wrap32((a & mask) - one_quarter)
    result = _exp_on_interval(_saturating_pot(a_mod_minus_quarter, integer_bits))
    remainder = wrap32(a_mod_minus_quarter - a)
    for exponent, multiplier in _EXP_BARREL:
        if integer_bits > exponent:
            bit = 1 << (frac + exponent)
            result = np.where(remainder & bit, _fx_mul(result, multiplier), result)
    if integer_bits > 5:
        clamp = -(1 << (36 - integer_bits))
        result = np.where(a < clamp, 0, result)
    return np.where(a == 0, I32_MAX, result)


def one_over_one_plus_x_for_x_in_0_1(a):
    """gemmlowp one_over_one_plus_x_for_x_in_0_1: Q0.31 in, Q0.31 out (Newton-Raphson)."""
    s = a + I32_MAX  # RoundingHalfSum(a, One)
    half_denominator = np.where(s >= 0, (s + 1) // 2, -((-s + 1) // 2))
    x = wrap32(1515870810 + _fx_mul(half_denominator, -1010580540))
    for _ in range(3):
        one_minus = wrap32((1 << 29) - _fx_mul(half_denominator, x))
        x = wrap32(x + _saturating_pot(_fx_mul(x, one_minus), 2))
    return _saturating_pot(x, 1)  # Rescale<0>(ExactMulByPot<-1>(x)): Q1.30 -> Q0.31


def get_reciprocal(x, x_integer_digits: int):
    """TFLite GetReciprocal: (Q0.31 of 1 / (x as Q(x_integer_digits)), num_bits_over_unit)."""
    ux = np.asarray(x, _I64) & 0xFFFFFFFF
    # NOTE: an integer below 2**53 is exact in float64: frexp's exponent is its bit length
    clz = 32 - np.frexp(ux.astype(np.float64))[1].astype(_I64)
    num_bits_over_unit = x_integer_digits - clz
    shifted_minus_one = wrap32(((ux << clz) & 0xFFFFFFFF) - (1 << 31))
    return one_over_one_plus_x_for_x_in_0_1(shifted_minus_one), num_bits_over_unit


# ---- kernels ---------------------------------------------------------------------------------
def _qrange(dtype):
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _per_axis(p, ndim: int, axis: int):
    p = np.asarray(p, _I64)
    if p.size == 1:
        return p.reshape(())
    shape = [1] * ndim
    shape[axis % ndim] = p.size
    return p.reshape(shape)


def tfl_requantize(x, multiplier, shift, bias=None, axis=-1, input_zero_point=0,
                   output_zero_point=0, qmin=-128, qmax=127, to=3):
    """TFLite's requantisation: ``clamp(MBQM(x - input_zero_point + bias, multiplier, shift) +
    output_zero_point, qmin, qmax)``. x (*S) int8/uint8/int32; multiplier, shift int32 of size
    1 or S[axis] (per channel); bias int32 (S[axis],) optional; -> y (*S) of ONNX type ``to``.

    The epilogue of TFLite's integer conv/depthwise/fully-connected kernels
    (reference/integer_ops/conv.h etc.), its Requantize (QUANTIZE int -> int) and the quantized
    RELU/RELU6 (activations.cc QuantizedReluX)."""
    v = np.asarray(x, _I64) - int(input_zero_point)
    if bias is not None:
        v = v + _per_axis(bias, v.ndim, axis)
    v = multiply_by_quantized_multiplier(wrap32(v), _per_axis(multiplier, v.ndim, axis),
                                         _per_axis(shift, v.ndim, axis))
    v = np.clip(v + int(output_zero_point), int(qmin), int(qmax))
    return v.astype(CODE_TO_NUMPY[int(to)])


def tfl_rescale(x, scale, bias=None, axis=-1, output_zero_point=0, qmin=-128, qmax=127, to=3):
    """``clamp(round(double(x + bias) * scale) + output_zero_point, qmin, qmax)``: x (*S) int32,
    scale float64 of 1 or S[axis] elements, rounding half away from zero; -> (*S) of type ``to``.

    The epilogue of LiteRT's reference FULLY_CONNECTED kernels (reference/integer_ops/
    fully_connected.h: "performs requant in float to avoid loss of precision"); its optimized
    kernels use the fixed-point multiplier instead (TflRequantize)."""
    v = np.asarray(x, _I64)
    if bias is not None:
        v = v + _per_axis(bias, v.ndim, axis)
    r = wrap32(v).astype(np.float64) * np.asarray(scale, np.float64).reshape(
        _per_axis(scale, v.ndim, axis).shape)
    r = np.sign(r) * np.floor(np.abs(r) + 0.5)
    v = np.clip(r, int(qmin) - int(output_zero_point), int(qmax) - int(output_zero_point))
    return (v.astype(_I64) + int(output_zero_point)).astype(CODE_TO_NUMPY[int(to)])


def tfl_conv(x, w, x_zero_point, w_zero_point, multiplier, shift, bias=None,
             output_zero_point=0, qmin=-128, qmax=127, to=3, **conv_attrs):
    """TFLite's quantized CONV_2D / DEPTHWISE_CONV_2D (reference/integer_ops/conv.h,
    depthwise_conv.h) in one node: ConvInteger-10 (x (N, C, *S) and w (M, C/group, *K)
    uint8/int8 with their zero points, Conv-11 attributes) then ``tfl_requantize`` per output
    channel (multiplier, shift int32 of 1 or M, bias int32 (M,) optional) -> (N, M, *S_out)
    of ONNX type ``to``. The same arithmetic as ConvInteger followed by TflRequantize (the
    frontend emitted those two until the cpu backend fused the requantisation into its
    conv epilogues)."""
    from .ops_quant import conv_integer

    acc = conv_integer(x, w, x_zero_point, w_zero_point, **conv_attrs)
    return tfl_requantize(acc, multiplier, shift, bias, axis=1,
                          output_zero_point=output_zero_point, qmin=qmin, qmax=qmax, to=to)


def tfl_fully_connected(x, w, x_zero_point, w_zero_point, scale, bias=None,
                        output_zero_point=0, qmin=-128, qmax=127, to=3):
    """TFLite's quantized FULLY_CONNECTED as LiteRT's reference kernel computes it
    (reference/integer_ops/fully_connected.h): MatMulInteger-10 of x (N, K) and w (K, O)
    uint8/int8 with their zero points, then ``tfl_rescale`` per output (scale float64 of 1 or
    O, bias int32 (O,) optional) -> (N, O) of ONNX type ``to``."""
    from .ops_quant import matmul_integer

    acc = matmul_integer(x, w, x_zero_point, w_zero_point)
    return tfl_rescale(acc, scale, bias, axis=-1, output_zero_point=output_zero_point,
                       qmin=qmin, qmax=qmax, to=to)


def _scaled(x, zero_point, left_shift, multiplier, shift):
    v = wrap32((np.asarray(x, _I64) - int(zero_point)) << int(left_shift))
    return multiply_by_quantized_multiplier(v, multiplier, shift)


def tfl_add(a, b, a_zero_point=0, a_multiplier=0, a_shift=0, b_zero_point=0, b_multiplier=0,
            b_shift=0, left_shift=20, multiplier=0, shift=0, output_zero_point=0, qmin=-128,
            qmax=127):
    """TFLite quantized ADD (reference/integer_ops/add.h AddFunc), numpy broadcasting: each
    input ``((x - zp) << left_shift)`` scaled by its multiplier, summed, scaled to the output.
    a, b int8/uint8 -> y of a's dtype."""
    total = (_scaled(a, a_zero_point, left_shift, a_multiplier, a_shift)
             + _scaled(b, b_zero_point, left_shift, b_multiplier, b_shift))
    v = multiply_by_quantized_multiplier(wrap32(total), multiplier, shift)
    return np.clip(v + int(output_zero_point), int(qmin), int(qmax)).astype(a.dtype)


def tfl_sub(a, b, a_zero_point=0, a_multiplier=0, a_shift=0, b_zero_point=0, b_multiplier=0,
            b_shift=0, left_shift=20, multiplier=0, shift=0, output_zero_point=0, qmin=-128,
            qmax=127):
    """TFLite quantized SUB (reference/sub.h SubElementwise): as TflAdd with the scaled
    inputs subtracted."""
    diff = (_scaled(a, a_zero_point, left_shift, a_multiplier, a_shift)
            - _scaled(b, b_zero_point, left_shift, b_multiplier, b_shift))
    v = multiply_by_quantized_multiplier(wrap32(diff), multiplier, shift)
    return np.clip(v + int(output_zero_point), int(qmin), int(qmax)).astype(a.dtype)


def tfl_mul(a, b, a_zero_point=0, b_zero_point=0, multiplier=0, shift=0, output_zero_point=0,
            qmin=-128, qmax=127):
    """TFLite quantized MUL (reference/integer_ops/mul.h MulElementwise), numpy broadcasting:
    ``MBQM((a - a_zp) * (b - b_zp), multiplier, shift) + output_zp``, clamped; a's dtype."""
    prod = (np.asarray(a, _I64) - int(a_zero_point)) * (np.asarray(b, _I64) - int(b_zero_point))
    v = multiply_by_quantized_multiplier(wrap32(prod), multiplier, shift)
    return np.clip(v + int(output_zero_point), int(qmin), int(qmax)).astype(a.dtype)


def tfl_prelu(x, alpha, x_zero_point=0, alpha_zero_point=0, multiplier_1=0, shift_1=0,
              multiplier_2=0, shift_2=0, output_zero_point=0):
    """TFLite quantized PRELU (reference/prelu.h BroadcastPrelu4DSlow), numpy broadcasting:
    ``x - x_zp`` rescaled by multiplier 1 where it is >= 0, else ``(x - x_zp) * (alpha -
    alpha_zp)`` by multiplier 2; plus the output zero point, saturated to x's type."""
    lo, hi = _qrange(x.dtype)
    v = np.asarray(x, _I64) - int(x_zero_point)
    a = np.asarray(alpha, _I64) - int(alpha_zero_point)
    pos = multiply_by_quantized_multiplier(v, multiplier_1, shift_1)
    neg = multiply_by_quantized_multiplier(wrap32(v * a), multiplier_2, shift_2)
    out = np.where(v >= 0, pos, neg) + int(output_zero_point)
    return np.clip(out, lo, hi).astype(x.dtype)


def _windows(x, kernel_shape, strides, pads):
    """Yield ``(oy, ox, window)`` over NHWC x: each window is x's valid part (padding
    excluded, as TFLite's pooling clamps the filter to the image)."""
    h, w = x.shape[1:3]
    kh, kw = kernel_shape
    sh, sw = strides
    top, left = pads[0], pads[1]
    oh = (h + pads[0] + pads[2] - kh) // sh + 1
    ow = (w + pads[1] + pads[3] - kw) // sw + 1
    for oy in range(oh):
        y0 = oy * sh - top
        for ox in range(ow):
            x0 = ox * sw - left
            yield oy, ox, x[:, max(y0, 0):min(y0 + kh, h), max(x0, 0):min(x0 + kw, w), :]


def _pool_out(x, kernel_shape, strides, pads):
    n, h, w, c = x.shape
    oh = (h + pads[0] + pads[2] - kernel_shape[0]) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - kernel_shape[1]) // strides[1] + 1
    return np.empty((n, oh, ow, c), _I64)


def tfl_average_pool_2d(x, kernel_shape=(1, 1), strides=(1, 1), pads=(0, 0, 0, 0), qmin=-128,
                        qmax=127):
    """TFLite quantized AVERAGE_POOL_2D (reference/integer_ops/pooling.h): NHWC x int8/uint8;
    the sum of the window's valid values divided by their count, rounded half away from zero
    (C integer division), clamped to [qmin, qmax]. pads [top, left, bottom, right]."""
    out = _pool_out(x, kernel_shape, strides, pads)
    for oy, ox, win in _windows(x, kernel_shape, strides, pads):
        count = win.shape[1] * win.shape[2]
        acc = win.astype(_I64).sum(axis=(1, 2))
        half = count // 2
        out[:, oy, ox, :] = np.where(acc > 0, (acc + half) // count,
                                     -((-(acc - half)) // count))
    return np.clip(out, int(qmin), int(qmax)).astype(x.dtype)


def tfl_max_pool_2d(x, kernel_shape=(1, 1), strides=(1, 1), pads=(0, 0, 0, 0), qmin=-128,
                    qmax=127):
    """TFLite quantized MAX_POOL_2D: the max of the window's valid values, clamped. NHWC."""
    out = _pool_out(x, kernel_shape, strides, pads)
    for oy, ox, win in _windows(x, kernel_shape, strides, pads):
        out[:, oy, ox, :] = win.astype(_I64).max(axis=(1, 2))
    return np.clip(out, int(qmin), int(qmax)).astype(x.dtype)


def _interpolation_values(n_out: int, n_in: int, align_corners: bool, half_pixel: bool):
    """ComputeInterpolationValuesInteger for every output index: (scaled Q10 source, lower,
    upper) index arrays; C integer division (toward zero) throughout."""
    scale = ((1 << 10) * n_in + n_out // 2) // n_out
    if align_corners and n_out > 1:
        scale = ((1 << 10) * (n_in - 1) + (n_out - 1) // 2) // (n_out - 1)
    v = np.arange(n_out, dtype=_I64) * scale
    if half_pixel:
        v = v + scale // 2 - (1 << 9)
    lower = np.maximum(_trunc_div_pot(v, 10), 0)
    upper = np.minimum(_trunc_div_pot(v + (1 << 10) - 1, 10), n_in - 1)
    return v, lower, upper


def tfl_resize_bilinear(x, sizes=(1, 1), align_corners=0, half_pixel_centers=0):
    """TFLite RESIZE_BILINEAR on int8 (reference/resize_bilinear.h ResizeBilinearInteger): Q10
    source coordinates, the four taps weighted in Q20, rounded half away from zero. NHWC x ->
    (N, sizes[0], sizes[1], C), x's dtype; the quantization parameters pass through."""
    h, w = x.shape[1:3]
    iy, y0, y1 = _interpolation_values(int(sizes[0]), h, bool(align_corners),
                                       bool(half_pixel_centers))
    ix, x0, x1 = _interpolation_values(int(sizes[1]), w, bool(align_corners),
                                       bool(half_pixel_centers))
    v = np.asarray(x, _I64)
    fy = (iy - (y0 << 10))[None, :, None, None]
    fx = (ix - (x0 << 10))[None, None, :, None]
    top, bottom = v[:, y0], v[:, y1]
    acc = (top[:, :, x0] * ((1 << 10) - fy) * ((1 << 10) - fx)
           + bottom[:, :, x0] * fy * ((1 << 10) - fx)
           + top[:, :, x1] * ((1 << 10) - fy) * fx
           + bottom[:, :, x1] * fy * fx)
    acc = acc + np.where(acc > 0, 1 << 19, -(1 << 19))
    return _trunc_div_pot(acc, 20).astype(x.dtype)


def tfl_lookup(x, table):
    """``y = table[x - min(x's dtype)]``: TFLite's 8-bit lookup-table kernels (LOGISTIC, TANH),
    whose 256-entry table the frontend computes as TFLite's LUTPopulate does. x int8/uint8,
    table (256,) of x's dtype."""
    lo = np.iinfo(x.dtype).min
    return np.asarray(table)[np.asarray(x, _I64) - lo]


def tfl_softmax(x, input_multiplier=0, input_left_shift=0, diff_min=0):
    """TFLite quantized SOFTMAX over the last axis (reference/softmax.h, int8/uint8 in and out;
    output scale 1/256, zero point the type's minimum): gemmlowp fixed-point exp of the
    rescaled differences to the row max, a Q12 sum, its fixed-point reciprocal."""
    out_min, out_max = _qrange(x.dtype)
    v = np.asarray(x, _I64)
    diff = v - v.max(axis=-1, keepdims=True)
    keep = diff >= int(diff_min)
    rescaled = srdhm(wrap32(diff << int(input_left_shift)), int(input_multiplier))
    exps = exp_on_negative_values(rescaled, 5)
    exps = np.where(keep, exps, 0)
    sum_of_exps = wrap32(_saturating_pot(exps, -12).sum(axis=-1, keepdims=True))
    shifted_scale, bits_over_unit = get_reciprocal(sum_of_exps, 12)
    exponent = bits_over_unit + 31 - 8
    unsat = rounding_divide_by_pot(srdhm(shifted_scale, exps), exponent)
    y = np.clip(unsat + out_min, out_min, out_max)
    return np.where(keep, y, out_min).astype(x.dtype)


def tfl_quantize(x, scale=1.0, zero_point=0, to=3):
    """TFLite QUANTIZE float -> int (reference/quantize.h AffineQuantize):
    ``clamp(round_half_away(float32(x) / float32(scale)) + zero_point)`` in ONNX type ``to``."""
    dt = CODE_TO_NUMPY[int(to)]
    lo, hi = _qrange(dt)
    q = np.asarray(x, np.float32) / np.float32(scale)
    # NOTE: roundf; |q| + 0.5 is exact in float64 (not in float32, just below a half)
    r = np.sign(q) * np.floor(np.abs(q).astype(np.float64) + 0.5)
    with np.errstate(invalid="ignore"):
        v = np.clip(r, lo - int(zero_point), hi - int(zero_point))
    return (v.astype(_I64) + int(zero_point)).astype(dt)


OPS = {
    "TflRequantize": tfl_requantize,
    "TflRescale": tfl_rescale,
    "TflConv": tfl_conv,
    "TflFullyConnected": tfl_fully_connected,
    "TflAdd": tfl_add,
    "TflSub": tfl_sub,
    "TflMul": tfl_mul,
    "TflPrelu": tfl_prelu,
    "TflAveragePool2D": tfl_average_pool_2d,
    "TflMaxPool2D": tfl_max_pool_2d,
    "TflResizeBilinear": tfl_resize_bilinear,
    "TflLookup": tfl_lookup,
    "TflSoftmax": tfl_softmax,
    "TflQuantize": tfl_quantize,
}
