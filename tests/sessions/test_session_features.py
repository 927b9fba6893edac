"""Session features beyond run(): callbacks, profiling, zero-copy I/O, deferred resize."""

import numpy as np
import onnxruntime as ort
import pytest
from test_session import _feeds, _model

import sprat


@pytest.fixture(scope="module")
def model():
    return _model()


@pytest.fixture(scope="module")
def interp(model):
    return sprat.Interpreter.from_buffer(sprat.convert(model))


def _want(model, feeds):
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)


def test_callbacks_see_every_op_with_info_and_arrays(interp, model):
    sess = interp.create_session()
    seen = []

    def before(info, ins, outs):
        seen.append(("before", info))
        assert all(isinstance(a, np.ndarray) for a in outs)

    def after(info, ins, outs):
        seen.append(("after", info.name, [a.shape for a in outs]))

    out = sess.run_with_callback(_feeds(), before=before, after=after)
    assert not out.partial
    np.testing.assert_allclose(out["y"], _want(model, _feeds())[0], rtol=1e-5, atol=1e-5)
    infos = [x[1] for x in seen if x[0] == "before"]
    assert len(infos) == len(sess.info()["backends"]) and len(seen) == 2 * len(infos)
    conv = next(i for i in infos if i.type == "Conv")
    # 9x7 output, 8 channels, 3x3x3 taps, multiply-add = 2; plus the fused bias and Relu
    assert conv.flops == 2 * 8 * 9 * 7 * 27 + 2 * 8 * 9 * 7 and conv.backend == "cpu"


def test_before_false_skips_and_after_false_stops(interp):
    sess = interp.create_session()
    # the first run with a ``before`` callback plans every tensor apart, then fills them
    full = sess.run_with_callback(_feeds(), before=lambda info, i, o: True)
    # skip the Gather: its output keeps the previous run's contents
    out = sess.run_with_callback({**_feeds(), "idx": np.array([1, 1, 1], np.int64)},
                                 before=lambda info, i, o: info.type != "Gather")
    np.testing.assert_array_equal(out["z"], full["z"])
    # stop after the first op: nothing downstream is computed, the result says so
    out = sess.run_with_callback(_feeds(), after=lambda info, i, o: False)
    assert out.partial and "y" not in out


def test_callback_exception_propagates(interp):
    sess = interp.create_session()

    class Boom(Exception):
        pass

    def after(info, i, o):
        raise Boom(info.name)

    with pytest.raises(Boom):
        sess.run_with_callback(_feeds(), after=after)
    assert sess.run(_feeds())["y"].shape == (1, 8)  # still usable


def test_profiling_times_every_op(interp):
    sess = interp.create_session(sprat.ScheduleConfig(profiling=True))
    sess.run(_feeds())
    times = sess.info()["op_times_ms"]
    assert set(times) == set(sess.info()["backends"]) and all(t >= 0 for t in times.values())
    assert sum(times.values()) > 0
    assert interp.create_session().info()["op_times_ms"] == {}


def test_outputs_written_in_place_without_copy(interp, model):
    sess = interp.create_session()
    sess.run(_feeds())
    y = np.empty((1, 8), np.float32)
    before = dict(sess.copy_counts)
    out = sess.run(_feeds(), outputs={"y": y})
    assert out["y"] is y
    np.testing.assert_allclose(y, _want(model, _feeds())[0], rtol=1e-5, atol=1e-5)
    # y was written by the kernel itself; only z was copied out
    assert sess.copy_counts["outputs"] - before["outputs"] == 1
    # the session's own buffer is untouched by the bound run and restored after it
    out2 = sess.run(_feeds())
    assert not np.shares_memory(out2["y"], y)


def test_later_runs_replay_the_kernels_bound_calls(interp, model):
    """From its second run the plain loop calls what each kernel's run called
    (``RunState.flat``) instead of the kernels' runs: other feeds of the same shape, a run with
    an output array bound (which takes the kernels' runs) and the runs after it all equal
    onnxruntime; a call that raises is a KernelError naming its node."""
    sess = interp.create_session()
    rng = np.random.default_rng(5)
    y = np.empty((1, 8), np.float32)
    for k in range(5):
        feeds = {**_feeds(), "x": rng.standard_normal((1, 3, 9, 7)).astype(np.float32)}
        out = sess.run(feeds, outputs={"y": y} if k == 2 else None)
        want = _want(model, feeds)
        np.testing.assert_allclose(out["y"], want[0], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(out["z"], want[1])
        assert (out["y"] is y) == (k == 2)
    state = sess._state
    runs = {id(run) for run, _ in state.hot}
    assert state.flat is not None and len(state.flat_index) == len(state.flat)
    assert any(id(fn) not in runs for fn, _ in state.flat)  # bound calls, not runs

    def boom(*args):
        raise ValueError("boom")

    state.flat[0] = (boom, ())
    with pytest.raises(sprat.KernelError, match="boom") as e:
        sess.run(_feeds())
    assert state.plan.steps[state.flat_index[0]].info.name in str(e.value)


def test_repeated_feeds_take_the_short_path_and_the_rest_is_still_checked(interp, model):
    """Feeds like the last plain run's skip the checks (``Session._run_ready``); anything
    else takes the checked path: a wrong dtype is still an InputError, a new shape resizes,
    a bound output or an input buffer is honoured, and every result equals onnxruntime."""
    sess = interp.create_session()
    rng = np.random.default_rng(9)

    def feeds(hw=(9, 7)):
        return {**_feeds(hw=hw), "x": rng.standard_normal((1, 3, *hw)).astype(np.float32)}

    def check(out, f):
        want = _want(model, f)
        np.testing.assert_allclose(out["y"], want[0], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(out["z"], want[1])

    f = feeds()
    check(sess.run(f), f)
    assert sess._ready is not None
    for hw in [(9, 7), (9, 7), (12, 5), (9, 7)]:
        f = feeds(hw)
        check(sess.run(f), f)
    with pytest.raises(sprat.InputError, match="dtype"):
        sess.run({**f, "x": f["x"].astype(np.float64)})
    y = np.empty((1, 8), np.float32)
    assert sess.run(f, outputs={"y": y})["y"] is y
    check({"y": y, "z": sess.run(f)["z"]}, f)
    sess.input_buffer("x")[...] = f["x"]
    check(sess.run({"idx": f["idx"]}), f)


def test_short_path_replans_when_an_input_the_plan_read_changes():
    """An input whose contents the plan used (a Reshape's target shape fed at run time) may
    take the short path while its values stay the same; other values of the same shape and
    dtype plan again, and every result is the reshaped input."""
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [12]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    sess = sprat.Interpreter.from_buffer(sprat.convert(model.SerializeToString())).create_session()
    x = np.arange(12, dtype=np.float32)
    for dims in [(3, 4), (3, 4), (3, 4), (2, 6), (2, 6), (3, 4), (4, 3)]:
        out = sess.run({"x": x, "shape": np.array(dims, np.int64)})["y"]
        np.testing.assert_array_equal(out, x.reshape(dims))
        assert sess._value_inputs and sess._ready is not None


def test_outputs_copied_when_layout_or_dtype_differ(interp, model):
    sess = interp.create_session()
    want = _want(model, _feeds())[0]
    wide = np.zeros((1, 16), np.float32)[:, ::2]  # right shape, not contiguous
    y64 = np.zeros((1, 8), np.float64)
    for dst in (wide, y64):
        before = sess.copy_counts["outputs"]
        out = sess.run(_feeds(), outputs={"y": dst})
        assert out["y"] is dst
        np.testing.assert_allclose(dst, want, rtol=1e-5, atol=1e-5)
        assert sess.copy_counts["outputs"] - before == 2  # y copied in, z copied out


@pytest.mark.parametrize("dst, message", [
    (np.zeros((2, 8), np.float32), "cannot hold the result of shape"),
    (np.zeros((1, 8), np.int32), "cannot hold the result of dtype float32"),
    ([0.0] * 8, "expected a numpy array"),
])
def test_outputs_that_cannot_hold_the_result(interp, dst, message):
    sess = interp.create_session()
    with pytest.raises(sprat.InputError, match=message):
        sess.run(_feeds(), outputs={"y": dst})
    ro = np.zeros((1, 8), np.float32)
    ro.flags.writeable = False
    with pytest.raises(sprat.InputError, match="read-only"):
        sess.run(_feeds(), outputs={"y": ro})
    with pytest.raises(sprat.InputError, match="unknown output"):
        sess.run(_feeds(), outputs={"nope": ro})


def test_input_buffer_is_read_without_copy(interp, model):
    sess = interp.create_session()
    sess.resize({"x": (1, 3, 9, 7)})
    buf = sess.input_buffer("x")
    assert buf.shape == (1, 3, 9, 7) and buf.dtype == np.float32
    feeds = _feeds()
    buf[...] = feeds["x"]
    before = sess.copy_counts["inputs"]
    out = sess.run({"idx": feeds["idx"]})
    assert sess.copy_counts["inputs"] - before == 1  # idx only
    np.testing.assert_allclose(out["y"], _want(model, feeds)[0], rtol=1e-5, atol=1e-5)
    # passing the buffer itself is no copy either
    buf[...] = feeds["x"]
    before = sess.copy_counts["inputs"]
    sess.run({"x": buf, "idx": feeds["idx"]})
    assert sess.copy_counts["inputs"] - before == 1
    # after a resize the old buffer is not the input any more
    sess.resize({"x": (1, 3, 5, 5)})
    with pytest.raises(sprat.InputError, match="missing"):
        sess.run({"idx": feeds["idx"]})


def test_input_buffer_invalidated_by_deferred_resize(interp):
    sess = interp.create_session(sprat.ScheduleConfig(resize="defer"))
    sess.resize({"x": (1, 3, 9, 7)})
    sess.input_buffer("x")[...] = _feeds()["x"]
    sess.resize({"x": (1, 3, 5, 5)})  # the next run needs a new plan, x is only in the old one
    with pytest.raises(sprat.InputError, match="input_buffer"):
        sess.run({"idx": _feeds()["idx"]})


def test_deferred_resize_prepares_on_next_run(interp, model):
    sess = interp.create_session(sprat.ScheduleConfig(resize="defer"))
    sess.run(_feeds())
    steps_before = sess.info()["input_shapes"]
    sess.resize({"x": (2, 3, 6, 6)})
    assert sess.info()["input_shapes"] == steps_before  # not prepared yet
    feeds = _feeds(2, (6, 6))
    out = sess.run(feeds)
    assert sess.info()["input_shapes"]["x"] == (2, 3, 6, 6)
    np.testing.assert_allclose(out["y"], _want(model, feeds)[0], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="allowed: direct, defer"):
        sprat.ScheduleConfig(resize="later")


def test_auto_resize_is_logged_at_debug(interp, caplog):
    sess = interp.create_session()
    sess.run(_feeds())
    with caplog.at_level("DEBUG", logger="sprat"):
        sess.run(_feeds(1, (5, 5)))
    assert any("resizing" in r.message for r in caplog.records)


def _view_chain_model():
    """x -> Relu -> a -> Reshape -> b -> Unsqueeze -> c -> Sigmoid -> y; outputs a, c, y."""
    from onnx import TensorProto as T
    from onnx import helper as h

    nodes = [h.make_node("Relu", ["x"], ["a"]),
             h.make_node("Reshape", ["a", "shape"], ["b"]),
             h.make_node("Unsqueeze", ["b", "axes"], ["c"]),
             h.make_node("Sigmoid", ["c"], ["y"])]
    inits = [h.make_tensor("shape", T.INT64, [2], [6, 20]),
             h.make_tensor("axes", T.INT64, [1], [0])]
    g = h.make_graph(nodes, "views", [h.make_tensor_value_info("x", T.FLOAT, [2, 3, 4, 5])],
                     [h.make_tensor_value_info(n, T.FLOAT, None) for n in ("a", "c", "y")],
                     inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8).SerializeToString()


def test_view_ops_share_their_input_bytes():
    model = _view_chain_model()
    sess = sprat.Interpreter.from_buffer(sprat.convert(model)).create_session()
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = sess.run({"x": x})
    for name, w in zip(("a", "c", "y"), want):
        np.testing.assert_allclose(got[name], w, rtol=1e-6)
    # the Reshape and Unsqueeze outputs are the Relu output's bytes: the arena holds x, a, y
    plan = sess.plan
    ids = {v.name: i for i, v in enumerate(plan.graph.values)}
    assert plan.aliases.get(ids["c"]) == ids["a"]  # a view declared by the kernel ...
    arrays = sess.state.arrays  # ... placed on the same bytes
    assert np.shares_memory(arrays[ids["a"]], arrays[ids["c"]])
    assert not np.shares_memory(arrays[ids["a"]], arrays[ids["y"]])
    assert sess.info()["arena_bytes"] <= 3 * 512
    # binding either end of the chain to a user array still gives every output right
    for bound in ("a", "c"):
        dst = np.empty(want[("a", "c").index(bound)].shape, np.float32)
        got = sess.run({"x": x}, outputs={bound: dst})
        assert got[bound] is dst
        for name, w in zip(("a", "c", "y"), want):
            np.testing.assert_allclose(got[name], w, rtol=1e-6)
    # with callbacks every tensor has its own bytes again (a skipped op keeps its output)
    seen = []
    sess.run_with_callback({"x": x}, before=lambda info, i, o: seen.append(info.type))
    assert seen == ["Relu", "Reshape", "Unsqueeze", "Sigmoid"]
    np.testing.assert_allclose(sess.run({"x": x})["y"], want[2], rtol=1e-6)
