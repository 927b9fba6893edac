"""The runtime API: Interpreter, Session, ScheduleConfig, InferenceSession and their errors."""

import threading

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import sprat


def _model(opset=17):
    nodes = [
        h.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        h.make_node("Relu", ["c"], ["r"]),
        h.make_node("GlobalAveragePool", ["r"], ["g"]),
        h.make_node("Flatten", ["g"], ["y"]),
        h.make_node("Gather", ["table", "idx"], ["z"], axis=0),
    ]
    rng = np.random.default_rng(0)
    inits = [
        h.make_tensor("w", T.FLOAT, [8, 3, 3, 3], rng.standard_normal(216).astype(np.float32)),
        h.make_tensor("b", T.FLOAT, [8], rng.standard_normal(8).astype(np.float32)),
        h.make_tensor("table", T.FLOAT, [5, 2], rng.standard_normal(10).astype(np.float32)),
    ]
    g = h.make_graph(nodes, "m",
                     [h.make_tensor_value_info("x", T.FLOAT, ["N", 3, "H", "W"]),
                      h.make_tensor_value_info("idx", T.INT64, [3])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["N", 8]),
                      h.make_tensor_value_info("z", T.FLOAT, [3, 2])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 8
    return m.SerializeToString()


@pytest.fixture(scope="module")
def model():
    return _model()


@pytest.fixture
def sess(model):
    return sprat.Interpreter.from_buffer(sprat.convert(model)).create_session()


def _feeds(n=1, hw=(9, 7)):
    x = np.random.default_rng(1).standard_normal((n, 3, *hw)).astype(np.float32)
    return {"x": x, "idx": np.array([0, 4, 2], np.int64)}


def test_run_matches_onnxruntime_and_resizes(model, sess):
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for n, hw in [(1, (9, 7)), (2, (16, 5)), (1, (9, 7))]:
        feeds = _feeds(n, hw)
        out = sess.run(feeds)
        want = ref.run(None, feeds)
        np.testing.assert_allclose(out["y"], want[0], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(out["z"], want[1])


def test_specs(sess):
    assert [(s.name, s.shape, s.dtype) for s in sess.inputs] == [
        ("x", ("N", 3, "H", "W"), np.float32), ("idx", (3,), np.int64)]
    assert [s.name for s in sess.outputs] == ["y", "z"]
    sess.resize({"x": (2, 3, 10, 10)})
    assert sess.outputs[0].shape == (2, 8)


def test_output_names_selects(sess):
    out = sess.run(_feeds(), output_names=["z"])
    assert list(out) == ["z"]
    with pytest.raises(sprat.InputError, match="unknown output"):
        sess.run(_feeds(), output_names=["nope"])


@pytest.mark.parametrize("change, message", [
    (lambda f: f.pop("idx"), r"missing \['idx'\]"),
    (lambda f: f.update(bogus=np.zeros(1)), r"unknown \['bogus'\]"),
    (lambda f: f.update(x=f["x"].astype(np.float64)), "expected dtype float32, got float64"),
    (lambda f: f.update(x=np.zeros((1, 4, 9, 9), np.float32)), "dim 1 must be 3"),
    (lambda f: f.update(x=np.zeros((3, 9, 9), np.float32)), "expected rank 4"),
    (lambda f: f.update(idx=np.zeros(4, np.int64)), "dim 0 must be 3"),
])
@pytest.mark.parametrize("warm", [False, True], ids=["first-run", "after-good-run"])
def test_bad_feeds_raise_input_error(sess, change, message, warm):
    """Also after a good run, whose feeds' names/shapes/dtypes let the same again skip the
    checks (the session remembers the last checked feeds): any change must take the full checks."""
    if warm:
        sess.run(_feeds())
    feeds = _feeds()
    change(feeds)
    with pytest.raises(sprat.InputError, match=message):
        sess.run(feeds)
    # the session still works afterwards
    assert sess.run(_feeds())["y"].shape == (1, 8)


class _Tagged(np.ndarray):
    pass


def test_feeds_that_are_not_plain_arrays_are_checked_every_run(sess):
    """A list or an ndarray subclass is never remembered as checked (the session remembers
    the last feeds it checked, to skip the checks for feeds of the same kind)."""
    good = _feeds()
    tagged = {"x": good["x"].view(_Tagged), "idx": good["idx"]}
    for feeds in (tagged, {"x": good["x"], "idx": [0, 4, 2]}):
        sess.run(good)  # remembered as checked
        sess.run(feeds)
        sess.run(feeds)
        bad = dict(feeds, x=np.zeros((3, 9, 9), np.float32).view(type(feeds["x"])))
        with pytest.raises(sprat.InputError, match="expected rank 4"):
            sess.run(bad)
    np.testing.assert_array_equal(sess.run(tagged)["z"], sess.run(good)["z"])


def test_resize_errors(sess):
    with pytest.raises(sprat.InputError, match="unknown input"):
        sess.resize({"nope": (1,)})
    with pytest.raises(sprat.InputError, match="dim 1 must be 3"):
        sess.resize({"x": (1, 2, 8, 8)})


def test_kernel_error_names_the_node(sess):
    feeds = _feeds()
    feeds["idx"] = np.array([0, 99, 1], np.int64)  # out of range for a 5-row table
    with pytest.raises(sprat.KernelError) as e:
        sess.run(feeds)
    assert "Gather" in str(e.value)


def test_concurrent_run_raises_busy(sess):
    # NOTE: a run held inside its first op by a callback, in another thread: a long run
    got = []
    entered, release = threading.Event(), threading.Event()

    def after(info, ins, outs):
        entered.set()
        release.wait(10)

    def hold():
        got.append(sess.run_with_callback(_feeds(), after=after))

    t = threading.Thread(target=hold)
    t.start()
    entered.wait(10)
    try:
        with pytest.raises(sprat.SessionBusyError):
            sess.run(_feeds())
    finally:
        release.set()
        t.join()
    got.append(sess.run(_feeds()))
    assert got[0]["y"].shape == got[1]["y"].shape == (1, 8)
    np.testing.assert_array_equal(got[0]["y"], got[1]["y"])


def test_sessions_share_weights(model):
    interp = sprat.Interpreter.from_buffer(sprat.convert(model))
    s1, s2 = interp.create_session(), interp.create_session()
    f = _feeds()
    np.testing.assert_array_equal(s1.run(f)["y"], s2.run(f)["y"])


@pytest.mark.parametrize("kwargs, message", [
    ({"num_threads": 0}, "num_threads"),
    ({"backends": ("gpu",)}, "unknown backend 'gpu'; allowed: cpu, reference"),
    ({"precision": "fp8"}, "allowed: normal, high, low"),
    ({"memory": "tiny"}, "allowed: normal, low"),
])
def test_schedule_config_validates(kwargs, message):
    with pytest.raises(ValueError, match=message):
        sprat.ScheduleConfig(**kwargs)


def test_reference_backend_matches_cpu(model):
    interp = sprat.Interpreter.from_buffer(sprat.convert(model))
    ref = interp.create_session(sprat.ScheduleConfig(backends=("reference",)))
    cpu = interp.create_session(sprat.ScheduleConfig(backends=("cpu",)))
    f = _feeds(2, (11, 6))
    a, b = ref.run(f), cpu.run(f)
    np.testing.assert_allclose(a["y"], b["y"], rtol=1e-5, atol=1e-5)
    assert set(ref.info()["backends"].values()) == {"reference"}
    assert "cpu" in set(cpu.info()["backends"].values())


def test_inference_session_like_onnxruntime(model, tmp_path):
    p = tmp_path / "m.onnx"
    p.write_bytes(model)
    for src in (str(p), model):
        s = sprat.InferenceSession(src)
        assert [i.name for i in s.get_inputs()] == ["x", "idx"]
        assert s.get_inputs()[0].type == "tensor(float)"
        assert [o.name for o in s.get_outputs()] == ["y", "z"]
        y, z = s.run(None, _feeds())
        (z2,) = s.run(["z"], _feeds())
        np.testing.assert_array_equal(z, z2)
        assert y.shape == (1, 8)
    sp = tmp_path / "m.sprat"
    sprat.convert(model, sp)
    assert sprat.InferenceSession(str(sp)).run(["y"], _feeds())[0].shape == (1, 8)


def test_unsupported_ops_are_listed_at_once():
    nodes = [h.make_node("FancyOp", ["x"], ["a"], name="f1"),
             h.make_node("FancyOp", ["a"], ["b"], name="f2"),
             h.make_node("Relu", ["b"], ["c"]),
             h.make_node("Gadget", ["c"], ["y"], name="g1", domain="com.example")]
    g = h.make_graph(nodes, "m", [h.make_tensor_value_info("x", T.FLOAT, [1])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.example", 1)])
    with pytest.raises(sprat.UnsupportedOpError) as e:
        sprat.convert(m)
    assert set(e.value.missing) == {"FancyOp", "com.example.Gadget"}
    assert e.value.missing["FancyOp"] == ["f1", "f2"]


def test_not_an_onnx_file(tmp_path):
    p = tmp_path / "junk.onnx"
    p.write_bytes(b"\x00\xffnot a model" * 10)
    with pytest.raises(sprat.ModelFormatError):
        sprat.convert(str(p))


def test_steady_state_run_allocates_only_outputs(model):
    """After the first run, run() allocates the returned outputs and nothing large besides,
    not even temporarily (tracemalloc sees NumPy's data allocations). The conv's output here
    is 128 KiB per run while the model's outputs are under 100 bytes."""
    import tracemalloc

    sess = sprat.Interpreter.from_buffer(sprat.convert(model)).create_session()
    feeds = _feeds(1, (64, 64))
    sess.run(feeds)
    sess.run(feeds)
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        out = sess.run(feeds)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    grown = peak - base  # the most memory held at any moment of the run, temporaries included
    out_bytes = sum(a.nbytes for a in out.values())
    assert grown <= out_bytes + 8 * 1024, (grown, out_bytes)


def test_file_round_trip_external_weights_and_metadata(model, tmp_path):
    dst = tmp_path / "m.sprat"
    sprat.convert(model, dst, external_data="m.weights", biz_code="ocr-v1")
    assert (tmp_path / "m.weights").stat().st_size > 0
    for populate in (False, True):
        interp = sprat.Interpreter.from_file(dst, populate=populate)
        md = interp.graph.metadata
        assert md["biz_code"] == "ocr-v1" and md["source_format"] == "onnx"
        assert md["source_opset"] == 17 and md["sprat_version"] == sprat.__version__
        assert len(md["uuid"]) == 36
        out = interp.create_session().run(_feeds())
        want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, _feeds())
        np.testing.assert_allclose(out["y"], want[0], rtol=1e-5, atol=1e-5)
