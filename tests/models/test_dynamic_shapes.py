"""Data-dependent shapes on intermediates: the session plans a static prefix, runs the dynamic
node (it allocates its outputs), and plans the rest when the shapes are known — cached by those
shapes, so a second run with the same shapes plans nothing."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from opcheck import DEFAULT_OPSET, ORT_MAX_IR_VERSION, assert_close, check_model, randn

import sprat
from sprat.errors import InputError

F32, I64 = TensorProto.FLOAT, TensorProto.INT64
N = helper.make_node


def _model(nodes, inputs, outputs, inits=()):
    vi = helper.make_tensor_value_info
    g = helper.make_graph(nodes, "g", [vi(n, t, s) for n, (t, s) in inputs.items()],
                          [vi(n, t, None) for n, t in outputs.items()], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", DEFAULT_OPSET)])
    m.ir_version = ORT_MAX_IR_VERSION
    return m


def _c(name, arr):
    from onnx import numpy_helper

    return numpy_helper.from_array(np.asarray(arr), name)


def nonzero_mid():
    m = _model([N("Relu", ["x"], ["r"]), N("NonZero", ["r"], ["nz"]),
                N("Transpose", ["nz"], ["t"], perm=[1, 0]), N("Cast", ["t"], ["f"], to=F32),
                N("ReduceSum", ["f", "ax"], ["y"], keepdims=0)],
               {"x": (F32, ["A", 4])}, {"y": F32, "t": I64}, [_c("ax", np.array([1], np.int64))])
    return m, {"x": randn(3, 4)}, {"x": randn(5, 4, seed=1)}


def unique_mid():
    m = _model([N("Floor", ["x"], ["f"]), N("Unique", ["f"], ["u", "i", "inv", "cnt"], sorted=1),
                N("Mul", ["u", "u"], ["y"])],
               {"x": (F32, [12])}, {"y": F32, "i": I64, "inv": I64, "cnt": I64})
    return m, {"x": randn(12) * 2}, None


def top_k_from_data():
    # k = number of positive entries: only known while running
    m = _model([N("Greater", ["x", "zero"], ["p"]), N("Cast", ["p"], ["pi"], to=I64),
                N("ReduceSum", ["pi"], ["k"], keepdims=1),
                N("TopK", ["x", "k"], ["v", "ix"]), N("Neg", ["v"], ["y"])],
               {"x": (F32, [10])}, {"y": F32, "ix": I64}, [_c("zero", np.float32(0))])
    return m, {"x": randn(10)}, {"x": randn(10, seed=3)}


def range_runtime_limit():
    m = _model([N("ReduceMax", ["x"], ["mx"], keepdims=0), N("Ceil", ["mx"], ["lim"]),
                N("Range", ["zero", "lim", "one"], ["r"]), N("Mul", ["r", "r"], ["y"])],
               {"x": (F32, [6])}, {"y": F32},
               [_c("zero", np.float32(0)), _c("one", np.float32(1))])
    return m, {"x": randn(6) * 4 + 4}, {"x": randn(6, seed=2) * 2 + 9}


def nms_mid(center=0):
    def build():
        rng = np.random.default_rng(center)
        xy = rng.uniform(0, 10, (1, 12, 2)).astype(np.float32)
        wh = rng.uniform(1, 4, (1, 12, 2)).astype(np.float32)
        boxes = np.concatenate([xy, xy + wh], -1) if center == 0 else np.concatenate([xy, wh], -1)
        m = _model([N("Sigmoid", ["logits"], ["s"]),
                    N("NonMaxSuppression", ["b", "s", "mx", "iou", "st"], ["sel"],
                      center_point_box=center),
                    N("Gather", ["sel", "two"], ["boxidx"], axis=1)],
                   {"b": (F32, [1, 12, 4]), "logits": (F32, [1, 2, 12])},
                   {"sel": I64, "boxidx": I64},
                   [_c("mx", np.array([4], np.int64)), _c("iou", np.array([0.3], np.float32)),
                    _c("st", np.array([0.4], np.float32)), _c("two", np.int64(2))])
        return m, {"b": boxes, "logits": randn(1, 2, 12)}, {"logits": randn(1, 2, 12, seed=9)}
    build.__name__ = f"nms_center{center}"
    return build


CASES = [nonzero_mid, unique_mid, top_k_from_data, range_runtime_limit, nms_mid(0), nms_mid(1)]


@pytest.mark.parametrize("build", CASES, ids=lambda f: f.__name__)
def test_data_dependent_on_intermediate(build):
    model, feeds, feeds2 = build()
    check_model(model, feeds, resize_feeds=feeds2)


def _session(model, **config):
    return sprat.Interpreter.from_buffer(sprat.convert(model)).create_session(
        sprat.ScheduleConfig(**config))


def test_tail_plan_is_cached_by_the_dynamic_shapes():
    model, _, _ = nonzero_mid()
    sess = _session(model)
    x = np.array([[1, -1, 2, 0], [0, 3, -2, 1], [1, 1, 1, 1]], np.float32)
    sess.run({"x": x})
    root = sess.plan
    assert root.dynamic is not None and root.dynamic.node.op_type == "NonZero"
    assert len(sess.state.children) == 1
    (tail,) = sess.state.children
    nz = tuple((a.shape, a.dtype.str) for a in [np.argwhere(x > 0).T.astype(np.int64)])
    assert root.next(nz) is tail  # the tail's plan, memoised by the dynamic shapes
    x2 = -x  # another count of positives: a second tail plan
    sess.run({"x": x})
    assert list(sess.state.children) == [tail]  # same shapes: nothing re-planned
    sess.run({"x": x2})
    assert len(sess.state.children) == 2
    assert sess.plan is root  # the static prefix was not re-prepared


def test_static_model_has_no_tail():
    m = _model([N("Relu", ["x"], ["y"])], {"x": (F32, [2, 3])}, {"y": F32})
    sess = _session(m)
    sess.run({"x": randn(2, 3)})
    assert sess.plan.dynamic is None


def test_callbacks_profiling_and_outputs_with_a_dynamic_tail():
    model, feeds, _ = nonzero_mid()
    sess = _session(model, profiling=True)
    want = sess.run(feeds)
    seen = []
    res = sess.run_with_callback(feeds, after=lambda info, i, o: seen.append(info.type))
    # (the passes may move the Transpose; every op of the tail is seen, in order)
    assert seen[:2] == ["Relu", "NonZero"] and seen[-1] == "ReduceSum" and "Cast" in seen
    assert not res.partial
    assert_close(res["y"], want["y"])
    times = sess.info()["op_times_ms"]
    assert set(times) == {n.name for n in sess.plan.graph.nodes}  # the tail's ops included
    assert set(sess.info()["backends"]) == set(times)
    # an after callback stopping at the dynamic node: a partial result
    res = sess.run_with_callback(feeds, after=lambda info, i, o: info.type != "NonZero")
    assert res.partial and "y" not in res
    # outputs= for a tail output: copied into the user's array (no zero copy for these)
    out = np.empty_like(want["y"])
    got = sess.run(feeds, outputs={"y": out})
    assert got["y"] is out
    assert_close(out, want["y"])
    with pytest.raises(InputError):
        sess.run(feeds, outputs={"y": np.empty(want["y"].size + 1, np.float32)})
