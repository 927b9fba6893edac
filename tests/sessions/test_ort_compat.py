"""sprat.InferenceSession against onnxruntime's own API: the arguments a user ports over
(``sess_options``, ``providers``, ``provider_options``, run options) keep their meaning or raise;
none is dropped silently. Source: onnxruntime's ``InferenceSession`` / ``SessionOptions`` docs."""

import json
import logging

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import sprat


def _model() -> bytes:
    rng = np.random.default_rng(0)
    nodes = [
        h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        h.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["n"]),
        h.make_node("Relu", ["n"], ["y"]),
    ]
    inits = [
        h.make_tensor("w", T.FLOAT, [4, 3, 3, 3], rng.standard_normal(108).astype(np.float32)),
        h.make_tensor("s", T.FLOAT, [4], rng.random(4).astype(np.float32) + 0.5),
        h.make_tensor("bb", T.FLOAT, [4], rng.standard_normal(4).astype(np.float32)),
        h.make_tensor("m", T.FLOAT, [4], rng.standard_normal(4).astype(np.float32)),
        h.make_tensor("v", T.FLOAT, [4], rng.random(4).astype(np.float32) + 0.5),
    ]
    g = h.make_graph(nodes, "m", [h.make_tensor_value_info("x", T.FLOAT, ["N", 3, 8, 8])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["N", 4, 8, 8])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], producer_name="unit-test")
    m.ir_version = 8
    onnx.helper.set_model_props(m, {"author": "sprat tests"})
    return m.SerializeToString()


MODEL = _model()
X = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)


def _want():
    return ort.InferenceSession(MODEL, providers=["CPUExecutionProvider"]).run(None, {"x": X})


def test_session_options_threads_and_profiling(tmp_path, monkeypatch):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "prof")
    s = sprat.InferenceSession(MODEL, so, providers=["CPUExecutionProvider"])
    assert s.session.config.num_threads == 2 and s.session.config.profiling
    np.testing.assert_allclose(s.run(None, {"x": X})[0], _want()[0], rtol=1e-5, atol=1e-5)
    path = s.end_profiling()
    assert path.startswith(str(tmp_path / "prof_"))
    events = json.load(open(path))["traceEvents"]
    assert {e["cat"] for e in events} >= {"Conv"} and all(e["dur"] >= 0 for e in events)
    assert s.get_session_options() is so


def test_disable_all_converts_without_passes(tmp_path):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    plain = sprat.InferenceSession(MODEL, so)
    optimized = sprat.InferenceSession(MODEL)
    kinds = lambda s: {n.op_type for n in s.interpreter.graph.nodes}  # noqa: E731
    assert "BatchNormalization" in kinds(plain)  # not folded into the Conv
    assert "BatchNormalization" not in kinds(optimized)
    for s in (plain, optimized):
        np.testing.assert_allclose(s.run(None, {"x": X})[0], _want()[0], rtol=1e-4, atol=1e-4)


def test_optimized_model_filepath_writes_a_sprat_file(tmp_path):
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.sprat")
    sprat.InferenceSession(MODEL, so)
    again = sprat.InferenceSession(str(tmp_path / "opt.sprat"))
    np.testing.assert_allclose(again.run(None, {"x": X})[0], _want()[0], rtol=1e-5, atol=1e-5)


def test_providers(caplog):
    with caplog.at_level(logging.WARNING, logger="sprat"):
        s = sprat.InferenceSession(MODEL, providers=["CUDAExecutionProvider",
                                                     "CPUExecutionProvider"])
    assert "CUDAExecutionProvider" in caplog.text
    assert s.get_providers() == ["CPUExecutionProvider"]
    assert s.get_provider_options() == {"CPUExecutionProvider": {}}
    with pytest.raises(ValueError, match="list of provider names"):
        sprat.InferenceSession(MODEL, providers="CPUExecutionProvider")
    with pytest.raises(ValueError, match="takes no provider options"):
        sprat.InferenceSession(MODEL, providers=[("CPUExecutionProvider", {"use_arena": "0"})])
    with pytest.raises(ValueError, match="2 providers"):
        sprat.InferenceSession(MODEL, providers=["CPUExecutionProvider", "X"],
                               provider_options=[{}])


def test_unknown_keyword_raises():
    with pytest.raises(TypeError, match="disabled_optimizers"):
        sprat.InferenceSession(MODEL, disabled_optimizers=["ConvBNFusion"])


def test_run_and_metadata_like_onnxruntime():
    s, ref = sprat.InferenceSession(MODEL), ort.InferenceSession(MODEL)
    assert [(a.name, a.shape, a.type) for a in s.get_inputs()] == \
        [(a.name, a.shape, a.type) for a in ref.get_inputs()]
    assert [(a.name, a.shape, a.type) for a in s.get_outputs()] == \
        [(a.name, a.shape, a.type) for a in ref.get_outputs()]
    for names in (None, [], ["y"]):
        np.testing.assert_allclose(s.run(names, {"x": X})[0], ref.run(names, {"x": X})[0],
                                   rtol=1e-5, atol=1e-5)
    meta = s.get_modelmeta()
    assert meta.producer_name.startswith(ref.get_modelmeta().producer_name)
    assert meta.custom_metadata_map["author"] == "sprat tests"
    ro = ort.RunOptions()
    assert s.run(None, {"x": X}, ro)[0].shape == (2, 4, 8, 8)
    ro.terminate = True
    with pytest.raises(sprat.errors.InputError, match="terminate"):
        s.run(None, {"x": X}, ro)


def test_schedule_config_still_accepted_positionally():
    s = sprat.InferenceSession(MODEL, sprat.ScheduleConfig(num_threads=2))
    assert s.session.config.num_threads == 2
