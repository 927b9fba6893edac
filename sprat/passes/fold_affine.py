"""Fold a per-channel affine that follows a Conv into the Conv's weights and bias.

``Conv(x, W, B) * s + t`` with constant ``s``, ``t`` broadcasting per output channel (scalar,
``[M,1,1]`` or ``[1,M,1,1]``) equals ``Conv(x, W * s, B * s + t)`` — the same algebra as
BatchNormalization folding; PP-OCRv4's re-parameterised blocks export exactly this. The same
affine after an inference BatchNormalization folds into its scale and B (caffe2's BN + Mul + Add,
as DenseNet-121 and Inception v2 in onnx's test data have it).
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import MISSING, Graph
from .util import DEAD, drop_dead, remove_dead, replace_uses, scaled_per_channel, single_consumer


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


def _fold_into_conv(g: Graph, conv, op, vec: np.ndarray, producers: dict) -> bool:
    """Fold ``conv(...) * vec`` or ``conv(...) + vec`` (per output channel) into the conv."""
    m = vec.size
    has_b = len(conv.inputs) > 2 and conv.inputs[2] != MISSING
    b = g.values[conv.inputs[2]].data if has_b else np.zeros(m, np.float32)
    if b is None:
        return False
    w = conv.inputs[1]
    if op.op_type == "Mul":
        w = scaled_per_channel(g, w, vec, conv, producers)
        if w is None:
            return False
        b = b.astype(np.float64) * vec
    else:
        b = b.astype(np.float64) + vec
    conv.inputs = [conv.inputs[0], w, g.add_const(f"{conv.name}/B_affine", b.astype(np.float32))]
    return True


def _fold_into_batchnorm(g: Graph, bn, op, vec: np.ndarray) -> bool:
    """Fold ``BN(x) * vec`` or ``BN(x) + vec`` into the BatchNormalization's scale and B (its
    output is ``scale * (x - mean) / sqrt(var + eps) + B``): caffe2's BN + Mul + Add exports."""
    scale, beta = (g.values[i].data for i in bn.inputs[1:3])
    if scale is None or beta is None or scale.size != vec.size or beta.size != vec.size:
        return False
    scale, beta = scale.astype(np.float64).reshape(-1), beta.astype(np.float64).reshape(-1)
    if op.op_type == "Mul":
        scale, beta = scale * vec, beta * vec
    else:
        beta = beta + vec
    bn.inputs = [bn.inputs[0], g.add_const(f"{bn.name}/scale_affine", scale.astype(np.float32)),
                 g.add_const(f"{bn.name}/B_affine", beta.astype(np.float32)), *bn.inputs[3:]]
    return True


def fold_conv_affine(g: Graph) -> Graph:
    changed = True
    while changed:
        changed = False
        consumers, producers = g.consumers(), g.producers()
        for op in g.nodes:
            if op.op_type not in ("Mul", "Add") or len(op.inputs) != 2 or op.attrs:
                continue
            for k in (0, 1):
                prod = producers.get(op.inputs[k])
                if (prod is None or prod.op_type not in ("Conv", "BatchNormalization")
                        or any(a.startswith("_") for a in prod.attrs) or len(prod.outputs) != 1
                        or single_consumer(g, consumers, op.inputs[k]) is not op):
                    continue
                out = g.values[op.inputs[k]]
                rank = None if out.shape is None else len(out.shape)
                if prod.op_type == "Conv":
                    w = g.values[prod.inputs[1]]
                    m, rank = (None, None) if w.shape is None else (w.shape[0], len(w.shape))
                else:
                    m = g.values[prod.inputs[1]].shape
                    m = None if m is None or len(m) != 1 else m[0]
                if m is None or rank is None or rank < 2 or out.dtype != np.float32:
                    continue
                vec = _per_channel(g.values[op.inputs[1 - k]].data, m, rank)
                if vec is None:
                    continue
                vec = vec.astype(np.float64)
                if prod.op_type == "Conv":
                    folded = _fold_into_conv(g, prod, op, vec, producers)
                else:
                    folded = _fold_into_batchnorm(g, prod, op, vec)
                if not folded:
                    continue
                old, new = prod.outputs[0], op.outputs[0]
                prod.outputs[0] = new
                replace_uses(g, old, new)
                op.op_type = DEAD
                changed = True
                break
        drop_dead(g)
    return remove_dead(g)
