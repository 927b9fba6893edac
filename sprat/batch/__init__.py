"""Batch inference over many inputs: the job behind ``sprat batch``, and the predictor that
``sprat.ray`` runs inside Ray Data.

A job is four steps, each a plain object that works the same in this process and on Ray:

1. ``find_inputs`` + ``make_units``: list the inputs on the driver — one unit per file
   (``.npy``/``.npz`` arrays, images), or one per slice of rows of a Parquet file — each with
   its ``id`` (path, ``path#row`` or a Parquet id column) and ``index`` (position in the job).
2. ``Decoder``: turn a batch of units into rows of model input tensors. An input that cannot
   be decoded, or has the wrong shape or dtype, becomes a row with its ``error`` set (and zero
   tensors), so a bad file never stops the workers and is never lost.
3. ``BatchPredictor``: run a batch (a dict of NumPy columns, Ray Data's "numpy" batch format)
   through one session and return the model's outputs as columns named after them, with the
   id column passed through. Batches of any size go through ``Session.resize``; a model whose
   batch dim is fixed at 1 runs row by row.
4. ``ParquetSink``: write one Parquet row per input, atomically (temp file + ``os.replace``),
   and check that every input index arrives exactly once; rows with an error fail the job
   naming the input (``on_error="fail"``) or are left out and listed in a JSON report
   (``"skip"``).

``run_job`` ties them together on Ray (``sprat.ray``) or in this process on a ParallelRunner.
Nothing in this package imports ray; pyarrow, Pillow and tqdm are imported where needed. The
steps live in `inputs` (1, 2), `predictor` (3) and `sink` (4); the bar in ``sprat._progress``.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from .._progress import progress_bar  # noqa: F401
from ..errors import InputError
from .inputs import (  # noqa: F401
    ERROR,
    ID,
    INDEX,
    KINDS,
    Decoder,
    ImageOptions,
    _read_parquet_rows,
    batch_mode,
    column_rows,
    find_inputs,
    make_units,
    row_specs,
)
from .predictor import BatchPredictor, _RunnerSession  # noqa: F401
from .sink import ON_ERROR, ParquetSink  # noqa: F401

log = logging.getLogger(__name__)

ENGINES = ("auto", "ray", "local")


@dataclass
class JobResult:
    """What ``run_job`` did: rows in the job, rows written, skipped rows (see ``ParquetSink``),
    seconds, and the engine that ran it (``"ray"`` or ``"local"``)."""

    rows: int
    written: int
    skipped: list[dict]
    seconds: float
    engine: str
    report_path: str | None


def run_job(model: str | os.PathLike, inputs: str | os.PathLike, output: str | os.PathLike, *,
            workers: int | None = None, threads: int = 1, batch_size: int = 32,
            engine: str = "auto", address: str | None = None, on_error: str = "fail",
            image: ImageOptions | None = None, id_column: str | None = None,
            report_path: str | os.PathLike | None = None,
            progress: bool | None = None) -> JobResult:
    """Run ``model`` (.sprat, or .onnx/.tflite converted once here) on every input of
    ``inputs`` (see ``find_inputs``) and write one Parquet row per input to ``output``.

    ``engine``: ``"ray"`` (Ray Data, ``workers`` actors of ``threads`` CPUs each, on the
    cluster at ``address`` or a local one started for the job), ``"local"`` (this process,
    a ParallelRunner of ``workers`` sessions) or ``"auto"`` (ray when it is installed, else
    local, with a warning saying so). ``workers`` defaults to the CPUs there are divided by
    ``threads``. ``batch_size``: rows per ``Session.run``. ``on_error``, ``report_path``:
    see ``ParquetSink``. ``progress``: a progress bar on stderr (default: when it is a
    terminal).

    Raises InputError (bad options, unreadable inputs, the first bad row with ``"fail"``),
    SpratError (rows lost or duplicated), and the model's load/convert errors.
    """
    if engine not in ENGINES:
        raise InputError(f"engine must be one of {ENGINES}, got {engine!r}")
    if on_error not in ON_ERROR:
        raise InputError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
    for name, v in (("batch_size", batch_size), ("threads", threads)):
        if v < 1:
            raise InputError(f"{name} must be >= 1, got {v}")
    if workers is not None and workers < 1:
        raise InputError(f"workers must be >= 1, got {workers}")
    image = image if image is not None else ImageOptions()
    if image.layout not in ("nchw", "nhwc"):
        raise InputError(f"layout must be nchw or nhwc, got {image.layout!r}")
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise InputError("sprat batch writes Parquet: pip install pyarrow "
                         "(or 'sprat[ray]')") from None
    engine = _pick_engine(engine, address)
    data = model_bytes(model)
    from ..runtime.interpreter import Interpreter

    interp = Interpreter.from_buffer(data)
    probe_session = interp.create_session()
    kind, files = find_inputs(inputs)
    if kind == "parquet" and id_column is not None:
        _check_parquet_columns(files[0], [id_column])
    units, total = make_units(kind, files, rows_per_unit=batch_size, on_error=on_error)
    # NOTE: the probe reads raw arrays by input name only; the row shapes come from it
    names_only = Decoder(kind, {s.name: ((), s.dtype) for s in probe_session.inputs}, image,
                         id_column)
    specs = row_specs(probe_session.inputs, kind, image,
                      probe=lambda: _probe(names_only, units, kind, on_error))
    decoder = Decoder(kind, specs, image, id_column)
    del probe_session
    log.info("%d input row(s) (%s) in %d unit(s); rows: %s", total, kind, len(units),
             {k: list(s) for k, (s, _) in decoder.specs.items()})
    t0 = time.perf_counter()
    bar = progress_bar(total, enabled=progress)
    try:
        with ParquetSink(output, total, on_error, report_path) as sink:
            if engine == "ray":
                from .. import ray as sprat_ray

                results = sprat_ray.run_units(units, data, decoder, workers=workers,
                                              threads=threads, batch_size=batch_size,
                                              address=address, per_unit=kind == "parquet")
            else:
                results = _run_local(units, interp, decoder, workers, threads, batch_size,
                                     kind == "parquet")
            try:
                for out in results:
                    bar.update(sink.add(out))
            finally:
                close = getattr(results, "close", None)
                if close is not None:
                    close()
    finally:
        bar.close()
    return JobResult(total, sink.written, sink.skipped, time.perf_counter() - t0, engine,
                     sink.report_path if sink.skipped else None)


def model_bytes(model) -> bytes:
    """The ``.sprat`` bytes of ``model``: a ``.sprat`` file read as is, an ONNX or TFLite
    model converted (once, by the caller of this function), or bytes given. Raises
    FileNotFoundError, ConvertError/UnsupportedOpError, ModelFormatError."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model)
    from ..format import MAGIC

    path = os.fspath(model)
    with open(path, "rb") as f:
        data = f.read()
    if data[:len(MAGIC)] == MAGIC:
        return data
    from ..converter import convert

    return convert(path)


def _pick_engine(engine: str, address: str | None) -> str:
    if engine == "local":
        if address is not None:
            raise InputError("--address needs the ray engine")
        return "local"
    try:
        import ray  # noqa: F401
    except ImportError:
        if engine == "ray" or address is not None:
            raise InputError("the ray engine needs Ray: pip install 'sprat[ray]'") from None
        log.warning("ray is not installed (pip install 'sprat[ray]'): running in this "
                    "process on a sprat.ParallelRunner")
        return "local"
    return "ray"


def _check_parquet_columns(path: str, columns: list[str]) -> None:
    import pyarrow.parquet as pq

    try:
        names = pq.read_schema(path).names
    except Exception as e:  # NOTE: as in make_units, a corrupt footer raises several types
        raise InputError(f"{path}: cannot read as Parquet: {e}") from None
    missing = [c for c in columns if c not in names]
    if missing:
        raise InputError(f"{path} has no column(s) {missing}; it has {names}")


def _probe(decoder: Decoder, units: list[dict], kind: str, on_error: str,
           tries: int = 100) -> dict[str, np.ndarray]:
    """The raw arrays of the first input that decodes, to fill the model's symbolic dims.
    With ``on_error="fail"`` the first input must decode (its error is raised)."""
    for unit in units[:tries]:
        try:
            if kind == "parquet":
                table = _read_parquet_rows(unit["path"], unit["start"], unit["start"] + 1,
                                           list(decoder.specs))
                return {name: _first_row(table.column(name)) for name in table.column_names}
            return decoder.read_file(unit["path"])
        except Exception as e:  # NOTE: any decode failure, as in Decoder._file_row
            if on_error == "fail":
                raise InputError(f"input {unit[ID]}: cannot decode: {type(e).__name__}: "
                                 f"{e}") from None
    return {}


def _first_row(column) -> np.ndarray:
    import pyarrow as pa

    arr = column.combine_chunks()
    if isinstance(arr.type, pa.FixedShapeTensorType):
        return arr.to_numpy_ndarray()[0]
    return np.asarray(arr.to_pylist()[0])


def _run_local(units: list[dict], interp, decoder: Decoder, workers: int | None, threads: int,
               batch_size: int, per_unit: bool) -> Iterator[dict]:
    from concurrent.futures import ThreadPoolExecutor

    from ..runtime.config import ScheduleConfig
    from ..runtime.parallel import ParallelRunner
    from ..runtime.runtime import available_cores

    if workers is None:
        workers = max(1, available_cores() // threads)
    runner = ParallelRunner(interp, workers, ScheduleConfig(num_threads=threads))
    predictor = BatchPredictor(_RunnerSession(runner), preprocess=decoder,
                               pass_through=(INDEX, ERROR))
    step = 1 if per_unit else batch_size
    batches = (_columns(units[i:i + step]) for i in range(0, len(units), step))
    log.info("running in this process on a ParallelRunner: %d worker(s) x %d thread(s)",
             workers, threads)
    pool = ThreadPoolExecutor(workers, thread_name_prefix="sprat-batch")
    try:
        yield from _bounded_map(pool, predictor, batches, 2 * workers)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        runner.close()


def _columns(units: list[dict]) -> dict[str, np.ndarray]:
    """Units as one batch of columns (the shape Ray Data gives ``map_batches``)."""
    return {k: np.array([u[k] for u in units], dtype=object if k in (ID, "path") else np.int64)
            for k in (ID, INDEX, "path", "start", "stop")}


def _bounded_map(pool, fn, items: Iterable, window: int) -> Iterator:
    """``pool.map(fn, items)`` in order with at most ``window`` calls submitted at a time, so
    a long job neither lists all its work up front nor holds every result."""
    pending: deque = deque()
    for item in items:
        pending.append(pool.submit(fn, item))
        if len(pending) >= window:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()
