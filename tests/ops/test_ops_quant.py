"""Shape functions and reference kernels of the quantization ops against onnxruntime.

QuantizeLinear / DequantizeLinear (per-tensor, per-axis, blocked; uint8/int8/uint16/int16, with
and without zero points), DynamicQuantizeLinear, MatMulInteger (broadcasting, per-row/column zero
points), QLinearMatMul, ConvInteger and QLinearConv (groups, pads, strides, per-channel weights).
Integer outputs must match onnxruntime exactly; float outputs within the opcheck tolerance
(max abs err <= 1e-4 * max(1, max|ref|)). A few cases run the full pipeline (check_op).
"""

from __future__ import annotations

import numpy as np
import pytest
from opcheck import check_op, check_reference, randn

from sprat.errors import ShapeError
from sprat.ir.graph import Node
from sprat.ir.shapes import infer
from sprat.ir.tensorinfo import TensorInfo

RNG = np.random.default_rng(0)


def _q(shape, dtype, seed=0, half=False):
    """Random values over the whole range of ``dtype`` (``half``: within [-64, 63])."""
    info = np.iinfo(dtype)
    lo, hi = (-64, 63) if half else (info.min, int(info.max))
    rng = np.random.default_rng(seed)
    return rng.integers(lo, hi + 1, size=shape).astype(dtype)


# NOTE: onnxruntime's uint8 x int8 kernels (AVX2/AVX-512 vpmaddubsw) saturate pairwise sums of
# products to int16, so full-range int8 against full-range uint8 gives wrong sums there; in
# mixed-sign cases the int8 operand is kept within [-64, 63] (2 * 255 * 64 < 32768).


def _zp(shape, dtype, seed=1):
    """Zero points in the middle half of the range (realistic; keeps saturation partial)."""
    info = np.iinfo(dtype)
    lo, hi = info.min + (info.max - info.min) // 4, info.max - (info.max - info.min) // 4
    return np.random.default_rng(seed).integers(lo, hi, size=shape).astype(dtype)


def _scale(shape, seed=2):
    return np.random.default_rng(seed).uniform(0.01, 0.1, size=shape).astype(np.float32)


QTYPES = [np.uint8, np.int8, np.uint16, np.int16]
# (x shape, axis, block_size, scale shape)
FORMS = [
    ((3, 5, 7), 1, 0, ()),                 # per-tensor
    ((3, 5, 7), 1, 0, (5,)),               # per-axis
    ((4, 3, 5), -1, 0, (5,)),              # per-axis, last axis (negative)
    ((6, 7), 0, 4, (2, 7)),                # blocked, ragged last block
    ((3, 10), 1, 3, (3, 4)),               # blocked on the last axis
]


@pytest.mark.parametrize("dtype", QTYPES)
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("with_zp", [False, True])
def test_quantize_linear(dtype, form, with_zp):
    shape, axis, block, sshape = form
    x = randn(*shape, seed=3, scale=3.0)
    x.flat[:4] = [0.5, 1.5, -2.5, 2.5]           # ties on x / 1.0 when scale is 1
    inputs = {"x": x, "s": _scale(sshape)}
    if with_zp:
        inputs["zp"] = _zp(sshape, dtype)
    attrs = {"axis": axis}
    if block:
        attrs["block_size"] = block
    if not with_zp:
        from sprat.dtypes import to_code
        attrs["output_dtype"] = to_code(dtype)
    check_reference("QuantizeLinear", inputs, attrs, opset=21)


def test_quantize_linear_ties_and_saturation():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 300.0, -300.0, 127.5, -128.5], np.float32)
    for dt in (np.uint8, np.int8):
        check_reference("QuantizeLinear", {"x": x, "s": np.float32(1.0),
                                           "zp": np.array(0, dt)}, opset=21)
    # no zero point, no output_dtype: uint8
    check_reference("QuantizeLinear", {"x": x, "s": np.float32(0.5)}, opset=21)


@pytest.mark.parametrize("dtype", QTYPES + [np.int32])
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("with_zp", [False, True])
def test_dequantize_linear(dtype, form, with_zp):
    shape, axis, block, sshape = form
    if dtype == np.int32 and with_zp:
        pytest.skip("int32 DequantizeLinear takes no zero point (spec)")
    x = _q(shape, dtype, seed=4) if dtype != np.int32 else \
        RNG.integers(-1000, 1000, size=shape).astype(np.int32)
    inputs = {"x": x, "s": _scale(sshape)}
    if with_zp:
        inputs["zp"] = _zp(sshape, dtype)
    attrs = {"axis": axis}
    if block:
        attrs["block_size"] = block
    check_reference("DequantizeLinear", inputs, attrs, opset=21)


@pytest.mark.parametrize("shape", [(5,), (3, 7), (2, 3, 5)])
@pytest.mark.parametrize("kind", ["mixed", "positive", "negative", "zeros"])
def test_dynamic_quantize_linear(shape, kind):
    x = randn(*shape, seed=5, scale=4.0)
    if kind == "positive":
        x = np.abs(x) + 0.25
    elif kind == "negative":
        x = -np.abs(x) - 0.25
    elif kind == "zeros":
        x = np.zeros(shape, np.float32)
    check_reference("DynamicQuantizeLinear", {"x": x}, n_outputs=3, opset=11)


# (A shape, B shape)
MM_SHAPES = [((4, 5), (5, 3)), ((2, 4, 5), (5, 3)), ((3, 1, 4, 5), (2, 5, 7)), ((5,), (5, 3)),
             ((4, 5), (5,))]


@pytest.mark.parametrize("adt", [np.uint8, np.int8])
@pytest.mark.parametrize("bdt", [np.uint8, np.int8])
@pytest.mark.parametrize("shapes", MM_SHAPES)
@pytest.mark.parametrize("zps", ["none", "scalar", "vector"])
def test_matmul_integer(adt, bdt, shapes, zps):
    sa, sb = shapes
    mixed = adt != bdt
    inputs = {"A": _q(sa, adt, 6, half=mixed), "B": _q(sb, bdt, 7, half=mixed)}
    if zps == "scalar":
        inputs["azp"] = _zp((), adt)
        inputs["bzp"] = _zp((), bdt, 8)
    elif zps == "vector":
        if len(sa) < 2 or len(sb) < 2:
            pytest.skip("per-row/column zero points need 2-D operands")
        # onnxruntime takes a per-column b_zero_point but only a scalar a_zero_point
        inputs["azp"] = _zp((), adt)
        inputs["bzp"] = _zp(sb[:-2] + (1, sb[-1]) if len(sb) > 2 else (sb[-1],), bdt, 8)
    check_reference("MatMulInteger", inputs, opset=10)


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
@pytest.mark.parametrize("shapes", [((4, 5), (5, 3)), ((2, 3, 6), (6, 4)), ((2, 3, 6), (2, 6, 4))])
@pytest.mark.parametrize("per_col", [False, True])
def test_qlinear_matmul(dt, shapes, per_col):
    sa, sb = shapes
    n = sb[-1]
    col = sb[:-2] + (1, n)                    # onnxruntime's per-column form
    inputs = {"a": _q(sa, dt, 9), "as": np.float32(0.05), "azp": _zp((), dt),
              "b": _q(sb, dt, 10), "bs": _scale(col if per_col else ()),
              "bzp": _zp(col if per_col else (), dt, 11),
              "ys": np.float32(2.0), "yzp": _zp((), dt, 12)}
    check_reference("QLinearMatMul", inputs, opset=21)


# (x shape, w shape, attrs)
CONVS = [
    ((1, 3, 7, 6), (4, 3, 3, 3), {}),
    ((2, 4, 8, 7), (6, 2, 3, 2), {"group": 2, "pads": [1, 0, 2, 1], "strides": [2, 1]}),
    ((1, 4, 9, 9), (4, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1], "strides": [2, 2],
                                  "dilations": [2, 1]}),
    ((2, 2, 11), (3, 2, 4), {"auto_pad": "SAME_UPPER", "strides": [3]}),
]


@pytest.mark.parametrize("conv", CONVS)
@pytest.mark.parametrize("with_zp", [False, True])
def test_conv_integer(conv, with_zp):
    sx, sw, attrs = conv
    inputs = {"x": _q(sx, np.uint8, 13), "w": _q(sw, np.uint8, 14)}
    if with_zp:
        inputs["xzp"] = np.array(131, np.uint8)
        inputs["wzp"] = np.array(120, np.uint8)
    check_reference("ConvInteger", inputs, attrs, opset=10)


@pytest.mark.parametrize("conv", CONVS)
@pytest.mark.parametrize("dt", [np.uint8, np.int8])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_qlinear_conv(conv, dt, per_channel, bias):
    sx, sw, attrs = conv
    m = sw[0]
    wdt = np.int8 if per_channel else dt      # ORT: per-channel weights are int8 (symmetric)
    inputs = {"x": _q(sx, dt, 15), "xs": np.float32(0.02), "xzp": _zp((), dt, 16),
              "w": _q(sw, wdt, 17, half=wdt != dt), "ws": _scale((m,) if per_channel else (), 18),
              "wzp": np.zeros((m,) if per_channel else (), wdt),
              "ys": np.float32(0.5), "yzp": _zp((), dt, 19)}
    if bias:
        inputs["B"] = np.random.default_rng(20).integers(-5000, 5000, size=m).astype(np.int32)
    check_reference("QLinearConv", inputs, attrs, opset=10)


def test_unsupported_element_types_raise():
    x = TensorInfo((3,), np.dtype(np.float32))
    s = TensorInfo((), np.dtype(np.float32))
    for code, name in ((17, "float8e4m3fn"), (21, "uint4"), (22, "int4")):
        node = Node("QuantizeLinear", "q", [0, 1], [2], {"output_dtype": code})
        with pytest.raises(ShapeError, match=name):
            infer(node, [x, s])


def test_bad_scale_shape_raises():
    x = TensorInfo((3, 4), np.dtype(np.float32))
    node = Node("QuantizeLinear", "q", [0, 1], [2], {"axis": 1})
    with pytest.raises(ShapeError, match="per-axis"):
        infer(node, [x, TensorInfo((3,), np.dtype(np.float32))])


def test_matmul_integer_per_row_a_zero_point():
    """Per-row a_zero_point (spec; onnxruntime rejects it): against a direct NumPy formula."""
    from sprat.backends.reference.ops_quant import matmul_integer
    a, b = _q((4, 5), np.uint8, 25), _q((2, 5, 3), np.uint8, 26)
    azp, bzp = _zp((4,), np.uint8), _zp((3,), np.uint8, 27)
    want = np.matmul(a.astype(np.int64) - azp[:, None], b.astype(np.int64) - bzp)
    got = matmul_integer(a, b, azp, bzp)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


# ---- full pipeline ---------------------------------------------------------------------------

def test_pipeline_quantize_linear():
    check_op("QuantizeLinear", {"x": randn(2, 3, 5, seed=21, scale=3.0),
                                "s": _scale((3,)), "zp": _zp((3,), np.int8)},
             {"axis": 1}, opset=21, const_inputs=("s", "zp"))


def test_pipeline_dequantize_linear():
    check_op("DequantizeLinear", {"x": _q((2, 3, 5), np.uint8, 22), "s": np.float32(0.05),
                                  "zp": np.array(128, np.uint8)}, opset=21,
             const_inputs=("s", "zp"))


def test_pipeline_qlinear_conv():
    inputs = {"x": _q((1, 4, 6, 6), np.uint8, 23), "xs": np.float32(0.02),
              "xzp": np.array(128, np.uint8), "w": _q((4, 2, 3, 3), np.uint8, 24),
              "ws": np.float32(0.01), "wzp": np.array(127, np.uint8),
              "ys": np.float32(0.1), "yzp": np.array(120, np.uint8)}
    check_op("QLinearConv", inputs, {"group": 2, "pads": [1, 1, 1, 1], "strides": [2, 1]},
             opset=10, const_inputs=("xs", "xzp", "w", "ws", "wzp", "ys", "yzp"))
