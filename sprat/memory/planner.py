"""Memory planner: place every intermediate tensor at an offset in one aligned arena.

Greedy best-fit by decreasing size over lifetimes (as MNN's Defer allocator and tinygrad's
memory planner do): two tensors may share bytes only if their lifetimes do not overlap.
A pure function; it knows nothing of ops or backends.
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import ShapeError

ALIGN = 64


def _round_up(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


def plan_memory(sizes: dict[int, int], spans: dict[int, tuple[int, int]],
                align: int = ALIGN) -> tuple[dict[int, int], int]:
    """Offsets for tensors of ``sizes`` bytes alive over inclusive step ranges ``spans``.

    Returns ``(offsets, arena_bytes)``; every offset is a multiple of ``align``.
    """
    order = sorted(sizes, key=lambda v: (-sizes[v], spans[v][0], v))
    placed: list[tuple[int, int, int, int]] = []  # (offset, end, first, last)
    offsets: dict[int, int] = {}
    total = 0
    for v in order:
        size = _round_up(max(sizes[v], 1), align)
        first, last = spans[v]
        busy = sorted((o, e) for o, e, f, l in placed if not (l < first or last < f))
        best = None
        cursor = 0
        for o, e in busy:
            gap = o - cursor
            if gap >= size and (best is None or gap < best[1]):
                best = (cursor, gap)
            cursor = max(cursor, e)
        offset = best[0] if best is not None else cursor
        offsets[v] = offset
        placed.append((offset, offset + size, first, last))
        total = max(total, offset + size)
    return offsets, total


def physical_memory() -> int:
    """Bytes of physical memory of this machine (0 when the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # NOTE: not POSIX: no bound known
        return 0


def allocate_arena(total: int, align: int = ALIGN) -> tuple[np.ndarray, np.ndarray]:
    """``(raw, arena)``: ``raw`` owns ``total + align`` bytes, ``arena`` is its ``total`` bytes
    starting at an ``align``-byte boundary.

    Raises ShapeError when ``total`` exceeds the machine's physical memory or cannot be
    allocated: the shapes of the model at these input shapes imply that much (a hostile or
    corrupt file, or inputs far larger than the model was made for), and saying so beats
    NumPy's MemoryError or "Maximum allowed dimension exceeded"."""
    limit = physical_memory()
    if total < 0 or (limit and total > limit):
        raise ShapeError(f"the plan needs an arena of {total} bytes, more than this machine's "
                         f"{limit} bytes of memory: check the input shapes and the model's "
                         f"shapes (sprat dump --stage planned)")
    try:
        raw = np.empty(total + align, dtype=np.uint8)
    except (MemoryError, ValueError) as e:
        raise ShapeError(f"cannot allocate the plan's arena of {total} bytes: {e}") from e
    shift = (-raw.ctypes.data) % align
    return raw, raw[shift:shift + total]
