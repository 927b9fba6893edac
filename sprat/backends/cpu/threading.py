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
# NOTE: the compiled module, when it holds the kernels' BLAS's thread count itself
# (``kernels.blas_hold_one``: two ctypes calls cost ~1 us of every run)
_direct = None

# NOTE: the BLAS the kernels call is held through its own get/set functions, bound once with
# ctypes: threadpoolctl's controllers look their C functions up on every call (~3 us each, three
# per run, a tenth of a small model's run), and importing threadpoolctl and scanning the
# process's libraries cost 7 ms of every cold start. threadpoolctl remains the way for a BLAS
# that is not OpenBLAS with its own thread pool (MKL, OpenBLAS on OpenMP, ...).
_OPENBLAS_AFFIXES = [(p, s) for p in ("scipy_", "") for s in ("64_", "", "_64")]


class _Threads:
    """``get()`` / ``set(n)`` of one BLAS library's thread count."""

    __slots__ = ("get", "set", "_keep", "addresses")

    def __init__(self, get, set_, keep=None, addresses=None):
        self.get, self.set, self._keep = get, set_, keep
        self.addresses = addresses  # (get, set) function addresses, for the compiled module


def _openblas(path: str) -> _Threads | None:
    """OpenBLAS's own thread functions in the library at ``path`` (the wheels' affixes), or None
    when it has none or runs on OpenMP (``openblas_get_parallel() == 2``)."""
    import ctypes

    try:
        dll = ctypes.CDLL(path)
    except OSError:
        return None
    for pre, suf in _OPENBLAS_AFFIXES:
        get = getattr(dll, f"{pre}openblas_get_num_threads{suf}", None)
        put = getattr(dll, f"{pre}openblas_set_num_threads{suf}", None)
        if get is None or put is None:
            continue
        par = getattr(dll, f"{pre}openblas_get_parallel{suf}", None)
        if par is not None:
            par.restype, par.argtypes = ctypes.c_int, []
            if par() == 2:
                return None
        get.restype, get.argtypes = ctypes.c_int, []
        put.restype, put.argtypes = None, [ctypes.c_int]
        return _Threads(get, put, dll, (ctypes.cast(get, ctypes.c_void_p).value,
                                        ctypes.cast(put, ctypes.c_void_p).value))
    return None


def _blas() -> list[_Threads]:
    """The thread controls of the BLAS the kernels call (found once)."""
    global _blas_libs, _direct
    if _blas_libs is None:
        from . import compiled  # NOTE: load and bind the BLAS the kernels call first

        direct = _openblas(compiled.BLAS_LIBRARY) if compiled.BLAS_LIBRARY else None
        if direct is not None:
            compiled.kernels.bind_blas_threads(*direct.addresses)
            _direct = compiled.kernels
            _blas_libs = [direct]
        else:
            from threadpoolctl import ThreadpoolController

            _blas_libs = [_Threads(lib.get_num_threads, lib.set_num_threads) for lib in
                          ThreadpoolController().select(user_api="blas").lib_controllers]
    return _blas_libs


def _hold_blas_to_one() -> list[int] | int:
    """Set every BLAS to one thread; returns the previous counts (for ``_restore_blas``): an
    int when the compiled module holds the one BLAS itself (``blas_hold_one``)."""
    libs = _blas()
    if _direct is not None:
        return _direct.blas_hold_one()
    previous = []
    for lib in libs:
        n = lib.get()
        previous.append(n)
        if n != 1:
            lib.set(1)
    return previous


def _restore_blas(previous: list[int] | int) -> None:
    if _direct is not None:
        _direct.blas_restore(previous)
        return
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
