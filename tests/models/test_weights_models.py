"""Zoo models converted with compressed weights (``sprat convert --weights fp16|int8``) run and
stay close to the float32 model, on the inputs they are made for.

Bounds (cosine similarity of each output to the float32 model's, worst over the inputs) are the
measured values with a margin, not a tolerance widened until green: PP-OCR text-direction
classifier, 8 drawn text lines: fp16 0.9999999999, int8 (block 64) 0.99999998; PP-OCRv4
recogniser (40 x 6625 softmax per line): fp16 0.999991, int8 0.9913, with the per-timestep
argmax equal on >= 97.5 % of the timesteps of each line. MediaPipe's TFLite files store float16
weights, so ``fp16`` gives them back exactly: outputs bit-identical to the float32 conversion.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import sprat
from sprat import zoo
from sprat.converter import convert_graph
from sprat.format import write_model
from sprat.weights import accuracy, compress

pytest.importorskip("onnx")
pytest.importorskip("PIL")
import batchdata  # noqa: E402

SIZE = {("ppocr_v2_cls", "fp16"): 0.59, ("ppocr_v2_cls", "int8"): 0.44,
        ("ppocr_v4_rec", "fp16"): 0.52, ("ppocr_v4_rec", "int8"): 0.29}
ROOT = Path(__file__).resolve().parents[2]
COSINE = {("ppocr_v2_cls", "fp16"): 0.99999, ("ppocr_v2_cls", "int8"): 0.9999,
          ("ppocr_v4_rec", "fp16"): 0.9999, ("ppocr_v4_rec", "int8"): 0.98}


def text_feeds(key: str, n: int, seed: int = 1) -> list[dict[str, np.ndarray]]:
    """``n`` drawn text lines preprocessed as PaddleOCR does ((pixel/255 - 0.5) / 0.5)."""
    rng = np.random.default_rng(seed)
    h, w = (48, 192) if key == "ppocr_v2_cls" else (48, 320)
    out = []
    for _ in range(n):
        img, _ = batchdata.text_line(rng)
        x = (np.asarray(img.resize((w, h)), np.float32) / 255 - batchdata.MEAN) / batchdata.STD
        out.append({"x": np.ascontiguousarray(x.transpose(2, 0, 1)[None])})
    return out


@pytest.mark.parametrize("key", ["ppocr_v2_cls", "ppocr_v4_rec"])
@pytest.mark.parametrize("mode", ["fp16", "int8"])
def test_ocr_models_stay_close_to_fp32(key, mode, tmp_path):
    g = convert_graph(zoo.fetch(key))
    small, _ = compress(g, mode)
    path = tmp_path / f"{key}.{mode}.sprat"
    size = len(write_model(small, path))
    # NOTE: measured 0.583 / 0.431 (the classifier: 0.5 MB, whose biases, small weights and
    # 64-byte blob alignment weigh), 0.510 / 0.283 (the recogniser, 10.9 MB)
    assert size / len(write_model(g)) < SIZE[key, mode]
    feeds = text_feeds(key, 8)
    (acc,) = accuracy(g, small, feeds).values()
    assert acc.cosine >= COSINE[key, mode]
    ref = sprat.Interpreter.from_graph(g).create_session()
    got = sprat.Interpreter.from_file(path).create_session(sprat.ScheduleConfig(num_threads=2))
    agree = []
    for f in feeds:
        (a,), (b,) = ref.run(f).values(), got.run(f).values()
        agree.append((a.argmax(-1) == b.argmax(-1)).mean())
    # NOTE: a timestep whose two best classes are near a tie may flip (also between 1 and 2
    # threads): one of 40 is 0.975
    assert min(agree) >= (1.0 if key == "ppocr_v2_cls" else 0.95)


def test_mediapipe_fp16_weights_come_back_exactly():
    key = "mediapipe_face_detection"
    g = convert_graph(zoo.fetch(key))
    small, summary = compress(g, "fp16")
    assert summary.compressed > 10
    feeds = zoo.sample_input(key)
    want = sprat.Interpreter.from_graph(g).create_session().run(feeds)
    got = sprat.Interpreter.from_buffer(write_model(small)).create_session().run(feeds)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


def test_cli_convert_prints_the_accuracy_report(tmp_path):
    src = zoo.fetch("ppocr_v2_cls")
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    for k, f in enumerate(text_feeds("ppocr_v2_cls", 3)):
        np.save(inputs / f"{k}.npy", f["x"][0])  # NOTE: rows without the batch dim, as batch
    out = tmp_path / "cls.sprat"
    r = subprocess.run([sys.executable, "-m", "sprat", "convert", str(src), "-o", str(out),
                        "--weights", "int8", "--weight-block", "32", "--inputs", str(inputs)],
                       capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    assert "as int8, block 32" in r.stdout
    assert f"inputs from {inputs}, worst of 3" in r.stdout
    line = next(x for x in r.stdout.splitlines() if "save_infer_model" in x)
    cosine, rel = float(line.split()[1]), float(line.split()[2])
    assert cosine >= 0.9999 and rel < 1e-2
    assert sprat.Interpreter.from_file(out).graph.metadata["sprat_weights"] == "int8 block 32"
    r = subprocess.run([sys.executable, "-m", "sprat", "convert", str(src), "-o", str(out),
                        "--weights", "fp16", "--weight-block", "32"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    assert r.returncode == 2 and "--weight-block N (N >= 0) goes with --weights int8" in r.stderr
