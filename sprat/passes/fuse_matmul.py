"""Transformer fusions around MatMul (onnxruntime's Gelu, MatMul+Add and residual fusions).

- ``fuse_gelu``: the erf form of GELU as PyTorch exports it, ``x * (1 + erf(x / sqrt(2))) * 0.5``
  (with ``Div(x, sqrt(2))`` or ``Mul(x, 1/sqrt(2))``, and the 0.5 applied first or last),
  becomes one ``Gelu`` node (ONNX Gelu-20, approximate="none").
- ``fuse_matmul_bias``: ``Add(MatMul(X, W), B)`` with W a constant 2-D weight and B a constant
  vector of W's column count becomes MatMul with ``_bias=True`` and B as an extra input.
``fuse_residual`` (``fuse.py``) then takes ``Add(MatMul(...), R)`` with R of the same shape as it
does for Conv, and the ``Gelu`` fuses into the MatMul as ``_activation`` (``fuse_activation``).
See ``sprat.ir.fused`` for what the attributes mean.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.graph import Graph
from .util import DEAD, drop_dead, remove_dead, replace_uses, single_consumer

FUSED = ("_bias", "_residual", "_activation", "_layout")


def _const(g: Graph, idx: int):
    return None if idx < 0 else g.values[idx].data


def _scalar_is(g: Graph, idx: int, value: float) -> bool:
    d = _const(g, idx)
    return d is not None and d.size == 1 and d.dtype.kind == "f" and bool(
        np.isclose(float(d.reshape(())), value, rtol=1e-6, atol=0.0))


def _other(node, idx: int):
    """The other input of a two-input node, given one input value ``idx``."""
    if len(node.inputs) != 2:
        return None
    if node.inputs[0] == idx:
        return node.inputs[1]
    if node.inputs[1] == idx:
        return node.inputs[0]
    return None


def _only(g: Graph, consumers, value: int, op: str):
    """The single consumer of ``value`` when it has type ``op`` (and ``value`` is no output)."""
    node = single_consumer(g, consumers, value)
    return node if node is not None and node.op_type == op else None


def _gelu_tail(g: Graph, consumers, producers, erf):
    """For an Erf node of a GELU: (x, [nodes to drop], last node) or None."""
    scaled = producers.get(erf.inputs[0])
    if scaled is None or len(scaled.inputs) != 2:
        return None
    x = scaled.inputs[0]
    if not ((scaled.op_type == "Div" and _scalar_is(g, scaled.inputs[1], math.sqrt(2.0)))
            or (scaled.op_type == "Mul" and _scalar_is(g, scaled.inputs[1], 1 / math.sqrt(2.0)))):
        return None
    if single_consumer(g, consumers, scaled.outputs[0]) is not erf:
        return None
    plus1 = _only(g, consumers, erf.outputs[0], "Add")
    if plus1 is None or not _scalar_is(g, _other(plus1, erf.outputs[0]), 1.0):
        return None
    mul = _only(g, consumers, plus1.outputs[0], "Mul")
    if mul is None:
        return None
    p = _other(mul, plus1.outputs[0])
    if p == x:  # (x * (1 + erf)) * 0.5
        half = _only(g, consumers, mul.outputs[0], "Mul")
        if half is None or not _scalar_is(g, _other(half, mul.outputs[0]), 0.5):
            return None
        return x, [scaled, erf, plus1, mul], half
    pre = producers.get(p)  # (x * 0.5) * (1 + erf)
    if (pre is None or pre.op_type != "Mul" or _other(pre, x) is None
            or not _scalar_is(g, _other(pre, x), 0.5)
            or single_consumer(g, consumers, p) is not mul):
        return None
    return x, [scaled, erf, plus1, pre], mul


def fuse_gelu(g: Graph) -> Graph:
    consumers, producers = g.consumers(), g.producers()
    for erf in g.nodes:
        if erf.op_type != "Erf":
            continue
        found = _gelu_tail(g, consumers, producers, erf)
        if found is None:
            continue
        x, dead, last = found
        last.op_type, last.inputs, last.attrs = "Gelu", [x], {}
        for node in dead:
            node.op_type = DEAD
        drop_dead(g)
        consumers, producers = g.consumers(), g.producers()
    return remove_dead(g)


def _rewire(g: Graph, producer, add) -> None:
    """``producer`` now writes what ``add`` wrote; ``add`` is dropped."""
    old, new = producer.outputs[0], add.outputs[0]
    producer.outputs[0] = new
    replace_uses(g, old, new)
    add.op_type = DEAD


def _plain_matmul(g: Graph, consumers, producers, value: int, add):
    mm = producers.get(value)
    if (mm is None or mm.op_type != "MatMul" or len(mm.outputs) != 1
            or any(k in mm.attrs for k in FUSED)
            or single_consumer(g, consumers, value) is not add):
        return None
    return mm


def fuse_matmul_bias(g: Graph) -> Graph:
    consumers, producers = g.consumers(), g.producers()
    for add in g.nodes:
        if add.op_type != "Add" or len(add.inputs) != 2 or add.attrs:
            continue
        for k in (0, 1):
            mm = _plain_matmul(g, consumers, producers, add.inputs[k], add)
            bias = _const(g, add.inputs[1 - k])
            w = _const(g, mm.inputs[1]) if mm is not None else None
            if (mm is None or w is None or w.ndim != 2 or bias is None or bias.ndim > 2
                    or bias.dtype != w.dtype or bias.size != w.shape[1]
                    or any(d != 1 for d in bias.shape[:-1])):
                continue
            a_shape = g.values[mm.inputs[0]].shape
            if bias.ndim == 2 and (a_shape is None or len(a_shape) < 2):
                continue  # NOTE: a (1, N) bias on a 1-D product would add a dimension
            mm.inputs.append(add.inputs[1 - k])
            mm.attrs["_bias"] = True
            _rewire(g, mm, add)
            break
    drop_dead(g)
    return remove_dead(g)
