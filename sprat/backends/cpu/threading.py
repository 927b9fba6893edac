"""One thread pool for the cpu backend (DESIGN §4).

The compiled kernels split their work into ``num_threads`` slots run by OpenMP's pool (one
``prange`` region per kernel call) and call BLAS from inside those threads, one GEMM per block.
BLAS itself must therefore run single-threaded: measured on this machine, a NumPy ``matmul``
with two OpenBLAS threads right after a parallel region of another pool fell from 145 to 13
GFLOP/s (both pools spin on the same two cores), while one-thread BLAS calls issued from two
threads of one pool reached the same 160 GFLOP/s as two-thread OpenBLAS alone.

OpenMP's workers spin briefly after a region (GOMP's default spin count) and then sleep: an idle
session costs no CPU (``tests/ops/test_cpu_paths.py``).

``limits(n)`` is the context manager a session wraps around a run; ``configure(n)`` sets the
same state for good. The BLAS limit is process-wide (restored on exit); the number of work
slots is passed to every kernel call, not set globally.
"""

from __future__ import annotations

_blas_libs = None

# NOTE: threadpoolctl's controllers look their C functions up on every call (a ctypes
# attribute lookup, ~3 us each: three per run, a tenth of a small model's run); OpenBLAS's
# get/set functions are bound once instead (its usual builds; others go through threadpoolctl)
_OPENBLAS_AFFIXES = [(p, s) for p in ("", "scipy_") for s in ("", "64_", "_64")]


class _Threads:
    """``get()`` / ``set(n)`` of one BLAS library's thread count."""

    __slots__ = ("get", "set", "_keep")

    def __init__(self, lib):
        self.get, self.set, self._keep = lib.get_num_threads, lib.set_num_threads, None
        if lib.internal_api != "openblas" or getattr(lib, "threading_layer", "") == "openmp":
            return
        import ctypes

        try:
            dll = ctypes.CDLL(lib.filepath)
        except OSError:
            return
        for pre, suf in _OPENBLAS_AFFIXES:
            get = getattr(dll, f"{pre}openblas_get_num_threads{suf}", None)
            put = getattr(dll, f"{pre}openblas_set_num_threads{suf}", None)
            if get is not None and put is not None:
                get.restype, get.argtypes = ctypes.c_int, []
                put.restype, put.argtypes = None, [ctypes.c_int]
                self.get, self.set, self._keep = get, put, dll
                return


def _blas() -> list[_Threads]:
    """The thread controls of the loaded BLAS libraries (found once, with threadpoolctl)."""
    global _blas_libs
    if _blas_libs is None:
        from threadpoolctl import ThreadpoolController

        from . import compiled  # noqa: F401  (NOTE: load the BLAS the kernels call first)

        _blas_libs = [_Threads(lib) for lib in
                      ThreadpoolController().select(user_api="blas").lib_controllers]
    return _blas_libs


def _hold_blas_to_one() -> list[int]:
    """Set every BLAS to one thread; returns the previous counts (for ``_restore_blas``)."""
    previous = []
    for lib in _blas():
        n = lib.get()
        previous.append(n)
        if n != 1:
            lib.set(1)
    return previous


def _restore_blas(previous: list[int]) -> None:
    for lib, n in zip(_blas(), previous):
        if n != 1:
            lib.set(n)


_max_threads = None


def max_threads() -> int:
    """Largest number of work slots: OpenMP's thread limit (OMP_NUM_THREADS, default: the
    CPUs this process may run on)."""
    global _max_threads
    if _max_threads is None:  # NOTE: once: ``limits`` asks on every run
        from .compiled import kernels

        _max_threads = kernels.max_threads
    return _max_threads()


def clamp(num_threads: int) -> int:
    """``num_threads`` clipped to [1, max_threads()]. Raises ValueError if not a positive int."""
    if int(num_threads) != num_threads or num_threads < 1:
        raise ValueError(f"num_threads must be a positive integer, got {num_threads!r}")
    return min(int(num_threads), max_threads())


def configure(num_threads: int) -> None:
    """Hold BLAS to one thread (``num_threads`` is checked; kernels get their slot count)."""
    clamp(num_threads)
    _hold_blas_to_one()


class limits:  # noqa: N801 (used as a function: ``with limits(2): ...``)
    """Context manager: BLAS held to one thread inside, its previous count restored after.

    Usage: ``with limits(2): session_steps()``. Raises ValueError as ``clamp``. Cost: a few
    microseconds per entry (entered on every run; a class rather than a generator context
    manager for that reason).
    """

    __slots__ = ("n", "blas")

    def __init__(self, num_threads: int):
        self.n = clamp(num_threads)

    def __enter__(self) -> None:
        self.blas = _hold_blas_to_one()

    def __exit__(self, *exc) -> None:
        _restore_blas(self.blas)
