"""Numba bodies of the NHWC convolutions (see conv.py for when each is used).

All arrays are flat (1-D) C-contiguous float32; NHWC offsets are computed explicitly. Work is
split into blocks of output rows; ``prange`` runs over ``nt`` thread slots, each slot walks a
contiguous range of blocks with its own scratch (``scratch[t]``), calls a one-thread GEMM per
block and applies the fused epilogue while the block is hot in cache.
"""

from __future__ import annotations

from numba import prange, uint64

from ._blas import sgemm
from ._epilogue import gather_rows, residual_act, rows_inplace
from ._jit import njit
from ._math import FAST


@njit(cache=True, error_model="numpy", nogil=True, inline="always")
def _copy(dst, src):
    for k in range(dst.size):
        dst[k] = src[k]


@njit(cache=True, error_model="numpy", nogil=True, inline="always")
def _fill(dst, v):
    for k in range(dst.size):
        dst[k] = v


@njit(cache=True, error_model="numpy", nogil=True)
def pointwise_slot(t, nt, x, w, bias, res, has_res, y, P, C, M, G, blk, wt, code, a, b):
    """1x1, stride 1, no padding: ``y(P, M) = x(P, C) @ w`` per group, w packed (G, C/G, M/G),
    or (``wt``) the model's own (M, C/G) weight used transposed. Slot ``t`` of ``nt`` (blocks
    of ``blk`` pixels)."""
    cg = C // G
    mg = M // G
    nb = (P + blk - 1) // blk
    for bi in range(t * nb // nt, (t + 1) * nb // nt):
        p0 = bi * blk
        rows = min(blk, P - p0)
        for g in range(G):
            if wt:
                sgemm(False, True, rows, mg, cg, 1.0, x, p0 * C + g * cg, C,
                      w, g * mg * cg, cg, 0.0, y, p0 * M + g * mg, M)
            else:
                sgemm(False, False, rows, mg, cg, 1.0, x, p0 * C + g * cg, C,
                      w, g * cg * mg, mg, 0.0, y, p0 * M + g * mg, M)
        rows_inplace(y, p0 * M, rows, M, bias, res, has_res, code, a, b)


@njit(cache=True, error_model="numpy", nogil=True)
def shift_slot(t, nt, x, w, bias, res, has_res, y, N, H, W, C, M, OH, OW, kh, kw, dh, dw, ph,
               pw, R, xb, acc, code, a, b):
    """Stride-1 conv, group 1, as kh*kw accumulating GEMMs over shifted views ("shift-GEMM").

    Per block of R output rows the input band (rows + halo) is copied into a zero-padded
    scratch ``xb[t]`` of row pitch ``Wp = OW + (kw-1)*dw`` pixels; the output over the padded
    width is then ``sum_ij xb[shift_ij : shift_ij + rows*Wp] @ w[i, j]`` (each a plain GEMM with
    lda = C, no im2col), and the epilogue drops the (kw-1)*dw junk columns per row.
    ``w`` packed (kh, kw, C, M).
    """
    wp = OW + (kw - 1) * dw
    nbh = (OH + R - 1) // R
    nb = N * nbh
    xbt = xb[t]
    acct = acc[t]
    for bi in range(t * nb // nt, (t + 1) * nb // nt):
        n = bi // nbh
        oh0 = (bi % nbh) * R
        rows = min(R, OH - oh0)
        band = rows + (kh - 1) * dh
        iw_lo = max(0, -pw)
        iw_hi = min(W, wp - pw)
        span = (iw_hi - iw_lo) * C
        for r in range(band):
            ih = oh0 + r - ph
            d0 = r * wp * C
            if ih < 0 or ih >= H:
                _fill(xbt[d0:d0 + wp * C], 0.0)
            else:
                s0 = ((n * H + ih) * W + iw_lo) * C
                d1 = d0 + (pw + iw_lo) * C
                _copy(xbt[d1:d1 + span], x[s0:s0 + span])
        first = True
        for i in range(kh):
            for j in range(kw):
                sgemm(False, False, rows * wp, M, C, 1.0, xbt, (i * dh * wp + j * dw) * C, C,
                      w, (i * kw + j) * C * M, M, 0.0 if first else 1.0, acct, 0, M)
                first = False
        gather_rows(acct, 0, wp * M, y, (n * OH + oh0) * OW * M, rows, OW, M,
                    bias, res, has_res, code, a, b)


@njit(cache=True, error_model="numpy", nogil=True, inline="always")
def _copy_run(dst, d, src, s, n):
    """dst[d:d+n] = src[s:s+n] for short runs: unsigned indices, so no negative-index select
    and no slice objects (a stem copies 3-9 floats at a time)."""
    for k in range(n):
        dst[uint64(d + k)] = src[uint64(s + k)]


@njit(cache=True, error_model="numpy", nogil=True, inline="always")
def _zero_run(dst, d, n):
    for k in range(n):
        dst[uint64(d + k)] = 0.0


@njit(cache=True, error_model="numpy", nogil=True, inline="always")
def _window_taps(colt, d, x, row0, W, C, iw0, kw, dw, cg, coff):
    """One kernel row of one window, tap by tap (``cg`` channels from ``coff`` of input row
    ``row0``): zeros for the taps outside the image."""
    for j in range(kw):
        iw = iw0 + j * dw
        if iw < 0 or iw >= W:
            _zero_run(colt, d + j * cg, cg)
        else:
            _copy_run(colt, d + j * cg, x, (row0 + iw) * C + coff, cg)


@njit(cache=True, error_model="numpy", nogil=True)
def _gather_whole(colt, x, n, H, W, C, OW, kh, kw, sh, sw, dh, ph, pw, oh0, rows, kk):
    """Patch rows of one group with no horizontal dilation: a window's kw*C entries of one
    kernel row are one contiguous run of the input. Per (output row, kernel row) the windows
    fully inside the image are a branch-free loop over ow; only the edge windows go tap by
    tap (stems: the gather ~2x faster than deciding per window)."""
    run = kw * C
    ow_lo = min(OW, (pw + sw - 1) // sw)
    ow_hi = max(ow_lo, min(OW, (W - kw + pw) // sw + 1))
    for r in range(rows):
        oh = oh0 + r
        for i in range(kh):
            ih = oh * sh - ph + i * dh
            d0 = r * OW * kk + i * run
            if ih < 0 or ih >= H:
                for ow in range(OW):
                    _zero_run(colt, d0 + ow * kk, run)
                continue
            row0 = (n * H + ih) * W
            for ow in range(ow_lo, ow_hi):
                _copy_run(colt, d0 + ow * kk, x, (row0 + ow * sw - pw) * C, run)
            for ow in range(ow_lo):
                _window_taps(colt, d0 + ow * kk, x, row0, W, C, ow * sw - pw, kw, 1, C, 0)
            for ow in range(ow_hi, OW):
                _window_taps(colt, d0 + ow * kk, x, row0, W, C, ow * sw - pw, kw, 1, C, 0)


@njit(cache=True, error_model="numpy", nogil=True)
def im2col_slot(t, nt, x, w, bias, res, has_res, y, N, H, W, C, M, G, OH, OW, kh, kw, sh, sw,
                dh, dw, ph, pw, R, col, code, a, b):
    """General conv (any stride, dilation, padding, groups): per block of R output rows and per
    group, gather the (rows*OW, kh*kw*C/G) patch matrix into ``col[t]`` and GEMM it with the
    packed weights (G, kh, kw, C/G, M/G) straight into the output (ldc = M). One group with no
    horizontal dilation gathers whole kernel-row runs (``_gather_whole``)."""
    cg = C // G
    mg = M // G
    kk = kh * kw * cg
    run = kw * cg
    whole = G == 1 and dw == 1
    nbh = (OH + R - 1) // R
    nb = N * nbh
    colt = col[t]
    for bi in range(t * nb // nt, (t + 1) * nb // nt):
        n = bi // nbh
        oh0 = (bi % nbh) * R
        rows = min(R, OH - oh0)
        y0 = (n * OH + oh0) * OW * M
        for g in range(G):
            if whole:
                _gather_whole(colt, x, n, H, W, C, OW, kh, kw, sh, sw, dh, ph, pw, oh0, rows,
                              kk)
            else:
                for r in range(rows):
                    oh = oh0 + r
                    for ow in range(OW):
                        d = (r * OW + ow) * kk
                        for i in range(kh):
                            ih = oh * sh - ph + i * dh
                            if ih < 0 or ih >= H:
                                _zero_run(colt, d, run)
                            else:
                                _window_taps(colt, d, x, (n * H + ih) * W, W, C, ow * sw - pw,
                                             kw, dw, cg, g * cg)
                            d += run
            sgemm(False, False, rows * OW, mg, kk, 1.0, colt, 0, kk, w, g * kk * mg, mg,
                  0.0, y, y0 + g * mg, M)
        rows_inplace(y, y0, rows * OW, M, bias, res, has_res, code, a, b)


def depthwise_segment(c: int) -> int:
    """Output pixels per segment of the stride-1 depthwise kernel for ``c`` channels: about 4096
    floats per tap (64 pixels up to 64 channels), so the tiled weights of a 5x5 kernel stay in
    L2 at 200+ channels (a fixed 64 tiled a 5x5 kernel of 200 channels into 1.3 MB)."""
    return max(4, min(64, 4096 // max(c, 1)))


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def _dw_tap(yr, x, wt, C, xrow, tap, off, ow0, ow1, SEG):
    """yr[ow*C + c] += x[(xrow + ow + off)*C + c] * w[tap, c] for ow in [ow0, ow1), in segments
    of SEG pixels (``wt`` holds each tap's weights tiled SEG times)."""
    for a in range(ow0, ow1, SEG):
        m = (min(ow1, a + SEG) - a) * C
        s = (xrow + a + off) * C
        xs = x[s:s + m]
        ws = wt[tap * SEG * C:tap * SEG * C + m]
        ys = yr[a * C:a * C + m]
        for k in range(m):
            ys[k] += xs[k] * ws[k]


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def _dw_row5(yr, x, wt, C, xrow, i, OW, W, dw, pw, SEG):
    """The five taps of kernel row ``i`` of a 5-wide depthwise kernel (horizontal stride 1):
    edge pixels tap by tap, the interior (all five taps inside the image) in one pass."""
    a0 = min(OW, max(0, pw))
    a1 = max(a0, min(OW, W + pw - 4 * dw))
    for j in range(5):
        # NOTE: each edge run is clipped to the pixels whose tap j lies inside the row: on a
        # row narrower than the kernel the left edge reaches past the right end, and back
        lo = max(0, pw - j * dw)
        hi = min(OW, W + pw - j * dw)
        _dw_tap(yr, x, wt, C, xrow, i * 5 + j, j * dw - pw, lo, min(a0, hi), SEG)
        _dw_tap(yr, x, wt, C, xrow, i * 5 + j, j * dw - pw, max(a1, lo), hi, SEG)
    sc = SEG * C
    d = dw * C
    for a in range(a0, a1, SEG):
        m = (min(a1, a + SEG) - a) * C
        s = (xrow + a - pw) * C
        x0 = x[s:s + m]
        x1 = x[s + d:s + d + m]
        x2 = x[s + 2 * d:s + 2 * d + m]
        x3 = x[s + 3 * d:s + 3 * d + m]
        x4 = x[s + 4 * d:s + 4 * d + m]
        wo = i * 5 * sc
        w0 = wt[wo:wo + m]
        w1 = wt[wo + sc:wo + sc + m]
        w2 = wt[wo + 2 * sc:wo + 2 * sc + m]
        w3 = wt[wo + 3 * sc:wo + 3 * sc + m]
        w4 = wt[wo + 4 * sc:wo + 4 * sc + m]
        ys = yr[a * C:a * C + m]
        for k in range(m):
            ys[k] += (x0[k] * w0[k] + x1[k] * w1[k] + x2[k] * w2[k] + x3[k] * w3[k]
                      + x4[k] * w4[k])


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def _depthwise_rows_s1(x, wt, bt, y, lo, hi, H, W, C, OH, OW, kh, kw, sh, dh, dw, ph, pw, SEG):
    """Depthwise with horizontal stride 1 (any vertical stride ``sh``), one output row at a
    time: each tap is one long contiguous multiply-add over (pixels x channels) against tiled
    weights, so the loop vectorises fully even for 8 channels; for 3- and 5-wide kernels the
    taps of a kernel row share one pass over the pixels where all of them are inside the
    image."""
    L = OW * C
    for q in range(lo, hi):
        n = q // OH
        oh = q - n * OH
        yr = y[q * L:(q + 1) * L]
        for a in range(0, OW, SEG):
            m = (min(OW, a + SEG) - a) * C
            ys = yr[a * C:a * C + m]
            for k in range(m):
                ys[k] = bt[k]
        for i in range(kh):
            ih = oh * sh - ph + i * dh
            if ih < 0 or ih >= H:
                continue
            xrow = (n * H + ih) * W
            if kw == 5:
                _dw_row5(yr, x, wt, C, xrow, i, OW, W, dw, pw, SEG)
                continue
            if kw != 3:
                for j in range(kw):
                    _dw_tap(yr, x, wt, C, xrow, i * kw + j, j * dw - pw,
                            max(0, pw - j * dw), min(OW, W + pw - j * dw), SEG)
                continue
            a0 = min(OW, max(0, pw))
            a1 = max(a0, min(OW, W + pw - 2 * dw))
            for j in range(3):
                lo = max(0, pw - j * dw)  # NOTE: edge runs clipped as in _dw_row5
                hi = min(OW, W + pw - j * dw)
                _dw_tap(yr, x, wt, C, xrow, i * 3 + j, j * dw - pw, lo, min(a0, hi), SEG)
                _dw_tap(yr, x, wt, C, xrow, i * 3 + j, j * dw - pw, max(a1, lo), hi, SEG)
            for a in range(a0, a1, SEG):
                m = (min(a1, a + SEG) - a) * C
                s = (xrow + a - pw) * C
                x0 = x[s:s + m]
                x1 = x[s + dw * C:s + dw * C + m]
                x2 = x[s + 2 * dw * C:s + 2 * dw * C + m]
                wo = i * 3 * SEG * C
                w0 = wt[wo:wo + m]
                w1 = wt[wo + SEG * C:wo + SEG * C + m]
                w2 = wt[wo + 2 * SEG * C:wo + 2 * SEG * C + m]
                ys = yr[a * C:a * C + m]
                for k in range(m):
                    ys[k] += x0[k] * w0[k] + x1[k] * w1[k] + x2[k] * w2[k]


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def _depthwise_rows(x, w, bias, y, lo, hi, H, W, C, OH, OW, kh, kw, sh, sw, dh, dw, ph, pw):
    """Any stride: each output pixel's C channels accumulate kh*kw vector FMAs in place."""
    for q in range(lo, hi):
        n = q // OH
        oh = q - n * OH
        y0 = q * OW * C
        for ow in range(OW):
            yo = y[y0 + ow * C:y0 + (ow + 1) * C]
            for c in range(C):
                yo[c] = bias[c]
            for i in range(kh):
                ih = oh * sh - ph + i * dh
                if ih < 0 or ih >= H:
                    continue
                for j in range(kw):
                    iw = ow * sw - pw + j * dw
                    if iw < 0 or iw >= W:
                        continue
                    s = ((n * H + ih) * W + iw) * C
                    xs = x[s:s + C]
                    wk = w[(i * kw + j) * C:(i * kw + j + 1) * C]
                    for c in range(C):
                        yo[c] += xs[c] * wk[c]


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def _row_epilogue(y, res, has_res, lo, hi, L, code, a, b):
    for q in range(lo, hi):
        residual_act(y[q * L:(q + 1) * L], res[q * L:(q + 1) * L], has_res, code, a, b)


@njit(cache=True, error_model="numpy", nogil=True)
def depthwise_slot(t, nt, x, w, wt, bias, bt, res, has_res, y, N, H, W, C, OH, OW, kh, kw, sh,
                   sw, dh, dw, ph, pw, seg, code, a, b):
    """Depthwise conv (group == C == M). ``w`` packed (kh, kw, C); ``wt``/``bt`` the weights
    and bias tiled ``seg`` times per tap (used when the horizontal stride is 1;
    ``depthwise_segment``)."""
    rows = N * OH
    lo = t * rows // nt
    hi = (t + 1) * rows // nt
    if sw == 1:
        _depthwise_rows_s1(x, wt, bt, y, lo, hi, H, W, C, OH, OW, kh, kw, sh, dh, dw, ph, pw,
                           seg)
    else:
        _depthwise_rows(x, w, bias, y, lo, hi, H, W, C, OH, OW, kh, kw, sh, sw, dh, dw,
                        ph, pw)
    if has_res or code != 0:
        _row_epilogue(y, res, has_res, lo, hi, OW * C, code, a, b)


# NOTE: each algorithm is a serial "slot" function (the share of work of slot t out of nt) and
# a parallel driver running the nt slots on Numba's pool. Small problems call the slot function
# directly: a parallel launch costs ~5 us, more than a tiny conv.

@njit(cache=True, error_model="numpy", nogil=True, parallel=True)
def pointwise_par(nt, x, w, bias, res, has_res, y, P, C, M, G, blk, wt, code, a, b):
    for t in prange(nt):
        pointwise_slot(t, nt, x, w, bias, res, has_res, y, P, C, M, G, blk, wt, code, a, b)


@njit(cache=True, error_model="numpy", nogil=True, parallel=True)
def shift_par(nt, x, w, bias, res, has_res, y, N, H, W, C, M, OH, OW, kh, kw, dh, dw, ph, pw,
              R, xb, acc, code, a, b):
    for t in prange(nt):
        shift_slot(t, nt, x, w, bias, res, has_res, y, N, H, W, C, M, OH, OW, kh, kw, dh, dw,
                   ph, pw, R, xb, acc, code, a, b)


@njit(cache=True, error_model="numpy", nogil=True, parallel=True)
def im2col_par(nt, x, w, bias, res, has_res, y, N, H, W, C, M, G, OH, OW, kh, kw, sh, sw, dh,
               dw, ph, pw, R, col, code, a, b):
    for t in prange(nt):
        im2col_slot(t, nt, x, w, bias, res, has_res, y, N, H, W, C, M, G, OH, OW, kh, kw, sh,
                    sw, dh, dw, ph, pw, R, col, code, a, b)


@njit(cache=True, error_model="numpy", nogil=True, parallel=True)
def depthwise_par(nt, x, w, wt, bias, bt, res, has_res, y, N, H, W, C, OH, OW, kh, kw, sh, sw,
                  dh, dw, ph, pw, seg, code, a, b):
    for t in prange(nt):
        depthwise_slot(t, nt, x, w, wt, bias, bt, res, has_res, y, N, H, W, C, OH, OW, kh, kw,
                       sh, sw, dh, dw, ph, pw, seg, code, a, b)


SLOT = {"pointwise": pointwise_slot, "shift": shift_slot, "im2col": im2col_slot,
        "depthwise": depthwise_slot}
PAR = {"pointwise": pointwise_par, "shift": shift_par, "im2col": im2col_par,
       "depthwise": depthwise_par}

