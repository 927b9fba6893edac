"""The plan: everything running a model at one set of input shapes needs, as an immutable value.

``build_plan`` computes every shape, folds shape-computing chains to constants, assigns each
node a backend, prepares its kernel, and lays out one arena for the intermediate tensors and
the kernels' workspaces. A ``Plan`` holds no array it writes: a ``RunState``
(``sprat.runtime.state``) owns the arena of one caller, so two run states run one plan at once
(tract's ``SimplePlan`` / ``SimpleState``; MNN's ``Session::resize``, which plans once per
input shape).

Data-dependent shapes (NonZero, Unique, NonMaxSuppression, TopK with a computed k, a Loop's scan
outputs, an If whose branches differ, ...): the plan is split at the first such node
(``Plan.dynamic``). The nodes before it are planned as above; the node runs as a dynamic node
(it allocates its outputs); the rest is planned when those shapes are known, as a plan of its
own, once per signature of them (``Plan.next``, memoised) — and may split again further on.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import NamedTuple

import numpy as np

from ..backends.base import Backend, DynamicKernel, Kernel
from ..backends.reference import evaluate
from ..errors import KernelError, ShapeError, SpratError
from ..ir.flops import node_flops
from ..ir.graph import MISSING, Graph, Node, contiguous
from ..ir.shapes import DataDependentShape
from ..ir.shapes.control import constant_infos, infer_step
from ..ir.subgraphs import has_subgraphs, inline_decided
from ..ir.tensorinfo import TensorInfo
from ..memory import pages
from ..memory.lifetimes import lifetimes
from ..memory.planner import ALIGN, plan_memory
from .assign import assign

# NOTE: plans of the graph after a dynamic node kept per plan (one per signature of the dynamic
# outputs' shapes); the oldest is dropped beyond this (a NonZero whose count changes every run
# must not grow memory without bound).
MAX_DYNAMIC_PLANS = 16


class OpInfo(NamedTuple):
    """What a run callback learns about the op it is called for (MNN ``OperatorInfo``).

    ``flops``: floating-point operations of one run of the op (multiply-add = 2) at the planned
    shapes; ``backend``: the kernel family that runs it (``"cpu"`` or ``"reference"``).
    """

    name: str
    type: str
    flops: int
    backend: str


class Step(NamedTuple):
    """One kernel call. ``ins``/``outs``: value indices (``MISSING`` for an absent optional
    input); ``workspaces``: the arena slots of the kernel's declared workspaces;
    ``out_infos`` is None for a dynamic node (shapes known only once it has run)."""

    node: Node
    kernel: Kernel
    ins: tuple[int, ...]
    outs: tuple[int, ...]
    workspaces: tuple[int, ...]
    in_infos: tuple
    out_infos: tuple | None
    info: OpInfo


class Layout(NamedTuple):
    """Where every slot of the arena is: ``offsets`` in bytes from the arena's start, ``size``
    bytes in all, every offset a multiple of ``align``."""

    offsets: Mapping[int, int]
    size: int
    align: int


@dataclass(frozen=True, eq=False)
class Plan:
    """An immutable plan (``build_plan``). Slots are value indices of ``graph``, and indices
    from ``len(graph.values)`` on for workspaces.

    ``steps``: the kernel calls in order; ``slots``: shape and dtype of every arena slot, placed
    by ``layout``; ``aliases``: ``{output value: input value}`` of view ops and of outputs
    written over a dying input (``Kernel.inplace_of``): one set of bytes;
    ``zeroed``: workspace slots zero-filled once per run state; ``constants``: values known
    when planning that steps read or the graph returns; ``bound``: values whose arrays a run
    supplies (a later segment's graph inputs and dynamic outputs; values planned by the
    segments before are read from their run state); ``input_uses`` / ``output_uses``: where
    each graph input / output appears in the steps, as ``(step, side, position)``;
    ``dynamic``: the dynamic node that ends this plan, or None; ``contexts``: backends whose
    ``run_context`` a run enters.
    """

    graph: Graph
    shapes: Mapping[str, tuple]
    steps: tuple[Step, ...]
    layout: Layout
    slots: Mapping[int, TensorInfo]
    aliases: Mapping[int, int]
    zeroed: frozenset
    constants: Mapping[int, np.ndarray]
    bound: frozenset
    input_uses: tuple
    output_uses: Mapping[str, tuple]
    dynamic: Step | None
    contexts: tuple
    _tail: _Tail | None

    @property
    def workspace_bytes(self) -> int:
        """The most arena bytes the kernels' workspaces hold at once: the zeroed ones (alive
        for the whole plan) plus the largest set one step uses (the others share bytes)."""
        zeroed = sum(self.slots[w].nbytes for w in self.zeroed)
        step = max((sum(self.slots[w].nbytes for w in s.workspaces if w not in self.zeroed)
                    for s in self.steps), default=0)
        return zeroed + step

    def describe(self, offsets: bool = True) -> str:
        """The plan as text: one line per step with its backend, and with ``offsets`` the
        dtype, shape and arena offset of every output (``const`` for a folded value)."""
        lines = [f"arena {self.layout.size} bytes; inputs {dict(self.shapes)}"]
        for s in self.steps:
            line = f"{s.node.name}: {s.node.op_type} -> {s.info.backend}"
            if offsets:
                line += "  " + ", ".join(
                    f"{i.dtype}{list(i.shape)}@{self.layout.offsets.get(v, 'const')}"
                    for v, i in zip(s.outs, s.out_infos))
            lines.append(line)
        return "\n".join(lines)

    def next(self, shapes: tuple) -> Plan:
        """The plan of the graph after ``dynamic``, whose outputs have ``shapes`` (a tuple of
        ``(shape, dtype)``): planned on first use, then memoised (at most MAX_DYNAMIC_PLANS)."""
        return self._tail.next(shapes)


class _Tail:
    """What planning the rest of the graph after a dynamic node needs, and the plans made."""

    def __init__(self, builder: _Builder, cut: int, known: dict, bound: frozenset):
        self.builder, self.cut, self.known, self.bound = builder, cut, known, bound
        self.plans: dict = {}
        self.lock = threading.Lock()

    def next(self, shapes: tuple) -> Plan:
        with self.lock:
            plan = self.plans.get(shapes)
            if plan is None:
                if len(self.plans) >= MAX_DYNAMIC_PLANS:
                    self.plans.pop(next(iter(self.plans)))
                known = dict(self.known)
                node = self.builder.graph.nodes[self.cut]
                for o, (shape, dtype) in zip(node.outputs, shapes):
                    known[o] = TensorInfo(shape, np.dtype(dtype))
                plan = self.plans[shapes] = self.builder.segment(
                    self.cut + 1, known, self.bound | set(node.outputs))
            return plan


class _Evaluate(DynamicKernel):
    """A dynamic node run by the reference kernels (NumPy allocates the outputs)."""

    backend = "reference"

    def run_dynamic(self, ins, ws):
        return [contiguous(a) for a in evaluate(self.node, ins)]


def build_plan(graph: Graph, shapes: Mapping[str, tuple], backends: Sequence[Backend],
               backup: Backend, *, values: Mapping[str, np.ndarray] | None = None,
               dtypes: Mapping[str, np.dtype] | None = None, split: bool = True,
               exclusive: bool = False) -> Plan:
    """The plan of ``graph`` for input ``shapes`` (``{input name: shape}``, every input).

    Each node runs on the first of ``backends`` that supports it, else on ``backup``.
    ``values``: contents of (small integer) inputs the plan may fold; ``dtypes``: input dtypes
    overriding the declared ones (subgraph inputs); ``split=False``: raise DataDependentShape
    instead of splitting the plan at a dynamic node; ``exclusive``: every tensor gets bytes of
    its own (run callbacks may skip an op, whose outputs must keep their previous contents).
    Raises ShapeError, UnsupportedOpError, KernelError (a kernel's prepare failed) and
    DataDependentShape (with ``split=False``)."""
    known = constant_infos(graph)
    for i in graph.inputs:
        v = graph.values[i]
        dt = dtypes.get(v.name) if dtypes is not None else None
        if dt is None:
            dt = v.dtype if v.dtype is not None else np.dtype(np.float32)
        known[i] = TensorInfo(tuple(shapes[v.name]), np.dtype(dt),
                              None if values is None else values.get(v.name))
    if any(has_subgraphs(n) for n in graph.nodes):
        # NOTE: the builder inlines the branches the shapes decide (``infer_nodes``) into a copy
        graph = replace(graph, values=list(graph.values), nodes=list(graph.nodes))
    builder = _Builder(graph, tuple(backends), backup, split, exclusive,
                       MappingProxyType({k: tuple(s) for k, s in shapes.items()}))
    # NOTE: planning runs in the backends' run contexts too: packing may call NumPy's BLAS,
    # whose own worker threads, left at their default count, then spin on the second core for
    # ~0.1 s and starve the first run's OpenMP worker (PP-OCR v2 cls at 2 threads: a first run
    # of 15-20 ms instead of 2.5)
    with contextlib.ExitStack() as stack:
        for b in builder.contexts:
            stack.enter_context(b.run_context())
        return builder.segment(0, known, frozenset())


def view_aliases(pending, kernels, sizes: dict, spans: dict, known) -> dict[int, int]:
    """``{output: root}`` for the steps whose kernel declares that its output holds an input's
    bytes unchanged (``Kernel.view_of``, as onnxruntime's ``KernelDefBuilder::Alias``) when
    both are arena tensors of the same bytes: the output is dropped from ``sizes`` and the
    root's span grows to cover it (both updated in place). Callers place aliases at their
    root's offset."""
    root: dict[int, int] = {}
    for (node, _, _), kernel in zip(pending, kernels):
        if kernel.view_of is None or len(node.outputs) != 1:
            continue
        i, o = node.inputs[kernel.view_of], node.outputs[0]
        r = root.get(i, i)
        if r not in sizes or o not in sizes or known[i].dtype != known[o].dtype \
                or known[i].nbytes != known[o].nbytes:
            continue
        root[o] = r
        spans[r] = (min(spans[r][0], spans[o][0]), max(spans[r][1], spans[o][1]))
        del sizes[o]
    return root


def inplace_aliases(pending, kernels, sizes: dict, spans: dict, known, aliases: dict,
                    inputs) -> None:
    """Add to ``aliases`` (``{value: root}``, ``view_aliases``' result) the steps whose kernel
    may write output 0 over an input (``Kernel.inplace_of``) where that input's bytes die at
    the step: an arena tensor of output 0's bytes, not a graph input (``inputs``), whose span
    (its views' included) ends at this step, read by no other input of the step. (The graph's
    outputs and the values a later plan reads never die: ``lifetimes`` keeps them past the last
    step.) As ``view_aliases``: the output is dropped from ``sizes`` and the root's span grows
    to cover it and its views (all updated in place)."""
    for t, ((node, _, _), kernel) in enumerate(zip(pending, kernels)):
        k = kernel.inplace_of
        if k is None or not node.outputs or not 0 <= k < len(node.inputs):
            continue
        i, o = node.inputs[k], node.outputs[0]
        r = aliases.get(i, i)
        if (r not in sizes or o not in sizes or r in inputs or spans[r][1] != t
                or known[i].dtype != known[o].dtype or known[i].nbytes != known[o].nbytes
                or any(aliases.get(j, j) == r for n, j in enumerate(node.inputs) if n != k)):
            continue
        for v, root in aliases.items():  # the views of the output: now of the input's bytes
            if root == o:
                aliases[v] = r
        aliases[o] = r
        spans[r] = (spans[r][0], max(spans[r][1], spans[o][1]))
        del sizes[o]


class _Builder:
    """Plans segments of one graph with one set of backends and options."""

    def __init__(self, graph, backends, backup, split, exclusive, shapes):
        self.graph, self.backends, self.backup = graph, backends, backup
        self.split, self.exclusive, self.shapes = split, exclusive, shapes
        seen = {id(b): b for b in (*backends, backup)}
        self.contexts = tuple(b for b in seen.values() if hasattr(b, "run_context"))

    def infer_nodes(self, start: int, known: dict):
        """Shapes of the nodes from ``start`` on, folding what is known, into ``known``.
        Returns ``(pending steps, index of the first dynamic node or None)``. Before the
        first dynamic node, a control-flow node whose path the known values decide is replaced
        by that path's nodes (``sprat.ir.subgraphs.inline_decided``)."""
        pending = []  # (node, ins infos, outs infos)
        k = start - 1
        while k + 1 < len(self.graph.nodes):
            k += 1
            node = self.graph.nodes[k]
            # NOTE: only the first segment inlines: its shapes and values are fixed, while the
            # segments after a dynamic node share this graph across their shapes
            if start == 0 and inline_decided(self.graph, k, known):
                k -= 1
                continue
            try:
                step = infer_step(node, known)
            except DataDependentShape:
                if not self.split:
                    raise
                return pending, k
            if step is not None:
                pending.append((node, *step))
        return pending, None

    def make_kernel(self, node, ins, outs) -> Kernel:
        """The prepared kernel of ``node``; ``outs=None``: a dynamic node (a DynamicKernel)."""
        backend = assign(node, ins, self.backends, self.backup)
        kernel = backend.make_kernel(node, ins)
        if outs is None and not isinstance(kernel, DynamicKernel):
            kernel = _Evaluate(node)
        try:
            kernel.prepare(ins, outs)
        except SpratError:
            raise
        except Exception as e:
            raise KernelError(node.name, node.op_type, f"prepare failed: {e}") from e
        if kernel.packed:
            # NOTE: right after each kernel packs, so the peak holds one weight twice, not all
            pages.release(ins[k].value for k in kernel.packed if ins[k] is not None)
        return kernel

    def read_from(self, start: int) -> set[int]:
        """Values read by the nodes from ``start`` on, and the graph outputs."""
        out = set(self.graph.outputs)
        for n in self.graph.nodes[start:]:
            out.update(i for i in n.inputs if i != MISSING)
        return out

    def segment(self, start: int, known: dict, bound: frozenset) -> Plan:
        """The plan of the nodes from ``start`` up to the next dynamic node. ``bound``: values
        whose arrays each run supplies."""
        g = self.graph
        root = start == 0
        pending, cut = self.infer_nodes(start, known)
        if cut is None:
            unproduced = [g.values[i].name for i in g.outputs if i not in known]
            if unproduced:
                raise ShapeError(f"graph output(s) {unproduced} are computed by no node sprat "
                                 f"runs (e.g. training-only outputs)")
        planned = set(g.inputs) if root else set()
        for node, _, _ in pending:
            planned.update(node.outputs)
        later = self.read_from(cut) if cut is not None else set(g.outputs)
        sizes = {v: known[v].nbytes for v in planned}
        spans = lifetimes([(n.inputs, n.outputs) for n, _, _ in pending],
                          keep_alive=(planned & later) | (planned & set(g.outputs)),
                          start_alive=set(g.inputs) if root else set())
        if self.exclusive:
            spans = {v: (0, len(pending)) for v in spans}
        # NOTE: kernels are made (and prepared) before the arena: they say which outputs are
        # views of an input and which workspaces they need
        kernels = [self.make_kernel(node, ins, outs) for node, ins, outs in pending]
        aliases = {} if self.exclusive else view_aliases(pending, kernels, sizes, spans, known)
        if not self.exclusive:
            inplace_aliases(pending, kernels, sizes, spans, known, aliases, set(g.inputs))
        slots = {v: known[v] for v in planned}
        zeroed = set()
        workspaces = []
        for t, kernel in enumerate(kernels):
            mine = []
            for spec in kernel.workspaces:
                slot = len(g.values) + len(slots) - len(planned)
                slots[slot] = TensorInfo(tuple(spec.shape), np.dtype(spec.dtype))
                sizes[slot] = slots[slot].nbytes
                spans[slot] = (0, len(pending)) if spec.zeroed else (t, t)
                if spec.zeroed:
                    zeroed.add(slot)
                mine.append(slot)
            workspaces.append(tuple(mine))
        offsets, total = plan_memory(sizes, spans)
        offsets.update({v: offsets[r] for v, r in aliases.items()})
        steps = tuple(
            Step(node, kernel, tuple(node.inputs), tuple(node.outputs), ws, tuple(ins),
                 tuple(outs), OpInfo(node.name, node.op_type, node_flops(node, ins, outs),
                                     kernel.backend))
            for (node, ins, outs), kernel, ws in zip(pending, kernels, workspaces))
        read = {i for s in steps for i in s.ins} | set(g.outputs)
        constants = {v: known[v].value for v in read
                     if v in known and known[v].value is not None and v not in offsets}
        dynamic = tail = None
        if cut is not None:
            node = g.nodes[cut]
            ins = [None if i == MISSING else known[i] for i in node.inputs]
            kernel = self.make_kernel(node, ins, None)
            dynamic = Step(node, kernel, tuple(node.inputs), tuple(node.outputs), (),
                           tuple(ins), None, OpInfo(node.name, node.op_type, 0, kernel.backend))
            constants.update({v: known[v].value for v in node.inputs
                              if v in known and known[v].value is not None
                              and v not in offsets})
            tail = _Tail(self, cut, known, bound if not root else frozenset(g.inputs))
        return Plan(
            graph=g, shapes=self.shapes, steps=steps,
            layout=Layout(MappingProxyType(offsets), total, ALIGN),
            slots=MappingProxyType(slots), aliases=MappingProxyType(aliases),
            zeroed=frozenset(zeroed), constants=MappingProxyType(constants),
            bound=bound,
            input_uses=tuple(_uses(steps, i) for i in g.inputs) if root else (),
            output_uses=MappingProxyType(self._output_uses(steps, later if cut is not None
                                                             else set(), root)),
            dynamic=dynamic, contexts=self.contexts, _tail=tail)

    def _output_uses(self, steps, later: set, root: bool) -> dict[str, tuple]:
        """Where each graph output produced by a step of this (root) plan appears, for
        binding user arrays (zero-copy outputs). An output the dynamic tail reads stays in
        the arena (the tail was planned with it there)."""
        if not root:
            return {}
        g = self.graph
        produced = {o for s in steps for o in s.outs}
        out = {}
        for i in g.outputs:
            if i not in produced or i in g.inputs or i in later:
                continue
            out[g.values[i].name] = _uses(steps, i) + _uses(steps, i, outputs=True)
        return out


def _uses(steps, value: int, outputs: bool = False) -> tuple:
    """``(step, side, position)`` of every place ``value`` appears among the steps' inputs
    (side 0) or, with ``outputs``, their outputs (side 1)."""
    return tuple((t, int(outputs), k) for t, s in enumerate(steps)
                 for k, v in enumerate(s.outs if outputs else s.ins) if v == value)



class PlanCache:
    """Plans by key, shared by the sessions of one Interpreter (and a ParallelRunner's
    workers): sessions with the same schedule and the same input shapes plan once. Keeps the
    ``size`` plans used last. Thread-safe; two callers asking for one new key may both plan
    it (the first stored wins)."""

    def __init__(self, size: int = 8):
        self.size = size
        self._plans: dict = {}
        self._lock = threading.Lock()

    def get(self, key, make) -> Plan:
        """The plan stored under ``key``, else ``make()`` stored there."""
        with self._lock:
            plan = self._plans.pop(key, None)
            if plan is not None:
                self._plans[key] = plan  # NOTE: most recently used last
                return plan
        plan = make()
        with self._lock:
            plan = self._plans.setdefault(key, plan)
            while len(self._plans) > self.size:
                self._plans.pop(next(iter(self._plans)))
        return plan
