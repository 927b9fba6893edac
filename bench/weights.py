"""Compressed weights (``sprat convert --weights fp16|int8``): file sizes, accuracy, cold start.

    python bench/weights.py accuracy [--models ppocr_v2_cls,...] [--block 64]
    flock /tmp/sprat-bench.lock python bench/weights.py cold [--reps 3] [--models ...]
    python bench/weights.py inputs DIR      # the text-line .npy inputs, for sprat convert --inputs

``accuracy``: per zoo model, the ``.sprat`` size as float32, fp16 and int8 (and the ratio), and
each output's cosine similarity and relative L2 error against the float32 model (worst output,
worst input; ``sprat.weights.accuracy``). Inputs: drawn text lines for the PP-OCR classifier
and recogniser and drawn text pages for the detector (``tests/batchdata.py``, preprocessed as
PaddleOCR does), ``sprat.zoo.sample_input`` (random) for the others.

``cold``: each model file loaded in a fresh process (``Interpreter.from_file``, one session,
one run): time to load, time from load to the first output, peak RSS, resident anonymous and
file-backed memory after the first run, packed weight bytes; medians over ``--reps`` rounds,
the three forms interleaved. The files are in the page cache (a warm start from disk).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "tests"):
    if str(p) not in sys.path:  # run as a script from a source checkout
        sys.path.insert(0, str(p))

from sprat import zoo  # noqa: E402
from sprat.converter import compress_weights, convert_graph  # noqa: E402
from sprat.format import write_model  # noqa: E402
from sprat.weights import accuracy  # noqa: E402

MODELS = ("ppocr_v2_cls", "ppocr_v4_rec", "ppocr_v4_det", "ddddocr_ocr", "nudenet_320n",
          "mediapipe_face_detection", "mediapipe_selfie_segmentation")
TEXT = {"ppocr_v2_cls": (48, 192), "ppocr_v4_rec": (48, 320)}


def text_lines(key: str, n: int = 8, seed: int = 1) -> list[dict[str, np.ndarray]]:
    """Drawn text lines at the model's input size, (pixel / 255 - 0.5) / 0.5 (PaddleOCR)."""
    import batchdata

    rng = np.random.default_rng(seed)
    h, w = TEXT[key]
    out = []
    for _ in range(n):
        img, _ = batchdata.text_line(rng)
        x = (np.asarray(img.resize((w, h)), np.float32) / 255 - 0.5) / 0.5
        out.append({"x": np.ascontiguousarray(x.transpose(2, 0, 1)[None])})
    return out


def text_pages(n: int = 2, size: int = 640) -> list[dict[str, np.ndarray]]:
    """Pages of drawn text lines, ImageNet-normalised (PaddleOCR's DB detector)."""
    import batchdata
    from PIL import Image

    out = []
    for seed in range(n):
        rng = np.random.default_rng(seed)
        page = Image.new("RGB", (size, size), (235, 235, 235))
        y = 10
        while y < size - 60:
            img, _ = batchdata.text_line(rng)
            page.paste(img, (int(rng.integers(0, size // 3)), y))
            y += img.size[1] + int(rng.integers(5, 30))
        x = np.asarray(page, np.float32) / 255
        x = (x - np.array([0.485, 0.456, 0.406], np.float32)) / np.array(
            [0.229, 0.224, 0.225], np.float32)
        out.append({"x": np.ascontiguousarray(x.transpose(2, 0, 1)[None])})
    return out


def feeds_for(key: str) -> tuple[list[dict[str, np.ndarray]], str]:
    if key in TEXT:
        return text_lines(key), "8 text lines"
    if key == "ppocr_v4_det":
        return text_pages(), "2 text pages"
    return [zoo.sample_input(key, seed) for seed in range(3)], "3 random (zoo sample)"


def cmd_accuracy(args) -> None:
    print(f"| model | fp32 | fp16 (ratio) | int8 b{args.block} (ratio) | inputs | fp16 cosine / "
          f"rel L2 | int8 cosine / rel L2 |")
    print("|---|---:|---:|---:|---|---|---|")
    for key in args.models.split(","):
        g = convert_graph(zoo.fetch(key))
        n32 = len(write_model(g))
        feeds, what = feeds_for(key)
        cells = []
        sizes = []
        for mode, block in (("fp16", None), ("int8", args.block)):
            small, _ = compress_weights(g, mode, block)
            n = len(write_model(small))
            sizes.append(f"{n / 2**20:.2f} MiB ({n / n32:.3f})")
            acc = accuracy(g, small, feeds)
            cos = min(a.cosine for a in acc.values())
            rel = max(a.rel_l2 for a in acc.values())
            cells.append(f"{cos:.6f} / {rel:.1e}")
        print(f"| {key} | {n32 / 2**20:.2f} MiB | {sizes[0]} | {sizes[1]} | {what} | "
              f"{cells[0]} | {cells[1]} |", flush=True)


_COLD = r"""
import json, sys, time
import numpy as np
t0 = time.perf_counter()
import sprat
from sprat import zoo
path, key = sys.argv[1], sys.argv[2]
feeds = zoo.sample_input(key)
t1 = time.perf_counter()
interp = sprat.Interpreter.from_file(path)
t_load = time.perf_counter() - t1
sess = interp.create_session(sprat.ScheduleConfig(num_threads=1))
sess.run(feeds)
t_first = time.perf_counter() - t1
mem = {}
for line in open("/proc/self/status"):
    k, _, v = line.partition(":")
    if k in ("RssAnon", "RssFile", "VmHWM"):
        mem[k] = int(v.split()[0]) / 1024
# NOTE: VmHWM, not ru_maxrss: Linux carries the parent's peak across fork + exec into it
print(json.dumps({"load_ms": 1e3 * t_load, "first_ms": 1e3 * t_first, "peak_mib": mem["VmHWM"],
                  "anon_mib": mem["RssAnon"], "file_mib": mem["RssFile"],
                  "packed_mib": interp.packed_bytes / 2**20}))
"""


def cmd_cold(args) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONPYCACHEPREFIX="/tmp/pyc-bench-weights")
    with tempfile.TemporaryDirectory() as tmp:
        files, sizes = {}, {}
        for key in args.models.split(","):
            g = convert_graph(zoo.fetch(key))
            for mode in ("fp32", "fp16", "int8"):
                path = os.path.join(tmp, f"{key}.{mode}.sprat")
                write_model(g if mode == "fp32" else compress_weights(g, mode)[0], path)
                files[key, mode] = path
                sizes[key, mode] = os.path.getsize(path) / 2**20
        rows: dict = {k: [] for k in files}
        for _ in range(args.reps):
            for (key, mode), path in files.items():
                r = subprocess.run([sys.executable, "-c", _COLD, path, key], env=env,
                                   capture_output=True, text=True, check=True)
                rows[key, mode].append(json.loads(r.stdout))
    print("| model | weights | file | load | load -> first output | peak RSS | anon RSS | "
          "file RSS | packed |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for (key, mode), rs in rows.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        print(f"| {key} | {mode} | {sizes[key, mode]:.1f} MiB "
              f"| {med['load_ms']:.0f} ms | {med['first_ms']:.0f} ms | {med['peak_mib']:.1f} MiB "
              f"| {med['anon_mib']:.1f} MiB | {med['file_mib']:.1f} MiB | "
              f"{med['packed_mib']:.1f} MiB |", flush=True)


def cmd_inputs(args) -> None:
    for key in TEXT:
        d = pathlib.Path(args.dir) / key
        d.mkdir(parents=True, exist_ok=True)
        for k, f in enumerate(text_lines(key)):
            np.save(d / f"line{k}.npy", f["x"][0])
    d = pathlib.Path(args.dir) / "ppocr_v4_det"
    d.mkdir(parents=True, exist_ok=True)
    for k, f in enumerate(text_pages()):
        np.save(d / f"page{k}.npy", f["x"][0])
    print(f"wrote {args.dir}/{{{','.join([*TEXT, 'ppocr_v4_det'])}}}/*.npy")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("accuracy")
    a.add_argument("--models", default=",".join(MODELS))
    a.add_argument("--block", type=int, default=64)
    c = sub.add_parser("cold")
    c.add_argument("--models", default="ppocr_v4_rec,ddddocr_ocr,nudenet_320n")
    c.add_argument("--reps", type=int, default=3)
    i = sub.add_parser("inputs")
    i.add_argument("dir")
    args = p.parse_args()
    {"accuracy": cmd_accuracy, "cold": cmd_cold, "inputs": cmd_inputs}[args.cmd](args)


if __name__ == "__main__":
    main()
