"""``njit`` for the cpu backend's kernels: Numba's, with a disk cache that loads without
refreshing Numba's whole target context.

Why: Numba's ``Cache.load_overload`` starts every cache read with ``target_context.refresh()``,
which imports every lowering module Numba has (``numba.np.*``, ``numba.cpython.*``, typed
containers, jitclass, ...; ``numba.np.arraymath`` in turn imports ``scipy.linalg`` to probe for
BLAS when SciPy is installed). None of it is needed to load a kernel that is already compiled:
measured on PP-OCR v2 cls in fresh processes (with and without it), that refresh was 0.3 s
and 27 MiB of the cold start (docs/benchmarks.md, "Cold start and memory: where they go").

What a cached kernel does need is Numba's runtime (NRT) initialised, because kernels allocate
through it; ``KernelCache.load_overload`` does exactly that and then reads the cache as Numba
does. Other set-up travels with the cached entry (its ``reload_init`` hooks, e.g. the parallel
threading layer for ``parallel=True`` kernels, run as before). A cache miss compiles through
Numba's compiler, which refreshes the context itself, so a first run is unchanged.

If the Numba installed lacks the pieces this relies on (``FunctionCache``, its
``_load_overload``, ``Dispatcher._cache``), ``njit`` is plain ``numba.njit``.
"""

from __future__ import annotations

import numba

try:
    from numba.core.caching import FunctionCache
    from numba.core.runtime import rtsys

    _FAST_LOAD = hasattr(FunctionCache, "_load_overload")
except ImportError:  # NOTE: a Numba without these internals: keep its own cache behaviour
    FunctionCache = object
    _FAST_LOAD = False


class KernelCache(FunctionCache):
    """Numba's per-function disk cache (same files, same keys) minus the registry refresh."""

    def load_overload(self, sig, target_context):
        rtsys.initialize(target_context)
        return self._load_overload(sig, target_context)


def njit(**options):
    """``numba.njit(**options)`` whose ``cache=True`` loads through ``KernelCache``.

    Usage: ``@njit(cache=True, error_model="numpy", nogil=True)``. Options are Numba's.
    """
    def decorate(fn):
        dispatcher = numba.njit(**options)(fn)
        if options.get("cache") and _FAST_LOAD and hasattr(dispatcher, "_cache"):
            dispatcher._cache = KernelCache(dispatcher.py_func)
        return dispatcher
    return decorate
