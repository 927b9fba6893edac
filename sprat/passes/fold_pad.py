"""Fold a constant ``Pad`` of the spatial axes into the conv that reads it (``fold_pad``), and a
zero Pad of the channels into the conv that adds it as its residual (``fold_residual_pad``).

TFLite models pad explicitly (``PAD`` then a ``VALID`` conv: TensorFlow's asymmetric "same"
padding of strided convs, and MediaPipe's BlazeFace pads before every strided block), and so do
some ONNX exports. A Conv's own ``pads`` (ONNX Conv-22: zeros before and after each spatial
axis) compute the same result without writing the padded copy: the conv kernels clip their taps
at the borders. Measured on MediaPipe's full-range face detector: its 43 Pads were 0.64 of
5.4 ms.

The quantized convs (ConvInteger-10, QLinearConv-10, TflConv) compute ``Conv(x - x_zero_point,
w - w_zero_point)`` with zeros padded after the shift: their own pads read ``x_zero_point``. A
quantized TFLite model pads with the input's zero point before strided convs (TFLite's PAD of a
quantized tensor fills with its zero point), so such a Pad folds into them the same way.

Folded when: the Pad's mode is ``constant`` with the value the conv's padding reads (a float
Conv: 0, or none; a quantized conv: its constant scalar ``x_zero_point``, 0 when absent), its
pads are constants >= 0 that touch only the conv's spatial axes (per the conv's layout: NCHW,
or NHWC after the layout pass), the Pad's output is read by convs only (each as its input
X, each meeting these conditions), and each conv's ``auto_pad`` is NOTSET or VALID. Source: ONNX Pad-21 (inputs data, pads,
constant_value, axes; attribute ``pads``/``value`` before opset 11), Conv-22, ConvInteger-10,
QLinearConv-10; TFLite's reference ``pad.h`` (quantized: the output zero point).
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import MISSING, Graph
from .util import DEAD, constant_pads, drop_dead, single_consumer

#: the convs a Pad folds into: op type -> input index of the zero point their padding reads
#: (None: zeros)
CONVS = {"Conv": None, "ConvInteger": 2, "QLinearConv": 2, "TflConv": 2}


def _pad_value(g: Graph, conv) -> float | None:
    """The value ``conv``'s own padding reads (0, or its constant scalar x zero point), or None
    when it is not a constant."""
    k = CONVS[conv.op_type]
    if k is None or len(conv.inputs) <= k or conv.inputs[k] == MISSING:
        return 0.0
    data = g.values[conv.inputs[k]].data
    if data is None or np.asarray(data).size != 1:
        return None
    return float(np.asarray(data).reshape(-1)[0])


def _pad_amounts(g: Graph, pad, fill: float) -> list[int] | None:
    """The Pad's ``pads`` (begins then ends, every axis) when it is a constant pad of value
    ``fill``, else None."""
    if pad.attrs.get("mode", "constant") not in ("constant", b"constant"):
        return None
    ins = pad.inputs
    pads = constant_pads(g, pad)  # NOTE: None with an ``axes`` input: not folded
    if pads is None:
        return None
    value = float(pad.attrs.get("value", 0.0))
    if len(ins) > 2 and ins[2] != MISSING:
        data = g.values[ins[2]].data
        if data is None or np.asarray(data).size != 1:
            return None
        value = float(np.asarray(data).reshape(-1)[0])
    if value != fill or not pads or len(pads) % 2 or min(pads) < 0:
        return None
    return pads


def _folded_pads(g: Graph, pad, conv) -> list[int] | None:
    """``conv``'s new ``pads`` with ``pad`` folded in (module docstring's conditions), or
    None when it does not fold."""
    if (conv.op_type not in CONVS or conv.domain not in ("", "ai.onnx")
            or conv.inputs[0] != pad.outputs[0] or pad.outputs[0] in conv.inputs[1:]
            or conv.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID")):
        return None
    fill = _pad_value(g, conv)
    pads = None if fill is None else _pad_amounts(g, pad, fill)
    rank = len(pads) // 2 if pads else 0
    if pads is None or rank < 3:
        return None
    spatial = (list(range(1, rank - 1)) if conv.attrs.get("_layout") == "NHWC"
               else list(range(2, rank)))
    others = [k for k in range(rank) if k not in spatial]
    if any(pads[k] or pads[rank + k] for k in others):
        return None
    old = [int(v) for v in conv.attrs.get("pads", [0] * (2 * len(spatial)))]
    if conv.attrs.get("auto_pad", "NOTSET") == "VALID" or len(old) != 2 * len(spatial):
        old = [0] * (2 * len(spatial))
    n = len(spatial)
    return ([old[i] + pads[k] for i, k in enumerate(spatial)]
            + [old[n + i] + pads[rank + k] for i, k in enumerate(spatial)])


def _each_pad(g: Graph, fold) -> Graph:
    """``fold(g, pad, consumers)`` on every ONNX Pad of one output; where it returns True it has
    rewired the Pad's readers and the Pad is dropped."""
    consumers = g.consumers()
    changed = False
    for pad in g.nodes:
        if (pad.op_type == "Pad" and pad.domain in ("", "ai.onnx") and len(pad.outputs) == 1
                and fold(g, pad, consumers)):
            pad.op_type = DEAD
            changed = True
    if changed:
        drop_dead(g)
        g = g.compact()
    return g


def _into_convs(g: Graph, pad, consumers) -> bool:
    users = consumers.get(pad.outputs[0], [])
    if not users or pad.outputs[0] in g.outputs:
        return False
    folded = [_folded_pads(g, pad, conv) for conv in users]
    if any(f is None for f in folded):
        return False
    for conv, new in zip(users, folded):
        conv.attrs["pads"] = new
        conv.attrs["auto_pad"] = "NOTSET"
        conv.inputs = [pad.inputs[0]] + conv.inputs[1:]
    return True


def fold_pad(g: Graph) -> Graph:
    """A Pad read only by convs (one, or several: MediaPipe pose detection's heads share a
    padded map) folds into each of them when it folds into every one."""
    return _each_pad(g, _into_convs)


def _into_residual(g: Graph, pad, consumers) -> bool:
    conv = single_consumer(g, consumers, pad.outputs[0])
    if (conv is None or conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx")
            or conv.attrs.get("_layout") != "NHWC" or not conv.attrs.get("_residual")
            or conv.attrs.get("_residual_pad") or conv.inputs[-1] != pad.outputs[0]
            or pad.outputs[0] in conv.inputs[:-1]):
        return False
    x = g.values[pad.inputs[0]]
    if x.dtype is None or np.dtype(x.dtype) != np.float32 or x.data is not None:
        return False
    pads = _pad_amounts(g, pad, 0.0)
    rank = len(pads) // 2 if pads else 0
    if not rank or any(pads[:-1]) or pads[-1] <= 0 or (x.shape is not None
                                                       and len(x.shape) != rank):
        return False
    conv.inputs[-1] = pad.inputs[0]
    conv.attrs["_residual_pad"] = pads[-1]
    return True


def fold_residual_pad(g: Graph) -> Graph:
    """Fold a zero ``Pad`` of the channels into the NHWC conv that adds it as its residual.

    MediaPipe's BlazeBlocks (BlazeFace, BlazePalm, BlazePose; Bazarevsky et al., 2019) widen
    the channels by a block whose shortcut is ``Pad(x, zeros after the channels)``: after
    ``fuse_residual`` that Pad's output is the last input of a Conv with ``_residual``. The
    conv reads the unpadded tensor instead and gets ``_residual_pad`` (``sprat.ir.fused``):
    the kernel adds the residual's channels and nothing past them, and the padded copy (a
    pass over the map, 11 of MediaPipe face detection's steps) is not written.

    Folded when: the Pad is a constant pad of value 0 (``_pad_amounts``) of float32 data whose
    only non-zero pad is after the last (channel) axis, its output is read by that one conv
    only, as its residual, and the conv is float32 NHWC without a ``_residual_pad`` yet."""
    return _each_pad(g, _into_residual)
