"""Binds the compiled kernels' ``sgemm`` (``compiled/common.pxi``) to NumPy's own BLAS.

NumPy's wheels ship OpenBLAS (``libscipy_openblas64_``); its ``cblas_sgemm`` is found through
threadpoolctl (the library NumPy loaded, no extra import) and handed to the compiled module
as a function pointer. 64-bit integer symbols are tried first. With no usable BLAS (or with
``SPRAT_NO_BLAS`` set, which lets the tests exercise it) the compiled ``sgemm`` keeps its slow
portable loop and a warning is logged.

NOTE: the same search as ``_blas.py`` (the Numba binding, still used by the kernels not yet
compiled), kept free of Numba so that compiled kernels import none of it.
"""

from __future__ import annotations

import ctypes
import logging
import os

from .compiled import kernels as ck

log = logging.getLogger(__name__)

# (symbol name, 64-bit integers?) in the order tried; scipy-openblas wheels prefix and suffix.
CANDIDATES = (
    ("scipy_cblas_sgemm64_", True),
    ("cblas_sgemm64_", True),
    ("cblas_sgemm", False),
    ("scipy_cblas_sgemm", False),
)

KIND = "none"  # what ``bind`` found: "ilp64", "lp64", or "portable" (no BLAS)
_keep: list = []  # the ctypes libraries, kept loaded


def find() -> tuple[int, bool] | None:
    """(address, is_ilp64) of the ``cblas_sgemm`` of the BLAS NumPy loaded, or None."""
    if os.environ.get("SPRAT_NO_BLAS"):
        return None
    from threadpoolctl import threadpool_info

    for info in threadpool_info():
        if info.get("user_api") != "blas":
            continue
        try:
            lib = ctypes.CDLL(info["filepath"])
        except OSError:
            continue
        for name, ilp64 in CANDIDATES:
            fn = getattr(lib, name, None)
            if fn is not None:
                _keep.append(lib)
                return ctypes.cast(fn, ctypes.c_void_p).value, ilp64
    return None


def bind() -> str:
    """Bind the compiled ``sgemm`` once per process; returns ``KIND``."""
    global KIND
    if KIND != "none":
        return KIND
    found = find()
    if found is None:
        ck.bind_blas(0, False)
        KIND = "portable"
        log.warning("sprat cpu backend: no cblas_sgemm found in NumPy's BLAS; the compiled "
                    "kernels use a slow portable GEMM")
    else:
        ck.bind_blas(found[0], found[1])
        KIND = "ilp64" if found[1] else "lp64"
    return KIND
