"""Shape functions: attention ops (Attention, RMSNormalization).

Each function takes the inputs' ``TensorInfo`` (None when an optional input is absent) and the
node's attributes with the ONNX spec defaults, and returns ``[(shape, dtype), ...]`` for every
output the op can have. Source: the ONNX operator spec, Attention-23/24/25 and
RMSNormalization-23. ``attention_dims`` is public so the reference kernel validates and splits
heads exactly as the shape function does.
"""

from __future__ import annotations

from ...errors import ShapeError


def attention_dims(q_shape, k_shape, v_shape, past_shape=None, q_num_heads=None,
                   kv_num_heads=None) -> dict:
    """Head and sequence sizes of an ONNX Attention node.

    Q/K/V are either all 3-D ``[batch, seq, heads * head_size]`` (then ``q_num_heads`` and
    ``kv_num_heads`` are required) or all 4-D ``[batch, heads, seq, head_size]``.
    ``past_shape`` is past_key's shape ``[batch, kv_heads, past_seq, head_size]`` or None.

    Returns a dict with ``rank, batch, q_heads, kv_heads, q_seq, kv_seq, past_seq, total_seq,
    head, v_head``. Raises ShapeError for mismatched ranks, batch sizes, head sizes, a hidden size
    not divisible by its head count, or ``q_heads`` not a multiple of ``kv_heads`` (grouped-query
    attention shares each KV head among ``q_heads / kv_heads`` consecutive query heads).
    """
    rank = len(q_shape)
    if rank not in (3, 4) or len(k_shape) != rank or len(v_shape) != rank:
        raise ShapeError(f"Q, K, V must all be 3-D or all 4-D, got Q {tuple(q_shape)}, "
                         f"K {tuple(k_shape)}, V {tuple(v_shape)}")
    batch = q_shape[0]
    if k_shape[0] != batch or v_shape[0] != batch:
        raise ShapeError(f"batch sizes differ: Q {q_shape[0]}, K {k_shape[0]}, V {v_shape[0]}")
    if rank == 3:
        if q_num_heads is None or kv_num_heads is None:
            raise ShapeError("3-D Q, K, V need the q_num_heads and kv_num_heads attributes")
        if q_num_heads <= 0 or kv_num_heads <= 0:
            raise ShapeError(f"q_num_heads {q_num_heads} and kv_num_heads {kv_num_heads} must "
                             "be positive")
        for name, dim, heads in (("Q", q_shape[2], q_num_heads), ("K", k_shape[2], kv_num_heads),
                                 ("V", v_shape[2], kv_num_heads)):
            if dim % heads:
                raise ShapeError(f"{name} hidden size {dim} is not divisible by {heads} heads")
        q_heads, kv_heads = int(q_num_heads), int(kv_num_heads)
        q_seq, kv_seq = q_shape[1], k_shape[1]
        head, k_head, v_head = q_shape[2] // q_heads, k_shape[2] // kv_heads, \
            v_shape[2] // kv_heads
        v_seq = v_shape[1]
    else:
        q_heads, q_seq, head = q_shape[1:]
        kv_heads, kv_seq, k_head = k_shape[1:]
        if v_shape[1] != kv_heads:
            raise ShapeError(f"K has {kv_heads} heads, V {v_shape[1]}")
        v_seq, v_head = v_shape[2], v_shape[3]
    if k_head != head:
        raise ShapeError(f"Q head size {head} differs from K head size {k_head}")
    if v_seq != kv_seq:
        raise ShapeError(f"K sequence length {kv_seq} differs from V's {v_seq}")
    if q_heads % kv_heads:
        raise ShapeError(f"q heads {q_heads} is not a multiple of kv heads {kv_heads}")
    past_seq = 0
    if past_shape is not None:
        if len(past_shape) != 4 or past_shape[0] != batch or past_shape[1] != kv_heads:
            raise ShapeError(f"past_key shape {tuple(past_shape)}, expected "
                             f"({batch}, {kv_heads}, past_seq, head_size)")
        past_seq = past_shape[2]
    return {"rank": rank, "batch": batch, "q_heads": q_heads, "kv_heads": kv_heads,
            "q_seq": q_seq, "kv_seq": kv_seq, "past_seq": past_seq,
            "total_seq": past_seq + kv_seq, "head": head, "v_head": v_head}


def attention(ins, is_causal=0, kv_num_heads=None, left_window_size=-1, q_num_heads=None,
              qk_matmul_output_mode=0, right_window_size=-1, scale=None, softcap=0.0,
              softmax_precision=None):
    """Attention-23/24/25: Q, K, V, [attn_mask, past_key, past_value, nonpad_kv_seqlen] ->
    Y, present_key, present_value, qk_matmul_output.

    Y is ``[batch, q_seq, q_heads * v_head]`` (3-D inputs) or ``[batch, q_heads, q_seq, v_head]``
    (4-D) in Q's dtype; present_key/present_value are ``[batch, kv_heads, past_seq + kv_seq,
    head|v_head]``; qk_matmul_output is ``[batch, q_heads, q_seq, past_seq + kv_seq]``.
    Raises ShapeError (see ``attention_dims``), for past_key without past_value (or vice versa),
    or for past cache combined with nonpad_kv_seqlen.
    """
    ins = list(ins) + [None] * (7 - len(ins))
    q, k, v, mask, past_k, past_v, nonpad = ins[:7]
    if (past_k is None) != (past_v is None):
        raise ShapeError("past_key and past_value must be given together")
    if nonpad is not None and past_k is not None:
        raise ShapeError("nonpad_kv_seqlen cannot be combined with past_key/past_value")
    d = attention_dims(q.shape, k.shape, v.shape, None if past_k is None else past_k.shape,
                       q_num_heads, kv_num_heads)
    if past_v is not None and (len(past_v.shape) != 4 or tuple(past_v.shape[:3]) != (
            d["batch"], d["kv_heads"], d["past_seq"]) or past_v.shape[3] != d["v_head"]):
        raise ShapeError(f"past_value shape {tuple(past_v.shape)}, expected "
                         f"({d['batch']}, {d['kv_heads']}, {d['past_seq']}, {d['v_head']})")
    if mask is not None and len(mask.shape) > 4:
        raise ShapeError(f"attn_mask has rank {len(mask.shape)}, at most 4 allowed")
    b, hq, hkv, sq, st = d["batch"], d["q_heads"], d["kv_heads"], d["q_seq"], d["total_seq"]
    if d["rank"] == 3:
        y = (b, sq, hq * d["v_head"])
    else:
        y = (b, hq, sq, d["v_head"])
    return [(y, q.dtype), ((b, hkv, st, d["head"]), q.dtype),
            ((b, hkv, st, d["v_head"]), v.dtype), ((b, hq, sq, st), q.dtype)]


def rms_normalization(ins, axis=-1, epsilon=1e-5, stash_type=1):
    """RMSNormalization-23: X (any rank r >= 1), scale (unidirectionally broadcastable to X) ->
    Y, X's shape with scale's dtype. Raises ShapeError for axis outside [-r, r) or a scale
    that does not broadcast to X."""
    x, s = ins[0], ins[1]
    r = len(x.shape)
    if not -r <= axis < r:
        raise ShapeError(f"axis {axis} out of range for rank {r}")
    if len(s.shape) > r or any(sd not in (1, xd) for sd, xd in
                               zip(reversed(s.shape), reversed(x.shape))):
        raise ShapeError(f"scale shape {tuple(s.shape)} does not broadcast to X "
                         f"{tuple(x.shape)}")
    return [(tuple(x.shape), s.dtype)]


SHAPES = {
    "Attention": attention,
    "RMSNormalization": rms_normalization,
}
