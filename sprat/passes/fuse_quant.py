"""The dynamic-quantization pattern of onnxruntime's ``quantize_dynamic`` as one op.

``quantize_dynamic`` writes every MatMul as ``DynamicQuantizeLinear(X) -> MatMulInteger(Xq, W,
x_zp, w_zp) -> Cast(to=float) -> Mul(., Mul(x_scale, w_scale))`` and keeps the bias as a
following ``Add``; ``fuse_integer_matmul`` makes ``MatMulInteger -> Cast -> Mul (-> Add)`` one
com.microsoft ``MatMulIntegerToFloat(Xq, W, x_scale, w_scale, x_zp, w_zp, bias)``, as
onnxruntime's own graph optimizer does (``MatMulIntegerToFloatFusion``). It computes the same
bits: ``float(acc) * float32(x_scale * w_scale)`` then ``+ bias``, each rounded once, which is
what Cast, Mul and Add did (the product of the scales is commutative and rounded once either
way). DynamicQuantizeLinear stays (its output feeds several MatMuls: Q, K and V).

Fused only when: the Cast's and the Mul's outputs have one reader each, the Cast is to float32,
the scale product is a two-input Mul whose inputs are a DynamicQuantizeLinear scale or a
one-value constant (A's scale) and a constant of one value or one per column (W's scale), A's
zero point is a DynamicQuantizeLinear zero point or a one-value constant, and W is a constant
2-D matrix; the bias when it is a constant float32 vector of W's column count.
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import MISSING, Graph
from .util import DEAD, drop_dead, remove_dead, single_consumer

MS = "com.microsoft"
FLOAT = 1  # ONNX TensorProto.FLOAT


def _const(g: Graph, idx: int):
    return None if idx < 0 else g.values[idx].data


def _scalar_source(g: Graph, producers, idx: int, output: int) -> bool:
    """Whether value ``idx`` is one value: DynamicQuantizeLinear's output ``output`` or a
    constant of size 1."""
    d = _const(g, idx)
    if d is not None:
        return d.size == 1
    p = producers.get(idx)
    return p is not None and p.op_type == "DynamicQuantizeLinear" and (
        len(p.outputs) > output and p.outputs[output] == idx)


def _other(node, idx: int):
    if len(node.inputs) != 2:
        return None
    if node.inputs[0] == idx:
        return node.inputs[1]
    return node.inputs[0] if node.inputs[1] == idx else None


def _scales(g: Graph, producers, s: int, n: int):
    """(a_scale, b_scale) of the scale product ``s`` or None."""
    mul = producers.get(s)
    if mul is None or mul.op_type != "Mul" or len(mul.inputs) != 2 or mul.attrs:
        return None
    for a_s, b_s in (mul.inputs, mul.inputs[::-1]):
        b = _const(g, b_s)
        if (_scalar_source(g, producers, a_s, 1) and b is not None and b.dtype == np.float32
                and b.size in (1, n) and (b.size == 1 or all(d == 1 for d in b.shape[:-1]))):
            return a_s, b_s
    return None


def _fuse_one(g: Graph, consumers, producers, mm) -> bool:
    if mm.attrs or len(mm.outputs) != 1 or not 2 <= len(mm.inputs) <= 4:
        return False
    a, w = mm.inputs[0], mm.inputs[1]
    a_zp = mm.inputs[2] if len(mm.inputs) > 2 else MISSING
    w_zp = mm.inputs[3] if len(mm.inputs) > 3 else MISSING
    wv = _const(g, w)
    if wv is None or wv.ndim != 2 or (a_zp != MISSING and not _scalar_source(g, producers,
                                                                             a_zp, 2)):
        return False
    n = wv.shape[1]
    cast = single_consumer(g, consumers, mm.outputs[0])
    if cast is None or cast.op_type != "Cast" or int(cast.attrs.get("to", 0)) != FLOAT:
        return False
    if set(cast.attrs) - {"to", "saturate"}:
        return False
    mul = single_consumer(g, consumers, cast.outputs[0])
    if mul is None or mul.op_type != "Mul" or mul.attrs:
        return False
    s = _other(mul, cast.outputs[0])
    scales = None if s is None else _scales(g, producers, s, n)
    if scales is None:
        return False
    out, bias = mul.outputs[0], MISSING
    add = single_consumer(g, consumers, out)
    if add is not None and add.op_type == "Add" and not add.attrs:
        b = _other(add, out)
        bv = None if b is None else _const(g, b)
        if bv is not None and bv.dtype == np.float32 and tuple(bv.shape) == (n,):
            bias = b
    # NOTE: the fused node reads A's scale where MatMulInteger stood: its producer must come
    # first (in quantize_dynamic's graphs it is the DynamicQuantizeLinear that made A)
    order = {id(node): k for k, node in enumerate(g.nodes)}
    srcs = [producers.get(v) for v in (scales[0], scales[1])]
    if any(p is not None and order[id(p)] > order[id(mm)] for p in srcs):
        return False
    last = add if bias != MISSING else mul
    inputs = [a, w, scales[0], scales[1], a_zp, w_zp, bias]
    while inputs[-1] == MISSING:
        inputs.pop()
    mm.op_type, mm.domain, mm.inputs = "MatMulIntegerToFloat", MS, inputs
    mm.outputs = [last.outputs[0]]
    for node in (cast, mul) + ((add,) if bias != MISSING else ()):
        node.op_type = DEAD
    drop_dead(g)
    return True


def fuse_integer_matmul(g: Graph) -> Graph:
    consumers, producers = g.consumers(), g.producers()
    changed = False
    for mm in list(g.nodes):
        if (mm.op_type == "MatMulInteger" and mm.domain in ("", "ai.onnx")
                and _fuse_one(g, consumers, producers, mm)):
            changed = True
            consumers, producers = g.consumers(), g.producers()
    return remove_dead(g) if changed else g

