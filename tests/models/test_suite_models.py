"""The broad benchmark suite's model families (``sprat.testing.families``) build, convert, run in
sprat and match onnxruntime — at small input sizes here; ``bench/run.py --suite broad`` runs
them at the sizes the real models use. Two sprat bugs this suite found have regression cases
below (depthwise convs on maps narrower than the kernel; LSTM with its optional outputs left
out)."""

import numpy as np
import onnxruntime as ort
import pytest

import sprat
from sprat.testing.families import FAMILIES, LIGHT_MODELS, SUITE, _Builder, build


def _ort(data: bytes, feeds) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_family_matches_onnxruntime(name):
    model, feeds = build(name, size=0.3)
    data = model.SerializeToString()
    want = _ort(data, feeds)
    for threads in (1, 2):
        got = sprat.InferenceSession(data, sprat.ScheduleConfig(num_threads=threads)).run(
            None, feeds)
        for g, w in zip(got, want):
            assert g.shape == w.shape and np.isfinite(g).all()
            assert w.std() > 1e-3  # NOTE: the activations stay in range, not flat or huge
            err = np.abs(g - w).max() / np.abs(w).max()
            assert err < 1e-4, (name, threads, err)


def test_suite_lists_families_and_light_models():
    assert set(SUITE) == {*FAMILIES, *(f"light_{n}" for n in LIGHT_MODELS)}
    path, feeds = build("light_squeezenet")
    assert path.endswith("light_squeezenet.onnx") and feeds["data_0"].shape == (1, 3, 224, 224)
    with pytest.raises(KeyError, match="unknown suite model"):
        build("resnet1001")


@pytest.mark.parametrize("k", [3, 5, 7])
@pytest.mark.parametrize("hw", [1, 2, 3, 6])
@pytest.mark.parametrize("channels", [8, 96])
@pytest.mark.parametrize("dilation", [1, 2])
def test_depthwise_conv_on_maps_narrower_than_the_kernel(k, hw, channels, dilation):
    b = _Builder(0)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, channels, hw, hw + 1)).astype(np.float32)
    w = b.const(rng.standard_normal((channels, 1, k, k)).astype(np.float32))
    pad = k // 2 * dilation
    y = b.op("Conv", ["x", w], kernel_shape=[k, k], pads=[pad] * 4, group=channels,
             dilations=[dilation, dilation])
    data = b.model([("x", list(x.shape))], [y]).SerializeToString()
    sess = sprat.InferenceSession(data)
    got = sess.run(None, {"x": x})[0]
    assert set(sess.session.info()["backends"].values()) == {"cpu"}
    want = _ort(data, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_lstm_with_only_its_first_output():
    model, feeds = build("lstm_audio", size=0.2)
    data = model.SerializeToString()
    sess = sprat.InferenceSession(data)
    got = sess.run(None, feeds)[0]
    assert "cpu" in {b for n, b in sess.session.info()["backends"].items() if "lstm" in n}
    want = _ort(data, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
