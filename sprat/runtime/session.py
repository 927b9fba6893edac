"""Session: runs one model with one ScheduleConfig, one call at a time.

A session checks what the caller gives it (feeds, output names and arrays), finds the plan for
the input shapes (``sprat.schedule.plan``: made once per input-shape signature, shared with the
other sessions of the Interpreter through its PlanCache), holds one RunState over it (the arena
of this session) and hands both to the run loops (``executor``). ``run`` then only copies the
feeds in, calls the kernels and copies the outputs out — MNN's ``Session::resize`` /
``Session::run`` split.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping

import numpy as np

from .._logging import logger
from ..backends.base import PackCache
from ..backends.registry import make_backend
from ..errors import InputError, SessionBusyError, ShapeError
from ..ir.graph import Graph
from ..ir.shapes import DataDependentShape
from ..schedule.plan import OpInfo, Plan, PlanCache, build_plan
from ..stages import SESSION_STAGES
from . import checks, executor
from .checks import TensorSpec
from .config import ScheduleConfig
from .runtime import Runtime
from .state import RunState

__all__ = ["OpInfo", "RunResult", "Session", "TensorSpec"]


# NOTE: integer feeds up to this many elements may be read when planning, if the plan needs
# their contents (shape inputs); larger ones are data, never folded.
VALUE_INPUT_MAX = 4096


_BUSY = ("this session is already running a call; use one session per thread "
         "(Interpreter.create_session) for concurrent runs")


def _signature(feeds: dict) -> tuple:
    """``(names, ((name, shape, dtype), ...))`` of ``feeds`` (``Session._fed`` / ``_ready``)."""
    return frozenset(feeds), tuple((n, a.shape, a.dtype) for n, a in feeds.items())


def _like(signature: tuple, feeds) -> bool:
    """Whether ``feeds`` (a Mapping) has ``signature``'s names, and ndarrays of its shapes and
    dtypes."""
    if feeds.keys() != signature[0]:
        return False
    for name, shape, dtype in signature[1]:
        a = feeds[name]
        if type(a) is not np.ndarray or a.shape != shape or a.dtype != dtype:
            return False
    return True


def _copy_in(state, feeds: dict) -> None:
    """The feeds into the run state's input arrays (none given as those arrays themselves)."""
    views = state.input_arrays
    for name, arr in feeds.items():
        view = views[name]
        if arr is not view:
            # NOTE: the feeds are checked (or like the checked ones): same shape and dtype;
            # an item assignment costs half of np.copyto's ~1 us
            view[...] = arr
            state.copy_counts["inputs"] += 1


class RunResult(dict):
    """``{output name: np.ndarray}`` returned by ``run_with_callback``; ``partial`` is True when
    an ``after`` callback stopped the run (then only the outputs computed so far are present)."""

    partial: bool = False


class Session:
    """Runs one model with one ScheduleConfig. Create with ``Interpreter.create_session``.

    ``plans``: the PlanCache shared by the sessions of one Interpreter (default: one of its
    own). A session runs one call at a time: a second concurrent ``run`` raises
    SessionBusyError.
    """

    STAGES = SESSION_STAGES

    def __init__(self, graph: Graph, config: ScheduleConfig | None = None,
                 packs: PackCache | None = None, runtime=None, plans: PlanCache | None = None):
        self.config = config if config is not None else ScheduleConfig()
        self.runtime = runtime if runtime is not None else Runtime.default()
        self._packs = packs
        self._graph = graph
        self._plans = plans if plans is not None else PlanCache()
        c = self.config
        self.num_threads = min(c.num_threads, self.runtime.num_threads)
        # NOTE: one instance per backend name, so a backend listed twice (the default
        # backends=("cpu",), backup="cpu") enters its run context once per run
        made: dict = {}
        for name in (*c.backends, c.backup):
            if name not in made:
                made[name] = make_backend(name, self.num_threads, packs, c.precision, c.memory)
        backup = made[c.backup]
        listed: list = []

        def plan_subgraph(g, shapes, values, dtypes):
            return build_plan(g, shapes, listed, backup, values=values, dtypes=dtypes)

        # NOTE: control-flow nodes (If, Loop, Scan) plan their subgraphs with these backends
        listed += [make_backend("control_flow", make_plan=plan_subgraph,
                                report_as=c.backends[0]), *(made[n] for n in c.backends)]
        self._backends, self._backup = listed, backup
        self._schedule = (self.num_threads, c.backends, c.backup, c.precision, c.memory)
        self._lock = threading.Lock()
        self._state: RunState | None = None
        self._pending: dict[str, tuple[int, ...]] | None = None  # deferred resize
        self._exclusive = False  # every tensor its own bytes (set once `before` is used)
        self._value_inputs: dict[str, np.ndarray] = {}  # inputs whose contents the plan used
        self._lent: set[str] = set()  # inputs whose buffer input_buffer() handed out
        self.copy_counts = {"inputs": 0, "outputs": 0}
        self._in_specs = [self._spec(i) for i in graph.inputs]
        self._out_specs = [self._spec(i) for i in graph.outputs]
        # NOTE: copies made by runs, counted by the run states (``RunState.copy_counts``)
        # NOTE: (names, ((name, shape, dtype), ...)) of the last feeds that passed every check
        # with all inputs fed: feeds of the same names, types, shapes and dtypes pass again
        self._fed: tuple | None = None
        # NOTE: the same, set by a plain run that needed no plan: a run of such feeds (a dict,
        # every output wanted, none given, no callback) takes ``_run_ready``
        self._ready: tuple | None = None

    def _spec(self, idx: int) -> TensorSpec:
        v = self._graph.values[idx]
        return TensorSpec(v.name, tuple(v.shape) if v.shape is not None else None, v.dtype)

    # ---- public API -----------------------------------------------------------------------
    @property
    def inputs(self) -> list[TensorSpec]:
        """Graph inputs as declared by the model (symbolic dims are strings)."""
        return list(self._in_specs)

    @property
    def outputs(self) -> list[TensorSpec]:
        """Graph outputs; after a resize, their shapes are the concrete planned ones."""
        if self._state is None:
            return list(self._out_specs)
        return [TensorSpec(n, a.shape, a.dtype) for n, a in self._state.outputs]

    @property
    def plan(self) -> Plan | None:
        """The Plan of the current input shapes (immutable, possibly shared with other
        sessions of the Interpreter), or None before the first resize or run."""
        return self._state.plan if self._state is not None else None

    @property
    def state(self) -> RunState | None:
        """This session's RunState over ``plan`` (its arena), or None before planning."""
        return self._state

    def resize(self, shapes: Mapping[str, tuple]) -> None:
        """Prepare for new input shapes ``{input name: shape}`` (inputs not named keep their
        current shape, or their declared one when fully fixed).

        Raises InputError for an unknown input name or a shape that contradicts the model's
        fixed dims; ShapeError when the model cannot run at that shape.

        With ``ScheduleConfig(resize="defer")`` the shapes are checked now and the session is
        prepared on the next run (MNN ``Session_Resize_Defer``); ``"direct"`` prepares now.
        """
        with self._busy():
            full = self._complete_shapes(shapes)
            if self.config.resize == "defer":
                self._pending = full
                return
            try:
                self._prepare(full, split=False)
            except DataDependentShape:
                if not any(s.dtype is not None and s.dtype.kind in "iub"
                           for s in self._in_specs):
                    self._prepare(full)
                    return
                # NOTE: the plan may need the contents of integer inputs (shape inputs): it is
                # made on the next run, which has them.
                self._pending = full

    def input_buffer(self, name: str) -> np.ndarray:
        """The session-owned array input ``name`` is read from (prepared shape and dtype).

        Fill it in place and call ``run`` without that input in ``feeds`` (or with this very
        array): no copy is made. The buffer belongs to the current plan: after a resize, ask
        again. Its contents are not kept across runs. Raises InputError for an unknown name,
        ShapeError when the session has not been given shapes yet.
        """
        with self._busy():
            if name not in [s.name for s in self._in_specs]:
                raise InputError(f"unknown input {name!r}; the model's inputs are "
                                 f"{[s.name for s in self._in_specs]}")
            if self._pending is not None:
                self._prepare(self._pending)
            if self._state is None:
                raise ShapeError("the session has no input shapes yet: call resize() first")
            self._lent.add(name)
            return self._state.input_arrays[name]

    def run(self, feeds: Mapping[str, np.ndarray], output_names=None,
            outputs: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Run the model. ``feeds``: ``{input name: np.ndarray}`` with the declared dtypes.

        Returns ``{output name: np.ndarray}``, all outputs or those in ``output_names``: new
        arrays owned by the caller, except outputs given in ``outputs`` (``{name: array}``),
        which are written in place and returned as those same arrays — with no copy when the
        array has the output's dtype and shape and is C-contiguous and writable (the kernel
        writes into it; MindSpore Lite's zero-copy), else by a copy into it. Outputs computed
        after a data-dependent node (shapes known only while running) are always copied into
        the given array, whose shape is checked after the run.
        A feed shape other than the prepared one resizes first (logged at debug level).
        Raises InputError (names, dtypes, shapes, output arrays that cannot hold the result),
        KernelError (naming the node), SessionBusyError (another call on this session).
        """
        return self._run(feeds, output_names, outputs, None, None)

    def run_with_callback(self, feeds: Mapping[str, np.ndarray], before=None, after=None,
                          output_names=None) -> RunResult:
        """Run with a callback around every op (MNN ``runSessionWithCallBackInfo``).

        ``before(info: OpInfo, inputs, outputs)`` is called before an op runs; returning False skips
        it (its outputs keep their previous contents: once ``before`` is used, the session plans
        every tensor in bytes of its own, at the cost of a larger arena; that new plan starts
        empty). ``after(info, inputs, outputs)`` is called after; returning False stops the run: the
        result then holds the outputs computed so far and ``result.partial`` is True. The arrays are
        the session's own, valid during the call only (copy what you keep). Errors as ``run``; an
        exception raised by a callback propagates unchanged.
        """
        if before is not None and not self._exclusive:
            with self._busy():
                self._exclusive = True
                if self._state is not None:
                    self._pending = self._pending or dict(self._state.plan.shapes)
        return self._run(feeds, output_names, None, before, after)

    def _run(self, feeds, output_names, outputs, before, after) -> RunResult:
        # NOTE: the lock taken inline (``_busy`` is a generator context manager: ~1 us)
        if not self._lock.acquire(blocking=False):
            raise SessionBusyError(_BUSY)
        try:
            if (self._ready is not None and outputs is None and output_names is None
                    and before is None and after is None):
                result = self._run_ready(feeds)
                if result is not None:
                    return result
            return self._run_checked(feeds, output_names, outputs, before, after)
        finally:
            self._lock.release()

    def _run_ready(self, feeds) -> RunResult | None:
        """The run of feeds like the last plain run's (``_ready``: names, shapes and dtypes),
        with every output wanted and none given, while nothing asks for a new plan: the
        feeds copied in, the plan run, the outputs copied out (what ``_run_checked`` does for
        them, without its checks and bookkeeping: ~5 us of a small model's ~20; ~20 us where
        the plan used the contents of an input, silero-vad's sample rate). None when the
        feeds differ, or the contents of an input the plan used."""
        if (type(feeds) is not dict or not _like(self._ready, feeds)
                or self._pending is not None or self._lent
                or (self._value_inputs and self._values_changed(feeds))):
            return None
        state = self._state
        _copy_in(state, feeds)
        executor.execute(state, self.runtime, self.num_threads, None, None,
                         self.config.profiling)
        return self._results(state, None, {}, None, None)

    def _run_checked(self, feeds, output_names, outputs, before, after) -> RunResult:
        self._ready = None
        wanted = checks.output_names(self._out_specs, output_names)
        feeds = self._check_feeds(feeds)
        shapes = {k: tuple(a.shape) for k, a in feeds.items()}
        planned = self._state.plan.shapes if self._state is not None else None
        for name in self._lent - set(feeds):
            shapes[name] = planned[name]
        if self._pending is not None or shapes != planned or (
                self._value_inputs and self._values_changed(feeds)):
            stale = sorted(self._lent - set(feeds))
            if stale:
                raise InputError(f"input(s) {stale} were filled through input_buffer(), "
                                 f"but these feeds need a new plan {shapes}: feed them, or "
                                 f"fill the buffers again after resize()")
            if planned is not None and self._pending is None:
                logger().debug("session: input shapes changed to %s; resizing", shapes)
            self._prepare_for(self._complete_shapes(shapes), feeds)
        state = self._state
        user = self._check_user_outputs(outputs)
        _copy_in(state, feeds)
        bound = [(n, a) for n, a in user.items() if a is not None]
        state.bind_outputs(bound)
        try:
            produced = executor.execute(state, self.runtime, self.num_threads, before,
                                        after, self.config.profiling)
        finally:
            state.unbind_outputs(bound)
        if (wanted is None and not user and before is None and after is None
                and not self._lent and self._pending is None
                and len(feeds) == len(self._in_specs)):
            self._ready = _signature(feeds)
        return self._results(state, wanted, user, outputs, produced)

    def _results(self, state, wanted, user, outputs, produced) -> RunResult:
        result = RunResult()
        result.partial = produced is not None
        for name, arr in state.outputs:
            if (wanted is not None and name not in wanted and name not in user) or (
                    produced is not None and name not in produced):
                continue
            if name not in user:
                result[name] = arr.copy()
                state.copy_counts["outputs"] += 1
                continue
            dst = user[name]
            if dst is None:
                dst = outputs[name]
                checks.output_array(name, dst, arr)
                np.copyto(dst, arr, casting="same_kind")
                state.copy_counts["outputs"] += 1
            result[name] = dst
        return result

    # ---- checks ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def _busy(self):
        if not self._lock.acquire(blocking=False):
            raise SessionBusyError(_BUSY)
        try:
            yield
        finally:
            self._lock.release()

    def _check_feeds(self, feeds) -> dict[str, np.ndarray]:
        fed = self._fed
        if fed is not None and isinstance(feeds, Mapping) and _like(fed, feeds):
            return dict(feeds)
        out = checks.feeds(self._in_specs, feeds, self._lent)
        if len(out) == len(self._in_specs) and all(type(a) is np.ndarray
                                                   for a in out.values()):
            self._fed = _signature(out)
        return out

    def _check_user_outputs(self, outputs) -> dict[str, np.ndarray | None]:
        st = self._state
        return checks.user_outputs(outputs, dict(st.outputs), st.dynamic_outputs,
                                   st.plan.output_uses)

    def _complete_shapes(self, shapes: Mapping[str, tuple]) -> dict[str, tuple[int, ...]]:
        current = self._state.plan.shapes if self._state is not None else None
        return checks.complete_shapes(self._in_specs, shapes, current)

    # ---- planning ---------------------------------------------------------------------------
    def _prepare_for(self, shapes: dict[str, tuple[int, ...]], feeds: dict) -> None:
        """Plan for ``shapes``; when the plan needs the *contents* of inputs (a graph input
        feeding a Reshape shape, Slice starts, TopK k, ...), plan again with the values of
        the small integer feeds, and remember them: a run with other values plans again
        (MNN resizes when such "shape inputs" change). When even that cannot give every
        shape, the plan is split at the data-dependent nodes (``build_plan``)."""
        self._value_inputs = {}
        try:
            self._prepare(shapes, split=False)
        except DataDependentShape:
            values = {n: a for n, a in feeds.items()
                      if a.dtype.kind in "iub" and a.size <= VALUE_INPUT_MAX}
            try:
                if not values:
                    raise
                self._prepare(shapes, values, split=False)
                self._value_inputs = {n: a.copy() for n, a in values.items()}
            except DataDependentShape:
                self._prepare(shapes)

    def _values_changed(self, feeds: dict) -> bool:
        for name, planned in self._value_inputs.items():
            a = feeds.get(name)
            # NOTE: bytes compare: a few small integer arrays, checked on every run
            if a is not None and (a.shape != planned.shape or a.dtype != planned.dtype
                                  or a.tobytes() != planned.tobytes()):
                return True
        return False

    def _prepare(self, shapes: dict[str, tuple[int, ...]], values: dict | None = None,
                 split: bool = True) -> None:
        """Find (or make) the plan for ``shapes`` and ``values`` and a run state over it."""
        vals = sorted((n, a.dtype.str, a.shape, a.tobytes()) for n, a in (values or {}).items())
        key = (id(self._graph), self._schedule, self._exclusive, split, *sorted(shapes.items()),
               *vals)
        plan = self._plans.get(key, lambda: build_plan(
            self._graph, shapes, self._backends, self._backup, values=values, split=split,
            exclusive=self._exclusive))
        self._state = RunState(plan, copy_counts=self.copy_counts)
        self._lent = set()
        self._pending = None

    # ---- introspection ------------------------------------------------------------------
    def _prepared(self) -> RunState:
        if self._state is None:
            raise ShapeError("the session is not prepared yet: call resize() or run() first")
        return self._state

    def dump(self, stage: str = "planned") -> str:
        """The prepared plan as text (``Plan.describe``): ``assigned`` (backend per node) or
        ``planned`` (also the shapes and arena offsets of every output). Raises ValueError for
        another stage, ShapeError before the session is prepared."""
        if stage not in self.STAGES:
            raise ValueError(f"unknown session stage {stage!r}; stages: {', '.join(self.STAGES)}")
        return self._prepared().plan.describe(stage == "planned")

    def trace(self) -> dict:
        """The last profiled run as a Chrome / Perfetto trace (``chrome://tracing``, JSON
        "Trace Event Format": one complete event per op, times in microseconds). Needs
        ``ScheduleConfig(profiling=True)``; raises ValueError otherwise."""
        if not self.config.profiling:
            raise ValueError("trace() needs a session created with ScheduleConfig(profiling=True)")
        events = [{"name": s.info.name, "cat": s.info.type, "ph": "X", "pid": 0, "tid": 0,
                   "ts": round(t0 * 1e6, 3), "dur": round(dt * 1e6, 3),
                   "args": {"backend": s.info.backend, "flops": s.info.flops}}
                  for s, t0, dt in self._prepared().timed()]
        return {"traceEvents": events, "displayTimeUnit": "ms"}

    def node_infos(self) -> list[tuple]:
        """``(node, input TensorInfos, output TensorInfos)`` of every planned step (with a
        dynamic tail: the steps of the last run after the static plan; dynamic nodes, whose
        output shapes vary, are left out)."""
        return [(s.node, s.in_infos, s.out_infos) for s in self._steps()
                if s.out_infos is not None]

    def _steps(self) -> list:
        return self._state.steps() if self._state is not None else []

    def info(self) -> dict:
        """Arena bytes (tensors and kernel workspaces, from the plan), of which workspace
        bytes, weight bytes, packed weight bytes (shared by the Interpreter's sessions), FLOPs
        of one run (multiply-add = 2), steps, backend per node, threads, precision and memory
        modes, input shapes, what the backends describe (cpu: ``cpu_path``, ``blas``) and with
        profiling the ms of each op in the last run (``op_times_ms``). A model with
        data-dependent shapes also lists the steps planned after them in its last run."""
        from ..ir.flops import graph_flops

        plan = self.plan
        steps = self._steps()
        return {
            "arena_bytes": plan.layout.size if plan is not None else 0,
            "workspace_bytes": plan.workspace_bytes if plan is not None else 0,
            "weight_bytes": self._graph.weight_bytes(),
            "packed_bytes": self._packs.nbytes if self._packs is not None else 0,
            "flops": graph_flops(self.node_infos()),
            "steps": len(steps),
            "backends": {s.node.name: s.info.backend for s in steps},
            "num_threads": self.num_threads,
            "precision": self.config.precision,
            "memory": self.config.memory,
            "op_times_ms": ({s.node.name: dt * 1e3 for s, _, dt in self._state.timed()}
                            if self.config.profiling and plan is not None else {}),
            "input_shapes": dict(plan.shapes) if plan is not None else {},
            **{k: v for b in self._backends for k, v in getattr(b, "describe", dict)().items()},
        }
