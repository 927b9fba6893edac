"""Step 1 and 2 of a batch job: list the inputs into units of work, decode units into rows of
model input tensors (``sprat.batch`` describes the whole job)."""

from __future__ import annotations

import glob
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError

log = logging.getLogger(__name__)

ID, INDEX, ERROR = "id", "index", "error"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm",
                  ".pgm")
ARRAY_SUFFIXES = (".npy", ".npz")
PARQUET_SUFFIXES = (".parquet", ".pq")
KINDS = {"arrays": ARRAY_SUFFIXES, "images": IMAGE_SUFFIXES, "parquet": PARQUET_SUFFIXES}


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
