"""The cpu backend's kernels against the reference backend (the oracle), one node at a time.

Every case builds a ``Node`` directly, runs ``sprat.backends.reference.evaluate`` on it and the
cpu kernel at 1 and 2 threads (twice, to catch state kept between calls), and compares with the
project tolerance ``max|got - ref| <= 1e-4 * max(1, max|ref|)`` (float32 kernels against a
float32 NumPy oracle: differences are summation order and the vectorised exp/tanh/erf, whose
own relative error is below 5e-7).
"""

from __future__ import annotations

import re
import tracemalloc

import numpy as np
import pytest
from opcheck import DEFAULT_RTOL, fused, nhwc, randn, readonly, run_cpu
from opcheck import check_cpu as check
from opcheck import cpu_refuses as refuses
from opcheck import make_node as make

from sprat.backends.base import Workspace
from sprat.backends.cpu import ACT, CpuBackend, compiled, limits
from sprat.backends.cpu._math import CHANNEL_ACT
from sprat.backends.reference import evaluate
from sprat.ir.shapes import infer
from sprat.ir.tensorinfo import TensorInfo

RTOL = DEFAULT_RTOL
THREADS = (1, 2)


ACTS = [(None, []), ("Relu", []), ("Clip", [0.0, 6.0]), ("Sigmoid", []),
        ("HardSigmoid", [0.2, 0.5]), ("HardSwish", []), ("LeakyRelu", [0.1]), ("Tanh", []),
        ("Silu", []), ("Gelu", [])]


# ---- Conv ----------------------------------------------------------------------------------

CONV_CASES = [
    # (x NCHW, w, attrs)
    ((2, 8, 9, 11), (6, 8, 1, 1), {}),
    ((1, 16, 7, 5), (12, 4, 1, 1), {"group": 4}),
    ((1, 5, 13, 12), (7, 5, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 5, 13, 12), (7, 5, 3, 3), {"pads": [0, 1, 2, 1], "dilations": [2, 1]}),
    ((1, 3, 17, 15), (4, 3, 5, 3), {"pads": [2, 1, 2, 1]}),
    ((1, 4, 9, 10), (5, 4, 1, 7), {"pads": [0, 3, 0, 3]}),
    ((1, 4, 10, 9), (5, 4, 7, 1), {"pads": [3, 0, 3, 0]}),
    ((2, 5, 13, 12), (7, 5, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ((1, 3, 23, 21), (8, 3, 7, 7), {"pads": [3, 3, 3, 3], "strides": [2, 2]}),
    ((2, 6, 13, 12), (9, 2, 3, 3), {"pads": [1, 0, 1, 2], "strides": [2, 1], "group": 3}),
    ((2, 6, 13, 12), (4, 6, 1, 1), {"strides": [2, 2]}),
    ((1, 6, 12, 12), (6, 6, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 6, 11, 12), (6, 6, 4, 4), {"auto_pad": "SAME_LOWER"}),
    ((1, 6, 11, 12), (6, 6, 3, 3), {"auto_pad": "VALID", "dilations": [2, 2]}),
    ((1, 4, 2, 2), (3, 4, 3, 3), {"pads": [1, 1, 1, 1]}),
    # im2col's one-group gather: uneven pads, left/right edge windows, vertical dilation
    ((1, 3, 9, 10), (8, 3, 3, 3), {"pads": [0, 2, 1, 1], "strides": [2, 3]}),
    ((1, 4, 11, 9), (6, 4, 3, 3), {"pads": [2, 1, 2, 1], "dilations": [2, 1], "strides": [1, 2]}),
    ((2, 3, 13, 5), (4, 3, 3, 7), {"pads": [1, 3, 1, 3], "strides": [2, 2]}),  # kernel > W
    # depthwise
    ((2, 6, 13, 12), (6, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 6}),
    ((2, 6, 13, 12), (6, 1, 5, 5), {"pads": [2, 2, 2, 2], "strides": [2, 2], "group": 6}),
    ((1, 24, 14, 15), (24, 1, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2],
                                      "group": 24}),
    ((1, 8, 9, 9), (8, 1, 3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2], "group": 8}),
    ((1, 4, 9, 9), (8, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 4}),  # channel multiplier 2
    ((1, 5, 6, 150), (5, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 5}),  # > 64-pixel segments
    ((1, 5, 6, 150), (5, 1, 5, 5), {"pads": [2, 3, 2, 1], "group": 5}),
    ((1, 3, 7, 140), (3, 1, 3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2], "group": 3}),
    ((1, 3, 7, 20), (3, 1, 3, 3), {"pads": [0, 0, 0, 0], "group": 3}),
    ((1, 3, 7, 4), (3, 1, 3, 5), {"pads": [1, 3, 1, 3], "group": 3}),  # kernel wider than W
    # horizontal stride, 32+ channels: blocks of 32 in registers, the last one overlapping
    ((1, 40, 9, 11), (40, 1, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2], "group": 40}),
    ((2, 36, 10, 9), (36, 1, 5, 5), {"pads": [2, 3, 2, 1], "strides": [1, 2],
                                     "dilations": [2, 1], "group": 36}),
    # vertical stride only (PP-OCR's (2, 1) strides): the row kernel, 3- and 5-wide taps
    ((1, 8, 24, 96), (8, 1, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 1], "group": 8}),
    ((2, 32, 7, 70), (32, 1, 5, 5), {"pads": [2, 2, 2, 2], "strides": [2, 1], "group": 32}),
    ((1, 6, 9, 5), (6, 1, 5, 5), {"pads": [2, 1, 2, 3], "strides": [3, 1], "group": 6}),
    ((1, 4, 8, 30), (4, 1, 5, 5), {"pads": [1, 4, 1, 4], "dilations": [1, 2], "group": 4}),
    # 5x5 stride 1 over 32+ channels: summed in registers per pixel block (a partial last
    # block of 40 channels overlaps the first; dilated; narrower than the kernel)
    ((1, 40, 12, 13), (40, 1, 5, 5), {"pads": [2, 2, 2, 2], "group": 40}),
    ((1, 48, 9, 11), (48, 1, 5, 5), {"pads": [4, 4, 4, 4], "dilations": [2, 2], "group": 48}),
    ((2, 64, 3, 4), (64, 1, 5, 5), {"pads": [2, 2, 2, 2], "group": 64}),
    # im2col at stride 1 (from 128 channels)
    ((1, 128, 9, 7), (16, 128, 3, 3), {"pads": [1, 1, 1, 1]}),
    # Winograd F(4,3): 3x3 s1 with >= 24 channels; ragged tiles, no padding, asymmetric pads
    ((1, 32, 13, 17), (40, 32, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 24, 6, 9), (24, 24, 3, 3), {}),
    ((1, 48, 11, 5), (32, 48, 3, 3), {"pads": [0, 1, 2, 1]}),
    # 1-D (NWC)
    ((2, 6, 13), (4, 6, 3), {"pads": [1, 1]}),
    ((2, 6, 13), (4, 6, 3), {"strides": [2], "pads": [1, 0]}),
    ((2, 6, 13), (6, 1, 3), {"pads": [1, 1], "group": 6}),
]


@pytest.mark.parametrize("xs,ws,attrs", CONV_CASES)
@pytest.mark.parametrize("bias", [True, False])
def test_conv_shapes(xs, ws, attrs, bias):
    x, w = nhwc(randn(*xs, seed=1)), randn(*ws, seed=2, scale=0.3)
    ins = [x, w] + ([randn(ws[0], seed=3)] if bias else [])
    check("Conv", ins, {**attrs, **fused()}, consts=(1, 2))


@pytest.mark.parametrize("act,params", ACTS)
@pytest.mark.parametrize("xs,ws,attrs", [
    ((1, 8, 9, 10), (6, 8, 1, 1), {}),
    ((1, 5, 9, 10), (7, 5, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((1, 5, 9, 10), (7, 5, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ((1, 6, 9, 10), (6, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 6}),
])
def test_conv_fused_epilogue(xs, ws, attrs, act, params):
    x, w, b = nhwc(randn(*xs, seed=1)), randn(*ws, seed=2, scale=0.3), randn(ws[0], seed=3)
    node, infos = make("Conv", [x, w, b], {**attrs, **fused()}, consts=(1, 2))
    (shape, _), = infer(node, infos)
    r = randn(*shape, seed=4)
    check("Conv", [x, w, b, r], {**attrs, **fused(act, params, residual=True)}, consts=(1, 2))
    check("Conv", [x, w, b], {**attrs, **fused(act, params)}, consts=(1, 2))


def test_conv_residual_without_bias():
    x, w = nhwc(randn(1, 4, 6, 7)), randn(5, 4, 3, 3, seed=2)
    r = randn(1, 6, 7, 5, seed=3)
    check("Conv", [x, w, r], {"pads": [1, 1, 1, 1], **fused("Relu", residual=True)},
          consts=(1,))


# the direct stem kernel (1-4 input channels, one group; ``compiled/stem.pxi``), reading NCHW
# (``_input_layout``: the model input's Transpose dropped) or NHWC input: blocks of 16-64
# output channels (partial ones, two blocks), tiles of outputs cut by the row's end, strides 1
# to 3, asymmetric pads, dilation, a kernel larger than the map, two images
STEM_CASES = [
    # (x NCHW, w, attrs)
    ((1, 3, 33, 35), (32, 3, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ((2, 3, 30, 29), (16, 3, 3, 3), {"pads": [0, 1, 1, 0], "strides": [2, 2]}),
    ((1, 3, 37, 41), (64, 3, 7, 7), {"pads": [3, 3, 3, 3], "strides": [2, 2]}),
    ((1, 3, 40, 40), (48, 3, 6, 6), {"pads": [2, 2, 2, 2], "strides": [2, 2]}),
    ((1, 3, 23, 50), (24, 3, 5, 5), {"pads": [2, 2, 2, 2], "strides": [2, 2]}),
    ((1, 3, 20, 26), (32, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((1, 1, 17, 19), (8, 1, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ((1, 4, 15, 16), (96, 4, 3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
    ((2, 2, 9, 70), (40, 2, 3, 5), {"pads": [1, 2, 1, 2], "strides": [1, 3]}),
    ((1, 3, 5, 4), (20, 3, 7, 7), {"pads": [3, 3, 3, 3], "strides": [2, 2]}),
    ((1, 4, 21, 22), (80, 4, 7, 7), {"pads": [3, 2, 3, 4], "strides": [2, 2]}),  # 196 taps
    ((1, 3, 9, 10), (8, 3, 3, 3), {"pads": [0, 2, 1, 1], "strides": [2, 3]}),
]


@pytest.mark.parametrize("xs,ws,attrs", STEM_CASES)
@pytest.mark.parametrize("nchw", [True, False])
@pytest.mark.parametrize("act,params", [(None, []), ("Silu", []), ("HardSwish", []),
                                        ("PRelu", None), ("Clip", [0.0, 6.0])])
@pytest.mark.parametrize("wide", [True, False])
def test_conv_stem(xs, ws, attrs, nchw, act, params, wide, monkeypatch):
    from sprat.backends.cpu import conv

    if wide and not compiled.kernels.stem_wide_available():
        pytest.skip("the stem kernel's AVX-512F instantiation needs an AVX-512F CPU")
    # the AVX-512F instantiation, or the build's native one (AVX2, or SSE on the baseline)
    monkeypatch.setattr(conv, "STEM_WIDE", wide)
    m = ws[0]
    x, w, b = randn(*xs, seed=1), randn(*ws, seed=2, scale=0.3), randn(m, seed=3)
    if params is None:  # PRelu: a slope per output channel
        params = list(randn(m, seed=5, scale=0.5))
    if nchw:
        layout = {"_input_layout": "NCHW"}
    else:
        x, layout = nhwc(x), {}
    attrs = {**attrs, **layout, **fused(act, params)}
    assert _prepared_conv([x, w, b], attrs, 1).algo == "stem"
    check("Conv", [x, w, b], attrs, consts=(1, 2))
    if act is None:  # no bias; a residual
        check("Conv", [x, w], attrs, consts=(1,))
        (shape, _), = infer(*make("Conv", [x, w, b], attrs, consts=(1, 2)))
        check("Conv", [x, w, b, randn(*shape, seed=4)], {**attrs, "_residual": True},
              consts=(1, 2))


@pytest.mark.parametrize("xs,ws,attrs", [
    ((1, 6, 9, 9), (8, 6, 3, 3), {"pads": [1, 1, 1, 1]}),  # more than 4 input channels
    ((1, 4, 9, 9), (8, 2, 3, 3), {"pads": [1, 1, 1, 1], "group": 2}),  # groups
    ((1, 4, 30, 30), (8, 4, 9, 9), {}),  # 324 taps
])
def test_conv_nchw_input_only_on_the_stem_kernel(xs, ws, attrs):
    # an NCHW input the stem kernel cannot take: the reference kernel runs the node
    x, w = randn(*xs, seed=1), randn(*ws, seed=2)
    assert refuses("Conv", [x, w], {**attrs, "_input_layout": "NCHW", **fused()}, consts=(1,))


# PRelu fused into the conv (one slope per output channel): every algorithm's epilogue, with
# and without a residual; (x NCHW, w, attrs, the algorithm at one thread or None)
PRELU_CASES = [
    ((2, 8, 9, 11), (6, 8, 1, 1), {}, "narrow/pointwise"),  # M < 8: narrow in the avx2 build
    ((1, 16, 7, 5), (12, 4, 1, 1), {"group": 4}, "pointwise"),
    ((1, 64, 13, 13), (256, 64, 1, 1), {}, "pointwise"),  # split_m at 2 threads (BLAS path)
    ((1, 5, 13, 12), (7, 5, 3, 3), {"pads": [1, 1, 1, 1]}, "narrow/shift"),
    ((1, 16, 40, 40), (8, 16, 3, 3), {"pads": [1, 1, 1, 1]}, "shift"),  # M 8: BLAS per tap
    ((2, 5, 13, 12), (7, 5, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}, "narrow/im2col"),
    ((2, 5, 13, 12), (9, 5, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}, "gemm"),
    # the direct conv where the packed GEMM runs, else im2col
    ((1, 128, 8, 8), (136, 128, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}, "gemm"),
    # the grouped kernel read in place (avx2 build), else im2col
    ((1, 4, 9, 9), (8, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 4}, "grouped_direct|im2col"),
    ((1, 32, 13, 17), (40, 32, 3, 3), {"pads": [1, 1, 1, 1]}, "winograd"),
    ((1, 128, 10, 10), (128, 128, 3, 3), {"pads": [1, 1, 1, 1]}, None),  # Winograd split_m
    ((1, 13, 7, 7), (13, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 13}, "depthwise"),
    ((2, 37, 9, 11), (37, 1, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2], "group": 37},
     "depthwise"),
    ((1, 19, 12, 12), (19, 1, 5, 5), {"pads": [2, 2, 2, 2], "group": 19}, "depthwise"),
    ((1, 96, 56, 56), (96, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 96}, "depthwise"),
    # the tap-by-tap depthwise kernels: dilated rows at stride 1, 32-channel blocks at stride 2
    ((1, 8, 9, 30), (8, 1, 3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2], "group": 8},
     "depthwise"),
    ((1, 40, 9, 11), (40, 1, 3, 7), {"pads": [1, 3, 1, 3], "strides": [2, 2], "group": 40},
     "depthwise"),
    ((2, 6, 13), (4, 6, 3), {"pads": [1, 1]}, "narrow/shift"),  # 1-D (NWC)
    ((2, 6, 13), (12, 6, 3), {"pads": [1, 1]}, None),  # shift, or direct where packed
]


@pytest.mark.parametrize("xs,ws,attrs,algo", PRELU_CASES)
@pytest.mark.parametrize("packed", [True, False])
def test_conv_fused_prelu(xs, ws, attrs, algo, packed, monkeypatch):
    from sprat.backends.cpu import conv

    if packed and not conv.PACKED:
        pytest.skip("the packed GEMM needs an AVX-512F or AVX2 + FMA CPU (the avx2 build)")
    # the packed GEMM's epilogue in registers, or BLAS and the epilogue passes
    monkeypatch.setattr(conv, "PACKED_POINTWISE", packed)
    monkeypatch.setattr(conv, "PACKED_IM2COL", packed)
    monkeypatch.setattr(conv, "PACKED_DIRECT", packed)
    algo = ("direct" if packed else "im2col") if algo == "gemm" else algo
    if algo is not None and "/" in algo:  # the narrow conv, or without it (baseline build)
        algo = algo.split("/")[0 if compiled.kernels.NARROW_SIMD else 1]
    if algo is not None and "|" in algo:  # the grouped kernel, or without it (baseline)
        algo = algo.split("|")[0 if conv.GROUPED_POINTWISE else 1]
    m = ws[0]
    x, w, b = nhwc(randn(*xs, seed=1)), randn(*ws, seed=2, scale=0.3), randn(m, seed=3)
    slopes = list(randn(m, seed=5, scale=0.5))  # negative and positive slopes
    kernel = _prepared_conv([x, w, b], {**attrs, **fused("PRelu", slopes)}, 1)
    assert algo is None or kernel.algo == algo
    (shape, _), = infer(*make("Conv", [x, w, b], {**attrs, **fused()}, consts=(1, 2)))
    r = randn(*shape, seed=4)
    for params in (slopes, [0.25]):  # one slope per channel, one for all
        check("Conv", [x, w, b, r], {**attrs, **fused("PRelu", params, residual=True)},
              consts=(1, 2))
        check("Conv", [x, w, b], {**attrs, **fused("PRelu", params)}, consts=(1, 2))


def test_conv_prelu_refusals_and_slope_checks():
    x, w = nhwc(randn(1, 4, 6, 7)), randn(5, 4, 3, 3, seed=2)
    # three slopes for five channels: left to the reference kernel, which raises
    assert refuses("Conv", [x, w], fused("PRelu", [0.1, 0.2, 0.3]), consts=(1,))
    node, _ = make("Conv", [x, w], {"pads": [1, 1, 1, 1], **fused("PRelu", [0.1, 0.2, 0.3])},
                   consts=(1,))
    with pytest.raises(ValueError, match="3 slopes for 5 channels"):
        evaluate(node, [x, w])
    # PRelu is a conv epilogue only: the other fused producers leave it to the reference
    a, bb = randn(2, 5, 8), randn(8, seed=2)
    assert refuses("Add", [a, bb], fused("PRelu", list(randn(8, seed=3)), layout=False))


def test_conv_large_blocks():
    # several blocks per thread and the parallel drivers (>= 1M multiply-adds) everywhere
    x = nhwc(randn(2, 64, 40, 36))
    for ws, attrs in [((48, 64, 1, 1), {}), ((24, 64, 3, 3), {"pads": [1, 1, 1, 1]}),
                      ((24, 64, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
                      ((64, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 64}),
                      ((64, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 64, "strides": [2, 2]})]:
        w = randn(*ws, seed=5, scale=0.2)
        check("Conv", [x, w, randn(ws[0], seed=6)], {**attrs, **fused("Relu")}, consts=(1, 2))


def test_conv_refuses_what_it_cannot_run():
    x, w = randn(1, 4, 6, 6), randn(5, 4, 3, 3)
    assert refuses("Conv", [x, w], {}, consts=(1,))  # NCHW: no _layout
    assert refuses("Conv", [nhwc(x), w], fused(), consts=())  # weights not constant
    assert refuses("Conv", [nhwc(x).astype(np.float64), w.astype(np.float64)], fused(),
                   consts=(1,))
    assert refuses("Conv", [nhwc(randn(1, 4, 5, 6, 6)), randn(5, 4, 3, 3, 3)], fused(),
                   consts=(1,))
    assert refuses("Conv", [nhwc(x), w], {**fused(), "_activation": "Softplus"}, consts=(1,))


def test_compiled_conv_checks_operand_sizes():
    # a compiled entry bound to arrays too small for its geometry raises instead of writing
    # past them (operands and per-slot workspaces)
    from sprat.backends.cpu.compiled import kernels as ck

    x, w, b = np.zeros(4 * 8, np.float32), np.zeros(8 * 6, np.float32), np.zeros(6, np.float32)
    y, none = np.zeros(4 * 6, np.float32), np.zeros(0, np.float32)
    ck.conv_pointwise(1, x, w, b, none, False, y, 4, 8, 6, 1, 4, False, False, 0, 0.0, 0.0,
                      none)
    with pytest.raises(ValueError, match="too short"):
        ck.conv_pointwise(1, x, w, b, none, False, y[:-1], 4, 8, 6, 1, 4, False, False, 0, 0.0,
                          0.0, none)
    with pytest.raises(ValueError, match="too short"):
        ck.conv_pointwise(1, x, w, b, none, True, y, 4, 8, 6, 1, 4, False, False, 0, 0.0, 0.0,
                          none)
    with pytest.raises(ValueError, match="groups"):  # channels split across groups
        ck.conv_pointwise(2, x, w, b, none, False, y, 4, 8, 6, 2, 4, False, True, 0, 0.0, 0.0,
                          none)
    with pytest.raises(ValueError, match="slope"):  # PRelu (code 10) reads 6 slopes
        ck.conv_pointwise(1, x, w, b, none, False, y, 4, 8, 6, 1, 4, False, False, 10, 0.0, 0.0,
                          b[:5])
    # ConvTranspose 2x2 stride 2 of a (1, 2, 2, 8) map into 6 channels: w (8, 2, 2, 6), bias
    # tiled twice, output (1, 4, 4, 6), one slot's workspace of 2 rows * 2 pixels * 24 floats
    w, b, y, acc = (np.zeros(n, np.float32) for n in (8 * 24, 12, 96, (1, 96)))
    ck.conv_transpose(1, x, w, b, none, False, y, 1, 2, 2, 8, 6, 2, 2, 2, acc, 0, 0.0, 0.0)
    with pytest.raises(ValueError, match="too short"):
        ck.conv_transpose(1, x, w[:-1], b, none, False, y, 1, 2, 2, 8, 6, 2, 2, 2, acc, 0, 0.0,
                          0.0)
    with pytest.raises(ValueError, match="workspace"):  # two slots, one row
        ck.conv_transpose(2, x, w, b, none, False, y, 1, 2, 2, 8, 6, 2, 2, 2, acc, 0, 0.0, 0.0)


def test_bound_calls_check_once_and_run_as_the_entry():
    # ``ck.bound``: an entry of BOUND_CALLS becomes a call object that checks and parses its
    # arguments when made (bad ones raise then, as the entry does) and then runs exactly what
    # the entry runs, reading the arrays it was bound to as they are at each call
    from sprat.backends.cpu.compiled import kernels as ck

    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(6 * 8).astype(np.float32) for _ in range(2))
    none = np.zeros(0, np.float32)
    tiles = np.zeros((2, 4096), np.float32)
    y1, y2 = np.zeros(6 * 8, np.float32), np.zeros(6 * 8, np.float32)
    args = (2, ck.ADD, a, (0, 8, 1), b, (0, 0, 1), y1, (1, 6, 8), none, False, 0, 0.0, 0.0,
            tiles)
    call, rest = ck.bound(ck.binary, args)
    assert rest == () and type(call).__name__ == "BinaryCall" and call.args == args
    assert type(ck.bound(ck.binary, list(args))[0]).__name__ == "BinaryCall"  # any sequence
    call()
    ck.binary(*args[:6], y2, *args[7:])
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(y1, a + np.tile(b[:8], 6))
    a[:] = 1.0  # NOTE: bound to the arrays, not to their contents
    call()
    np.testing.assert_array_equal(y1, 1.0 + np.tile(b[:8], 6))
    with pytest.raises(ValueError, match="shorter"):  # gemv_packed's checks, at binding
        ck.bound(ck.gemv_packed, (1, a, none, y1, 1, 8, 6, 6, none, -1, 0, 1.0, none, False, 0,
                                  0.0, 0.0))
    # an entry without a call class comes back as it is
    fn, rest = ck.bound(ck.conv_transpose, (1,))
    assert fn is ck.conv_transpose and rest == (1,)
    assert set(ck.BOUND_CALLS) >= {ck.gemm_packed, ck.gemv_packed, ck.conv_depthwise_blocked,
                                   ck.binary, ck.unary, ck.pool2d, ck.conv_direct,
                                   ck.concat_bytes, ck.split_bytes, ck.swap_small, ck.softmax,
                                   ck.layernorm, ck.quantize8, ck.dequantize8, ck.qlinear_lookup,
                                   ck.qlinear_binary, ck.qlinear_binary_rows}
    q, back = np.zeros(6 * 8, np.uint8), np.zeros(6 * 8, np.float32)
    qcall, _ = ck.bound(ck.quantize8, (2, a, q, 48, 0.5, 3.0, False))
    dcall, _ = ck.bound(ck.dequantize8, (2, q, back, 48, 3.0, 0.5, False))
    qcall()
    dcall()
    np.testing.assert_array_equal(q, np.clip(np.rint(a / 0.5) + 3, 0, 255))
    np.testing.assert_array_equal(back, (q.astype(np.float32) - 3) * 0.5)
    # the entries that share a call class (split / concat, swap_small / swap_tiles, layernorm
    # / softmax) bind as themselves: a split bound once and called after its source changed
    whole = np.arange(12, dtype=np.uint8)
    p1, p2 = np.zeros(4, np.uint8), np.zeros(8, np.uint8)
    addrs = np.array([p1.ctypes.data, p2.ctypes.data], np.uintp)
    call, _ = ck.bound(ck.split_bytes, (1, addrs, np.array([2, 4], np.int64), whole, 2))
    whole[:] = np.arange(12, 24)
    call()
    np.testing.assert_array_equal(np.concatenate([p1, p2]), [12, 13, 18, 19, 14, 15, 16, 17,
                                                              20, 21, 22, 23])
    x = np.arange(24, dtype=np.float32)
    ys = np.zeros(24, np.float32), np.zeros(24, np.float32)
    call, _ = ck.bound(ck.swap_small, (1, x.view(np.uint32), ys[0].view(np.uint32), 2, 3, 4))
    call()
    np.testing.assert_array_equal(ys[0], x.reshape(2, 3, 4).transpose(0, 2, 1).reshape(-1))
    call, _ = ck.bound(ck.layernorm, (x, ys[1], 4, 6, np.ones(6, np.float32),
                                      np.zeros(6, np.float32), 1e-5, 2))
    call()
    r = x.reshape(4, 6)
    np.testing.assert_allclose(ys[1].reshape(4, 6), (r - r.mean(1, keepdims=True))
                               / np.sqrt(r.var(1, keepdims=True) + 1e-5), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m,c", [(1, 1), (24, 24), (70, 3), (129, 65), (256, 32)])
def test_winograd_weight_transform(m, c):
    # the compiled transform against G w G^T in float64 (Lavin & Gray's G, ``WINOGRAD_G``), at
    # 1 and 2 slots and with more slots than input channels; M spans partial blocks of 64
    from sprat.backends.cpu import conv

    w = randn(m, c, 3, 3)
    g = conv.WINOGRAD_G
    want = np.einsum("ik,mckl,jl->ijcm", g, w.astype(np.float64), g).reshape(-1)
    for nt in (1, 2, 3):
        got = conv.winograd_weights(w, nt)
        assert got.dtype == np.float32 and got.shape == (36 * c * m,)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
        if compiled.kernels.packed_gemm_available():
            # NOTE: straight into the packed GEMM's panels: each U[p] as pack_weight_panels
            # lays it out, the columns past M zero
            packed = conv.winograd_weights(w, nt, packed=True)
            nr = compiled.kernels.PACKED_NR
            per = c * -(-m // nr) * nr
            assert packed.shape == (36 * per,) and packed.ctypes.data % 64 == 0
            for p in range(36):
                want_p = np.zeros(per, np.float32)
                compiled.kernels.pack_weight_panels(got.reshape(36, c, m)[p], False, 0, m,
                                                    want_p)
                np.testing.assert_array_equal(packed[p * per:(p + 1) * per], want_p)
    with pytest.raises(ValueError, match="shorter"):
        compiled.kernels.conv_winograd_weights(1, w.reshape(-1)[:-1], m, c, got,
                                               np.empty((1, 63 * 64)))


@pytest.mark.parametrize("xs,ws,attrs", [
    ((1, 6, 5, 7), (6, 4, 2, 2), {"strides": [2, 2]}),
    ((2, 3, 4, 3), (3, 5, 3, 3), {"strides": [3, 3]}),
    ((1, 8, 40, 30), (8, 8, 2, 2), {"strides": [2, 2]}),
    ((1, 4, 5, 5), (4, 2, 2, 2), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 4, 5, 5), (4, 2, 2, 2), {"strides": [2, 2], "output_shape": [10, 10]}),
])
def test_conv_transpose(xs, ws, attrs):
    x, w, b = nhwc(randn(*xs)), randn(*ws, seed=2), randn(ws[1], seed=3)
    check("ConvTranspose", [x, w, b], {**attrs, **fused()}, consts=(1, 2))
    check("ConvTranspose", [x, w], {**attrs, **fused("Relu")}, consts=(1,))
    node, infos = make("ConvTranspose", [x, w], {**attrs, **fused()}, consts=(1,))
    (shape, _), = infer(node, infos)
    check("ConvTranspose", [x, w, b, randn(*shape, seed=4)],
          {**attrs, **fused("Sigmoid", residual=True)}, consts=(1, 2))


def test_conv_transpose_refusals():
    x, w = nhwc(randn(1, 4, 5, 5)), randn(4, 2, 3, 3)
    assert refuses("ConvTranspose", [x, w], {"strides": [2, 2], **fused()}, consts=(1,))
    assert refuses("ConvTranspose", [x, randn(4, 2, 2, 2)],
                   {"strides": [2, 2], "pads": [1, 1, 0, 0], **fused()}, consts=(1,))
    assert refuses("ConvTranspose", [x, randn(4, 1, 2, 2)],
                   {"strides": [2, 2], "group": 2, **fused()}, consts=(1,))


# ---- elementwise ---------------------------------------------------------------------------

BROADCASTS = [
    ((3, 5, 7, 9), (3, 5, 7, 9)),
    ((3, 5, 7, 9), (9,)),
    ((3, 5, 7, 9), (1,)),
    ((3, 5, 7, 9), ()),
    ((1,), (3, 5, 7, 9)),
    ((9,), (3, 5, 7, 9)),
    ((3, 5, 7, 9), (3, 1, 1, 9)),  # SE block in NHWC
    ((3, 1, 1, 9), (3, 5, 7, 9)),
    ((3, 5, 7, 9), (3, 5, 7, 1)),  # per-row (normalisation decompositions)
    ((3, 5, 7, 9), (5, 1, 9)),
    ((3, 5, 7, 9), (3, 1, 7, 1)),  # > 3 collapsed dims: NumPy fallback
    ((5, 1, 9), (1, 7, 1)),  # both broadcast
    ((4, 3000), (4, 3000)),  # several chunks per row
    ((200, 300), (200, 1)),
]


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min"])
@pytest.mark.parametrize("sa,sb", BROADCASTS)
def test_binary_broadcast(op, sa, sb):
    a, b = randn(*sa, seed=1), randn(*sb, seed=2)
    if op == "Div":
        b = np.where(np.abs(b) < 0.1, 0.5, b).astype(np.float32)
    check(op, [a, b])


@pytest.mark.parametrize("act,params", ACTS)
@pytest.mark.parametrize("sa,sb", [((2, 6, 5, 8), (2, 6, 5, 8)), ((2, 6, 5, 8), (8,)),
                                   ((2, 6, 5, 8), (2, 1, 1, 8)), ((2, 6, 5, 8), (2, 1, 5, 1))])
def test_binary_fused(sa, sb, act, params):
    a, b = randn(*sa, seed=1), randn(*sb, seed=2)
    out = np.broadcast_shapes(sa, sb)
    check("Add", [a, b], fused(act, params, layout=False))
    check("Mul", [a, b, randn(*out, seed=3)], fused(act, params, residual=True, layout=False))


def test_binary_large_parallel():
    a, b = randn(2, 64, 60, 61), randn(2, 64, 60, 61, seed=2)
    check("Add", [a, b], fused("Relu", layout=False))
    check("Mul", [a, randn(2, 64, 1, 1, seed=3)])
    se = randn(2, 60, 61, 64, seed=4)  # NHWC SE scale, tiled per image, on two slots
    check("Mul", [se, randn(2, 1, 1, 64, seed=5)], fused("Relu", layout=False))
    check("Div", [randn(2, 1, 1, 64, seed=5), se + 8.0])


def test_prelu_pow_sum():
    x = randn(2, 5, 6, 7)
    check("PRelu", [x, randn(7, seed=2)])
    check("PRelu", [x, randn(5, 1, 1, seed=2)])
    check("Sum", [x, randn(6, 7, seed=3)])
    check("Pow", [x, np.array(2.0, np.float32)], consts=(1,))
    check("Pow", [np.abs(x), np.array([0.5], np.float32)], consts=(1,))
    assert refuses("Pow", [x, np.array(3.0, np.float32)], consts=(1,))
    assert refuses("Pow", [x, np.array(2.0, np.float32)])
    assert refuses("Add", [x.astype(np.int64), x.astype(np.int64)])
    assert refuses("Max", [x, x, x])


UNARY = ["Relu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "LeakyRelu", "Erf", "Exp",
         "Abs", "Neg", "Gelu"]


@pytest.mark.parametrize("op", UNARY)
@pytest.mark.parametrize("shape", [(7,), (3, 1000, 37)])
def test_unary(op, shape):
    x = randn(*shape, seed=1, scale=3.0)
    check(op, [x])


def test_unary_attrs_and_special_values():
    x = randn(4, 9, 11, scale=4.0)
    check("HardSigmoid", [x], {"alpha": 0.3, "beta": 0.4})
    check("LeakyRelu", [x], {"alpha": 0.2})
    check("Gelu", [x], {"approximate": "tanh"})
    check("Sqrt", [np.abs(x)])
    check("Reciprocal", [np.where(np.abs(x) < 0.1, 1.0, x).astype(np.float32)])
    for lo, hi in [(0.0, 6.0), (-1.0, None), (None, 0.5), (None, None)]:
        ins = [x, None if lo is None else np.float32(lo).reshape(()),
               None if hi is None else np.float32(hi).reshape(())]
        check("Clip", ins, consts=(1, 2))
    assert refuses("Clip", [x, np.float32(0).reshape(()), None])  # bounds not constant
    big = np.array([-1e4, -100, -88, -50, -1e-6, 0, 1e-6, 50, 88, 100, 1e4], np.float32)
    for op in ("Sigmoid", "Tanh", "Erf", "Exp"):
        if op == "Exp":
            big_ok = big[big < 88]
            check(op, [big_ok], rtol=1e-6 * 10)  # relative to max(1, max|ref|)
        else:
            check(op, [big])
    check("Relu", [x, randn(4, 9, 11, seed=5)], fused("Sigmoid", residual=True, layout=False))


def test_vectorised_math_accuracy():
    """exp/tanh/erf/sigmoid of _math against float64 NumPy: relative error <= 1e-6."""
    from math import erf

    x = np.linspace(-20, 20, 200001).astype(np.float32)
    ref = {"Exp": np.exp(x.astype(np.float64)), "Tanh": np.tanh(x.astype(np.float64)),
           "Sigmoid": 1 / (1 + np.exp(-x.astype(np.float64))),
           "Erf": np.array([erf(v) for v in x.astype(np.float64)])}
    for op, r in ref.items():
        got = run_cpu(*make(op, [x]), [x], 1)[0].astype(np.float64)
        rel = np.abs(got - r) / np.maximum(np.abs(r), 1e-30)
        assert rel.max() <= 1e-6, (op, rel.max(), x[rel.argmax()])


def test_act_table_matches_fused_module():
    """Every activation sprat.ir.fused.apply_activation knows has a cpu code, and back; the
    Python codes are the compiled epilogue's."""
    import inspect

    from sprat.ir import fused as fused_module

    names = set(re.findall(r'name == "(\w+)"', inspect.getsource(fused_module)))
    assert (set(ACT) | set(CHANNEL_ACT)) - {None} == names
    assert compiled.kernels.ACT_CODES == {k: v for k, v in {**ACT, **CHANNEL_ACT}.items()
                                          if k is not None}


def test_blas_binding():
    assert compiled.BLAS in ("ilp64", "lp64")
    a, b = randn(37, 53), randn(29, 53, seed=2)
    c = np.ones((37, 32), np.float32)
    compiled.kernels.sgemm_flat(False, True, 37, 29, 53, 0.5, a.ravel(), 0, 53, b.ravel(), 0,
                                53, 2.0, c.ravel(), 0, 32)
    np.testing.assert_allclose(c[:, :29], 0.5 * a @ b.T + 2, rtol=1e-5, atol=1e-4)
    assert (c[:, 29:] == 1).all()


@pytest.mark.parametrize("m", [1, 2, 3, 4])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("beta", [0.0, 1.0, 0.5])
def test_sgemm_few_rows(m, tb, beta):
    # 1-3 rows run sprat's own loops (common.pxi SMALL_M), 4 rows BLAS: offsets and pitches kept
    n, k = 37, 19
    a = randn(m, k + 3, seed=1)
    b = randn(n, k, seed=2) if tb else randn(k, n + 2, seed=2)
    c = randn(m, n + 1, seed=3)
    want = c.copy()
    op = b.T if tb else b[:, :n]
    want[:, :n] = 1.5 * a[:, 1:k + 1] @ op + beta * c[:, :n]
    compiled.kernels.sgemm_flat(False, tb, m, n, k, 1.5, a.ravel(), 1, k + 3, b.ravel(), 0,
                                b.shape[1], beta, c.ravel(), 0, n + 1)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4)


# ---- steady state: no allocation per call --------------------------------------------------

def _traced_run_bytes(op, inputs, attrs, consts=(), threads=2):
    node, infos = make(op, inputs, attrs, consts)
    backend = CpuBackend(threads)
    shapes = infer(node, infos)[:len(node.outputs)]
    kernel = backend.make_kernel(node)
    kernel.prepare(infos, [TensorInfo(s, d) for s, d in shapes])
    outs = [np.empty(s, d) for s, d in shapes]
    ws = Workspace.allocate(kernel)
    with limits(threads):
        kernel.run(inputs, outs, ws)
        tracemalloc.start()
        for _ in range(3):
            kernel.run(inputs, outs, ws)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


@pytest.mark.parametrize("op,inputs,attrs,consts", [
    ("Conv", [nhwc(randn(1, 16, 20, 20)), randn(16, 16, 3, 3), randn(16)],
     {"pads": [1, 1, 1, 1], **fused("Relu")}, (1, 2)),
    ("Conv", [nhwc(randn(1, 16, 20, 20)), randn(16, 16, 3, 3), randn(16)],
     {"pads": [1, 1, 1, 1], "strides": [2, 2], **fused("Relu")}, (1, 2)),
    ("Conv", [nhwc(randn(1, 16, 20, 20)), randn(32, 16, 1, 1)], fused(), (1,)),
    ("Conv", [nhwc(randn(1, 16, 20, 20)), randn(16, 1, 3, 3)],
     {"group": 16, "pads": [1, 1, 1, 1], **fused("HardSwish")}, (1,)),
    ("Add", [randn(1, 20, 20, 64), randn(64)], fused("Relu", layout=False), ()),
    ("Sigmoid", [randn(1, 64, 400)], {}, ()),
])
def test_run_does_not_allocate(op, inputs, attrs, consts):
    assert _traced_run_bytes(op, inputs, attrs, consts) < 4096


# ---- pooling, reductions, resize -----------------------------------------------------------

POOL_CASES = [
    ((2, 5, 13, 12), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 6, 11, 10), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((1, 6, 11, 10), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ((1, 4, 9, 9), {"kernel_shape": [5, 5], "pads": [2, 2, 2, 2]}),  # SPPF-style
    ((1, 4, 9, 9), {"kernel_shape": [3, 2], "strides": [1, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 4, 9, 9), {"kernel_shape": [3, 3], "dilations": [2, 2], "pads": [1, 2, 1, 0]}),
    ((2, 3, 17), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    # the AVX2 build's register blocks: 64 + 8 + 5 channels, and 2 x 64 + 8
    ((1, 77, 9, 8), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ((2, 136, 7, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ((1, 28, 8, 10), {"kernel_shape": [2, 2], "strides": [2, 2]}),  # BlazeFace's: 24 + 4 masked
]


@pytest.mark.parametrize("xs,attrs", POOL_CASES)
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pool(op, xs, attrs):
    x = nhwc(randn(*xs))
    check(op, [x], {**attrs, **fused()})
    if op == "AveragePool" and "auto_pad" not in attrs:
        check(op, [x], {**attrs, "count_include_pad": 1, **fused()})


def test_pool_fused_activation_and_refusals():
    x = nhwc(randn(1, 4, 8, 8))
    check("MaxPool", [x], {"kernel_shape": [2, 2], "strides": [2, 2], **fused("Relu")})
    node, infos = make("MaxPool", [x], {"kernel_shape": [2, 2], **fused()})
    node.outputs = [1, 2]  # Indices requested
    assert not CpuBackend(1).has_fast_kernel(node, infos)
    assert refuses("MaxPool", [randn(1, 4, 8, 8)], {"kernel_shape": [2, 2]})  # NCHW


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pool(op):
    check(op, [nhwc(randn(2, 37, 9, 11))], fused())
    check(op, [randn(2, 37, 9, 11)])  # NCHW: rows
    check(op, [nhwc(randn(1, 1200, 20, 20))], fused())  # several channel chunks
    # one chunk of channels, a large map: on two slots an average splits the pixels into two
    # partial sums (``reduce_ori``), a max the single item
    check(op, [nhwc(randn(1, 32, 112, 112))], fused())
    check(op, [nhwc(randn(1, 144, 56, 57))], fused())


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("shape,axes,keepdims", [
    ((4, 6, 33), [-1], 1), ((4, 6, 33), [1], 0), ((4, 6, 33), [0, 1], 1),
    ((4, 1, 6, 33), [1, 2], 1), ((2, 3, 4, 5), None, 0), ((300, 70), [1], 1),
    ((1, 3001, 40), [1], 0),  # one row of 40 outputs over 3001: two slots split the 3001
])
def test_reduce(op, shape, axes, keepdims):
    x = randn(*shape)
    ins = [x] + ([] if axes is None else [np.array(axes, np.int64)])
    check(op, ins, {"keepdims": keepdims}, consts=(1,))


def test_reduce_refusals_and_noop():
    x = randn(2, 3, 4, 5)
    assert refuses("ReduceSum", [x, np.array([1, 3], np.int64)], consts=(1,))  # not one block
    assert refuses("ReduceSum", [x, np.array([1], np.int64)])  # axes unknown at prepare
    check("ReduceSum", [x, np.zeros(0, np.int64)], {"noop_with_empty_axes": 1}, consts=(1,))


@pytest.mark.parametrize("mode,ctm,nearest", [
    ("nearest", "asymmetric", "floor"),
    ("nearest", "half_pixel", "round_prefer_floor"),
    ("nearest", "align_corners", "round_prefer_ceil"),
    ("nearest", "asymmetric", "ceil"),
    ("linear", "half_pixel", None),
    ("linear", "pytorch_half_pixel", None),
    ("linear", "align_corners", None),
    ("linear", "asymmetric", None),
    ("linear", "half_pixel_symmetric", None),
])
@pytest.mark.parametrize("scales,sizes", [([1, 1, 2, 2], None), ([1, 1, 0.5, 0.6], None),
                                          (None, [2, 5, 13, 7]), (None, [2, 5, 1, 1])])
def test_resize(mode, ctm, nearest, scales, sizes):
    x = nhwc(randn(2, 5, 6, 9))
    attrs = {"mode": mode, "coordinate_transformation_mode": ctm, **fused()}
    if nearest is not None:
        attrs["nearest_mode"] = nearest
    ins = [x, None, None if scales is None else np.array(scales, np.float32),
           None if sizes is None else np.array(sizes, np.int64)]
    check("Resize", ins, attrs, consts=(2, 3))


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
@pytest.mark.parametrize("op,ins,attrs", [
    ("Resize", [None, None, np.array([1, 1, 2, 2], np.float32), None],
     {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
      "nearest_mode": "floor"}),
    ("Resize", [None, None, None, np.array([2, 8, 5, 13], np.int64)], {"mode": "nearest"}),
    ("Upsample", [None, np.array([1, 1, 3, 2], np.float32)], {})])
def test_nearest_resize_of_8_bit_maps(dt, op, ins, attrs):
    """Whole pixels moved as float32 words (8 channels: two words a pixel): the same bytes
    as the reference's gather, every byte value included (NaN patterns among the words)."""
    info = np.iinfo(dt)
    x = np.random.default_rng(4).integers(info.min, info.max + 1, (2, 6, 9, 8)).astype(dt)
    x.reshape(-1)[:256] = np.arange(256).astype(np.uint8).view(dt)
    check(op, [x] + ins[1:], {**attrs, **fused()}, consts=tuple(range(1, len(ins))), rtol=0)
    assert refuses(op, [x[..., :6].copy()] + ins[1:], {**attrs, **fused()},
                   consts=tuple(range(1, len(ins))))  # NOTE: 6 channels: not whole words
    assert op == "Upsample" or refuses(
        op, [x, None, np.array([1, 1, 2, 2], np.float32)], {"mode": "linear", **fused()},
        consts=(2,))


def test_upsample_and_resize_refusals():
    x = nhwc(randn(1, 3, 4, 5))
    check("Upsample", [x, np.array([1, 1, 2, 3], np.float32)], fused(), consts=(1,))
    check("Upsample", [x, np.array([1, 1, 2, 2], np.float32)], {"mode": "linear", **fused()},
          consts=(1,))
    s = np.array([1, 1, 2, 2], np.float32)
    assert refuses("Resize", [x, None, s], {"mode": "cubic", **fused()}, consts=(2,))
    assert refuses("Resize", [x, None, s], {"antialias": 1, **fused()}, consts=(2,))
    assert refuses("Resize", [x, None, np.array([1, 2, 2, 2], np.float32)], fused(),
                   consts=(2,))  # resizes channels
    assert refuses("Resize", [x, None, s], fused())  # scales unknown at prepare


# ---- normalisation -------------------------------------------------------------------------

@pytest.mark.parametrize("shape,axis", [((6, 37), -1), ((2, 3, 1000), -1), ((2, 7, 5, 3), 1),
                                        ((4, 1025, 3), 1), ((3, 2), 0), ((2, 5, 600), 1)])
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax(op, shape, axis):
    check(op, [randn(*shape, scale=5.0)], {"axis": axis})


def test_softmax_extremes():
    x = np.array([[0, 1e4, -1e4, 3], [-50, -60, -70, -80], [88, 88, 88, 88]], np.float32)
    check("Softmax", [x], {})
    check("LogSoftmax", [x], {})


@pytest.mark.parametrize("shape,axis", [((5, 768), -1), ((2, 3, 40), -1), ((2, 3, 4, 5), 2),
                                        ((64, 3), 1)])
def test_layernorm(shape, axis):
    d = int(np.prod(shape[axis % len(shape):]))
    x = randn(*shape, scale=3.0) + 5.0
    norm = shape[axis % len(shape):]
    check("LayerNormalization", [x, randn(*norm, seed=2), randn(*norm, seed=3)],
          {"axis": axis, "epsilon": 1e-5})
    check("LayerNormalization", [x, randn(*norm, seed=2)], {"axis": axis})
    check("LayerNormalization", [x, randn(d, seed=2)[:1].reshape(1)], {"axis": axis})


@pytest.mark.parametrize("size,beta,c", [(5, 0.75, 96), (3, 0.5, 7), (4, 1.3, 16), (1, 0.75, 5),
                                         (9, 0.75, 4)])
def test_lrn(size, beta, c):
    # NHWC (the layout pass's), against the reference's NHWC evaluation; even sizes have an
    # asymmetric window, sizes past C a clipped one; 96 channels x 27 x 27 runs on two slots
    hw = 27 if c == 96 else 5
    x = nhwc(randn(2, c, hw, hw, scale=3.0))
    check("LRN", [x], {**fused(), "size": size, "alpha": 1e-3, "beta": beta, "bias": 2.0})


def test_lrn_refusals():
    x = randn(1, 4, 3, 3)
    assert refuses("LRN", [x], {"size": 3})  # NCHW: the layout pass gives it NHWC first
    assert refuses("LRN", [nhwc(x).astype(np.float64)], {**fused(), "size": 3})
    assert refuses("LRN", [nhwc(x)], {**fused("Relu"), "size": 3})


def test_batchnorm():
    c = 7
    p = [randn(c, seed=2), randn(c, seed=3), randn(c, seed=4),
         np.abs(randn(c, seed=5)) + 0.1]
    x = randn(2, c, 5, 6)
    check("BatchNormalization", [x] + p, {"epsilon": 1e-3}, consts=(1, 2, 3, 4))
    check("BatchNormalization", [x[:1]] + p, {}, consts=(1, 2, 3, 4))
    check("BatchNormalization", [randn(3, c)] + p, {}, consts=(1, 2, 3, 4))
    check("BatchNormalization", [randn(1, c, 9, 11)] + p, {}, consts=(1, 2, 3, 4))  # planes > 32
    xn = nhwc(x)
    check("BatchNormalization", [xn] + p, fused("Relu"), consts=(1, 2, 3, 4))
    check("BatchNormalization", [xn] + p + [randn(*xn.shape, seed=9)],
          fused("HardSwish", residual=True), consts=(1, 2, 3, 4))
    assert refuses("BatchNormalization", [x] + p)  # statistics not constant
    # NHWC runs of whole pixels (24 channels, a partial last run) split across two threads
    p24 = [randn(24, seed=2), randn(24, seed=3), randn(24, seed=4), np.abs(randn(24, seed=5)) + .1]
    big = nhwc(randn(1, 24, 81, 80))
    check("BatchNormalization", [big] + p24, fused("Relu"), consts=(1, 2, 3, 4))
    check("BatchNormalization", [big] + p24 + [randn(*big.shape, seed=9)],
          fused(residual=True), consts=(1, 2, 3, 4))


# ---- Gemm / MatMul -------------------------------------------------------------------------

@pytest.mark.parametrize("ta,tb", [(0, 0), (0, 1), (1, 0), (1, 1)])
@pytest.mark.parametrize("m,k,n", [(1, 64, 1000), (37, 53, 29), (600, 70, 90), (3, 5, 7)])
def test_gemm(ta, tb, m, k, n):
    a = randn(k, m) if ta else randn(m, k)
    b = randn(n, k, seed=2) if tb else randn(k, n, seed=2)
    attrs = {"transA": ta, "transB": tb, "alpha": 0.7, "beta": 1.3}
    check("Gemm", [a, b, randn(n, seed=3)], attrs, consts=(1, 2))
    check("Gemm", [a, b], attrs, consts=(1,))


def test_gemm_bias_forms_and_fused():
    a, b = randn(9, 11), randn(11, 13, seed=2)
    for c in [randn(1), randn(1, 13), randn(9, 1), randn(9, 13), np.float32(2.0).reshape(())]:
        check("Gemm", [a, b, c], {"beta": 0.5})
    check("Gemm", [a, b, randn(13)], {"beta": 0.0})
    check("Gemm", [a, b, randn(13), randn(9, 13, seed=5)], fused("Relu", residual=True,
                                                                   layout=False))
    assert refuses("Gemm", [a, b, randn(3, 13)])


@pytest.mark.parametrize("sa,sb", [
    ((7, 5), (5, 3)), ((2, 3, 40, 16), (16, 24)), ((2, 3, 40, 16), (2, 3, 16, 40)),
    ((2, 1, 40, 16), (1, 3, 16, 8)), ((5,), (5, 3)), ((7, 5), (5,)), ((4, 7, 5), (5,)),
    ((5,), (2, 5, 3)), ((5,), (5,)), ((1, 300), (300, 1000)), ((3, 1, 300), (300, 200)),
    ((12, 64, 32), (12, 32, 64)),
])
def test_matmul(sa, sb):
    check("MatMul", [randn(*sa), randn(*sb, seed=2)])


def test_matmul_fused_and_refusals():
    a, b = randn(2, 30, 16), randn(16, 24, seed=2)
    check("MatMul", [a, b, randn(2, 30, 24, seed=3)], fused("Relu", residual=True, layout=False))
    assert refuses("MatMul", [a.astype(np.float64), b.astype(np.float64)])
    assert refuses("MatMul", [randn(2, 3), randn(4, 5)])


# ---- data movement -------------------------------------------------------------------------

@pytest.mark.parametrize("shapes,axis,dtype", [
    # large enough to split over 2 slots (>= PARALLEL_MIN_ELEMENTS): the slots' byte ranges
    # start and end inside rows and inside one input's run
    ([(1, 40, 40, 64), (1, 40, 40, 24), (1, 40, 40, 0), (1, 40, 40, 13)], 3, np.float32),
    ([(1, 7, 160, 160), (1, 3, 160, 160)], 1, np.float32),
    ([(150001,), (3,)], 0, np.float32),  # one row: the split falls inside the first input
    ([(2, 300, 255), (2, 300, 1)], 2, np.int64),
    ([(3, 30, 700), (3, 31, 700)], 1, np.uint8),
])
def test_concat_split_large_split_bytes(shapes, axis, dtype):
    ins = [(randn(*s, seed=k) * 100).astype(dtype) for k, s in enumerate(shapes)]
    check("Concat", ins, {"axis": axis})
    whole = np.concatenate(ins, axis=axis)
    sizes = np.array([s[axis] for s in shapes], np.int64)
    check_multi("Split", [whole, sizes], {"axis": axis}, (1,), len(ins))
    check_multi("Split", [readonly(whole), sizes], {"axis": axis}, (1,), len(ins))


def test_concat_transpose_copies():
    a, b = randn(2, 3, 4, 5), randn(2, 3, 4, 2, seed=2)
    check("Concat", [a, b], {"axis": -1})
    check("Concat", [a, randn(2, 1, 4, 5, seed=3), randn(2, 0, 4, 5)], {"axis": 1})
    check("Concat", [a.astype(np.int64), a.astype(np.int64)], {"axis": 0})
    check("Transpose", [a], {"perm": [0, 2, 3, 1]})
    check("Transpose", [a], {})
    check("Reshape", [a, np.array([6, -1], np.int64)], consts=(1,))
    check("Flatten", [a], {"axis": 2})
    check("Squeeze", [randn(2, 1, 3), np.array([1], np.int64)], consts=(1,))
    check("Unsqueeze", [randn(2, 3), np.array([0, 3], np.int64)], consts=(1,))
    check("Identity", [a.astype(np.int32)])
    check("Dropout", [a])
    assert refuses("Concat", [a, b], {"axis": -1, "_layout": "NHWC"})


@pytest.mark.parametrize("shape,perm", [
    ((1, 3, 48, 64), (0, 2, 3, 1)),  # NCHW -> NHWC of an image: (1, 3, HW, 1), long tiles
    ((1, 48, 64, 3), (0, 3, 1, 2)),  # and back
    ((2, 70, 3, 40), (0, 2, 1, 3)),  # attention head split: inner blocks of 40
    ((70, 45), (1, 0)),
    ((2, 1, 33, 1, 35), (0, 4, 3, 2, 1)),  # size-1 axes dropped: (2, 33, 35, 1)
    ((2, 64, 60, 61), (0, 2, 3, 1)),  # above the parallel threshold
    ((3, 4, 5, 6), (0, 3, 2, 1)),  # not a swap of two groups: NumPy
    ((1, 56, 57, 4, 28), (0, 1, 2, 4, 3)),  # an NHWC channel shuffle: small blocks, 2 slots
    ((3, 5, 9, 3), (0, 1, 3, 2)),  # small blocks, one slot
    ((1, 14, 14, 4, 68), (0, 1, 2, 4, 3)),  # ShuffleNet's shuffle: 4 groups, above SMALL_SWAP
    ((1, 7, 9, 8, 128), (0, 1, 2, 4, 3)),  # 8 groups, one tile per block
    ((1, 6, 5, 3, 45), (0, 1, 2, 4, 3)),  # 3 groups
    ((1, 60, 61, 2, 36), (0, 1, 2, 4, 3)),  # 2 groups, 2 slots
    ((2, 3, 160, 161), (0, 2, 3, 1)),  # an NCHW image -> NHWC: bytes by whole-A tiles, 2 slots
    ((1, 8, 9, 10), (0, 2, 3, 1)),  # the same for 8 channels, one slot
    ((1, 5, 9, 10), (0, 2, 3, 1)),  # 5 channels: the bytes' plain loop
    ((2, 30, 31, 12), (0, 3, 1, 2)),  # NHWC -> NCHW of 12 channels: bytes by whole-B tiles
    ((1, 210, 220, 3), (0, 3, 1, 2)),  # the same for 3 channels, 2 slots
])
def test_transpose_forms(shape, perm):
    a = randn(*shape)
    check("Transpose", [a], {"perm": list(perm)})
    check("Transpose", [(a * 100).astype(np.int32)], {"perm": list(perm)})
    check("Transpose", [(a * 100).astype(np.int64)], {"perm": list(perm)})
    check("Transpose", [(a * 100).astype(np.int8)], {"perm": list(perm)})  # bytes
    check("Transpose", [(a > 0)], {"perm": list(perm)})


@pytest.mark.parametrize("nt", [1, 2])
def test_swap_small_every_group_count(nt):
    """``ck.swap_small`` against NumPy for every A it specialises (2, 3, 4, 8) and others (the
    loop with A a variable), B with and without a remainder of the vector width."""
    from sprat.backends.cpu.compiled import kernels as ck

    for a in (1, 2, 3, 4, 5, 7, 8, 9):
        for b in (1, 7, 8, 17, 68):
            x = np.arange(5 * a * b, dtype=np.uint32) * 2654435761 % 4294967291
            y = np.zeros_like(x)
            ck.swap_small(nt, x, y, 5, a, b)
            np.testing.assert_array_equal(
                y, x.reshape(5, a, b).transpose(0, 2, 1).reshape(-1), err_msg=f"A={a} B={b}")


def check_multi(op, inputs, attrs, consts, n_out):
    node, infos = make(op, inputs, attrs, consts)
    node.outputs = list(range(len(inputs), len(inputs) + n_out))
    expect = evaluate(node, inputs)
    for nt in THREADS:
        for g, e in zip(run_cpu(node, infos, inputs, nt), expect):
            np.testing.assert_array_equal(g, e)


def test_split():
    x = randn(2, 6, 5, 7)
    check_multi("Split", [x, np.array([2, 5], np.int64)], {"axis": -1}, (1,), 2)
    check_multi("Split", [x], {"axis": 1, "num_outputs": 3}, (), 3)
    check_multi("Split", [x, np.array([1, 0, 4], np.int64)], {"axis": 2}, (1,), 3)


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([1], [3], [1], None), ([0, 1], [-1, 100], [2, 3], [1, 2]), ([-1], [-100], [3], [-1]),
    ([4], [1], [2], [-2]), ([10], [20], [1], None), ([0, 0], [1, 2], None, None),
    ([-2], [0], [0], [-1]), ([3], [-1], [1], [-1]),
])
def test_slice(starts, ends, axes, steps):
    x = randn(3, 4, 5, 6)
    ins = [x, np.array(starts, np.int64), np.array(ends, np.int64)]
    ins.append(None if axes is None else np.array(axes, np.int64))
    ins.append(None if steps is None else np.array(steps, np.int64))
    check("Slice", ins, consts=(1, 2, 3, 4))


def test_copy_skips_aliased_output():
    a = randn(2, 3)
    node, infos = make("Reshape", [a, np.array([3, 2], np.int64)], consts=(1,))
    kernel = CpuBackend(1).make_kernel(node)
    kernel.prepare(infos, [TensorInfo((3, 2), np.dtype(np.float32))])
    out = a.reshape(3, 2)
    kernel.run([a, None], [out], Workspace.allocate(kernel))
    np.testing.assert_array_equal(out.reshape(-1), randn(2, 3).reshape(-1))


# ---- backend -------------------------------------------------------------------------------

def test_backend_contract():
    backend = CpuBackend(2)
    assert backend.name == "cpu" and backend.num_threads == 2
    with pytest.raises(ValueError):
        CpuBackend(0)
    node, infos = make("NoSuchOp", [randn(2)])
    assert not backend.has_fast_kernel(node, infos)
    node, infos = make("Conv", [randn(2)], fused())  # malformed: must not raise
    assert not backend.has_fast_kernel(node, infos)
    node, infos = make("Add", [randn(2), randn(2)])
    node.domain = "com.microsoft"
    assert not backend.has_fast_kernel(node, infos)
    assert refuses("Conv", [nhwc(randn(0, 3, 5, 5)), randn(4, 3, 3, 3)], fused(), consts=(1,))
    assert refuses("Softmax", [randn(3, 0)])
    check("Add", [randn(0, 3), randn(1, 3)])
    check("Relu", [randn(3, 0)])
    # a fused residual that would need broadcasting
    x, w = nhwc(randn(1, 4, 6, 7)), randn(5, 4, 3, 3, seed=2)
    assert refuses("Conv", [x, w, randn(1, 1, 1, 5)], {"pads": [1, 1, 1, 1],
                                                       **fused(residual=True)}, consts=(1,))


def test_every_kernel_op_has_a_reference():
    from sprat.backends.cpu import KERNELS
    from sprat.backends.reference import load_ops

    assert set(KERNELS) <= set(load_ops())


def test_every_table_entry_names_a_kernel_class():
    # NOTE: the table names classes imported at first use: a typo would surface only when a
    # model first runs that op
    from sprat.backends.cpu._base import CpuKernel
    from sprat.backends.cpu.kernels import DOMAINS, resolve

    for table in DOMAINS.values():
        for op, name in table.items():
            assert issubclass(resolve(name), CpuKernel), (op, name)


@pytest.mark.parametrize("h,w_,threads,algo", [
    (14, 15, 1, "winograd"),  # 4x4 = 16 tiles
    (10, 11, 1, "gemm"),  # 9 tiles: GEMMs are faster on one thread
    (10, 11, 2, "winograd"),  # ... but not on two (beside BLAS GEMMs; see below)
    (7, 7, 2, "gemm"),  # 4 tiles: streaming 4x the weights for 4 GEMM rows does not pay
])
def test_winograd_is_chosen_and_fuses_epilogue(h, w_, threads, algo):
    from sprat.backends.cpu import conv

    # NOTE: the GEMM algorithm of 32 channels: the direct conv where the packed GEMM runs, else
    # shift; beside the direct conv (``winograd_pays``) 9 tiles are too few at any thread count
    # on AVX-512 (PACKED_IM2COL), enough on AVX2 (WINOGRAD_MIN_TILES_AVX2: its Winograd GEMMs
    # packed too)
    if conv.PACKED_DIRECT and h == 10:
        algo = "gemm" if conv.PACKED_IM2COL else "winograd"
    algo = ("direct" if conv.PACKED_DIRECT else "shift") if algo == "gemm" else algo
    x, w = nhwc(randn(1, 32, h, w_, seed=1)), randn(32, 32, 3, 3, seed=2, scale=0.2)
    res = randn(1, h, w_, 32, seed=4)
    node, infos = make("Conv", [x, w, randn(32, seed=3), res],
                       {"pads": [1, 1, 1, 1], **fused("Relu", residual=True)}, consts=(1, 2))
    kernel = CpuBackend(threads).make_kernel(node, infos)
    kernel.prepare(infos, [TensorInfo((1, h, w_, 32), np.dtype(np.float32))])
    assert kernel.algo == algo
    check("Conv", [x, w, randn(32, seed=3), res],
          {"pads": [1, 1, 1, 1], **fused("Relu", residual=True)}, consts=(1, 2))


@pytest.mark.parametrize("m", [128, 136])
def test_winograd_small_map_splits_output_channels(m, monkeypatch):
    from sprat.backends.cpu import conv

    # NOTE: the rule beside BLAS GEMMs (``winograd_pays``); beside the direct conv 9 tiles do
    # not take Winograd
    monkeypatch.setattr(conv, "PACKED_IM2COL", False)
    monkeypatch.setattr(conv, "PACKED_DIRECT", False)
    # 3x3 tiles (9 of them) at 2 threads: each thread takes a range of output channels (a
    # multiple of 8, the last one the rest), with the residual and activation on its range
    x, w = nhwc(randn(1, 24, 9, 10, seed=1)), randn(m, 24, 3, 3, seed=2, scale=0.2)
    ins = [x, w, randn(m, seed=3), randn(1, 9, 10, m, seed=4)]
    attrs = {"pads": [1, 1, 1, 1], **fused("HardSwish", residual=True)}
    node, infos = make("Conv", ins, attrs, consts=(1, 2))
    kernel = CpuBackend(2).make_kernel(node, infos)
    kernel.prepare(infos, [TensorInfo((1, 9, 10, m), np.dtype(np.float32))])
    assert kernel.algo == "winograd" and kernel.split_m
    check("Conv", ins, attrs, consts=(1, 2))


def _residual_conv(xs, ws, attrs, act):
    """The inputs (x NHWC, W, bias, residual of the output's shape) and attrs of a conv of
    ``xs`` by weights ``ws`` with a fused residual and activation ``act``."""
    x, w = nhwc(randn(*xs, seed=1)), randn(*ws, seed=2, scale=0.2)
    node, infos = make("Conv", [x, w, randn(ws[0], seed=3)], {**attrs, **fused()}, consts=(1, 2))
    (shape, _), = infer(node, infos)
    return ([x, w, randn(ws[0], seed=3), randn(*shape, seed=4)],
            {**attrs, **fused(act, residual=True)})


def _prepared_conv(ins, attrs, threads):
    node, infos = make("Conv", ins, attrs, consts=(1, 2))
    (shape, dtype), = infer(node, infos)
    kernel = CpuBackend(threads).make_kernel(node, infos)
    kernel.prepare(infos, [TensorInfo(shape, dtype)])
    return kernel


# a residual zero-padded on the channels (``_residual_pad``: MediaPipe's BlazeBlock shortcut, a
# channel Pad folded by ``passes.fold_pad.fold_residual_pad``); (x NCHW, w, attrs, pad, whether
# the packed 1x1 GEMM adds it in its epilogue where that path runs)
NARROW_RESIDUAL_CASES = [
    ((1, 24, 16, 16), (28, 24, 1, 1), {}, 4, True),  # BlazeFace's 24 -> 28
    ((1, 64, 9, 9), (72, 64, 1, 1), {}, 8, True),  # it ends in the third panel's first vector
    ((1, 8, 10, 10), (40, 8, 1, 1), {}, 32, True),  # 8 wide: inside the first vector
    ((1, 40, 6, 7), (56, 40, 1, 1), {}, 16, True),  # 40: on a half panel's edge
    ((2, 36, 5, 9), (42, 36, 1, 1), {}, 6, True),  # two images, 36 = 32 + 4
    ((1, 16, 12, 12), (24, 16, 3, 3), {"pads": [1, 1, 1, 1]}, 8, False),  # 3x3: padded copy
    ((1, 32, 1, 1), (48, 32, 1, 1), {}, 16, False),  # one pixel: the GEMV, padded copy
]


@pytest.mark.parametrize("xs,ws,attrs,pad,in_epilogue", NARROW_RESIDUAL_CASES)
def test_conv_residual_zero_padded_on_channels(xs, ws, attrs, pad, in_epilogue):
    from sprat.backends.cpu import conv

    x, w, b = nhwc(randn(*xs, seed=1)), randn(*ws, seed=2, scale=0.2), randn(ws[0], seed=3)
    node, infos = make("Conv", [x, w, b], {**attrs, **fused()}, consts=(1, 2))
    (shape, _), = infer(node, infos)
    r = randn(*shape[:-1], shape[-1] - pad, seed=4)
    ins = [x, w, b, r]
    narrow = {**attrs, **fused("Relu", residual=True), "_residual_pad": pad}
    for threads in (1, 2):
        kernel = _prepared_conv(ins, narrow, threads)
        assert kernel.res_pad == pad and kernel.inplace_of is None
        assert (kernel.res_cols == shape[-1] - pad) == (in_epilogue and conv.PACKED_POINTWISE)
    check("Conv", ins, narrow, consts=(1, 2))
    # the reference's meaning: the same conv with the residual padded by hand
    full = [x, w, b, np.pad(r, [(0, 0)] * (r.ndim - 1) + [(0, pad)])]
    padded_node, _ = make("Conv", full, {**attrs, **fused("Relu", residual=True)}, consts=(1, 2))
    want = evaluate(padded_node, full)[0]
    node, infos = make("Conv", ins, narrow, consts=(1, 2))
    np.testing.assert_array_equal(evaluate(node, ins)[0], want)
    for threads in (1, 2):  # NOTE: check_cpu's bound, relative to the output's scale
        got = run_cpu(node, infos, ins, threads)[0]
        assert np.abs(got - want).max() <= DEFAULT_RTOL * max(1.0, np.abs(want).max())


def test_conv_residual_pad_that_does_not_fit_is_refused():
    # a residual whose channels plus the pad are not the output's: the reference's to report
    x, w, b = nhwc(randn(1, 8, 6, 6, seed=1)), randn(16, 8, 1, 1, seed=2), randn(16, seed=3)
    attrs = {**fused("Relu", residual=True), "_residual_pad": 4}
    assert refuses("Conv", [x, w, b, randn(1, 6, 6, 8, seed=4)], attrs, consts=(1, 2))
    assert not refuses("Conv", [x, w, b, randn(1, 6, 6, 12, seed=4)], attrs, consts=(1, 2))


@pytest.mark.parametrize("xs,ws,attrs,split_m", [
    # few pixels, many channels: each slot takes a range of output channels (multiples of 8,
    # the last one the rest: 136 = 64 + 72), with the residual and activation on its range
    ((1, 16, 7, 7), (136, 16, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}, True),
    ((1, 64, 13, 13), (256, 64, 1, 1), {"strides": [2, 2]}, True),
    # 1-D over 2 sequences, 160 channels: 46 pixels in 2 blocks of 23, one spanning both
    ((2, 16, 47), (160, 16, 3), {"pads": [1, 1], "strides": [2]}, True),
    # many pixels: blocks of pixels that start and end inside rows and span images
    ((3, 8, 29, 31), (32, 8, 3, 3), {"pads": [1, 0, 1, 2], "strides": [2, 2]}, False),
    ((1, 8, 3, 800), (32, 8, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}, False),
])
def test_conv_im2col_splits(xs, ws, attrs, split_m, monkeypatch):
    # the work split of ``conv.im2col_blocks``: equal to the reference at 1 and 2 threads
    from sprat.backends.cpu import conv

    monkeypatch.setattr(conv, "PACKED_DIRECT", False)
    ins, attrs = _residual_conv(xs, ws, attrs, "HardSwish")
    kernel = _prepared_conv(ins, attrs, 2)
    assert kernel.algo == "im2col" and kernel.split_m == split_m
    assert _prepared_conv(ins, attrs, 1).split_m is False
    check("Conv", ins, attrs, consts=(1, 2))


@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("xs,ws,attrs,pays", [
    # NOTE: 5 input channels: convs of 1-4 (stems) run on the stem kernel
    ((1, 5, 33, 35), (64, 5, 7, 7), {"pads": [3, 3, 3, 3], "strides": [2, 2]}, True),
    ((1, 64, 9, 9), (96, 64, 1, 1), {"strides": [2, 2]}, True),  # columns past a 32-wide panel
    ((1, 160, 7, 7), (136, 160, 3, 3), {"pads": [1, 1, 1, 1]}, True),  # 2 threads: ranges
    ((2, 16, 47), (64, 16, 5), {"pads": [2, 2], "strides": [2]}, True),
    ((1, 5, 20, 20), (16, 5, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}, True),  # M 16
    ((1, 5, 20, 20), (8, 5, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}, False),  # M 8
    ((1, 5, 20, 20), (48, 5, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}, True),  # K 45
])
def test_conv_im2col_on_the_packed_gemm(xs, ws, attrs, pays, packed, monkeypatch):
    """One-group im2col convs take the packed GEMM on an AVX-512F CPU (``conv.PACKED_IM2COL``)
    where ``conv.packed_pays`` (M > 8); elsewhere, or with the path turned off, the
    per-block BLAS calls: both equal to the reference at 1 and 2 threads."""
    from sprat.backends.cpu import conv

    if packed and not conv.PACKED_IM2COL:
        pytest.skip("the packed GEMM needs an AVX-512F CPU")
    monkeypatch.setattr(conv, "PACKED_IM2COL", packed)
    monkeypatch.setattr(conv, "PACKED_DIRECT", False)
    ins, attrs = _residual_conv(xs, ws, attrs, "Relu")
    for threads in (1, 2):
        kernel = _prepared_conv(ins, attrs, threads)
        assert kernel.algo == "im2col"
        assert kernel.im2col_packed == (packed and pays)
    check("Conv", ins, attrs, consts=(1, 2))


@pytest.mark.parametrize("xs,ws,attrs,act", [
    # stride 1 with "same" padding: the padded band; several images, a 5x5 kernel, 1-D
    ((3, 32, 6, 7), (64, 32, 3, 3), {"pads": [1, 1, 1, 1]}, "Relu"),
    ((1, 24, 11, 30), (40, 24, 5, 5), {"pads": [2, 2, 2, 2]}, "HardSwish"),
    ((3, 16, 47), (48, 16, 3), {"pads": [1, 1]}, "Tanh"),  # activation after the GEMM
    # stride 2, asymmetric padding, padding only below / right, no padding (the input itself)
    ((1, 64, 29, 31), (96, 64, 3, 3), {"pads": [1, 0, 1, 2], "strides": [2, 2]}, "Silu"),
    ((1, 48, 16, 16), (64, 48, 3, 3), {"pads": [0, 0, 1, 1], "strides": [2, 2]}, "Sigmoid"),
    ((2, 16, 12, 13), (40, 16, 3, 3), {"strides": [2, 2]}, "Relu"),
    # dilation, a row of taps wider than tall, rows of more than 12 pixels (several tiles)
    ((1, 32, 20, 40), (33, 32, 3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}, "Relu"),
    ((1, 16, 9, 50), (72, 16, 1, 7), {"pads": [0, 3, 0, 3]}, "Gelu"),
    # few pixels against many channels: output channels split at 2 threads
    ((1, 256, 7, 7), (512, 256, 3, 3), {"pads": [1, 1, 1, 1]}, "Relu"),
    # padding larger than the kernel reach: rows whose taps all fall outside
    ((1, 16, 4, 4), (32, 16, 3, 3), {"pads": [3, 3, 3, 3]}, "Relu"),
])
def test_conv_direct(xs, ws, attrs, act, monkeypatch):
    """One-group convs of 16+ input channels and a kh x kw > 1 kernel run as the direct conv
    on the packed weight (``ck.conv_direct``) where the packed GEMM runs: residual and
    activation fused, equal to the reference at 1 and 2 threads, and PRelu's slopes read per
    output channel."""
    from sprat.backends.cpu import conv

    if not conv.PACKED_DIRECT:
        pytest.skip("the direct conv needs the packed GEMM (an AVX2 or AVX-512F CPU)")
    # NOTE: the 3x3 stride-1 cases would take Winograd on some maps (its rule is per CPU)
    monkeypatch.setattr(conv, "winograd_pays", lambda *a, **k: False)
    ins, attrs_r = _residual_conv(xs, ws, attrs, act)
    for threads in (1, 2):
        kernel = _prepared_conv(ins, attrs_r, threads)
        assert kernel.algo == "direct"
    check("Conv", ins, attrs_r, consts=(1, 2))
    check("Conv", ins[:3], {**attrs, **fused(act)}, consts=(1, 2))
    slopes = list(randn(ws[0], seed=5, scale=0.5))
    check("Conv", ins, {**attrs, **fused("PRelu", slopes, residual=True)}, consts=(1, 2))


def test_direct_blocks_rule():
    from sprat.backends.cpu.conv import DIRECT_BAND_BYTES, direct_blocks

    # ResNet's 7x7 stage at 2 threads: the output channels; one thread: one block
    assert direct_blocks(1, 7, 7, 512, 9, 1, 9 * 512, 2) == (7, True)
    assert direct_blocks(1, 7, 7, 512, 9, 1, 9 * 512, 1) == (7, False)
    # a 1-D conv (one output row): only the output channels can split it
    assert direct_blocks(1, 1, 1000, 128, 3, 1, 1002 * 64, 2) == (1, True)
    assert direct_blocks(1, 1, 1000, 48, 3, 1, 1002 * 64, 2) == (1, False)  # one panel and a half
    # a large map of few channels: row blocks, a multiple of 2 in all at 2 threads
    rows, split = direct_blocks(1, 80, 80, 64, 9, 2, 162 * 32, 2)
    assert not split and (-(-80 // rows)) % 2 == 0
    assert 4 * rows * 2 * 162 * 32 <= DIRECT_BAND_BYTES
    # several images: at least one block each
    assert direct_blocks(4, 14, 14, 64, 9, 1, 16 * 64, 2)[1] is False


def test_split_blocks_cost_rule():
    from sprat.backends.cpu.conv import GEMM_ROWS, shift_blocks, split_blocks

    assert split_blocks(49, GEMM_ROWS, 512, 1, 2) == (49, True)  # ResNet's 7x7 stage
    assert split_blocks(49, GEMM_ROWS, 512, 2, 2) == (25, False)  # groups: pixels only
    assert split_blocks(3136, GEMM_ROWS, 64, 1, 2) == (314, False)  # 10 blocks, 5 per slot
    assert split_blocks(3136, GEMM_ROWS, 64, 1, 1) == (349, False)  # 9 blocks on one thread
    assert split_blocks(1, 16, 288, 1, 2) == (1, True)  # squeeze-excite on one pixel
    # shift-GEMM: whole rows while there are enough; a long 1-D sequence is cut in two
    assert shift_blocks(1, 56, 56, 2, 2) == (6, 56)
    assert shift_blocks(1, 1, 100000, 2, 2) == (1, 50000)
    assert shift_blocks(1, 1, 100000, 2, 1) == (1, 100000)
    for p in (1, 7, 383, 385, 1000, 12544):
        blk, split = split_blocks(p, GEMM_ROWS, 32, 1, 2)
        nb = -(-p // blk)
        assert blk <= GEMM_ROWS and (split or nb % 2 == 0)


@pytest.mark.parametrize("xs,ws,wt", [
    ((1, 1152, 1, 1), (288, 1152, 1, 1), False),  # squeeze-excite: one pixel, GEMVs
    ((2, 96, 5, 5), (264, 96, 1, 1), False),  # 50 pixels, 264 = 128 + 136 channels
    ((2, 96, 5, 5), (264, 96, 1, 1), True),  # memory="low": the model's weight, transposed
])
def test_conv_pointwise_splits_output_channels(xs, ws, wt, monkeypatch):
    from sprat.backends.cpu import conv

    # NOTE: the per-block BLAS path (on AVX-512 CPUs one-group 1x1 convs take the packed GEMM)
    monkeypatch.setattr(conv, "PACKED_POINTWISE", False)
    x, w = nhwc(randn(*xs, seed=1)), randn(*ws, seed=2, scale=0.1)
    shape = (xs[0], xs[2], xs[3], ws[0])
    ins = [x, w, randn(ws[0], seed=3), randn(*shape, seed=4)]
    attrs = {**fused("Sigmoid", residual=True)}
    node, infos = make("Conv", ins, attrs, consts=(1, 2))
    ref = evaluate(node, ins)[0]
    for threads in (1, 2):
        kernel = CpuBackend(threads, memory="low" if wt else "normal").make_kernel(node, infos)
        kernel.prepare(infos, [TensorInfo(shape, np.dtype(np.float32))])
        assert kernel.algo == "pointwise" and kernel.w_stored == wt
        assert kernel.split_m == (threads == 2)
        out = np.full(shape, np.nan, np.float32)
        ws = Workspace.allocate(kernel, np.nan)
        with limits(threads):
            kernel.run(ins, [out], ws)
        assert np.abs(out - ref).max() <= RTOL * max(1.0, float(np.abs(ref).max()))


@pytest.mark.parametrize("xs,ws,attrs,algo", [
    ((1, 48, 56, 56), (64, 48, 1, 1), {}, "pointwise"),  # 3136 rows: 14+ items
    ((1, 64, 28, 28), (256, 64, 1, 1), {}, "pointwise"),  # rows halved for 4 items a slot
    ((1, 32, 40, 40), (48, 32, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}, "direct"),
    ((2, 32, 30, 30), (32, 32, 3, 3), {"pads": [1, 1, 1, 1]}, "winograd"),
    ((1, 96, 56, 56), (96, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 96}, "depthwise"),
])
def test_claimed_work_items_give_the_one_thread_bits(xs, ws, attrs, algo):
    # the slots of these kernels take their items one at a time, then what the others have
    # left (``sprat_take``): which slot computes an output element changes from run to run,
    # its value must not
    from sprat.backends.cpu import conv

    if not conv.PACKED_DIRECT:
        # NOTE: the baseline build's BLAS GEMMs are called per block, whose split then decides
        # the BLAS kernel's own blocking: no claim of equal bits across thread counts there
        pytest.skip("the packed GEMM, direct conv and blocked depthwise need AVX2 + FMA")
    x, w, b = nhwc(randn(*xs, seed=1)), randn(*ws, seed=2, scale=0.2), randn(ws[0], seed=3)
    attrs = {**attrs, **fused("Relu")}
    assert _prepared_conv([x, w, b], attrs, 2).algo == algo
    node, infos = make("Conv", [x, w, b], attrs, consts=(1, 2))
    one = run_cpu(node, infos, [x, w, b], 1)[0]
    for _ in range(5):
        np.testing.assert_array_equal(run_cpu(node, infos, [x, w, b], 2)[0], one)


@pytest.mark.parametrize("xs,ws,attrs", [
    # M 1..7 (accumulator blocks of 8, 6, 4, 3 and 2 pixels), C with and without a tail
    # beyond its multiple of 8 (3, 12, 24), border pixels on either side, strides, dilations,
    # asymmetric padding, two images, 1-D, a kernel taller than the padded rows it meets
    ((1, 8, 37, 41), (1, 8, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 12, 19, 23), (2, 12, 3, 3), {"pads": [1, 2, 0, 1]}),
    ((1, 24, 17, 29), (3, 24, 5, 5), {"pads": [2, 2, 2, 2], "strides": [2, 2]}),
    ((1, 3, 20, 20), (4, 3, 3, 3), {"pads": [1, 1, 1, 1], "dilations": [2, 2]}),
    ((1, 40, 9, 33), (5, 40, 1, 1), {}),
    ((1, 17, 11, 13), (6, 17, 3, 1), {"pads": [1, 0, 1, 0], "strides": [1, 2]}),
    ((2, 9, 7, 50), (7, 9, 2, 2), {"strides": [2, 2]}),
    ((2, 16, 61), (3, 16, 7), {"pads": [3, 3]}),
    ((1, 8, 2, 30), (2, 8, 5, 3), {"pads": [2, 1, 2, 1]}),
])
@pytest.mark.parametrize("act", ["Relu", "HardSwish", "PRelu"])
def test_conv_narrow_few_output_channels(xs, ws, attrs, act):
    if not compiled.kernels.NARROW_SIMD:
        pytest.skip("the narrow conv is in the avx2 build")
    m = ws[0]
    x, w, b = nhwc(randn(*xs, seed=1)), randn(*ws, seed=2, scale=0.3), randn(m, seed=3)
    params = list(randn(m, seed=5, scale=0.5)) if act == "PRelu" else []
    for threads in (1, 2):
        assert _prepared_conv([x, w, b], {**attrs, **fused(act, params)}, threads).algo == "narrow"
    (shape, _), = infer(*make("Conv", [x, w, b], {**attrs, **fused()}, consts=(1, 2)))
    r = randn(*shape, seed=4)
    check("Conv", [x, w, b, r], {**attrs, **fused(act, params, residual=True)}, consts=(1, 2))
    check("Conv", [x, w, b], {**attrs, **fused(act, params)}, consts=(1, 2))


@pytest.mark.parametrize("xs,ws,attrs,cols", [
    ((1, 16, 300), (24, 16, 3), {"pads": [1, 1]}, 150),  # 1-D: the one row cut in two
    ((2, 16, 301), (24, 16, 5), {"pads": [2, 2], "dilations": [2]}, 297),  # 2 rows: whole
    ((1, 16, 3, 90), (24, 16, 3, 3), {"pads": [1, 1, 1, 1]}, 45),  # 3 rows -> 6 blocks
    ((1, 32, 1, 197), (48, 32, 1, 5), {"pads": [0, 4, 0, 0]}, 99),  # left padding only
])
def test_conv_shift_column_blocks(xs, ws, attrs, cols, monkeypatch):
    from sprat.backends.cpu import conv

    # NOTE: the packed paths would replace shift
    monkeypatch.setattr(conv, "PACKED_IM2COL", False)
    monkeypatch.setattr(conv, "PACKED_DIRECT", False)
    ins, attrs = _residual_conv(xs, ws, attrs, "Relu")
    kernel = _prepared_conv(ins, attrs, 2)
    assert kernel.algo == "shift" and kernel.cols == cols
    check("Conv", ins, attrs, consts=(1, 2))


@pytest.mark.parametrize("qs,ks,vs,heads,kv_heads,mask", [
    ((1, 7, 16), (1, 9, 16), (1, 9, 12), 4, 4, None),
    ((2, 5, 16), (2, 5, 16), (2, 5, 16), 2, 2, (2, 1, 1, 5)),   # BERT's padding mask
    ((2, 6, 24), (2, 4, 8), (2, 4, 8), 6, 2, (6, 4)),          # GQA, mask per query row
    ((1, 3, 8), (1, 3, 8), (1, 3, 8), 2, 2, (1, 2, 3, 3)),      # per-head mask
])
def test_attention_3d(qs, ks, vs, heads, kv_heads, mask):
    ins = [randn(*qs, seed=1), randn(*ks, seed=2), randn(*vs, seed=3)]
    if mask is not None:
        m = randn(*mask, seed=4)
        m[..., -1] = -np.inf  # masked keys
        ins.append(m)
    check("Attention", ins, {"q_num_heads": heads, "kv_num_heads": kv_heads, "scale": 0.3})


@pytest.mark.parametrize("sq,skv,heads,mask", [
    (301, 217, 3, None),          # odd lengths: query blocks of 34 rows, the last 29
    (129, 129, 3, (1, 1, 1, 129)),  # 3 heads over 2 slots: 4 blocks a head, 6 items each
    (600, 60, 2, (600, 60)),      # a mask per query row, read at each block's offset
    (17, 33, 1, None),            # too few rows to split (blocks keep >= 16 rows)
])
def test_attention_query_blocks(sq, skv, heads, mask):
    from sprat.backends.cpu.attention import SCORE_BLOCK_BYTES, query_block

    d = 8
    ins = [randn(1, sq, heads * d, seed=1), randn(1, skv, heads * d, seed=2),
           randn(1, skv, heads * d, seed=3)]
    if mask is not None:
        m = randn(*mask, seed=4)
        m[..., 5] = -np.inf
        ins.append(m)
    for nt in (1, 2):
        qb = query_block(heads, sq, skv, nt)
        nqb = -(-sq // qb)
        assert qb * skv * 4 <= SCORE_BLOCK_BYTES or qb == -(-sq // max(1, sq // 16))
        assert nt == 1 or (heads * nqb) % nt == 0 or nqb == max(1, sq // 16)
    check("Attention", ins, {"q_num_heads": heads, "kv_num_heads": heads, "scale": 0.3})


@pytest.mark.parametrize("skv,mask", [(70, (1, 6, 41, 70)), (47, None), (48, (41, 48)),
                                      (127, None), (130, (41, 130)), (197, None)])
def test_attention_packed_heads_grouped(skv, mask):
    """From PACKED_MIN_KEYS keys (48 on AVX-512F, 128 on AVX2 + FMA) both products run the
    packed micro-kernel (K_h^T and V_h packed once per kv head: GQA's 3 query heads per kv
    head share them; 130 and 197 keys end in a part-filled panel); fewer keys stay on
    BLAS, as does the baseline build."""
    from sprat.backends.cpu.attention import PACKED_KV, PACKED_MIN_KEYS

    ins = [randn(1, 41, 6 * 16, seed=1), randn(1, skv, 2 * 16, seed=2),
           randn(1, skv, 2 * 24, seed=3)]
    if mask is not None:
        m = randn(*mask, seed=4)
        m[..., 3] = -np.inf
        ins.append(m)
    attrs = {"q_num_heads": 6, "kv_num_heads": 2, "scale": 0.3}
    node, infos = make("Attention", ins, attrs)
    kernel = CpuBackend(1).make_kernel(node, infos)
    kernel.prepare(infos, [TensorInfo((1, 41, 6 * 24), np.dtype(np.float32))])
    assert kernel.packed_kv == (PACKED_KV and skv >= PACKED_MIN_KEYS)
    check("Attention", ins, attrs)


@pytest.mark.parametrize("skv", [5, 16, 37, 197])
def test_attention_softmax_every_simd_form(skv, monkeypatch):
    """Each SIMD form of the fused softmax this build and CPU run (AVX-512F, AVX2, the Cython
    loops), on key counts with and without a tail of 8 / 16 lanes: a -inf key, BERT's -10000
    padding (exps flushed to 0, never subnormal), a fully masked row (zeros), a row of
    scores 85 below its max (the flush's edge)."""
    from sprat.backends.cpu import attention

    q, k, v = randn(1, 9, 2 * 8, seed=1), randn(1, skv, 2 * 8, seed=2), randn(1, skv, 2 * 8,
                                                                             seed=3)
    m = randn(9, skv, seed=4)
    m[:, -1] = -np.inf
    m[2, skv // 2:] = -10000.0
    m[4] = -np.inf
    m[6, 0] = 85.0
    for simd in range(compiled.kernels.attention_simd() + 1):
        monkeypatch.setattr(attention, "SIMD", simd)
        check("Attention", [q, k, v, m], {"q_num_heads": 2, "kv_num_heads": 2})


def test_attention_fully_masked_row_is_zero():
    q, k, v = randn(1, 2, 8, seed=1), randn(1, 3, 8, seed=2), randn(1, 3, 8, seed=3)
    m = np.zeros((2, 3), np.float32)
    m[1] = -np.inf
    check("Attention", [q, k, v, m], {"q_num_heads": 2, "kv_num_heads": 2})


def test_attention_refuses_what_it_cannot_run():
    q = randn(1, 2, 4, 8)
    assert refuses("Attention", [q, q, q])  # 4-D form
    q3 = randn(1, 3, 8)
    assert refuses("Attention", [q3, q3, q3], {"q_num_heads": 2, "kv_num_heads": 2,
                                               "is_causal": 1})


@pytest.mark.parametrize("bias_shape", [(12,), (1, 12)])
def test_matmul_fused_bias_residual_gelu(bias_shape):
    a, b = randn(2, 5, 7, seed=1), randn(7, 12, seed=2)
    check("MatMul", [a, b, randn(*bias_shape, seed=3), randn(2, 5, 12, seed=4)],
          {"_bias": True, "_residual": True, "_activation": "Gelu"}, consts=(1, 2))


@pytest.mark.parametrize("m,k,n", [
    (1, 7, 12),      # one row, one partial panel
    (13, 300, 45),   # K past one K block (256): the second block accumulates; partial panels
    (130, 64, 97),   # 10 full 12-row tiles and a 10-row one; 4 panels, the last 1 column wide
    (197, 192, 576),  # ViT-tiny's FFN
])
def test_matmul_packed_weights(m, k, n):
    """A constant 2-D weight takes the packed GEMM on AVX-512F and AVX2 + FMA CPUs (BLAS on the
    baseline build; one row the GEMV), with the bias, residual and GELU epilogue, at 1 and 2
    threads."""
    from sprat.backends.cpu.linalg import PACKED_GEMM

    a, b = randn(m, k, seed=1), randn(k, n, seed=2, scale=0.2)
    ins = [a, b, randn(n, seed=3), randn(m, n, seed=4)]
    attrs = {"_bias": True, "_residual": True, "_activation": "Gelu"}
    node, infos = make("MatMul", ins, attrs, consts=(1, 2))
    kernel = CpuBackend(2).make_kernel(node, infos)
    kernel.prepare(infos, [TensorInfo((m, n), np.dtype(np.float32))])
    # NOTE: one row runs the GEMV over the same panels on every build (test_cpu_gemv.py)
    assert (kernel.panels is not None) == (PACKED_GEMM or m == 1) and kernel.gemv == (m == 1)
    check("MatMul", ins, attrs, consts=(1, 2))


@pytest.mark.parametrize("c_shape", [(40,), (25, 40), (25, 1)])
def test_gemm_packed_weights_trans_b(c_shape):
    ins = [randn(25, 33, seed=1), randn(40, 33, seed=2), randn(*c_shape, seed=3)]
    check("Gemm", ins, {"transB": 1, "beta": 0.5}, consts=(1, 2))


def test_packed_weights_not_used_where_they_do_not_fit():
    """A weight with a batch, a weight fed at run time and memory="low" keep the BLAS path."""
    cases = [([randn(2, 5, 8, seed=1), randn(2, 8, 6, seed=2)], (1,), "normal"),
             ([randn(5, 8, seed=1), randn(8, 6, seed=2)], (), "normal"),
             ([randn(5, 8, seed=1), randn(8, 6, seed=2)], (1,), "low")]
    for ins, consts, memory in cases:
        node, infos = make("MatMul", ins, {}, consts=consts)
        backend = CpuBackend(1)
        backend.memory = memory
        kernel = backend.make_kernel(node, infos)
        kernel.prepare(infos, [TensorInfo(infer(node, infos)[0][0], np.dtype(np.float32))])
        assert kernel.panels is None
        check("MatMul", ins, {}, consts=consts)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
@pytest.mark.parametrize("axis,idx", [(0, [[0, 2], [-1, 1]]), (1, [3, -4, 0]), (-1, 1)])
def test_gather(dtype, axis, idx):
    data = (randn(3, 4, 5) * 10).astype(dtype)
    check("Gather", [data, np.array(idx, np.int64)], {"axis": axis})
    check("Gather", [data, np.array(idx, np.int64)], {"axis": axis}, consts=(1,))


@pytest.mark.parametrize("consts", [(), (1,)])
@pytest.mark.parametrize("idx", [[3], [0, -4]])
def test_gather_out_of_range_raises(consts, idx):
    """Indices fed at run or constant: an index outside [-dim, dim) raises IndexError."""
    ins = [randn(3, 4), np.array(idx, np.int64)]
    node, infos = make("Gather", ins, {"axis": 0}, consts=consts)
    with pytest.raises(IndexError, match="out of bounds"):
        run_cpu(node, infos, ins, 1)


@pytest.mark.parametrize("src,to", [(np.float32, 7), (np.int64, 1), (np.float32, 9),
                                    (np.bool_, 1), (np.float64, 10), (np.int32, 6)])
def test_cast(src, to):
    x = (randn(4, 5) * 100).astype(src)
    check("Cast", [x], {"to": to})


@pytest.mark.parametrize("shape", [(8210, 64), (37, 53), (1, 5), (64, 64), (9, 1)])
def test_transposed_weight_packing_matches_numpy(shape):
    from sprat.backends.cpu.tensor import transposed

    a = readonly(randn(*shape))  # NOTE: weights mapped from a .sprat file are read-only
    t = transposed(a)
    assert t.flags.c_contiguous and t.dtype == np.float32
    np.testing.assert_array_equal(t, a.T)


# ---- the register-blocked depthwise kernel (``conv_depthwise_blocked``, AVX2 build) --------

DW_BLOCKED_CASES = [
    # (x NCHW, kernel, stride, pads): odd channel counts (a masked last block of 8), tiny maps
    # (narrower than the kernel, one guarded block per row), rows of 9-40 pixels (left border,
    # interior blocks of 8/4/2/1, right border), asymmetric pads and vertical strides
    ((1, 13, 7, 7), 3, (1, 1), [1, 1, 1, 1]),
    ((2, 37, 9, 11), 3, (2, 2), [1, 1, 1, 1]),
    ((1, 8, 1, 1), 3, (1, 1), [1, 1, 1, 1]),
    ((1, 5, 2, 3), 5, (1, 1), [2, 2, 2, 2]),
    ((1, 19, 4, 4), 5, (2, 2), [2, 2, 2, 2]),
    ((1, 24, 7, 7), 5, (1, 1), [2, 2, 2, 2]),
    ((1, 40, 14, 23), 5, (1, 1), [2, 2, 2, 2]),
    ((1, 17, 15, 40), 3, (1, 1), [1, 1, 1, 1]),
    ((1, 33, 16, 29), 5, (2, 2), [1, 2, 2, 1]),
    ((1, 16, 12, 12), 3, (2, 2), [0, 0, 1, 1]),  # SAME_UPPER's pads at stride 2
    ((1, 9, 10, 30), 3, (2, 1), [1, 1, 1, 1]),
    ((1, 11, 9, 12), 5, (3, 2), [0, 3, 1, 2]),
]


@pytest.mark.parametrize("xs,k,strides,pads", DW_BLOCKED_CASES)
@pytest.mark.parametrize("act,params", [(None, []), ("Relu", []), ("Clip", [0.0, 6.0]),
                                        ("HardSwish", []), ("Silu", []), ("Tanh", [])])
def test_depthwise_blocked(xs, k, strides, pads, act, params):
    c = xs[1]
    x, w = nhwc(randn(*xs, seed=1)), randn(c, 1, k, k, seed=2, scale=0.3)
    attrs = {"pads": pads, "strides": list(strides), "group": c}
    node, infos = make("Conv", [x, w, randn(c, seed=3)], {**attrs, **fused()}, consts=(1, 2))
    (shape, _), = infer(node, infos)
    kernel = CpuBackend(1).make_kernel(node, infos)
    kernel.prepare(infos, [TensorInfo(shape, np.dtype(np.float32))])
    assert kernel.algo == "depthwise"
    assert kernel.blocked == compiled.kernels.DEPTHWISE_BLOCKED
    r = randn(*shape, seed=4)
    check("Conv", [x, w, randn(c, seed=3), r], {**attrs, **fused(act, params, residual=True)},
          consts=(1, 2))
    check("Conv", [x, w, randn(c, seed=3)], {**attrs, **fused(act, params)}, consts=(1, 2))


@pytest.mark.parametrize("xs,k,strides", [
    ((1, 1152, 7, 7), 5, 1),   # 7 rows on two threads: the channels cut into more tiles
    ((1, 640, 7, 7), 3, 1),
    ((1, 80, 14, 14), 5, 1),   # one tile of 80 channels: cut in two (28 units, not 14)
    ((1, 36, 40, 41), 3, 2),
    ((2, 45, 28, 28), 5, 1),
    ((1, 96, 56, 56), 3, 1),
])
def test_depthwise_blocked_two_threads(xs, k, strides):
    # >= PARALLEL_MIN_MACS: check runs them on two threads, each taking (row, channel tile) units
    c = xs[1]
    x, w = nhwc(randn(*xs, seed=1)), randn(c, 1, k, k, seed=2, scale=0.3)
    attrs = {"pads": [k // 2] * 4, "strides": [strides] * 2, "group": c}
    node, infos = make("Conv", [x, w, randn(c, seed=3)], {**attrs, **fused()}, consts=(1, 2))
    (shape, _), = infer(node, infos)
    check("Conv", [x, w, randn(c, seed=3), randn(*shape, seed=4)],
          {**attrs, **fused("HardSwish", residual=True)}, consts=(1, 2))
    check("Conv", [x, w, randn(c, seed=3)], {**attrs, **fused("Gelu")}, consts=(1, 2))


@pytest.mark.parametrize("xs,k,strides", [
    ((1, 88, 3, 96), 3, 1),    # a text line's map: 3 rows cut into column segments
    ((1, 200, 2, 96), 5, 1),
    ((1, 96, 4, 200), 3, 2),   # stride 2: 100 output columns in segments of 56 and 44
    ((2, 24, 1, 150), 5, 1),   # 1-D
])
def test_depthwise_blocked_two_threads_on_few_rows(xs, k, strides):
    # few output rows: the two slots share (row, column segment, channel tile) units
    c = xs[1]
    x, w = nhwc(randn(*xs, seed=1)), randn(c, 1, k, k, seed=2, scale=0.3)
    attrs = {"pads": [k // 2] * 4, "strides": [strides] * 2, "group": c}
    node, infos = make("Conv", [x, w, randn(c, seed=3)], {**attrs, **fused()}, consts=(1, 2))
    (shape, _), = infer(node, infos)
    if compiled.kernels.DEPTHWISE_BLOCKED:
        kernel = _prepared_conv([x, w, randn(c, seed=3)], {**attrs, **fused()}, 2)
        assert kernel.nt == 2 and kernel.cs > 1
    check("Conv", [x, w, randn(c, seed=3), randn(*shape, seed=4)],
          {**attrs, **fused("HardSwish", residual=True)}, consts=(1, 2))
    check("Conv", [x, w, randn(c, seed=3)], {**attrs, **fused("Tanh")}, consts=(1, 2))


@pytest.mark.parametrize("nt", [1, 2])
@pytest.mark.parametrize("code", [0, 7])  # none; Tanh (applied after the units, per segment)
def test_depthwise_blocked_column_segments_change_nothing(nt, code):
    """The blocked depthwise kernel's outputs, and its fused mean, are the same bits for any
    cut of the rows into column segments (``cs``) and of the channels into tiles (``ct``):
    each output is the same sum in the same order, only the work units differ."""
    ck = compiled.kernels
    if not ck.DEPTHWISE_BLOCKED:
        pytest.skip("the register-blocked depthwise kernel needs the avx2 build")
    from sprat.backends.cpu import conv

    n, h, w_, c, k = 2, 3, 61, 21, 3
    x = randn(n * h * w_ * c, seed=1)
    wp = conv.depthwise_pack(randn(k, k, c, seed=2))
    bp = np.concatenate([randn(c, seed=3), np.zeros(-c % 8, np.float32)])
    res = randn(n * h * w_ * c, seed=4)
    e = np.zeros(0, np.float32)

    def run(ct, cs, mean):
        y = np.zeros(n * h * w_ * c, np.float32)
        extra = ()
        if mean:
            m = np.zeros(n * c, np.float32)
            extra = (m, np.zeros((nt, n * c)), np.zeros((nt, c), np.float32))
        ck.conv_depthwise_blocked(nt, x, wp, bp, res, True, y, n, h, w_, c, h, w_, k, k, 1, 1,
                                  1, 1, 1, ct, cs, code, 0.0, 0.0, e, *extra)
        return (y, extra[0]) if mean else (y,)

    want = run(3, 1, False)[0]
    want_mean = run(3, 1, True)[1]
    for ct in (1, 2, 3):
        for cs in (1, 2, 3, 4, 8, 9):
            got = run(ct, cs, False)[0]
            np.testing.assert_array_equal(got, want, err_msg=f"ct={ct} cs={cs}")
            y, m = run(ct, cs, True)
            np.testing.assert_array_equal(y, want)
            # the mean sums float32 runs of each unit's pixels into float64: only the order moves
            np.testing.assert_allclose(m, want_mean, rtol=1e-6, atol=1e-6,
                                       err_msg=f"ct={ct} cs={cs}")
    with pytest.raises(ValueError, match="cs=0"):
        run(1, 0, False)


@pytest.mark.parametrize("k,n", [(7, 5), (64, 100), (33, 257)])
def test_pack_panels_layout_in_parts(k, n, monkeypatch):
    """The packed GEMM's weight panels (compiled), from B (K, N) and from B^T (N, K) packed a
    few panels at a time (``PACK_PART_BYTES``), equal NumPy's padded reshape."""
    from sprat.backends.cpu import linalg
    from sprat.backends.cpu.compiled import kernels as ck

    nr = ck.PACKED_NR
    b = readonly(randn(k, n))
    npan = -(-n // nr)
    padded = np.zeros((k, npan * nr), np.float32)
    padded[:, :n] = b
    want = padded.reshape(k, npan, nr).transpose(1, 0, 2).ravel()
    monkeypatch.setattr(linalg, "PACK_PART_BYTES", 4 * k * nr * 2)  # two panels a part
    for got in (linalg.pack_panels(b), linalg.pack_panels(readonly(b.T.copy()), trans=True)):
        assert got.ctypes.data % 64 == 0
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shape", [(37, 5, 3, 3), (16, 7, 1, 7), (130, 64, 5, 5)])
def test_tap_panels_pack_tap_major_from_the_model_weight(shape, monkeypatch):
    """A conv weight (M, C, kh, kw) packed straight from its rows, K tap-major, a few panels
    at a time, equals the panels of its (M, kh, kw, C) transpose; a ``taps`` that does not
    divide K, or taps on an untransposed B, is refused."""
    from sprat.backends.cpu import conv, linalg
    from sprat.backends.cpu.compiled import kernels as ck

    w = readonly(randn(*shape))
    m = shape[0]
    want = linalg.pack_panels(np.ascontiguousarray(w.transpose(0, 2, 3, 1)).reshape(m, -1),
                              trans=True)
    monkeypatch.setattr(linalg, "PACK_PART_BYTES", 4 * w[0].size * ck.PACKED_NR)
    np.testing.assert_array_equal(conv.tap_panels(w), want)
    dst = np.empty(want.size, np.float32)
    bad = 4 if w[0].size % 4 else 7
    with pytest.raises(ValueError, match=f"taps={bad}"):
        ck.pack_weight_panels(w.reshape(m, -1), True, 0, m, dst, bad)
    with pytest.raises(ValueError, match="taps=9"):
        ck.pack_weight_panels(np.ascontiguousarray(w.reshape(m, -1).T), False, 0, m, dst, 9)


@pytest.mark.parametrize("xs,m,act,pays", [
    ((1, 1152, 1, 1), 288, "Sigmoid", True),   # squeeze-excite: one pixel
    ((2, 96, 5, 5), 264, "HardSwish", True),   # columns past a 32-column panel
    ((1, 40, 56, 56), 240, "Clip", True),      # an expansion: many row blocks
    ((1, 320, 7, 7), 1280, None, True),
    ((1, 24, 56, 56), 144, "Clip", True),      # K 24
    ((1, 128, 9, 9), 16, None, True),          # M 16: one-vector panels
    ((1, 128, 9, 9), 8, None, False)])         # M 8: BLAS (``conv.packed_pays``)
def test_conv_pointwise_on_the_packed_gemm(xs, m, act, pays):
    from sprat.backends.cpu import conv

    if not conv.PACKED_POINTWISE:
        pytest.skip("the packed GEMM needs an AVX-512F or AVX2 + FMA CPU (the avx2 build)")
    x, w = nhwc(randn(*xs, seed=1)), randn(m, xs[1], 1, 1, seed=2, scale=0.1)
    ins = [x, w, randn(m, seed=3), randn(xs[0], xs[2], xs[3], m, seed=4)]
    attrs = fused(act, [0.0, 6.0] if act == "Clip" else (), residual=True)
    for threads in (1, 2):
        kernel = _prepared_conv(ins, attrs, threads)
        assert kernel.algo == "pointwise" and (kernel.panels is not None) == pays
    check("Conv", ins, attrs, consts=(1, 2))


# grouped 1x1 convs (ShuffleNet's): (x NCHW, output channels, groups); groups of 1-3 vectors
# of 8 output channels, a masked last vector (M/G of 34, 6, 5, 1, 20), blocks of 3 + 2 vectors,
# pixel counts past whole tiles of 4, 6 and 8 pixels
GROUPED_CASES = [
    ((1, 136, 28, 28), 136, 4),
    ((2, 24, 7, 9), 112, 4),
    ((1, 24, 5, 13), 40, 8),
    ((1, 240, 3, 7), 240, 3),
    ((1, 12, 4, 4), 4, 4),
    ((1, 64, 11, 5), 40, 2),
    ((1, 18, 1, 23), 27, 3),
]


@pytest.mark.parametrize("xs,m,g", GROUPED_CASES)
@pytest.mark.parametrize("act,params", [(None, []), ("Relu", []), ("HardSwish", []),
                                        ("Tanh", []), ("PRelu", [])])
def test_conv_pointwise_grouped(xs, m, g, act, params):
    """A grouped 1x1 conv runs the register-blocked grouped kernel on the avx2 build (else the
    per-group BLAS path), with the bias, the residual and each activation (Tanh after the
    kernel, PRelu's per-channel slopes in registers), at 1 and 2 threads."""
    from sprat.backends.cpu import conv

    c = xs[1]
    x, w = nhwc(randn(*xs, seed=1)), randn(m, c // g, 1, 1, seed=2, scale=0.2)
    shape = (xs[0], xs[2], xs[3], m)
    attrs = {"group": g}
    if act == "PRelu":  # a slope per output channel
        params = [float(v) for v in randn(m, seed=5, scale=0.3)]
    for threads in (1, 2):
        kernel = _prepared_conv([x, w, randn(m, seed=3)], {**attrs, **fused(act, params)},
                                threads)
        assert kernel.algo == "pointwise" and kernel.grouped == conv.GROUPED_POINTWISE
    for res in (False, True):
        ins = [x, w, randn(m, seed=3)] + ([randn(*shape, seed=4)] if res else [])
        check("Conv", ins, {**attrs, **fused(act, params, residual=res)}, consts=(1, 2))


# grouped kxk convs (ResNeXt's 32x4d, RegNet's): (x NCHW, w, attrs, algorithm on the avx2
# build): read in place where the output rows hold GROUPED_DIRECT_MIN_OW pixels or more, else
# the patch matrix with the grouped kernel; borders, uneven pads, strides, dilation, M/G of
# 4, 6, 12 and 20 (masked last vectors), a 1-D conv
GROUPED_KXK_CASES = [
    ((1, 128, 14, 15), (128, 4, 3, 3), {"pads": [1, 1, 1, 1], "group": 32}, "grouped_direct"),
    ((2, 24, 12, 10), (36, 6, 3, 3), {"pads": [1, 0, 2, 1], "strides": [2, 1], "group": 4},
     "grouped_direct"),
    ((1, 48, 17, 19), (48, 12, 5, 5), {"pads": [2, 2, 2, 2], "group": 4}, "grouped_direct"),
    ((1, 40, 20, 20), (80, 10, 3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2],
                                       "group": 4}, "grouped_direct"),
    ((1, 64, 13, 13), (64, 8, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2], "group": 8},
     "im2col"),
    ((1, 96, 7, 7), (96, 12, 3, 3), {"pads": [1, 1, 1, 1], "group": 8}, "im2col"),
    ((1, 12, 1, 30), (12, 4, 1, 3), {"pads": [0, 1, 0, 1], "group": 3}, "grouped_direct"),
    ((1, 16, 6, 9), (8, 8, 2, 2), {"group": 2}, "grouped_direct"),  # no padding, even kernel
]


@pytest.mark.parametrize("xs,ws,attrs,algo", GROUPED_KXK_CASES)
@pytest.mark.parametrize("act,params", [(None, []), ("Relu", []), ("Gelu", []), ("PRelu", [])])
def test_conv_grouped_kxk(xs, ws, attrs, algo, act, params):
    """A grouped kxk conv on the grouped kernel (read in place, or over the patch matrix on
    rows shorter than GROUPED_DIRECT_MIN_OW), with the bias, a residual and each activation
    (Gelu after the kernel, PRelu's slopes in registers), at 1 and 2 threads."""
    from sprat.backends.cpu import conv

    m = ws[0]
    x, w = nhwc(randn(*xs, seed=1)), randn(*ws, seed=2, scale=0.2)
    if act == "PRelu":
        params = [float(v) for v in randn(m, seed=5, scale=0.3)]
    kernel = _prepared_conv([x, w, randn(m, seed=3)], {**attrs, **fused(act, params)}, 2)
    if conv.GROUPED_POINTWISE:
        assert kernel.algo == algo
        assert algo == "grouped_direct" or kernel.im2col_grouped
    node, infos = make("Conv", [x, w, randn(m, seed=3)], {**attrs, **fused()}, consts=(1, 2))
    (shape, _), = infer(node, infos)
    for res in (False, True):
        ins = [x, w, randn(m, seed=3)] + ([randn(*shape, seed=4)] if res else [])
        check("Conv", ins, {**attrs, **fused(act, params, residual=res)}, consts=(1, 2))


@pytest.mark.parametrize("p,g,nt", [(784, 4, 2), (49, 4, 2), (3136, 3, 1), (10, 8, 2)])
def test_conv_pointwise_grouped_rows(p, g, nt):
    """Pixels per work item of the grouped kernel: at most GROUPED_ROWS, and on several
    slots at least 4 items per slot where GROUPED_MIN_ROWS allows."""
    from sprat.backends.cpu import conv

    rows = conv.grouped_rows(p, g, nt)
    assert 1 <= rows <= min(p, conv.GROUPED_ROWS)
    items = -(-p // rows) * g
    assert items >= 4 * nt or rows <= conv.GROUPED_MIN_ROWS or rows == p and nt == 1


@pytest.mark.parametrize("m", [40, 112])
@pytest.mark.parametrize("act,params", ACTS)
def test_conv_pointwise_packed_epilogue(m, act, params):
    """Every fused activation on the packed GEMM's register epilogue (Sigmoid and SiLU by a
    16-lane exp), with a last panel of at most 16 columns (40 = 32 + 8, 112 = 3 x 32 + 16:
    the one-vector tile), pre-activations up to about +-60 (exp's clamps, the sigmoid's two
    sides), and the bias and residual."""
    from sprat.backends.cpu import conv

    if not conv.PACKED_POINTWISE:
        pytest.skip("the packed GEMM needs an AVX-512F or AVX2 + FMA CPU (the avx2 build)")
    xs = (1, 48, 9, 7)
    x, w = nhwc(randn(*xs, seed=1, scale=4.0)), randn(m, xs[1], 1, 1, seed=2, scale=2.0)
    ins = [x, w, randn(m, seed=3), randn(1, 9, 7, m, seed=4)]
    attrs = fused(act, params, residual=True)
    for threads in (1, 2):
        kernel = _prepared_conv(ins, attrs, threads)
        assert kernel.algo == "pointwise" and kernel.panels is not None
    check("Conv", ins, attrs, consts=(1, 2))
