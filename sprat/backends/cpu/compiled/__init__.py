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

import importlib
import os

#: the CPU features the ``avx2`` variant is compiled for (``setup.py``: -mavx2 -mfma -mf16c)
AVX2_FLAGS = frozenset({"avx2", "fma", "f16c"})


def _load(name: str):
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ImportError as e:  # pragma: no cover - depends on the installation
        raise ImportError("sprat's compiled kernels are not built: install sprat with "
                          "'python -m pip install -e .' (it compiles them with the C "
                          "compiler)") from e


def cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str] | None:
    """The CPU's feature flags as Linux lists them (the first ``flags`` line of
    /proc/cpuinfo: the kernel lists a vector extension only when it also saves its registers,
    as the baseline module's CPUID check requires), or None without that file (another OS,
    another architecture's format)."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        return None
    return None


def _pick():
    forced = os.environ.get("SPRAT_CPU", "").strip().lower()
    if forced not in ("", "baseline", "avx2"):
        raise ValueError(f"SPRAT_CPU={forced!r}: expected 'baseline' or 'avx2'")
    if forced == "baseline":
        return _load("_kernels_base")
    # NOTE: the flags from /proc/cpuinfo where Linux gives them: loading the baseline module
    # only to ask the CPU cost 1.3-2 ms of every cold start
    flags = cpu_flags()
    avx2 = AVX2_FLAGS <= flags if flags is not None else _load("_kernels_base").cpu_has_avx2()
    if not avx2:
        if forced == "avx2":
            raise ValueError("SPRAT_CPU=avx2, but this CPU lacks AVX2, FMA or F16C")
        return _load("_kernels_base")
    try:
        from . import _kernels_avx2
    except ImportError:  # NOTE: built for another architecture: the baseline only
        return _load("_kernels_base")
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
