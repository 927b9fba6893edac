"""The cpu backend's kernel base: a Kernel that knows how many thread slots to split work into."""

from __future__ import annotations

import ctypes

import numpy as np

from ..base import Kernel, PackCache

# NOTE: a parallel region costs ~5-10 us while Numba's workers spin, but 50-100 us once they
# have gone to sleep between sparse regions (measured: PP-OCR v2 cls at 2 threads ran slower than
# at 1). Below ~0.5 MB of memory-bound work or ~1M multiply-adds a kernel runs on one thread.
PARALLEL_MIN_ELEMENTS = 1 << 17
PARALLEL_MIN_MACS = 1 << 20


class CpuKernel(Kernel):
    """Base of every cpu kernel.

    ``threads`` is the number of work slots a kernel splits its parallel loops into (the
    session's ``num_threads``); the Numba pool size itself is set by ``threading.limits``.
    ``precision`` and ``memory`` are the session's ScheduleConfig modes (set by
    ``CpuBackend.make_kernel`` before ``prepare``; a kernel may pick a cheaper-memory or
    reduced-precision path from them). Subclasses implement ``supports(node, ins)``
    (classmethod), ``prepare`` and ``run``.
    """

    backend = "cpu"
    precision = "normal"
    memory = "normal"
    #: whether the kernel handles zero-size inputs (most do not: the reference backend does)
    empty_ok = False

    def __init__(self, node, threads: int = 1, packs: PackCache | None = None):
        super().__init__(node)
        self.threads = int(threads)
        self.packs = packs

    def shared(self, tag: str, make):
        """The array ``make()`` returns, packed once per model: every session created from one
        Interpreter reuses it (MindSpore Lite's PackWeightManager). ``tag`` must name
        everything the packing depends on besides the node's constant inputs."""
        if self.packs is None:
            return make()
        return self.packs.get((self.node.name, tag), make)

    @classmethod
    def supports(cls, node, ins) -> bool:
        raise NotImplementedError

    def bind_constants(self, ins, which) -> None:
        """Keep writable aliases of the constant inputs among positions ``which`` (see
        ``writable_alias``); ``arg`` then returns them instead of the arrays given to run."""
        self._keep: list = []
        self.consts = {k: writable_alias(ins[k].value, self._keep) for k in which
                       if k < len(ins) and ins[k] is not None and ins[k].value is not None}

    def arg(self, ins, k):
        """Input ``k`` for run: the bound constant when there is one, else ``ins[k]``."""
        c = self.consts.get(k)
        return ins[k] if c is None else c


def writable_alias(a: np.ndarray, keep: list) -> np.ndarray:
    """A C-contiguous, *writable-typed* view of ``a``'s memory (no copy when ``a`` is already
    C-contiguous); ``a`` itself is appended to ``keep`` (the caller's list) to stay alive.

    NOTE: weights mapped read-only from a .sprat file are read-only arrays, which Numba types
    (and compiles, and caches) separately from writable ones: one more compiled variant of
    every kernel per operand. The kernels never write their inputs, so they get this alias and
    one signature serves both.
    """
    a = np.ascontiguousarray(a)
    keep.append(a)
    if a.flags.writeable or a.size == 0:
        return a
    raw = ctypes.cast(a.ctypes.data, ctypes.POINTER(ctypes.c_uint8))
    return np.ctypeslib.as_array(raw, (a.nbytes,)).view(a.dtype).reshape(a.shape)
