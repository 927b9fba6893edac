"""Fold a per-channel affine that follows a Conv into the Conv's weights and bias.

``Conv(x, W, B) * s + t`` with constant ``s``, ``t`` broadcasting per output channel (scalar,
``[M,1,1]`` or ``[1,M,1,1]``) equals ``Conv(x, W * s, B * s + t)`` — the same algebra as
BatchNormalization folding; PP-OCRv4's re-parameterised blocks export exactly this.
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import MISSING, Graph
from .util import DEAD, drop_dead, remove_dead, replace_uses, single_consumer


def _per_channel(data: np.ndarray, m: int, rank: int) -> np.ndarray | None:
    """``data`` as a length-``m`` vector if it broadcasts per output channel of a rank-``rank``
    NCHW tensor, else None."""
    if data is None or data.dtype != np.float32 or data.ndim > rank:
        return None
    if data.size == 1:
        return np.full(m, float(data.reshape(())), np.float32)
    full = data.reshape((1,) * (rank - data.ndim) + data.shape)
    if full.shape[1] != m or any(d != 1 for i, d in enumerate(full.shape) if i != 1):
        return None
    return full.reshape(m)


def fold_conv_affine(g: Graph) -> Graph:
    changed = True
    while changed:
        changed = False
        consumers, producers = g.consumers(), g.producers()
        for op in g.nodes:
            if op.op_type not in ("Mul", "Add") or len(op.inputs) != 2 or op.attrs:
                continue
            for k in (0, 1):
                conv = producers.get(op.inputs[k])
                other = g.values[op.inputs[1 - k]].data
                if (conv is None or conv.op_type != "Conv" or any(a.startswith("_") for a in conv.attrs)
                        or single_consumer(g, consumers, op.inputs[k]) is not op):
                    continue
                w = g.values[conv.inputs[1]].data
                if w is None or w.dtype != np.float32:
                    continue
                vec = _per_channel(other, w.shape[0], w.ndim)
                if vec is None:
                    continue
                has_b = len(conv.inputs) > 2 and conv.inputs[2] != MISSING
                b = g.values[conv.inputs[2]].data if has_b else np.zeros(w.shape[0], np.float32)
                if b is None:
                    continue
                if op.op_type == "Mul":
                    w = (w.astype(np.float64) * vec.reshape(-1, *([1] * (w.ndim - 1))))
                    b = b.astype(np.float64) * vec
                else:
                    b = b.astype(np.float64) + vec
                conv.inputs = [conv.inputs[0], g.add_const(f"{conv.name}/W_affine",
                                                           w.astype(np.float32)),
                               g.add_const(f"{conv.name}/B_affine", b.astype(np.float32))]
                old, new = conv.outputs[0], op.outputs[0]
                conv.outputs[0] = new
                replace_uses(g, old, new)
                op.op_type = DEAD
                changed = True
                break
        drop_dead(g)
    return remove_dead(g)
