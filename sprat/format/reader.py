"""Read a ``.sprat`` file into an IR :class:`~sprat.ir.graph.Graph`, verifying everything first.

Layout and guarantees: see the ``sprat.format`` package docstring. Every check failure, and any
unexpected low-level error while decoding, is a ``ModelFormatError`` naming what and where.
"""

from __future__ import annotations

import mmap
import os
import sys
from dataclasses import dataclass

import numpy as np

from .. import dtypes
from .._logging import logger
from ..errors import ModelFormatError
from ..ir.graph import Graph, Node, Value
from . import _checked as C

# NOTE: the two enums straight from their generated modules: ``_fb`` imports every accessor
# and the flatbuffers package, which the checked reader (``_checked``) does not use
from ._generated.sprat_fb.AttrKind import AttrKind
from ._generated.sprat_fb.DataLocation import DataLocation
from .version import (
    ALIGNMENT,
    BYTE_ORDERS,
    FORMAT_VERSION,
    HEADER,
    HEADER_SIZE,
    MAGIC,
    MAX_ELEMENTS,
    MAX_GRAPH_DEPTH,
    MAX_RANK,
)

# Field ids, as in sprat.fbs (``id:`` attributes).
_KV_KEY, _KV_VALUE = 0, 1
_T_NAME, _T_DTYPE, _T_SHAPE, _T_PARAMS, _T_LOC, _T_OFFSET, _T_LENGTH, _T_INLINE = range(8)
_A_NAME, _A_KIND, _A_I, _A_F, _A_S, _A_INTS, _A_FLOATS, _A_STRINGS, _A_TENSORS, _A_GRAPHS = range(10)
_N_OP, _N_DOMAIN, _N_NAME, _N_INPUTS, _N_OUTPUTS, _N_ATTRS = range(6)
_G_NAME, _G_TENSORS, _G_NODES, _G_INPUTS, _G_OUTPUTS, _G_METADATA = range(6)
(_M_VERSION, _M_PRODUCER, _M_BIZ, _M_UUID, _M_TENSORS, _M_NODES, _M_INPUTS, _M_OUTPUTS,
 _M_METADATA, _M_SPRAT_VERSION, _M_SOURCE_FORMAT, _M_SOURCE_OPSET, _M_BYTE_ORDER,
 _M_EXTERNAL) = range(14)

_MODEL_STRINGS = (("producer", _M_PRODUCER), ("biz_code", _M_BIZ), ("uuid", _M_UUID),
                  ("sprat_version", _M_SPRAT_VERSION), ("source_format", _M_SOURCE_FORMAT))


@dataclass
class _Weights:
    """Where Blob tensors live: ``obj[lo:hi]`` (``obj`` supports the buffer protocol)."""

    obj: object
    lo: int
    hi: int
    name: str  # "this file" or the external file's path, for messages


class _Decoder:
    def __init__(self, region: C.Region, weights: _Weights, byte_order: str):
        self.r = region
        self.weights = weights
        self.swap = byte_order != sys.byteorder

    # ---- tensors --------------------------------------------------------------------------
    def tensor(self, t: C.Table, allow_no_data: bool = True) -> Value:
        where = t  # NOTE: formatted as its path only in a message (``C.path``)
        name = t.string(_T_NAME, "name")
        code = t.scalar(_T_DTYPE, C.INT32, 0, "dtype")
        dtype = None
        if code != 0:
            dtype = dtypes.CODE_TO_NUMPY.get(code)
            if dtype is None:
                self.r.fail(f"{where}.dtype", t.pos, f"unknown dtype code {code}; known: "
                            f"{sorted(dtypes.CODE_TO_NUMPY)}")
        shape = self._shape(t)
        loc = t.scalar(_T_LOC, C.INT8, DataLocation.NoData, "data_location")
        if loc == DataLocation.NoData:
            if not allow_no_data:
                self.r.fail(where, t.pos, "tensor attribute has no data")
            return Value("" if name is None else name, dtype, shape, None)
        if loc not in (DataLocation.Blob, DataLocation.Inline):
            self.r.fail(f"{where}.data_location", t.pos, f"unknown data location {loc}")
        if dtype is None:
            self.r.fail(f"{where}.dtype", t.pos, "a constant tensor needs a dtype (code is 0)")
        if shape is None or not all(isinstance(d, int) for d in shape):
            self.r.fail(f"{where}.shape", t.pos, f"a constant tensor needs a fixed shape, "
                        f"got {shape}")
        if loc == DataLocation.Blob:
            offset = t.scalar(_T_OFFSET, C.UINT64, 0, "data_offset")
            length = t.scalar(_T_LENGTH, C.UINT64, 0, "data_length")
            count = _count(shape, length // dtype.itemsize if length % dtype.itemsize == 0 else -1)
            if count < 0 or count * dtype.itemsize != length:
                self.r.fail(f"{where}.data_length", t.pos, f"{length} bytes do not hold a "
                            f"{dtype} tensor of shape {shape}")
            data = self._blob(offset, length, count, dtype, shape, where, t.pos)
        else:
            span = t.bytes_span(_T_INLINE, "inline_data")
            if span is None:
                self.r.fail(f"{where}.inline_data", t.pos, "inline tensor has no inline_data")
            first, length = span
            count = _count(shape, length // dtype.itemsize)
            if count < 0 or count * dtype.itemsize != length:
                self.r.fail(f"{where}.inline_data", first, f"{length} bytes do not hold a "
                            f"{dtype} tensor of shape {shape}")
            data = np.frombuffer(self.r.buf, self._file_dtype(dtype), count, first)
            data = data.astype(dtype).reshape(shape)  # a copy: inline bytes are not aligned
            data.flags.writeable = False
        return Value("" if name is None else name, dtype, shape, data)

    def _shape(self, t: C.Table):
        dims = t.scalars(_T_SHAPE, C.INT64, "shape")
        params = t.strings(_T_PARAMS, "dim_params")
        if dims is None:
            if params is not None:
                self.r.fail(f"{t.where}.dim_params", t.pos, "dim_params without a shape")
            return None
        if len(dims) > MAX_RANK:
            self.r.fail(f"{t.where}.shape", t.pos, f"rank {len(dims)} exceeds {MAX_RANK}")
        if params is not None and len(params) != len(dims):
            self.r.fail(f"{t.where}.dim_params", t.pos, f"{len(params)} dim_params for "
                        f"rank {len(dims)}")
        shape = []
        for k, d in enumerate(dims):
            param = "" if params is None else params[k]
            if d >= 0:
                if param:
                    self.r.fail(f"{t.where}.dim_params[{k}]", t.pos,
                                f"fixed dim {d} has a symbolic name {param!r}")
                shape.append(d)
            elif d == -1:
                shape.append(param if param else None)
            else:
                self.r.fail(f"{t.where}.shape[{k}]", t.pos, f"negative dim {d} (only -1, "
                            f"symbolic, is allowed)")
        if _count([d for d in shape if isinstance(d, int)], MAX_ELEMENTS) < 0:
            self.r.fail(f"{t.where}.shape", t.pos, f"shape {list(dims)} declares more than "
                        f"{MAX_ELEMENTS} elements")
        return tuple(shape)

    def _file_dtype(self, dtype: np.dtype) -> np.dtype:
        return dtype.newbyteorder() if self.swap and dtype.itemsize > 1 else dtype

    def _blob(self, offset, length, count, dtype, shape, where, pos) -> np.ndarray:
        w = self.weights
        if offset % ALIGNMENT:
            self.r.fail(f"{where}.data_offset", pos, f"blob offset {offset} is not "
                        f"{ALIGNMENT}-byte aligned")
        if offset < w.lo or offset + length > w.hi:
            self.r.fail(f"{where}.data_offset", pos, f"blob [{offset}, {offset + length}) lies "
                        f"outside the weight area [{w.lo}, {w.hi}) of {w.name}")
        if count == 0:
            data = np.empty(shape, dtype)
        else:
            data = np.frombuffer(w.obj, self._file_dtype(dtype), count, offset).reshape(shape)
            if self.swap and dtype.itemsize > 1:
                data = data.astype(dtype)  # NOTE: foreign byte order: converted, not zero-copy
        data.flags.writeable = False
        return data

    # ---- nodes and attributes -------------------------------------------------------------
    def node(self, t: C.Table, n_tensors: int, depth: int) -> Node:
        op_type = t.string(_N_OP, "op_type")
        if op_type is None:
            self.r.fail(f"{t.where}.op_type", t.pos, "required field is missing")
        domain = t.string(_N_DOMAIN, "domain")
        name = t.string(_N_NAME, "name")
        inputs = self._indices(t, _N_INPUTS, "inputs", n_tensors, allow_missing=True)
        outputs = self._indices(t, _N_OUTPUTS, "outputs", n_tensors, allow_missing=True)
        attrs = {}
        for a in t.tables(_N_ATTRS, "attributes") or ():
            key = a.string(_A_NAME, "name")
            if key is None:
                self.r.fail(f"{a.where}.name", a.pos, "required field is missing")
            if key in attrs:
                self.r.fail(f"{a.where}.name", a.pos, f"duplicate attribute {key!r}")
            attrs[key] = self.attribute(a, depth)
        return Node(op_type, "" if name is None else name, inputs, outputs, attrs,
                    "" if domain is None else domain)

    def _indices(self, t, slot, field, n_tensors, allow_missing=False) -> list[int]:
        idx = t.scalars(slot, C.INT32, field) or []
        lo = -1 if allow_missing else 0
        for k, i in enumerate(idx):
            if not lo <= i < n_tensors:
                self.r.fail(f"{t.where}.{field}[{k}]", t.pos, f"tensor index {i} is outside "
                            f"[{lo}, {n_tensors})")
        return idx

    def attribute(self, a: C.Table, depth: int):
        kind = a.scalar(_A_KIND, C.INT8, AttrKind.Undefined, "kind")
        if kind == AttrKind.Int:
            return a.scalar(_A_I, C.INT64, 0, "i")
        if kind == AttrKind.Float:
            return a.scalar(_A_F, C.FLOAT64, 0.0, "f")
        if kind == AttrKind.String:
            s = a.string(_A_S, "s")
            return "" if s is None else s
        if kind == AttrKind.Ints:
            return a.scalars(_A_INTS, C.INT64, "ints") or []
        if kind == AttrKind.Floats:
            return a.scalars(_A_FLOATS, C.FLOAT64, "floats") or []
        if kind == AttrKind.Strings:
            return a.strings(_A_STRINGS, "strings") or []
        if kind == AttrKind.Bool:
            return self._bools(a, [a.scalar(_A_I, C.INT64, 0, "i")])[0]
        if kind == AttrKind.Bools:
            return self._bools(a, a.scalars(_A_INTS, C.INT64, "ints") or [])
        if kind in (AttrKind.Tensor, AttrKind.Tensors):
            ts = [self.tensor(t, allow_no_data=False).data
                  for t in a.tables(_A_TENSORS, "tensors") or ()]
            return self._one(a, ts, "tensors") if kind == AttrKind.Tensor else ts
        if kind in (AttrKind.Graph, AttrKind.Graphs):
            gs = [self.subgraph(g, depth + 1) for g in a.tables(_A_GRAPHS, "graphs") or ()]
            return self._one(a, gs, "graphs") if kind == AttrKind.Graph else gs
        self.r.fail(f"{a.where}.kind", a.pos, f"unknown attribute kind {kind}")

    def _bools(self, a: C.Table, values: list[int]) -> list[bool]:
        if any(v not in (0, 1) for v in values):
            self.r.fail(f"{a.where}.i", a.pos, f"bool attribute holds {values} (not 0/1)")
        return [bool(v) for v in values]

    def _one(self, a: C.Table, items: list, field: str):
        if len(items) != 1:
            self.r.fail(f"{a.where}.{field}", a.pos, f"expected exactly 1 element, "
                        f"got {len(items)}")
        return items[0]

    # ---- graphs ---------------------------------------------------------------------------
    def graph_body(self, t: C.Table, slots: tuple[int, int, int, int], depth: int) -> Graph:
        s_tensors, s_nodes, s_inputs, s_outputs = slots
        values = [self.tensor(x) for x in t.tables(s_tensors, "tensors") or ()]
        n = len(values)
        nodes = [self.node(x, n, depth) for x in t.tables(s_nodes, "nodes") or ()]
        inputs = self._indices(t, s_inputs, "inputs", n)
        outputs = self._indices(t, s_outputs, "outputs", n)
        g = Graph(values, nodes, inputs, outputs, {})
        # NOTE: a value written twice is left to the converter that made the file: it
        # computes in order all the same; what must not happen is a read of nothing
        errors = g.dataflow_errors(single_writer=False)
        if errors:
            self.r.fail(t.where, t.pos, "the graph cannot be computed in order: "
                        + "; ".join(errors))
        return g

    def subgraph(self, t: C.Table, depth: int) -> Graph:
        if depth > MAX_GRAPH_DEPTH:
            self.r.fail(t.where, t.pos, f"subgraphs nested deeper than {MAX_GRAPH_DEPTH}")
        g = self.graph_body(t, (_G_TENSORS, _G_NODES, _G_INPUTS, _G_OUTPUTS), depth)
        g.metadata.update(self.key_values(t, _G_METADATA, {}))
        return g

    def key_values(self, t: C.Table, slot: int, reserved: dict) -> dict[str, str]:
        out = dict(reserved)
        for kv in t.tables(slot, "metadata") or ():
            key = kv.string(_KV_KEY, "key")
            if key is None:
                self.r.fail(f"{kv.where}.key", kv.pos, "required field is missing")
            if key in out:
                self.r.fail(f"{kv.where}.key", kv.pos, f"duplicate metadata key {key!r}")
            value = kv.string(_KV_VALUE, "value")
            out[key] = "" if value is None else value
        return out


def _count(shape: tuple[int, ...], limit: int) -> int:
    """prod(shape), or -1 as soon as it exceeds ``limit`` (no huge integers from hostile dims)."""
    if limit < 0:
        return -1
    if 0 in shape:
        return 0
    n = 1
    for d in shape:
        n *= d
        if n > limit:
            return -1
    return n


# ---- entry points -------------------------------------------------------------------------

def read_model(buffer, *, base_dir=None) -> Graph:
    """Verify and decode a ``.sprat`` model held in memory.

    Args:
        buffer: the whole file: ``bytes``, ``bytearray``, ``memoryview`` or ``mmap.mmap``.
        base_dir: directory of the model file; needed only when its weights are in an external
            file (the name stored in the model is relative to it).

    Returns:
        The IR graph. Constant tensors (``Value.data``) are read-only ``np.frombuffer`` views
        into ``buffer`` (or into a read-only mmap of the external weight file): no copy, and
        aligned to 64 bytes relative to the buffer start. They keep ``buffer`` alive (and an
        mmap cannot be closed while they exist). Exceptions: weights written in a byte order
        other than the host's are converted (copied), and small inline tensor attributes are
        copied.

    Raises:
        ModelFormatError: not a sprat file, a foreign format version, or anything corrupt or
            inconsistent, with what and where (byte offset, table, field).
        TypeError: ``buffer`` does not support the buffer protocol.
    """
    return _read(buffer, base_dir, populate=False)


def load_model(path, *, populate: bool = False) -> tuple[Graph, mmap.mmap]:
    """Memory-map the ``.sprat`` file at ``path`` (read-only) and decode it like read_model.

    Args:
        path: the model file (str or os.PathLike).
        populate: True pre-faults every page now (``MAP_POPULATE`` where the OS has it, else
            ``madvise(MADV_WILLNEED)`` and a touch of each page) so the first inference does
            not page-fault; False maps lazily (pages load on first use, MindSpore Lite style).

    Returns:
        (graph, the mmap). Weights are read-only views into the mmap (or into the external
        weight file's mmap, which the arrays keep alive).

    Raises:
        ModelFormatError: as read_model, also for an empty file.
        OSError: the file cannot be opened.
    """
    path = os.fspath(path)
    mm = _map_file(path, populate)
    try:
        return _read(mm, os.path.dirname(os.path.abspath(path)), populate), mm
    except BaseException:
        _close_quietly(mm)
        raise


def _close_quietly(mm: mmap.mmap):
    try:
        mm.close()
    except BufferError:  # NOTE: arrays made before the failure still point into it; GC frees it
        pass


def _map_file(path: str, populate: bool):
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            raise ModelFormatError(f"{path}: file is empty")
        flags = getattr(mmap, "MAP_POPULATE", 0) if populate else 0
        if flags and hasattr(mmap, "MAP_SHARED"):
            mm = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_SHARED | flags, prot=mmap.PROT_READ)
        else:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            if populate:
                _prefault(mm, size)
    return mm


def _prefault(mm: mmap.mmap, size: int):
    if hasattr(mm, "madvise") and hasattr(mmap, "MADV_WILLNEED"):
        mm.madvise(mmap.MADV_WILLNEED)
    for pos in range(0, size, mmap.PAGESIZE):
        mm[pos]  # NOTE: touching one byte per page faults it in


def _read(buffer, base_dir, populate: bool) -> Graph:
    if isinstance(buffer, (str, os.PathLike)):
        raise TypeError("read_model takes the file's bytes; use load_model(path) for a path")
    try:
        mv = memoryview(buffer)
    except TypeError:
        raise TypeError(f"read_model needs bytes, bytearray, memoryview or mmap, "
                        f"got {type(buffer).__name__}") from None
    if not mv.c_contiguous:
        raise TypeError("read_model needs a contiguous buffer")
    mv = _byte_view(mv)
    # NOTE: views are made on ``obj`` (not on the temporary ``mv``) so ``mv`` can be released.
    obj = buffer if isinstance(buffer, (bytes, bytearray, mmap.mmap)) else _byte_view(buffer)
    try:
        return _decode(mv, obj, base_dir, populate)
    except ModelFormatError:
        raise
    except Exception as e:  # NOTE: a missed check must still surface as a format error
        raise ModelFormatError(f"corrupt model file: {type(e).__name__}: {e}") from e
    finally:
        try:
            mv.release()
        except BufferError:
            pass


def _byte_view(buffer) -> memoryview:
    mv = memoryview(buffer)
    return mv if mv.format == "B" and mv.ndim == 1 else mv.cast("B")


def _decode(mv: memoryview, obj, base_dir, populate: bool) -> Graph:
    size = len(mv)
    _check_header(mv)
    if size < HEADER_SIZE + 8:
        raise ModelFormatError(f"file of {size} bytes is truncated (header and FlatBuffer "
                               f"need at least {HEADER_SIZE + 8})")
    fb_size = C._U32.unpack_from(mv, HEADER_SIZE)[0]
    start = HEADER_SIZE + 4
    end = start + fb_size
    if fb_size < 4 or end > size:
        raise ModelFormatError(f"FlatBuffer size {fb_size} (byte {HEADER_SIZE}) does not fit "
                               f"the {size}-byte file: truncated or corrupt")
    r = C.Region(mv, start, end)
    m = r.table(r.uoffset(start, "Model root"), "Model")
    version = m.scalar(_M_VERSION, C.UINT32, 0, "version")
    if version != FORMAT_VERSION:
        r.fail("Model.version", m.pos, f"{version} does not match the header's "
               f"{FORMAT_VERSION}")
    order = m.scalar(_M_BYTE_ORDER, C.INT8, 0, "byte_order")
    if not 0 <= order < len(BYTE_ORDERS):
        r.fail("Model.byte_order", m.pos, f"unknown byte order {order}")
    byte_order = BYTE_ORDERS[order]
    if byte_order != sys.byteorder:
        logger(__name__).warning("model weights are %s-endian, this host is %s-endian: "
                                 "converting them (copies, not zero-copy views)", byte_order,
                                 sys.byteorder)
    external = m.string(_M_EXTERNAL, "external_data")
    if external is None:
        weights = _Weights(obj, end, size, "this file")
    else:
        weights = _external_weights(external, base_dir, populate)
    dec = _Decoder(r, weights, byte_order)
    g = dec.graph_body(m, (_M_TENSORS, _M_NODES, _M_INPUTS, _M_OUTPUTS), depth=0)
    reserved = {}
    for key, slot in _MODEL_STRINGS:
        value = m.string(slot, key)
        if value is not None:
            reserved[key] = value
    opset = m.scalar(_M_SOURCE_OPSET, C.INT64, -1, "source_opset")
    if opset != -1:
        reserved["source_opset"] = opset
    g.metadata = dec.key_values(m, _M_METADATA, reserved)
    return g


def _check_header(mv: memoryview):
    head = bytes(mv[:HEADER_SIZE])
    if len(head) < 4 and MAGIC.startswith(head):
        raise ModelFormatError(f"file of {len(mv)} bytes is truncated inside the "
                               f"{HEADER_SIZE}-byte header")
    if head[:4] != MAGIC:
        raise ModelFormatError(f"not a sprat model file: it starts with {head[:8]!r}, a sprat "
                               f"file with {MAGIC!r}{_guess_format(mv)}")
    if len(head) < HEADER_SIZE:
        raise ModelFormatError(f"file of {len(mv)} bytes is truncated inside the "
                               f"{HEADER_SIZE}-byte header")
    version = HEADER.unpack(head)[1]
    if version != FORMAT_VERSION:
        newer = " (written by a newer sprat: upgrade sprat)" if version > FORMAT_VERSION else ""
        raise ModelFormatError(f"file format version {version} (byte 4) is not supported: this "
                               f"sprat reads version {FORMAT_VERSION}{newer}")


def _guess_format(mv: memoryview) -> str:
    head = bytes(mv[:8])
    if head[4:8] == b"TFL3":
        return "; this looks like a TFLite model: convert it first (sprat convert)"
    if head[:1] == b"\x08":
        return "; this looks like an ONNX model: convert it first (sprat convert)"
    return ""


def _external_weights(name: str, base_dir, populate: bool) -> _Weights:
    parts = name.split("/")
    if (not name or name.startswith("/") or "\\" in name or ":" in name
            or any(p in ("", ".", "..") for p in parts)):
        raise ModelFormatError(f"Model.external_data: {name!r} must be a plain relative path "
                               f"inside the model's directory")
    if base_dir is None:
        raise ModelFormatError(f"the model keeps its weights in the external file {name!r}: "
                               f"pass base_dir= (the model's directory) or use load_model(path)")
    path = os.path.join(os.fspath(base_dir), *parts)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                return _Weights(b"", 0, 0, path)
        mm = _map_file(path, populate)
    except OSError as e:
        raise ModelFormatError(f"cannot open the external weight file {path!r}: {e}") from e
    return _Weights(mm, 0, size, path)
