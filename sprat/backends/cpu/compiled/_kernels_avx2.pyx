# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, nonecheck=False, embedsignature=True
"""The cpu backend's compiled kernels, AVX2 + FMA + F16C build (see kernels.pxi)."""

VARIANT = "avx2"

include "kernels.pxi"
