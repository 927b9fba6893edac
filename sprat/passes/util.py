"""Small graph-editing helpers shared by the passes."""

from __future__ import annotations

import numpy as np

from ..ir.graph import MISSING, Graph

DEAD = "__dead__"  # op_type a pass gives a node it has made redundant; drop_dead removes them


def drop_dead(g: Graph) -> None:
    """Remove the nodes a pass marked with ``op_type = DEAD`` (keeps the order of the rest)."""
    g.nodes = [n for n in g.nodes if n.op_type != DEAD]


def constant_pads(g: Graph, pad) -> list[int] | None:
    """A Pad's constant ``pads`` (begins then ends, every axis: Pad-11+ input 1, or the
    attribute before opset 11), or None when they are not constant or an ``axes`` input is
    given."""
    ins = pad.inputs
    if len(ins) > 3 and ins[3] != MISSING:
        return None
    if len(ins) > 1 and ins[1] != MISSING:
        data = g.values[ins[1]].data
        return None if data is None else [int(v) for v in np.asarray(data).reshape(-1)]
    pads = pad.attrs.get("pads")
    return None if pads is None else [int(v) for v in pads]


def replace_uses(g: Graph, old: int, new: int) -> None:
    """Make every reader of value ``old`` (nodes and graph outputs) read ``new`` instead."""
    for n in g.nodes:
        n.inputs = [new if i == old else i for i in n.inputs]
    g.outputs = [new if i == old else i for i in g.outputs]


def remove_dead(g: Graph) -> Graph:
    """Drop nodes whose outputs nobody reads, then unused values."""
    live = set(g.outputs)
    kept = []
    for n in reversed(g.nodes):
        if any(o in live for o in n.outputs):
            kept.append(n)
            live.update(i for i in n.inputs if i != MISSING)
    g.nodes = kept[::-1]
    return g.compact()


def single_consumer(g: Graph, consumers: dict, value: int):
    """The only node reading ``value``, or None (several readers, or a graph output)."""
    users = consumers.get(value, [])
    if len(users) != 1 or value in g.outputs:
        return None
    return users[0]


def computed_from_constants(g: Graph, value: int, producers: dict) -> bool:
    """Whether ``value`` holds data or is computed by nodes whose inputs all are (the constant
    subgraphs the convert-time fold leaves because their result is too big to store, e.g. the
    ConstantOfShape weights of onnx's light models); a session folds those once at prepare."""
    from ..ir.subgraphs import has_subgraphs

    todo, seen = [value], set()
    while todo:
        v = todo.pop()
        if v == MISSING or v in seen or g.values[v].data is not None:
            continue
        seen.add(v)
        node = producers.get(v)
        if node is None or has_subgraphs(node):
            return False  # NOTE: a graph input, or control flow, which runs in the session
        todo.extend(node.inputs)
    return True


def scaled_per_channel(g: Graph, w: int, vec, before, producers: dict) -> int | None:
    """A value holding ``w * vec`` scaled per output channel (axis 0): a float64 product stored
    as float32 when ``w`` is a constant; a ``Mul`` placed before node ``before`` when ``w`` is
    computed from constants only (the session folds it at prepare); else None."""
    vec = np.asarray(vec, np.float64)
    data = g.values[w].data
    if data is not None:
        if data.dtype != np.float32:
            return None
        shaped = vec.reshape(-1, *([1] * (data.ndim - 1)))
        return g.add_const(f"{before.name}/W_scaled", (data.astype(np.float64) * shaped)
                           .astype(np.float32))
    val = g.values[w]
    if (val.dtype != np.float32 or val.shape is None or len(val.shape) < 1
            or not computed_from_constants(g, w, producers)):
        return None
    s = g.add_const(f"{before.name}/W_scale",
                    vec.astype(np.float32).reshape(-1, *([1] * (len(val.shape) - 1))))
    out = g.add_value(g.unique_name(f"{before.name}/W_scaled"), np.float32, val.shape)
    node = g.add_node("Mul", [w, s], [out])
    g.nodes.pop()
    g.nodes.insert(g.nodes.index(before), node)
    producers[out] = node
    return out


#: the sizes symbolic input dims take, in turn, for ``inferred_infos``
# NOTE: 1 first; where a node's shape cannot follow from 1 (a detector's neck: stride-2 convs
# take a 1x1 map to 1x1, its upsampled copy to 2x2, and the Concat of the two fails), 64
# (a multiple of every stride up to 64). NudeNet 320's QDQ export: with 1 alone, its 31 SiLUs
# after the neck's first Concat stayed float Sigmoid + QuantizeLinear + QLinearMul
SYMBOLIC_SIZES = (1, 64)
#: the most bytes a node's folded value may hold in the attempts after the first: a constant
#: computed from symbolic dims grows with their size (a (seq, seq, hidden) mask at 64 is
#: 12 MB, a (batch, seq, seq, hidden) one 800 MB); past it the value stays unknown, its shape
#: and dtype known
LATER_FOLD_MAX_BYTES = 64 << 20


def inferred_infos(g: Graph) -> dict:
    """``{value: TensorInfo}`` of every value whose shape follows from the graph inputs'
    shapes, symbolic dims taken as 1 (enough for ranks, dtypes and constant-sized dims); the
    values that inference cannot reach that way (a node fails on 1-sized dims) from the next
    of ``SYMBOLIC_SIZES`` instead."""
    from ..errors import SpratError
    from ..ir.shapes.control import constant_infos, infer_step
    from ..ir.tensorinfo import TensorInfo

    known = constant_infos(g)
    for i in g.inputs:
        if g.values[i].shape is None or g.values[i].dtype is None:
            return known
    symbolic = any(not isinstance(d, int) for i in g.inputs for d in g.values[i].shape)
    result = None
    for size in SYMBOLIC_SIZES if symbolic else SYMBOLIC_SIZES[:1]:
        attempt = dict(known)
        for i in g.inputs:
            v = g.values[i]
            attempt[i] = TensorInfo(tuple(d if isinstance(d, int) else size for d in v.shape),
                                    v.dtype)
        complete = True
        cap = None if result is None else LATER_FOLD_MAX_BYTES
        for node in g.nodes:
            try:
                infer_step(node, attempt, cap)
            except SpratError:  # NOTE: a shape that needs data (or an unknown op): stop there
                complete = False
                break
        if result is None:
            result = attempt
        else:
            for k, info in attempt.items():
                result.setdefault(k, info)
        if complete:
            break
    return result
