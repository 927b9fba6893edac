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
Nothing in this module imports ray; pyarrow, Pillow and tqdm are imported where needed.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import sys
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ._fs import atomic_output, atomic_write
from .errors import InputError, ShapeError, SpratError

log = logging.getLogger(__name__)

ID, INDEX, ERROR = "id", "index", "error"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm",
                  ".pgm")
ARRAY_SUFFIXES = (".npy", ".npz")
PARQUET_SUFFIXES = (".parquet", ".pq")
KINDS = {"arrays": ARRAY_SUFFIXES, "images": IMAGE_SUFFIXES, "parquet": PARQUET_SUFFIXES}
ON_ERROR = ("fail", "skip")
ENGINES = ("auto", "ray", "local")


# ---- 1. inputs and units ----------------------------------------------------------------------
def find_inputs(spec: str | os.PathLike) -> tuple[str, list[str]]:
    """The input files named by ``spec`` and their kind.

    ``spec``: a folder (its files, not recursive), a glob (``**`` recurses) or one file.
    Returns ``(kind, sorted paths)`` with kind ``"arrays"`` (.npy/.npz), ``"images"`` (what
    Pillow reads: .png, .jpg, ...) or ``"parquet"``. Files with other suffixes in a folder or
    glob are ignored (logged at warning level with their count).

    Raises:
        InputError: nothing matches, or the inputs mix kinds (names the kinds and counts).
    """
    spec = os.fspath(spec)
    if os.path.isdir(spec):
        paths = [os.path.join(spec, n) for n in os.listdir(spec)]
    elif os.path.isfile(spec):
        paths = [spec]
    else:
        paths = glob.glob(spec, recursive=True)
    paths = sorted(p for p in paths if os.path.isfile(p))
    if not paths:
        raise InputError(f"no input files match {spec!r}")
    by_kind: dict[str, list[str]] = {}
    other = []
    for p in paths:
        kind = _kind_of(p)
        if kind is None:
            other.append(p)
        else:
            by_kind.setdefault(kind, []).append(p)
    if other and len(paths) == 1:
        raise InputError(f"{spec}: unknown input type (expected one of "
                         f"{', '.join(s for v in KINDS.values() for s in v)})")
    if other:
        log.warning("ignored %d file(s) that are not inputs (e.g. %s)", len(other), other[0])
    if not by_kind:
        raise InputError(f"no .npy/.npz, image or Parquet files in {spec!r}")
    if len(by_kind) > 1:
        counts = ", ".join(f"{len(v)} {k}" for k, v in sorted(by_kind.items()))
        raise InputError(f"{spec!r} mixes kinds of input ({counts}); give one kind per job")
    (kind, files), = by_kind.items()
    return kind, files


def _kind_of(path: str) -> str | None:
    suffix = os.path.splitext(path)[1].lower()
    for kind, suffixes in KINDS.items():
        if suffix in suffixes:
            return kind
    return None


def make_units(kind: str, files: Sequence[str], rows_per_unit: int = 64,
               on_error: str = "fail") -> tuple[list[dict], int]:
    """Units of work for ``files`` of ``kind`` and the job's total number of input rows.

    A unit is ``{"id": str, "index": int, "path": str, "start": int, "stop": int}``: one row
    for a file input (``id`` is its path), or rows ``[start, stop)`` of a Parquet file (ids
    ``path#row``, or the id column's values), at most ``rows_per_unit`` of them. ``index`` is
    the job-wide position of the unit's first row: the rows of a job are numbered 0..total-1
    in input order, which is how ``ParquetSink`` checks each arrives exactly once.

    A Parquet file whose footer cannot be read raises InputError naming it, or with
    ``on_error="skip"`` becomes a one-row unit that decodes to that error.
    """
    if kind != "parquet":
        return [{ID: p, INDEX: i, "path": p, "start": 0, "stop": 1}
                for i, p in enumerate(files)], len(files)
    import pyarrow.parquet as pq

    units, total = [], 0
    for path in files:
        try:
            rows = pq.ParquetFile(path).metadata.num_rows
        except Exception as e:  # NOTE: pyarrow raises several types for a corrupt footer
            if on_error == "fail":
                raise InputError(f"{path}: cannot read as Parquet: {e}") from None
            units.append({ID: path, INDEX: total, "path": path, "start": 0, "stop": 1})
            total += 1
            continue
        for start in range(0, rows, rows_per_unit):
            stop = min(rows, start + rows_per_unit)
            units.append({ID: f"{path}#{start}", INDEX: total + start, "path": path,
                          "start": start, "stop": stop})
        total += rows
    return units, total


# ---- 2. decoding ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ImageOptions:
    """How an image becomes a tensor: decoded with Pillow, converted to ``L`` (1 channel),
    ``RGB`` (3) or ``RGBA`` (4), resized to ``size`` = (H, W) with bilinear filtering, then for
    a float input ``(pixel / 255 - mean) / std`` per channel (torchvision's ``Normalize``
    convention); an integer input takes the raw pixels. ``layout`` is the model's:
    ``"nchw"`` or ``"nhwc"``."""

    size: tuple[int, int] | None = None
    mean: tuple[float, ...] = (0.0,)
    std: tuple[float, ...] = (1.0,)
    layout: str = "nchw"


@dataclass
class Decoder:
    """Decode a batch of units (see ``make_units``) into rows of model input tensors.

    ``specs``: ``{input name: (row shape, dtype)}``, the shape of one row without the batch
    dim. Called with a batch ``{"id", "index", "path", "start", "stop": array}``, it returns
    ``{"id": str array, "index": int64 array, "error": str array, name: (rows, *row shape)
    array per input}``. A row whose input could not be decoded, or has another shape or a
    dtype that does not cast to the model's (NumPy ``same_kind``), has ``error`` set to the
    reason and zeros in its tensors; nothing is raised for it. ``kind`` is ``"arrays"`` (an
    ``.npy`` holds the one input, an ``.npz`` one array per input name), ``"images"`` or
    ``"parquet"`` (one column per input name, fixed-shape tensor or nested list columns;
    ``id_column`` names the column of ids, else ids are ``path#row``).
    """

    kind: str
    specs: dict[str, tuple[tuple[int, ...], np.dtype]]
    image: ImageOptions = field(default_factory=ImageOptions)
    id_column: str | None = None

    def __call__(self, units: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        ids, index, errors = [], [], []
        tensors: dict[str, list[np.ndarray]] = {name: [] for name in self.specs}
        for uid, idx, path, start, stop in zip(units[ID], units[INDEX], units["path"],
                                               units["start"], units["stop"]):
            if self.kind == "parquet":
                rows = self._parquet_rows(str(path), int(start), int(stop))
            else:
                rows = [(str(uid), self._file_row(str(path)))]
            for k, (row_id, row) in enumerate(rows):
                ids.append(row_id)
                index.append(int(idx) + k)
                errors.append(row if isinstance(row, str) else "")
                for name, (shape, dtype) in self.specs.items():
                    tensors[name].append(np.zeros(shape, dtype) if isinstance(row, str)
                                         else row[name])
        out = {ID: np.array(ids, dtype=object), INDEX: np.array(index, dtype=np.int64),
               ERROR: np.array(errors, dtype=object)}
        for name, (shape, dtype) in self.specs.items():
            out[name] = (np.stack(tensors[name]) if tensors[name]
                         else np.zeros((0, *shape), dtype))
        return out

    # NOTE: decoding hostile or corrupt files raises many exception types (OSError, ValueError,
    # EOFError, zipfile.BadZipFile, PIL.UnidentifiedImageError, struct.error, ...): each is an
    # error of that one row, so Exception is caught there and its message kept
    def _file_row(self, path: str) -> dict[str, np.ndarray] | str:
        try:
            arrays = self.read_file(path)
        except Exception as e:
            return f"cannot decode {os.path.basename(path)}: {type(e).__name__}: {e}"
        return self._checked(arrays)

    def read_file(self, path: str) -> dict[str, np.ndarray]:
        """The raw arrays of one file input ``{input name: array}`` (no shape check).
        Raises whatever the decoder raises for a bad file."""
        names = list(self.specs)
        if self.kind == "images":
            return {names[0]: self._image(path)}
        data = np.load(path, allow_pickle=False)
        if isinstance(data, np.ndarray):
            if len(names) != 1:
                raise InputError(f"an .npy holds one array; the model has inputs {names} "
                                 f"(use .npz files with one array per input name)")
            return {names[0]: data}
        with data:
            missing = [n for n in names if n not in data.files]
            if missing:
                raise InputError(f"no array named {missing} in the .npz (it has {data.files})")
            return {n: data[n] for n in names}

    def _image(self, path: str) -> np.ndarray:
        from PIL import Image

        (shape, dtype), = self.specs.values()
        nchw = self.image.layout == "nchw"
        c, h, w = (shape[0], shape[1], shape[2]) if nchw else (shape[2], shape[0], shape[1])
        mode = {1: "L", 3: "RGB", 4: "RGBA"}[c]
        with Image.open(path) as im:
            im = im.convert(mode).resize((w, h), Image.Resampling.BILINEAR)
            x = np.asarray(im)
        x = x.reshape(h, w, c)
        if np.dtype(dtype).kind == "f":
            mean = np.asarray(self.image.mean, np.float32)
            std = np.asarray(self.image.std, np.float32)
            x = (x.astype(np.float32) / 255.0 - mean) / std
        if nchw:
            x = x.transpose(2, 0, 1)
        return np.ascontiguousarray(x, dtype)

    def _checked(self, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | str:
        """Arrays cast to the model's dtypes, or the reason one does not fit."""
        out = {}
        for name, (shape, dtype) in self.specs.items():
            x = np.asarray(arrays[name])
            if x.shape == (1, *shape):  # NOTE: a row saved with its batch dim of 1
                x = x[0]
            if x.shape != tuple(shape):
                return (f"input {name!r}: shape {list(x.shape)}, expected {list(shape)} "
                        f"(one row, without the batch dim)")
            if x.dtype != dtype and not np.can_cast(x.dtype, dtype, casting="same_kind"):
                return f"input {name!r}: dtype {x.dtype}, expected {np.dtype(dtype)}"
            out[name] = np.ascontiguousarray(x, dtype)
        return out

    def _parquet_rows(self, path: str, start: int, stop: int) -> list[tuple[str, object]]:
        n = stop - start
        try:
            table = _read_parquet_rows(path, start, stop,
                                       [*self.specs, *([self.id_column] if self.id_column else [])])
        except Exception as e:  # NOTE: as _file_row: a corrupt file is an error of its rows
            why = f"cannot read {os.path.basename(path)} as Parquet: {type(e).__name__}: {e}"
            return [(f"{path}#{start + k}", why) for k in range(n)]
        if self.id_column is not None:
            ids = [str(v) for v in table.column(self.id_column).to_pylist()]
        else:
            ids = [f"{path}#{start + k}" for k in range(n)]
        columns, errors = {}, [""] * n
        for name, (shape, dtype) in self.specs.items():
            x, errs = column_rows(table.column(name), shape, dtype)
            columns[name] = x
            errors = [a or (f"input {name!r}: {b}" if b else "") for a, b in zip(errors, errs)]
        return [(ids[k], errors[k] or {name: x[k] for name, x in columns.items()})
                for k in range(n)]


def _read_parquet_rows(path: str, start: int, stop: int, columns: list[str]):
    """Rows ``[start, stop)`` of the named columns of a Parquet file, reading only the row
    groups that hold them. Raises KeyError naming a missing column."""
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    names = pf.schema_arrow.names
    missing = [c for c in columns if c not in names]
    if missing:
        raise KeyError(f"no column(s) {missing}; the file has {names}")
    groups, first, offset = [], None, 0
    for g in range(pf.metadata.num_row_groups):
        rows = pf.metadata.row_group(g).num_rows
        if offset < stop and offset + rows > start:
            groups.append(g)
            first = offset if first is None else first
        offset += rows
    table = pf.read_row_groups(groups, columns=columns)
    return table.slice(start - (first or 0), stop - start)


def column_rows(column, shape: tuple[int, ...], dtype) -> tuple[np.ndarray, list[str]]:
    """A Parquet/Arrow column as an ``(n, *shape)`` array of ``dtype`` and a per-row error
    message ("" for a good row; a bad row is zeros).

    Reads fixed-shape tensor columns (``pyarrow.fixed_shape_tensor``), Ray's tensor
    extension columns (their storage: one flat list per row) and nested (fixed-size) list
    columns; a column whose rows all fit is converted in one piece, otherwise row by row so
    that each bad row (null, ragged, another shape, a dtype that does not cast) is named.
    """
    import pyarrow as pa

    n = len(column)
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    x = _fast_tensor(arr, n, shape)
    if x is not None and np.can_cast(x.dtype, dtype, casting="same_kind"):
        return np.ascontiguousarray(x, dtype), [""] * n
    out = np.zeros((n, *shape), dtype)
    errors = [""] * n
    for k, value in enumerate(arr.to_pylist()):
        if value is None:
            errors[k] = "null"
            continue
        try:
            v = np.asarray(value)
        except ValueError as e:
            errors[k] = f"not a tensor ({e})"
            continue
        if v.size == int(np.prod(shape)) and v.ndim == 1 and len(shape) > 1:
            v = v.reshape(shape)  # NOTE: a flat row of the right size (Ray's tensor storage)
        if v.shape != tuple(shape):
            errors[k] = f"shape {list(v.shape)}, expected {list(shape)}"
        elif v.dtype != dtype and not np.can_cast(v.dtype, dtype, casting="same_kind"):
            errors[k] = f"dtype {v.dtype}, expected {np.dtype(dtype)}"
        else:
            out[k] = v
    return out, errors


def _fast_tensor(arr, n: int, shape: tuple[int, ...]) -> np.ndarray | None:
    """``arr`` as one ``(n, *shape)`` array when every row has exactly that shape, else None."""
    import pyarrow as pa

    if isinstance(arr.type, pa.FixedShapeTensorType):
        x = arr.to_numpy_ndarray() if arr.null_count == 0 else None
        return x if x is not None and x.shape == (n, *shape) else None
    if isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    dims = []
    while pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type) \
            or pa.types.is_fixed_size_list(arr.type):
        if arr.null_count:
            return None
        lengths = arr.value_lengths().to_numpy(zero_copy_only=False)
        if len(lengths) and (lengths != lengths[0]).any():
            return None
        dims.append(int(lengths[0]) if len(lengths) else 0)
        arr = arr.flatten()
    if not dims or arr.null_count or int(np.prod(dims)) != int(np.prod(shape)):
        return None
    if len(dims) != 1 and tuple(dims) != tuple(shape):
        return None
    values = arr.to_numpy(zero_copy_only=False)
    return values.reshape(n, *shape) if values.size == n * int(np.prod(shape)) else None


def row_specs(inputs, kind: str, image: ImageOptions, probe: Callable[[], dict] | None = None
              ) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """``{input name: (row shape, dtype)}``: the model's input shapes without the batch dim,
    with symbolic dims filled from the image options (``kind="images"``) or from ``probe()``,
    the raw arrays of the first input that decodes.

    ``inputs``: the session's TensorSpecs. Raises InputError: an image job for a model with
    more than one input, or one that is not rank 4; ``--size`` missing for symbolic H, W, or
    contradicting the model's fixed H, W; a probe array whose rank or fixed dims differ from
    the model's.
    """
    batch_mode(inputs)  # NOTE: refuses rank-0 inputs and fixed batch dims > 1 first
    if kind == "images":
        if len(inputs) != 1:
            raise InputError(f"image inputs need a model with one input; it has "
                             f"{[s.name for s in inputs]}")
        spec, = inputs
        if spec.shape is None or len(spec.shape) != 4:
            raise InputError(f"input {spec.name!r} has shape {spec.shape}; an image input is "
                             f"4-D (N, C, H, W) or (N, H, W, C)")
        nchw = image.layout == "nchw"
        c, h, w = (spec.shape[1:] if nchw else (spec.shape[3], spec.shape[1], spec.shape[2]))
        c = c if _fixed(c) else 3
        if c not in (1, 3, 4):
            raise InputError(f"input {spec.name!r}: {c} channels in layout {image.layout}; "
                             f"images have 1, 3 or 4 (is --layout right?)")
        if image.size is not None:
            for d, given, axis in ((h, image.size[0], "H"), (w, image.size[1], "W")):
                if _fixed(d) and d != given:
                    raise InputError(f"--size gives {axis}={given}; the model's input "
                                     f"{spec.name!r} is fixed at {axis}={d}")
            h, w = image.size
        elif not (_fixed(h) and _fixed(w)):
            raise InputError(f"input {spec.name!r} has symbolic height/width {spec.shape}: "
                             f"give --size H W")
        for stat, values in (("mean", image.mean), ("std", image.std)):
            if len(values) not in (1, c):
                raise InputError(f"--{stat} has {len(values)} values; give 1 or {c}")
        shape = (c, h, w) if nchw else (h, w, c)
        return {spec.name: (tuple(int(d) for d in shape), np.dtype(spec.dtype))}
    out = {}
    first = None
    for spec in inputs:
        dims = list(spec.shape[1:])
        if not all(_fixed(d) for d in dims):
            if first is None:
                first = probe() if probe is not None else {}
            x = first.get(spec.name)
            if x is None:
                raise InputError(f"input {spec.name!r} has symbolic dims {list(spec.shape)} "
                                 f"and no input decoded to fill them")
            got = x.shape[1:] if x.ndim == len(spec.shape) and x.shape[0] == 1 else x.shape
            if len(got) != len(dims) or any(_fixed(d) and d != g for d, g in zip(dims, got)):
                raise InputError(f"input {spec.name!r}: the first input has shape "
                                 f"{list(got)}, the model takes rows of {dims}")
            dims = list(got)
        out[spec.name] = (tuple(int(d) for d in dims), np.dtype(spec.dtype))
    return out


def _fixed(d) -> bool:
    return isinstance(d, int) and d >= 0


# ---- 3. running batches -----------------------------------------------------------------------
def batch_mode(inputs) -> str:
    """``"batch"`` when every input's first dim is symbolic (a batch of any size runs at once
    after a resize), ``"rows"`` when some input's first dim is fixed at 1 (rows run one by
    one). Raises InputError for a rank-0 input or a first dim fixed at another size."""
    mode = "batch"
    for spec in inputs:
        if spec.shape is None or len(spec.shape) == 0:
            raise InputError(f"input {spec.name!r} has no batch dim (shape {spec.shape}); "
                             f"batch inference needs inputs of shape (rows, ...)")
        d0 = spec.shape[0]
        if _fixed(d0) and d0 != 1:
            raise InputError(f"input {spec.name!r} has its batch dim fixed at {d0}; batch "
                             f"inference runs models with a symbolic batch dim or one of 1")
        if _fixed(d0):
            mode = "rows"
    return mode


class BatchPredictor:
    """Run batches of rows (a dict of NumPy columns) through one session.

    ``session``: a Session, or any object with its ``inputs``, ``outputs`` and ``run`` (and
    ``resize`` when it has one). ``__call__(batch)`` takes ``{column: (rows, ...) array}``
    and returns ``{id_column and pass_through columns as given, output name: (rows, ...)
    array}``. Steps: ``preprocess(batch) -> batch`` if given (it may decode, and may change
    the number of rows: the id and pass-through columns are read from what it returns); the
    feed of each model input is the column ``input_columns.get(name, name)``; the outputs of
    ``session.run`` keep the model's dtypes; ``postprocess(outputs) -> outputs`` if given. A
    batch of a shape not seen before goes through ``Session.resize`` (the short last batch of
    a job); a model whose batch dim is fixed at 1 runs row by row (``batch_mode``).

    ``new_session``: makes another session of the same model (sharing its weights). With it,
    up to ``max_sessions`` sessions stay prepared, one per batch shape, most recent kept: Ray
    Data cuts blocks into batches such as 64 + 11 rows, and a single session would resize
    (re-plan, about 6 ms here, and run its next batch cold) twice per block.

    Raises InputError (a missing column naming the columns there are, columns of different
    lengths, an output named like a passed-through column), ShapeError (an output whose
    first dim is not the number of rows), and whatever ``Session.run`` raises.
    """

    def __init__(self, session, *, id_column: str | None = ID, pass_through: Sequence[str] = (),
                 input_columns: Mapping[str, str] | None = None,
                 preprocess: Callable | None = None, postprocess: Callable | None = None,
                 new_session: Callable | None = None, max_sessions: int = 4):
        self.session = session
        self.inputs = list(session.inputs)
        self.output_names = [s.name for s in session.outputs]
        self.mode = batch_mode(self.inputs)
        self.keep = [c for c in (id_column, *pass_through) if c is not None]
        clash = sorted(set(self.keep) & set(self.output_names))
        if clash:
            raise InputError(f"column(s) {clash} are passed through and also model outputs; "
                             f"rename the id/pass-through column")
        self.columns = {s.name: s.name for s in self.inputs}
        self.columns.update(input_columns or {})
        self.preprocess = preprocess
        self.postprocess = postprocess
        self._new_session = new_session
        self.max_sessions = max_sessions
        self._spare = [session]  # NOTE: sessions not yet prepared for any batch shape
        self.prepared: OrderedDict[tuple, object] = OrderedDict()  # input shapes -> session

    def __call__(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.preprocess is not None:
            batch = self.preprocess(batch)
        missing = [c for c in (*self.keep, *self.columns.values()) if c not in batch]
        if missing:
            raise InputError(f"batch has no column(s) {missing}; its columns are "
                             f"{sorted(batch)}")
        feeds = {name: _as_tensor(batch[col], col) for name, col in self.columns.items()}
        n = _rows(batch, [*self.keep, *self.columns.values()])
        outputs = self.run(feeds, n)
        if self.postprocess is not None:
            outputs = dict(self.postprocess(outputs))
        result = {c: batch[c] for c in self.keep}
        result.update(outputs)
        _rows(result, list(result))
        return result

    def run(self, feeds: dict[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
        """``{output name: (n, ...) array}`` for ``n`` rows of ``feeds``."""
        if n == 0:
            return {s.name: np.zeros((0,), s.dtype) for s in self.session.outputs}
        if self.mode == "rows":
            return self._run_rows(feeds, n)
        outs = self._session_for({k: x.shape for k, x in feeds.items()}).run(feeds)
        for name, y in outs.items():
            if np.ndim(y) == 0 or y.shape[0] != n:
                raise ShapeError(f"output {name!r} has shape {list(np.shape(y))} for a batch "
                                 f"of {n} rows: its first dim is not the batch dim, so it "
                                 f"cannot be split into rows")
        return {name: outs[name] for name in self.output_names}

    def _run_rows(self, feeds, n: int) -> dict[str, np.ndarray]:
        session = self._session_for({k: (1, *x.shape[1:]) for k, x in feeds.items()})
        per_row = [session.run({k: x[i:i + 1] for k, x in feeds.items()}) for i in range(n)]
        out = {}
        for name in self.output_names:
            ys = [np.asarray(r[name]) for r in per_row]
            # NOTE: an output with a leading dim of 1 is that row's batch of one; any other
            # shape (no batch dim) is one row as a whole
            lead = all(y.ndim > 0 and y.shape[0] == 1 for y in ys)
            out[name] = np.concatenate(ys) if lead else np.stack(ys)
        return out

    def _session_for(self, shapes: dict[str, tuple[int, ...]]):
        """The session prepared for ``shapes``: one kept from before, a new or spare one
        resized, or the least recently used one resized."""
        if not hasattr(self.session, "resize"):
            return self.session  # NOTE: a ParallelRunner's sessions resize themselves
        key = tuple(sorted((k, tuple(v)) for k, v in shapes.items()))
        session = self.prepared.get(key)
        if session is not None:
            self.prepared.move_to_end(key)
            return session
        if self._spare:
            session = self._spare.pop()
        elif self._new_session is not None and len(self.prepared) < self.max_sessions:
            session = self._new_session()
        else:
            _, session = self.prepared.popitem(last=False)
        session.resize(dict(key))
        self.prepared[key] = session
        return session


def _as_tensor(column, name: str) -> np.ndarray:
    """A column as one ndarray; an object column of equal-shaped arrays (how Ray Data gives
    variable-shaped tensor columns) is stacked. Raises InputError for ragged rows."""
    x = np.asarray(column)
    if x.dtype == object and x.ndim == 1 and len(x) and isinstance(x[0], np.ndarray):
        shapes = {np.shape(v) for v in x}
        if len(shapes) != 1:
            raise InputError(f"column {name!r} has rows of different shapes "
                             f"{sorted(shapes)[:4]}; one batch must share one shape")
        x = np.stack(list(x))
    return np.ascontiguousarray(x)


def _rows(batch: Mapping[str, np.ndarray], columns: list[str]) -> int:
    lengths = {c: len(batch[c]) for c in columns}
    if len(set(lengths.values())) > 1:
        raise InputError(f"columns have different numbers of rows: {lengths}")
    return next(iter(lengths.values()), 0)


class _RunnerSession:
    """A ParallelRunner seen as a session: each ``run`` takes a free worker session (which
    resizes itself when the feed shapes change)."""

    def __init__(self, runner):
        self._runner = runner
        self.inputs = runner.sessions[0].inputs
        self.outputs = runner.sessions[0].outputs

    def run(self, feeds):
        return self._runner.run(feeds)


# ---- 4. the sink ------------------------------------------------------------------------------
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


# ---- progress ---------------------------------------------------------------------------------
BAR_FORMAT = ("{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} rows "
              "[{elapsed}<{remaining}, {rate_fmt}]")


def progress_bar(total: int, desc: str = "sprat batch", stream=None, enabled: bool | None = None):
    """A tqdm bar of ``total`` rows on ``stream`` (default stderr) showing rows/s and the ETA,
    or a bar that draws nothing when ``enabled`` is False — by default, when ``stream`` is not
    a terminal (a pipe, a file, CI) or tqdm is not installed."""
    stream = sys.stderr if stream is None else stream
    if enabled is None:
        enabled = bool(getattr(stream, "isatty", lambda: False)())
    try:
        from tqdm import tqdm
    except ImportError:
        if enabled:
            log.info("tqdm is not installed: no progress bar (pip install tqdm)")
        return _NoBar()
    if not enabled:
        return _NoBar()
    cols, rows = _size_of(stream)
    return tqdm(total=total, desc=desc, unit="rows", file=stream, bar_format=BAR_FORMAT,
                ncols=cols, nrows=rows, smoothing=0.1)


def _size_of(stream) -> tuple[int, int]:
    """The terminal's (columns, lines), 80 x 24 where it reports none: a pseudo-terminal that
    was never sized (as ``docker run -t`` may give) reports 0 x 0, and tqdm draws nothing on
    a terminal of 0 lines."""
    try:
        size = os.get_terminal_size(stream.fileno())
        cols, rows = size.columns, size.lines
    except (AttributeError, OSError, ValueError):
        cols, rows = 0, 0
    return (cols if cols > 0 else 80), (rows if rows > 0 else 24)


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


# ---- the job ----------------------------------------------------------------------------------
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
    from .runtime.interpreter import Interpreter

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
                from . import ray as sprat_ray

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
    from .format import MAGIC

    path = os.fspath(model)
    with open(path, "rb") as f:
        data = f.read()
    if data[:len(MAGIC)] == MAGIC:
        return data
    from .converter import convert

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

    from .runtime.config import ScheduleConfig
    from .runtime.parallel import ParallelRunner
    from .runtime.runtime import available_cores

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
