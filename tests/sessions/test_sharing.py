"""Many sessions over one model: shared (packed) weights, Runtime thread budgets,
release_model, ParallelRunner with real threads."""

import threading
import time

import numpy as np
import onnxruntime as ort
import pytest

import sprat
from sprat import zoo
from sprat.testing.memory import second_session_growth


@pytest.mark.parametrize("key", ["ppocr_v4_rec", "ddddocr_ocr"])
def test_second_session_shares_weights(key, tmp_path):
    """Issue #3's figure: a second session of a model adds <= 10% of the model's weight bytes
    (its own arena, with the kernels' workspaces, comes on top once it runs; its plan is the
    first session's)."""
    path = tmp_path / f"{key}.sprat"
    sprat.convert(zoo.fetch(key), path)
    m = second_session_growth(key, path)
    assert m["prepared"] <= 0.10 * m["weights"], m
    assert m["ran"] <= 0.10 * m["weights"] + m["arena"], m


def _conv_model():
    from test_session import _model

    return _model()


def _feeds(n=1):
    from test_session import _feeds

    return _feeds(n, (32, 32))


def test_packed_weights_are_packed_once():
    interp = sprat.Interpreter.from_buffer(sprat.convert(_conv_model()))
    a = interp.create_session()
    a.run(_feeds())
    packed = interp.packed_bytes
    assert packed > 0
    b = interp.create_session(sprat.ScheduleConfig(num_threads=2))
    b.run(_feeds(2))
    assert interp.packed_bytes == packed
    assert a.plan is not b.plan  # other thread counts: other plans, the same packed weights
    wa = next(s.kernel.w for s in a.plan.steps if s.node.op_type == "Conv")
    wb = next(s.kernel.w for s in b.plan.steps if s.node.op_type == "Conv")
    assert wa is wb


def test_release_model_keeps_sessions_working():
    interp = sprat.Interpreter.from_buffer(sprat.convert(_conv_model()))
    sess = interp.create_session()
    want = sess.run(_feeds())["y"]
    interp.release_model()
    np.testing.assert_array_equal(sess.run(_feeds())["y"], want)
    sess.resize({"x": (2, 3, 8, 8)})  # the session still holds what it needs to re-plan
    assert sess.run(_feeds(2) | {"x": np.ones((2, 3, 8, 8), np.float32)})["y"].shape == (2, 8)
    with pytest.raises(sprat.SpratError, match="released"):
        interp.create_session()


def test_runtime_caps_threads_and_validates():
    rt = sprat.Runtime(num_threads=1)
    interp = sprat.Interpreter.from_buffer(sprat.convert(_conv_model()))
    sess = interp.create_session(sprat.ScheduleConfig(num_threads=2), runtime=rt)
    assert sess.info()["num_threads"] == 1
    with pytest.raises(ValueError, match="num_threads"):
        sprat.Runtime(num_threads=0)
    with pytest.raises(TypeError, match="Runtime"):
        interp.create_session(runtime=2)


def test_runtime_queues_sessions_instead_of_oversubscribing():
    """Two sessions on a 1-thread runtime never run kernels at the same time."""
    rt = sprat.Runtime(num_threads=1)
    interp = sprat.Interpreter.from_buffer(sprat.convert(_conv_model()))
    sessions = [interp.create_session(runtime=rt) for _ in range(2)]
    inside, peak, lock = [0], [0], threading.Lock()

    def before(info, i, o):
        with lock:
            inside[0] += 1
            peak[0] = max(peak[0], inside[0])
        time.sleep(0.001)
        with lock:
            inside[0] -= 1

    def work(s):
        for _ in range(5):
            s.run_with_callback(_feeds(), before=before)

    threads = [threading.Thread(target=work, args=(s,)) for s in sessions]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert peak[0] == 1


def test_parallel_runner_matches_sequential_with_real_threads(tmp_path):
    model = _conv_model()
    path = tmp_path / "m.sprat"
    sprat.convert(model, path)
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    batches = [{"x": rng.standard_normal((1, 3, 24, 24)).astype(np.float32),
                "idx": np.array([0, 1, 2], np.int64)} for _ in range(16)]
    with sprat.ParallelRunner(str(path), workers=2) as runner:
        assert len(runner.sessions) == 2
        results = runner.map(batches)
        # plain threads calling run() directly
        out = [None] * len(batches)

        def call(k):
            out[k] = runner.run(batches[k])

        threads = [threading.Thread(target=call, args=(k,)) for k in range(len(batches))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    for got, again, feeds in zip(results, out, batches):
        want = ref.run(None, feeds)
        np.testing.assert_allclose(got["y"], want[0], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(got["y"], again["y"])
    with pytest.raises(ValueError, match="workers"):
        sprat.ParallelRunner(str(path), workers=0)


def test_kernels_release_the_gil():
    """While a kernel runs, another Python thread keeps running: it counts during one big
    convolution (~4e8 multiply-adds). Were the GIL held by the kernel, it could not count
    at all until the kernel returned. NOTE: the counting thread must also get a core while the
    kernel runs (a few ms): on a loaded machine one run may see no count, so the kernel gets up
    to ten runs to show one; a kernel holding the GIL shows none in any."""
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((128, 128, 3, 3)).astype(np.float32), "w")
    g = h.make_graph([h.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [1, 128, 112, 112])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], [w])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    sess = sprat.Interpreter.from_buffer(sprat.convert(m)).create_session(
        sprat.ScheduleConfig(num_threads=1))
    x = {"x": rng.standard_normal((1, 128, 112, 112)).astype(np.float32)}
    sess.run(x)
    count, stop, during = [0], threading.Event(), []

    def spin():
        while not stop.is_set():
            count[0] += 1

    def mark(info, i, o):
        if info.type == "Conv":
            during.append(count[0])

    t = threading.Thread(target=spin)
    t.start()
    counted = []
    try:
        time.sleep(0.05)  # the spinner is running
        for _ in range(10):
            during.clear()
            sess.run_with_callback(x, before=mark, after=mark)
            assert len(during) == 2
            counted.append(during[1] - during[0])
            if counted[-1] > 1000:
                break
    finally:
        stop.set()
        t.join(10)
    assert max(counted) > 1000, counted
