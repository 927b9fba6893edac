# ---- GEMM with pre-packed weights (AVX-512 CPUs) --------------------------------------------
# ``Y (m, n) = A (m, K) @ W (K, n)`` with W constant, packed once at prepare into panels of
# PK_NR columns (``pack_panels``: panel p holds W[:, p*NR:(p+1)*NR] row after row, zero-padded
# to NR), so the micro-kernel streams one contiguous panel per K block from L1 and A's rows are
# read in place (one broadcast per element). OpenBLAS packs W on every call, which costs
# 0.2-0.4 ms of a 1.0-1.4 ms 128 x 384 x 1536 product (``bench/kernels.py --packed``); MLAS,
# onnxruntime's GEMM, packs its weights once the same way. The micro-kernel holds a 12 x 32 tile
# of Y in 24 zmm registers (MLAS's sgemm kernel for AVX-512F does the same shape).
#
# Compiled in the avx2 build: the AVX-512F kernels (``sprat_pk5_*``, target attribute) where
# the CPU has AVX-512F, else AVX2 + FMA ones on the same panels (``sprat_p2_*``: 6 x 16 tiles,
# a panel in two halves), picked once at run time (``sprat_pk_mode``); the baseline build has
# neither (``packed_gemm_available`` false: the kernels call BLAS). Which ops take the packed
# path on which CPU is decided in Python (``linalg.PACKED_GEMM``, ``conv.PACKED_*``). Included
# before conv.pxi (im2col convs) and dense.pxi (``gemm_packed``, attention), which call it.

cdef extern from *:
    """
    #define SPRAT_PK_MR 12
    #define SPRAT_PK_NR 32
    #define SPRAT_PK_KC 256
    /* k steps ahead that the first row tile of a K block prefetches its panel (the panel
       comes from memory once per call, the other row tiles find it in L1): weights out of
       cache (a model's layers run in turn) cost 1.3x the time without it, 1.24x with it
       (128 x 384 x 1536, 40 weights in turn; a prefetch of the next block spread over all
       row tiles did no better and cost the hot case 7%) */
    #define SPRAT_PK_PF 24
    /* Panels of B^T for B = src (n x kdim, row pitch lds), times ``scale``: panel p holds
       scale * src[p*NR + j, k] at [k][j], zero past n (attention's K_h^T). */
    static void sprat_pk_pack_t(const float* src, Py_ssize_t lds, Py_ssize_t n,
                                Py_ssize_t kdim, float scale, float* dst) {
        for (Py_ssize_t j0 = 0; j0 < n; j0 += SPRAT_PK_NR) {
            float* d = dst + (j0 / SPRAT_PK_NR) * kdim * SPRAT_PK_NR;
            for (Py_ssize_t j = 0; j < SPRAT_PK_NR; j++) {
                const float* s = src + (j0 + j) * lds;
                if (j0 + j < n) {
                    for (Py_ssize_t k = 0; k < kdim; k++) d[k * SPRAT_PK_NR + j] = scale * s[k];
                } else {
                    for (Py_ssize_t k = 0; k < kdim; k++) d[k * SPRAT_PK_NR + j] = 0.0f;
                }
            }
        }
    }
    /* Panels of B = src (kdim x n, row pitch lds): panel p holds src[k, p*NR + j] at [k][j],
       zero past n (attention's V_h). */
    static void sprat_pk_pack_n(const float* src, Py_ssize_t lds, Py_ssize_t kdim,
                                Py_ssize_t n, float* dst) {
        for (Py_ssize_t j0 = 0; j0 < n; j0 += SPRAT_PK_NR) {
            float* d = dst + (j0 / SPRAT_PK_NR) * kdim * SPRAT_PK_NR;
            Py_ssize_t w = n - j0 < SPRAT_PK_NR ? n - j0 : SPRAT_PK_NR;
            for (Py_ssize_t k = 0; k < kdim; k++) {
                const float* s = src + k * lds + j0;
                Py_ssize_t j = 0;
                for (; j < w; j++) d[k * SPRAT_PK_NR + j] = s[j];
                for (; j < SPRAT_PK_NR; j++) d[k * SPRAT_PK_NR + j] = 0.0f;
            }
        }
    }
    #if defined(__AVX2__) && defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    #include <immintrin.h>
    #define SPRAT_PK 1
    /* The epilogue of the last K block, in registers: + bias (one per column, or NULL),
       + res (C's layout, or NULL), then activation ``code`` (common.pxi's codes; only those
       sprat_pk_act_in_regs takes, else none here). bias, res and slope point at the tile's
       first column (res at its first row). */
    typedef struct {
        const float* bias;
        const float* res;
        const float* slope;
        int code;
        float a, b;
    } sprat_pk_epi;

    static inline int sprat_pk_act_in_regs(int code) {
        return code == 0 || code == 1 || code == 2 || code == 3 || code == 4 || code == 5
            || code == 6 || code == 8 || code == 10;
    }

    /* ``e`` for the tile at row i, column j of C (pitch ldc), into ``t``: bias and slope at
       column j, res at (i, j), or none when C is its own residual (``inplace``: C holds it) */
    static inline const sprat_pk_epi* sprat_pk_epi_at(const sprat_pk_epi* e, sprat_pk_epi* t,
                                                      Py_ssize_t i, Py_ssize_t j,
                                                      Py_ssize_t ldc, int inplace) {
        *t = *e;
        t->bias = e->bias != NULL ? e->bias + j : NULL;
        t->res = e->res != NULL && !inplace ? e->res + i * ldc + j : NULL;
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

    /* common.pxi's sprat_exp8 on 16 lanes (the same polynomial and clamps) */
    __attribute__((target("avx512f"), always_inline))
    static inline __m512 sprat_pk_exp(__m512 x) {
        x = _mm512_min_ps(_mm512_set1_ps(88.72283f),
                          _mm512_max_ps(_mm512_set1_ps(-87.33654f), x));
        __m512 n = _mm512_roundscale_ps(
            _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f)),
            _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
        __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
        r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
        __m512 p = _mm512_set1_ps(1.9875691500e-4f);
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
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
                for (int r = 0; r < mr; r++) {
                    const float* rr = e->res + r * ldc;
                    x0[r] = _mm512_add_ps(x0[r], _mm512_maskz_loadu_ps(c0, rr));
                    if (nv == 2)
                        x1[r] = _mm512_add_ps(x1[r], _mm512_maskz_loadu_ps(c1, rr + 16));
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
       first row and column 0), activation e->code (sprat_pk_act_in_regs), slope[n0:n1]. res
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
                        ? sprat_pk_epi_at(e, &t, i, j, ldc, inplace) : NULL;
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
                                   sprat_pk_epi_at(e, &t, pix, j, M, 0));
                }
            }
        }
    }

    /* 2: the AVX-512F kernels (sprat_pk5_*), 1: the AVX2 + FMA ones (sprat_p2_*), 0: none;
       decided once (the CPU does not change) */
    static int sprat_pk_mode(void) {
        static int mode = -1;
        if (mode < 0) {
            __builtin_cpu_init();
            mode = __builtin_cpu_supports("avx512f") ? 2
                : (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) ? 1 : 0;
        }
        return mode;
    }

    /* whether the AVX-512F forms run */
    static int sprat_pk_available(void) { return sprat_pk_mode() == 2; }

    /* ---- the same panels on AVX2 + FMA CPUs (no AVX-512F) ----
       A panel's 32 columns are two halves of 16; a tile is up to SPRAT_P2_MR (6) rows x 16
       columns of C in 12 ymm accumulators, with the half's two B vectors and one broadcast of
       A: 15 of the 16 ymm registers (MLAS's FMA3 sgemm kernel holds a tile of the same shape).
       One row of a half panel is one 64-byte line (the panels are 64-byte aligned, rows 128
       bytes apart), so a K block of a half (KC x 16 floats) keeps 16 KiB of L1. */
    #define SPRAT_P2_MR 6

    /* lanes [0, w) of a vector of 8 (w >= 8: all) as a maskload / maskstore mask */
    __attribute__((target("avx2,fma"), always_inline))
    static inline __m256i sprat_p2_mask(Py_ssize_t w) {
        return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(w < 8 ? w : 8)),
                                  _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    }

    /* sprat_pk_act on 8 lanes (the same formulas: common.pxi's sprat_exp8 is sprat_pk_exp's
       polynomial and clamps) */
    __attribute__((target("avx2,fma"), always_inline))
    static inline __m256 sprat_p2_act(__m256 v, int code, __m256 va, __m256 vb, __m256 sv) {
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
                for (int r = 0; r < mr; r++) {
                    const float* rr = e->res + r * ldc;
                    x0[r] = _mm256_add_ps(x0[r], _mm256_maskload_ps(rr, m0));
                    if (nv == 2) x1[r] = _mm256_add_ps(x1[r], _mm256_maskload_ps(rr + 8, m1));
                }
            }
            if (e->code == 10) {
                s0 = _mm256_maskload_ps(e->slope, m0);
                if (nv == 2) s1 = _mm256_maskload_ps(e->slope + 8, m1);
            }
            /* one dispatch per tile, as sprat_pk_store */
            #define SPRAT_P2_ACT_ROWS(CODE) \
                for (int r = 0; r < mr; r++) { \
                    x0[r] = sprat_p2_act(x0[r], CODE, va, vb, s0); \
                    if (nv == 2) x1[r] = sprat_p2_act(x1[r], CODE, va, vb, s1); \
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
       SPRAT_PK_PF k steps ahead. The accumulators are named locals, not an array: GCC kept
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
            for (Py_ssize_t k = 0; k < kc; k++) {
                if (pf)
                    _mm_prefetch((const char*)(p + (k + SPRAT_PK_PF) * SPRAT_PK_NR),
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

    /* sprat_pk5_gemm_epi on AVX2: per panel, K in blocks of SPRAT_P2_KC, per row tile of
       SPRAT_P2_MR rows both halves of the panel: the tile's rows of A (L1) serve both, and
       each row of C is written 128 bytes at a time. NOTE: with the halves outside the row
       loop (a pass over A and C per half), convs with a small K and a wide output ran
       1.1-1.2x the time of BLAS (1x1 16->96 on 112x112, 64->256 on 56x56, 1 thread). The
       panel's K block (KC x 32 floats, 16 KiB) stays in L1 while the row tiles pass. */
    #define SPRAT_P2_KC 128
    __attribute__((target("avx2,fma")))
    static void sprat_p2_gemm_epi(Py_ssize_t m, Py_ssize_t n0, Py_ssize_t n1, Py_ssize_t K,
                                  const float* a, Py_ssize_t lda, const float* packed, float* c,
                                  Py_ssize_t ldc, const sprat_pk_epi* e) {
        sprat_pk_epi t;
        const int inplace = e != NULL && e->res == c;
        for (Py_ssize_t j0 = n0; j0 < n1; j0 += SPRAT_PK_NR) {
            const float* panel = packed + (j0 / SPRAT_PK_NR) * K * SPRAT_PK_NR;
            for (Py_ssize_t k0 = 0; k0 < K; k0 += SPRAT_P2_KC) {
                Py_ssize_t kc = K - k0 < SPRAT_P2_KC ? K - k0 : SPRAT_P2_KC;
                for (Py_ssize_t i = 0; i < m; i += SPRAT_P2_MR) {
                    int mr = (int)(m - i < SPRAT_P2_MR ? m - i : SPRAT_P2_MR);
                    for (Py_ssize_t h = 0; h < SPRAT_PK_NR && j0 + h < n1; h += 16) {
                        Py_ssize_t j = j0 + h, w = n1 - j < 16 ? n1 - j : 16;
                        const sprat_pk_epi* te = e != NULL && k0 + kc >= K
                            ? sprat_pk_epi_at(e, &t, i, j, ldc, inplace) : NULL;
                        sprat_pk_tap tp = {a + i * lda + k0, panel + k0 * SPRAT_PK_NR + h};
                        sprat_p2_rows(mr, &tp, 1, 0, kc, lda, c + i * ldc + j, ldc,
                                      k0 > 0 || inplace, w, i == 0, te);
                    }
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
                                      sprat_pk_epi_at(e, &t, pix, j, M, 0));
                    }
                }
            }
        }
    }

    static void sprat_pk_gemm_epi(Py_ssize_t m, Py_ssize_t n0, Py_ssize_t n1, Py_ssize_t K,
                                  const float* a, Py_ssize_t lda, const float* packed, float* c,
                                  Py_ssize_t ldc, const sprat_pk_epi* e) {
        if (sprat_pk_mode() == 2)
            sprat_pk5_gemm_epi(m, n0, n1, K, a, lda, packed, c, ldc, e);
        else
            sprat_p2_gemm_epi(m, n0, n1, K, a, lda, packed, c, ldc, e);
    }

    static void sprat_pk_gemm(Py_ssize_t m, Py_ssize_t n0, Py_ssize_t n1, Py_ssize_t K,
                              const float* a, Py_ssize_t lda, const float* packed, float* c,
                              Py_ssize_t ldc) {
        sprat_pk_gemm_epi(m, n0, n1, K, a, lda, packed, c, ldc, NULL);
    }

    static void sprat_pk_direct(const float* xb, Py_ssize_t pr0, Py_ssize_t rp, Py_ssize_t ph,
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
    #else
    #define SPRAT_PK 0
    typedef struct {
        const float* bias;
        const float* res;
        const float* slope;
        int code;
        float a, b;
    } sprat_pk_epi;
    static inline int sprat_pk_act_in_regs(int code) { (void)code; return 0; }
    static void sprat_pk_gemm_epi(Py_ssize_t m, Py_ssize_t n0, Py_ssize_t n1, Py_ssize_t K,
                                  const float* a, Py_ssize_t lda, const float* packed, float* c,
                                  Py_ssize_t ldc, const sprat_pk_epi* e) {
        (void)m; (void)n0; (void)n1; (void)K; (void)a; (void)lda; (void)packed; (void)c;
        (void)ldc; (void)e;
    }
    static void sprat_pk_gemm(Py_ssize_t m, Py_ssize_t n0, Py_ssize_t n1, Py_ssize_t K,
                              const float* a, Py_ssize_t lda, const float* packed, float* c,
                              Py_ssize_t ldc) {
        (void)m; (void)n0; (void)n1; (void)K; (void)a; (void)lda; (void)packed; (void)c;
        (void)ldc;
    }
    static void sprat_pk_direct(const float* xb, Py_ssize_t pr0, Py_ssize_t rp, Py_ssize_t ph,
                                Py_ssize_t H, Py_ssize_t C, int kh, int kw, Py_ssize_t sh,
                                Py_ssize_t sw, Py_ssize_t dh, Py_ssize_t dw, Py_ssize_t oh0,
                                Py_ssize_t oh1, Py_ssize_t OW, const float* packed,
                                Py_ssize_t n0, Py_ssize_t n1, float* y, Py_ssize_t M,
                                const sprat_pk_epi* e) {
        (void)xb; (void)pr0; (void)rp; (void)ph; (void)H; (void)C; (void)kh; (void)kw;
        (void)sh; (void)sw; (void)dh; (void)dw; (void)oh0; (void)oh1; (void)OW; (void)packed;
        (void)n0; (void)n1; (void)y; (void)M; (void)e;
    }
    static int sprat_pk_available(void) { return 0; }
    static int sprat_pk_mode(void) { return 0; }
    #endif
    """
    int SPRAT_PK_NR
    int SPRAT_PK_MR
    ctypedef struct sprat_pk_epi:
        const float* bias
        const float* res
        const float* slope
        int code
        float a, b
    bint sprat_pk_act_in_regs(int code) noexcept nogil
    void sprat_pk_gemm_epi(idx m, idx n0, idx n1, idx K, const float* a, idx lda,
                           const float* packed, float* c, idx ldc,
                           const sprat_pk_epi* e) noexcept nogil
    void sprat_pk_gemm(idx m, idx n0, idx n1, idx K, const float* a, idx lda,
                       const float* packed, float* c, idx ldc) noexcept nogil
    int sprat_pk_available() noexcept nogil
    int sprat_pk_mode() noexcept nogil
    void sprat_pk_direct(const float* xb, idx pr0, idx rp, idx ph, idx H, idx C, int kh,
                         int kw, idx sh, idx sw, idx dh, idx dw, idx oh0, idx oh1, idx OW,
                         const float* packed, idx n0, idx n1, float* y, idx M,
                         const sprat_pk_epi* e) noexcept nogil
    void sprat_pk_pack_t(const float* src, idx lds, idx n, idx kdim, float scale,
                         float* dst) noexcept nogil
    void sprat_pk_pack_n(const float* src, idx lds, idx kdim, idx n, float* dst) noexcept nogil


#: columns per packed weight panel (``pack_panels``)
PACKED_NR = SPRAT_PK_NR


def pack_weight_panels(const float[:, ::1] b, bint trans, idx j0, idx j1, float[::1] dst):
    """The panels of columns ``[j0, j1)`` of B into ``dst`` (``linalg.pack_panels``'s layout:
    panel after panel, K rows of PACKED_NR columns, zero past ``j1``); ``b`` is B (K, N), or
    B^T (N, K) when ``trans`` (Gemm's transB: its rows ``[j0, j1)``). ``j0`` a multiple of
    PACKED_NR. Raises ValueError on a bad range or a short ``dst``."""
    cdef idx n = b.shape[0] if trans else b.shape[1]
    cdef idx kdim = b.shape[1] if trans else b.shape[0]
    if j0 < 0 or j1 > n or j0 >= j1 or j0 % SPRAT_PK_NR or kdim < 1 \
            or dst.shape[0] < -(-(j1 - j0) // SPRAT_PK_NR) * SPRAT_PK_NR * kdim:
        raise ValueError("pack_weight_panels: bad column range or short destination")
    with nogil:
        if trans:
            sprat_pk_pack_t(&b[j0, 0], kdim, j1 - j0, kdim, 1.0, &dst[0])
        else:
            sprat_pk_pack_n(&b[0, j0], n, kdim, j1 - j0, &dst[0])


def packed_gemm_available() -> bool:
    """Whether this build and CPU run ``gemm_packed``, the packed convs and
    ``conv_pointwise_scaled``'s packed form: the avx2 build on an AVX-512F CPU (a 12 x 32 tile)
    or an AVX2 + FMA one (6 x 16 tiles)."""
    return sprat_pk_mode() > 0


def packed_avx512() -> bool:
    """Whether the AVX-512F forms run (the avx2 build on an AVX-512F CPU): the packed LSTM/GRU
    steps (``rnn.pxi``) and attention's packed K/V, which have no AVX2 form."""
    return bool(sprat_pk_available())
