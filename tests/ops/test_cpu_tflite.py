"""The cpu backend's TFLite integer kernels (``cpu/tflite.py`` on ``compiled/tflite.pxi``;
TflConv and TflFullyConnected on the quantized conv kernel and the integer GEMM with TFLite's
requantisation in their epilogues) against the reference kernels (``ops_tflite``, LiteRT's
reference kernels bit for bit), one node at a time, at 1 and 2 threads, on the AVX2 build's 8-lane paths and their scalar
remainders, and on the baseline build (``test_cpu_paths.py`` runs this file with
``SPRAT_CPU=baseline``). Every output must equal the reference's exactly.

Whole models run through these kernels against LiteRT in ``tests/models/test_tflite.py`` and
``tests/models/test_tflite_int8.py``.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from test_cpu_quant import exact, q, refused, rerun_on_other_integer_paths

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


# ADD / SUB's input rescale on the AVX2 build's 32-bit path (``tfl_in8``: |x - zp| <= 255 and
# 8 <= left_shift + max(shift, 0) <= 23) and the general one around it: (left_shift, a's and
# b's (multiplier, shift), the output's (multiplier, shift), zero points): TFLite's (20, below
# 1/2), the window's edges (8, 23) and just past them (7, 24: the general path), positive
# input shifts, negative and INT32_MIN multipliers, a zero point that puts |x - zp| past 255
BINARY_PARAMS = [(20, (1 << 30, -1), (1518500250, -2), (1 << 30, -10), (0, 0)),
                 (8, (2147483647, 0), (1073741825, -31), (1932735283, -3), (3, -4)),
                 (23, (-1717986918, 0), (1 << 30, -5), (-(2 ** 31), -12), (-128, 127)),
                 (7, (1 << 30, -1), (1 << 30, 0), (1 << 30, -2), (1, 2)),
                 (24, (1 << 30, -1), (1 << 30, -1), (1 << 30, -20), (0, 0)),
                 (18, (1288490189, 3), (1 << 30, 5), (1717986918, -23), (5, -7)),
                 (20, (1 << 30, -1), (1 << 30, -1), (1 << 30, 2), (300, 0))]


@pytest.mark.parametrize("op", ["TflAdd", "TflSub"])
@pytest.mark.parametrize("dtype", [I8, U8])
@pytest.mark.parametrize("left,a,b,out,zps", BINARY_PARAMS)
def test_add_sub_over_the_rescale_parameters(op, dtype, left, a, b, out, zps):
    lo, hi = (-128, 127) if dtype == I8 else (0, 255)
    base = 0 if dtype == I8 else 128
    attrs = {"a_zero_point": zps[0] + base, "a_multiplier": a[0], "a_shift": a[1],
             "b_zero_point": zps[1] + base, "b_multiplier": b[0], "b_shift": b[1],
             "left_shift": left, "multiplier": out[0], "shift": out[1],
             "output_zero_point": base - 3, "qmin": lo, "qmax": hi}
    x = q((3, 45), dtype)
    x.reshape(-1)[:2] = [lo, hi]
    exact(op, [x, q((3, 45), dtype)], attrs)


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
    ((1, 5, 6, 3), (3, 2), (1, 2), (0, 0, 2, 1)),       # SAME padding only after
    ((1, 5, 4, 150), (5, 4), (1, 1), (0, 0, 0, 0))])    # channels past one 64-channel block
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


# TflConv: (x NHWC shape, M, kernel, strides, pads, group) covering each path of the quantized
# conv kernel with TFLite's epilogue: the integer GEMM on the input itself (1x1) and on its byte
# im2col (3x3, strided, padded, one input channel as the first layers have, taps beyond one
# 32-byte step), tile rows and columns past a 16-column panel; the depthwise kernel
# (``tfl_depthwise``: 8-channel vectors and a scalar tail) and a grouped conv; maps above the
# parallel threshold (two slots)
CONVS = [((1, 6, 7, 8), 16, (1, 1), (1, 1), (0, 0, 0, 0), 1),
         ((1, 9, 10, 5), 20, (3, 3), (1, 1), (1, 1, 1, 1), 1),
         ((1, 59, 49, 1), 8, (3, 3), (2, 2), (0, 0, 1, 1), 1),
         ((1, 50, 10, 1), 64, (10, 4), (2, 2), (4, 1, 4, 2), 1),
         ((2, 7, 6, 40), 33, (3, 3), (2, 1), (1, 1, 1, 1), 1),
         ((1, 48, 48, 16), 32, (1, 1), (1, 1), (0, 0, 0, 0), 1),
         ((1, 25, 5, 64), 64, (3, 3), (1, 1), (1, 1, 1, 1), 64),
         ((1, 31, 27, 48), 48, (3, 3), (2, 2), (0, 0, 0, 0), 48),
         ((1, 96, 96, 8), 8, (3, 3), (1, 1), (1, 1, 1, 1), 8),
         ((1, 10, 9, 12), 12, (5, 5), (2, 1), (2, 2, 2, 2), 12),
         ((1, 8, 9, 12), 12, (3, 3), (1, 1), (1, 1, 1, 1), 3)]


def _conv_inputs(shape, m, kernel, group, dtype, per_channel, bias, rng=RNG):
    c = shape[-1]
    lo, hi = (-128, 127) if dtype == I8 else (0, 255)
    x = q(shape, dtype, rng)
    w = rng.integers(-127, 128, (m, c // group) + tuple(kernel)).astype(I8)
    # NOTE: real multipliers: the products' scale over the output's, 1e-4 .. 1e-2
    pairs = [quantize_multiplier(float(v)) for v in
             rng.uniform(1e-4, 1e-2, m if per_channel else 1)]
    mult = np.array([p[0] for p in pairs], I32)
    shift = np.array([p[1] for p in pairs], I32)
    ins = [x, w, np.array(int(rng.integers(lo, hi + 1)), dtype), None, mult, shift]
    if bias:
        ins.append(rng.integers(-20000, 20000, m).astype(I32))
    return ins


@pytest.mark.parametrize("shape,m,kernel,strides,pads,group", CONVS)
@pytest.mark.parametrize("dtype,per_channel,bias", [(I8, True, True), (U8, False, False)])
def test_conv(shape, m, kernel, strides, pads, group, dtype, per_channel, bias):
    lo, hi = (-128, 127) if dtype == I8 else (0, 255)
    ins = _conv_inputs(shape, m, kernel, group, dtype, per_channel, bias)
    exact("TflConv", ins, {"kernel_shape": list(kernel), "strides": list(strides),
                           "pads": list(pads), "group": group, "_layout": "NHWC",
                           "output_zero_point": 5 if dtype == I8 else 130, "qmin": lo + 1,
                           "qmax": hi - 60, "to": to_code(dtype)},
          consts=range(1, len(ins)))


@pytest.mark.parametrize("group", [1, 20])
def test_conv_dilated(group):
    ins = _conv_inputs((1, 11, 12, 20), 20, (3, 3), group, I8, True, True)
    exact("TflConv", ins, {"kernel_shape": [3, 3], "dilations": [2, 3], "pads": [2, 3, 2, 3],
                           "group": group, "_layout": "NHWC", "output_zero_point": -7,
                           "to": to_code(I8)}, consts=range(1, len(ins)))


@pytest.mark.parametrize("group", [1, 64])
def test_conv_extreme_sums_and_multipliers(group):
    # |x - x_zp| = 255 against |w| = 127 over 3x3x64 taps, multipliers of 1 - 2^-31 and shifts
    # from -19 to +3 (the left shift of a scale above 1): MBQM's saturating corners
    shape, m = (1, 5, 6, 64), 24 if group == 1 else 64
    x = np.full(shape, 127, I8)
    x[0, ::2] = -128
    w = RNG.choice(np.array([-127, 127], I8), (m, 64 // group, 3, 3))
    mult, shift = multipliers(m)
    exact("TflConv", [x, w, np.array(-128, I8), None, mult, shift],
          {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "group": group, "_layout": "NHWC",
           "to": to_code(I8)}, consts=(1, 2, 4, 5))


# The depthwise kernel (``tfl_depthwise``; on the AVX2 build every tap through vpmaddwd from a
# ring of per-row pair buffers, 4 output pixels a step) over a family of shapes: channels 1 ..
# 70 (one and several 16-channel blocks, an odd number of 8-channel groups, tails of 1 .. 7),
# kernels 3x3, 5x5 and odd/even widths (an odd row's last tap paired with a zero weight),
# strides 1 .. 3 (horizontal stride 2: the pair buffer's compact positions; 3: every
# position), pads on either side, dilations, maps narrower than 4 output pixels (the
# one-pixel remainder) and smaller than the kernel, batch 2, a map above the parallel
# threshold: (x shape, kernel, strides, pads, dilations)
DEPTHWISE = [((1, 7, 9, 1), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
             ((1, 9, 6, 3), (5, 5), (2, 2), (2, 2, 2, 2), (1, 1)),
             ((2, 6, 11, 8), (3, 3), (2, 2), (0, 0, 1, 1), (1, 1)),
             ((1, 5, 13, 13), (3, 3), (1, 2), (1, 0, 1, 2), (1, 1)),
             ((1, 8, 7, 16), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),
             ((1, 6, 10, 24), (3, 3), (1, 1), (2, 3, 2, 3), (2, 3)),
             ((1, 9, 12, 31), (3, 3), (2, 2), (2, 2, 2, 2), (2, 2)),
             ((1, 10, 9, 37), (1, 3), (1, 1), (0, 1, 0, 1), (1, 1)),
             ((1, 4, 3, 40), (3, 3), (2, 1), (1, 1, 1, 1), (1, 2)),
             ((1, 7, 8, 64), (4, 2), (1, 3), (1, 0, 2, 1), (1, 1)),
             ((1, 12, 12, 70), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
             ((1, 3, 2, 9), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),
             ((1, 40, 41, 56), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1))]


@pytest.mark.parametrize("shape,kernel,strides,pads,dil", DEPTHWISE)
@pytest.mark.parametrize("dtype", [I8, U8])
def test_conv_depthwise_family(shape, kernel, strides, pads, dil, dtype):
    c = shape[-1]
    ins = _conv_inputs(shape, c, kernel, c, dtype, True, True)
    ins[4], ins[5] = multipliers(c)  # shifts -19 .. +3, per channel
    lo, hi = (-128, 127) if dtype == I8 else (0, 255)
    exact("TflConv", ins, {"kernel_shape": list(kernel), "strides": list(strides),
                           "pads": list(pads), "dilations": list(dil), "group": c,
                           "_layout": "NHWC", "output_zero_point": -3 if dtype == I8 else 120,
                           "qmin": lo, "qmax": hi, "to": to_code(dtype)},
          consts=range(1, len(ins)))


def test_conv_depthwise_largest_products_and_any_multiplier():
    """|x - x_zp| = |w - w_zp| = 255 (uint8 weights with their zero point: vpmaddwd's pair
    sums at their largest), and an INT32_MIN multiplier among the channels (the
    requantisation's saturating path)."""
    shape, c = (1, 6, 9, 20), 20
    x = np.zeros(shape, U8)
    x[0, 1::2] = RNG.integers(0, 256, (3, 9, c))
    w = np.full((c, 1, 3, 3), 255, U8)
    w[::3] = 0
    mult, shift = multipliers(c)
    mult[5], shift[5] = -(2 ** 31), -20
    exact("TflConv", [x, w, np.array(255, U8), np.array(0, U8), mult, shift,
                      RNG.integers(-20000, 20000, c).astype(I32)],
          {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "group": c, "_layout": "NHWC",
           "output_zero_point": 128, "qmin": 0, "qmax": 255, "to": to_code(U8)},
          consts=range(1, 7))


def test_conv_refuses_runtime_parameters():
    ins = _conv_inputs((1, 6, 7, 8), 16, (1, 1), 1, I8, True, True)
    attrs = {"kernel_shape": [1, 1], "_layout": "NHWC", "to": to_code(I8)}
    assert refused("TflConv", ins, attrs, consts=(1, 2))
    assert refused("TflConv", ins, {**attrs, "to": to_code(I32)}, consts=range(1, 7))


@pytest.mark.parametrize("n,k,o", [(1, 640, 128), (1, 64, 12), (3, 33, 17), (70, 96, 40),
                                   (1, 8, 640)])
@pytest.mark.parametrize("dtype,w_zp,bias", [(I8, False, True), (U8, True, False)])
def test_fully_connected(n, k, o, dtype, w_zp, bias):
    lo, hi = (-128, 127) if dtype == I8 else (0, 255)
    scale = np.exp(RNG.uniform(np.log(1e-5), np.log(1e-2), o))
    scale[0] = 0.5  # exact halves of the odd sums: the rounding's ties
    ins = [q((n, k), dtype), q((k, o), dtype), np.array(7 if dtype == I8 else 120, dtype),
           np.array(3, dtype) if w_zp else None, scale]
    if bias:
        ins.append(RNG.integers(-50000, 50000, o).astype(I32))
    exact("TflFullyConnected", ins,
          {"output_zero_point": -3 if dtype == I8 else 128, "qmin": lo + 2, "qmax": hi,
           "to": to_code(dtype)}, consts=[i for i in range(1, len(ins)) if ins[i] is not None])


def test_fully_connected_refuses_runtime_weights():
    ins = [q((1, 8), I8), q((8, 4), I8), np.array(0, I8), None, np.ones(4)]
    assert refused("TflFullyConnected", ins, {"to": to_code(I8)}, consts=(2, 4))


@pytest.mark.skipif(os.environ.get("SPRAT_I8") is not None, reason="runs the other paths")
def test_every_integer_path_this_cpu_has_passes_the_conv_and_fully_connected_tests():
    """The TflConv / TflFullyConnected tests again with SPRAT_I8 forcing each slower integer
    GEMM path the CPU has (int16: no zero-point correction in the epilogue; vnni: 6 x 16
    tiles), as test_cpu_qconv.py does."""
    rerun_on_other_integer_paths(__file__, "-k", "conv or fully_connected")


# The exact integer Winograd F(2x2, 3x3) of 3x3 stride-1 convs (``ck.tfl_winograd``, the int16
# path's): channels 16 .. 64 (one and several 16-channel blocks), outputs a multiple of 16 (the
# AVX2 output transform) or not, odd and even maps (a last tile row or column of one output),
# SAME, VALID and one-sided pads, batch 2, a map above the parallel threshold:
# (x shape, M, pads)
WINOGRAD = [((1, 9, 10, 16), 16, (1, 1, 1, 1)), ((2, 7, 8, 32), 20, (1, 1, 1, 1)),
            ((1, 11, 9, 48), 33, (0, 0, 0, 0)), ((1, 6, 13, 16), 64, (0, 0, 1, 1)),
            ((1, 32, 32, 16), 16, (1, 1, 1, 1)), ((1, 5, 5, 64), 48, (1, 0, 1, 2))]


@pytest.mark.parametrize("shape,m,pads", WINOGRAD)
@pytest.mark.parametrize("dtype,per_channel,bias", [(I8, True, True), (U8, False, False)])
def test_conv_by_integer_winograd(shape, m, pads, dtype, per_channel, bias, monkeypatch):
    """Bit-exact against the reference kernels, on every CPU (the test turns the path on)."""
    from sprat.backends.cpu import tflite

    monkeypatch.setattr(tflite, "WINOGRAD_ON", True)
    lo, hi = (-128, 127) if dtype == I8 else (0, 255)
    ins = _conv_inputs(shape, m, (3, 3), 1, dtype, per_channel, bias)
    attrs = {"kernel_shape": [3, 3], "pads": list(pads), "_layout": "NHWC",
             "output_zero_point": 5 if dtype == I8 else 130, "qmin": lo + 1, "qmax": hi - 60,
             "to": to_code(dtype)}
    from opcheck import make_node, run_cpu

    node, infos = make_node("TflConv", ins, attrs, range(1, len(ins)))
    assert run_cpu(node, infos, ins, 1, with_kernel=True)[1].wino
    exact("TflConv", ins, attrs, consts=range(1, len(ins)))


def test_conv_by_integer_winograd_extreme_sums(monkeypatch):
    """|x - x_zp| = 255 against |w| = 127 over 3x3x64 taps (the transforms' largest values),
    multipliers of 1 - 2^-31 and every shift: bit-exact."""
    from sprat.backends.cpu import tflite

    monkeypatch.setattr(tflite, "WINOGRAD_ON", True)
    x = np.full((1, 6, 7, 64), 127, I8)
    x[0, ::2] = -128
    x[0, :, ::3] = -128
    w = RNG.choice(np.array([-127, 127], I8), (32, 64, 3, 3))
    mult, shift = multipliers(32)
    ins = [x, w, np.array(-128, I8), None, mult, shift]
    attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "_layout": "NHWC", "to": to_code(I8)}
    from opcheck import make_node, run_cpu

    node, infos = make_node("TflConv", ins, attrs, (1, 2, 4, 5))
    assert run_cpu(node, infos, ins, 1, with_kernel=True)[1].wino
    exact("TflConv", ins, attrs, consts=(1, 2, 4, 5))
