"""Reference kernels: attention ops (Attention, RMSNormalization).

Plain vectorised NumPy following the ONNX spec (Attention-23/24/25, RMSNormalization-23).
Attention builds one additive bias (attn_mask, causal frontier, sliding window, KV padding; each
disallowed key is ``-inf``), computes ``softmax(softcap(Q K^T * scale) + bias) V`` with one
batched matmul per product, and shares every KV head among its ``q_heads / kv_heads`` query
heads by reshaping Q to ``[batch, kv_heads, group, seq, head]`` (no repeated copy of K or V).
float16 inputs are computed in float32 and rounded once at the end.
"""

from __future__ import annotations

import numpy as np

from ...dtypes import to_numpy
from ...ir.shapes.attention import attention_dims


def _compute_dtype(*dtypes) -> np.dtype:
    return np.promote_types(np.result_type(*dtypes), np.float32)


def _precision(code: int) -> np.dtype:
    """The numpy dtype to compute in for an ONNX precision attribute (at least float32;
    bfloat16 = 16, which numpy lacks, computes in float32)."""
    if code == 16:
        return np.dtype(np.float32)
    return np.promote_types(to_numpy(code), np.float32)


def _mask_bias(attn_mask, total: int, dtype) -> np.ndarray:
    """attn_mask (rank <= 4, last dim <= total) as a rank-4 additive bias padded to
    ``total`` keys: bool True -> 0, False -> -inf; numbers are added as they are; keys beyond
    the mask's last dim are disallowed (spec: the mask may be shorter than the KV sequence)."""
    m = np.asarray(attn_mask)
    if m.dtype == np.bool_:
        bias = np.where(m, dtype.type(0), dtype.type(-np.inf))
    else:
        bias = m.astype(dtype)
    pad = total - bias.shape[-1]
    if pad > 0:
        widths = [(0, 0)] * (bias.ndim - 1) + [(0, pad)]
        bias = np.pad(bias, widths, constant_values=-np.inf)
    return bias.reshape((1,) * (4 - bias.ndim) + bias.shape)


def _frontier_mask(q_seq: int, total: int, offset, is_causal, left, right) -> np.ndarray | None:
    """Allowed keys (bool, ``(q, kv)`` or ``(batch, 1, q, kv)``) of the causal frontier and the
    sliding window, for query ``i`` at absolute position ``p = i + offset`` (``offset`` a scalar
    or per-batch array): causal ``j <= p``; window ``p - left <= j <= p + right`` (a bound of
    -1 is unbounded). None when nothing restricts."""
    if not is_causal and left < 0 and right < 0:
        return None
    off = np.asarray(offset, dtype=np.int64)
    pos = np.arange(q_seq, dtype=np.int64)[:, None] + off.reshape(off.shape + (1, 1))
    if off.ndim:
        pos = pos[:, None]                                      # (batch, 1, q, 1)
    j = np.arange(total, dtype=np.int64)
    allowed = np.ones(np.broadcast_shapes(pos.shape, j.shape), dtype=bool)
    if is_causal:
        allowed &= j <= pos
    if left >= 0:
        allowed &= j >= pos - left
    if right >= 0:
        allowed &= j <= pos + right
    return allowed


def _softcap(x: np.ndarray, softcap: float) -> np.ndarray:
    if softcap > 0:
        return softcap * np.tanh(x / softcap)
    return x


def attention(Q, K, V, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None,
              is_causal=0, kv_num_heads=None, left_window_size=-1, q_num_heads=None,
              qk_matmul_output_mode=0, right_window_size=-1, scale=None, softcap=0.0,
              softmax_precision=None):
    """Attention-23/24/25 (scaled dot-product attention with MHA/GQA/MQA and a KV cache).

    Q/K/V 3-D ``[batch, seq, heads * head]`` (with ``q_num_heads``/``kv_num_heads``) or 4-D
    ``[batch, heads, seq, head]``; attn_mask bool (True attends) or additive, broadcastable to
    ``[batch, q_heads, q_seq, total_seq]`` (its last dim may be shorter: missing keys are
    masked); past_key/past_value ``[batch, kv_heads, past_seq, head]`` are concatenated before
    K/V (present_key/present_value); nonpad_kv_seqlen int64 ``[batch]`` masks keys at or beyond
    it. The causal frontier is bottom-right aligned: query ``i`` attends key ``j <= i + offset``
    with ``offset = past_seq`` (cache), ``nonpad_kv_seqlen[b] - q_seq`` (external cache) or 0.
    A query row whose bias is entirely ``-inf`` yields zero probabilities and a zero Y row.

    Returns ``(Y, present_key, present_value, qk_matmul_output)``; qk_matmul_output is, by
    ``qk_matmul_output_mode``: 0 the scaled Q K^T, 1 after softcap, 2 after softcap and bias,
    3 the softmax probabilities. Raises ShapeError for inconsistent shapes (``attention_dims``)
    and ValueError for a window size below -1.
    """
    if left_window_size < -1 or right_window_size < -1:
        raise ValueError(f"window sizes must be -1 or >= 0, got left {left_window_size}, "
                         f"right {right_window_size}")
    d = attention_dims(Q.shape, K.shape, V.shape,
                       None if past_key is None else past_key.shape, q_num_heads, kv_num_heads)
    b, hq, hkv, sq = d["batch"], d["q_heads"], d["kv_heads"], d["q_seq"]
    group = hq // hkv
    out_dtype = Q.dtype
    ct = _compute_dtype(Q.dtype, K.dtype, V.dtype)
    if d["rank"] == 3:
        Q = Q.reshape(b, sq, hq, -1).transpose(0, 2, 1, 3)
        K = K.reshape(b, d["kv_seq"], hkv, -1).transpose(0, 2, 1, 3)
        V = V.reshape(b, d["kv_seq"], hkv, -1).transpose(0, 2, 1, 3)
    present_k = K if past_key is None else np.concatenate([past_key, K.astype(past_key.dtype)], 2)
    present_v = V if past_value is None else np.concatenate(
        [past_value, V.astype(past_value.dtype)], 2)
    total = present_k.shape[2]

    # additive bias, broadcastable to (batch, q_heads, q_seq, total)
    bias = np.zeros((1, 1, sq, total), dtype=ct)
    if attn_mask is not None:
        bias = bias + _mask_bias(attn_mask, total, ct)
    if past_key is not None:
        offset = d["past_seq"]
    elif nonpad_kv_seqlen is not None:
        offset = np.asarray(nonpad_kv_seqlen, dtype=np.int64).reshape(-1) - sq
    else:
        offset = 0
    allowed = _frontier_mask(sq, total, offset, is_causal, left_window_size, right_window_size)
    if nonpad_kv_seqlen is not None:
        valid = np.arange(total) < np.asarray(nonpad_kv_seqlen).reshape(-1, 1, 1, 1)
        allowed = valid if allowed is None else allowed & valid
    if allowed is not None:
        bias = np.where(allowed, bias, ct.type(-np.inf))
    masked = np.isneginf(bias)

    # NOTE: Q heads are grouped as (kv_heads, group): query head h uses KV head h // group.
    qg = Q.astype(ct).reshape(b, hkv, group, sq, -1)
    kt = present_k.astype(ct).transpose(0, 1, 3, 2)[:, :, None]     # (b, hkv, 1, head, total)
    if scale is None:
        scale = 1.0 / np.sqrt(d["head"])
    qk = np.matmul(qg, kt).reshape(b, hq, sq, total) * ct.type(scale)
    capped = _softcap(qk, softcap)
    # NOTE: disallowed keys are selected to -inf rather than added, so an infinite score there
    # cannot turn the row into NaN (inf + -inf).
    logits = np.where(masked, ct.type(-np.inf), capped + bias)
    sm_dtype = ct if softmax_precision is None else np.promote_types(
        _precision(softmax_precision), ct)
    x = logits.astype(sm_dtype)
    row_masked = masked.all(axis=-1, keepdims=True)
    x_max = np.where(row_masked, 0, x.max(axis=-1, keepdims=True))
    e = np.exp(x - x_max)
    s = e.sum(axis=-1, keepdims=True)
    probs = np.where(row_masked, 0, e / np.where(row_masked, 1, s)).astype(ct)
    vv = present_v.astype(ct)[:, :, None]                           # (b, hkv, 1, total, v_head)
    y = np.matmul(probs.reshape(b, hkv, group, sq, total), vv).reshape(b, hq, sq, -1)
    if d["rank"] == 3:
        y = y.transpose(0, 2, 1, 3).reshape(b, sq, -1)
    if qk_matmul_output_mode == 0:
        mode_out = qk
    elif qk_matmul_output_mode == 1:
        mode_out = capped
    elif qk_matmul_output_mode == 2:
        mode_out = capped + bias
    elif qk_matmul_output_mode == 3:
        mode_out = probs
    else:
        raise ValueError(f"qk_matmul_output_mode {qk_matmul_output_mode} not in 0..3")
    return (y.astype(out_dtype), present_k, present_v,
            np.ascontiguousarray(mode_out, dtype=out_dtype))


def rms_normalization(X, scale, axis=-1, epsilon=1e-5, stash_type=1):
    """RMSNormalization-23: ``Y = X / sqrt(mean(X^2 over axes [axis, r)) + epsilon) * scale``.

    The first stage runs in ``stash_type``'s precision (at least float32); the normalised
    X is rounded to X's dtype, then multiplied by scale (unidirectional broadcast). Y has X's
    shape and scale's dtype.
    """
    r = X.ndim
    axis = axis + r if axis < 0 else axis
    st = _precision(stash_type)
    x = X.astype(st)
    ms = np.mean(x * x, axis=tuple(range(axis, r)), keepdims=True)
    normed = (x / np.sqrt(ms + st.type(epsilon))).astype(X.dtype)
    return (normed * scale).astype(scale.dtype)


OPS = {
    "Attention": attention,
    "RMSNormalization": rms_normalization,
}
