"""Fuse the QDQ conv pattern into one QLinearConv (onnxruntime's QDQ -> QLinearConv fusion).

``DequantizeLinear(x_q) -> Conv(·, DequantizeLinear(w_q)[, DequantizeLinear(b_q)])
[-> Relu | Clip] -> QuantizeLinear`` becomes ``QLinearConv(x_q, x_scale, x_zp, w_q, w_scale,
w_zp, y_scale, y_zp[, b_q])`` followed, for an activation that is not already implied by the
output's saturation, by ``Clip`` on the quantized output with the quantized bounds (the
quantization is monotonic, so ``Q(clip(v, lo, hi)) == clip(Q(v), Q(lo), Q(hi))`` exactly);
``fuse_activation`` then folds that Clip into the QLinearConv.

Conditions: activations uint8/int8 with per-tensor scale and zero point; weights constant
uint8/int8 per tensor or per output channel (axis 0); the bias constant int32 with zero point 0
and scale ``x_scale * w_scale`` (what quantizers emit; relative 1e-6); the conv's output and
activation read only by the next node and no graph output.

Result (NOTE): QLinearConv requantises the exact integer sum with the float32 multiplier
``x_scale * w_scale / y_scale``; the QDQ graph computes the conv in float32 on dequantized
values and divides by ``y_scale``. The two differ by float32 rounding only, so a quantized value
can land one step (1 LSB) away where the exact result is within rounding of a .5 boundary;
never more in practice (``tests/models/test_quant_models.py`` measures it on ResNet-18).
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import MISSING, Graph
from .util import DEAD, remove_dead, single_consumer

_Q8 = (np.dtype(np.uint8), np.dtype(np.int8))


def _const(g: Graph, idx: int):
    return None if idx == MISSING else g.values[idx].data


def _dq_params(g: Graph, dq, per_channel: int | None = None):
    """(q input, scale, zero point) of a DequantizeLinear with constant parameters: scale
    scalar, or (``per_channel``,) on axis 0; None otherwise."""
    if dq is None or dq.op_type != "DequantizeLinear" or int(dq.attrs.get("block_size", 0)):
        return None
    scale = _const(g, dq.inputs[1])
    zp_idx = dq.inputs[2] if len(dq.inputs) > 2 else MISSING
    zp = _const(g, zp_idx)
    if scale is None or scale.dtype != np.float32 or (zp_idx != MISSING and zp is None):
        return None
    if scale.size != 1 and (per_channel is None or scale.size != per_channel
                            or int(dq.attrs.get("axis", 1)) != 0):
        return None
    if zp is not None and zp.size != scale.size:
        return None
    return dq.inputs[0], scale, zp


def _q_params(g: Graph, q):
    """(scale, zero point) of a per-tensor uint8/int8 QuantizeLinear, or None."""
    if (q is None or q.op_type != "QuantizeLinear" or int(q.attrs.get("block_size", 0))
            or int(q.attrs.get("saturate", 1)) != 1 or len(q.inputs) < 3):
        return None
    scale, zp = _const(g, q.inputs[1]), _const(g, q.inputs[2])
    if scale is None or zp is None or scale.size != 1 or zp.size != 1 or zp.dtype not in _Q8:
        return None
    return scale, zp


def _quantized_bounds(g: Graph, act, scale, zp):
    """Clip bounds of ``act`` (Relu or constant Clip) mapped through the quantization, or
    None when the activation is not one of those; ``(lo, hi)`` as zp's type."""
    info = np.iinfo(zp.dtype)
    if act.op_type == "Relu":
        lo, hi = 0.0, None
    else:
        bounds = []
        for k in (1, 2):
            i = act.inputs[k] if len(act.inputs) > k else MISSING
            v = _const(g, i)
            if i != MISSING and (v is None or v.size != 1):
                return None
            bounds.append(None if i == MISSING else float(v.reshape(())))
        lo, hi = bounds

    def q(v):
        r = np.rint(np.float32(v) / np.float32(scale.reshape(()))) + np.float32(zp.reshape(()))
        return int(np.clip(r, info.min, info.max))

    return (info.min if lo is None else q(lo)), (info.max if hi is None else q(hi))


def fuse_qdq(g: Graph) -> Graph:
    consumers, producers = g.consumers(), g.producers()
    for conv in list(g.nodes):
        if conv.op_type != "Conv" or len(conv.outputs) != 1 or len(conv.inputs) < 2:
            continue
        xp = _dq_params(g, producers.get(conv.inputs[0]))
        w_dq = producers.get(conv.inputs[1])
        wq = _const(g, w_dq.inputs[0]) if w_dq is not None and w_dq.inputs else None
        if xp is None or wq is None or wq.dtype not in _Q8 or wq.ndim < 3:
            continue
        wp = _dq_params(g, w_dq, wq.shape[0])
        x_q, sx, _ = xp
        if wp is None or g.values[x_q].dtype not in _Q8 or sx.size != 1:
            continue
        _, sw, _ = wp
        nxt = single_consumer(g, consumers, conv.outputs[0])
        act = None
        if nxt is not None and nxt.op_type in ("Relu", "Clip"):
            act, nxt = nxt, single_consumer(g, consumers, nxt.outputs[0])
        qp = _q_params(g, nxt)
        if qp is None:
            continue
        sy, zy = qp
        bias = MISSING
        if len(conv.inputs) > 2 and conv.inputs[2] != MISSING:
            bp = _dq_params(g, producers.get(conv.inputs[2]), wq.shape[0])
            bq = _const(g, bp[0]) if bp is not None else None
            if bq is None or bq.dtype != np.int32 or (bp[2] is not None and np.any(bp[2])):
                continue
            want = np.float32(sx.reshape(())) * sw.astype(np.float32).reshape(-1)
            if not np.allclose(np.broadcast_to(bp[1].reshape(-1), want.shape), want,
                               rtol=1e-6, atol=0):
                continue
            bias = bp[0]
        bounds = None
        if act is not None:
            bounds = _quantized_bounds(g, act, sy, zy)
            if bounds is None:
                continue
        zx_idx = producers[conv.inputs[0]].inputs[2] if len(
            producers[conv.inputs[0]].inputs) > 2 else MISSING
        if zx_idx == MISSING:
            zx_idx = g.add_const(f"{conv.name}/x_zero_point",
                                 np.zeros((), g.values[x_q].dtype))
        zw_idx = w_dq.inputs[2] if len(w_dq.inputs) > 2 else MISSING
        if zw_idx == MISSING:
            zw_idx = g.add_const(f"{conv.name}/w_zero_point", np.zeros((), wq.dtype))
        ins = [x_q, producers[conv.inputs[0]].inputs[1], zx_idx, w_dq.inputs[0],
               w_dq.inputs[1], zw_idx, nxt.inputs[1], nxt.inputs[2]]
        if bias != MISSING:
            ins.append(bias)
        attrs = {k: v for k, v in conv.attrs.items() if not k.startswith("_")}
        out = nxt.outputs[0]
        info = np.iinfo(zy.dtype)
        if bounds is not None and (bounds[0] > info.min or bounds[1] < info.max):
            mid = g.add_value(g.unique_name(f"{g.values[out].name}/unclipped"), zy.dtype,
                              g.values[out].shape)
            lo = g.add_const(f"{conv.name}/qmin", np.asarray(bounds[0], zy.dtype))
            hi = g.add_const(f"{conv.name}/qmax", np.asarray(bounds[1], zy.dtype))
            act.op_type, act.inputs, act.outputs, act.attrs = "Clip", [mid, lo, hi], [out], {}
            out = mid
        elif act is not None:
            act.op_type = DEAD
        conv.op_type, conv.inputs, conv.outputs, conv.attrs = "QLinearConv", ins, [out], attrs
        if act is not None and act.op_type == "Clip":
            # NOTE: the Clip must run after the QLinearConv: it takes the Q node's place
            g.nodes.remove(act)
            g.nodes.insert(g.nodes.index(conv) + 1, act)
        nxt.op_type = DEAD
        consumers, producers = g.consumers(), g.producers()
    g.nodes = [n for n in g.nodes if n.op_type != DEAD]
    return remove_dead(g)
