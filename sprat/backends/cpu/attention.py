"""Attention-23 (3-D form, no KV cache): fused scaled dot-product attention on float32.

``Q`` (B, Sq, H*D), ``K`` (B, Skv, Hkv*D), ``V`` (B, Skv, Hkv*Dv), optional additive float
``attn_mask`` broadcastable to (B, H, Sq, Skv); output ``Y`` (B, Sq, H*Dv). Per (batch, head)
pair: ``S = scale * Q_h @ K_h^T`` (one BLAS call reading the head's columns in place, lda =
H*D), ``+ mask``, a row softmax in cache, ``Y_h = P @ V_h`` written straight into Y's columns of
that head (ldc = H*Dv). Pairs are split across thread slots; each slot owns an (Sq, Skv) score
buffer. Grouped heads (GQA/MQA) read kv head ``h // (H / Hkv)``. Anything else (4-D form,
past_key/value, causal or windowed masks, boolean masks, extra outputs, softcap) runs on the
reference kernel.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ._base import PARALLEL_MIN_MACS, CpuKernel, scratch
from ._blas import sgemm
from ._epilogue import empty_f32
from ._jit import njit
from ._math import FAST, acc_max, exp32


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def _softmax_row(r, mrow, has_mask):
    n = r.size
    if has_mask:
        for i in range(n):
            r[i] += mrow[i]
    m = r[0]
    for i in range(n):
        m = acc_max(m, r[i])
    if m == -np.inf:  # NOTE: a fully masked row gives zeros (Attention-23), not NaN
        for i in range(n):
            r[i] = 0.0
        return
    s = np.float32(0.0)
    for i in range(n):
        e = exp32(r[i] - m)
        r[i] = e
        s += e
    inv = np.float32(1.0) / s
    for i in range(n):
        r[i] *= inv


@njit(cache=True, error_model="numpy", nogil=True)
def attention_slot(t, nt, q, k, v, mask, has_mask, y, B, H, G, Sq, Skv, D, Dv, scale,
                   mb, mh, mq, buf):
    """Slot ``t`` of ``nt``: its share of the B*H (batch, head) pairs. ``G`` = H / Hkv;
    ``mb``/``mh``/``mq`` the mask's element strides for batch/head/query row (0: broadcast)."""
    hkv = H // G
    pairs = B * H
    s = buf[t]
    for pi in range(t * pairs // nt, (t + 1) * pairs // nt):
        b = pi // H
        h = pi - b * H
        kh = h // G
        sgemm(False, True, Sq, Skv, D, scale, q, b * Sq * H * D + h * D, H * D,
              k, b * Skv * hkv * D + kh * D, hkv * D, 0.0, s, 0, Skv)
        for i in range(Sq):
            r = s[i * Skv:(i + 1) * Skv]
            mo = b * mb + h * mh + i * mq
            _softmax_row(r, mask[mo:mo + Skv] if has_mask else r, has_mask)
        sgemm(False, False, Sq, Dv, Skv, 1.0, s, 0, Skv, v, b * Skv * hkv * Dv + kh * Dv,
              hkv * Dv, 0.0, y, b * Sq * H * Dv + h * Dv, H * Dv)


@njit(cache=True, error_model="numpy", nogil=True, parallel=True)
def attention_par(nt, q, k, v, mask, has_mask, y, B, H, G, Sq, Skv, D, Dv, scale, mb, mh, mq,
                  buf):
    for t in prange(nt):
        attention_slot(t, nt, q, k, v, mask, has_mask, y, B, H, G, Sq, Skv, D, Dv, scale,
                       mb, mh, mq, buf)


def _mask_strides(shape, B, H, Sq, Skv):
    """Element strides (batch, head, row) of a mask broadcast to (B, H, Sq, Skv), or None
    when its last dim is not Skv or it does not broadcast."""
    full = (1,) * (4 - len(shape)) + tuple(shape)
    if len(full) != 4 or full[3] != Skv:
        return None
    for got, want in zip(full[:3], (B, H, Sq)):
        if got not in (1, want):
            return None
    row = Skv
    mq = row if full[2] != 1 else 0
    mh = full[2] * row if full[1] != 1 else 0
    mb = full[1] * full[2] * row if full[0] != 1 else 0
    return mb, mh, mq


class AttentionKernel(CpuKernel):
    """Attention-23, 3-D form; see the module docstring."""

    @classmethod
    def supports(cls, node, ins) -> bool:
        a = node.attrs
        if any(k.startswith("_") for k in a) or len(node.outputs) != 1:
            return False
        if a.get("is_causal", 0) or a.get("softcap", 0.0) or a.get("qk_matmul_output_mode", 0):
            return False
        if a.get("left_window_size", -1) != -1 or a.get("right_window_size", -1) != -1:
            return False
        if len(ins) < 3 or len(ins) > 4 or any(i is None for i in ins[:3]):
            return False
        q, k, v = ins[:3]
        if any(len(x.shape) != 3 or x.dtype != np.float32 for x in (q, k, v)):
            return False
        hq, hkv = a.get("q_num_heads"), a.get("kv_num_heads")
        if not hq or not hkv or hq % hkv or q.shape[2] % hq or v.shape[2] % hkv:
            return False
        if k.shape[2] // hkv != q.shape[2] // hq or k.shape[2] % hkv:
            return False
        if q.shape[0] != k.shape[0] or k.shape[:2] != v.shape[:2]:
            return False
        if len(ins) == 4 and ins[3] is not None:
            m = ins[3]
            if m.dtype != np.float32 or len(m.shape) > 4 or _mask_strides(
                    m.shape, q.shape[0], hq, q.shape[1], k.shape[1]) is None:
                return False
        return True

    def prepare(self, ins, outs):
        a = self.node.attrs
        q, k, v = ins[:3]
        B, Sq, _ = q.shape
        Skv = k.shape[1]
        H, Hkv = int(a["q_num_heads"]), int(a["kv_num_heads"])
        D, Dv = q.shape[2] // H, v.shape[2] // Hkv
        scale = a.get("scale")
        self.scale = float(1.0 / np.sqrt(D) if scale is None else scale)
        self.geom = (B, H, H // Hkv, Sq, Skv, D, Dv)
        self.has_mask = len(ins) == 4 and ins[3] is not None
        self.mstrides = (_mask_strides(ins[3].shape, B, H, Sq, Skv) if self.has_mask
                         else (0, 0, 0))
        macs = B * H * Sq * Skv * (D + Dv)
        self.nt = min(self.threads, B * H) if macs >= PARALLEL_MIN_MACS else 1
        self.workspaces = (scratch(self.nt, Sq * Skv + 16),)
        self.empty = empty_f32()

    def run(self, ins, outs, ws):
        B, H, G, Sq, Skv, D, Dv = self.geom
        mask = ins[3].reshape(-1) if self.has_mask else self.empty
        mb, mh, mq = self.mstrides
        args = (ins[0].reshape(-1), ins[1].reshape(-1), ins[2].reshape(-1), mask,
                self.has_mask, outs[0].reshape(-1), B, H, G, Sq, Skv, D, Dv, self.scale,
                mb, mh, mq, ws.buffers[0])
        if self.nt == 1:
            attention_slot(0, 1, *args)
        else:
            attention_par(self.nt, *args)
