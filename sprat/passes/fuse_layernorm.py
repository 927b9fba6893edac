"""Recognise a LayerNormalization written out in primitive ops (Paddle and TF exports):

    m = ReduceMean(x, axes=[-1]);  d = x - m;  v = ReduceMean(d ** 2, axes=[-1])
    y = d / Sqrt(v + eps) [* gamma] [+ beta]

becomes ``LayerNormalization(x, gamma, beta, axis=-1, epsilon=eps)`` (ONNX LayerNormalization-17).
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import MISSING, Graph
from .util import DEAD, drop_dead, remove_dead


def _const(g: Graph, idx: int):
    return None if idx == MISSING else g.values[idx].data


def _last_axis_reduce(g: Graph, node, rank_hint) -> bool:
    if node is None or node.op_type != "ReduceMean" or node.attrs.get("keepdims", 1) != 1:
        return False
    axes = _const(g, node.inputs[1]) if len(node.inputs) > 1 else None
    if axes is None or axes.size != 1:
        return False
    a = int(axes.reshape(()))
    return a == -1 or (rank_hint is not None and a == rank_hint - 1)


def fuse_layernorm(g: Graph) -> Graph:
    consumers, producers = g.consumers(), g.producers()

    def only(value, node):
        users = consumers.get(value, [])
        return value not in g.outputs and all(u is node for u in users)

    for div in list(g.nodes):
        if div.op_type != "Div":
            continue
        sub, sqrt = producers.get(div.inputs[0]), producers.get(div.inputs[1])
        if sub is None or sqrt is None or sub.op_type != "Sub" or sqrt.op_type != "Sqrt":
            continue
        x = sub.inputs[0]
        shape = g.values[x].shape
        rank = len(shape) if shape is not None else None
        mean = producers.get(sub.inputs[1])
        if not _last_axis_reduce(g, mean, rank) or mean.inputs[0] != x:
            continue
        add = producers.get(sqrt.inputs[0])
        if add is None or add.op_type != "Add":
            continue
        eps = _const(g, add.inputs[1])
        var = producers.get(add.inputs[0])
        if eps is None or eps.size != 1 or not _last_axis_reduce(g, var, rank):
            continue
        pw = producers.get(var.inputs[0])
        two = _const(g, pw.inputs[1]) if pw is not None and pw.op_type == "Pow" else None
        if two is None or two.size != 1 or float(two.reshape(())) != 2.0 or pw.inputs[0] != sub.outputs[0]:
            continue
        chain = [mean, sub, pw, var, add, sqrt]
        # every intermediate is read only inside the pattern
        if not (only(mean.outputs[0], sub) and only(pw.outputs[0], var)
                and only(var.outputs[0], add) and only(add.outputs[0], sqrt)
                and only(sqrt.outputs[0], div)
                and all(u is pw or u is div for u in consumers.get(sub.outputs[0], []))):
            continue
        out = div.outputs[0]
        gamma = beta = MISSING
        mul = consumers.get(out, [None])[0] if len(consumers.get(out, [])) == 1 else None
        if mul is not None and mul.op_type == "Mul" and out not in g.outputs:
            other = mul.inputs[1] if mul.inputs[0] == out else mul.inputs[0]
            gd = _const(g, other)
            if gd is not None and gd.ndim <= 1:
                gamma, out, chain = other, mul.outputs[0], chain + [div, mul]
                addb = consumers.get(out, [None])[0] if len(consumers.get(out, [])) == 1 else None
                if addb is not None and addb.op_type == "Add" and out not in g.outputs:
                    other = addb.inputs[1] if addb.inputs[0] == out else addb.inputs[0]
                    bd = _const(g, other)
                    if bd is not None and bd.ndim <= 1:
                        beta, out, chain = other, addb.outputs[0], chain + [addb]
        if gamma == MISSING:
            chain = chain + [div]
            dim = shape[-1] if shape is not None else None
            if not isinstance(dim, int):
                continue
            gamma = g.add_const(f"{div.name}/gamma", np.ones(dim, np.float32))
        ln = chain[-1]
        for n in chain[:-1]:
            n.op_type = DEAD
        ln.op_type = "LayerNormalization"
        ln.inputs = [x, gamma] + ([beta] if beta != MISSING else [])
        ln.attrs = {"axis": -1, "epsilon": float(eps.reshape(()))}
        ln.outputs = [out]
        consumers, producers = g.consumers(), g.producers()
    drop_dead(g)
    return remove_dead(g)
