/* The grouped pointwise conv of the compiled kernels (conv.pxi ``conv_pointwise_grouped``
   documents the method; simd/grouped.c defines it in the avx2 build). Without AVX2 + FMA
   (the baseline build) SPRAT_GROUPED_SIMD is 0 and sprat_grouped_rows a stub that does
   nothing: the baseline runs such convs one BLAS GEMM per group. Python.h comes first
   (Py_ssize_t). */
#ifndef SPRAT_GROUPED_H
#define SPRAT_GROUPED_H

#if defined(__AVX2__) && defined(__FMA__)
#define SPRAT_GROUPED_SIMD 1
/* Pixels [p0, p1) of group g of a 1x1 conv with G groups over NHWC rows: y[p, g*Mg + m] =
   act(bias[g*Mg + m] + sum over c < Cg of x[p, g*Cg + c] * w[g, c, m] (+ res[p, g*Mg + m])),
   Cg = C / G, Mg = M / G; w (G, Cg, Mgp) with Mgp = Mg rounded up to 8, zero past Mg; bias
   M floats; res (P, M) or NULL; slope M floats (PRelu, code 10) or NULL; the activation
   only when sprat_act_in_regs(code). */
void sprat_grouped_rows(float *y, const float *x, const float *w, const float *bias,
                        const float *slope, const float *res, Py_ssize_t C, Py_ssize_t M,
                        Py_ssize_t G, Py_ssize_t g, Py_ssize_t p0, Py_ssize_t p1, int code,
                        float a, float b);
#else
#define SPRAT_GROUPED_SIMD 0
static inline void sprat_grouped_rows(float *y, const float *x, const float *w,
                                      const float *bias, const float *slope, const float *res,
                                      Py_ssize_t C, Py_ssize_t M, Py_ssize_t G, Py_ssize_t g,
                                      Py_ssize_t p0, Py_ssize_t p1, int code, float a,
                                      float b) {
    (void)y; (void)x; (void)w; (void)bias; (void)slope; (void)res; (void)C; (void)M; (void)G;
    (void)g; (void)p0; (void)p1; (void)code; (void)a; (void)b;
}
#endif
#endif
