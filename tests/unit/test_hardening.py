"""Errors are never swallowed: a bug in a kernel's ``supports`` or ``prepare`` raises, naming the
node, instead of becoming a silently slower or wrong run."""

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import sprat
from sprat.backends.cpu import KERNELS, act_of
from sprat.backends.cpu.kernels import resolve
from sprat.errors import KernelError
from sprat.ir.graph import Node


def _relu_model() -> bytes:
    g = h.make_graph([h.make_node("Relu", ["x"], ["y"], name="the_relu")], "m",
                     [h.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                     [h.make_tensor_value_info("y", T.FLOAT, [2, 3])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def test_a_bug_in_supports_raises_naming_the_node(monkeypatch):
    interp = sprat.Interpreter.from_buffer(sprat.convert(_relu_model()))
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    assert np.array_equal(interp.create_session().run({"x": x})["y"], np.maximum(x, 0))

    def buggy(node, ins):
        return {}["missing"]  # a KeyError: a bug, not a deliberate "no"

    monkeypatch.setattr(resolve(KERNELS["Relu"]), "supports", staticmethod(buggy))
    # NOTE: a new Interpreter: a session of the first one would reuse its plan, made before
    fresh = sprat.Interpreter.from_buffer(sprat.convert(_relu_model()))
    with pytest.raises(KernelError, match=r"the_relu.*Relu.*supports\(\) failed: KeyError"):
        fresh.create_session().run({"x": x})


def test_a_deliberate_no_falls_back_to_the_reference_kernel(monkeypatch):
    interp = sprat.Interpreter.from_buffer(sprat.convert(_relu_model()))
    monkeypatch.setattr(resolve(KERNELS["Relu"]), "supports", staticmethod(lambda node, ins: False))
    sess = interp.create_session()
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    assert np.array_equal(sess.run({"x": x})["y"], np.maximum(x, 0))
    assert sess.info()["backends"]["the_relu"] == "reference"


def test_act_of_names_the_node_for_an_unknown_activation():
    node = Node("Conv", "conv7", [0, 1], [2], {"_activation": "Swoosh"})
    with pytest.raises(KernelError, match=r"conv7.*Conv.*unknown fused activation 'Swoosh'"):
        act_of(node)
