"""The plan / run state split (issue 11, part 1) and the kernel contract (part 2): a Plan is
immutable and shared, each RunState owns one caller's arena, kernels keep no per-call state and
their workspaces are planned in the arena."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import sprat
from sprat.runtime import executor
from sprat.runtime.state import RunState


def _conv_net() -> bytes:
    """A 3x3 conv (a workspace-using algorithm at these sizes), a residual add, a softmax
    (workspace too), a reshape (a view) and a LSTM-free tail: every step kind of a CNN."""
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((16, 3, 3, 3)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((16, 16, 3, 3)) * 0.1).astype(np.float32)
    inits = [onnx.numpy_helper.from_array(w1, "w1"), onnx.numpy_helper.from_array(w2, "w2"),
             h.make_tensor("shape", T.INT64, [2], [1, -1])]
    nodes = [h.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c1"], ["r1"]),
             h.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             h.make_node("Add", ["c2", "r1"], ["s"]),
             h.make_node("GlobalAveragePool", ["s"], ["p"]),
             h.make_node("Reshape", ["p", "shape"], ["f"]),
             h.make_node("Softmax", ["f"], ["y"], axis=-1)]
    g = h.make_graph(nodes, "net", [h.make_tensor_value_info("x", T.FLOAT, ["N", 3, 20, 20])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)],
                        ir_version=8).SerializeToString()


def _x(n=1, seed=0):
    return np.random.default_rng(seed).standard_normal((n, 3, 20, 20)).astype(np.float32)


@pytest.fixture(scope="module")
def model():
    return _conv_net()


def test_plan_is_immutable(model):
    sess = sprat.Interpreter.from_buffer(sprat.convert(model)).create_session()
    sess.resize({"x": (1, 3, 20, 20)})
    plan = sess.plan
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.steps = ()
    with pytest.raises(TypeError):
        plan.layout.offsets[0] = 0  # a read-only mapping
    with pytest.raises(TypeError):
        plan.constants[0] = np.zeros(1)
    with pytest.raises(AttributeError):
        plan.steps[0].kernel = None  # steps are tuples


def test_workspaces_are_planned_in_the_arena(model):
    sess = sprat.Interpreter.from_buffer(sprat.convert(model)).create_session()
    sess.run({"x": _x()})
    plan, state = sess.plan, sess.state
    first = len(plan.graph.values)
    ws_slots = [w for s in plan.steps for w in s.workspaces]
    assert ws_slots, "the convs and the softmax declare workspaces"
    assert all(w >= first and w in plan.layout.offsets for w in ws_slots)
    base = state.arrays[ws_slots[0]]
    for w in ws_slots:
        a = state.arrays[w]
        off = plan.layout.offsets[w]
        assert off % plan.layout.align == 0 and off + a.nbytes <= plan.layout.size
        assert np.shares_memory(a, state.raw) and np.shares_memory(base, state.raw)
    info = sess.info()
    per_step = [sum(state.arrays[w].nbytes for w in s.workspaces) for s in plan.steps]
    assert info["workspace_bytes"] >= max(per_step) > 0  # the peak, not the sum: they share
    assert info["workspace_bytes"] <= info["arena_bytes"] == plan.layout.size
    # NOTE: no kernel of the plan owns scratch of its own any more
    for s in plan.steps:
        for name, v in vars(s.kernel).items():
            assert not (isinstance(v, np.ndarray) and v.flags.owndata and v.flags.writeable
                        and name in ("xb", "acc", "col", "buf", "tiles", "scratch")), name


def test_two_run_states_of_one_plan_run_concurrently(model):
    interp = sprat.Interpreter.from_buffer(sprat.convert(model))
    sess = interp.create_session(sprat.ScheduleConfig(num_threads=1))
    sess.resize({"x": (2, 3, 20, 20)})
    plan = sess.plan
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    feeds = [_x(2, seed) for seed in range(6)]
    expect = [want.run(None, {"x": f})[0] for f in feeds]
    states = [RunState(plan), RunState(plan)]
    assert not np.shares_memory(states[0].raw, states[1].raw)
    got: dict = {}
    errors: list = []
    start = threading.Barrier(2)

    def worker(k):
        try:
            start.wait(10)
            st = states[k]
            for _ in range(20):
                for j, f in enumerate(feeds):
                    np.copyto(st.input_arrays["x"], f)
                    executor.execute(st, sess.runtime, 1)
                    y = dict(st.outputs)["y"].copy()
                    prev = got.setdefault((k, j), y)
                    np.testing.assert_array_equal(prev, y)
        except Exception as e:  # noqa: BLE001 — reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    for j, e in enumerate(expect):
        np.testing.assert_array_equal(got[(0, j)], got[(1, j)])
        np.testing.assert_allclose(got[(0, j)], e, rtol=1e-5, atol=1e-6)


def test_sessions_and_parallel_runner_share_one_plan(model, tmp_path):
    interp = sprat.Interpreter.from_buffer(sprat.convert(model))
    a, b = interp.create_session(), interp.create_session()
    a.run({"x": _x()})
    b.run({"x": _x(seed=1)})
    assert a.plan is b.plan and a.state is not b.state
    assert not np.shares_memory(a.state.raw, b.state.raw)
    c = interp.create_session(sprat.ScheduleConfig(num_threads=2))
    c.run({"x": _x()})
    assert c.plan is not a.plan  # another schedule: another plan
    a.run({"x": _x(3)})
    assert a.plan is not b.plan and a.plan.shapes == {"x": (3, 3, 20, 20)}
    path = tmp_path / "m.sprat"
    sprat.convert(model, path)
    with sprat.ParallelRunner(str(path), workers=2) as runner:
        runner.map([{"x": _x(seed=s)} for s in range(4)])
        p0, p1 = (s.plan for s in runner.sessions)
        assert p0 is p1


def test_a_run_allocates_no_arena(model):
    import tracemalloc

    sess = sprat.Interpreter.from_buffer(sprat.convert(model)).create_session()
    x = _x()
    out = {"y": np.empty((1, 16), np.float32)}
    sess.run({"x": x}, outputs=out)
    tracemalloc.start()
    for _ in range(3):
        sess.run({"x": x}, outputs=out)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 16 * 1024, peak  # dicts and small objects, not arrays
