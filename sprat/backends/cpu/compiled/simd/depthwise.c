/* The register-blocked depthwise conv (conv.pxi documents the method; simd/depthwise.h the
   entry point). Compiled in the avx2 build only, as its own translation unit. */
#include <Python.h>
#include <string.h>
#include "depthwise.h"

#if SPRAT_DW_SIMD
#include <immintrin.h>
#include "vecmath.h"
#define SPRAT_INLINE static inline __attribute__((always_inline))

/* The activation on the P accumulators (sprat_act_v8, one dispatch per tile); slope: PRelu's
   8 slopes of the block (code 10), else unused */
#define SPRAT_DW_ACT(CODE) \
    case CODE: \
        _Pragma("GCC unroll 8") \
        for (p = 0; p < P; p++) acc[p] = sprat_act_v8(acc[p], CODE, va, vb, sv); \
        break;
SPRAT_INLINE void sprat_dw_act(__m256 *acc, const int P, int code, float a, float b,
                               const float *slope) {
    const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
    const __m256 sv = code == 10 ? _mm256_loadu_ps(slope) : _mm256_setzero_ps();
    int p;
    switch (code) {
    SPRAT_DW_ACT(1) SPRAT_DW_ACT(2) SPRAT_DW_ACT(3) SPRAT_DW_ACT(4) SPRAT_DW_ACT(5)
    SPRAT_DW_ACT(6) SPRAT_DW_ACT(8) SPRAT_DW_ACT(10)
    default: break;
    }
}
#undef SPRAT_DW_ACT

/* P output pixels (stride S apart) x 8 channels of one output row. y: the first pixel's
   channel block; w: the first valid kernel row's K weight vectors of the block (rows K*8
   floats apart); ni kernel rows, xstep floats apart in x; res (or NULL) at y's position;
   masked: the block holds the last C % 8 channels (mask m). Unguarded, x is the input at
   the first valid kernel row, the first pixel's window start, y's channels, and every
   column of the window lies inside the row. Guarded (pixels at the border), x is the
   input at column 0 of that row and the window starts at column off: only its columns u
   with lo <= u < hi are read (the others are zero padding) and only the first npix
   pixels are stored. Compile-time K, S, P, masked, guard: the loops unroll and the
   accumulators and K weights stay in registers. Fewer than 4 pixels spread their taps
   over NS accumulator sets: the chains of dependent multiply-adds (4 cycles each) are
   then short enough to keep both FMA units busy. */
SPRAT_INLINE void sprat_dw_tile(float *y, const float *x, const float *w, const float *bias,
                                const float *slope, const float *res, Py_ssize_t C,
                                Py_ssize_t xstep, Py_ssize_t ni,
                                const int K, const int S, const int P, const int masked,
                                const int guard, Py_ssize_t off, int lo, int hi, int npix,
                                __m256i m, int code, float a, float b, const int Q,
                                unsigned char *yq, Py_ssize_t qc, const sprat_dw_q *q) {
    const int NS = P >= 4 ? 1 : 4 / P;
    __m256 acc[8], wv[5];
    int p, j, u, s;
    Py_ssize_t i;
    const __m256 bv = _mm256_loadu_ps(bias);
#pragma GCC unroll 8
    for (p = 0; p < P * NS; p++) acc[p] = p < P ? bv : _mm256_setzero_ps();
    for (i = 0; i < ni; i++) {
        const float *xr = x + i * xstep;
        const float *wr = w + i * K * 8;
#pragma GCC unroll 5
        for (j = 0; j < K; j++) wv[j] = _mm256_loadu_ps(wr + j * 8);
#pragma GCC unroll 20
        for (u = 0; u < (P - 1) * S + K; u++) {
            const float *xp;
            __m256 xv;
            if (guard && (u < lo || u >= hi)) continue;
            xp = guard ? xr + (off + u) * C : xr + u * C;
            xv = masked ? _mm256_maskload_ps(xp, m) : _mm256_loadu_ps(xp);
#pragma GCC unroll 8
            for (p = 0; p < P; p++) {
                const int t = u - p * S;
                if (t >= 0 && t < K) {
                    s = p + P * (t % NS);
                    acc[s] = _mm256_fmadd_ps(xv, wv[t], acc[s]);
                }
            }
        }
    }
#pragma GCC unroll 8
    for (s = 1; s < NS; s++) {
#pragma GCC unroll 8
        for (p = 0; p < P; p++) acc[p] = _mm256_add_ps(acc[p], acc[p + P * s]);
    }
#pragma GCC unroll 8
    for (p = 0; p < P; p++) {
        if (guard && p >= npix) break;
        if (res != NULL)
            acc[p] = _mm256_add_ps(acc[p], masked ? _mm256_maskload_ps(res + p * C, m)
                                                  : _mm256_loadu_ps(res + p * C));
    }
    if (Q) {
        /* the requantisation of sprat_dw_units_q8, in registers, as the integer GEMM's
           (int8.pxi: sprat_i8_finish_q8): q = clamp(rint(f * mult) + zp, lo, hi) computed as
           rint(clamp(f * mult, lo - zp, hi - zp)) + zp (equal: rint is monotonic and keeps
           the integer bounds); then with post, clamp(rint(q * a + b), lo2, hi2). NOTE: each
           operation rounded as written: the empty asm keeps the compiler (-ffp-contract=fast,
           -fassociative-math) from fusing or reordering them */
        const __m256 mv = _mm256_loadu_ps(q->mult + qc), flo = _mm256_set1_ps(q->lo),
                     fhi = _mm256_set1_ps(q->hi), fz = _mm256_set1_ps((float)q->zp);
        const __m256i zv = _mm256_set1_epi32(q->zp);
        __m256 pa = fz, pb = fz, pl = fz, ph = fz;
        if (q->post != NULL) {
            pa = _mm256_loadu_ps(q->post + qc);
            pb = _mm256_loadu_ps(q->post + q->pld + qc);
            pl = _mm256_loadu_ps(q->post + 2 * q->pld + qc);
            ph = _mm256_loadu_ps(q->post + 3 * q->pld + qc);
        }
#pragma GCC unroll 8
        for (p = 0; p < P; p++) {
            __m256i v;
            __m256 f;
            __m128i w16, w8;
            if (guard && p >= npix) break;
            f = _mm256_mul_ps(acc[p], mv);
            __asm__("" : "+x"(f));
            f = _mm256_min_ps(_mm256_max_ps(f, flo), fhi);
            if (q->post != NULL) {
                f = _mm256_round_ps(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                __asm__("" : "+x"(f));
                f = _mm256_add_ps(f, fz);
                __asm__("" : "+x"(f));
                f = _mm256_mul_ps(f, pa);
                __asm__("" : "+x"(f));
                f = _mm256_add_ps(f, pb);
                __asm__("" : "+x"(f));
                v = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(f, pl), ph));
            } else {
                v = _mm256_add_epi32(_mm256_cvtps_epi32(f), zv);
            }
            w16 = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
            w8 = q->is_signed ? _mm_packs_epi16(w16, w16) : _mm_packus_epi16(w16, w16);
            if (masked) {
                unsigned char tmp[16];
                _mm_storeu_si128((__m128i *)tmp, w8);
                memcpy(yq + p * C, tmp, (size_t)(C & 7));
            } else {
                _mm_storel_epi64((__m128i *)(yq + p * C), w8);
            }
        }
        return;
    }
    sprat_dw_act(acc, P, code, a, b, slope);
#pragma GCC unroll 8
    for (p = 0; p < P; p++) {
        if (guard && p >= npix) break;
        if (masked) _mm256_maskstore_ps(y + p * C, m, acc[p]);
        else _mm256_storeu_ps(y + p * C, acc[p]);
    }
}

/* Channel blocks [b0, b1) of P pixels starting at output column ow (input column
   ow*S - pw); the block nb - 1 is masked when C % 8 != 0. Unguarded: interior pixels;
   guarded: npix pixels (<= P), the window's columns outside [0, W) skipped. */
SPRAT_INLINE void sprat_dw_pixels(float *yr, const float *xr, const float *wp, const float *bp,
                                  const float *sp, const float *rr, Py_ssize_t W, Py_ssize_t C,
                                  Py_ssize_t xstep, Py_ssize_t ni, Py_ssize_t wrow,
                                  Py_ssize_t kk, Py_ssize_t ow, Py_ssize_t pw, Py_ssize_t b0,
                                  Py_ssize_t b1, Py_ssize_t nb, __m256i m, const int K,
                                  const int S, const int P, const int guard, int npix,
                                  int code, float a, float b, const int Q, unsigned char *yqr,
                                  const sprat_dw_q *q) {
    Py_ssize_t cb, c, iw0 = ow * S - pw;
    Py_ssize_t bfull = (C & 7) ? nb - 1 : nb;
    int lo = iw0 < 0 ? (int)-iw0 : 0;
    int hi = (int)(W - iw0);
    float *y = Q ? NULL : yr + ow * C;
    unsigned char *yq = Q ? yqr + ow * C : NULL;
    const float *x = guard ? xr : xr + iw0 * C;
    const float *r = rr != NULL ? rr + ow * C : NULL;
    for (cb = b0; cb < (b1 < bfull ? b1 : bfull); cb++) {
        c = cb * 8;
        sprat_dw_tile(Q ? NULL : y + c, x + c, wp + cb * kk + wrow, bp + c,
                      sp != NULL ? sp + c : NULL, r != NULL ? r + c : NULL, C, xstep, ni, K, S,
                      P, 0, guard, iw0, lo, hi, npix, m, code, a, b, Q, Q ? yq + c : NULL,
                      c, q);
    }
    if (b1 > bfull) {
        c = bfull * 8;
        sprat_dw_tile(Q ? NULL : y + c, x + c, wp + bfull * kk + wrow, bp + c,
                      sp != NULL ? sp + c : NULL, r != NULL ? r + c : NULL, C, xstep, ni, K, S,
                      P, 1, guard, iw0, lo, hi, npix, m, code, a, b, Q, Q ? yq + c : NULL,
                      c, q);
    }
}

/* npix (>= 1) border pixels from output column ow, in guarded blocks of at most 8. */
SPRAT_INLINE void sprat_dw_border(float *yr, const float *xr, const float *wp, const float *bp,
                                  const float *sp, const float *rr, Py_ssize_t W, Py_ssize_t C,
                                  Py_ssize_t xstep, Py_ssize_t ni, Py_ssize_t wrow,
                                  Py_ssize_t kk, Py_ssize_t ow, Py_ssize_t npix, Py_ssize_t pw,
                                  Py_ssize_t b0, Py_ssize_t b1, Py_ssize_t nb, __m256i m,
                                  const int K, const int S, int code, float a, float b,
                                  const int Q, unsigned char *yqr, const sprat_dw_q *q) {
    while (npix > 0) {
        int n = npix < 8 ? (int)npix : 8;
        if (n > 4)
            sprat_dw_pixels(yr, xr, wp, bp, sp, rr, W, C, xstep, ni, wrow, kk, ow, pw, b0, b1,
                            nb, m, K, S, 8, 1, n, code, a, b, Q, yqr, q);
        else if (n > 2)
            sprat_dw_pixels(yr, xr, wp, bp, sp, rr, W, C, xstep, ni, wrow, kk, ow, pw, b0, b1,
                            nb, m, K, S, 4, 1, n, code, a, b, Q, yqr, q);
        else if (n == 2)
            sprat_dw_pixels(yr, xr, wp, bp, sp, rr, W, C, xstep, ni, wrow, kk, ow, pw, b0, b1,
                            nb, m, K, S, 2, 1, n, code, a, b, Q, yqr, q);
        else
            sprat_dw_pixels(yr, xr, wp, bp, sp, rr, W, C, xstep, ni, wrow, kk, ow, pw, b0, b1,
                            nb, m, K, S, 1, 1, n, code, a, b, Q, yqr, q);
        ow += n;
        npix -= n;
    }
}

/* Output columns [s0, s1) (sprat_dw_segment) of one output row (channel blocks [b0, b1)) for
   compile-time K and S: a whole row of at most 8 pixels with a border in one guarded block;
   otherwise the left border pixels, the interior in unguarded blocks of 8, 4, 2, 1, then the
   right border pixels, each as far as it lies in [s0, s1). */
SPRAT_INLINE void sprat_dw_row_ks(float *yr, const float *xr, const float *wp, const float *bp,
                                  const float *sp, const float *rr, Py_ssize_t W, Py_ssize_t C,
                                  Py_ssize_t OW, Py_ssize_t xstep, Py_ssize_t ni,
                                  Py_ssize_t wrow, Py_ssize_t kh, Py_ssize_t pw,
                                  Py_ssize_t b0, Py_ssize_t b1, Py_ssize_t s0, Py_ssize_t s1,
                                  __m256i m, const int K, const int S, int code, float a,
                                  float b, const int Q, unsigned char *yqr,
                                  const sprat_dw_q *q) {
    Py_ssize_t nb = (C + 7) / 8, kk = kh * K * 8;
    Py_ssize_t a0 = (pw + S - 1) / S, a1, ow;
    Py_ssize_t lo, hi;
    /* interior [a0, a1): ow*S - pw >= 0 and ow*S - pw + K <= W (as sprat_dw_segment) */
    a1 = W + pw - K >= 0 ? (W + pw - K) / S + 1 : 0;
    if (a1 > OW) a1 = OW;
    if (a0 > OW) a0 = OW;
    if (a1 < a0) a1 = a0;
    /* NOTE: requantising (Q), the rows are padded copies (every pixel interior): a row of at
       most 8 pixels still goes as one block (as 4 + 2 + 1 it loaded the weights three times:
       2x the float32 kernel's time on MobileNetV2's 7x7 maps) */
    if (OW <= 8 && s0 == 0 && s1 == OW && (Q || a0 > 0 || a1 < OW)) {
        sprat_dw_border(yr, xr, wp, bp, sp, rr, W, C, xstep, ni, wrow, kk, 0, OW, pw, b0, b1,
                        nb, m, K, S, code, a, b, Q, yqr, q);
        return;
    }
    /* this segment's part of the interior, and of the borders */
    lo = a0 > s0 ? a0 : s0;
    hi = a1 < s1 ? a1 : s1;
    if (hi < lo) hi = lo;
    if (lo > s0)
        sprat_dw_border(yr, xr, wp, bp, sp, rr, W, C, xstep, ni, wrow, kk, s0, lo - s0, pw, b0,
                        b1, nb, m, K, S, code, a, b, Q, yqr, q);
    for (ow = lo; ow + 8 <= hi; ow += 8)
        sprat_dw_pixels(yr, xr, wp, bp, sp, rr, W, C, xstep, ni, wrow, kk, ow, pw, b0, b1, nb,
                        m, K, S, 8, 0, 8, code, a, b, Q, yqr, q);
    if (ow + 4 <= hi) {
        sprat_dw_pixels(yr, xr, wp, bp, sp, rr, W, C, xstep, ni, wrow, kk, ow, pw, b0, b1, nb,
                        m, K, S, 4, 0, 4, code, a, b, Q, yqr, q);
        ow += 4;
    }
    if (ow + 2 <= hi) {
        sprat_dw_pixels(yr, xr, wp, bp, sp, rr, W, C, xstep, ni, wrow, kk, ow, pw, b0, b1, nb,
                        m, K, S, 2, 0, 2, code, a, b, Q, yqr, q);
        ow += 2;
    }
    if (ow < hi) {
        sprat_dw_pixels(yr, xr, wp, bp, sp, rr, W, C, xstep, ni, wrow, kk, ow, pw, b0, b1, nb,
                        m, K, S, 1, 0, 1, code, a, b, Q, yqr, q);
        ow += 1;
    }
    if (hi < s1)
        sprat_dw_border(yr, xr, wp, bp, sp, rr, W, C, xstep, ni, wrow, kk, hi, s1 - hi, pw, b0,
                        b1, nb, m, K, S, code, a, b, Q, yqr, q);
}

/* sprat_dw_row_ks for each (K, S), float32 out (suffix f) or requantised (suffix q), each a
   function of its own: inlined into one caller, the four made one function of 300 KB that took
   the compiler a third of the avx2 build */
#define SPRAT_DW_ROW(K, S, Q, SUF) \
    static __attribute__((noinline)) void sprat_dw_row_##K##S##SUF( \
            float *yr, const float *xr, const float *wp, const float *bp, const float *sp, \
            const float *rr, Py_ssize_t W, Py_ssize_t C, Py_ssize_t OW, Py_ssize_t xstep, \
            Py_ssize_t ni, Py_ssize_t wrow, Py_ssize_t kh, Py_ssize_t pw, Py_ssize_t b0, \
            Py_ssize_t b1, Py_ssize_t s0, Py_ssize_t s1, __m256i m, int code, float a, float b, \
            unsigned char *yqr, const sprat_dw_q *q) { \
        sprat_dw_row_ks(yr, xr, wp, bp, sp, rr, W, C, OW, xstep, ni, wrow, kh, pw, b0, b1, s0, \
                        s1, m, K, S, code, a, b, Q, yqr, q); \
    }
SPRAT_DW_ROW(3, 1, 0, f)
SPRAT_DW_ROW(3, 2, 0, f)
SPRAT_DW_ROW(5, 1, 0, f)
SPRAT_DW_ROW(5, 2, 0, f)
SPRAT_DW_ROW(3, 1, 1, q)
SPRAT_DW_ROW(3, 2, 1, q)
SPRAT_DW_ROW(5, 1, 1, q)
SPRAT_DW_ROW(5, 2, 1, q)
#undef SPRAT_DW_ROW

/* The units of sprat_dw_units, into float32 y (q NULL) or, requantised, into bytes yq */
static void sprat_dw_units_any(float *y, const float *x, const float *wp, const float *bp,
                               const float *sp, const float *res, Py_ssize_t H, Py_ssize_t W,
                               Py_ssize_t C, Py_ssize_t OH, Py_ssize_t OW, Py_ssize_t kh,
                               Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t dh,
                               Py_ssize_t ph, Py_ssize_t pw, Py_ssize_t ct, Py_ssize_t cs,
                               Py_ssize_t u0, Py_ssize_t u1, int code, float a, float b,
                               unsigned char *yq, const sprat_dw_q *q) {
    Py_ssize_t nb = (C + 7) / 8, ntile = (nb + ct - 1) / ct, u, qr, n, oh, tl, b0, b1;
    Py_ssize_t i0, i1, ih0, xstep = dh * W * C, sg, s0, s1;
    int rem = (int)(C & 7);
    __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(rem ? rem : 8),
                                   _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    if (!sprat_act_in_regs(code)) code = 0;
    for (u = u0; u < u1; u++) {
        qr = u / (ntile * cs);
        sg = (u - qr * ntile * cs) / ntile;
        tl = u - (qr * cs + sg) * ntile;
        sprat_dw_segment(W, OW, kw, sw, pw, cs, sg, &s0, &s1);
        if (s0 >= s1) continue;
        b0 = tl * ct;
        b1 = b0 + ct < nb ? b0 + ct : nb;
        n = qr / OH;
        oh = qr - n * OH;
        /* kernel rows i with 0 <= oh*sh - ph + i*dh < H */
        ih0 = oh * sh - ph;
        i0 = ih0 < 0 ? (-ih0 + dh - 1) / dh : 0;
        i1 = H - 1 - ih0 >= 0 ? (H - 1 - ih0) / dh + 1 : 0;
        if (i1 > kh) i1 = kh;
        if (i1 < i0) i1 = i0;
        {
            float *yr = q != NULL ? NULL : y + qr * OW * C;
            unsigned char *yqr = q != NULL ? yq + qr * OW * C : NULL;
            const float *xr = x + (n * H + ih0 + i0 * dh) * W * C;
            const float *rr = res != NULL ? res + qr * OW * C : NULL;
            Py_ssize_t wrow = i0 * kw * 8;
#define SPRAT_DW_CALL(K, S) \
            if (q != NULL) \
                sprat_dw_row_##K##S##q(yr, xr, wp, bp, sp, rr, W, C, OW, xstep, i1 - i0, wrow, \
                                       kh, pw, b0, b1, s0, s1, m, code, a, b, yqr, q); \
            else \
                sprat_dw_row_##K##S##f(yr, xr, wp, bp, sp, rr, W, C, OW, xstep, i1 - i0, wrow, \
                                       kh, pw, b0, b1, s0, s1, m, code, a, b, NULL, NULL);
            if (kw == 3 && sw == 1) {
                SPRAT_DW_CALL(3, 1)
            } else if (kw == 3) {
                SPRAT_DW_CALL(3, 2)
            } else if (sw == 1) {
                SPRAT_DW_CALL(5, 1)
            } else {
                SPRAT_DW_CALL(5, 2)
            }
#undef SPRAT_DW_CALL
        }
    }
}

/* Units [u0, u1) of (output row q of N*OH, channel tile of ct blocks of 8) of a depthwise
   conv with kw in {3, 5}, horizontal stride sw in {1, 2}, horizontal dilation 1. wp packed
   (C/8 blocks, kh, kw, 8), bp the bias padded to a multiple of 8, sp PRelu's slopes padded
   alike (NULL for other activations); res may be NULL.
   The activation is applied only when sprat_act_in_regs(code). Returns 1 (done). */
int sprat_dw_units(float *y, const float *x, const float *wp, const float *bp, const float *sp,
                   const float *res, Py_ssize_t H, Py_ssize_t W, Py_ssize_t C, Py_ssize_t OH,
                   Py_ssize_t OW, Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw,
                   Py_ssize_t dh, Py_ssize_t ph, Py_ssize_t pw, Py_ssize_t ct, Py_ssize_t cs,
                   Py_ssize_t u0, Py_ssize_t u1, int code, float a, float b) {
    sprat_dw_units_any(y, x, wp, bp, sp, res, H, W, C, OH, OW, kh, kw, sh, sw, dh, ph, pw, ct,
                       cs, u0, u1, code, a, b, NULL, NULL);
    return 1;
}

/* sprat_dw_units without residual or activation, each output requantised in registers into
   yq (bytes: uint8, or int8 with is_signed): q = clamp(rint(f * mult[c]) + zp, lo, hi), f the
   float32 sum (bp the bias), then with post (4 rows of pld floats: a, b, lo2, hi2 per channel,
   a quantized conv's fused lookup) clamp(rint(q * a + b), lo2, hi2). mult and the rows of
   post padded to a multiple of 8. Returns 1 (done). */
int sprat_dw_units_q8(unsigned char *yq, const float *x, const float *wp, const float *bp,
                      const float *mult, Py_ssize_t H, Py_ssize_t W, Py_ssize_t C,
                      Py_ssize_t OH, Py_ssize_t OW, Py_ssize_t kh, Py_ssize_t kw,
                      Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t dh, Py_ssize_t ph,
                      Py_ssize_t pw, Py_ssize_t ct, Py_ssize_t u0, Py_ssize_t u1, float zp,
                      float lo, float hi, int is_signed, const float *post,
                      Py_ssize_t pld) {
    sprat_dw_q q;
    q.mult = mult;
    q.post = post;
    q.pld = pld;
    q.lo = lo - zp;
    q.hi = hi - zp;
    q.zp = (int)zp;
    q.is_signed = is_signed;
    sprat_dw_units_any(NULL, x, wp, bp, NULL, NULL, H, W, C, OH, OW, kh, kw, sh, sw, dh, ph, pw,
                       ct, 1, u0, u1, 0, 0.0f, 0.0f, yq, &q);
    return 1;
}
#endif
