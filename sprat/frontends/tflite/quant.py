"""TFLite's quantization parameters, computed at convert time exactly as its kernels' ``Prepare``
does (tensorflow/lite/kernels/internal/quantization_util.cc, kernel_util.cc, add.cc, mul.cc,
activations.cc). Python floats are C doubles; ``np.float32`` stands where TFLite computes in
float (a tensor's scale is a C float).
"""

from __future__ import annotations

import math

import numpy as np

F32 = np.float32


def round_half_away(x: float) -> int:
    """C's ``round`` / ``roundf`` (TfLiteRound): ties away from zero."""
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


def quantize_multiplier(m: float) -> tuple[int, int]:
    """QuantizeMultiplier (double rounding build): ``m = q * 2**(shift - 31)`` with a Q31 ``q``
    in [2**30, 2**31), or (0, 0) for 0 and for ``m < 2**-32`` (flushed, as TFLite does)."""
    if m == 0.0:
        return 0, 0
    q, shift = math.frexp(m)
    q_fixed = round_half_away(q * (1 << 31))
    if q_fixed == 1 << 31:
        q_fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return q_fixed, shift


def scale_of(t) -> float:
    """A per-tensor scale as the C float TFLite keeps, widened to double."""
    return float(F32(t.scale.ravel()[0]))


def zero_point_of(t) -> int:
    return int(t.zero_point.ravel()[0])


def qrange(dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def activation_range(fused: int, t) -> tuple[int, int]:
    """CalculateActivationRangeQuantized: the output clamp of fused activation ``fused``
    (0 NONE, 1 RELU, 2 RELU_N1_TO_1, 3 RELU6) for output tensor ``t``."""
    lo, hi = qrange(t.dtype)
    scale, zp = F32(t.scale.ravel()[0]), zero_point_of(t)

    def q(f: float) -> int:
        return zp + round_half_away(float(F32(f) / scale))

    if fused == 1:
        return max(lo, q(0.0)), hi
    if fused == 2:
        return max(lo, q(-1.0)), min(hi, q(1.0))
    if fused == 3:
        return max(lo, q(0.0)), min(hi, q(6.0))
    if fused == 0:
        return lo, hi
    raise ValueError(f"fused activation {fused} has no quantized range (NONE, RELU, "
                     "RELU_N1_TO_1, RELU6 do)")


def conv_scales(x, w, y) -> np.ndarray:
    """Per output channel (or one), ``double(x_scale) * double(w_scale[c]) / double(y_scale)``
    as float64 (PopulateConvolutionQuantizationParams, the reference FULLY_CONNECTED)."""
    xs, ys = scale_of(x), scale_of(y)
    return np.array([xs * float(ws) / ys for ws in np.asarray(w.scale, F32).ravel()],
                    np.float64)


def conv_multipliers(x, w, y) -> tuple[np.ndarray, np.ndarray]:
    """PopulateConvolutionQuantizationParams: :func:`conv_scales` quantized. Returns
    (multiplier, shift) int32."""
    mults, shifts = [], []
    for scale in conv_scales(x, w, y):
        m, s = quantize_multiplier(float(scale))
        mults.append(m)
        shifts.append(s)
    return np.array(mults, np.int32), np.array(shifts, np.int32)


def add_params(a, b, y, left_shift: int = 20) -> dict:
    """add.cc Prepare (8-bit): each input's multiplier relative to twice the larger input scale,
    the output's relative to ``2**left_shift * y_scale``."""
    sa, sb, sy = F32(a.scale.ravel()[0]), F32(b.scale.ravel()[0]), F32(y.scale.ravel()[0])
    twice_max = F32(2) * max(sa, sb)
    am, ash = quantize_multiplier(float(sa) / float(twice_max))
    bm, bsh = quantize_multiplier(float(sb) / float(twice_max))
    om, osh = quantize_multiplier(float(twice_max) / float(F32(1 << left_shift) * sy))
    return {"a_zero_point": zero_point_of(a), "a_multiplier": am, "a_shift": ash,
            "b_zero_point": zero_point_of(b), "b_multiplier": bm, "b_shift": bsh,
            "left_shift": left_shift, "multiplier": om, "shift": osh,
            "output_zero_point": zero_point_of(y)}


def mul_params(a, b, y) -> dict:
    """mul.cc Prepare: ``a_scale * b_scale / y_scale`` computed in float, then quantized."""
    real = F32(a.scale.ravel()[0]) * F32(b.scale.ravel()[0]) / F32(y.scale.ravel()[0])
    m, s = quantize_multiplier(float(real))
    return {"a_zero_point": zero_point_of(a), "b_zero_point": zero_point_of(b),
            "multiplier": m, "shift": s, "output_zero_point": zero_point_of(y)}


def softmax_params(beta: float, x) -> dict:
    """activations.cc SoftmaxPrepare (kReference) with PreprocessSoftmaxScaling and
    CalculateInputRadius, 5 integer bits for the scaled differences."""
    integer_bits = 5
    real = min(float(F32(beta)) * scale_of(x) * (1 << (31 - integer_bits)), (1 << 31) - 1.0)
    m, left_shift = quantize_multiplier(real)
    radius = math.floor(((1 << integer_bits) - 1) * (1 << (31 - integer_bits))
                        / (1 << left_shift))
    return {"input_multiplier": m, "input_left_shift": left_shift, "diff_min": -radius}


def lookup_table(fn, x, y) -> np.ndarray:
    """LUTPopulateInt8: ``clamp(roundf(fn(x_scale * (v - x_zp)) * (1 / y_scale)) + y_zp)`` for
    every v of x's 8-bit type, computed in float32 as TFLite does. ``fn`` maps float32 arrays
    to float32 arrays."""
    lo, hi = qrange(x.dtype)
    v = np.arange(lo, hi + 1)
    deq = F32(x.scale.ravel()[0]) * (v - zero_point_of(x)).astype(F32)
    transformed = np.asarray(fn(deq), F32)
    inverse_scale = F32(1) / F32(y.scale.ravel()[0])
    scaled = (transformed * inverse_scale).astype(np.float64)
    rescaled = np.sign(scaled) * np.floor(np.abs(scaled) + 0.5)
    q = (rescaled + zero_point_of(y)).astype(np.int64)
    return np.clip(q, lo, hi).astype(x.dtype)


def expf(v: np.ndarray) -> np.ndarray:
    """float32 exp as a correctly rounded libm expf gives it (through float64)."""
    return np.exp(v.astype(np.float64)).astype(F32)


def logistic_f32(v: np.ndarray) -> np.ndarray:
    """``1.0f / (1.0f + std::exp(-v))`` in float32 (the lambda of SigmoidPrepare)."""
    return F32(1) / (F32(1) + expf(-v))


def tanh_f32(v: np.ndarray) -> np.ndarray:
    """``std::tanh(v)`` in float32 (TanhPrepare's lambda), through float64."""
    return np.tanh(v.astype(np.float64)).astype(F32)


def leaky_relu_table(alpha: float, x, y) -> np.ndarray:
    """LEAKY_RELU's 8-bit result for every input value (activations.cc LeakyReluPrepare,
    reference/leaky_relu.h QuantizeLeakyRelu): ``x - x_zp`` times the identity or the alpha
    multiplier (computed in float, as C floats), plus ``y_zp``, clamped."""
    from ...backends.reference.ops_tflite import multiply_by_quantized_multiplier as mbqm

    sx, sy = F32(x.scale.ravel()[0]), F32(y.scale.ravel()[0])
    alpha_m = float(sx * F32(alpha) / sy)
    am, ash = quantize_multiplier(abs(alpha_m))
    im, ish = quantize_multiplier(float(sx / sy))
    lo, hi = qrange(x.dtype)
    v = np.arange(lo, hi + 1, dtype=np.int64) - zero_point_of(x)
    neg = mbqm(v, am, ash) * (-1 if alpha_m < 0 else 1)
    out = zero_point_of(y) + np.where(v >= 0, mbqm(v, im, ish), neg)
    return np.clip(out, lo, hi).astype(x.dtype)


def _i16(v: int) -> int:
    return ((int(v) + (1 << 15)) & 0xFFFF) - (1 << 15)


def _srdhm16(a: int, b: int) -> int:
    if a == b == -(1 << 15):
        return (1 << 15) - 1
    ab = a * b
    nudge = (1 << 14) if ab >= 0 else 1 - (1 << 14)
    return _i16(_trunc_div(ab + nudge, 1 << 15))


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _rdbpot(x: int, exponent: int) -> int:
    mask = (1 << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> exponent) + (1 if remainder > threshold else 0)


def _sat16(v: int) -> int:
    return max(-(1 << 15), min((1 << 15) - 1, v))


def hard_swish_table(x, y) -> np.ndarray:
    """HARD_SWISH's 8-bit result for every input value, computed as TFLite's reference kernel
    does (activations.cc HardSwishPrepare, reference/hard_swish.h: int16 fixed point with a
    "relu-ish" multiplier in [0, 1])."""
    sx, sy = F32(x.scale.ravel()[0]), F32(y.scale.ravel()[0])
    hires = F32(1.0 / 128.0) * sx
    out_m, out_e = quantize_multiplier(float(hires / sy))
    relu_m, relu_e = quantize_multiplier(float(hires / F32(3.0 / 32768.0)))

    def down16(m: int) -> int:  # DownScaleInt32ToInt16Multiplier
        return (1 << 15) - 1 if m >= (1 << 31) - 1 - (1 << 15) else (m + (1 << 15)) >> 16

    out_m16, relu_m16 = down16(out_m), down16(relu_m)
    if out_e > 0:
        raise ValueError(f"HARD_SWISH: output multiplier exponent {out_e} > 0 (TFLite "
                         "refuses it)")
    lo, hi = qrange(x.dtype)
    table = []
    for q in range(lo, hi + 1):
        v = _i16(q - zero_point_of(x))
        hires_v = _i16(v * (1 << 7))
        preshift = _srdhm16(hires_v, out_m16)
        reluish = hires_v
        if relu_e > 0:
            reluish = _sat16(reluish * (1 << (relu_e - 1)))
        reluish = _srdhm16(reluish, relu_m16)
        if relu_e > 0:
            reluish = _sat16(reluish * 2)
        if relu_e < 0:
            reluish = _rdbpot(reluish, -relu_e)
        reluish = _i16((reluish + (1 << 15)) >> 1)
        if reluish == preshift == -(1 << 15):
            pre_out = (1 << 15) - 1
        else:
            pre_out = _i16(_trunc_div(reluish * preshift, 1 << 15))
        out = _i16(_rdbpot(pre_out, -out_e) + zero_point_of(y))
        table.append(min(max(out, lo), hi))
    return np.array(table, x.dtype)


def elu_f32(v: np.ndarray) -> np.ndarray:
    """``v < 0 ? std::expm1(v) : v`` in float32 (EluPrepare's lambda), expm1 through float64."""
    return np.where(v < 0, np.expm1(v.astype(np.float64)).astype(F32), v).astype(F32)


def gelu_f32(approximate: bool):
    """reference/gelu.h GeluTransform / GeluTransformApproximate in float32."""
    import math

    erfc = np.vectorize(math.erfc, otypes=[np.float64])

    def exact(v):
        return F32(0.5) * v * erfc((v * F32(-math.sqrt(0.5))).astype(np.float64)).astype(F32)

    def approx(v):
        inner = F32(math.sqrt(2.0 / math.pi)) * (v + F32(0.044715) * v * v * v)
        return F32(0.5) * v * (F32(1) + np.tanh(inner.astype(np.float64)).astype(F32))

    return approx if approximate else exact
