"""Constants of the ``.sprat`` file layout (documented in ``sprat/format/__init__.py``)."""

from __future__ import annotations

import struct

MAGIC = b"SPRT"
FORMAT_VERSION = 1  # bumped on any change an older reader cannot ignore
HEADER = struct.Struct("<4sI")  # magic, format version
HEADER_SIZE = HEADER.size  # 8; the size-prefixed FlatBuffer starts here
ALIGNMENT = 64  # every weight blob starts at a multiple of this (file offset)
MAX_GRAPH_DEPTH = 32  # nesting limit for subgraph attributes
MAX_RANK = 64  # NumPy's limit on array dimensions
MAX_ELEMENTS = 1 << 48  # a declared shape holding more elements than this is not a real model
BYTE_ORDERS = ("little", "big")  # index = the ByteOrder enum value in the schema


def align_up(n: int, alignment: int = ALIGNMENT) -> int:
    """Smallest multiple of ``alignment`` that is >= n."""
    return (n + alignment - 1) // alignment * alignment
