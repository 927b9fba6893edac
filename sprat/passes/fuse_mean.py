"""Fuse a global average pool into the depthwise conv whose output it reads (squeeze-excite).

A squeeze-and-excitation block (Hu et al., CVPR 2018) squeezes the depthwise conv's output
with a GlobalAveragePool, a second full pass over a large map (the Mul that rescales the map
reads it again later). The conv can sum each output row while it is still in cache instead:

    Conv (NHWC, depthwise: group == C == M > 1) -> GlobalAveragePool (NHWC)

becomes the Conv with ``_mean=True`` and the pool's output as its second output
(``sprat.ir.fused``); the conv's first output keeps its other readers. Runs after
``fuse_activation`` (the pool reads the activated output).
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import Graph
from .util import DEAD, drop_dead, remove_dead


def _depthwise(g: Graph, conv) -> bool:
    """Whether ``conv`` is a one-output NHWC depthwise Conv (constant float32 weight)."""
    a = conv.attrs
    if (conv.op_type != "Conv" or a.get("_layout") != "NHWC" or a.get("_mean")
            or len(conv.outputs) != 1 or len(conv.inputs) < 2):
        return False
    w = g.values[conv.inputs[1]].data
    x = g.values[conv.inputs[0]]
    group = int(a.get("group", 1))
    return (w is not None and w.dtype == np.float32 and x.dtype == np.float32
            and x.shape is not None and len(x.shape) in (3, 4) and group > 1
            and x.shape[-1] == group == w.shape[0] and w.shape[1] == 1)


def fuse_mean(g: Graph) -> Graph:
    producers = g.producers()
    for pool in g.nodes:
        if (pool.op_type != "GlobalAveragePool" or pool.attrs != {"_layout": "NHWC"}
                or len(pool.inputs) != 1 or len(pool.outputs) != 1):
            continue
        conv = producers.get(pool.inputs[0])
        if conv is None or not _depthwise(g, conv):
            continue
        conv.outputs.append(pool.outputs[0])
        conv.attrs["_mean"] = True
        producers[pool.outputs[0]] = conv
        pool.op_type = DEAD
    drop_dead(g)
    return remove_dead(g)
