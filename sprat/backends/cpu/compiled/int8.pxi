# The exact integer GEMM of the quantized ops (MatMulInteger, QLinearMatMul, the com.microsoft
# MatMulIntegerToFloat / DynamicQuantizeMatMul / QGemm) and DynamicQuantizeLinear: the compiled
# half of ``quant.py``. Included by kernels.pxi, after common.pxi.
#
# Exact for every u8/s8 operand and zero point (``vpmaddubsw``'s int16 saturation only where it
# cannot happen: the u8s8 path below); the int32 sums are exact for K <= 33025 (K * 255 * 255 <
# 2**31, ``I8_MAX_K``). Five paths (``I8_PATHS``), chosen by the caller (``quant.PATH``: the
# fastest this CPU runs; ``quant.weight_path``: u8s8 for a constant weight that fits, widen):
# - ``int16`` (any AVX2 CPU; scalar C in the baseline build): both operands widened to int16
#   with their zero points subtracted, ``a' = a - a_zp``, ``b' = b - b_zp`` (|a'|, |b'| <= 255),
#   multiplied by ``vpmaddwd``, which sums two int16 products into one int32 exactly
#   (|a'0*b'0 + a'1*b'1| <= 130050), as MLAS's AVX2 U8U8 kernel widens; no zero-point
#   correction needed. 6 x 16 register tile.
# - ``vnni`` (AVX-VNNI, AVX2 build, chosen at run time): raw bytes, u8 A (int8 A shifted by
#   +128) times s8 B (uint8 B shifted by -128) with ``vpdpbusd``, which sums four u8*s8
#   products into int32 without an int16 intermediate; the zero points are folded in the
#   epilogue through A's row sums and B's column sums, as MLAS does:
#   ``acc = sum a*b - zb[j] * rowsum[i] + za * (K * zb[j] - colsum[j])``. 6 x 16 tile.
# - ``amx`` (AMX-INT8, AVX2 build, when CPU and OS give the tile state): the same bytes and
#   correction, ``tdpbusd`` on 32 x 32 blocks of four 16 x 16 tiles.
# - ``u8s8`` (AVX2 build, where the GEMM would run int16, for a constant B whose pairs fit,
#   ``i8_pairs_fit``): the vnni path's bytes, layout and correction, each k-quad's products
#   summed by ``vpmaddubsw`` (pairs into int16) and ``vpmaddwd`` with ones (into int32), as
#   MLAS's AVX2 U8S8 kernel; exact because every pair of B's bytes in a column has positive
#   and negative parts of at most 128 (onnxruntime's ``reduce_range`` weights, 7 bits, always
#   do). 4 x 16 tile (two passes for 6 rows). A weight with a few pairs that do not fit (a
#   full-range per-channel weight: 1-2 % of BERT's (pair, panel) blocks) runs clipped to fit,
#   plus correction records of the cut-off parts (``quant.u8s8_split``), which the tile adds
#   to its sums by ``vpmaddwd`` before the epilogue: exact again.
# - ``widen`` (AVX2 build, where the GEMM would run int16, for a constant B of a product with few
#   rows, ``quant.weight_path``): the vnni path's bytes, layout and correction, each byte
#   widened to int16 in registers and the pairs summed by ``vpmaddwd``: exact for every B, and
#   B is read as bytes (the int16 path's B is twice that), what a product of few rows streams.
#   2 x 16 tile (three passes for 6 rows).
#
# The API a quantized conv (im2col GEMM) or another kernel calls, from Python or Cython:
#   ``i8_packed_b_bytes(K, N, path)``, ``i8_pack_b(b, b_signed, zp, K, N, trans, path, out,
#   bcol)``: the weight (K, N) packed once; ``i8_a_rows`` / ``i8_a_pitch``: the A workspace;
#   ``i8_gemm(...)``: one batched product with its epilogue (int32, float32 with scale and
#   bias, or requantized u8/s8), work split over ``nt`` OpenMP slots; ``i8_view``: typed
#   memoryviews for an argument tuple kept per binding. See each docstring; ``quant.py``'s
#   ``_Int8Gemm`` is the worked example.
#
# Layouts:
# - packed B: panels of I8_NR = 16 columns (columns past N are 0). int16 path: k-pair ``p``
#   holds 32 int16 ``[b'(2p, j), b'(2p+1, j)]`` for the 16 columns j; vnni / amx: k-quad ``q``
#   holds 64 bytes ``b(4q..4q+3, j)`` for the 16 columns (an AMX B tile is 16 such quads),
#   plus ``bcol`` (2N int32: the shifted zero point per column, then ``K * zb - colsum``).
# - A workspace, every call: int16 path rows of ``a'``; vnni / amx rows of bytes (K padded to
#   4, for AMX a pitch of whole 64-byte tile rows) and each row's sum.
#
# The float epilogues must round as the ONNX graph they replace does (``float(acc) * scale``,
# then ``+ bias``, each rounded; a requantization ``rint`` half to even): the C block below
# compiles without FMA contraction and with true division (the module's -ffp-contract=fast and
# -freciprocal-math would change the last bit).

from libc.stdlib cimport free, malloc

cdef extern from *:
    """
    #include <stdint.h>
    #include <stdlib.h>
    #include <string.h>
    #include <math.h>
    #pragma GCC push_options
    #pragma GCC optimize("no-reciprocal-math", "no-associative-math", "fp-contract=off")
    #if defined(__AVX2__)
    #include <immintrin.h>
    #endif

    #define SPRAT_I8_MR 6
    /* 1.5 * 2^23: x + M - M is rint(x) (half to even) for |x| < 2^22 */
    #define SPRAT_I8_MAGIC 12582912.0f
    #define SPRAT_I8_NR 16

    /* The k loop of the int16 tile (sprat_i8_tile, sprat_i8_tile_q8): 12 named accumulators
       c<row><half> = the 6 x 16 sums; with nh = 1 (a constant of the inlined caller) the
       first half only, 6 x 8 (a panel's last 8 columns: its second half is padding).
       NOTE: named accumulators, not an array: GCC kept an array of __m256i partly on the
       stack (spills in the inner loop); rows past mr are dead code once inlined */
    #if defined(__AVX2__)
    #define SPRAT_I8_ROW(r)                                                              \
        if (mr > r) {                                                                    \
            int32_t pair;                                                                \
            memcpy(&pair, a##r + 2 * p, 4);                                              \
            __m256i av = _mm256_set1_epi32(pair);                                        \
            c##r##0 = _mm256_add_epi32(c##r##0, _mm256_madd_epi16(av, b0));              \
            if (nh > 1)                                                                  \
                c##r##1 = _mm256_add_epi32(c##r##1, _mm256_madd_epi16(av, b1));          \
        }
    /* one pair of k: B's pair row at bp (16 columns, or 8 with nh = 1) into every row */
    #define SPRAT_I8_KSTEP(bp)                                                              \
        {                                                                                   \
            __m256i b0 = _mm256_loadu_si256((const __m256i*)(bp));                          \
            __m256i b1 = nh > 1 ? _mm256_loadu_si256((const __m256i*)((bp) + 16)) : b0;     \
            SPRAT_I8_ROW(0) SPRAT_I8_ROW(1) SPRAT_I8_ROW(2)                                 \
            SPRAT_I8_ROW(3) SPRAT_I8_ROW(4) SPRAT_I8_ROW(5)                                 \
        }
    #define SPRAT_I8_ACC                                                                    \
        __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00, c20 = c00;   \
        __m256i c21 = c00, c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00
    #define SPRAT_I8_KLOOP                                                                  \
        SPRAT_I8_ACC;                                                                       \
        const int16_t* a0 = a;                                                              \
        const int16_t* a1 = a + (mr > 1 ? 1 : 0) * lda;                                     \
        const int16_t* a2 = a + (mr > 2 ? 2 : 0) * lda;                                     \
        const int16_t* a3 = a + (mr > 3 ? 3 : 0) * lda;                                     \
        const int16_t* a4 = a + (mr > 4 ? 4 : 0) * lda;                                     \
        const int16_t* a5 = a + (mr > 5 ? 5 : 0) * lda;                                     \
        for (Py_ssize_t p = 0; p < kp; p++)                                                 \
            SPRAT_I8_KSTEP(b + p * 32)                                                      \
        do {} while (0)
    /* The same k loop with A read in place (``sprat_i8_tile_seg``): row r's K values are
       nseg segments of 2 * kps int16, the first at ap[r], each rs values after the one
       before (a conv's kernel rows in its widened, padded input map) */
    #define SPRAT_I8_KLOOP_SEG                                                              \
        SPRAT_I8_ACC;                                                                       \
        const int16_t* a0 = ap[0];                                                          \
        const int16_t* a1 = ap[mr > 1 ? 1 : 0];                                             \
        const int16_t* a2 = ap[mr > 2 ? 2 : 0];                                             \
        const int16_t* a3 = ap[mr > 3 ? 3 : 0];                                             \
        const int16_t* a4 = ap[mr > 4 ? 4 : 0];                                             \
        const int16_t* a5 = ap[mr > 5 ? 5 : 0];                                             \
        for (Py_ssize_t sg = 0; sg < nseg; sg++) {                                          \
            const int16_t* bs = b + sg * kps * 32;                                          \
            for (Py_ssize_t p = 0; p < kps; p++)                                            \
                SPRAT_I8_KSTEP(bs + p * 32)                                                 \
            a0 += rs, a1 += rs, a2 += rs, a3 += rs, a4 += rs, a5 += rs;                     \
        }                                                                                   \
        do {} while (0)
    #endif

    /* c[r*16 + j] = sum_p a[r*lda + 2p] * b[p*32 + 2j] + a[r*lda + 2p + 1] * b[p*32 + 2j + 1]
       for the mr rows r of packed A and the 16 columns of one packed B panel (kp pairs). */
    static inline __attribute__((always_inline)) void sprat_i8_tile(
            const int16_t* a, Py_ssize_t lda, const int16_t* b, Py_ssize_t kp, int32_t* c,
            const int mr) {
    #if defined(__AVX2__)
        const int nh = 2;
        SPRAT_I8_KLOOP;
    #define SPRAT_I8_STORE(r)                                                            \
        if (mr > r) {                                                                    \
            _mm256_storeu_si256((__m256i*)(c + r * 16), c##r##0);                        \
            _mm256_storeu_si256((__m256i*)(c + r * 16 + 8), c##r##1);                    \
        }
        SPRAT_I8_STORE(0) SPRAT_I8_STORE(1) SPRAT_I8_STORE(2)
        SPRAT_I8_STORE(3) SPRAT_I8_STORE(4) SPRAT_I8_STORE(5)
    #undef SPRAT_I8_STORE
    #else
        /* NOTE: sums in uint32 (wrapping is defined; the exact result fits int32) */
        for (int r = 0; r < mr; r++) {
            uint32_t s[SPRAT_I8_NR];
            for (int j = 0; j < SPRAT_I8_NR; j++)
                s[j] = 0;
            const int16_t* ar = a + r * lda;
            for (Py_ssize_t p = 0; p < kp; p++) {
                int32_t a0 = ar[2 * p], a1 = ar[2 * p + 1];
                const int16_t* bp = b + p * 32;
                for (int j = 0; j < SPRAT_I8_NR; j++)
                    s[j] += (uint32_t)(a0 * bp[2 * j] + a1 * bp[2 * j + 1]);
            }
            for (int j = 0; j < SPRAT_I8_NR; j++)
                c[r * 16 + j] = (int32_t)s[j];
        }
    #endif
    }

    static void sprat_i8_tile_any(const int16_t* a, Py_ssize_t lda, const int16_t* b,
                                  Py_ssize_t kp, int32_t* c, int mr) {
        switch (mr) {
        case 1: sprat_i8_tile(a, lda, b, kp, c, 1); break;
        case 2: sprat_i8_tile(a, lda, b, kp, c, 2); break;
        case 3: sprat_i8_tile(a, lda, b, kp, c, 3); break;
        case 4: sprat_i8_tile(a, lda, b, kp, c, 4); break;
        case 5: sprat_i8_tile(a, lda, b, kp, c, 5); break;
        default: sprat_i8_tile(a, lda, b, kp, c, 6); break;
        }
    }

    /* sprat_i8_tile with A read in place: row r's K = 2 * nseg * kps values are nseg
       segments of 2 * kps int16, the first at ap[r], each rs values after the one before
       (SPRAT_I8_KLOOP_SEG): a conv's kernel rows in its widened, padded input map
       (``sprat_i8_pad_map``), so no im2col */
    static inline __attribute__((always_inline)) void sprat_i8_tile_seg_t(
            const int16_t* const* ap, Py_ssize_t rs, Py_ssize_t nseg, Py_ssize_t kps,
            const int16_t* b, int32_t* c, const int mr) {
    #if defined(__AVX2__)
        const int nh = 2;
        SPRAT_I8_KLOOP_SEG;
    #define SPRAT_I8_STORE(r)                                                            \
        if (mr > r) {                                                                    \
            _mm256_storeu_si256((__m256i*)(c + r * 16), c##r##0);                        \
            _mm256_storeu_si256((__m256i*)(c + r * 16 + 8), c##r##1);                    \
        }
        SPRAT_I8_STORE(0) SPRAT_I8_STORE(1) SPRAT_I8_STORE(2)
        SPRAT_I8_STORE(3) SPRAT_I8_STORE(4) SPRAT_I8_STORE(5)
    #undef SPRAT_I8_STORE
    #else
        for (int r = 0; r < mr; r++) {
            uint32_t sum[SPRAT_I8_NR];
            for (int j = 0; j < SPRAT_I8_NR; j++)
                sum[j] = 0;
            for (Py_ssize_t sg = 0; sg < nseg; sg++) {
                const int16_t* ar = ap[r] + sg * rs;
                for (Py_ssize_t p = 0; p < kps; p++) {
                    int32_t x0 = ar[2 * p], x1 = ar[2 * p + 1];
                    const int16_t* bp = b + (sg * kps + p) * 32;
                    for (int j = 0; j < SPRAT_I8_NR; j++)
                        sum[j] += (uint32_t)(x0 * bp[2 * j] + x1 * bp[2 * j + 1]);
                }
            }
            for (int j = 0; j < SPRAT_I8_NR; j++)
                c[r * 16 + j] = (int32_t)sum[j];
        }
    #endif
    }

    static void sprat_i8_tile_seg(const int16_t* const* ap, Py_ssize_t rs, Py_ssize_t nseg,
                                  Py_ssize_t kps, const int16_t* b, int32_t* c, int mr) {
        switch (mr) {
        case 1: sprat_i8_tile_seg_t(ap, rs, nseg, kps, b, c, 1); break;
        case 2: sprat_i8_tile_seg_t(ap, rs, nseg, kps, b, c, 2); break;
        case 3: sprat_i8_tile_seg_t(ap, rs, nseg, kps, b, c, 3); break;
        case 4: sprat_i8_tile_seg_t(ap, rs, nseg, kps, b, c, 4); break;
        case 5: sprat_i8_tile_seg_t(ap, rs, nseg, kps, b, c, 5); break;
        default: sprat_i8_tile_seg_t(ap, rs, nseg, kps, b, c, 6); break;
        }
    }

    /* The same tile from u8 A (rows of 4*kq bytes) and s8 B packed in k-quads (per quad q,
       64 bytes: 4 bytes b(4q..4q+3, j) for the 16 columns j): vpdpbusd sums four u8*s8
       products into each int32 lane exactly (no int16 intermediate, so no saturation). Only
       the AVX2 build has it, run when the CPU has AVX-VNNI (sprat_i8_cpu_vnni). */
    #if defined(__AVX2__) && defined(__GNUC__)
    #define SPRAT_I8_VNNI_BUILD 1
    __attribute__((target("avx2,fma,avxvnni"))) static inline __attribute__((always_inline))
    void sprat_i8_tile_vnni_t(const uint8_t* a, Py_ssize_t lda, const int8_t* b, Py_ssize_t kq,
                              int32_t* c, const int mr) {
        __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00, c20 = c00;
        __m256i c21 = c00, c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
        const uint8_t* a0 = a;
        const uint8_t* a1 = a + (mr > 1 ? 1 : 0) * lda;
        const uint8_t* a2 = a + (mr > 2 ? 2 : 0) * lda;
        const uint8_t* a3 = a + (mr > 3 ? 3 : 0) * lda;
        const uint8_t* a4 = a + (mr > 4 ? 4 : 0) * lda;
        const uint8_t* a5 = a + (mr > 5 ? 5 : 0) * lda;
    #define SPRAT_I8_QROW(r)                                                             \
        if (mr > r) {                                                                    \
            int32_t quad;                                                                \
            memcpy(&quad, a##r + 4 * q, 4);                                              \
            __m256i av = _mm256_set1_epi32(quad);                                        \
            c##r##0 = _mm256_dpbusd_avx_epi32(c##r##0, av, b0);                          \
            c##r##1 = _mm256_dpbusd_avx_epi32(c##r##1, av, b1);                          \
        }
        for (Py_ssize_t q = 0; q < kq; q++) {
            __m256i b0 = _mm256_loadu_si256((const __m256i*)(b + q * 64));
            __m256i b1 = _mm256_loadu_si256((const __m256i*)(b + q * 64 + 32));
            SPRAT_I8_QROW(0) SPRAT_I8_QROW(1) SPRAT_I8_QROW(2)
            SPRAT_I8_QROW(3) SPRAT_I8_QROW(4) SPRAT_I8_QROW(5)
        }
    #undef SPRAT_I8_QROW
    #define SPRAT_I8_STORE(r)                                                            \
        if (mr > r) {                                                                    \
            _mm256_storeu_si256((__m256i*)(c + r * 16), c##r##0);                        \
            _mm256_storeu_si256((__m256i*)(c + r * 16 + 8), c##r##1);                    \
        }
        SPRAT_I8_STORE(0) SPRAT_I8_STORE(1) SPRAT_I8_STORE(2)
        SPRAT_I8_STORE(3) SPRAT_I8_STORE(4) SPRAT_I8_STORE(5)
    #undef SPRAT_I8_STORE
    }

    __attribute__((target("avx2,fma,avxvnni")))
    static void sprat_i8_tile_vnni(const uint8_t* a, Py_ssize_t lda, const int8_t* b,
                                   Py_ssize_t kq, int32_t* c, int mr) {
        switch (mr) {
        case 1: sprat_i8_tile_vnni_t(a, lda, b, kq, c, 1); break;
        case 2: sprat_i8_tile_vnni_t(a, lda, b, kq, c, 2); break;
        case 3: sprat_i8_tile_vnni_t(a, lda, b, kq, c, 3); break;
        case 4: sprat_i8_tile_vnni_t(a, lda, b, kq, c, 4); break;
        case 5: sprat_i8_tile_vnni_t(a, lda, b, kq, c, 5); break;
        default: sprat_i8_tile_vnni_t(a, lda, b, kq, c, 6); break;
        }
    }

    static int sprat_i8_cpu_vnni(void) {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avxvnni");
    }
    #else
    static void sprat_i8_tile_vnni(const uint8_t* a, Py_ssize_t lda, const int8_t* b,
                                   Py_ssize_t kq, int32_t* c, int mr) {
        (void)a; (void)lda; (void)b; (void)kq; (void)c; (void)mr;
    }
    static int sprat_i8_cpu_vnni(void) { return 0; }
    #endif

    /* The vnni path's tile on plain AVX2 (the ``u8s8`` path): each k-quad's four u8*s8
       products summed by vpmaddubsw (two pairs into int16, saturating) and vpmaddwd with ones
       (the two into int32), as MLAS's AVX2 U8S8 kernel does. Exact only where no pair sum
       saturates: every pair of B's bytes (4q, 4q+1), (4q+2, 4q+3) of a column with its
       positive parts and its negative parts each at most 128 in magnitude (255 * 128 < 2^15),
       which the caller checks on the weight (``i8_pairs_fit``): onnxruntime's reduce_range
       (7-bit weights) always fits. At most 4 rows a pass (SPRAT_I8_UKLOOP: 8 accumulators):
       with 6, the vpmaddubsw and vpmaddwd temporaries and the ones vector left no register
       for the twelfth accumulator, which went through the stack every k step. */
    #if defined(__AVX2__)
    #define SPRAT_I8_U8S8_BUILD 1
    #define SPRAT_I8_UROW(r)                                                             \
        if (mr > r) {                                                                    \
            int32_t quad;                                                                \
            memcpy(&quad, a##r + 4 * q, 4);                                              \
            __m256i av = _mm256_set1_epi32(quad);                                        \
            c##r##0 = _mm256_add_epi32(c##r##0, _mm256_madd_epi16(                       \
                _mm256_maddubs_epi16(av, b0), ones));                                    \
            if (nh > 1)                                                                  \
                c##r##1 = _mm256_add_epi32(c##r##1, _mm256_madd_epi16(                   \
                    _mm256_maddubs_epi16(av, b1), ones));                                \
        }
    /* A correction record (``quant.u8s8_split``) of the pair of rows k2, k2 + 1 of B: the
       residuals the clipped weight left, 16 int32 of (r[k2, j] | r[k2 + 1, j] << 16), added
       to row r's sums by vpmaddwd with the pair of A's bytes (exact in int32) */
    #define SPRAT_I8_RROW(r)                                                             \
        if (mr > r) {                                                                    \
            const int32_t pair = (int32_t)a##r[k2] | ((int32_t)a##r[k2 + 1] << 16);      \
            __m256i av = _mm256_set1_epi32(pair);                                        \
            c##r##0 = _mm256_add_epi32(c##r##0, _mm256_madd_epi16(av, r0));              \
            if (nh > 1)                                                                  \
                c##r##1 = _mm256_add_epi32(c##r##1, _mm256_madd_epi16(av, r1));          \
        }
    /* one quad of k: B's quad row at bp (16 columns, or 8 with nh = 1) into every row */
    #define SPRAT_I8_UKSTEP(bp)                                                          \
        {                                                                                \
            __m256i b0 = _mm256_loadu_si256((const __m256i*)(bp));                       \
            __m256i b1 = nh > 1 ? _mm256_loadu_si256((const __m256i*)((bp) + 32)) : b0;  \
            SPRAT_I8_UROW(0) SPRAT_I8_UROW(1) SPRAT_I8_UROW(2) SPRAT_I8_UROW(3)          \
        }
    #define SPRAT_I8_UACC                                                                \
        __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00, c20 = c00;\
        __m256i c21 = c00, c30 = c00, c31 = c00;                                         \
        const __m256i ones = _mm256_set1_epi16(1)
    /* The u8s8 k loop with A read in place (as SPRAT_I8_KLOOP_SEG: row r's K bytes are nseg
       segments of 4 * kqs, the first at ap[r], each rs bytes after the one before); no
       correction records */
    #define SPRAT_I8_UKLOOP_SEG                                                          \
        SPRAT_I8_UACC;                                                                   \
        const uint8_t* a0 = ap[0];                                                       \
        const uint8_t* a1 = ap[mr > 1 ? 1 : 0];                                          \
        const uint8_t* a2 = ap[mr > 2 ? 2 : 0];                                          \
        const uint8_t* a3 = ap[mr > 3 ? 3 : 0];                                          \
        for (Py_ssize_t sg = 0; sg < nseg; sg++) {                                       \
            const int8_t* bs = b + sg * kqs * 64;                                        \
            for (Py_ssize_t q = 0; q < kqs; q++)                                         \
                SPRAT_I8_UKSTEP(bs + q * 64)                                             \
            a0 += rs, a1 += rs, a2 += rs, a3 += rs;                                      \
        }                                                                                \
        do {} while (0)
    #define SPRAT_I8_UKLOOP                                                              \
        SPRAT_I8_UACC;                                                                   \
        const uint8_t* a0 = a;                                                           \
        const uint8_t* a1 = a + (mr > 1 ? 1 : 0) * lda;                                  \
        const uint8_t* a2 = a + (mr > 2 ? 2 : 0) * lda;                                  \
        const uint8_t* a3 = a + (mr > 3 ? 3 : 0) * lda;                                  \
        for (Py_ssize_t q = 0; q < kq; q++)                                              \
            SPRAT_I8_UKSTEP(b + q * 64)                                                  \
        for (Py_ssize_t e = 0; e < nrec; e++) {                                          \
            const int32_t* re = rec + 17 * e;                                            \
            const Py_ssize_t k2 = 2 * (Py_ssize_t)re[0];                                 \
            __m256i r0 = _mm256_loadu_si256((const __m256i*)(re + 1));                   \
            __m256i r1 = nh > 1 ? _mm256_loadu_si256((const __m256i*)(re + 9)) : r0;     \
            SPRAT_I8_RROW(0) SPRAT_I8_RROW(1) SPRAT_I8_RROW(2) SPRAT_I8_RROW(3)          \
        }                                                                                \
        do {} while (0)
    static inline __attribute__((always_inline)) void sprat_i8_tile_u8s8_t(
            const uint8_t* a, Py_ssize_t lda, const int8_t* b, Py_ssize_t kq, int32_t* c,
            const int32_t* rec, Py_ssize_t nrec, const int mr) {
        const int nh = 2;
        SPRAT_I8_UKLOOP;
    #define SPRAT_I8_STORE(r)                                                            \
        if (mr > r) {                                                                    \
            _mm256_storeu_si256((__m256i*)(c + r * 16), c##r##0);                        \
            _mm256_storeu_si256((__m256i*)(c + r * 16 + 8), c##r##1);                    \
        }
        SPRAT_I8_STORE(0) SPRAT_I8_STORE(1) SPRAT_I8_STORE(2) SPRAT_I8_STORE(3)
    #undef SPRAT_I8_STORE
    }

    /* rec, nrec: the panel's correction records (none: NULL, 0) */
    static void sprat_i8_tile_u8s8(const uint8_t* a, Py_ssize_t lda, const int8_t* b,
                                   Py_ssize_t kq, int32_t* c, int mr, const int32_t* rec,
                                   Py_ssize_t nrec) {
        switch (mr) {
        case 1: sprat_i8_tile_u8s8_t(a, lda, b, kq, c, rec, nrec, 1); break;
        case 2: sprat_i8_tile_u8s8_t(a, lda, b, kq, c, rec, nrec, 2); break;
        case 3: sprat_i8_tile_u8s8_t(a, lda, b, kq, c, rec, nrec, 3); break;
        case 4: sprat_i8_tile_u8s8_t(a, lda, b, kq, c, rec, nrec, 4); break;
        case 5:
            sprat_i8_tile_u8s8_t(a, lda, b, kq, c, rec, nrec, 4);
            sprat_i8_tile_u8s8_t(a + 4 * lda, lda, b, kq, c + 64, rec, nrec, 1);
            break;
        default:
            sprat_i8_tile_u8s8_t(a, lda, b, kq, c, rec, nrec, 4);
            sprat_i8_tile_u8s8_t(a + 4 * lda, lda, b, kq, c + 64, rec, nrec, 2);
            break;
        }
    }

    /* sprat_i8_tile_u8s8 with A read in place (SPRAT_I8_UKLOOP_SEG), no records */
    static inline __attribute__((always_inline)) void sprat_i8_tile_u8s8_seg_t(
            const uint8_t* const* ap, Py_ssize_t rs, Py_ssize_t nseg, Py_ssize_t kqs,
            const int8_t* b, int32_t* c, const int mr) {
        const int nh = 2;
        SPRAT_I8_UKLOOP_SEG;
    #define SPRAT_I8_STORE(r)                                                            \
        if (mr > r) {                                                                    \
            _mm256_storeu_si256((__m256i*)(c + r * 16), c##r##0);                        \
            _mm256_storeu_si256((__m256i*)(c + r * 16 + 8), c##r##1);                    \
        }
        SPRAT_I8_STORE(0) SPRAT_I8_STORE(1) SPRAT_I8_STORE(2) SPRAT_I8_STORE(3)
    #undef SPRAT_I8_STORE
    }

    static void sprat_i8_tile_u8s8_seg(const uint8_t* const* ap, Py_ssize_t rs,
                                       Py_ssize_t nseg, Py_ssize_t kqs, const int8_t* b,
                                       int32_t* c, int mr) {
        switch (mr) {
        case 1: sprat_i8_tile_u8s8_seg_t(ap, rs, nseg, kqs, b, c, 1); break;
        case 2: sprat_i8_tile_u8s8_seg_t(ap, rs, nseg, kqs, b, c, 2); break;
        case 3: sprat_i8_tile_u8s8_seg_t(ap, rs, nseg, kqs, b, c, 3); break;
        case 4: sprat_i8_tile_u8s8_seg_t(ap, rs, nseg, kqs, b, c, 4); break;
        case 5:
            sprat_i8_tile_u8s8_seg_t(ap, rs, nseg, kqs, b, c, 4);
            sprat_i8_tile_u8s8_seg_t(ap + 4, rs, nseg, kqs, b, c + 64, 1);
            break;
        default:
            sprat_i8_tile_u8s8_seg_t(ap, rs, nseg, kqs, b, c, 4);
            sprat_i8_tile_u8s8_seg_t(ap + 4, rs, nseg, kqs, b, c + 64, 2);
            break;
        }
    }
    #else
    #define SPRAT_I8_U8S8_BUILD 0
    static void sprat_i8_tile_u8s8(const uint8_t* a, Py_ssize_t lda, const int8_t* b,
                                   Py_ssize_t kq, int32_t* c, int mr, const int32_t* rec,
                                   Py_ssize_t nrec) {
        (void)a; (void)lda; (void)b; (void)kq; (void)c; (void)mr; (void)rec; (void)nrec;
    }
    static void sprat_i8_tile_u8s8_seg(const uint8_t* const* ap, Py_ssize_t rs,
                                       Py_ssize_t nseg, Py_ssize_t kqs, const int8_t* b,
                                       int32_t* c, int mr) {
        (void)ap; (void)rs; (void)nseg; (void)kqs; (void)b; (void)c; (void)mr;
    }
    #endif

    /* Padded rows [r0, r1) (of n * Hp) of a conv's input x (N, H, W, C bytes, int8 with
       is_signed) into out (rows of Wp * C values), x's row yp - ph in padded row yp of image
       n from column pw on: the int16 path's values (x less zp, int16, 0 around them) or with
       ``raw`` the u8s8 path's bytes (int8 shifted to u8, the zero point's byte around them,
       as sprat_i8_im2col_range writes taps). The A of ``sprat_i8_tile_seg`` /
       ``sprat_i8_tile_u8s8_seg``: a tap (i, j) of output pixel (oy, ox) at padded
       (oy * sh + i * dh, ox * sw + j) */
    static void sprat_i8_pad_map(unsigned char* out, const unsigned char* x, Py_ssize_t r0,
                                 Py_ssize_t r1, Py_ssize_t H, Py_ssize_t W, Py_ssize_t C,
                                 Py_ssize_t Hp, Py_ssize_t Wp, Py_ssize_t ph, Py_ssize_t pw,
                                 int zp, int is_signed, int raw) {
        const unsigned char flip = raw && is_signed ? 0x80 : 0;
        const int pad = raw ? (unsigned char)(zp & 0xFF) ^ flip : 0;
        const size_t es = raw ? 1 : sizeof(int16_t);
        const Py_ssize_t x0 = pw < Wp ? pw : Wp;
        const Py_ssize_t x1 = pw + W < Wp ? pw + W : Wp;
        for (Py_ssize_t r = r0; r < r1; r++) {
            const Py_ssize_t n = r / Hp, y = r - n * Hp - ph;
            unsigned char* o = out + r * Wp * C * es;
            if (y < 0 || y >= H || x1 <= x0) {
                memset(o, pad, (size_t)(Wp * C) * es);
                continue;
            }
            memset(o, pad, (size_t)(x0 * C) * es);
            const unsigned char* src = x + ((n * H + y) * W + (x0 - pw)) * C;
            const Py_ssize_t len = (x1 - x0) * C;
            if (raw) {
                unsigned char* dst = o + x0 * C;
                for (Py_ssize_t k = 0; k < len; k++)
                    dst[k] = src[k] ^ flip;
            } else if (is_signed) {
                int16_t* dst = (int16_t*)o + x0 * C;
                for (Py_ssize_t k = 0; k < len; k++)
                    dst[k] = (int16_t)((int)(signed char)src[k] - zp);
            } else {
                int16_t* dst = (int16_t*)o + x0 * C;
                for (Py_ssize_t k = 0; k < len; k++)
                    dst[k] = (int16_t)((int)src[k] - zp);
            }
            memset(o + x1 * C * es, pad, (size_t)((Wp - x1) * C) * es);
        }
    }

    /* The ``widen`` path's tile: the vnni layout's bytes (u8 A, s8 B, k-quads of 16-column
       panels), exact for every B: each byte widened to int16 in registers (vpmovzxbw /
       vpmovsxbw) and the pairs summed into int32 by vpmaddwd (|2 * 255 * 128| < 2^31: no
       saturation), so B is read as bytes, half the int16 path's. One vpmaddwd covers 4
       columns x 4 k of a row, its lanes (k01, k23) per column, added at the end. 2 rows a
       pass (8 accumulators, 4 widened B vectors, the A quad). */
    #if defined(__AVX2__)
    #define SPRAT_I8_WROW(r)                                                             \
        if (mr > r) {                                                                    \
            int32_t quad;                                                                \
            memcpy(&quad, a##r + 4 * q, 4);                                              \
            __m256i av = _mm256_broadcastq_epi64(                                        \
                _mm_cvtepu8_epi16(_mm_cvtsi32_si128(quad)));                             \
            c##r##0 = _mm256_add_epi32(c##r##0, _mm256_madd_epi16(av, b0));              \
            c##r##1 = _mm256_add_epi32(c##r##1, _mm256_madd_epi16(av, b1));              \
            c##r##2 = _mm256_add_epi32(c##r##2, _mm256_madd_epi16(av, b2));              \
            c##r##3 = _mm256_add_epi32(c##r##3, _mm256_madd_epi16(av, b3));              \
        }
    static inline __attribute__((always_inline)) void sprat_i8_tile_widen_t(
            const uint8_t* a, Py_ssize_t lda, const int8_t* b, Py_ssize_t kq, int32_t* c,
            const int mr) {
        __m256i c00 = _mm256_setzero_si256(), c01 = c00, c02 = c00, c03 = c00;
        __m256i c10 = c00, c11 = c00, c12 = c00, c13 = c00;
        const uint8_t* a0 = a;
        const uint8_t* a1 = a + (mr > 1 ? 1 : 0) * lda;
        for (Py_ssize_t q = 0; q < kq; q++) {
            const int8_t* bq = b + q * 64;
            __m256i b0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)bq));
            __m256i b1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(bq + 16)));
            __m256i b2 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(bq + 32)));
            __m256i b3 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(bq + 48)));
            SPRAT_I8_WROW(0) SPRAT_I8_WROW(1)
        }
        int32_t t[8];
    #define SPRAT_I8_WSTORE(r, g)                                                        \
        if (mr > r) {                                                                    \
            _mm256_storeu_si256((__m256i*)t, c##r##g);                                   \
            for (int j = 0; j < 4; j++)                                                  \
                c[r * 16 + 4 * g + j] = t[2 * j] + t[2 * j + 1];                         \
        }
        SPRAT_I8_WSTORE(0, 0) SPRAT_I8_WSTORE(0, 1) SPRAT_I8_WSTORE(0, 2) SPRAT_I8_WSTORE(0, 3)
        SPRAT_I8_WSTORE(1, 0) SPRAT_I8_WSTORE(1, 1) SPRAT_I8_WSTORE(1, 2) SPRAT_I8_WSTORE(1, 3)
    #undef SPRAT_I8_WSTORE
    }
    #undef SPRAT_I8_WROW

    static void sprat_i8_tile_widen(const uint8_t* a, Py_ssize_t lda, const int8_t* b,
                                    Py_ssize_t kq, int32_t* c, int mr) {
        for (int r = 0; r < mr; r += 2) {
            if (mr - r > 1)
                sprat_i8_tile_widen_t(a + r * lda, lda, b, kq, c + r * 16, 2);
            else
                sprat_i8_tile_widen_t(a + r * lda, lda, b, kq, c + r * 16, 1);
        }
    }
    #else
    static void sprat_i8_tile_widen(const uint8_t* a, Py_ssize_t lda, const int8_t* b,
                                    Py_ssize_t kq, int32_t* c, int mr) {
        (void)a; (void)lda; (void)b; (void)kq; (void)c; (void)mr;
    }
    #endif

    /* AMX (Intel's tile unit, amx-int8): one call multiplies a block of up to 32 rows x 32
       columns: C tiles 0-3 (16 x 16 int32 each), A tiles 4-5 (16 rows x 64 bytes of K), B tiles
       6-7 (16 k-quads x 16 columns x 4 bytes: the vnni path's panel layout, so a B tile is 16
       consecutive quads of one panel). tdpbusd multiplies u8 A by s8 B into int32 exactly.
       The block goes to c (32 x 32 int32); rows/columns past the block's are not stored. */
    #if defined(__AVX2__) && defined(__GNUC__) && defined(__linux__)
    #include <unistd.h>
    #include <sys/syscall.h>
    static int sprat_i8_amx_state = -1;
    static int sprat_i8_cpu_amx(void) {
        if (sprat_i8_amx_state < 0) {
            __builtin_cpu_init();
            /* NOTE: Linux hands out the tile state only on request (ARCH_REQ_XCOMP_PERM for
               XFEATURE_XTILEDATA), once per process */
            sprat_i8_amx_state = __builtin_cpu_supports("amx-tile")
                && __builtin_cpu_supports("amx-int8")
                && syscall(SYS_arch_prctl, 0x1023, 18) == 0;
        }
        return sprat_i8_amx_state;
    }
    /* palette 1; tiles 0-7: 64 bytes per row (uint16 at 16 + 2t), 16 rows (byte 48 + t).
       NOTE: a constant in memory: GCC dropped the stores of a stack copy that only
       ldtilecfg reads (it does not see the instruction read the whole 64 bytes) */
    static const unsigned char sprat_i8_amx_cfg[64] __attribute__((aligned(64))) = {
        1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0};
    __attribute__((target("amx-tile,amx-int8")))
    static void sprat_i8_amx_begin(void) { _tile_loadconfig(sprat_i8_amx_cfg); }
    __attribute__((target("amx-tile,amx-int8")))
    static void sprat_i8_amx_end(void) { _tile_release(); }
    __attribute__((target("amx-tile,amx-int8")))
    static void sprat_i8_amx_block(const uint8_t* a, Py_ssize_t lda, const int8_t* b,
                                   Py_ssize_t kq16, int32_t* c, int two_rows, int two_cols) {
        const int8_t* b1 = b + kq16 * 64;  /* the next panel */
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (Py_ssize_t q = 0; q < kq16; q += 16) {
            _tile_loadd(4, a + 4 * q, lda);
            _tile_loadd(6, b + q * 64, 64);
            _tile_dpbusd(0, 4, 6);
            if (two_cols) {
                _tile_loadd(7, b1 + q * 64, 64);
                _tile_dpbusd(1, 4, 7);
            }
            if (two_rows) {
                _tile_loadd(5, a + 16 * lda + 4 * q, lda);
                _tile_dpbusd(2, 5, 6);
                if (two_cols)
                    _tile_dpbusd(3, 5, 7);
            }
        }
        _tile_stored(0, c, 128);
        if (two_cols)
            _tile_stored(1, c + 16, 128);
        if (two_rows) {
            _tile_stored(2, c + 16 * 32, 128);
            if (two_cols)
                _tile_stored(3, c + 16 * 32 + 16, 128);
        }
    }
    #else
    static int sprat_i8_cpu_amx(void) { return 0; }
    static void sprat_i8_amx_begin(void) {}
    static void sprat_i8_amx_end(void) {}
    static void sprat_i8_amx_block(const uint8_t* a, Py_ssize_t lda, const int8_t* b,
                                   Py_ssize_t kq16, int32_t* c, int two_rows, int two_cols) {
        (void)a; (void)lda; (void)b; (void)kq16; (void)c; (void)two_rows; (void)two_cols;
    }
    #endif

#if defined(__AVX2__)
    /* The second requantisation of 8 columns (see sprat_i8_finish): clamp(rint(q * a + b),
       lo2, hi2), each operation rounded (no FMA: the caller's table check computes the same) */
    static inline __attribute__((always_inline)) __m256 sprat_i8_post(__m256 q, const float* post,
                                                                      Py_ssize_t pld) {
        __m256 r = _mm256_add_ps(_mm256_mul_ps(q, _mm256_loadu_ps(post)),
                                 _mm256_loadu_ps(post + pld));
        r = _mm256_round_ps(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        return _mm256_min_ps(_mm256_max_ps(r, _mm256_loadu_ps(post + 2 * pld)),
                             _mm256_loadu_ps(post + 3 * pld));
    }
#endif

    /* The epilogue of one tile row: n <= 16 int32 sums t, first corrected for the zero points
       when ct != NULL (the VNNI path multiplies raw operands: t += za * ct[j] - rs * zb[j],
       ct[j] = K * zb[j] - colsum_b[j], rs = the row's sum of A, zb at zb_step), plus the int32
       bias ib (may be NULL) -> kind 0: int32; kind 1: float32 float(t) * s (+ bias); kind 2: requantized,
       rint(float(t) * s [/ qdiv]) + zp clamped to [lo, hi], then (post != NULL, a second
       requantisation per column: post[j], post[pld + j], post[2 pld + j], post[3 pld + j] =
       a, b, lo2, hi2) clamp(rint(q * a + b), lo2, hi2), stored as u8 (q_signed 0) or s8.
       s, bias, ib, post point at the row's first column; s_step 0: one scale for every column. */
    static void sprat_i8_finish(const int32_t* t, Py_ssize_t n, const int32_t* ct, int32_t za,
                                int32_t rs, const int32_t* zb, int zb_step, int kind, void* y,
                                const float* s, int s_step, const float* bias,
                                const int32_t* ib, float qdiv, float zp, float lo, float hi,
                                int q_signed, const float* post, Py_ssize_t pld) {
        int32_t v[SPRAT_I8_NR];
        float f[SPRAT_I8_NR];
    #if defined(__AVX2__)
        /* NOTE: a full row of 16 in AVX2 (the scalar loops below are not vectorised with a
           variable n, and at AMX speed the epilogue was most of the time); the same
           operations in the same order, so the same bits */
        if (n == 16) {
            __m256i v0 = _mm256_loadu_si256((const __m256i*)t);
            __m256i v1 = _mm256_loadu_si256((const __m256i*)(t + 8));
            if (ct != NULL) {
                __m256i vza = _mm256_set1_epi32(za), vrs = _mm256_set1_epi32(rs);
                __m256i z0 = zb_step ? _mm256_loadu_si256((const __m256i*)zb)
                                     : _mm256_set1_epi32(zb[0]);
                __m256i z1 = zb_step ? _mm256_loadu_si256((const __m256i*)(zb + 8)) : z0;
                v0 = _mm256_sub_epi32(_mm256_add_epi32(v0, _mm256_mullo_epi32(vza,
                         _mm256_loadu_si256((const __m256i*)ct))), _mm256_mullo_epi32(vrs, z0));
                v1 = _mm256_sub_epi32(_mm256_add_epi32(v1, _mm256_mullo_epi32(vza,
                         _mm256_loadu_si256((const __m256i*)(ct + 8)))),
                                      _mm256_mullo_epi32(vrs, z1));
            }
            if (ib != NULL) {
                v0 = _mm256_add_epi32(v0, _mm256_loadu_si256((const __m256i*)ib));
                v1 = _mm256_add_epi32(v1, _mm256_loadu_si256((const __m256i*)(ib + 8)));
            }
            if (kind == 0) {
                _mm256_storeu_si256((__m256i*)y, v0);
                _mm256_storeu_si256((__m256i*)((int32_t*)y + 8), v1);
                return;
            }
            __m256 s0 = s_step ? _mm256_loadu_ps(s) : _mm256_set1_ps(s[0]);
            __m256 s1 = s_step ? _mm256_loadu_ps(s + 8) : s0;
            __m256 f0 = _mm256_mul_ps(_mm256_cvtepi32_ps(v0), s0);
            __m256 f1 = _mm256_mul_ps(_mm256_cvtepi32_ps(v1), s1);
            if (kind == 1) {
                if (bias != NULL) {
                    f0 = _mm256_add_ps(f0, _mm256_loadu_ps(bias));
                    f1 = _mm256_add_ps(f1, _mm256_loadu_ps(bias + 8));
                }
                _mm256_storeu_ps((float*)y, f0);
                _mm256_storeu_ps((float*)y + 8, f1);
                return;
            }
            if (qdiv != 0.0f) {
                __m256 d = _mm256_set1_ps(qdiv);
                f0 = _mm256_div_ps(f0, d);
                f1 = _mm256_div_ps(f1, d);
            }
            __m256 vz = _mm256_set1_ps(zp), vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
            f0 = _mm256_add_ps(_mm256_round_ps(f0, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), vz);
            f1 = _mm256_add_ps(_mm256_round_ps(f1, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), vz);
            f0 = _mm256_min_ps(_mm256_max_ps(f0, vlo), vhi);
            f1 = _mm256_min_ps(_mm256_max_ps(f1, vlo), vhi);
            if (post != NULL) {
                f0 = sprat_i8_post(f0, post, pld);
                f1 = sprat_i8_post(f1, post + 8, pld);
            }
            _mm256_storeu_si256((__m256i*)v, _mm256_cvtps_epi32(f0));
            _mm256_storeu_si256((__m256i*)(v + 8), _mm256_cvtps_epi32(f1));
            if (q_signed)
                for (int j = 0; j < 16; j++)
                    ((int8_t*)y)[j] = (int8_t)v[j];
            else
                for (int j = 0; j < 16; j++)
                    ((uint8_t*)y)[j] = (uint8_t)v[j];
            return;
        }
    #endif
        /* NOTE: uint32 arithmetic wraps (defined); the exact result fits int32 */
        for (Py_ssize_t j = 0; j < n; j++)
            v[j] = t[j];
        if (ct != NULL)
            for (Py_ssize_t j = 0; j < n; j++)
                v[j] = (int32_t)((uint32_t)v[j] + (uint32_t)za * (uint32_t)ct[j]
                                 - (uint32_t)rs * (uint32_t)zb[j * zb_step]);
        if (ib != NULL)
            for (Py_ssize_t j = 0; j < n; j++)
                v[j] = (int32_t)((uint32_t)v[j] + (uint32_t)ib[j]);
        if (kind == 0) {
            memcpy(y, v, n * 4);
            return;
        }
        for (Py_ssize_t j = 0; j < n; j++)
            f[j] = (float)v[j] * s[j * s_step];
        if (kind == 1) {
            float* yf = (float*)y;
            if (bias != NULL)
                for (Py_ssize_t j = 0; j < n; j++)
                    yf[j] = f[j] + bias[j];
            else
                memcpy(yf, f, n * 4);
            return;
        }
        if (qdiv != 0.0f)
            for (Py_ssize_t j = 0; j < n; j++)
                f[j] = f[j] / qdiv;
        for (Py_ssize_t j = 0; j < n; j++) {
            float r = rintf(f[j]) + zp;
            f[j] = r < lo ? lo : (r > hi ? hi : r);
        }
        if (post != NULL)
            for (Py_ssize_t j = 0; j < n; j++) {
                float r = rintf(f[j] * post[j] + post[pld + j]);
                f[j] = r < post[2 * pld + j] ? post[2 * pld + j]
                       : (r > post[3 * pld + j] ? post[3 * pld + j] : r);
            }
        if (q_signed) {
            int8_t* yq = (int8_t*)y;
            for (Py_ssize_t j = 0; j < n; j++)
                yq[j] = (int8_t)(int32_t)f[j];
        } else {
            uint8_t* yq = (uint8_t*)y;
            for (Py_ssize_t j = 0; j < n; j++)
                yq[j] = (uint8_t)(int32_t)f[j];
        }
    }

#if defined(__AVX2__)
    /* One requantised row of 16 columns: v0, v1 the int32 sums, o0, o1 the per-column offset
       (added when has_o), then as sprat_i8_finish_q8 describes; the bytes to y. The body of
       sprat_i8_finish_q8's row loop and of the tiles' in-register epilogue (sprat_i8_q8_rows),
       so both give the same bits. */
    static inline __attribute__((always_inline)) void sprat_i8_q8_row(
            __m256i v0, __m256i v1, __m256i o0, __m256i o1, int has_o, __m256 s0, __m256 s1,
            int has_post, __m256 pa0, __m256 pa1, __m256 pb0, __m256 pb1, __m256 pl0,
            __m256 pl1, __m256 ph0, __m256 ph1, __m256 flo, __m256 fhi, __m256i izp,
            __m256 magic, __m256 magic_z, int q_signed, unsigned char* y, int nbytes) {
        if (has_o) {
            v0 = _mm256_add_epi32(v0, o0);
            v1 = _mm256_add_epi32(v1, o1);
        }
        __m256 f0 = _mm256_mul_ps(_mm256_cvtepi32_ps(v0), s0);
        __m256 f1 = _mm256_mul_ps(_mm256_cvtepi32_ps(v1), s1);
        __m256i i0, i1;
        if (has_post) {
            /* q = rint(f) + zp (exact integers), then clamp(rint(q * a + b), lo2, hi2). NOTE:
               without q's clamp to [lo, hi]: the second map is monotonic in q and lo2, hi2 are
               its values at lo and hi (``qconv.lookup_stage``), so a q past them gives the
               same bytes. rint(f) + zp as (f + M) - (M - zp), M = 1.5 * 2^23
               (SPRAT_I8_MAGIC): f + M rounds to an integer (half to even, M even) for
               |f| < 2^22, where the result is exact; beyond, where q saturates, it is still
               monotonic in f (one add less than vroundps) */
            f0 = _mm256_sub_ps(_mm256_add_ps(f0, magic), magic_z);
            f1 = _mm256_sub_ps(_mm256_add_ps(f1, magic), magic_z);
            f0 = _mm256_add_ps(_mm256_mul_ps(f0, pa0), pb0);
            f1 = _mm256_add_ps(_mm256_mul_ps(f1, pa1), pb1);
            i0 = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(f0, pl0), ph0));
            i1 = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(f1, pl1), ph1));
        } else {
            f0 = _mm256_min_ps(_mm256_max_ps(f0, flo), fhi);
            f1 = _mm256_min_ps(_mm256_max_ps(f1, flo), fhi);
            i0 = _mm256_add_epi32(_mm256_cvtps_epi32(f0), izp);
            i1 = _mm256_add_epi32(_mm256_cvtps_epi32(f1), izp);
        }
        /* NOTE: the values are within the type's range: the packs do not saturate */
        __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(i0, i1), 0xD8);
        __m128i lo16 = _mm256_castsi256_si128(w), hi16 = _mm256_extracti128_si256(w, 1);
        __m128i b = q_signed ? _mm_packs_epi16(lo16, hi16) : _mm_packus_epi16(lo16, hi16);
        if (nbytes == 16)
            _mm_storeu_si128((__m128i*)y, b);
        else
            _mm_storel_epi64((__m128i*)y, b);  /* NOTE: the first 8 columns (nbytes 8) */
    }

    /* The requantizing epilogue (kind 2) of sprat_i8_finish_block for one A zero point za and
       no division, 16 columns at a time; returns the columns done (a multiple of 16). The
       same operations in the same order as sprat_i8_finish, so the same bits; NOTE: the
       per-column terms are computed once per 16 columns (ib + za * ct folded into one int32
       offset: the wrapping sums are the same modulo 2^32; rs * zb skipped when every zb is 0,
       a symmetric weight), kept in registers across the rows (locals: the byte stores would
       otherwise force reloads), and the 16 results leave as one 16-byte store: the epilogue
       was most of a 1x1 conv's time at small K (MobileNetV2's 16 -> 96 expansion).
       NOTE: clamp(rint(f) + zp, lo, hi) is computed as rint(clamp(f, lo - zp, hi - zp)) + zp
       (cvtps2dq rounds half to even in the default rounding mode, as rint): equal, as rint is
       monotonic and keeps the integer bounds, and the clamp first keeps cvtps2dq in range;
       likewise the second requantisation clamps q * a + b to [lo2, hi2] before rounding. */
    static Py_ssize_t sprat_i8_finish_q8(const int32_t* t, Py_ssize_t ldt, Py_ssize_t rows,
                                         Py_ssize_t n, const int32_t* ct, int32_t za,
                                         const int32_t* rs, const int32_t* zb,
                                         unsigned char* y, Py_ssize_t ldy, const float* s,
                                         int s_step, const int32_t* ib, float zp, float lo,
                                         float hi, int q_signed, const float* post,
                                         Py_ssize_t pld) {
        const __m256 flo = _mm256_set1_ps(lo - zp), fhi = _mm256_set1_ps(hi - zp);
        const __m256 fz = _mm256_set1_ps(zp);
        const __m256i izp = _mm256_set1_epi32((int32_t)zp);
        const __m256i zero = _mm256_setzero_si256();
        const __m256 magic = _mm256_set1_ps(SPRAT_I8_MAGIC);
        const __m256 magic_z = _mm256_set1_ps(SPRAT_I8_MAGIC - zp);
        const int has_o = ib != NULL || ct != NULL;
        int zb_any = 0;
        if (ct != NULL)
            for (Py_ssize_t k = 0; k < n; k++)
                zb_any |= zb[k];
        Py_ssize_t j = 0;
        for (; j + 16 <= n; j += 16) {
            __m256i o0 = ib != NULL ? _mm256_loadu_si256((const __m256i*)(ib + j)) : zero;
            __m256i o1 = ib != NULL ? _mm256_loadu_si256((const __m256i*)(ib + j + 8)) : zero;
            __m256i z0 = zero, z1 = zero;
            if (ct != NULL) {
                __m256i vza = _mm256_set1_epi32(za);
                o0 = _mm256_add_epi32(o0, _mm256_mullo_epi32(
                    vza, _mm256_loadu_si256((const __m256i*)(ct + j))));
                o1 = _mm256_add_epi32(o1, _mm256_mullo_epi32(
                    vza, _mm256_loadu_si256((const __m256i*)(ct + j + 8))));
                if (zb_any) {
                    z0 = _mm256_loadu_si256((const __m256i*)(zb + j));
                    z1 = _mm256_loadu_si256((const __m256i*)(zb + j + 8));
                }
            }
            const __m256 s0 = s_step ? _mm256_loadu_ps(s + j) : _mm256_set1_ps(s[0]);
            const __m256 s1 = s_step ? _mm256_loadu_ps(s + j + 8) : s0;
            __m256 pa0 = fz, pa1 = fz, pb0 = fz, pb1 = fz, pl0 = fz, pl1 = fz, ph0 = fz, ph1 = fz;
            if (post != NULL) {
                pa0 = _mm256_loadu_ps(post + j);
                pa1 = _mm256_loadu_ps(post + j + 8);
                pb0 = _mm256_loadu_ps(post + pld + j);
                pb1 = _mm256_loadu_ps(post + pld + j + 8);
                pl0 = _mm256_loadu_ps(post + 2 * pld + j);
                pl1 = _mm256_loadu_ps(post + 2 * pld + j + 8);
                ph0 = _mm256_loadu_ps(post + 3 * pld + j);
                ph1 = _mm256_loadu_ps(post + 3 * pld + j + 8);
            }
            for (Py_ssize_t r = 0; r < rows; r++) {
                __m256i v0 = _mm256_loadu_si256((const __m256i*)(t + r * ldt + j));
                __m256i v1 = _mm256_loadu_si256((const __m256i*)(t + r * ldt + j + 8));
                if (zb_any) {
                    /* NOTE: before the offset (the int32 sums wrap: the same bits) */
                    __m256i vrs = _mm256_set1_epi32(rs[r]);
                    v0 = _mm256_sub_epi32(v0, _mm256_mullo_epi32(vrs, z0));
                    v1 = _mm256_sub_epi32(v1, _mm256_mullo_epi32(vrs, z1));
                }
                sprat_i8_q8_row(v0, v1, o0, o1, has_o, s0, s1, post != NULL, pa0, pa1, pb0,
                                pb1, pl0, pl1, ph0, ph1, flo, fhi, izp, magic, magic_z,
                                q_signed, y + r * ldy + j, 16);
            }
        }
        return j;
    }

    /* The in-register epilogue of sprat_i8_tile_q8 / sprat_i8_tile_u8s8_q8 for the mr rows
       of accumulators c<row><half>: sprat_i8_finish_q8's operations (the same bits), with the
       per-column offset o (the int32 bias, and on the u8s8 path its zero-point term) and the
       other per-column terms loaded once per tile. s, post at the panel's first column; with
       nh = 1 the first 8 columns only (nothing read or stored past them). */
    static inline __attribute__((always_inline)) void sprat_i8_q8_rows(
            const int mr, __m256i c00, __m256i c01, __m256i c10, __m256i c11, __m256i c20,
            __m256i c21, __m256i c30, __m256i c31, __m256i c40, __m256i c41, __m256i c50,
            __m256i c51, __m256i o0, __m256i o1, int has_o, unsigned char* y, Py_ssize_t ldy,
            const float* s, int s_step, float zp, float lo, float hi, int q_signed,
            const float* post, Py_ssize_t pld, const int nh) {
        const __m256 flo = _mm256_set1_ps(lo - zp), fhi = _mm256_set1_ps(hi - zp);
        const __m256 fz = _mm256_set1_ps(zp);
        const __m256i izp = _mm256_set1_epi32((int32_t)zp);
        const __m256 magic = _mm256_set1_ps(SPRAT_I8_MAGIC);
        const __m256 magic_z = _mm256_set1_ps(SPRAT_I8_MAGIC - zp);
        const int has_post = post != NULL;
        const __m256 s0 = s_step ? _mm256_loadu_ps(s) : _mm256_set1_ps(s[0]);
        const __m256 s1 = s_step && nh > 1 ? _mm256_loadu_ps(s + 8) : s0;
        __m256 pa0 = fz, pa1 = fz, pb0 = fz, pb1 = fz, pl0 = fz, pl1 = fz, ph0 = fz, ph1 = fz;
        if (has_post) {
            pa0 = _mm256_loadu_ps(post);
            pb0 = _mm256_loadu_ps(post + pld);
            pl0 = _mm256_loadu_ps(post + 2 * pld);
            ph0 = _mm256_loadu_ps(post + 3 * pld);
            pa1 = pa0, pb1 = pb0, pl1 = pl0, ph1 = ph0;
            if (nh > 1) {
                pa1 = _mm256_loadu_ps(post + 8);
                pb1 = _mm256_loadu_ps(post + pld + 8);
                pl1 = _mm256_loadu_ps(post + 2 * pld + 8);
                ph1 = _mm256_loadu_ps(post + 3 * pld + 8);
            }
        }
    #define SPRAT_I8_Q8ROW(r)                                                            \
        if (mr > r)                                                                      \
            sprat_i8_q8_row(c##r##0, c##r##1, o0, o1, has_o, s0, s1, has_post, pa0, pa1, \
                            pb0, pb1, pl0, pl1, ph0, ph1, flo, fhi, izp, magic, magic_z, \
                            q_signed, y + r * ldy, nh > 1 ? 16 : 8);
        SPRAT_I8_Q8ROW(0) SPRAT_I8_Q8ROW(1) SPRAT_I8_Q8ROW(2)
        SPRAT_I8_Q8ROW(3) SPRAT_I8_Q8ROW(4) SPRAT_I8_Q8ROW(5)
    #undef SPRAT_I8_Q8ROW
    }

    /* sprat_i8_tile (int16 path) of a full 16-column panel (nh = 2) or of the first 8
       columns of one (nh = 1: a last panel of 8, its other half padding) with
       sprat_i8_finish_q8's requantising epilogue (no zero-point terms: the int16 operands are
       already shifted) on the accumulators in registers, the bytes of row r to y + r * ldy:
       the tile's int32 sums no longer go through memory, and the per-column terms are loaded
       once per tile. For small K (a 1x1 conv of 16-32 channels) the separate epilogue cost as
       much as the products. s, ib, post at the panel's first column. */
    #define SPRAT_I8_Q8_EPILOGUE                                                         \
        const __m256i zero = _mm256_setzero_si256();                                     \
        __m256i o0 = ib != NULL ? _mm256_loadu_si256((const __m256i*)ib) : zero;         \
        __m256i o1 = ib != NULL && nh > 1 ? _mm256_loadu_si256((const __m256i*)(ib + 8)) \
                                          : zero;                                        \
        sprat_i8_q8_rows(mr, c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, \
                         o0, o1, ib != NULL, y, ldy, s, s_step, zp, lo, hi, q_signed,    \
                         post, pld, nh)
    static inline __attribute__((always_inline)) void sprat_i8_tile_q8_t(
            const int16_t* a, Py_ssize_t lda, const int16_t* b, Py_ssize_t kp,
            unsigned char* y, Py_ssize_t ldy, const float* s, int s_step, const int32_t* ib,
            float zp, float lo, float hi, int q_signed, const float* post, Py_ssize_t pld,
            const int mr, const int nh) {
        SPRAT_I8_KLOOP;
        SPRAT_I8_Q8_EPILOGUE;
    }

    /* The same with A read in place (sprat_i8_tile_seg's ap, rs, nseg, kps) */
    static inline __attribute__((always_inline)) void sprat_i8_tile_q8_seg_t(
            const int16_t* const* ap, Py_ssize_t rs, Py_ssize_t nseg, Py_ssize_t kps,
            const int16_t* b, unsigned char* y, Py_ssize_t ldy, const float* s, int s_step,
            const int32_t* ib, float zp, float lo, float hi, int q_signed, const float* post,
            Py_ssize_t pld, const int mr, const int nh) {
        SPRAT_I8_KLOOP_SEG;
        SPRAT_I8_Q8_EPILOGUE;
    }

    #define SPRAT_I8_UQ8_EPILOGUE                                                        \
        const __m256i zero = _mm256_setzero_si256(), vza = _mm256_set1_epi32(za);       \
        __m256i o0 = ib != NULL ? _mm256_loadu_si256((const __m256i*)ib) : zero;         \
        __m256i o1 = ib != NULL && nh > 1 ? _mm256_loadu_si256((const __m256i*)(ib + 8)) \
                                          : zero;                                        \
        o0 = _mm256_add_epi32(o0, _mm256_mullo_epi32(                                    \
            vza, _mm256_loadu_si256((const __m256i*)ct)));                               \
        if (nh > 1)                                                                      \
            o1 = _mm256_add_epi32(o1, _mm256_mullo_epi32(                                \
                vza, _mm256_loadu_si256((const __m256i*)(ct + 8))));                     \
        sprat_i8_q8_rows(mr, c00, c01, c10, c11, c20, c21, c30, c31, zero, zero, zero,   \
                         zero, o0, o1, 1, y, ldy, s, s_step, zp, lo, hi, q_signed, post, \
                         pld, nh)
    /* The same on the u8s8 path (at most 4 rows a pass, SPRAT_I8_UKLOOP): raw bytes, so the
       zero-point term za * ct[j] (ct = K * zb - colsum) joins the offset; B's zero points
       all 0 (the caller's condition: no term per row) */
    static inline __attribute__((always_inline)) void sprat_i8_tile_u8s8_q8_t(
            const uint8_t* a, Py_ssize_t lda, const int8_t* b, Py_ssize_t kq,
            unsigned char* y, Py_ssize_t ldy, const float* s, int s_step, const int32_t* ib,
            const int32_t* ct, int32_t za, float zp, float lo, float hi, int q_signed,
            const float* post, Py_ssize_t pld, const int32_t* rec, Py_ssize_t nrec,
            const int mr, const int nh) {
        SPRAT_I8_UKLOOP;
        SPRAT_I8_UQ8_EPILOGUE;
    }

    /* The same with A read in place (sprat_i8_tile_u8s8_seg's ap, rs, nseg, kqs), no
       records */
    static inline __attribute__((always_inline)) void sprat_i8_tile_u8s8_q8_seg_t(
            const uint8_t* const* ap, Py_ssize_t rs, Py_ssize_t nseg, Py_ssize_t kqs,
            const int8_t* b, unsigned char* y, Py_ssize_t ldy, const float* s, int s_step,
            const int32_t* ib, const int32_t* ct, int32_t za, float zp, float lo, float hi,
            int q_signed, const float* post, Py_ssize_t pld, const int mr, const int nh) {
        SPRAT_I8_UKLOOP_SEG;
        SPRAT_I8_UQ8_EPILOGUE;
    }

    static void sprat_i8_tile_u8s8_q8_seg(const uint8_t* const* ap, Py_ssize_t rs,
                                          Py_ssize_t nseg, Py_ssize_t kqs, const int8_t* b,
                                          int mr, int nr, unsigned char* y, Py_ssize_t ldy,
                                          const float* s, int s_step, const int32_t* ib,
                                          const int32_t* ct, int32_t za, float zp, float lo,
                                          float hi, int q_signed, const float* post,
                                          Py_ssize_t pld) {
    #define SPRAT_I8_UQ(A, Y, R, H)                                                      \
        sprat_i8_tile_u8s8_q8_seg_t(A, rs, nseg, kqs, b, Y, ldy, s, s_step, ib, ct, za,  \
                                    zp, lo, hi, q_signed, post, pld, R, H)
    #define SPRAT_I8_UQ_ALL(H)                                                           \
        switch (mr) {                                                                    \
        case 1: SPRAT_I8_UQ(ap, y, 1, H); break;                                         \
        case 2: SPRAT_I8_UQ(ap, y, 2, H); break;                                         \
        case 3: SPRAT_I8_UQ(ap, y, 3, H); break;                                         \
        case 4: SPRAT_I8_UQ(ap, y, 4, H); break;                                         \
        case 5: SPRAT_I8_UQ(ap, y, 4, H); SPRAT_I8_UQ(ap + 4, y + 4 * ldy, 1, H); break; \
        default: SPRAT_I8_UQ(ap, y, 4, H); SPRAT_I8_UQ(ap + 4, y + 4 * ldy, 2, H); break;\
        }
        if (nr > 8) {
            SPRAT_I8_UQ_ALL(2)
        } else {
            SPRAT_I8_UQ_ALL(1)
        }
    #undef SPRAT_I8_UQ_ALL
    #undef SPRAT_I8_UQ
    }

    /* nr: the panel's columns, 16, or 8 (a last panel's first half) */
    static void sprat_i8_tile_u8s8_q8(const uint8_t* a, Py_ssize_t lda, const int8_t* b,
                                      Py_ssize_t kq, int mr, int nr, unsigned char* y,
                                      Py_ssize_t ldy, const float* s, int s_step,
                                      const int32_t* ib, const int32_t* ct, int32_t za,
                                      float zp, float lo, float hi, int q_signed,
                                      const float* post, Py_ssize_t pld, const int32_t* rec,
                                      Py_ssize_t nrec) {
    #define SPRAT_I8_UQ(A, Y, R, H)                                                      \
        sprat_i8_tile_u8s8_q8_t(A, lda, b, kq, Y, ldy, s, s_step, ib, ct, za, zp, lo, hi,\
                                q_signed, post, pld, rec, nrec, R, H)
    #define SPRAT_I8_UQ_ALL(H)                                                           \
        switch (mr) {                                                                    \
        case 1: SPRAT_I8_UQ(a, y, 1, H); break;                                          \
        case 2: SPRAT_I8_UQ(a, y, 2, H); break;                                          \
        case 3: SPRAT_I8_UQ(a, y, 3, H); break;                                          \
        case 4: SPRAT_I8_UQ(a, y, 4, H); break;                                          \
        case 5: SPRAT_I8_UQ(a, y, 4, H); SPRAT_I8_UQ(a + 4 * lda, y + 4 * ldy, 1, H); break;\
        default: SPRAT_I8_UQ(a, y, 4, H); SPRAT_I8_UQ(a + 4 * lda, y + 4 * ldy, 2, H); break;\
        }
        if (nr > 8) {
            SPRAT_I8_UQ_ALL(2)
        } else {
            SPRAT_I8_UQ_ALL(1)
        }
    #undef SPRAT_I8_UQ_ALL
    #undef SPRAT_I8_UQ
    }

    #define SPRAT_I8_TILE_Q8 1
    /* nr: the panel's columns, 16, or 8 (a last panel's first half) */
    static void sprat_i8_tile_q8(const int16_t* a, Py_ssize_t lda, const int16_t* b,
                                 Py_ssize_t kp, int mr, int nr, unsigned char* y,
                                 Py_ssize_t ldy, const float* s, int s_step, const int32_t* ib,
                                 float zp, float lo, float hi, int q_signed, const float* post,
                                 Py_ssize_t pld) {
    #define SPRAT_I8_Q8CASE(R, H)                                                        \
        case R: sprat_i8_tile_q8_t(a, lda, b, kp, y, ldy, s, s_step, ib, zp, lo, hi,    \
                                   q_signed, post, pld, R, H); break;
        if (nr > 8) {
            switch (mr) {
            SPRAT_I8_Q8CASE(1, 2) SPRAT_I8_Q8CASE(2, 2) SPRAT_I8_Q8CASE(3, 2)
            SPRAT_I8_Q8CASE(4, 2) SPRAT_I8_Q8CASE(5, 2)
            default: sprat_i8_tile_q8_t(a, lda, b, kp, y, ldy, s, s_step, ib, zp, lo, hi,
                                        q_signed, post, pld, 6, 2); break;
            }
        } else {
            switch (mr) {
            SPRAT_I8_Q8CASE(1, 1) SPRAT_I8_Q8CASE(2, 1) SPRAT_I8_Q8CASE(3, 1)
            SPRAT_I8_Q8CASE(4, 1) SPRAT_I8_Q8CASE(5, 1)
            default: sprat_i8_tile_q8_t(a, lda, b, kp, y, ldy, s, s_step, ib, zp, lo, hi,
                                        q_signed, post, pld, 6, 1); break;
            }
        }
    #undef SPRAT_I8_Q8CASE
    }

    static void sprat_i8_tile_q8_seg(const int16_t* const* ap, Py_ssize_t rs, Py_ssize_t nseg,
                                     Py_ssize_t kps, const int16_t* b, int mr, int nr,
                                     unsigned char* y, Py_ssize_t ldy, const float* s,
                                     int s_step, const int32_t* ib, float zp, float lo,
                                     float hi, int q_signed, const float* post,
                                     Py_ssize_t pld) {
    #define SPRAT_I8_Q8CASE(R, H)                                                        \
        case R: sprat_i8_tile_q8_seg_t(ap, rs, nseg, kps, b, y, ldy, s, s_step, ib, zp, lo,\
                                       hi, q_signed, post, pld, R, H); break;
        if (nr > 8) {
            switch (mr) {
            SPRAT_I8_Q8CASE(1, 2) SPRAT_I8_Q8CASE(2, 2) SPRAT_I8_Q8CASE(3, 2)
            SPRAT_I8_Q8CASE(4, 2) SPRAT_I8_Q8CASE(5, 2)
            default: sprat_i8_tile_q8_seg_t(ap, rs, nseg, kps, b, y, ldy, s, s_step, ib, zp,
                                            lo, hi, q_signed, post, pld, 6, 2); break;
            }
        } else {
            switch (mr) {
            SPRAT_I8_Q8CASE(1, 1) SPRAT_I8_Q8CASE(2, 1) SPRAT_I8_Q8CASE(3, 1)
            SPRAT_I8_Q8CASE(4, 1) SPRAT_I8_Q8CASE(5, 1)
            default: sprat_i8_tile_q8_seg_t(ap, rs, nseg, kps, b, y, ldy, s, s_step, ib, zp,
                                            lo, hi, q_signed, post, pld, 6, 1); break;
            }
        }
    #undef SPRAT_I8_Q8CASE
    }

    /* sprat_i8_finish_q8 on AVX-512 (16 columns a register, the bytes out by vpmovdb): the
       same operations on the same values, so the same bits. Run when the CPU has AVX-512F
       and ``sprat_i8_wide`` is set (``i8_set_wide``: quant.py sets it unless the int16 path
       is forced, so that path's tests run the AVX2 epilogue above). NOTE: the epilogue bounds
       a 1x1 conv at small K (MobileNetV2's 16 -> 96 expansion: 1.2M outputs at K = 16) */
    static int sprat_i8_wide = 0;
    static void sprat_i8_set_wide(int w) { sprat_i8_wide = w; }
    #if defined(__GNUC__)
    static int sprat_i8_cpu_avx512(void) {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f");
    }
    __attribute__((target("avx512f")))
    static Py_ssize_t sprat_i8_finish_q8_512(const int32_t* t, Py_ssize_t ldt, Py_ssize_t rows,
                                             Py_ssize_t n, const int32_t* ct, int32_t za,
                                             const int32_t* rs, const int32_t* zb,
                                             unsigned char* y, Py_ssize_t ldy, const float* s,
                                             int s_step, const int32_t* ib, float zp, float lo,
                                             float hi, const float* post, Py_ssize_t pld) {
        const __m512 flo = _mm512_set1_ps(lo - zp), fhi = _mm512_set1_ps(hi - zp);
        const __m512 fz = _mm512_set1_ps(zp);
        const __m512i izp = _mm512_set1_epi32((int32_t)zp);
        const __m512i zero = _mm512_setzero_si512();
        const __m512 magic = _mm512_set1_ps(SPRAT_I8_MAGIC);
        const __m512 magic_z = _mm512_set1_ps(SPRAT_I8_MAGIC - zp);
        const int has_o = ib != NULL || ct != NULL;
        int zb_any = 0;
        if (ct != NULL)
            for (Py_ssize_t k = 0; k < n; k++)
                zb_any |= zb[k];
        Py_ssize_t j = 0;
        for (; j + 16 <= n; j += 16) {
            __m512i o = ib != NULL ? _mm512_loadu_si512((const void*)(ib + j)) : zero;
            __m512i z = zero;
            if (ct != NULL) {
                o = _mm512_add_epi32(o, _mm512_mullo_epi32(
                    _mm512_set1_epi32(za), _mm512_loadu_si512((const void*)(ct + j))));
                if (zb_any)
                    z = _mm512_loadu_si512((const void*)(zb + j));
            }
            const __m512 sv = s_step ? _mm512_loadu_ps(s + j) : _mm512_set1_ps(s[0]);
            __m512 pa = fz, pb = fz, pl = fz, ph = fz;
            if (post != NULL) {
                pa = _mm512_loadu_ps(post + j);
                pb = _mm512_loadu_ps(post + pld + j);
                pl = _mm512_loadu_ps(post + 2 * pld + j);
                ph = _mm512_loadu_ps(post + 3 * pld + j);
            }
            for (Py_ssize_t r = 0; r < rows; r++) {
                __m512i v = _mm512_loadu_si512((const void*)(t + r * ldt + j));
                if (has_o)
                    v = _mm512_add_epi32(v, o);
                if (zb_any)
                    v = _mm512_sub_epi32(v, _mm512_mullo_epi32(_mm512_set1_epi32(rs[r]), z));
                __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(v), sv);
                __m512i i;
                if (post != NULL) {
                    /* NOTE: without q's clamp, and rint(f) + zp by the magic number, as
                       sprat_i8_finish_q8 */
                    f = _mm512_sub_ps(_mm512_add_ps(f, magic), magic_z);
                    f = _mm512_add_ps(_mm512_mul_ps(f, pa), pb);
                    i = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(f, pl), ph));
                } else {
                    f = _mm512_min_ps(_mm512_max_ps(f, flo), fhi);
                    i = _mm512_add_epi32(_mm512_cvtps_epi32(f), izp);
                }
                /* NOTE: within the type's range: the low byte is the u8 / s8 value */
                _mm_storeu_si128((__m128i*)(y + r * ldy + j), _mm512_cvtepi32_epi8(i));
            }
        }
        return j;
    }
    #else
    static int sprat_i8_cpu_avx512(void) { return 0; }
    static Py_ssize_t sprat_i8_finish_q8_512(const int32_t* t, Py_ssize_t ldt, Py_ssize_t rows,
                                             Py_ssize_t n, const int32_t* ct, int32_t za,
                                             const int32_t* rs, const int32_t* zb,
                                             unsigned char* y, Py_ssize_t ldy, const float* s,
                                             int s_step, const int32_t* ib, float zp, float lo,
                                             float hi, const float* post, Py_ssize_t pld) {
        return 0;
    }
    #endif
#else
    static void sprat_i8_set_wide(int w) { (void)w; }
    static int sprat_i8_cpu_avx512(void) { return 0; }
    #define SPRAT_I8_TILE_Q8 0
    static void sprat_i8_tile_u8s8_q8(const uint8_t* a, Py_ssize_t lda, const int8_t* b,
                                      Py_ssize_t kq, int mr, int nr, unsigned char* y,
                                      Py_ssize_t ldy, const float* s, int s_step,
                                      const int32_t* ib, const int32_t* ct, int32_t za,
                                      float zp, float lo, float hi, int q_signed,
                                      const float* post, Py_ssize_t pld, const int32_t* rec,
                                      Py_ssize_t nrec) {
        (void)a; (void)lda; (void)b; (void)kq; (void)mr; (void)nr; (void)y; (void)ldy; (void)s;
        (void)s_step; (void)ib; (void)ct; (void)za; (void)zp; (void)lo; (void)hi;
        (void)q_signed; (void)post; (void)pld; (void)rec; (void)nrec;
    }
    static void sprat_i8_tile_u8s8_q8_seg(const uint8_t* const* ap, Py_ssize_t rs,
                                          Py_ssize_t nseg, Py_ssize_t kqs, const int8_t* b,
                                          int mr, int nr, unsigned char* y, Py_ssize_t ldy,
                                          const float* s, int s_step, const int32_t* ib,
                                          const int32_t* ct, int32_t za, float zp, float lo,
                                          float hi, int q_signed, const float* post,
                                          Py_ssize_t pld) {
        (void)ap; (void)rs; (void)nseg; (void)kqs; (void)b; (void)mr; (void)nr; (void)y;
        (void)ldy; (void)s; (void)s_step; (void)ib; (void)ct; (void)za; (void)zp; (void)lo;
        (void)hi; (void)q_signed; (void)post; (void)pld;
    }
    static void sprat_i8_tile_q8(const int16_t* a, Py_ssize_t lda, const int16_t* b,
                                 Py_ssize_t kp, int mr, int nr, unsigned char* y,
                                 Py_ssize_t ldy, const float* s, int s_step, const int32_t* ib,
                                 float zp, float lo, float hi, int q_signed, const float* post,
                                 Py_ssize_t pld) {
        (void)a; (void)lda; (void)b; (void)kp; (void)mr; (void)nr; (void)y; (void)ldy; (void)s;
        (void)s_step; (void)ib; (void)zp; (void)lo; (void)hi; (void)q_signed; (void)post;
        (void)pld;
    }
    static void sprat_i8_tile_q8_seg(const int16_t* const* ap, Py_ssize_t rs, Py_ssize_t nseg,
                                     Py_ssize_t kps, const int16_t* b, int mr, int nr,
                                     unsigned char* y, Py_ssize_t ldy, const float* s,
                                     int s_step, const int32_t* ib, float zp, float lo,
                                     float hi, int q_signed, const float* post,
                                     Py_ssize_t pld) {
        (void)ap; (void)rs; (void)nseg; (void)kps; (void)b; (void)mr; (void)nr; (void)y;
        (void)ldy; (void)s; (void)s_step; (void)ib; (void)zp; (void)lo; (void)hi;
        (void)q_signed; (void)post; (void)pld;
    }
#endif

    /* The epilogue of a block of rows x n sums (t, row pitch ldt) into Y's rows (y, pitch ldy
       bytes): as sprat_i8_finish row by row, but 8 columns at a time across the rows, so the
       per-column terms (ct, zb, s, bias, ib) are loaded once per block. za and rs: A's zero
       point (step za_step) and row sums, per row of the block. */
    static void sprat_i8_finish_block(const int32_t* t, Py_ssize_t ldt, Py_ssize_t rows,
                                      Py_ssize_t n, const int32_t* ct, const int32_t* za,
                                      int za_step, int za_add, const int32_t* rs,
                                      const int32_t* zb, int kind, unsigned char* y,
                                      Py_ssize_t ldy, const float* s, int s_step,
                                      const float* bias, const int32_t* ib, float qdiv,
                                      float zp, float lo, float hi, int q_signed,
                                      const float* post, Py_ssize_t pld) {
        Py_ssize_t j = 0;
        int esize = kind == 2 ? 1 : 4;
    #if defined(__AVX2__)
        const __m256 vz = _mm256_set1_ps(zp), vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
        const __m256 vd = _mm256_set1_ps(qdiv);
        if (kind == 2 && za_step == 0 && qdiv == 0.0f && n >= 16 && sprat_i8_wide)
            j = sprat_i8_finish_q8_512(t, ldt, rows, n, ct, za[0] + za_add, rs, zb, y, ldy, s,
                                       s_step, ib, zp, lo, hi, post, pld);
        else if (kind == 2 && za_step == 0 && qdiv == 0.0f && n >= 16)
            j = sprat_i8_finish_q8(t, ldt, rows, n, ct, za[0] + za_add, rs, zb, y, ldy, s,
                                   s_step, ib, zp, lo, hi, q_signed, post, pld);
        for (; j + 8 <= n; j += 8) {
            __m256i ctv = _mm256_setzero_si256(), zbv = ctv, ibv = ctv;
            if (ct != NULL) {
                ctv = _mm256_loadu_si256((const __m256i*)(ct + j));
                zbv = _mm256_loadu_si256((const __m256i*)(zb + j));
            }
            if (ib != NULL)
                ibv = _mm256_loadu_si256((const __m256i*)(ib + j));
            __m256 sv = s_step ? _mm256_loadu_ps(s + j) : _mm256_set1_ps(s[0]);
            __m256 bv = bias != NULL ? _mm256_loadu_ps(bias + j) : _mm256_setzero_ps();
            for (Py_ssize_t r = 0; r < rows; r++) {
                __m256i v = _mm256_loadu_si256((const __m256i*)(t + r * ldt + j));
                if (ct != NULL)
                    v = _mm256_sub_epi32(
                        _mm256_add_epi32(v, _mm256_mullo_epi32(
                            _mm256_set1_epi32(za[r * za_step] + za_add), ctv)),
                        _mm256_mullo_epi32(_mm256_set1_epi32(rs[r]), zbv));
                v = _mm256_add_epi32(v, ibv);
                unsigned char* yr = y + r * ldy + j * esize;
                if (kind == 0) {
                    _mm256_storeu_si256((__m256i*)yr, v);
                    continue;
                }
                __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(v), sv);
                if (kind == 1) {
                    if (bias != NULL)
                        f = _mm256_add_ps(f, bv);
                    _mm256_storeu_ps((float*)yr, f);
                    continue;
                }
                if (qdiv != 0.0f)
                    f = _mm256_div_ps(f, vd);
                f = _mm256_add_ps(_mm256_round_ps(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                                  vz);
                f = _mm256_min_ps(_mm256_max_ps(f, vlo), vhi);
                if (post != NULL)
                    f = sprat_i8_post(f, post + j, pld);
                __m256i qi = _mm256_cvtps_epi32(f);
                __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(qi),
                                            _mm256_extracti128_si256(qi, 1));
                /* NOTE: the values are already within [lo, hi]: the packs do not saturate */
                w = q_signed ? _mm_packs_epi16(w, w) : _mm_packus_epi16(w, w);
                _mm_storel_epi64((__m128i*)yr, w);
            }
        }
    #endif
        if (j < n)
            for (Py_ssize_t r = 0; r < rows; r++)
                sprat_i8_finish(t + r * ldt + j, n - j, ct != NULL ? ct + j : NULL,
                                za[r * za_step] + za_add, rs != NULL ? rs[r] : 0,
                                zb != NULL ? zb + j : NULL, 1, kind, y + r * ldy + j * esize,
                                s + j * s_step, s_step, bias != NULL ? bias + j : NULL,
                                ib != NULL ? ib + j : NULL, qdiv, zp, lo, hi, q_signed,
                                post != NULL ? post + j : NULL, pld);
    }

    /* The raw paths' copy of one A row: K bytes of src (int8 shifted to u8: flip XOR 0x80)
       into o (a row of ``room`` >= K bytes), bytes K..4*ceil(K/4) zeroed; returns the row's
       sum (0 unless ``want``). ``avail``: the bytes readable from src (to the end of A). NOTE: loads from the
       source and sums in registers, 32 then 16 bytes a step, the last step masked (a copy
       then a reread of the row stalled on store forwarding at every K not a multiple of 32:
       4096 rows of K = 16 took 70 us where K = 32 took 39) */
    static int32_t sprat_i8_copy_row(unsigned char* o, const unsigned char* src, Py_ssize_t K,
                                     Py_ssize_t room, Py_ssize_t avail, int flip, int want) {
        Py_ssize_t k = 0;
        int64_t acc = 0;
        const unsigned char fb = flip ? 0x80 : 0;
    #if defined(__AVX2__)
        const __m256i f = _mm256_set1_epi8((char)fb), z = _mm256_setzero_si256();
        const __m128i f16 = _mm_set1_epi8((char)fb), z16 = _mm_setzero_si128();
        const __m128i iota = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        __m256i s = z;
        __m128i s16 = z16;
        for (; k + 32 <= K; k += 32) {
            __m256i v = _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)(src + k)), f);
            _mm256_storeu_si256((__m256i*)(o + k), v);
            if (want)
                s = _mm256_add_epi64(s, _mm256_sad_epu8(v, z));
        }
        while (k < K && k + 16 <= room && k + 16 <= avail) {
            Py_ssize_t m = K - k < 16 ? K - k : 16;
            __m128i valid = _mm_cmpgt_epi8(_mm_set1_epi8((char)m), iota);
            __m128i v = _mm_and_si128(
                _mm_xor_si128(_mm_loadu_si128((const __m128i*)(src + k)), f16), valid);
            _mm_storeu_si128((__m128i*)(o + k), v);
            if (want)
                s16 = _mm_add_epi64(s16, _mm_sad_epu8(v, z16));
            k += m;
        }
        acc = _mm256_extract_epi64(s, 0) + _mm256_extract_epi64(s, 1)
              + _mm256_extract_epi64(s, 2) + _mm256_extract_epi64(s, 3)
              + _mm_extract_epi64(s16, 0) + _mm_extract_epi64(s16, 1);
    #endif
        for (; k < K; k++) {
            unsigned char b = src[k] ^ fb;
            o[k] = b;
            acc += b;
        }
        for (Py_ssize_t i = K; i < 4 * ((K + 3) / 4); i++)
            o[i] = 0;
        return (int32_t)acc;
    }

    /* ``cnt`` consecutive rows of the im2col (``sprat_i8_im2col_range``) from ``out`` (the
       first's), output pixels of one output row whose kernel rows all lie inside the map
       across (the first's leftmost tap at column ix0, its top kernel row at row iy0: rows
       outside [0, H) are the padding), dilation 1 across, no row sums, a kernel row of run <=
       64 bytes: per kernel row a tight loop over the pixels (the source stepping by sw * C
       bytes, the rows by pitch) in whole 32-byte steps of the bytes (raw: XOR fb) or 16-value
       steps widened to int16 less zp; a step's overshoot is overwritten by the next kernel
       row, or lies past K (multiplied by the packed B's zeros), and the last kernel row is
       copied exactly; the quad or odd tail is zeroed as the general loop does. Returns 0,
       writing nothing, when a step would read past x_end (the general loop then does these
       rows).
       NOTE: the general loop's per-row bookkeeping and stack-spilled state cost ~13 cycles a
       kernel row, most of a small conv's im2col (32x32x16 3x3 on AMX: 13 of 28 us) */
    /* The end of an im2col row of K values at o: raw, the bytes up to the quad zeroed; int16,
       the odd tail's value (the GEMMs read A in quads / pairs) */
    static inline void sprat_i8_row_tail(unsigned char* o, Py_ssize_t K, int raw) {
        if (raw)
            for (Py_ssize_t k = K; k < 4 * ((K + 3) / 4); k++)
                o[k] = 0;
        else if (K % 2)
            ((int16_t*)o)[K] = 0;
    }

    #if defined(__AVX2__)
    /* ``len`` bytes from src to o, exactly: raw, XOR fb; else widened to int16 less zp */
    static inline __attribute__((always_inline)) void sprat_i8_copy_exact(
            unsigned char* o, const unsigned char* src, Py_ssize_t len, int zp, int is_signed,
            int raw, unsigned char fb) {
        Py_ssize_t b = 0;
        if (raw) {
            const __m256i f32 = _mm256_set1_epi8((char)fb);
            for (; b + 32 <= len; b += 32)
                _mm256_storeu_si256((__m256i*)(o + b), _mm256_xor_si256(
                    _mm256_loadu_si256((const __m256i*)(src + b)), f32));
            if (b + 16 <= len) {
                _mm_storeu_si128((__m128i*)(o + b), _mm_xor_si128(
                    _mm_loadu_si128((const __m128i*)(src + b)), _mm256_castsi256_si128(f32)));
                b += 16;
            }
            if (b + 8 <= len) {
                _mm_storel_epi64((__m128i*)(o + b), _mm_xor_si128(
                    _mm_loadl_epi64((const __m128i*)(src + b)), _mm256_castsi256_si128(f32)));
                b += 8;
            }
            for (; b < len; b++)
                o[b] = src[b] ^ fb;
            return;
        }
        int16_t* o16 = (int16_t*)o;
        const __m256i vzp = _mm256_set1_epi16((short)zp);
        for (; b + 16 <= len; b += 16) {
            __m128i v = _mm_loadu_si128((const __m128i*)(src + b));
            __m256i w = is_signed ? _mm256_cvtepi8_epi16(v) : _mm256_cvtepu8_epi16(v);
            _mm256_storeu_si256((__m256i*)(o16 + b), _mm256_sub_epi16(w, vzp));
        }
        if (b + 8 <= len) {
            __m128i v = _mm_loadl_epi64((const __m128i*)(src + b));
            __m128i w = is_signed ? _mm_cvtepi8_epi16(v) : _mm_cvtepu8_epi16(v);
            _mm_storeu_si128((__m128i*)(o16 + b), _mm_sub_epi16(w, _mm256_castsi256_si128(vzp)));
            b += 8;
        }
        for (; b < len; b++)
            o16[b] = (int16_t)((is_signed ? (int)(signed char)src[b] : (int)src[b]) - zp);
    }

    /* One row of the im2col (``sprat_i8_im2col_range``) into o, any output pixel, dilation 1
       across, no row sums, a kernel row of run <= 64 bytes (the seg's case, at the map's
       borders): each kernel row's taps inside the map copied into a buffer of the zero
       point's byte, then written out as the seg writes (XOR fb, or widened less zp: the
       padding becomes the zero point's byte, or 0). ix0, iy0: its leftmost tap's column, its
       top kernel row's row. NOTE: the general loop's per-tap copies and memset calls cost
       ~80 cycles a kernel row of a 1-channel map */
    static void sprat_i8_im2col_px(unsigned char* o, const unsigned char* x, Py_ssize_t img,
                                   Py_ssize_t H, Py_ssize_t W, Py_ssize_t C, Py_ssize_t ix0,
                                   Py_ssize_t iy0, Py_ssize_t kh, Py_ssize_t kw,
                                   Py_ssize_t dh, Py_ssize_t run, Py_ssize_t K, int zp,
                                   int is_signed, int raw, unsigned char fb) {
        unsigned char tmp[64];
        const __m256i vz = _mm256_set1_epi8((char)(zp & 0xFF));
        Py_ssize_t j0 = ix0 < 0 ? -ix0 : 0, j1 = W - ix0 < kw ? W - ix0 : kw;
        j0 = j0 < kw ? j0 : kw;
        j1 = j1 > j0 ? j1 : j0;
        for (Py_ssize_t i = 0; i < kh; i++) {
            const Py_ssize_t iy = iy0 + i * dh;
            _mm256_storeu_si256((__m256i*)tmp, vz);
            _mm256_storeu_si256((__m256i*)(tmp + 32), vz);
            if (iy >= 0 && iy < H && j1 > j0)
                memcpy(tmp + j0 * C, x + ((img * H + iy) * W + ix0 + j0) * C,
                       (size_t)((j1 - j0) * C));
            sprat_i8_copy_exact(o + (raw ? i * run : 2 * i * run), tmp, run, zp, is_signed,
                                raw, fb);
        }
        sprat_i8_row_tail(o, K, raw);
    }

    static int sprat_i8_im2col_seg(unsigned char* out, Py_ssize_t pitch, const unsigned char* x,
                                   const unsigned char* x_end, Py_ssize_t cnt,
                                   Py_ssize_t img, Py_ssize_t H, Py_ssize_t W, Py_ssize_t C,
                                   Py_ssize_t ix0, Py_ssize_t iy0, Py_ssize_t kh,
                                   Py_ssize_t dh, Py_ssize_t sw, Py_ssize_t run, Py_ssize_t K,
                                   int zp, int is_signed, int raw, unsigned char fb,
                                   unsigned char pad) {
        const Py_ssize_t step = sw * C;
        const Py_ssize_t bytes = raw ? 32 * ((run + 31) / 32) : 16 * ((run + 15) / 16);
        for (Py_ssize_t i = kh - 1; i >= 0; i--) {
            const Py_ssize_t iy = iy0 + i * dh;
            if (iy >= 0 && iy < H) {
                if (x + ((img * H + iy) * W + ix0) * C + (cnt - 1) * step + bytes > x_end)
                    return 0;
                break;
            }
        }
        const __m256i f32 = _mm256_set1_epi8((char)fb), vpad = _mm256_set1_epi8((char)pad);
        const __m256i vzp = _mm256_set1_epi16((short)zp), z = _mm256_setzero_si256();
        for (Py_ssize_t i = 0; i < kh; i++) {
            const Py_ssize_t iy = iy0 + i * dh;
            unsigned char* o = out + (raw ? i * run : 2 * i * run);
            if (iy < 0 || iy >= H) {
                const __m256i v = raw ? vpad : z;
                const Py_ssize_t len = raw ? run : 2 * run;
                for (Py_ssize_t p = 0; p < cnt; p++, o += pitch) {
                    if (i == kh - 1) {
                        memset(o, raw ? pad : 0, (size_t)len);
                        continue;
                    }
                    for (Py_ssize_t b = 0; b < len; b += 32)
                        _mm256_storeu_si256((__m256i*)(o + b), v);
                }
                continue;
            }
            const unsigned char* src = x + ((img * H + iy) * W + ix0) * C;
            if (i == kh - 1) {
                /* NOTE: the last kernel row exactly (its overshoot would lie past K, where
                   the row may end) */
                for (Py_ssize_t p = 0; p < cnt; p++, o += pitch, src += step)
                    sprat_i8_copy_exact(o, src, run, zp, is_signed, raw, fb);
                continue;
            }
            if (raw && run <= 32) {
                for (Py_ssize_t p = 0; p < cnt; p++, o += pitch, src += step)
                    _mm256_storeu_si256((__m256i*)o, _mm256_xor_si256(
                        _mm256_loadu_si256((const __m256i*)src), f32));
            } else if (raw) {
                for (Py_ssize_t p = 0; p < cnt; p++, o += pitch, src += step) {
                    _mm256_storeu_si256((__m256i*)o, _mm256_xor_si256(
                        _mm256_loadu_si256((const __m256i*)src), f32));
                    _mm256_storeu_si256((__m256i*)(o + 32), _mm256_xor_si256(
                        _mm256_loadu_si256((const __m256i*)(src + 32)), f32));
                }
            } else {
                for (Py_ssize_t p = 0; p < cnt; p++, o += pitch, src += step)
                    for (Py_ssize_t b = 0; b < run; b += 16) {
                        __m128i v = _mm_loadu_si128((const __m128i*)(src + b));
                        __m256i w = is_signed ? _mm256_cvtepi8_epi16(v) : _mm256_cvtepu8_epi16(v);
                        _mm256_storeu_si256((__m256i*)(o + 2 * b), _mm256_sub_epi16(w, vzp));
                    }
            }
        }
        for (Py_ssize_t p = 0; p < cnt; p++, out += pitch)
            sprat_i8_row_tail(out, K, raw);
        return 1;
    }
    #endif

    /* The int16 path's packing of one A row: ``src[k] - zp`` (K bytes, int8 with is_signed)
       as int16 into o, the odd tail's value 0. NOTE: 16 values a step (the Cython loop did
       not vectorise: 15 % of a 1x1 conv of 8 input channels, mltk keyword spotting) */
    static void sprat_i8_widen_row(int16_t* o, const unsigned char* src, Py_ssize_t K, int zp,
                                   int is_signed) {
    #if defined(__AVX2__)
        sprat_i8_copy_exact((unsigned char*)o, src, K, zp, is_signed, 0, 0);
    #else
        for (Py_ssize_t k = 0; k < K; k++)
            o[k] = (int16_t)((is_signed ? (int)(signed char)src[k] : (int)src[k]) - zp);
    #endif
        if (K % 2)
            o[K] = 0;
    }

    /* Bytes a row of the A workspace needs for sprat_i8_im2col_seg's whole-step copies of
       every kernel row but the last (run = kw * C bytes; raw: bytes, else int16): 0 for one
       kernel row. The im2col takes the seg where the pitch has this room; ``i8_im2col_pitch``
       gives a conv's workspace that pitch */
    static inline Py_ssize_t sprat_i8_seg_room(Py_ssize_t kh, Py_ssize_t run, int raw) {
        if (kh < 2)
            return 0;
        return raw ? (kh - 2) * run + 32 * ((run + 31) / 32)
                   : 2 * (kh - 2) * run + 32 * ((run + 15) / 16);
    }

    /* Rows [r0, r1) of the byte im2col of an NHWC map x (N, H, W, C; nx bytes) for a (kh,
       kw) kernel, strides, dilations, leading pads and an output of (N, OH, OW), into out
       (rows of ``pitch`` bytes): row r (output pixel (n, oy, ox)) holds the taps (i, j) in
       order, C values each. raw (vnni, amx): the bytes, int8 shifted to u8 (signed: XOR
       0x80), a tap outside the map the zero point's byte, bytes K..4*ceil(K/4) zeroed, the
       row's sum into rowsum[r] (rowsum NULL: not summed, B's zero point being 0); else (int16) ``x - zp`` as int16, 0 outside the map and in
       the odd tail.
       NOTE: 16 values a step (32 for long runs) from the source, a kernel row's taps in one
       run where they lie in the map, the sum in registers, the pixel's position stepped
       instead of divided: memcpy calls of 3-byte taps, a reread of the row (stalled on store
       forwarding) and two divisions a row were a 3-channel stem's time. A step's values
       past its run are overwritten by the next run, or lie past K (where the packed B is 0)
       and are zeroed up to the quad. */
    static void sprat_i8_im2col_range(unsigned char* out, Py_ssize_t pitch,
                                      const unsigned char* x, Py_ssize_t nx, Py_ssize_t r0,
                                      Py_ssize_t r1, Py_ssize_t H, Py_ssize_t W, Py_ssize_t C,
                                      Py_ssize_t OH, Py_ssize_t OW, Py_ssize_t kh,
                                      Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw,
                                      Py_ssize_t dh, Py_ssize_t dw, Py_ssize_t ph,
                                      Py_ssize_t pw, int zp, int is_signed, int raw,
                                      int32_t* rowsum) {
        const unsigned char fb = is_signed && raw ? 0x80 : 0;
        const unsigned char pad = (unsigned char)(zp & 0xFF) ^ fb;
        const Py_ssize_t run = kw * C, K = kh * run;
        const unsigned char* x_end = x + nx;
        const int want = rowsum != NULL;
        Py_ssize_t n = r0 / (OH * OW), rem = r0 - n * OH * OW;
        Py_ssize_t oy = rem / OW, ox = rem - oy * OW;
    #if defined(__AVX2__)
        const __m128i f16 = _mm_set1_epi8((char)fb), z16 = _mm_setzero_si128();
        const __m256i f32 = _mm256_set1_epi8((char)fb), z32 = _mm256_setzero_si256();
        const __m128i iota = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        const __m256i vzp = _mm256_set1_epi16((short)zp);
        /* NOTE: with dilation 1 across, no sums and kernel rows of <= 64 bytes, the rows whose
           kernel rows lie inside the map across go by sprat_i8_im2col_seg (where the pitch
           leaves room for its steps' overshoot), the others by sprat_i8_im2col_px */
        const int px = dw == 1 && !want && run <= 64;
        const int seg = px && sprat_i8_seg_room(kh, run, raw) <= pitch;
    #endif
        for (Py_ssize_t r = r0; r < r1; r++) {
    #if defined(__AVX2__)
            if (px) {
                if (seg && ox * sw - pw >= 0 && ox * sw - pw + kw <= W) {
                    Py_ssize_t last = (W - kw + pw) / sw;  /* the last ox whose row fits */
                    Py_ssize_t cnt = (last < OW - 1 ? last : OW - 1) - ox + 1;
                    cnt = cnt < r1 - r ? cnt : r1 - r;
                    if (sprat_i8_im2col_seg(out + r * pitch, pitch, x, x_end, cnt, n, H, W, C,
                                            ox * sw - pw, oy * sh - ph, kh, dh, sw, run, K, zp,
                                            is_signed, raw, fb, pad)) {
                        r += cnt - 1;
                        ox += cnt - 1;
                        goto next_row;
                    }
                }
                sprat_i8_im2col_px(out + r * pitch, x, n, H, W, C, ox * sw - pw, oy * sh - ph,
                                   kh, kw, dh, run, K, zp, is_signed, raw, fb);
                goto next_row;
            }
    #endif
            {
            unsigned char* o8 = out + r * pitch;
            const unsigned char* o_end = o8 + pitch;
            int16_t* o16 = (int16_t*)o8;
            const Py_ssize_t ix0 = ox * sw - pw;
            int64_t acc = 0;
    #if defined(__AVX2__)
            __m128i s16 = z16;
            __m256i s32 = z32;
    #define SPRAT_I8_COPY(k, src, len)                                                   \
        {                                                                                \
            Py_ssize_t k_ = (k);                                                         \
            const unsigned char* s_ = (src);                                             \
            Py_ssize_t l_ = (len);                                                       \
            if (raw) {                                                                   \
                for (; l_ >= 32 && s_ + 32 <= x_end; k_ += 32, s_ += 32, l_ -= 32) {    \
                    __m256i v_ = _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)s_), f32); \
                    _mm256_storeu_si256((__m256i*)(o8 + k_), v_);                        \
                    if (want)                                                            \
                        s32 = _mm256_add_epi64(s32, _mm256_sad_epu8(v_, z32));           \
                }                                                                        \
                while (l_ > 0 && s_ + 16 <= x_end && o8 + k_ + 16 <= o_end) {           \
                    Py_ssize_t m_ = l_ < 16 ? l_ : 16;                                   \
                    __m128i v_ = _mm_xor_si128(_mm_loadu_si128((const __m128i*)s_), f16); \
                    _mm_storeu_si128((__m128i*)(o8 + k_), v_);                           \
                    if (want)                                                            \
                        s16 = _mm_add_epi64(s16, _mm_sad_epu8(_mm_and_si128(v_,          \
                                  _mm_cmpgt_epi8(_mm_set1_epi8((char)m_), iota)), z16)); \
                    k_ += m_; s_ += m_; l_ -= m_;                                        \
                }                                                                        \
            } else {                                                                     \
                while (l_ > 0 && s_ + 16 <= x_end && (unsigned char*)(o16 + k_ + 16) <= o_end) { \
                    Py_ssize_t m_ = l_ < 16 ? l_ : 16;                                   \
                    __m128i b_ = _mm_loadu_si128((const __m128i*)s_);                    \
                    __m256i w_ = is_signed ? _mm256_cvtepi8_epi16(b_) : _mm256_cvtepu8_epi16(b_); \
                    _mm256_storeu_si256((__m256i*)(o16 + k_), _mm256_sub_epi16(w_, vzp)); \
                    k_ += m_; s_ += m_; l_ -= m_;                                        \
                }                                                                        \
            }                                                                            \
            SPRAT_I8_COPY_TAIL                                                           \
        }
    #else
    #define SPRAT_I8_COPY(k, src, len)                                                   \
        {                                                                                \
            Py_ssize_t k_ = (k);                                                         \
            const unsigned char* s_ = (src);                                             \
            Py_ssize_t l_ = (len);                                                       \
            SPRAT_I8_COPY_TAIL                                                           \
        }
    #endif
    #define SPRAT_I8_COPY_TAIL                                                           \
            for (; l_ > 0; l_--, k_++, s_++) {                                           \
                if (raw) {                                                               \
                    unsigned char b_ = *s_ ^ fb;                                         \
                    o8[k_] = b_;                                                         \
                    acc += b_;                                                           \
                } else {                                                                 \
                    o16[k_] = (int16_t)((is_signed ? (int)(signed char)*s_ : (int)*s_) - zp); \
                }                                                                        \
            }
    #define SPRAT_I8_PAD(k, len)                                                         \
            if (raw) {                                                                   \
                memset(o8 + (k), pad, (len));                                            \
                acc += (int64_t)pad * (len);                                             \
            } else {                                                                     \
                memset(o16 + (k), 0, (len) * sizeof(int16_t));                           \
            }
            for (Py_ssize_t i = 0; i < kh; i++) {
                const Py_ssize_t iy = oy * sh - ph + i * dh;
                const Py_ssize_t k = i * run;
                if (iy < 0 || iy >= H) {
                    SPRAT_I8_PAD(k, run)
                    continue;
                }
                const unsigned char* xrow = x + ((n * H + iy) * W) * C;
                if (dw == 1 && ix0 >= 0 && ix0 + kw <= W) {
    #if defined(__AVX2__)
                    /* NOTE: a kernel row of <= 64 bytes inside the map, no sums: whole 32-byte
                       steps, the bytes past the run overwritten by the next kernel row or, past
                       K, never read as products (the packed B is 0 there; K..4*ceil(K/4) are
                       zeroed below). The general copy's steps and tails cost ~50 cycles a row:
                       most of a small conv's time (a 32x32 map of 16 or 3 channels) */
                    const unsigned char* s_ = xrow + ix0 * C;
                    const Py_ssize_t steps = (run + 31) / 32;
                    if (raw && !want && run <= 64 && k + 32 * steps <= pitch
                            && s_ + 32 * steps <= x_end) {
                        _mm256_storeu_si256((__m256i*)(o8 + k), _mm256_xor_si256(
                            _mm256_loadu_si256((const __m256i*)s_), f32));
                        if (steps > 1)
                            _mm256_storeu_si256((__m256i*)(o8 + k + 32), _mm256_xor_si256(
                                _mm256_loadu_si256((const __m256i*)(s_ + 32)), f32));
                        continue;
                    }
    #endif
                    SPRAT_I8_COPY(k, xrow + ix0 * C, run)
                    continue;
                }
                for (Py_ssize_t j = 0; j < kw; j++) {
                    const Py_ssize_t ix = ix0 + j * dw;
                    if (ix < 0 || ix >= W) {
                        SPRAT_I8_PAD(k + j * C, C)
                    } else {
                        SPRAT_I8_COPY(k + j * C, xrow + ix * C, C)
                    }
                }
            }
    #undef SPRAT_I8_COPY
    #undef SPRAT_I8_COPY_TAIL
    #undef SPRAT_I8_PAD
            if (raw && want) {
    #if defined(__AVX2__)
                acc += _mm_extract_epi64(s16, 0) + _mm_extract_epi64(s16, 1)
                       + _mm256_extract_epi64(s32, 0) + _mm256_extract_epi64(s32, 1)
                       + _mm256_extract_epi64(s32, 2) + _mm256_extract_epi64(s32, 3);
    #endif
                rowsum[r] = (int32_t)acc;
            }
            sprat_i8_row_tail(o8, K, raw);
            }
    #if defined(__AVX2__)
        next_row:
    #endif
            if (++ox == OW) {
                ox = 0;
                if (++oy == OH) {
                    oy = 0;
                    n++;
                }
            }
        }
    }

    /* This thread's buffer for the rows of A a work item packs, at least ``bytes`` (64-byte
       aligned; kept for the thread's life, grown as needed), or NULL when it cannot be had.
       NOTE: per thread, as MLAS's ThreadedBufHolder: rows packed into the arena's A workspace
       were written by one slot in one op and by the other in the next (each op splits its
       rows its own way), and every such line crossed cores on the write (in mltk image
       classification at 2 threads, a stride-2 conv took 16.6 us in the model, 7.4 run
       again at once) */
    static __thread unsigned char* sprat_i8_tl_buf = NULL;
    static __thread size_t sprat_i8_tl_cap = 0;
    static unsigned char* sprat_i8_tl(size_t bytes) {
        if (bytes > sprat_i8_tl_cap) {
            free(sprat_i8_tl_buf);
            size_t cap = (bytes + 4095) & ~(size_t)4095;
            sprat_i8_tl_buf = (unsigned char*)aligned_alloc(64, cap);
            sprat_i8_tl_cap = sprat_i8_tl_buf != NULL ? cap : 0;
        }
        return sprat_i8_tl_buf;
    }

    /* min and max of x[:n] (n >= 1), NaN ignored unless every value is NaN */
    static void sprat_i8_minmax(const float* x, Py_ssize_t n, float* lo, float* hi) {
        Py_ssize_t i = 0;
        float mn = INFINITY, mx = -INFINITY;
    #if defined(__AVX2__)
        if (n >= 32) {
            __m256 l0 = _mm256_set1_ps(INFINITY), l1 = l0, l2 = l0, l3 = l0;
            __m256 h0 = _mm256_set1_ps(-INFINITY), h1 = h0, h2 = h0, h3 = h0;
            for (; i + 32 <= n; i += 32) {
                __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
                __m256 x2 = _mm256_loadu_ps(x + i + 16), x3 = _mm256_loadu_ps(x + i + 24);
                /* NOTE: _mm256_min_ps(x, l) returns l when x is NaN: NaN is skipped */
                l0 = _mm256_min_ps(x0, l0); l1 = _mm256_min_ps(x1, l1);
                l2 = _mm256_min_ps(x2, l2); l3 = _mm256_min_ps(x3, l3);
                h0 = _mm256_max_ps(x0, h0); h1 = _mm256_max_ps(x1, h1);
                h2 = _mm256_max_ps(x2, h2); h3 = _mm256_max_ps(x3, h3);
            }
            float lb[8], hb[8];
            _mm256_storeu_ps(lb, _mm256_min_ps(_mm256_min_ps(l0, l1), _mm256_min_ps(l2, l3)));
            _mm256_storeu_ps(hb, _mm256_max_ps(_mm256_max_ps(h0, h1), _mm256_max_ps(h2, h3)));
            for (int k = 0; k < 8; k++) {
                mn = lb[k] < mn ? lb[k] : mn;
                mx = hb[k] > mx ? hb[k] : mx;
            }
        }
    #endif
        for (; i < n; i++) {
            mn = x[i] < mn ? x[i] : mn;
            mx = x[i] > mx ? x[i] : mx;
        }
        *lo = mn;
        *hi = mx;
    }

    /* DynamicQuantizeLinear-11's parameters from the data's min and max (ONNX spec): the range
       widened to include 0, scale = (hi - lo) / 255, zero point = saturate(rint(-lo / scale));
       an all-zero range gives scale 1, zero point 0 (onnxruntime). Returns the zero point. */
    static int sprat_i8_dql_params(float lo, float hi, float* scale) {
        lo = lo < 0.0f ? lo : 0.0f;
        hi = hi > 0.0f ? hi : 0.0f;
        float s = (hi - lo) / 255.0f;
        if (s == 0.0f) {
            *scale = 1.0f;
            return 0;
        }
        *scale = s;
        float z = rintf(0.0f - lo / s);
        return z < 0.0f ? 0 : (z > 255.0f ? 255 : (int)z);
    }

    /* y[:n] = saturate_u8(rint(x / scale) + zp); with a16 != NULL also a16[:n] = y - zp
       (the widened operand of the GEMM that consumes y) */
    static void sprat_i8_quantize(const float* x, Py_ssize_t n, float scale, int zp,
                                  uint8_t* y, int16_t* a16) {
        Py_ssize_t i = 0;
        float z = (float)zp;
    #if defined(__AVX2__)
        const __m256 vs = _mm256_set1_ps(scale), vz = _mm256_set1_ps(z);
        const __m256 v0 = _mm256_setzero_ps(), v255 = _mm256_set1_ps(255.0f);
        const __m256i iz = _mm256_set1_epi32(zp);
        for (; i + 8 <= n; i += 8) {
            __m256 q = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(x + i), vs),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            q = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(q, vz), v0), v255);
            __m256i qi = _mm256_cvtps_epi32(q);
            __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(qi),
                                        _mm256_extracti128_si256(qi, 1));
            _mm_storel_epi64((__m128i*)(y + i), _mm_packus_epi16(w, w));
            if (a16 != NULL) {
                __m256i d = _mm256_sub_epi32(qi, iz);
                __m128i dw = _mm_packs_epi32(_mm256_castsi256_si128(d),
                                             _mm256_extracti128_si256(d, 1));
                _mm_storeu_si128((__m128i*)(a16 + i), dw);
            }
        }
    #endif
        for (; i < n; i++) {
            float q = rintf(x[i] / scale) + z;
            q = q < 0.0f ? 0.0f : (q > 255.0f ? 255.0f : q);
            y[i] = (uint8_t)(int32_t)q;
            if (a16 != NULL)
                a16[i] = (int16_t)((int32_t)q - zp);
        }
    }
    #pragma GCC pop_options
    """
    int I8_MR "SPRAT_I8_MR"
    int I8_NR "SPRAT_I8_NR"
    void i8_tile "sprat_i8_tile_any" (const short* a, idx lda, const short* b, idx kp, int* c,
                                      int mr) noexcept nogil
    void i8_tile_seg "sprat_i8_tile_seg" (const short** ap, idx rs, idx nseg, idx kps,
                                          const short* b, int* c, int mr) noexcept nogil
    void i8_tile_u8s8_seg "sprat_i8_tile_u8s8_seg" (const unsigned char** ap, idx rs, idx nseg,
                                                    idx kqs, const signed char* b, int* c,
                                                    int mr) noexcept nogil
    void i8_tile_u8s8_q8_seg "sprat_i8_tile_u8s8_q8_seg" (
        const unsigned char** ap, idx rs, idx nseg, idx kqs, const signed char* b, int mr, int nr,
        unsigned char* y, idx ldy, const float* s, int s_step, const int* ib, const int* ct,
        int za, float zp, float lo, float hi, int q_signed, const float* post,
        idx pld) noexcept nogil
    void i8_pad_map_c "sprat_i8_pad_map" (unsigned char* out, const unsigned char* x, idx r0,
                                          idx r1, idx H, idx W, idx C, idx Hp, idx Wp, idx ph,
                                          idx pw, int zp, int is_signed, int raw) noexcept nogil
    int I8_TILE_Q8 "SPRAT_I8_TILE_Q8"
    void i8_tile_q8_seg "sprat_i8_tile_q8_seg" (const short** ap, idx rs, idx nseg, idx kps,
                                                const short* b, int mr, int nr, unsigned char* y,
                                                idx ldy, const float* s, int s_step,
                                                const int* ib, float zp, float lo, float hi,
                                                int q_signed, const float* post,
                                                idx pld) noexcept nogil
    void i8_tile_u8s8_q8 "sprat_i8_tile_u8s8_q8" (const unsigned char* a, idx lda,
                                                  const signed char* b, idx kq, int mr, int nr,
                                                  unsigned char* y, idx ldy, const float* s,
                                                  int s_step, const int* ib, const int* ct,
                                                  int za, float zp, float lo, float hi,
                                                  int q_signed, const float* post,
                                                  idx pld, const int* rec,
                                                  idx nrec) noexcept nogil
    void i8_tile_q8 "sprat_i8_tile_q8" (const short* a, idx lda, const short* b, idx kp, int mr,
                                        int nr, unsigned char* y, idx ldy, const float* s,
                                        int s_step,
                                        const int* ib, float zp, float lo, float hi,
                                        int q_signed, const float* post, idx pld) noexcept nogil
    int I8_U8S8_BUILD "SPRAT_I8_U8S8_BUILD"
    void i8_tile_u8s8 "sprat_i8_tile_u8s8" (const unsigned char* a, idx lda,
                                            const signed char* b, idx kq, int* c,
                                            int mr, const int* rec, idx nrec) noexcept nogil
    void i8_tile_vnni "sprat_i8_tile_vnni" (const unsigned char* a, idx lda, const signed char* b,
                                            idx kq, int* c, int mr) noexcept nogil
    void i8_tile_widen "sprat_i8_tile_widen" (const unsigned char* a, idx lda,
                                              const signed char* b, idx kq, int* c,
                                              int mr) noexcept nogil
    int i8_cpu_vnni "sprat_i8_cpu_vnni" () noexcept nogil
    int i8_cpu_amx "sprat_i8_cpu_amx" () noexcept nogil
    int i8_cpu_avx512 "sprat_i8_cpu_avx512" () noexcept nogil
    void i8_set_wide_c "sprat_i8_set_wide" (int w) noexcept nogil
    void i8_amx_begin "sprat_i8_amx_begin" () noexcept nogil
    void i8_amx_end "sprat_i8_amx_end" () noexcept nogil
    void i8_amx_block "sprat_i8_amx_block" (const unsigned char* a, idx lda, const signed char* b,
                                            idx kq16, int* c, int two_rows,
                                            int two_cols) noexcept nogil
    void i8_finish "sprat_i8_finish" (const int* t, idx n, const int* ct, int za, int rs,
                                      const int* zb, int zb_step, int kind, void* y,
                                      const float* s, int s_step, const float* bias,
                                      const int* ib, float qdiv, float zp, float lo, float hi,
                                      int q_signed, const float* post, idx pld) noexcept nogil
    void i8_finish_block "sprat_i8_finish_block" (const int* t, idx ldt, idx rows, idx n,
                                                  const int* ct, const int* za, int za_step,
                                                  int za_add, const int* rs, const int* zb,
                                                  int kind, unsigned char* y, idx ldy,
                                                  const float* s, int s_step, const float* bias,
                                                  const int* ib, float qdiv, float zp, float lo,
                                                  float hi, int q_signed, const float* post,
                                                  idx pld) noexcept nogil
    unsigned char* i8_tl "sprat_i8_tl" (size_t bytes) noexcept nogil
    void i8_minmax "sprat_i8_minmax" (const float* x, idx n, float* lo, float* hi) noexcept nogil
    idx i8_seg_room "sprat_i8_seg_room" (idx kh, idx run, int raw) noexcept nogil
    int i8_copy_row "sprat_i8_copy_row" (unsigned char* o, const unsigned char* src, idx K,
                                         idx room, idx avail, int flip, int want) noexcept nogil
    void i8_widen_row "sprat_i8_widen_row" (short* o, const unsigned char* src, idx K, int zp,
                                            int is_signed) noexcept nogil
    void i8_im2col_range "sprat_i8_im2col_range" (
        unsigned char* out, idx pitch, const unsigned char* x, idx nx, idx r0, idx r1, idx H,
        idx W, idx C, idx OH, idx OW, idx kh, idx kw, idx sh, idx sw, idx dh, idx dw, idx ph,
        idx pw, int zp, int is_signed, int raw, int* rowsum) noexcept nogil
    int i8_dql_params "sprat_i8_dql_params" (float lo, float hi, float* scale) noexcept nogil
    void i8_quantize "sprat_i8_quantize" (const float* x, idx n, float scale, int zp,
                                          unsigned char* y, short* a16) noexcept nogil


cdef enum:
    I8_OUT_I32 = 0   # int32 sums (MatMulInteger)
    I8_OUT_F32 = 1   # float(sum) * scale (+ bias) (MatMulIntegerToFloat, Cast + Mul)
    I8_OUT_Q8 = 2    # requantized u8 / s8 (QLinearMatMul, QGemm with y_scale)
    I8_OUT_TFL = 3   # TFLite's fixed-point requantisation to u8 / s8 (TflConv)
    I8_OUT_TFL_RESCALE = 4  # TFLite's double requantisation to u8 / s8 (TflFullyConnected)
    I8_MAX_K = 33025  # K * 255 * 255 < 2**31: the int32 sums are exact
    # NOTE: packing A is a copy at memory speed (~5 us for 128 x 384): below this many bytes
    # one thread packs it rather than paying a second parallel region per call
    I8_PACK_PARALLEL = 1 << 17


#: the output kinds of ``i8_gemm``, for the Python side
I8_KINDS = {"int32": I8_OUT_I32, "float32": I8_OUT_F32, "quantized": I8_OUT_Q8,
            "tflite": I8_OUT_TFL, "tflite_rescale": I8_OUT_TFL_RESCALE}
#: the largest K the int32 sums hold exactly
I8_K_LIMIT = I8_MAX_K
#: the columns of a packed B panel, and the int32s of one u8s8 correction record (the pair of
#: rows' index, then a column's correction each: ``i8_u8s8_split``)
I8_PANEL = I8_NR
I8_RECORD = 1 + I8_NR


cdef enum:
    I8_INT16 = 0  # paths: int16 vpmaddwd (any AVX2 CPU; scalar in the baseline build)
    I8_VNNI = 1   # AVX-VNNI vpdpbusd
    I8_AMX = 2    # AMX tdpbusd
    I8_U8S8 = 3   # the vnni path's layout on AVX2: vpmaddubsw + vpmaddwd, where B's pairs fit
    I8_WIDEN = 4  # the vnni path's layout on AVX2, bytes widened to int16: any B, B read as bytes


#: the paths of ``i8_pack_b`` / ``i8_gemm``, for the Python side
I8_PATHS = {"int16": I8_INT16, "vnni": I8_VNNI, "amx": I8_AMX, "u8s8": I8_U8S8,
            "widen": I8_WIDEN}


def i8_has_u8s8() -> bool:
    """Whether this build has the ``u8s8`` tile (the AVX2 build: any AVX2 CPU)."""
    return bool(I8_U8S8_BUILD)


cdef inline void i8_cut(int u, int v, int* cu, int* cv) noexcept nogil:
    """The pair (u, v) of packed bytes that saturates vpmaddubsw (same sign, magnitudes past
    128: ``i8_cuts``) cut to fit into ``cu``, ``cv``: the larger magnitude (u's on a tie)
    reduced to 128 minus the smaller."""
    cdef int au = u if u > 0 else -u, av = v if v > 0 else -v
    cdef int sg = 1 if u > 0 else -1
    cu[0], cv[0] = u, v
    if au >= av:
        cu[0] = sg * (128 - av)
    else:
        cv[0] = sg * (128 - au)


cdef inline int i8_cuts(const signed char* r0, const signed char* r1, idx j0, idx j1) noexcept nogil:
    """Whether a column j in [j0, j1) of the pair of rows r0, r1 (r1 NULL: zeros) saturates
    vpmaddubsw: u, v of one sign with |u| + |v| > 128 (branch-free, vectorised)."""
    cdef int hit = 0, u, v
    cdef idx j
    for j in range(j0, j1):
        u = r0[j]
        v = r1[j] if r1 != NULL else 0
        hit |= (((u > 0) & (v > 0)) | ((u < 0) & (v < 0))) & (abs(u) + abs(v) > 128)
    return hit


def i8_u8s8_split(const signed char[:, ::1] s, int[::1] first, signed char[:, ::1] c=None,
                  int[::1] res=None) -> int:
    """``quant.u8s8_split``'s work on the packed bytes ``s`` (K, N): the number n of (pair
    of rows, 16-column panel) blocks where a column's pair (2p, 2p + 1) saturates
    vpmaddubsw, with each panel's first block index in ``first`` (npan + 1 int32). With
    ``c`` (K, N) and ``res`` (npan + 1 + 17 n int32): ``c`` receives ``s`` with those pairs
    cut to fit, ``res`` the correction records (``first``, then per block p and, per column
    j of the panel, ``r[2p, j] & 0xFFFF | r[2p + 1, j] << 16``, ``r = s - c``), panel by
    panel. Raises ValueError when an operand has the wrong size."""
    cdef idx K = s.shape[0], N = s.shape[1], kp = (K + 1) // 2, npan = (N + I8_NR - 1) // I8_NR
    cdef idx q, p, j, j0, j1, e
    cdef int cu, cv, u, v
    cdef unsigned int d0, d1
    cdef const signed char* a0
    cdef const signed char* a1
    cdef int* cursor
    if first.shape[0] != npan + 1:
        raise ValueError("i8_u8s8_split: first must hold npan + 1 values")
    for q in range(npan + 1):
        first[q] = 0
    if K == 0 or N == 0:
        return 0
    with nogil:
        for p in range(kp):
            a0 = &s[2 * p, 0]
            a1 = &s[2 * p + 1, 0] if 2 * p + 1 < K else NULL
            for q in range(npan):
                first[q + 1] += i8_cuts(a0, a1, q * I8_NR, min(N, (q + 1) * I8_NR))
        for q in range(npan):
            first[q + 1] += first[q]
    if c is None:
        return first[npan]
    if (c.shape[0] != K or c.shape[1] != N or res is None
            or res.shape[0] != npan + 1 + 17 * <idx>first[npan]):
        raise ValueError("i8_u8s8_split: c or res has the wrong size")
    cursor = <int*>malloc(npan * sizeof(int))
    if cursor == NULL:
        raise MemoryError()
    with nogil:
        memcpy(&c[0, 0], &s[0, 0], K * N)
        for q in range(npan + 1):
            res[q] = first[q]
        for q in range(npan):
            cursor[q] = first[q]
        for p in range(kp):
            a0 = &s[2 * p, 0]
            a1 = &s[2 * p + 1, 0] if 2 * p + 1 < K else NULL
            for q in range(npan):
                j0, j1 = q * I8_NR, min(N, (q + 1) * I8_NR)
                if not i8_cuts(a0, a1, j0, j1):
                    continue
                e = npan + 1 + 17 * <idx>cursor[q]
                cursor[q] += 1
                res[e] = <int>p
                for j in range(I8_NR):
                    d0 = d1 = 0
                    if j0 + j < j1 and i8_cuts(a0, a1, j0 + j, j0 + j + 1):
                        u = a0[j0 + j]
                        v = a1[j0 + j] if a1 != NULL else 0
                        i8_cut(u, v, &cu, &cv)
                        c[2 * p, j0 + j] = <signed char>cu
                        d0 = <unsigned int>(u - cu)
                        if a1 != NULL:
                            c[2 * p + 1, j0 + j] = <signed char>cv
                            d1 = <unsigned int>(v - cv)
                    res[e + 1 + j] = <int>((d0 & 0xFFFF) | (d1 << 16))
    free(cursor)
    return first[npan]


def i8_pairs_fit(const signed char[:, ::1] b) -> bool:
    """Whether the ``u8s8`` path multiplies B (K, N) (int8 bytes as packed: uint8 B shifted
    by -128) exactly: for every column, each pair of rows (2p, 2p + 1) has its positive parts
    and its negative parts each summing to at most 128 in magnitude, so vpmaddubsw's int16
    sum of two u8 * s8 products (|a| <= 255) never saturates. K odd: the last row pairs with
    a zero."""
    cdef idx K = b.shape[0], N = b.shape[1], p, j
    cdef int u, v, pos, neg
    cdef bint fit = True
    with nogil:
        for p in range(0, K, 2):
            for j in range(N):
                u = b[p, j]
                v = b[p + 1, j] if p + 1 < K else 0
                pos = (u if u > 0 else 0) + (v if v > 0 else 0)
                neg = (u if u < 0 else 0) + (v if v < 0 else 0)
                if pos > 128 or neg < -128:
                    fit = False
                    break
            if not fit:
                break
    return fit


def i8_has_vnni() -> bool:
    """Whether this build has the AVX-VNNI tile and this CPU runs it (the ``vnni`` path)."""
    return bool(i8_cpu_vnni())


def i8_set_wide(bint wide) -> bool:
    """Let the requantising epilogue of ``i8_gemm`` run on AVX-512 (16 columns a register)
    when ``wide`` and this build and CPU have it; returns whether it does. Process-wide: set
    once by ``quant.py`` with the GEMM's path (the same bits either way)."""
    cdef int w = 1 if wide and i8_cpu_avx512() else 0
    i8_set_wide_c(w)
    return bool(w)


def i8_has_amx() -> bool:
    """Whether this build has the AMX block and this CPU and OS run it (the ``amx`` path; the
    first call asks Linux for the tile state of the process)."""
    return bool(i8_cpu_amx())


cdef inline idx i8_kq(idx K, int path) noexcept nogil:
    """k-quads of a packed B panel: ceil(K/4), rounded up to 16 (one B tile) for AMX."""
    cdef idx kq = (K + 3) // 4
    return (kq + 15) // 16 * 16 if path == I8_AMX else kq


def i8_packed_b_bytes(idx K, idx N, int path) -> int:
    """Bytes of a packed B of K rows and N columns: 16-column panels of ``ceil(K/2) * 64``
    bytes (int16 path) or ``i8_kq * 64`` (vnni, amx)."""
    cdef idx npan = (N + I8_NR - 1) // I8_NR
    return npan * ((K + 1) // 2 if path == I8_INT16 else i8_kq(K, path)) * 64


def i8_a_pitch(idx K, int path) -> int:
    """Bytes per row of the A workspace of ``i8_gemm``: ``4 * ceil(K/2)``, for AMX K rounded
    up to 64 (one A tile row)."""
    return (K + 63) // 64 * 64 if path == I8_AMX else 4 * ((K + 1) // 2)


def i8_im2col_pitch(idx K, int path, idx kh, idx run) -> int:
    """Bytes per row of a conv's A workspace for ``i8_im2col`` / ``i8_gemm``'s im2col:
    ``i8_a_pitch``, widened where a row is too short for the whole 32-byte steps in which
    ``sprat_i8_im2col_seg`` copies every kernel row but the last (``run`` = kw * C bytes,
    their overshoot overwritten by the next kernel row): the seg then takes the pixels
    inside the map across. NOTE: a 1-channel 3x3 stem (K = 9, int16 pitch 20 bytes) went
    pixel by pixel through ``sprat_i8_im2col_px``, 56 % of its time (mltk keyword spotting,
    59x49x1 -> 30x25x8: 28 us)."""
    cdef idx p = i8_a_pitch(K, path)
    if path == I8_AMX or run > 64:
        return p
    return max(p, (i8_seg_room(kh, run, path != I8_INT16) + 3) // 4 * 4)


def i8_a_rows(idx rows, int path) -> int:
    """Rows of the A workspace for ``rows`` rows of A: AMX tiles read up to 31 rows past the
    last (their products are dropped)."""
    return rows + 32 if path == I8_AMX else rows


def i8_pack_b(const unsigned char[::1] b, bint b_signed, const int[::1] zp, idx K, idx N,
              bint trans, int path, unsigned char[::1] out, int[::1] bcol):
    """Pack a weight for ``i8_gemm`` (once, at prepare; a conv packs its (K, N) weight matrix
    the same way).

    ``b``: the bytes of B (K, N) row-major, or of B^T (N, K) when ``trans`` (uint8, or int8
    viewed as uint8 with ``b_signed``); ``zp``: B's zero point, 1 value or N (per column);
    ``out``: ``i8_packed_b_bytes(K, N, path)`` bytes. The int16 path stores ``b - zp`` as
    int16 in 16-column panels of k-pairs (``bcol`` unused, may be empty); the vnni and amx
    paths store B as int8 (uint8 B shifted by -128) in 16-column panels of k-quads and
    ``bcol`` (2N int32) receives the zero-point terms ``zb[j]`` then ``K * zb[j] - sum_k
    b[k, j]`` (zb the shifted zero point). Raises ValueError when an operand is too short, K
    exceeds ``I8_K_LIMIT`` or the path is unknown."""
    cdef idx kp = (K + 1) // 2
    cdef idx kq = i8_kq(K, path)
    cdef idx npan = (N + I8_NR - 1) // I8_NR
    cdef idx q, p, j, h, k, col
    cdef int v, z, shift
    cdef short* dst
    cdef signed char* d8
    if K > I8_MAX_K or K <= 0:
        raise ValueError(f"i8_pack_b: K={K} must be in [1, {I8_MAX_K}]")
    if path not in (I8_INT16, I8_VNNI, I8_AMX, I8_U8S8, I8_WIDEN):
        raise ValueError(f"i8_pack_b: unknown path {path}")
    if (b.shape[0] < K * N or out.shape[0] < i8_packed_b_bytes(K, N, path)
            or zp.shape[0] not in (1, N) or (path != I8_INT16 and bcol.shape[0] < 2 * N)):
        raise ValueError("i8_pack_b: an operand is too short")
    shift = 0 if b_signed else 128
    with nogil:
        if path != I8_INT16:
            for col in range(N):
                z = (zp[col] if zp.shape[0] > 1 else zp[0]) - shift
                bcol[col] = z
                bcol[N + col] = K * z
            for q in range(npan):
                for p in range(kq):
                    d8 = <signed char*>&out[(q * kq + p) * 64]
                    for j in range(I8_NR):
                        col = q * I8_NR + j
                        for h in range(4):
                            k = 4 * p + h
                            if col >= N or k >= K:
                                d8[4 * j + h] = 0
                                continue
                            v = b[col * K + k] if trans else b[k * N + col]
                            v = <signed char>v if b_signed else v - 128
                            d8[4 * j + h] = <signed char>v
                            bcol[N + col] -= v
        else:
            for q in range(npan):
                for p in range(kp):
                    dst = <short*>&out[(q * kp + p) * 64]
                    for j in range(I8_NR):
                        col = q * I8_NR + j
                        for h in range(2):
                            k = 2 * p + h
                            if col >= N or k >= K:
                                dst[2 * j + h] = 0
                                continue
                            v = b[col * K + k] if trans else b[k * N + col]
                            if b_signed:
                                v = <signed char>v
                            z = zp[col] if zp.shape[0] > 1 else zp[0]
                            dst[2 * j + h] = <short>(v - z)


cdef void i8_pack_rows(const unsigned char* a, bint a_signed, const int* zp, bint zp_rows,
                       idx r0, idx r1, idx nrows, idx K, unsigned char* out, idx pitch,
                       int path, int* rowsum) noexcept nogil:
    """Rows [r0, r1) of A (``nrows`` rows of K bytes) into the A workspace (rows of ``pitch``
    bytes): the int16 path widens to ``a - zp`` (int16, the odd tail 0; ``zp_rows``: one zero
    point per row, else ``zp[0]``), the vnni and amx paths copy u8 (int8 A shifted by +128),
    zero-pad to a multiple of 4 and sum each row into ``rowsum`` (``i8_copy_row``; past
    that, AMX reads bytes that meet B's zero quads; ``rowsum`` NULL: no sums, where every
    zero point of B is 0 and the epilogue does not read them)."""
    cdef idx r
    cdef const unsigned char* ar
    for r in range(r0, r1):
        ar = a + r * K
        if path != I8_INT16:
            if rowsum != NULL:
                rowsum[r] = i8_copy_row(out + r * pitch, ar, K, pitch, (nrows - r) * K,
                                        a_signed, 1)
            else:
                i8_copy_row(out + r * pitch, ar, K, pitch, (nrows - r) * K, a_signed, 0)
            continue
        i8_widen_row(<short*>(out + r * pitch), ar, K, zp[r] if zp_rows else zp[0], a_signed)


cdef void i8_im2col_rows(const unsigned char* x, idx nx, bint a_signed, int zp, idx r0, idx r1,
                         idx H, idx W, idx C, idx OH, idx OW, idx kh, idx kw, idx sh, idx sw,
                         idx dh, idx dw, idx ph, idx pw, unsigned char* out, idx pitch, int path,
                         int* rowsum) noexcept nogil:
    """Rows [r0, r1) of the byte im2col of an NHWC map ``x`` (N, H, W, C; ``nx`` bytes),
    packed as ``i8_pack_rows`` packs A: row ``r`` (output pixel ``(n, oy, ox)``) holds the
    taps ``(i, j)`` in order, C channels each, a tap outside the map reading the zero point
    (so it adds nothing). See ``sprat_i8_im2col_range``."""
    if r1 > r0:
        i8_im2col_range(out, pitch, x, nx, r0, r1, H, W, C, OH, OW, kh, kw, sh, sw, dh, dw, ph,
                        pw, zp, a_signed, path != I8_INT16, rowsum)


def i8_im2col(int nt, const unsigned char[::1] x, bint a_signed, int zp, idx N, idx H, idx W,
              idx C, idx OH, idx OW, idx kh, idx kw, idx sh, idx sw, idx dh, idx dw, idx ph,
              idx pw, int path, unsigned char[:, ::1] a_ws, int[::1] rowsum):
    """The A operand of a quantized conv's ``i8_gemm``, packed: the byte im2col of ``x`` (the
    bytes of a uint8, or int8 with ``a_signed``, NHWC map (N, H, W, C); ``zp`` its zero point)
    for a (kh, kw) kernel, strides (sh, sw), dilations (dh, dw), leading pads (ph, pw) and an
    output of (N, OH, OW): ``N*OH*OW`` rows of K = kh*kw*C, taps outside the map equal to the
    zero point, written into ``a_ws`` (``i8_a_rows`` x ``i8_a_pitch(K)``) with ``rowsum`` (same
    rows; vnni and amx paths) as ``i8_gemm`` packs A; then ``i8_gemm(..., a_packed=True)``.
    The weight is packed from (M, kh, kw, C). Rows split over ``nt`` slots. Raises ValueError
    when an operand is too short or K exceeds ``I8_K_LIMIT``."""
    cdef idx rows = N * OH * OW, K = kh * kw * C
    cdef int t
    if K > I8_MAX_K or K <= 0:
        raise ValueError(f"i8_im2col: K={K} must be in [1, {I8_MAX_K}]")
    if (x.shape[0] < N * H * W * C or a_ws.shape[0] < rows or a_ws.shape[1] < i8_a_pitch(K, path)
            or (path != I8_INT16 and rowsum.shape[0] < rows)):
        raise ValueError("i8_im2col: an operand or workspace is too short")
    if rows == 0:
        return
    cdef const unsigned char* px = &x[0]
    cdef unsigned char* po = &a_ws[0, 0]
    cdef int* prs = &rowsum[0] if rowsum.shape[0] else NULL
    cdef idx pitch = a_ws.shape[1]
    if nt <= 1:
        with nogil:
            i8_im2col_rows(px, N * H * W * C, a_signed, zp, 0, rows, H, W, C, OH, OW, kh, kw, sh, sw, dh, dw,
                           ph, pw, po, pitch, path, prs)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        i8_im2col_rows(px, N * H * W * C, a_signed, zp, t * rows // nt, (t + 1) * rows // nt, H, W, C, OH, OW,
                       kh, kw, sh, sw, dh, dw, ph, pw, po, pitch, path, prs)


cdef struct i8_gemm_t:
    # one batched integer GEMM with its epilogue, as ``i8_gemm`` describes it
    const unsigned char* a
    const int* rowsum
    const unsigned char* b
    const int* bcol
    int path
    const int* za
    int za_step, za_add
    unsigned char* y
    const idx* offs
    idx nbatch, M, N, K, kp, kq, pitch, rb, cb, esize
    int kind
    const float* scale
    int s_step
    const float* bias
    const int* ibias
    float qdiv, zp, lo, hi
    int q_signed
    int act
    float pa, pb
    int* sums  # where the raw paths' A packing puts the row sums: rowsum, or NULL when B's
    # zero points are all 0 (the epilogue multiplies the sums by them)
    const float* post
    const int* tfl_ms
    const double* tfl_scale
    const int* res  # u8s8: each panel's first correction record (npan + 1), or NULL
    const int* recs  # the records (17 int32 each, ``quant.u8s8_split``)


cdef struct i8_run_t:
    # one ``i8_gemm`` call, checked: the GEMM, then how A is packed and the work split
    i8_gemm_t g
    int nt
    bint a_signed, a_zp_rows, a_packed
    const unsigned char* a
    const int* a_zp
    idx rows, K, pitch, items
    unsigned char* pws


cdef struct i8_col_t:
    # the byte im2col that fills a conv's A operand before its ``i8_gemm``; with ``implicit``
    # (int16 or u8s8 path) none: the input written into a padded map of (N * Hp, Wp * C)
    # values in the A workspace, read in place by the tiles (``sprat_i8_pad_map``)
    const unsigned char* x
    bint a_signed
    int zp
    idx nx, rows, H, W, C, OH, OW, kh, kw, sh, sw, dh, dw, ph, pw
    bint implicit
    idx N, Hp, Wp


cdef inline void i8_finish_rows(const i8_gemm_t* g, const int* t, idx ldt, idx row,
                                idx yrow, idx j0, idx rows, idx n, idx yo,
                                bint act=True) noexcept nogil:
    """The epilogue of ``rows`` x ``n`` sums ``t`` (row pitch ``ldt``) of A's rows from
    ``row`` (among all rows), columns j0.., into Y's rows from ``yrow`` of the batch at ``yo``."""
    cdef bint raw = g.path != I8_INT16
    cdef idx r, j
    cdef int* ti
    cdef int za
    cdef int off[32]
    if g.kind == I8_OUT_TFL and n <= 32 and (not raw or (g.sums == NULL and g.za_step == 0)):
        # NOTE: no term per row (B's zero points all 0, one A zero point; or the int16 path's
        # operands already shifted): the column terms folded into the bias, one pass
        za = g.za[0] + g.za_add
        for j in range(n):
            off[j] = <int>((<unsigned int>g.ibias[j0 + j] if g.ibias != NULL else 0u)
                           + (<unsigned int>za * <unsigned int>g.bcol[g.N + j0 + j]
                              if raw else 0u))
        sprat_tfl_requant_block(t, ldt, rows, n, g.tfl_ms + j0, g.tfl_ms + g.N + j0, off,
                                <int>g.zp, <int>g.lo, <int>g.hi, g.y + yo + yrow * g.N + j0,
                                g.N)
        return
    if g.kind == I8_OUT_TFL or g.kind == I8_OUT_TFL_RESCALE:
        # NOTE: TFLite's epilogues (``tflite.pxi``): the sums corrected for the zero points in
        # place (the int32 epilogue into the tile itself), then requantised (a block of rows
        # per 8 columns) or rescaled row by row
        ti = <int*>t
        i8_finish_block(t, ldt, rows, n, g.bcol + g.N + j0 if raw else NULL,
                        g.za + row * g.za_step, g.za_step, g.za_add,
                        g.rowsum + row if raw else NULL, g.bcol + j0 if raw else NULL,
                        I8_OUT_I32, <unsigned char*>ti, ldt * 4, g.scale, 0, NULL, NULL, 0.0,
                        0.0, 0.0, 0.0, 0, NULL, 0)
        if g.kind == I8_OUT_TFL:
            sprat_tfl_requant_block(ti, ldt, rows, n, g.tfl_ms + j0, g.tfl_ms + g.N + j0,
                                    g.ibias + j0 if g.ibias != NULL else NULL, <int>g.zp,
                                    <int>g.lo, <int>g.hi, g.y + yo + yrow * g.N + j0, g.N)
            return
        for r in range(rows):
            sprat_tfl_rescale(ti + r * ldt, g.y + yo + (yrow + r) * g.N + j0, 0, 1, n,
                              g.tfl_scale + j0, g.ibias + j0, <int>g.zp, <int>g.lo, <int>g.hi)
        return
    i8_finish_block(t, ldt, rows, n, g.bcol + g.N + j0 if raw else NULL, g.za + row * g.za_step,
                    g.za_step, g.za_add, g.rowsum + row if raw else NULL,
                    g.bcol + j0 if raw else NULL, g.kind, g.y + (yo + yrow * g.N + j0) * g.esize,
                    g.N * g.esize, g.scale + j0 * g.s_step, g.s_step,
                    g.bias + j0 if g.bias != NULL else NULL,
                    g.ibias + j0 if g.ibias != NULL else NULL, g.qdiv, g.zp, g.lo, g.hi,
                    g.q_signed, g.post + j0 if g.post != NULL else NULL, g.N)
    if act and g.act != A_NONE and g.kind == I8_OUT_F32:
        for r in range(rows):
            act_inplace(<float*>(g.y) + yo + (yrow + r) * g.N + j0, n, g.act, g.pa, g.pb)


cdef void i8_items(const i8_gemm_t* g, idx lo, idx hi, const i8_run_t* fill,
                   const i8_col_t* col, bint tl=False) noexcept nogil:
    """Work items [lo, hi) of ``i8_gemm``: (batch, block of ``rb`` rows, block of ``cb``
    columns); in a block, each 16-column panel of B (in L1/L2) meets every group of I8_MR
    rows of A (the block's rows stay in L2), and each tile gets its epilogue at once. The
    AMX path walks the item in blocks of 32 x 32 (four tiles). ``fill`` (not NULL: one batch,
    one block of columns, so each item has rows of its own): the item's rows of A are packed
    first (``i8_pack_rows``, or the im2col ``col`` when not NULL), while in cache; with
    ``tl``, into this thread's buffer (``sprat_i8_tl``) instead of the A workspace."""
    cdef idx nrb = (g.M + g.rb - 1) // g.rb
    cdef idx ncb = (g.N + g.cb - 1) // g.cb
    cdef idx it, bi, rem, m0, n0, m1, n1, j0, i0, mr, nr, yo, a0
    cdef int tile[6 * 16]
    cdef int block[2 * 32 * 32]
    cdef int cur = 0
    cdef bint pending = False
    cdef idx p_row = 0, p_i0 = 0, p_j0 = 0, p_mr = 0, p_nr = 0, p_yo = 0
    cdef const unsigned char* bb
    cdef const unsigned char* ar
    cdef const int* rec = NULL
    cdef idx nrec = 0
    cdef const unsigned char* abase = g.a
    cdef unsigned char* wbase = NULL if fill == NULL else fill.pws
    cdef unsigned char* own
    # NOTE: the int16 path's requantising epilogue in the tile's registers: one A zero point
    # (already subtracted), no division (sprat_i8_finish_block's conditions for finish_q8)
    cdef bint q8 = (I8_TILE_Q8 and g.path == I8_INT16 and g.kind == I8_OUT_Q8
                    and g.za_step == 0 and g.qdiv == 0.0)
    # NOTE: the same on the u8s8 path where B's zero points are all 0 (no term per row)
    cdef bint q8u = (I8_TILE_Q8 and g.path == I8_U8S8 and g.kind == I8_OUT_Q8
                     and g.za_step == 0 and g.qdiv == 0.0)
    cdef idx jz
    if q8u:
        for jz in range(g.N):
            if g.bcol[jz] != 0:
                q8u = False
                break
    # NOTE: a float32 output's activation once per item's rows (cb columns each), after its
    # panels, rather than per tile row of 16 (a call per 16 values: MiniLM's Gelu cost 2.7 %
    # of the model). Not on AMX, whose last block's epilogue runs during the next item
    cdef bint act_late = g.act != A_NONE and g.kind == I8_OUT_F32 and g.path != I8_AMX
    if col != NULL and col.implicit:
        i8_items_implicit(g, lo, hi, col, q8, q8u)
        return
    if g.path == I8_AMX:
        i8_amx_begin()
    for it in range(lo, hi):
        bi = it // (nrb * ncb)
        rem = it - bi * nrb * ncb
        m0 = (rem // ncb) * g.rb
        n0 = (rem % ncb) * g.cb
        m1 = min(g.M, m0 + g.rb)
        n1 = min(g.N, n0 + g.cb)
        a0 = g.offs[3 * bi]
        bb = g.b + g.offs[3 * bi + 1]
        yo = g.offs[3 * bi + 2]
        j0 = n0
        if fill != NULL and tl:
            # NOTE: rows m0.. at the buffer's start (AMX reads up to 31 rows past m1: their
            # products are dropped); the writers and the products index rows from m0 back
            own = i8_tl(<size_t>((m1 - m0 + 32) * fill.pitch))
            if own != NULL:
                wbase = <unsigned char*>(<size_t>own - <size_t>(m0 * fill.pitch))
                abase = wbase
            else:
                wbase, abase = fill.pws, g.a
        if fill != NULL and col != NULL:
            i8_im2col_rows(col.x, col.nx, col.a_signed, col.zp, m0, m1, col.H, col.W, col.C,
                           col.OH, col.OW, col.kh, col.kw, col.sh, col.sw, col.dh, col.dw,
                           col.ph, col.pw, wbase, fill.pitch, g.path, g.sums)
        elif fill != NULL:
            i8_pack_rows(fill.a, fill.a_signed, fill.a_zp, fill.a_zp_rows, m0, m1, fill.rows,
                         fill.K, wbase, fill.pitch, g.path, g.sums)
        if g.path == I8_AMX:
            while j0 < n1:
                nr = min(<idx>32, n1 - j0)
                i0 = m0
                while i0 < m1:
                    mr = min(<idx>32, m1 - i0)
                    i8_amx_block(abase + (a0 + i0) * g.pitch, g.pitch,
                                 <const signed char*>(bb + (j0 // I8_NR) * g.kq * 64), g.kq,
                                 block + cur * 1024, mr > 16, nr > 16)
                    # NOTE: the epilogue of the block before, while this one's tile stores
                    # retire (read at once, they stalled the epilogue's loads)
                    if pending:
                        i8_finish_rows(g, block + (1 - cur) * 1024, 32, p_row, p_i0, p_j0, p_mr,
                                       p_nr, p_yo)
                    pending = True
                    p_row, p_i0, p_j0, p_mr, p_nr, p_yo = a0 + i0, i0, j0, mr, nr, yo
                    cur = 1 - cur
                    i0 += mr
                j0 += nr
            continue
        while j0 < n1:
            nr = min(<idx>I8_NR, n1 - j0)
            if g.res != NULL:  # NOTE: this panel's correction records
                rec = g.recs + 17 * g.res[j0 // I8_NR]
                nrec = g.res[j0 // I8_NR + 1] - g.res[j0 // I8_NR]
            i0 = m0
            while i0 < m1:
                mr = min(<idx>I8_MR, m1 - i0)
                ar = abase + (a0 + i0) * g.pitch
                if g.path == I8_VNNI:
                    i8_tile_vnni(ar, g.pitch, <const signed char*>(bb + (j0 // I8_NR) * g.kq * 64),
                                 g.kq, tile, <int>mr)
                elif g.path == I8_U8S8 and q8u and (nr == I8_NR or nr == 8):
                    # NOTE: requantised from the tile's registers (sprat_i8_tile_u8s8_q8); a
                    # last panel of 8 columns as a half tile
                    i8_tile_u8s8_q8(ar, g.pitch,
                                    <const signed char*>(bb + (j0 // I8_NR) * g.kq * 64), g.kq,
                                    <int>mr, <int>nr, g.y + yo + i0 * g.N + j0, g.N,
                                    g.scale + j0 * g.s_step, g.s_step,
                                    g.ibias + j0 if g.ibias != NULL else NULL,
                                    g.bcol + g.N + j0, g.za[0] + g.za_add, g.zp, g.lo, g.hi,
                                    g.q_signed, g.post + j0 if g.post != NULL else NULL, g.N,
                                    rec, nrec)
                    i0 += mr
                    continue
                elif g.path == I8_U8S8:
                    i8_tile_u8s8(ar, g.pitch, <const signed char*>(bb + (j0 // I8_NR) * g.kq * 64),
                                 g.kq, tile, <int>mr, rec, nrec)
                elif g.path == I8_WIDEN:
                    i8_tile_widen(ar, g.pitch,
                                  <const signed char*>(bb + (j0 // I8_NR) * g.kq * 64), g.kq,
                                  tile, <int>mr)
                elif q8 and (nr == I8_NR or nr == 8):
                    # NOTE: requantised from the tile's registers (sprat_i8_tile_q8); a last
                    # panel of 8 columns (24, 40, ... output channels) as a half tile
                    i8_tile_q8(<const short*>ar, g.pitch // 2,
                               <const short*>(bb + (j0 // I8_NR) * g.kp * 64), g.kp, <int>mr,
                               <int>nr, g.y + yo + i0 * g.N + j0, g.N, g.scale + j0 * g.s_step,
                               g.s_step, g.ibias + j0 if g.ibias != NULL else NULL, g.zp,
                               g.lo, g.hi, g.q_signed, g.post + j0 if g.post != NULL else NULL,
                               g.N)
                    i0 += mr
                    continue
                else:
                    i8_tile(<const short*>ar, g.pitch // 2,
                            <const short*>(bb + (j0 // I8_NR) * g.kp * 64), g.kp, tile, <int>mr)
                i8_finish_rows(g, tile, 16, a0 + i0, i0, j0, mr, nr, yo, not act_late)
                i0 += mr
            j0 += nr
        if act_late:
            for i0 in range(m0, m1):
                act_inplace(<float*>(g.y) + yo + i0 * g.N + n0, n1 - n0, g.act, g.pa, g.pb)
    if pending:
        i8_finish_rows(g, block + (1 - cur) * 1024, 32, p_row, p_i0, p_j0, p_mr, p_nr, p_yo)
    if g.path == I8_AMX:
        i8_amx_end()


cdef inline void i8_pad_map(const i8_col_t* c, unsigned char* out, idx r0, idx r1,
                            int path) noexcept nogil:
    """Padded rows [r0, r1) of a conv's input map for ``i8_items_implicit``, as the GEMM's
    ``path`` reads them (``sprat_i8_pad_map``)."""
    i8_pad_map_c(out, c.x, r0, r1, c.H, c.W, c.C, c.Hp, c.Wp, c.ph, c.pw, c.zp, c.a_signed,
                 path != I8_INT16)


cdef void i8_items_implicit(const i8_gemm_t* g, idx lo, idx hi, const i8_col_t* col,
                            bint q8, bint q8u) noexcept nogil:
    """Work items [lo, hi) of a conv's ``i8_gemm`` on the int16 or u8s8 path with its A read in
    place from the padded input map in the A workspace (``i8_col_t.implicit``, ``i8_pad_map``):
    each tile's rows (output pixels) start at their top-left tap in the map, K being ``kh``
    kernel rows of ``kw * C`` values, one padded map row (times ``dh``) apart. As
    ``i8_items`` otherwise (u8s8: B's zero points all 0, no correction records)."""
    cdef idx nrb = (g.M + g.rb - 1) // g.rb
    cdef idx ncb = (g.N + g.cb - 1) // g.cb
    cdef idx it, rem, m0, n0, m1, n1, j0, i0, mr, nr, r, row, n, oy, ox
    cdef idx ohw = col.OH * col.OW
    cdef idx wc = col.Wp * col.C
    cdef bint u8 = g.path == I8_U8S8
    # NOTE: per kernel row, pairs of int16 (int16 path) or quads of bytes (u8s8)
    cdef idx kps = col.kw * col.C // (4 if u8 else 2)
    cdef idx rs = col.dh * wc
    cdef const short* xw = <const short*>g.a
    cdef const unsigned char* xb = g.a
    cdef const short* ap[6]
    cdef const unsigned char* ap8[6]
    cdef const short* bp
    cdef const signed char* bq
    cdef int tile[6 * 16]
    cdef idx off
    for it in range(lo, hi):
        rem = it % (nrb * ncb)
        m0 = (rem // ncb) * g.rb
        n0 = (rem % ncb) * g.cb
        m1 = min(g.M, m0 + g.rb)
        n1 = min(g.N, n0 + g.cb)
        j0 = n0
        while j0 < n1:
            nr = min(<idx>I8_NR, n1 - j0)
            bp = <const short*>(g.b + (j0 // I8_NR) * g.kp * 64)
            bq = <const signed char*>(g.b + (j0 // I8_NR) * g.kq * 64)
            i0 = m0
            while i0 < m1:
                mr = min(<idx>I8_MR, m1 - i0)
                row = i0
                n = row // ohw
                oy = (row - n * ohw) // col.OW
                ox = row - n * ohw - oy * col.OW
                for r in range(mr):
                    off = (n * col.Hp + oy * col.sh) * wc + ox * col.sw * col.C
                    ap[r] = xw + off
                    ap8[r] = xb + off
                    ox += 1
                    if ox == col.OW:
                        ox = 0
                        oy += 1
                        if oy == col.OH:
                            oy = 0
                            n += 1
                if u8 and q8u and (nr == I8_NR or nr == 8):
                    i8_tile_u8s8_q8_seg(ap8, rs, col.kh, kps, bq, <int>mr, <int>nr,
                                        g.y + i0 * g.N + j0, g.N, g.scale + j0 * g.s_step,
                                        g.s_step, g.ibias + j0 if g.ibias != NULL else NULL,
                                        g.bcol + g.N + j0, g.za[0] + g.za_add, g.zp, g.lo, g.hi,
                                        g.q_signed, g.post + j0 if g.post != NULL else NULL,
                                        g.N)
                elif u8:
                    i8_tile_u8s8_seg(ap8, rs, col.kh, kps, bq, tile, <int>mr)
                    i8_finish_rows(g, tile, 16, i0, i0, j0, mr, nr, 0)
                elif q8 and (nr == I8_NR or nr == 8):
                    i8_tile_q8_seg(ap, rs, col.kh, kps, bp, <int>mr, <int>nr,
                                   g.y + i0 * g.N + j0, g.N, g.scale + j0 * g.s_step, g.s_step,
                                   g.ibias + j0 if g.ibias != NULL else NULL, g.zp, g.lo, g.hi,
                                   g.q_signed, g.post + j0 if g.post != NULL else NULL, g.N)
                else:
                    i8_tile_seg(ap, rs, col.kh, kps, bp, tile, <int>mr)
                    i8_finish_rows(g, tile, 16, i0, i0, j0, mr, nr, 0)
                i0 += mr
            j0 += nr


def i8_check_res(const int[::1] res, idx K, idx N, int path):
    """Raise ValueError unless ``res`` is a whole set of u8s8 correction records for a
    weight of K rows and N columns (``quant.u8s8_split``): each panel's first record in order,
    each record's pair of rows inside K."""
    cdef idx npan = (N + I8_NR - 1) // I8_NR, q, e
    if path != I8_U8S8:
        raise ValueError("i8_gemm: correction records are for the u8s8 path only")
    if res.shape[0] < npan + 1 or res[0] != 0:
        raise ValueError("i8_gemm: the correction records are malformed")
    for q in range(npan):
        if res[q + 1] < res[q]:
            raise ValueError("i8_gemm: the correction records are malformed")
    if res.shape[0] != npan + 1 + 17 * <idx>res[npan]:
        raise ValueError("i8_gemm: the correction records are malformed")
    for e in range(res[npan]):
        if res[npan + 1 + 17 * e] < 0 or 2 * <idx>res[npan + 1 + 17 * e] >= K:
            raise ValueError("i8_gemm: a correction record's row is outside K")


def i8_gemm(int nt, const unsigned char[::1] a, bint a_signed, const int[::1] a_zp,
            bint a_zp_rows, unsigned char[:, ::1] a_ws, int[::1] rowsum, bint a_packed,
            const unsigned char[::1] b, const int[::1] bcol, int path, const idx[:, ::1] offs,
            idx M, idx N, idx K, idx rb, idx cb, int kind, unsigned char[::1] y,
            const float[::1] scale, const float[::1] bias, const int[::1] ibias, float qdiv,
            float zp, float lo, float hi, bint q_signed, int act=0, float pa=0.0, float pb=0.0,
            const int[::1] tfl_ms=None, const double[::1] tfl_scale=None,
            const float[::1] post=None, const int[::1] res=None, I8GemmCall into=None):
    """Exact integer GEMM with a fused epilogue (MatMulInteger-10, QLinearMatMul-21 and the
    com.microsoft MatMulIntegerToFloat, DynamicQuantizeMatMul and QGemm).

    For each batch ``i`` (``offs[i] = (a_row, b_off, y_off)``: the first row of its A matrix
    among A's rows, the byte offset of its packed B, the element offset of its Y):
    ``acc (M, N) = (A_i - a_zp) @ (B_i - b_zp)`` in int32, exactly, then by ``kind``:
    ``I8_OUT_I32``: Y = acc (+ ibias); ``I8_OUT_F32``: Y = float(acc (+ ibias)) * scale
    (+ bias), float32; ``I8_OUT_Q8``: Y = saturate(rint(float(acc (+ ibias)) * scale
    [/ qdiv]) + zp) to [lo, hi], then with ``post`` (4 N floats: a, b, lo2, hi2 per column; a
    quantized conv's fused lookup, ``qconv.py``) ``clamp(rint(Y * a + b), lo2, hi2)``, int8
    when ``q_signed`` else uint8 (``qdiv`` 0: no division).
    A float32 output then gets the fused activation ``act`` (``ACT_CODES``, params pa, pb).
    ``res`` (u8s8 path; None or empty: none): the corrections of a weight clipped to fit it
    (``quant.u8s8_split``), added to the sums before the epilogue.
    TFLite's epilogues (TflConv, TflFullyConnected; ``tflite.pxi``), u8 / s8 bytes:
    ``I8_OUT_TFL``: Y = clamp(MBQM(acc + ibias, m[j], s[j]) + zp, lo, hi), ``tfl_ms`` (2N
    int32) the multipliers then the shifts; ``I8_OUT_TFL_RESCALE``: Y = clamp(round_half_away(
    double(acc + ibias) * tfl_scale[j]) + zp, lo, hi), ``tfl_scale`` N doubles, ibias given.

    ``a``: the bytes of every A row (rows of K; int8 viewed as uint8 with ``a_signed``) and
    ``a_zp`` its zero point (1 value, or one per row of ``a`` with ``a_zp_rows``); ``a_ws``
    (``i8_a_rows(rows of A, path)`` rows of >= ``i8_a_pitch(K, path)`` bytes) receives the
    packed rows, or holds them already when ``a_packed`` (``i8_dynamic_quantize`` wrote them,
    int16 path, or ``i8_im2col``); ``rowsum`` (rows of A int32, vnni and amx paths) receives
    each row's sum (holds them when ``a_packed``). ``b``, ``bcol``: packed by ``i8_pack_b``
    for the same ``path`` (B's zero point is in them). ``scale`` (1 or N floats), ``bias`` (0
    or N floats), ``ibias`` (0 or N int32, QGemm's C). ``y``: the output's bytes. Work items are
    (batch, ``rb`` rows, ``cb`` columns; cb a multiple of 16, for AMX rb too), split over ``nt``
    slots; A is packed first (rows split over the slots). Raises ValueError when K exceeds
    ``I8_K_LIMIT``, a block size is wrong, the path is not available on this CPU, or an
    operand is too short. ``into``: check the arguments and bind them to that call object
    (``I8GemmCall``) instead of running."""
    cdef i8_run_t run
    cdef i8_gemm_t g
    cdef idx rows = a.shape[0] // K if K > 0 and not a_packed else 0
    cdef idx i
    if a_packed:  # NOTE: the rows the batches read
        for i in range(offs.shape[0]):
            rows = max(rows, offs[i, 0] + M)
    if M <= 0 or N <= 0:
        return
    if K > I8_MAX_K or K <= 0:
        raise ValueError(f"i8_gemm: K={K} must be in [1, {I8_MAX_K}]")
    if cb % I8_NR or rb <= 0 or (path == I8_AMX and rb % 16):
        raise ValueError("i8_gemm: cb (and rb for AMX) must be positive multiples of 16")
    if ((path == I8_VNNI and not i8_cpu_vnni()) or (path == I8_AMX and not i8_cpu_amx())
            or ((path == I8_U8S8 or path == I8_WIDEN) and not I8_U8S8_BUILD)
            or path not in (I8_INT16, I8_VNNI, I8_AMX, I8_U8S8, I8_WIDEN)):
        raise ValueError(f"i8_gemm: path {path} is not available here")
    if (a_ws.shape[1] < i8_a_pitch(K, path) or a_ws.shape[0] < i8_a_rows(rows, path)
            or a_zp.shape[0] < (rows if a_zp_rows else 1)
            or (path != I8_INT16 and (rowsum.shape[0] < rows or bcol.shape[0] < 2 * N))
            or b.shape[0] < i8_packed_b_bytes(K, N, path)
            or y.shape[0] < offs.shape[0] * M * N * (1 if kind >= I8_OUT_Q8 else 4)):
        raise ValueError("i8_gemm: an operand or workspace is too short")
    if ((kind == I8_OUT_TFL and (tfl_ms is None or tfl_ms.shape[0] < 2 * N))
            or (kind == I8_OUT_TFL_RESCALE and (tfl_scale is None or tfl_scale.shape[0] < N
                                                or ibias.shape[0] != N))):
        raise ValueError("i8_gemm: TFLite's epilogue needs its multipliers, shifts or scales")
    if scale.shape[0] not in (1, N) or bias.shape[0] not in (0, N) or ibias.shape[0] not in (0, N):
        raise ValueError("i8_gemm: scale, bias or ibias has the wrong length")
    if post is not None and post.shape[0] not in (0, 4 * N):
        raise ValueError("i8_gemm: post must hold 4 * N floats")
    g.res = g.recs = NULL
    if res is not None and res.shape[0]:
        i8_check_res(res, K, N, path)
        g.res = &res[0]
        g.recs = &res[0] + (N + I8_NR - 1) // I8_NR + 1
    g.a, g.rowsum = &a_ws[0, 0], &rowsum[0] if rowsum.shape[0] else NULL
    g.b, g.bcol, g.path = &b[0], &bcol[0] if bcol.shape[0] else NULL, path
    g.y, g.offs = &y[0], &offs[0, 0]
    g.nbatch, g.M, g.N, g.K = offs.shape[0], M, N, K
    g.kp, g.kq, g.pitch, g.rb, g.cb = (K + 1) // 2, i8_kq(K, path), a_ws.shape[1], rb, cb
    g.kind = kind
    g.esize = 4 if kind < I8_OUT_Q8 else 1
    g.tfl_ms = &tfl_ms[0] if kind == I8_OUT_TFL else NULL
    g.tfl_scale = &tfl_scale[0] if kind == I8_OUT_TFL_RESCALE else NULL
    g.scale = &scale[0]
    g.s_step = 1 if scale.shape[0] > 1 else 0
    g.bias = &bias[0] if bias.shape[0] else NULL
    g.ibias = &ibias[0] if ibias.shape[0] else NULL
    g.qdiv, g.zp, g.lo, g.hi, g.q_signed = qdiv, zp, lo, hi, q_signed
    g.act, g.pa, g.pb = act, pa, pb
    g.post = &post[0] if post is not None and post.shape[0] and kind == I8_OUT_Q8 else NULL
    # NOTE: the vnni and amx paths correct for A's zero point in the epilogue, shifted as the
    # data (int8 A is stored +128)
    g.za, g.za_step = &a_zp[0], 1 if a_zp_rows else 0
    # NOTE: a symmetric weight (every zero point of B 0, after the shift: s8 B with zp 0)
    # needs no row sums: summing them cost a fifth of a small-K conv's A packing
    g.sums = NULL
    if path != I8_INT16:
        for i in range(N):
            if bcol[i] != 0:
                g.sums = &rowsum[0]
                break
    g.za_add = 128 if a_signed and path != I8_INT16 else 0
    run.g = g
    run.nt, run.a_signed, run.a_zp_rows, run.a_packed = nt, a_signed, a_zp_rows, a_packed
    run.a = &a[0] if a.shape[0] else NULL
    run.a_zp, run.rows, run.K = &a_zp[0], rows, K
    run.pws, run.pitch = &a_ws[0, 0], a_ws.shape[1]
    run.items = g.nbatch * ((M + rb - 1) // rb) * ((N + cb - 1) // cb)
    if into is not None:
        into.run = run
        return
    with nogil:
        i8_gemm_exec(&run, NULL)


cdef void i8_gemm_exec(i8_run_t* r, const i8_col_t* col) noexcept nogil:
    """Run a checked ``i8_gemm``: A packed (or its im2col ``col`` when not NULL; rows split
    over the slots when large), then the work items over ``nt`` slots; where each item has
    rows of its own (one batch, one block of columns), each item packs its rows itself.
    NOTE: so a row block is packed just before its product reads it (from L1/L2, not
    memory: a 112 x 112 stem writes 800 KB of A on AMX) and in the same parallel region
    (a second one cost its fork and join). On more than one slot, into each thread's own
    buffer (``i8_items``' ``tl``: the A workspace's lines crossed cores between ops); AMX only
    then (on one slot its blocks ran 4-7 % slower packed item by item: mltk image
    classification, visual wake words, keyword spotting)."""
    cdef const i8_gemm_t* gp = &r.g
    cdef int t, nt = r.nt
    cdef idx rows = r.rows, items = r.items
    if col != NULL and col.implicit:
        # NOTE: the padded map first (its rows over the slots), then the items read it
        if nt <= 1 or 2 * col.N * col.Hp * col.Wp * col.C < I8_PACK_PARALLEL:
            i8_pad_map(col, r.pws, 0, col.N * col.Hp, r.g.path)
        else:
            for t in prange(nt, num_threads=nt, schedule="static", chunksize=1):
                i8_pad_map(col, r.pws, t * col.N * col.Hp // nt, (t + 1) * col.N * col.Hp // nt,
                           r.g.path)
        if nt <= 1:
            i8_items(gp, 0, items, NULL, col)
            return
        for t in prange(nt, num_threads=nt, schedule="static", chunksize=1):
            i8_items(gp, t * items // nt, (t + 1) * items // nt, NULL, col)
        return
    cdef bint fuse = (r.g.nbatch == 1 and r.g.N <= r.g.cb and (col != NULL or not r.a_packed)
                      and (r.g.path != I8_AMX or nt > 1)
                      and items > 0)
    if fuse and nt <= 1:
        i8_items(gp, 0, items, r, col)
        return
    if fuse:
        for t in prange(nt, num_threads=nt, schedule="static", chunksize=1):
            i8_items(gp, t * items // nt, (t + 1) * items // nt, r, col, True)
        return
    if col != NULL:
        i8_im2col_exec(col, r)
    if nt <= 1:
        if not r.a_packed:
            i8_pack_rows(r.a, r.a_signed, r.a_zp, r.a_zp_rows, 0, rows, rows, r.K, r.pws,
                         r.pitch, r.g.path, r.g.sums)
        i8_items(gp, 0, items, NULL, NULL)
        return
    # NOTE: the bytes the pack writes (rows of the padded pitch: a 1x1 conv of 16 channels
    # writes 64 per pixel on AMX), not those it reads
    if not r.a_packed and rows * r.pitch < I8_PACK_PARALLEL:
        i8_pack_rows(r.a, r.a_signed, r.a_zp, r.a_zp_rows, 0, rows, rows, r.K, r.pws,
                     r.pitch, r.g.path, r.g.sums)
    elif not r.a_packed:
        for t in prange(nt, num_threads=nt, schedule="static", chunksize=1):
            i8_pack_rows(r.a, r.a_signed, r.a_zp, r.a_zp_rows, t * rows // nt,
                         (t + 1) * rows // nt, rows, r.K, r.pws, r.pitch, r.g.path,
                         r.g.sums)
    for t in prange(nt, num_threads=nt, schedule="static", chunksize=1):
        i8_items(gp, t * items // nt, (t + 1) * items // nt, NULL, NULL)


cdef void i8_im2col_exec(const i8_col_t* c, const i8_run_t* r) noexcept nogil:
    """``i8_im2col`` into the A workspace of the checked call ``r`` (rows over its slots)."""
    cdef int t, nt = r.nt
    if nt <= 1:
        i8_im2col_rows(c.x, c.nx, c.a_signed, c.zp, 0, c.rows, c.H, c.W, c.C, c.OH, c.OW, c.kh, c.kw,
                       c.sh, c.sw, c.dh, c.dw, c.ph, c.pw, r.pws, r.pitch, r.g.path,
                       r.g.sums)
        return
    for t in prange(nt, num_threads=nt, schedule="static", chunksize=1):
        i8_im2col_rows(c.x, c.nx, c.a_signed, c.zp, t * c.rows // nt, (t + 1) * c.rows // nt, c.H,
                       c.W, c.C, c.OH, c.OW, c.kh, c.kw, c.sh, c.sw, c.dh, c.dw, c.ph, c.pw,
                       r.pws, r.pitch, r.g.path, r.g.sums)


cdef class I8GemmCall:
    """One ``i8_gemm`` call with its arguments checked and bound once: ``I8GemmCall(args)``
    (the argument tuple of ``i8_gemm``, kept alive here), then ``call()`` runs it; with
    ``im2col`` (``i8_im2col``'s arguments from ``x`` to ``pw``: a conv whose A is the byte
    im2col of its input, ``a_packed``) the call fills A first. NOTE: a kernel makes one per
    binding of its arrays: parsing ``i8_gemm``'s 30 arguments costs ~1.3 us a call, most of a
    small quantized conv's time. ``res``: ``i8_gemm``'s correction records. ``im2col``'s
    last, optional value ``implicit`` (the int16 path with an even kw * C, or u8s8 with kw * C
    a multiple of 4, B's zero points 0 and no correction records; dilation 1 across, one
    batch): no im2col, the input written into a padded map in the A workspace (int16 less the
    zero point, or u8s8 bytes) and read there in place (``i8_items_implicit``;
    ``qconv.QConvKernel._implicit``). Raises as ``i8_gemm``
    / ``i8_im2col``, or ValueError when the implicit form's conditions do not hold."""
    cdef i8_run_t run
    cdef i8_col_t col
    cdef bint has_col
    cdef readonly tuple args
    cdef readonly tuple im2col
    cdef readonly object res

    def __init__(self, tuple args, tuple im2col=None, res=None):
        self.args, self.im2col, self.res = args, im2col, res
        i8_gemm(*args, res=res, into=self)
        self.has_col = im2col is not None
        if self.has_col:
            self._bind_im2col(*im2col)

    def _bind_im2col(self, const unsigned char[::1] x, bint a_signed, int zp, idx N, idx H,
                     idx W, idx C, idx OH, idx OW, idx kh, idx kw, idx sh, idx sw, idx dh,
                     idx dw, idx ph, idx pw, bint implicit=False):
        if (not self.run.a_packed or kh * kw * C != self.run.K or N * OH * OW > self.run.rows
                or N * OH * OW != self.run.g.M or x.shape[0] < N * H * W * C or N * H * W * C == 0):
            raise ValueError("I8GemmCall: the im2col does not fit the GEMM's packed A")
        self.col.implicit = implicit
        self.col.N = N
        if implicit:
            # NOTE: the padded map spans every tap: rows up to (OH-1)*sh + (kh-1)*dh, columns
            # up to (OW-1)*sw + kw - 1
            self.col.Hp = (OH - 1) * sh + (kh - 1) * dh + 1
            self.col.Wp = (OW - 1) * sw + kw
            u8 = self.run.g.path == I8_U8S8
            if (self.run.g.path not in (I8_INT16, I8_U8S8) or dw != 1
                    or (kw * C) % (4 if u8 else 2) or self.run.g.nbatch != 1
                    or self.run.g.offs[0] != 0 or self.run.g.offs[2] != 0
                    or self.run.g.res != NULL or (u8 and self.run.g.sums != NULL)
                    or (1 if u8 else 2) * N * self.col.Hp * self.col.Wp * C
                    > self.run.rows * self.run.pitch):
                raise ValueError("I8GemmCall: an implicit im2col needs the int16 path (or u8s8 "
                                 "with B's zero points 0 and no correction records), dilation "
                                 "1 across, kw * C even (u8s8: a multiple of 4), one batch and a "
                                 "workspace of its padded map")
        self.col.x, self.col.a_signed, self.col.zp = &x[0], a_signed, zp
        self.col.rows, self.col.H, self.col.W, self.col.C = N * OH * OW, H, W, C
        self.col.nx = N * H * W * C
        self.col.OH, self.col.OW, self.col.kh, self.col.kw = OH, OW, kh, kw
        self.col.sh, self.col.sw, self.col.dh, self.col.dw = sh, sw, dh, dw
        self.col.ph, self.col.pw = ph, pw

    def __call__(self):
        with nogil:
            i8_gemm_exec(&self.run, &self.col if self.has_col else NULL)


# ---- DynamicQuantizeLinear ------------------------------------------------------------------

def i8_dynamic_quantize(const float[::1] x, unsigned char[::1] y, short[:, ::1] a16,
                        bint widen, int nt, float[::1] part):
    """DynamicQuantizeLinear-11 of ``x`` (n floats) into ``y`` (n uint8); returns
    ``(scale, zero_point)`` (float, int). With ``widen``, ``a16`` (viewed flat, >= n int16)
    also receives ``y - zero_point``: the widened A of an ``i8_gemm`` whose K is even (then
    ``a_packed``). ``part``: 2 * nt floats of scratch (each slot's min and max). Raises
    ValueError when an operand is too short."""
    cdef idx n = x.shape[0]
    cdef float lo, hi, scale
    cdef int zp, t, k
    cdef short* pa = NULL
    if y.shape[0] < n or part.shape[0] < 2 * nt:
        raise ValueError("i8_dynamic_quantize: y or part is too short")
    if widen:
        if a16.shape[0] * a16.shape[1] < n:
            raise ValueError("i8_dynamic_quantize: a16 is too short")
        pa = &a16[0, 0]
    if n == 0:
        return 1.0, 0
    if nt <= 1 or n < 4096:
        with nogil:
            i8_minmax(&x[0], n, &lo, &hi)
            zp = i8_dql_params(lo, hi, &scale)
            i8_quantize(&x[0], n, scale, zp, &y[0], pa)
        return scale, zp
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        i8_minmax(&x[t * n // nt], (t + 1) * n // nt - t * n // nt, &part[2 * t],
                  &part[2 * t + 1])
    lo, hi = part[0], part[1]
    for k in range(1, nt):
        lo = part[2 * k] if part[2 * k] < lo else lo
        hi = part[2 * k + 1] if part[2 * k + 1] > hi else hi
    zp = i8_dql_params(lo, hi, &scale)
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        i8_quantize(&x[t * n // nt], (t + 1) * n // nt - t * n // nt, scale, zp,
                    &y[t * n // nt], pa + t * n // nt if pa != NULL else NULL)
    return scale, zp


def i8_view(a):
    """``a`` (a C-contiguous ndarray: uint8 1-D/2-D, int32, float32, float64 1-D or intp 2-D) as a
    Cython typed memoryview object, which ``i8_gemm`` takes without a buffer request (as
    ``conv_view`` for the conv entries: an argument tuple of these, built once per binding,
    saves microseconds per call). Read-only arrays give read-only views. Raises ValueError
    for another dtype, rank or layout."""
    cdef unsigned char[::1] u8
    cdef const unsigned char[::1] cu8
    cdef unsigned char[:, ::1] u82
    cdef int[::1] i32
    cdef const int[::1] ci32
    cdef float[::1] f32
    cdef const float[::1] cf32
    cdef const idx[:, ::1] offs
    cdef const double[::1] cf64
    cdef str kind = a.dtype.kind
    cdef int size = a.dtype.itemsize
    if kind == 'u' and size == 1:
        if a.ndim == 2:
            u82 = a
            return u82
        if a.flags.writeable:
            u8 = a
            return u8
        cu8 = a
        return cu8
    if kind == 'i' and size == 4 and a.ndim == 1:
        if a.flags.writeable:
            i32 = a
            return i32
        ci32 = a
        return ci32
    if kind == 'f' and size == 4:
        if a.flags.writeable:
            f32 = a
            return f32
        cf32 = a
        return cf32
    if kind == 'f' and size == 8 and a.ndim == 1:
        cf64 = a
        return cf64
    if kind == 'i' and size == sizeof(idx) and a.ndim == 2:
        offs = a
        return offs
    raise ValueError(f"i8_view: unsupported array {a.dtype} {a.shape}")
