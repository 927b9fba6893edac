"""One thread pool for the cpu backend (DESIGN §4).

The cpu backend's kernels split their work across Numba's thread pool (``prange`` over
``num_threads`` slots) and call BLAS from inside those threads, one GEMM per block. BLAS itself
must therefore run single-threaded: measured on this machine, a NumPy ``matmul`` with two
OpenBLAS threads right after a Numba parallel loop fell from 145 to 13 GFLOP/s (both pools spin
on the same two cores), while one-thread BLAS calls issued from two Numba threads reached the
same 160 GFLOP/s as two-thread OpenBLAS alone.

``limits(n)`` is the context manager a session wraps around a run; ``configure(n)`` sets the
same state for good. Both are thread-safe enough for sprat's use: Numba's thread count is
per calling thread, the BLAS limit is process-wide (it is restored on exit).
"""

from __future__ import annotations

import numba

_blas_libs = None


def _blas():
    """threadpoolctl's controllers of the loaded BLAS libraries (found once)."""
    global _blas_libs
    if _blas_libs is None:
        from threadpoolctl import ThreadpoolController

        from . import _blas  # noqa: F401  (NOTE: load the BLAS the kernels call before scanning)

        _blas_libs = ThreadpoolController().select(user_api="blas").lib_controllers
    return _blas_libs


def _hold_blas_to_one() -> list[int]:
    """Set every BLAS to one thread; returns the previous counts (for ``_restore_blas``)."""
    previous = []
    for lib in _blas():
        n = lib.get_num_threads()
        previous.append(n)
        if n != 1:
            lib.set_num_threads(1)
    return previous


def _restore_blas(previous: list[int]) -> None:
    for lib, n in zip(_blas(), previous):
        if n != 1:
            lib.set_num_threads(n)


def max_threads() -> int:
    """Largest thread count Numba's pool can run (NUMBA_NUM_THREADS, default: CPU count)."""
    return int(numba.config.NUMBA_NUM_THREADS)


def clamp(num_threads: int) -> int:
    """``num_threads`` clipped to [1, max_threads()]. Raises ValueError if not a positive int."""
    if int(num_threads) != num_threads or num_threads < 1:
        raise ValueError(f"num_threads must be a positive integer, got {num_threads!r}")
    return min(int(num_threads), max_threads())


def configure(num_threads: int) -> None:
    """Hold BLAS to one thread and give Numba ``num_threads`` threads (for the calling thread)."""
    _hold_blas_to_one()
    numba.set_num_threads(clamp(num_threads))


class limits:  # noqa: N801 (used as a function: ``with limits(2): ...``)
    """Context manager: ``configure(num_threads)`` inside, the previous settings restored after.

    Usage: ``with limits(2): session_steps()``. Raises ValueError as ``clamp``. Cost: a few
    microseconds per entry (entered on every run; a class rather than a generator context
    manager for that reason).
    """

    __slots__ = ("n", "previous", "blas")

    def __init__(self, num_threads: int):
        self.n = clamp(num_threads)

    def __enter__(self) -> None:
        self.previous = numba.get_num_threads()
        self.blas = _hold_blas_to_one()
        if self.previous != self.n:
            numba.set_num_threads(self.n)

    def __exit__(self, *exc) -> None:
        if self.previous != self.n:
            numba.set_num_threads(self.previous)
        _restore_blas(self.blas)
