"""TFLite benchmark: sprat versus ai-edge-litert on the MediaPipe models, side by side.

    python bench/litert.py [--int8] [--models a,b] [--threads 1,2] [--runs N] [--write FILE]

``--int8``: the full-integer models of the zoo (``zoo.INT8_MODELS``) instead of the float
MediaPipe ones (issue 14), in a section of their own.

For each TFLite model of the zoo (``zoo.MODELS`` and ``zoo.EXTRA_MODELS``, fetched with
``sprat.zoo``, fed ``zoo.sample_input``) and thread count, sprat (the model converted to ``.sprat``
bytes in memory, ``ScheduleConfig(num_threads=N)``) and ai-edge-litert
(``ai_edge_litert.interpreter.Interpreter(num_threads=N)``, its default op resolver: builtin
kernels with the XNNPACK delegate, which is what a user gets and the only one that runs
MediaPipe's custom ``Convolution2DTransposeBias``) run in this one process, in alternating blocks
(``bench.run.timed_blocks``). A litert call is ``set_tensor`` per input, ``invoke``, ``get_tensor``
per output, the same work as ``Session.run(feeds)``. With ``--int8`` each model also runs once on LiteRT's
reference kernels (``OpResolverType.BUILTIN_REF``), the oracle of full-integer models, and the
table adds sprat's and litert's error against them.

The table reports both medians, the ratio sprat/litert (lower is better) with its geometric mean
per thread count, and the largest output error ``max|sprat - litert| / max(1, max|litert|)``.
``--write FILE`` replaces (or appends) this benchmark's own section of FILE and keeps every other
section. Absolute times on shared machines are noise; the ratios measured side by side are the
figure (DESIGN §6).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from a source checkout
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import sprat  # noqa: E402
from bench.run import bench_all, geomean, machine_info, rel_error, timed_blocks, with_failures  # noqa: E402
from sprat import zoo  # noqa: E402

HEADER = "## TFLite models: sprat versus ai-edge-litert"
INT8_HEADER = "## Full-integer TFLite models: sprat versus ai-edge-litert"
TFLITE_MODELS = tuple(k for k, m in {**zoo.MODELS, **zoo.EXTRA_MODELS}.items()
                      if m.format == "tflite")
#: the full-integer (int8) TFLite models of the zoo (``--int8``; issue 14)
INT8_MODELS = tuple(zoo.INT8_MODELS)


@dataclass
class Row:
    model: str
    threads: int
    sprat_ms: float
    litert_ms: float
    rel_err: float
    convert_s: float
    #: ``--int8``: sprat's and litert's (XNNPACK) largest error against LiteRT's reference
    #: kernels (``OpResolverType.BUILTIN_REF``: the oracle of the full-integer models)
    ref_err: float | None = None
    fast_err: float | None = None

    @property
    def ratio(self) -> float:
        return self.sprat_ms / self.litert_ms


def litert_runner(path: pathlib.Path, threads: int, feeds: dict[str, np.ndarray],
                  reference: bool = False):
    """A function running the model once on ai-edge-litert: ``() -> {output name: array}``;
    ``reference``: on TFLite's reference kernels (``OpResolverType.BUILTIN_REF``) instead of
    the default resolver (XNNPACK)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = (Interpreter(model_path=str(path), num_threads=threads,
                      experimental_op_resolver_type=OpResolverType.BUILTIN_REF) if reference
          else Interpreter(model_path=str(path), num_threads=threads))
    it.allocate_tensors()
    ins = it.get_input_details()
    if len(ins) != len(feeds):
        raise ValueError(f"{path.name}: litert has {len(ins)} inputs, the zoo feeds {len(feeds)}")
    # NOTE: zoo feeds are in the model's input order (a one-input model for every MediaPipe key)
    pairs = [(d["index"], x) for d, x in zip(ins, feeds.values())]
    outs = [(d["name"], d["index"]) for d in it.get_output_details()]

    def run():
        for index, x in pairs:
            it.set_tensor(index, x)
        it.invoke()
        return {name: it.get_tensor(index) for name, index in outs}

    return run


def bench_model(key: str, threads: list[int], runs: int, log, int8: bool = False) -> list[Row]:
    path = zoo.fetch(key)
    feeds = zoo.sample_input(key)
    t0 = time.perf_counter()
    interp = sprat.Interpreter.from_buffer(sprat.convert(path))
    convert_s = time.perf_counter() - t0
    # NOTE: a full-integer model's oracle is LiteRT's reference kernels, which XNNPACK's
    # requantisation departs from (tests/models/test_tflite_int8.py)
    ref = litert_runner(path, 1, feeds, reference=True)() if int8 else None
    rows = []
    for n in threads:
        sess = interp.create_session(sprat.ScheduleConfig(num_threads=n))
        lite = litert_runner(path, n, feeds)
        got, fast = sess.run(feeds), lite()
        err = rel_error(got, fast)
        t = timed_blocks({"sprat": lambda sess=sess: sess.run(feeds), "litert": lite}, runs)
        row = Row(key, n, t["sprat"] * 1e3, t["litert"] * 1e3, err, convert_s,
                  *((rel_error(got, ref), rel_error(fast, ref)) if int8 else ()))
        sess = lite = None
        log(f"{key} @{n}t: sprat {row.sprat_ms:.2f} ms, litert {row.litert_ms:.2f} ms, "
            f"ratio {row.ratio:.2f}, err {row.rel_err:.1e}"
            + (f", vs reference kernels: sprat {row.ref_err:.1e}, litert {row.fast_err:.1e}"
               if int8 else ""))
        rows.append(row)
    return rows


def markdown_table(rows: list[Row]) -> str:
    ref = any(r.ref_err is not None for r in rows)
    lines = ["| model | threads | sprat ms | litert ms | sprat/litert | max rel err | "
             + ("err sprat vs ref | err litert vs ref | " if ref else "") + "convert s |",
             "|---|---:|---:|---:|---:|---:|" + ("---:|---:|" if ref else "") + "---:|"]
    for r in rows:
        errs = f"{r.ref_err:.1e} | {r.fast_err:.1e} | " if ref else ""
        lines.append(f"| {r.model} | {r.threads} | {r.sprat_ms:.2f} | {r.litert_ms:.2f} | "
                     f"{r.ratio:.2f} | {r.rel_err:.1e} | {errs}{r.convert_s:.2f} |")
    lines.append("")
    for n in sorted({r.threads for r in rows}):
        ratios = [r.ratio for r in rows if r.threads == n]
        lines.append(f"Geometric mean of sprat/litert at {n} thread(s): "
                     f"**{geomean(ratios):.2f}** over {len(ratios)} model(s).  ")
    return "\n".join(lines)


def litert_version() -> str:
    try:
        from importlib.metadata import version

        return version("ai-edge-litert")
    except Exception:  # noqa: BLE001  (metadata missing: report, do not fail the run)
        return "unknown"


def section(table: str, argv: list[str], runs: int, int8: bool = False) -> str:
    cmd = "python bench/litert.py " + " ".join(argv)
    return (
        f"{INT8_HEADER if int8 else HEADER}\n\n"
        f"sprat versus ai-edge-litert on the "
        f"{'full-integer (int8)' if int8 else 'MediaPipe'} TFLite models of the zoo, both in one "
        "process, measured in alternating blocks (`bench.run.timed_blocks`: the median call of "
        "a block, best block of each runtime); ratio = "
        "sprat / litert (lower is better). litert: `Interpreter(num_threads=N)` with its default "
        "op resolver (XNNPACK delegate); sprat converts the `.tflite` in memory (convert s). max "
        "rel err is `max|sprat - litert| / max(1, max|litert|)` over the outputs"
        + (("; err ... vs ref: the same measure against LiteRT's reference kernels "
            "(`OpResolverType.BUILTIN_REF`, the oracle of these models: sprat's int8 ops "
            "reproduce them bit for bit), of sprat and of litert's default (XNNPACK) path"
            ) if int8 else "") + ".\n\n"
        f"Command: `{cmd.strip()}`  \nDate: {time.strftime('%Y-%m-%d %H:%M %Z')}\n\n"
        f"{machine_info()}, ai-edge-litert {litert_version()}\n\n{table}\n")


def write_section(path: pathlib.Path, text: str, header: str = HEADER) -> None:
    """Replace the ``header`` section of ``path`` with ``text`` (append it when absent), keeping
    every other section (bench/run.py rewrites only its head, above the first ``## ``)."""
    old = path.read_text() if path.exists() else ""
    if header in old:
        start = old.index(header)
        nxt = old.find("\n## ", start + len(header))
        old = old[:start] + (old[nxt + 1:] if nxt >= 0 else "")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text((old.rstrip() + "\n\n" if old.strip() else "") + text)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", help=f"comma-separated zoo keys (default: every TFLite model: "
                                    f"{', '.join(TFLITE_MODELS)})")
    p.add_argument("--int8", action="store_true",
                   help=f"the full-integer models instead: {', '.join(INT8_MODELS)}")
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    p.add_argument("--runs", type=int, default=30, help="timed runs per setting (default 30)")
    p.add_argument("--write", metavar="FILE",
                   help="also write this benchmark's section (markdown) into FILE")
    args = p.parse_args(argv)
    if args.runs < 1:
        p.error("--runs must be at least 1")
    known = INT8_MODELS if args.int8 else TFLITE_MODELS
    models = (list(known) if args.models is None
              else [m.strip() for m in args.models.split(",") if m.strip()])
    for m in models:
        if m not in known:
            p.error(f"{m!r} is not a{' full-integer' if args.int8 else ''} TFLite zoo model; "
                    f"known: {', '.join(known)}")
    try:
        threads = [int(t) for t in args.threads.split(",") if t.strip()]
    except ValueError:
        p.error(f"--threads {args.threads!r}: expected comma-separated integers")
    if not threads or min(threads) < 1:
        p.error("--threads needs positive thread counts")
    try:
        import ai_edge_litert.interpreter  # noqa: F401
    except ImportError:
        p.error("needs ai-edge-litert: pip install ai-edge-litert")

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    rows, failed = bench_all(
        models, lambda key: bench_model(key, threads, args.runs, log, args.int8), log)
    table = with_failures(markdown_table(rows) if rows else "No model ran.", failed)
    print(table)
    if args.write is not None:
        write_section(pathlib.Path(args.write), section(table, argv, args.runs, args.int8),
                      INT8_HEADER if args.int8 else HEADER)
        log(f"wrote {args.write}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
