"""Squeeze-and-excitation benchmarks: the channel scale fused into the projection conv
(``_scale``, ``passes/fuse_scale.py``) and the squeeze fused into the depthwise conv (``_mean``,
``passes/fuse_mean.py``), against the separate kernels they replace.

    flock /tmp/sprat-bench.lock python bench/se.py [--threads 1,2] [--seconds 0.3]
    flock /tmp/sprat-bench.lock python bench/se.py --mean [--threads 1,2]
    flock /tmp/sprat-bench.lock python bench/se.py --models efficientnet_b0,mobilenet_v3_small

Default: for each SE projection shape (map, input channels K, output channels M) of
MobileNetV3-Small/Large, EfficientNet-B0 and EfficientNet-B3 (300 px), NHWC, batch 1, one
process: the cpu backend's Mul kernel then its 1x1 Conv kernel ("unfused"), and the fused Conv
kernel with the weight scaled ("w") or the input rows scaled ("x"), and the mode
``scale_weight_pays`` picks ("auto"). Medians of alternating rounds; times in microseconds and
the ratio to unfused.

``--mean``: the depthwise convs (with SiLU) that feed an SE squeeze in the same networks: the
conv alone, the conv then the GlobalAveragePool kernel, the conv with ``_mean``.

``--models``: whole broad-suite models (``sprat.testing.families``) converted three ways --
the default pipeline, without ``fuse_mean``, without ``fuse_mean`` and ``fuse_scale`` -- and
onnxruntime (default optimizations), in this one process, alternating blocks; best median of
five blocks each, and the ratio to onnxruntime.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench.kernels import _time
from sprat.backends.base import Workspace
from sprat.backends.cpu import CpuBackend, conv, threading
from sprat.ir.graph import Node
from sprat.ir.shapes import infer
from sprat.ir.tensorinfo import TensorInfo

#: (network, map side, K = expanded channels, M = output channels) of the SE projection convs
SE_FAMILY = [
    ("v3s", 56, 16, 16), ("v3s", 14, 96, 40), ("v3s", 14, 240, 40), ("v3s", 14, 144, 48),
    ("v3s", 7, 288, 96), ("v3s", 7, 576, 96),
    ("v3l", 28, 72, 40), ("v3l", 28, 120, 40), ("v3l", 14, 480, 112), ("v3l", 14, 672, 112),
    ("v3l", 7, 672, 160), ("v3l", 7, 960, 160),
    ("b0", 112, 32, 16), ("b0", 56, 96, 24), ("b0", 56, 144, 24), ("b0", 28, 144, 40),
    ("b0", 28, 240, 40), ("b0", 14, 240, 80), ("b0", 14, 480, 80), ("b0", 14, 480, 112),
    ("b0", 14, 672, 112), ("b0", 7, 672, 192), ("b0", 7, 1152, 192), ("b0", 7, 1152, 320),
    ("b3", 150, 40, 24), ("b3", 75, 144, 32), ("b3", 38, 192, 48), ("b3", 19, 288, 96),
    ("b3", 19, 576, 136), ("b3", 10, 816, 232), ("b3", 10, 1392, 384),
]


def _kernel(backend, node, arrays, consts):
    infos = [TensorInfo(a.shape, a.dtype, a if k in consts else None)
             for k, a in enumerate(arrays)]
    if not backend.has_fast_kernel(node, infos):
        raise RuntimeError(f"{node.name}: no fast cpu kernel")
    shape, dtype = infer(node, infos)[0]
    kernel = backend.make_kernel(node)
    kernel.prepare(infos, [TensorInfo(shape, dtype)])
    return kernel, np.empty(shape, dtype), Workspace.allocate(kernel)


def _median_us(fn, seconds):
    """Median call of ``fn`` in us over about ``seconds`` (``bench.kernels._time``'s calls)."""
    return statistics.median(_time(fn, seconds)) * 1e6


def _runner(kernel, ins, y, ws):
    return lambda: kernel.run(ins, [y], ws)


def case(hw, k, m, threads, seconds):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, hw, hw, k)).astype(np.float32)
    s = rng.uniform(0, 1, (1, 1, 1, k)).astype(np.float32)
    w = (rng.standard_normal((m, k, 1, 1)) * 0.1).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    backend = CpuBackend(threads)
    attrs = {"kernel_shape": [1, 1], "_layout": "NHWC"}
    mul, xs, mws = _kernel(backend, Node("Mul", "mul", [0, 1], [2], {}), [x, s], ())
    plain, y0, pws = _kernel(backend, Node("Conv", "conv", [0, 1, 2], [3], attrs), [xs, w, b],
                             (1, 2))
    fns = {"unfused": lambda: (mul.run([x, s], [xs], mws), plain.run([xs, w, b], [y0], pws))}
    outs = {}
    pays = conv.scale_weight_pays
    for mode, rule in (("w", lambda *a: True), ("x", lambda *a: False), ("auto", pays)):
        conv.scale_weight_pays = rule
        try:
            node = Node("Conv", "conv", [0, 1, 2, 3], [4], {**attrs, "_scale": True})
            kern, y, ws = _kernel(backend, node, [x, w, b, s], (1, 2))
        finally:
            conv.scale_weight_pays = pays
        outs[mode] = y
        auto = "w" if kern.scaled[1] else "x"
        fns[mode] = _runner(kern, [x, w, b, s], y, ws)
    times = {name: [] for name in fns}
    with threading.limits(threads):
        for _ in range(3):
            for name, fn in fns.items():
                times[name].append(_median_us(fn, seconds / 3))
        for name, fn in fns.items():
            fn()
    for mode, y in outs.items():
        np.testing.assert_allclose(y, y0, rtol=1e-4, atol=1e-4 * float(np.abs(y0).max()))
    return {name: min(ts) for name, ts in times.items()}, auto


#: (kernel, stride, channels, input map) of the depthwise convs an SE squeeze reads
DW_FAMILY = [(3, 1, 32, 112), (3, 2, 96, 112), (3, 1, 144, 56), (5, 2, 144, 56),
             (5, 1, 240, 28), (3, 2, 240, 28), (3, 1, 480, 14), (5, 1, 480, 14),
             (5, 1, 672, 14), (5, 2, 672, 14), (5, 1, 1152, 7), (3, 1, 1152, 7)]


def mean_case(k, stride, c, hw, threads, seconds):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, hw, hw, c)).astype(np.float32)
    w = (rng.standard_normal((c, 1, k, k)) * 0.3).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    backend = CpuBackend(threads)
    attrs = {"_layout": "NHWC", "group": c, "kernel_shape": [k, k], "pads": [k // 2] * 4,
             "strides": [stride, stride], "_activation": "Silu"}
    dw, y, dws = _kernel(backend, Node("Conv", "dw", [0, 1, 2], [3], attrs), [x, w, b], (1, 2))
    pool, p, pws = _kernel(backend, Node("GlobalAveragePool", "g", [0], [1], {"_layout": "NHWC"}),
                           [y], ())
    node = Node("Conv", "dw", [0, 1, 2], [3, 4], {**attrs, "_mean": True})
    infos = [TensorInfo(x.shape, x.dtype), TensorInfo(w.shape, w.dtype, w),
             TensorInfo(b.shape, b.dtype, b)]
    shapes = infer(node, infos)
    fused = backend.make_kernel(node, infos)
    fused.prepare(infos, [TensorInfo(sh, dt) for sh, dt in shapes])
    outs = [np.empty(sh, dt) for sh, dt in shapes]
    fws = Workspace.allocate(fused)
    fns = {"dw": lambda: dw.run([x, w, b], [y], dws),
           "dw+pool": lambda: (dw.run([x, w, b], [y], dws), pool.run([y], [p], pws)),
           "fused": lambda: fused.run([x, w, b], outs, fws)}
    times = {name: [] for name in fns}
    with threading.limits(threads):
        for _ in range(3):
            for name, fn in fns.items():
                times[name].append(_median_us(fn, seconds / 3))
        fns["dw+pool"]()
        fns["fused"]()
    np.testing.assert_allclose(outs[1], p, rtol=1e-5, atol=1e-6)
    return {name: min(ts) for name, ts in times.items()}


def mean_main(threads_list, seconds):
    for threads in threads_list:
        print(f"\n{threads} thread(s): us per call")
        print("| depthwise | conv | conv + pool | conv with _mean | pool | _mean's sums |")
        print("|---|---:|---:|---:|---:|---:|")
        tot = {"dw": 0.0, "dw+pool": 0.0, "fused": 0.0}
        for k, stride, c, hw in DW_FAMILY:
            t = mean_case(k, stride, c, hw, threads, seconds)
            for name in tot:
                tot[name] += t[name]
            print(f"| dw{k} s{stride} {c}@{hw} | {t['dw']:.1f} | {t['dw+pool']:.1f} | "
                  f"{t['fused']:.1f} | {t['dw+pool'] - t['dw']:.1f} | {t['fused'] - t['dw']:.1f} |")
        d, u, f = tot["dw"], tot["dw+pool"], tot["fused"]
        print(f"| all | {d:.0f} | {u:.0f} | {f:.0f} ({f / u:.2f}) | {u - d:.0f} | {f - d:.0f} |")


def models_main(names, threads_list):
    import onnxruntime as ort

    import sprat
    from sprat import passes
    from sprat.testing import families

    def session(blob, drop, threads):
        saved = list(passes.DEFAULT_PIPELINE)
        passes.DEFAULT_PIPELINE[:] = [p for p in saved if p[0] not in drop]
        try:
            buf = sprat.convert(blob)
        finally:
            passes.DEFAULT_PIPELINE[:] = saved
        return sprat.Interpreter.from_buffer(buf).create_session(
            sprat.ScheduleConfig(num_threads=threads))

    variants = {"all": (), "-fuse_mean": ("fuse_mean",),
                "-fuse_mean-fuse_scale": ("fuse_mean", "fuse_scale")}
    print("| model | threads | " + " | ".join(variants) + " | ort |")
    print("|---|---:|" + "---:|" * (len(variants) + 1))
    for name in names:
        model, feeds = families.build(name)
        blob = model.SerializeToString()
        for threads in threads_list:
            fns = {}
            for label, drop in variants.items():
                fns[label] = _runner_of(session(blob, drop, threads), feeds)
            so = ort.SessionOptions()
            so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
            o = ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"])
            fns["ort"] = _ort_runner(o, feeds)
            best = dict.fromkeys(fns, float("inf"))
            for _ in range(5):  # NOTE: a sprat session holds BLAS to its threads itself
                for label, fn in fns.items():
                    best[label] = min(best[label], _median_us(fn, 0.6))
            ort_t = best["ort"]
            cells = [f"{best[k] / 1e3:.2f} ms ({best[k] / ort_t:.3f})" for k in variants]
            print(f"| {name} | {threads} | " + " | ".join(cells) + f" | {ort_t / 1e3:.2f} ms |")


def _runner_of(sess, feeds):
    return lambda: sess.run(feeds)


def _ort_runner(sess, feeds):
    return lambda: sess.run(None, feeds)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--seconds", type=float, default=0.3, help="time per variant per case")
    ap.add_argument("--mean", action="store_true", help="the depthwise + squeeze family")
    ap.add_argument("--models", default="", help="comma-separated broad-suite models")
    args = ap.parse_args(argv)
    threads_list = [int(t) for t in args.threads.split(",")]
    if args.models:
        models_main(args.models.split(","), threads_list)
        return
    if args.mean:
        mean_main(threads_list, args.seconds)
        return
    for threads in threads_list:
        print(f"\n{threads} thread(s): us per call (ratio to unfused)")
        print("| net | map | K | M | unfused | w | x | auto (mode) |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        tot = {"unfused": 0.0, "w": 0.0, "x": 0.0, "auto": 0.0}
        for net, hw, k, m in SE_FAMILY:
            t, mode = case(hw, k, m, threads, args.seconds)
            for name in tot:
                tot[name] += t[name]
            u = t["unfused"]
            print(f"| {net} | {hw} | {k} | {m} | {u:.1f} | {t['w']:.1f} ({t['w'] / u:.2f}) | "
                  f"{t['x']:.1f} ({t['x'] / u:.2f}) | {t['auto']:.1f} ({t['auto'] / u:.2f}) "
                  f"{mode} |")
        u = tot["unfused"]
        print(f"| all | | | | {u:.0f} | {tot['w']:.0f} ({tot['w'] / u:.2f}) | "
              f"{tot['x']:.0f} ({tot['x'] / u:.2f}) | {tot['auto']:.0f} ({tot['auto'] / u:.2f}) |")


if __name__ == "__main__":
    main()
