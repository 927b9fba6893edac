"""Fuse multi-head self-attention as exported from PyTorch/Hugging Face into one ``Attention``.

The exported form (BERT, ViT, Whisper encoders)::

    q = Transpose(Reshape(Q, [b, s, H, D]), perm=[0, 2, 1, 3])        # (b, H, s, D)
    k = Transpose(Reshape(K, [b, s, H, D]), perm=[0, 2, 3, 1])        # (b, H, D, s)
    v = Transpose(Reshape(V, [b, s, H, D]), perm=[0, 2, 1, 3])        # (b, H, s, D)
    p = Softmax(Add(Mul(MatMul(q, k), c), mask), axis=-1)             # scale: Mul c or Div 1/c
    y = Reshape(Transpose(MatMul(p, v), perm=[0, 2, 1, 3]), [b, s, H * D])

becomes ``Attention(Q, K, V, mask)`` in the ONNX Attention-23 3-D form (``q_num_heads =
kv_num_heads = H``, ``scale = c``): no head split/merge copies, and the scores never leave the
kernel (onnxruntime's AttentionFusion, MNN's FuseAttention). The mask and the scale are optional
(scale 1 then). Every intermediate must have this one reader.
"""

from __future__ import annotations

from ..ir.graph import Graph
from .util import DEAD, drop_dead, remove_dead, single_consumer


def _single(g: Graph, consumers, value: int, node) -> bool:
    return single_consumer(g, consumers, value) is node


def _scalar(g: Graph, idx: int):
    d = g.values[idx].data if idx >= 0 else None
    if d is None or d.size != 1 or d.dtype.kind != "f":
        return None
    return float(d.reshape(()))


def _head_split(g: Graph, consumers, producers, value: int, perm: list[int], user):
    """``value`` = Transpose(Reshape(X, [., ., H, D]), perm) read only by ``user``:
    (X, H, D, [transpose(s), reshape]) or None. The transpose may be a chain of single-reader
    Transposes whose perms compose to ``perm`` (timm's ViT: K split with [0, 2, 1, 3], then
    ``k.transpose(-2, -1)``)."""
    tr = producers.get(value)
    if tr is None or tr.op_type != "Transpose" or not _single(g, consumers, value, user):
        return None
    chain, total = [tr], list(tr.attrs.get("perm", []))
    while True:
        up = producers.get(chain[-1].inputs[0])
        if (up is None or up.op_type != "Transpose" or len(total) != 4
                or not _single(g, consumers, chain[-1].inputs[0], chain[-1])):
            break
        p1 = list(up.attrs.get("perm", []))
        if len(p1) != 4:
            return None
        total = [p1[i] for i in total]  # NOTE: Transpose(Transpose(x, p1), p2) = x.T(p1[p2])
        chain.append(up)
    if total != perm:
        return None
    tr = chain[-1]
    rs = producers.get(tr.inputs[0])
    if (rs is None or rs.op_type != "Reshape" or len(rs.inputs) < 2
            or rs.attrs.get("allowzero", 0) or not _single(g, consumers, tr.inputs[0], tr)):
        return None
    shape = g.values[rs.inputs[1]].data
    x_shape = g.values[rs.inputs[0]].shape
    if shape is None or shape.size != 4 or x_shape is None or len(x_shape) != 3:
        return None
    h, d = int(shape[2]), int(shape[3])
    if h <= 0 or d <= 0 or x_shape[-1] != h * d or int(shape[0]) not in (0, -1, 1):
        return None
    if int(shape[0]) == 1 and x_shape[0] != 1:
        return None
    return rs.inputs[0], h, d, [*chain, rs]


def _match(g: Graph, consumers, producers, sm):
    """The pattern ending at Softmax ``sm``: (Q, K, V, mask, scale, H, dead nodes, last) or
    None."""
    if sm.attrs.get("axis", -1) not in (-1, 3):
        return None
    ctx = single_consumer(g, consumers, sm.outputs[0])
    if ctx is None or ctx.op_type != "MatMul" or ctx.inputs[0] != sm.outputs[0] or ctx.attrs:
        return None
    dead = [sm, ctx]
    x, mask = sm.inputs[0], None
    node = producers.get(x)
    if node is not None and node.op_type == "Add" and not node.attrs and len(node.inputs) == 2:
        for k in (0, 1):
            src = producers.get(node.inputs[k])
            if src is not None and src.op_type in ("Mul", "Div", "MatMul"):
                if not _single(g, consumers, node.inputs[k], node):
                    return None
                x, mask = node.inputs[k], node.inputs[1 - k]
                dead.append(node)
                break
        else:
            return None
    elif not _single(g, consumers, x, sm):
        return None
    scale = 1.0
    node = producers.get(x)
    if node is not None and node.op_type in ("Mul", "Div") and len(node.inputs) == 2:
        k = 1  # NOTE: the constant's position; Mul takes it on either side
        c = _scalar(g, node.inputs[1])
        if c is None and node.op_type == "Mul":
            k, c = 0, _scalar(g, node.inputs[0])
        if c is None or c == 0.0:
            return None
        scale = c if node.op_type == "Mul" else 1.0 / c
        if not _single(g, consumers, node.inputs[1 - k], node):
            return None
        dead.append(node)
        x = node.inputs[1 - k]
    scores = producers.get(x)
    if scores is None or scores.op_type != "MatMul" or scores.attrs:
        return None
    dead.append(scores)
    q = _head_split(g, consumers, producers, scores.inputs[0], [0, 2, 1, 3], scores)
    k = _head_split(g, consumers, producers, scores.inputs[1], [0, 2, 3, 1], scores)
    v = _head_split(g, consumers, producers, ctx.inputs[1], [0, 2, 1, 3], ctx)
    if q is None or k is None or v is None or len({q[1], k[1], v[1]}) != 1 or q[2] != k[2]:
        return None
    tr = single_consumer(g, consumers, ctx.outputs[0])
    if tr is None or tr.op_type != "Transpose" or list(tr.attrs.get("perm", [])) != [0, 2, 1, 3]:
        return None
    merge = single_consumer(g, consumers, tr.outputs[0])
    if merge is None or merge.op_type != "Reshape" or merge.attrs.get("allowzero", 0):
        return None
    shape = g.values[merge.inputs[1]].data
    heads, q_shape = q[1], g.values[q[0]].shape
    if shape is None or shape.size != 3 or int(shape[2]) not in (-1, heads * v[2]):
        return None
    for i in (0, 1):  # NOTE: each leading entry copies (0) or equals the query's dim
        d = int(shape[i])
        if d not in (0, q_shape[i]) and not (d == -1 and int(shape[2]) == heads * v[2]):
            return None
    dead += [tr, *q[3], *k[3], *v[3]]
    return q[0], k[0], v[0], mask, scale, heads, dead, merge


def fuse_attention(g: Graph) -> Graph:
    consumers, producers = g.consumers(), g.producers()
    for sm in g.nodes:
        if sm.op_type != "Softmax":
            continue
        found = _match(g, consumers, producers, sm)
        if found is None:
            continue
        q, k, v, mask, scale, heads, dead, merge = found
        if mask is not None:
            m_shape = g.values[mask].shape
            if m_shape is not None and len(m_shape) > 4:
                continue
        merge.op_type = "Attention"
        merge.inputs = [q, k, v] + ([mask] if mask is not None else [])
        merge.attrs = {"q_num_heads": heads, "kv_num_heads": heads, "scale": float(scale)}
        for node in dead:
            node.op_type = DEAD
        drop_dead(g)
        consumers, producers = g.consumers(), g.producers()
    return remove_dead(g)

