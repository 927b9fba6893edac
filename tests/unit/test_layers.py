"""Generic layers name no op (STYLE §5, issue 11 part 2): the runtime, the scheduler and the
memory planner hold no op-type string; what an op needs from them is a kernel or op property
(``Kernel.view_of``) or lives in a backend (control flow: ``sprat.backends.control_flow``)."""

import ast
import pathlib

import numpy as np
import pytest

import sprat
from sprat.backends.reference import load_ops
from sprat.ir.graph import Graph
from sprat.ir.shapes import SHAPES, register_families

ROOT = pathlib.Path(sprat.__file__).parent
GENERIC = ("runtime", "schedule", "memory")


def _op_names() -> set[str]:
    register_families()
    from sprat.ir.subgraphs import CONTROL_FLOW_OPS

    return set(SHAPES) | set(load_ops()) | set(CONTROL_FLOW_OPS)


def test_no_op_type_literal_in_generic_layers():
    ops = _op_names()
    assert {"Conv", "Reshape", "If", "Attention"} <= ops  # the set really holds op names
    found = []
    for layer in GENERIC:
        for path in sorted((ROOT / layer).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                        and node.value in ops:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
    assert found == []


def test_null_backend_is_a_schedule_config_choice():
    g = Graph()
    x = g.add_value("x", np.float32, (2, 3))
    y = g.add_value("y", np.float32, None)
    g.add_node("Relu", [x], [y])
    g.inputs, g.outputs = [x], [y]
    sess = sprat.Interpreter.from_graph(g).create_session(
        sprat.ScheduleConfig(backends=("null",), backup="null"))
    sess.resize({"x": (2, 3)})
    assert set(sess.info()["backends"].values()) == {"null"}


def test_view_ops_share_their_input_bytes_through_the_kernel_property():
    # Relu -> Reshape -> Relu: the Reshape's output is the first Relu's bytes (no copy)
    g = Graph()
    x = g.add_value("x", np.float32, (4, 6))
    a = g.add_value("a", np.float32, None)
    shape = g.add_const("shape", np.array([6, 4], np.int64))
    b = g.add_value("b", np.float32, None)
    y = g.add_value("y", np.float32, None)
    g.add_node("Relu", [x], [a])
    g.add_node("Reshape", [a, shape], [b])
    g.add_node("Relu", [b], [y])
    g.inputs, g.outputs = [x], [y]
    for backend in ("cpu", "reference"):
        sess = sprat.Interpreter.from_graph(g).create_session(
            sprat.ScheduleConfig(backends=(backend,)))
        seen = {}

        def after(info, ins, outs, seen=seen):
            seen[info.type] = seen.get(info.type, []) + [(ins[0].ctypes.data,
                                                          outs[0].ctypes.data)]

        xv = np.arange(-12, 12, dtype=np.float32).reshape(4, 6)
        out = sess.run_with_callback({"x": xv}, after=after)
        np.testing.assert_array_equal(out["y"], np.maximum(xv, 0).reshape(6, 4))
        (src, dst), = seen["Reshape"]
        assert src == dst, backend


def test_one_registry_of_stage_names_serves_the_api_and_the_cli():
    from sprat import converter, stages
    from sprat.passes import DEFAULT_PIPELINE
    from sprat.runtime.session import Session

    names = [s.name for s in stages.stages()]
    assert names == ["import", *(n for n, _ in DEFAULT_PIPELINE), "passes", "assigned", "planned"]
    assert converter.stages() == names[:len(DEFAULT_PIPELINE) + 1]
    assert Session.STAGES == tuple(names[-2:])
    assert [s.name for s in stages.stages(source=False)] == names[-3:]
    with pytest.raises(ValueError, match="needs an ONNX or TFLite source"):
        stages.find("import", source=False)
    with pytest.raises(ValueError, match="unknown stage 'nope'; stages: import, "):
        stages.find("nope")
