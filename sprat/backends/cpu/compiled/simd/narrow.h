/* The narrow conv of the compiled kernels (conv.pxi ``conv_narrow`` documents the method;
   simd/narrow.c defines it in the avx2 build). Without AVX2 + FMA (the baseline build)
   SPRAT_NARROW_SIMD is 0 and sprat_narrow_rows a stub that does nothing: the baseline runs
   such convs on its other algorithms. Python.h comes first (Py_ssize_t). */
#ifndef SPRAT_NARROW_H
#define SPRAT_NARROW_H

/* the most output channels sprat_narrow_rows takes */
#define SPRAT_NARROW_MAX 7

#if defined(__AVX2__) && defined(__FMA__)
#define SPRAT_NARROW_SIMD 1
/* Output rows [r0, r1) (of the N*OH rows) of a one-group NHWC conv with M <= SPRAT_NARROW_MAX
   output channels, without bias or activation: y (N, OH, OW, M) = x (N, H, W, C) conv
   w (M, kh, kw, C). */
void sprat_narrow_rows(float *y, const float *x, const float *w, Py_ssize_t H, Py_ssize_t W,
                       Py_ssize_t C, Py_ssize_t M, Py_ssize_t OH, Py_ssize_t OW, Py_ssize_t kh,
                       Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t dh,
                       Py_ssize_t dw, Py_ssize_t ph, Py_ssize_t pw, Py_ssize_t r0,
                       Py_ssize_t r1);
#else
#define SPRAT_NARROW_SIMD 0
static inline void sprat_narrow_rows(float *y, const float *x, const float *w, Py_ssize_t H,
                                     Py_ssize_t W, Py_ssize_t C, Py_ssize_t M, Py_ssize_t OH,
                                     Py_ssize_t OW, Py_ssize_t kh, Py_ssize_t kw,
                                     Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t dh,
                                     Py_ssize_t dw, Py_ssize_t ph, Py_ssize_t pw,
                                     Py_ssize_t r0, Py_ssize_t r1) {
    (void)y; (void)x; (void)w; (void)H; (void)W; (void)C; (void)M; (void)OH; (void)OW;
    (void)kh; (void)kw; (void)sh; (void)sw; (void)dh; (void)dw; (void)ph; (void)pw; (void)r0;
    (void)r1;
}
#endif
#endif
