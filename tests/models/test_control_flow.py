"""Control flow (If, Loop, Scan) with subgraphs: import (captured outer values), the .sprat round
trip, nested prepared plans, against onnxruntime; and silero-vad (LSTM inside If) end to end."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from opcheck import DEFAULT_OPSET, ORT_MAX_IR_VERSION, assert_close, check_model, randn

import sprat

F32, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
N = helper.make_node


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "g", [_vi(n, t, s) for n, (t, s) in inputs.items()],
                          [_vi(n, t, s) for n, (t, s) in outputs.items()], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", DEFAULT_OPSET)])
    m.ir_version = ORT_MAX_IR_VERSION
    return m


def _graph(nodes, name, inputs, outputs, inits=()):
    return helper.make_graph(nodes, name, [_vi(n, t, s) for n, (t, s) in inputs.items()],
                             [_vi(n, t, s) for n, (t, s) in outputs.items()], list(inits))


def _session(model, **config):
    return sprat.Interpreter.from_buffer(sprat.convert(model)).create_session(
        sprat.ScheduleConfig(**config))


def _const(name, arr):
    return onnx.numpy_helper.from_array(np.asarray(arr), name)


# ---- If ----------------------------------------------------------------------------------------

def if_same_shapes():
    # branches read outer values x (a graph input) and w (an initializer): static If
    then_b = _graph([N("Add", ["x", "w"], ["t"])], "then", {}, {"t": (F32, None)})
    else_b = _graph([N("Mul", ["x", "w"], ["e"])], "else", {}, {"e": (F32, None)})
    m = _model([N("Relu", ["x0"], ["x"]),
                N("ReduceSum", ["x"], ["s"], keepdims=0),
                N("Greater", ["s", "zero"], ["c"]),
                N("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b),
                N("Sigmoid", ["y"], ["z"])],
               {"x0": (F32, ["A", 3])}, {"z": (F32, None)},
               [_const("w", randn(3, seed=1)), _const("zero", np.float32(1.0))])
    return m, {"x0": randn(4, 3)}, {"x0": randn(2, 3, seed=5) * 0.01}


def if_different_shapes():
    # then: 1-D sum over rows; else: the 2-D input itself: a dynamic If, a tail after it
    then_b = _graph([N("ReduceSum", ["x", "ax"], ["t"], keepdims=0)], "then", {},
                    {"t": (F32, None)}, [_const("ax", np.array([0], np.int64))])
    else_b = _graph([N("Identity", ["x"], ["e"])], "else", {}, {"e": (F32, None)})
    m = _model([N("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b),
                N("Relu", ["y"], ["z"]),
                N("Shape", ["z"], ["zs"])],
               {"x": (F32, [3, 4]), "c": (BOOL, [])}, {"z": (F32, None), "zs": (I64, None)})
    return m, {"x": randn(3, 4), "c": np.array(True)}, {"c": np.array(False)}


def if_nested_capture():
    # the inner If reads ``x`` from two scopes up and ``y`` from one up
    inner_then = _graph([N("Add", ["x", "y"], ["it"])], "it", {}, {"it": (F32, None)})
    inner_else = _graph([N("Sub", ["x", "y"], ["ie"])], "ie", {}, {"ie": (F32, None)})
    outer_then = _graph([N("Neg", ["x"], ["y"]),
                         N("If", ["c2"], ["o"], then_branch=inner_then, else_branch=inner_else)],
                        "ot", {}, {"o": (F32, None)})
    outer_else = _graph([N("Abs", ["x"], ["oe"])], "oe", {}, {"oe": (F32, None)})
    m = _model([N("If", ["c1"], ["z"], then_branch=outer_then, else_branch=outer_else)],
               {"x": (F32, [2, 3]), "c1": (BOOL, []), "c2": (BOOL, [])}, {"z": (F32, [2, 3])})
    return m, {"x": randn(2, 3), "c1": np.array(True), "c2": np.array(False)}, \
        {"c2": np.array(True)}


@pytest.mark.parametrize("build", [if_same_shapes, if_different_shapes, if_nested_capture],
                         ids=lambda f: f.__name__)
def test_if(build):
    model, feeds, feeds2 = build()
    check_model(model, feeds, resize_feeds=feeds2)


def test_if_captures_are_explicit_inputs_and_round_trip():
    from sprat.format.reader import read_model
    from sprat.ir.subgraphs import captures, subgraphs

    model, _, _ = if_nested_capture()
    g = read_model(sprat.convert(model))
    (node,) = [n for n in g.nodes if n.op_type == "If"]
    # cond, then the captured x (c2 too: the inner If's condition is read in the then branch)
    assert captures(node) == len(node.inputs) - 1 == 2
    names = sorted(g.values[i].name for i in node.inputs[1:])
    assert names == ["c2", "x"]
    for sub in subgraphs(node):
        assert len(sub.inputs) == 2
    inner = next(n for n in node.attrs["then_branch"].nodes if n.op_type == "If")
    assert captures(inner) == 2  # x and y


def test_constant_folding_leaves_control_flow_alone():
    # cond and the captured value are constants: fold_constants must not try to fold the If
    then_b = _graph([N("Add", ["w", "w"], ["t"])], "then", {}, {"t": (F32, None)})
    else_b = _graph([N("Neg", ["w"], ["e"])], "else", {}, {"e": (F32, None)})
    m = _model([N("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b),
                N("Add", ["x", "y"], ["z"])],
               {"x": (F32, [3])}, {"z": (F32, [3])},
               [_const("w", randn(3)), _const("c", np.array(False))])
    check_model(m, {"x": randn(3, seed=2)})


def test_if_decided_by_shapes_runs_inline():
    # PyTorch's exporter writes ``If(Shape(x)[0] == 1, Squeeze(x), x)``: the plan for known
    # shapes runs the taken branch's nodes as its own steps (no nested plan, no If kernel),
    # and a resize to other shapes takes the other branch
    then_b = _graph([N("Squeeze", ["x", "ax"], ["t"])], "then", {}, {"t": (F32, None)},
                    [_const("ax", np.array([0], np.int64))])
    else_b = _graph([N("Identity", ["x"], ["e"])], "else", {}, {"e": (F32, None)})
    m = _model([N("Shape", ["x"], ["s"]),
                N("Gather", ["s", "zero"], ["d"]),
                N("Equal", ["d", "one"], ["c"]),
                N("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b),
                N("Relu", ["y"], ["z"])],
               {"x": (F32, ["A", 3])}, {"z": (F32, None)},
               [_const("zero", np.array(0, np.int64)), _const("one", np.array(1, np.int64))])
    feeds, feeds2 = {"x": randn(1, 3)}, {"x": randn(4, 3, seed=3)}
    check_model(m, feeds, resize_feeds=feeds2)
    sess = _session(m)
    for f, shape in ((feeds, (3,)), (feeds2, (4, 3))):
        z = sess.run(f)["z"]
        assert z.shape == shape
        np.testing.assert_array_equal(z, np.maximum(f["x"].reshape(shape), 0))
        ops = [s.node.op_type for s in sess.plan.steps]
        assert "If" not in ops and "Relu" in ops, ops


# ---- Loop --------------------------------------------------------------------------------------

def _loop_body(with_scan=True):
    # acc_out = acc + x * i ; cond_out = i < 5 (ignored when the cond input is absent); scan: acc
    nodes = [N("Cast", ["i"], ["fi"], to=F32),
             N("Mul", ["x", "fi"], ["xi"]),
             N("Add", ["acc", "xi"], ["acc_out"]),
             N("Less", ["i", "five"], ["cond_out"])]
    outs = {"cond_out": (BOOL, []), "acc_out": (F32, None)}
    if with_scan:
        nodes.append(N("ReduceSum", ["acc_out"], ["s"], keepdims=0))
        outs["s"] = (F32, [])
    return _graph(nodes, "body", {"i": (I64, []), "cond": (BOOL, []), "acc": (F32, None)}, outs,
                  [_const("five", np.int64(5))])


def loop_trip_count_from_input():
    m = _model([N("Relu", ["x0"], ["x"]),
                N("Loop", ["M", "", "a0"], ["acc", "sums"], body=_loop_body()),
                N("Mul", ["sums", "two"], ["y"])],
               {"x0": (F32, [2, 3]), "M": (I64, []), "a0": (F32, [2, 3])},
               {"acc": (F32, None), "y": (F32, None)}, [_const("two", np.float32(2))])
    return m, {"x0": randn(2, 3), "M": np.array(4, np.int64), "a0": randn(2, 3, seed=3)}, \
        {"M": np.array(7, np.int64)}


def loop_while_cond():
    # M absent: runs while the body's cond_out holds (i < 5: six iterations)
    m = _model([N("Loop", ["", "c", "a0"], ["acc", "sums"], body=_loop_body())],
               {"x": (F32, [4]), "c": (BOOL, []), "a0": (F32, [4])},
               {"acc": (F32, None), "sums": (F32, None)})
    return m, {"x": randn(4), "c": np.array(True), "a0": randn(4, seed=1)}, \
        {"c": np.array(False)}


def loop_zero_trips():
    m = _model([N("Loop", ["M", "", "a0"], ["acc", "sums"], body=_loop_body())],
               {"x": (F32, [3]), "M": (I64, []), "a0": (F32, [3])},
               {"acc": (F32, None), "sums": (F32, None)})
    return m, {"x": randn(3), "M": np.array(0, np.int64), "a0": randn(3, seed=1)}, None


@pytest.mark.parametrize("build", [loop_trip_count_from_input, loop_while_cond, loop_zero_trips],
                         ids=lambda f: f.__name__)
def test_loop(build):
    model, feeds, feeds2 = build()
    check_model(model, feeds, resize_feeds=feeds2)


def test_loop_body_is_planned_once():
    """Loop-carried values keep their shape: the body is prepared once, for every iteration and
    every run (no per-iteration planning)."""
    m = _model([N("Loop", ["M", "", "a0"], ["acc"], body=_loop_body(with_scan=False))],
               {"x": (F32, [2, 3]), "M": (I64, []), "a0": (F32, [2, 3])}, {"acc": (F32, None)})
    sess = _session(m)
    feeds = {"x": randn(2, 3), "M": np.array(5, np.int64), "a0": randn(2, 3, seed=1)}
    want = feeds["a0"] + feeds["x"] * np.float32(np.arange(5).sum())
    for _ in range(3):
        assert_close(sess.run(feeds)["acc"], want)
    (step,) = [s for s in sess.plan.steps if s.node.op_type == "Loop"]
    assert len(step.kernel.body.plans) == 1
    assert sess.plan.dynamic is None  # carried shapes are static: the Loop is a plain step


# ---- Scan --------------------------------------------------------------------------------------

def scan_axes_directions():
    # running sum over axis 1 of x, reversed; the second scan input forward over axis 0
    body = _graph([N("Add", ["s", "a"], ["s_out"]),
                   N("Mul", ["s_out", "b"], ["o1"]),
                   N("Add", ["a", "w"], ["o2"])], "body",
                  {"s": (F32, [2]), "a": (F32, [2]), "b": (F32, [2])},
                  {"s_out": (F32, [2]), "o1": (F32, [2]), "o2": (F32, [2])})
    m = _model([N("Scan", ["s0", "x", "z"], ["s", "y1", "y2"], body=body, num_scan_inputs=2,
                  scan_input_axes=[1, 0], scan_input_directions=[1, 0],
                  scan_output_axes=[0, -1], scan_output_directions=[0, 1])],
               {"s0": (F32, [2]), "x": (F32, [2, "T"]), "z": (F32, ["T", 2]), "w": (F32, [2])},
               {"s": (F32, None), "y1": (F32, None), "y2": (F32, None)})
    return m, {"s0": randn(2), "x": randn(2, 5, seed=1), "z": randn(5, 2, seed=2),
               "w": randn(2, seed=3)}, {"x": randn(2, 3, seed=4), "z": randn(3, 2, seed=5)}


def test_scan():
    model, feeds, feeds2 = scan_axes_directions()
    check_model(model, feeds, resize_feeds=feeds2)


# ---- a real model: silero-vad (LSTM inside If, the sample rate picks the branch) ---------------

@pytest.mark.parametrize("key,rates", [("silero_vad", [(16000, 512), (8000, 256)]),
                                       ("silero_vad_16k_op15", [(16000, 512)])])
def test_silero_vad_streams_like_onnxruntime(key, rates):
    """Chunks run one after another, the state fed forward, as the VAD is used; outputs and
    states compared with onnxruntime at every chunk (PREAMBLE tolerance)."""
    import onnxruntime as ort

    from sprat import zoo

    path = zoo.fetch(key)
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    sess = _session(onnx.load(path))
    rng = np.random.default_rng(0)
    for sr, n in rates:
        state = np.zeros((2, 1, 128), np.float32)
        ref_state = state.copy()
        for chunk in range(4):
            x = (rng.standard_normal((1, n)) * 0.3).astype(np.float32)
            srv = np.array(sr, np.int64)
            got = sess.run({"input": x, "state": state, "sr": srv})
            want = ref.run(None, {"input": x, "state": ref_state, "sr": srv})
            assert_close(got["output"], want[0], what=f"{key} {sr} Hz chunk {chunk} output")
            assert_close(got["stateN"], want[1], what=f"{key} {sr} Hz chunk {chunk} state")
            state, ref_state = got["stateN"], want[1]
