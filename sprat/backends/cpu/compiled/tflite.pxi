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
       r1) of the N * OH: per output pixel and 8 channels, the int32 sum of bias and the taps
       inside the map (x - xz) * w in a register, then TFLite's requantisation, stored.
       w: (kh * kw, C) int32 (zero point subtracted); wp: the pairs of horizontally adjacent
       taps (kh, kw - 1, C, 2) int16, for vpmaddwd: two taps' products summed in one step
       (|x - xz|, |w| <= 255: each product and their sum exact in int32). NOTE: nothing goes
       through memory between the taps and the requantisation (the int32 or float32 map of a
       ConvInteger / QLinearConv path cost 3-5x this on the small maps of keyword-spotting
       models) */
    #define TFL_DW_VEC(CVT, CVT16)                                                        \
        for (; c + 8 <= C; c += 8) {                                                      \
            __m256i acc = _mm256_loadu_si256((const __m256i *)(bias + c));                \
            for (int i = i0; i < i1; i++) {                                               \
                const unsigned char *xr = x + ((n * H + oy * sh - ph + i * dh) * W) * C + c; \
                int j = j0;                                                               \
                for (; j + 1 < j1; j += 2) {                                              \
                    __m128i a = _mm_loadl_epi64((const __m128i *)(xr + (ix0 + j * dw) * C)); \
                    __m128i b = _mm_loadl_epi64(                                          \
                        (const __m128i *)(xr + (ix0 + (j + 1) * dw) * C));                \
                    __m256i ab = _mm256_sub_epi16(CVT16(_mm_unpacklo_epi8(a, b)), vxz16); \
                    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(ab, _mm256_loadu_si256( \
                        (const __m256i *)(wp + ((i * (kw - 1) + j) * C + c) * 2))));      \
                }                                                                         \
                for (; j < j1; j++) {                                                     \
                    __m128i b = _mm_loadl_epi64((const __m128i *)(xr + (ix0 + j * dw) * C)); \
                    __m256i v = _mm256_sub_epi32(CVT(b), vxz);                            \
                    acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(v,                     \
                        _mm256_loadu_si256((const __m256i *)(w + (i * kw + j) * C + c)))); \
                }                                                                         \
            }                                                                             \
            tfl_store8(yo + c, tfl_mbqm8(acc, _mm256_loadu_si256((const __m256i *)(mult + c)), \
                       _mm256_loadu_si256((const __m256i *)(shift + c))), vozp, vlo, vhi); \
        }
    static void sprat_tfl_depthwise(const unsigned char *x, int is_signed, int32_t xz,
                                    const int32_t *w, const int16_t *wp, Py_ssize_t H, Py_ssize_t W, Py_ssize_t C,
                                    Py_ssize_t OH, Py_ssize_t OW, int kh, int kw, int sh, int sw,
                                    int dh, int dw, int ph, int pw, const int32_t *bias,
                                    const int32_t *mult, const int32_t *shift, int32_t ozp,
                                    int32_t lo, int32_t hi, unsigned char *y, Py_ssize_t r0,
                                    Py_ssize_t r1) {
    #if defined(__AVX2__)
        const __m256i vxz = _mm256_set1_epi32(xz), vozp = _mm256_set1_epi32(ozp);
        const __m256i vxz16 = _mm256_set1_epi16((short)xz);
        const __m256i vlo = _mm256_set1_epi32(lo), vhi = _mm256_set1_epi32(hi);
    #endif
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
                Py_ssize_t c = 0;
    #if defined(__AVX2__)
                if (is_signed) { TFL_DW_VEC(_mm256_cvtepi8_epi32, _mm256_cvtepi8_epi16) }
                else { TFL_DW_VEC(_mm256_cvtepu8_epi32, _mm256_cvtepu8_epi16) }
    #endif
                for (; c < C; c++) {
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

    /* op 0 ADD, 1 SUB (reference/integer_ops/add.h, sub.h), 2 MUL (mul.h); a[i * sa],
       b[i * sb] for i in [i0, i1); p: a_zp, a_mult, a_shift, b_zp, b_mult, b_shift,
       left_shift, mult, shift, out_zp, qmin, qmax */
    static void sprat_tfl_binary(int op, const unsigned char *a, Py_ssize_t sa,
                                 const unsigned char *b, Py_ssize_t sb, int kind,
                                 unsigned char *y, Py_ssize_t i0, Py_ssize_t i1,
                                 const int32_t *p) {
        Py_ssize_t i = i0;
        #if defined(__AVX2__)
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
    """
    void sprat_tfl_requantize(const unsigned char* x, int kind, unsigned char* y, idx r0,
                              idx r1, idx C, const int* mult, const int* shift, const int* bias,
                              int izp, int ozp, int lo, int hi) nogil
    void sprat_tfl_requant_row(const int* t, idx n, const int* mult, const int* shift,
                               const int* bias, int ozp, int lo, int hi,
                               unsigned char* y) nogil
    void sprat_tfl_rescale(const int* x, unsigned char* y, idx r0, idx r1, idx C,
                           const double* scale, const int* bias, int ozp, int lo, int hi) nogil
    void sprat_tfl_pool(int avg, const unsigned char* x, int kind, unsigned char* y, idx q0,
                        idx q1, idx H, idx W, idx C, idx OH, idx OW, int kh, int kw, int sh,
                        int sw, int top, int left, int lo, int hi) nogil
    void sprat_tfl_depthwise(const unsigned char* x, int is_signed, int xz, const int* w,
                             const short* wp, idx H,
                             idx W, idx C, idx OH, idx OW, int kh, int kw, int sh, int sw,
                             int dh, int dw, int ph, int pw, const int* bias, const int* mult,
                             const int* shift, int ozp, int lo, int hi, unsigned char* y,
                             idx r0, idx r1) nogil
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


def tfl_depthwise(int nt, const unsigned char[::1] x, bint is_signed, int xz,
                  const int[::1] w, const short[::1] wp, idx N, idx H, idx W, idx C, idx OH, idx OW, int kh, int kw,
                  int sh, int sw, int dh, int dw, int ph, int pw, const int[::1] bias,
                  const int[::1] mult, const int[::1] shift, int ozp, int lo, int hi,
                  unsigned char[::1] y):
    """TFLite's quantized DEPTHWISE_CONV_2D with depth multiplier 1 (``ops_tflite.tfl_conv``
    with group == C == M) of the bytes of an int8 (``is_signed``) / uint8 NHWC map ``x`` (N,
    H, W, C), zero point ``xz``, into ``y`` (N, OH, OW, C): ``w`` (kh * kw * C) int32 weights
    minus their zero point (|w| <= 255), ``wp`` the pairs of horizontally adjacent
    ones (kh, kw - 1, C, 2) int16 (at least 2 values), strides, dilations and leading pads (ph, pw), per channel ``bias``,
    ``mult``, ``shift`` (C int32 each), output zero point and clamp. Output rows split over
    ``nt`` slots; the int32 sums wrap as the reference's int32 accumulator and bias do, so
    the bits are equal for any input. Raises ValueError on short operands."""
    if (x.shape[0] < N * H * W * C or y.shape[0] < N * OH * OW * C or w.shape[0] < kh * kw * C
            or bias.shape[0] < C or mult.shape[0] < C or shift.shape[0] < C
            or wp.shape[0] < max(2, kh * (kw - 1) * C * 2)):
        raise ValueError("tfl_depthwise: operands too short")
    if N * OH * OW * C == 0:
        return
    cdef idx rows = N * OH
    cdef int t
    if nt <= 1:
        with nogil:
            sprat_tfl_depthwise(&x[0], is_signed, xz, &w[0], &wp[0], H, W, C, OH, OW, kh, kw, sh,
                                sw, dh, dw, ph, pw, &bias[0], &mult[0], &shift[0], ozp, lo, hi, &y[0], 0,
                                rows)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        sprat_tfl_depthwise(&x[0], is_signed, xz, &w[0], &wp[0], H, W, C, OH, OW, kh, kw, sh,
                            sw, dh, dw, ph, pw, &bias[0], &mult[0], &shift[0], ozp, lo, hi, &y[0],
                            t * rows // nt, (t + 1) * rows // nt)


def tfl_binary(int nt, int op, const unsigned char[::1] a, idx sa, const unsigned char[::1] b,
               idx sb, int kind, unsigned char[::1] y, idx n, const int[::1] params):
    """TFLite's quantized ADD (``op`` 0), SUB (1) or MUL (2) over ``n`` outputs, ``y[i]`` from
    ``a[i * sa]`` and ``b[i * sb]`` (a step of 0 broadcasts a scalar); int8 (``kind`` 1) or
    uint8 (2) bytes. ``params`` (12 int32): a_zp, a_mult, a_shift, b_zp, b_mult, b_shift,
    left_shift, mult, shift, out_zp, qmin, qmax (``ops_tflite.tfl_add``, ``tfl_mul``: MUL
    reads only the zero points and the output's). Raises ValueError on short operands."""
    if y.shape[0] < n or params.shape[0] < 12 or (n > 0 and (
            a.shape[0] < (n - 1) * sa + 1 or b.shape[0] < (n - 1) * sb + 1)):
        raise ValueError("tfl_binary: operands too short")
    if n == 0:
        return
    cdef int t
    if nt <= 1:
        with nogil:
            sprat_tfl_binary(op, &a[0], sa, &b[0], sb, kind, &y[0], 0, n, &params[0])
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        sprat_tfl_binary(op, &a[0], sa, &b[0], sb, kind, &y[0], t * n // nt, (t + 1) * n // nt,
                         &params[0])


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
