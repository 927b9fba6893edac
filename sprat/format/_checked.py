"""Bounds-checked FlatBuffers access: the verifier the Python FlatBuffers runtime lacks.

Every read goes through :class:`Region` / :class:`Table`, which check it against the
FlatBuffer's byte range before touching memory, as the C++ ``flatbuffers::Verifier`` does:
table and vtable positions, vtable and table sizes, field offsets inside their table, alignment,
uoffsets, vector lengths, string terminators and UTF-8. Any failure raises ``ModelFormatError``
naming the table/field (``where``) and the byte offset in the file.

Work is bounded: uoffsets are unsigned, so a chain of references only moves forward (no
cycles); and every object read is charged its size against a budget proportional to the
FlatBuffer's size, so a hostile file that makes many references share one large object (a
"billion laughs" of tables or strings) fails instead of taking exponential time or memory.
"""

from __future__ import annotations

import struct

from ..errors import ModelFormatError

_U8 = struct.Struct("<B")
_I8 = struct.Struct("<b")
_U16X2 = struct.Struct("<HH")
_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_U64 = struct.Struct("<Q")
_F64 = struct.Struct("<d")

# scalar kinds: (struct, size)
INT8 = (_I8, 1)
UINT8 = (_U8, 1)
INT32 = (_I32, 4)
UINT32 = (_U32, 4)
INT64 = (_I64, 8)
UINT64 = (_U64, 8)
FLOAT64 = (_F64, 8)

_VECTOR_FORMATS = {INT32: "i", INT64: "q", FLOAT64: "d", UINT8: "B"}

BUDGET_FACTOR = 4  # bytes of objects that may be read per byte of FlatBuffer
BUDGET_SLACK = 1 << 16
MAX_WHERE = 200  # characters of the table/field path kept in messages


def path(where) -> str:
    """The table/field path a ``where`` stands for, formatted only for a message: a str, a
    Table, ``(parent, "field")`` or ``(parent, index)``.

    NOTE: the readers pass those pieces instead of formatting a path for every table and field
    they read (~2 us a node, most of a model's read time, for strings no valid file shows)."""
    if isinstance(where, str):
        return where
    if isinstance(where, Table):
        return path(where.where)
    parent, part = where
    return f"{path(parent)}[{part}]" if isinstance(part, int) else f"{path(parent)}.{part}"


class Region:
    """The FlatBuffer ``buf[start:end]``; positions are absolute offsets into ``buf``.

    Alignment is checked relative to offset 0 of ``buf`` (the writer places the FlatBuffer at an
    8-aligned file offset, so FlatBuffers' own alignment carries over).
    """

    __slots__ = ("budget", "buf", "end", "start")

    def __init__(self, buf: memoryview, start: int, end: int):
        self.buf = buf
        self.start = start
        self.end = end
        self.budget = BUDGET_FACTOR * (end - start) + BUDGET_SLACK

    # ---- failures -------------------------------------------------------------------------
    def fail(self, where, pos: int, msg: str):
        where = path(where)
        if len(where) > MAX_WHERE:  # deeply nested subgraphs: keep the innermost part
            where = "..." + where[-MAX_WHERE:]
        raise ModelFormatError(f"{where} (byte {pos}): {msg}")

    def _bad(self, pos: int, size: int, alignment: int, where: str, what: str):
        if pos < self.start or pos + size > self.end:
            self.fail(where, pos, f"{what} of {size} bytes lies outside the FlatBuffer "
                      f"[{self.start}, {self.end})")
        self.fail(where, pos, f"{what} is not {alignment}-byte aligned")

    def _over_budget(self, where: str, pos: int):
        self.fail(where, pos, "objects read exceed the FlatBuffer size several times over "
                      "(shared or overlapping tables: corrupt or hostile file)")

    # ---- objects --------------------------------------------------------------------------
    def uoffset(self, pos: int, where: str) -> int:
        """The position a uoffset stored at ``pos`` points to (checked to be inside)."""
        if pos < self.start or pos + 4 > self.end or pos & 3:
            self._bad(pos, 4, 4, where, "offset")
        target = pos + _U32.unpack_from(self.buf, pos)[0]
        if target >= self.end:
            self.fail(where, pos, f"offset points to byte {target}, past the FlatBuffer end "
                      f"({self.end})")
        return target

    def uoffsets(self, first: int, n: int, where: str) -> list[int]:
        """Targets of the ``n`` uoffsets at ``first`` (a checked vector's elements)."""
        offs = struct.unpack_from(f"<{n}I", self.buf, first)
        targets = [first + 4 * k + o for k, o in enumerate(offs)]
        if targets and max(targets) >= self.end:
            k = next(k for k, t in enumerate(targets) if t >= self.end)
            self.fail((where, k), first + 4 * k, f"offset points to byte {targets[k]}, "
                      f"past the FlatBuffer end ({self.end})")
        return targets

    def table(self, pos: int, where: str) -> Table:
        """The table at ``pos``, with its vtable checked."""
        if pos < self.start or pos + 4 > self.end or pos & 3:
            self._bad(pos, 4, 4, where, "table")
        vt = pos - _I32.unpack_from(self.buf, pos)[0]
        if vt < self.start or vt + 4 > self.end or vt & 1:
            self._bad(vt, 4, 2, where, "vtable")
        vt_size, table_size = _U16X2.unpack_from(self.buf, vt)
        if vt_size < 4 or vt_size & 1:
            self.fail(where, vt, f"vtable size {vt_size} is not an even number >= 4")
        if vt + vt_size > self.end:
            self._bad(vt, vt_size, 2, where, "vtable")
        if table_size < 4:
            self.fail(where, vt, f"table size {table_size} < 4")
        if pos + table_size > self.end:
            self._bad(pos, table_size, 4, where, "table")
        self.budget -= table_size
        if self.budget < 0:
            self._over_budget(where, pos)
        fields = struct.unpack_from(f"<{(vt_size - 4) // 2}H", self.buf, vt + 4)
        return Table(self, pos, fields, table_size, where)

    def vector(self, pos: int, elem_size: int, where: str) -> tuple[int, int]:
        """(position of the first element, element count) of the vector at ``pos``."""
        if pos < self.start or pos + 4 > self.end or pos & 3:
            self._bad(pos, 4, 4, where, "vector length")
        n = _U32.unpack_from(self.buf, pos)[0]
        first = pos + 4
        if first + n * elem_size > self.end:
            self.fail(where, pos, f"vector of {n} elements of {elem_size} bytes runs past the "
                      f"FlatBuffer end ({self.end})")
        if elem_size > 4 and first % elem_size:
            self._bad(first, 0, elem_size, where, "vector data")
        self.budget -= 4 + n * elem_size
        if self.budget < 0:
            self._over_budget(where, pos)
        return first, n

    def string(self, pos: int, where: str) -> str:
        first, n = self.vector(pos, 1, where)
        if first + n >= self.end:
            self.fail(where, first + n, "string terminator lies outside the FlatBuffer")
        if self.buf[first + n] != 0:
            self.fail(where, first + n, "string is not NUL-terminated")
        try:
            return str(self.buf[first:first + n], "utf-8")
        except UnicodeDecodeError as e:
            self.fail(where, first + e.start, f"string is not valid UTF-8 ({e.reason})")


class Table:
    """A verified table: field accessors by slot id (the schema's ``id:`` attribute)."""

    __slots__ = ("_where", "fields", "pos", "r", "size")

    def __init__(self, region: Region, pos: int, fields: tuple[int, ...], size: int, where):
        self.r = region
        self.pos = pos
        self.fields = fields  # field offsets from the vtable, 0 = absent
        self.size = size
        self._where = where  # see ``path``

    @property
    def where(self) -> str:
        """This table's path in the file (``Model.nodes[3].attributes[0]``), for messages."""
        return path(self._where)

    def __str__(self) -> str:
        return self.where

    def _field(self, slot: int, size: int, name: str) -> int:
        """Absolute position of field ``slot`` (0 when absent), checked inside the table."""
        if slot >= len(self.fields):
            return 0
        off = self.fields[slot]
        if off == 0:
            return 0
        pos = self.pos + off
        if off < 4 or off + size > self.size:
            self.r.fail(f"{self.where}.{name}", self.pos,
                        f"field at table offset {off} (+{size} bytes) lies outside the "
                        f"{self.size}-byte table")
        if pos % size:
            self.r.fail(f"{self.where}.{name}", pos, "field is not aligned")
        return pos

    def scalar(self, slot: int, kind, default, name: str):
        st, size = kind
        pos = self._field(slot, size, name)
        if pos == 0:
            return default
        return st.unpack_from(self.r.buf, pos)[0]

    def _ref(self, slot: int, name: str) -> int:
        pos = self._field(slot, 4, name)
        if pos == 0:
            return 0
        # NOTE: ``_field`` checked the uoffset's 4 bytes lie in this table, aligned
        target = pos + _U32.unpack_from(self.r.buf, pos)[0]
        if target >= self.r.end:
            self.r.uoffset(pos, (self, name))  # raises, naming the field
        return target

    def string(self, slot: int, name: str) -> str | None:
        target = self._ref(slot, name)
        return None if target == 0 else self.r.string(target, (self, name))

    def table(self, slot: int, name: str) -> Table | None:
        target = self._ref(slot, name)
        return None if target == 0 else self.r.table(target, (self, name))

    def scalars(self, slot: int, kind, name: str) -> list | None:
        """A vector of int32/int64/float64/uint8 as a python list (None when absent)."""
        target = self._ref(slot, name)
        if target == 0:
            return None
        first, n = self.r.vector(target, kind[1], (self, name))
        return list(struct.unpack_from(f"<{n}{_VECTOR_FORMATS[kind]}", self.r.buf, first))

    def bytes_span(self, slot: int, name: str) -> tuple[int, int] | None:
        """(position, length) of a [ubyte] vector's bytes (None when absent)."""
        target = self._ref(slot, name)
        if target == 0:
            return None
        return self.r.vector(target, 1, (self, name))

    def strings(self, slot: int, name: str) -> list[str] | None:
        target = self._ref(slot, name)
        if target == 0:
            return None
        where = (self, name)
        first, n = self.r.vector(target, 4, where)
        return [self.r.string(t, (where, k))
                for k, t in enumerate(self.r.uoffsets(first, n, where))]

    def tables(self, slot: int, name: str) -> list[Table] | None:
        target = self._ref(slot, name)
        if target == 0:
            return None
        where = (self, name)
        first, n = self.r.vector(target, 4, where)
        return [self.r.table(t, (where, k))
                for k, t in enumerate(self.r.uoffsets(first, n, where))]
