# Compiled kernels of the dense family (see kernels.pxi); filled in by the Numba port (issue 12).
