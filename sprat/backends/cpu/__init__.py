"""The fast cpu backend: BLAS for contractions, compiled kernels for everything memory-bound
(DESIGN §4).

``CpuBackend(num_threads)`` runs the nodes its kernels can handle exactly (``supports``);
the scheduler sends the others to the reference backend. The kernels' loops are compiled ahead
of time by the package's build (Cython, ``compiled/``: no JIT at run time); they split their
work into ``num_threads`` slots on OpenMP's pool and call BLAS one thread per slot, so the
session runs them inside ``sprat.backends.cpu.threading.limits(num_threads)`` (BLAS held to one
thread); ``CpuBackend.run_context()`` returns that context for the session.
"""

from __future__ import annotations

import numpy as np

from ...errors import KernelError, SpratError
from ...ir.graph import Node
from ...ir.shapes import infer
from ...ir.tensorinfo import TensorInfo
from ..base import Backend, Kernel, PackCache
from ._math import ACT, act_of
from .kernels import KERNELS, kernel_class
from .threading import clamp, configure, limits

__all__ = ["ACT", "KERNELS", "CpuBackend", "act_of", "configure", "limits"]


def _residual_matches(node: Node, ins, cls) -> bool:
    """A fused residual must be float32 with exactly the first output's shape: the kernels
    add it element by element without broadcasting. With ``_residual_pad`` (a kernel class
    that takes it, ``residual_pad``): the channel axis short by that many."""
    res = ins[-1]
    if res is None or res.dtype != np.float32:
        return False
    shape = list(infer(node, ins)[0][0])
    pad = node.attrs.get("_residual_pad", 0)
    if pad:
        axis = -1 if node.attrs.get("_layout") == "NHWC" else 1
        if not cls.residual_pad or not shape or shape[axis] <= pad:
            return False
        shape[axis] -= pad
    return tuple(res.shape) == tuple(shape)


class CpuBackend(Backend):
    """The CPU backend: fast float32 kernels where one applies (``has_fast_kernel``), the
    reference kernels for every other op, so as a backup it takes any node (MNN's CPU backend).
    ``num_threads``: work slots per kernel (clamped to OpenMP's thread limit). Raises ValueError
    for a non-positive ``num_threads``."""

    name = "cpu"

    def __init__(self, num_threads: int = 1, packs: PackCache | None = None,
                 precision: str = "normal", memory: str = "normal"):
        from ..reference import ReferenceBackend

        self.num_threads = clamp(num_threads)
        self.packs = packs
        self.precision = precision
        self.memory = memory
        self._reference = ReferenceBackend()

    def supports(self, node: Node, ins: list[TensorInfo | None]) -> bool:
        return self.has_fast_kernel(node, ins) or self._reference.supports(node, ins)

    def has_fast_kernel(self, node: Node, ins: list[TensorInfo | None]) -> bool:
        """Whether a fast kernel handles this exact node (attrs, dtypes, shapes)."""
        cls = kernel_class(node)
        if cls is None:
            return False
        # NOTE: empty constants (e.g. Reduce axes=[]) are parameters, not data
        if not cls.empty_ok and any(i is not None and i.size == 0 and i.value is None
                                    for i in ins):
            return False
        # NOTE: only a deliberate "no" means no. An exception here is a bug in a kernel's
        # ``supports``: swallowing it would turn the bug into a silently slow run.
        try:
            if node.attrs.get("_residual") and not _residual_matches(node, ins, cls):
                return False
            return bool(cls.supports(node, ins))
        except SpratError:
            raise
        except Exception as e:
            raise KernelError(node.name, node.op_type,
                              f"the cpu kernel's supports() failed: {type(e).__name__}: {e}") from e

    def make_kernel(self, node: Node, ins: list[TensorInfo | None] | None = None) -> Kernel:
        """The fast kernel when ``has_fast_kernel(node, ins)`` (assumed when ``ins`` is None),
        else the reference kernel."""
        if ins is None or self.has_fast_kernel(node, ins):
            kernel = kernel_class(node)(node, self.num_threads, self.packs)
            kernel.precision, kernel.memory = self.precision, self.memory
            return kernel
        return self._reference.make_kernel(node)

    def describe(self) -> dict:
        """What ``Session.info()`` reports of this backend: ``cpu_path``, the compiled
        kernels' build that runs on this CPU (``baseline`` or ``avx2``), and ``blas``."""
        from .compiled import BLAS, VARIANT

        return {"cpu_path": VARIANT, "blas": BLAS}

    def run_context(self):
        """Entered by the Session around every run: BLAS held to one thread (the kernels' work
        slots are the one pool; see ``threading``). Without it BLAS threads and the slots'
        threads fight for the cores (measured 40x slower end to end on 2 cores). The context
        is reusable: a run state makes it once and enters it on each of its runs
        (``executor.execute``)."""
        return limits(self.num_threads)
