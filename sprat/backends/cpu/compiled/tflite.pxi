# ---- TFLite's integer kernels: fixed-point requantisation, ADD/SUB/MUL, SOFTMAX ----------------
#
# The arithmetic of TFLite's reference integer kernels bit for bit, as the reference backend's
# ``ops_tflite`` computes it on int64 arrays: gemmlowp's SaturatingRoundingDoublingHighMul and
# RoundingDivideByPOT, TFLite's MultiplyByQuantizedMultiplier (double rounding, the default
# build), gemmlowp's fixed-point exp and reciprocal for SOFTMAX. Sources:
# tensorflow/lite/kernels/internal/common.h, reference/integer_ops/{add,mul}.h,
# reference/softmax.h, gemmlowp fixedpoint/fixedpoint.h. Scalar C: these ops are a small part
# of a full-integer model's work; what they cost on the reference kernels was NumPy's per-call
# overhead over a dozen int64 temporaries per op.

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    #include <math.h>

    static inline int32_t tfl_wrap32(int64_t v) { return (int32_t)(uint32_t)(uint64_t)v; }

    /* v * 2^s on two's complement bits (a left shift of a negative value is undefined in C) */
    static inline int64_t tfl_shl(int64_t v, int s) { return (int64_t)((uint64_t)v << s); }

    /* gemmlowp SaturatingRoundingDoublingHighMul; NOTE: branch-free (the signs of the
       products are data: branches on them mispredicted half the time, ~25 cycles a value) */
    static inline int32_t tfl_srdhm(int32_t a, int32_t b) {
        int64_t ab = (int64_t)a * (int64_t)b;
        int64_t t = ab + (ab >= 0 ? ((int64_t)1 << 30) : (1 - ((int64_t)1 << 30)));
        /* t / 2^31 truncated toward zero: a floor shift, corrected for negative t */
        int64_t q = (t + ((t >> 63) & 0x7FFFFFFF)) >> 31;
        return (a == INT32_MIN && b == INT32_MIN) ? INT32_MAX : (int32_t)q;
    }

    /* gemmlowp RoundingDivideByPOT: x / 2^e, rounded to nearest, ties away from zero */
    static inline int64_t tfl_rdbpot(int64_t x, int e) {
        int64_t mask = ((int64_t)1 << e) - 1;
        int64_t threshold = (mask >> 1) + (x < 0);
        return (x >> e) + ((x & mask) > threshold);
    }

    /* TFLite MultiplyByQuantizedMultiplier: x * m * 2^(shift - 31), shift in [-31, 30] */
    static inline int32_t tfl_mbqm(int32_t x, int32_t m, int shift) {
        int left = shift > 0 ? shift : 0, right = shift > 0 ? 0 : -shift;
        return (int32_t)tfl_rdbpot(tfl_srdhm(tfl_wrap32(tfl_shl(x, left)), m), right);
    }

    /* gemmlowp SaturatingRoundingMultiplyByPOT<e> */
    static inline int32_t tfl_satpot(int32_t x, int e) {
        if (e == 0) return x;
        if (e < 0) return (int32_t)tfl_rdbpot(x, -e);
        int32_t threshold = (int32_t)(((int64_t)1 << (31 - e)) - 1);
        if (x > threshold) return INT32_MAX;
        if (x < -threshold) return INT32_MIN;
        return (int32_t)tfl_shl(x, e);
    }

    static inline int64_t tfl_load(const unsigned char *p, int kind, Py_ssize_t i) {
        if (kind == 0) return ((const int32_t *)p)[i];
        if (kind == 1) return ((const signed char *)p)[i];
        return p[i];
    }

    /* int16 values of tfl_dw_avx2's ring of pair buffers (per work slot) */
    static inline Py_ssize_t tfl_dw_ring_size(Py_ssize_t C, Py_ssize_t OW, int kh, int kw,
                                              int sw, int dh, int dw) {
        Py_ssize_t G = (C + 7) / 8, T = (kw + 1) / 2;
        int qstep = (2 * dw) % sw == 0 ? sw : 1;
        Py_ssize_t NQs = ((OW - 1) * sw + (2 * T - 2) * dw) / qstep + 1;
        /* the ring, then one row's int16 line (tfl_dw_pairs_row) */
        return ((Py_ssize_t)(kh - 1) * dh + 1) * G * NQs * 16
               + ((NQs - 1) * qstep + dw + 1) * ((C + 15) / 16 * 16);
    }

    static inline unsigned char tfl_clamp(int64_t v, int32_t lo, int32_t hi) {
        return (unsigned char)(v < lo ? lo : (v > hi ? hi : v));
    }

    #if defined(__AVX2__)
    #include <immintrin.h>
    /* MBQM of 8 int32 lanes, each with its multiplier and shift (the scalar tfl_mbqm): the
       doubling high multiply on even and odd lanes (vpmuldq). NOTE: gemmlowp's nudge and
       truncating division, ``(ab + (ab >= 0 ? 2^30 : 1 - 2^30)) / 2^31``, equal the floor of
       ``(ab + 2^30) / 2^31`` for every ab (for ab < 0 with u = ab + 2^30: -floor((-u - 1) /
       2^31 + 1) = floor(u / 2^31)), so one add and a shift: the quotient fits 32 bits, so the
       low dword of a logical shift is exact. Then RoundingDivideByPOT with AVX2's per-lane
       arithmetic shifts */
    static inline __m256i tfl_mbqm8(__m256i x, __m256i m, __m256i shift) {
        const __m256i zero = _mm256_setzero_si256();
        __m256i left = _mm256_max_epi32(shift, zero);
        __m256i right = _mm256_sub_epi32(left, shift);
        __m256i a = _mm256_sllv_epi32(x, left);
        const __m256i nudge = _mm256_set1_epi64x((int64_t)1 << 30);
        __m256i p0 = _mm256_add_epi64(_mm256_mul_epi32(a, m), nudge);
        __m256i p1 = _mm256_add_epi64(_mm256_mul_epi32(_mm256_srli_epi64(a, 32),
                                                       _mm256_srli_epi64(m, 32)), nudge);
        /* the odd lanes: bits 31..62 of p1 into the high dword, p1 << 1 */
        __m256i h = _mm256_blend_epi32(_mm256_srli_epi64(p0, 31), _mm256_slli_epi64(p1, 1), 0xAA);
        const __m256i imin = _mm256_set1_epi32(INT32_MIN);
        __m256i sat = _mm256_and_si256(_mm256_cmpeq_epi32(a, imin), _mm256_cmpeq_epi32(m, imin));
        h = _mm256_blendv_epi8(h, _mm256_set1_epi32(INT32_MAX), sat);
        const __m256i one = _mm256_set1_epi32(1);
        __m256i mask = _mm256_sub_epi32(_mm256_sllv_epi32(one, right), one);
        __m256i threshold = _mm256_sub_epi32(_mm256_srai_epi32(mask, 1),
                                             _mm256_cmpgt_epi32(zero, h));
        __m256i up = _mm256_cmpgt_epi32(_mm256_and_si256(h, mask), threshold);
        return _mm256_sub_epi32(_mm256_srav_epi32(h, right), up);
    }

    /* 8 int32 lanes + ozp, clamped to [lo, hi], as bytes into y. NOTE: clamped to
       [lo - ozp, hi - ozp] before the add, which would wrap near INT32_MAX */
    static inline void tfl_store8(unsigned char *y, __m256i v, __m256i ozp, __m256i lo,
                                  __m256i hi) {
        v = _mm256_add_epi32(_mm256_min_epi32(_mm256_max_epi32(
            v, _mm256_sub_epi32(lo, ozp)), _mm256_sub_epi32(hi, ozp)), ozp);
        __m256i b = _mm256_shuffle_epi8(v, _mm256_setr_epi8(
            0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
            0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1));
        uint32_t w0 = (uint32_t)_mm256_extract_epi32(b, 0), w1 = (uint32_t)_mm256_extract_epi32(b, 4);
        memcpy(y, &w0, 4);
        memcpy(y + 4, &w1, 4);
    }
    #endif

    /* rows [r0, r1) of C values: clamp(MBQM(x - izp + bias[c], mult[c], shift[c]) + ozp) */
    #define TFL_REQUANTIZE_SCALAR(T)                                                      \
        for (; c < C; c++) {                                                              \
            int64_t v = (int64_t)xr[c] - izp + bias[c];                                   \
            yr[c] = tfl_clamp((int64_t)tfl_mbqm(tfl_wrap32(v), mult[c], shift[c]) + ozp,  \
                              lo, hi);                                                    \
        }
    #if defined(__AVX2__)
    #define TFL_LOAD8_int32_t(p) _mm256_loadu_si256((const __m256i *)(p))
    #define TFL_LOAD8_int8_t(p) _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p)))
    #define TFL_LOAD8_uint8_t(p) _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p)))
    #define TFL_REQUANTIZE_ROWS(T)                                                        \
        for (Py_ssize_t r = r0; r < r1; r++) {                                            \
            const T *xr = (const T *)x + r * C;                                           \
            unsigned char *yr = y + r * C;                                                \
            Py_ssize_t c = 0;                                                             \
            for (; c + 8 <= C; c += 8) {                                                  \
                __m256i v = _mm256_add_epi32(_mm256_sub_epi32(TFL_LOAD8_##T(xr + c), vizp), \
                    _mm256_loadu_si256((const __m256i *)(bias + c)));                     \
                tfl_store8(yr + c, tfl_mbqm8(v, _mm256_loadu_si256((const __m256i *)(mult + c)), \
                           _mm256_loadu_si256((const __m256i *)(shift + c))), vozp, vlo, vhi); \
            }                                                                             \
            TFL_REQUANTIZE_SCALAR(T)                                                      \
        }
    #else
    #define TFL_REQUANTIZE_ROWS(T)                                                        \
        for (Py_ssize_t r = r0; r < r1; r++) {                                            \
            const T *xr = (const T *)x + r * C;                                           \
            unsigned char *yr = y + r * C;                                                \
            Py_ssize_t c = 0;                                                             \
            TFL_REQUANTIZE_SCALAR(T)                                                      \
        }
    #endif
    static void sprat_tfl_requantize(const unsigned char *x, int kind, unsigned char *y,
                                     Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t C,
                                     const int32_t *mult, const int32_t *shift,
                                     const int32_t *bias, int32_t izp, int32_t ozp, int32_t lo,
                                     int32_t hi) {
        #if defined(__AVX2__)
        const __m256i vizp = _mm256_set1_epi32(izp), vozp = _mm256_set1_epi32(ozp);
        const __m256i vlo = _mm256_set1_epi32(lo), vhi = _mm256_set1_epi32(hi);
        #endif
        /* NOTE: one loop per input type, so no test of the type per value */
        if (kind == 0) { TFL_REQUANTIZE_ROWS(int32_t) }
        else if (kind == 1) { TFL_REQUANTIZE_ROWS(int8_t) }
        else { TFL_REQUANTIZE_ROWS(uint8_t) }
    }

    /* One row of n int32 sums t (a conv's or GEMM's tile row): clamp(MBQM(t[c] + bias[c],
       mult[c], shift[c]) + ozp, lo, hi) as bytes into y; bias may be NULL (already added).
       The epilogue of TflConv on the integer GEMM (``int8.pxi``, ``i8_finish_rows``) and on
       the float32 conv paths (``quant.pxi``, ``_qrequant_rows``) */
    static void sprat_tfl_requant_row(const int32_t *t, Py_ssize_t n, const int32_t *mult,
                                      const int32_t *shift, const int32_t *bias, int32_t ozp,
                                      int32_t lo, int32_t hi, unsigned char *y) {
        Py_ssize_t c = 0;
        #if defined(__AVX2__)
        const __m256i vozp = _mm256_set1_epi32(ozp);
        const __m256i vlo = _mm256_set1_epi32(lo), vhi = _mm256_set1_epi32(hi);
        for (; c + 8 <= n; c += 8) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(t + c));
            if (bias != NULL)
                v = _mm256_add_epi32(v, _mm256_loadu_si256((const __m256i *)(bias + c)));
            tfl_store8(y + c, tfl_mbqm8(v, _mm256_loadu_si256((const __m256i *)(mult + c)),
                       _mm256_loadu_si256((const __m256i *)(shift + c))), vozp, vlo, vhi);
        }
        #endif
        for (; c < n; c++) {
            int64_t v = (int64_t)t[c] + (bias != NULL ? bias[c] : 0);
            y[c] = tfl_clamp((int64_t)tfl_mbqm(tfl_wrap32(v), mult[c], shift[c]) + ozp, lo, hi);
        }
    }

    /* rows [r0, r1) of C int32 values: clamp(round_half_away((double)(x + bias[c]) *
       scale[c]) + ozp), the rounding as the reference's sign(r) * floor(|r| + 0.5) */
    static void sprat_tfl_rescale(const int32_t *x, unsigned char *y, Py_ssize_t r0,
                                  Py_ssize_t r1, Py_ssize_t C, const double *scale,
                                  const int32_t *bias, int32_t ozp, int32_t lo, int32_t hi) {
        double dlo = (double)lo - ozp, dhi = (double)hi - ozp;
        for (Py_ssize_t r = r0; r < r1; r++) {
            Py_ssize_t c = 0;
        #if defined(__AVX2__)
            /* NOTE: 4 doubles a step, the scalar loop's operations one by one (IEEE double, no
               contraction with intrinsics): the same bits. The scalar loop cost ~10 cycles a
               value, most of a fully-connected layer's time at one row */
            const __m256d vlo = _mm256_set1_pd(dlo), vhi = _mm256_set1_pd(dhi);
            const __m256d half = _mm256_set1_pd(0.5), sign = _mm256_set1_pd(-0.0);
            const __m128i vozp = _mm_set1_epi32(ozp);
            for (; c + 4 <= C; c += 4) {
                Py_ssize_t i = r * C + c;
                __m128i xi = _mm_add_epi32(_mm_loadu_si128((const __m128i *)(x + i)),
                                           _mm_loadu_si128((const __m128i *)(bias + c)));
                __m256d v = _mm256_mul_pd(_mm256_cvtepi32_pd(xi), _mm256_loadu_pd(scale + c));
                __m256d a = _mm256_floor_pd(_mm256_add_pd(_mm256_andnot_pd(sign, v), half));
                v = _mm256_or_pd(a, _mm256_and_pd(sign, v));
                v = _mm256_min_pd(_mm256_max_pd(v, vlo), vhi);
                __m128i q = _mm_add_epi32(_mm256_cvttpd_epi32(v), vozp);
                q = _mm_shuffle_epi8(q, _mm_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1,
                                                      -1, -1, -1, -1, -1));
                uint32_t w = (uint32_t)_mm_cvtsi128_si32(q);
                memcpy(y + i, &w, 4);
            }
        #endif
            for (; c < C; c++) {
                Py_ssize_t i = r * C + c;
                double v = (double)tfl_wrap32((int64_t)x[i] + bias[c]) * scale[c];
                v = copysign(floor(fabs(v) + 0.5), v);
                v = v < dlo ? dlo : (v > dhi ? dhi : v);
                y[i] = (unsigned char)((int64_t)v + ozp);
            }
        }
    }

    /* TFLite's quantized AVERAGE_POOL_2D (avg 1) / MAX_POOL_2D (avg 0) over NHWC int8/uint8
       (reference/integer_ops/pooling.h): the window clipped to the image, the average of its
       values rounded half away from zero (C integer division), clamped to [lo, hi]; output
       rows [q0, q1) of the N * OH rows. NOTE: int32 sums (the caller keeps windows below
       2^23 pixels), 64 channels at a time over the window's pixels, so the inner loop runs
       along contiguous channels (vectorised) instead of striding by C per value */
    #define TFL_POOL_ACC(T)                                                               \
        for (Py_ssize_t iy = ya; iy < yb; iy++)                                           \
            for (Py_ssize_t ix = xa; ix < xb; ix++) {                                     \
                const T *p = (const T *)x + ((n * H + iy) * W + ix) * C + c0;             \
                if (avg)                                                                  \
                    for (Py_ssize_t c = 0; c < cn; c++) acc[c] += p[c];                   \
                else                                                                      \
                    for (Py_ssize_t c = 0; c < cn; c++) acc[c] = p[c] > acc[c] ? p[c] : acc[c]; \
            }
    static void sprat_tfl_pool(int avg, const unsigned char *x, int kind, unsigned char *y,
                               Py_ssize_t q0, Py_ssize_t q1, Py_ssize_t H, Py_ssize_t W,
                               Py_ssize_t C, Py_ssize_t OH, Py_ssize_t OW, int kh, int kw,
                               int sh, int sw, int top, int left, int32_t lo, int32_t hi) {
        int32_t acc[64];
        for (Py_ssize_t q = q0; q < q1; q++) {
            Py_ssize_t n = q / OH, oy = q % OH;
            Py_ssize_t y0 = oy * sh - top, ya = y0 < 0 ? 0 : y0, yb = y0 + kh < H ? y0 + kh : H;
            for (Py_ssize_t ox = 0; ox < OW; ox++) {
                Py_ssize_t x0 = ox * sw - left, xa = x0 < 0 ? 0 : x0;
                Py_ssize_t xb = x0 + kw < W ? x0 + kw : W;
                int32_t count = (int32_t)((yb - ya) * (xb - xa));
                unsigned char *out = y + (q * OW + ox) * C;
                for (Py_ssize_t c0 = 0; c0 < C; c0 += 64) {
                    Py_ssize_t cn = C - c0 < 64 ? C - c0 : 64;
                    for (Py_ssize_t c = 0; c < cn; c++) acc[c] = avg ? 0 : INT32_MIN;
                    if (kind == 1) { TFL_POOL_ACC(int8_t) } else { TFL_POOL_ACC(uint8_t) }
                    for (Py_ssize_t c = 0; c < cn; c++) {
                        int32_t v = acc[c];
                        if (avg && count > 0) {
                            int32_t half = count / 2;
                            v = v > 0 ? (v + half) / count : -((half - v) / count);
                        }
                        out[c0 + c] = tfl_clamp(v, lo, hi);
                    }
                }
            }
        }
    }

    /* TFLite's quantized DEPTHWISE_CONV_2D, depth multiplier 1 (reference/integer_ops/
       depthwise_conv.h), NHWC int8/uint8 x (N, H, W, C) -> y (N, OH, OW, C), output rows [r0,
       r1) of the N * OH: per output pixel and channel, the int32 sum of bias and the taps
       inside the map (x - xz) * w, then TFLite's requantisation. w: (kh * kw, C) int32 (zero
       point subtracted). The baseline build's path (the AVX2 one: tfl_dw_avx2 below) */
    static void tfl_dw_scalar(const unsigned char *x, int is_signed, int32_t xz,
                              const int32_t *w, Py_ssize_t H, Py_ssize_t W, Py_ssize_t C,
                              Py_ssize_t OH, Py_ssize_t OW, int kh, int kw, int sh, int sw,
                              int dh, int dw, int ph, int pw, const int32_t *bias,
                              const int32_t *mult, const int32_t *shift, int32_t ozp,
                              int32_t lo, int32_t hi, unsigned char *y, Py_ssize_t r0,
                              Py_ssize_t r1) {
        for (Py_ssize_t r = r0; r < r1; r++) {
            Py_ssize_t n = r / OH, oy = r % OH;
            int i0 = 0, i1 = kh;  /* the taps' rows inside the map */
            while (i0 < kh && oy * sh - ph + i0 * dh < 0) i0++;
            while (i1 > i0 && oy * sh - ph + (i1 - 1) * dh >= H) i1--;
            for (Py_ssize_t ox = 0; ox < OW; ox++) {
                Py_ssize_t ix0 = ox * sw - pw;
                int j0 = 0, j1 = kw;
                while (j0 < kw && ix0 + j0 * dw < 0) j0++;
                while (j1 > j0 && ix0 + (j1 - 1) * dw >= W) j1--;
                unsigned char *yo = y + (r * OW + ox) * C;
                for (Py_ssize_t c = 0; c < C; c++) {
                    int64_t acc = bias[c];
                    for (int i = i0; i < i1; i++)
                        for (int j = j0; j < j1; j++) {
                            Py_ssize_t k = ((n * H + oy * sh - ph + i * dh) * W + ix0 + j * dw) * C + c;
                            int64_t v = (is_signed ? (int64_t)((const signed char *)x)[k]
                                                   : (int64_t)x[k]) - xz;
                            acc += v * w[(i * kw + j) * C + c];
                        }
                    yo[c] = tfl_clamp((int64_t)tfl_mbqm(tfl_wrap32(acc), mult[c], shift[c]) + ozp,
                                      lo, hi);
                }
            }
        }
    }

    #if defined(__AVX2__)
    /* TFLite's requantisation of 8 channels with the per-channel values prepared once (the
       channel group's constants kept over a row of output pixels): tfl_mbqm8 without its
       per-call shift arithmetic, and without its INT32_MIN * INT32_MIN test when no
       multiplier of the group is INT32_MIN (``sat`` 0; else tfl_mbqm8 itself) */
    typedef struct {
        __m256i m, modd, shift, left, right, mask, thr;
        int sat;
    } tfl_rq8;

    static inline tfl_rq8 tfl_rq8_load(const int32_t *mult, const int32_t *shift) {
        tfl_rq8 q;
        const __m256i zero = _mm256_setzero_si256(), one = _mm256_set1_epi32(1);
        q.m = _mm256_loadu_si256((const __m256i *)mult);
        q.modd = _mm256_srli_epi64(q.m, 32);
        q.shift = _mm256_loadu_si256((const __m256i *)shift);
        q.left = _mm256_max_epi32(q.shift, zero);
        q.right = _mm256_sub_epi32(q.left, q.shift);
        q.mask = _mm256_sub_epi32(_mm256_sllv_epi32(one, q.right), one);
        q.thr = _mm256_srai_epi32(q.mask, 1);
        q.sat = _mm256_movemask_epi8(_mm256_cmpeq_epi32(q.m, _mm256_set1_epi32(INT32_MIN))) != 0;
        return q;
    }

    static inline __m256i tfl_rq8_apply(const tfl_rq8 *q, __m256i x) {
        if (q->sat) return tfl_mbqm8(x, q->m, q->shift);
        const __m256i nudge = _mm256_set1_epi64x((int64_t)1 << 30);
        __m256i a = _mm256_sllv_epi32(x, q->left);
        __m256i p0 = _mm256_add_epi64(_mm256_mul_epi32(a, q->m), nudge);
        __m256i p1 = _mm256_add_epi64(_mm256_mul_epi32(_mm256_srli_epi64(a, 32), q->modd), nudge);
        __m256i h = _mm256_blend_epi32(_mm256_srli_epi64(p0, 31), _mm256_slli_epi64(p1, 1), 0xAA);
        __m256i threshold = _mm256_sub_epi32(q->thr, _mm256_cmpgt_epi32(_mm256_setzero_si256(), h));
        __m256i up = _mm256_cmpgt_epi32(_mm256_and_si256(h, q->mask), threshold);
        return _mm256_sub_epi32(_mm256_srav_epi32(h, q->right), up);
    }

    /* 8 int32 lanes + ozp clamped (as tfl_store8) into the low 8 bytes of an xmm */
    static inline __m128i tfl_bytes8(__m256i v, __m256i ozp, __m256i lo_z, __m256i hi_z) {
        v = _mm256_add_epi32(_mm256_min_epi32(_mm256_max_epi32(v, lo_z), hi_z), ozp);
        __m256i b = _mm256_shuffle_epi8(v, _mm256_setr_epi8(
            0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
            0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1));
        return _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(
            0, 4, 1, 1, 1, 1, 1, 1)));
    }

    /* the first nb (< 8) bytes of o to y */
    static inline void tfl_store_tail(unsigned char *y, __m128i o, Py_ssize_t nb) {
        uint64_t v = (uint64_t)_mm_cvtsi128_si64(o);
        memcpy(y, &v, (size_t)nb);
    }
    #endif

    /* sprat_tfl_requant_row over rows x n sums (t, row pitch ldt) into y (row pitch ldy):
       8 columns at a time across the rows, their multipliers, shifts and bias prepared once
       (tfl_rq8) and kept in registers; the same operations, so the same bits. NOTE: the
       integer GEMM's TflConv epilogue called the row function per tile row, each 8 columns
       rebuilding the shift masks: ~a quarter of a small conv's time (mltk image
       classification) */
    static void sprat_tfl_requant_block(const int32_t *t, Py_ssize_t ldt, Py_ssize_t rows,
                                        Py_ssize_t n, const int32_t *mult,
                                        const int32_t *shift, const int32_t *bias,
                                        int32_t ozp, int32_t lo, int32_t hi, unsigned char *y,
                                        Py_ssize_t ldy) {
        Py_ssize_t c = 0;
        #if defined(__AVX2__)
        const __m256i vozp = _mm256_set1_epi32(ozp);
        const __m256i lo_z = _mm256_set1_epi32(lo - ozp), hi_z = _mm256_set1_epi32(hi - ozp);
        for (; c + 8 <= n; c += 8) {
            tfl_rq8 rq = tfl_rq8_load(mult + c, shift + c);
            const __m256i b = bias != NULL ? _mm256_loadu_si256((const __m256i *)(bias + c))
                                           : _mm256_setzero_si256();
            for (Py_ssize_t r = 0; r < rows; r++) {
                __m256i v = _mm256_add_epi32(
                    _mm256_loadu_si256((const __m256i *)(t + r * ldt + c)), b);
                _mm_storel_epi64((__m128i *)(y + r * ldy + c),
                                 tfl_bytes8(tfl_rq8_apply(&rq, v), vozp, lo_z, hi_z));
            }
        }
        #endif
        if (c < n)
            for (Py_ssize_t r = 0; r < rows; r++)
                sprat_tfl_requant_row(t + r * ldt + c, n - c, mult + c, shift + c,
                                      bias != NULL ? bias + c : NULL, ozp, lo, hi,
                                      y + r * ldy + c);
    }
    #if defined(__AVX2__)

    /* 16 channels' (x - xz) as int16 from the first nb (<= 16) bytes at p (a channel
       block's tail: never read past the map; the lanes past nb multiply zero weights) */
    static inline __attribute__((always_inline)) __m256i tfl_dw_load16(
            const unsigned char *p, Py_ssize_t nb, int is_signed, __m256i vxz) {
        __m128i v;
        if (nb == 16) {
            v = _mm_loadu_si128((const __m128i *)p);
        } else if (nb == 8) {
            v = _mm_loadl_epi64((const __m128i *)p);
        } else {
            unsigned char tmp[16] = {0};
            memcpy(tmp, p, (size_t)nb);
            v = _mm_loadu_si128((const __m128i *)tmp);
        }
        return _mm256_sub_epi16(is_signed ? _mm256_cvtepi8_epi16(v) : _mm256_cvtepu8_epi16(v),
                                vxz);
    }

    /* One input row (the bytes of its W pixels of C channels) as the pair buffer of the AVX2
       depthwise below: for channel group g (8 channels) and position q (padded column
       q * qstep - pw), 16 int16, channel l's (x - xz) at that column and dw columns right of
       it interleaved (vpmaddwd's operand order); zeros for columns in the padding. First the
       row's (x - xz) as int16 in ``line`` (NL positions of C16 = 16 * ceil(C / 16) values,
       the padding's zeros included: each pixel converted once), then the pairs, 16 channels
       a step: the two groups' halves out of one vpunpck{l,h}wd pair */
    static inline __attribute__((always_inline)) void tfl_dw_pairs_row(
            const unsigned char *xr, int is_signed, int32_t xz, Py_ssize_t W, Py_ssize_t C,
            Py_ssize_t G, Py_ssize_t NQs, int qstep, int dw, int pw, int16_t *line,
            int16_t *b) {
        const __m256i vxz = _mm256_set1_epi16((short)xz);
        Py_ssize_t C16 = (C + 15) / 16 * 16, NL = (NQs - 1) * qstep + dw + 1;
        Py_ssize_t pa = pw < NL ? pw : NL, pb = pw + W < NL ? pw + W : NL;
        if (pa > 0) memset(line, 0, (size_t)(pa * C16) * sizeof(int16_t));
        if (pb < NL) memset(line + pb * C16, 0, (size_t)((NL - pb) * C16) * sizeof(int16_t));
        if (C <= 16) {
            /* NOTE: one block of channels (the first layers' 8 or 16): no inner loops, whose
               per-pixel overhead was most of a C = 8 row's cost */
            for (Py_ssize_t pos = pa; pos < pb; pos++)
                _mm256_storeu_si256((__m256i *)(line + pos * 16),
                                    tfl_dw_load16(xr + (pos - pw) * C, C, is_signed, vxz));
            for (Py_ssize_t q = 0; q < NQs; q++) {
                const int16_t *l0 = line + q * qstep * 16;
                __m256i a = _mm256_loadu_si256((const __m256i *)l0);
                __m256i d = _mm256_loadu_si256((const __m256i *)(l0 + dw * 16));
                __m256i lo = _mm256_unpacklo_epi16(a, d), hi = _mm256_unpackhi_epi16(a, d);
                _mm256_storeu_si256((__m256i *)(b + q * 16), _mm256_permute2x128_si256(lo, hi, 0x20));
                if (G > 1)
                    _mm256_storeu_si256((__m256i *)(b + (NQs + q) * 16),
                                        _mm256_permute2x128_si256(lo, hi, 0x31));
            }
            return;
        }
        for (Py_ssize_t pos = pa; pos < pb; pos++) {
            const unsigned char *s = xr + (pos - pw) * C;
            int16_t *o = line + pos * C16;
            for (Py_ssize_t c = 0; c < C; c += 16)
                _mm256_storeu_si256((__m256i *)(o + c),
                                    tfl_dw_load16(s + c, C - c < 16 ? C - c : 16, is_signed, vxz));
        }
        for (Py_ssize_t q = 0; q < NQs; q++) {
            const int16_t *l0 = line + q * qstep * C16, *l1 = l0 + dw * C16;
            for (Py_ssize_t c = 0; c < C; c += 16) {
                Py_ssize_t g = c / 8;
                __m256i a = _mm256_loadu_si256((const __m256i *)(l0 + c));
                __m256i d = _mm256_loadu_si256((const __m256i *)(l1 + c));
                __m256i lo = _mm256_unpacklo_epi16(a, d), hi = _mm256_unpackhi_epi16(a, d);
                _mm256_storeu_si256((__m256i *)(b + (g * NQs + q) * 16),
                                    _mm256_permute2x128_si256(lo, hi, 0x20));
                if (g + 1 < G)
                    _mm256_storeu_si256((__m256i *)(b + ((g + 1) * NQs + q) * 16),
                                        _mm256_permute2x128_si256(lo, hi, 0x31));
            }
        }
    }

    /* The AVX2 depthwise: every tap through vpmaddwd. Each input row is converted once to
       its pair buffer (tfl_dw_pairs_row; a ring of R = (kh - 1) * dh + 1 of them in buf,
       tagged with the row they hold, so a row serves the kh output rows that read it); a
       row's odd last tap is paired with a zero weight. Per output row and group of 8
       channels (weights wq: (kh, T, G, 16) int16, T = ceil(kw / 2) pairs per row, the
       group's requantisation constants prepared once), 4 output pixels at a time share each
       weight load. Sums as the scalar path (int32, wrapping), the same bits */
    static void tfl_dw_avx2(const unsigned char *x, int is_signed, int32_t xz,
                            const int16_t *wq, Py_ssize_t H, Py_ssize_t W, Py_ssize_t C,
                            Py_ssize_t OH, Py_ssize_t OW, int kh, int kw, int sh, int sw,
                            int dh, int dw, int ph, int pw, const int32_t *bias,
                            const int32_t *mult, const int32_t *shift, int32_t ozp, int32_t lo,
                            int32_t hi, unsigned char *y, Py_ssize_t r0, Py_ssize_t r1,
                            int16_t *buf) {
        Py_ssize_t G = (C + 7) / 8, T = (kw + 1) / 2;
        int qstep = (2 * dw) % sw == 0 ? sw : 1;
        Py_ssize_t ostep = sw / qstep, tstep = 2 * dw / qstep;
        Py_ssize_t NQs = ((OW - 1) * sw + (2 * T - 2) * dw) / qstep + 1;
        Py_ssize_t R = (Py_ssize_t)(kh - 1) * dh + 1, S = G * NQs * 16;  /* tfl_dw_ring_size */
        int16_t *line = buf + R * S;
        Py_ssize_t tag[R];
        const int16_t *rows[kh];
        for (Py_ssize_t k = 0; k < R; k++) tag[k] = -1;
        const __m256i vozp = _mm256_set1_epi32(ozp);
        const __m256i lo_z = _mm256_set1_epi32(lo - ozp), hi_z = _mm256_set1_epi32(hi - ozp);
        for (Py_ssize_t r = r0; r < r1; r++) {
            Py_ssize_t n = r / OH, oy = r % OH;
            int i0 = 0, i1 = kh;
            while (i0 < kh && oy * sh - ph + i0 * dh < 0) i0++;
            while (i1 > i0 && oy * sh - ph + (i1 - 1) * dh >= H) i1--;
            for (int i = i0; i < i1; i++) {
                Py_ssize_t iy = oy * sh - ph + (Py_ssize_t)i * dh, key = n * H + iy;
                int16_t *b = buf + (iy % R) * S;
                if (tag[iy % R] != key) {
                    if (is_signed)
                        tfl_dw_pairs_row(x + key * W * C, 1, xz, W, C, G, NQs, qstep, dw, pw,
                                         line, b);
                    else
                        tfl_dw_pairs_row(x + key * W * C, 0, xz, W, C, G, NQs, qstep, dw, pw,
                                         line, b);
                    tag[iy % R] = key;
                }
                rows[i] = b;
            }
            unsigned char *yr = y + r * OW * C;
            for (Py_ssize_t g = 0; g < G; g++) {
                tfl_rq8 rq = tfl_rq8_load(mult + g * 8, shift + g * 8);
                const __m256i vb = _mm256_loadu_si256((const __m256i *)(bias + g * 8));
                Py_ssize_t nb = C - g * 8 < 8 ? C - g * 8 : 8;
                const int16_t *wg = wq + g * 16;
                Py_ssize_t ox = 0;
                /* NOTE: 4 output pixels a step share each weight load */
                for (; ox + 4 <= OW; ox += 4) {
                    __m256i a0 = vb, a1 = vb, a2 = vb, a3 = vb;
                    for (int i = i0; i < i1; i++) {
                        const int16_t *rp = rows[i] + (g * NQs + ox * ostep) * 16;
                        for (Py_ssize_t t = 0; t < T; t++) {
                            __m256i wv = _mm256_loadu_si256((const __m256i *)(wg + (i * T + t) * G * 16));
                            const int16_t *tp = rp + t * tstep * 16;
                            a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)tp), wv));
                            a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(tp + ostep * 16)), wv));
                            a2 = _mm256_add_epi32(a2, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(tp + 2 * ostep * 16)), wv));
                            a3 = _mm256_add_epi32(a3, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(tp + 3 * ostep * 16)), wv));
                        }
                    }
                    unsigned char *yo = yr + ox * C + g * 8;
                    __m128i o0 = tfl_bytes8(tfl_rq8_apply(&rq, a0), vozp, lo_z, hi_z);
                    __m128i o1 = tfl_bytes8(tfl_rq8_apply(&rq, a1), vozp, lo_z, hi_z);
                    __m128i o2 = tfl_bytes8(tfl_rq8_apply(&rq, a2), vozp, lo_z, hi_z);
                    __m128i o3 = tfl_bytes8(tfl_rq8_apply(&rq, a3), vozp, lo_z, hi_z);
                    if (nb == 8) {
                        _mm_storel_epi64((__m128i *)yo, o0);
                        _mm_storel_epi64((__m128i *)(yo + C), o1);
                        _mm_storel_epi64((__m128i *)(yo + 2 * C), o2);
                        _mm_storel_epi64((__m128i *)(yo + 3 * C), o3);
                    } else {
                        tfl_store_tail(yo, o0, nb);
                        tfl_store_tail(yo + C, o1, nb);
                        tfl_store_tail(yo + 2 * C, o2, nb);
                        tfl_store_tail(yo + 3 * C, o3, nb);
                    }
                }
                for (; ox < OW; ox++) {
                    __m256i a0 = vb;
                    for (int i = i0; i < i1; i++) {
                        const int16_t *rp = rows[i] + (g * NQs + ox * ostep) * 16;
                        for (Py_ssize_t t = 0; t < T; t++)
                            a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(
                                _mm256_loadu_si256((const __m256i *)(rp + t * tstep * 16)),
                                _mm256_loadu_si256((const __m256i *)(wg + (i * T + t) * G * 16))));
                    }
                    __m128i o0 = tfl_bytes8(tfl_rq8_apply(&rq, a0), vozp, lo_z, hi_z);
                    unsigned char *yo = yr + ox * C + g * 8;
                    if (nb == 8) _mm_storel_epi64((__m128i *)yo, o0);
                    else tfl_store_tail(yo, o0, nb);
                }
            }
        }
    }
    #endif


    /* rows [r0, r1) of the depthwise conv: tfl_dw_avx2 (wq, buf) on the AVX2 build,
       tfl_dw_scalar (w) on the baseline one */
    static void sprat_tfl_depthwise(const unsigned char *x, int is_signed, int32_t xz,
                                    const int32_t *w, const int16_t *wq, Py_ssize_t H,
                                    Py_ssize_t W, Py_ssize_t C, Py_ssize_t OH, Py_ssize_t OW,
                                    int kh, int kw, int sh, int sw, int dh, int dw, int ph,
                                    int pw, const int32_t *bias, const int32_t *mult,
                                    const int32_t *shift, int32_t ozp, int32_t lo, int32_t hi,
                                    unsigned char *y, Py_ssize_t r0, Py_ssize_t r1,
                                    int16_t *buf) {
    #if defined(__AVX2__)
        tfl_dw_avx2(x, is_signed, xz, wq, H, W, C, OH, OW, kh, kw, sh, sw, dh, dw, ph, pw, bias,
                    mult, shift, ozp, lo, hi, y, r0, r1, buf);
    #else
        tfl_dw_scalar(x, is_signed, xz, w, H, W, C, OH, OW, kh, kw, sh, sw, dh, dw, ph, pw, bias,
                      mult, shift, ozp, lo, hi, y, r0, r1);
    #endif
    }

    #if defined(__AVX2__)
    /* An ADD / SUB input's rescale MBQM((v << L), m, s) in 32-bit lanes, for |v| <= 255 and
       8 <= L' = L + max(s, 0) <= 23: the doubling high multiply of v * 2^L' by m is
       floor((v * m + 2^(k-1)) / 2^k), k = 31 - L' (gemmlowp's nudge as in tfl_mbqm8, both
       terms divided by 2^L'); with m = mh * 2^k + ml (0 <= ml < 2^k) that is v * mh +
       ((v * ml + 2^(k-1)) >> k), every term within int32 (|v * mh| <= 255 * 2^L' < 2^31,
       |v * ml| + 2^(k-1) < 255 * 2^23 + 2^22 < 2^31), and no INT32_MIN * INT32_MIN (|v << L'|
       < 2^31). Then RoundingDivideByPOT by max(-s, 0). Two vpmulld instead of tfl_mbqm8's
       64-bit products and their recombination */
    typedef struct {
        __m256i mh, ml, half, mask, thr;
        __m128i k, right;
    } tfl_in8;

    static inline tfl_in8 tfl_in8_prep(int32_t m, int32_t s, int L) {
        tfl_in8 c;
        int lp = L + (s > 0 ? s : 0), k = 31 - lp, right = s > 0 ? 0 : -s;
        c.mh = _mm256_set1_epi32((int32_t)((int64_t)m >> k));
        c.ml = _mm256_set1_epi32((int32_t)((int64_t)m & (((int64_t)1 << k) - 1)));
        c.half = _mm256_set1_epi32((int32_t)1 << (k - 1));
        c.k = _mm_cvtsi32_si128(k);
        int32_t mask = (int32_t)(((int64_t)1 << right) - 1);
        c.mask = _mm256_set1_epi32(mask);
        c.thr = _mm256_set1_epi32(mask >> 1);
        c.right = _mm_cvtsi32_si128(right);
        return c;
    }

    static inline __m256i tfl_in8_apply(const tfl_in8 *c, __m256i v) {
        __m256i h = _mm256_add_epi32(_mm256_mullo_epi32(v, c->mh), _mm256_sra_epi32(
            _mm256_add_epi32(_mm256_mullo_epi32(v, c->ml), c->half), c->k));
        __m256i threshold = _mm256_sub_epi32(c->thr, _mm256_cmpgt_epi32(_mm256_setzero_si256(), h));
        __m256i up = _mm256_cmpgt_epi32(_mm256_and_si256(h, c->mask), threshold);
        return _mm256_sub_epi32(_mm256_sra_epi32(h, c->right), up);
    }

    /* whether tfl_in8 holds for an input of dtype kind (1 int8, 2 uint8), zero point zp */
    static inline int tfl_in8_ok(int kind, int32_t zp, int32_t s, int32_t L) {
        int64_t vmin = (kind == 1 ? -128 : 0) - (int64_t)zp, vmax = (kind == 1 ? 127 : 255) - (int64_t)zp;
        int64_t lp = (int64_t)L + (s > 0 ? s : 0);
        return vmin >= -255 && vmax <= 255 && L >= 0 && lp >= 8 && lp <= 23 && s >= -31;
    }

    /* ADD (op 0) / SUB (1) of equal shapes, elements [i, i1) in steps of 16 (returns where
       it stopped): both inputs through tfl_in8, the sum through tfl_rq8 (the output's
       multiplier), 16 bytes packed and stored at once */
    static Py_ssize_t tfl_addsub16(int op, const unsigned char *a, const unsigned char *b,
                                   int kind, unsigned char *y, Py_ssize_t i, Py_ssize_t i1,
                                   const int32_t *p) {
        int32_t mv[8], sv[8];
        for (int l = 0; l < 8; l++) { mv[l] = p[7]; sv[l] = p[8]; }
        tfl_rq8 rq = tfl_rq8_load(mv, sv);
        tfl_in8 ca = tfl_in8_prep(p[1], p[2], p[6]), cb = tfl_in8_prep(p[4], p[5], p[6]);
        const __m256i azp = _mm256_set1_epi32(p[0]), bzp = _mm256_set1_epi32(p[3]);
        const __m256i ozp = _mm256_set1_epi32(p[9]);
        const __m256i lo_z = _mm256_set1_epi32(p[10] - p[9]), hi_z = _mm256_set1_epi32(p[11] - p[9]);
        for (; i + 16 <= i1; i += 16) {
            __m128i a16 = _mm_loadu_si128((const __m128i *)(a + i));
            __m128i b16 = _mm_loadu_si128((const __m128i *)(b + i));
            __m256i r[2];
            for (int h = 0; h < 2; h++) {
                __m128i a8 = h ? _mm_unpackhi_epi64(a16, a16) : a16;
                __m128i b8 = h ? _mm_unpackhi_epi64(b16, b16) : b16;
                __m256i av = _mm256_sub_epi32(kind == 1 ? _mm256_cvtepi8_epi32(a8)
                                                        : _mm256_cvtepu8_epi32(a8), azp);
                __m256i bv = _mm256_sub_epi32(kind == 1 ? _mm256_cvtepi8_epi32(b8)
                                                        : _mm256_cvtepu8_epi32(b8), bzp);
                __m256i u = tfl_in8_apply(&ca, av), w = tfl_in8_apply(&cb, bv);
                __m256i t = op == 0 ? _mm256_add_epi32(u, w) : _mm256_sub_epi32(u, w);
                r[h] = _mm256_add_epi32(_mm256_min_epi32(_mm256_max_epi32(
                    tfl_rq8_apply(&rq, t), lo_z), hi_z), ozp);
            }
            /* int32 -> int16 (exact: clamped to 8 bits) -> bytes, lanes back in order */
            __m256i w16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(r[0], r[1]), 0xD8);
            __m256i w8 = kind == 1 ? _mm256_packs_epi16(w16, w16) : _mm256_packus_epi16(w16, w16);
            _mm_storeu_si128((__m128i *)(y + i),
                             _mm256_castsi256_si128(_mm256_permute4x64_epi64(w8, 0x08)));
        }
        return i;
    }
    #endif

    /* op 0 ADD, 1 SUB (reference/integer_ops/add.h, sub.h), 2 MUL (mul.h); a[i * sa],
       b[i * sb] for i in [i0, i1); p: a_zp, a_mult, a_shift, b_zp, b_mult, b_shift,
       left_shift, mult, shift, out_zp, qmin, qmax */
    static void sprat_tfl_binary(int op, const unsigned char *a, Py_ssize_t sa,
                                 const unsigned char *b, Py_ssize_t sb, int kind,
                                 unsigned char *y, Py_ssize_t i0, Py_ssize_t i1,
                                 const int32_t *p) {
        Py_ssize_t i = i0;
        #if defined(__AVX2__)
        if (sa == 1 && sb == 1 && op != 2 && tfl_in8_ok(kind, p[0], p[2], p[6])
                && tfl_in8_ok(kind, p[3], p[5], p[6]))
            i = tfl_addsub16(op, a, b, kind, y, i, i1, p);
        if (sa == 1 && sb == 1) {
            __m256i azp = _mm256_set1_epi32(p[0]), bzp = _mm256_set1_epi32(p[3]);
            __m256i am = _mm256_set1_epi32(p[1]), ash = _mm256_set1_epi32(p[2]);
            __m256i bm = _mm256_set1_epi32(p[4]), bsh = _mm256_set1_epi32(p[5]);
            __m256i m = _mm256_set1_epi32(p[7]), sh = _mm256_set1_epi32(p[8]);
            __m256i ozp = _mm256_set1_epi32(p[9]), lo = _mm256_set1_epi32(p[10]);
            __m256i hi = _mm256_set1_epi32(p[11]);
            __m128i left = _mm_cvtsi32_si128(p[6]);
            for (; i + 8 <= i1; i += 8) {
                __m128i a8 = _mm_loadl_epi64((const __m128i *)(a + i));
                __m128i b8 = _mm_loadl_epi64((const __m128i *)(b + i));
                __m256i av = _mm256_sub_epi32(kind == 1 ? _mm256_cvtepi8_epi32(a8)
                                                        : _mm256_cvtepu8_epi32(a8), azp);
                __m256i bv = _mm256_sub_epi32(kind == 1 ? _mm256_cvtepi8_epi32(b8)
                                                        : _mm256_cvtepu8_epi32(b8), bzp);
                __m256i t;
                if (op == 2) {
                    t = _mm256_mullo_epi32(av, bv);
                } else {
                    __m256i u = tfl_mbqm8(_mm256_sll_epi32(av, left), am, ash);
                    __m256i w = tfl_mbqm8(_mm256_sll_epi32(bv, left), bm, bsh);
                    t = op == 0 ? _mm256_add_epi32(u, w) : _mm256_sub_epi32(u, w);
                }
                tfl_store8(y + i, tfl_mbqm8(t, m, sh), ozp, lo, hi);
            }
        }
        #endif
        for (; i < i1; i++) {
            int64_t av = tfl_load(a, kind, i * sa) - p[0], bv = tfl_load(b, kind, i * sb) - p[3];
            int64_t t;
            if (op == 2) {
                t = av * bv;
            } else {
                int64_t u = tfl_mbqm(tfl_wrap32(tfl_shl(av, p[6])), p[1], p[2]);
                int64_t w = tfl_mbqm(tfl_wrap32(tfl_shl(bv, p[6])), p[4], p[5]);
                t = op == 0 ? u + w : u - w;
            }
            y[i] = tfl_clamp((int64_t)tfl_mbqm(tfl_wrap32(t), p[7], p[8]) + p[9], p[10], p[11]);
        }
    }

    /* gemmlowp exp on [-1/4, 0), Q0.31 */
    static int32_t tfl_exp_interval(int32_t a) {
        const int32_t constant_term = 1895147668, one_third = 715827883;
        int32_t x = tfl_wrap32((int64_t)a + (1 << 28));
        int32_t x2 = tfl_srdhm(x, x), x3 = tfl_srdhm(x2, x), x4 = tfl_srdhm(x2, x2);
        int32_t x4_over_4 = tfl_satpot(x4, -2);
        int32_t poly = tfl_satpot(tfl_wrap32((int64_t)tfl_srdhm(
            tfl_wrap32((int64_t)x4_over_4 + x3), one_third) + x2), -1);
        return tfl_wrap32((int64_t)constant_term
                          + tfl_srdhm(constant_term, tfl_wrap32((int64_t)x + poly)));
    }

    /* gemmlowp exp_on_negative_values for Q5.26 a <= 0; Q0.31 out */
    static int32_t tfl_exp_negative(int32_t a) {
        static const int32_t barrel[7][2] = {{-2, 1672461947}, {-1, 1302514674},
            {0, 790015084}, {1, 290630308}, {2, 39332535}, {3, 720401}, {4, 242}};
        const int32_t one_quarter = 1 << 24, mask = one_quarter - 1;
        int32_t a_mod = tfl_wrap32((int64_t)(a & mask) - one_quarter);
        int32_t result = tfl_exp_interval(tfl_satpot(a_mod, 5));
        int32_t remainder = tfl_wrap32((int64_t)a_mod - a);
        for (int k = 0; k < 7; k++)
            if (remainder & ((int32_t)1 << (26 + barrel[k][0])))
                result = tfl_srdhm(result, barrel[k][1]);
        return a == 0 ? INT32_MAX : result;
    }

    /* gemmlowp one_over_one_plus_x_for_x_in_0_1, Q0.31 */
    static int32_t tfl_one_over_one_plus_x(int32_t a) {
        int64_t s = (int64_t)a + INT32_MAX;
        int32_t half = (int32_t)(s >= 0 ? (s + 1) / 2 : -((-s + 1) / 2));
        int32_t x = tfl_wrap32((int64_t)1515870810 + tfl_srdhm(half, -1010580540));
        for (int k = 0; k < 3; k++) {
            int32_t one_minus = tfl_wrap32(((int64_t)1 << 29) - tfl_srdhm(half, x));
            x = tfl_wrap32((int64_t)x + tfl_satpot(tfl_srdhm(x, one_minus), 2));
        }
        return tfl_satpot(x, 1);
    }

    /* rows [r0, r1) of L values (reference/softmax.h, 8-bit in and out); e: L int32 scratch */
    static void sprat_tfl_softmax(const unsigned char *x, int kind, unsigned char *y,
                                  Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t L, int32_t mult,
                                  int left_shift, int32_t diff_min, int32_t *e) {
        int32_t lo = kind == 1 ? -128 : 0, hi = kind == 1 ? 127 : 255;
        for (Py_ssize_t r = r0; r < r1; r++) {
            Py_ssize_t base = r * L;
            int64_t mx = tfl_load(x, kind, base);
            for (Py_ssize_t i = 1; i < L; i++) {
                int64_t v = tfl_load(x, kind, base + i);
                if (v > mx) mx = v;
            }
            int64_t sum = 0;
            for (Py_ssize_t i = 0; i < L; i++) {
                int64_t diff = tfl_load(x, kind, base + i) - mx;
                e[i] = diff >= diff_min
                    ? tfl_exp_negative(tfl_srdhm(tfl_wrap32(tfl_shl(diff, left_shift)), mult)) : 0;
                sum += tfl_satpot(e[i], -12);
            }
            uint32_t us = (uint32_t)tfl_wrap32(sum);
            int clz = us ? __builtin_clz(us) : 32;
            int32_t scale = tfl_one_over_one_plus_x(
                tfl_wrap32((int64_t)(((uint64_t)us << clz) & 0xFFFFFFFFu) - ((int64_t)1 << 31)));
            int exponent = (12 - clz) + 31 - 8;
            for (Py_ssize_t i = 0; i < L; i++) {
                int64_t diff = tfl_load(x, kind, base + i) - mx;
                y[base + i] = diff >= diff_min
                    ? tfl_clamp(tfl_rdbpot(tfl_srdhm(scale, e[i]), exponent) + lo, lo, hi)
                    : (unsigned char)lo;
            }
        }
    }

    /* Exact Winograd F(2x2, 3x3) of TFLite's quantized CONV_2D (3x3, stride 1, dilation 1,
       one group) for tile rows [t0, t1) of the output (a tile row: two output rows of one
       image; TW = ceil(OW / 2) tiles across), on the int16 products of sprat_i8_tile:
       - per tile the 4x4 patch d = x - xz (0 in the padding) goes to V = B^T d B, 16 int16
         values per channel (|V| <= 4 * 255), stored per position xi as rows of C int16
         (vbuf: 16 x TW x C);
       - per position the product M_xi = V_xi U_xi with U = G' w G'^T (G' = 2G, integers,
         packed by the caller as 16-column panels of k-pairs, ``u``: 16 x npan x C/2 x 32),
         int32 (mbuf: 16 x npan x TWp x 16, TWp = TW rounded up to 6);
       - per tile Y = A^T M A, 2x2 outputs = 4 x the conv's sums exactly (both transforms
         scaled G by 2), shifted right by 2 into the rows of ``sums`` (2 x OW x M int32),
         requantised by sprat_tfl_requant_block into y.
       Every operation is a ring operation on int32 (wrapping), so the result is the exact sum
       whenever 4 x the conv's sums fit int32 (the caller checks); the bits equal the GEMM
       path's. C a multiple of 16 (the caller's condition). */
    static void sprat_tfl_wino_rows(const unsigned char *x, int is_signed, int32_t xz,
                                    const int16_t *u, Py_ssize_t N, Py_ssize_t H, Py_ssize_t W,
                                    Py_ssize_t C, Py_ssize_t M, Py_ssize_t OH, Py_ssize_t OW,
                                    int ph, int pw, const int32_t *bias, const int32_t *mult,
                                    const int32_t *shift, int32_t ozp, int32_t lo, int32_t hi,
                                    unsigned char *y, Py_ssize_t t0, Py_ssize_t t1,
                                    int16_t *vbuf, int32_t *mbuf, int32_t *sums) {
        const Py_ssize_t TH = (OH + 1) / 2, TW = (OW + 1) / 2, TWp = (TW + 5) / 6 * 6;
        const Py_ssize_t npan = (M + 15) / 16, kp = C / 2;
        for (Py_ssize_t tr = t0; tr < t1; tr++) {
            const Py_ssize_t n = tr / TH, ty = tr % TH;
            /* input transform: per tile, per channel */
    #if defined(__AVX2__)
            const __m256i vxz = _mm256_set1_epi16((short)xz);
            for (Py_ssize_t tx = 0; tx < TW; tx++)
                for (Py_ssize_t c0 = 0; c0 < C; c0 += 16) {
                    __m256i d[4][4], t[4][4];
                    for (int i = 0; i < 4; i++) {
                        const Py_ssize_t iy = 2 * ty - ph + i;
                        for (int j = 0; j < 4; j++) {
                            const Py_ssize_t ix = 2 * tx - pw + j;
                            if (iy < 0 || iy >= H || ix < 0 || ix >= W) {
                                d[i][j] = _mm256_setzero_si256();
                                continue;
                            }
                            const __m128i b = _mm_loadu_si128((const __m128i *)(
                                x + ((n * H + iy) * W + ix) * C + c0));
                            d[i][j] = _mm256_sub_epi16(is_signed ? _mm256_cvtepi8_epi16(b)
                                                                 : _mm256_cvtepu8_epi16(b), vxz);
                        }
                    }
                    for (int j = 0; j < 4; j++) {
                        t[0][j] = _mm256_sub_epi16(d[0][j], d[2][j]);
                        t[1][j] = _mm256_add_epi16(d[1][j], d[2][j]);
                        t[2][j] = _mm256_sub_epi16(d[2][j], d[1][j]);
                        t[3][j] = _mm256_sub_epi16(d[1][j], d[3][j]);
                    }
                    const Py_ssize_t sx = TW * C;  /* the next position xi */
                    for (int i = 0; i < 4; i++) {
                        int16_t *v = vbuf + ((i * 4) * TW + tx) * C + c0;
                        _mm256_storeu_si256((__m256i *)v, _mm256_sub_epi16(t[i][0], t[i][2]));
                        _mm256_storeu_si256((__m256i *)(v + sx), _mm256_add_epi16(t[i][1], t[i][2]));
                        _mm256_storeu_si256((__m256i *)(v + 2 * sx), _mm256_sub_epi16(t[i][2], t[i][1]));
                        _mm256_storeu_si256((__m256i *)(v + 3 * sx), _mm256_sub_epi16(t[i][1], t[i][3]));
                    }
                }
    #else
            for (Py_ssize_t tx = 0; tx < TW; tx++) {
                int16_t d[4][4][16];
                for (Py_ssize_t c0 = 0; c0 < C; c0 += 16) {
                    for (int i = 0; i < 4; i++) {
                        const Py_ssize_t iy = 2 * ty - ph + i;
                        for (int j = 0; j < 4; j++) {
                            const Py_ssize_t ix = 2 * tx - pw + j;
                            if (iy < 0 || iy >= H || ix < 0 || ix >= W) {
                                for (int c = 0; c < 16; c++) d[i][j][c] = 0;
                                continue;
                            }
                            const unsigned char *p = x + ((n * H + iy) * W + ix) * C + c0;
                            if (is_signed)
                                for (int c = 0; c < 16; c++)
                                    d[i][j][c] = (int16_t)((int)(signed char)p[c] - xz);
                            else
                                for (int c = 0; c < 16; c++)
                                    d[i][j][c] = (int16_t)((int)p[c] - xz);
                        }
                    }
                    int16_t t[4][4][16];
                    for (int j = 0; j < 4; j++)
                        for (int c = 0; c < 16; c++) {
                            t[0][j][c] = (int16_t)(d[0][j][c] - d[2][j][c]);
                            t[1][j][c] = (int16_t)(d[1][j][c] + d[2][j][c]);
                            t[2][j][c] = (int16_t)(d[2][j][c] - d[1][j][c]);
                            t[3][j][c] = (int16_t)(d[1][j][c] - d[3][j][c]);
                        }
                    for (int i = 0; i < 4; i++) {
                        int16_t *v = vbuf + ((i * 4) * TW + tx) * C + c0;
                        const Py_ssize_t sx = TW * C;  /* the next position xi */
                        for (int c = 0; c < 16; c++) {
                            v[c] = (int16_t)(t[i][0][c] - t[i][2][c]);
                            v[sx + c] = (int16_t)(t[i][1][c] + t[i][2][c]);
                            v[2 * sx + c] = (int16_t)(t[i][2][c] - t[i][1][c]);
                            v[3 * sx + c] = (int16_t)(t[i][1][c] - t[i][3][c]);
                        }
                    }
                }
            }
    #endif
            /* the 16 products */
            for (int xi = 0; xi < 16; xi++) {
                const int16_t *a = vbuf + xi * TW * C;
                for (Py_ssize_t p = 0; p < npan; p++) {
                    const int16_t *b = u + (xi * npan + p) * kp * 32;
                    int32_t *mo = mbuf + (xi * npan + p) * TWp * 16;
                    for (Py_ssize_t r = 0; r < TW; r += 6) {
                        const int mr = TW - r < 6 ? (int)(TW - r) : 6;
                        sprat_i8_tile_any(a + r * C, C, b, kp, mo + r * 16, mr);
                    }
                }
            }
            /* output transform into the two rows of sums */
            const Py_ssize_t rows = 2 * ty + 1 < OH ? 2 : 1;
    #if defined(__AVX2__)
            if (M % 16 == 0) {
                const Py_ssize_t sxi = npan * TWp * 16;
                for (Py_ssize_t tx = 0; tx < TW; tx++)
                    for (Py_ssize_t p = 0; p < npan; p++)
                        for (int h8 = 0; h8 < 16; h8 += 8) {
                            const int32_t *mi = mbuf + p * TWp * 16 + tx * 16 + h8;
                            __m256i s0[4], s1[4];
                            for (int i = 0; i < 4; i++) {
                                const __m256i a0 = _mm256_loadu_si256((const __m256i *)(mi + (i * 4) * sxi));
                                const __m256i a1 = _mm256_loadu_si256((const __m256i *)(mi + (i * 4 + 1) * sxi));
                                const __m256i a2 = _mm256_loadu_si256((const __m256i *)(mi + (i * 4 + 2) * sxi));
                                const __m256i a3 = _mm256_loadu_si256((const __m256i *)(mi + (i * 4 + 3) * sxi));
                                s0[i] = _mm256_add_epi32(_mm256_add_epi32(a0, a1), a2);
                                s1[i] = _mm256_sub_epi32(_mm256_sub_epi32(a1, a2), a3);
                            }
                            const Py_ssize_t col = p * 16 + h8;
                            for (int j = 0; j < 2; j++) {
                                const Py_ssize_t ox = 2 * tx + j;
                                if (ox >= OW) continue;
                                const __m256i *sv = j ? s1 : s0;
                                const __m256i y0 = _mm256_add_epi32(_mm256_add_epi32(sv[0], sv[1]), sv[2]);
                                _mm256_storeu_si256((__m256i *)(sums + ox * M + col), _mm256_srai_epi32(y0, 2));
                                if (rows > 1) {
                                    const __m256i y1 = _mm256_sub_epi32(_mm256_sub_epi32(sv[1], sv[2]), sv[3]);
                                    _mm256_storeu_si256((__m256i *)(sums + (OW + ox) * M + col), _mm256_srai_epi32(y1, 2));
                                }
                            }
                        }
            } else
    #endif
            for (Py_ssize_t tx = 0; tx < TW; tx++)
                for (Py_ssize_t p = 0; p < npan; p++) {
                    const Py_ssize_t m0 = p * 16, mw = M - m0 < 16 ? M - m0 : 16;
                    const int32_t *mi = mbuf + p * TWp * 16 + tx * 16;
                    const Py_ssize_t sxi = npan * TWp * 16;  /* the next position xi */
                    for (Py_ssize_t c = 0; c < mw; c++) {
                        uint32_t s[4][2];
                        for (int i = 0; i < 4; i++) {
                            const uint32_t m0_ = (uint32_t)mi[(i * 4) * sxi + c];
                            const uint32_t m1_ = (uint32_t)mi[(i * 4 + 1) * sxi + c];
                            const uint32_t m2_ = (uint32_t)mi[(i * 4 + 2) * sxi + c];
                            const uint32_t m3_ = (uint32_t)mi[(i * 4 + 3) * sxi + c];
                            s[i][0] = m0_ + m1_ + m2_;
                            s[i][1] = m1_ - m2_ - m3_;
                        }
                        for (int j = 0; j < 2; j++) {
                            const int32_t y0 = (int32_t)(s[0][j] + s[1][j] + s[2][j]);
                            const int32_t y1 = (int32_t)(s[1][j] - s[2][j] - s[3][j]);
                            const Py_ssize_t ox = 2 * tx + j;
                            if (ox >= OW) continue;
                            sums[ox * M + m0 + c] = y0 >> 2;
                            if (rows > 1) sums[(OW + ox) * M + m0 + c] = y1 >> 2;
                        }
                    }
                }
            sprat_tfl_requant_block(sums, M, rows * OW, M, mult, shift, bias, ozp, lo, hi,
                                    y + ((n * OH + 2 * ty) * OW) * M, M);
        }
    }
    """
    void sprat_tfl_requantize(const unsigned char* x, int kind, unsigned char* y, idx r0,
                              idx r1, idx C, const int* mult, const int* shift, const int* bias,
                              int izp, int ozp, int lo, int hi) nogil
    void sprat_tfl_requant_row(const int* t, idx n, const int* mult, const int* shift,
                               const int* bias, int ozp, int lo, int hi,
                               unsigned char* y) nogil
    void sprat_tfl_requant_block(const int* t, idx ldt, idx rows, idx n, const int* mult,
                                 const int* shift, const int* bias, int ozp, int lo, int hi,
                                 unsigned char* y, idx ldy) nogil
    void sprat_tfl_wino_rows(const unsigned char* x, int is_signed, int xz, const short* u,
                             idx N, idx H, idx W, idx C, idx M, idx OH, idx OW, int ph, int pw,
                             const int* bias, const int* mult, const int* shift, int ozp,
                             int lo, int hi, unsigned char* y, idx t0, idx t1, short* vbuf,
                             int* mbuf, int* sums) nogil
    void sprat_tfl_rescale(const int* x, unsigned char* y, idx r0, idx r1, idx C,
                           const double* scale, const int* bias, int ozp, int lo, int hi) nogil
    void sprat_tfl_pool(int avg, const unsigned char* x, int kind, unsigned char* y, idx q0,
                        idx q1, idx H, idx W, idx C, idx OH, idx OW, int kh, int kw, int sh,
                        int sw, int top, int left, int lo, int hi) nogil
    idx tfl_dw_ring_size(idx C, idx OW, int kh, int kw, int sw, int dh, int dw) nogil
    void sprat_tfl_depthwise(const unsigned char* x, int is_signed, int xz, const int* w,
                             const short* wq, idx H, idx W, idx C, idx OH, idx OW, int kh,
                             int kw, int sh, int sw, int dh, int dw, int ph, int pw,
                             const int* bias, const int* mult, const int* shift, int ozp,
                             int lo, int hi, unsigned char* y, idx r0, idx r1,
                             short* buf) nogil
    void sprat_tfl_binary(int op, const unsigned char* a, idx sa, const unsigned char* b,
                          idx sb, int kind, unsigned char* y, idx i0, idx i1,
                          const int* p) nogil
    void sprat_tfl_softmax(const unsigned char* x, int kind, unsigned char* y, idx r0, idx r1,
                           idx L, int mult, int left_shift, int diff_min, int* e) nogil


def tfl_requantize(int nt, const unsigned char[::1] x, int kind, unsigned char[::1] y,
                   idx rows, idx C, const int[::1] mult, const int[::1] shift,
                   const int[::1] bias, int izp, int ozp, int lo, int hi):
    """TFLite's requantisation (``ops_tflite.tfl_requantize``) of ``rows`` x ``C`` values:
    ``y = clamp(MBQM(x - izp + bias[c], mult[c], shift[c]) + ozp, lo, hi)``. ``x``: the bytes
    of an int32 (``kind`` 0), int8 (1) or uint8 (2) tensor; ``y``: the bytes of an int8/uint8
    one; ``mult``, ``shift``, ``bias``: C int32 each. Raises ValueError on short operands."""
    cdef idx n = rows * C
    cdef idx size = 4 if kind == 0 else 1
    if x.shape[0] < n * size or y.shape[0] < n or mult.shape[0] < C or shift.shape[0] < C \
            or bias.shape[0] < C:
        raise ValueError("tfl_requantize: operands too short")
    if n == 0:
        return
    cdef int t
    if nt <= 1:
        with nogil:
            sprat_tfl_requantize(&x[0], kind, &y[0], 0, rows, C, &mult[0], &shift[0], &bias[0],
                                 izp, ozp, lo, hi)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        sprat_tfl_requantize(&x[0], kind, &y[0], t * rows // nt, (t + 1) * rows // nt, C,
                             &mult[0], &shift[0], &bias[0], izp, ozp, lo, hi)


def tfl_rescale(int nt, const int[::1] x, unsigned char[::1] y, idx rows, idx C,
                const double[::1] scale, const int[::1] bias, int ozp, int lo, int hi):
    """The float requantisation of LiteRT's reference FULLY_CONNECTED (``ops_tflite.
    tfl_rescale``) of ``rows`` x ``C`` int32 values: ``y = clamp(round_half_away(double(x +
    bias[c]) * scale[c]) + ozp, lo, hi)``, ``y`` the bytes of an int8/uint8 tensor. Raises
    ValueError on short operands."""
    if x.shape[0] < rows * C or y.shape[0] < rows * C or scale.shape[0] < C \
            or bias.shape[0] < C:
        raise ValueError("tfl_rescale: operands too short")
    if rows * C == 0:
        return
    cdef int t
    if nt <= 1:
        with nogil:
            sprat_tfl_rescale(&x[0], &y[0], 0, rows, C, &scale[0], &bias[0], ozp, lo, hi)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        sprat_tfl_rescale(&x[0], &y[0], t * rows // nt, (t + 1) * rows // nt, C, &scale[0],
                          &bias[0], ozp, lo, hi)


def tfl_pool(int nt, bint avg, const unsigned char[::1] x, int kind, unsigned char[::1] y,
             idx N, idx H, idx W, idx C, idx OH, idx OW, int kh, int kw, int sh, int sw,
             int top, int left, int lo, int hi):
    """TFLite's quantized AVERAGE_POOL_2D (``avg``) or MAX_POOL_2D over NHWC int8 (``kind``
    1) / uint8 (2) bytes ``x`` (N, H, W, C) into ``y`` (N, OH, OW, C) (``ops_tflite.
    tfl_average_pool_2d`` / ``tfl_max_pool_2d``); ``top``/``left``: the padding before the
    first row/column. Raises ValueError on short operands or a window that misses the image."""
    if x.shape[0] < N * H * W * C or y.shape[0] < N * OH * OW * C:
        raise ValueError("tfl_pool: operands too short")
    if (OH - 1) * sh - top >= H or (OW - 1) * sw - left >= W or top >= kh or left >= kw:
        raise ValueError("tfl_pool: a window lies outside the image")
    if N * OH * OW * C == 0:
        return
    cdef int t
    cdef idx rows = N * OH
    if nt <= 1:
        with nogil:
            sprat_tfl_pool(avg, &x[0], kind, &y[0], 0, rows, H, W, C, OH, OW, kh, kw, sh, sw,
                           top, left, lo, hi)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        sprat_tfl_pool(avg, &x[0], kind, &y[0], t * rows // nt, (t + 1) * rows // nt, H, W, C,
                       OH, OW, kh, kw, sh, sw, top, left, lo, hi)


# NOTE: a depthwise conv's or an ADD's call parsed ~8 memoryviews among 28 arguments per run
# (~1 us, as much as the work of the small ones); their kernels bind the checked arguments
# once per binding of their arrays into these call objects (as ``I8GemmCall``)
cdef struct tfl_dw_t:
    const unsigned char* x
    int is_signed, xz
    const int* w
    const short* wq
    idx H, W, C, OH, OW
    int kh, kw, sh, sw, dh, dw, ph, pw
    const int* bias
    const int* mult
    const int* shift
    int ozp, lo, hi
    unsigned char* y
    idx rows
    int nt
    short* buf
    idx pitch


cdef inline void _tfl_dw_exec(const tfl_dw_t* a, idx r0, idx r1, short* buf) noexcept nogil:
    sprat_tfl_depthwise(a.x, a.is_signed, a.xz, a.w, a.wq, a.H, a.W, a.C, a.OH, a.OW, a.kh,
                        a.kw, a.sh, a.sw, a.dh, a.dw, a.ph, a.pw, a.bias, a.mult, a.shift, a.ozp,
                        a.lo, a.hi, a.y, r0, r1, buf)


cdef _tfl_dw_run(const tfl_dw_t* a):
    """A bound depthwise call: its output rows split over its slots."""
    cdef int t, nt = a.nt
    cdef idx rows = a.rows
    if rows == 0:
        return
    if nt <= 1:
        with nogil:
            _tfl_dw_exec(a, 0, rows, a.buf)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        _tfl_dw_exec(a, t * rows // nt, (t + 1) * rows // nt, a.buf + t * a.pitch)


cdef class TflDepthwiseCall:
    """One ``tfl_depthwise`` call with its arguments checked and bound once:
    ``TflDepthwiseCall(args)`` (``tfl_depthwise``'s argument tuple, kept alive here), then
    ``call()`` runs it. Raises as ``tfl_depthwise``."""
    cdef tfl_dw_t a
    cdef readonly tuple args

    def __init__(self, tuple args):
        self.args = args
        tfl_depthwise(*args, into=self)

    def __call__(self):
        _tfl_dw_run(&self.a)


cdef struct tfl_bin_t:
    int op
    const unsigned char* a
    idx sa
    const unsigned char* b
    idx sb
    int kind
    unsigned char* y
    idx n
    const int* p
    int nt


cdef _tfl_bin_run(const tfl_bin_t* a):
    """A bound elementwise call: its outputs split over its slots."""
    cdef int t, nt = a.nt
    cdef idx n = a.n
    if n == 0:
        return
    if nt <= 1:
        with nogil:
            sprat_tfl_binary(a.op, a.a, a.sa, a.b, a.sb, a.kind, a.y, 0, n, a.p)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        sprat_tfl_binary(a.op, a.a, a.sa, a.b, a.sb, a.kind, a.y, t * n // nt,
                         (t + 1) * n // nt, a.p)


cdef class TflBinaryCall:
    """One ``tfl_binary`` call with its arguments checked and bound once:
    ``TflBinaryCall(args)`` (``tfl_binary``'s argument tuple, kept alive here), then ``call()``
    runs it. Raises as ``tfl_binary``."""
    cdef tfl_bin_t a
    cdef readonly tuple args

    def __init__(self, tuple args):
        self.args = args
        tfl_binary(*args, into=self)

    def __call__(self):
        _tfl_bin_run(&self.a)


def tfl_winograd_scratch(idx C, idx M, idx OW):
    """(int16 values, int32 values) per work slot of ``tfl_winograd``: its V rows, then its
    products and two rows of sums."""
    cdef idx tw = (OW + 1) // 2, twp = (tw + 5) // 6 * 6, npan = (M + 15) // 16
    return 16 * tw * C, 16 * npan * twp * 16 + 2 * OW * M


def tfl_winograd(int nt, const unsigned char[::1] x, bint is_signed, int xz,
                 const short[::1] u, idx N, idx H, idx W, idx C, idx M, idx OH, idx OW,
                 int ph, int pw, const int[::1] bias, const int[::1] mult, const int[::1] shift,
                 int ozp, int lo, int hi, unsigned char[::1] y, short[:, ::1] vbuf,
                 int[:, ::1] mbuf):
    """TFLite's quantized CONV_2D, 3x3, stride 1, dilation 1, one group, C a multiple of 16,
    by exact Winograd F(2x2, 3x3) on int16 products (``sprat_tfl_wino_rows``): x int8
    (``is_signed``) / uint8 bytes NHWC (N, H, W, C) with zero point ``xz``; ``u`` the
    transformed weights (``tflite.winograd_weights``: 16 x ceil(M/16) x C/2 x 32 int16);
    leading pads; per channel ``bias``, ``mult``, ``shift`` (M int32); y bytes (N, OH, OW, M);
    ``vbuf`` / ``mbuf`` (nt, ``tfl_winograd_scratch``). The bits equal the direct conv's while
    4 x every sum fits int32 (the caller's check). Tile rows split over ``nt`` slots. Raises
    ValueError on short operands."""
    cdef idx th = (OH + 1) // 2, rows = N * th, npan = (M + 15) // 16
    cdef idx nv, nm
    nv, nm = tfl_winograd_scratch(C, M, OW)
    if C % 16 or C <= 0 or M <= 0:
        raise ValueError("tfl_winograd: C must be a positive multiple of 16")
    if (x.shape[0] < N * H * W * C or y.shape[0] < N * OH * OW * M
            or u.shape[0] < 16 * npan * (C // 2) * 32 or bias.shape[0] < M
            or mult.shape[0] < M or shift.shape[0] < M or vbuf.shape[0] < max(nt, 1)
            or mbuf.shape[0] < max(nt, 1) or vbuf.shape[1] < nv or mbuf.shape[1] < nm):
        raise ValueError("tfl_winograd: operands too short")
    if rows == 0:
        return
    cdef int t
    cdef idx msz = 16 * npan * ((((OW + 1) // 2) + 5) // 6 * 6) * 16
    if nt <= 1:
        with nogil:
            sprat_tfl_wino_rows(&x[0], is_signed, xz, &u[0], N, H, W, C, M, OH, OW, ph, pw,
                                &bias[0], &mult[0], &shift[0], ozp, lo, hi, &y[0], 0, rows,
                                &vbuf[0, 0], &mbuf[0, 0], &mbuf[0, msz])
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        sprat_tfl_wino_rows(&x[0], is_signed, xz, &u[0], N, H, W, C, M, OH, OW, ph, pw,
                            &bias[0], &mult[0], &shift[0], ozp, lo, hi, &y[0],
                            t * rows // nt, (t + 1) * rows // nt, &vbuf[t, 0], &mbuf[t, 0],
                            &mbuf[t, msz])


def tfl_depthwise_scratch(idx C, idx OW, int kh, int kw, int sw, int dh, int dw):
    """int16 values per work slot of ``tfl_depthwise``'s ``buf`` (its ring of pair buffers,
    one per input row in use)."""
    return tfl_dw_ring_size(C, OW, kh, kw, sw, dh, dw)


def tfl_depthwise(int nt, const unsigned char[::1] x, bint is_signed, int xz,
                  const int[::1] w, const short[::1] wq, idx N, idx H, idx W, idx C, idx OH,
                  idx OW, int kh, int kw, int sh, int sw, int dh, int dw, int ph, int pw,
                  const int[::1] bias, const int[::1] mult, const int[::1] shift, int ozp,
                  int lo, int hi, unsigned char[::1] y, short[:, ::1] buf,
                  TflDepthwiseCall into=None):
    """TFLite's quantized DEPTHWISE_CONV_2D with depth multiplier 1 (``ops_tflite.tfl_conv``
    with group == C == M) of the bytes of an int8 (``is_signed``) / uint8 NHWC map ``x`` (N,
    H, W, C), zero point ``xz``, into ``y`` (N, OH, OW, C): ``w`` (kh * kw * C) int32 weights
    minus their zero point (|w| <= 255, the baseline build's), ``wq`` the same as pairs of
    horizontally adjacent taps (kh, ceil(kw / 2), ceil(C / 8), 8, 2) int16, a zero weight
    after an odd row's last tap and for channels past C (the AVX2 build's); strides,
    dilations and leading pads (ph, pw); per channel ``bias``, ``mult``, ``shift`` (int32, C
    rounded up to 8 each, zeros past C), output zero point and clamp; ``buf`` (nt,
    ``tfl_depthwise_scratch``) int16. Output rows split over ``nt`` slots; the int32 sums
    wrap as the reference's int32 accumulator and bias do, so the bits are equal for any
    input. With ``into``: the checked arguments bound into that call object, nothing run.
    Raises ValueError on short operands."""
    cdef idx cp = (C + 7) // 8 * 8
    if (x.shape[0] < N * H * W * C or y.shape[0] < N * OH * OW * C or w.shape[0] < kh * kw * C
            or bias.shape[0] < cp or mult.shape[0] < cp or shift.shape[0] < cp
            or wq.shape[0] < kh * ((kw + 1) // 2) * cp * 2 or buf.shape[0] < max(nt, 1)
            or (N * OH * OW * C > 0
                and buf.shape[1] < tfl_dw_ring_size(C, OW, kh, kw, sw, dh, dw))):
        raise ValueError("tfl_depthwise: operands too short")
    if min(kh, kw, sh, sw, dh, dw) < 1 or ph < 0 or pw < 0:
        raise ValueError("tfl_depthwise: kernel, strides and dilations must be positive")
    if N * OH * OW * C == 0:
        if into is not None:
            into.a.rows = 0
        return
    cdef tfl_dw_t bound = tfl_dw_t(&x[0], is_signed, xz, &w[0], &wq[0], H, W, C, OH, OW, kh,
                                   kw, sh, sw, dh, dw, ph, pw, &bias[0], &mult[0], &shift[0],
                                   ozp, lo, hi, &y[0], N * OH, max(nt, 1), &buf[0, 0],
                                   buf.shape[1])
    if into is not None:
        into.a = bound
        return
    _tfl_dw_run(&bound)


def tfl_binary(int nt, int op, const unsigned char[::1] a, idx sa, const unsigned char[::1] b,
               idx sb, int kind, unsigned char[::1] y, idx n, const int[::1] params,
               TflBinaryCall into=None):
    """TFLite's quantized ADD (``op`` 0), SUB (1) or MUL (2) over ``n`` outputs, ``y[i]`` from
    ``a[i * sa]`` and ``b[i * sb]`` (a step of 0 broadcasts a scalar); int8 (``kind`` 1) or
    uint8 (2) bytes. ``params`` (12 int32): a_zp, a_mult, a_shift, b_zp, b_mult, b_shift,
    left_shift, mult, shift, out_zp, qmin, qmax (``ops_tflite.tfl_add``, ``tfl_mul``: MUL
    reads only the zero points and the output's). With ``into``: the checked arguments bound
    into that call object, nothing run. Raises ValueError on short operands."""
    if y.shape[0] < n or params.shape[0] < 12 or (n > 0 and (
            a.shape[0] < (n - 1) * sa + 1 or b.shape[0] < (n - 1) * sb + 1)):
        raise ValueError("tfl_binary: operands too short")
    if n == 0:
        if into is not None:
            into.a.n = 0
        return
    cdef tfl_bin_t bound = tfl_bin_t(op, &a[0], sa, &b[0], sb, kind, &y[0], n, &params[0],
                                     max(nt, 1))
    if into is not None:
        into.a = bound
        return
    _tfl_bin_run(&bound)


def tfl_softmax(int nt, const unsigned char[::1] x, int kind, unsigned char[::1] y, idx rows,
                idx L, int mult, int left_shift, int diff_min, int[:, ::1] scratch):
    """TFLite's quantized SOFTMAX (``ops_tflite.tfl_softmax``) over ``rows`` rows of ``L``
    int8 (``kind`` 1) or uint8 (2) values; ``scratch``: (nt, L) int32. Raises ValueError on
    short operands."""
    if x.shape[0] < rows * L or y.shape[0] < rows * L or scratch.shape[0] < nt \
            or scratch.shape[1] < L:
        raise ValueError("tfl_softmax: operands too short")
    if rows * L == 0:
        return
    cdef int t
    if nt <= 1:
        with nogil:
            sprat_tfl_softmax(&x[0], kind, &y[0], 0, rows, L, mult, left_shift, diff_min,
                              &scratch[0, 0])
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        sprat_tfl_softmax(&x[0], kind, &y[0], t * rows // nt, (t + 1) * rows // nt, L, mult,
                          left_shift, diff_min, &scratch[t, 0])
