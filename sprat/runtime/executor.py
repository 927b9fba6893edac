"""The run loops over a (Plan, RunState): plain, observed (callbacks and per-op timing), the
dynamic tail, and the nested call of a subgraph.

The plain loop is the hot path: it calls every prepared step and does nothing else (MNN's
``Session::run``). Everything a run may want to see happens in the observed loop, kept apart.
"""

from __future__ import annotations

import contextlib
import itertools
import time

from ..errors import KernelError, SpratError
from ..ir.graph import MISSING
from .state import RunState


def _error(info, e: Exception) -> KernelError:
    err = KernelError(info.name, info.type, f"{type(e).__name__}: {e}")
    err.__cause__ = e
    return err


def _run_step(info, run, ins, outs, ws) -> None:
    """One step outside the plain loop; a failure becomes a KernelError naming its node."""
    try:
        run(ins, outs, ws)
    except SpratError:
        raise
    except Exception as e:
        raise _error(info, e) from e


def execute(state: RunState, runtime, threads: int, before=None, after=None,
            observed: bool = False) -> set[str] | None:
    """Run ``state``'s plan on ``threads`` of ``runtime``'s thread slots, inside the run
    contexts of its backends. ``before`` / ``after`` / ``observed``: the observed loop
    (``run_observed``). Returns None, or (when ``after`` stopped the run) the names of the
    graph outputs computed so far. Raises KernelError naming the node that failed; a
    SpratError or an exception raised by a callback propagates unchanged."""
    entry = state.entry
    if entry is None or entry[0] is not runtime or entry[1] != threads:
        # NOTE: the slots and the backends' run contexts made once per run state (its
        # session's runs are serial): making them cost ~2-3 us of every run
        entry = state.entry = (runtime, threads, runtime.slots(threads),
                               tuple(b.run_context() for b in state.plan.contexts))
    contexts = entry[3]
    with entry[2]:
        if len(contexts) == 1:  # NOTE: the usual case, without an ExitStack per run
            with contexts[0]:
                return _entered(state, before, after, observed)
        with contextlib.ExitStack() as stack:
            for c in contexts:
                stack.enter_context(c)
            return _entered(state, before, after, observed)


def _entered(state, before, after, observed):
    if before is None and after is None and not observed:
        run_plain(state)
        return None
    return run_observed(state, before, after)


def run_plain(state: RunState, env: dict | None = None) -> None:
    """Every prepared step (but views with nothing to do, ``RunState.hot``; from the second run
    their calls, ``RunState.flat``), then the dynamic tail if the plan has one. ``env``: the
    arrays of the graph inputs by value index (default: the state's own input arrays)."""
    i = 0
    replay = state.flat is not None and not state.outputs_bound
    calls, index = (state.flat, state.flat_index) if replay else (state.hot, state.hot_index)
    try:
        for i, (fn, args) in enumerate(calls):
            fn(*args)
    except SpratError:
        raise
    except Exception as e:
        raise _error(state.plan.steps[index[i]].info, e) from e
    if state.flat is None and not state.flat_off and not state.outputs_bound:
        state.make_flat()
    if state.plan.dynamic is not None:
        for step in tail_steps(state, env):
            _run_step(*step)


def _dynamic_run(kernel):
    def run(ins, box, ws):
        box.extend(kernel.run_dynamic(ins, ws))
    return run


def tail_steps(state: RunState, env: dict | None = None):
    """The steps after the static plan in this run, as ``(op info, run, ins, outs, ws)``;
    the plans after each dynamic node are made (and memoised by the dynamic outputs' shapes)
    as they are reached. A dynamic node's ``outs`` is a list its run fills; left empty (the
    node was skipped), the tail stops. At the end, ``state.outputs`` holds this run's graph
    outputs."""
    g = state.plan.graph
    env = dict(env) if env is not None else {i: state.arrays[i] for i in g.inputs}
    seg = state
    record = state.record = []
    state.tail_times = []
    while seg.plan.dynamic is not None:
        dyn = seg.plan.dynamic
        ins = [None if v == MISSING else env[v] if v in env else seg.arrays[v] for v in dyn.ins]
        box: list = []
        record.append((dyn, dyn.info))
        yield dyn.info, _dynamic_run(dyn.kernel), ins, box, seg.dynamic_ws
        if not box:
            return
        for o, a in zip(dyn.outs, box):
            env[o] = a
        nxt = seg.child(seg.plan.next(tuple((a.shape, a.dtype.str) for a in box)))
        for v, lst, k in nxt.rebind:
            lst[k] = env[v]
        for step, (run, ins, outs, ws) in zip(nxt.plan.steps, nxt.calls):
            record.append((step, step.info))
            yield step.info, run, ins, outs, ws
        seg = nxt
    state.outputs = [(g.values[i].name, env[i] if i in env else seg.arrays[i])
                     for i in g.outputs]


def run_observed(state: RunState, before=None, after=None) -> set[str] | None:
    """The plan loop with callbacks around every op and per-op timing into ``state``
    (``op_times``, ``op_starts``, ``tail_times``). ``before(info, ins, outs)`` returning False
    skips the op; ``after(info, ins, outs)`` returning False stops the run: the names of the
    graph outputs computed so far are returned (else None)."""
    clock = time.perf_counter
    plan = state.plan
    g = plan.graph
    done: set[int] = set()
    start = clock()
    n = len(plan.steps)
    state.op_times = [0.0] * n
    state.op_starts = [0.0] * n
    state.tail_times = []
    steps = ((s.info, *call) for s, call in zip(plan.steps, state.calls))
    tail = tail_steps(state) if plan.dynamic is not None else ()

    def computed():
        return {g.values[o].name for o in g.outputs
                if o in done or g.values[o].data is not None or o in g.inputs}

    for k, (info, run, ins, outs, ws) in enumerate(itertools.chain(steps, tail)):
        if before is not None and before(info, ins, outs) is False:
            if k >= n:
                state.tail_times.append((0.0, 0.0))
            continue
        t0 = clock()
        _run_step(info, run, ins, outs, ws)
        if k < n:
            state.op_times[k] = clock() - t0
            state.op_starts[k] = t0 - start
            done.update(plan.steps[k].outs)
        else:
            state.tail_times.append((t0 - start, clock() - t0))
            done.update(state.record[k - n][0].outs)
        if after is not None and after(info, ins, outs) is False:
            return computed()
    if plan.dynamic is not None and len(done) and not all(
            o in done or o in g.inputs or g.values[o].data is not None
            or o in state.arrays for o in g.outputs):
        # NOTE: a skipped dynamic node stops the tail: what follows has no shapes
        return computed()
    return None


def call(state: RunState, arrays: list, bind: bool = True) -> list:
    """Run a subgraph's plan on ``arrays`` (one per graph input, in order, with the planned
    shapes), inside the parent's run: no checks, no copies (the kernels read ``arrays`` in
    place). Returns the outputs: the state's own arrays (valid until the next call), or input
    arrays passed through. ``bind=False``: the steps still hold these very arrays from the
    previous call."""
    if bind:
        state.bind_inputs(arrays)
    plan = state.plan
    run_plain(state, dict(zip(plan.graph.inputs, arrays)) if plan.dynamic is not None else None)
    return [a if k < 0 else arrays[k] for k, (_, a) in zip(state.out_sources, state.outputs)]
