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
