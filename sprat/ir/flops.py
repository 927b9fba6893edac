"""Floating-point operation counts per node, for session info, callbacks and ``sprat info``.

A multiply-add counts as 2 FLOPs. Contractions are counted exactly; recurrent ops count their
GEMMs; every other op is approximated by the number of elements it writes (or reads, for
reductions). Counts are for one run at the given concrete shapes, batch included.

``_layout="NHWC"`` (``sprat.ir.fused``) changes where the channel dim sits in the data tensors,
never the weights, so every formula below is written in element counts and weight dims only and
gives the same number in both layouts. Fused ``_residual`` and ``_activation`` add one FLOP per
output element each; a fused ``_scale`` one per element of the first input (the Mul it replaces),
``_mean`` one per output element (the pool it replaces).
"""

from __future__ import annotations

import math

from .graph import Node
from .tensorinfo import TensorInfo

_RECURRENT_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
# Elementwise work per gate element after the GEMMs (sigmoid/tanh/products), roughly.
_RECURRENT_POINTWISE = {"LSTM": 10, "GRU": 9, "RNN": 2}
_INPUT_SIZED = {
    "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "ArgMax", "ArgMin",
    "ReduceMax", "ReduceMin", "ReduceMean", "ReduceSum", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
}
_KERNEL_POOLS = {"MaxPool", "AveragePool", "LpPool"}


def node_flops(node: Node, ins: list[TensorInfo | None], outs: list[TensorInfo]) -> int:
    """FLOPs of one run of ``node`` with inputs ``ins`` (None = absent) and outputs ``outs``.

    Formulas (multiply-add = 2):
      - Conv: ``2 * out_elems * W.shape[1] * prod(W.shape[2:])`` (W is ``[M, C/group, k...]``),
        plus ``out_elems`` with a bias.
      - ConvTranspose: ``2 * in_elems * W.shape[1] * prod(W.shape[2:])`` (W is ``[C, M/group,
        k...]``: every input element meets every kernel tap of its group), plus bias.
      - MatMul / Gemm (and the Integer/QLinear forms): ``2 * out_elems * K`` with batching
        through ``out_elems``; Gemm adds ``out_elems`` for C.
      - LSTM / GRU / RNN: ``2 * seq * batch * dirs * gates*H * (I + H)`` plus pointwise gate work.
      - MaxPool / AveragePool / LpPool: ``out_elems * prod(kernel_shape)``.
      - Global pools, reductions, ArgMax/Min: input elements.
      - Einsum: ``2 * iteration space`` (every label's dim and the ellipsis dims) with two or
        more operands, the iteration space with one.
      - DeformConv: Conv's count plus ``8`` per sampled tap (bilinear: 4 corners, 2 each).
      - Anything else: output elements.

    Returns an int >= 0. Never raises on an unknown op (it falls back to output elements).
    """
    op = node.op_type
    attrs = node.attrs
    out_elems = outs[0].size if outs else 0
    if attrs.get("_lookup"):
        ins = ins[:-1]  # the lookup table is the extra last input
    if attrs.get("_residual"):
        ins = ins[:-1]  # the residual operand is the extra last input
    scaled = 0
    if attrs.get("_scale"):
        ins, scaled = ins[:-1], ins[0].size  # the scale, before the residual: one per input
    if attrs.get("_bias"):
        ins = ins[:-1]  # then the fused bias
    if op in ("Conv", "ConvInteger", "QLinearConv"):
        w = _weight(op, ins)
        flops = 2 * out_elems * _kernel_volume(w)
        flops += out_elems if _has_bias(op, ins) else 0
    elif op == "ConvTranspose":
        w = ins[1]
        flops = 2 * ins[0].size * _kernel_volume(w)
        flops += out_elems if _present(ins, 2) else 0
    elif op in ("MatMul", "MatMulInteger", "QLinearMatMul", "Gemm", "FusedMatMul"):
        a = ins[0]
        if op == "Gemm":
            k = a.shape[0] if attrs.get("transA", 0) else a.shape[1]
        elif op == "FusedMatMul" and attrs.get("transA", 0):
            k = a.shape[-2]
        else:
            k = a.shape[-1]
        flops = 2 * out_elems * k
        flops += out_elems if op == "Gemm" and _present(ins, 2) else 0
    elif op == "Einsum":
        from .shapes.extra import einsum_iterations

        size = einsum_iterations(attrs.get("equation", ""), [t.shape for t in ins])
        flops = 2 * size if len(ins) > 1 else size
    elif op == "DeformConv":
        w = ins[1]
        taps = out_elems // max(w.shape[0], 1) * ins[0].shape[1] * math.prod(w.shape[2:])
        flops = 2 * out_elems * _kernel_volume(w) + 8 * taps
        flops += out_elems if _present(ins, 3) else 0
    elif op in _RECURRENT_GATES:
        flops = _recurrent(op, ins, attrs)
    elif op in _KERNEL_POOLS:
        flops = out_elems * math.prod(attrs.get("kernel_shape", [1]))
    elif op in _INPUT_SIZED:
        flops = ins[0].size
    else:
        flops = sum(o.size for o in outs)
    if attrs.get("_residual"):
        flops += out_elems
    if attrs.get("_bias"):
        flops += out_elems
    flops += scaled
    if attrs.get("_mean"):
        flops += out_elems  # the global average pool of the output
    if attrs.get("_activation") is not None:
        flops += out_elems
    return int(flops)


def graph_flops(items) -> int:
    """Sum of :func:`node_flops` over ``(node, ins, outs)`` triples."""
    return sum(node_flops(n, i, o) for n, i, o in items)


def _present(ins, k: int) -> bool:
    return len(ins) > k and ins[k] is not None


def _weight(op: str, ins) -> TensorInfo:
    # QLinearConv: x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B
    return ins[3] if op == "QLinearConv" else ins[1]


def _has_bias(op: str, ins) -> bool:
    return _present(ins, 8) if op == "QLinearConv" else (op == "Conv" and _present(ins, 2))


def _kernel_volume(w: TensorInfo) -> int:
    """Multiply-adds per output (Conv) / input (ConvTranspose) element: dim 1 times the taps."""
    return int(w.shape[1]) * math.prod(int(d) for d in w.shape[2:])


def _recurrent(op: str, ins, attrs) -> int:
    x, w = ins[0], ins[1]
    seq, batch = (x.shape[1], x.shape[0]) if attrs.get("layout", 0) else (x.shape[0], x.shape[1])
    dirs, gh, inp = w.shape  # [num_directions, gates*hidden, input_size]
    hidden = gh // _RECURRENT_GATES[op]
    per_step = 2 * gh * (inp + hidden) + _RECURRENT_POINTWISE[op] * hidden
    return int(seq * batch * dirs * per_step)
