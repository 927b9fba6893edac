/* The packed-panel GEMM and direct conv (packed.pxi documents the layout; simd/packed.h the
   entry points): the AVX-512F kernels (sprat_pk5_*, 12 x 32 tiles) and the AVX2 + FMA ones
   (sprat_p2_*, 6 x 16 tiles on the same panels), picked once at run time. Compiled in the
   avx2 build only, as its own translation unit (the build compiles it beside the Cython
   module's). */
#include <Python.h>
#include "packed.h"

#if SPRAT_PK
/* ``e`` for the tile at row i, column j of C, into ``t``: bias and slope at column j, res
   at (i, j) with its columns from j on, or none when C is its own residual (``inplace``: C
   holds it) or the residual ends before column j */
static inline const sprat_pk_epi* sprat_pk_epi_at(const sprat_pk_epi* e, sprat_pk_epi* t,
                                                  Py_ssize_t i, Py_ssize_t j, int inplace) {
    *t = *e;
    t->bias = e->bias != NULL ? e->bias + j : NULL;
    t->res = e->res != NULL && !inplace && j < e->rn ? e->res + i * e->ldr + j : NULL;
    t->rn = e->rn - j;
    t->slope = e->slope != NULL ? e->slope + j : NULL;
    return t;
}

/* One tap of a direct conv tile: its rows of A from ``a`` (row r at a + r * lda, past
   the tile's offset), its C weight rows of the panel at ``p``. */
typedef struct { const float* a; const float* p; } sprat_pk_tap;

/* The taps of output row ``oh`` of a direct conv (sprat_pk5_direct / sprat_p2_direct)
   into ``tp``: tap (i, j) reads padded input row oh*sh + i*dh at xb (row pr0 first, rows
   rp floats apart), column j*dw, and the panel's rows (i*kw + j)*C on from ``p0``; rows
   outside [ph, ph + H) read zeros and are left out. Returns how many taps. */
static inline int sprat_pk_row_taps(sprat_pk_tap* tp, const float* xb, Py_ssize_t pr0,
                                    Py_ssize_t rp, Py_ssize_t ph, Py_ssize_t H,
                                    Py_ssize_t C, int kh, int kw, Py_ssize_t sh,
                                    Py_ssize_t dh, Py_ssize_t dw, Py_ssize_t oh,
                                    const float* p0) {
    int nta = 0;
    for (int i = 0; i < kh; i++) {
        Py_ssize_t pr = oh * sh + i * dh;
        if (pr < ph || pr >= ph + H)
            continue;
        const float* row = xb + (pr - pr0) * rp;
        for (int jj = 0; jj < kw; jj++) {
            tp[nta].a = row + jj * dw * C;
            tp[nta].p = p0 + (Py_ssize_t)(i * kw + jj) * C * SPRAT_PK_NR;
            nta++;
        }
    }
    return nta;
}

/* The end of a tile: C[0:mr, 0:32] (=|+=, ``acc``) the accumulators x0 / x1; only the
   columns of masks c0 / c1 are stored, after the epilogue ``e`` when it is not NULL. */
__attribute__((target("avx512f"), always_inline))
static inline void sprat_pk_store(const int mr, const int nv, __m512* x0, __m512* x1,
                                  float* c, Py_ssize_t ldc, int acc, __mmask16 c0,
                                  __mmask16 c1, const sprat_pk_epi* e) {
    for (int r = 0; r < mr; r++) {
        float* cr = c + r * ldc;
        if (acc) {
            x0[r] = _mm512_add_ps(x0[r], _mm512_maskz_loadu_ps(c0, cr));
            if (nv == 2)
                x1[r] = _mm512_add_ps(x1[r], _mm512_maskz_loadu_ps(c1, cr + 16));
        }
    }
    if (e != NULL) {
        const __m512 va = _mm512_set1_ps(e->a), vb = _mm512_set1_ps(e->b);
        __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
        if (e->bias != NULL) {
            __m512 b0 = _mm512_maskz_loadu_ps(c0, e->bias);
            __m512 b1 = _mm512_maskz_loadu_ps(c1, e->bias + 16);
            for (int r = 0; r < mr; r++) {
                x0[r] = _mm512_add_ps(x0[r], b0);
                if (nv == 2)
                    x1[r] = _mm512_add_ps(x1[r], b1);
            }
        }
        if (e->res != NULL) {
            __mmask16 r0 = c0, r1 = c1;
            if (e->rn < 32) {  /* a narrow residual ends inside this tile */
                r0 &= (__mmask16)(e->rn >= 16 ? 0xFFFF : (1u << e->rn) - 1);
                r1 &= (__mmask16)(e->rn > 16 ? (1u << (e->rn - 16)) - 1 : 0);
            }
            for (int r = 0; r < mr; r++) {
                const float* rr = e->res + r * e->ldr;
                x0[r] = _mm512_add_ps(x0[r], _mm512_maskz_loadu_ps(r0, rr));
                if (nv == 2)
                    x1[r] = _mm512_add_ps(x1[r], _mm512_maskz_loadu_ps(r1, rr + 16));
            }
        }
        if (e->code == 10) {
            s0 = _mm512_maskz_loadu_ps(c0, e->slope);
            s1 = _mm512_maskz_loadu_ps(c1, e->slope + 16);
        }
        /* the switch outside the row loop: each case's code is a constant, so
           sprat_pk_act's own switch folds away (one dispatch per tile, not per vector:
           a 12 x 32 tile of K = 16 does only 384 multiply-adds) */
        #define SPRAT_PK_ACT_ROWS(CODE) \
            for (int r = 0; r < mr; r++) { \
                x0[r] = sprat_pk_act(x0[r], CODE, va, vb, s0); \
                if (nv == 2) x1[r] = sprat_pk_act(x1[r], CODE, va, vb, s1); \
            } \
            break;
        switch (e->code) {
        case 1: SPRAT_PK_ACT_ROWS(1)
        case 2: SPRAT_PK_ACT_ROWS(2)
        case 3: SPRAT_PK_ACT_ROWS(3)
        case 4: SPRAT_PK_ACT_ROWS(4)
        case 5: SPRAT_PK_ACT_ROWS(5)
        case 6: SPRAT_PK_ACT_ROWS(6)
        case 8: SPRAT_PK_ACT_ROWS(8)
        case 10: SPRAT_PK_ACT_ROWS(10)
        default: break;
        }
        #undef SPRAT_PK_ACT_ROWS
    }
    for (int r = 0; r < mr; r++) {
        float* cr = c + r * ldc;
        _mm512_mask_storeu_ps(cr, c0, x0[r]);
        if (nv == 2)
            _mm512_mask_storeu_ps(cr + 16, c1, x1[r]);
    }
}

/* x0 / x1 [0:mr] += A[0:mr, 0:kc] @ P[0:kc, 0:32] (A's rows at a + r * lda; nv vectors of
   P's 16 columns). pf: prefetch the panel SPRAT_PK_PF k steps ahead. */
__attribute__((target("avx512f"), always_inline))
static inline void sprat_pk_madd(const int mr, const int nv, Py_ssize_t kc, const float* a,
                                 Py_ssize_t lda, const float* p, const int pf, __m512* x0,
                                 __m512* x1) {
    for (Py_ssize_t k = 0; k < kc; k++) {
        if (pf) {
            _mm_prefetch((const char*)(p + (k + SPRAT_PK_PF) * SPRAT_PK_NR), _MM_HINT_T0);
            if (nv == 2)
                _mm_prefetch((const char*)(p + (k + SPRAT_PK_PF) * SPRAT_PK_NR + 16),
                             _MM_HINT_T0);
        }
        __m512 b0 = _mm512_loadu_ps(p + k * SPRAT_PK_NR);
        __m512 b1 = nv == 2 ? _mm512_loadu_ps(p + k * SPRAT_PK_NR + 16) : b0;
        for (int r = 0; r < mr; r++) {
            __m512 av = _mm512_set1_ps(a[r * lda + k]);
            x0[r] = _mm512_fmadd_ps(av, b0, x0[r]);
            if (nv == 2)
                x1[r] = _mm512_fmadd_ps(av, b1, x1[r]);
        }
    }
}

/* C[0:mr, 0:32] (=|+=) A[0:mr, 0:kc] @ P[0:kc, 0:32]; only the columns of masks c0 / c1
   are stored, after the epilogue ``e`` when it is not NULL. mr and nv are constants in
   every caller (the switch below), so the loops unroll and the accumulators stay in
   registers. nv: vectors of 16 columns computed, 2, or 1 for a last panel of at most 16
   columns (c1 empty), which then costs half the multiply-adds of a full one. */
__attribute__((target("avx512f"), always_inline))
static inline void sprat_pk_tile(const int mr, const int nv, Py_ssize_t kc,
                                 const float* a, Py_ssize_t lda, const float* p, float* c,
                                 Py_ssize_t ldc, int acc, __mmask16 c0, __mmask16 c1,
                                 const int pf, const sprat_pk_epi* e) {
    __m512 x0[SPRAT_PK_MR], x1[SPRAT_PK_MR];
    for (int r = 0; r < mr; r++) {
        x0[r] = _mm512_setzero_ps();
        x1[r] = _mm512_setzero_ps();
    }
    sprat_pk_madd(mr, nv, kc, a, lda, p, pf, x0, x1);
    sprat_pk_store(mr, nv, x0, x1, c, ldc, acc, c0, c1, e);
}

#define SPRAT_PK_CASE(R) case R: \
    if (c1 == 0) { \
        if (pf) sprat_pk_tile(R, 1, kc, a, lda, p, c, ldc, acc, c0, c1, 1, e); \
        else sprat_pk_tile(R, 1, kc, a, lda, p, c, ldc, acc, c0, c1, 0, e); \
    } else if (pf) sprat_pk_tile(R, 2, kc, a, lda, p, c, ldc, acc, c0, c1, 1, e); \
    else sprat_pk_tile(R, 2, kc, a, lda, p, c, ldc, acc, c0, c1, 0, e); \
    break;
__attribute__((target("avx512f")))
static void sprat_pk_rows(int mr, Py_ssize_t kc, const float* a, Py_ssize_t lda,
                          const float* p, float* c, Py_ssize_t ldc, int acc, __mmask16 c0,
                          __mmask16 c1, int pf, const sprat_pk_epi* e) {
    switch (mr) {
    SPRAT_PK_CASE(12) SPRAT_PK_CASE(11) SPRAT_PK_CASE(10) SPRAT_PK_CASE(9)
    SPRAT_PK_CASE(8) SPRAT_PK_CASE(7) SPRAT_PK_CASE(6) SPRAT_PK_CASE(5)
    SPRAT_PK_CASE(4) SPRAT_PK_CASE(3) SPRAT_PK_CASE(2) SPRAT_PK_CASE(1)
    default: break;
    }
}

/* C[0:m, n0:n1] = A[0:m, 0:K] @ W[:, n0:n1], W as panels ``packed`` (n0 a multiple of
   NR; panel q starts at packed + q * K * NR). Per panel: K in blocks of KC (the panel's
   block, KC x NR floats = 32 KiB, stays in L1 while every row block of A passes over it),
   the C strip (m x NR) accumulates in L1/L2. With ``e`` (not NULL) the last K block
   applies the epilogue in registers: bias[n0:n1], res (C's layout and pitch, at C's
   first row and column 0), activation e->code (sprat_act_in_regs), slope[n0:n1]. res
   may be C itself (in place): the first K block then adds to C, which holds it. */
__attribute__((target("avx512f")))
static void sprat_pk5_gemm_epi(Py_ssize_t m, Py_ssize_t n0, Py_ssize_t n1, Py_ssize_t K,
                              const float* a, Py_ssize_t lda, const float* packed, float* c,
                              Py_ssize_t ldc, const sprat_pk_epi* e) {
    sprat_pk_epi t;
    const int inplace = e != NULL && e->res == c;
    for (Py_ssize_t j = n0; j < n1; j += SPRAT_PK_NR) {
        Py_ssize_t w = n1 - j < SPRAT_PK_NR ? n1 - j : SPRAT_PK_NR;
        __mmask16 c0 = (__mmask16)(w >= 16 ? 0xFFFF : (1u << w) - 1);
        __mmask16 c1 = (__mmask16)(w >= 32 ? 0xFFFF : w > 16 ? (1u << (w - 16)) - 1 : 0);
        const float* panel = packed + (j / SPRAT_PK_NR) * K * SPRAT_PK_NR;
        for (Py_ssize_t k0 = 0; k0 < K; k0 += SPRAT_PK_KC) {
            Py_ssize_t kc = K - k0 < SPRAT_PK_KC ? K - k0 : SPRAT_PK_KC;
            for (Py_ssize_t i = 0; i < m; i += SPRAT_PK_MR) {
                int mr = (int)(m - i < SPRAT_PK_MR ? m - i : SPRAT_PK_MR);
                const sprat_pk_epi* te = e != NULL && k0 + kc >= K
                    ? sprat_pk_epi_at(e, &t, i, j, inplace) : NULL;
                sprat_pk_rows(mr, kc, a + i * lda + k0, lda, panel + k0 * SPRAT_PK_NR,
                              c + i * ldc + j, ldc, k0 > 0 || inplace, c0, c1, i == 0, te);
            }
        }
    }
}


/* C[0:mr, 0:32] = epilogue(sum over the taps of A_t[0:mr, 0:kc] @ P_t[0:kc, 0:32]): the
   accumulators stay in registers across the taps (one store per tile, as with a patch
   matrix, without building it) */
__attribute__((target("avx512f"), always_inline))
static inline void sprat_pk_dtile(const int mr, const int nv, const sprat_pk_tap* tp,
                                  int ntaps, Py_ssize_t off, Py_ssize_t kc,
                                  Py_ssize_t lda, float* c, Py_ssize_t ldc, __mmask16 c0,
                                  __mmask16 c1, const sprat_pk_epi* e) {
    __m512 x0[SPRAT_PK_MR], x1[SPRAT_PK_MR];
    for (int r = 0; r < mr; r++) {
        x0[r] = _mm512_setzero_ps();
        x1[r] = _mm512_setzero_ps();
    }
    for (int t = 0; t < ntaps; t++)
        sprat_pk_madd(mr, nv, kc, tp[t].a + off, lda, tp[t].p, 1, x0, x1);
    sprat_pk_store(mr, nv, x0, x1, c, ldc, 0, c0, c1, e);
}

#define SPRAT_PK_DCASE(R) case R: \
    if (c1 == 0) sprat_pk_dtile(R, 1, tp, ntaps, off, kc, lda, c, ldc, c0, c1, e); \
    else sprat_pk_dtile(R, 2, tp, ntaps, off, kc, lda, c, ldc, c0, c1, e); \
    break;
__attribute__((target("avx512f")))
static void sprat_pk_drows(int mr, const sprat_pk_tap* tp, int ntaps, Py_ssize_t off,
                           Py_ssize_t kc, Py_ssize_t lda, float* c, Py_ssize_t ldc,
                           __mmask16 c0, __mmask16 c1, const sprat_pk_epi* e) {
    switch (mr) {
    SPRAT_PK_DCASE(12) SPRAT_PK_DCASE(11) SPRAT_PK_DCASE(10) SPRAT_PK_DCASE(9)
    SPRAT_PK_DCASE(8) SPRAT_PK_DCASE(7) SPRAT_PK_DCASE(6) SPRAT_PK_DCASE(5)
    SPRAT_PK_DCASE(4) SPRAT_PK_DCASE(3) SPRAT_PK_DCASE(2) SPRAT_PK_DCASE(1)
    default: break;
    }
}

/* A direct conv on the packed weight, output rows [oh0, oh1) of one image, columns
   [n0, n1) (n0 a multiple of NR). Tap (i, j) of output pixel (oh, ow) reads the C floats
   of padded input pixel (pr, pc) = (oh*sh + i*dh, ow*sw + j*dw) at xb + (pr - pr0) * rp
   + pc * C; a tap whose padded row is outside [ph, ph + H) reads zeros and is skipped.
   ``packed``: the (kh*kw*C, M) weight as panels, K tap-major (im2col's patch rows). ``y``
   (pitch M per pixel) and ``e->res`` at the image's first pixel; e->bias / e->slope at
   column 0. Per panel (its kh*kw*C x NR floats stay in L2 over the rows), each output row
   is cut into ceil(OW / MR) tiles of near-equal width, each tile's rows at stride sw*C. */
__attribute__((target("avx512f")))
static void sprat_pk5_direct(const float* xb, Py_ssize_t pr0, Py_ssize_t rp, Py_ssize_t ph,
                            Py_ssize_t H, Py_ssize_t C, int kh, int kw, Py_ssize_t sh,
                            Py_ssize_t sw, Py_ssize_t dh, Py_ssize_t dw, Py_ssize_t oh0,
                            Py_ssize_t oh1, Py_ssize_t OW, const float* packed,
                            Py_ssize_t n0, Py_ssize_t n1, float* y, Py_ssize_t M,
                            const sprat_pk_epi* e) {
    Py_ssize_t K = (Py_ssize_t)kh * kw * C;
    Py_ssize_t nq = (OW + SPRAT_PK_MR - 1) / SPRAT_PK_MR;
    sprat_pk_tap tp[kh * kw];
    sprat_pk_epi t;
    for (Py_ssize_t j = n0; j < n1; j += SPRAT_PK_NR) {
        Py_ssize_t w = n1 - j < SPRAT_PK_NR ? n1 - j : SPRAT_PK_NR;
        __mmask16 c0 = (__mmask16)(w >= 16 ? 0xFFFF : (1u << w) - 1);
        __mmask16 c1 = (__mmask16)(w >= 32 ? 0xFFFF : w > 16 ? (1u << (w - 16)) - 1 : 0);
        const float* panel = packed + (j / SPRAT_PK_NR) * K * SPRAT_PK_NR;
        for (Py_ssize_t oh = oh0; oh < oh1; oh++) {
            int nta = sprat_pk_row_taps(tp, xb, pr0, rp, ph, H, C, kh, kw, sh, dh, dw, oh,
                                        panel);
            for (Py_ssize_t q = 0; q < nq; q++) {
                Py_ssize_t ow0 = q * OW / nq, ow1 = (q + 1) * OW / nq;
                Py_ssize_t pix = oh * OW + ow0;
                sprat_pk_drows((int)(ow1 - ow0), tp, nta, ow0 * sw * C, C, sw * C,
                               y + pix * M + j, M, c0, c1,
                               sprat_pk_epi_at(e, &t, pix, j, 0));
            }
        }
    }
}

/* 2: the AVX-512F kernels (sprat_pk5_*), 1: the AVX2 + FMA ones (sprat_p2_*), 0: none;
   decided once (the CPU does not change) */
int sprat_pk_mode(void) {
    static int mode = -1;
    if (mode < 0) {
        __builtin_cpu_init();
        mode = __builtin_cpu_supports("avx512f") ? 2
            : (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) ? 1 : 0;
    }
    return mode;
}

/* whether the AVX-512F forms run */
int sprat_pk_available(void) { return sprat_pk_mode() == 2; }

/* ---- the same panels on AVX2 + FMA CPUs (no AVX-512F) ----
   A panel's 32 columns are two halves of 16; a tile is up to SPRAT_P2_MR (6) rows x 16
   columns of C in 12 ymm accumulators, with the half's two B vectors and one broadcast of
   A: 15 of the 16 ymm registers (MLAS's FMA3 sgemm kernel holds a tile of the same shape).
   One row of a half panel is one 64-byte line (the panels are 64-byte aligned, rows 128
   bytes apart), so a K block of a half (KC x 16 floats) keeps 16 KiB of L1. */
#define SPRAT_P2_MR 6
/* k steps ahead that the first row tile of a K block prefetches its half panel (as
   SPRAT_PK_PF). At 24 (the AVX-512 distance) that tile waited on the panel's lines: in a
   2048 -> 512 1x1 conv on a 7x7 map (1 thread, perf) it took 27 % of the time for 1/9 of
   the rows, 13 % at 64, the conv 1.55-1.7 -> 1.46 ms; 12 CNNs of the broad suite and the zoo
   (old / new builds alternating, best of 4-6 rounds) ResNet-50 0.94x at 1 thread, the others
   0.98-1.05 at 1 thread and 0.98-1.02 at 2 */
#define SPRAT_P2_PF 64

/* lanes [0, w) of a vector of 8 (w >= 8: all) as a maskload / maskstore mask */
__attribute__((target("avx2,fma"), always_inline))
static inline __m256i sprat_p2_mask(Py_ssize_t w) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(w < 8 ? w : 8)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The end of a tile of a half panel: C[0:mr, 0:16] (=|+=, ``acc``) x0 / x1 (columns 0-7
   / 8-15); only the first ``w`` columns are stored (nv 1: w <= 8, x1 unused), after the
   epilogue ``e`` when it is not NULL (its pointers at the half's first column). */
__attribute__((target("avx2,fma"), always_inline))
static inline void sprat_p2_store(const int mr, const int nv, __m256* x0, __m256* x1,
                                  float* c, Py_ssize_t ldc, int acc, Py_ssize_t w,
                                  const sprat_pk_epi* e) {
    const int full = w >= 8 * nv;
    const __m256i m0 = sprat_p2_mask(w), m1 = sprat_p2_mask(w - 8);
    if (acc) {
        for (int r = 0; r < mr; r++) {
            float* cr = c + r * ldc;
            x0[r] = _mm256_add_ps(x0[r], _mm256_maskload_ps(cr, m0));
            if (nv == 2) x1[r] = _mm256_add_ps(x1[r], _mm256_maskload_ps(cr + 8, m1));
        }
    }
    if (e != NULL) {
        const __m256 va = _mm256_set1_ps(e->a), vb = _mm256_set1_ps(e->b);
        __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
        if (e->bias != NULL) {
            const __m256 b0 = _mm256_maskload_ps(e->bias, m0);
            const __m256 b1 = nv == 2 ? _mm256_maskload_ps(e->bias + 8, m1) : b0;
            for (int r = 0; r < mr; r++) {
                x0[r] = _mm256_add_ps(x0[r], b0);
                if (nv == 2) x1[r] = _mm256_add_ps(x1[r], b1);
            }
        }
        if (e->res != NULL) {
            /* a narrow residual (e->rn < w) reads its first rn columns only */
            const __m256i r0 = e->rn < w ? sprat_p2_mask(e->rn) : m0;
            const __m256i r1 = e->rn < w ? sprat_p2_mask(e->rn - 8) : m1;
            for (int r = 0; r < mr; r++) {
                const float* rr = e->res + r * e->ldr;
                x0[r] = _mm256_add_ps(x0[r], _mm256_maskload_ps(rr, r0));
                if (nv == 2) x1[r] = _mm256_add_ps(x1[r], _mm256_maskload_ps(rr + 8, r1));
            }
        }
        if (e->code == 10) {
            s0 = _mm256_maskload_ps(e->slope, m0);
            if (nv == 2) s1 = _mm256_maskload_ps(e->slope + 8, m1);
        }
        /* one dispatch per tile, as sprat_pk_store */
        #define SPRAT_P2_ACT_ROWS(CODE) \
            for (int r = 0; r < mr; r++) { \
                x0[r] = sprat_act_v8(x0[r], CODE, va, vb, s0); \
                if (nv == 2) x1[r] = sprat_act_v8(x1[r], CODE, va, vb, s1); \
            } \
            break;
        switch (e->code) {
        case 1: SPRAT_P2_ACT_ROWS(1)
        case 2: SPRAT_P2_ACT_ROWS(2)
        case 3: SPRAT_P2_ACT_ROWS(3)
        case 4: SPRAT_P2_ACT_ROWS(4)
        case 5: SPRAT_P2_ACT_ROWS(5)
        case 6: SPRAT_P2_ACT_ROWS(6)
        case 8: SPRAT_P2_ACT_ROWS(8)
        case 10: SPRAT_P2_ACT_ROWS(10)
        default: break;
        }
        #undef SPRAT_P2_ACT_ROWS
    }
    for (int r = 0; r < mr; r++) {
        float* cr = c + r * ldc;
        if (full) {
            _mm256_storeu_ps(cr, x0[r]);
            if (nv == 2) _mm256_storeu_ps(cr + 8, x1[r]);
        } else {
            _mm256_maskstore_ps(cr, m0, x0[r]);
            if (nv == 2) _mm256_maskstore_ps(cr + 8, m1, x1[r]);
        }
    }
}

/* One tile of a half panel: C[0:mr, 0:16] (=|+=, ``acc``) = epilogue(sum over the taps
   of A_t[0:mr, 0:kc] @ P_t[0:kc, 0:8*nv]), A_t's rows at tp[t].a + off + r * lda, P_t a
   half panel at tp[t].p (rows SPRAT_PK_NR floats apart); pf: prefetch P_t's line
   SPRAT_P2_PF k steps ahead. The accumulators are named locals, not an array: GCC kept
   an array's vectors in memory, a store after every multiply-add (0.4x the speed). */
#define SPRAT_P2_FMA(R) \
    if (mr > R) { \
        const __m256 av = _mm256_broadcast_ss(ar + R * lda + k); \
        c##R##0 = _mm256_fmadd_ps(av, b0, c##R##0); \
        if (nv == 2) c##R##1 = _mm256_fmadd_ps(av, b1, c##R##1); \
    }
__attribute__((target("avx2,fma"), always_inline))
static inline void sprat_p2_tile(const int mr, const int nv, const sprat_pk_tap* tp,
                                 int ntaps, Py_ssize_t off, Py_ssize_t kc, Py_ssize_t lda,
                                 float* c, Py_ssize_t ldc, int acc, Py_ssize_t w,
                                 const int pf, const sprat_pk_epi* e) {
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00,
           c21 = c00, c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    for (int t = 0; t < ntaps; t++) {
        const float* ar = tp[t].a + off;
        const float* p = tp[t].p;
        /* NOTE: unrolled by 4 (the loop's own additions, compare and row addresses once per
           4 k steps): 0.96-0.98x the time of the rolled loop for K >= 192 (transformer
           products, 1x1 convs of 7x7 maps), K <= 144 alike, one process alternating */
        _Pragma("GCC unroll 4")
        for (Py_ssize_t k = 0; k < kc; k++) {
            if (pf)
                _mm_prefetch((const char*)(p + (k + SPRAT_P2_PF) * SPRAT_PK_NR),
                             _MM_HINT_T0);
            const __m256 b0 = _mm256_loadu_ps(p + k * SPRAT_PK_NR);
            const __m256 b1 = nv == 2 ? _mm256_loadu_ps(p + k * SPRAT_PK_NR + 8) : b0;
            SPRAT_P2_FMA(0) SPRAT_P2_FMA(1) SPRAT_P2_FMA(2)
            SPRAT_P2_FMA(3) SPRAT_P2_FMA(4) SPRAT_P2_FMA(5)
        }
    }
    __m256 x0[SPRAT_P2_MR] = {c00, c10, c20, c30, c40, c50};
    __m256 x1[SPRAT_P2_MR] = {c01, c11, c21, c31, c41, c51};
    sprat_p2_store(mr, nv, x0, x1, c, ldc, acc, w, e);
}
#undef SPRAT_P2_FMA

/* mr, nv and pf constants in each case: the accumulators stay in registers */
#define SPRAT_P2_CASE(R) case R: \
    if (w <= 8) { \
        if (pf) sprat_p2_tile(R, 1, tp, ntaps, off, kc, lda, c, ldc, acc, w, 1, e); \
        else sprat_p2_tile(R, 1, tp, ntaps, off, kc, lda, c, ldc, acc, w, 0, e); \
    } else if (pf) sprat_p2_tile(R, 2, tp, ntaps, off, kc, lda, c, ldc, acc, w, 1, e); \
    else sprat_p2_tile(R, 2, tp, ntaps, off, kc, lda, c, ldc, acc, w, 0, e); \
    break;
/* sprat_p2_tile for rows 1..6 and the taps ``tp`` (one for a GEMM) */
__attribute__((target("avx2,fma")))
static void sprat_p2_rows(int mr, const sprat_pk_tap* tp, int ntaps, Py_ssize_t off,
                          Py_ssize_t kc, Py_ssize_t lda, float* c, Py_ssize_t ldc, int acc,
                          Py_ssize_t w, int pf, const sprat_pk_epi* e) {
    switch (mr) {
    SPRAT_P2_CASE(6) SPRAT_P2_CASE(5) SPRAT_P2_CASE(4) SPRAT_P2_CASE(3)
    SPRAT_P2_CASE(2) SPRAT_P2_CASE(1)
    default: break;
    }
}
#undef SPRAT_P2_CASE

/* sprat_pk5_gemm_epi on AVX2: per panel, K in equal blocks of at most SPRAT_P2_KC, per row
   tile of up to SPRAT_P2_MR rows both halves of the panel: the tile's rows of A (L1) serve
   both, and each row of C is written 128 bytes at a time. NOTE: with the halves outside the
   row loop (a pass over A and C per half), convs with a small K and a wide output ran
   1.1-1.2x the time of BLAS (1x1 16->96 on 112x112, 64->256 on 56x56, 1 thread).
   NOTE: K blocks of 128 (the panel's block, 16 KiB, kept in L1) cost a pass of load and store
   over C per block; blocks of up to 512 (64 KiB, from L2), cut equal (K = 576 as 2 x 288,
   not 512 + 64), ran 15 1x1 convs with K = 144-2048 (MobileNetV2 / EfficientNet projections,
   ResNet-50 bottlenecks, 7x7 maps) in 0.87-0.97x the time at 1 and 2 threads (one process,
   alternating; 256 and 384 in between, no blocking at all about the same as 512), K <= 128
   alike. */
#define SPRAT_P2_KC 512
/* A product with K <= SPRAT_P2_RO_K whose panels take at most SPRAT_P2_RO_BYTES (L1's
   32 KiB) runs row tile by row tile, every panel per tile: A's rows are read once and C's
   rows are written whole, one after the other, instead of a panel's two lines per row in a
   pass over the block per panel. NOTE: 1x1 convs with a small K and a wide output, in one
   process alternating (1 thread): 16 -> 96 on 112x112 0.91x the time, 24 -> 144 on 56x56
   0.975x, 20 other pointwise shapes 0.99-1.00x; with another process copying 8 MB buffers on
   the other core 0.80x and 0.86x; MobileNetV2 0.96-0.965x and EfficientNet-B0 0.97-0.98x at
   1 and 2 threads. Weights of 38-98 KiB (40 -> 240, 64 -> 256, 64 -> 384) gained nothing. */
#define SPRAT_P2_RO_K 128
#define SPRAT_P2_RO_BYTES 32768
/* The row tile C[i:i+mr, j0:j0+32] of sprat_p2_gemm_epi over the K block [k0, k0+kc) of the
   panel at ``panel``: both halves (``n1`` bounds the columns), the epilogue after the last K
   block, the first tile (i == 0) prefetching the panel. */
__attribute__((target("avx2,fma"), always_inline))
static inline void sprat_p2_panel_tile(Py_ssize_t i, int mr, Py_ssize_t j0, Py_ssize_t n1,
                                       Py_ssize_t k0, Py_ssize_t kc, Py_ssize_t K,
                                       const float* a, Py_ssize_t lda, const float* panel,
                                       float* c, Py_ssize_t ldc, int inplace,
                                       const sprat_pk_epi* e) {
    sprat_pk_epi t;
    for (Py_ssize_t h = 0; h < SPRAT_PK_NR && j0 + h < n1; h += 16) {
        Py_ssize_t j = j0 + h, w = n1 - j < 16 ? n1 - j : 16;
        const sprat_pk_epi* te = e != NULL && k0 + kc >= K
            ? sprat_pk_epi_at(e, &t, i, j, inplace) : NULL;
        sprat_pk_tap tp = {a + i * lda + k0, panel + k0 * SPRAT_PK_NR + h};
        sprat_p2_rows(mr, &tp, 1, 0, kc, lda, c + i * ldc + j, ldc, k0 > 0 || inplace, w,
                      i == 0, te);
    }
}

__attribute__((target("avx2,fma")))
static void sprat_p2_gemm_epi(Py_ssize_t m, Py_ssize_t n0, Py_ssize_t n1, Py_ssize_t K,
                              const float* a, Py_ssize_t lda, const float* packed, float* c,
                              Py_ssize_t ldc, const sprat_pk_epi* e) {
    const int inplace = e != NULL && e->res == c;
    /* NOTE: the rows are cut into nq tiles of equal size (base or base + 1 rows), not
       6, 6, ..., m % 6: a tile of 1 or 2 rows has 2 or 4 chains of multiply-adds, fewer
       than the 8 that hide their latency, and ran a third to two thirds as long as a full
       tile for a sixth to a third of its work. In one process, alternating (1 thread):
       m = 7 / 13 / 25 / 49 rows (1x1 convs on 7x7 maps, short sequences) 0.89-0.96x the
       time, m = 3025 / 12544 alike (0.998-1.005) */
    Py_ssize_t nq = (m + SPRAT_P2_MR - 1) / SPRAT_P2_MR;
    Py_ssize_t base = nq ? m / nq : 0, extra = nq ? m % nq : 0;
    int mr;
    if (K <= SPRAT_P2_RO_K && (n1 - n0) * K * 4 <= SPRAT_P2_RO_BYTES) {
        for (Py_ssize_t q = 0, i = 0; q < nq; q++, i += mr) {
            mr = (int)(base + (q < extra));
            for (Py_ssize_t j0 = n0; j0 < n1; j0 += SPRAT_PK_NR)
                sprat_p2_panel_tile(i, mr, j0, n1, 0, K, K, a, lda,
                                    packed + (j0 / SPRAT_PK_NR) * K * SPRAT_PK_NR, c, ldc,
                                    inplace, e);
        }
        return;
    }
    Py_ssize_t nkb = (K + SPRAT_P2_KC - 1) / SPRAT_P2_KC, kb = nkb ? (K + nkb - 1) / nkb : 1;
    for (Py_ssize_t j0 = n0; j0 < n1; j0 += SPRAT_PK_NR) {
        const float* panel = packed + (j0 / SPRAT_PK_NR) * K * SPRAT_PK_NR;
        for (Py_ssize_t k0 = 0; k0 < K; k0 += kb) {
            Py_ssize_t kc = K - k0 < kb ? K - k0 : kb;
            for (Py_ssize_t q = 0, i = 0; q < nq; q++, i += mr) {
                mr = (int)(base + (q < extra));
                sprat_p2_panel_tile(i, mr, j0, n1, k0, kc, K, a, lda, panel, c, ldc, inplace,
                                    e);
            }
        }
    }
}

/* sprat_pk5_direct on AVX2: the same taps and row tiles (of SPRAT_P2_MR pixels), per
   half panel */
__attribute__((target("avx2,fma")))
static void sprat_p2_direct(const float* xb, Py_ssize_t pr0, Py_ssize_t rp, Py_ssize_t ph,
                            Py_ssize_t H, Py_ssize_t C, int kh, int kw, Py_ssize_t sh,
                            Py_ssize_t sw, Py_ssize_t dh, Py_ssize_t dw, Py_ssize_t oh0,
                            Py_ssize_t oh1, Py_ssize_t OW, const float* packed,
                            Py_ssize_t n0, Py_ssize_t n1, float* y, Py_ssize_t M,
                            const sprat_pk_epi* e) {
    Py_ssize_t K = (Py_ssize_t)kh * kw * C;
    Py_ssize_t nq = (OW + SPRAT_P2_MR - 1) / SPRAT_P2_MR;
    sprat_pk_tap tp[kh * kw];
    sprat_pk_epi t;
    for (Py_ssize_t j0 = n0; j0 < n1; j0 += SPRAT_PK_NR) {
        const float* panel = packed + (j0 / SPRAT_PK_NR) * K * SPRAT_PK_NR;
        for (Py_ssize_t h = 0; h < SPRAT_PK_NR && j0 + h < n1; h += 16) {
            Py_ssize_t j = j0 + h, w = n1 - j < 16 ? n1 - j : 16;
            for (Py_ssize_t oh = oh0; oh < oh1; oh++) {
                int nta = sprat_pk_row_taps(tp, xb, pr0, rp, ph, H, C, kh, kw, sh, dh, dw,
                                            oh, panel + h);
                for (Py_ssize_t q = 0; q < nq; q++) {
                    Py_ssize_t ow0 = q * OW / nq, ow1 = (q + 1) * OW / nq;
                    Py_ssize_t pix = oh * OW + ow0;
                    sprat_p2_rows((int)(ow1 - ow0), tp, nta, ow0 * sw * C, C, sw * C,
                                  y + pix * M + j, M, 0, w, 1,
                                  sprat_pk_epi_at(e, &t, pix, j, 0));
                }
            }
        }
    }
}

void sprat_pk_gemm_epi(Py_ssize_t m, Py_ssize_t n0, Py_ssize_t n1, Py_ssize_t K,
                       const float* a, Py_ssize_t lda, const float* packed, float* c,
                       Py_ssize_t ldc, const sprat_pk_epi* e) {
    if (sprat_pk_mode() == 2)
        sprat_pk5_gemm_epi(m, n0, n1, K, a, lda, packed, c, ldc, e);
    else
        sprat_p2_gemm_epi(m, n0, n1, K, a, lda, packed, c, ldc, e);
}

void sprat_pk_gemm(Py_ssize_t m, Py_ssize_t n0, Py_ssize_t n1, Py_ssize_t K,
                   const float* a, Py_ssize_t lda, const float* packed, float* c,
                   Py_ssize_t ldc) {
    sprat_pk_gemm_epi(m, n0, n1, K, a, lda, packed, c, ldc, NULL);
}

void sprat_pk_direct(const float* xb, Py_ssize_t pr0, Py_ssize_t rp, Py_ssize_t ph,
                     Py_ssize_t H, Py_ssize_t C, int kh, int kw, Py_ssize_t sh,
                     Py_ssize_t sw, Py_ssize_t dh, Py_ssize_t dw, Py_ssize_t oh0,
                     Py_ssize_t oh1, Py_ssize_t OW, const float* packed,
                     Py_ssize_t n0, Py_ssize_t n1, float* y, Py_ssize_t M,
                     const sprat_pk_epi* e) {
    if (sprat_pk_mode() == 2)
        sprat_pk5_direct(xb, pr0, rp, ph, H, C, kh, kw, sh, sw, dh, dw, oh0, oh1, OW,
                         packed, n0, n1, y, M, e);
    else
        sprat_p2_direct(xb, pr0, rp, ph, H, C, kh, kw, sh, sw, dh, dw, oh0, oh1, OW,
                        packed, n0, n1, y, M, e);
}
#endif
