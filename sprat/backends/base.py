"""The backend interface: a Backend decides which nodes it runs and makes one Kernel per node.

A Kernel splits ``prepare`` (once per input shape: choose the algorithm, pack weights, size
workspaces) from ``run`` (every call: compute into preallocated outputs) — MNN's
``Execution::onResize`` / ``onExecute``.
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import Node
from ..ir.tensorinfo import TensorInfo


class Kernel:
    """Runs one node. Subclasses override ``prepare`` and ``run``; ``backend`` names the kernel
    family that really computes (what ``Session.info()`` reports per node).

    ``run(ins, outs)`` receives the input arrays (None for an absent optional input) and writes the
    results into ``outs``: arrays preallocated with the shapes and dtypes the shape function gave.
    It must not keep references to ``ins`` or ``outs`` between calls beyond what ``prepare`` bound.
    """

    backend: str = "?"

    def __init__(self, node: Node):
        self.node = node

    def prepare(self, ins: list[TensorInfo | None], outs: list[TensorInfo]) -> None:
        """Called once per input shape, before ``run``. Default: nothing to prepare."""

    def run(self, ins: list[np.ndarray | None], outs: list[np.ndarray]) -> None:
        raise NotImplementedError


class Backend:
    """A set of kernels. ``supports`` must be cheap and must not raise for a node it cannot run."""

    name: str = "?"

    def supports(self, node: Node, ins: list[TensorInfo | None]) -> bool:
        raise NotImplementedError

    def make_kernel(self, node: Node, ins: list[TensorInfo | None] | None = None) -> Kernel:
        """A kernel for ``node`` (``ins``: the same infos ``supports`` was asked about)."""
        raise NotImplementedError


def run_context_of(backends) -> list:
    """Context managers the backends want entered around a run (thread limits and the like)."""
    return [b.run_context() for b in backends if hasattr(b, "run_context")]
