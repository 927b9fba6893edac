"""The quantized conv and Quantize/DequantizeLinear cpu kernels (``cpu/qconv.py``,
``cpu/qlinear.py``) against the reference kernels, bit for bit, at 1 and 2 threads (and on the
baseline build: ``test_cpu_paths.py`` runs this file with ``SPRAT_CPU=baseline``).

One-group QLinearConv / ConvInteger run on the exact integer GEMM (``i8_gemm``: the NHWC input
itself for a 1x1 stride-1 conv, else its byte im2col); each such case also runs on the float32
path (``qconv.I8_CONV`` off: the grouped convs' path), exact while each partial sum stays within
2^24 (``exact_parts`` splits the input channels until it does); the worst-case cases below need
two or more parts there and would not be exact as one float32 GEMM. The integer GEMM's slower
paths (SPRAT_I8=int16, vnni) run this file again in a subprocess."""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest
from opcheck import check_cpu, cpu_refuses, fused

from sprat.backends.cpu import qconv
from sprat.backends.cpu.compiled import kernels as ck
from sprat.backends.cpu.qconv import EXACT_LIMIT, exact_parts

_U8, _S8 = np.uint8, np.int8


@pytest.fixture(params=["i8", "float"])
def conv_path(request, monkeypatch):
    """Each one-group case on the integer GEMM and on the float32 path."""
    monkeypatch.setattr(qconv, "I8_CONV", request.param == "i8" and qconv.I8_CONV)
    return request.param


def _kernel(op, ins, attrs, consts, threads=1):
    """The prepared cpu kernel of ``op``."""
    from opcheck import make_node

    from sprat.backends.cpu import CpuBackend
    from sprat.ir.shapes import infer
    from sprat.ir.tensorinfo import TensorInfo

    node, infos = make_node(op, ins, attrs, consts)
    kernel = CpuBackend(threads).make_kernel(node, infos)
    kernel.prepare(infos, [TensorInfo(s, d) for s, d in infer(node, infos)])
    return kernel


def _q(shape, dtype, seed, lo=None, hi=None):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    return rng.integers(info.min if lo is None else lo, (info.max if hi is None else hi) + 1,
                        shape).astype(dtype)


def _qlinear_inputs(n, h, w, c, m, k, group=1, xdt=_U8, wdt=_S8, per_channel=True,
                    bias=True, seed=0, dims=2):
    """(inputs, consts) of an NHWC QLinearConv: x (N, H, W, C), w (M, C/group, k, k)."""
    rng = np.random.default_rng(seed)
    xs = (n, w, c) if dims == 1 else (n, h, w, c)
    x = _q(xs, xdt, seed)
    wt = _q((m, c // group) + (k,) * dims, wdt, seed + 1)
    wscale = (rng.random(m if per_channel else 1) * 0.02 + 0.001).astype(np.float32)
    wzp = np.zeros(m if per_channel else 1, wdt) if wdt == _S8 else _q(
        m if per_channel else 1, wdt, seed + 2, 100, 150)
    ins = [x, np.float32(0.05), np.asarray(_q((), xdt, seed + 3)), wt, wscale, wzp,
           np.float32(3.7), np.asarray(_q((), xdt, seed + 4))]
    if bias:
        ins.append(rng.integers(-20000, 20000, m).astype(np.int32))
    return [np.asarray(a) for a in ins], tuple(range(1, len(ins)))


CASES = [  # (n, h, w, c, m, k, attrs)
    (1, 9, 11, 16, 24, 1, {}),  # pointwise
    (2, 10, 10, 8, 16, 3, {"pads": [1, 1, 1, 1]}),  # shift-GEMM
    (1, 9, 9, 160, 32, 3, {"pads": [1, 1, 1, 1]}),  # im2col (>= 128 channels)
    (1, 12, 13, 8, 12, 3, {"strides": [2, 2], "pads": [1, 0, 1, 1]}),
    (1, 15, 15, 3, 16, 7, {"strides": [2, 2], "pads": [3, 3, 3, 3]}),  # a stem
    (1, 8, 8, 6, 8, 3, {"dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    (1, 7, 7, 8, 8, 1, {"strides": [2, 2]}),  # strided 1x1
    # integer GEMM: several row and column blocks (AMX 32 x 32), ragged edges, 2 slots
    (2, 23, 21, 67, 83, 1, {}),
    (1, 29, 27, 45, 50, 3, {"pads": [1, 2, 0, 1]}),
    (1, 16, 16, 130, 36, 3, {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
]


@pytest.mark.parametrize("n,h,w,c,m,k,attrs", CASES)
@pytest.mark.parametrize("xdt,wdt", [(_U8, _S8), (_S8, _S8), (_U8, _U8)])
def test_qlinear_conv(n, h, w, c, m, k, attrs, xdt, wdt, conv_path):
    ins, consts = _qlinear_inputs(n, h, w, c, m, k, xdt=xdt, wdt=wdt)
    check_cpu("QLinearConv", ins, {**fused(), "kernel_shape": [k, k], **attrs}, consts, rtol=0)


# the integer GEMM's A on small shapes (``i8_pack_rows`` / ``i8_im2col_rows``: 16 or 32 bytes
# a step from the source, the last step masked, near the end of the input bytewise): K not a
# multiple of 4, 16 or 64 (1x1 over C, or kh*kw*C), 1 to 200 rows, N not a multiple of 16;
# the last two shapes large enough for two slots (each work item packing its own rows)
FAMILY = [  # (n, h, w, c, m, k, attrs)
    (1, 1, 1, 3, 5, 1, {}), (1, 1, 7, 13, 17, 1, {}), (1, 5, 9, 8, 33, 1, {}),
    (1, 10, 20, 27, 40, 1, {}), (1, 3, 3, 70, 9, 1, {}), (1, 4, 50, 16, 96, 1, {}),
    (1, 9, 9, 1, 20, 3, {"pads": [1, 1, 1, 1]}), (1, 10, 9, 3, 17, 3, {"strides": [2, 2],
                                                                        "pads": [1, 1, 1, 1]}),
    (1, 12, 7, 5, 6, 3, {"pads": [0, 1, 2, 1]}), (2, 6, 6, 2, 31, 5, {"pads": [2, 2, 2, 2]}),
    (1, 14, 6, 1, 64, 4, {"strides": [2, 2], "pads": [1, 1, 2, 2]}),
    (1, 7, 7, 24, 18, 3, {"dilations": [2, 1], "pads": [2, 1, 2, 1]}),
    (1, 112, 112, 3, 32, 3, {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    (1, 64, 64, 16, 40, 1, {}),
]


@pytest.mark.parametrize("n,h,w,c,m,k,attrs", FAMILY)
@pytest.mark.parametrize("xdt,wdt", [(_U8, _S8), (_S8, _S8), (_U8, _U8), (_S8, _U8)])
def test_qlinear_conv_small_shapes_on_the_integer_gemm(n, h, w, c, m, k, attrs, xdt, wdt):
    ins, consts = _qlinear_inputs(n, h, w, c, m, k, xdt=xdt, wdt=wdt, seed=c + m)
    check_cpu("QLinearConv", ins, {**fused(), "kernel_shape": [k, k], **attrs}, consts, rtol=0)


# convs whose int16 GEMM reads the input in place (``QConvKernel._implicit``: the padded,
# widened map instead of the im2col): 2 images, strides, uneven pads, dilation down, 5x5 and
# 7x7, a last panel of 8 (the in-register epilogue's half tile) and of 4 (the general one),
# kernel rows of 12-192 values, a 1-D conv, one map large enough for 2 slots
IMPLICIT_CASES = [  # (n, h, w, c, m, k, attrs, dims)
    (2, 13, 11, 12, 24, 3, {"pads": [1, 1, 1, 1]}, 2),
    (1, 20, 17, 8, 20, 3, {"strides": [2, 2], "pads": [1, 0, 1, 1]}, 2),
    (1, 14, 12, 6, 16, 5, {"pads": [4, 2, 3, 2], "dilations": [2, 1]}, 2),
    (1, 30, 29, 4, 32, 7, {"strides": [2, 2], "pads": [3, 3, 3, 3]}, 2),
    (1, 9, 9, 64, 40, 3, {"strides": [1, 2], "pads": [0, 1, 2, 1]}, 2),
    (1, 1, 40, 16, 16, 3, {"pads": [1, 1]}, 1),
    (1, 64, 64, 16, 24, 3, {"pads": [1, 1, 1, 1]}, 2),
]


@pytest.mark.parametrize("n,h,w,c,m,k,attrs,dims", IMPLICIT_CASES)
@pytest.mark.parametrize("xdt", [_U8, _S8])
def test_int16_conv_reads_its_input_in_place(n, h, w, c, m, k, attrs, dims, xdt, monkeypatch):
    """On the int16 path (full-range weights) these convs take the in-place A; QLinearConv and
    ConvInteger equal the reference at 1 and 2 threads."""
    from sprat.backends.cpu import quant

    monkeypatch.setattr(quant, "PATH", "int16")
    ins, consts = _qlinear_inputs(n, h, w, c, m, k, xdt=xdt, seed=c + k, dims=dims)
    full = {**fused(), "kernel_shape": [k] * dims, **attrs}
    kern = _kernel("QLinearConv", ins, full, consts)
    assert kern.i8 and kern.ipath == ck.I8_PATHS["int16"] and kern.implicit
    check_cpu("QLinearConv", ins, full, consts, rtol=0)
    check_cpu("ConvInteger", [ins[0], ins[3], ins[2]], full, (1, 2), rtol=0)


# the same on the u8s8 path (7-bit weights, zero points 0): kernel rows of whole quads, a map
# the im2col would hold 4x over (stride 1, or a 7x7 at stride 2), last panels of 8 and 4
U8S8_IMPLICIT_CASES = [  # (n, h, w, c, m, k, attrs)
    (2, 13, 11, 12, 24, 3, {"pads": [1, 1, 1, 1]}),
    (1, 14, 12, 8, 20, 5, {"pads": [4, 2, 3, 2], "dilations": [2, 1]}),
    (1, 30, 29, 4, 32, 7, {"strides": [2, 2], "pads": [3, 3, 3, 3]}),
    (1, 9, 9, 64, 40, 3, {"pads": [0, 1, 2, 1]}),
    (1, 64, 64, 16, 24, 3, {"pads": [1, 1, 1, 1]}),
]


@pytest.mark.skipif(not qconv._quant.U8S8, reason="no u8s8 kernels in this build")
@pytest.mark.parametrize("n,h,w,c,m,k,attrs", U8S8_IMPLICIT_CASES)
@pytest.mark.parametrize("xdt", [_U8, _S8])
def test_u8s8_conv_reads_its_input_in_place(n, h, w, c, m, k, attrs, xdt, monkeypatch):
    from sprat.backends.cpu import quant

    monkeypatch.setattr(quant, "PATH", "int16")
    ins, consts = _qlinear_inputs(n, h, w, c, m, k, xdt=xdt, seed=c + k)
    ins[3] = _q(ins[3].shape, _S8, c, -63, 63)  # NOTE: 7-bit weights: every pair fits
    full = {**fused(), "kernel_shape": [k, k], **attrs}
    kern = _kernel("QLinearConv", ins, full, consts)
    assert kern.i8 and kern.ipath == ck.I8_PATHS["u8s8"] and kern.implicit
    check_cpu("QLinearConv", ins, full, consts, rtol=0)
    check_cpu("ConvInteger", [ins[0], ins[3], ins[2]], full, (1, 2), rtol=0)


@pytest.mark.skipif(not qconv._quant.U8S8, reason="no u8s8 kernels in this build")
def test_u8s8_conv_keeps_the_im2col_for_a_3x3_stride_2(monkeypatch):
    """A 3x3 stride-2 conv's im2col holds 2.25x its map: on the u8s8 path, whose im2col
    copies raw bytes, it stays."""
    from sprat.backends.cpu import quant

    monkeypatch.setattr(quant, "PATH", "int16")
    ins, consts = _qlinear_inputs(1, 16, 16, 16, 16, 3, seed=1)
    ins[3] = _q(ins[3].shape, _S8, 1, -63, 63)
    full = {**fused(), "kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    kern = _kernel("QLinearConv", ins, full, consts)
    assert kern.ipath == ck.I8_PATHS["u8s8"] and not kern.implicit


@pytest.mark.parametrize("c,k,attrs,why", [
    (16, 1, {"strides": [2, 2]}, "a 1x1 stride-2 conv's map is 4x its im2col"),
    (72, 3, {"pads": [1, 1, 1, 1]}, "kernel rows of 216 values"),
    (8, 3, {"dilations": [1, 2], "pads": [2, 2, 2, 2]}, "dilation across"),
    (5, 3, {"pads": [1, 1, 1, 1]}, "an odd kw * C"),
])
def test_int16_conv_keeps_the_im2col_where_in_place_does_not_pay(c, k, attrs, why,
                                                                 monkeypatch):
    from sprat.backends.cpu import quant

    monkeypatch.setattr(quant, "PATH", "int16")
    ins, consts = _qlinear_inputs(1, 12, 12, c, 16, k, seed=c)
    full = {**fused(), "kernel_shape": [k, k], **attrs}
    kern = _kernel("QLinearConv", ins, full, consts)
    assert kern.i8 and kern.ipath == ck.I8_PATHS["int16"] and not kern.implicit, why
    check_cpu("QLinearConv", ins, full, consts, rtol=0)


def test_qlinear_conv_per_tensor_without_bias_and_one_d(conv_path):
    ins, consts = _qlinear_inputs(1, 1, 20, 8, 8, 3, per_channel=False, bias=False)
    check_cpu("QLinearConv", ins, {**fused(), "kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
              consts, rtol=0)
    ins, consts = _qlinear_inputs(2, 1, 30, 8, 12, 5, dims=1)
    check_cpu("QLinearConv", ins, {**fused(), "kernel_shape": [5], "pads": [2, 2]}, consts,
              rtol=0)


@pytest.mark.parametrize("c,group", [(32, 32), (12, 12), (56, 56), (16, 4)])
@pytest.mark.parametrize("xdt", [_U8, _S8])
def test_qlinear_conv_groups(c, group, xdt):
    """Depthwise (group == C == M: the direct kernel; 12 channels: its 8-lane blocks and the
    remainder; 56: its 32- and 16-channel AVX-512 blocks, then an 8-lane one) and a grouped
    conv."""
    ins, consts = _qlinear_inputs(2, 10, 11, c, c, 3, group=group, xdt=xdt)
    for strides in ([1, 1], [2, 2], [1, 2]):
        check_cpu("QLinearConv", ins, {**fused(), "kernel_shape": [3, 3], "group": group,
                                       "pads": [1, 1, 1, 1], "strides": strides}, consts, rtol=0)
    ins, consts = _qlinear_inputs(1, 12, 12, c, c, 5, group=group, xdt=xdt, per_channel=False)
    check_cpu("QLinearConv", ins, {**fused(), "kernel_shape": [5, 5], "group": group,
                                   "pads": [4, 3, 2, 4], "dilations": [2, 1]}, consts, rtol=0)


def test_qlinear_conv_fused_clip(conv_path):
    """A QDQ Relu/Clip (``passes.fuse_qdq``) is a clamp of the quantized output."""
    ins, consts = _qlinear_inputs(1, 8, 8, 16, 16, 3)
    check_cpu("QLinearConv", ins, {**fused("Clip", (40, 200)), "kernel_shape": [3, 3],
                                   "pads": [1, 1, 1, 1]}, consts, rtol=0)


@pytest.mark.parametrize("c,k", [(512, 3), (256, 3), (300, 1)])
def test_qlinear_conv_worst_case_needs_parts_and_stays_exact(c, k, conv_path):
    """Inputs at the extreme of their range and weights at +-127 with one sign per output
    channel: every sum is ``K * 255 * 127`` in magnitude, far beyond 2^24 (a single float32
    GEMM would round). The kernel splits the input channels into parts that stay within
    2^24 each and adds them as int32: the result equals the int64 reference exactly."""
    m = 16
    ins, consts = _qlinear_inputs(1, 6, 6, c, m, k)
    ins[0] = np.full_like(ins[0], 255)
    ins[2] = np.asarray(0, _U8)
    sign = np.where(np.arange(m) % 2, 1, -1).reshape(-1, 1, 1, 1)
    ins[3] = (np.full((m, c, k, k), 127) * sign).astype(_S8)
    ins[5] = np.zeros(m, _S8)
    ins[4] = np.full(m, 1e-6, np.float32)  # keep the outputs off saturation
    parts = exact_parts(ins[3].astype(np.int64), 255)
    assert len(parts) == -(-(c * k * k * 255 * 127) // EXACT_LIMIT) or len(parts) > 1
    check_cpu("QLinearConv", ins, {**fused(), "kernel_shape": [k, k], "pads": [k // 2] * 4},
              consts, rtol=0)


def _bn_table(m, in_dt, out_dt, seed, clip=True):
    """(m, 256) tables of DequantizeLinear -> an affine map per channel (a BatchNormalization,
    gamma of either sign and of magnitudes from 1e-3 to 30) -> Clip(0, 6) -> QuantizeLinear, in
    float32 as the reference kernels compute such a chain (``passes.fuse_qdq.fuse_lookup``)."""
    rng = np.random.default_rng(seed)
    q = np.arange(np.iinfo(in_dt).min, np.iinfo(in_dt).max + 1).astype(np.float32)
    s_in, zp_in = np.float32(0.037), np.float32(rng.integers(-20, 20))
    gamma = (np.exp(rng.uniform(np.log(1e-3), np.log(30), m))
             * rng.choice([-1, 1], m)).astype(np.float32)
    beta = rng.normal(0, 2, m).astype(np.float32)
    v = ((q[None, :] - zp_in) * s_in) * gamma[:, None] + beta[:, None]
    if clip:
        v = np.clip(v, np.float32(0), np.float32(6))
    info = np.iinfo(out_dt)
    zp_out = np.float32(info.min + 3)
    return np.clip(np.rint(v / np.float32(0.0271)) + zp_out, info.min, info.max).astype(out_dt)


def _lookup_inputs(kind, m, in_dt, out_dt, seed=0):
    """A fused lookup's table: ``bn`` (a second requantisation reproduces every channel),
    ``random`` (none), ``mixed`` (every third channel random), ``one`` (one row for all),
    ``one_random`` (one row for all that no requantisation reproduces: a SiLU's)."""
    if kind == "one":
        return _bn_table(1, in_dt, out_dt, seed)
    if kind == "one_random":
        return _q((1, 256), out_dt, seed + 7)
    t = _bn_table(m, in_dt, out_dt, seed, clip=seed % 2 == 0)
    if kind == "random":
        return _q((m, 256), out_dt, seed + 7)
    if kind == "mixed":
        t[::3] = _q((len(t[::3]), 256), out_dt, seed + 7)
    return t


LOOKUP_CASES = [  # (n, h, w, c, m, k, group, attrs)
    (1, 9, 11, 16, 24, 1, 1, {}),  # 1x1: the NHWC input itself on the integer GEMM
    (2, 23, 21, 67, 83, 1, 1, {}),  # several GEMM blocks, ragged
    (1, 12, 13, 8, 40, 3, 1, {"strides": [2, 2], "pads": [1, 0, 1, 1]}),  # im2col
    (2, 10, 11, 40, 40, 3, 40, {"pads": [1, 1, 1, 1]}),  # depthwise
    (1, 14, 13, 20, 20, 3, 20, {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    (1, 9, 9, 16, 32, 3, 4, {"pads": [1, 1, 1, 1]}),  # grouped: the float32 parts' epilogue
]


@pytest.mark.parametrize("n,h,w,c,m,k,group,attrs", LOOKUP_CASES)
@pytest.mark.parametrize("table", ["bn", "random", "mixed", "one", "one_random"])
@pytest.mark.parametrize("xdt,ydt,tdt", [(_U8, _U8, _U8), (_S8, _S8, _S8), (_S8, _S8, _U8)])
def test_qlinear_conv_fused_lookup(n, h, w, c, m, k, group, attrs, table, xdt, ydt, tdt,
                                   conv_path):
    """A QLinearConv with its QLinearLookup fused (``_lookup``, ``fuse_conv_lookup``): the
    epilogue's second requantisation and the fixed channels equal the reference's table."""
    ins, consts = _qlinear_inputs(n, h, w, c, m, k, group=group, xdt=xdt, seed=m + k)
    ins[7] = np.asarray(_q((), ydt, 5))
    ins.append(_lookup_inputs(table, m, ydt, tdt, seed=k + group))
    consts = consts + (len(ins) - 1,)
    check_cpu("QLinearConv", ins, {**fused(), "_lookup": True, "kernel_shape": [k, k],
                                   "group": group, **attrs}, consts, rtol=0)


@pytest.mark.parametrize("group", [1, 24])
def test_qlinear_conv_fused_lookup_rounds_ties_to_even(group, conv_path):
    """Sums whose requantised value lies on a half (scale 1/2, small sums, some out of the
    output range): the epilogue's rounding before the second requantisation (by the magic
    number on AVX2) is half to even, as the reference's rint."""
    rng = np.random.default_rng(7)
    k = 1 if group == 1 else 3
    x = (120 + rng.integers(-3, 4, (2, 9, 11, 24))).astype(_U8)
    w = rng.integers(-1, 2, (24, 24 // group, k, k)).astype(_S8)
    ins = [x, np.float32(0.5), np.asarray(_U8(120)), w, np.ones(24, np.float32),
           np.zeros(24, _S8), np.float32(1.0), np.asarray(_U8(10)),
           rng.integers(-3, 4, 24).astype(np.int32), _lookup_inputs("bn", 24, _U8, _U8, 2)]
    attrs = {**fused(), "_lookup": True, "kernel_shape": [k, k], "group": group,
             "pads": [k // 2] * 4}
    check_cpu("QLinearConv", [np.asarray(a) for a in ins], attrs, tuple(range(1, 10)), rtol=0)


def test_qlinear_conv_fused_lookup_after_clip_and_without_bias(conv_path):
    """The fused Clip narrows the values the table is read at; no bias: the table after an
    absent input."""
    ins, consts = _qlinear_inputs(1, 8, 8, 16, 16, 3, bias=False)
    ins.append(None)
    ins.append(_lookup_inputs("mixed", 16, _U8, _S8, seed=3))
    attrs = {**fused("Clip", (40, 200)), "_lookup": True, "kernel_shape": [3, 3],
             "pads": [1, 1, 1, 1]}
    check_cpu("QLinearConv", ins, attrs, consts + (9,), rtol=0)


def test_lookup_stage_reproduces_affine_tables_and_fixes_the_rest():
    """Over many BatchNormalization + Clip tables (gamma of both signs, 1e-3 .. 30), u8 and s8
    either side: every channel is a second requantisation, equal to its table at every value
    the conv can give; random tables are all left to the fix-up; each result equals the
    table."""
    from sprat.backends.cpu.qconv import _post_eval, lookup_stage

    for seed, (ind, outd) in enumerate(itertools.product((_U8, _S8), (_U8, _S8))):
        for lo, hi in ((None, None), (10, 100)):
            info = np.iinfo(ind)
            lo = info.min if lo is None else lo + (info.min if ind == _S8 else 0)
            hi = info.max if hi is None else hi + (info.min if ind == _S8 else 0)
            for table, affine in ((_bn_table(512, ind, outd, seed), True),
                                  (_bn_table(512, ind, outd, seed, clip=False), True),
                                  (_q((64, 256), outd, seed), False)):
                m = table.shape[0]
                post, chans, tables = lookup_stage(table, m, lo, hi, ind, outd)
                assert chans.size == 0 if affine else chans.size == m
                a, b, l2, h2 = post.reshape(4, m)[:, :, None]
                q = np.arange(lo, hi + 1, dtype=np.float32)[None, :]
                got = _post_eval(a, b, l2, h2, q).astype(np.int64)
                idx = np.arange(lo, hi + 1) - info.min
                want = table[:, idx].astype(np.int64)
                kept = np.setdiff1d(np.arange(m), chans)
                assert np.array_equal(got[kept], want[kept])
                # NOTE: a channel left to the fix-up stores the table's index, which
                # ``qlookup_channels`` reads back through the channel's row
                index = got[chans] - np.iinfo(outd).min
                assert np.array_equal(index, np.broadcast_to(idx, index.shape))
                assert np.array_equal(tables.view(outd).reshape(-1, 256), table[chans])


DW_CASES = [  # (h, w, c, k, attrs): the direct depthwise kernel's blocks and edges
    (10, 11, 48, 3, {"pads": [1, 1, 1, 1]}),  # 16-channel blocks, 4-pixel blocks + 3 left
    (9, 9, 24, 3, {"strides": [2, 2], "pads": [1, 1, 1, 1]}),  # one 16 + one 8 block
    (7, 13, 21, 3, {"pads": [0, 2, 1, 0]}),  # 16 + 5 scalar channels, uneven pads
    (12, 12, 16, 5, {"pads": [4, 3, 2, 4], "dilations": [2, 1]}),  # a ring of 9 rows
    (6, 30, 8, 7, {"strides": [1, 3], "pads": [3, 3, 3, 3]}),
    (1, 1, 960, 3, {"pads": [1, 1, 1, 1]}),  # one pixel: every tap but the centre outside
    (14, 14, 480, 5, {"strides": [2, 2], "pads": [2, 2, 2, 2]}),  # several channel tiles
    (9, 20, 40, 5, {"pads": [2, 4, 2, 4], "dilations": [1, 2]}),  # horizontal dilation
    (11, 9, 20, 3, {"pads": [2, 1, 2, 1], "dilations": [2, 1], "strides": [2, 1]}),
]


@pytest.mark.parametrize("h,w,c,k,attrs", DW_CASES)
@pytest.mark.parametrize("xdt", [_U8, _S8])
def test_qlinear_conv_depthwise_direct(h, w, c, k, attrs, xdt):
    """The direct depthwise kernel over a family of shapes; ConvInteger's int32 output too.
    Kernels 3 and 5 wide at horizontal stride 1 or 2 without horizontal dilation sum their taps
    by the float32 conv's register-blocked kernel (in a build that has it), the others by the
    quantized kernel's own rows."""
    ins, consts = _qlinear_inputs(2, h, w, c, c, k, group=c, xdt=xdt, seed=c + k)
    full = {**fused(), "kernel_shape": [k, k], "group": c, **attrs}
    kern = _kernel("QLinearConv", ins, full, consts)
    assert kern.direct_dw
    sw, dw = attrs.get("strides", [1, 1])[1], attrs.get("dilations", [1, 1])[1]
    assert kern.dw_blocked == (ck.DEPTHWISE_BLOCKED and k in (3, 5) and sw in (1, 2) and dw == 1)
    check_cpu("QLinearConv", ins, full, consts, rtol=0)
    check_cpu("ConvInteger", [ins[0], ins[3], ins[2]], full, (1, 2), rtol=0)


@pytest.mark.parametrize("big", [False, True])
def test_qlinear_conv_depthwise_requantised_in_registers(big):
    """The blocked depthwise path requantises in registers (``dw_fused``) when its float32 sums
    from the bias are exact: a bias near 2^24 (its sums are not) takes the int32 epilogue
    instead; both equal the reference, with and without a fused lookup."""
    ins, consts = _qlinear_inputs(2, 9, 12, 24, 24, 3, group=24, seed=5)
    if big:
        ins[8] = np.where(np.arange(24) % 2, 1, -1).astype(np.int32) * ((1 << 24) - 300)
    full = {**fused(), "kernel_shape": [3, 3], "group": 24, "pads": [1, 1, 1, 1]}
    kern = _kernel("QLinearConv", ins, full, consts)
    assert kern.dw_fused == (ck.DEPTHWISE_BLOCKED and not big)
    check_cpu("QLinearConv", ins, full, consts, rtol=0)
    ins.append(_lookup_inputs("mixed", 24, _U8, _U8, seed=4))
    consts = consts + (len(ins) - 1,)
    full["_lookup"] = True
    assert _kernel("QLinearConv", ins, full, consts).dw_fused == (ck.DEPTHWISE_BLOCKED and not big)
    check_cpu("QLinearConv", ins, full, consts, rtol=0)


@pytest.mark.skipif(not qconv._quant.U8S8, reason="u8s8 runs where the GEMM would be int16")
@pytest.mark.parametrize("m,k,attrs", [(24, 1, {}), (40, 3, {"pads": [1, 1, 1, 1]}),
                                       (21, 3, {"strides": [2, 2]})])
@pytest.mark.parametrize("xdt,wdt", [(_U8, _S8), (_S8, _S8), (_U8, _U8)])
@pytest.mark.parametrize("lookup", [False, True])
def test_qlinear_conv_u8s8_path(m, k, attrs, xdt, wdt, lookup):
    """7-bit weights (onnxruntime's reduce_range) run on the u8s8 path (vpmaddubsw), exactly:
    1x1 and im2col convs, channels past a 16-column panel, int8 weights (requantised in the
    tile's registers) and uint8 ones with zero points (the separate epilogue), a fused
    lookup, a pair that does not fit (a correction record); full-range weights stay on
    int16."""
    ins, consts = _qlinear_inputs(1, 9, 10, 32, m, k, xdt=xdt, wdt=wdt, seed=m + k)
    lo, hi = (-64, 64) if wdt == _S8 else (64, 192)
    ins[3] = _q(ins[3].shape, wdt, 9, lo, hi)
    if wdt == _U8:
        ins[5] = _q(ins[5].shape, wdt, 10, 120, 136)
    full = {**fused(), "kernel_shape": [k, k], **attrs}
    if lookup:
        ins.append(_lookup_inputs("mixed", m, xdt, xdt, seed=k))
        consts = consts + (len(ins) - 1,)
        full["_lookup"] = True
    assert _kernel("QLinearConv", ins, full, consts).ipath == ck.I8_PATHS["u8s8"]
    check_cpu("QLinearConv", ins, full, consts, rtol=0)
    # NOTE: one pair that does not fit: u8s8 clipped, with a correction record
    ins[3] = ins[3].copy()
    ins[3].reshape(m, -1)[0, :2] = 127 if wdt == _S8 else 255
    assert _kernel("QLinearConv", ins, full, consts).ipath == ck.I8_PATHS["u8s8"]
    check_cpu("QLinearConv", ins, full, consts, rtol=0)
    ins[3] = _q(ins[3].shape, wdt, 11)
    ins[3].reshape(m, -1)[0, :2] = 127 if wdt == _S8 else 255
    assert _kernel("QLinearConv", ins, full, consts).ipath == ck.I8_PATHS["int16"]


def test_exact_parts_bound():
    rng = np.random.default_rng(0)
    w = rng.integers(-127, 128, (64, 512, 3, 3))
    parts = exact_parts(w, 255)
    assert parts[0][0] == 0 and parts[-1][1] == 512
    assert all(a[1] == b[0] for a, b in itertools.pairwise(parts))
    for c0, c1 in parts:
        assert 255 * np.abs(w[:, c0:c1]).reshape(64, -1).sum(1).max() <= EXACT_LIMIT
    # each part as large as it can be: one more channel breaks the bound
    for c0, c1 in parts[:-1]:
        assert 255 * np.abs(w[:, c0:c1 + 1]).reshape(64, -1).sum(1).max() > EXACT_LIMIT
    assert exact_parts(w[:, :4], 255) == [(0, 4)]
    assert exact_parts(np.full((2, 1, 40, 40), 127), 255) is None  # one channel too large


@pytest.mark.parametrize("wdt", [_S8, _U8])
def test_conv_integer(wdt, conv_path):
    x = _q((2, 9, 9, 24), _U8, 0)
    w = _q((16, 24, 3, 3), wdt, 1)
    ins = [x, w, np.asarray(_q((), _U8, 2)), np.asarray(_q((16,), wdt, 3))]
    check_cpu("ConvInteger", ins, {**fused(), "kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
              (1, 2, 3), rtol=0)
    check_cpu("ConvInteger", ins[:2], {**fused(), "kernel_shape": [3, 3]}, (1,), rtol=0)
    ins = [_q((1, 20, 20, 40), _S8, 4), _q((24, 40, 1, 1), _S8, 5), np.asarray(np.int8(-5))]
    check_cpu("ConvInteger", ins, {**fused(), "kernel_shape": [1, 1]}, (1, 2), rtol=0)


def test_one_group_convs_take_the_integer_gemm():
    """1x1 stride-1 convs multiply the input itself, other one-group convs its byte im2col
    (also one that ``exact_parts`` cannot split: more than 2^24 / (255 * 127) taps per
    channel); grouped and depthwise convs stay on the float32 path."""
    if not qconv.I8_CONV:
        pytest.skip("SPRAT_QCONV=float")
    ins, consts = _qlinear_inputs(1, 9, 11, 16, 24, 1)
    k = _kernel("QLinearConv", ins, {**fused(), "kernel_shape": [1, 1]}, consts)
    assert k.i8 and k.pointwise
    ins, consts = _qlinear_inputs(1, 9, 11, 16, 24, 3)
    k = _kernel("QLinearConv", ins, {**fused(), "kernel_shape": [3, 3]}, consts)
    assert k.i8 and not k.pointwise
    ins, consts = _qlinear_inputs(1, 9, 9, 16, 16, 3, group=16)
    k = _kernel("QLinearConv", ins, {**fused(), "kernel_shape": [3, 3], "group": 16}, consts)
    assert not k.i8 and k.direct_dw
    big, bconsts = _qlinear_inputs(1, 24, 24, 1, 4, 24)
    big[0] = np.full_like(big[0], 255)
    big[2] = np.asarray(0, _U8)
    big[3] = np.full_like(big[3], 127)
    assert exact_parts(big[3].astype(np.int64), 255) is None
    attrs = {**fused(), "kernel_shape": [24, 24]}
    assert _kernel("QLinearConv", big, attrs, bconsts).i8
    check_cpu("QLinearConv", big, attrs, bconsts, rtol=0)


def test_i8_im2col_errors():
    from sprat.backends.cpu import quant
    from sprat.backends.cpu.compiled import kernels

    path = kernels.I8_PATHS[quant.PATH]
    x = np.zeros(4 * 4 * 8, np.uint8)
    pitch = kernels.i8_a_pitch(9 * 8, path)
    ws, rs = np.zeros((kernels.i8_a_rows(16, path), pitch), np.uint8), np.zeros(48, np.int32)
    kernels.i8_im2col(1, x, False, 3, 1, 4, 4, 8, 4, 4, 3, 3, 1, 1, 1, 1, 1, 1, path, ws, rs)
    with pytest.raises(ValueError, match="too short"):  # a map of 2 rows, not 4
        kernels.i8_im2col(1, x[:64], False, 3, 1, 4, 4, 8, 4, 4, 3, 3, 1, 1, 1, 1, 1, 1, path,
                          ws, rs)
    with pytest.raises(ValueError, match="too short"):  # rows of 8 bytes for K = 72
        kernels.i8_im2col(1, x, False, 3, 1, 4, 4, 8, 4, 4, 3, 3, 1, 1, 1, 1, 1, 1, path,
                          ws[:, :8].copy(), rs)
    with pytest.raises(ValueError, match="K="):
        kernels.i8_im2col(1, x, False, 3, 1, 4, 4, 4000, 4, 4, 3, 3, 1, 1, 1, 1, 1, 1, path,
                          ws, rs)


def _im2col_reference(x, zp, kh, kw, sh, sw, dh, dw, ph, pw, oh, ow):
    """(N*OH*OW, kh*kw*C) int32: each output pixel's taps (i, j) in order, C values each,
    ``x - zp`` inside the map and 0 outside."""
    n, h, w, c = x.shape
    xp = np.zeros((n, h + ph + (oh - 1) * sh + (kh - 1) * dh + 1, w + pw + (ow - 1) * sw
                   + (kw - 1) * dw + 1, c), np.int32)
    xp[:, ph:ph + h, pw:pw + w] = x.astype(np.int32) - zp
    taps = [xp[:, i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw]
            for i in range(kh) for j in range(kw)]
    return np.concatenate(taps, axis=-1).reshape(n * oh * ow, -1)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("n,h,w,c,k,s,d,pads", [
    (1, 9, 11, 16, 3, 1, 1, (1, 1)), (2, 7, 6, 3, 3, 1, 1, (1, 1)), (1, 12, 13, 8, 5, 1, 1, (2, 2)),
    (1, 10, 9, 24, 3, 2, 1, (1, 0)), (2, 6, 17, 7, 3, 1, 1, (0, 2)), (1, 8, 8, 32, 2, 1, 1, (0, 0)),
    (1, 9, 9, 5, 3, 1, 2, (2, 2)), (3, 5, 5, 64, 1, 2, 1, (0, 0)), (1, 6, 40, 1, 4, 2, 1, (1, 1)),
])
def test_i8_im2col_int16_rows_equal_the_taps(n, h, w, c, k, s, d, pads, threads):
    """The int16 path's im2col (``x - zp`` widened, 0 in the padding; the rows whose kernel rows
    lie inside the map across by ``sprat_i8_im2col_seg``, the others by the general loop) equals
    the taps of the padded map, for int8 and uint8 maps, several images, strides, dilations
    and asymmetric placements, at 1 and 2 slots."""
    from sprat.backends.cpu.compiled import kernels

    path = kernels.I8_PATHS["int16"]
    ph, pw = pads
    oh, ow = (h + 2 * ph - d * (k - 1) - 1) // s + 1, (w + 2 * pw - d * (k - 1) - 1) // s + 1
    rows, kk = n * oh * ow, k * k * c
    for dt, zp in ((_U8, 7), (_S8, -3)):
        x = _q((n, h, w, c), dt, 5)
        ws = np.full((kernels.i8_a_rows(rows, path), kernels.i8_a_pitch(kk, path)), 0xAB,
                     np.uint8)
        kernels.i8_im2col(threads, x.reshape(-1).view(np.uint8), dt == _S8, zp, n, h, w, c, oh,
                          ow, k, k, s, s, d, d, ph, pw, path, ws, np.zeros(0, np.int32))
        got = ws[:rows].view(np.int16)[:, :kk]
        want = _im2col_reference(x, zp, k, k, s, s, d, d, ph, pw, oh, ow)
        np.testing.assert_array_equal(got, want)
        if kk % 2:
            assert (ws[:rows].view(np.int16)[:, kk] == 0).all()


@pytest.mark.skipif(os.environ.get("SPRAT_I8") is not None, reason="runs the other paths")
def test_every_integer_path_this_cpu_has_passes_these_tests():
    """This file again with SPRAT_I8 forcing each slower integer GEMM path the CPU has (as
    test_cpu_quant.py; the baseline build's scalar path runs from ``test_cpu_paths.py``)."""
    from test_cpu_quant import rerun_on_other_integer_paths

    rerun_on_other_integer_paths(__file__, "-k", "conv and not float")


def test_qconv_refusals():
    ins, consts = _qlinear_inputs(1, 8, 8, 8, 8, 3)
    attrs = {**fused(), "kernel_shape": [3, 3]}
    assert cpu_refuses("QLinearConv", ins, {"kernel_shape": [3, 3]}, consts)  # NCHW
    assert cpu_refuses("QLinearConv", ins, attrs, (1, 2, 4, 5, 6, 7, 8))  # w not constant
    assert cpu_refuses("QLinearConv", ins, {**fused("Relu"), "kernel_shape": [3, 3]}, consts)
    # a grouped conv whose sums would need two parts
    big, bconsts = _qlinear_inputs(1, 4, 4, 1024, 4, 3, group=2)
    big[3] = np.full_like(big[3], 127)
    assert cpu_refuses("QLinearConv", big, {**attrs, "group": 2}, bconsts)


def _boundary_floats(scale, seed=0):
    rng = np.random.default_rng(seed)
    k = rng.integers(-300, 300, 4096).astype(np.float32)
    return np.concatenate([(rng.standard_normal(1 << 18) * 3).astype(np.float32),
                           (k + np.float32(0.5)) * scale, k * scale,
                           np.array([1e9, -1e9], np.float32)]).reshape(2, -1)


@pytest.mark.parametrize("zp", [np.uint8(7), np.int8(-3), None])
def test_quantize_and_dequantize_linear(zp):
    s = np.float32(0.0173)
    x = _boundary_floats(s)
    ins = [x, np.asarray(s)] + ([] if zp is None else [np.asarray(zp)])
    check_cpu("QuantizeLinear", ins, {}, (1, 2), rtol=0)
    q = _q((3, 1000, 77), np.int8 if zp is not None and zp.dtype == np.int8 else np.uint8, 1)
    ins = [q, np.asarray(s)] + ([] if zp is None else [np.asarray(zp)])
    check_cpu("DequantizeLinear", ins, {}, (1, 2), rtol=0)


def test_quantize_linear_refusals():
    x = np.zeros((2, 3, 4), np.float32)
    per_axis = [x, np.full(3, 0.1, np.float32), np.zeros(3, np.uint8)]
    assert cpu_refuses("QuantizeLinear", per_axis, {"axis": 1}, (1, 2))
    assert cpu_refuses("QuantizeLinear", [x, np.asarray(np.float32(0.1)),
                                          np.asarray(np.uint16(3))], {}, (1, 2))
    assert cpu_refuses("QuantizeLinear", [x, np.asarray(np.float32(0.1))], {}, ())


@pytest.mark.parametrize("xdt,tdt", [(_U8, _U8), (_S8, _S8), (_U8, _S8)])
@pytest.mark.parametrize("shape,axis,rows", [((2, 5, 6, 7), 3, 7), ((1, 300, 40), 1, 300),
                                             ((3, 4, 5), 1, 1), ((600, 17), 1, 17),
                                             ((2, 33, 40, 24), 3, 1), ((1, 1001), 1, 1)])
def test_qlinear_lookup(xdt, tdt, shape, axis, rows):
    x = _q(shape, xdt, 0)
    table = _q((rows, 256), tdt, 1)
    check_cpu("QLinearLookup", [x, table], {"axis": axis}, (1,), rtol=0)


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("dt", [_U8, _S8])
def test_qlinear_add_and_mul(op, dt):
    from opcheck import make_node, run_cpu

    from sprat.backends.cpu import CpuBackend
    from sprat.backends.reference import evaluate

    a, b = _q((2, 300, 7, 9), dt, 0), _q((2, 300, 7, 9), dt, 1)
    ins = [a, np.float32(0.031), np.asarray(_q((), dt, 2)), b, np.float32(0.017),
           np.asarray(_q((), dt, 3)), np.float32(0.043 if op == "QLinearAdd" else 0.0011),
           np.asarray(_q((), dt, 4))]
    ins = [np.asarray(v) for v in ins]
    node, infos = make_node(op, ins, {}, (1, 2, 4, 5, 6, 7))
    node.domain = "com.microsoft"
    want = evaluate(node, ins)[0]
    for nt in (1, 2):
        np.testing.assert_array_equal(run_cpu(node, infos, ins, nt)[0], want)
    node.domain = ""  # NOTE: not an ONNX op: the cpu backend only takes the contrib op
    assert not CpuBackend(1).has_fast_kernel(node, infos)


@pytest.mark.parametrize("xdt", [_U8, _S8])
@pytest.mark.parametrize("shape,m,k,attrs", [
    ((1, 32, 32, 3), 24, 16, {"strides": [16, 16]}),  # a ViT's patch embedding
    ((2, 9, 11, 5), 16, 3, {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 12, 12, 8), 16, 3, {"pads": [1, 1, 1, 1]}),  # int16: the input read in place
    ((1, 9, 9, 24), 40, 1, {})])
def test_conv_integer_with_a_run_time_x_zero_point(xdt, shape, m, k, attrs):
    """x_zero_point an input, not a constant (DynamicQuantizeLinear's output in a dynamically
    quantized model): the integer GEMM takes it at each call (two runs with two zero points
    in run_cpu's replay included); a grouped conv is refused."""
    info = np.iinfo(xdt)
    for zp in (info.min, 7, info.max):
        ins = [_q(shape, xdt, 0), _q((m, shape[-1], k, k), _S8, 1), np.asarray(xdt(zp))]
        check_cpu("ConvInteger", ins, {**fused(), "kernel_shape": [k, k], **attrs}, (1,),
                  rtol=0)
    ins = [_q((1, 6, 6, 8), xdt, 0), _q((8, 4, 3, 3), _S8, 1), np.asarray(xdt(3))]
    assert cpu_refuses("ConvInteger", ins, {**fused(), "kernel_shape": [3, 3], "group": 2},
                       (1,))


def _contrib_exact(op, ins, consts, attrs=None):
    """The cpu kernel of com.microsoft ``op`` equals the reference kernel exactly, at 1 and 2
    threads."""
    from opcheck import make_node, run_cpu

    from sprat.backends.reference import evaluate

    ins = [np.asarray(v) for v in ins]
    node, infos = make_node(op, ins, attrs or {}, consts)
    node.domain = "com.microsoft"
    want = evaluate(node, ins)[0]
    for nt in (1, 2):
        got = run_cpu(node, infos, ins, nt)[0]
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want, err_msg=f"{op} threads={nt}")


# (full shape, broadcast shape): a squeeze-excite scale on an NHWC map (batch 1 and 2, one
# channel to a 9-channel tail past the kernel's 8-lane steps), rows broadcast inside, a
# leading-axis vector, and the first operand the smaller one
BROADCASTS = [((1, 14, 14, 40), (1, 1, 1, 40)), ((2, 7, 5, 9), (2, 1, 1, 9)),
              ((1, 9, 9, 1), (1, 1, 1, 1)), ((3, 4, 6), (3, 1, 6)), ((2, 300, 7, 9), (2, 1, 1, 1)),
              ((1, 1, 1, 16), (1, 20, 20, 16)),
              # NOTE: a scalar (a QDQ transformer's x * 0.5, the attention scale), a bias row,
              # the same values without the leading 1, a scalar in front
              ((1, 3, 197, 197), ()), ((1, 197, 40), (40,)), ((1, 1000), (1000,)),
              ((1,), (2, 5, 301))]


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("dt", [_U8, _S8])
@pytest.mark.parametrize("sa,sb", BROADCASTS)
def test_qlinear_add_and_mul_broadcast_over_a_run_of_axes(op, dt, sa, sb):
    ins = [_q(sa, dt, 0), np.float32(0.031), _q((), dt, 2), _q(sb, dt, 1), np.float32(0.017),
           _q((), dt, 3), np.float32(0.043 if op == "QLinearAdd" else 0.0011), _q((), dt, 4)]
    _contrib_exact(op, ins, (1, 2, 4, 5, 6, 7))


def test_qlinear_binary_refuses_a_broadcast_over_two_runs():
    from opcheck import make_node

    from sprat.backends.cpu import CpuBackend

    ins = [np.asarray(v) for v in (_q((2, 3, 4, 5), _U8, 0), np.float32(0.03), _q((), _U8, 1),
                                   _q((2, 1, 4, 1), _U8, 2), np.float32(0.02), _q((), _U8, 3),
                                   np.float32(0.04), _q((), _U8, 4))]
    node, infos = make_node("QLinearMul", ins, {}, (1, 2, 4, 5, 6, 7))
    node.domain = "com.microsoft"
    assert not CpuBackend(1).has_fast_kernel(node, infos)


@pytest.mark.parametrize("dt", [_U8, _S8])
@pytest.mark.parametrize("shape,attrs", [((1, 7, 9, 40), {"_layout": "NHWC"}),
                                         ((3, 5, 5, 17), {"channels_last": 1}),
                                         ((2, 56, 56, 24), {"_layout": "NHWC"}),
                                         ((2, 33, 8), {"_layout": "NHWC"})])
def test_qlinear_global_average_pool_channels_last(dt, shape, attrs):
    """onnxruntime's integer form (int32 sums less zp * HW, one float32 scale), the extremes
    of the type included; the third map is above the parallel threshold (two slots)."""
    x = _q(shape, dt, 0)
    x.reshape(-1)[:shape[-1] * 3] = np.iinfo(dt).max
    for xs, ys in ((0.031, 0.017), (0.2, 0.0009)):  # NOTE: the second saturates
        _contrib_exact("QLinearGlobalAveragePool",
                       [x, np.float32(xs), _q((), dt, 2), np.float32(ys), _q((), dt, 3)],
                       (1, 2, 3, 4), attrs)


# (x shape NCHW, attrs): a 3x3 stride-2 padded pool with and without the pads counted, 2x2
# stride 2 (a DenseNet transition; large enough for two slots), ceil_mode's overhang, SAME
# pads, dilation
AVERAGE_POOLS = [((1, 4, 9, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
                 ((2, 3, 7, 8), {"kernel_shape": [3, 3], "pads": [1, 0, 2, 1],
                                 "count_include_pad": 1}),
                 ((2, 32, 56, 56), {"kernel_shape": [2, 2], "strides": [2, 2]}),
                 ((1, 5, 10, 11), {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1}),
                 ((1, 6, 9, 9), {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER",
                                 "strides": [2, 2]}),
                 ((1, 2, 12, 12), {"kernel_shape": [3, 3], "dilations": [2, 1],
                                   "pads": [2, 1, 2, 1]})]


@pytest.mark.parametrize("dt", [_U8, _S8])
@pytest.mark.parametrize("shape,attrs", AVERAGE_POOLS)
def test_qlinear_average_pool_nchw(dt, shape, attrs):
    """The reference kernel's bytes (dequantized values summed exactly, over the window's
    count, quantized), the type's extremes included, a scale that saturates."""
    from opcheck import make_node

    from sprat.backends.cpu import CpuBackend

    x = _q(shape, dt, 0)
    x.reshape(-1)[:20] = np.iinfo(dt).max
    for xs, ys in ((0.031, 0.017), (0.2, 0.0009)):
        ins = [x, np.float32(xs), _q((), dt, 2), np.float32(ys), _q((), dt, 3)]
        node, infos = make_node("QLinearAveragePool", [np.asarray(v) for v in ins], attrs,
                                (1, 2, 3, 4))
        node.domain = "com.microsoft"
        assert CpuBackend(1).has_fast_kernel(node, infos)
        _contrib_exact("QLinearAveragePool", ins, (1, 2, 3, 4), attrs)


def test_qlinear_average_pool_leaves_empty_windows_to_the_reference():
    """Pads wider than the kernel, not counted: a window with no tap (0 / 0) stays on the
    reference kernel."""
    from opcheck import make_node

    from sprat.backends.cpu import CpuBackend

    ins = [np.asarray(v) for v in (_q((1, 2, 6, 6), _U8, 0), np.float32(0.03), _q((), _U8, 1),
                                   np.float32(0.02), _q((), _U8, 2))]
    node, infos = make_node("QLinearAveragePool", ins,
                            {"kernel_shape": [2, 2], "pads": [2, 2, 2, 2]}, (1, 2, 3, 4))
    node.domain = "com.microsoft"
    assert not CpuBackend(1).has_fast_kernel(node, infos)


# (shape, axis, opset): attention probabilities (rows of 197, past the kernel's 8-lane steps,
# two slots), a middle axis (strided rows), Softmax-11's rows of the trailing dims, one value
SOFTMAXES = [((1, 3, 197, 197), -1, 13), ((2, 7, 5), 1, 13), ((2, 3, 4, 5), 1, 12),
             ((4, 1), -1, 13), ((3, 10), 0, 13)]


@pytest.mark.parametrize("dt,ydt", [(_U8, _U8), (_S8, _S8), (_S8, _U8)])
@pytest.mark.parametrize("shape,axis,opset", SOFTMAXES)
def test_qlinear_softmax(dt, ydt, shape, axis, opset):
    """The reference kernel's bytes (``ops_contrib.qlinear_softmax``): equal at 1 and 2
    threads, the type's extremes in the rows, an output scale that saturates some values."""
    x = _q(shape, dt, 0)
    x.reshape(-1)[:7] = np.iinfo(dt).max
    for xs, ys in ((0.08, 1 / 256), (0.5, 1 / 128), (0.01, 0.001)):
        _contrib_exact("QLinearSoftmax", [x, np.float32(xs), _q((), dt, 2), np.float32(ys),
                                          _q((), ydt, 3)], (1, 2, 3, 4),
                       {"axis": axis, "opset": opset})


# (x shape NHWC, kernel, strides, pads, ceil_mode): SPPF's 5x5 stride 1, a 3x3 stride 2 with
# and without padding, ceil_mode's partial last window, a 1-pixel map
MAXPOOLS = [((1, 20, 20, 32), (5, 5), (1, 1), (2, 2, 2, 2), 0),
            ((2, 9, 11, 7), (3, 3), (2, 2), (1, 1, 1, 1), 0),
            ((1, 8, 8, 16), (2, 2), (2, 2), (0, 0, 0, 0), 0),
            ((1, 10, 7, 3), (3, 3), (2, 2), (0, 0, 0, 0), 1),
            ((1, 1, 1, 5), (3, 3), (1, 1), (1, 1, 1, 1), 0)]


@pytest.mark.parametrize("dt", [_U8, _S8])
@pytest.mark.parametrize("shape,kernel,strides,pads,ceil", MAXPOOLS)
def test_max_pool_of_8_bit_maps(dt, shape, kernel, strides, pads, ceil):
    check_cpu("MaxPool", [_q(shape, dt, 0)],
              {"kernel_shape": list(kernel), "strides": list(strides), "pads": list(pads),
               "ceil_mode": ceil, "_layout": "NHWC"}, (), rtol=0)


def test_max_pool_of_8_bit_maps_refusals():
    x = _q((1, 8, 8, 4), _U8, 0)
    assert cpu_refuses("MaxPool", [x], {"kernel_shape": [3, 3], "dilations": [2, 2],
                                        "_layout": "NHWC"}, ())
    # NOTE: a window entirely in the padding (the reference's max of nothing)
    assert cpu_refuses("MaxPool", [x], {"kernel_shape": [2, 2], "pads": [2, 2, 0, 0],
                                        "_layout": "NHWC"}, ())


@pytest.mark.parametrize("threads", [1, 2])
def test_qdq_conv_may_run_by_winograd_within_one_lsb(threads, monkeypatch):
    """On the float32 path, a QLinearConv made from a QDQ float conv (``_qdq``) runs a 3x3
    stride-1 conv by Winograd F(4,3), as the float conv would: within 1 LSB of the exact
    QLinearConv (the reference), and equal on most values; the same node without ``_qdq``
    stays exact. (The integer GEMM is exact for both.)"""
    monkeypatch.setattr(qconv, "I8_CONV", False)
    from opcheck import make_node, run_cpu

    from sprat.backends.cpu import CpuBackend
    from sprat.backends.reference import evaluate
    from sprat.ir.shapes import infer
    from sprat.ir.tensorinfo import TensorInfo

    ins, consts = _qlinear_inputs(1, 24, 24, 64, 64, 3)
    ins[4] = np.full(64, 0.004, np.float32)  # outputs spread over the range, few saturated
    attrs = {**fused(), "kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    node, infos = make_node("QLinearConv", ins, {**attrs, "_qdq": True}, consts)
    want = evaluate(node, ins)[0]
    kernel = CpuBackend(threads).make_kernel(node, infos)
    kernel.prepare(infos, [TensorInfo(s, d) for s, d in infer(node, infos)])
    assert [k.algo for k in kernel.inner] == ["winograd"]
    got = run_cpu(node, infos, ins, threads)[0]
    diff = np.abs(got.astype(int) - want.astype(int))
    assert diff.max() <= 1 and (diff == 0).mean() > 0.99
    check_cpu("QLinearConv", ins, attrs, consts, rtol=0, threads=(threads,))


@pytest.mark.parametrize("threads", [1, 2])
def test_qdq_conv_on_the_int16_path_prefers_winograd(threads, monkeypatch):
    """On the int16 integer path (AVX2 without VNNI: ``qconv.WINOGRAD_FIRST``), a QDQ 3x3
    stride-1 conv whose map Winograd pays on takes the float32 path's Winograd F(4,3), within
    1 LSB of the exact conv and equal on most values; on a map too small for Winograd, and
    without ``_qdq``, the conv stays on the exact integer GEMM."""
    if not qconv.I8_CONV:
        pytest.skip("SPRAT_QCONV=float")
    from opcheck import run_cpu

    from sprat.backends.reference import evaluate

    monkeypatch.setattr(qconv, "WINOGRAD_FIRST", True)
    attrs = {**fused(), "kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    ins, consts = _qlinear_inputs(1, 24, 24, 64, 64, 3)
    ins[4] = np.full(64, 0.004, np.float32)  # outputs spread over the range, few saturated
    qdq = {**attrs, "_qdq": True}
    k = _kernel("QLinearConv", ins, qdq, consts, threads)
    assert not k.i8 and [i.algo for i in k.inner] == ["winograd"]
    from opcheck import make_node

    node, infos = make_node("QLinearConv", ins, qdq, consts)
    want = evaluate(node, ins)[0]
    got = run_cpu(node, infos, ins, threads)[0]
    diff = np.abs(got.astype(int) - want.astype(int))
    assert diff.max() <= 1 and (diff == 0).mean() > 0.99
    assert _kernel("QLinearConv", ins, attrs, consts, threads).i8
    small, sconsts = _qlinear_inputs(1, 3, 3, 64, 64, 3)
    k = _kernel("QLinearConv", small, {**qdq}, sconsts, threads)
    assert k.i8
    check_cpu("QLinearConv", small, qdq, sconsts, rtol=0, threads=(threads,))


def test_amx_work_items_split_rows_before_columns():
    """``quant._blocks`` on AMX at 2 slots: a map of 64 rows is two 32-row items with all the
    columns (each slot multiplies the rows of A it wrote), a large map keeps 64-row items, a
    16-row one splits columns; at 1 slot the rows stay in 64-row items. A conv of that 8x8
    shape equals the reference at 1 and 2 slots on every path this CPU has (the file's
    reruns)."""
    from sprat.backends.cpu.quant import _blocks

    assert _blocks(64, 64, 2, amx=True) == (32, 128)
    assert _blocks(1024, 16, 2, amx=True) == (64, 128)
    assert _blocks(16, 64, 2, amx=True)[1] < 64
    assert _blocks(64, 64, 1, amx=True)[0] == 64
    ins, consts = _qlinear_inputs(1, 8, 8, 64, 64, 3)
    check_cpu("QLinearConv", ins, {**fused(), "kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
              consts, rtol=0)


def test_integer_conv_from_two_threads_at_once():
    """Two callers run one prepared integer conv at 2 slots at the same time, each with its
    own input, outputs and workspace: each gets its own result (the items' rows of A go to a
    buffer per OS thread, ``sprat_i8_tl``, which two callers never share)."""
    import threading as th

    from opcheck import make_node

    from sprat.backends.base import Workspace
    from sprat.backends.cpu import CpuBackend, limits
    from sprat.backends.reference import evaluate
    from sprat.ir.shapes import infer
    from sprat.ir.tensorinfo import TensorInfo

    attrs = {**fused(), "kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    feeds = [_qlinear_inputs(1, 16, 16, 32, 64, 3, seed=s) for s in (1, 2)]
    node, infos = make_node("QLinearConv", feeds[0][0], attrs, feeds[0][1])
    kernel = CpuBackend(2).make_kernel(node, infos)
    shapes = infer(node, infos)
    kernel.prepare(infos, [TensorInfo(s, d) for s, d in shapes])
    # NOTE: the callers' inputs x differ; the weights and constants are the prepared node's
    xs = [feeds[0][0][0], feeds[1][0][0]]
    want = [evaluate(node, [x] + list(feeds[0][0][1:]))[0] for x in xs]
    errors = []

    def caller(i):
        try:
            ws = Workspace.allocate(kernel, 0)
            out = [np.empty(shapes[0][0], shapes[0][1])]
            ins = [xs[i]] + list(feeds[0][0][1:])
            with limits(2):
                for _ in range(200):
                    kernel.run(ins, out, ws)
                    if not np.array_equal(out[0], want[i]):
                        errors.append(i)
                        return
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [th.Thread(target=caller, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
