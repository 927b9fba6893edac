/* The narrow conv: one-group convs with few output channels (conv.pxi ``conv_narrow``
   documents the method; simd/narrow.h the entry point). Compiled in the avx2 build only, as
   its own translation unit. */
#include <Python.h>
#include "narrow.h"

#if SPRAT_NARROW_SIMD
#include <immintrin.h>
#define SPRAT_INLINE static inline __attribute__((always_inline))

SPRAT_INLINE float sprat_narrow_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* P output pixels (columns ow0 .. ow0 + P - 1 of one output row) x M channels into y (P*M
   floats). x: the input at the first valid kernel row, column 0; ni valid kernel rows, xstep
   floats apart in x; w: the weights of that first kernel row (channel m's K weights K floats
   apart). Unguarded (guard 0), every column of every window lies inside the row; guarded,
   only the columns inside it are read (the others are zero padding). Each (pixel, channel)
   sums in 8 lanes over all taps (C channels per tap, the last C % 8 masked), reduced once at
   the end. Compile-time P, M, guard: the loops unroll and the P*M accumulators stay in
   registers. */
SPRAT_INLINE void sprat_narrow_block(float *y, const float *x, const float *w, const int P,
                                     const int M, const int guard, Py_ssize_t ow0,
                                     Py_ssize_t W, Py_ssize_t C, Py_ssize_t K, Py_ssize_t kw,
                                     Py_ssize_t sw, Py_ssize_t dw, Py_ssize_t pw,
                                     Py_ssize_t ni, Py_ssize_t xstep, __m256i tail) {
    __m256 acc[P][M];
    const Py_ssize_t C8 = C & ~(Py_ssize_t)7;
    int p, m;
    for (p = 0; p < P; p++)
        for (m = 0; m < M; m++) acc[p][m] = _mm256_setzero_ps();
    for (Py_ssize_t i = 0; i < ni; i++) {
        const float *xr = x + i * xstep;
        const float *wr = w + i * kw * C;
        for (Py_ssize_t j = 0; j < kw; j++) {
            const Py_ssize_t iw = ow0 * sw - pw + j * dw;
            if (guard && (iw < 0 || iw >= W))
                continue;
            const float *xp = xr + iw * C;
            const float *wp = wr + j * C;
            for (Py_ssize_t c = 0; c < C8; c += 8) {
                for (m = 0; m < M; m++) {
                    const __m256 wv = _mm256_loadu_ps(wp + m * K + c);
                    for (p = 0; p < P; p++)
                        acc[p][m] = _mm256_fmadd_ps(_mm256_loadu_ps(xp + p * sw * C + c), wv,
                                                    acc[p][m]);
                }
            }
            if (C8 < C) {
                for (m = 0; m < M; m++) {
                    const __m256 wv = _mm256_maskload_ps(wp + m * K + C8, tail);
                    for (p = 0; p < P; p++)
                        acc[p][m] = _mm256_fmadd_ps(
                            _mm256_maskload_ps(xp + p * sw * C + C8, tail), wv, acc[p][m]);
                }
            }
        }
    }
    for (p = 0; p < P; p++)
        for (m = 0; m < M; m++) y[p * M + m] = sprat_narrow_hsum(acc[p][m]);
}

/* Rows [r0, r1) for a compile-time M, P pixels per unguarded block (the P*M accumulators and
   one weight vector fit the 16 registers) */
SPRAT_INLINE void sprat_narrow_m(float *y, const float *x, const float *w, const int M,
                                 const int P, Py_ssize_t H, Py_ssize_t W, Py_ssize_t C,
                                 Py_ssize_t OH, Py_ssize_t OW, Py_ssize_t kh, Py_ssize_t kw,
                                 Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t dh, Py_ssize_t dw,
                                 Py_ssize_t ph, Py_ssize_t pw, Py_ssize_t r0, Py_ssize_t r1) {
    const Py_ssize_t K = kh * kw * C;
    const __m256i tail = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(C & 7)),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    /* the output columns whose windows lie inside the row: [lo, hi) */
    Py_ssize_t lo = (pw + sw - 1) / sw, hi = 0;
    if (W - 1 - (kw - 1) * dw + pw >= 0)
        hi = (W - 1 - (kw - 1) * dw + pw) / sw + 1;
    if (hi > OW) hi = OW;
    if (lo > hi) lo = hi;
    for (Py_ssize_t r = r0; r < r1; r++) {
        const Py_ssize_t n = r / OH, oh = r % OH;
        Py_ssize_t i0 = 0, i1 = kh;
        while (i0 < kh && oh * sh - ph + i0 * dh < 0) i0++;
        while (i1 > i0 && oh * sh - ph + (i1 - 1) * dh >= H) i1--;
        const Py_ssize_t ni = i1 - i0, xstep = dh * W * C;
        float *yr = y + r * OW * M;
        Py_ssize_t ow = 0;
        if (ni <= 0) {  /* every kernel row in the padding */
            for (Py_ssize_t k = 0; k < OW * M; k++) yr[k] = 0.0f;
            continue;
        }
        const float *xr = x + ((n * H + oh * sh - ph + i0 * dh) * W) * C;
        const float *wr = w + i0 * kw * C;
        for (; ow < lo; ow++)
            sprat_narrow_block(yr + ow * M, xr, wr, 1, M, 1, ow, W, C, K, kw, sw, dw, pw, ni,
                               xstep, tail);
        for (; ow + P <= hi; ow += P)
            sprat_narrow_block(yr + ow * M, xr, wr, P, M, 0, ow, W, C, K, kw, sw, dw, pw, ni,
                               xstep, tail);
        for (; ow < hi; ow++)
            sprat_narrow_block(yr + ow * M, xr, wr, 1, M, 0, ow, W, C, K, kw, sw, dw, pw, ni,
                               xstep, tail);
        for (; ow < OW; ow++)
            sprat_narrow_block(yr + ow * M, xr, wr, 1, M, 1, ow, W, C, K, kw, sw, dw, pw, ni,
                               xstep, tail);
    }
}

#define SPRAT_NARROW_CASE(MM, PP) \
    case MM: \
        sprat_narrow_m(y, x, w, MM, PP, H, W, C, OH, OW, kh, kw, sh, sw, dh, dw, ph, pw, r0, r1); \
        break;

void sprat_narrow_rows(float *y, const float *x, const float *w, Py_ssize_t H, Py_ssize_t W,
                       Py_ssize_t C, Py_ssize_t M, Py_ssize_t OH, Py_ssize_t OW, Py_ssize_t kh,
                       Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t dh,
                       Py_ssize_t dw, Py_ssize_t ph, Py_ssize_t pw, Py_ssize_t r0,
                       Py_ssize_t r1) {
    switch (M) {
    SPRAT_NARROW_CASE(1, 8) SPRAT_NARROW_CASE(2, 6) SPRAT_NARROW_CASE(3, 4)
    SPRAT_NARROW_CASE(4, 3) SPRAT_NARROW_CASE(5, 2) SPRAT_NARROW_CASE(6, 2)
    SPRAT_NARROW_CASE(7, 2)
    default: break;
    }
}
#undef SPRAT_NARROW_CASE
#endif
