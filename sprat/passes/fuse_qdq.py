"""Fuse QDQ patterns into quantized ops (onnxruntime's QDQ fusions), at convert time.

1. ``fuse_qdq``: ``DequantizeLinear(x_q) -> Conv(·, DequantizeLinear(w_q)[,
   DequantizeLinear(b_q)]) [-> Relu | Clip] -> QuantizeLinear`` becomes ``QLinearConv(x_q,
   x_scale, x_zp, w_q, w_scale, w_zp, y_scale, y_zp[, b_q])`` followed, for an activation that
   is not already implied by the output's saturation, by ``Clip`` on the quantized output with
   the quantized bounds (the quantization is monotonic, so ``Q(clip(v, lo, hi)) ==
   clip(Q(v), Q(lo), Q(hi))`` exactly); ``fuse_activation`` then folds that Clip into the
   QLinearConv. And ``DequantizeLinear(a), DequantizeLinear(b) -> Add|Mul -> QuantizeLinear``
   becomes com.microsoft ``QLinearAdd|QLinearMul``, whose definition is exactly that chain.
2. ``fuse_lookup``: ``DequantizeLinear -> per-channel elementwise float ops (BatchNormalization,
   Clip, Relu, Mul by a per-channel constant, ...) -> QuantizeLinear`` becomes
   ``QLinearLookup(x_q, table)`` (sprat-internal: a (C, 256) table of the chain's results,
   computed by the reference kernels, so equal to the unfused chain bit for bit).
3. ``fuse_conv_lookup`` (last, on the NHWC graph): a ``QLinearLookup`` that alone reads a
   ``QLinearConv``'s output becomes that conv's ``_lookup`` (``sprat.ir.fused``): the conv's
   epilogue maps its requantised values through the table (an unfolded BatchNormalization
   between two quantized convs, as onnxruntime's quantizer leaves it without pre-processing).
4. ``lookup_contrib``: onnxruntime's elementwise quantized contrib ops as tables:
   ``QLinearSigmoid`` / ``QLinearLeakyRelu`` become ``QLinearLookup``, a ``QLinearConcat``
   a lookup per input to requantise and a plain ``Concat``, and a SiLU (``QLinearMul(x,
   QLinearSigmoid(x))``) one lookup of x; ``lookup_cones`` any function of one quantized value
   through elementwise ops one lookup.

``fuse_qdq`` also makes QDQ Add/Mul ``QLinearAdd/QLinearMul`` (exact), a MatMul with a constant
weight ``QLinearMatMul`` and a GlobalAveragePool ``QLinearGlobalAveragePool`` (within 1 LSB, as
the convs below).

Conv conditions: activations uint8/int8 with per-tensor scale and zero point; weights constant
uint8/int8 per tensor or per output channel (axis 0); the bias constant int32 with zero point 0
and scale ``x_scale * w_scale`` (what quantizers emit; relative 1e-6); the conv's output and
activation read only by the next node and no graph output.

Result of the conv fusion (NOTE): QLinearConv requantises the integer sum with the float32
multiplier ``x_scale * w_scale / y_scale``; the QDQ graph computes the conv in float32 on
dequantized values and divides by ``y_scale``. The two differ by float32 rounding only, so a
quantized value can land one step (1 LSB) away where the exact result is within rounding of a
.5 boundary; never more in practice (``tests/models/test_quant_models.py`` measures it on
ResNet-18, per conv on the spec's own inputs). The fused node carries ``_qdq=True``: its spec
is the float graph, so a kernel may sum in float32 with rounding (the cpu kernel's Winograd
F(4,3) for 3x3 convs, as the unfused float conv would run) within that 1 LSB.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..ir.graph import MISSING, Graph
from .util import DEAD, inferred_infos, remove_dead, single_consumer

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


def _qtype(g: Graph, x: int, zp):
    """The dtype of the quantized value ``x``: recorded, else its zero point's (the spec ties
    them), else None."""
    dt = g.values[x].dtype
    return dt if dt is not None else (None if zp is None else zp.dtype)


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
        x_q, sx, zx = xp
        if wp is None or _qtype(g, x_q, zx) not in _Q8 or sx.size != 1:
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
        attrs["_qdq"] = True  # NOTE: its spec is the float QDQ graph (sprat.ir.fused)
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
    _fuse_add(g)
    _fuse_matmul(g)
    _fuse_global_pool(g)
    return remove_dead(g)


def _into_q(g: Graph, op_types, n_inputs: int):
    """``(node, q, (y_scale, y_zp), producers)`` for each node of ``op_types`` with
    ``n_inputs`` inputs and no attributes whose output only a per-tensor QuantizeLinear ``q``
    reads; the caller may rewrite the graph between items (the maps are rebuilt)."""
    consumers, producers = g.consumers(), g.producers()
    for node in list(g.nodes):
        if node.op_type not in op_types or len(node.inputs) != n_inputs or node.attrs:
            continue
        q = single_consumer(g, consumers, node.outputs[0])
        qp = _q_params(g, q)
        if qp is not None:
            yield node, q, qp, producers
            consumers, producers = g.consumers(), g.producers()


def _fuse_global_pool(g: Graph) -> None:
    """``DequantizeLinear(x) -> GlobalAveragePool -> QuantizeLinear`` (per-tensor, one
    quantized type: a squeeze-excite's pool) becomes com.microsoft ``QLinearGlobalAveragePool
    (x, x_scale, x_zp, y_scale, y_zp)``, onnxruntime's QDQ fusion of the same chain: the
    integer sum of the bytes, one float32 scale (its kernel's form), where the QDQ graph
    averages dequantized float32 values, so a value may be 1 LSB off near a rounding boundary,
    as the fused convs. One pass over the bytes instead of three over floats."""
    for pool, q, qp, producers in _into_q(g, ("GlobalAveragePool",), 1):
        dq = producers.get(pool.inputs[0])
        xp = _dq_params(g, dq)
        if xp is None or xp[1].size != 1:
            continue
        if _qtype(g, xp[0], xp[2]) != qp[1].dtype or qp[1].dtype not in _Q8:
            continue
        zx = dq.inputs[2] if len(dq.inputs) > 2 else MISSING
        if zx == MISSING:
            zx = g.add_const(f"{pool.name}/x_zero_point", np.zeros((), qp[1].dtype))
        pool.op_type, pool.domain = "QLinearGlobalAveragePool", "com.microsoft"
        pool.inputs = [xp[0], dq.inputs[1], zx, q.inputs[1], q.inputs[2]]
        pool.outputs, pool.attrs = [q.outputs[0]], {"channels_last": 0}
        q.op_type, q.inputs, q.outputs = DEAD, [], []
    g.nodes = [n for n in g.nodes if n.op_type != DEAD]


def _fuse_matmul(g: Graph) -> None:
    """``DequantizeLinear(a) -> MatMul(·, DequantizeLinear(w)) -> QuantizeLinear`` with a
    constant 2-D weight (K, N), per tensor or per column (axis 1) becomes ``QLinearMatMul(a,
    a_scale, a_zp, w, w_scale, w_zp, y_scale, y_zp)`` (onnxruntime's QDQ MatMul fusion) on
    the exact integer GEMM: the integer sum requantised with ``a_scale * w_scale / y_scale``
    where the QDQ graph sums dequantized float32 products, so a value may be 1 LSB off the QDQ
    graph's near a rounding boundary, as the fused conv's. A product of two activations (an
    attention's) is left to the float MatMul."""
    for mm, q, qp, producers in _into_q(g, ("MatMul",), 2):
        a_dq, w_dq = producers.get(mm.inputs[0]), producers.get(mm.inputs[1])
        ap = _dq_params(g, a_dq)
        wq = _const(g, w_dq.inputs[0]) if w_dq is not None and w_dq.inputs else None
        if (ap is None or ap[1].size != 1 or wq is None or wq.ndim != 2
                or wq.dtype not in _Q8 or w_dq.op_type != "DequantizeLinear"
                or int(w_dq.attrs.get("block_size", 0))):
            continue
        ws = _const(g, w_dq.inputs[1])
        wz_idx = w_dq.inputs[2] if len(w_dq.inputs) > 2 else MISSING
        wz = _const(g, wz_idx)
        n = wq.shape[1]
        if (ws is None or ws.dtype != np.float32 or ws.size not in (1, n)
                or (ws.size > 1 and int(w_dq.attrs.get("axis", 1)) % 2 != 1)
                or (wz_idx != MISSING and (wz is None or wz.size != ws.size))):
            continue
        types = {_qtype(g, ap[0], ap[2]), qp[1].dtype}
        if len(types) != 1 or types.pop() not in _Q8:
            continue
        za = a_dq.inputs[2] if len(a_dq.inputs) > 2 else MISSING
        if za == MISSING:
            za = g.add_const(f"{mm.name}/a_zero_point", np.zeros((), qp[1].dtype))
        if wz_idx == MISSING:
            wz_idx = g.add_const(f"{mm.name}/w_zero_point", np.zeros(ws.shape, wq.dtype))
        mm.op_type = "QLinearMatMul"
        mm.inputs = [ap[0], a_dq.inputs[1], za, w_dq.inputs[0], w_dq.inputs[1], wz_idx,
                     q.inputs[1], q.inputs[2]]
        mm.outputs = [q.outputs[0]]
        q.op_type, q.inputs, q.outputs = DEAD, [], []
    g.nodes = [n for n in g.nodes if n.op_type != DEAD]


def _fuse_add(g: Graph) -> None:
    """``DequantizeLinear(a), DequantizeLinear(b) -> Add|Mul -> QuantizeLinear`` (per-tensor,
    one quantized type) becomes com.microsoft ``QLinearAdd|QLinearMul(a, a_scale, a_zp, b,
    b_scale, b_zp, y_scale, y_zp)``, whose definition is that chain's float32 operations:
    equal bit for bit."""
    for op, q, qp, producers in _into_q(g, ("Add", "Mul"), 2):
        dqs = [producers.get(i) for i in op.inputs]
        ps = [_dq_params(g, d) for d in dqs]
        if any(p is None or p[1].size != 1 for p in ps):
            continue
        types = {_qtype(g, p[0], p[2]) for p in ps} | {qp[1].dtype}
        if len(types) != 1 or types.pop() not in _Q8:
            continue
        ins = []
        for d in dqs:
            zp = d.inputs[2] if len(d.inputs) > 2 else MISSING
            if zp == MISSING:
                zp = g.add_const(f"{op.name}/zero_point", np.zeros((), qp[1].dtype))
            ins += [d.inputs[0], d.inputs[1], zp]
        op.op_type = "QLinearAdd" if op.op_type == "Add" else "QLinearMul"
        op.domain = "com.microsoft"
        op.inputs = ins + [q.inputs[1], q.inputs[2]]
        op.outputs = [q.outputs[0]]
        q.op_type, q.inputs, q.outputs = DEAD, [], []
    g.nodes = [n for n in g.nodes if n.op_type != DEAD]


# ---- DequantizeLinear -> per-channel float ops -> QuantizeLinear as one table ----------------

_UNARY = {"Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Abs",
          "Neg", "Identity", "Elu", "Softplus"}
_BINARY = {"Add", "Sub", "Mul", "Div", "Max", "Min", "PRelu"}


def _per_channel_const(g: Graph, idx: int, rank: int) -> bool:
    """Whether input ``idx`` is a constant that broadcasts per channel (axis 1) or per tensor
    against a rank-``rank`` value."""
    d = _const(g, idx)
    if d is None or d.ndim > rank:
        return False
    shape = (1,) * (rank - d.ndim) + d.shape
    return all(s == 1 for k, s in enumerate(shape) if k != 1)


def _channel_op(g: Graph, node, x: int, rank: int) -> bool:
    """Whether ``node`` maps its input ``x`` channel by channel, element by element (its
    other inputs constant per channel): a table over x's 256 values then gives its result."""
    if len(node.outputs) != 1 or any(k.startswith("_") for k in node.attrs):
        return False
    rest = [i for i in node.inputs[1:] if i != MISSING]
    if node.inputs[0] != x:
        if node.op_type not in ("Add", "Mul", "Max", "Min") or x not in node.inputs[1:]:
            return False
        rest = [i for i in node.inputs if i != x]
    if node.op_type in _UNARY:
        return node.op_type != "Clip" or all(_const(g, i) is not None and _const(g, i).size == 1
                                             for i in rest)
    if node.op_type in _BINARY:
        return len(rest) == 1 and _per_channel_const(g, rest[0], rank)
    if node.op_type == "BatchNormalization":
        return (int(node.attrs.get("training_mode", 0)) == 0 and rank >= 2 and len(rest) == 4
                and all(_const(g, i) is not None for i in rest))
    return False


def _all_values(dt) -> np.ndarray:
    """The 256 values of the 8-bit type ``dt``, in order (a table's index)."""
    return np.arange(np.iinfo(dt).min, np.iinfo(dt).max + 1).astype(dt)


def _evaluate_chain(g: Graph, nodes, leaf: int, values: np.ndarray) -> np.ndarray:
    """The last of ``nodes``' output (each node one output, in graph order) with ``leaf``
    taken as ``values`` and every other input a constant of the graph, by the reference
    kernels: a table's values, the same bits as the nodes compute."""
    from ..backends.reference import evaluate

    vals = {leaf: values}
    for n in nodes:
        ins = [None if i == MISSING else vals[i] if i in vals else g.values[i].data
               for i in n.inputs]
        vals[n.outputs[0]] = evaluate(n, ins)[0]
    return vals[nodes[-1].outputs[0]]


def _table(g: Graph, chain, x_q: int, channels: int, rank: int, dt) -> np.ndarray:
    """(channels, 256) table of the chain ``DQ, ops..., Q`` evaluated by the reference kernels
    on every value of x_q's type in every channel; (1, 256) when the rows agree."""
    vals = _all_values(dt)
    v = np.ascontiguousarray(np.broadcast_to(vals.reshape((256, 1) + (1,) * (rank - 2)),
                                             (256, channels) + (1,) * (rank - 2)))
    v = _evaluate_chain(g, chain, x_q, v)
    table = np.ascontiguousarray(v.reshape(256, channels).T)
    return table[:1].copy() if (table == table[:1]).all() else table


def fuse_lookup(g: Graph) -> Graph:
    """``DequantizeLinear(x_q) -> [per-channel elementwise float ops] -> QuantizeLinear``
    (per-tensor scales, uint8/int8, the ops e.g. a BatchNormalization and a Clip between two
    quantized convs) becomes ``QLinearLookup(x_q, table)``: the table holds the chain's result
    for each of the 256 values of x_q in each channel, computed by the reference kernels, so
    the result equals the unfused chain's bit for bit. Runs after ``fold_constants`` (the
    ops' parameters are often DequantizeLinear of constants) and before ``layout``."""
    consumers, producers = g.consumers(), g.producers()
    infos = None
    for q in list(g.nodes):
        if q.op_type != "QuantizeLinear" or _q_params(g, q) is None:
            continue
        chain, v = [q], q.inputs[0]
        while True:
            p = producers.get(v)
            if p is None or single_consumer(g, consumers, v) is not chain[-1]:
                chain = None
                break
            if p.op_type == "DequantizeLinear":
                break
            chain.append(p)
            live = [i for i in p.inputs if i != MISSING and g.values[i].data is None]
            if len(live) != 1:
                chain = None
                break
            v = live[0]
        if chain is None:
            continue
        dq = producers[v]
        xp = _dq_params(g, dq)
        if infos is None:
            infos = inferred_infos(g)
        info = infos.get(dq.inputs[0]) if xp is not None else None
        if (info is None or _qtype(g, xp[0], xp[2]) not in _Q8 or len(info.shape) < 2
                or xp[1].size != 1):
            continue
        rank, channels = len(info.shape), int(info.shape[1])
        ops = chain[1:][::-1]
        x = v
        ok = True
        for node in ops:
            if not _channel_op(g, node, x, rank):
                ok = False
                break
            x = node.outputs[0]
        # NOTE: the channel count was inferred with symbolic dims as 1: the constants say
        # whether that holds (a per-channel constant of another size: not fused)
        if not ok or any(_const(g, i) is not None and _const(g, i).size not in (1, channels)
                         for node in ops for i in node.inputs[1:]):
            continue
        table = _table(g, [dq, *ops, q], xp[0], channels, rank, _qtype(g, xp[0], xp[2]))
        t = g.add_const(f"{q.name}/table", table)
        q.op_type, q.inputs, q.attrs = "QLinearLookup", [xp[0], t], {"axis": 1}
        for node in ops:
            node.op_type = DEAD
        consumers, producers = g.consumers(), g.producers()
    g.nodes = [n for n in g.nodes if n.op_type != DEAD]
    return remove_dead(g)


#: com.microsoft ops elementwise on one uint8/int8 input with constant per-tensor scales and
#: zero points (``quantize(f(dequantize(X)))``): one table of 256 values says all they do
_LOOKUP_UNARY = {"QLinearSigmoid", "QLinearLeakyRelu"}


def _scalar_params(g: Graph, ids) -> list | None:
    """The constant scalar values of ``ids`` (MISSING kept as None), or None when one is not
    a constant of one value."""
    out = []
    for i in ids:
        if i == MISSING:
            out.append(None)
            continue
        v = _const(g, i)
        if v is None or v.size != 1:
            return None
        out.append(v)
    return out


def _values_table(node, ins, pos, dt) -> np.ndarray:
    """(1, 256) table of the elementwise ``node`` on every value of ``dt`` as its input
    ``pos`` (``ins``: its inputs, that one left out), by the reference kernels."""
    from ..backends.reference import evaluate

    vals = _all_values(dt)
    ins = list(ins[:pos]) + [vals] + list(ins[pos:])
    return np.ascontiguousarray(evaluate(node, ins)[0].reshape(1, 256))


def lookup_contrib(g: Graph) -> Graph:
    """onnxruntime's quantized elementwise contrib ops as ``QLinearLookup`` (tables made by
    the reference kernels, so the same bits), which every layout and the conv epilogue
    (``fuse_conv_lookup``) take:

    - ``QLinearSigmoid`` / ``QLinearLeakyRelu`` (X, X_scale, X_zp, Y_scale, Y_zp), per-tensor
      constants: ``QLinearLookup(X, table)``, the table ``quantize(f(dequantize(v)))`` of the
      256 values v (what onnxruntime's kernels compute for these ops: a table too);
    - ``QLinearConcat`` (Y_scale, Y_zp, X0, X0_scale, X0_zp, ...): each input whose scale or
      zero point is not Y's through the lookup of its requantisation ``quantize_Y(
      dequantize_X(v))``, then a plain ``Concat`` of the bytes (exact: the op's result is that
      requantisation of each element, concatenated).

    Nodes with a parameter that is not a constant scalar, or another input type, are kept
    (the reference kernels run them). Runs after ``fold_constants`` and before ``layout``."""
    changed = False
    nodes = []
    for node in g.nodes:
        if node.domain != "com.microsoft":
            nodes.append(node)
            continue
        x = node.inputs[0] if node.inputs else MISSING
        if node.op_type in _LOOKUP_UNARY and x != MISSING and len(node.outputs) == 1:
            params = _scalar_params(g, node.inputs[1:])
            dt = None if params is None else _qtype(g, x, params[1] if len(params) > 1 else None)
            if params is not None and dt in _Q8:
                table = _values_table(node, params, 0, dt)
                t = g.add_const(f"{node.name}/table", table)
                node.op_type, node.domain = "QLinearLookup", ""
                node.inputs, node.attrs = [x, t], {"axis": 1}
                changed = True
        elif node.op_type == "QLinearConcat" and len(node.inputs) >= 5 and (
                len(node.inputs) - 2) % 3 == 0:
            params = _scalar_params(g, [node.inputs[0], node.inputs[1]]
                                    + [i for k in range(2, len(node.inputs), 3)
                                       for i in node.inputs[k + 1:k + 3]])
            xs = node.inputs[2::3]
            types = {_qtype(g, i, None if params is None else params[3 + 2 * k])
                     for k, i in enumerate(xs)}
            if (params is not None and len(types) == 1 and types <= set(_Q8)
                    and params[1] is not None and params[1].dtype == next(iter(types))):
                ys, yz = params[0], params[1]
                ins = []
                for k, xi in enumerate(xs):
                    xs_, xz_ = params[2 + 2 * k], params[3 + 2 * k]
                    same = (np.float32(xs_.reshape(())) == np.float32(ys.reshape(()))
                            and (0 if xz_ is None else int(xz_.reshape(())))
                            == int(yz.reshape(())))
                    # NOTE: the reference's concat of one input (along axis 0 of the 256
                    # values) is that input's requantisation
                    table = None if same else _values_table(
                        dataclasses.replace(node, inputs=[0, 1, 2, 3, 4], attrs={"axis": 0}),
                        [ys, yz, xs_, xz_], 2, next(iter(types)))
                    if table is not None:
                        t = g.add_const(f"{node.name}/table{k}", table)
                        y = g.add_value(g.unique_name(f"{node.name}/in{k}"), next(iter(types)),
                                        g.values[xi].shape)
                        nodes.append(type(node)("QLinearLookup", g.unique_name(
                            f"{node.name}/requant{k}"), [xi, t], [y], {"axis": 1}))
                        xi = y
                    ins.append(xi)
                node.op_type, node.domain = "Concat", ""
                node.inputs, node.attrs = ins, {"axis": int(node.attrs.get("axis", 1))}
                changed = True
        nodes.append(node)
    if changed:
        g.nodes = nodes
    # NOTE: then whole functions of one value as one table: a SiLU (also the QDQ form's:
    # fuse_qdq's QLinearMul of x and fuse_lookup's sigmoid), a hard-swish, ...
    return lookup_cones(g)


#: ops that only move or select values: op(DequantizeLinear(x)) is DequantizeLinear(op(x))
#: (MaxPool too: a dequantization of positive scale is non-decreasing); their first input
#: is the data
_MOVEMENT = {"MaxPool", "Resize", "Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze",
             "Slice", "DepthToSpace", "SpaceToDepth", "Split", "Concat"}


def _requant_table(g: Graph, dq, q, dt_in) -> np.ndarray | None:
    """(1, 256) table of ``q(dq(v))`` over the values of ``dt_in`` by the reference kernels
    (the same bits as the two nodes), or None when it is the identity."""
    from ..backends.reference import evaluate

    vals = _all_values(dt_in)
    f = evaluate(dq, [vals] + [_const(g, i) for i in dq.inputs[1:]])[0]
    t = evaluate(q, [f] + [_const(g, i) for i in q.inputs[1:]])[0]
    if t.dtype == vals.dtype and np.array_equal(t, vals):
        return None
    return np.ascontiguousarray(t.reshape(1, 256))


def fuse_qdq_movement(g: Graph) -> Graph:
    """``DequantizeLinear -> op -> QuantizeLinear`` around an op that only moves or selects
    values (``_MOVEMENT``: MaxPool, nearest Resize, Transpose, Reshape, Slice, Split, Concat,
    ...) runs the op on the quantized bytes (onnxruntime's QDQ transformer drops such pairs
    too): each quantized value is requantised from its DequantizeLinear's parameters to the
    QuantizeLinear's by a ``QLinearLookup`` table (made by the reference kernels from the two
    nodes, so the same bits), or passed as it is where the two agree. Per-tensor parameters,
    8-bit types, a positive scale; the op's result read by its QuantizeLinear only (each
    output of a Split by its own; every input of a Concat a DequantizeLinear's). Runs after
    ``fold_constants``, before ``layout``."""
    consumers, producers = g.consumers(), g.producers()
    nodes, dead = [], set()
    changed = False

    def dq_of(v):
        dq = producers.get(v)
        xp = _dq_params(g, dq)
        if xp is None or np.any(np.asarray(xp[1]) <= 0):
            return None
        dt = _qtype(g, xp[0], xp[2])
        return (dq, xp[0], dt) if dt in _Q8 else None

    def q_of(v):
        q = single_consumer(g, consumers, v)
        return None if q is None or _q_params(g, q) is None or id(q) in dead else q

    for op in g.nodes:
        if op.op_type not in _MOVEMENT or op.domain or id(op) in dead or not op.inputs:
            nodes.append(op)
            continue
        a = op.attrs
        ok = not any(k.startswith("_") for k in a) and not (
            op.op_type == "Resize" and a.get("mode", "nearest") != "nearest") and not (
            op.op_type == "MaxPool" and len(op.outputs) != 1)
        data = op.inputs if op.op_type == "Concat" else op.inputs[:1]
        srcs = [dq_of(v) for v in data] if ok else [None]
        qs = [q_of(o) for o in op.outputs] if ok else [None]
        if any(s is None for s in srcs) or any(q is None for q in qs):
            nodes.append(op)
            continue
        dts = {dt for _, _, dt in srcs} | {_q_params(g, q)[1].dtype for q in qs}
        if len(dts) != 1:
            nodes.append(op)
            continue
        qdt = next(iter(dts))
        # NOTE: a Concat's inputs each requantised to its output's parameters where they
        # differ; the op then reads the quantized sources
        new_in = []
        for dq, x, dt in srcs:
            if op.op_type == "Concat":
                table = _requant_table(g, dq, qs[0], dt)
                if table is not None:
                    y = g.add_value(g.unique_name(f"{op.name}/requant"), qdt)
                    t = g.add_const(f"{op.name}/table", table)
                    nodes.append(type(op)("QLinearLookup", g.unique_name(f"{op.name}/requant"),
                                          [x, t], [y], {"axis": 1}))
                    x = y
            new_in.append(x)
        op.inputs = new_in + list(op.inputs[len(data):])
        outs, lookups = [], []
        for q in qs:
            # NOTE: then each output requantised from the source's parameters (a Concat's
            # inputs already are)
            table = (None if op.op_type == "Concat"
                     else _requant_table(g, srcs[0][0], q, srcs[0][2]))
            if table is None:
                outs.append(q.outputs[0])
            else:
                mid = g.add_value(g.unique_name(f"{op.name}/q"), qdt)
                t = g.add_const(f"{q.name}/table", table)
                outs.append(mid)
                lookups.append(type(op)("QLinearLookup", q.name, [mid, t], [q.outputs[0]],
                                        {"axis": 1}))
            dead.add(id(q))
        op.outputs = outs
        nodes.append(op)
        nodes.extend(lookups)
        changed = True
    if not changed:
        return g
    g.nodes = [n for n in nodes if id(n) not in dead]
    return remove_dead(g)


#: ops that map each element on its own: what a graph of them computes from one uint8/int8
#: tensor, their other inputs constant scalars, is a table of that tensor's 256 values
_ELEMENTWISE = (_UNARY | _BINARY | {"QuantizeLinear", "DequantizeLinear", "QLinearLookup", "Erf",
                                    "Exp", "Sqrt", "Pow", "Reciprocal", "Softsign", "Gelu",
                                    "Mish", "Selu", "ThresholdedRelu", "Floor", "Ceil", "Round",
                                    "Sin", "Cos", "Log"})
_ELEMENTWISE_MS = {"QLinearAdd", "QLinearMul"} | _LOOKUP_UNARY


def _elementwise(g: Graph, node) -> bool:
    """Whether ``node`` maps each element of its non-constant inputs on its own, every
    constant input one value (so a table of 256 values says what it does)."""
    names = _ELEMENTWISE_MS if node.domain == "com.microsoft" else (
        _ELEMENTWISE if node.domain in ("", "ai.onnx") else ())
    if (node.op_type not in names or len(node.outputs) != 1
            or any(k.startswith("_") for k in node.attrs)):
        return False
    if node.op_type == "QLinearLookup":
        t = _const(g, node.inputs[1]) if len(node.inputs) == 2 else None
        return t is not None and t.size == 256
    return all(i == MISSING or _const(g, i) is None or _const(g, i).size == 1
               for i in node.inputs)


def _cone(g: Graph, root, producers, consumers, infos):
    """``(leaf, nodes)`` when ``root``'s output is a function of one uint8/int8 value
    ``leaf`` through elementwise nodes only (``nodes``, in graph order, root included), each
    intermediate value read by those nodes only; None otherwise. The walk goes back through a
    value's producer only when every reader of the value is elementwise (a value read
    elsewhere too is where the function starts)."""
    members, leaves, stack = {id(root): root}, set(), [root]
    while stack:
        n = stack.pop()
        for i in n.inputs:
            if i == MISSING or _const(g, i) is not None:
                continue
            p = producers.get(i)
            if (p is not None and _elementwise(g, p) and i not in g.outputs
                    and all(_elementwise(g, c) for c in consumers.get(i, ()))):
                if id(p) not in members:
                    members[id(p)] = p
                    stack.append(p)
            else:
                leaves.add(i)
    if len(leaves) != 1:
        return None
    (leaf,) = leaves
    info = infos.get(leaf)
    if info is None or info.dtype not in _Q8:
        return None
    for n in members.values():
        if n is root:
            continue
        # NOTE: an intermediate value read elsewhere too must stay: no table for this root
        if n.outputs[0] in g.outputs or any(id(c) not in members
                                            for c in consumers.get(n.outputs[0], ())):
            return None
        if any(i != MISSING and _const(g, i) is not None and _const(g, i).ndim > len(info.shape)
               for i in n.inputs):
            return None
    return leaf, [n for n in g.nodes if id(n) in members]


def lookup_cones(g: Graph) -> Graph:
    """A uint8/int8 value computed from one other uint8/int8 value ``x`` through elementwise
    ops only (their other operands constant scalars) becomes ``QLinearLookup(x, table)``: the
    (1, 256) table holds the ops' result for each of x's 256 values, computed by the
    reference kernels, so the same bits as the ops one by one. E.g. a SiLU (``QLinearMul(x,
    QLinearSigmoid(x))``, or its QDQ form), a hard-swish as onnxruntime's quantizer writes
    PaddlePaddle's (``QLinearMul(x, QLinearAdd(x, 3))``, then ``DequantizeLinear -> Div(6) ->
    QuantizeLinear``): one pass over memory instead of three to five, and a table
    ``fuse_conv_lookup`` can then fold into the conv that makes x. A node whose function of
    x needs a value also read elsewhere (a float hard-swish a pool reads too) is left, and so
    is one op alone."""
    infos = None
    changed = False
    for root in reversed(list(g.nodes)):
        if root.op_type == DEAD or not _elementwise(g, root):
            continue
        if infos is None:
            infos = inferred_infos(g)
            producers, consumers = g.producers(), g.consumers()
        out = infos.get(root.outputs[0])
        if out is None or out.dtype not in _Q8:
            continue
        found = _cone(g, root, producers, consumers, infos)
        # NOTE: one op alone is left to its own kernel (a Clip folds into the conv before it)
        if found is None or len(found[1]) < 2:
            continue
        leaf, nodes = found
        # NOTE: the root is the last of its cone in graph order (it reads all the others)
        table = np.ascontiguousarray(
            _evaluate_chain(g, nodes, leaf, _all_values(infos[leaf].dtype)).reshape(1, 256))
        if table.dtype != out.dtype:
            continue
        t = g.add_const(f"{root.name}/table", table)
        for n in nodes:
            if n is not root:
                n.op_type = DEAD
        root.op_type, root.domain = "QLinearLookup", ""
        root.inputs, root.attrs = [leaf, t], {"axis": 1}
        changed = True
        producers, consumers = g.producers(), g.consumers()
    if changed:
        g.nodes = [n for n in g.nodes if n.op_type != DEAD]
        g = remove_dead(g)
    return g


def fuse_conv_lookup(g: Graph) -> Graph:
    """``QLinearConv -> QLinearLookup`` along the conv's channel axis (the lookup the only
    reader of the conv's output) becomes the QLinearConv with ``_lookup=True`` and the table as
    its last input (``sprat.ir.fused``): a backend may then map each requantised value through
    its channel's table row before storing it, one pass over memory less. Exact: the node
    computes what the two did. Runs last (after ``layout``, whose axis it reads, and after
    ``fuse_activation``, which folds a Clip into the conv first)."""
    consumers, producers = g.consumers(), g.producers()
    for lut in g.nodes:
        if lut.op_type != "QLinearLookup" or len(lut.inputs) != 2:
            continue
        conv = producers.get(lut.inputs[0])
        table = _const(g, lut.inputs[1])
        if (conv is None or conv.op_type != "QLinearConv" or len(conv.outputs) != 1
                or single_consumer(g, consumers, conv.outputs[0]) is not lut
                or any(k in conv.attrs for k in ("_lookup", "_residual", "_bias"))
                or table is None or table.ndim != 2 or table.shape[1] != 256):
            continue
        w = _const(g, conv.inputs[3])
        if w is None:
            continue
        rank = w.ndim  # NOTE: the conv's input and output have the weight's rank
        channel = rank - 1 if conv.attrs.get("_layout") == "NHWC" else 1
        # NOTE: a table of one row is the same along any axis
        if ((table.shape[0] > 1 and int(lut.attrs.get("axis", 1)) % rank != channel)
                or table.shape[0] not in (1, w.shape[0])):
            continue
        conv.inputs = list(conv.inputs) + [MISSING] * (9 - len(conv.inputs)) + [lut.inputs[1]]
        conv.attrs["_lookup"] = True
        conv.outputs = [lut.outputs[0]]
        # NOTE: emptied too: a dead node still listed would stay its output's producer
        lut.op_type, lut.inputs, lut.outputs = DEAD, [], []
        consumers, producers = g.consumers(), g.producers()
    g.nodes = [n for n in g.nodes if n.op_type != DEAD]
    return remove_dead(g)
