"""Finding NumPy's own BLAS, for the compiled kernels' single-threaded GEMM calls.

Why: the cpu backend runs its parallel loops on its own work slots and calls BLAS from inside
them, one GEMM per block (DESIGN §4); BLAS itself is held to one thread (``threading``). A
maintained BLAS beats our own GEMM, and NumPy already loaded one: its wheels ship OpenBLAS as
``numpy.libs/libscipy_openblas64_*.so`` with ``scipy_``-prefixed, ``64_``-suffixed symbols
(64-bit integers). Binding its ``cblas_sgemm`` address costs nothing at start (no SciPy import,
which is ~0.3 s and 27 MiB). A NumPy built against another BLAS (MKL, a system OpenBLAS with
32-bit integers) is found through threadpoolctl.
"""

from __future__ import annotations

import ctypes
import glob
import os

from ..._logging import logger

# (symbol name, 64-bit integers?) in the order tried; scipy-openblas wheels prefix and suffix.
CANDIDATES = (
    ("scipy_cblas_sgemm64_", True),
    ("cblas_sgemm64_", True),
    ("cblas_sgemm", False),
    ("scipy_cblas_sgemm", False),
)

_keep: list = []  # the ctypes libraries, kept loaded


def _numpy_libs() -> list[str]:
    import numpy

    root = os.path.dirname(os.path.dirname(numpy.__file__))
    return sorted(glob.glob(os.path.join(root, "numpy.libs", "*openblas*.so*")))


def _threadpoolctl_libs() -> list[str]:
    from threadpoolctl import threadpool_info

    return [i["filepath"] for i in threadpool_info() if i.get("user_api") == "blas"]


def find_sgemm() -> tuple[int, bool, str] | None:
    """``(address, ilp64, library path)`` of NumPy's ``cblas_sgemm``, or None (then the
    compiled kernels run a slow portable GEMM; a warning says so). ``SPRAT_NO_BLAS=1``
    pretends there is none (tests of that path)."""
    if os.environ.get("SPRAT_NO_BLAS"):
        return None
    for finder in (_numpy_libs, _threadpoolctl_libs):
        for path in finder():
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            for name, ilp64 in CANDIDATES:
                fn = getattr(lib, name, None)
                if fn is not None:
                    _keep.append(lib)
                    return ctypes.cast(fn, ctypes.c_void_p).value, ilp64, path
    logger(__name__).warning("sprat cpu backend: no cblas_sgemm found in NumPy's BLAS; GEMMs "
                             "run a slow portable loop")
    return None
