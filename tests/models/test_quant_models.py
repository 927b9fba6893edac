"""Quantized models made by onnxruntime's own quantizer, as a user makes them, run in sprat with
the spec's results (issue 14): the oracle is onnxruntime with graph optimizations disabled.

- QOperator MobileNetV2 (QLinearConv, com.microsoft QLinearAdd and QGemm): every quantized
  intermediate equal (``sprat.check``), the output bit for bit. Its QLinearConvs run on the cpu
  kernels (``cpu/qconv.py``), integer-exact through float32 sums kept within 2^24.
- QDQ ResNet-18 (per-channel s8 weights, u8 activations): ``passes.fuse_qdq`` makes each
  DQ -> Conv -> Q one QLinearConv. That is not the QDQ graph's arithmetic (exact integer sum
  requantised with ``x_scale * w_scale / y_scale`` against float32 sums of dequantized products
  divided by ``y_scale``), so a quantized value may be 1 LSB off the spec near a rounding
  boundary: asserted per conv, on the spec's own inputs."""

import collections

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from opcheck import qdq_convs_within_one_lsb

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
    return _qoperator(tmp_path_factory, "mobilenet_v2", 0.3)


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
    # NOTE: every quantized intermediate sprat computes is compared, not the output only (the
    # 51 conv outputs each read by a lookup are fused away: ``passes.fuse_qdq.fuse_conv_lookup``)
    assert len(report.nodes) > 70


@pytest.fixture(scope="module")
def dynamic_minilm(tmp_path_factory):
    """MiniLM-L6 (``sprat.testing.families``) through ``quantize_dynamic`` with QInt8 weights
    (DynamicQuantizeLinear + MatMulInteger + Cast/Mul), as issue 14 measures it."""
    model, feeds = build("bert_minilm")
    d = tmp_path_factory.mktemp("quant")
    src, dst = d / "minilm.onnx", d / "minilm.dyn.onnx"
    onnx.save(model, src)
    quantization.quantize_dynamic(str(src), str(dst), weight_type=quantization.QuantType.QInt8)
    return dst, feeds


def _exact_matmul_integer(m: onnx.ModelProto) -> None:
    """Rewrite each MatMulInteger of ``m`` as its spec defines it, ``(A - a_zero_point) @
    (B - b_zero_point)`` in int32, under the same output name. NOTE: onnxruntime's own
    MatMulInteger saturates u8 x s8 pair sums on CPUs without VNNI (vpmaddubsw), graph
    optimizations off or not, so there it is not the spec's oracle; its int32 MatMul is."""
    nodes = []
    for n in m.graph.node:
        if n.op_type != "MatMulInteger":
            nodes.append(n)
            continue
        terms = []
        for k, name in enumerate(n.input[:2]):
            zp = n.input[k + 2] if len(n.input) > k + 2 else ""
            t = f"{n.output[0]}__{k}"
            nodes.append(onnx.helper.make_node("Cast", [name], [t], to=onnx.TensorProto.INT32))
            if zp:
                nodes.append(onnx.helper.make_node("Cast", [zp], [t + "z"],
                                                   to=onnx.TensorProto.INT32))
                nodes.append(onnx.helper.make_node("Sub", [t, t + "z"], [t + "s"]))
                t += "s"
            terms.append(t)
        nodes.append(onnx.helper.make_node("MatMul", terms, [n.output[0]], name=n.name))
    del m.graph.node[:]
    m.graph.node.extend(nodes)


def _spec_values(path, feeds):
    """Every value of the ONNX model as onnxruntime computes it with graph optimizations
    disabled (the spec's oracle), its MatMulIntegers computed by their definition."""
    m = onnx.load(path)
    _exact_matmul_integer(m)
    names = [o for n in m.graph.node for o in n.output if o]
    del m.graph.output[:]
    m.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return dict(zip(names, sess.run(None, feeds)))


@pytest.mark.parametrize("threads", [1, 2])
def test_dynamic_minilm_integer_kernels_equal_the_spec(dynamic_minilm, threads):
    """Each DynamicQuantizeLinear and each fused MatMulIntegerToFloat (MatMulInteger + Cast +
    Mul + bias Add, ``passes/fuse_quant.py``) of the converted model, run by its cpu kernel on
    the spec's inputs (``_spec_values``), gives the spec's outputs bit for bit."""
    from sprat.backends.base import Workspace
    from sprat.backends.cpu import CpuBackend, limits
    from sprat.converter import convert_graph
    from sprat.ir.shapes import infer
    from sprat.ir.tensorinfo import TensorInfo

    path, feeds = dynamic_minilm
    spec = _spec_values(path, feeds)
    # NOTE: up to the integer fusion: later the FFN's Gelu joins MatMulIntegerToFloat as its
    # fused activation (float math, compared on the whole model below)
    g = convert_graph(str(path), until="fuse_integer_matmul")
    backend = CpuBackend(threads)
    seen = collections.Counter()
    for node in g.nodes:
        if node.op_type not in ("MatMulIntegerToFloat", "DynamicQuantizeLinear"):
            continue
        vals = [None if i < 0 else g.values[i] for i in node.inputs]
        ins = [None if v is None else v.data if v.data is not None else spec[v.name]
               for v in vals]
        infos = [None if a is None else TensorInfo(a.shape, a.dtype, v.data)
                 for a, v in zip(ins, vals)]
        assert backend.has_fast_kernel(node, infos), node.name
        kernel = backend.make_kernel(node, infos)
        shapes = infer(node, infos)
        kernel.prepare(infos, [TensorInfo(s, d) for s, d in shapes])
        outs = [np.empty(s, d) for s, d in shapes]
        with limits(threads):
            kernel.run(ins, outs, Workspace.allocate(kernel))
        for o, got in zip(node.outputs, outs):
            np.testing.assert_array_equal(got, spec[g.values[o].name], err_msg=node.name)
        seen[node.op_type] += 1
    assert seen == {"MatMulIntegerToFloat": 36, "DynamicQuantizeLinear": 24}


def test_dynamic_minilm_runs_on_the_integer_kernels(dynamic_minilm):
    """The whole model on the cpu backend's integer kernels. Its output differs from the
    spec's as much as onnxruntime's own fast path does, and for the same reason: the float ops
    between the quantizations (LayerNormalization, Softmax, Erf) differ from onnxruntime's by
    an ulp, and each of the 24 DynamicQuantizeLinear turns a value that lands on the other side
    of a rounding boundary into a whole quantization step (measured: sprat 2.9 %, onnxruntime's
    fast path 2.6 % of max |output|; the integer ops themselves are exact, test above; with
    those three float ops computed by onnxruntime, sprat's reference path equals the spec bit
    for bit)."""
    path, feeds = dynamic_minilm
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(
        None, feeds)[0]
    fast = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    scale = float(np.abs(want).max())
    ort_err = float(np.abs(fast - want).max()) / scale
    for threads in (1, 2):
        sess = sprat.InferenceSession(str(path), sprat.ScheduleConfig(num_threads=threads))
        got = sess.run(None, feeds)[0]
        backends = sess.session.info()["backends"]
        ops = {n.name: n.op_type for n in sess.interpreter.graph.nodes}
        fused = [k for k, t in ops.items()
                 if t in ("MatMulIntegerToFloat", "DynamicQuantizeLinear")]
        assert len(fused) == 60 and all(backends[k] == "cpu" for k in fused)
        assert float(np.abs(got - want).max()) / scale <= 2 * ort_err


def _ort(path_or_bytes, feeds, optimized: bool):
    so = ort.SessionOptions()
    if not optimized:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(path_or_bytes, so, providers=["CPUExecutionProvider"]).run(
        None, feeds)


@pytest.fixture(scope="module")
def qdq_resnet18(tmp_path_factory):
    """ResNet-18 as issue 14 measures it: ``quantize_static``, QDQ, per-channel s8 weights,
    u8 activations (no reduce_range)."""
    model, feeds = build("resnet18", size=0.5)
    d = tmp_path_factory.mktemp("quant")
    src, dst = d / "resnet18.onnx", d / "resnet18.qdq.onnx"
    onnx.save(model, src)
    quantization.quantize_static(str(src), str(dst), _Calibration(feeds["x"].shape),
                                 quant_format=quantization.QuantFormat.QDQ, per_channel=True,
                                 activation_type=quantization.QuantType.QUInt8,
                                 weight_type=quantization.QuantType.QInt8)
    return dst, feeds


def test_qoperator_mobilenet_v2_convs_run_on_the_cpu_kernels(qoperator_mobilenet):
    path, feeds = qoperator_mobilenet
    sess = sprat.InferenceSession(str(path))
    sess.run(None, feeds)
    fast = [k for k, v in sess.session.info()["backends"].items() if k.endswith("_quant")
            and k.startswith("conv") and v == "cpu"]
    assert len(fast) == 52


def test_qdq_resnet18_convs_are_fused_and_within_one_lsb_of_the_spec(qdq_resnet18):
    """Every DQ -> Conv -> Q of the QDQ ResNet-18 becomes one QLinearConv on the cpu kernels.
    Fed the spec's own quantized input (onnxruntime with graph optimizations off), each fused
    conv's quantized output is within 1 LSB of the spec's (``opcheck.qdq_convs_within_one_lsb``:
    the fused op requantises the exact integer sum with ``x_scale * w_scale / y_scale`` where
    the QDQ graph sums dequantized float32 products and divides by ``y_scale``; the two
    roundings part only near a .5 boundary). Through the whole net those 1-LSB steps propagate
    (measured: up to 6 LSB on later intermediates at 224x224), so the comparison is per conv."""
    path, feeds = qdq_resnet18
    steps = qdq_convs_within_one_lsb(path, feeds)
    convs = [n for n in onnx.load(path).graph.node if n.op_type == "Conv"]
    assert sum(steps.values()) == len(convs) == 20
    sess = sprat.InferenceSession(str(path))
    got = sess.run(None, feeds)[0]
    backends = sess.session.info()["backends"]
    assert all(backends[c.name] == "cpu" for c in convs), backends
    want = _ort(str(path), feeds, optimized=False)[0]
    ort_fast = _ort(str(path), feeds, optimized=True)[0]
    scale = np.abs(want).max()
    # NOTE: reported beside onnxruntime's own fast path (its fused int8 kernels), not asserted
    print(f"QDQ ResNet-18: per conv {dict(steps)}; output max |sprat - spec| / max|spec| = "
          f"{np.abs(got - want).max() / scale:.2e}, onnxruntime's fast path "
          f"{np.abs(ort_fast - want).max() / scale:.2e}")


def _qoperator(tmp_path_factory, name, size):
    """Family ``name`` through ``quantize_static`` in the QOperator format, without
    onnxruntime's pre-processing: its BatchNormalizations stay (DequantizeLinear ->
    BatchNormalization -> QuantizeLinear), its SiLUs are com.microsoft QLinearSigmoid +
    QLinearMul."""
    model, feeds = build(name, size=size)
    d = tmp_path_factory.mktemp("quant")
    src, dst = d / f"{name}.onnx", d / f"{name}.qop.onnx"
    onnx.save(model, src)
    # NOTE: reduce_range (7-bit weights), as onnxruntime advises on CPUs without VNNI: its
    # u8 x s8 kernels would otherwise saturate and stop being the spec's oracle
    quantization.quantize_static(str(src), str(dst), _Calibration(feeds["x"].shape),
                                 quant_format=quantization.QuantFormat.QOperator,
                                 per_channel=False, reduce_range=True,
                                 weight_type=quantization.QuantType.QInt8)
    return dst, feeds


def _all_cpu_and_equal_to_the_unfused_graph(path, feeds):
    """Every node on the cpu backend, the output at 1 and 2 threads equal to the unoptimized
    graph's on the reference kernels; returns that output."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ref = sprat.InferenceSession(str(path), sess_options=so).run(None, feeds)[0]
    for threads in (1, 2):
        sess = sprat.InferenceSession(str(path), sprat.ScheduleConfig(num_threads=threads))
        got = sess.run(None, feeds)[0]
        backends = sess.session.info()["backends"]
        assert set(backends.values()) == {"cpu"}, {k: v for k, v in backends.items()
                                                    if v != "cpu"}
        np.testing.assert_array_equal(got, ref)
    return ref


def test_qoperator_efficientnet_b0_runs_on_the_cpu_kernels_and_equals_the_spec(
        tmp_path_factory):
    """EfficientNet-B0 in the QOperator format: 65 QLinearSigmoid + QLinearMul SiLUs (one table
    each: ``passes.fuse_qdq.lookup_contrib``), squeeze-excite QLinearMul broadcast over the map
    and QLinearGlobalAveragePool (channels-last kernels): equal to onnxruntime's output."""
    path, feeds = _qoperator(tmp_path_factory, "efficientnet_b0", 0.3)
    ops = collections.Counter((n.domain, n.op_type) for n in onnx.load(path).graph.node)
    assert ops[("com.microsoft", "QLinearSigmoid")] == 65
    assert ops[("com.microsoft", "QLinearGlobalAveragePool")] == 17
    got = _all_cpu_and_equal_to_the_unfused_graph(path, feeds)
    np.testing.assert_array_equal(got, _ort(str(path), feeds, optimized=False)[0])


def test_qoperator_yolo_neck_runs_on_the_cpu_kernels_and_each_op_within_one_lsb(
        tmp_path_factory):
    """A YOLO C2f/SPPF neck in the QOperator format: QLinearConcat (a table per input that
    needs requantising, then a byte Concat), QLinearSigmoid, 8-bit MaxPool and nearest Resize
    on the cpu kernels. Against onnxruntime: its QLinearAdd kernel rounds in its own float32
    arithmetic, so a value may differ by 1 LSB where the spec's sum sits at a rounding
    boundary; the first op that differs differs by at most 1 LSB (``sprat.check``, each
    intermediate of the same run)."""
    path, feeds = _qoperator(tmp_path_factory, "yolo_c2f_neck", 0.3)
    ops = collections.Counter((n.domain, n.op_type) for n in onnx.load(path).graph.node)
    assert ops[("com.microsoft", "QLinearConcat")] and ops[("", "MaxPool")] and ops[("", "Resize")]
    _all_cpu_and_equal_to_the_unfused_graph(path, feeds)
    report = check(path, feeds, rtol=0.0, atol=0.0)
    first = report.first_divergence
    if first is not None:
        assert first.op_type == "QLinearAdd" and first.max_abs <= 1, report.summary()
