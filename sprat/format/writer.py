"""Write an IR :class:`~sprat.ir.graph.Graph` as a ``.sprat`` file (layout: package docstring)."""

from __future__ import annotations

import logging
import os
import uuid as uuid_mod
from numbers import Integral, Real

import flatbuffers
import numpy as np

from .. import dtypes
from .._fs import atomic_write
from ..errors import ModelFormatError
from ..ir.graph import Graph
from . import _fb
from ._fb import AttrKind, DataLocation
from .version import (
    ALIGNMENT,
    BYTE_ORDERS,
    FORMAT_VERSION,
    HEADER,
    HEADER_SIZE,
    MAGIC,
    MAX_GRAPH_DEPTH,
    align_up,
)

log = logging.getLogger(__name__)

INLINE_MAX_BYTES = 256  # tensor attributes up to this size are stored inline, others as blobs
_RESERVED_STR = ("producer", "biz_code", "uuid", "sprat_version", "source_format")
_INT64 = (-(1 << 63), (1 << 63) - 1)


class _Blobs:
    """Weight blobs in write order; offsets relative to the weight area, 64-byte aligned."""

    def __init__(self, byte_order: str):
        self.dtype_order = "<" if byte_order == "little" else ">"
        self.items: list[tuple[int, np.ndarray]] = []
        self.size = 0
        self._seen: dict[int, tuple[int, int, np.ndarray]] = {}

    def add(self, arr: np.ndarray) -> tuple[int, int]:
        """(relative offset, byte length) of ``arr``; the same array object is stored once."""
        hit = self._seen.get(id(arr))
        if hit is not None:
            return hit[0], hit[1]
        data = np.ascontiguousarray(arr)
        if data.dtype.itemsize > 1:
            data = data.astype(data.dtype.newbyteorder(self.dtype_order), copy=False)
        offset = align_up(self.size)
        self.items.append((offset, data))
        self.size = offset + data.nbytes
        self._seen[id(arr)] = (offset, data.nbytes, arr)  # NOTE: holding arr pins its id
        return offset, data.nbytes

    def write_to(self, out, start: int):
        """Write the blobs to the file object ``out`` whose position is ``start``."""
        pos = start
        for offset, data in self.items:
            out.write(b"\0" * (start + offset - pos))
            out.write(memoryview(data.reshape(-1).view(np.uint8)))
            pos = start + offset + data.nbytes


class _Builder:
    """One pass over the graph building the FlatBuffer; ``base`` is added to blob offsets."""

    def __init__(self, blobs: _Blobs, base: int, byte_order: str):
        self.b = flatbuffers.Builder(1 << 16)
        self.blobs = blobs
        self.base = base
        self.byte_order = byte_order

    # ---- helpers --------------------------------------------------------------------------
    def _str(self, s: str) -> int:
        return self.b.CreateString(s)

    def _offsets(self, start_vector, offsets: list[int]) -> int:
        start_vector(self.b, len(offsets))
        for off in reversed(offsets):
            self.b.PrependUOffsetTRelative(off)
        return self.b.EndVector()

    def _numbers(self, values, dtype) -> int:
        return self.b.CreateNumpyVector(np.asarray(values, dtype=dtype).reshape(-1))

    # ---- tensors --------------------------------------------------------------------------
    def tensor(self, name: str, dtype, shape, data: np.ndarray | None, where: str,
               inline_ok: bool = False) -> int:
        T = _fb.Tensor
        if data is not None:
            if dtype is not None and np.dtype(dtype) != data.dtype:
                raise ModelFormatError(f"{where}: dtype {dtype} differs from its data's "
                                       f"{data.dtype}")
            if shape is not None and tuple(shape) != data.shape:
                raise ModelFormatError(f"{where}: shape {shape} differs from its data's "
                                       f"{data.shape}")
            dtype, shape = data.dtype, data.shape
        code = 0 if dtype is None else _dtype_code(dtype, where)
        name_off = self._str(name)
        shape_off = params_off = inline_off = 0
        if shape is not None:
            dims, params = _encode_shape(shape, where)
            shape_off = self._numbers(dims, "<i8")
            if params is not None:
                params_off = self._offsets(T.TensorStartDimParamsVector,
                                           [self._str(p) for p in params])
        location, offset, length = DataLocation.NoData, 0, 0
        if data is not None:
            if inline_ok and data.nbytes <= INLINE_MAX_BYTES:
                location = DataLocation.Inline
                raw = np.ascontiguousarray(data)
                if raw.dtype.itemsize > 1:
                    order = "<" if self.byte_order == "little" else ">"
                    raw = raw.astype(raw.dtype.newbyteorder(order), copy=False)
                inline_off = self.b.CreateNumpyVector(raw.reshape(-1).view(np.uint8))
            else:
                location = DataLocation.Blob
                offset, length = self.blobs.add(data)
                offset += self.base
        T.TensorStart(self.b)
        T.TensorAddName(self.b, name_off)
        T.TensorAddDtype(self.b, code)
        if shape_off:
            T.TensorAddShape(self.b, shape_off)
        if params_off:
            T.TensorAddDimParams(self.b, params_off)
        T.TensorAddDataLocation(self.b, location)
        T.TensorAddDataOffset(self.b, offset)
        T.TensorAddDataLength(self.b, length)
        if inline_off:
            T.TensorAddInlineData(self.b, inline_off)
        return T.TensorEnd(self.b)

    # ---- nodes ----------------------------------------------------------------------------
    def attribute(self, key: str, value, where: str, depth: int) -> int:
        A = _fb.Attribute
        where = f"{where} attribute {key!r}"
        kind, payload = _classify(value, where)
        name_off = self._str(key)
        ref = 0
        if kind == AttrKind.String:
            ref = self._str(payload)
        elif kind in (AttrKind.Ints, AttrKind.Bools):
            ref = self._numbers([_int64(v, where) for v in payload], "<i8")
        elif kind == AttrKind.Floats:
            ref = self._numbers([float(v) for v in payload], "<f8")
        elif kind == AttrKind.Strings:
            ref = self._offsets(A.AttributeStartStringsVector, [self._str(s) for s in payload])
        elif kind in (AttrKind.Tensor, AttrKind.Tensors):
            items = [payload] if kind == AttrKind.Tensor else payload
            ref = self._offsets(A.AttributeStartTensorsVector, [
                self.tensor("", None, None, t, f"{where}[{k}]", inline_ok=True)
                for k, t in enumerate(items)])
        elif kind in (AttrKind.Graph, AttrKind.Graphs):
            items = [payload] if kind == AttrKind.Graph else payload
            ref = self._offsets(A.AttributeStartGraphsVector, [
                self.subgraph(g, f"{where}[{k}]", depth + 1) for k, g in enumerate(items)])
        A.AttributeStart(self.b)
        A.AttributeAddName(self.b, name_off)
        A.AttributeAddKind(self.b, kind)
        if kind in (AttrKind.Int, AttrKind.Bool):
            A.AttributeAddI(self.b, _int64(payload, where))
        elif kind == AttrKind.Float:
            self.b.ForceDefaults(True)  # NOTE: keeps the sign of -0.0
            A.AttributeAddF(self.b, float(payload))
            self.b.ForceDefaults(False)
        elif kind == AttrKind.String:
            A.AttributeAddS(self.b, ref)
        elif kind in (AttrKind.Ints, AttrKind.Bools):
            A.AttributeAddInts(self.b, ref)
        elif kind == AttrKind.Floats:
            A.AttributeAddFloats(self.b, ref)
        elif kind == AttrKind.Strings:
            A.AttributeAddStrings(self.b, ref)
        elif kind in (AttrKind.Tensor, AttrKind.Tensors):
            A.AttributeAddTensors(self.b, ref)
        else:
            A.AttributeAddGraphs(self.b, ref)
        return A.AttributeEnd(self.b)

    def node(self, node, n_values: int, where: str, depth: int) -> int:
        N = _fb.Node
        where = f"{where} node {node.name!r} ({node.op_type})"
        op_off = self._str(node.op_type)
        domain_off = self._str(node.domain) if node.domain else 0
        name_off = self._str(node.name)
        ins = self._numbers(_check_indices(node.inputs, n_values, f"{where} inputs", True), "<i4")
        outs = self._numbers(_check_indices(node.outputs, n_values, f"{where} outputs", True),
                             "<i4")
        attrs = [self.attribute(k, v, where, depth) for k, v in node.attrs.items()]
        attrs_off = self._offsets(N.NodeStartAttributesVector, attrs) if attrs else 0
        N.NodeStart(self.b)
        N.NodeAddOpType(self.b, op_off)
        if domain_off:
            N.NodeAddDomain(self.b, domain_off)
        N.NodeAddName(self.b, name_off)
        N.NodeAddInputs(self.b, ins)
        N.NodeAddOutputs(self.b, outs)
        if attrs_off:
            N.NodeAddAttributes(self.b, attrs_off)
        return N.NodeEnd(self.b)

    # ---- graphs ---------------------------------------------------------------------------
    def graph_body(self, g: Graph, where: str, depth: int, start_tensors, start_nodes):
        if depth > MAX_GRAPH_DEPTH:
            raise ModelFormatError(f"{where}: subgraphs nested deeper than {MAX_GRAPH_DEPTH}")
        n = len(g.values)
        tensors = [self.tensor(v.name, v.dtype, v.shape, v.data, f"{where} tensor {v.name!r}")
                   for v in g.values]
        tensors_off = self._offsets(start_tensors, tensors)
        nodes_off = self._offsets(start_nodes, [self.node(x, n, where, depth) for x in g.nodes])
        ins = self._numbers(_check_indices(g.inputs, n, f"{where} inputs", False), "<i4")
        outs = self._numbers(_check_indices(g.outputs, n, f"{where} outputs", False), "<i4")
        return tensors_off, nodes_off, ins, outs

    def key_values(self, pairs: dict[str, str]) -> int:
        K = _fb.KeyValue
        offs = []
        for key, value in pairs.items():
            k, v = self._str(key), self._str(value)
            K.KeyValueStart(self.b)
            K.KeyValueAddKey(self.b, k)
            K.KeyValueAddValue(self.b, v)
            offs.append(K.KeyValueEnd(self.b))
        return self._offsets(_fb.Graph.GraphStartMetadataVector, offs)

    def subgraph(self, g, where: str, depth: int) -> int:
        G = _fb.Graph
        where = f"{where} subgraph"
        body = self.graph_body(g, where, depth, G.GraphStartTensorsVector,
                               G.GraphStartNodesVector)
        md = self.key_values({str(k): _as_str(v, f"{where} metadata {k!r}")
                              for k, v in g.metadata.items()})
        G.GraphStart(self.b)
        G.GraphAddTensors(self.b, body[0])
        G.GraphAddNodes(self.b, body[1])
        G.GraphAddInputs(self.b, body[2])
        G.GraphAddOutputs(self.b, body[3])
        G.GraphAddMetadata(self.b, md)
        return G.GraphEnd(self.b)

    def model(self, g: Graph, meta: dict, free: dict, external: str | None) -> bytes:
        M = _fb.Model
        body = self.graph_body(g, "graph", 0, M.ModelStartTensorsVector, M.ModelStartNodesVector)
        strs = {k: self._str(meta[k]) for k in _RESERVED_STR if k in meta}
        md = self.key_values(free)
        ext = self._str(external) if external is not None else 0
        M.ModelStart(self.b)
        M.ModelAddVersion(self.b, FORMAT_VERSION)
        for key, add in (("producer", M.ModelAddProducer), ("biz_code", M.ModelAddBizCode),
                         ("uuid", M.ModelAddUuid), ("sprat_version", M.ModelAddSpratVersion),
                         ("source_format", M.ModelAddSourceFormat)):
            if key in strs:
                add(self.b, strs[key])
        M.ModelAddTensors(self.b, body[0])
        M.ModelAddNodes(self.b, body[1])
        M.ModelAddInputs(self.b, body[2])
        M.ModelAddOutputs(self.b, body[3])
        M.ModelAddMetadata(self.b, md)
        if "source_opset" in meta:
            M.ModelAddSourceOpset(self.b, meta["source_opset"])
        M.ModelAddByteOrder(self.b, BYTE_ORDERS.index(self.byte_order))
        if ext:
            M.ModelAddExternalData(self.b, ext)
        self.b.FinishSizePrefixed(M.ModelEnd(self.b))
        return bytes(self.b.Output())


# ---- value encoding -----------------------------------------------------------------------

def _dtype_code(dtype, where: str) -> int:
    try:
        return dtypes.to_code(np.dtype(dtype).newbyteorder("="))
    except (TypeError, ValueError) as e:
        raise ModelFormatError(f"{where}: {e}") from None


def _encode_shape(shape, where: str) -> tuple[list[int], list[str] | None]:
    """(dims with -1 for symbolic/unknown, dim names or None when every dim is fixed)."""
    dims, params = [], []
    for d in shape:
        if isinstance(d, str):
            dims.append(-1)
            params.append(d)
        elif d is None:
            dims.append(-1)
            params.append("")
        elif isinstance(d, Integral) and not isinstance(d, bool) and 0 <= d <= _INT64[1]:
            dims.append(int(d))
            params.append("")
        else:
            raise ModelFormatError(f"{where}: dim {d!r} of shape {tuple(shape)} is neither a "
                                   f"non-negative int, a symbolic name nor None")
    if any(p or d == -1 for d, p in zip(dims, params)):
        return dims, params
    return dims, None


def _int64(v, where: str) -> int:
    v = int(v)
    if not _INT64[0] <= v <= _INT64[1]:
        raise ModelFormatError(f"{where}: {v} does not fit in int64")
    return v


def _classify(value, where: str):
    """(AttrKind, payload) of a python attribute value."""
    if isinstance(value, (bool, np.bool_)):
        return AttrKind.Bool, int(bool(value))
    if isinstance(value, Integral):
        return AttrKind.Int, int(value)
    if isinstance(value, Real):
        return AttrKind.Float, float(value)
    if isinstance(value, str):
        return AttrKind.String, value
    if isinstance(value, np.ndarray):
        return AttrKind.Tensor, value
    if isinstance(value, Graph):
        return AttrKind.Graph, value
    if isinstance(value, (list, tuple)):
        items = list(value)
        if all(isinstance(v, (bool, np.bool_)) for v in items) and items:
            return AttrKind.Bools, [int(bool(v)) for v in items]
        if all(isinstance(v, Integral) and not isinstance(v, (bool, np.bool_)) for v in items):
            return AttrKind.Ints, items  # NOTE: an empty list is stored (and read back) as Ints
        if all(isinstance(v, Real) and not isinstance(v, (bool, np.bool_)) for v in items):
            return AttrKind.Floats, items
        if all(isinstance(v, str) for v in items):
            return AttrKind.Strings, items
        if all(isinstance(v, np.ndarray) for v in items):
            return AttrKind.Tensors, items
        if all(isinstance(v, Graph) for v in items):
            return AttrKind.Graphs, items
    raise ModelFormatError(f"{where}: value of type {type(value).__name__} cannot be stored "
                           f"(int, float, str, bool, ndarray, Graph or a list of one of them)")


def _check_indices(idx, n: int, where: str, allow_missing: bool) -> list[int]:
    lo = -1 if allow_missing else 0
    out = [int(i) for i in idx]
    for i in out:
        if not lo <= i < n:
            raise ModelFormatError(f"{where}: tensor index {i} is outside [{lo}, {n})")
    return out


def _as_str(v, where: str) -> str:
    if isinstance(v, str):
        return v
    log.warning("%s: %r is not a str; stored as %r", where, v, str(v))
    return str(v)


def _split_metadata(md: dict) -> tuple[dict, dict]:
    """(reserved fields, free str pairs); fills in uuid and sprat_version when absent."""
    meta, free = {}, {}
    for key, value in md.items():
        if value is None:
            continue
        if key == "source_opset":
            try:
                meta[key] = _int64(value, "metadata source_opset")
            except (TypeError, ValueError):
                raise ModelFormatError(f"metadata source_opset {value!r} is not an int") from None
        elif key in _RESERVED_STR:
            meta[key] = _as_str(value, f"metadata {key!r}")
        else:
            free[_as_str(key, "metadata key")] = _as_str(value, f"metadata {key!r}")
    meta.setdefault("uuid", str(uuid_mod.uuid4()))
    if "sprat_version" not in meta:
        from .. import __version__  # NOTE: late, so sprat/__init__ may import this module

        meta["sprat_version"] = __version__
    return meta, free


def _check_external_name(name: str) -> str:
    name = os.fspath(name).replace(os.sep, "/")
    parts = name.split("/")
    if (not name or os.path.isabs(name) or name.startswith("/") or ":" in name
            or "\\" in name or any(p in ("", ".", "..") for p in parts)):
        raise ValueError(f"external_data {name!r} must be a relative path inside the model's "
                         f"directory (no '..', no absolute path)")
    return name


# ---- entry point --------------------------------------------------------------------------

def write_model(graph: Graph, path=None, *, external_data: str | None = None,
                _byte_order: str = "little") -> bytes:
    """Serialize ``graph`` as a ``.sprat`` file.

    Args:
        graph: the IR graph. Constants (``Value.data``) become 64-byte aligned weight blobs;
            attributes may be int, float, str, bool, np.ndarray, Graph (subgraph) or lists of
            one of these. ``graph.metadata``: producer, biz_code, uuid, sprat_version,
            source_format (str) and source_opset (int) are model fields; a uuid4 and this
            sprat's version are filled in when absent; other pairs are stored as str -> str.
        path: when given, the file is written there (atomically: a temporary file renamed, so
            a process that has the old file mapped keeps a valid mapping).
        external_data: put the weight blobs in this file instead, a path relative to the
            model's directory (e.g. ``"weights.bin"``); requires ``path``.

    Returns:
        The bytes of the model file (without the weights when ``external_data`` is used).

    Raises:
        ModelFormatError: the graph holds something the format cannot store (unsupported dtype
            or attribute type, dangling tensor index, negative dim, shape/data mismatch).
        ValueError: ``external_data`` without ``path``, or an absolute/escaping name.
    """
    if _byte_order not in BYTE_ORDERS:
        raise ValueError(f"byte order {_byte_order!r} is not one of {BYTE_ORDERS}")
    if external_data is not None:
        if path is None:
            raise ValueError("external_data needs path (the weight file is written next to it)")
        external_data = _check_external_name(external_data)
    meta, free = _split_metadata(graph.metadata)
    blobs = _Blobs(_byte_order)
    if external_data is not None:
        fb = _Builder(blobs, 0, _byte_order).model(graph, meta, free, external_data)
        data_start = None
    else:
        # NOTE: blob offsets are absolute, but the FlatBuffer's size decides where the weights
        # start: build once with a placeholder base, then again with the real one. Offsets are
        # never 0 in either pass, so every offset field is written and the size is the same.
        fb = _Builder(blobs, ALIGNMENT, _byte_order).model(graph, meta, free, None)
        data_start = align_up(HEADER_SIZE + len(fb))
        fb = _Builder(blobs, data_start, _byte_order).model(graph, meta, free, None)
        if align_up(HEADER_SIZE + len(fb)) != data_start:
            raise RuntimeError("sprat writer: FlatBuffer size changed between passes")
    head = HEADER.pack(MAGIC, FORMAT_VERSION) + fb
    model_bytes = _assemble(head, blobs, data_start)
    if path is not None:
        path = os.fspath(path)
        atomic_write(path, lambda f: f.write(model_bytes))
        if external_data is not None:
            wpath = os.path.join(os.path.dirname(os.path.abspath(path)), *external_data.split("/"))
            os.makedirs(os.path.dirname(wpath), exist_ok=True)
            atomic_write(wpath, lambda f: blobs.write_to(f, 0))
    return model_bytes


def _assemble(head: bytes, blobs: _Blobs, data_start: int | None) -> bytes:
    if data_start is None:
        return head
    import io

    out = io.BytesIO()
    out.write(head)
    out.write(b"\0" * (data_start - len(head)))
    blobs.write_to(out, data_start)
    return out.getvalue()
