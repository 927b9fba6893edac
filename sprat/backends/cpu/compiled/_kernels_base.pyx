# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, nonecheck=False, embedsignature=True
"""The cpu backend's compiled kernels, baseline build (any CPU of the architecture) (see kernels.pxi)."""

VARIANT = "baseline"

include "kernels.pxi"
