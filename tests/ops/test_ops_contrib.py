"""onnxruntime's quantized contrib ops (``com.microsoft``, the QOperator format its quantizer
emits) on sprat's reference kernels, against onnxruntime's own kernels, and a QOperator model
made by onnxruntime's quantizer (issue 14, part 1, in part).

Tolerance: quantized outputs within 1 LSB of onnxruntime's (its kernels round in float32 or
through lookup tables; the spec's value can sit on a rounding boundary), float outputs to
1e-5 of their magnitude."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import sprat

MS = "com.microsoft"
rng = np.random.default_rng(0)
# NOTE: the contrib ops the tests below run through the whole pipeline (convert, plan, run)
# against onnxruntime; test_ops_backends.test_registry_covered counts them as covered
TESTED = frozenset({"QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu",
                    "QLinearGlobalAveragePool", "QLinearAveragePool", "QLinearConcat",
                    "QLinearSoftmax", "QGemm",
                    "MatMulIntegerToFloat", "DynamicQuantizeMatMul"})


def test_every_contrib_op_is_tested_here():
    from sprat.ir.shapes.contrib import CONTRIB_OPS

    assert TESTED == CONTRIB_OPS


def _model(node, inputs, out_type, consts):
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()]
    g = h.make_graph([node], "m",
                     [h.make_tensor_value_info(n, dt, s) for n, dt, s in inputs],
                     [h.make_tensor_value_info("y", out_type, None)], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid(MS, 1)])
    m.ir_version = 8
    return m.SerializeToString()


def _run_both(data, feeds):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    sess = sprat.InferenceSession(data)
    got = sess.run(None, feeds)[0]
    return got, want, sess


def _assert_lsb(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    else:
        diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
        assert diff.max() <= 1, diff.max()


U8, S8 = (T.UINT8, np.uint8), (T.INT8, np.int8)


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("qt", [U8, S8], ids=["u8", "s8"])
def test_qlinear_binary(op, qt):
    code, dt = qt
    info = np.iinfo(dt)
    a = rng.integers(info.min, info.max, (2, 3, 4, 5)).astype(dt)
    b = rng.integers(info.min, info.max, (1, 3, 1, 5)).astype(dt)
    consts = {"as": np.float32(0.05), "az": dt(3), "bs": np.float32(0.02), "bz": dt(-2 if dt is
              np.int8 else 130), "cs": np.float32(0.07), "cz": dt(5)}
    node = h.make_node(op, ["a", "as", "az", "b", "bs", "bz", "cs", "cz"], ["y"], domain=MS)
    data = _model(node, [("a", code, a.shape), ("b", code, b.shape)], code, consts)
    got, want, sess = _run_both(data, {"a": a, "b": b})
    _assert_lsb(got, want)


@pytest.mark.parametrize("op,attrs", [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.1})])
@pytest.mark.parametrize("qt", [U8, S8], ids=["u8", "s8"])
def test_qlinear_unary(op, attrs, qt):
    code, dt = qt
    info = np.iinfo(dt)
    x = np.arange(info.min, info.max + 1).astype(dt).reshape(16, 16)  # every value
    consts = {"xs": np.float32(0.06), "xz": dt(7), "ys": np.float32(0.004 if op ==
              "QLinearSigmoid" else 0.05), "yz": dt(info.min if op == "QLinearSigmoid" else 0)}
    node = h.make_node(op, ["x", "xs", "xz", "ys", "yz"], ["y"], domain=MS, **attrs)
    got, want, _ = _run_both(_model(node, [("x", code, x.shape)], code, consts), {"x": x})
    _assert_lsb(got, want)


@pytest.mark.parametrize("qt", [U8, S8], ids=["u8", "s8"])
@pytest.mark.parametrize("axis,opset,shape", [(-1, 13, (4, 6, 10)), (1, 13, (3, 7, 5)),
                                              (1, 12, (3, 4, 5))])
def test_qlinear_softmax(qt, axis, opset, shape):
    code, dt = qt
    info = np.iinfo(dt)
    x = rng.integers(info.min, info.max, shape).astype(dt)
    # NOTE: onnxruntime's kernel requires y_scale = 1/256 (u8) or 1/128 (s8) and that zero point
    consts = {"xs": np.float32(0.08), "xz": dt(5), "ys": np.float32(1 / 256 if dt is np.uint8
              else 1 / 128), "yz": dt(0 if dt is np.uint8 else -128)}
    node = h.make_node("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], ["y"], domain=MS,
                       axis=axis, opset=opset)
    got, want, _ = _run_both(_model(node, [("x", code, x.shape)], code, consts), {"x": x})
    _assert_lsb(got, want)


@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("dt", [np.uint8, np.int8])
def test_qlinear_global_average_pool(channels_last, dt):
    """Equal to onnxruntime's kernel (its integer form: int32 sums, one float32 scale), the
    channels-first map on sprat's NHWC kernel."""
    info = np.iinfo(dt)
    x = rng.integers(info.min, info.max + 1, (2, 8, 5, 7) if not channels_last
                     else (2, 5, 7, 8)).astype(dt)
    consts = {"xs": np.float32(0.03), "xz": dt(100), "ys": np.float32(0.02), "yz": dt(120)}
    node = h.make_node("QLinearGlobalAveragePool", ["x", "xs", "xz", "ys", "yz"], ["y"],
                       domain=MS, channels_last=channels_last)
    code = T.UINT8 if dt is np.uint8 else T.INT8
    got, want, _ = _run_both(_model(node, [("x", code, x.shape)], code, consts), {"x": x})
    np.testing.assert_array_equal(got, want)


def test_qlinear_average_pool():
    x = rng.integers(0, 255, (1, 4, 9, 9)).astype(np.uint8)
    consts = {"xs": np.float32(0.03), "xz": np.uint8(100), "ys": np.float32(0.02),
              "yz": np.uint8(120)}
    node = h.make_node("QLinearAveragePool", ["x", "xs", "xz", "ys", "yz"], ["y"], domain=MS,
                       kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    got, want, _ = _run_both(_model(node, [("x", T.UINT8, x.shape)], T.UINT8, consts), {"x": x})
    _assert_lsb(got, want)


def test_qlinear_concat():
    a = rng.integers(0, 255, (1, 3, 4, 4)).astype(np.uint8)
    b = rng.integers(0, 255, (1, 5, 4, 4)).astype(np.uint8)
    consts = {"ys": np.float32(0.05), "yz": np.uint8(128), "as": np.float32(0.02),
              "az": np.uint8(100), "bs": np.float32(0.08), "bz": np.uint8(140)}
    node = h.make_node("QLinearConcat", ["ys", "yz", "a", "as", "az", "b", "bs", "bz"], ["y"],
                       domain=MS, axis=1)
    data = _model(node, [("a", T.UINT8, a.shape), ("b", T.UINT8, b.shape)], T.UINT8, consts)
    got, want, _ = _run_both(data, {"a": a, "b": b})
    _assert_lsb(got, want)


@pytest.mark.parametrize("quantized_out", [False, True])
@pytest.mark.parametrize("transB", [0, 1])
def test_qgemm(quantized_out, transB):
    a = rng.integers(0, 255, (4, 16)).astype(np.uint8)
    # NOTE: 7-bit weights (what the quantizer's reduce_range gives): onnxruntime's u8 x s8
    # kernel on AVX2 (vpmaddubsw) saturates pair sums beyond int16, and then is not the spec
    w = rng.integers(-64, 64, (16, 10)).astype(np.int8)
    consts = {"w": w.T.copy() if transB else w, "as": np.float32(0.02), "az": np.uint8(120),
              "ws": np.float32(0.01), "wz": np.int8(0),
              "c": rng.integers(-500, 500, 10).astype(np.int32)}
    ins = ["a", "as", "az", "w", "ws", "wz", "c"]
    if quantized_out:
        consts.update(ys=np.float32(0.5), yz=np.uint8(128))
        ins += ["ys", "yz"]
    node = h.make_node("QGemm", ins, ["y"], domain=MS, transB=transB, alpha=1.0)
    data = _model(node, [("a", T.UINT8, a.shape)], T.UINT8 if quantized_out else T.FLOAT,
                  consts)
    got, want, _ = _run_both(data, {"a": a})
    _assert_lsb(got, want)


def test_matmul_integer_to_float_and_dynamic_quantize_matmul():
    a8 = rng.integers(0, 255, (3, 8)).astype(np.uint8)
    w = rng.integers(-64, 64, (8, 6)).astype(np.int8)  # NOTE: 7-bit, see test_qgemm
    consts = {"w": w, "as": np.float32(0.03), "ws": np.float32(0.01),
              "az": np.uint8(128), "wz": np.int8(0),
              "bias": rng.standard_normal(6).astype(np.float32)}
    node = h.make_node("MatMulIntegerToFloat", ["a", "w", "as", "ws", "az", "wz", "bias"],
                       ["y"], domain=MS)
    got, want, _ = _run_both(_model(node, [("a", T.UINT8, a8.shape)], T.FLOAT, consts),
                             {"a": a8})
    _assert_lsb(got, want)
    x = rng.standard_normal((3, 8)).astype(np.float32)
    node = h.make_node("DynamicQuantizeMatMul", ["x", "w", "ws", "wz", "bias"], ["y"], domain=MS)
    got, want, _ = _run_both(_model(node, [("x", T.FLOAT, x.shape)], T.FLOAT, consts), {"x": x})
    _assert_lsb(got, want)


def test_a_contrib_op_outside_its_domain_is_unsupported():
    node = h.make_node("QLinearSigmoid", ["x", "xs", "xz", "ys", "yz"], ["y"])  # ONNX domain
    data = _model(node, [("x", T.UINT8, (2, 4))], T.UINT8,
                  {"xs": np.float32(0.1), "xz": np.uint8(0), "ys": np.float32(1 / 256),
                   "yz": np.uint8(0)})
    with pytest.raises(sprat.errors.UnsupportedOpError, match="QLinearSigmoid"):
        sprat.convert(data)


def test_an_unknown_contrib_op_is_named():
    node = h.make_node("QLinearReduceMean", ["x", "xs", "xz", "ys", "yz"], ["y"], domain=MS,
                       axes=[1], keepdims=1)
    data = _model(node, [("x", T.UINT8, (2, 4))], T.UINT8,
                  {"xs": np.float32(0.1), "xz": np.uint8(0), "ys": np.float32(0.1),
                   "yz": np.uint8(0)})
    with pytest.raises(sprat.errors.UnsupportedOpError, match="com.microsoft.QLinearReduceMean"):
        sprat.convert(data)
