"""The backend interface: a Backend decides which nodes it runs and makes one Kernel per node.

A Kernel splits ``prepare`` (once per input shape: choose the algorithm, pack weights, size
workspaces) from ``run`` (every call: compute into preallocated outputs) — MNN's
``Execution::onResize`` / ``onExecute``.
"""

from __future__ import annotations

import threading
import weakref

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
    # NOTE: the input whose bytes output 0 holds unchanged (Reshape, Flatten, Squeeze, ...),
    # or None: the planner then gives the output that input's arena bytes (onnxruntime's
    # ``KernelDefBuilder::Alias``, MNN's reshape-as-view), and ``run`` finds nothing to copy
    view_of: int | None = None

    def __init__(self, node: Node):
        self.node = node

    def prepare(self, ins: list[TensorInfo | None], outs: list[TensorInfo]) -> None:
        """Called once per input shape, before ``run``. Default: nothing to prepare."""

    def run(self, ins: list[np.ndarray | None], outs: list[np.ndarray]) -> None:
        raise NotImplementedError


class Backend:
    """A set of kernels. ``supports`` must be cheap and return False for a node it cannot
    run: only that deliberate "no" means no. An exception from ``supports`` is a bug and
    propagates (as a KernelError naming the node), never read as "not supported"."""

    name: str = "?"

    def supports(self, node: Node, ins: list[TensorInfo | None]) -> bool:
        raise NotImplementedError

    def make_kernel(self, node: Node, ins: list[TensorInfo | None] | None = None) -> Kernel:
        """A kernel for ``node`` (``ins``: the same infos ``supports`` was asked about)."""
        raise NotImplementedError


class PackCache:
    """Packed weights shared by the sessions of one Interpreter: ``(node, tag) -> array``."""

    def __init__(self):
        self._items: dict = {}
        self._lock = threading.Lock()
        self._source: list = [None]

    def items(self) -> list[tuple]:
        """``[(key, packed)]`` of every entry (a snapshot), for the compiled cache."""
        with self._lock:
            return list(self._items.items())

    def set_source(self, source) -> None:
        """Where ``get`` looks before packing: ``source(key)`` returns a stored packed array
        (or list of arrays) for ``key``, or None (then ``make()`` packs it). The compiled cache
        sets this to read its stored packs."""
        self._source[0] = source

    def get(self, key, make):
        with self._lock:
            arr = self._items.get(key)
            if arr is None:
                source = self._source[0]
                if source is not None:
                    arr = source(key)
                if arr is None:
                    arr = make()
                self._items[key] = arr
            return arr

    def when_released(self, fn) -> None:
        """Call ``fn(items)`` with a snapshot ``{key: packed}`` when this cache is collected or
        the process exits (the compiled cache writes new packs then). ``fn`` must not hold a
        reference to this cache."""
        weakref.finalize(self, _call_with_snapshot, fn, self._items, self._lock)

    def ids(self) -> set[int]:
        """``id`` of every shared array (to tell shared memory from a session's own)."""
        out: set[int] = set()

        def walk(v):
            if isinstance(v, np.ndarray):
                out.add(id(v))
            elif isinstance(v, (list, tuple)):
                for x in v:
                    walk(x)

        with self._lock:
            for v in self._items.values():
                walk(v)
        return out

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(_nbytes(v) for v in self._items.values())


def _call_with_snapshot(fn, items: dict, lock) -> None:
    with lock:
        snapshot = dict(items)
    fn(snapshot)


def _nbytes(v) -> int:
    if isinstance(v, np.ndarray):
        return v.nbytes
    return sum(_nbytes(x) for x in v) if isinstance(v, (list, tuple)) else 0


class DynamicKernel(Kernel):
    """A kernel that can allocate its own outputs: for nodes whose output shapes are known only
    once they have run (NonZero, Unique, an If whose branches differ, a Loop's scan outputs).

    ``prepare(ins, outs)`` may be called with ``outs=None`` (output shapes unknown); then the
    session calls ``run_dynamic(ins)``, which returns freshly allocated, C-contiguous outputs the
    kernel does not keep. When the shapes are known, the session calls ``run`` as for any kernel;
    the default ``run`` copies the results of ``run_dynamic`` into ``outs``.
    """

    def run_dynamic(self, ins: list[np.ndarray | None]) -> list[np.ndarray]:
        raise NotImplementedError

    def run(self, ins: list[np.ndarray | None], outs: list[np.ndarray]) -> None:
        for dst, src in zip(outs, self.run_dynamic(ins)):
            if dst.shape != src.shape:
                raise ValueError(f"kernel produced shape {src.shape}, planned {dst.shape}")
            np.copyto(dst, src, casting="unsafe")
