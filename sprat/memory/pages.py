"""Giving back the resident pages of weights a kernel has packed.

A ``.sprat`` file's weights are read-only views into its mmap (``sprat.format``). A kernel that
packs a weight at prepare (a transposed GEMM operand, Winograd-transformed conv weights, ...)
reads it once and never again, but the pages that read mapped stay resident, so the process
holds the weight twice, mapped and packed: 54 MB of the 152 MB peak of the ddddocr OCR model.
``release(arrays)`` tells the operating system those mapped pages are not needed now
(``madvise(MADV_DONTNEED)``): for a read-only file mapping the data is unchanged and any later
read (another session that does not pack, the reference backend) faults the pages back in
from the page cache. MNN frees a weight's source buffer after packing it for the same reason.

Only whole pages inside an array are released (a page shared with a neighbouring tensor stays),
and only for arrays that view a read-only ``mmap.mmap`` (``Interpreter.from_file``); bytes,
writable (copy-on-write) mappings and arrays of their own are left alone.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterable

import numpy as np
from numpy.lib.array_utils import byte_bounds

_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)


def _mapping(a: np.ndarray) -> mmap.mmap | None:
    """The read-only mmap ``a`` views (through NumPy bases and memoryviews), or None."""
    base = a
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview) and base.readonly and isinstance(base.obj, mmap.mmap):
        return base.obj
    return None


def release(arrays: Iterable[np.ndarray | None]) -> int:
    """Drop the resident pages of those ``arrays`` that view a read-only file mapping; returns
    the bytes advised (0 where the platform has no ``MADV_DONTNEED``). Never raises for an
    array it cannot release: it skips it."""
    if _DONTNEED is None:
        return 0
    done = 0
    page = mmap.PAGESIZE
    for a in arrays:
        if not isinstance(a, np.ndarray) or a.nbytes < page:
            continue
        mm = _mapping(a)
        if mm is None:
            continue
        start = np.frombuffer(mm, np.uint8).ctypes.data
        lo, hi = byte_bounds(a)
        first = -(-(lo - start) // page) * page
        last = (hi - start) // page * page
        if last > first:
            try:
                mm.madvise(_DONTNEED, first, last - first)
            except (OSError, ValueError):  # NOTE: advice only; a refusal changes nothing
                continue
            done += last - first
    return done
