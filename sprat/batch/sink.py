"""Step 4 of a batch job: the Parquet output, written atomically with an exactly-once check
(``sprat.batch`` describes the whole job)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping

import numpy as np

from .._fs import atomic_output, atomic_write
from ..errors import InputError, SpratError
from .inputs import ERROR, ID, INDEX

log = logging.getLogger(__name__)

ON_ERROR = ("fail", "skip")


class ParquetSink:
    """Write result batches to one Parquet file, atomically, checking exactly-once delivery.

    ``add(batch)`` takes ``{"id", "index", "error", output name: array}`` (the predictor's
    result) and returns its number of rows. Rows with an empty error are written: column
    ``id`` (string), ``index`` (int64: the input's position in the job), then one column per
    output — a plain column for one value per row, else a ``pyarrow.fixed_shape_tensor``
    column (row shape and dtype of the output). A row with an error raises InputError naming
    its id (``on_error="fail"``) or is listed in the report (``"skip"``): ``report_path``,
    JSON ``{"skipped": [{"id", "index", "error"}], "rows": total, "written": n}``, written
    atomically when there are skipped rows (a stale report from an earlier run is removed).

    Leaving the ``with`` block cleanly checks that every index in ``0..total-1`` arrived once
    and moves the file into place (``os.replace``); on any exception nothing is left at
    ``path``'s place but what was there before. Raises SpratError when an index arrives twice
    or never (naming the first ids).
    """

    def __init__(self, path: str | os.PathLike, total: int, on_error: str = "fail",
                 report_path: str | os.PathLike | None = None):
        if on_error not in ON_ERROR:
            raise InputError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
        self.path = os.fspath(path)
        self.report_path = (os.fspath(report_path) if report_path is not None
                            else self.path + ".errors.json")
        self.total = total
        self.on_error = on_error
        self.seen = np.zeros(total, dtype=bool)
        self.written = 0
        self.skipped: list[dict] = []
        self._ids: dict[int, str] = {}
        self._writer = None
        self._ctx = None
        self._tmp = None

    def __enter__(self) -> ParquetSink:
        self._ctx = atomic_output(self.path)
        self._tmp = self._ctx.__enter__()
        return self

    def add(self, batch: Mapping[str, np.ndarray]) -> int:
        import pyarrow as pa
        import pyarrow.parquet as pq

        ids = [str(v) for v in batch[ID]]
        index = np.asarray(batch[INDEX], dtype=np.int64)
        errors = [str(e) if e is not None else "" for e in batch[ERROR]]
        if len(index) and (index.min() < 0 or index.max() >= self.total):
            raise SpratError(f"row index out of range 0..{self.total - 1} in a result batch")
        twice = index[self.seen[index]]
        if len(twice) or len(np.unique(index)) != len(index):
            i = int(twice[0]) if len(twice) else int(index[0])
            raise SpratError(f"input {self._ids.get(i, ids[0])!r} (row {i}) was delivered "
                             f"twice: results are not exactly once")
        self.seen[index] = True
        ok = np.array([not e for e in errors], dtype=bool)
        for k in np.flatnonzero(~ok):
            if self.on_error == "fail":
                raise InputError(f"input {ids[k]} (row {int(index[k])}): {errors[k]}")
            self.skipped.append({ID: ids[k], INDEX: int(index[k]), ERROR: errors[k]})
        if ok.any():
            cols = {ID: pa.array([i for i, good in zip(ids, ok) if good], pa.string()),
                    INDEX: pa.array(index[ok])}
            for name, x in batch.items():
                if name not in (ID, INDEX, ERROR):
                    cols[name] = _arrow_column(np.asarray(x)[ok])
            table = pa.table(cols)
            if self._writer is None:
                self._writer = pq.ParquetWriter(self._tmp, table.schema)
            self._writer.write_table(table)
            self.written += int(ok.sum())
        return len(index)

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self._finish()
        except BaseException as e:
            self._close_writer()
            self._ctx.__exit__(type(e), e, e.__traceback__)
            raise
        self._close_writer()
        self._ctx.__exit__(exc_type, exc, tb)

    def _finish(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        missing = np.flatnonzero(~self.seen)
        if len(missing):
            raise SpratError(f"{len(missing)} of {self.total} input rows never came back "
                             f"(rows {missing[:5].tolist()}...): results are incomplete")
        if self._writer is None:  # NOTE: every row was skipped: an empty file, ids only
            log.warning("every input was skipped; %s has no rows", self.path)
            empty = pa.table({ID: pa.array([], pa.string()), INDEX: pa.array([], pa.int64())})
            pq.write_table(empty, self._tmp)
        if self.skipped:
            report = {"rows": self.total, "written": self.written, "skipped": self.skipped}
            atomic_write(self.report_path, json.dumps(report, indent=1).encode())
        elif os.path.exists(self.report_path):
            os.unlink(self.report_path)

    def _close_writer(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def _arrow_column(x: np.ndarray):
    import pyarrow as pa

    if x.dtype == object:
        return pa.array(list(x))
    if x.ndim <= 1:
        return pa.array(x)
    return pa.FixedShapeTensorArray.from_numpy_ndarray(np.ascontiguousarray(x))
