/* The grouped pointwise conv: 1x1 convs with G > 1 groups of few channels each, ShuffleNet's
   (conv.pxi ``conv_pointwise_grouped`` documents the method; simd/grouped.h the entry point).
   Compiled in the avx2 build only, as its own translation unit. */
#include <Python.h>
#include "grouped.h"

#if SPRAT_GROUPED_SIMD
#include <immintrin.h>
#include "vecmath.h"
#define SPRAT_INLINE static inline __attribute__((always_inline))

/* The activation on R x NV accumulators (sprat_act_v8, one dispatch per tile); sv: PRelu's
   slopes of each vector (code 10) */
#define SPRAT_GP_ACT(CODE) \
    case CODE: \
        _Pragma("GCC unroll 8") \
        for (r = 0; r < R; r++) { \
            _Pragma("GCC unroll 3") \
            for (v = 0; v < NV; v++) acc[r][v] = sprat_act_v8(acc[r][v], CODE, va, vb, sv[v]); \
        } \
        break;

/* The taps of a tile: n of them, tap t reading x + xo[t] against the weight rows at w + wo[t]
   (a 1x1 conv: one tap, both offsets 0) */
typedef struct {
    int n;
    const Py_ssize_t *xo, *wo;
} sprat_gp_taps;

/* R pixels (rows C floats apart in x, M in y and res) x NV vectors of 8 output channels of
   one group: x at the rows' first input channel of the group, w at the group's weight rows
   (Mgp floats apart) and the block's first column, y / res / bias / slope at the block's
   first output channel. The last vector holds only the lanes of mask (the group's last
   Mg % 8 channels); no lane past it is read or written. Compile-time R and NV: the R*NV
   accumulators stay in registers, each weight vector is loaded once per input channel and
   used by R multiply-adds, each input value broadcast once and used by NV. */
SPRAT_INLINE void sprat_gp_tile(float *y, const float *x, const float *w, const float *bias,
                                const float *slope, const float *res, Py_ssize_t C,
                                Py_ssize_t M, Py_ssize_t Cg, Py_ssize_t Mgp, const int R,
                                const int NV, __m256i mask, int code, float a, float b,
                                const sprat_gp_taps *tp) {
    __m256 acc[8][3], sv[3];
    int r, v, t;
    Py_ssize_t c;
#pragma GCC unroll 3
    for (v = 0; v < NV; v++) {
        const __m256 bv = v == NV - 1 ? _mm256_maskload_ps(bias + v * 8, mask)
                                      : _mm256_loadu_ps(bias + v * 8);
#pragma GCC unroll 8
        for (r = 0; r < R; r++) acc[r][v] = bv;
    }
    for (t = 0; t < tp->n; t++) {
        const float *xt = x + tp->xo[t];
        const float *wt = w + tp->wo[t];
        for (c = 0; c < Cg; c++) {
            const float *wc = wt + c * Mgp;
            __m256 wv[3];
#pragma GCC unroll 3
            for (v = 0; v < NV; v++) wv[v] = _mm256_loadu_ps(wc + v * 8);
#pragma GCC unroll 8
            for (r = 0; r < R; r++) {
                const __m256 xb = _mm256_broadcast_ss(xt + r * C + c);
#pragma GCC unroll 3
                for (v = 0; v < NV; v++) acc[r][v] = _mm256_fmadd_ps(xb, wv[v], acc[r][v]);
            }
        }
    }
    if (res != NULL) {
#pragma GCC unroll 8
        for (r = 0; r < R; r++) {
#pragma GCC unroll 3
            for (v = 0; v < NV; v++)
                acc[r][v] = _mm256_add_ps(acc[r][v],
                                          v == NV - 1 ? _mm256_maskload_ps(res + r * M + v * 8,
                                                                           mask)
                                                      : _mm256_loadu_ps(res + r * M + v * 8));
        }
    }
    if (code != 0) {
        const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
#pragma GCC unroll 3
        for (v = 0; v < NV; v++)
            sv[v] = code != 10 ? _mm256_setzero_ps()
                    : v == NV - 1 ? _mm256_maskload_ps(slope + v * 8, mask)
                                  : _mm256_loadu_ps(slope + v * 8);
        switch (code) {
        SPRAT_GP_ACT(1) SPRAT_GP_ACT(2) SPRAT_GP_ACT(3) SPRAT_GP_ACT(4) SPRAT_GP_ACT(5)
        SPRAT_GP_ACT(6) SPRAT_GP_ACT(8) SPRAT_GP_ACT(10)
        default: break;
        }
    }
#pragma GCC unroll 8
    for (r = 0; r < R; r++) {
#pragma GCC unroll 3
        for (v = 0; v < NV; v++) {
            if (v == NV - 1) _mm256_maskstore_ps(y + r * M + v * 8, mask, acc[r][v]);
            else _mm256_storeu_ps(y + r * M + v * 8, acc[r][v]);
        }
    }
}
#undef SPRAT_GP_ACT

/* Pixels [p0, p1) of one block of NV vectors: R pixels at a time (R*NV <= 12 accumulators
   besides NV weight vectors and the broadcast: each input channel's step loads NV weight
   vectors and R inputs for R*NV multiply-adds; 6 x 2 vectors is the shape of OpenBLAS's
   6x16 Haswell kernel), the last p1 - p0 < R pixels in one tile of their count */
#define SPRAT_GP_TILE(R, NV) \
    case R: sprat_gp_tile(y + p * M, x + p * C, w, bias, slope, res ? res + p * M : NULL, C, \
                          M, Cg, Mgp, R, NV, mask, code, a, b, tp); break;
#define SPRAT_GP_BLOCK(NV, R) \
    static __attribute__((noinline)) void sprat_gp_block_##NV( \
            float *y, const float *x, const float *w, const float *bias, const float *slope, \
            const float *res, Py_ssize_t C, Py_ssize_t M, Py_ssize_t Cg, Py_ssize_t Mgp, \
            Py_ssize_t p0, Py_ssize_t p1, __m256i mask, int code, float a, float b, \
            const sprat_gp_taps *tp) { \
        Py_ssize_t p = p0; \
        for (; p + R <= p1; p += R) \
            sprat_gp_tile(y + p * M, x + p * C, w, bias, slope, res ? res + p * M : NULL, C, \
                          M, Cg, Mgp, R, NV, mask, code, a, b, tp); \
        switch (p1 - p) { \
        SPRAT_GP_TILE(7, NV) SPRAT_GP_TILE(6, NV) SPRAT_GP_TILE(5, NV) SPRAT_GP_TILE(4, NV) \
        SPRAT_GP_TILE(3, NV) SPRAT_GP_TILE(2, NV) SPRAT_GP_TILE(1, NV) \
        default: break; \
        } \
    }
SPRAT_GP_BLOCK(1, 8)
SPRAT_GP_BLOCK(2, 6)
SPRAT_GP_BLOCK(3, 4)
#undef SPRAT_GP_BLOCK
#undef SPRAT_GP_TILE

/* Pixels [p0, p1) (x rows ldx floats apart) of one group over all its output vectors, taps
   tp: the Mgp / 8 vectors in blocks of 2, the first of 3 when their count is odd (one vector
   alone: a block of 1); only the group's last vector is masked */
static void sprat_gp_vectors(float *y, const float *x, Py_ssize_t ldx, Py_ssize_t K,
                             const float *w, const float *bias, const float *slope,
                             const float *res, Py_ssize_t M, Py_ssize_t Mg, Py_ssize_t p0,
                             Py_ssize_t p1, int code, float a, float b,
                             const sprat_gp_taps *tp) {
    const Py_ssize_t Mgp = (Mg + 7) / 8 * 8;
    const __m256i all = _mm256_set1_epi32(-1);
    const int rem = (int)(Mg & 7);
    const __m256i tail = _mm256_cmpgt_epi32(_mm256_set1_epi32(rem ? rem : 8),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    Py_ssize_t m0, nv;
    if (p1 <= p0) return;
    for (m0 = 0; m0 < Mgp; m0 += nv * 8) {
        const Py_ssize_t left = (Mgp - m0) / 8;
        nv = left == 1 ? 1 : (m0 == 0 && left % 2 == 1) ? 3 : 2;
        const __m256i mask = m0 + nv * 8 >= Mgp ? tail : all;
        const float *sb = slope != NULL ? slope + m0 : NULL;
        const float *rb = res != NULL ? res + m0 : NULL;
        if (nv == 2)
            sprat_gp_block_2(y + m0, x, w + m0, bias + m0, sb, rb, ldx, M, K, Mgp, p0, p1,
                             mask, code, a, b, tp);
        else if (nv == 3)
            sprat_gp_block_3(y + m0, x, w + m0, bias + m0, sb, rb, ldx, M, K, Mgp, p0, p1,
                             mask, code, a, b, tp);
        else
            sprat_gp_block_1(y + m0, x, w + m0, bias + m0, sb, rb, ldx, M, K, Mgp, p0, p1,
                             mask, code, a, b, tp);
    }
}

void sprat_grouped_k(float *y, const float *x, Py_ssize_t ldx, Py_ssize_t K, const float *w,
                     const float *bias, const float *slope, const float *res, Py_ssize_t M,
                     Py_ssize_t Mg, Py_ssize_t p0, Py_ssize_t p1, int code, float a, float b) {
    static const Py_ssize_t zero = 0;
    const sprat_gp_taps one = {1, &zero, &zero};
    if (!sprat_act_in_regs(code)) code = 0;
    sprat_gp_vectors(y, x, ldx, K, w, bias, slope, res, M, Mg, p0, p1, code, a, b, &one);
}

void sprat_grouped_rows(float *y, const float *x, const float *w, const float *bias,
                        const float *slope, const float *res, Py_ssize_t C, Py_ssize_t M,
                        Py_ssize_t G, Py_ssize_t g, Py_ssize_t p0, Py_ssize_t p1, int code,
                        float a, float b) {
    const Py_ssize_t Cg = C / G, Mg = M / G, Mgp = (Mg + 7) / 8 * 8;
    sprat_grouped_k(y + g * Mg, x + g * Cg, C, Cg, w + g * Cg * Mgp, bias + g * Mg,
                    slope != NULL ? slope + g * Mg : NULL, res != NULL ? res + g * Mg : NULL,
                    M, Mg, p0, p1, code, a, b);
}

int sprat_grouped_conv_row(float *y, const float *x, const float *w, const float *bias,
                           const float *slope, const float *res, Py_ssize_t H, Py_ssize_t W,
                           Py_ssize_t C, Py_ssize_t M, Py_ssize_t Cg, Py_ssize_t Mg,
                           Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw,
                           Py_ssize_t dh, Py_ssize_t dw, Py_ssize_t ph, Py_ssize_t pw,
                           Py_ssize_t oh, Py_ssize_t OW, int code, float a, float b) {
    Py_ssize_t xo[SPRAT_GROUPED_MAX_TAPS], wo[SPRAT_GROUPED_MAX_TAPS];
    Py_ssize_t bxo[SPRAT_GROUPED_MAX_TAPS], bwo[SPRAT_GROUPED_MAX_TAPS];
    const Py_ssize_t Mgp = (Mg + 7) / 8 * 8, ih0 = oh * sh - ph;
    Py_ssize_t i0, i1, a0, a1, i, j, ow;
    sprat_gp_taps inner, edge;
    int n = 0;
    if (kh * kw > SPRAT_GROUPED_MAX_TAPS) return 0;
    if (!sprat_act_in_regs(code)) code = 0;
    /* kernel rows inside the image, and the output columns whose kw taps all are */
    i0 = ih0 < 0 ? (-ih0 + dh - 1) / dh : 0;
    i1 = H - 1 - ih0 >= 0 ? (H - 1 - ih0) / dh + 1 : 0;
    if (i1 > kh) i1 = kh;
    if (i1 < i0) i1 = i0;
    a0 = (pw + sw - 1) / sw;
    a1 = W - 1 + pw - (kw - 1) * dw >= 0 ? (W - 1 + pw - (kw - 1) * dw) / sw + 1 : 0;
    if (a0 > OW) a0 = OW;
    if (a1 > OW) a1 = OW;
    if (a1 < a0) a1 = a0;
    for (i = i0; i < i1; i++)
        for (j = 0; j < kw; j++) {
            xo[n] = ((ih0 + i * dh) * W + j * dw - pw) * C;
            wo[n] = (i * kw + j) * Cg * Mgp;
            n++;
        }
    inner.n = n;
    inner.xo = xo;
    inner.wo = wo;
    sprat_gp_vectors(y, x, sw * C, Cg, w, bias, slope, res, M, Mg, a0, a1, code, a, b, &inner);
    /* the border pixels one at a time, with the taps inside the row */
    edge.xo = bxo;
    edge.wo = bwo;
    for (ow = 0; ow < OW; ow++) {
        if (ow == a0) ow = a1;
        if (ow >= OW) break;
        n = 0;
        for (i = i0; i < i1; i++)
            for (j = 0; j < kw; j++) {
                const Py_ssize_t iw = ow * sw - pw + j * dw;
                if (iw < 0 || iw >= W) continue;
                bxo[n] = ((ih0 + i * dh) * W + j * dw - pw) * C;
                bwo[n] = (i * kw + j) * Cg * Mgp;
                n++;
            }
        edge.n = n;
        sprat_gp_vectors(y, x, sw * C, Cg, w, bias, slope, res, M, Mg, ow, ow + 1, code, a, b,
                         &edge);
    }
    return 1;
}
#endif
