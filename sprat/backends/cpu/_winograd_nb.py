"""Winograd F(4x4, 3x3) convolution in NHWC (Lavin & Gray, "Fast Algorithms for Convolutional
Neural Networks", CVPR 2016, §4 and its F(4,3) matrices), the algorithm MNN picks for 3x3 stride-1
convs.

Each 4x4 output tile needs a 6x6 input tile ``d``: ``Y = A^T [ (G g G^T) * (B^T d B) ] A``. The
element-wise product over the 6x6 = 36 positions, summed over input channels, is 36 GEMMs of
(tiles x C) @ (C x M): 36 multiplies per tile and channel pair instead of 16 * 9 = 144. Work is
split into blocks of ``TB`` tiles (or, on maps with few tiles, into ranges of output channels):
per block the input transform writes ``V`` (36, TB, C) into
per-slot scratch, 36 one-thread GEMMs write ``Mo`` (36, TB, M), the output transform adds bias
(+ residual) and the activation and writes the tiles' pixels into ``y``. Transforms run over
the channel axis, which is contiguous in NHWC, so they vectorise.

The transformed weights ``U = G g G^T`` are packed once per model as (36, C, M).
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ._blas import sgemm
from ._jit import njit
from ._math import FAST, act_inplace

# F(4,3): G (6x3), B^T (6x6), A^T (4x6)
G = np.array([[1 / 4, 0, 0],
              [-1 / 6, -1 / 6, -1 / 6],
              [-1 / 6, 1 / 6, -1 / 6],
              [1 / 24, 1 / 12, 1 / 6],
              [1 / 24, -1 / 12, 1 / 6],
              [0, 0, 1]], np.float64)
BT = np.array([[4, 0, -5, 0, 1, 0],
               [0, -4, -4, 1, 1, 0],
               [0, 4, -4, -1, 1, 0],
               [0, -2, -1, 2, 1, 0],
               [0, 2, -1, -2, 1, 0],
               [0, 4, 0, -5, 0, 1]], np.float64)
AT = np.array([[1, 1, 1, 1, 1, 0],
               [0, 1, -1, 2, -2, 0],
               [0, 1, 1, 4, 4, 0],
               [0, 1, -1, 8, -8, 1]], np.float64)


def pack_weights(w: np.ndarray) -> np.ndarray:
    """``w`` (M, C, 3, 3) -> ``U`` flat (36, C, M) float32, ``U[p] = (G w G^T)[p]``
    (computed in float64)."""
    u = np.einsum("ik,mckl,jl->ijcm", G, w.astype(np.float64), G)  # (6, 6, C, M)
    m, c = w.shape[:2]
    return np.ascontiguousarray(u.reshape(36, c, m), np.float32).ravel()


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST, inline="always")
def _bt6(d0, d1, d2, d3, d4, d5, o0, o1, o2, o3, o4, o5):
    """o = B^T d for six vectors (element-wise over the channel axis)."""
    for k in range(d0.size):
        a0 = d0[k]
        a1 = d1[k]
        a2 = d2[k]
        a3 = d3[k]
        a4 = d4[k]
        a5 = d5[k]
        o0[k] = 4.0 * a0 - 5.0 * a2 + a4
        o1[k] = -4.0 * (a1 + a2) + a3 + a4
        o2[k] = 4.0 * (a1 - a2) - a3 + a4
        o3[k] = 2.0 * (a3 - a1) - a2 + a4
        o4[k] = 2.0 * (a1 - a3) - a2 + a4
        o5[k] = 4.0 * a1 - 5.0 * a3 + a5


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST, inline="always")
def _at6(m0, m1, m2, m3, m4, m5, o0, o1, o2, o3):
    """o = A^T m for six vectors (element-wise over the channel axis)."""
    for k in range(m0.size):
        a0 = m0[k]
        a1 = m1[k]
        a2 = m2[k]
        a3 = m3[k]
        a4 = m4[k]
        a5 = m5[k]
        s12 = a1 + a2
        d12 = a1 - a2
        s34 = a3 + a4
        d34 = a3 - a4
        o0[k] = a0 + s12 + s34
        o1[k] = d12 + 2.0 * d34
        o2[k] = s12 + 4.0 * s34
        o3[k] = d12 + 8.0 * d34 + a5


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def _input_tile(x, n, H, W, C, ih0, iw0, patch, tmp, v, tile, TB):
    """Copy the 6x6xC input tile at (ih0, iw0) (zeros outside the image) into ``patch``,
    transform it and store position p at ``v[(p*TB + tile)*C : +C]``."""
    for r in range(6):
        ih = ih0 + r
        for q in range(6):
            iw = iw0 + q
            dst = patch[(r * 6 + q) * C:(r * 6 + q + 1) * C]
            if ih < 0 or ih >= H or iw < 0 or iw >= W:
                for k in range(C):
                    dst[k] = 0.0
            else:
                s = ((n * H + ih) * W + iw) * C
                src = x[s:s + C]
                for k in range(C):
                    dst[k] = src[k]
    # rows: tmp[i][q] = sum_r BT[i][r] * patch[r][q]
    for q in range(6):
        _bt6(patch[(0 * 6 + q) * C:(0 * 6 + q + 1) * C],
             patch[(1 * 6 + q) * C:(1 * 6 + q + 1) * C],
             patch[(2 * 6 + q) * C:(2 * 6 + q + 1) * C],
             patch[(3 * 6 + q) * C:(3 * 6 + q + 1) * C],
             patch[(4 * 6 + q) * C:(4 * 6 + q + 1) * C],
             patch[(5 * 6 + q) * C:(5 * 6 + q + 1) * C],
             tmp[(0 * 6 + q) * C:(0 * 6 + q + 1) * C],
             tmp[(1 * 6 + q) * C:(1 * 6 + q + 1) * C],
             tmp[(2 * 6 + q) * C:(2 * 6 + q + 1) * C],
             tmp[(3 * 6 + q) * C:(3 * 6 + q + 1) * C],
             tmp[(4 * 6 + q) * C:(4 * 6 + q + 1) * C],
             tmp[(5 * 6 + q) * C:(5 * 6 + q + 1) * C])
    # columns: v[i][j] = sum_q tmp[i][q] * BT[j][q]
    for i in range(6):
        t0 = i * 6 * C
        v0 = ((i * 6) * TB + tile) * C
        st = TB * C
        _bt6(tmp[t0:t0 + C], tmp[t0 + C:t0 + 2 * C], tmp[t0 + 2 * C:t0 + 3 * C],
             tmp[t0 + 3 * C:t0 + 4 * C], tmp[t0 + 4 * C:t0 + 5 * C],
             tmp[t0 + 5 * C:t0 + 6 * C],
             v[v0:v0 + C], v[v0 + st:v0 + st + C], v[v0 + 2 * st:v0 + 2 * st + C],
             v[v0 + 3 * st:v0 + 3 * st + C], v[v0 + 4 * st:v0 + 4 * st + C],
             v[v0 + 5 * st:v0 + 5 * st + C])


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def _output_tile(mo, tile, TB, M, bias, res, has_res, y, ldy, c0, n, OH, OW, oh0, ow0, tmp,
                 out, code, a, b):
    """Inverse-transform tile ``tile`` of ``mo`` (36, TB, M), add bias (+ residual), apply the
    activation, and write its in-image pixels of the 4x4 output tile at (oh0, ow0) into output
    channels ``c0 .. c0+M`` of ``y`` (and read ``res``) with ``ldy`` channels per pixel."""
    st = TB * M
    # rows: tmp[i][j] (i < 4, j < 6) = sum_p AT[i][p] * mo[p][j]
    for j in range(6):
        base = (j * TB + tile) * M
        _at6(mo[base:base + M], mo[base + 6 * st:base + 6 * st + M],
             mo[base + 12 * st:base + 12 * st + M], mo[base + 18 * st:base + 18 * st + M],
             mo[base + 24 * st:base + 24 * st + M], mo[base + 30 * st:base + 30 * st + M],
             tmp[(0 * 6 + j) * M:(0 * 6 + j + 1) * M], tmp[(1 * 6 + j) * M:(1 * 6 + j + 1) * M],
             tmp[(2 * 6 + j) * M:(2 * 6 + j + 1) * M], tmp[(3 * 6 + j) * M:(3 * 6 + j + 1) * M])
    # columns: out[i][q] = sum_j tmp[i][j] * AT[q][j]
    for i in range(4):
        t0 = i * 6 * M
        o0 = i * 4 * M
        _at6(tmp[t0:t0 + M], tmp[t0 + M:t0 + 2 * M], tmp[t0 + 2 * M:t0 + 3 * M],
             tmp[t0 + 3 * M:t0 + 4 * M], tmp[t0 + 4 * M:t0 + 5 * M], tmp[t0 + 5 * M:t0 + 6 * M],
             out[o0:o0 + M], out[o0 + M:o0 + 2 * M], out[o0 + 2 * M:o0 + 3 * M],
             out[o0 + 3 * M:o0 + 4 * M])
    for i in range(4):
        oh = oh0 + i
        if oh >= OH:
            break
        for q in range(4):
            ow = ow0 + q
            if ow >= OW:
                break
            d = ((n * OH + oh) * OW + ow) * ldy + c0
            dst = y[d:d + M]
            src = out[(i * 4 + q) * M:(i * 4 + q + 1) * M]
            if has_res:
                rr = res[d:d + M]
                for k in range(M):
                    dst[k] = src[k] + bias[k] + rr[k]
            else:
                for k in range(M):
                    dst[k] = src[k] + bias[k]
            if code != 0:
                act_inplace(dst, code, a, b)


@njit(cache=True, error_model="numpy", nogil=True)
def winograd_slot(t, nt, x, u, bias, res, has_res, y, N, H, W, C, M, OH, OW, ph, pw, TB,
                  split_m, vbuf, mbuf, pbuf, obuf, code, a, b):
    """3x3, stride 1, dilation 1, group 1 conv by Winograd F(4,3); slot ``t`` of ``nt`` takes a
    range of blocks of ``TB`` tiles, or with ``split_m`` every block but a range of the output
    channels (a small map has too few tiles to share out; each slot then transforms the whole
    input itself). ``u`` packed (36, C, M); per-slot scratch ``vbuf[t]`` (36*TB*C),
    ``mbuf[t]`` (36*TB*M), ``pbuf[t]`` (2*36*C), ``obuf[t]`` (40*M)."""
    th = (OH + 3) // 4
    tw = (OW + 3) // 4
    per_image = th * tw
    T = N * per_image
    nblk = (T + TB - 1) // TB
    v = vbuf[t]
    mo = mbuf[t]
    patch = pbuf[t][:36 * C]
    ptmp = pbuf[t][36 * C:72 * C]
    otmp = obuf[t][:24 * M]
    out = obuf[t][24 * M:40 * M]
    if split_m:
        b0, b1 = 0, nblk
        c0 = (t * M // nt) // 8 * 8
        c1 = M if t == nt - 1 else ((t + 1) * M // nt) // 8 * 8
    else:
        b0, b1 = t * nblk // nt, (t + 1) * nblk // nt
        c0, c1 = 0, M
    mt = c1 - c0
    bias_t = bias[c0:c1]
    for blk in range(b0, b1):
        t0 = blk * TB
        cnt = min(TB, T - t0)
        for k in range(cnt):
            g = t0 + k
            n = g // per_image
            r = g - n * per_image
            ti = r // tw
            tj = r - ti * tw
            _input_tile(x, n, H, W, C, ti * 4 - ph, tj * 4 - pw, patch, ptmp, v, k, TB)
        for p in range(36):
            sgemm(False, False, cnt, mt, C, 1.0, v, p * TB * C, C, u, p * C * M + c0, M, 0.0,
                  mo, p * TB * mt, mt)
        for k in range(cnt):
            g = t0 + k
            n = g // per_image
            r = g - n * per_image
            ti = r // tw
            tj = r - ti * tw
            _output_tile(mo, k, TB, mt, bias_t, res, has_res, y, M, c0, n, OH, OW, ti * 4,
                         tj * 4, otmp, out, code, a, b)


@njit(cache=True, error_model="numpy", nogil=True, parallel=True)
def winograd_par(nt, x, u, bias, res, has_res, y, N, H, W, C, M, OH, OW, ph, pw, TB, split_m,
                 vbuf, mbuf, pbuf, obuf, code, a, b):
    for t in prange(nt):
        winograd_slot(t, nt, x, u, bias, res, has_res, y, N, H, W, C, M, OH, OW, ph, pw, TB,
                      split_m, vbuf, mbuf, pbuf, obuf, code, a, b)
