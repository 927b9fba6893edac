/* exp and erf on 8 float lanes (AVX2 + FMA), shared by the compiled kernels (common.pxi's
   activations, simd/depthwise.c, simd/packed.c): the same polynomials and clamps as the
   Cython exp32 / erf32 of common.pxi; and the activations the kernels apply in registers.
   Without AVX2 + FMA only sprat_act_in_regs, which is then false. */
#ifndef SPRAT_VECMATH_H
#define SPRAT_VECMATH_H

/* exp's input clamps, ln 2 split in two, and its polynomial on [-ln2/2, ln2/2] (Cephes'
   expf), one set for every width: common.pxi's exp32 (1 lane), sprat_exp8 (8 lanes) and
   packed.h's sprat_pk_exp (16 lanes) */
#define SPRAT_EXP_LO (-87.33654f)
#define SPRAT_EXP_HI 88.72283f
#define SPRAT_EXP_LOG2E 1.44269504088896341f
#define SPRAT_EXP_LN2_HI 0.693359375f
#define SPRAT_EXP_LN2_LO (-2.12194440e-4f)
#define SPRAT_EXP_P0 1.9875691500e-4f
#define SPRAT_EXP_P1 1.3981999507e-3f
#define SPRAT_EXP_P2 8.3334519073e-3f
#define SPRAT_EXP_P3 4.1665795894e-2f
#define SPRAT_EXP_P4 1.6666665459e-1f
#define SPRAT_EXP_P5 5.0000001201e-1f

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

/* The activation codes of common.pxi that the packed GEMM's and the depthwise conv's tiles
   apply in registers (sprat_act_v8, and its 16-lane twin sprat_pk_act); the others, Tanh and
   Gelu, the callers apply after the store. */
static inline int sprat_act_in_regs(int code) {
    return code == 0 || code == 1 || code == 2 || code == 3 || code == 4 || code == 5
        || code == 6 || code == 8 || code == 10;
}

static inline __m256 sprat_exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_set1_ps(SPRAT_EXP_HI), _mm256_max_ps(_mm256_set1_ps(SPRAT_EXP_LO), x));
    __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(SPRAT_EXP_LOG2E),
                                               _mm256_set1_ps(0.5f)));
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(SPRAT_EXP_LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(SPRAT_EXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(SPRAT_EXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(SPRAT_EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(SPRAT_EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(SPRAT_EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(SPRAT_EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(SPRAT_EXP_P5));
    __m256 y = _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(p, r), r, r), _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n),
                                                   _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}
/* erf32's rational approximation (Eigen's perf_float) on 8 lanes; NaN propagates */
static inline __m256 sprat_erf8(__m256 x) {
    x = _mm256_min_ps(_mm256_set1_ps(4.0f), _mm256_max_ps(_mm256_set1_ps(-4.0f), x));
    __m256 x2 = _mm256_mul_ps(x, x);
    __m256 p = _mm256_set1_ps(-2.72614225801306e-10f);
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(2.77068142495902e-08f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-2.10102402082508e-06f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-5.69250639462346e-05f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-7.34990630326855e-04f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-2.95459980854025e-03f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-1.60960333262415e-02f));
    __m256 q = _mm256_set1_ps(-1.45660718464996e-05f);
    q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-2.13374055278905e-04f));
    q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-1.68282697438203e-03f));
    q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-7.37332916720468e-03f));
    q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-1.42647390514189e-02f));
    return _mm256_div_ps(_mm256_mul_ps(x, p), q);
}

/* Activation ``code`` (sprat_act_in_regs) on 8 lanes, NaN-keeping as act_inplace
   (_mm256_max_ps(zero, v) returns v when v is NaN); sv: PRelu's 8 slopes (code 10). The same
   formulas as packed.h's sprat_pk_act on 16 lanes (sprat_exp8 is sprat_pk_exp's polynomial and
   clamps). Callers pass a constant code: the switch then folds away. */
static inline __attribute__((always_inline)) __m256 sprat_act_v8(__m256 v, int code, __m256 va, __m256 vb, __m256 sv) {
    const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
    __m256 r;
    switch (code) {
    case 1: return _mm256_max_ps(zero, v);
    case 2: return _mm256_min_ps(vb, _mm256_max_ps(va, v));
    case 3: return _mm256_div_ps(one, _mm256_add_ps(one, sprat_exp8(_mm256_sub_ps(zero, v))));
    case 4: return _mm256_min_ps(one, _mm256_max_ps(zero, _mm256_fmadd_ps(va, v, vb)));
    case 5:
        r = _mm256_fmadd_ps(v, _mm256_set1_ps(1.0f / 6.0f), _mm256_set1_ps(0.5f));
        return _mm256_mul_ps(v, _mm256_min_ps(one, _mm256_max_ps(zero, r)));
    case 6:
        r = _mm256_max_ps(zero, v);
        return _mm256_fmadd_ps(va, _mm256_sub_ps(v, r), r);
    case 8: return _mm256_div_ps(v, _mm256_add_ps(one, sprat_exp8(_mm256_sub_ps(zero, v))));
    case 10:
        return _mm256_blendv_ps(v, _mm256_mul_ps(v, sv), _mm256_cmp_ps(v, zero, _CMP_LT_OQ));
    default: return v;
    }
}
#else
static inline int sprat_act_in_regs(int code) { (void)code; return 0; }
#endif
#endif
