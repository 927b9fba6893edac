"""Kernels of the control-flow ops If, Loop and Scan: each subgraph runs as a nested plan.

A subgraph is planned once per signature of its input shapes and dtypes (``_Subgraph``) and
reused across iterations and runs: a Loop whose carried values keep their shapes plans its body
once. Each run state of the parent keeps its own run states of the nested plans (in the
kernel's workspace memo). The nested run reads its inputs in place (captured outer values, scan
slices, carried values: no copy in) and runs inside the parent's run (its thread slots and
backend contexts).
Carried values and scan outputs are copied out of the body's arena after each iteration (the
next iteration reuses that arena). Inputs are laid out as ``sprat.ir.subgraphs`` describes.
Source: ONNX spec If-21, Loop-21, Scan-21; scan outputs of a Loop are stacked along a new first
axis, as onnxruntime does.
"""

from __future__ import annotations

import threading

import numpy as np

from ..errors import KernelError, SpratError
from ..ir.graph import contiguous
from ..ir.shapes.control import infer_graph, loop_parts, scan_parts
from ..ir.subgraphs import CONTROL_FLOW_OPS
from ..ir.tensorinfo import TensorInfo
from ..runtime import executor
from ..runtime.state import RunState
from .base import Backend, DynamicKernel

# NOTE: nested plans kept per subgraph (one per input-shape signature); the oldest is dropped
# beyond this, so a Loop whose carried shapes grow every iteration cannot grow memory unbounded.
MAX_PLANS = 16


class _Subgraph:
    """A subgraph with its plans, one per input signature (memoised, shared by every run
    state of the parent plan); the run states of those plans live in the caller's workspace.

    ``consts``: ``{input position: value}`` known when the parent was planned (captured
    constants of the parent's plan); the nested plan folds them."""

    def __init__(self, graph, make_plan, consts: dict[int, np.ndarray]):
        self.graph = graph
        self.make_plan = make_plan
        self.consts = consts
        self.plans: dict = {}
        self._lock = threading.Lock()

    def plan(self, shapes: tuple, dtypes: tuple):
        key = (shapes, dtypes)
        with self._lock:
            plan = self.plans.get(key)
            if plan is None:
                g = self.graph
                names = [g.values[i].name for i in g.inputs]
                values = {names[k]: v for k, v in self.consts.items()}
                plan = self.make_plan(g, dict(zip(names, shapes)), values,
                                      dict(zip(names, dtypes)))
                if len(self.plans) >= MAX_PLANS:
                    self.plans.pop(next(iter(self.plans)))
                self.plans[key] = plan
            return plan

    def prepare(self, infos: list[TensorInfo]) -> None:
        self.plan(tuple(tuple(i.shape) for i in infos), tuple(np.dtype(i.dtype) for i in infos))

    def call(self, arrays: list[np.ndarray], ws) -> list[np.ndarray]:
        """The subgraph's outputs for ``arrays``, run on a run state kept in the caller's
        workspace ``ws``: that state's own arrays, valid until the next call (copy what is
        kept)."""
        if ws.memo is None:
            ws.memo = {}
        mine = ws.memo.get(id(self))
        if mine is None:
            mine = ws.memo[id(self)] = [{}, None]  # run states by plan, the last call
        states, last = mine
        ids = tuple(map(id, arrays))
        if last is not None and last[0] == ids:
            # NOTE: an If reads the same parent arrays every run: the nested state still holds
            # them (bound by the previous call), so no checks and no rebinding
            return executor.call(last[2], last[1], bind=False)
        arrays = [contiguous(a) for a in arrays]
        plan = self.plan(tuple(a.shape for a in arrays), tuple(a.dtype for a in arrays))
        state = states.get(plan)
        if state is None:
            if len(states) >= MAX_PLANS:
                states.pop(next(iter(states)))
            state = states[plan] = RunState(plan)
        # NOTE: kept only when no input needed a contiguous copy (the same objects come back);
        # holding the arrays keeps their ids from being reused
        mine[1] = (ids, arrays, state) if ids == tuple(map(id, arrays)) else None
        return executor.call(state, arrays)


def _consts(infos, first: int) -> dict[int, np.ndarray]:
    return {first + k: i.value for k, i in enumerate(infos)
            if i is not None and i.value is not None}


class _ControlKernel(DynamicKernel):
    def __init__(self, node, make_plan, backend: str):
        super().__init__(node)
        self.make_plan = make_plan
        self.backend = backend


class IfKernel(_ControlKernel):
    """If-21(cond, *captures): runs ``then_branch`` or ``else_branch`` on the captures."""

    def prepare(self, ins, outs):
        caps = list(ins[1:])
        self.branches = {flag: _Subgraph(self.node.attrs[name], self.make_plan,
                                         _consts(caps, 0))
                         for flag, name in ((True, "then_branch"), (False, "else_branch"))}
        cond = ins[0].value
        for flag, sub in self.branches.items():
            if cond is None or bool(np.asarray(cond).reshape(-1)[0]) == flag:
                try:
                    sub.prepare(caps)
                except SpratError:
                    # NOTE: with the condition unknown at prepare, a branch that cannot be
                    # prepared for these shapes (e.g. a ShapeError) is prepared when taken;
                    # a bug (any other exception) still raises here
                    if cond is not None:
                        raise

    def _results(self, ins, ws):
        return self.branches[bool(np.asarray(ins[0]).reshape(-1)[0])].call(list(ins[1:]), ws)

    def run(self, ins, outs, ws):
        for dst, src in zip(outs, self._results(ins, ws)):
            if dst.shape != src.shape:
                raise ValueError(f"branch produced shape {src.shape}, planned {dst.shape}")
            np.copyto(dst, src, casting="unsafe")

    def run_dynamic(self, ins, ws):
        return [np.array(a, copy=True, order="C") for a in self._results(ins, ws)]


class LoopKernel(_ControlKernel):
    """Loop-21(M?, cond?, *v_initial, *captures) -> (*v_final, *scan_outputs)."""

    def prepare(self, ins, outs):
        self.n, self.k, self.c = loop_parts(self.node, len(ins))
        caps = ins[2 + self.n:]
        self.body = _Subgraph(self.node.attrs["body"], self.make_plan,
                              _consts(caps, 2 + self.n))
        self.in_infos = [TensorInfo((), np.dtype(np.int64)), TensorInfo((), np.dtype(np.bool_)),
                         *(TensorInfo(tuple(x.shape), x.dtype) for x in ins[2:2 + self.n]),
                         *caps]
        self.out_infos = outs

    def _iterate(self, ins, ws, scan_outs=None):
        n = self.n
        m = ins[0]
        trips = None if m is None else int(np.asarray(m).reshape(-1)[0])
        keep = True if ins[1] is None else bool(np.asarray(ins[1]).reshape(-1)[0])
        carried = list(ins[2:2 + n])
        caps = list(ins[2 + n:])
        scans: list[list] = [[] for _ in range(self.k)]
        i = 0
        while keep and (trips is None or i < trips):
            res = self.body.call([np.array(i, np.int64), np.array(keep), *carried, *caps], ws)
            # NOTE: the body's condition stops the loop even when the cond input is absent
            # (onnxruntime does so; the spec's table says it is then ignored)
            keep = bool(np.asarray(res[0]).reshape(-1)[0])
            # NOTE: copies: the body's arena is reused by the next iteration
            carried = [np.array(r, copy=True) for r in res[1:1 + n]]
            for j, r in enumerate(res[1 + n:]):
                if scan_outs is not None:
                    scan_outs[j][i] = r
                else:
                    scans[j].append(np.array(r, copy=True))
            i += 1
        return carried, scans, i

    def run(self, ins, outs, ws):
        carried, _, i = self._iterate(ins, ws, outs[self.n:])
        if any(o.shape[0] != i for o in outs[self.n:]):
            raise ValueError(f"Loop ran {i} iterations, planned {outs[self.n].shape[0]}")
        for dst, src in zip(outs[:self.n], carried):
            np.copyto(dst, src, casting="unsafe")

    def run_dynamic(self, ins, ws):
        carried, scans, i = self._iterate(ins, ws)
        out = [contiguous(c) for c in carried]
        if i > 0:
            return out + [np.stack(s) for s in scans]
        return out + self._empty_scans(ins)

    def _empty_scans(self, ins):
        """Scan outputs of a loop that ran no iteration: (0, *per-iteration shape)."""
        try:
            infos = infer_graph(self.node.attrs["body"], self.in_infos)[1 + self.n:]
            return [np.empty((0, *i.shape), i.dtype) for i in infos]
        except Exception:  # noqa: BLE001 — the per-iteration shape may need data
            body = self.node.attrs["body"]
            return [np.empty((0,), body.values[o].dtype or np.float32)
                    for o in body.outputs[1 + self.n:]]


class ScanKernel(_ControlKernel):
    """Scan-21(*initial_states, *scan_inputs, *captures) -> (*final_states, *scan_outputs)."""

    def prepare(self, ins, outs):
        a = self.node.attrs
        self.m = int(a["num_scan_inputs"])
        self.n, self.k, self.c = scan_parts(self.node, len(ins), self.m)
        self.in_axes = list(a.get("scan_input_axes") or [0] * self.m)
        self.in_dirs = list(a.get("scan_input_directions") or [0] * self.m)
        self.out_axes = list(a.get("scan_output_axes") or [0] * self.k)
        self.out_dirs = list(a.get("scan_output_directions") or [0] * self.k)
        caps = ins[self.n + self.m:]
        self.body = _Subgraph(a["body"], self.make_plan, _consts(caps, self.n + self.m))

    def _iterate(self, ins, ws, scan_outs):
        n, m = self.n, self.m
        scans = ins[n:n + m]
        views = [np.moveaxis(x, ax % x.ndim, 0) for x, ax in zip(scans, self.in_axes)]
        trips = views[0].shape[0]
        states = list(ins[:n])
        caps = list(ins[n + m:])
        for t in range(trips):
            slices = [v[trips - 1 - t if d else t] for v, d in zip(views, self.in_dirs)]
            res = self.body.call([*states, *slices, *caps], ws)
            states = [np.array(r, copy=True) for r in res[:n]]
            for j, r in enumerate(res[n:]):
                scan_outs(j, trips, r.shape, r.dtype)[trips - 1 - t if self.out_dirs[j] else t] = r
        return states

    def run(self, ins, outs, ws):
        views = [np.moveaxis(o, ax % o.ndim, 0) for o, ax in zip(outs[self.n:], self.out_axes)]
        states = self._iterate(ins, ws, lambda j, trips, shape, dtype: views[j])
        for dst, src in zip(outs[:self.n], states):
            np.copyto(dst, src, casting="unsafe")

    def run_dynamic(self, ins, ws):
        made: dict[int, np.ndarray] = {}

        def sink(j, trips, shape, dtype):
            if j not in made:
                made[j] = np.empty((trips, *shape), dtype)
            return made[j]

        states = self._iterate(ins, ws, sink)
        outs = []
        for j in range(self.k):
            full = made.get(j)
            if full is None:
                raise KernelError(self.node.name, "Scan", "no iteration ran (empty scan input)")
            outs.append(contiguous(np.moveaxis(full, 0, self.out_axes[j] % full.ndim)))
        return [contiguous(s) for s in states] + outs


KERNELS = {"If": IfKernel, "Loop": LoopKernel, "Scan": ScanKernel}
assert set(KERNELS) == set(CONTROL_FLOW_OPS)


class ControlFlowBackend(Backend):
    """Runs the control-flow nodes of a plan; their subgraphs run as nested plans made by
    ``make_plan(graph, shapes, values, dtypes)`` (``build_plan`` with the session's own
    backends, so its config and packed-weight cache).
    ``backend``: the name reported for these nodes (the backend that runs the subgraphs)."""

    name = "control"

    def __init__(self, make_plan, backend: str):
        self.make_plan = make_plan
        self.backend = backend

    def supports(self, node, ins) -> bool:
        return node.op_type in KERNELS and node.domain in ("", "ai.onnx")

    def make_kernel(self, node, ins=None):
        return KERNELS[node.op_type](node, self.make_plan, self.backend)
