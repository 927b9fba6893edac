"""The cpu backend's kernel base: a Kernel that knows how many thread slots to split work into."""

from __future__ import annotations

import numpy as np

from ..base import Kernel, PackCache, WorkspaceSpec
from .compiled import kernels as ck

# NOTE: a parallel region costs ~5-10 us while Numba's workers spin, but 50-100 us once they
# have gone to sleep between sparse regions (measured: PP-OCR v2 cls at 2 threads ran slower than
# at 1 with every conv parallel). Below ~0.5 MB of memory-bound work or 256K multiply-adds a
# kernel runs on one thread (``bench``-style A/B at 2 threads, 256K against 1M: PP-OCR v2 cls
# 0.85-0.88x the time, 64K and 512K slower than 256K; PP-OCRv4 rec/det and NudeNet unchanged
# within noise). Measured in the Numba build; re-measured on the compiled kernels (OpenMP
# regions, AVX2 EPYC, 2026-11-27): convs from 64K multiply-adds (depthwise 32K) against these,
# two sessions in one process at 2 threads: MediaPipe face detection 0.97x, iris landmark
# 1.03x, PP-OCR v2 cls 1.05x, MobileNetV2/V3-small and hand landmark unchanged: kept.
PARALLEL_MIN_ELEMENTS = 1 << 17
PARALLEL_MIN_MACS = 1 << 18
# NOTE: an 8-bit (de)quantising elementwise op costs more per value than a float copy (a
# conversion, scale, rounding and clamp: QuantizeLinear ~0.2 ns, QLinearAdd ~0.3 ns, against
# ~0.1 for a float add), so its second slot pays at fewer values. Measured one op at 1 and 2
# slots over 4K-200K values (bench-style medians): QuantizeLinear 1.17x at 16K, 1.44x at 32K;
# QLinearAdd 1.30x at 16K, 1.74x at 75K; DequantizeLinear 0.80x at 16K, 1.07x at 32K, 1.33x
# at 62K. Below these counts one slot: PARALLEL_MIN_QUANT for the ops that round,
# PARALLEL_MIN_DEQUANT for DequantizeLinear.
PARALLEL_MIN_QUANT = 1 << 14
PARALLEL_MIN_DEQUANT = 1 << 15


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
    #: whether the kernel adds a residual narrower than its output (``_residual_pad``)
    residual_pad = False

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

    def binding(self, ws, arrays: tuple, make):
        """``make()``, made once per binding of ``arrays`` (the run's input and output arrays,
        compared by identity) and kept in the workspace ``ws`` (one per run state): a run
        state hands the same arrays every run."""
        ids = tuple(map(id, arrays))
        b = ws.memo
        if b is None or b[0] != ids:
            # NOTE: ``arrays`` is kept so that the ids cannot be reused by new objects
            b = ws.memo = (ids, arrays, make())
        return b[2]

    #: what ``run`` is, for the run state's flat list of calls (``RunState.make_flat``):
    #: ``"call"``, one ``bound_call``; ``"calls"``, the calls of one ``binding`` run in order;
    #: None (default), anything else (run is called as it is). Only a run that does nothing
    #: but those calls may say so: the flat list replays them without calling ``run``.
    flat_run = None

    def flat_calls(self, ws) -> list | None:
        """``Kernel.flat_calls``: the calls of ``bound_call`` / ``binding`` per ``flat_run``,
        those of the compiled entries that can (``ck.BOUND_CALLS``) with their arguments
        parsed once here (``ck.bound``) rather than on every replay."""
        memo = ws.memo
        if self.flat_run is None or memo is None:
            return None
        calls = [memo[2]] if self.flat_run == "call" else memo[2]
        return [ck.bound(fn, args) for fn, args in calls]

    def bound_call(self, ws, arrays: tuple, make) -> None:
        """Run ``fn(*args)`` with ``(fn, args) = make()``, the argument tuple built once per
        ``binding`` of ``arrays``, not per call."""
        b = ws.memo
        if b is not None and b[0] == tuple(map(id, arrays)):  # NOTE: the hot path, inlined
            fn, args = b[2]
        else:
            fn, args = self.binding(ws, arrays, make)
        fn(*args)

    def bind_constants(self, ins, which) -> None:
        """Keep C-contiguous arrays of the constant inputs among positions ``which``; ``arg``
        then returns them instead of the arrays given to run (the compiled entries take
        read-only weights as they are: their inputs are ``const`` memoryviews)."""
        self.consts = {k: own_if_small(ins[k].value) for k in which
                       if k < len(ins) and ins[k] is not None and ins[k].value is not None}

    def arg(self, ins, k):
        """Input ``k`` for run: the bound constant when there is one, else ``ins[k]``."""
        c = self.consts.get(k)
        return ins[k] if c is None else c


# NOTE: below this size a constant a kernel reads at run (a bias, a scale) is copied out of the
# file's mapping: the page cache maps files in folios of up to 2 MiB, so reading 384 bytes of
# bias maps the whole folio around it again, packed weights whose pages were given back
# included (ddddocr det: +10 MiB of resident file pages during the first run)
SMALL_CONSTANT_BYTES = 1 << 16


def own_if_small(a: np.ndarray) -> np.ndarray:
    """``a`` C-contiguous; a copy of its own when it is smaller than ``SMALL_CONSTANT_BYTES``
    and views other memory (see the note above)."""
    if a.nbytes < SMALL_CONSTANT_BYTES and a.base is not None:
        return np.array(a, order="C", copy=True)
    return np.ascontiguousarray(a)


def scratch(nt: int, size: int, dtype=np.float32, zeroed: bool = False) -> WorkspaceSpec:
    """A workspace of ``size`` elements per work slot, shape (nt, size rounded up to 64 bytes):
    each row starts on a 64-byte boundary (the arena is 64-byte aligned)."""
    dtype = np.dtype(dtype)
    per_line = 64 // dtype.itemsize
    return WorkspaceSpec((nt, size + (-size) % per_line), dtype, zeroed)
