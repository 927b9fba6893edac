"""Attention-23 (3-D form, no KV cache): fused scaled dot-product attention on float32.

``Q`` (B, Sq, H*D), ``K`` (B, Skv, Hkv*D), ``V`` (B, Skv, Hkv*Dv), optional additive float
``attn_mask`` broadcastable to (B, H, Sq, Skv); output ``Y`` (B, Sq, H*Dv). Per (batch, head)
pair: ``S = scale * Q_h @ K_h^T`` (one BLAS call reading the head's columns in place, lda =
H*D), ``+ mask``, a row softmax in L1 (explicit SIMD, ``SIMD``), ``Y_h = P @ V_h`` written
straight into Y's columns of that head (ldc = H*Dv). Work items are (batch, head, block of
query rows) triples (``query_block``), split evenly across thread slots; each slot owns a
(rows, Skv) score buffer (``attention`` in ``compiled/dense.pxi``); on AVX-512 CPUs, from
PACKED_MIN_KEYS keys, both
products run the packed micro-kernel of ``compiled/packed.pxi`` over K_h^T and V_h packed once
per slot and head instead of BLAS. Grouped heads (GQA/MQA) read kv head
``h // (H / Hkv)``. Anything else (4-D form, past_key/value, causal or windowed masks, boolean
masks, extra outputs, softcap) runs on the reference kernel.
"""

from __future__ import annotations

import numpy as np

from ._base import PARALLEL_MIN_MACS, CpuKernel, scratch
from ._epilogue import empty_f32
from .compiled import kernels as ck

# NOTE: one work item's scores (rows x Skv float32) in L1 between the two products: vit_tiny's
# 197 x 197 x 3 heads ran 0.29-0.30 ms in blocks of 36-60 rows, 0.31 in 99 (128 KiB, L2);
# BERT's 384 keys 4.0 ms in 24 rows, 4.2-4.3 in 96-128 (``bench/kernels.py --only attn``)
SCORE_BLOCK_BYTES = 1 << 15
MIN_QUERY_BLOCK = 16  # query rows per work item at least
# NOTE: keys from which the packed path beats BLAS (``bench/kernels.py --packed``: one op, 1 and
# 2 slots, 2..12 heads of 32 or 64, sequences 16..512 with a padding mask): 0.68-0.96x the time
# from 128 keys on, 0.8-1.08x at 50, but 1.05-1.9x at 16 (half of each 32-key panel is padding)
# On AVX2 + FMA (Zen 3, 6 x 16 tiles; same command): 1.05-1.09x at 50 keys (1 thread),
# 0.94-1.00x at 128, 0.87-0.90x at 197, 0.65-0.72x from 384; 2 threads alike or lower
PACKED_MIN_KEYS = 48 if ck.packed_avx512() else 128
#: whether K_h^T and V_h are packed once per slot and kv head for the packed micro-kernel
#: (AVX-512F or AVX2 + FMA), where BLAS repacks them on every call; ViT-Ti 0.97 / 0.93x and
#: BERT-MiniLM 1.00 / 0.95x the time of the BLAS path at 1 / 2 threads on Zen 3 (two
#: sessions in one process, alternating)
PACKED_KV = ck.packed_gemm_available()
SIMD = ck.attention_simd()  # the softmax's SIMD form (2 AVX-512F, 1 AVX2, 0 the Cython loops)


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


def query_block(pairs: int, Sq: int, Skv: int, nt: int) -> int:
    """Query rows per work item: the fewest blocks that keep one block's scores within
    SCORE_BLOCK_BYTES (in L1 while the softmax and ``S @ V`` read them) and give every one of
    the ``nt`` slots the same number of (batch, head, block) items; blocks keep at least
    MIN_QUERY_BLOCK rows (each block repacks K_h and V_h in BLAS)."""
    rows = max(1, SCORE_BLOCK_BYTES // (4 * max(Skv, 1)))
    most = max(1, Sq // MIN_QUERY_BLOCK)
    nqb = min(-(-Sq // rows), most)
    while nt > 1 and (pairs * nqb) % nt and nqb < most:
        nqb += 1
    return -(-Sq // nqb)


class AttentionKernel(CpuKernel):
    """Attention-23, 3-D form; see the module docstring."""

    flat_run = "call"

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
        self.nt = self.threads if macs >= PARALLEL_MIN_MACS else 1
        self.qb = query_block(B * H, Sq, Skv, self.nt)
        self.nt = min(self.nt, B * H * -(-Sq // self.qb))
        # NOTE: the packed micro-kernel for both products (PACKED_KV)
        self.packed_kv = (PACKED_KV and D >= 1 and Dv >= 1
                          and Skv >= PACKED_MIN_KEYS)
        self.workspaces = (scratch(self.nt, ck.attention_scratch(Skv, D, Dv, self.qb,
                                                                 self.packed_kv) + 16),)
        self.simd = SIMD
        self.empty = empty_f32()

    def run(self, ins, outs, ws):
        mask = ins[3] if self.has_mask else None
        self.bound_call(ws, (ins[0], ins[1], ins[2], mask, outs[0]),
                        lambda: self._call(ins, mask, outs[0], ws.buffers[0]))

    def _call(self, ins, mask, y, buf):
        B, H, G, Sq, Skv, D, Dv = self.geom
        mb, mh, mq = self.mstrides
        m = self.empty if mask is None else mask.reshape(-1)
        return ck.attention, (self.nt, ins[0].reshape(-1), ins[1].reshape(-1),
                              ins[2].reshape(-1), m, self.has_mask, y.reshape(-1), B, H, G, Sq,
                              Skv, D, Dv, self.scale, mb, mh, mq, self.qb, self.packed_kv,
                              self.simd, buf)
