"""The backend interface: a Backend decides which nodes it runs and makes one Kernel per node.

A Kernel splits ``prepare`` (once per input shape: choose the algorithm, pack weights, size
workspaces) from ``run`` (every call: compute into preallocated outputs) — MNN's
``Execution::onResize`` / ``onExecute``.
"""

from __future__ import annotations

import threading
import weakref
from typing import NamedTuple

import numpy as np

from ..ir.graph import Node
from ..ir.tensorinfo import TensorInfo


class WorkspaceSpec(NamedTuple):
    """Scratch memory a kernel needs while it runs, declared by ``prepare`` (MNN's
    ``onAcquireBuffer(..., DYNAMIC)``): the planner places it in the arena with the tensors.

    ``zeroed``: the kernel relies on the bytes it never writes staying zero (e.g. the padding
    border of a staging buffer): such a workspace gets bytes of its own, zero-filled once when
    a run state is made, instead of bytes shared with other tensors."""

    shape: tuple
    dtype: np.dtype
    zeroed: bool = False

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


class Workspace:
    """What ``Kernel.run`` gets as ``ws``: the kernel's memory in one run state.

    ``buffers``: one array per ``WorkspaceSpec`` the kernel declared, in order (views of the
    run state's arena); ``memo``: a slot the kernel may fill with what it derives from the
    arrays it is run on (an argument tuple, nested run states), kept with the run state and
    never shared between two of them. A kernel itself keeps no per-call state."""

    __slots__ = ("buffers", "memo")

    def __init__(self, buffers: tuple = ()):
        self.buffers = tuple(buffers)
        self.memo = None

    @classmethod
    def allocate(cls, kernel: Kernel, fill=None) -> Workspace:
        """A workspace of fresh arrays for ``kernel`` (prepared), outside any arena: for
        running a kernel on its own (tests, kernel benchmarks). ``fill``: the value of the
        buffers not declared ``zeroed`` (default 0; a test passes NaN to find a kernel that
        reads scratch it did not write, as it would read another tensor's bytes in the
        arena). A NaN fill of an integer buffer fills its bytes with 0xA5 instead (garbage of
        that type; NumPy's cast of NaN is undefined and warns)."""
        def make(s):
            value = 0 if s.zeroed or fill is None else fill
            if isinstance(value, float) and value != value and np.dtype(s.dtype).kind not in "fc":
                a = np.empty(s.shape, s.dtype)
                a.reshape(-1).view(np.uint8).fill(0xA5)
                return a
            return np.full(s.shape, value, s.dtype)

        return cls(make(s) for s in kernel.workspaces)


class Kernel:
    """Runs one node. Subclasses override ``prepare`` and ``run``; ``backend`` names the kernel
    family that really computes (what ``Session.info()`` reports per node).

    ``run(ins, outs, ws)`` receives the input arrays (None for an absent optional input), writes
    the results into ``outs`` (arrays preallocated with the shapes and dtypes the shape function
    gave) and uses ``ws`` (a ``Workspace``: the buffers ``prepare`` declared in ``workspaces``,
    and a memo) for everything that changes while it runs: the same kernel may run in two run
    states at once, from two threads. It must not keep references to ``ins`` or ``outs``.
    """

    backend: str = "?"
    # NOTE: the input whose bytes output 0 holds unchanged (Reshape, Flatten, Squeeze, ...),
    # or None: the planner then gives the output that input's arena bytes (onnxruntime's
    # ``KernelDefBuilder::Alias``, MNN's reshape-as-view), and ``run`` finds nothing to copy
    view_of: int | None = None
    # NOTE: the input whose bytes output 0 may overwrite (onnxruntime's
    # ``KernelDefBuilder::MayInplace``): ``run`` reads each element of that input only where it
    # writes the same element of output 0, and before it does. Where that input dies at this
    # node the planner gives output 0 its arena bytes (a conv's fused residual: the sum is
    # stored over it, no fresh output lines fetched from memory)
    inplace_of: int | None = None
    #: the scratch ``run`` needs, set by ``prepare`` (placed in the arena by the planner)
    workspaces: tuple[WorkspaceSpec, ...] = ()
    #: positions of constant inputs ``prepare`` copied into packed arrays and ``run`` never
    #: reads: the planner gives back their mapped pages (``sprat.memory.pages``)
    packed: tuple[int, ...] = ()

    def __init__(self, node: Node):
        self.node = node

    def prepare(self, ins: list[TensorInfo | None], outs: list[TensorInfo]) -> None:
        """Called once per input shape, before ``run``. Default: nothing to prepare."""

    def run(self, ins: list[np.ndarray | None], outs: list[np.ndarray], ws: Workspace) -> None:
        raise NotImplementedError

    def flat_calls(self, ws: Workspace) -> list | None:
        """The ``(fn, args)`` calls the last ``run`` with workspace ``ws`` made and nothing
        else (the run loop replays them instead of calling ``run``: ``RunState.make_flat``),
        or None (default): ``run`` must be called itself."""
        return None


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
    session calls ``run_dynamic(ins, ws)``, which returns freshly allocated, C-contiguous outputs
    the kernel does not keep. When the shapes are known, the session calls ``run`` as for any
    kernel; the default ``run`` copies the results of ``run_dynamic`` into ``outs``.
    """

    def run_dynamic(self, ins: list[np.ndarray | None], ws: Workspace) -> list[np.ndarray]:
        raise NotImplementedError

    def run(self, ins: list[np.ndarray | None], outs: list[np.ndarray], ws: Workspace) -> None:
        for dst, src in zip(outs, self.run_dynamic(ins, ws)):
            if dst.shape != src.shape:
                raise ValueError(f"kernel produced shape {src.shape}, planned {dst.shape}")
            np.copyto(dst, src, casting="unsafe")
