"""Fold an inference BatchNormalization into the Conv that feeds it.

``BN(conv(x, W) + B) = conv(x, W * s) + (B - mean) * s + beta`` with
``s = scale / sqrt(var + epsilon)`` per output channel (ONNX BatchNormalization-15, inference).
A weight computed from constants (a ConstantOfShape the convert-time fold left unstored) gets a
``Mul`` by ``s`` that the session folds at prepare, as onnxruntime folds it at session start.
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import MISSING, Graph
from .util import DEAD, drop_dead, remove_dead, replace_uses, scaled_per_channel, single_consumer


def fold_batchnorm(g: Graph) -> Graph:
    consumers = g.consumers()
    producers = g.producers()
    for bn in list(g.nodes):
        if bn.op_type != "BatchNormalization" or len(bn.outputs) > 1:
            continue
        conv = producers.get(bn.inputs[0])
        if conv is None or conv.op_type != "Conv" or any(k.startswith("_") for k in conv.attrs):
            continue
        if single_consumer(g, consumers, conv.outputs[0]) is not bn:
            continue
        params = [g.values[i].data for i in bn.inputs[1:5]]
        if any(p is None for p in params):
            continue
        scale, beta, mean, var = (p.astype(np.float64) for p in params)
        s = scale / np.sqrt(var + bn.attrs.get("epsilon", 1e-5))
        b = (g.values[conv.inputs[2]].data
             if len(conv.inputs) > 2 and conv.inputs[2] != MISSING else np.zeros_like(mean))
        if b is None:
            continue
        b = b.astype(np.float64)
        new_w = scaled_per_channel(g, conv.inputs[1], s, conv, producers)
        if new_w is None:
            continue
        new_b = ((b - mean) * s + beta).astype(np.float32)
        conv.inputs = [conv.inputs[0], new_w, g.add_const(f"{conv.name}/B_bn", new_b)]
        # NOTE: the conv now writes the BatchNormalization's output value, so the value keeps
        # the name of what it holds (the conv's own output, read by nothing else, goes)
        old, new = conv.outputs[0], bn.outputs[0]
        conv.outputs[0] = new
        replace_uses(g, old, new)
        producers[new] = conv
        bn.op_type = DEAD
    drop_dead(g)
    return remove_dead(g)

