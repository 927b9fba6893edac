"""The ``.sprat`` model file: one verified, mmap-able FlatBuffer plus aligned weight blobs.

API::

    write_model(graph, path=None, *, external_data=None) -> bytes
    read_model(buffer, *, base_dir=None) -> Graph           # bytes/bytearray/memoryview/mmap
    load_model(path, *, populate=False) -> (Graph, mmap.mmap)
    FORMAT_VERSION, MAGIC

File layout (all integers little-endian)::

    offset 0   b"SPRT"                      MAGIC
    offset 4   u32 format version           FORMAT_VERSION (1)
    offset 8   u32 FlatBuffer size N         a size-prefixed FlatBuffer (FlatBuffers'
    offset 12  FlatBuffer, N bytes           FinishSizePrefixed), root table ``Model``
    ...        zero padding to a multiple of 64
    weights    one blob per constant tensor, each starting at a file offset that is a
               multiple of 64 (zero padding between blobs)

The schema is ``sprat/format/sprat.fbs``: ``Model { version, producer, biz_code, uuid, tensors,
nodes, inputs, outputs, metadata, sprat_version, source_format, source_opset, byte_order,
external_data }``. Tensors and nodes refer to tensors by index into ``Model.tensors``
(``-1`` = an absent optional node input/output). A ``Tensor`` has a name, an ONNX
``TensorProto`` dtype code (``sprat.dtypes``; 0 = unknown), a shape (absent = unknown rank;
``-1`` with a name in ``dim_params`` = a symbolic dim, ``-1`` with ``""`` = ``None``) and, for a
constant, ``data_offset``/``data_length`` of its blob (``Blob``) or ``inline_data`` (``Inline``,
used for tensor attributes up to 256 bytes). Node attributes are tagged by ``AttrKind``: Int,
Float (stored as double, so python floats round-trip exactly), String, Ints, Floats, Strings,
Tensor(s), Graph(s) (a ``Graph`` table, recursively, for If/Loop bodies) and Bool/Bools (stored
in ``i``/``ints`` as 0/1 and read back as python ``bool``, so ``_residual=True`` comes back as
``True``). sprat-internal attributes (``_layout``, ``_residual``, ``_activation``,
``_act_params``) are ordinary attributes. Lists come back as lists; an empty list as ``[]``.

Metadata: ``graph.metadata`` keys ``producer``, ``biz_code``, ``uuid``, ``sprat_version``,
``source_format`` (str) and ``source_opset`` (int) are Model fields; the writer fills in a
``uuid4`` and this sprat's version when absent. Every other key is a free str -> str pair.

Alignment and zero copy: weight offsets are absolute file offsets, multiples of 64, so
``np.frombuffer(mmap, dtype, count, offset)`` is an aligned (the mapping is page-aligned),
read-only, zero-copy view. ``read_model`` makes exactly those views (read-only even for a
``bytearray``); they keep the buffer alive.

External weights: ``write_model(g, "m.sprat", external_data="weights.bin")`` writes the blobs to
``weights.bin`` next to the model (offsets then count from that file's start, still
64-aligned) and records the relative name; the reader accepts only plain relative names (no
absolute path, no ``..``) and maps the file read-only.

Byte order: the FlatBuffer is little-endian (FlatBuffers' rule); the weights are written
little-endian and ``Model.byte_order`` records it. A file whose weights are in the other byte
order than the host's is accepted: its weights are converted (copied, so not zero-copy) and a
warning is logged. An unknown byte-order value is a ModelFormatError.

Versioning: ``FORMAT_VERSION`` is in the header and in ``Model.version``; the reader accepts
exactly its own version (an older or newer file is a ModelFormatError that says which).
Additive schema changes (new fields with the next ``id``) do not bump it: old readers ignore
unknown fields. Anything else does.

Verification: the Python FlatBuffers runtime has no verifier, so ``reader`` reads through a
bounds-checked accessor (``_checked``): magic, version, FlatBuffer size, every table, vtable,
field, vector, string and offset against the FlatBuffer's bounds (with alignment), UTF-8,
dtype codes, dims (>= 0 or -1), blob offset/length inside the weight area, 64-aligned, and equal
to prod(shape) * itemsize, tensor indices in range, nesting depth <= 32, and total work bounded
by a budget proportional to the file size (no hang or unbounded allocation from a hostile
length or shared references). Anything wrong raises ``sprat.errors.ModelFormatError`` with what
and where; nothing is used before it is checked. Not detectable: changed bytes inside weight
data. A file truncated or rewritten *while mapped* can still fault (SIGBUS), as with any mmap;
``write_model`` itself replaces files atomically.

Regenerating the schema code (never edit ``_generated/sprat_fb/`` by hand), from the repo root::

    flatc --python -o sprat/format/_generated sprat/format/sprat.fbs     # flatc 2.0.8
"""

from .reader import load_model, read_model
from .version import FORMAT_VERSION, MAGIC

__all__ = ["FORMAT_VERSION", "MAGIC", "load_model", "read_model", "write_model"]


def __getattr__(name: str):
    # NOTE: the writer (and the flatbuffers package it builds with) is imported on first use:
    # loading a model needs only the reader
    if name == "write_model":
        from .writer import write_model
        return write_model
    raise AttributeError(f"module 'sprat.format' has no attribute {name!r}")
