"""The cpu backend's compiled kernels (Cython, built by the package's own build: ``setup.py``).

One source (``kernels.pxi``) is compiled twice: ``_kernels_base`` for any CPU of the
architecture, ``_kernels_avx2`` with AVX2 + FMA + F16C. ``kernels`` is the variant this CPU runs,
chosen at import; ``SPRAT_CPU=baseline`` forces the baseline (tests check both give the
reference's results). ``VARIANT`` names the one in use (``Session.info()["cpu_path"]``).

At import the kernels' ``sgemm`` is bound to NumPy's own ``cblas_sgemm`` (``_bind_blas``).

Raises ImportError (naming the fix) when the extension was not built, e.g. a source tree used
without ``pip install -e .``.
"""

from __future__ import annotations

import ctypes
import logging
import os

try:
    from . import _kernels_base
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError("sprat's compiled kernels are not built: install sprat with "
                      "'python -m pip install -e .' (it compiles them with the C compiler)") from e


def _pick():
    forced = os.environ.get("SPRAT_CPU", "").strip().lower()
    if forced not in ("", "baseline", "avx2"):
        raise ValueError(f"SPRAT_CPU={forced!r}: expected 'baseline' or 'avx2'")
    if forced == "baseline" or not _kernels_base.cpu_has_avx2():
        if forced == "avx2":
            raise ValueError("SPRAT_CPU=avx2, but this CPU lacks AVX2, FMA or F16C")
        return _kernels_base
    try:
        from . import _kernels_avx2
    except ImportError:  # NOTE: built for another architecture: the baseline only
        return _kernels_base
    return _kernels_avx2


# (symbol name, 64-bit integers?) in the order tried; scipy-openblas wheels prefix and suffix
_BLAS_SYMBOLS = (("scipy_cblas_sgemm64_", True), ("cblas_sgemm64_", True),
                 ("cblas_sgemm", False), ("scipy_cblas_sgemm", False))
_blas_libs: list = []  # keeps the ctypes library loaded


def _bind_blas(module) -> str:
    """Bind ``module``'s ``sgemm`` to the ``cblas_sgemm`` of the BLAS NumPy loaded (found by
    threadpoolctl); returns "ilp64", "lp64" or "none" (no BLAS: a slow portable loop, logged).
    ``SPRAT_NO_BLAS=1`` skips the search (tests of the fallback)."""
    if not os.environ.get("SPRAT_NO_BLAS"):
        import numpy  # noqa: F401  (NOTE: loads the BLAS before threadpoolctl looks)
        from threadpoolctl import threadpool_info

        for info in threadpool_info():
            if info.get("user_api") != "blas":
                continue
            try:
                lib = ctypes.CDLL(info["filepath"])
            except OSError:
                continue
            for name, ilp64 in _BLAS_SYMBOLS:
                fn = getattr(lib, name, None)
                if fn is not None:
                    _blas_libs.append(lib)
                    module.bind_blas(ctypes.cast(fn, ctypes.c_void_p).value, ilp64)
                    return "ilp64" if ilp64 else "lp64"
    logging.getLogger(__name__).warning(
        "sprat cpu backend: no cblas_sgemm found in NumPy's BLAS; GEMMs run a slow loop")
    module.bind_blas(0, False)
    return "none"


kernels = _pick()
VARIANT: str = kernels.VARIANT
BLAS: str = _bind_blas(kernels)
