"""Session: one prepared execution of a model for one set of input shapes.

``prepare`` (on resize, once per input shape) computes every shape, folds shape-computing chains
to constants, assigns each node a backend, prepares the kernels, plans one arena, and binds every
tensor to a view of it. ``run`` then only copies the feeds in, calls the kernels and copies the
outputs out — MNN's ``Session::resize`` / ``Session::run`` split.

Data-dependent shapes (NonZero, Unique, NonMaxSuppression, TopK with a computed k, a Loop's scan
outputs, an If whose branches differ, ...): the plan is split at the first such node. The nodes
before it keep the static plan above; the node runs as a dynamic node (it allocates its outputs);
the rest is planned when those shapes are known, once per signature of them (``_Segment``,
cached: a run with shapes seen before plans nothing), and may split again further on. Control-flow
nodes run their subgraphs as nested sessions (``control_flow.py``).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from ..backends.base import DynamicKernel, PackCache
from ..backends.reference import evaluate
from ..backends.registry import make_backend
from ..errors import InputError, KernelError, SessionBusyError, ShapeError, SpratError
from ..ir.graph import MISSING, Graph, contiguous
from ..ir.shapes import DataDependentShape, infer
from ..ir.shapes.control import fold_node
from ..ir.tensorinfo import TensorInfo
from ..memory.lifetimes import lifetimes
from ..memory.planner import ALIGN, allocate_arena, plan_memory
from ..schedule.assign import assign
from .config import ScheduleConfig
from .runtime import Runtime

log = logging.getLogger("sprat")

# NOTE: integer feeds up to this many elements may be read at prepare time when the plan needs
# their contents (shape inputs); larger ones are data, never folded.
VALUE_INPUT_MAX = 4096
# NOTE: plans of a dynamic tail kept per dynamic node (one per signature of its output shapes);
# the oldest is dropped beyond this (a NonZero whose count changes every run must not grow
# memory without bound).
MAX_DYNAMIC_PLANS = 16


def _view_aliases(pending, kernels, sizes: dict, spans: dict, known) -> dict[int, int]:
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


class TensorSpec(NamedTuple):
    """A graph input or output: name, shape (ints, or str for symbolic dims), numpy dtype."""

    name: str
    shape: tuple
    dtype: np.dtype


class OpInfo(NamedTuple):
    """What a run callback learns about the op it is called for (MNN ``OperatorInfo``).

    ``flops``: floating-point operations of one run of the op (multiply-add = 2) at the prepared
    shapes; ``backend``: the kernel family that runs it (``"cpu"`` or ``"reference"``).
    """

    name: str
    type: str
    flops: int
    backend: str


class RunResult(dict):
    """``{output name: np.ndarray}`` returned by ``run_with_callback``; ``partial`` is True when
    an ``after`` callback stopped the run (then only the outputs computed so far are present)."""

    partial: bool = False


class _Step(NamedTuple):
    node: object
    backend: str
    kernel: object
    ins: list
    outs: list
    in_infos: list
    out_infos: list


class _Segment:
    """A planned stretch of the graph: steps (with their own arena) up to a dynamic node."""

    __slots__ = (
        "arena",
        "arrays",
        "children",
        "cut",
        "dyn",
        "dyn_info",
        "dyn_rebind",
        "env",
        "known",
        "op_infos",
        "plan",
        "rebind",
        "steps",
        "total",
    )


class _Evaluate(DynamicKernel):
    """A dynamic node run by the reference kernels (NumPy allocates the outputs)."""

    backend = "reference"

    def run_dynamic(self, ins):
        return [contiguous(a) for a in evaluate(self.node, ins)]


def _dynamic_run(kernel):
    def run(ins, box):
        box.extend(kernel.run_dynamic(ins))
    return run


class Session:
    """Runs one model with one ScheduleConfig. Create with ``Interpreter.create_session``.

    A session runs one call at a time: a second concurrent ``run`` raises SessionBusyError.
    """

    def __init__(self, graph: Graph, config: ScheduleConfig | None = None,
                 packs: PackCache | None = None, runtime=None):
        self.config = config if config is not None else ScheduleConfig()
        self.runtime = runtime if runtime is not None else Runtime.default()
        self._packs = packs
        self._graph = graph
        threads = min(self.config.num_threads, self.runtime.num_threads)
        self.num_threads = threads
        # NOTE: one instance per backend name, so a backend listed twice (the default
        # backends=("cpu",), backup="cpu") enters its run context once per run
        made: dict = {}
        for name in (*self.config.backends, self.config.backup):
            if name not in made:
                made[name] = make_backend(name, threads, packs, self.config.precision,
                                          self.config.memory)
        self._backends = [made[n] for n in self.config.backends]
        self._backup = made[self.config.backup]
        # NOTE: control-flow nodes (If, Loop, Scan) run their subgraphs as nested sessions
        self._backends.insert(0, make_backend("control_flow", make_session=self._subsession,
                                              report_as=self.config.backends[0]))
        self._lock = threading.Lock()
        self._shapes: dict[str, tuple[int, ...]] | None = None
        self._plan: tuple = ()
        self._steps: list[_Step] = []
        self._input_views: dict[str, np.ndarray] = {}
        self._output_arrays: list[tuple[str, np.ndarray]] = []
        self._pending: dict[str, tuple[int, ...]] | None = None  # deferred resize
        self._exclusive = False  # every tensor its own bytes (set once callbacks are used)
        self._value_inputs: dict[str, np.ndarray] = {}  # inputs whose contents the plan used
        self._lent: set[str] = set()  # inputs whose buffer input_buffer() handed out
        self._op_times: list[float] = []
        self.copy_counts = {"inputs": 0, "outputs": 0}
        self._arena = None
        self._tail = None  # the root _Segment when the plan has a dynamic tail
        self._tail_record: list = []  # (step, OpInfo) of the dynamic tail's last run
        self._tail_times: list = []
        self._dynamic_outputs: set[str] = set()
        self._output_uses: dict = {}
        self._in_specs = [self._spec(i) for i in graph.inputs]
        self._out_specs = [self._spec(i) for i in graph.outputs]
        # NOTE: (names, ((name, shape, dtype), ...)) of the last feeds that passed every check
        # with all inputs fed: feeds of the same names, types, shapes and dtypes pass again
        self._fed: tuple | None = None

    def _subsession(self, graph: Graph) -> Session:
        """A session for a subgraph: same config, packed weights and runtime."""
        return Session(graph, self.config, self._packs, self.runtime)

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
        if self._shapes is None:
            return list(self._out_specs)
        return [TensorSpec(n, a.shape, a.dtype) for n, a in self._output_arrays]

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
            if name not in self._input_views and name not in [s.name for s in self._in_specs]:
                raise InputError(f"unknown input {name!r}; the model's inputs are "
                                 f"{[s.name for s in self._in_specs]}")
            if self._pending is not None:
                self._prepare(self._pending)
            if self._shapes is None:
                raise ShapeError("the session has no input shapes yet: call resize() first")
            self._lent.add(name)
            return self._input_views[name]

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

        ``before(info: OpInfo, inputs, outputs)`` is called before an op runs; returning False
        skips it (its outputs keep their previous contents: once ``before`` is used, the
        session plans every tensor in bytes of its own, at the cost of a larger arena; that
        new plan starts empty). ``after(info, inputs, outputs)``
        is called after; returning False stops the run: the result then holds the outputs
        computed so far and ``result.partial`` is True. The arrays are the session's own,
        valid during the call only (copy what you keep). Errors as ``run``; an exception
        raised by a callback propagates unchanged.
        """
        if before is not None and not self._exclusive:
            with self._busy():
                self._exclusive = True
                if self._shapes is not None:
                    self._pending = self._pending or dict(self._shapes)
        return self._run(feeds, output_names, None, before, after)

    def _run(self, feeds, output_names, outputs, before, after) -> RunResult:
        with self._busy():
            wanted = self._check_output_names(output_names)
            feeds = self._check_feeds(feeds)
            shapes = {k: tuple(a.shape) for k, a in feeds.items()}
            for name in self._lent - set(feeds):
                shapes[name] = self._shapes[name]
            if self._pending is not None or shapes != self._shapes or (
                    self._value_inputs and self._values_changed(feeds)):
                stale = sorted(self._lent - set(feeds))
                if stale:
                    raise InputError(f"input(s) {stale} were filled through input_buffer(), "
                                     f"but these feeds need a new plan {shapes}: feed them, or "
                                     f"fill the buffers again after resize()")
                if self._shapes is not None and self._pending is None:
                    log.debug("session: input shapes changed to %s; resizing", shapes)
                self._prepare_for(self._complete_shapes(shapes), feeds)
            user = self._check_user_outputs(outputs)
            for name, arr in feeds.items():
                view = self._input_views[name]
                if arr is not view:
                    np.copyto(view, arr)
                    self.copy_counts["inputs"] += 1
            bound = [(n, a) for n, a in user.items() if a is not None]
            self._bind_outputs(bound)
            try:
                produced = self._execute(before, after)
            finally:
                self._unbind_outputs(bound)
            result = RunResult()
            result.partial = produced is not None
            for name, arr in self._output_arrays:
                if wanted is not None and name not in wanted and name not in user:
                    continue
                if produced is not None and name not in produced:
                    continue
                if name in user:
                    dst = user[name] if user[name] is not None else outputs[name]
                    if user[name] is None:
                        if dst.shape != arr.shape:
                            raise InputError(f"output {name!r}: array of shape "
                                             f"{list(dst.shape)} cannot hold the result of "
                                             f"shape {list(arr.shape)}")
                        if not np.can_cast(arr.dtype, dst.dtype, casting="same_kind"):
                            raise InputError(f"output {name!r}: array of dtype {dst.dtype} "
                                             f"cannot hold the result of dtype {arr.dtype}")
                        np.copyto(dst, arr, casting="same_kind")
                        self.copy_counts["outputs"] += 1
                    result[name] = dst
                else:
                    result[name] = arr.copy()
                    self.copy_counts["outputs"] += 1
            return result

    # ---- checks ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def _busy(self):
        if not self._lock.acquire(blocking=False):
            raise SessionBusyError("this session is already running a call; use one session per "
                                   "thread (Interpreter.create_session) for concurrent runs")
        try:
            yield
        finally:
            self._lock.release()

    def _check_output_names(self, output_names):
        if output_names is None:
            return None
        known = [s.name for s in self._out_specs]
        bad = [n for n in output_names if n not in known]
        if bad:
            raise InputError(f"unknown output name(s) {bad}; the model's outputs are {known}")
        return set(output_names)

    def _check_feeds(self, feeds) -> dict[str, np.ndarray]:
        if not isinstance(feeds, Mapping):
            raise InputError(f"feeds must be a dict {{input name: array}}, got "
                             f"{type(feeds).__name__}")
        fed = self._fed
        if fed is not None and feeds.keys() == fed[0]:
            for name, shape, dtype in fed[1]:
                a = feeds[name]
                if type(a) is not np.ndarray or a.shape != shape or a.dtype != dtype:
                    break
            else:
                return dict(feeds)
        names = [s.name for s in self._in_specs]
        unknown = [k for k in feeds if k not in names]
        missing = [n for n in names if n not in feeds and n not in self._lent]
        if unknown or missing:
            raise InputError(
                f"inputs do not match the model: unknown {unknown}, missing {missing}; "
                f"the model's inputs are {names}")
        out = {}
        for spec in self._in_specs:
            if spec.name not in feeds:
                continue  # filled in place through input_buffer()
            arr = feeds[spec.name]
            if not isinstance(arr, np.ndarray):
                arr = np.asarray(arr)
            if spec.dtype is not None and arr.dtype != spec.dtype:
                raise InputError(f"input {spec.name!r}: expected dtype {spec.dtype}, got "
                                 f"{arr.dtype}")
            self._check_shape(spec, tuple(arr.shape))
            out[spec.name] = arr
        if len(out) == len(self._in_specs) and all(type(a) is np.ndarray
                                                   for a in out.values()):
            self._fed = (frozenset(out), tuple((n, a.shape, a.dtype) for n, a in out.items()))
        return out

    def _check_shape(self, spec: TensorSpec, shape: tuple):
        if spec.shape is None:
            return
        if len(shape) != len(spec.shape):
            raise InputError(f"input {spec.name!r}: expected rank {len(spec.shape)} "
                             f"(shape {list(spec.shape)}), got shape {list(shape)}")
        for axis, (want, got) in enumerate(zip(spec.shape, shape)):
            if isinstance(want, int) and want >= 0 and want != got:
                raise InputError(f"input {spec.name!r}: dim {axis} must be {want} "
                                 f"(shape {list(spec.shape)}), got shape {list(shape)}")
            if not isinstance(got, (int, np.integer)) or got < 0:
                raise InputError(f"input {spec.name!r}: invalid dim {got!r} in shape {list(shape)}")

    def _check_user_outputs(self, outputs) -> dict[str, np.ndarray | None]:
        """``{name: array to bind}`` (None: copy into ``outputs[name]`` after the run)."""
        if outputs is None:
            return {}
        if not isinstance(outputs, Mapping):
            raise InputError(f"outputs must be a dict {{output name: array}}, got "
                             f"{type(outputs).__name__}")
        planned = dict(self._output_arrays)
        bad = [n for n in outputs if n not in planned]
        if bad:
            raise InputError(f"unknown output name(s) {bad}; the model's outputs are "
                             f"{list(planned)}")
        user = {}
        for name, dst in outputs.items():
            src = planned[name]
            if not isinstance(dst, np.ndarray):
                raise InputError(f"output {name!r}: expected a numpy array, got "
                                 f"{type(dst).__name__}")
            if name in self._dynamic_outputs:
                # NOTE: shape known only after the run: checked then, and copied into
                if not dst.flags.writeable:
                    raise InputError(f"output {name!r}: the array is read-only")
                user[name] = None
                continue
            if dst.shape != src.shape:
                raise InputError(f"output {name!r}: array of shape {list(dst.shape)} cannot "
                                 f"hold the result of shape {list(src.shape)}")
            if not np.can_cast(src.dtype, dst.dtype, casting="same_kind"):
                raise InputError(f"output {name!r}: array of dtype {dst.dtype} cannot hold "
                                 f"the result of dtype {src.dtype}")
            if not dst.flags.writeable:
                raise InputError(f"output {name!r}: the array is read-only")
            direct = (dst.dtype == src.dtype and dst.flags.c_contiguous
                      and name in self._output_uses)
            user[name] = dst if direct else None
        return user

    def _bind_outputs(self, bound) -> None:
        """Make the kernels write (and later steps read) graph outputs in user arrays."""
        for name, arr in bound:
            for lst, pos in self._output_uses[name]:
                lst[pos] = arr

    def _unbind_outputs(self, bound) -> None:
        planned = dict(self._output_arrays)
        for name, _ in bound:
            for lst, pos in self._output_uses[name]:
                lst[pos] = planned[name]

    def _complete_shapes(self, shapes: Mapping[str, tuple]) -> dict[str, tuple[int, ...]]:
        names = [s.name for s in self._in_specs]
        unknown = [k for k in shapes if k not in names]
        if unknown:
            raise InputError(f"unknown input name(s) {unknown}; the model's inputs are {names}")
        full = {}
        for spec in self._in_specs:
            if spec.name in shapes:
                shape = tuple(int(d) for d in shapes[spec.name])
            elif self._shapes is not None:
                shape = self._shapes[spec.name]
            elif spec.shape is not None and all(isinstance(d, int) and d >= 0 for d in spec.shape):
                shape = spec.shape
            else:
                raise InputError(f"input {spec.name!r} has symbolic shape "
                                 f"{list(spec.shape or [])}; give its shape to resize()")
            self._check_shape(spec, shape)
            full[spec.name] = shape
        return full

    # ---- prepare ----------------------------------------------------------------------------
    def _prepare_for(self, shapes: dict[str, tuple[int, ...]], feeds: dict) -> None:
        """Prepare for ``shapes``; when the plan needs the *contents* of inputs (a graph input
        feeding a Reshape shape, Slice starts, TopK k, ...), prepare again with the values of
        the small integer feeds, and remember them: a run with other values re-prepares
        (MNN resizes when such "shape inputs" change). When even that cannot give every
        shape, the plan is split at the data-dependent nodes (see ``_prepare``)."""
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
                # NOTE: shapes only known while running: a static prefix, then the dynamic
                # nodes and the tail planned at run time (cached by the dynamic shapes)
                self._prepare(shapes)

    def _values_changed(self, feeds: dict) -> bool:
        for name, planned in self._value_inputs.items():
            a = feeds.get(name)
            if a is not None and (a.shape != planned.shape or not (a == planned).all()):
                return True
        return False

    def _prepare(self, shapes: dict[str, tuple[int, ...]], values: dict | None = None,
                 split: bool = True, dtypes: dict | None = None) -> None:
        """Infer, fold, assign, prepare kernels and plan the arena for ``shapes``.

        A node whose output shape depends on data computed while running (DataDependentShape)
        splits the plan when ``split``: the nodes before it form the static plan, the node runs
        as a dynamic node (it allocates its outputs) and the rest is planned at run time, once
        per signature of the dynamic outputs' shapes (``_Segment``). ``values``: contents of
        (small integer) inputs the plan may fold; ``dtypes``: input dtypes overriding the
        declared ones (subgraph inputs)."""
        g = self._graph
        known: dict[int, TensorInfo] = {}
        for i, v in enumerate(g.values):
            if v.data is not None:
                known[i] = TensorInfo(tuple(v.data.shape), v.data.dtype, v.data)
        for i in g.inputs:
            v = g.values[i]
            dt = dtypes.get(v.name) if dtypes is not None else None
            if dt is None:
                dt = v.dtype if v.dtype is not None else np.dtype(np.float32)
            known[i] = TensorInfo(shapes[v.name], np.dtype(dt),
                                  None if values is None else values.get(v.name))
        pending, cut = self._infer_nodes(0, known, split)
        root = self._plan_segment(pending, cut, known, set(g.inputs), {}, root=True)
        steps = root.steps
        self._root = root
        self._tail = root if root.dyn is not None else None
        self._arena = root.arena
        self._steps = steps
        self._plan = root.plan
        arrays = root.arrays
        self._input_views = {g.values[i].name: arrays[i] for i in g.inputs}
        self._env_inputs = {i: arrays[i] for i in g.inputs}
        self._input_uses = [[(s.ins, k) for s in steps for k, v in enumerate(s.node.inputs)
                             if v == i] for i in g.inputs]
        self._output_arrays = [(g.values[i].name, arrays[i] if i in arrays
                                else np.empty(0, g.values[i].dtype or np.float32))
                               for i in g.outputs]
        self._out_sources = [g.inputs.index(i) if i in g.inputs else -1 for i in g.outputs]
        self._dynamic_outputs = {g.values[i].name for i in g.outputs if i not in arrays}
        # where each step-produced graph output appears in the plan (for zero-copy binding);
        # NOTE: an output the dynamic tail reads stays in the arena (the tail was bound to it)
        later = self._read_from(cut) if cut is not None else set()
        produced = {o for node, _, _ in pending for o in node.outputs}
        self._output_uses = {}
        for i in g.outputs:
            if i not in produced or i in g.inputs or i in later:
                continue
            uses = []
            for s in steps:
                uses += [(s.ins, k) for k, v in enumerate(s.node.inputs) if v == i]
                uses += [(s.outs, k) for k, v in enumerate(s.node.outputs) if v == i]
            self._output_uses[g.values[i].name] = uses
        self._op_infos = root.op_infos
        self._op_times = [0.0] * len(steps)
        self._op_starts = [0.0] * len(steps)
        self._tail_record = []
        self._tail_times = []
        self._lent = set()
        self._pending = None
        self._arena_bytes = root.total
        self._shapes = dict(shapes)
        self._run_contexts = [b for b in {id(b): b for b in
                                          (*self._backends, self._backup)}.values()
                              if hasattr(b, "run_context")]

    def _read_from(self, start: int) -> set[int]:
        """Values read by the nodes from ``start`` on, and the graph outputs."""
        g = self._graph
        out = set(g.outputs)
        for n in g.nodes[start:]:
            out.update(i for i in n.inputs if i != MISSING)
        return out

    def _infer_nodes(self, start: int, known: dict, split: bool):
        """Shapes of the nodes from ``start`` on, folding what is known, into ``known``.
        Returns ``(pending steps, index of the first dynamic node or None)``."""
        pending = []  # (node, ins infos, outs infos)
        for k in range(start, len(self._graph.nodes)):
            node = self._graph.nodes[k]
            ins = [None if i == MISSING else known[i] for i in node.inputs]
            values = fold_node(node, ins)
            if values is not None:
                for o, val in zip(node.outputs, values):
                    known[o] = TensorInfo(tuple(val.shape), val.dtype, val)
                continue
            try:
                # NOTE: a shape function gives every output the op can have (LSTM: Y, Y_h,
                # Y_c); the node may list fewer (trailing optional outputs left out)
                outs = [TensorInfo(s, dt) for s, dt in infer(node, ins)][:len(node.outputs)]
            except DataDependentShape:
                if not split:
                    raise
                return pending, k
            for o, info in zip(node.outputs, outs):
                known[o] = info
            pending.append((node, ins, outs))
        return pending, None

    def _plan_segment(self, pending, cut, known, env: set, outer: dict, root=False) -> _Segment:
        """Kernels and one arena for ``pending`` (the steps up to the dynamic node ``cut``).

        ``env``: values whose arrays are bound at each run (graph inputs, outputs of dynamic
        nodes); ``outer``: arrays of values planned by the segments before this one."""
        g = self._graph
        if cut is None:
            unproduced = [g.values[i].name for i in g.outputs if i not in known]
            if unproduced:
                raise ShapeError(f"graph output(s) {unproduced} are computed by no node sprat "
                                 f"runs (e.g. training-only outputs)")
        planned = set(g.inputs) if root else set()
        for node, _, _ in pending:
            planned.update(node.outputs)
        later = self._read_from(cut) if cut is not None else set(g.outputs)
        sizes = {v: known[v].nbytes for v in planned}
        spans = lifetimes([(n.inputs, n.outputs) for n, _, _ in pending],
                          keep_alive=(planned & later) | (planned & set(g.outputs)),
                          start_alive=set(g.inputs) if root else set())
        if self._exclusive:
            # NOTE: callbacks may skip ops, whose outputs must then keep their previous
            # contents: no two tensors share bytes in this plan.
            spans = {v: (0, len(pending)) for v in spans}
        # NOTE: kernels are made (and prepared) before the arena: they say which outputs are
        # views of an input, and need no arena bytes to prepare
        kernels = [self._make_kernel(node, ins, outs) for node, ins, outs in pending]
        views = {} if self._exclusive else _view_aliases(pending, kernels, sizes, spans, known)
        offsets, total = plan_memory(sizes, spans)
        offsets.update({v: offsets[root] for v, root in views.items()})
        raw, arena = allocate_arena(total)
        rebind = []

        def array_of(idx: int) -> np.ndarray:
            info = known[idx]
            if info.value is not None:
                return info.value
            if idx in offsets:
                off = offsets[idx]
                return arena[off:off + info.nbytes].view(info.dtype).reshape(info.shape)
            if idx in env:
                return None  # bound at each run (rebind)
            return outer[idx]

        def bind(node, lst):
            for k, i in enumerate(node.inputs):
                if i != MISSING and i not in offsets and known[i].value is None and i in env:
                    rebind.append((i, lst, k))
            return lst

        steps = []
        for (node, ins, outs), kernel in zip(pending, kernels):
            steps.append(_Step(node, kernel.backend, kernel,
                               bind(node, [None if i == MISSING else array_of(i)
                                           for i in node.inputs]),
                               [array_of(o) for o in node.outputs], ins, outs))
        seg = _Segment()
        seg.steps, seg.rebind, seg.arena, seg.total = steps, rebind, raw, total
        seg.plan = tuple((s.kernel.run, s.ins, s.outs) for s in steps)
        seg.arrays = dict(outer)
        seg.arrays.update({v: array_of(v) for v in planned})
        seg.arrays.update({v: known[v].value for v in g.outputs
                           if v in known and known[v].value is not None})
        seg.known, seg.env, seg.cut, seg.children = known, env, cut, {}
        seg.dyn = None
        from ..ir.flops import node_flops

        seg.op_infos = [OpInfo(s.node.name, s.node.op_type,
                               node_flops(s.node, s.in_infos, s.out_infos), s.backend)
                        for s in steps]
        if cut is not None:
            node = g.nodes[cut]
            ins = [None if i == MISSING else known[i] for i in node.inputs]
            kernel = self._make_kernel(node, ins, None)
            dyn_rebind = []
            arrs = [None if i == MISSING else array_of(i) for i in node.inputs]
            for k, i in enumerate(node.inputs):
                if i != MISSING and arrs[k] is None:
                    dyn_rebind.append((i, arrs, k))
            seg.dyn = _Step(node, kernel.backend, kernel, arrs, None, ins, None)
            seg.dyn_rebind = dyn_rebind
            seg.dyn_info = OpInfo(node.name, node.op_type, 0, kernel.backend)
        return seg

    def _make_kernel(self, node, ins, outs):
        """The prepared kernel of ``node``; ``outs=None``: a dynamic node (a DynamicKernel)."""
        backend = assign(node, ins, self._backends, self._backup)
        kernel = backend.make_kernel(node, ins)
        if outs is None and not isinstance(kernel, DynamicKernel):
            kernel = _Evaluate(node)
        try:
            kernel.prepare(ins, outs)
        except SpratError:
            raise
        except Exception as e:
            raise KernelError(node.name, node.op_type, f"prepare failed: {e}") from e
        return kernel

    def _next_segment(self, seg: _Segment, outs: list[np.ndarray]) -> _Segment:
        """Plan the graph after ``seg``'s dynamic node, whose outputs are ``outs``."""
        known = dict(seg.known)
        node = seg.dyn.node
        for o, a in zip(node.outputs, outs):
            known[o] = TensorInfo(tuple(a.shape), a.dtype)
        pending, cut = self._infer_nodes(seg.cut + 1, known, True)
        return self._plan_segment(pending, cut, known, seg.env | set(node.outputs), seg.arrays)

    def _tail_steps(self):
        """The steps of the dynamic tail of this run, as ``(op info, run, ins, outs)``;
        segments are planned (and cached by the dynamic outputs' shapes) as they are reached.
        A dynamic node's ``outs`` is a list its run fills; left empty (skipped), the tail stops.
        At the end, the graph outputs of this run are in ``_output_arrays``."""
        env = dict(self._env_inputs)
        seg = self._root
        record = []
        self._tail_record = record
        self._tail_times = []
        while seg.dyn is not None:
            dyn = seg.dyn
            for v, lst, k in seg.dyn_rebind:
                lst[k] = env[v]
            box: list = []
            record.append((dyn, seg.dyn_info))
            yield seg.dyn_info, _dynamic_run(dyn.kernel), dyn.ins, box
            if not box:
                return
            for o, a in zip(dyn.node.outputs, box):
                env[o] = a
            key = tuple((a.shape, a.dtype.str) for a in box)
            nxt = seg.children.get(key)
            if nxt is None:
                if len(seg.children) >= MAX_DYNAMIC_PLANS:
                    seg.children.pop(next(iter(seg.children)))
                nxt = seg.children[key] = self._next_segment(seg, box)
            for v, lst, k in nxt.rebind:
                lst[k] = env[v]
            for s, info in zip(nxt.steps, nxt.op_infos):
                record.append((s, info))
                yield info, s.kernel.run, s.ins, s.outs
            seg = nxt
        g = self._graph
        self._output_arrays = [(g.values[i].name, env[i] if i in env else seg.arrays[i])
                               for i in g.outputs]

    @staticmethod
    def _fold(node, ins: list[TensorInfo | None]):
        """Outputs known before running: from shapes alone, or all inputs known (shape chains)."""
        return fold_node(node, ins)

    def _call(self, arrays: list[np.ndarray], bind: bool = True) -> list[np.ndarray]:
        """Run a prepared subgraph session on ``arrays`` (one per graph input, in order, with
        the prepared shapes): for control-flow kernels, inside the parent's run. No checks, no
        copies: the kernels read ``arrays`` in place; the results are the session's own arrays
        (valid until the next call), or input arrays passed through. ``bind=False``: the plan
        still holds these very arrays from the previous call."""
        if bind:
            for uses, a in zip(self._input_uses, arrays):
                for lst, k in uses:
                    lst[k] = a
        self._run_plan()
        if self._tail is not None:
            self._env_inputs = dict(zip(self._graph.inputs, arrays))
            self._run_steps(self._tail_steps())
        return [a if k < 0 else arrays[k]
                for k, (_, a) in zip(self._out_sources, self._output_arrays)]

    def _run_plan(self) -> None:
        """The plain plan loop: every prepared step, nothing else on the hot path."""
        i = 0
        try:
            for i, (run, ins, outs) in enumerate(self._plan):
                run(ins, outs)
        except SpratError:
            raise
        except Exception as e:
            self._kernel_error(i, e)

    def _run_steps(self, steps) -> None:
        for info, run, ins, outs in steps:
            try:
                run(ins, outs)
            except SpratError:
                raise
            except Exception as e:
                raise KernelError(info.name, info.type, f"{type(e).__name__}: {e}") from e

    # ---- run ----------------------------------------------------------------------------
    def _execute(self, before=None, after=None) -> set[str] | None:
        """Run the plan. Returns None, or (when ``after`` stopped the run) the names of the
        graph outputs computed so far."""
        with self.runtime.slots(self.num_threads):
            contexts = self._run_contexts
            if len(contexts) == 1:  # NOTE: the usual case, without an ExitStack per run
                with contexts[0].run_context():
                    return self._execute_entered(before, after)
            with contextlib.ExitStack() as stack:
                for b in contexts:
                    stack.enter_context(b.run_context())
                return self._execute_entered(before, after)

    def _execute_entered(self, before, after) -> set[str] | None:
        """``_execute`` once the thread slots and backend contexts are held."""
        if before is None and after is None and not self.config.profiling:
            self._run_plan()
            if self._tail is not None:
                self._run_steps(self._tail_steps())
            return None
        return self._execute_observed(before, after)

    def _kernel_error(self, i: int, e: Exception):
        node = self._steps[i].node
        raise KernelError(node.name, node.op_type, f"{type(e).__name__}: {e}") from e

    def _execute_observed(self, before, after) -> set[str] | None:
        """The plan loop with callbacks and per-op timing (kept out of the plain loop)."""
        clock = time.perf_counter
        done: set[int] = set()
        start = clock()
        self._op_times = [0.0] * len(self._plan)
        self._tail_times = []
        steps = ((info, run, ins, outs) for info, (run, ins, outs)
                 in zip(self._op_infos, self._plan))
        n = len(self._plan)
        tail = self._tail_steps() if self._tail is not None else ()
        g = self._graph
        for k, (info, run, ins, outs) in enumerate(itertools.chain(steps, tail)):
            if before is not None and before(info, ins, outs) is False:
                if k >= n:
                    self._tail_times.append((0.0, 0.0))
                continue
            t0 = clock()
            try:
                run(ins, outs)
            except SpratError:
                raise
            except Exception as e:
                raise KernelError(info.name, info.type, f"{type(e).__name__}: {e}") from e
            if k < n:
                self._op_times[k] = clock() - t0
                self._op_starts[k] = t0 - start
                done.update(self._steps[k].node.outputs)
            else:
                self._tail_times.append((t0 - start, clock() - t0))
                done.update(self._tail_record[k - n][0].node.outputs)
            if after is not None and after(info, ins, outs) is False:
                return {g.values[o].name for o in g.outputs
                        if o in done or g.values[o].data is not None or o in g.inputs}
        if self._tail is not None and len(done) and not all(
                o in done or o in g.inputs or g.values[o].data is not None
                or o in self._root.arrays for o in g.outputs):
            # NOTE: a skipped dynamic node stops the tail: what follows has no shapes
            return {g.values[o].name for o in g.outputs
                    if o in done or g.values[o].data is not None or o in g.inputs}
        return None

    # ---- introspection ------------------------------------------------------------------
    STAGES = ("assigned", "planned")

    def dump(self, stage: str = "planned") -> str:
        """The prepared plan as text: ``assigned`` (backend per node) or ``planned`` (also the
        shapes and arena offsets of every output). Raises ValueError for another stage."""
        if stage not in self.STAGES:
            raise ValueError(f"unknown session stage {stage!r}; stages: {', '.join(self.STAGES)}")
        if self._shapes is None:
            raise ShapeError("the session is not prepared yet: call resize() or run() first")
        lines = [f"arena {self._arena_bytes} bytes; inputs {self._shapes}"]
        base = self._arena[(-self._arena.ctypes.data) % ALIGN:].ctypes.data
        for s in self._steps:
            line = f"{s.node.name}: {s.node.op_type} -> {s.backend}"
            if stage == "planned":
                outs = []
                for a in s.outs:
                    off = a.ctypes.data - base
                    where = f"@{off}" if 0 <= off < self._arena_bytes else "@const"
                    outs.append(f"{a.dtype}{list(a.shape)}{where}")
                line += "  " + ", ".join(outs)
            lines.append(line)
        return "\n".join(lines)

    def _workspace_bytes(self) -> int:
        """Bytes of scratch the kernels of this session own (packed weights shared with other
        sessions and the model's own weights not counted)."""
        shared = self._packs.ids() if self._packs is not None else set()
        seen: set[int] = set()
        total = 0

        def walk(v):
            nonlocal total
            if isinstance(v, np.ndarray):
                base = v if v.base is None else v.base
                if id(base) in seen or id(v) in shared or id(base) in shared:
                    return
                seen.add(id(base))
                if v.flags.owndata:
                    total += v.nbytes
            elif isinstance(v, (list, tuple)):
                for x in v:
                    walk(x)

        for step in self._all_steps():
            for value in vars(step.kernel).values():
                walk(value)
        return total

    def trace(self) -> dict:
        """The last profiled run as a Chrome / Perfetto trace (``chrome://tracing``, JSON
        "Trace Event Format": one complete event per op, times in microseconds). Needs
        ``ScheduleConfig(profiling=True)``; raises ValueError otherwise."""
        if not self.config.profiling:
            raise ValueError("trace() needs a session created with ScheduleConfig(profiling=True)")
        events = [{"name": info.name, "cat": info.type, "ph": "X", "pid": 0, "tid": 0,
                   "ts": round(t0 * 1e6, 3), "dur": round(dt * 1e6, 3),
                   "args": {"backend": info.backend, "flops": info.flops}}
                  for info, t0, dt in zip([*self._op_infos, *(i for _, i in self._tail_record)],
                                          [*self._op_starts, *(t for t, _ in self._tail_times)],
                                          [*self._op_times, *(d for _, d in self._tail_times)])]
        return {"traceEvents": events, "displayTimeUnit": "ms"}

    def node_infos(self) -> list[tuple]:
        """``(node, input TensorInfos, output TensorInfos)`` of every planned step (with a
        dynamic tail: the steps of the last run after the static plan; dynamic nodes, whose
        output shapes vary, are left out)."""
        return [(s.node, s.in_infos, s.out_infos) for s in self._all_steps()
                if s.out_infos is not None]

    def _all_steps(self) -> list:
        return [*self._steps, *(s for s, _ in self._tail_record)]

    def info(self) -> dict:
        """Arena bytes, weight bytes, packed weight bytes (shared by the Interpreter's
        sessions), kernel workspace bytes (scratch owned by this session's kernels), FLOPs of
        one run (multiply-add = 2), number of steps, backend per node, threads, the
        ScheduleConfig precision and memory modes, prepared input shapes, and with
        ``ScheduleConfig(profiling=True)`` the time in ms of each op in the last run
        (``op_times_ms``). Shape-dependent entries are those of the last resize; a model
        with data-dependent shapes also lists the dynamic nodes and the steps planned after them
        in its last run (``arena_bytes`` counts the static plan only)."""
        from ..ir.flops import graph_flops

        return {
            "arena_bytes": getattr(self, "_arena_bytes", 0),
            "weight_bytes": self._graph.weight_bytes(),
            "packed_bytes": self._packs.nbytes if self._packs is not None else 0,
            "flops": graph_flops(self.node_infos()),
            "workspace_bytes": self._workspace_bytes(),
            "steps": len(self._all_steps()),
            "backends": {s.node.name: s.backend for s in self._all_steps()},
            "num_threads": self.num_threads,
            "precision": self.config.precision,
            "memory": self.config.memory,
            "op_times_ms": ({s.node.name: t * 1e3 for s, t in
                             zip(self._all_steps(),
                                 [*self._op_times, *(d for _, d in self._tail_times)])}
                            if self.config.profiling else {}),
            "input_shapes": dict(self._shapes or {}),
        }
