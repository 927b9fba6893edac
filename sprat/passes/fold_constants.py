"""Constant folding: every node whose inputs are all constants is computed once at convert time
with the reference kernels and becomes a constant (ONNX Runtime's ConstantFolding). Subgraphs of
control-flow nodes are left as they are (their captured values are node inputs, so they stay)."""

from __future__ import annotations

from ..ir.graph import MISSING, Graph, contiguous
from ..ir.subgraphs import has_subgraphs
from .util import DEAD, drop_dead, remove_dead

# NOTE: folding must not blow the file up: a tiny ConstantOfShape/Expand/Tile may produce a huge
# tensor that is cheaper to compute at run time than to store.
MAX_GROWTH_BYTES = 1 << 20


def fold_constants(g: Graph) -> Graph:
    from ..backends.reference import evaluate

    for n in g.nodes:
        if has_subgraphs(n):
            continue  # NOTE: control flow (If/Loop/Scan) runs in the session, never folded here
        ins = [None if i == MISSING else g.values[i] for i in n.inputs]
        if not ins or any(v is not None and v.data is None for v in ins):
            continue
        if all(v is None for v in ins):
            continue
        outs = evaluate(n, [None if v is None else v.data for v in ins])
        in_bytes = sum(v.data.nbytes for v in ins if v is not None)
        if sum(o.nbytes for o in outs) > max(in_bytes, 0) + MAX_GROWTH_BYTES:
            continue
        for o, arr in zip(n.outputs, outs):
            v = g.values[o]
            v.data = contiguous(arr)
            v.dtype, v.shape = v.data.dtype, tuple(v.data.shape)
        n.op_type = DEAD
    drop_dead(g)
    return remove_dead(g)
