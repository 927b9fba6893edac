"""Hostile model bytes (issue 11, part 5): mutated ``.sprat``, ONNX and TFLite files load, run,
or raise a SpratError — never another exception, a crash or a hang. A fixed seed, bounded in
time (each batch runs in a child process with a timeout; see ``sprat.testing.fuzz``)."""

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import sprat
from sprat import zoo
from sprat.errors import ModelFormatError, ShapeError
from sprat.testing.fuzz import mutations, run_cases

SQUEEZENET = os.path.join(os.path.dirname(onnx.__file__),
                          "backend/test/data/light/light_squeezenet.onnx")


def _fuzz(data: bytes, n: int) -> dict:
    report = run_cases(mutations(data, n, seed=0), timeout=240)
    assert report["bugs"] == [], "\n".join(f"{w}: {e}" for w, e in report["bugs"])
    outcomes = report["outcomes"]
    assert sum(outcomes.values()) == n  # every case ran to an outcome
    # NOTE: both kinds really occur, so the run tested loading and running, not only rejection
    assert outcomes.get("ok", 0) > 0 and n - outcomes.get("ok", 0) > n // 4, outcomes
    return outcomes


def test_mutated_sprat_files():
    _fuzz(sprat.convert(SQUEEZENET), 300)


def test_mutated_onnx_files():
    with open(SQUEEZENET, "rb") as f:
        _fuzz(f.read(), 200)


def test_mutated_tflite_files():
    try:
        path = zoo.fetch("mediapipe_face_detection")
    except zoo.ZooError as e:  # pragma: no cover - only without the package index
        pytest.skip(f"zoo model unavailable: {e}")
    _fuzz(path.read_bytes(), 200)


def _model(nodes, inputs, outputs, inits=()) -> bytes:
    m = h.make_model(h.make_graph(nodes, "m", inputs, outputs, list(inits)),
                     opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def test_a_huge_implied_shape_is_a_shape_error_not_a_memory_error():
    # ConstantOfShape of 2**40 elements: not folded at convert time (never allocated there),
    # and the session says the arena would not fit instead of NumPy's MemoryError
    shape = h.make_tensor("shape", T.INT64, [2], [1 << 20, 1 << 20])
    data = _model([h.make_node("ConstantOfShape", ["shape"], ["c"]),
                   h.make_node("Add", ["c", "x"], ["y"])],
                  [h.make_tensor_value_info("x", T.FLOAT, [1])],
                  [h.make_tensor_value_info("y", T.FLOAT, None)], [shape])
    interp = sprat.Interpreter.from_buffer(sprat.convert(data))
    with pytest.raises(ShapeError, match="arena of .* bytes"):
        interp.create_session().run({"x": np.ones(1, np.float32)})


def test_a_declared_dim_beyond_any_real_model_is_a_format_error():
    data = sprat.convert(_model([h.make_node("Relu", ["x"], ["y"])],
                                [h.make_tensor_value_info("x", T.FLOAT, [7, 7])],
                                [h.make_tensor_value_info("y", T.FLOAT, [7, 7])]))
    big = (1 << 62).to_bytes(8, "little")
    seven = (7).to_bytes(8, "little")
    pos = data.find(seven + seven)  # the declared shape [7, 7] of an input or output
    assert pos > 0
    with pytest.raises(ModelFormatError, match="declares more than"):
        sprat.Interpreter.from_buffer(data[:pos] + big + big + data[pos + 16:])


def test_onnx_defects_are_format_errors():
    bad_init = h.make_tensor("w", T.FLOAT, [1], [1.0])
    bad_init.dims[:] = [9]  # 1 value for 9 declared elements
    data = _model([h.make_node("Add", ["x", "w"], ["y"])],
                  [h.make_tensor_value_info("x", T.FLOAT, [9])],
                  [h.make_tensor_value_info("y", T.FLOAT, [9])], [bad_init])
    with pytest.raises(ModelFormatError, match="initializer 'w'"):
        sprat.convert(data)
    dangling = _model([h.make_node("Relu", ["nowhere"], ["y"])],
                      [h.make_tensor_value_info("x", T.FLOAT, [2])],
                      [h.make_tensor_value_info("y", T.FLOAT, [2])])
    with pytest.raises(sprat.errors.ConvertError, match="'nowhere', which no input"):
        sprat.convert(dangling)
    stride0 = _model([h.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2],
                                  strides=[0, 1])],
                     [h.make_tensor_value_info("x", T.FLOAT, [1, 1, 4, 4])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)])
    with pytest.raises(sprat.errors.SpratError):
        sprat.InferenceSession(stride0).run(None, {"x": np.ones((1, 1, 4, 4), np.float32)})
