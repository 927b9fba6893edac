# Compiled kernels of the conv family (see kernels.pxi); filled in by the Numba port (issue 12).
