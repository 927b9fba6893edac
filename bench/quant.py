"""Quantized models, side by side: sprat against onnxruntime on the same quantized model, and
against onnxruntime's fp32 time on the original model (issue 14's speed targets: <= 1.0x
onnxruntime's quantized time, <= 0.8x its fp32 time for the CNNs).

    python bench/quant.py [--models name:format,...] [--threads 1,2] [--runs N]

Default models: the three issue 14 names (ResNet-18 QDQ, MobileNetV2 QOperator, MiniLM
dynamic), and families none of its kernels were written for: EfficientNet-B0 (SiLU and
squeeze-excite) QOperator and QDQ, a YOLO C2f/SPPF neck (Concat, MaxPool, Resize) QOperator and
QDQ, MobileNetV3-small (hard-swish) QOperator; and three real models of the zoo (issue 14's
"two real zoo models" in QDQ and QOperator form): PP-OCR v2 cls, NudeNet 320n (YOLOv8n) and
ddddocr's YOLOX detector, each brought to opset 13 and through onnxruntime's
``quant_pre_process`` first, calibrated on ``sprat.zoo.sample_input`` rows.

Models: ``sprat.testing.families`` at full size (224x224 images, 128 tokens), quantized by
onnxruntime's own quantizer as ``tests/models/test_quant_models.py`` does: ``qdq`` =
``quantize_static`` QDQ, per-channel s8 weights, u8 activations (4 seeded random calibration
batches); ``qop`` = QOperator, per-tensor weights, reduce_range; ``dyn`` = ``quantize_dynamic``
with QInt8 weights (DynamicQuantizeLinear + MatMulInteger + Cast/Mul). The integer GEMM's path
is printed (``sprat.backends.cpu.quant.PATH``: amx, vnni or int16; ``SPRAT_I8`` forces one).
Timing: ``run.timed_blocks`` (alternating blocks, best
block median). ``err``: max |sprat - spec| / max|spec| of the output against onnxruntime with
graph optimizations disabled (the spec), beside the same for onnxruntime's own fast path.
Run it under the shared lock: ``flock /tmp/sprat-bench.lock python bench/quant.py``.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import sprat  # noqa: E402
from bench.run import ort_session, timed_blocks  # noqa: E402
from sprat import zoo  # noqa: E402
from sprat.testing.families import build  # noqa: E402

FORMATS = ("qdq", "qop", "dyn")
DEFAULT_MODELS = ("resnet18:qdq,mobilenet_v2:qop,bert_minilm:dyn,efficientnet_b0:qop,"
                  "efficientnet_b0:qdq,yolo_c2f_neck:qop,yolo_c2f_neck:qdq,mobilenet_v3_small:qop,"
                  "ppocr_v2_cls:qdq,ppocr_v2_cls:qop,nudenet_320n:qdq,nudenet_320n:qop,"
                  "ddddocr_det:qdq,ddddocr_det:qop")


def quantize(name: str, fmt: str, workdir: pathlib.Path):
    """(fp32 path, quantized path, feeds) of ``name`` quantized as ``fmt``: a family model of
    ``sprat.testing.families`` or a real model of the zoo (``sprat.zoo.MODELS``)."""
    import onnx
    from onnxruntime import quantization as q

    if name in zoo.MODELS:
        # NOTE: a real model as onnxruntime's documentation has a user quantize it: opset 13
        # at least (per-axis DequantizeLinear; PP-OCR's files are opset 11), then
        # ``quant_pre_process`` (shape inference, BatchNormalization folded); calibrated on
        # ``zoo.sample_input`` rows of other seeds than the timed feed
        src = zoo.fetch(name)
        feeds = zoo.sample_input(name)
        model = onnx.load(src)
        if max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) < 13:
            from onnx import version_converter

            src = workdir / f"{name}.op13.onnx"
            onnx.save(version_converter.convert_version(model, 13), src)
        pre = workdir / f"{name}.pre.onnx"
        q.quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
        rows = [zoo.sample_input(name, seed=s) for s in range(1, 5)]
        src, quantize_from = zoo.fetch(name), pre
    else:
        model, feeds = build(name)
        src = quantize_from = workdir / f"{name}.onnx"
        onnx.save(model, src)
        rng = np.random.default_rng(0)
        # NOTE: integer inputs (token ids, masks) as the model's own sample
        rows = [{k: rng.standard_normal(v.shape).astype(np.float32)
                 if v.dtype.kind == "f" else v for k, v in feeds.items()} for _ in range(4)]

    class Calibration(q.CalibrationDataReader):
        def __init__(self):
            self.batches = iter(rows)

        def get_next(self):
            return next(self.batches, None)

    dst = workdir / f"{name}.{fmt}.onnx"
    if fmt == "dyn":
        q.quantize_dynamic(str(quantize_from), str(dst), weight_type=q.QuantType.QInt8)
    elif fmt == "qdq":
        q.quantize_static(str(quantize_from), str(dst), Calibration(),
                          quant_format=q.QuantFormat.QDQ,
                          per_channel=True, activation_type=q.QuantType.QUInt8,
                          weight_type=q.QuantType.QInt8)
    else:
        q.quantize_static(str(quantize_from), str(dst), Calibration(),
                          quant_format=q.QuantFormat.QOperator, per_channel=False,
                          reduce_range=True, weight_type=q.QuantType.QInt8)
    return src, dst, feeds


def spec_output(path, feeds):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(
        None, feeds)[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=DEFAULT_MODELS,
                    help="name:format list (formats: qdq, qop, dyn)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",")]
    from sprat.backends.cpu.quant import PATH

    print(f"integer GEMM path: {PATH}\n")
    print("| model | threads | sprat ms | ort quant ms | sprat/ort quant | ort fp32 ms | "
          "sprat/ort fp32 | err sprat | err ort fast |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as d:
        for item in args.models.split(","):
            name, fmt = item.split(":")
            src, dst, feeds = quantize(name, fmt, pathlib.Path(d))
            spec = spec_output(dst, feeds)
            scale = float(np.abs(spec).max()) or 1.0
            for nt in threads:
                sess = sprat.InferenceSession(str(dst), sprat.ScheduleConfig(num_threads=nt))
                oq, of = ort_session(dst, nt), ort_session(src, nt)
                got = sess.run(None, feeds)[0]
                fast = oq.run(None, feeds)[0]
                t = timed_blocks({k: (lambda r=r, f=feeds: r.run(None, f))
                                  for k, r in (("sprat", sess), ("ortq", oq), ("ortf", of))},
                                 args.runs)
                s, q, f = (t[k] * 1e3 for k in ("sprat", "ortq", "ortf"))
                print(f"| {name} {fmt} | {nt} | {s:.2f} | {q:.2f} | {s / q:.2f} | {f:.2f} | "
                      f"{s / f:.2f} | {np.abs(got - spec).max() / scale:.1e} | "
                      f"{np.abs(fast - spec).max() / scale:.1e} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
