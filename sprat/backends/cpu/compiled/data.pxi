# Compiled kernels of the data family (see kernels.pxi); filled in by the Numba port (issue 12).
