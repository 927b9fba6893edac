"""Fuse a channel scale into the 1x1 conv that reads it (squeeze-and-excitation).

A squeeze-and-excitation block (Hu et al., "Squeeze-and-Excitation Networks", CVPR 2018;
MobileNetV3, EfficientNet, MnasNet, RegNet-Y) ends in ``Mul(x, s)`` with ``s`` one factor per
channel, (1, 1, 1, C) in NHWC, and the product goes to a 1x1 projection conv. The Mul is a full
pass over a large map (read and write x); since ``(x * s) W = x (diag(s) W)`` the conv can take
``s`` instead and apply it where it is cheapest (``backends/cpu/conv.py``: scale the weight when
it is the smaller operand, else the input rows while they are in cache). The pattern

    Mul(x, s) -> Conv (NHWC, one group, 1x1, stride 1, no padding, constant float32 weight)

becomes the Conv with ``_scale=True`` and ``s`` as an extra input (``sprat.ir.fused``), when the
product is read by that Conv only (not a graph output, not also its residual) and ``s`` varies
along the channel axis only (its batch dim 1 or x's). It runs after ``fuse_residual`` and
``fuse_activation`` (the projection conv's residual is already its last input; the Mul took no
activation). ``x`` itself may have other readers: it is not changed.
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import MISSING, Graph
from .util import DEAD, drop_dead, remove_dead, single_consumer


def _pointwise_conv(g: Graph, conv, value: int) -> bool:
    """Whether ``conv`` is an NHWC one-group 1x1 stride-1 unpadded Conv with a constant float32
    weight, reading ``value`` as its first input only, with no scale yet."""
    a = conv.attrs
    if (conv.op_type != "Conv" or a.get("_layout") != "NHWC" or a.get("_scale")
            or len(conv.inputs) < 2 or conv.inputs[0] != value or conv.inputs.count(value) != 1
            or int(a.get("group", 1)) != 1 or conv.inputs[1] == MISSING):
        return False
    w = g.values[conv.inputs[1]].data
    if w is None or w.dtype != np.float32 or w.ndim < 3 or any(d != 1 for d in w.shape[2:]):
        return False
    return (all(int(v) == 1 for v in a.get("strides") or [1])
            and all(int(v) == 0 for v in a.get("pads") or [0]))


def _per_channel(x, s) -> bool:
    """Whether a Mul's operand of shape ``s`` scales ``x`` (NHWC/NWC) channel by channel:
    ``s`` right-aligned to x's rank is (1 or N, 1, ..., 1, C)."""
    if len(s) > len(x) or len(x) < 3:
        return False
    s = (1,) * (len(x) - len(s)) + tuple(s)
    return (s[-1] == x[-1] and s[0] in (1, x[0]) and all(d == 1 for d in s[1:-1]))


def fuse_scale(g: Graph) -> Graph:
    consumers = g.consumers()
    for mul in g.nodes:
        if (mul.op_type != "Mul" or len(mul.inputs) != 2 or mul.attrs
                or len(mul.outputs) != 1 or MISSING in mul.inputs):
            continue
        out = mul.outputs[0]
        conv = single_consumer(g, consumers, out)
        if conv is None or not _pointwise_conv(g, conv, out):
            continue
        for k in (0, 1):
            x, s = g.values[mul.inputs[k]], g.values[mul.inputs[1 - k]]
            if (x.dtype != np.float32 or s.dtype != np.float32 or x.shape is None
                    or g.values[out].shape is None
                    or tuple(x.shape) != tuple(g.values[out].shape)
                    or s.shape is None
                    or not _per_channel(tuple(x.shape), tuple(s.shape))):
                continue
            conv.inputs[0] = mul.inputs[k]
            at = len(conv.inputs) - 1 if conv.attrs.get("_residual") else len(conv.inputs)
            conv.inputs.insert(at, mul.inputs[1 - k])
            conv.attrs["_scale"] = True
            mul.op_type = DEAD
            break
    drop_dead(g)
    return remove_dead(g)
