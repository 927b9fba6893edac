# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
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

Compiled (Cython) because it is most of a cold start's model read: every field of every tensor,
node and attribute passes through it (PP-OCR v2 cls, 208 tensors and 83 nodes: ~28000 calls of
the pure-Python version, 10-12 ms). Integers are read little-endian byte by byte (the file's
order, whatever the host's; compilers make one load of it on little-endian CPUs).
"""

from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy

import struct

from ..errors import ModelFormatError

_U32 = struct.Struct("<I")  # NOTE: the reader's header read

# scalar kinds: (code, size); ``Table.scalar`` and ``Table.scalars`` take them
INT8 = (0, 1)
UINT8 = (1, 1)
INT32 = (2, 4)
UINT32 = (3, 4)
INT64 = (4, 8)
UINT64 = (5, 8)
FLOAT64 = (6, 8)

BUDGET_FACTOR = 4  # bytes of objects that may be read per byte of FlatBuffer
BUDGET_SLACK = 1 << 16
MAX_WHERE = 200  # characters of the table/field path kept in messages


cdef inline uint16_t _u16(const uint8_t* p) noexcept nogil:
    return <uint16_t>(p[0] | (<uint16_t>p[1] << 8))


cdef inline uint32_t _u32(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16)
            | (<uint32_t>p[3] << 24))


cdef inline uint64_t _u64(const uint8_t* p) noexcept nogil:
    return <uint64_t>_u32(p) | (<uint64_t>_u32(p + 4) << 32)


def path(where) -> str:
    """The table/field path a ``where`` stands for, formatted only for a message: a str, a
    Table, ``(parent, "field")`` or ``(parent, index)``.

    NOTE: the readers pass those pieces instead of formatting a path for every table and field
    they read (~2 us a node, most of a model's read time, for strings no valid file shows)."""
    if isinstance(where, str):
        return where
    if isinstance(where, Table):
        return path((<Table>where)._where)
    parent, part = where
    return f"{path(parent)}[{part}]" if isinstance(part, int) else f"{path(parent)}.{part}"


cdef class Region:
    """The FlatBuffer ``buf[start:end]``; positions are absolute offsets into ``buf``.

    Alignment is checked relative to offset 0 of ``buf`` (the writer places the FlatBuffer at an
    8-aligned file offset, so FlatBuffers' own alignment carries over). ``buf``: a 1-D byte
    buffer (kept, and its memory read, while the Region lives).
    """

    cdef readonly object buf
    cdef const uint8_t[::1] view
    cdef const uint8_t* p
    cdef public Py_ssize_t start, end, budget

    def __init__(self, buf, Py_ssize_t start, Py_ssize_t end):
        self.buf = buf
        self.view = buf
        self.p = &self.view[0] if self.view.shape[0] else NULL
        if start < 0 or end > self.view.shape[0] or start > end:
            raise ValueError(f"region [{start}, {end}) outside a buffer of "
                             f"{self.view.shape[0]} bytes")
        self.start = start
        self.end = end
        self.budget = BUDGET_FACTOR * (end - start) + BUDGET_SLACK

    # ---- failures -------------------------------------------------------------------------
    def fail(self, where, pos, msg):
        where = path(where)
        if len(where) > MAX_WHERE:  # deeply nested subgraphs: keep the innermost part
            where = "..." + where[-MAX_WHERE:]
        raise ModelFormatError(f"{where} (byte {pos}): {msg}")

    cdef _bad(self, Py_ssize_t pos, Py_ssize_t size, int alignment, where, str what):
        if pos < self.start or pos + size > self.end:
            self.fail(where, pos, f"{what} of {size} bytes lies outside the FlatBuffer "
                      f"[{self.start}, {self.end})")
        self.fail(where, pos, f"{what} is not {alignment}-byte aligned")

    cdef _over_budget(self, where, Py_ssize_t pos):
        self.fail(where, pos, "objects read exceed the FlatBuffer size several times over "
                  "(shared or overlapping tables: corrupt or hostile file)")

    # ---- objects --------------------------------------------------------------------------
    cpdef Py_ssize_t uoffset(self, Py_ssize_t pos, where) except -1:
        """The position a uoffset stored at ``pos`` points to (checked to be inside)."""
        if pos < self.start or pos + 4 > self.end or pos & 3:
            self._bad(pos, 4, 4, where, "offset")
        cdef Py_ssize_t target = pos + <Py_ssize_t>_u32(self.p + pos)
        if target >= self.end:
            self.fail(where, pos, f"offset points to byte {target}, past the FlatBuffer end "
                      f"({self.end})")
        return target

    cpdef list uoffsets(self, Py_ssize_t first, Py_ssize_t n, where):
        """Targets of the ``n`` uoffsets at ``first`` (a checked vector's elements)."""
        cdef list targets = []
        cdef Py_ssize_t k, t
        for k in range(n):
            t = first + 4 * k + <Py_ssize_t>_u32(self.p + first + 4 * k)
            if t >= self.end:
                self.fail((where, k), first + 4 * k, f"offset points to byte {t}, "
                          f"past the FlatBuffer end ({self.end})")
            targets.append(t)
        return targets

    cpdef Table table(self, Py_ssize_t pos, where):
        """The table at ``pos``, with its vtable checked."""
        if pos < self.start or pos + 4 > self.end or pos & 3:
            self._bad(pos, 4, 4, where, "table")
        cdef Py_ssize_t vt = pos - <int32_t>_u32(self.p + pos)
        if vt < self.start or vt + 4 > self.end or vt & 1:
            self._bad(vt, 4, 2, where, "vtable")
        cdef Py_ssize_t vt_size = _u16(self.p + vt), table_size = _u16(self.p + vt + 2)
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
        cdef Table t = Table.__new__(Table)
        t.r = self
        t.pos = pos
        t.nfields = (vt_size - 4) // 2
        t.vt = vt + 4
        t.size = table_size
        t._where = where
        return t

    cpdef tuple vector(self, Py_ssize_t pos, Py_ssize_t elem_size, where):
        """(position of the first element, element count) of the vector at ``pos``."""
        if pos < self.start or pos + 4 > self.end or pos & 3:
            self._bad(pos, 4, 4, where, "vector length")
        cdef Py_ssize_t n = _u32(self.p + pos)
        cdef Py_ssize_t first = pos + 4
        if first + n * elem_size > self.end:
            self.fail(where, pos, f"vector of {n} elements of {elem_size} bytes runs past the "
                      f"FlatBuffer end ({self.end})")
        if elem_size > 4 and first % elem_size:
            self._bad(first, 0, elem_size, where, "vector data")
        self.budget -= 4 + n * elem_size
        if self.budget < 0:
            self._over_budget(where, pos)
        return first, n

    cpdef str string(self, Py_ssize_t pos, where):
        cdef Py_ssize_t first, n
        first, n = self.vector(pos, 1, where)
        if first + n >= self.end:
            self.fail(where, first + n, "string terminator lies outside the FlatBuffer")
        if self.p[first + n] != 0:
            self.fail(where, first + n, "string is not NUL-terminated")
        try:
            return (<const char*>self.p + first)[:n].decode("utf-8")
        except UnicodeDecodeError as e:
            self.fail(where, first + e.start, f"string is not valid UTF-8 ({e.reason})")


cdef class Table:
    """A verified table: field accessors by slot id (the schema's ``id:`` attribute)."""

    cdef readonly Region r
    cdef readonly Py_ssize_t pos, size
    cdef Py_ssize_t nfields, vt  # field count and position of the vtable's field offsets
    cdef object _where  # see ``path``

    @property
    def where(self) -> str:
        """This table's path in the file (``Model.nodes[3].attributes[0]``), for messages."""
        return path(self._where)

    def __str__(self) -> str:
        return self.where

    cdef Py_ssize_t _field(self, Py_ssize_t slot, Py_ssize_t size, str name) except -1:
        """Absolute position of field ``slot`` (0 when absent), checked inside the table."""
        if slot >= self.nfields:
            return 0
        cdef Py_ssize_t off = _u16(self.r.p + self.vt + 2 * slot)
        if off == 0:
            return 0
        cdef Py_ssize_t pos = self.pos + off
        if off < 4 or off + size > self.size:
            self.r.fail(f"{self.where}.{name}", self.pos,
                        f"field at table offset {off} (+{size} bytes) lies outside the "
                        f"{self.size}-byte table")
        if pos % size:
            self.r.fail(f"{self.where}.{name}", pos, "field is not aligned")
        return pos

    def scalar(self, Py_ssize_t slot, kind, default, str name):
        cdef int code = kind[0]
        cdef Py_ssize_t pos = self._field(slot, kind[1], name)
        if pos == 0:
            return default
        return _scalar(self.r.p + pos, code)

    cdef Py_ssize_t _ref(self, Py_ssize_t slot, str name) except -1:
        cdef Py_ssize_t pos = self._field(slot, 4, name)
        if pos == 0:
            return 0
        # NOTE: ``_field`` checked the uoffset's 4 bytes lie in this table, aligned
        cdef Py_ssize_t target = pos + <Py_ssize_t>_u32(self.r.p + pos)
        if target >= self.r.end:
            self.r.uoffset(pos, (self, name))  # raises, naming the field
        return target

    def string(self, Py_ssize_t slot, str name):
        cdef Py_ssize_t target = self._ref(slot, name)
        return None if target == 0 else self.r.string(target, (self, name))

    def table(self, Py_ssize_t slot, str name):
        cdef Py_ssize_t target = self._ref(slot, name)
        return None if target == 0 else self.r.table(target, (self, name))

    def scalars(self, Py_ssize_t slot, kind, str name):
        """A vector of int32/int64/float64/uint8 as a python list (None when absent)."""
        cdef Py_ssize_t target = self._ref(slot, name)
        if target == 0:
            return None
        cdef int code = kind[0]
        cdef Py_ssize_t size = kind[1], first, n, k
        if code not in (2, 4, 6, 1):  # NOTE: the kinds a schema vector has
            raise ValueError(f"scalars: no vector of kind {kind}")
        first, n = self.r.vector(target, size, (self, name))
        cdef const uint8_t* p = self.r.p + first
        return [_scalar(p + k * size, code) for k in range(n)]

    def bytes_span(self, Py_ssize_t slot, str name):
        """(position, length) of a [ubyte] vector's bytes (None when absent)."""
        cdef Py_ssize_t target = self._ref(slot, name)
        if target == 0:
            return None
        return self.r.vector(target, 1, (self, name))

    cdef object _elements(self, Py_ssize_t slot, str name, bint strings):
        """The strings (or tables) of a vector of uoffsets as a list (None when absent)."""
        cdef Py_ssize_t target = self._ref(slot, name)
        if target == 0:
            return None
        where = (self, name)
        cdef Py_ssize_t first, n
        first, n = self.r.vector(target, 4, where)
        cdef object read = getattr(self.r, "string" if strings else "table")
        return [read(t, (where, k)) for k, t in enumerate(self.r.uoffsets(first, n, where))]

    def strings(self, Py_ssize_t slot, str name):
        return self._elements(slot, name, True)

    def tables(self, Py_ssize_t slot, str name):
        return self._elements(slot, name, False)


cdef object _scalar(const uint8_t* p, int code):
    """The little-endian scalar of kind ``code`` at ``p`` as a Python int or float."""
    cdef uint64_t bits
    cdef double d
    if code == 0:
        return <int8_t>p[0]
    if code == 1:
        return p[0]
    if code == 2:
        return <int32_t>_u32(p)
    if code == 3:
        return _u32(p)
    if code == 4:
        return <int64_t>_u64(p)
    if code == 5:
        return _u64(p)
    bits = _u64(p)
    memcpy(&d, &bits, 8)
    return d
