"""The ``sprat`` command line: a thin layer over the public API.

``sprat convert|run|info|dump|check|bench|batch|quantize|demo`` — see ``sprat <command>
--help``. Every stage a user might question can be looked at from here (STYLE §6). Errors sprat
raises on purpose (:class:`sprat.SpratError`) and missing files print one line on stderr and exit
with status 2; no traceback is shown for them.
"""

from __future__ import annotations

import argparse
import logging
import pathlib
import statistics
import sys
import time

import numpy as np

from .errors import InputError, ShapeError, SpratError

EXIT_OK, EXIT_FAIL, EXIT_USER_ERROR = 0, 1, 2
# onnx's backend test runner compares model outputs with these (onnx/backend/test/loader).
DEMO_RTOL, DEMO_ATOL = 1e-3, 1e-7


# ---- entry point ------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``); returns the process exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="sprat: %(levelname)s: %(message)s")
    try:
        return args.func(args)
    except ShapeError as e:
        hint = ""
        if getattr(args, "shape", None) == []:
            hint = " (symbolic input dims were set to 1; give real sizes with --shape NAME=DIMS)"
        _err(f"{e}{hint}")
    except SpratError as e:
        _err(str(e))
    except FileNotFoundError as e:
        _err(f"no such file: {e.filename if e.filename is not None else e}")
    except IsADirectoryError as e:
        _err(f"is a directory: {e.filename}")
    except KeyboardInterrupt:
        return 130
    return EXIT_USER_ERROR


def _err(msg: str) -> None:
    print(f"sprat: error: {msg}", file=sys.stderr)


def _parser() -> argparse.ArgumentParser:
    from . import __version__

    p = argparse.ArgumentParser(prog="sprat", description="sprat: a small, fast inference engine")
    p.add_argument("--version", action="version", version=f"sprat {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    c = sub.add_parser("convert", help="convert an ONNX model to a .sprat file")
    c.add_argument("model", help="source model (.onnx)")
    c.add_argument("-o", "--output", help="output .sprat path (default: MODEL with .sprat suffix)")
    c.add_argument("--external-data", metavar="FILE", help="write the weights to FILE instead")
    c.add_argument("--weights", choices=["fp16", "int8"],
                   help="store contraction weights compressed (MNN --fp16 / --weightQuantBits 8; "
                        "docs/weights.md) and print their accuracy against float32")
    c.add_argument("--weight-block", type=int, metavar="N",
                   help="int8: one scale per N weights along the reduction axis (default 64; "
                        "0 = one per output channel)")
    c.add_argument("--inputs", metavar="DIR|GLOB",
                   help="with --weights: .npy/.npz inputs for the accuracy report, as sprat batch "
                        "reads them (default: 2 random inputs)")
    _add_shape_arg(c)
    c.set_defaults(func=cmd_convert)

    r = sub.add_parser("run", help="run a model on .npy inputs")
    r.add_argument("model", help=".sprat or .onnx model")
    r.add_argument("--input", "-i", action="append", default=[], metavar="NAME=FILE.npy",
                   help="an input tensor (repeat per input)")
    r.add_argument("--random", action="store_true",
                   help="fill inputs not given with --input with random values")
    _add_shape_arg(r)
    r.add_argument("--output-dir", "-o", metavar="DIR", help="save NAME.npy per output here")
    r.add_argument("--assert-outputs", metavar="EXPECTED.npz",
                   help="compare the outputs with the arrays of this .npz (by output name); "
                        "exit 1 naming every output that differs")
    _add_tolerance_args(r)
    _add_threads_arg(r, "1")
    _add_json_arg(r, '{"inputs": {name: {dtype, shape}}, "outputs": {name: {dtype, shape, '
                     'min, max, mean}}, "ms": first-run time, "threads": N, "assert": '
                     '{name: {max_abs, max_rel, ok}} with --assert-outputs, "ok": bool}')
    r.set_defaults(func=cmd_run)

    i = sub.add_parser("info", help="inputs, outputs, op counts, weights, metadata, FLOPs")
    i.add_argument("model", help=".sprat or .onnx model")
    _add_shape_arg(i)
    _add_json_arg(i, '{"model", "inputs": [{name, dtype, shape}], "outputs": [...], '
                     '"op_counts": {op: n}, "nodes": N, "weight_bytes": N, "weight_tensors": N, '
                     '"metadata": {...}, "flops": N or null, "shapes": {name: shape}}')
    i.set_defaults(func=cmd_info)

    d = sub.add_parser("dump", help="print the graph at a named stage")
    d.add_argument("model", help=".sprat or .onnx model")
    d.add_argument("--stage", default="passes",
                   help="import or a pass name (ONNX/TFLite source only), passes (default: the "
                        "converted graph), assigned or planned (a prepared session); see "
                        "sprat.stages")
    _add_shape_arg(d)
    _add_json_arg(d, '{"model", "stage", "text": the dump as printed}')
    d.set_defaults(func=cmd_dump)

    k = sub.add_parser("check", help="run sprat and onnxruntime on the same inputs and name the "
                                     "first node whose output differs")
    k.add_argument("model", help=".onnx model (or a .sprat file with --reference)")
    k.add_argument("--reference", metavar="MODEL.onnx",
                   help="the ONNX model onnxruntime runs (default: MODEL itself)")
    k.add_argument("--input", "-i", action="append", default=[], metavar="NAME=FILE.npy",
                   help="an input tensor (repeat per input; others get random values)")
    _add_shape_arg(k)
    _add_tolerance_args(k, rtol=1e-3)
    _add_threads_arg(k, "1")
    k.add_argument("--verbose", "-v", action="store_true", help="a line per compared value")
    _add_json_arg(k, '{"ok": bool, "first_divergence": {node, op_type, value, layout, '
                     'max_abs, max_rel, ok} or null, "compared": N, "not_compared": N, '
                     '"nodes": [...], "outputs": [...], "rtol", "atol"}')
    k.set_defaults(func=cmd_check)

    b = sub.add_parser("bench", help="median latency per thread count, optionally vs onnxruntime")
    b.add_argument("model", help=".sprat or .onnx model")
    _add_threads_arg(b, "1")
    b.add_argument("--compare", choices=["onnxruntime"], help="also time this runtime")
    b.add_argument("--runs", type=int, default=20, help="timed runs per setting (default 20)")
    b.add_argument("--warmup", type=int, default=3, help="untimed runs first (default 3)")
    b.add_argument("--profile", action="store_true",
                   help="also time every op: per-op-type and slowest-node tables")
    b.add_argument("--trace", metavar="FILE",
                   help="with --profile: write a Chrome/Perfetto trace JSON of the last run")
    _add_shape_arg(b)
    b.set_defaults(func=cmd_bench)

    t = sub.add_parser("batch", help="run a model over many inputs (arrays, images, Parquet) "
                                     "into one Parquet file, on Ray or in this process")
    t.add_argument("model", help=".sprat, .onnx or .tflite model (converted once, here)")
    t.add_argument("inputs", help="a folder or glob of .npy/.npz files or images, or a Parquet "
                                  "file or folder with one tensor column per model input")
    t.add_argument("-o", "--output", required=True, metavar="OUT.parquet",
                   help="output: one row per input (id, index, one column per model output); "
                        "written to a temp file and moved into place at the end")
    t.add_argument("--workers", type=int, metavar="N",
                   help="parallel workers: Ray actors or ParallelRunner sessions "
                        "(default: CPUs / --threads)")
    t.add_argument("--threads", type=int, default=1, metavar="N",
                   help="threads (CPUs) per worker (default 1)")
    t.add_argument("--batch-size", type=int, default=32, metavar="N",
                   help="rows per session run (default 32)")
    t.add_argument("--engine", choices=["auto", "ray", "local"], default="auto",
                   help="ray: Ray Data actors; local: this process on a sprat.ParallelRunner; "
                        "auto (default): ray when it is installed")
    t.add_argument("--address", metavar="ADDR",
                   help="run on this existing Ray cluster: HOST:PORT of its head, or 'auto' for "
                        "the one `ray start` made on this machine (default: a Ray instance "
                        "started for the job)")
    t.add_argument("--on-error", choices=["fail", "skip"], default="fail",
                   help="an input that cannot be decoded or has the wrong shape: fail the job "
                        "naming it (default), or skip it and list it in OUT.errors.json")
    t.add_argument("--report", metavar="FILE",
                   help="where --on-error skip lists skipped inputs (default OUT.errors.json)")
    t.add_argument("--id-column", metavar="NAME",
                   help="Parquet inputs: the column of row ids (default: FILE#ROW)")
    _add_image_args(t)
    _add_progress_arg(t)
    t.set_defaults(func=cmd_batch)

    q = sub.add_parser("quantize", help="post-training quantization of an fp32 ONNX model "
                                        "(static with calibration rows, or dynamic)")
    q.add_argument("model", help="fp32 .onnx model")
    q.add_argument("-o", "--output", required=True, metavar="OUT.sprat",
                   help="the quantized model (.sprat)")
    q.add_argument("--calibration", metavar="INPUTS",
                   help="calibration rows: a folder or glob of .npy/.npz files or images, or "
                        "Parquet, as sprat batch reads them (required unless --dynamic; "
                        "with --dynamic, used for the accuracy report only)")
    q.add_argument("--dynamic", action="store_true",
                   help="weights int8, activations quantized per run (MatMul, Gemm); no "
                        "calibration")
    q.add_argument("--method", choices=["minmax", "percentile", "entropy"], default="minmax",
                   help="activation ranges: min/max seen (default), a percentile of the "
                        "histogram, or the KL-entropy threshold")
    q.add_argument("--percentile", type=float, default=99.999,
                   help="with --method percentile (default 99.999)")
    q.add_argument("--per-tensor", action="store_true",
                   help="one scale per weight instead of one per output channel")
    q.add_argument("--reduce-range", action="store_true",
                   help="7-bit weights, for int8 kernels that saturate (onnxruntime on CPUs "
                        "without VNNI)")
    q.add_argument("--exclude", action="append", default=[], metavar="NODE",
                   help="keep this node in fp32 (repeat)")
    q.add_argument("--held-out", type=int, metavar="N",
                   help="calibration rows kept for the accuracy report (default: a fifth)")
    q.add_argument("--onnx", metavar="OUT.onnx",
                   help="also write the quantized model as QDQ ONNX (onnxruntime runs it)")
    q.add_argument("--verbose", action="store_true",
                   help="accuracy per quantized layer too, and the nodes kept in fp32")
    _add_image_args(q)
    _add_progress_arg(q)
    q.set_defaults(func=cmd_quantize)

    m = sub.add_parser("demo", help="convert and run an ONNX test model bundled with onnx")
    m.add_argument("--model", default="resnet50",
                   help="light model name from onnx's test data (default resnet50)")
    m.add_argument("--threads", type=int, default=1)
    m.set_defaults(func=cmd_demo)
    return p


def _add_image_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size", type=int, nargs=2, metavar=("H", "W"),
                   help="images: resize to H x W (default: the model's fixed size)")
    p.add_argument("--mean", type=float, nargs="+", default=[0.0],
                   help="images: per-channel mean subtracted from pixel/255 (default 0)")
    p.add_argument("--std", type=float, nargs="+", default=[1.0],
                   help="images: per-channel std dividing (pixel/255 - mean) (default 1)")
    p.add_argument("--layout", choices=["nchw", "nhwc"], default="nchw",
                   help="images: the model's input layout (default nchw)")


def _add_progress_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--progress", choices=["auto", "on", "off"], default="auto",
                   help="progress bar on stderr: auto (default) when stderr is a terminal")


def _progress_enabled(args) -> bool | None:
    """``--progress`` as ``progress_bar``'s ``enabled`` (None: when stderr is a terminal)."""
    return {"auto": None, "on": True, "off": False}[args.progress]


def _image_options(args):
    from .batch import ImageOptions

    return ImageOptions(size=tuple(args.size) if args.size else None, mean=tuple(args.mean),
                        std=tuple(args.std), layout=args.layout)


def _add_shape_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shape", action="append", default=[], metavar="NAME=D0,D1,...",
                   help="input shape (repeat per input); symbolic dims default to 1")


def _add_json_arg(p: argparse.ArgumentParser, schema: str) -> None:
    p.add_argument("--json", action="store_true",
                   help=f"print one JSON object instead of text: {schema}")


def _add_tolerance_args(p: argparse.ArgumentParser, rtol: float = 1e-4,
                        atol: float = 1e-5) -> None:
    p.add_argument("--rtol", type=float, default=rtol,
                   help=f"relative tolerance, of the largest expected |value| (default {rtol:g})")
    p.add_argument("--atol", type=float, default=atol,
                   help=f"absolute tolerance (default {atol:g})")


def _add_threads_arg(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument("--threads", default=default, metavar="N[,N...]",
                   help=f"thread count(s), comma separated (default {default})")


# ---- commands ---------------------------------------------------------------------------------
def cmd_convert(args) -> int:
    import sprat

    src = pathlib.Path(args.model)
    _require_file(src)
    dst = pathlib.Path(args.output) if args.output is not None else src.with_suffix(".sprat")
    if dst.resolve() == src.resolve():
        raise InputError(f"output {dst} would overwrite the source model; pass -o")
    from ._progress import progress_bar
    from .stages import converter_stages

    # NOTE: a bar over the stages (import, each pass, write) on a terminal: a large model
    # spends seconds in some of them
    bar = progress_bar(len(converter_stages()) + 1, desc="sprat convert", unit="stages",
                       leave=False)

    def stage_done(name: str) -> None:
        bar.set_postfix_str(name, refresh=False)
        bar.update(1)

    if args.weights is None:
        if args.weight_block is not None or args.inputs is not None or args.shape:
            raise InputError("--weight-block, --inputs and --shape go with --weights")
    elif args.weight_block is not None and (args.weights != "int8" or args.weight_block < 0):
        raise InputError("--weight-block N (N >= 0) goes with --weights int8")
    t0 = time.perf_counter()
    try:
        if args.weights is None:
            data = sprat.convert(src, dst, external_data=args.external_data,
                                 progress=stage_done)
        else:
            from .converter import compress_weights, convert_graph
            from .format import write_model

            graph = convert_graph(src, progress=stage_done)
            small, summary = compress_weights(graph, args.weights, args.weight_block)
            data = write_model(small, dst, external_data=args.external_data)
            stage_done("write")
    finally:
        bar.close()
    dt = time.perf_counter() - t0
    extra = f" + weights in {args.external_data}" if args.external_data is not None else ""
    print(f"wrote {dst} ({_fmt_bytes(len(data))}{extra}) in {dt:.2f} s")
    if args.weights is not None:
        _weights_report(graph, small, summary, args)
    return EXIT_OK


def _weights_report(graph, small, summary, args) -> None:
    """Print what --weights stored and each output's accuracy against float32 (MNN's
    MNNConvert prints the same two measures)."""
    from .weights import accuracy

    kind = summary.mode if summary.mode == "fp16" else (
        f"int8, block {summary.block or 'per output channel'}")
    print(f"weights: {summary.compressed} tensors as {kind}: "
          f"{_fmt_bytes(summary.fp32_bytes)} -> {_fmt_bytes(summary.stored_bytes)}"
          + (f"; kept float32: {', '.join(f'{k} ({v})' for k, v in summary.kept.items())}"
             if summary.kept else ""))
    import sprat

    session = sprat.Interpreter.from_graph(graph).create_session()
    try:
        if args.inputs is not None:
            feeds, what = _report_inputs(args.inputs, session), f"inputs from {args.inputs}"
        else:
            shapes = _parse_shapes(args.shape, session)
            feeds = [random_feeds(session, shapes, seed) for seed in (0, 1)]
            what = "2 random inputs (standard normal)"
        result = accuracy(graph, small, feeds)
    except SpratError as e:
        print(f"sprat: accuracy not measured: {e} (give --shape or --inputs)", file=sys.stderr)
        return
    width = max(len("output"), *(len(n) for n in result))
    print(f"accuracy against float32 on {what}, worst of {len(feeds)}:")
    print(f"  {'output':<{width}}  {'cosine':>9}  {'rel L2':>9}  {'max |diff|':>10}")
    for name, a in result.items():
        print(f"  {name:<{width}}  {a.cosine:9.6f}  {a.rel_l2:9.2e}  {a.max_abs:10.3g}")


def _report_inputs(spec: str, session) -> list[dict[str, np.ndarray]]:
    """One feed dict per .npy/.npz file of ``spec`` (a folder or glob, as ``sprat batch``); an
    array one dim short of the model's rank gets a batch dim of 1."""
    from .batch.inputs import Decoder, find_inputs

    kind, files = find_inputs(spec)
    if kind != "arrays":
        raise InputError(f"--inputs {spec!r} holds {kind}; the accuracy report reads .npy/.npz "
                         f"files (preprocess images into arrays first)")
    specs = {s.name: ((), s.dtype) for s in session.inputs}
    decoder = Decoder(kind, specs)
    feeds = []
    for path in files:
        feed, arrays = {}, decoder.read_file(path)
        for s in session.inputs:
            x = arrays[s.name]
            if s.shape is not None and x.ndim == len(s.shape) - 1:
                x = x[None]
            feed[s.name] = np.ascontiguousarray(x, dtype=s.dtype)
        feeds.append(feed)
    return feeds


def cmd_run(args) -> int:
    interp = _open(args.model)
    threads = _threads(args.threads)[0]
    session = _session(interp, threads)
    feeds = _parse_inputs(args.input)
    shapes = _parse_shapes(args.shape, session)
    names = [s.name for s in session.inputs]
    unknown = sorted(set(feeds) - set(names))
    if unknown:
        raise InputError(f"unknown input(s) {unknown}; the model's inputs are {names}")
    missing = [n for n in names if n not in feeds]
    if missing and not args.random:
        raise InputError(f"missing input(s) {missing}: pass --input NAME=FILE.npy, "
                         "or --random to fill them with random values")
    if missing:
        fill = random_feeds(session, shapes, only=missing)
        feeds.update(fill)
    expected = _load_expected(args.assert_outputs) if args.assert_outputs else None
    t0 = time.perf_counter()
    outs = session.run(feeds)
    dt = time.perf_counter() - t0
    out_dir = None if args.output_dir is None else pathlib.Path(args.output_dir)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, y in outs.items():
            np.save(out_dir / f"{_safe_filename(name)}.npy", np.asarray(y))
    verdicts = _assert_outputs(outs, expected, args.rtol, args.atol) if expected else {}
    ok = all(v["ok"] for v in verdicts.values())
    if args.json:
        _print_json({
            "inputs": {n: {"dtype": str(x.dtype), "shape": list(x.shape)}
                       for n, x in feeds.items()},
            "outputs": {n: _stats(np.asarray(y)) for n, y in outs.items()},
            "ms": dt * 1e3, "threads": threads, "assert": verdicts or None, "ok": ok})
        return EXIT_OK if ok else EXIT_FAIL
    for name, x in feeds.items():
        print(f"input  {name}: {x.dtype} {list(x.shape)}")
    for name, y in outs.items():
        y = np.asarray(y)
        print(f"output {name}: {y.dtype} {list(y.shape)}  {_summary(y)}")
    print(f"ran in {dt * 1e3:.2f} ms (first run, {threads} thread(s))")
    if out_dir is not None:
        print(f"saved {len(outs)} output(s) to {out_dir}")
    for name, v in verdicts.items():
        print(f"assert {name}: {'ok' if v['ok'] else 'DIFFERS'}  {v['detail']}")
    return EXIT_OK if ok else EXIT_FAIL


def _load_expected(path: str) -> dict[str, np.ndarray]:
    _require_file(pathlib.Path(path))
    try:
        with np.load(path, allow_pickle=False) as data:
            if not hasattr(data, "files"):
                raise InputError(f"--assert-outputs {path}: expected an .npz archive of "
                                 f"{{output name: array}}")
            return {k: data[k] for k in data.files}
    except (ValueError, OSError) as e:
        raise InputError(f"--assert-outputs: cannot read {path} as .npz: {e}") from None


def _assert_outputs(outs, expected, rtol: float, atol: float) -> dict[str, dict]:
    """``{output name: {ok, max_abs, max_rel, detail}}`` for every output and every expected
    array: a match when shapes agree and ``max|d| <= atol + rtol * max|expected|``."""
    verdicts = {}
    for name in sorted(set(outs) | set(expected)):
        if name not in expected or name not in outs:
            where = "the .npz" if name not in expected else "the model's outputs"
            verdicts[name] = {"ok": False, "max_abs": None, "max_rel": None,
                              "detail": f"missing from {where}"}
            continue
        got, want = np.asarray(outs[name]), np.asarray(expected[name])
        if got.shape != want.shape:
            verdicts[name] = {"ok": False, "max_abs": None, "max_rel": None,
                              "detail": f"shape {list(got.shape)}, expected {list(want.shape)}"}
            continue
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        scale = float(np.abs(want).max()) if want.size else 0.0
        max_abs = float(np.nanmax(diff)) if diff.size else 0.0
        same_nan = bool(np.array_equal(np.isnan(got), np.isnan(want))) \
            if got.dtype.kind == "f" else True
        ok = same_nan and max_abs <= atol + rtol * scale
        verdicts[name] = {"ok": ok, "max_abs": max_abs,
                          "max_rel": max_abs / scale if scale else None,
                          "detail": f"max abs error {max_abs:.3g} (tolerance "
                                    f"{atol + rtol * scale:.3g})"
                                    + ("" if same_nan else "; NaNs differ")}
    return verdicts


def _stats(y: np.ndarray) -> dict:
    out = {"dtype": str(y.dtype), "shape": list(y.shape)}
    if y.size and y.dtype.kind in "fiub":
        v = y.astype(np.float64)
        out.update(min=float(np.nanmin(v)), max=float(np.nanmax(v)), mean=float(np.nanmean(v)))
    return out


def _print_json(obj) -> None:
    import json

    print(json.dumps(obj, indent=2, default=str))


def cmd_check(args) -> int:
    from .check import check

    session = _session(_open(args.reference or args.model), 1) if args.shape else None
    shapes = _parse_shapes(args.shape, session) if session is not None else None
    report = check(args.model, _parse_inputs(args.input), reference=args.reference,
                   shapes=shapes, rtol=args.rtol, atol=args.atol,
                   num_threads=_threads(args.threads)[0])
    if args.json:
        _print_json(report.as_dict())
    else:
        print(report.summary(verbose=args.verbose))
    return EXIT_OK if report.ok else EXIT_FAIL


def cmd_info(args) -> int:
    interp = _open(args.model)
    g = interp.graph
    session = _session(interp, 1)
    user_shapes = bool(args.shape)
    shapes = _parse_shapes(args.shape, session)
    flops, why = None, None
    try:
        flops = session_flops(session, shapes)
    except SpratError as e:
        if user_shapes:
            raise
        why = str(e)
    spec = lambda s: {"name": s.name, "dtype": _dtype_name(s.dtype),  # noqa: E731
                      "shape": list(s.shape) if s.shape is not None else None}
    if args.json:
        _print_json({"model": str(args.model), "inputs": [spec(s) for s in session.inputs],
                     "outputs": [spec(s) for s in session.outputs],
                     "op_counts": g.op_counts(), "nodes": len(g.nodes),
                     "weight_bytes": g.weight_bytes(),
                     "weight_tensors": sum(1 for v in g.values if v.data is not None),
                     "metadata": dict(g.metadata), "flops": flops,
                     "shapes": {n: list(s) for n, s in shapes.items()}})
        return EXIT_OK
    print(f"model: {args.model}")
    for s in session.inputs:
        print(f"input  {s.name}: {_dtype_name(s.dtype)} {_shape_str(s.shape)}")
    for s in session.outputs:
        print(f"output {s.name}: {_dtype_name(s.dtype)} {_shape_str(s.shape)}")
    counts = g.op_counts()
    print(f"nodes: {len(g.nodes)}  ({', '.join(f'{k} {v}' for k, v in counts.items())})")
    print(f"weights: {_fmt_bytes(g.weight_bytes())} in "
          f"{sum(1 for v in g.values if v.data is not None)} tensors")
    for k, v in sorted(g.metadata.items()):
        print(f"metadata {k}: {v}")
    if flops is None:
        print(f"flops: unknown (symbolic dims set to 1 gave: {why}); pass --shape NAME=DIMS")
        return EXIT_OK
    shown = ", ".join(f"{n}={list(s)}" for n, s in shapes.items())
    print(f"flops: {_fmt_flops(flops)} at {shown}")
    return EXIT_OK


def cmd_dump(args) -> int:
    text = _dump_text(args)
    if args.json:
        _print_json({"model": str(args.model), "stage": args.stage, "text": text})
    else:
        print(text)
    return EXIT_OK


def _dump_text(args) -> str:
    from . import stages
    from .converter import is_tflite_source

    # NOTE: the converter stages need the source model (ONNX or TFLite), not a .sprat file;
    # ``convert_graph`` dispatches on the source format itself
    source = is_tflite_source(args.model) or _is_onnx(args.model)
    try:
        stage = stages.find(args.stage, source)
    except ValueError as e:
        raise InputError(str(e)) from None
    if stage.kind == stages.CONVERT:
        from .converter import convert_graph

        _require_file(pathlib.Path(args.model))
        return convert_graph(args.model, until=stage.name).dump()
    interp = _open(args.model)
    if stage.kind == stages.MODEL:
        return interp.graph.dump()
    session = _session(interp, 1)
    _resize(session, _parse_shapes(args.shape, session))
    return session.dump(stage.name)


def cmd_bench(args) -> int:
    threads = _threads(args.threads)
    if args.runs < 1:
        raise InputError("--runs must be >= 1")
    if args.compare == "onnxruntime" and not _is_onnx(args.model):
        raise InputError("--compare onnxruntime needs the ONNX source model (.onnx)")
    interp = _open(args.model)
    probe = _session(interp, 1)
    shapes = _parse_shapes(args.shape, probe)
    feeds = random_feeds(probe, shapes)
    del probe
    print(f"model: {args.model}  inputs: "
          + ", ".join(f"{n} {list(x.shape)}" for n, x in feeds.items()))
    header = f"{'threads':>7}  {'sprat ms':>10}"
    if args.compare:
        header += f"  {'ort ms':>10}  {'sprat/ort':>9}"
    print(header)
    from ._progress import progress_bar

    for n in threads:
        # NOTE: one bar per row of the table, erased before the row is printed
        calls = (args.warmup + args.runs) * (2 if args.compare else 1)
        bar = progress_bar(calls, desc=f"sprat bench, {n} thread(s)", unit="runs", leave=False)
        try:
            session = _session(interp, n)
            _resize(session, shapes)
            t_sprat = median_latency(lambda: session.run(feeds), args.runs, args.warmup,
                                     progress=bar.update)
            line = f"{n:>7}  {t_sprat * 1e3:>10.3f}"
            if args.compare:
                ort = _ort_session(args.model, n)
                t_ort = median_latency(lambda: ort.run(None, feeds), args.runs, args.warmup,
                                       progress=bar.update)
                line += f"  {t_ort * 1e3:>10.3f}  {t_sprat / t_ort:>9.2f}"
        finally:
            bar.close()
        print(line, flush=True)
    if args.trace and not args.profile:
        raise InputError("--trace needs --profile")
    if args.profile:
        for n in threads:
            _profile(interp, n, shapes, feeds, args.runs, args.trace)
    return EXIT_OK


def _profile(interp, threads: int, shapes, feeds, runs: int, trace: str | None) -> None:
    """Per-op times summed over ``runs`` profiled runs: by op type, then the slowest nodes."""
    import json

    import sprat

    session = interp.create_session(sprat.ScheduleConfig(num_threads=threads, profiling=True))
    _resize(session, shapes)
    session.run(feeds)
    total: dict[str, float] = {}
    for _ in range(runs):
        session.run(feeds)
        for name, ms in session.info()["op_times_ms"].items():
            total[name] = total.get(name, 0.0) + ms
    kinds = {e["name"]: (e["cat"], e["args"]["backend"]) for e in session.trace()["traceEvents"]}
    whole = sum(total.values()) or 1.0
    by_type: dict[tuple, list] = {}
    for name, ms in total.items():
        entry = by_type.setdefault(kinds[name], [0, 0.0])
        entry[0] += 1
        entry[1] += ms
    print(f"\nprofile at {threads} thread(s), {runs} runs: {whole / runs:.3f} ms/run in ops")
    print(f"{'op type':<22} {'backend':<10} {'count':>5} {'ms/run':>9} {'share':>6}")
    for (op, backend), (count, ms) in sorted(by_type.items(), key=lambda kv: -kv[1][1]):
        print(f"{op:<22} {backend:<10} {count:>5} {ms / runs:>9.3f} {100 * ms / whole:>5.1f}%")
    print(f"\n{'slowest nodes':<40} {'op type':<20} {'ms/run':>9}")
    for name, ms in sorted(total.items(), key=lambda kv: -kv[1])[:15]:
        print(f"{name[:40]:<40} {kinds[name][0]:<20} {ms / runs:>9.3f}")
    if trace:
        pathlib.Path(trace).write_text(json.dumps(session.trace()))
        print(f"\nwrote {trace} (open in chrome://tracing or ui.perfetto.dev)")


def cmd_batch(args) -> int:
    from .batch import run_job

    _require_file(pathlib.Path(args.model))
    image = _image_options(args)
    progress = _progress_enabled(args)
    result = run_job(args.model, args.inputs, args.output, workers=args.workers,
                     threads=args.threads, batch_size=args.batch_size, engine=args.engine,
                     address=args.address, on_error=args.on_error, image=image,
                     id_column=args.id_column, report_path=args.report, progress=progress)
    rate = result.rows / result.seconds if result.seconds > 0 else float("inf")
    skipped = ""
    if result.skipped:
        skipped = f", {len(result.skipped)} skipped (listed in {result.report_path})"
    print(f"wrote {args.output}: {result.written} of {result.rows} rows{skipped} in "
          f"{result.seconds:.2f} s ({rate:.1f} rows/s, engine {result.engine})")
    return EXIT_OK


def cmd_quantize(args) -> int:
    from ._progress import progress_bar
    from .quantize import quantize

    _require_file(pathlib.Path(args.model))
    if not args.dynamic and not args.calibration:
        raise InputError("static quantization needs --calibration INPUTS (or use --dynamic)")
    enabled = _progress_enabled(args)
    bar = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = progress_bar(total, "sprat quantize: calibration", enabled=enabled)
        bar.update(1)

    try:
        _, report = quantize(args.model, args.output, calibration=args.calibration,
                             mode="dynamic" if args.dynamic else "static", method=args.method,
                             percentile=args.percentile, per_channel=not args.per_tensor,
                             reduce_range=args.reduce_range, exclude=args.exclude,
                             held_out=args.held_out, onnx_output=args.onnx,
                             image=_image_options(args), progress=progress)
    finally:
        if bar is not None:
            bar.close()
    print(report.format(verbose=args.verbose))
    written = f"wrote {args.output}" + (f" and {args.onnx}" if args.onnx else "")
    print(written)
    return EXIT_OK


def cmd_demo(args) -> int:
    import sprat

    from . import zoo

    try:
        models = {name: (path, feeds, exp) for name, path, feeds, exp in zoo.light_models()}
    except ImportError:
        raise InputError("`sprat demo` needs the onnx package: pip install onnx") from None
    if args.model not in models:
        raise InputError(f"unknown demo model {args.model!r}; available: {', '.join(models)}")
    path, feeds, expected = models[args.model]
    print(f"demo: onnx test model light_{args.model} ({path.name}, "
          f"{_fmt_bytes(path.stat().st_size)})")
    t0 = time.perf_counter()
    data = sprat.convert(path)
    t_convert = time.perf_counter() - t0
    t0 = time.perf_counter()
    interp = sprat.Interpreter.from_buffer(data)
    session = interp.create_session(sprat.ScheduleConfig(num_threads=args.threads))
    t_load = time.perf_counter() - t0
    print("first run ...", flush=True)
    t0 = time.perf_counter()
    outs = session.run(feeds)
    t_run = time.perf_counter() - t0
    t0 = time.perf_counter()
    session.run(feeds)
    t_run2 = time.perf_counter() - t0
    print(f"convert: {t_convert:.2f} s -> {_fmt_bytes(len(data))} .sprat, "
          f"{len(interp.graph.nodes)} nodes")
    print(f"load + session: {t_load:.2f} s; first run {t_run * 1e3:.1f} ms, "
          f"second run {t_run2 * 1e3:.1f} ms")
    ok = True
    for spec, ref in zip(session.outputs, expected):
        got = np.asarray(outs[spec.name])
        if got.shape != ref.shape:
            print(f"output {spec.name}: shape {list(got.shape)}, expected {list(ref.shape)}")
            ok = False
            continue
        err = float(np.max(np.abs(got.astype(np.float64) - ref))) if ref.size else 0.0
        close = bool(np.allclose(got, ref, rtol=DEMO_RTOL, atol=DEMO_ATOL))
        ok = ok and close
        print(f"output {spec.name}: {list(got.shape)} max abs error {err:.3g} "
              f"(max |expected| {float(np.max(np.abs(ref))):.3g}; "
              f"rtol={DEMO_RTOL:g}, atol={DEMO_ATOL:g})")
    print("PASS" if ok else "FAIL")
    return EXIT_OK if ok else EXIT_FAIL


# ---- shared helpers (also used by bench/run.py) -----------------------------------------------
def median_latency(fn, runs: int, warmup: int = 3, progress=None) -> float:
    """Median wall time in seconds of ``fn()`` over ``runs`` calls after ``warmup`` calls;
    ``progress()``, when given, is called after every call (outside the timed span)."""
    for _ in range(warmup):
        fn()
        if progress is not None:
            progress()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if progress is not None:
            progress()
    return statistics.median(times)


def resolve_shapes(session, shapes: dict[str, tuple[int, ...]] | None = None
                   ) -> dict[str, tuple[int, ...]]:
    """Concrete shape per session input: ``shapes`` where given, else the declared shape with
    symbolic (str / None / negative) dims set to 1. Raises InputError for unknown names or a
    rank that differs from the model's."""
    shapes = {} if shapes is None else dict(shapes)
    specs = {s.name: s for s in session.inputs}
    unknown = sorted(set(shapes) - set(specs))
    if unknown:
        raise InputError(f"--shape for unknown input(s) {unknown}; inputs are {list(specs)}")
    out = {}
    for name, spec in specs.items():
        declared = tuple(spec.shape)
        if name in shapes:
            given = tuple(shapes[name])
            if len(given) != len(declared):
                raise InputError(f"input {name!r}: --shape has rank {len(given)}, the model "
                                 f"declares {len(declared)} dims {list(declared)}")
            out[name] = given
        else:
            out[name] = tuple(d if isinstance(d, int) and d >= 0 else 1 for d in declared)
    return out


def session_flops(session, shapes: dict[str, tuple[int, ...]]) -> int:
    """FLOPs of one run of ``session`` at input ``shapes`` (resizes the session); see
    ``Session.info()["flops"]``."""
    _resize(session, shapes)
    return int(session.info()["flops"])


def random_feeds(session, shapes: dict[str, tuple[int, ...]], seed: int = 0,
                 only: list[str] | None = None) -> dict[str, np.ndarray]:
    """Random feeds for ``session`` at ``shapes``: standard normal floats, zeros otherwise."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in session.inputs:
        if only is not None and spec.name not in only:
            continue
        shape = shapes[spec.name]
        dt = np.dtype(spec.dtype)
        if dt.kind == "f":
            feeds[spec.name] = rng.standard_normal(shape).astype(dt)
        else:
            feeds[spec.name] = np.zeros(shape, dt)
    return feeds




# ---- private helpers --------------------------------------------------------------------------
def _open(model: str):
    """An Interpreter for a .sprat file (mapped) or an ONNX model (converted in memory through
    the same bytes ``sprat convert`` would write). The format is told by the file's magic."""
    import sprat

    path = pathlib.Path(model)
    _require_file(path)
    if _is_sprat_file(path):
        return sprat.Interpreter.from_file(path)
    return sprat.Interpreter.from_buffer(sprat.convert(path))


def _is_sprat_file(path: pathlib.Path) -> bool:
    from .format import MAGIC

    with open(path, "rb") as f:
        return f.read(len(MAGIC)) == MAGIC


def _session(interp, threads: int):
    import sprat

    return interp.create_session(sprat.ScheduleConfig(num_threads=threads))


def _ort_session(model: str, threads: int):
    try:
        import onnxruntime as ort
    except ImportError:
        raise InputError("--compare onnxruntime needs onnxruntime installed") from None
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])


def _resize(session, shapes: dict[str, tuple[int, ...]]) -> None:
    if shapes:
        session.resize({k: tuple(v) for k, v in shapes.items()})


def _require_file(path: pathlib.Path) -> None:
    if not path.exists():
        raise FileNotFoundError(2, "No such file", str(path))
    if path.is_dir():
        raise IsADirectoryError(21, "Is a directory", str(path))


def _is_onnx(model: str) -> bool:
    path = pathlib.Path(model)
    from .converter import is_tflite_source

    return path.suffix.lower() == ".onnx" or (
        path.is_file() and not is_tflite_source(model) and not _is_sprat_file(path))


def _parse_inputs(items: list[str]) -> dict[str, np.ndarray]:
    feeds = {}
    for item in items:
        name, sep, file = item.partition("=")
        if not sep or not name or not file:
            raise InputError(f"--input {item!r}: expected NAME=FILE.npy")
        if name in feeds:
            raise InputError(f"--input {name!r} given twice")
        try:
            arr = np.load(file, allow_pickle=False)
        except FileNotFoundError:
            raise
        except (ValueError, OSError) as e:
            raise InputError(f"--input {name}: cannot read {file} as .npy: {e}") from None
        if not isinstance(arr, np.ndarray):
            raise InputError(f"--input {name}: {file} is an .npz archive; give one .npy per input")
        feeds[name] = np.ascontiguousarray(arr)
    return feeds


def _parse_shapes(items: list[str], session) -> dict[str, tuple[int, ...]]:
    given = {}
    names = [s.name for s in session.inputs]
    for item in items:
        name, sep, dims = item.rpartition("=")
        if not sep:
            if len(names) != 1:
                raise InputError(f"--shape {item!r}: the model has {len(names)} inputs; "
                                 f"write NAME=D0,D1,... (inputs: {names})")
            name = names[0]
        try:
            shape = tuple(int(d) for d in dims.replace("x", ",").split(",") if d.strip())
        except ValueError:
            raise InputError(f"--shape {item!r}: dims must be integers, e.g. "
                             f"{name}=1,3,224,224") from None
        if any(d < 0 for d in shape):
            raise InputError(f"--shape {item!r}: dims must be >= 0")
        given[name] = shape
    return resolve_shapes(session, given)


def _threads(text: str) -> list[int]:
    try:
        out = [int(t) for t in str(text).split(",") if t.strip()]
    except ValueError:
        raise InputError(f"--threads {text!r}: expected N or N,M,...") from None
    if not out or any(t < 1 for t in out):
        raise InputError(f"--threads {text!r}: thread counts must be >= 1")
    return out


def _summary(y: np.ndarray) -> str:
    if y.size == 0:
        return "(empty)"
    if y.dtype.kind in "fc":
        finite = np.isfinite(y)
        bad = "" if finite.all() else f" non-finite={int((~finite).sum())}"
        yf = y[finite] if not finite.all() else y
        if yf.size == 0:
            return "all non-finite"
        return (f"min={float(yf.min()):.4g} max={float(yf.max()):.4g} "
                f"mean={float(yf.mean()):.4g}{bad}")
    if y.dtype.kind in "iub":
        return f"min={y.min()} max={y.max()}"
    return ""


def _shape_str(shape) -> str:
    return "[unknown rank]" if shape is None else str(list(shape))


def _safe_filename(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "output"


def _dtype_name(dt) -> str:
    if dt is None:
        return "?"
    try:
        return np.dtype(dt).name
    except TypeError:
        return str(dt)


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _fmt_flops(n: int) -> str:
    for unit, scale in (("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if n >= scale:
            return f"{n / scale:.3f} {unit} ({n} FLOPs)"
    return f"{n} FLOPs"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
