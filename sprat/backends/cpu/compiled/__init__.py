"""The cpu backend's compiled kernels (Cython, built by the package's own build: ``setup.py``).

One source (``kernels.pxi``) is compiled twice: ``_kernels_base`` for any CPU of the
architecture, ``_kernels_avx2`` with AVX2 + FMA + F16C. ``kernels`` is the variant this CPU runs,
chosen at import; ``SPRAT_CPU=baseline`` forces the baseline (tests check both give the
reference's results). ``VARIANT`` names the one in use (``Session.info()["cpu_path"]``); their
GEMMs call NumPy's own BLAS, bound at import (``BLAS``, see ``blas.py``).

Raises ImportError (naming the fix) when the extension was not built, e.g. a source tree used
without ``pip install -e .``.
"""

from __future__ import annotations

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


kernels = _pick()
VARIANT: str = kernels.VARIANT


def _bind_blas() -> tuple[str, str | None]:
    from ..blas import find_sgemm

    found = find_sgemm()
    if found is None:
        kernels.bind_blas(0, False)
        return "portable", None
    address, ilp64, path = found
    kernels.bind_blas(address, ilp64)
    return ("ilp64" if ilp64 else "lp64"), path


#: which GEMM the kernels call: "ilp64" / "lp64" (NumPy's BLAS) or "portable" (none found), and
#: the path of that BLAS library (None for "portable")
BLAS, BLAS_LIBRARY = _bind_blas()
