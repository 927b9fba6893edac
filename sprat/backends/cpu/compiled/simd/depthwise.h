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

/* Output columns [*s0, *s1) of column segment g of cs of an output row (sprat_dw_units): the
   interior pixels [a0, a1) (all kw taps inside the row: ow*sw - pw >= 0, ow*sw - pw + kw <= W)
   cut into cs pieces of whole blocks of 8 pixels from a0, the first segment also taking the
   left border, the last the right one (segments past the interior are empty). Each pixel
   then goes in the same block as in the uncut row: the sums do not depend on cs. */
static inline void sprat_dw_segment(Py_ssize_t W, Py_ssize_t OW, Py_ssize_t kw, Py_ssize_t sw,
                                    Py_ssize_t pw, Py_ssize_t cs, Py_ssize_t g, Py_ssize_t *s0,
                                    Py_ssize_t *s1) {
    Py_ssize_t a0 = (pw + sw - 1) / sw, a1 = W + pw - kw >= 0 ? (W + pw - kw) / sw + 1 : 0;
    Py_ssize_t w, b0, b1;
    if (a1 > OW) a1 = OW;
    if (a0 > OW) a0 = OW;
    if (a1 < a0) a1 = a0;
    w = ((a1 - a0 + cs - 1) / cs + 7) / 8 * 8;
    b0 = a0 + g * w;
    b1 = b0 + w;
    if (b0 > a1) b0 = a1;
    if (b1 > a1) b1 = a1;
    *s0 = g == 0 ? 0 : b0;
    *s1 = g == cs - 1 ? OW : b1;
}

#if defined(__AVX2__) && defined(__FMA__)
#define SPRAT_DW_SIMD 1

/* Units [u0, u1) of a depthwise conv (simd/depthwise.c). Returns 1 (done). */
int sprat_dw_units(float *y, const float *x, const float *wp, const float *bp, const float *sp,
                   const float *res, Py_ssize_t H, Py_ssize_t W, Py_ssize_t C, Py_ssize_t OH,
                   Py_ssize_t OW, Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw,
                   Py_ssize_t dh, Py_ssize_t ph, Py_ssize_t pw, Py_ssize_t ct, Py_ssize_t cs,
                   Py_ssize_t u0, Py_ssize_t u1, int code, float a, float b);
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
                                 Py_ssize_t cs, Py_ssize_t u0, Py_ssize_t u1, int code, float a,
                                 float b) {
    (void)y; (void)x; (void)wp; (void)bp; (void)sp; (void)res; (void)H; (void)W; (void)C;
    (void)OH; (void)OW; (void)kh; (void)kw; (void)sh; (void)sw; (void)dh; (void)ph; (void)pw;
    (void)ct; (void)cs; (void)u0; (void)u1; (void)code; (void)a; (void)b;
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
