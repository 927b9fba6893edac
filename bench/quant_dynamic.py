"""Dynamically quantized models side by side: sprat and onnxruntime on the same quantized model,
and onnxruntime's fp32 time on the original (issue 14's speed criterion).

    python bench/quant_dynamic.py [--models bert_minilm] [--threads 1,2] [--runs 20]

Each model of ``sprat.testing.families`` goes through onnxruntime's ``quantize_dynamic`` with
QInt8 weights (DynamicQuantizeLinear + MatMulInteger + Cast/Mul, as a user makes it). The three
runs alternate in blocks (``bench.run.timed_blocks``: the best block median of each); onnxruntime
runs with its default optimizations (its fast path) and ``intra_op_num_threads=N``. The table
gives the times, sprat / onnxruntime on the quantized model, sprat / onnxruntime fp32, and the
largest output error against the spec's result (onnxruntime with ``ORT_DISABLE_ALL``) of sprat
and of onnxruntime's fast path, as a fraction of max |output|. It also names the integer GEMM's
path (``sprat.backends.cpu.quant.PATH``: amx, vnni or int16; ``SPRAT_I8`` forces one).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from a source checkout
    sys.path.insert(0, str(ROOT))

import numpy as np

import sprat
from bench.run import ort_session, timed_blocks
from sprat.testing.families import build


def quantized(name: str, workdir: pathlib.Path):
    """(fp32 path, quantized path, feeds) of a family model through ``quantize_dynamic``."""
    import onnx
    from onnxruntime import quantization

    model, feeds = build(name)
    src, dst = workdir / f"{name}.onnx", workdir / f"{name}.dyn.onnx"
    onnx.save(model, src)
    quantization.quantize_dynamic(str(src), str(dst),
                                  weight_type=quantization.QuantType.QInt8)
    return src, dst, feeds


def spec_output(path: pathlib.Path, feeds):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(
        None, feeds)[0]


def _call(sess, feeds):
    return lambda: sess.run(None, feeds)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="bert_minilm")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args(argv)
    from sprat.backends.cpu.quant import PATH

    load = pathlib.Path("/proc/loadavg")
    load = load.read_text().split()[0] if load.exists() else "?"
    print(f"integer GEMM path: {PATH}; load average {load}")
    print(f"{'model':14s} {'thr':>3s} | {'sprat ms':>8s} {'ort ms':>7s} {'ort fp32':>8s} | "
          f"{'/ort':>5s} {'/fp32':>5s} | {'sprat err':>9s} {'ort err':>8s}")
    with tempfile.TemporaryDirectory() as d:
        for name in args.models.split(","):
            fp32, q, feeds = quantized(name, pathlib.Path(d))
            want = spec_output(q, feeds)
            scale = float(np.abs(want).max()) or 1.0
            for t in (int(x) for x in args.threads.split(",")):
                o, o32 = ort_session(q, t), ort_session(fp32, t)
                s = sprat.InferenceSession(str(q), sprat.ScheduleConfig(num_threads=t))
                err_s = float(np.abs(s.run(None, feeds)[0] - want).max()) / scale
                err_o = float(np.abs(o.run(None, feeds)[0] - want).max()) / scale
                best = timed_blocks({k: _call(sess, feeds) for k, sess in
                                     (("sprat", s), ("ort", o), ("ort32", o32))}, args.runs)
                ms = {k: v * 1e3 for k, v in best.items()}
                print(f"{name:14s} {t:3d} | {ms['sprat']:8.2f} {ms['ort']:7.2f} "
                      f"{ms['ort32']:8.2f} | {ms['sprat'] / ms['ort']:5.2f} "
                      f"{ms['sprat'] / ms['ort32']:5.2f} | {err_s:9.2e} {err_o:8.2e}",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
