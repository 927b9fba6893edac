"""The ``Tfl*`` reference ops (TFLite's integer kernels) and their fixed-point primitives.

The ops run through the whole pipeline against LiteRT's reference kernels in
``tests/models/test_tflite.py`` (one tiny int8/uint8 model per op, every int8 input value) and
``tests/models/test_tflite_int8.py`` (real full-integer models, every intermediate tensor); this
file checks the primitives on the values TFLite's own tests and gemmlowp's comments give.
"""

import numpy as np

from sprat.backends.reference import ops_tflite as T
from sprat.frontends.tflite.quant import quantize_multiplier, round_half_away

TESTED = frozenset({"TflRequantize", "TflRescale", "TflConv", "TflFullyConnected", "TflAdd",
                    "TflSub", "TflMul", "TflPrelu", "TflAveragePool2D", "TflMaxPool2D",
                    "TflResizeBilinear", "TflLookup", "TflSoftmax", "TflQuantize"})


def test_tested_names_every_tfl_op():
    assert TESTED == frozenset(T.OPS)


def test_quantize_multiplier():
    # quantization_util_test.cc: 0.5 -> (2^30, 0); powers of two keep the 2^30 mantissa
    assert quantize_multiplier(0.5) == (1 << 30, 0)
    assert quantize_multiplier(1.0) == (1 << 30, 1)
    assert quantize_multiplier(0.25) == (1 << 30, -1)
    assert quantize_multiplier(0.0) == (0, 0)
    assert quantize_multiplier(2.0 ** -40) == (0, 0)  # flushed below 2^-31 (shift < -31)
    # a mantissa that rounds up to 2^31 moves to the next exponent
    assert quantize_multiplier(1 - 2.0 ** -40) == (1 << 30, 1)
    assert round_half_away(2.5) == 3 and round_half_away(-2.5) == -3


def test_fixed_point_primitives():
    imin, imax = T.I32_MIN, T.I32_MAX
    assert int(T.srdhm(imin, imin)) == imax  # the one overflowing product saturates
    assert int(T.srdhm(1 << 30, 1 << 30)) == 1 << 29  # 0.5 * 0.5 in Q31
    assert int(T.srdhm(-(1 << 30), 1 << 30)) == -(1 << 29)
    # RoundingDivideByPOT rounds half away from zero
    got = T.rounding_divide_by_pot(np.array([3, -3, 5, -5, 6, -6]), 1).tolist()
    assert got == [2, -2, 3, -3, 3, -3]
    assert T.rounding_divide_by_pot(np.array([-5, 5, -6, 6]), 2).tolist() == [-1, 1, -2, 2]
    # x * 0.75 with q = 0.75 * 2^31, shift 0; and with a left shift of 2 (x * 3)
    q = 3 << 29
    assert T.multiply_by_quantized_multiplier(np.array([100, -100, 3]), q, 0).tolist() == \
        [75, -75, 2]
    assert T.multiply_by_quantized_multiplier(np.array([100, -7]), q, 2).tolist() == [300, -21]
    assert int(T.wrap32(imax + 1)) == imin


def test_exp_and_reciprocal_match_floats():
    # gemmlowp's fixed-point exp: its 4th-order Taylor polynomial around -1/8 on [-1/4, 0)
    # and the Q0.31 products leave < 1e-7 (measured 7.5e-8); Newton-Raphson 1/(1+x) ~1e-9
    a = -np.linspace(0, 31.9, 200)
    raw = np.round(a * (1 << 26)).astype(np.int64)  # Q5.26
    got = T.exp_on_negative_values(raw, 5) / 2.0 ** 31
    assert np.abs(got - np.exp(raw / 2.0 ** 26)).max() < 1e-7
    x = np.linspace(0, 0.999, 100)
    got = T.one_over_one_plus_x_for_x_in_0_1(np.round(x * 2.0 ** 31).astype(np.int64))
    assert np.abs(got / 2.0 ** 31 - 1 / (1 + x)).max() < 1e-8


def test_average_pool_rounds_half_away_from_zero():
    x = np.array([1, 2, -1, -2], np.int8).reshape(1, 2, 2, 1)
    # windows of two: (1+2)/2 = 1.5 -> 2, (-1-2)/2 = -1.5 -> -2
    y = T.tfl_average_pool_2d(x, kernel_shape=(1, 2), strides=(1, 2))
    assert y.ravel().tolist() == [2, -2]
