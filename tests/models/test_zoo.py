"""sprat.zoo: the model table, fetching through pip with sha256 checks, sample inputs, and
onnx's bundled light models.

``test_fetch_*`` really download one small wheel (rapidocr-onnxruntime, ~15 MB) through pip the
first time, into the default cache (``$SPRAT_CACHE`` or ``~/.cache/sprat/zoo``), so later runs
reuse it. Tests that must not touch the network copy that cached wheel into a temporary cache.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import subprocess

import numpy as np
import pytest

from sprat import SpratError, zoo

SMALL = "ppocr_v2_cls"


def _sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_table_lists_the_eight_zoo_models():
    assert set(zoo.MODELS) == {
        "ppocr_v4_det", "ppocr_v4_rec", "ppocr_v2_cls", "nudenet_320n", "ddddocr_ocr",
        "ddddocr_det", "mediapipe_face_detection", "mediapipe_selfie_segmentation",
        "silero_vad", "silero_vad_16k_op15"}
    assert len(zoo.ONNX_MODELS) == 8
    for m in zoo.MODELS.values():
        assert len(m.sha256) == 64 and int(m.sha256, 16) >= 0
        assert m.format in ("onnx", "tflite")
        assert m.inputs, m.key
    assert zoo.MODELS["mediapipe_face_detection"].format == "tflite"
    assert "--platform" in zoo.MODELS["mediapipe_selfie_segmentation"].pip_args


def test_unknown_key_is_a_sprat_error():
    with pytest.raises(SpratError, match="unknown zoo model 'nope'.*ppocr_v2_cls"):
        zoo.fetch("nope")


def test_cache_dir_resolution(monkeypatch, tmp_path):
    monkeypatch.setenv("SPRAT_CACHE", str(tmp_path / "env"))
    assert zoo.resolve_cache_dir() == tmp_path / "env"
    assert zoo.resolve_cache_dir(tmp_path / "arg") == tmp_path / "arg"
    monkeypatch.delenv("SPRAT_CACHE")
    assert zoo.resolve_cache_dir().parts[-3:] == (".cache", "sprat", "zoo")


@pytest.fixture(scope="module")
def small_model():
    """The real fetch (pip download on first use, then cached)."""
    return zoo.fetch(SMALL)


def test_fetch_downloads_and_verifies(small_model):
    assert small_model.name == "ppocr_v2_cls.onnx"
    assert _sha256(small_model) == zoo.MODELS[SMALL].sha256
    import onnx

    model = onnx.load(str(small_model))
    assert [i.name for i in model.graph.input][:1] == ["x"]


def test_second_fetch_uses_cache_without_pip(small_model, monkeypatch):
    def no_pip(*a, **k):
        raise AssertionError("pip must not run when the model is cached")

    monkeypatch.setattr(subprocess, "run", no_pip)
    assert zoo.fetch(SMALL) == small_model


@pytest.fixture
def offline_cache(small_model, tmp_path, monkeypatch):
    """A temp cache holding only the cached wheel; pip is disabled."""
    wheel = zoo.find_wheel(zoo.MODELS[SMALL], small_model.parent / "wheels")
    assert wheel is not None
    (tmp_path / "wheels").mkdir()
    shutil.copy(wheel, tmp_path / "wheels" / wheel.name)

    def no_pip(*a, **k):
        raise AssertionError("pip must not run: the wheel is cached")

    monkeypatch.setattr(subprocess, "run", no_pip)
    return tmp_path


def test_corrupt_cached_file_is_replaced(offline_cache):
    dst = offline_cache / "ppocr_v2_cls.onnx"
    dst.write_bytes(b"not a model")
    path = zoo.fetch(SMALL, cache_dir=offline_cache)
    assert path == dst
    assert _sha256(path) == zoo.MODELS[SMALL].sha256


def test_sha_mismatch_raises_and_keeps_nothing(offline_cache, monkeypatch):
    bad = dataclasses.replace(zoo.MODELS[SMALL], sha256="0" * 64)
    monkeypatch.setitem(zoo.MODELS, SMALL, bad)
    with pytest.raises(zoo.ZooError, match="sha256 mismatch.*expected 0000"):
        zoo.fetch(SMALL, cache_dir=offline_cache)
    assert not (offline_cache / "ppocr_v2_cls.onnx").exists()
    assert not list((offline_cache / "wheels").glob("*.whl"))  # a bad wheel is dropped too
    assert not list(offline_cache.glob("*.tmp"))


def test_missing_member_raises(offline_cache, monkeypatch):
    bad = dataclasses.replace(zoo.MODELS[SMALL], member="rapidocr_onnxruntime/none.onnx")
    monkeypatch.setitem(zoo.MODELS, SMALL, bad)
    with pytest.raises(zoo.ZooError, match="no member 'rapidocr_onnxruntime/none.onnx'"):
        zoo.fetch(SMALL, cache_dir=offline_cache)


def test_pip_failure_is_reported(tmp_path, monkeypatch):
    calls = []

    def failing_pip(cmd, **kwargs):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found")

    monkeypatch.setattr(subprocess, "run", failing_pip)
    with pytest.raises(zoo.ZooError, match="(?s)pip download.*failed.*No matching distribution"):
        zoo.fetch("mediapipe_face_detection", cache_dir=tmp_path)
    (cmd,) = calls
    assert cmd[1:4] == ["-m", "pip", "download"]
    assert "--no-deps" in cmd and "--only-binary=:all:" in cmd
    assert cmd[-1] == "mediapipe==0.10.14"
    assert cmd[cmd.index("--platform") + 1] == "manylinux_2_17_x86_64"
    assert cmd[cmd.index("--python-version") + 1] == "3.11"


@pytest.mark.parametrize("key", sorted(zoo.MODELS))
def test_sample_input_shapes_and_ranges(key):
    feeds = zoo.sample_input(key)
    spec = zoo.MODELS[key].inputs
    assert set(feeds) == set(spec)
    for name, (shape, dtype, low, high) in spec.items():
        x = feeds[name]
        assert x.shape == shape and x.dtype == np.dtype(dtype) and x.flags.c_contiguous
        if low is not None:
            assert low <= x.min() and x.max() <= high
        else:
            assert abs(float(x.mean())) < 0.05 and 0.9 < float(x.std()) < 1.1
    again = zoo.sample_input(key)
    assert all(np.array_equal(feeds[k], again[k]) for k in feeds)  # deterministic


def test_sample_input_bench_shapes_from_zoo_md():
    assert zoo.sample_input("ppocr_v4_det")["x"].shape == (1, 3, 640, 640)
    assert zoo.sample_input("ppocr_v4_rec")["x"].shape == (1, 3, 48, 320)
    assert zoo.sample_input("ddddocr_ocr")["input1"].shape == (1, 1, 64, 256)
    x = zoo.sample_input("mediapipe_face_detection")["input"]
    assert x.shape == (1, 128, 128, 3) and x.min() >= -1 and x.max() <= 1 and x.min() < -0.9


def test_light_models_match_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    models = zoo.light_models()
    assert [m[0] for m in models] == [
        "bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
        "shufflenet", "squeezenet", "vgg19", "zfnet512"]
    name, path, feeds, expected = models[4]
    assert path.name == "light_resnet50.onnx"
    (x,) = feeds.values()
    assert x.shape == (1, 3, 224, 224) and x.dtype == np.float32
    n = x.size
    assert x.flat[0] == 0 and x.flat[n - 1] == np.float32((n - 1) / n)
    assert [e.shape for e in expected] == [(1, 1000)]
    # The inputs are the ones onnx's runner feeds: onnxruntime reproduces the stored outputs
    # within the runner's own tolerance (rtol=1e-3, atol=1e-7).
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = sess.run(None, feeds)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-3, atol=1e-7)
