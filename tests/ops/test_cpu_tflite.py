"""The cpu backend's TFLite integer kernels (``cpu/tflite.py`` on ``compiled/tflite.pxi``)
against the reference kernels (``ops_tflite``, LiteRT's reference kernels bit for bit), one
node at a time, at 1 and 2 threads, on the AVX2 build's 8-lane paths and their scalar
remainders, and on the baseline build (``test_cpu_paths.py`` runs this file with
``SPRAT_CPU=baseline``). Every output must equal the reference's exactly.

Whole models run through these kernels against LiteRT in ``tests/models/test_tflite.py`` and
``tests/models/test_tflite_int8.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_cpu_quant import exact, q, refused

from sprat.dtypes import to_code
from sprat.frontends.tflite.quant import quantize_multiplier

RNG = np.random.default_rng(15)
I32, U8, I8 = np.int32, np.uint8, np.int8
# NOTE: the third shape (163840 values) is above the kernels' parallel threshold: two slots
SHAPES = [(1, 5, 7, 3), (2, 9, 24), (1, 64, 64, 40), (17,)]


def multipliers(n: int, rng=RNG):
    """Per-channel (multiplier, shift) as TFLite's Prepare makes them, from real scales of
    1e-6 .. 4 (shifts -19 .. 3), one of them INT32_MIN-free extreme: 1 - 2^-31."""
    scales = np.exp(rng.uniform(np.log(1e-6), np.log(4.0), n))
    scales[0] = 1 - 2.0 ** -31
    pairs = [quantize_multiplier(float(s)) for s in scales]
    return np.array([m for m, _ in pairs], I32), np.array([s for _, s in pairs], I32)


def accumulators(shape, rng=RNG):
    """int32 sums as a conv makes them, with the extremes of int32 among them."""
    x = (rng.standard_normal(shape) * rng.choice([1e2, 1e4, 1e7], shape)).astype(np.int64)
    x = np.clip(x, -(2 ** 31), 2 ** 31 - 1).astype(I32)
    flat = x.reshape(-1)
    flat[:4] = [2 ** 31 - 1, -(2 ** 31), 0, -1][:flat.size]
    return x


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("to,per_channel,bias", [(I8, True, True), (U8, True, False),
                                                 (I8, False, True)])
def test_requantize_int32_sums(shape, to, per_channel, bias):
    c = shape[-1] if per_channel else 1
    mult, shift = multipliers(c)
    lo, hi = (-128, 127) if to == I8 else (0, 255)
    ins = [accumulators(shape), mult, shift]
    if bias:
        ins.append(RNG.integers(-50000, 50000, shape[-1]).astype(I32))
    exact("TflRequantize", ins, {"axis": -1, "output_zero_point": 7 if to == I8 else 131,
                                 "qmin": lo + 6, "qmax": hi, "to": to_code(to)},
          consts=range(1, len(ins)))


@pytest.mark.parametrize("x_dtype", [I8, U8])
def test_requantize_8bit_input_with_its_zero_point(x_dtype):
    # TFLite's QUANTIZE int8 -> int8 and the quantized RELU: x - input_zero_point rescaled
    mult, shift = multipliers(1)
    exact("TflRequantize", [q((3, 11, 13), x_dtype), mult, shift],
          {"input_zero_point": -3 if x_dtype == I8 else 128, "output_zero_point": -1,
           "to": to_code(I8)}, consts=(1, 2))


def test_requantize_per_channel_on_an_inner_axis_followed_by_ones():
    mult, shift = multipliers(6)
    exact("TflRequantize", [accumulators((2, 6, 1, 1)), mult, shift],
          {"axis": 1, "to": to_code(I8)}, consts=(1, 2))


def test_requantize_refusals():
    mult, shift = multipliers(4)
    x = accumulators((2, 4, 5))
    # per channel on an axis with values after it, an int32 output, runtime multipliers
    assert refused("TflRequantize", [x, mult, shift], {"axis": 1, "to": to_code(I8)},
                   consts=(1, 2))
    assert refused("TflRequantize", [accumulators((2, 5, 4)), mult, shift],
                   {"to": to_code(I32)}, consts=(1, 2))
    assert refused("TflRequantize", [accumulators((2, 5, 4)), mult, shift], {"to": to_code(I8)})


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("to,per_channel", [(I8, True), (U8, False)])
def test_rescale_int32_sums(shape, to, per_channel):
    c = shape[-1] if per_channel else 1
    scale = np.exp(RNG.uniform(np.log(1e-6), np.log(2.0), c))
    scale[0] = 0.5  # exact halves of the odd sums: the rounding's ties
    bias = RNG.integers(-50000, 50000, shape[-1]).astype(I32)
    lo, hi = (-128, 127) if to == I8 else (0, 255)
    exact("TflRescale", [accumulators(shape), scale, bias],
          {"output_zero_point": -9 if to == I8 else 120, "qmin": lo, "qmax": hi - 2,
           "to": to_code(to)}, consts=(1, 2))


def _binary_attrs(op: str, dtype, rng=RNG) -> dict:
    lo, hi = (-128, 127) if dtype == I8 else (0, 255)
    zps = [int(z) for z in rng.integers(lo, hi + 1, 3)]
    if op == "TflMul":
        m, s = quantize_multiplier(float(rng.uniform(1e-4, 0.02)))
        return {"a_zero_point": zps[0], "b_zero_point": zps[1], "multiplier": m, "shift": s,
                "output_zero_point": zps[2], "qmin": lo, "qmax": hi}
    # as TFLite's add.cc Prepare: inputs scaled by 2^left_shift / (2 * max scale)
    (am, ash), (bm, bsh) = (quantize_multiplier(float(v)) for v in rng.uniform(0.1, 0.5, 2))
    m, s = quantize_multiplier(float(rng.uniform(1e-7, 1e-5)))
    return {"a_zero_point": zps[0], "a_multiplier": am, "a_shift": ash, "b_zero_point": zps[1],
            "b_multiplier": bm, "b_shift": bsh, "left_shift": 20, "multiplier": m, "shift": s,
            "output_zero_point": zps[2], "qmin": lo + 3, "qmax": hi}


@pytest.mark.parametrize("op", ["TflAdd", "TflSub", "TflMul"])
@pytest.mark.parametrize("dtype", [I8, U8])
@pytest.mark.parametrize("shape", SHAPES)
def test_binary_equal_shapes(op, dtype, shape):
    exact(op, [q(shape, dtype), q(shape, dtype)], _binary_attrs(op, dtype))


@pytest.mark.parametrize("op", ["TflAdd", "TflMul"])
def test_binary_with_a_scalar_operand(op):
    x = q((1, 64, 64, 40), I8)
    exact(op, [x, q((1, 1, 1, 1), I8)], _binary_attrs(op, I8))
    exact(op, [q((), I8), x], _binary_attrs(op, I8))


def test_binary_refuses_other_broadcasts_and_mixed_types():
    assert refused("TflAdd", [q((2, 3, 4), I8), q((4,), I8)], _binary_attrs("TflAdd", I8))
    assert refused("TflAdd", [q((2, 3), I8), q((2, 3), U8)], _binary_attrs("TflAdd", I8))


@pytest.mark.parametrize("dtype", [I8, U8])
@pytest.mark.parametrize("shape,beta", [((1, 10), 1.0), ((4, 1001), 1.0), ((3, 7, 2), 0.5),
                                        ((1024, 160), 2.0), ((2, 1), 1.0)])
def test_softmax(dtype, shape, beta):
    # the parameters as activations.cc SoftmaxPrepare makes them (frontends' softmax_params)
    scale = 0.05 if dtype == I8 else 0.1
    mult, left = quantize_multiplier(min(beta * scale * 2.0 ** 26, 2.0 ** 31 - 1))
    diff_min = -math.floor(31 * 2 ** 26 / 2 ** left)
    exact("TflSoftmax", [q(shape, dtype)], {"input_multiplier": mult, "input_left_shift": left,
                                            "diff_min": diff_min})


@pytest.mark.parametrize("op", ["TflAveragePool2D", "TflMaxPool2D"])
@pytest.mark.parametrize("dtype", [I8, U8])
@pytest.mark.parametrize("shape,kernel,strides,pads", [
    ((1, 7, 7, 24), (7, 7), (1, 1), (0, 0, 0, 0)),      # global, as the classifiers end
    ((2, 9, 10, 5), (3, 3), (2, 2), (1, 1, 1, 1)),      # clipped windows on every border
    ((1, 96, 96, 16), (2, 2), (2, 2), (0, 0, 0, 0)),    # two slots
    ((1, 5, 6, 3), (3, 2), (1, 2), (0, 0, 2, 1))])      # SAME padding only after
def test_pooling(op, dtype, shape, kernel, strides, pads):
    lo, hi = (-128, 127) if dtype == I8 else (0, 255)
    exact(op, [q(shape, dtype)], {"kernel_shape": kernel, "strides": strides, "pads": pads,
                                  "qmin": lo + 2, "qmax": hi - 1})


def test_pooling_refuses_a_window_in_the_padding_only():
    assert refused("TflAveragePool2D", [q((1, 4, 4, 2), I8)],
                   {"kernel_shape": (2, 2), "strides": (1, 1), "pads": (2, 0, 0, 0)})


@pytest.mark.parametrize("dtype", [I8, U8])
@pytest.mark.parametrize("shape", [(1, 6, 7, 5), (1, 64, 64, 40), (9,)])
def test_lookup(dtype, shape):
    # every value of the type, then random ones; the table as LOGISTIC's is, any bytes
    x = q(shape, dtype)
    x.reshape(-1)[:256] = np.arange(256).astype(np.uint8).view(dtype)[:x.size]
    exact("TflLookup", [x, q((256,), dtype)], consts=(1,))


@pytest.mark.parametrize("to", [I8, U8])
def test_quantize_rounds_half_away_from_zero(to):
    scale = 0.25
    x = RNG.standard_normal((1, 64, 64, 40)).astype(np.float32) * 10
    x.reshape(-1)[:6] = [0.125, -0.125, 0.375, -0.375, 1e9, -1e9]  # exact halves, saturation
    exact("TflQuantize", [x], {"scale": scale, "zero_point": 3 if to == I8 else 128,
                               "to": to_code(to)})
