"""Constant folding: every node whose inputs are all constants is computed once at convert time
with the reference kernels and becomes a constant (ONNX Runtime's ConstantFolding). Subgraphs of
control-flow nodes are left as they are (their captured values are node inputs, so they stay)."""

from __future__ import annotations

from ..errors import ConvertError, SpratError
from ..ir.graph import MISSING, Graph, contiguous
from ..ir.shapes import output_nbytes
from ..ir.subgraphs import has_subgraphs
from ..ir.tensorinfo import TensorInfo
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
        in_bytes = sum(v.data.nbytes for v in ins if v is not None)
        infos = [None if v is None else TensorInfo(tuple(v.data.shape), v.data.dtype, v.data)
                 for v in ins]
        # NOTE: sizes from the shape function first, so a huge result is never allocated
        if output_nbytes(n, infos) > in_bytes + MAX_GROWTH_BYTES:
            continue
        try:
            outs = evaluate(n, [None if v is None else v.data for v in ins])
        except SpratError:
            raise
        except Exception as e:  # NOTE: a bad attribute or input the shape function let pass
            raise ConvertError(f"node {n.name!r} ({n.op_type}): folding the constant failed: "
                               f"{type(e).__name__}: {e}") from e
        if sum(o.nbytes for o in outs) > in_bytes + MAX_GROWTH_BYTES:
            continue
        for o, arr in zip(n.outputs, outs):
            v = g.values[o]
            v.data = contiguous(arr)
            v.dtype, v.shape = v.data.dtype, tuple(v.data.shape)
        n.op_type = DEAD
    drop_dead(g)
    return remove_dead(g)

