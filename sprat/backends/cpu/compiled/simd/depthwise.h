/* The register-blocked depthwise conv of the compiled kernels (conv.pxi documents the method;
   simd/depthwise.c defines it in the avx2 build). Without AVX2 + FMA (the baseline build)
   SPRAT_DW_SIMD is 0 and sprat_dw_units a stub that does nothing. Python.h comes first
   (Py_ssize_t). */
#ifndef SPRAT_DEPTHWISE_H
#define SPRAT_DEPTHWISE_H
#include "vecmath.h"
/* The requantisation of sprat_dw_units_q8: per channel mult (padded to a multiple of 8),
   the bounds lo and hi already less zp; post NULL or its 4 rows pld floats apart */
typedef struct {
    const float *mult;
    float lo, hi;
    int zp, is_signed;
    const float *post;
    Py_ssize_t pld;
} sprat_dw_q;

#if defined(__AVX2__) && defined(__FMA__)
#define SPRAT_DW_SIMD 1

/* Units [u0, u1) of a depthwise conv (simd/depthwise.c). Returns 1 (done). */
int sprat_dw_units(float *y, const float *x, const float *wp, const float *bp, const float *sp,
                   const float *res, Py_ssize_t H, Py_ssize_t W, Py_ssize_t C, Py_ssize_t OH,
                   Py_ssize_t OW, Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw,
                   Py_ssize_t dh, Py_ssize_t ph, Py_ssize_t pw, Py_ssize_t ct, Py_ssize_t u0,
                   Py_ssize_t u1, int code, float a, float b);
/* The same units without residual or activation, requantised into bytes (simd/depthwise.c) */
int sprat_dw_units_q8(unsigned char *yq, const float *x, const float *wp, const float *bp,
                      const float *mult, Py_ssize_t H, Py_ssize_t W, Py_ssize_t C,
                      Py_ssize_t OH, Py_ssize_t OW, Py_ssize_t kh, Py_ssize_t kw,
                      Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t dh, Py_ssize_t ph,
                      Py_ssize_t pw, Py_ssize_t ct, Py_ssize_t u0, Py_ssize_t u1, float zp,
                      float lo, float hi, int is_signed, const float *post,
                      Py_ssize_t pld);
#else
#define SPRAT_DW_SIMD 0
static inline int sprat_dw_units(float *y, const float *x, const float *wp, const float *bp,
                                 const float *sp, const float *res, Py_ssize_t H,
                                 Py_ssize_t W, Py_ssize_t C, Py_ssize_t OH, Py_ssize_t OW,
                                 Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw,
                                 Py_ssize_t dh, Py_ssize_t ph, Py_ssize_t pw, Py_ssize_t ct,
                                 Py_ssize_t u0, Py_ssize_t u1, int code, float a, float b) {
    (void)y; (void)x; (void)wp; (void)bp; (void)sp; (void)res; (void)H; (void)W; (void)C;
    (void)OH; (void)OW; (void)kh; (void)kw; (void)sh; (void)sw; (void)dh; (void)ph; (void)pw;
    (void)ct; (void)u0; (void)u1; (void)code; (void)a; (void)b;
    return 0;
}
static inline int sprat_dw_units_q8(unsigned char *yq, const float *x, const float *wp,
                                    const float *bp, const float *mult, Py_ssize_t H,
                                    Py_ssize_t W, Py_ssize_t C, Py_ssize_t OH, Py_ssize_t OW,
                                    Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw,
                                    Py_ssize_t dh, Py_ssize_t ph, Py_ssize_t pw, Py_ssize_t ct,
                                    Py_ssize_t u0, Py_ssize_t u1, float zp, float lo, float hi,
                                    int is_signed, const float *post, Py_ssize_t pld) {
    (void)post; (void)pld; (void)yq; (void)x; (void)wp; (void)bp; (void)mult; (void)H; (void)W; (void)C; (void)OH;
    (void)OW; (void)kh; (void)kw; (void)sh; (void)sw; (void)dh; (void)ph; (void)pw; (void)ct;
    (void)u0; (void)u1; (void)zp; (void)lo; (void)hi; (void)is_signed;
    return 0;
}
#endif
#endif
