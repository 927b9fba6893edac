"""RunState: one caller's memory for running a Plan.

A ``Plan`` (``sprat.schedule.plan``) is immutable and may be shared; a RunState owns what one
call writes: the arena (tensors and kernel workspaces), the slot -> array table, the argument
lists handed to the kernels (with user output arrays bound into them for a zero-copy run), the
kernels' workspaces and memos, the run states of the plans after a dynamic node, per-op timings
and copy counts (tract's ``SimpleState``). Two RunStates of one Plan run at the same time
without sharing a byte they write.
"""

from __future__ import annotations

import numpy as np

from ..backends.base import Workspace
from ..ir.graph import MISSING
from ..memory.planner import allocate_arena
from ..schedule.plan import MAX_DYNAMIC_PLANS, Plan


def _no_op_view(step, plan: Plan, rebound: set) -> bool:
    """Whether ``step`` is a view whose output always holds its input's bytes in place."""
    k = step.kernel.view_of
    if k is None or len(step.outs) != 1 or k >= len(step.ins):
        return False
    i, o = step.ins[k], step.outs[0]
    root = plan.aliases.get(o)
    return (root is not None and plan.aliases.get(i, i) == root
            and i not in rebound and o not in rebound)


class RunState:
    """The arena and bindings of one ``plan`` for one caller.

    ``outer``: the arrays of the run state of the plan before this one (a plan after a dynamic
    node reads the values planned there). Attributes: ``arrays`` (``{slot: array}``), ``calls``
    (per step ``(kernel.run, ins, outs, ws)``: what the observed loop calls), ``hot`` /
    ``hot_index`` (the calls the plain loop makes, ``(kernel.run, (ins, outs, ws))``, and their
    step indices; ``flat`` / ``flat_index`` the same from a second run, ``make_flat``),
    ``input_arrays`` (``{graph input name: the arena array it is read from}``), ``outputs``
    (``[(graph output name, array)]`` of the last run), ``op_times`` / ``op_starts`` (seconds,
    filled by a profiled or observed run), ``record`` / ``tail_times`` (the steps after a
    dynamic node in the last run, and their start and duration), ``copy_counts``
    (``{"inputs": n, "outputs": n}``: copies made by runs on this state).
    Raises ShapeError when the arena cannot be allocated.
    """

    def __init__(self, plan: Plan, outer: dict | None = None, copy_counts: dict | None = None):
        self.plan = plan
        self.raw, arena = allocate_arena(plan.layout.size)
        arrays = dict(outer or {})
        arrays.update(plan.constants)
        for slot, off in plan.layout.offsets.items():
            info = plan.slots[slot]
            arrays[slot] = arena[off:off + info.nbytes].view(info.dtype).reshape(info.shape)
        for slot in plan.zeroed:
            arrays[slot].fill(0)
        self.arrays = arrays
        self.rebind: list = []  # (value, list, position) of values each run supplies
        self.calls = [(s.kernel.run, self._list(s.ins), [arrays[v] for v in s.outs],
                       Workspace(arrays[w] for w in s.workspaces)) for s in plan.steps]
        g = plan.graph
        # NOTE: a view step (Reshape, Squeeze, ...) whose output the planner placed on its
        # input's bytes has nothing to do: the plain loop leaves it out, unless a run can bind
        # either side to other arrays (graph inputs and outputs, values each run supplies);
        # there the kernel compares the bytes itself (~2 us a step: 18 of silero-vad's 33)
        rebound = {*g.inputs, *g.outputs, *plan.bound}
        self.hot_index = [t for t, s in enumerate(plan.steps) if not _no_op_view(s, plan,
                                                                                  rebound)]
        self.hot = [(run, (ins, outs, ws)) for run, ins, outs, ws in
                    (self.calls[t] for t in self.hot_index)]
        # NOTE: the plain loop's calls one level down (``make_flat``), made after a first run;
        # never where a run supplies values (a subgraph's inputs, ``rebind``), not used while
        # user output arrays are bound
        self.flat: list | None = None
        self.flat_index: list = []
        self.flat_off = bool(self.rebind)
        self.outputs_bound = False
        self.outputs = [(g.values[i].name, arrays[i] if i in arrays
                         else np.empty(0, g.values[i].dtype or np.float32)) for i in g.outputs]
        self._planned = dict(self.outputs)
        # NOTE: graph outputs that are graph inputs (passed through): their input position
        self.out_sources = [g.inputs.index(i) if i in g.inputs else -1 for i in g.outputs]
        # NOTE: outputs whose shapes are known only once the run has reached them
        self.dynamic_outputs = {g.values[i].name for i in g.outputs if i not in arrays}
        self.dynamic_ws = Workspace()
        self.children: dict[Plan, RunState] = {}
        n = len(plan.steps)
        self.op_times, self.op_starts = [0.0] * n, [0.0] * n
        self.record: list = []
        self.tail_times: list = []
        self.copy_counts = copy_counts if copy_counts is not None else {"inputs": 0,
                                                                        "outputs": 0}
        self.input_arrays = {g.values[i].name: arrays[i] for i in g.inputs if i in arrays}
        #: ``(runtime, threads, slots, run contexts)`` a run enters (``executor.execute``),
        #: made on the first run: a run state is one session's, which runs one call at a time
        self.entry: tuple | None = None

    def _list(self, values) -> list:
        out = []
        for k, v in enumerate(values):
            if v == MISSING:
                out.append(None)
            elif v in self.plan.bound:
                self.rebind.append((v, out, k))
                out.append(None)
            else:
                out.append(self.arrays[v])
        return out

    def bind_inputs(self, arrays) -> None:
        """Make the steps read graph input ``k`` from ``arrays[k]`` (no copy)."""
        calls = self.calls
        self.flat_off, self.flat = True, None
        for uses, a in zip(self.plan.input_uses, arrays):
            for t, _, k in uses:
                calls[t][1][k] = a

    def bind_outputs(self, bound) -> None:
        """Make the kernels write (and later steps read) the graph outputs ``[(name, array)]``
        in those arrays; ``unbind_outputs`` restores the arena's."""
        calls = self.calls
        for name, arr in bound:
            for t, side, k in self.plan.output_uses[name]:
                calls[t][1 + side][k] = arr
        self.outputs_bound = any(arr is not self._planned[name] for name, arr in bound)

    def unbind_outputs(self, bound) -> None:
        self.bind_outputs([(name, self._planned[name]) for name, _ in bound])

    def make_flat(self) -> None:
        """``flat``: the plain loop's steps as ``(fn, args)`` calls, each kernel's bound calls
        (``Kernel.flat_calls``: what its run just called, after a run with the arena's
        arrays) in place of its run, which is kept for the others; ``flat_index``: the step
        index of each call. NOTE: a step's run cost ~0.5-1 us of Python around its calls
        (the method call, the binding's identity check): a tenth to a fifth of a small
        model's run (mltk keyword spotting MobileNetV2: 70 steps in ~0.25 ms)."""
        flat, index = [], []
        for t, call in zip(self.hot_index, self.hot):
            calls = self.plan.steps[t].kernel.flat_calls(call[1][2]) or [call]
            flat.extend(calls)
            index.extend([t] * len(calls))
        self.flat, self.flat_index = flat, index

    def child(self, plan: Plan) -> RunState:
        """The run state of ``plan``, a plan after this one's dynamic node (made on first use,
        kept for the next runs: at most MAX_DYNAMIC_PLANS)."""
        state = self.children.get(plan)
        if state is None:
            if len(self.children) >= MAX_DYNAMIC_PLANS:
                self.children.pop(next(iter(self.children)))
            state = self.children[plan] = RunState(plan, self.arrays)
        return state

    def steps(self) -> list:
        """The plan's steps and those run after its dynamic node in the last run."""
        return [*self.plan.steps, *(s for s, _ in self.record)]

    def timed(self) -> list[tuple]:
        """``(step, start, duration)`` of every step of the last observed run (seconds)."""
        return [*zip(self.plan.steps, self.op_starts, self.op_times),
                *((s, t0, dt) for (s, _), (t0, dt) in zip(self.record, self.tail_times))]
