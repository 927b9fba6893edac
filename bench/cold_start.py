"""Cold start with the compiled cache: a fresh process, from ``import sprat`` to the first output.

    python bench/cold_start.py [--models a,b] [--repeats N] [--first-repeats N]

For each real ONNX model of the zoo, fresh subprocesses run ``sprat.InferenceSession(model.onnx)``
and one ``run`` on ``zoo.sample_input`` (numpy is imported and the feeds loaded before the clock
starts, as in ``bench/run.py``), in three states:

- ``first start``: no compiled cache and an empty bytecode cache (a new ``PYTHONPYCACHEPREFIX``):
  the very first start after installing (the kernels were compiled by the package's build: no
  JIT compiles anything at run time);
- ``no cache``: no ``cache_dir`` (any start after the first);
- ``warm cache``: ``ScheduleConfig(cache_dir=d)`` holding a valid entry.

Two untimed children (without, then with ``cache_dir``) run first, so the entry exists and the
OS page cache and Python's bytecode cache (in a private ``PYTHONPYCACHEPREFIX``, as an installed
package has ``.pyc`` files) are warm; then ``no cache`` and ``warm cache`` children alternate
``--repeats`` times and the medians are reported. Each warm-cache child also reports whether it
imported a JIT (numba, llvmlite) or ``onnx``.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from a source checkout
    sys.path.insert(0, str(ROOT))

from bench.run import child_env  # noqa: E402

MODELS = ("ppocr_v4_det", "ppocr_v4_rec", "ppocr_v2_cls", "nudenet_320n", "ddddocr_ocr",
          "ddddocr_det")

_CHILD = r"""
import json, sys, time
import numpy as np
model, feeds_path, cache_dir = sys.argv[1], sys.argv[2], sys.argv[3] or None
with np.load(feeds_path) as z:
    feeds = {k: z[k] for k in z.files}
t0 = time.perf_counter()
import sprat
sess = sprat.InferenceSession(model, config=sprat.ScheduleConfig(cache_dir=cache_dir))
sess.run(None, feeds)
t1 = time.perf_counter()
jit = any(m in sys.modules for m in ("numba", "llvmlite"))
print(json.dumps({"s": t1 - t0, "jit": jit, "onnx": "onnx" in sys.modules}))
"""


def child(model: pathlib.Path, feeds: pathlib.Path, cache_dir: str | None,
          pycache: pathlib.Path | None = None) -> dict:
    """One fresh process; returns ``{"s", "jit", "onnx"}``. Raises RuntimeError if it fails."""
    env = child_env(pycache or feeds.parent / "pycache")
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(model), str(feeds), cache_dir or ""],
                          capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"cold-start child failed on {model.name}:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bench_model(key: str, repeats: int, first_repeats: int, work: pathlib.Path) -> dict:
    import numpy as np

    from sprat import zoo

    model = zoo.fetch(key)
    feeds = work / f"{key}_feeds.npz"
    np.savez(feeds, **zoo.sample_input(key))
    cache_dir = str(work / f"cache_{key}")
    first = []
    for _ in range(first_repeats):
        pycache = pathlib.Path(tempfile.mkdtemp(prefix="sprat-pyc-", dir=work))
        try:
            first.append(child(model, feeds, None, pycache)["s"])
        finally:
            shutil.rmtree(pycache, ignore_errors=True)
    child(model, feeds, None)  # untimed: bytecode and page cache warm
    child(model, feeds, cache_dir)  # untimed: fills the entry
    plain, cached = [], []
    for _ in range(repeats):
        plain.append(child(model, feeds, None))
        cached.append(child(model, feeds, cache_dir))
    row = {"model": key,
           "first_s": statistics.median(first) if first else None,
           "plain_s": statistics.median(r["s"] for r in plain),
           "cached_s": statistics.median(r["s"] for r in cached),
           "jit": any(r["jit"] for r in plain + cached),
           "onnx": any(r["onnx"] for r in cached)}
    print(f"  {key}: {row}", file=sys.stderr, flush=True)
    return row


def table(rows: list[dict]) -> str:
    header = ("| model | first start s (no bytecode) | no cache s | warm cache s | "
              "warm / no cache | warm / first start | JIT imported | onnx imported (warm) |")
    lines = [header, "|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        first = "-" if r["first_s"] is None else f"{r['first_s']:.2f}"
        vs_first = "-" if r["first_s"] is None else f"{r['cached_s'] / r['first_s']:.3f}"
        jit, onnx = ("yes" if r[k] else "no" for k in ("jit", "onnx"))
        lines.append(f"| {r['model']} | {first} | {r['plain_s']:.2f} | {r['cached_s']:.2f} | "
                     f"{r['cached_s'] / r['plain_s']:.2f} | {vs_first} | {jit} | {onnx} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--repeats", type=int, default=3, help="timed children per state (median)")
    ap.add_argument("--first-repeats", type=int, default=1,
                    help="first-start children per model (empty bytecode cache; 0 skips)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="sprat-cold-") as tmp:
        rows = [bench_model(k, args.repeats, args.first_repeats, pathlib.Path(tmp))
                for k in args.models.split(",") if k]
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
