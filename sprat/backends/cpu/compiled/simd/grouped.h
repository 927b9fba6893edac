/* The grouped pointwise conv of the compiled kernels (conv.pxi ``conv_pointwise_grouped``
   documents the method; simd/grouped.c defines it in the avx2 build). Without AVX2 + FMA
   (the baseline build) SPRAT_GROUPED_SIMD is 0 and sprat_grouped_rows a stub that does
   nothing: the baseline runs such convs one BLAS GEMM per group. Python.h comes first
   (Py_ssize_t). */
#ifndef SPRAT_GROUPED_H
#define SPRAT_GROUPED_H

/* the most taps (kh * kw) sprat_grouped_conv_row takes */
#define SPRAT_GROUPED_MAX_TAPS 128

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
/* The same for one group's K-long rows anywhere: y[p, m] (rows M floats apart, m < Mg) =
   act(bias[m] + sum over k < K of x[p, k] * w[k, m] (+ res[p, m])), x rows ldx floats
   apart, w (K, Mgp); bias, slope and res at the group's first output channel (a patch
   matrix's rows of one group against that group's weight). */
void sprat_grouped_k(float *y, const float *x, Py_ssize_t ldx, Py_ssize_t K, const float *w,
                     const float *bias, const float *slope, const float *res, Py_ssize_t M,
                     Py_ssize_t Mg, Py_ssize_t p0, Py_ssize_t p1, int code, float a, float b);
/* Output row oh (OW pixels) of group g of a grouped conv read in place (no patch matrix):
   y at the row's first pixel and the group's first output channel, x at the image's first
   pixel and the group's first input channel (rows of W pixels of C floats), w the group's
   weight (kh, kw, Cg, Mgp), bias / slope / res (res: the row, or NULL) at the group's first
   output channel. Pixels whose kw taps all lie inside the row go in tiles over every valid
   tap; the border pixels one at a time over the taps inside the image (zero padding: the
   others skipped). Returns 0 (nothing done) beyond SPRAT_GROUPED_MAX_TAPS taps, else 1. */
int sprat_grouped_conv_row(float *y, const float *x, const float *w, const float *bias,
                           const float *slope, const float *res, Py_ssize_t H, Py_ssize_t W,
                           Py_ssize_t C, Py_ssize_t M, Py_ssize_t Cg, Py_ssize_t Mg,
                           Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw,
                           Py_ssize_t dh, Py_ssize_t dw, Py_ssize_t ph, Py_ssize_t pw,
                           Py_ssize_t oh, Py_ssize_t OW, int code, float a, float b);
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
static inline void sprat_grouped_k(float *y, const float *x, Py_ssize_t ldx, Py_ssize_t K,
                                   const float *w, const float *bias, const float *slope,
                                   const float *res, Py_ssize_t M, Py_ssize_t Mg,
                                   Py_ssize_t p0, Py_ssize_t p1, int code, float a, float b) {
    (void)y; (void)x; (void)ldx; (void)K; (void)w; (void)bias; (void)slope; (void)res;
    (void)M; (void)Mg; (void)p0; (void)p1; (void)code; (void)a; (void)b;
}
static inline int sprat_grouped_conv_row(float *y, const float *x, const float *w,
                                         const float *bias, const float *slope,
                                         const float *res, Py_ssize_t H, Py_ssize_t W,
                                         Py_ssize_t C, Py_ssize_t M, Py_ssize_t Cg,
                                         Py_ssize_t Mg, Py_ssize_t kh, Py_ssize_t kw,
                                         Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t dh,
                                         Py_ssize_t dw, Py_ssize_t ph, Py_ssize_t pw,
                                         Py_ssize_t oh, Py_ssize_t OW, int code, float a,
                                         float b) {
    (void)y; (void)x; (void)w; (void)bias; (void)slope; (void)res; (void)H; (void)W; (void)C;
    (void)M; (void)Cg; (void)Mg; (void)kh; (void)kw; (void)sh; (void)sw; (void)dh; (void)dw;
    (void)ph; (void)pw; (void)oh; (void)OW; (void)code; (void)a; (void)b;
    return 0;
}
#endif
#endif
