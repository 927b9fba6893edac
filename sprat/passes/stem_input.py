"""Let a stem conv read its NCHW input: drop the Transpose NCHW->NHWC before it.

After ``layout`` and ``transposes`` one Transpose (perm 0, 2, 3, 1) is left on the model's
image input, before its first conv; copying a 224x224 RGB image costs 70-100 us, as much as a
third of a MobileNet stem. A float Conv (``_layout="NHWC"``, one group, 2-D, at most
``STEM_MAX_CHANNELS`` input channels: an image model's first conv) whose input is such a
Transpose, read by nothing else, takes the Transpose's input instead and gets
``_input_layout="NCHW"`` (``sprat.ir.fused``): its kernel gathers its input rows from the NCHW
tensor (the cpu backend's direct stem kernel, ``compiled/stem.pxi``). The model's inputs keep
their NCHW shapes: nothing changes for the user.
"""

from __future__ import annotations

import numpy as np

from ..ir.fused import STEM_MAX_CHANNELS, STEM_MAX_TAPS
from ..ir.graph import Graph
from .util import DEAD, drop_dead, single_consumer


def stem_input(g: Graph) -> Graph:
    producers, consumers = g.producers(), g.consumers()
    for n in g.nodes:
        if (n.op_type != "Conv" or n.attrs.get("_layout") != "NHWC"
                or "_input_layout" in n.attrs or int(n.attrs.get("group", 1)) != 1
                or n.attrs.get("_scale") or n.attrs.get("_mean")):
            continue
        t = producers.get(n.inputs[0])
        if (t is None or t.op_type != "Transpose" or tuple(t.attrs.get("perm", ())) != (0, 2, 3, 1)
                or single_consumer(g, consumers, t.outputs[0]) is None):
            continue
        x, w = g.values[t.inputs[0]], g.values[n.inputs[1]]
        if (x.shape is None or len(x.shape) != 4 or not isinstance(x.shape[1], int)
                or w.data is None or w.data.ndim != 4 or x.dtype != np.float32
                or w.data.dtype != np.float32):
            continue
        c = x.shape[1]
        if not 1 <= c <= STEM_MAX_CHANNELS or c * w.data.shape[2] * w.data.shape[3] > STEM_MAX_TAPS:
            continue
        n.inputs[0] = t.inputs[0]
        n.attrs["_input_layout"] = "NCHW"
        t.op_type = DEAD
    drop_dead(g)
    return g
