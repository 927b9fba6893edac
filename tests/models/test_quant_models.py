"""Quantized models made by onnxruntime's own quantizer, as a user makes them, run in sprat with
the spec's results (issue 14, part 1, in part): a QOperator MobileNetV2 (QLinearConv,
com.microsoft QLinearAdd and QGemm) equals onnxruntime with graph optimizations disabled: every
quantized intermediate equal (``sprat.check``), the output bit for bit."""

import collections

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import sprat
from sprat.check import check
from sprat.testing.families import build

quantization = pytest.importorskip("onnxruntime.quantization")


class _Calibration(quantization.CalibrationDataReader):
    def __init__(self, shape, n=4):
        rng = np.random.default_rng(0)
        self.batches = iter([{"x": rng.standard_normal(shape).astype(np.float32)}
                             for _ in range(n)])

    def get_next(self):
        return next(self.batches, None)


@pytest.fixture(scope="module")
def qoperator_mobilenet(tmp_path_factory):
    model, feeds = build("mobilenet_v2", size=0.3)
    d = tmp_path_factory.mktemp("quant")
    src, dst = d / "mobilenet_v2.onnx", d / "mobilenet_v2.qop.onnx"
    onnx.save(model, src)
    # NOTE: reduce_range (7-bit weights), as onnxruntime advises on CPUs without VNNI: its
    # u8 x s8 kernels would otherwise saturate and stop being the spec's oracle
    quantization.quantize_static(str(src), str(dst), _Calibration(feeds["x"].shape),
                                 quant_format=quantization.QuantFormat.QOperator,
                                 per_channel=False, reduce_range=True,
                                 weight_type=quantization.QuantType.QInt8)
    return dst, feeds


def test_qoperator_mobilenet_v2_equals_the_spec(qoperator_mobilenet):
    path, feeds = qoperator_mobilenet
    ops = collections.Counter((n.domain, n.op_type) for n in onnx.load(path).graph.node)
    assert ops[("com.microsoft", "QLinearAdd")] and ops[("com.microsoft", "QGemm")]
    assert ops[("", "QLinearConv")] > 10
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(
        None, feeds)[0]
    for threads in (1, 2):
        got = sprat.InferenceSession(str(path), sprat.ScheduleConfig(num_threads=threads)).run(
            None, feeds)[0]
        np.testing.assert_array_equal(got, want)
    # NOTE: integer values must be equal (check compares them exactly); the float ones between
    # DequantizeLinear and QuantizeLinear (BatchNormalization, Clip) to a few ulps
    report = check(path, feeds, rtol=1e-6, atol=0.0)
    assert report.ok, report.summary(verbose=True)
    assert len(report.nodes) > 100  # every quantized intermediate compared, not the output only
