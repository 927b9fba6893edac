"""ScheduleConfig: how a Session runs (threads, backends, precision, memory)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..backends.registry import BACKENDS

PRECISIONS = ("normal", "high", "low")
MEMORY_MODES = ("normal", "low")
RESIZE_MODES = ("direct", "defer")


@dataclass(frozen=True)
class ScheduleConfig:
    """Options of a Session, checked when created (MNN ``ScheduleConfig``).

    Attributes:
        num_threads: worker threads for kernels and BLAS, >= 1.
        backends: backend names in order of preference; each node goes to the first that
            supports it. Allowed: ``"cpu"`` (fast), ``"reference"`` (NumPy oracle).
        backup: the backend taking every node no backend in ``backends`` supports. The
            ``cpu`` backend runs every op: its fast kernels where they apply, the reference
            kernels for the rest (``Session.info()["backends"]`` says which ran each node).
        precision: ``"normal"``, ``"high"`` or ``"low"``. ``"normal"`` and ``"high"`` compute in
            fp32 everywhere (``"high"``: no reduced-precision shortcut, today the same kernels).
            ``"low"``: Gemm/MatMul with a constant 2-D weight store it as float16 (half the
            bytes; widened to fp32 on the fly, fp32 accumulation) when the product has one row
            (a GEMV: 1.4-2x faster, ``bench/precision.py``), or any number of rows when ``memory="low"`` too
            (slower, smaller). Conv, ConvTranspose, RNNs and all other ops stay fp32. Outputs
            are within 1e-2 of fp32 relative to the largest output (README, "precision").
            Compressed weights (``sprat convert --weights``) are float32 once loaded whatever
            the precision: an fp16 file's GEMM weights are float16 values already (``"low"``
            rounds nothing twice); an int8 file's are rounded once more (docs/weights.md).
        memory: ``"normal"`` or ``"low"`` (MNN ``Memory_Low``): no packed fp32 weight copies
            where a kernel can use the stored weight (Gemm ``transB``, LSTM/GRU), at some speed;
            conv kernels still pack. Compressed weights are expanded to float32 in both modes
            (no kernel computes from fp16/int8 weights; docs/weights.md).
        resize: ``"direct"`` (``Session.resize`` prepares at once) or ``"defer"`` (it prepares
            on the next run), MNN's ``Session_Resize_Direct`` / ``Session_Resize_Defer``.
        profiling: time every op of each run (``Session.info()["op_times_ms"]``); costs a
            clock read per op.
        cache_dir: a directory for the compiled cache (``sprat.runtime.cache``): an ONNX
            model's optimized graph is stored there once and later loads skip conversion and
            optimisation. None (default): no cache. A path-like is stored as a str.

    Raises:
        ValueError: an unknown backend, precision or memory mode (naming the allowed values),
            or ``num_threads`` < 1, or a ``cache_dir`` that is not a non-empty path.
    """

    num_threads: int = 1
    backends: tuple[str, ...] = ("cpu",)
    backup: str = "cpu"
    precision: str = "normal"
    memory: str = "normal"
    resize: str = "direct"
    profiling: bool = False
    cache_dir: str | None = None
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self):
        if isinstance(self.backends, str):
            object.__setattr__(self, "backends", (self.backends,))
        else:
            object.__setattr__(self, "backends", tuple(self.backends))
        if not isinstance(self.num_threads, int) or isinstance(self.num_threads, bool) \
                or self.num_threads < 1:
            raise ValueError(f"num_threads must be an int >= 1, got {self.num_threads!r}")
        for b in (*self.backends, self.backup):
            if b not in BACKENDS:
                raise ValueError(f"unknown backend {b!r}; allowed: {', '.join(BACKENDS)}")
        if not self.backends:
            raise ValueError(f"backends must name at least one of {', '.join(BACKENDS)}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"unknown precision {self.precision!r}; allowed: {', '.join(PRECISIONS)}")
        if self.memory not in MEMORY_MODES:
            raise ValueError(f"unknown memory mode {self.memory!r}; allowed: {', '.join(MEMORY_MODES)}")
        if self.resize not in RESIZE_MODES:
            raise ValueError(f"unknown resize mode {self.resize!r}; allowed: {', '.join(RESIZE_MODES)}")
        if not isinstance(self.profiling, bool):
            raise ValueError(f"profiling must be True or False, got {self.profiling!r}")
        if self.cache_dir is not None:
            path = (os.fspath(self.cache_dir)
                    if isinstance(self.cache_dir, (str, os.PathLike)) else None)
            if not isinstance(path, str) or not path:
                raise ValueError(f"cache_dir must be a non-empty path (str or os.PathLike) or "
                                 f"None, got {self.cache_dir!r}")
            object.__setattr__(self, "cache_dir", path)
        if self.extra:
            raise ValueError(f"unknown ScheduleConfig options {sorted(self.extra)}")
