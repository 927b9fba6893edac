"""precision="low" (fp16 weights) versus "normal" (fp32) on single MatMul nodes, side by side.

    python bench/precision.py [--runs 200] [--threads 1]

Each case is one MatMul with a constant weight (built with ``onnx.helper``) run by two sessions
of one Interpreter in this process, alternating, at ``--threads`` threads; the table gives the
median time of each, the ratio low / normal (lower is better), which kernel the low session used
(``w_f16``: the fp16 weight path; ``fp32``: the case is outside ``GEMV_MAX_ROWS`` and "low" alone
keeps fp32) and the largest error of low against normal relative to the largest output.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from a source checkout
    sys.path.insert(0, str(ROOT))

import sprat  # noqa: E402
from sprat.converter import convert_graph  # noqa: E402

# (name, rows M, K, N): BERT-base FFN GEMVs (one token), a 4-row batch, the ddddocr OCR head
CASES = [("M=1 768x3072", 1, 768, 3072), ("M=1 3072x768", 1, 3072, 768),
         ("M=2 1024x4096", 2, 1024, 4096), ("M=4 768x3072", 4, 768, 3072),
         ("M=32 1024x8210", 32, 1024, 8210)]


def _model(m: int, k: int, n: int):
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((k, n)) * 0.05).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return convert_graph(model.SerializeToString()), {
        "x": rng.standard_normal((m, k)).astype(np.float32)}


def bench_case(name: str, m: int, k: int, n: int, runs: int, threads: int) -> str:
    graph, feeds = _model(m, k, n)
    interp = sprat.Interpreter.from_graph(graph)
    normal = interp.create_session(sprat.ScheduleConfig(num_threads=threads))
    low = interp.create_session(sprat.ScheduleConfig(num_threads=threads, precision="low"))
    ref, got = normal.run(feeds)["y"], low.run(feeds)["y"]
    err = float(np.abs(got - ref).max() / max(1.0, np.abs(ref).max()))
    kernel = "w_f16" if getattr(low.plan.steps[0].kernel, "f16", None) is not None else "fp32"
    times = {"normal": [], "low": []}
    for _ in range(runs):
        for key, sess in (("normal", normal), ("low", low)):
            t0 = time.perf_counter()
            sess.run(feeds)
            times[key].append(time.perf_counter() - t0)
    t_n, t_l = (statistics.median(times[k]) * 1e3 for k in ("normal", "low"))
    return (f"| {name} | {t_n:.3f} | {t_l:.3f} | {t_l / t_n:.2f} | {kernel} | {err:.1e} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    print("| case | normal ms | low ms | low / normal | low kernel | max rel err |")
    print("|---|---:|---:|---:|---|---:|")
    for case in CASES:
        print(bench_case(*case, args.runs, args.threads), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
