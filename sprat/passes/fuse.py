"""Fuse residual adds and activations into the node that produces their input.

- ``Conv -> Add(·, r)`` (NHWC) or ``MatMul -> Add(·, r)`` (or a two-input ``Sum``) with ``r`` of
  the same shape becomes the producer with ``_residual=True`` and ``r`` as an extra last input
  (MNN's ConvolutionResidual, onnxruntime's FusedConv with Z and its MatMul+Add fusion); when
  ``r`` is computed after the producer, the producer moves to the Add's place.
- ``X -> activation`` with X = Conv/ConvTranspose/Gemm/MatMul/Add/Sub/Mul and the
  activation Relu, Clip (constant bounds), Sigmoid, Tanh, HardSigmoid, HardSwish, LeakyRelu,
  Gelu (erf form) becomes ``_activation`` on X.
- ``X -> PRelu(·, slope)`` with a constant slope: a single slope is ``LeakyRelu`` (alpha = slope)
  on any such X; a slope per output channel (its broadcast to X's shape varies along the channel
  axis only: the last with ``_layout="NHWC"``, else axis 1) is ``_activation="PRelu"`` on a Conv,
  the slopes in ``_act_params`` (MediaPipe's landmark models: 23-53 PRelu after convs, half of
  them after a residual Add, which then shares the epilogue). Any other slope stays a PRelu op.
- Paddle's hard-swish ``x * Clip(x + 3, 0, 6) / 6`` and ``x * HardSigmoid(x)`` (alpha 1/6, beta
  0.5) become one HardSwish.
See ``sprat.ir.fused`` for what the attributes mean.
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import MISSING, Graph
from .util import DEAD, drop_dead, remove_dead, replace_uses, single_consumer

# NOTE: QLinearConv takes the integer Clip ``fuse_qdq`` leaves after it
ACT_PRODUCERS = {"Conv", "ConvTranspose", "Gemm", "MatMul", "Add", "Sub", "Mul", "QLinearConv",
                 "MatMulIntegerToFloat", "BatchNormalization"}
ACTIVATIONS = {"Relu", "Clip", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "LeakyRelu", "Gelu"}


def _scalar(g: Graph, idx: int):
    if idx == MISSING:
        return None
    d = g.values[idx].data
    if d is None or d.size != 1:
        return None
    return float(d.reshape(()))


def _act_params(g: Graph, act) -> list[float] | None:
    op = act.op_type
    if op == "Gelu" and act.attrs.get("approximate", "none") != "none":
        return None  # NOTE: only the erf form is a fused activation
    if op == "Clip":
        lo = _scalar(g, act.inputs[1]) if len(act.inputs) > 1 else None
        hi = _scalar(g, act.inputs[2]) if len(act.inputs) > 2 else None
        has_lo = len(act.inputs) > 1 and act.inputs[1] != MISSING
        has_hi = len(act.inputs) > 2 and act.inputs[2] != MISSING
        if (has_lo and lo is None) or (has_hi and hi is None):
            return None
        return [lo if lo is not None else -np.inf, hi if hi is not None else np.inf]
    if op == "HardSigmoid":
        return [act.attrs.get("alpha", 0.2), act.attrs.get("beta", 0.5)]
    if op == "LeakyRelu":
        return [act.attrs.get("alpha", 0.01)]
    return []


def _prelu_params(g: Graph, act, prod) -> tuple[str, list[float]] | None:
    """(activation, params) of the PRelu node ``act`` fused into ``prod``, or None when its
    slope is not a constant, or neither one value nor one per channel of a Conv's output
    (PRelu-16: the slope broadcasts unidirectionally to X)."""
    slope = g.values[act.inputs[1]].data if len(act.inputs) > 1 else None
    if slope is None:
        return None
    slope = np.asarray(slope)
    if slope.size == 1:
        return "LeakyRelu", [float(slope.reshape(()))]
    y = g.values[prod.outputs[0]].shape
    if prod.op_type != "Conv" or y is None or slope.ndim > len(y):
        return None
    axis = len(y) - 1 if prod.attrs.get("_layout") == "NHWC" else 1
    dims = (1,) * (len(y) - slope.ndim) + tuple(slope.shape)
    if dims[axis] != y[axis] or any(d != 1 for i, d in enumerate(dims) if i != axis):
        return None
    return "PRelu", [float(v) for v in slope.reshape(-1)]


def _rewire_output(g: Graph, producer, act) -> None:
    """``producer`` now writes what ``act`` wrote."""
    old, new = producer.outputs[0], act.outputs[0]
    producer.outputs[0] = new
    replace_uses(g, old, new)
    act.op_type = DEAD


def _takes_residual(node) -> bool:
    """Conv in NHWC, or MatMul (a fused ``_bias`` allowed), with no residual/activation yet."""
    if node.op_type == "Conv":
        ok = node.attrs.get("_layout") == "NHWC"
    else:
        ok = node.op_type == "MatMul" and node.attrs.get("_layout") is None
    return ok and len(node.outputs) == 1 and not any(
        a in node.attrs for a in ("_residual", "_activation"))


def _residual_choices(g: Graph, add, consumers, producers, order) -> list[tuple[int, bool]]:
    """(k, moves) for each operand ``k`` of ``add`` whose producer can take the other operand
    as its residual; ``moves``: the other operand is computed after that producer."""
    choices = []
    for k in (0, 1):
        prod = producers.get(add.inputs[k])
        other = add.inputs[1 - k]
        if (prod is None or not _takes_residual(prod) or other == add.inputs[k]
                or single_consumer(g, consumers, prod.outputs[0]) is not add
                or g.values[other].data is not None):
            continue
        s1, s2 = g.values[prod.outputs[0]].shape, g.values[other].shape
        if s1 is None or s2 is None or tuple(s1) != tuple(s2):
            continue
        op = producers.get(other)
        choices.append((k, op is not None and order[id(op)] > order[id(prod)]))
    return choices


def fuse_residual(g: Graph) -> Graph:
    consumers, producers = g.consumers(), g.producers()
    order = {id(n): i for i, n in enumerate(g.nodes)}
    moves = []
    for add in g.nodes:
        # NOTE: a Sum of two inputs is an Add (Sum-13; ResNet-50 of onnx's test data writes its
        # shortcuts so)
        if add.op_type not in ("Add", "Sum") or len(add.inputs) != 2 or add.attrs:
            continue
        choices = _residual_choices(g, add, consumers, producers, order)
        if not choices:
            continue
        # NOTE: the residual must be computed before its producer runs. A producer whose other
        # operand comes earlier is taken first (ResNet's shortcut conv, after the block's last
        # conv, keeps the residual: moving the 3x3 conv instead cost ResNet-18 ~20%); else, when
        # the other operand comes later (MediaPipe's shortcuts: a MaxPool or channel Pad after
        # the block's last conv), the producer moves to the Add's place: its inputs come
        # earlier still and the Add was its only reader, so the order stays valid.
        k, moves_it = min(choices, key=lambda c: c[1])
        prod = producers[add.inputs[k]]
        if moves_it:
            moves.append((prod, add))
        prod.inputs.append(add.inputs[1 - k])
        prod.attrs["_residual"] = True
        _rewire_output(g, prod, add)
    for prod, add in moves:
        g.nodes.pop(next(k for k, n in enumerate(g.nodes) if n is prod))
        g.nodes.insert(next(k for k, n in enumerate(g.nodes) if n is add), prod)
    drop_dead(g)
    return remove_dead(g)


def _clip_of_x_plus_3(g: Graph, consumers, producers, value: int, x: int | None):
    """If ``value`` = Clip(Add(x, 3), 0, 6) with single-use intermediates: (x, [clip, add])."""
    clip = producers.get(value)
    if clip is None or clip.op_type != "Clip" or _act_params(g, clip) != [0.0, 6.0]:
        return None
    add = producers.get(clip.inputs[0])
    if (add is None or add.op_type != "Add"
            or single_consumer(g, consumers, clip.inputs[0]) is not clip):
        return None
    for k in (0, 1):
        if _scalar(g, add.inputs[1 - k]) == 3.0 and (x is None or add.inputs[k] == x):
            return add.inputs[k], [clip, add]
    return None


def fuse_hardswish(g: Graph) -> Graph:
    consumers, producers = g.consumers(), g.producers()
    # Div(Mul(x, Clip(x + 3, 0, 6)), 6)
    for div in g.nodes:
        if div.op_type != "Div" or _scalar(g, div.inputs[1]) != 6.0:
            continue
        mul = producers.get(div.inputs[0])
        if (mul is None or mul.op_type != "Mul" or len(mul.inputs) != 2
                or single_consumer(g, consumers, div.inputs[0]) is not div):
            continue
        for k in (0, 1):
            x, c = mul.inputs[k], mul.inputs[1 - k]
            if single_consumer(g, consumers, c) is not mul:
                continue
            found = _clip_of_x_plus_3(g, consumers, producers, c, x)
            if found is not None:
                div.op_type, div.inputs, div.attrs = "HardSwish", [x], {}
                for dead in (mul, *found[1]):
                    dead.op_type = DEAD
                break
    drop_dead(g)
    consumers, producers = g.consumers(), g.producers()
    for mul in g.nodes:
        if mul.op_type != "Mul" or len(mul.inputs) != 2:
            continue
        for k in (0, 1):
            x, h = mul.inputs[k], mul.inputs[1 - k]
            hs = producers.get(h)
            if hs is None or single_consumer(g, consumers, h) is not mul:
                continue
            if hs.op_type == "HardSigmoid" and hs.inputs[0] == x and np.isclose(
                    hs.attrs.get("alpha", 0.2), 1 / 6) and np.isclose(hs.attrs.get("beta", 0.5), 0.5):
                mul.op_type, mul.inputs, mul.attrs = "HardSwish", [x], {}
                hs.op_type = DEAD
                break
            # x * (Clip(x + 3, 0, 6) / 6)
            if hs.op_type == "Div" and _scalar(g, hs.inputs[1]) == 6.0:
                if single_consumer(g, consumers, hs.inputs[0]) is not hs:
                    continue
                found = _clip_of_x_plus_3(g, consumers, producers, hs.inputs[0], x)
                if found is None:
                    continue
                mul.op_type, mul.inputs, mul.attrs = "HardSwish", [x], {}
                for dead in (hs, *found[1]):
                    dead.op_type = DEAD
                break
    drop_dead(g)
    return remove_dead(g)


def _fuse_silu(g: Graph) -> None:
    """``Mul(x, Sigmoid(x))`` with x from an ACT_PRODUCERS node read by just those two."""
    consumers, producers = g.consumers(), g.producers()
    for mul in g.nodes:
        if mul.op_type != "Mul" or len(mul.inputs) != 2:
            continue
        for k in (0, 1):
            x, s = mul.inputs[k], mul.inputs[1 - k]
            sig = producers.get(s)
            prod = producers.get(x)
            if (sig is None or sig.op_type != "Sigmoid" or sig.inputs[0] != x
                    or single_consumer(g, consumers, s) is not mul
                    or prod is None or prod.op_type not in ACT_PRODUCERS
                    or "_activation" in prod.attrs or len(prod.outputs) != 1
                    or x in g.outputs
                    or {id(n) for n in consumers.get(x, [])} != {id(sig), id(mul)}):
                continue
            prod.attrs["_activation"] = "Silu"
            old, new = prod.outputs[0], mul.outputs[0]
            prod.outputs[0] = new
            replace_uses(g, old, new)
            sig.op_type = mul.op_type = DEAD
            consumers, producers = g.consumers(), g.producers()
            break
    drop_dead(g)


def fuse_activation(g: Graph) -> Graph:
    _fuse_silu(g)
    consumers, producers = g.consumers(), g.producers()
    for act in g.nodes:
        if act.op_type not in ACTIVATIONS and act.op_type != "PRelu":
            continue
        prod = producers.get(act.inputs[0])
        if (prod is None or prod.op_type not in ACT_PRODUCERS or "_activation" in prod.attrs
                or len(prod.outputs) != 1
                or single_consumer(g, consumers, prod.outputs[0]) is not act):
            continue
        if act.op_type == "PRelu":
            fused = _prelu_params(g, act, prod)
            if fused is None:
                continue
            name, params = fused
        else:
            name, params = act.op_type, _act_params(g, act)
        if params is None:
            continue
        prod.attrs["_activation"] = name
        if params:
            prod.attrs["_act_params"] = [float(p) for p in params]
        _rewire_output(g, prod, act)
        producers = g.producers()
    drop_dead(g)
    return remove_dead(g)
