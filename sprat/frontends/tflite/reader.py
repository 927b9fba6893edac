"""Read a ``.tflite`` flatbuffer into plain Python records, checking every access.

The schema is TensorFlow Lite's published ``schema.fbs`` through the flatc-generated ``tflite``
package (PyPI). The Python flatbuffers runtime has no verifier, so every read of the file happens
here, inside one guard: a truncated or corrupt file raises ``ModelFormatError`` saying what was
being read, never IndexError/struct.error from deep inside flatbuffers.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from ...dtypes import TFLITE_TO_NUMPY
from ...errors import ModelFormatError

FILE_IDENTIFIER = b"TFL3"
_CUSTOM = 32  # BuiltinOperator.CUSTOM
_FLATBUFFER_ERRORS = (IndexError, struct.error, ValueError, TypeError, OverflowError,
                      UnicodeDecodeError, AttributeError)


@dataclass
class Sparsity:
    """TFLite ``SparsityParameters``: traversal order, block map, and per traversed dim
    ``(format, dense_size, segments, indices)`` with format 0 DENSE, 1 SPARSE_CSR."""

    traversal_order: list[int]
    block_map: list[int]
    dims: list[tuple[int, int, np.ndarray | None, np.ndarray | None]]


@dataclass
class Tensor:
    """One TFLite tensor: ``data`` holds the constant's bytes decoded (sparse: the stored values
    only); ``scale``/``zero_point`` the quantization parameters when present."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    data: np.ndarray | None = None
    scale: np.ndarray | None = None
    zero_point: np.ndarray | None = None
    quant_axis: int = 0
    sparsity: Sparsity | None = None


@dataclass
class Operator:
    """One operator: ``op`` is the builtin name (``"CONV_2D"``) or ``"CUSTOM:<code>"``;
    ``options`` the typed builtin options table (an empty table, i.e. all defaults, when absent);
    ``inputs``/``outputs`` tensor indices, -1 for an absent optional input."""

    index: int
    op: str
    inputs: list[int]
    outputs: list[int]
    options: object = None
    custom: bytes = b""


@dataclass
class Model:
    version: int
    description: str
    tensors: list[Tensor] = field(default_factory=list)
    operators: list[Operator] = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)


def is_tflite(buf) -> bool:
    """Whether ``buf`` starts like a TFLite flatbuffer (file identifier ``TFL3`` at offset 4)."""
    return len(buf) >= 8 and bytes(buf[4:8]) == FILE_IDENTIFIER


def read_model(buf: bytes) -> Model:
    """Parse the first subgraph of a TFLite model. Raises ModelFormatError on any corruption."""
    if len(buf) < 8:
        raise ModelFormatError(f"not a TFLite model: {len(buf)} bytes is too short")
    if not is_tflite(buf):
        raise ModelFormatError(f"not a TFLite model: file identifier {bytes(buf[4:8])!r} at "
                               f"offset 4, expected {FILE_IDENTIFIER!r}")
    what = ["the model table"]
    try:
        return _read(buf, what)
    except ModelFormatError:
        raise
    except _FLATBUFFER_ERRORS as e:
        raise ModelFormatError(f"corrupt TFLite model while reading {what[0]}: "
                               f"{type(e).__name__}: {e}") from None


def _check_len(n: int, buf, what: str, elem: int = 4) -> int:
    if n < 0 or n * elem > len(buf):
        raise ModelFormatError(f"corrupt TFLite model: {what} claims {n} entries in a "
                               f"{len(buf)}-byte file")
    return n


def _read(buf: bytes, what: list) -> Model:
    import tflite

    m = tflite.Model.GetRootAsModel(buf, 0)
    version = m.Version()
    desc = m.Description()
    model = Model(version, desc.decode("utf-8", "replace") if desc else "")
    n_sub = _check_len(m.SubgraphsLength(), buf, "subgraphs")
    if n_sub < 1:
        raise ModelFormatError("TFLite model has no subgraph")
    what[0] = "operator codes"
    codes = []
    for i in range(_check_len(m.OperatorCodesLength(), buf, "operator_codes")):
        oc = m.OperatorCodes(i)
        code = max(_raw_builtin_code(oc), oc.DeprecatedBuiltinCode())
        if code == _CUSTOM:
            custom = oc.CustomCode()
            codes.append("CUSTOM:" + (custom.decode("utf-8", "replace") if custom else "?"))
        else:
            codes.append(_builtin_name(code))
    what[0] = "buffers"
    n_buf = _check_len(m.BuffersLength(), buf, "buffers")
    sg = m.Subgraphs(0)
    what[0] = "tensors"
    for i in range(_check_len(sg.TensorsLength(), buf, "tensors")):
        what[0] = f"tensor {i}"
        model.tensors.append(_tensor(m, sg.Tensors(i), i, buf, n_buf))
    n_t = len(model.tensors)
    what[0] = "subgraph inputs/outputs"
    model.inputs = [_tensor_index(int(t), n_t, "graph input") for t in _ints(sg.InputsAsNumpy())]
    model.outputs = [_tensor_index(int(t), n_t, "graph output")
                     for t in _ints(sg.OutputsAsNumpy())]
    for j in range(_check_len(sg.OperatorsLength(), buf, "operators")):
        what[0] = f"operator {j}"
        op = sg.Operators(j)
        k = op.OpcodeIndex()
        if not 0 <= k < len(codes):
            raise ModelFormatError(f"operator {j}: opcode index {k} out of range "
                                   f"(the model has {len(codes)} operator codes)")
        name = codes[k]
        ins = [_tensor_index(int(t), n_t, f"operator {j} input", optional=True)
               for t in _ints(op.InputsAsNumpy())]
        outs = [_tensor_index(int(t), n_t, f"operator {j} output")
                for t in _ints(op.OutputsAsNumpy())]
        custom = b""
        if not op.CustomOptionsIsNone():
            custom = op.CustomOptionsAsNumpy().tobytes()
        model.operators.append(Operator(j, name, ins, outs, _options(op), custom))
    return model


def _raw_builtin_code(oc) -> int:
    """OperatorCode.builtin_code as stored (field 3, int32; 0 when absent).

    NOTE: the ``tflite`` package's ``BuiltinCode()`` returns deprecated_builtin_code whenever
    builtin_code < 127, which reads QUANTIZE (114) written with deprecated_builtin_code 0 (as
    ai-edge-quantizer writes it) as ADD. TFLite itself takes the max of the two fields
    (schema_utils.cc GetBuiltinCode), as ``_read`` does with this raw value."""
    import flatbuffers

    o = oc._tab.Offset(10)
    return oc._tab.Get(flatbuffers.number_types.Int32Flags, o + oc._tab.Pos) if o else 0


def _ints(arr) -> list:
    return [] if isinstance(arr, int) else list(arr)


def _tensor_index(t: int, n: int, what: str, optional: bool = False) -> int:
    if optional and t == -1:
        return -1
    if not 0 <= t < n:
        raise ModelFormatError(f"{what}: tensor index {t} out of range (the model has {n})")
    return t


def _builtin_name(code: int) -> str:
    from tflite.utils import BUILTIN_OPCODE2NAME

    return BUILTIN_OPCODE2NAME.get(code, f"BUILTIN_{code}")


def _tensor(m, t, i: int, buf, n_buf: int) -> Tensor:
    raw_name = t.Name()
    name = raw_name.decode("utf-8", "replace") if raw_name else f"tensor_{i}"
    shape = tuple(int(d) for d in _ints(t.ShapeAsNumpy()))
    if any(d < 0 for d in shape):
        raise ModelFormatError(f"tensor {name!r}: negative dim in shape {list(shape)}")
    dtype = TFLITE_TO_NUMPY.get(t.Type())
    if dtype is None:
        raise ModelFormatError(f"tensor {name!r}: unsupported TFLite element type {t.Type()}")
    out = Tensor(name, shape, dtype)
    q = t.Quantization()
    if q is not None and not q.ScaleIsNone() and q.ScaleLength() > 0:
        out.scale = np.asarray(q.ScaleAsNumpy(), np.float32).copy()
        zp = q.ZeroPointAsNumpy()
        out.zero_point = (np.zeros(out.scale.shape, np.int64) if isinstance(zp, int)
                          else np.asarray(zp, np.int64).copy())
        out.quant_axis = q.QuantizedDimension()
    sp = t.Sparsity()
    if sp is not None:
        out.sparsity = _sparsity(sp)
    b = t.Buffer()
    if not 0 <= b < max(n_buf, 1):
        raise ModelFormatError(f"tensor {name!r}: buffer index {b} out of range ({n_buf})")
    raw = _buffer_bytes(m.Buffers(b), buf, name) if b > 0 else None
    if raw is not None and len(raw):
        n_elem = len(raw) // dtype.itemsize
        if len(raw) % dtype.itemsize:
            raise ModelFormatError(f"tensor {name!r}: {len(raw)} bytes is not a whole number of "
                                   f"{dtype} elements")
        data = np.frombuffer(raw, dtype).copy()
        if out.sparsity is None:
            want = int(np.prod(shape, dtype=np.int64))
            if n_elem != want:
                raise ModelFormatError(f"tensor {name!r}: buffer holds {n_elem} elements, shape "
                                       f"{list(shape)} needs {want}")
            data = data.reshape(shape)
        out.data = data
    return out


def _buffer_bytes(b, buf, name: str) -> bytes | None:
    off, size = b.Offset(), b.Size()
    if off > 1:  # NOTE: models over 2 GB keep data after the flatbuffer (offset, size)
        if off + size > len(buf):
            raise ModelFormatError(f"tensor {name!r}: data at offset {off} size {size} runs "
                                   f"past the end of the {len(buf)}-byte file")
        return bytes(buf[off:off + size])
    if b.DataIsNone():
        return None
    return b.DataAsNumpy().tobytes()


def _index_vector(dm, kind: str):
    import tflite

    typ = getattr(dm, f"Array{kind}Type")()
    tab = getattr(dm, f"Array{kind}")()
    if tab is None or typ == 0:
        return None
    cls = {1: tflite.Int32Vector, 2: tflite.Uint16Vector, 3: tflite.Uint8Vector}.get(typ)
    if cls is None:
        raise ModelFormatError(f"sparsity: unknown index vector type {typ}")
    v = cls()
    v.Init(tab.Bytes, tab.Pos)
    return np.asarray(_ints(v.ValuesAsNumpy()), np.int64)


def _sparsity(sp) -> Sparsity:
    dims = []
    for k in range(sp.DimMetadataLength()):
        dm = sp.DimMetadata(k)
        dims.append((dm.Format(), dm.DenseSize(), _index_vector(dm, "Segments"),
                     _index_vector(dm, "Indices")))
    return Sparsity([int(x) for x in _ints(sp.TraversalOrderAsNumpy())],
                    [int(x) for x in _ints(sp.BlockMapAsNumpy())], dims)


_OPTION_NAMES: dict[int, str] = {}
_EMPTY: dict[str, object] = {}


def _options(op):
    """The operator's builtin options as their generated class; an empty table (every field at
    its schema default) when the operator stores none."""
    import tflite

    if not _OPTION_NAMES:
        _OPTION_NAMES.update({v: k for k, v in vars(tflite.BuiltinOptions).items()
                              if not k.startswith("_") and isinstance(v, int)})
    name = _OPTION_NAMES.get(op.BuiltinOptionsType())
    cls = getattr(tflite, name, None) if name not in (None, "NONE") else None
    if cls is None:
        return None
    tab = op.BuiltinOptions()
    obj = cls()
    if tab is None:
        return empty_options(name)
    obj.Init(tab.Bytes, tab.Pos)
    return obj


def empty_options(name: str):
    """An options object of class ``tflite.<name>`` whose every field reads as the default."""
    import flatbuffers
    import tflite

    if name not in _EMPTY:
        b = flatbuffers.Builder(16)
        b.StartObject(0)
        b.Finish(b.EndObject())
        data = bytes(b.Output())
        obj = getattr(tflite, name)()
        obj.Init(data, int.from_bytes(data[:4], "little"))
        _EMPTY[name] = obj
    return _EMPTY[name]
