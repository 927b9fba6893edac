"""Shapes of control-flow nodes (If, Loop, Scan): inferred by walking their subgraphs.

Unlike the family tables these functions take the node (its subgraphs and ``_captures``, see
``sprat.ir.subgraphs``) and return full :class:`TensorInfo` (an ``If`` whose condition is known
passes its branch's folded values on). An output shape that depends on data computed while
running (a Loop's trip count, If branches of different shapes) raises DataDependentShape.
Source: ONNX spec If-21, Loop-21, Scan-21.
"""

from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ..graph import MISSING, Graph, Node
from ..subgraphs import captures
from ..tensorinfo import TensorInfo
from .datadep import DataDependentShape

_I64 = np.dtype(np.int64)
# NOTE: a fold at prepare computes a constant once (a ConstantOfShape bias, say, which the fast
# kernels need as a constant): any size a real model has, but not one beyond a quarter of the
# machine's memory (a hostile shape); such a node runs as a step, whose arena is checked
FOLD_MAX_FRACTION = 4
_BOOL = np.dtype(np.bool_)


def fold_node(node: Node, ins: list[TensorInfo | None],
              fold_limit: int | None = None) -> list[np.ndarray] | None:
    """Outputs of ``node`` known before running (from shapes alone, or every input known),
    else None. ``fold_limit``: the most output bytes computed by running the node (default a
    ``FOLD_MAX_FRACTION`` of the machine's memory). Raises ShapeError when folding fails."""
    from .values import infer_values

    if node.op_type in CONTROL:
        # NOTE: only an If with a known condition can pass values on (its branch folds)
        if node.op_type != "If" or _scalar(ins[0]) is None:
            return None
        infos = If(node, ins)
        if all(i.value is not None for i in infos):
            return [i.value for i in infos]
        return None
    values = infer_values(node, ins)
    if values is not None:
        return values
    if _all_known(ins):
        from ...backends.reference import evaluate
        from ...memory.planner import physical_memory
        from . import output_nbytes

        limit = physical_memory() // FOLD_MAX_FRACTION if fold_limit is None else fold_limit
        if limit and output_nbytes(node, ins) > limit:
            return None

        try:
            return evaluate(node, [None if x is None else x.value for x in ins])
        except Exception as e:
            raise ShapeError(f"node {node.name!r} ({node.op_type}): folding at prepare "
                             f"failed: {e}") from e
    return None


def _all_known(ins) -> bool:
    present = [x for x in ins if x is not None]
    return bool(present) and all(x.value is not None for x in present)


def constant_infos(g: Graph) -> dict[int, TensorInfo]:
    """``{value index: info with its value}`` of ``g``'s constants (weights, initializers)."""
    return {i: TensorInfo(tuple(v.data.shape), v.data.dtype, v.data)
            for i, v in enumerate(g.values) if v.data is not None}


def infer_step(node: Node, known: dict[int, TensorInfo],
               fold_limit: int | None = None) -> tuple[list, list] | None:
    """Infer ``node``'s outputs into ``known`` (value index -> info): folded to their values
    when they can be known before running (returns None), else their shapes and dtypes
    (returns ``(input infos, output infos)``, as many outputs as the node lists);
    ``fold_limit`` as ``fold_node``'s. Raises ShapeError (DataDependentShape when a shape needs
    data computed while running)."""
    from . import infer

    ins = [None if i == MISSING else known[i] for i in node.inputs]
    values = fold_node(node, ins, fold_limit)
    if values is not None:
        for o, val in zip(node.outputs, values):
            known[o] = TensorInfo(tuple(val.shape), val.dtype, val)
        return None
    # NOTE: a shape function gives every output the op can have (LSTM: Y, Y_h, Y_c); the node
    # may list fewer (trailing optional outputs left out)
    outs = [TensorInfo(s, dt) for s, dt in infer(node, ins)][:len(node.outputs)]
    for o, info in zip(node.outputs, outs):
        known[o] = info
    return ins, outs


def infer_graph(g: Graph, ins: list[TensorInfo | None]) -> list[TensorInfo]:
    """Infos of ``g``'s outputs for inputs ``ins`` (one per ``g.inputs``), folding what is known.
    Raises ShapeError (DataDependentShape when a shape needs data computed while running)."""
    known = constant_infos(g)
    known.update(zip(g.inputs, ins))
    for node in g.nodes:
        infer_step(node, known)
    missing = [g.values[o].name for o in g.outputs if o not in known]
    if missing:
        raise ShapeError(f"subgraph output(s) {missing} are computed by no node")
    return [known[o] for o in g.outputs]


def _strip(info: TensorInfo | None) -> TensorInfo | None:
    """The info without its value: a value that changes from one iteration to the next."""
    return None if info is None else TensorInfo(tuple(info.shape), info.dtype)


def _scalar(info: TensorInfo | None):
    if info is None or info.value is None:
        return None
    return np.asarray(info.value).reshape(-1)[0]


def If(node: Node, ins: list[TensorInfo | None]) -> list[TensorInfo]:
    """If-21(cond, *captures): the taken branch's outputs. With ``cond`` known before running,
    that branch's infos (values included); else both branches must agree on shapes and dtypes,
    or the shape is data-dependent."""
    caps = list(ins[1:])
    cond = _scalar(ins[0])
    then_b, else_b = node.attrs["then_branch"], node.attrs["else_branch"]
    if cond is not None:
        return infer_graph(then_b if bool(cond) else else_b, caps)
    try:
        t = infer_graph(then_b, caps)
        e = infer_graph(else_b, caps)
    except ShapeError as err:
        # NOTE: the branch not taken may well be invalid at these shapes (a model's 8 kHz path
        # fed 16 kHz frames): which one runs is only known while running
        raise DataDependentShape(f"a branch cannot run at these shapes ({err}) and the "
                                 f"condition is only known while running") from err
    if len(t) != len(e):
        raise ShapeError(f"If branches have {len(t)} and {len(e)} outputs")
    if any(a.shape != b.shape or a.dtype != b.dtype for a, b in zip(t, e)):
        raise DataDependentShape(
            f"If branches give different outputs (then {[(a.shape, str(a.dtype)) for a in t]}, "
            f"else {[(b.shape, str(b.dtype)) for b in e]}) and the condition is only known "
            f"while running")
    return [TensorInfo(a.shape, a.dtype) for a in t]


def loop_parts(node: Node, n_inputs: int) -> tuple[int, int, int]:
    """``(N carried, K scan outputs, C captures)`` of a Loop node with ``n_inputs`` inputs."""
    c = captures(node)
    n = n_inputs - 2 - c
    k = len(node.attrs["body"].outputs) - 1 - n
    if n < 0 or k < 0:
        raise ShapeError(f"Loop: {n_inputs} inputs do not fit a body with "
                         f"{len(node.attrs['body'].inputs)} inputs and "
                         f"{len(node.attrs['body'].outputs)} outputs")
    return n, k, c


def Loop(node: Node, ins: list[TensorInfo | None]) -> list[TensorInfo]:
    """Loop-21(M?, cond?, *v_initial, *captures): final carried values, then the scan outputs
    stacked along a new first axis (one entry per iteration, as onnxruntime). Loop-carried
    values must keep their shape; scan outputs need the trip count: known only when ``M`` is
    known and both conditions are constant true."""
    body = node.attrs["body"]
    n, k, _ = loop_parts(node, len(ins))
    carried = [_strip(x) for x in ins[2:2 + n]]
    caps = list(ins[2 + n:])
    it = TensorInfo((), _I64)
    cond_in = TensorInfo((), _BOOL)
    outs = infer_graph(body, [it, cond_in, *carried, *caps])
    for j, (a, b) in enumerate(zip(carried, outs[1:1 + n])):
        if a is None or a.shape != b.shape or a.dtype != b.dtype:
            raise DataDependentShape(
                f"Loop-carried value {j} changes from {None if a is None else a.shape} to "
                f"{b.shape} {b.dtype} in one iteration: its final shape depends on the trip count")
    result = [TensorInfo(a.shape, a.dtype) for a in carried]
    if k == 0:
        return result
    m = _scalar(ins[0])
    body_cond = _scalar(outs[0])
    cond_in = True if ins[1] is None else _scalar(ins[1])
    # NOTE: the body's condition ends the loop even without a cond input (as onnxruntime)
    if m is None or cond_in is None or not bool(cond_in) or body_cond is None \
            or not bool(body_cond):
        raise DataDependentShape("Loop scan outputs: the number of iterations is only known "
                                 "while running")
    trips = max(int(m), 0)
    return result + [TensorInfo((trips, *o.shape), o.dtype) for o in outs[1 + n:]]


def scan_parts(node: Node, n_inputs: int, num_scan_inputs: int) -> tuple[int, int, int]:
    """``(N states, K scan outputs, C captures)`` of a Scan node with ``n_inputs`` inputs."""
    c = captures(node)
    n = n_inputs - num_scan_inputs - c
    k = len(node.attrs["body"].outputs) - n
    if n < 0 or k < 0:
        raise ShapeError(f"Scan: {n_inputs} inputs with num_scan_inputs={num_scan_inputs} do "
                         f"not fit the body")
    return n, k, c


def _norm(axis: int, rank: int, what: str) -> int:
    if not -rank <= axis < rank:
        raise ShapeError(f"Scan {what} axis {axis} out of range for rank {rank}")
    return axis % rank


def Scan(node: Node, ins: list[TensorInfo | None]) -> list[TensorInfo]:
    """Scan-21(*initial_states, *scan_inputs, *captures): final states, then the per-iteration
    body outputs stacked along ``scan_output_axes`` (default 0)."""
    attrs = node.attrs
    m = int(attrs["num_scan_inputs"])
    n, k, _ = scan_parts(node, len(ins), m)
    scans = ins[n:n + m]
    in_axes = list(attrs.get("scan_input_axes") or [0] * m)
    out_axes = list(attrs.get("scan_output_axes") or [0] * k)
    slices, trips = [], None
    for j, x in enumerate(scans):
        a = _norm(in_axes[j], len(x.shape), "input")
        if trips is not None and x.shape[a] != trips:
            raise ShapeError(f"Scan inputs disagree on the sequence length ({trips} vs "
                             f"{x.shape[a]})")
        trips = x.shape[a]
        slices.append(TensorInfo(tuple(d for i, d in enumerate(x.shape) if i != a), x.dtype))
    if trips is None:
        raise ShapeError("Scan needs at least one scan input")
    states = [_strip(x) for x in ins[:n]]
    outs = infer_graph(node.attrs["body"], [*states, *slices, *ins[n + m:]])
    for j, (a, b) in enumerate(zip(states, outs[:n])):
        if a.shape != b.shape or a.dtype != b.dtype:
            raise ShapeError(f"Scan state {j} changes from {a.shape} to {b.shape} in one "
                             f"iteration")
    result = [TensorInfo(a.shape, a.dtype) for a in states]
    for j, o in enumerate(outs[n:]):
        a = _norm(out_axes[j], len(o.shape) + 1, "output")
        shape = list(o.shape)
        shape.insert(a, trips)
        result.append(TensorInfo(tuple(shape), o.dtype))
    return result


CONTROL = {"If": If, "Loop": Loop, "Scan": Scan}
