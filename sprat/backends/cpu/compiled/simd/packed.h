/* The packed-panel GEMM and direct conv of the compiled kernels (packed.pxi documents the
   layout and the choice of kernel): the panel geometry, the epilogue, the AVX-512F activations
   that other kernels reuse (stem.pxi, dense.pxi, rnn.pxi), and the entry points, which
   simd/packed.c defines in the avx2 build. Without AVX2 (the baseline build) the entry points
   are stubs and SPRAT_PK is 0. Python.h comes first (Py_ssize_t). */
#ifndef SPRAT_PACKED_H
#define SPRAT_PACKED_H
#include "vecmath.h"

#define SPRAT_PK_MR 12
#define SPRAT_PK_NR 32
#define SPRAT_PK_KC 256
/* k steps ahead that the first row tile of a K block prefetches its panel (the panel
   comes from memory once per call, the other row tiles find it in L1): weights out of
   cache (a model's layers run in turn) cost 1.3x the time without it, 1.24x with it
   (128 x 384 x 1536, 40 weights in turn; a prefetch of the next block spread over all
   row tiles did no better and cost the hot case 7%) */
#define SPRAT_PK_PF 24

/* The epilogue of the last K block, in registers: + bias (one per column, or NULL),
   + res (or NULL; rows ``ldr`` floats apart, ``rn`` columns counted from the tile's first
   column, zeros past them: a residual zero-padded on the channel axis, ``_residual_pad``),
   then activation ``code`` (common.pxi's codes; only those sprat_act_in_regs takes, else
   none here). bias, res and slope point at the tile's first column (res at its first row).
   A full-width residual has ldr = rn = C's pitch. */
typedef struct {
    const float* bias;
    const float* res;
    const float* slope;
    int code;
    float a, b;
    Py_ssize_t ldr, rn;
} sprat_pk_epi;

#if defined(__AVX2__) && defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define SPRAT_PK 1

/* vecmath.h's sprat_exp8 on 16 lanes (its SPRAT_EXP_* clamps and polynomial) */
__attribute__((target("avx512f"), always_inline))
static inline __m512 sprat_pk_exp(__m512 x) {
    x = _mm512_min_ps(_mm512_set1_ps(SPRAT_EXP_HI),
                      _mm512_max_ps(_mm512_set1_ps(SPRAT_EXP_LO), x));
    __m512 n = _mm512_roundscale_ps(
        _mm512_fmadd_ps(x, _mm512_set1_ps(SPRAT_EXP_LOG2E), _mm512_set1_ps(0.5f)),
        _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(SPRAT_EXP_LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(SPRAT_EXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(SPRAT_EXP_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(SPRAT_EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(SPRAT_EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(SPRAT_EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(SPRAT_EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(SPRAT_EXP_P5));
    __m512 y = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r),
                             _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n),
                                                   _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(y, _mm512_castsi512_ps(e));
}

/* 1 + exp(-v), the denominator of Sigmoid and SiLU as common.pxi's sprat_act8 divides by
   it (the same lanes' results; a reciprocal by rcp14 and a Newton step instead of the
   division measured slower: 0.32 against 0.30 ns per element on this Xeon) */
__attribute__((target("avx512f"), always_inline))
static inline __m512 sprat_pk_sigmoid_den(__m512 v) {
    return _mm512_add_ps(_mm512_set1_ps(1.0f),
                         sprat_pk_exp(_mm512_sub_ps(_mm512_setzero_ps(), v)));
}

/* NaN-keeping as act_inplace: _mm512_max_ps(zero, v) returns v when v is NaN */
__attribute__((target("avx512f"), always_inline))
static inline __m512 sprat_pk_act(__m512 v, int code, __m512 va, __m512 vb, __m512 sv) {
    const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
    __m512 r;
    switch (code) {
    case 1: return _mm512_max_ps(zero, v);
    case 2: return _mm512_min_ps(vb, _mm512_max_ps(va, v));
    case 3: return _mm512_div_ps(one, sprat_pk_sigmoid_den(v));
    case 4: return _mm512_min_ps(one, _mm512_max_ps(zero, _mm512_fmadd_ps(va, v, vb)));
    case 5:
        r = _mm512_fmadd_ps(v, _mm512_set1_ps(1.0f / 6.0f), _mm512_set1_ps(0.5f));
        return _mm512_mul_ps(v, _mm512_min_ps(one, _mm512_max_ps(zero, r)));
    case 6:
        r = _mm512_max_ps(zero, v);
        return _mm512_fmadd_ps(va, _mm512_sub_ps(v, r), r);
    case 8: return _mm512_div_ps(v, sprat_pk_sigmoid_den(v));
    case 10:
        return _mm512_mask_mul_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), v, sv);
    default: return v;
    }
}

/* 2: the AVX-512F kernels (sprat_pk5_*), 1: the AVX2 + FMA ones (sprat_p2_*), 0: none */
int sprat_pk_mode(void);
/* whether the AVX-512F forms run */
int sprat_pk_available(void);
/* C[0:m, n0:n1] (=) A[0:m, 0:K] @ the panels, then the epilogue ``e`` (NULL: none) */
void sprat_pk_gemm_epi(Py_ssize_t m, Py_ssize_t n0, Py_ssize_t n1, Py_ssize_t K,
                       const float* a, Py_ssize_t lda, const float* packed, float* c,
                       Py_ssize_t ldc, const sprat_pk_epi* e);
void sprat_pk_gemm(Py_ssize_t m, Py_ssize_t n0, Py_ssize_t n1, Py_ssize_t K, const float* a,
                   Py_ssize_t lda, const float* packed, float* c, Py_ssize_t ldc);
/* a direct conv on the panels (sprat_pk5_direct in simd/packed.c) */
void sprat_pk_direct(const float* xb, Py_ssize_t pr0, Py_ssize_t rp, Py_ssize_t ph,
                     Py_ssize_t H, Py_ssize_t C, int kh, int kw, Py_ssize_t sh, Py_ssize_t sw,
                     Py_ssize_t dh, Py_ssize_t dw, Py_ssize_t oh0, Py_ssize_t oh1,
                     Py_ssize_t OW, const float* packed, Py_ssize_t n0, Py_ssize_t n1, float* y,
                     Py_ssize_t M, const sprat_pk_epi* e);
#else
#define SPRAT_PK 0
static inline void sprat_pk_gemm_epi(Py_ssize_t m, Py_ssize_t n0, Py_ssize_t n1, Py_ssize_t K,
                                     const float* a, Py_ssize_t lda, const float* packed, float* c,
                                     Py_ssize_t ldc, const sprat_pk_epi* e) {
    (void)m; (void)n0; (void)n1; (void)K; (void)a; (void)lda; (void)packed; (void)c;
    (void)ldc; (void)e;
}
static inline void sprat_pk_gemm(Py_ssize_t m, Py_ssize_t n0, Py_ssize_t n1, Py_ssize_t K,
                                 const float* a, Py_ssize_t lda, const float* packed, float* c,
                                 Py_ssize_t ldc) {
    (void)m; (void)n0; (void)n1; (void)K; (void)a; (void)lda; (void)packed; (void)c;
    (void)ldc;
}
static inline void sprat_pk_direct(const float* xb, Py_ssize_t pr0, Py_ssize_t rp, Py_ssize_t ph,
                                   Py_ssize_t H, Py_ssize_t C, int kh, int kw, Py_ssize_t sh,
                                   Py_ssize_t sw, Py_ssize_t dh, Py_ssize_t dw, Py_ssize_t oh0,
                                   Py_ssize_t oh1, Py_ssize_t OW, const float* packed,
                                   Py_ssize_t n0, Py_ssize_t n1, float* y, Py_ssize_t M,
                                   const sprat_pk_epi* e) {
    (void)xb; (void)pr0; (void)rp; (void)ph; (void)H; (void)C; (void)kh; (void)kw;
    (void)sh; (void)sw; (void)dh; (void)dw; (void)oh0; (void)oh1; (void)OW; (void)packed;
    (void)n0; (void)n1; (void)y; (void)M; (void)e;
}
static inline int sprat_pk_available(void) { return 0; }
static inline int sprat_pk_mode(void) { return 0; }
#endif
#endif
