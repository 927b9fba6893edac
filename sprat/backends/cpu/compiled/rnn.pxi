# LSTM and GRU (ONNX LSTM-14, GRU-14; layout 0, default activations): the compiled half of
# ``rnn.py``. Per direction: one GEMM projects the input of every step (``x W^T``), then per
# step one GEMV of the state against the recurrence weight and one vectorised pass for the
# gates; the whole op is one call, no Python and no allocation per step.
#
# The recurrence weight R^T (H, G*H) is packed once into panels of RNN_NR = 64 columns (panel p
# holds R^T[:, 64p:64p+64] row after row, zero past G*H: ``rnn.pack_recurrence``): a step
# streams it as one contiguous run (16 H^2 bytes for an LSTM: 256 KiB at H = 128, in L2), each
# panel's 64 sums held in registers for up to RNN_MR state rows. Measured on this Xeon at
# H = 128 (one LSTM step's 128 x 512 product): 2.45 us with the former rows-of-R^T AXPYs, 2.05
# with gemv.pxi's 32-column panels, 1.70 with 64 columns (~150 GB/s from L2). The gate
# activations run on 16 lanes (AVX-512F CPUs) or 8 (AVX2): sigmoid as 1 / (1 + exp(-x)) with
# common.pxi's exp polynomial, tanh as tanh32's rational function, one pass per state row that
# reads the four (three) gate blocks and writes c and h; the former passes ran tanh one lane
# at a time.
# The input projection uses packed.pxi's GEMM over W^T panels where it runs (AVX-512F; ~15%
# below OpenBLAS's sgemm at 200 x 128 x 512, which packs W on every call), BLAS elsewhere.
#
# Paths: AVX-512F panels (``target`` attribute, in the avx2 build, taken when the CPU has it),
# AVX2 + FMA (the avx2 build), plain C (the baseline build; GCC vectorises the 64-wide rows).
# Included by kernels.pxi after packed.pxi, dense.pxi and gemv.pxi.

from cython.parallel cimport parallel, prange, threadid

cdef extern from *:
    """
    #define SPRAT_RNN_NR 64
    #define SPRAT_RNN_MR 4
    /* floats ahead of the packed stream that the AVX-512F panels prefetch (2 KiB, gemv.pxi's
       measured distance): an H = 512 direction's R^T (4 MiB) comes from L3 every step */
    #define SPRAT_RNN_PF SPRAT_GV_PF
    /* out[r * NR + j] = sum_k a[r * lda + k] * p[k * NR + j] for r < mr, j < NR: one panel p
       (K x NR) of a packed recurrence weight */
    static void sprat_rnn_panel_c(int mr, Py_ssize_t K, const float* a, Py_ssize_t lda,
                                  const float* p, float* out) {
        float acc[SPRAT_RNN_MR][SPRAT_RNN_NR];
        for (int r = 0; r < mr; r++)
            for (int j = 0; j < SPRAT_RNN_NR; j++) acc[r][j] = 0.0f;
        for (Py_ssize_t k = 0; k < K; k++) {
            const float* pk = p + k * SPRAT_RNN_NR;
            for (int r = 0; r < mr; r++) {
                float av = a[r * lda + k];
                for (int j = 0; j < SPRAT_RNN_NR; j++) acc[r][j] += av * pk[j];
            }
        }
        for (int r = 0; r < mr; r++)
            for (int j = 0; j < SPRAT_RNN_NR; j++) out[r * SPRAT_RNN_NR + j] = acc[r][j];
    }

    #if defined(__AVX2__) && defined(__FMA__) && defined(__GNUC__) \
        && (defined(__x86_64__) || defined(__i386__))
    #include <immintrin.h>
    #define SPRAT_RNN_SIMD 1
    /* rows x (8 * Q) columns starting at column c0 of the panel, one ymm accumulator each */
    __attribute__((always_inline))
    static inline void sprat_rnn_tile8(const int rows, const int Q, Py_ssize_t K,
                                       const float* a, Py_ssize_t lda, const float* p,
                                       float* out) {
        __m256 x[2][8];
        _Pragma("GCC unroll 16")
        for (int r = 0; r < rows; r++)
            _Pragma("GCC unroll 16")
            for (int q = 0; q < Q; q++) x[r][q] = _mm256_setzero_ps();
        for (Py_ssize_t k = 0; k < K; k++) {
            const float* pk = p + k * SPRAT_RNN_NR;
            _Pragma("GCC unroll 16")
            for (int r = 0; r < rows; r++) {
                __m256 av = _mm256_broadcast_ss(a + r * lda + k);
                _Pragma("GCC unroll 16")
                for (int q = 0; q < Q; q++)
                    x[r][q] = _mm256_fmadd_ps(av, _mm256_loadu_ps(pk + 8 * q), x[r][q]);
            }
        }
        _Pragma("GCC unroll 16")
        for (int r = 0; r < rows; r++)
            _Pragma("GCC unroll 16")
            for (int q = 0; q < Q; q++) _mm256_storeu_ps(out + r * SPRAT_RNN_NR + 8 * q, x[r][q]);
    }

    static void sprat_rnn_panel8(int mr, Py_ssize_t K, const float* a, Py_ssize_t lda,
                                 const float* p, float* out) {
        if (mr == 1) { sprat_rnn_tile8(1, 8, K, a, lda, p, out); return; }
        /* pairs of rows, each over the two 32-column halves: 8 accumulators + 4 loads */
        for (int r = 0; r < mr; r += 2) {
            const float* ar = a + r * lda;
            float* o = out + r * SPRAT_RNN_NR;
            if (mr - r >= 2) {
                sprat_rnn_tile8(2, 4, K, ar, lda, p, o);
                sprat_rnn_tile8(2, 4, K, ar, lda, p + 32, o + 32);
            } else {
                sprat_rnn_tile8(1, 8, K, ar, lda, p, o);
            }
        }
    }

    /* rows x 64 columns in 4 zmm per row, U steps of K with their own accumulators */
    __attribute__((target("avx512f"), always_inline))
    static inline void sprat_rnn_tile16(const int rows, const int U, Py_ssize_t K,
                                        const float* a, Py_ssize_t lda, const float* p,
                                        float* out) {
        __m512 x[SPRAT_RNN_MR * 2][4];
        _Pragma("GCC unroll 16")
        for (int i = 0; i < rows * U; i++)
            _Pragma("GCC unroll 4")
            for (int q = 0; q < 4; q++) x[i][q] = _mm512_setzero_ps();
        Py_ssize_t k = 0;
        for (; k + U <= K; k += U) {
            _Pragma("GCC unroll 16")
            for (int u = 0; u < U; u++) {
                const float* pk = p + (k + u) * SPRAT_RNN_NR;
                _Pragma("GCC unroll 4")
                for (int q = 0; q < 4; q++)
                    _mm_prefetch((const char*)(pk + SPRAT_RNN_PF + 16 * q), _MM_HINT_T0);
                __m512 b0 = _mm512_loadu_ps(pk), b1 = _mm512_loadu_ps(pk + 16);
                __m512 b2 = _mm512_loadu_ps(pk + 32), b3 = _mm512_loadu_ps(pk + 48);
                _Pragma("GCC unroll 16")
                for (int r = 0; r < rows; r++) {
                    __m512 av = _mm512_set1_ps(a[r * lda + k + u]);
                    __m512* xr = x[r * U + u];
                    xr[0] = _mm512_fmadd_ps(av, b0, xr[0]);
                    xr[1] = _mm512_fmadd_ps(av, b1, xr[1]);
                    xr[2] = _mm512_fmadd_ps(av, b2, xr[2]);
                    xr[3] = _mm512_fmadd_ps(av, b3, xr[3]);
                }
            }
        }
        for (; k < K; k++) {
            const float* pk = p + k * SPRAT_RNN_NR;
            _Pragma("GCC unroll 16")
            for (int r = 0; r < rows; r++) {
                __m512 av = _mm512_set1_ps(a[r * lda + k]);
                _Pragma("GCC unroll 4")
                for (int q = 0; q < 4; q++)
                    x[r * U][q] = _mm512_fmadd_ps(av, _mm512_loadu_ps(pk + 16 * q), x[r * U][q]);
            }
        }
        _Pragma("GCC unroll 16")
        for (int r = 0; r < rows; r++)
            _Pragma("GCC unroll 4")
            for (int q = 0; q < 4; q++) {
                __m512 s = x[r * U][q];
                _Pragma("GCC unroll 4")
                for (int u = 1; u < U; u++) s = _mm512_add_ps(s, x[r * U + u][q]);
                _mm512_storeu_ps(out + r * SPRAT_RNN_NR + 16 * q, s);
            }
    }

    __attribute__((target("avx512f")))
    static void sprat_rnn_panel16(int mr, Py_ssize_t K, const float* a, Py_ssize_t lda,
                                  const float* p, float* out) {
        switch (mr) {  /* 8 zmm accumulators for one and two rows, 12 and 16 for three, four */
        case 1: sprat_rnn_tile16(1, 2, K, a, lda, p, out); break;
        case 2: sprat_rnn_tile16(2, 1, K, a, lda, p, out); break;
        case 3: sprat_rnn_tile16(3, 1, K, a, lda, p, out); break;
        default: sprat_rnn_tile16(4, 1, K, a, lda, p, out); break;
        }
    }

    /* common.pxi's sigmoid (1 / (1 + exp8(-v)), as sprat_act8) and tanh32 on 8 lanes */
    static inline __m256 sprat_rnn_sigmoid8(__m256 v) {
        const __m256 one = _mm256_set1_ps(1.0f);
        return _mm256_div_ps(one, _mm256_add_ps(one, sprat_exp8(_mm256_sub_ps(
            _mm256_setzero_ps(), v))));
    }
    static inline __m256 sprat_rnn_tanh8(__m256 x) {
        x = _mm256_min_ps(_mm256_set1_ps(7.90531110763549805f),
                          _mm256_max_ps(_mm256_set1_ps(-7.90531110763549805f), x));
        __m256 x2 = _mm256_mul_ps(x, x);
        __m256 p = _mm256_set1_ps(-2.76076847742355e-16f);
        p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(2.00018790482477e-13f));
        p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-8.60467152213735e-11f));
        p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(5.12229709037114e-08f));
        p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(1.48572235717979e-05f));
        p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(6.37261928875436e-04f));
        p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(4.89352455891786e-03f));
        __m256 q = _mm256_set1_ps(1.19825839466702e-06f);
        q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(1.18534705686654e-04f));
        q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(2.26843463243900e-03f));
        q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(4.89352518554385e-03f));
        return _mm256_div_ps(_mm256_mul_ps(x, p), q);
    }

    /* LSTM cell of units [0, n8) (n8 = n rounded down to 8): g holds the pre-activations
       i, o, f, c~ in blocks of ``hid``; c (read and written) and h (written) */
    static Py_ssize_t sprat_rnn_lstm_cell8(const float* g, Py_ssize_t hid, float* c, float* h,
                                           Py_ssize_t n) {
        Py_ssize_t k = 0;
        for (; k + 8 <= n; k += 8) {
            __m256 i = sprat_rnn_sigmoid8(_mm256_loadu_ps(g + k));
            __m256 o = sprat_rnn_sigmoid8(_mm256_loadu_ps(g + hid + k));
            __m256 f = sprat_rnn_sigmoid8(_mm256_loadu_ps(g + 2 * hid + k));
            __m256 u = sprat_rnn_tanh8(_mm256_loadu_ps(g + 3 * hid + k));
            __m256 cn = _mm256_fmadd_ps(f, _mm256_loadu_ps(c + k), _mm256_mul_ps(i, u));
            _mm256_storeu_ps(c + k, cn);
            _mm256_storeu_ps(h + k, _mm256_mul_ps(o, sprat_rnn_tanh8(cn)));
        }
        return k;
    }

    /* GRU gates z, r of units [0, n8): g holds z, r pre-activations (blocks of hid) on entry,
       x the projection's; z replaces g's z block. With ``lbr`` also the rest of the step:
       h~ = tanh(x_h + r * (g_h + rbh)), h = h~ + z * (hp - h~) (hp may be h); without,
       rh = r * hp. */
    static Py_ssize_t sprat_rnn_gru_gates8(float* g, const float* x, const float* rbh,
                                           const float* hp, float* h, float* rh,
                                           Py_ssize_t hid, Py_ssize_t n, int lbr) {
        Py_ssize_t k = 0;
        for (; k + 8 <= n; k += 8) {
            __m256 z = sprat_rnn_sigmoid8(_mm256_add_ps(_mm256_loadu_ps(g + k),
                                                        _mm256_loadu_ps(x + k)));
            __m256 r = sprat_rnn_sigmoid8(_mm256_add_ps(_mm256_loadu_ps(g + hid + k),
                                                        _mm256_loadu_ps(x + hid + k)));
            __m256 hv = _mm256_loadu_ps(hp + k);
            if (lbr) {
                __m256 a = _mm256_add_ps(_mm256_loadu_ps(g + 2 * hid + k),
                                         _mm256_loadu_ps(rbh + k));
                __m256 u = sprat_rnn_tanh8(_mm256_fmadd_ps(r, a, _mm256_loadu_ps(
                    x + 2 * hid + k)));
                _mm256_storeu_ps(h + k, _mm256_fmadd_ps(z, _mm256_sub_ps(hv, u), u));
            } else {
                _mm256_storeu_ps(g + k, z);
                _mm256_storeu_ps(rh + k, _mm256_mul_ps(r, hv));
            }
        }
        return k;
    }

    /* GRU without linear_before_reset, after the rh GEMV: h~ = tanh(g_h + x_h + rbh),
       h = h~ + z * (hp - h~) for units [0, n8); z in g's first block */
    static Py_ssize_t sprat_rnn_gru_out8(const float* g, const float* x, const float* rbh,
                                         const float* hp, float* h, Py_ssize_t hid,
                                         Py_ssize_t n) {
        Py_ssize_t k = 0;
        for (; k + 8 <= n; k += 8) {
            __m256 u = sprat_rnn_tanh8(_mm256_add_ps(
                _mm256_add_ps(_mm256_loadu_ps(g + 2 * hid + k), _mm256_loadu_ps(x + 2 * hid + k)),
                _mm256_loadu_ps(rbh + k)));
            __m256 z = _mm256_loadu_ps(g + k);
            _mm256_storeu_ps(h + k, _mm256_fmadd_ps(z, _mm256_sub_ps(_mm256_loadu_ps(hp + k), u),
                                                    u));
        }
        return k;
    }

    /* the same three passes on 16 lanes (AVX-512F; packed.pxi's exp on 16 lanes, the same
       polynomial), units [k0, n16) */
    __attribute__((target("avx512f"), always_inline))
    static inline __m512 sprat_rnn_sigmoid16(__m512 v) {
        return _mm512_div_ps(_mm512_set1_ps(1.0f), sprat_pk_sigmoid_den(v));
    }
    __attribute__((target("avx512f"), always_inline))
    static inline __m512 sprat_rnn_tanh16(__m512 x) {
        x = _mm512_min_ps(_mm512_set1_ps(7.90531110763549805f),
                          _mm512_max_ps(_mm512_set1_ps(-7.90531110763549805f), x));
        __m512 x2 = _mm512_mul_ps(x, x);
        __m512 p = _mm512_set1_ps(-2.76076847742355e-16f);
        p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(2.00018790482477e-13f));
        p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-8.60467152213735e-11f));
        p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(5.12229709037114e-08f));
        p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(1.48572235717979e-05f));
        p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(6.37261928875436e-04f));
        p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(4.89352455891786e-03f));
        __m512 q = _mm512_set1_ps(1.19825839466702e-06f);
        q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(1.18534705686654e-04f));
        q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(2.26843463243900e-03f));
        q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(4.89352518554385e-03f));
        return _mm512_div_ps(_mm512_mul_ps(x, p), q);
    }
    __attribute__((target("avx512f")))
    static Py_ssize_t sprat_rnn_lstm_cell16(const float* g, Py_ssize_t hid, float* c, float* h,
                                            Py_ssize_t n) {
        Py_ssize_t k = 0;
        for (; k + 16 <= n; k += 16) {
            __m512 i = sprat_rnn_sigmoid16(_mm512_loadu_ps(g + k));
            __m512 o = sprat_rnn_sigmoid16(_mm512_loadu_ps(g + hid + k));
            __m512 f = sprat_rnn_sigmoid16(_mm512_loadu_ps(g + 2 * hid + k));
            __m512 u = sprat_rnn_tanh16(_mm512_loadu_ps(g + 3 * hid + k));
            __m512 cn = _mm512_fmadd_ps(f, _mm512_loadu_ps(c + k), _mm512_mul_ps(i, u));
            _mm512_storeu_ps(c + k, cn);
            _mm512_storeu_ps(h + k, _mm512_mul_ps(o, sprat_rnn_tanh16(cn)));
        }
        return k;
    }
    __attribute__((target("avx512f")))
    static Py_ssize_t sprat_rnn_gru_gates16(float* g, const float* x, const float* rbh,
                                            const float* hp, float* h, float* rh,
                                            Py_ssize_t hid, Py_ssize_t n, int lbr) {
        Py_ssize_t k = 0;
        for (; k + 16 <= n; k += 16) {
            __m512 z = sprat_rnn_sigmoid16(_mm512_add_ps(_mm512_loadu_ps(g + k),
                                                         _mm512_loadu_ps(x + k)));
            __m512 r = sprat_rnn_sigmoid16(_mm512_add_ps(_mm512_loadu_ps(g + hid + k),
                                                         _mm512_loadu_ps(x + hid + k)));
            __m512 hv = _mm512_loadu_ps(hp + k);
            if (lbr) {
                __m512 a = _mm512_add_ps(_mm512_loadu_ps(g + 2 * hid + k),
                                         _mm512_loadu_ps(rbh + k));
                __m512 u = sprat_rnn_tanh16(_mm512_fmadd_ps(r, a, _mm512_loadu_ps(
                    x + 2 * hid + k)));
                _mm512_storeu_ps(h + k, _mm512_fmadd_ps(z, _mm512_sub_ps(hv, u), u));
            } else {
                _mm512_storeu_ps(g + k, z);
                _mm512_storeu_ps(rh + k, _mm512_mul_ps(r, hv));
            }
        }
        return k;
    }
    __attribute__((target("avx512f")))
    static Py_ssize_t sprat_rnn_gru_out16(const float* g, const float* x, const float* rbh,
                                          const float* hp, float* h, Py_ssize_t hid,
                                          Py_ssize_t n) {
        Py_ssize_t k = 0;
        for (; k + 16 <= n; k += 16) {
            __m512 u = sprat_rnn_tanh16(_mm512_add_ps(
                _mm512_add_ps(_mm512_loadu_ps(g + 2 * hid + k), _mm512_loadu_ps(x + 2 * hid + k)),
                _mm512_loadu_ps(rbh + k)));
            __m512 z = _mm512_loadu_ps(g + k);
            _mm512_storeu_ps(h + k, _mm512_fmadd_ps(z, _mm512_sub_ps(_mm512_loadu_ps(hp + k), u),
                                                    u));
        }
        return k;
    }

    /* the passes on the widest lanes ``path`` allows (2: 16 on an AVX-512F CPU, else 8), the
       16-lane pass first, the 8-lane one after it on what is left (units as passed: offsets
       into every operand) */
    static Py_ssize_t sprat_rnn_lstm_cell(int path, const float* g, Py_ssize_t hid, float* c,
                                          float* h, Py_ssize_t n) {
        Py_ssize_t k = path >= 2 && sprat_gv_path() == 2
            ? sprat_rnn_lstm_cell16(g, hid, c, h, n) : 0;
        return k + sprat_rnn_lstm_cell8(g + k, hid, c + k, h + k, n - k);
    }
    static Py_ssize_t sprat_rnn_gru_gates(int path, float* g, const float* x, const float* rbh,
                                          const float* hp, float* h, float* rh, Py_ssize_t hid,
                                          Py_ssize_t n, int lbr) {
        Py_ssize_t k = path >= 2 && sprat_gv_path() == 2
            ? sprat_rnn_gru_gates16(g, x, rbh, hp, h, rh, hid, n, lbr) : 0;
        return k + sprat_rnn_gru_gates8(g + k, x + k, rbh + k, hp + k, h != NULL ? h + k : NULL,
                                        rh != NULL ? rh + k : NULL, hid, n - k, lbr);
    }
    static Py_ssize_t sprat_rnn_gru_out(int path, const float* g, const float* x,
                                        const float* rbh, const float* hp, float* h,
                                        Py_ssize_t hid, Py_ssize_t n) {
        Py_ssize_t k = path >= 2 && sprat_gv_path() == 2
            ? sprat_rnn_gru_out16(g, x, rbh, hp, h, hid, n) : 0;
        return k + sprat_rnn_gru_out8(g + k, x + k, rbh + k, hp + k, h + k, hid, n - k);
    }
    #else
    #define SPRAT_RNN_SIMD 0
    static Py_ssize_t sprat_rnn_lstm_cell8(const float* g, Py_ssize_t hid, float* c, float* h,
                                           Py_ssize_t n) {
        (void)g; (void)hid; (void)c; (void)h; (void)n;
        return 0;
    }
    static Py_ssize_t sprat_rnn_gru_gates8(float* g, const float* x, const float* rbh,
                                           const float* hp, float* h, float* rh,
                                           Py_ssize_t hid, Py_ssize_t n, int lbr) {
        (void)g; (void)x; (void)rbh; (void)hp; (void)h; (void)rh; (void)hid; (void)n;
        (void)lbr;
        return 0;
    }
    static Py_ssize_t sprat_rnn_gru_out8(const float* g, const float* x, const float* rbh,
                                         const float* hp, float* h, Py_ssize_t hid,
                                         Py_ssize_t n) {
        (void)g; (void)x; (void)rbh; (void)hp; (void)h; (void)hid; (void)n;
        return 0;
    }
    static Py_ssize_t sprat_rnn_lstm_cell(int path, const float* g, Py_ssize_t hid, float* c,
                                          float* h, Py_ssize_t n) {
        (void)path; (void)g; (void)hid; (void)c; (void)h; (void)n;
        return 0;
    }
    static Py_ssize_t sprat_rnn_gru_gates(int path, float* g, const float* x, const float* rbh,
                                          const float* hp, float* h, float* rh, Py_ssize_t hid,
                                          Py_ssize_t n, int lbr) {
        (void)path; (void)g; (void)x; (void)rbh; (void)hp; (void)h; (void)rh; (void)hid;
        (void)n; (void)lbr;
        return 0;
    }
    static Py_ssize_t sprat_rnn_gru_out(int path, const float* g, const float* x,
                                        const float* rbh, const float* hp, float* h,
                                        Py_ssize_t hid, Py_ssize_t n) {
        (void)path; (void)g; (void)x; (void)rbh; (void)hp; (void)h; (void)hid; (void)n;
        return 0;
    }
    #endif

    /* one panel on the given path (2: AVX-512F, 1: AVX2, 0: plain C; gemv.pxi's
       sprat_gv_path says which this build and CPU run); a path the build or CPU lacks falls
       back to the next one down */
    static void sprat_rnn_panel(int path, int mr, Py_ssize_t K, const float* a, Py_ssize_t lda,
                                const float* p, float* out) {
    #if SPRAT_RNN_SIMD
        if (path >= 2 && sprat_gv_path() == 2) { sprat_rnn_panel16(mr, K, a, lda, p, out); return; }
        if (path >= 1) { sprat_rnn_panel8(mr, K, a, lda, p, out); return; }
    #else
        (void)path;
    #endif
        sprat_rnn_panel_c(mr, K, a, lda, p, out);
    }
    """
    int SPRAT_RNN_NR
    int SPRAT_RNN_MR
    void sprat_rnn_panel(int path, int mr, idx K, const float* a, idx lda, const float* p,
                         float* out) noexcept nogil
    idx sprat_rnn_lstm_cell(int path, const float* g, idx hid, float* c, float* h,
                            idx n) noexcept nogil
    idx sprat_rnn_gru_gates(int path, float* g, const float* x, const float* rbh,
                            const float* hp, float* h, float* rh, idx hid, idx n,
                            int lbr) noexcept nogil
    idx sprat_rnn_gru_out(int path, const float* g, const float* x, const float* rbh,
                          const float* hp, float* h, idx hid, idx n) noexcept nogil


#: columns per panel of a packed recurrence weight (``rnn.pack_recurrence``)
RNN_NR = SPRAT_RNN_NR

cdef enum:
    # how the input weight is given (``w_mode``)
    RNN_W_T = 0       # W^T (I, G*H), row-major
    RNN_W_AS_IS = 1   # W (G*H, I) as stored (ScheduleConfig(memory="low"))
    RNN_W_PANELS = 2  # W^T in packed.pxi's panels (linalg.pack_panels), AVX-512F CPUs only
    # how the recurrence weight is given (``r_mode``)
    RNN_R_AS_IS = 1   # R (G*H, H) as stored (memory="low")
    RNN_R_PANELS = 2  # R^T in RNN_NR-column panels (rnn.pack_recurrence)

#: the ``w_mode`` / ``r_mode`` codes (Python-visible)
W_T, W_AS_IS, W_PANELS = RNN_W_T, RNN_W_AS_IS, RNN_W_PANELS
R_AS_IS, R_PANELS = RNN_R_AS_IS, RNN_R_PANELS


cdef void rnn_gemv(const float* a, idx nb, idx K, const float* panels, idx N, float* y,
                   idx ldy, int path) noexcept nogil:
    """``y (nb, N; row pitch ldy) = a (nb, K) @ R^T``, R^T (K, N) in RNN_NR-column panels:
    RNN_MR rows of ``a`` at a time, each panel's sums for them in registers."""
    cdef float out[256]  # SPRAT_RNN_MR x SPRAT_RNN_NR
    cdef idx npan = (N + SPRAT_RNN_NR - 1) // SPRAT_RNN_NR
    cdef idx r0 = 0
    cdef idx p, r, w
    cdef int mr
    while r0 < nb:
        mr = <int>min(<idx>SPRAT_RNN_MR, nb - r0)
        for p in range(npan):
            sprat_rnn_panel(path, mr, K, a + r0 * K, K, panels + p * K * SPRAT_RNN_NR, out)
            w = min(<idx>SPRAT_RNN_NR, N - p * SPRAT_RNN_NR)
            for r in range(mr):
                memcpy(y + (r0 + r) * ldy + p * SPRAT_RNN_NR, out + r * SPRAT_RNN_NR,
                       w * sizeof(float))
        r0 += mr


cdef void rnn_project(int w_mode, const float* x, const float* w, float* xw, idx rows, idx n_in,
                      idx ncols, idx n0, idx n1) noexcept nogil:
    """Columns ``[n0, n1)`` of ``xw (rows, ncols) = x (rows, n_in) @ W^T``, W as ``w_mode``
    gives it (``n0`` a multiple of PACKED_NR with panels)."""
    if n0 >= n1:
        return
    if w_mode == RNN_W_PANELS:
        sprat_pk_gemm(rows, n0, n1, n_in, x, n_in, w, xw, ncols)
    elif w_mode == RNN_W_AS_IS:
        sgemm(False, True, rows, n1 - n0, n_in, <float>1.0, x, n_in, w + n0 * n_in, n_in,
              <float>0.0, xw + n0, ncols)
    else:
        dense_gemm_nn(rows, n1 - n0, n_in, <float>1.0, x, n_in, w + n0, ncols, xw + n0, ncols)


cdef inline idx rnn_col_bound(int t, int nt, idx ncols) noexcept nogil:
    """First column of slot ``t`` of ``nt`` of a projection (multiples of 32)."""
    return ncols if t >= nt else t * ncols // nt // 32 * 32


cdef void rnn_project_all(int w_mode, const float* x, const float* w, float* xw, idx rows,
                          idx n_in, idx ncols, int nt) noexcept nogil:
    """``rnn_project`` of every column, over ``nt`` threads (column ranges) when nt > 1."""
    cdef int t
    if nt <= 1:
        rnn_project(w_mode, x, w, xw, rows, n_in, ncols, 0, ncols)
        return
    for t in prange(nt, num_threads=nt, schedule="static", chunksize=1):
        rnn_project(w_mode, x, w, xw, rows, n_in, ncols, rnn_col_bound(t, nt, ncols),
                    rnn_col_bound(t + 1, nt, ncols))


# ---- LSTM --------------------------------------------------------------------------------------

cdef void rnn_lstm_recurrence(const float* h, const float* r, int r_mode, float* gates, idx nb,
                              idx hid, int path) noexcept nogil:
    """``gates (nb, 4H) = h (nb, H) @ R^T``, R as ``r_mode`` gives it: panels (``rnn_gemv``),
    or R itself (a dot product per gate)."""
    cdef idx four_h = 4 * hid
    cdef idx b, j
    cdef float* g
    cdef const float* hb
    if r_mode == RNN_R_PANELS:
        rnn_gemv(h, nb, hid, r, four_h, gates, four_h, path)
    else:
        for b in range(nb):
            g = gates + b * four_h
            hb = h + b * hid
            for j in range(four_h):
                g[j] = dense_dot(r + j * hid, hb, hid)


cdef void rnn_lstm_cell(float* gates, const float* xw, const float* bias, float* c, float* h,
                        float* y, idx nb, idx hid, idx gp, idx hp, int path) noexcept nogil:
    """``hid`` units of every row of ``nb``: ``gates`` (rows of pitch ``gp``, the four gate
    blocks of ``hid`` columns, order i, o, f, c (ONNX)) = h_prev @ R^T on entry (then
    overwritten); adds ``xw`` (same layout) and ``bias`` (4 * hid), then updates ``c``, ``h``
    (rows of pitch ``hp``) in place and writes h into ``y`` (pitch ``hp``) unless NULL."""
    cdef idx b, k, done
    cdef float* g
    cdef const float* x
    cdef float* cb
    cdef float* hb
    cdef float i, o, f, u
    for b in range(nb):
        g = gates + b * gp
        x = xw + b * gp
        for k in range(4 * hid):
            g[k] += x[k] + bias[k]
        cb = c + b * hp
        hb = h + b * hp
        done = sprat_rnn_lstm_cell(path, g, hid, cb, hb, hid)
        for k in range(done, hid):
            i = sigmoid32(g[k])
            o = sigmoid32(g[hid + k])
            f = sigmoid32(g[2 * hid + k])
            u = tanh32(g[3 * hid + k])
            cb[k] = f * cb[k] + i * u
            hb[k] = o * tanh32(cb[k])
        if y != NULL:
            memcpy(y + b * hp, hb, hid * sizeof(float))


cdef extern from *:
    """
    /* An orphaned barrier: binds to the parallel region the caller runs in (OpenMP 5.2
       section 15.3.1), a no-op outside one or in a team of one. */
    static void sprat_omp_barrier(void) {
    #ifdef _OPENMP
        _Pragma("omp barrier")
    #endif
    }
    """
    void sprat_omp_barrier() noexcept nogil


cdef inline idx rnn_unit_bound(idx sl, idx nslots, idx hid, idx gran) noexcept nogil:
    """First unit of slot ``sl`` of ``nslots`` (multiples of ``gran``; ``hid`` past the
    last)."""
    return hid if sl >= nslots else sl * hid // nslots // gran * gran


cdef inline idx rnn_panels_size(idx cols, idx hid) noexcept nogil:
    """Floats of the RNN_NR-column panels of ``cols`` columns of R^T (``hid`` rows)."""
    return (cols + SPRAT_RNN_NR - 1) // SPRAT_RNN_NR * SPRAT_RNN_NR * hid


cdef idx rnn_slot_offset(idx sl, idx nslots, idx hid, idx gran, bint gru) noexcept nogil:
    """Where slot ``sl``'s panels start in a unit-split packed R (``rnn.pack_weights``): each
    slot's columns packed on their own, an LSTM's 4u as one set, a GRU's 2u (z, r) then u (h)."""
    cdef idx off = 0
    cdef idx s, u
    for s in range(sl):
        u = rnn_unit_bound(s + 1, nslots, hid, gran) - rnn_unit_bound(s, nslots, hid, gran)
        if gru:
            off += rnn_panels_size(2 * u, hid) + rnn_panels_size(u, hid)
        else:
            off += rnn_panels_size(4 * u, hid)
    return off


cdef void rnn_lstm_units(const float* x, const float* w, int w_mode, const float* r,
                         const float* bias, const float* h0, const float* c0, float* h, float* h2,
                         float* c, float* y, idx y_step, float* xw, float* gates, idx seq, idx nb,
                         idx n_in, idx hid, bint reverse, int tid, int team, idx nslots,
                         int path) noexcept nogil:
    """One direction with its hidden units split in ``nslots`` slots (multiples of 8 units),
    run by thread ``tid`` of a team of ``team`` (slots tid, tid + team, ...): W^T's and the
    bias's 4H columns are in slot order (slot s: the i, o, f, c columns of its units,
    ``rnn.unit_order``), R^T's slot columns packed per slot (``rnn_slot_offset``), so a slot's
    projection, recurrence GEMV and cell touch its own columns; every step reads the whole
    state ``h`` and writes its units into the other buffer (``h`` / ``h2``, swapped per step),
    then a barrier. The final state ends in ``h``."""
    cdef idx four_h = 4 * hid
    cdef idx s, t, sl, k0, k1, b
    cdef float* cur = h
    cdef float* nxt = h2
    cdef float* tmp
    sl = tid
    while sl < nslots:
        k0, k1 = rnn_unit_bound(sl, nslots, hid, 8), rnn_unit_bound(sl + 1, nslots, hid, 8)
        rnn_project(w_mode, x, w, xw, seq * nb, n_in, four_h, 4 * k0, 4 * k1)
        for b in range(nb):
            if h0 != NULL:
                memcpy(h + b * hid + k0, h0 + b * hid + k0, (k1 - k0) * sizeof(float))
            else:
                memset(h + b * hid + k0, 0, (k1 - k0) * sizeof(float))
            if c0 != NULL:
                memcpy(c + b * hid + k0, c0 + b * hid + k0, (k1 - k0) * sizeof(float))
            else:
                memset(c + b * hid + k0, 0, (k1 - k0) * sizeof(float))
        sl += team
    sprat_omp_barrier()
    for s in range(seq):
        t = seq - 1 - s if reverse else s
        sl = tid
        while sl < nslots:
            k0, k1 = rnn_unit_bound(sl, nslots, hid, 8), rnn_unit_bound(sl + 1, nslots, hid, 8)
            rnn_gemv(cur, nb, hid, r + rnn_slot_offset(sl, nslots, hid, 8, False), 4 * (k1 - k0),
                     gates + 4 * k0, four_h, path)
            rnn_lstm_cell(gates + 4 * k0, xw + t * nb * four_h + 4 * k0, bias + 4 * k0,
                          c + k0, nxt + k0, y + t * y_step + k0 if y != NULL else NULL, nb,
                          k1 - k0, four_h, hid, path)
            sl += team
        sprat_omp_barrier()
        tmp = cur
        cur = nxt
        nxt = tmp
    if cur != h:
        sl = tid
        while sl < nslots:
            k0, k1 = rnn_unit_bound(sl, nslots, hid, 8), rnn_unit_bound(sl + 1, nslots, hid, 8)
            for b in range(nb):
                memcpy(h + b * hid + k0, cur + b * hid + k0, (k1 - k0) * sizeof(float))
            sl += team


cdef void rnn_lstm_direction(const float* x, const float* w, int w_mode, const float* r,
                             int r_mode, const float* bias, const float* h0, const float* c0,
                             float* h, float* c, float* y, idx y_step, float* xw, float* gates,
                             idx seq, idx nb, idx n_in, idx hid, bint reverse, bint projected,
                             int path) noexcept nogil:
    """One direction of an LSTM: the input projection of every step at once,
    ``xw (seq*nb, 4H) = x (seq*nb, I) @ W^T`` (W as ``w_mode`` gives it; skipped when
    ``projected``), the states ``h``/``c`` (nb, H) from ``h0``/``c0`` (NULL: zeros), then for
    each step t (backwards when ``reverse``) ``gates = h @ R^T`` (R as ``r_mode``) and the
    gate pass; ``y`` (NULL: not wanted) receives h of step t at ``y + t * y_step``."""
    cdef idx s, t
    cdef idx four_h = 4 * hid
    if not projected:
        rnn_project(w_mode, x, w, xw, seq * nb, n_in, four_h, 0, four_h)
    if h0 != NULL:
        memcpy(h, h0, nb * hid * sizeof(float))
    else:
        memset(h, 0, nb * hid * sizeof(float))
    if c0 != NULL:
        memcpy(c, c0, nb * hid * sizeof(float))
    else:
        memset(c, 0, nb * hid * sizeof(float))
    for s in range(seq):
        t = seq - 1 - s if reverse else s
        rnn_lstm_recurrence(h, r, r_mode, gates, nb, hid, path)
        rnn_lstm_cell(gates, xw + t * nb * four_h, bias, c, h,
                      y + t * y_step if y != NULL else NULL, nb, hid, four_h, hid, path)


def lstm(const float[::1] x, const float[:, ::1] w, int w_mode, const float[:, ::1] r,
         int r_mode, const float[:, ::1] bias, const float[::1] h0, const float[::1] c0,
         float[::1] y, float[::1] y_h, float[::1] y_c, float[:, ::1] xw, float[:, ::1] gates,
         float[:, ::1] h, float[:, ::1] c, reverse, idx seq, idx nb, idx n_in, idx hid,
         bint par, int nt=1, idx units=0, float[:, ::1] h2=None, int path=2):
    """LSTM-14 (layout 0, default activations) of every direction d, as one call.

    ``x`` (seq, nb, I) flat; per direction (rows of the 2-D arguments): ``w[d]`` W as
    ``w_mode`` gives it (W_T: W^T (I, 4H); W_AS_IS: W (4H, I); W_PANELS: W^T in
    ``linalg.pack_panels``' panels, only where ``packed_gemm_available()``), ``r[d]`` R as
    ``r_mode`` gives it (R_AS_IS: R (4H, H); R_PANELS: ``rnn.pack_weights``' panels of R^T), ``bias[d]`` (4H) = Wb + Rb. ``h0``/``c0``
    (dirs, nb, H) flat, or empty for zeros. Outputs (each may be empty: not wanted): ``y``
    (seq, dirs, nb, H), ``y_h``/``y_c`` (dirs, nb, H). Scratch rows per direction: ``xw``
    (seq*nb*4H), ``gates`` (nb*4H), ``h`` and ``c`` (nb*H). ``reverse``: a bool per
    direction; ``par``: the two directions on two threads; else ``nt`` threads share each
    direction's input projection (column ranges). ``units`` > 1: each direction in turn, its
    hidden units split in that many slots over as many threads (W, R and ``bias`` packed for
    that many slots by ``rnn.pack_weights``; W_T or W_PANELS, R_PANELS; scratch ``h2`` as
    ``h``). ``path``: the fastest of 2
    (AVX-512F), 1 (AVX2 + FMA), 0 (plain C) that this build and CPU run for the recurrence
    (tests force the lower ones). Raises ValueError on a bad mode, ``units`` or a short
    operand."""
    cdef int dirs = w.shape[0]
    cdef int tid, team
    cdef bint rev[2]
    cdef const float* ph0 = cptr(h0)
    cdef const float* pc0 = cptr(c0)
    cdef float* py = mptr(y)
    cdef idx state = nb * hid
    cdef idx four_h = 4 * hid
    cdef idx nsl = units if units > 1 else 1
    cdef idx wpan = (four_h + SPRAT_PK_NR - 1) // SPRAT_PK_NR
    cdef int d
    if w_mode not in (RNN_W_T, RNN_W_AS_IS, RNN_W_PANELS) or r_mode not in (
            RNN_R_AS_IS, RNN_R_PANELS) or (
            w_mode == RNN_W_PANELS and not sprat_pk_available()):
        raise ValueError(f"lstm: bad w_mode {w_mode} or r_mode {r_mode} (or no packed GEMM)")
    if (x.shape[0] < seq * nb * n_in or r.shape[0] < dirs or bias.shape[0] < dirs
            or w.shape[1] < (wpan * SPRAT_PK_NR if w_mode == RNN_W_PANELS else four_h) * n_in
            or r.shape[1] < (rnn_slot_offset(nsl, nsl, hid, 8, False) if r_mode == RNN_R_PANELS
                             else four_h * hid)
            or bias.shape[1] < four_h or xw.shape[0] < dirs or xw.shape[1] < seq * nb * four_h
            or gates.shape[0] < dirs or gates.shape[1] < nb * four_h or h.shape[0] < dirs
            or h.shape[1] < state or c.shape[0] < dirs or c.shape[1] < state
            or (h0.shape[0] and h0.shape[0] < dirs * state)
            or (c0.shape[0] and c0.shape[0] < dirs * state)
            or (y.shape[0] and y.shape[0] < seq * dirs * state)
            or (y_h.shape[0] and y_h.shape[0] < dirs * state)
            or (y_c.shape[0] and y_c.shape[0] < dirs * state)):
        raise ValueError("lstm: operand or workspace too short for its shape")
    rev[0] = bool(reverse[0])
    rev[1] = bool(reverse[1]) if dirs > 1 else False
    if units > 1:
        if w_mode == RNN_W_AS_IS or r_mode != RNN_R_PANELS or h2 is None \
                or h2.shape[0] < dirs or h2.shape[1] < state or hid < 8 * units:
            raise ValueError("lstm: units needs W_T / W_PANELS, R_PANELS, h2 and 8 units per "
                             "slot")
        for d in range(dirs):
            with nogil, parallel(num_threads=units):
                tid = threadid()
                team = openmp.omp_get_num_threads()
                rnn_lstm_units(&x[0], &w[d, 0], w_mode, &r[d, 0], &bias[d, 0],
                               ph0 + d * state if ph0 != NULL else NULL,
                               pc0 + d * state if pc0 != NULL else NULL, &h[d, 0], &h2[d, 0],
                               &c[d, 0], py + d * state if py != NULL else NULL,
                               dirs * state, &xw[d, 0], &gates[d, 0], seq, nb, n_in, hid,
                               rev[d], tid, team, units, path)
    elif par and dirs == 2:
        for d in prange(2, nogil=True, num_threads=2, schedule="static", chunksize=1):
            rnn_lstm_direction(&x[0], &w[d, 0], w_mode, &r[d, 0], r_mode, &bias[d, 0],
                               ph0 + d * state if ph0 != NULL else NULL,
                               pc0 + d * state if pc0 != NULL else NULL, &h[d, 0], &c[d, 0],
                               py + d * state if py != NULL else NULL, dirs * state,
                               &xw[d, 0], &gates[d, 0], seq, nb, n_in, hid, rev[d], False,
                               path)
    else:
        with nogil:
            for d in range(dirs):
                rnn_project_all(w_mode, &x[0], &w[d, 0], &xw[d, 0], seq * nb, n_in, four_h,
                                nt)
                rnn_lstm_direction(&x[0], &w[d, 0], w_mode, &r[d, 0], r_mode, &bias[d, 0],
                                   ph0 + d * state if ph0 != NULL else NULL,
                                   pc0 + d * state if pc0 != NULL else NULL, &h[d, 0],
                                   &c[d, 0], py + d * state if py != NULL else NULL,
                                   dirs * state, &xw[d, 0], &gates[d, 0], seq, nb, n_in, hid,
                                   rev[d], True, path)
    if y_h.shape[0]:
        memcpy(&y_h[0], &h[0, 0], dirs * state * sizeof(float))
    if y_c.shape[0]:
        memcpy(&y_c[0], &c[0, 0], dirs * state * sizeof(float))


# ---- GRU ---------------------------------------------------------------------------------------
# ONNX GRU, gate order z, r, h; f = sigmoid, g = tanh:
#   z = f(x Wz^T + h Rz^T + Wbz + Rbz),  r = f(x Wr^T + h Rr^T + Wbr + Rbr)
#   h~ = g(x Wh^T + (r * h) Rh^T + Rbh + Wbh)          (linear_before_reset = 0)
#   h~ = g(x Wh^T + r * (h Rh^T + Rbh) + Wbh)           (linear_before_reset != 0, PyTorch's)
#   h = (1 - z) * h~ + z * h
# The packed R holds two panel sets: R^T's z, r columns (2H), then its h columns (H), so the
# h block's product can take r * h (linear_before_reset = 0) as its own GEMV.


cdef void rnn_gru_step(const float* h_prev, const float* r, const float* xw, const float* rbh,
                       float* gates, float* rh, float* h, float* y, idx nb, idx hid,
                       bint lbr, int path) noexcept nogil:
    """One step for ``nb`` rows: ``xw`` (nb, 3H) holds x W^T + Wb (+ Rb for z and r), ``r``
    is R^T packed (two panel sets, see above), ``rbh`` (H) the recurrence bias of h~.
    ``gates`` (nb, 3H) and ``rh`` (nb, H) scratch; ``h`` (nb, H) receives the new state
    (``h_prev`` may be ``h``: each unit is read before it is written) and ``y`` (NULL: not
    wanted) a copy of it."""
    cdef idx three_h = 3 * hid
    cdef const float* rh_panels = r + rnn_panels_size(2 * hid, hid)  # after the z, r set
    cdef idx b, k, done
    cdef float* g
    cdef const float* x
    cdef const float* hp
    cdef float* hb
    cdef float* rb
    cdef float z, rr, u
    rnn_gemv(h_prev, nb, hid, r, 2 * hid, gates, three_h, path)
    if lbr:
        rnn_gemv(h_prev, nb, hid, rh_panels, hid, gates + 2 * hid, three_h, path)
        for b in range(nb):
            g = gates + b * three_h
            x = xw + b * three_h
            hp = h_prev + b * hid
            hb = h + b * hid
            done = sprat_rnn_gru_gates(path, g, x, rbh, hp, hb, NULL, hid, hid, 1)
            for k in range(done, hid):
                z = sigmoid32(g[k] + x[k])
                rr = sigmoid32(g[hid + k] + x[hid + k])
                u = tanh32(x[2 * hid + k] + rr * (g[2 * hid + k] + rbh[k]))
                hb[k] = u + z * (hp[k] - u)
    else:
        for b in range(nb):
            g = gates + b * three_h
            x = xw + b * three_h
            hp = h_prev + b * hid
            rb = rh + b * hid
            done = sprat_rnn_gru_gates(path, g, x, rbh, hp, NULL, rb, hid, hid, 0)
            for k in range(done, hid):
                g[k] = sigmoid32(g[k] + x[k])
                rb[k] = sigmoid32(g[hid + k] + x[hid + k]) * hp[k]
        rnn_gemv(rh, nb, hid, rh_panels, hid, gates + 2 * hid, three_h, path)
        for b in range(nb):
            g = gates + b * three_h
            x = xw + b * three_h
            hp = h_prev + b * hid
            hb = h + b * hid
            done = sprat_rnn_gru_out(path, g, x, rbh, hp, hb, hid, hid)
            for k in range(done, hid):
                u = tanh32(g[2 * hid + k] + x[2 * hid + k] + rbh[k])
                hb[k] = u + g[k] * (hp[k] - u)
    if y != NULL:
        for b in range(nb):
            memcpy(y + b * hid, h + b * hid, hid * sizeof(float))


cdef void rnn_gru_direction(const float* x, const float* w, int w_mode, const float* r,
                            const float* bias, const float* rbh, const float* h0, float* h,
                            float* y, idx y_step, float* xw, float* gates, float* rh, idx seq,
                            idx nb, idx n_in, idx hid, bint reverse, bint lbr, bint projected,
                            int path) noexcept nogil:
    """One direction: ``xw (seq*nb, 3H) = x (seq*nb, I) @ W^T`` (W as ``w_mode`` gives it;
    skipped when ``projected``) ``+ bias`` (3H) = Wb + Rb for z and r, Wb for h, the state
    ``h`` (nb, H) from ``h0`` (NULL: zeros), then the steps (backwards when ``reverse``);
    ``y`` (NULL: not wanted) receives h of step t at ``y + t * y_step``."""
    cdef idx three_h = 3 * hid
    cdef idx s, t, i, k
    cdef float* row
    if not projected:
        rnn_project(w_mode, x, w, xw, seq * nb, n_in, three_h, 0, three_h)
    for i in range(seq * nb):
        row = xw + i * three_h
        for k in range(three_h):
            row[k] += bias[k]
    if h0 != NULL:
        memcpy(h, h0, nb * hid * sizeof(float))
    else:
        memset(h, 0, nb * hid * sizeof(float))
    for s in range(seq):
        t = seq - 1 - s if reverse else s
        rnn_gru_step(h, r, xw + t * nb * three_h, rbh, gates, rh, h,
                     y + t * y_step if y != NULL else NULL, nb, hid, lbr, path)


cdef void rnn_gru_units(const float* x, const float* w, int w_mode, const float* r,
                        const float* bias, const float* rbh, const float* h0, float* h, float* h2,
                        float* y, idx y_step, float* xw, float* gates, float* rh, idx seq,
                        idx nb, idx n_in, idx hid, bint reverse, bint lbr, int tid, int team,
                        idx nslots, int path) noexcept nogil:
    """One GRU direction with its hidden units split in ``nslots`` slots (multiples of 32
    units: a slot's 3u projection columns start on a packed W panel), run by thread ``tid`` of
    a team of ``team``, as ``rnn_lstm_units``: W^T's and the bias's 3H columns in slot order
    (slot s: the z, r, h columns of its units), R^T's packed per slot (its z, r columns, then
    its h columns); the state is double-buffered (``h`` / ``h2``), a barrier per step, two
    without linear_before_reset (r * h of every unit feeds each slot's h~ product)."""
    cdef idx three_h = 3 * hid
    cdef idx s, t, sl, k0, k1, u, b, i, k, done
    cdef float* cur = h
    cdef float* nxt = h2
    cdef float* tmp
    cdef float* g
    cdef float* row
    cdef const float* xr
    cdef const float* rs
    cdef const float* hp
    cdef float* hb
    cdef float* rb
    cdef float zz, rr, v
    sl = tid
    while sl < nslots:
        k0, k1 = rnn_unit_bound(sl, nslots, hid, 32), rnn_unit_bound(sl + 1, nslots, hid, 32)
        rnn_project(w_mode, x, w, xw, seq * nb, n_in, three_h, 3 * k0, 3 * k1)
        for i in range(seq * nb):
            row = xw + i * three_h
            for k in range(3 * k0, 3 * k1):
                row[k] += bias[k]
        for b in range(nb):
            if h0 != NULL:
                memcpy(h + b * hid + k0, h0 + b * hid + k0, (k1 - k0) * sizeof(float))
            else:
                memset(h + b * hid + k0, 0, (k1 - k0) * sizeof(float))
        sl += team
    sprat_omp_barrier()
    for s in range(seq):
        t = seq - 1 - s if reverse else s
        sl = tid
        while sl < nslots:
            k0, k1 = rnn_unit_bound(sl, nslots, hid, 32), rnn_unit_bound(sl + 1, nslots, hid, 32)
            u = k1 - k0
            rs = r + rnn_slot_offset(sl, nslots, hid, 32, True)
            rnn_gemv(cur, nb, hid, rs, 2 * u, gates + 3 * k0, three_h, path)
            if lbr:
                rnn_gemv(cur, nb, hid, rs + rnn_panels_size(2 * u, hid), u,
                         gates + 3 * k0 + 2 * u, three_h, path)
            for b in range(nb):
                g = gates + b * three_h + 3 * k0
                xr = xw + (t * nb + b) * three_h + 3 * k0
                hp = cur + b * hid + k0
                hb = nxt + b * hid + k0
                rb = rh + b * hid + k0
                done = sprat_rnn_gru_gates(path, g, xr, rbh + k0, hp, hb, rb, u, u, lbr)
                for k in range(done, u):
                    zz = sigmoid32(g[k] + xr[k])
                    rr = sigmoid32(g[u + k] + xr[u + k])
                    if lbr:
                        v = tanh32(xr[2 * u + k] + rr * (g[2 * u + k] + rbh[k0 + k]))
                        hb[k] = v + zz * (hp[k] - v)
                    else:
                        g[k] = zz
                        rb[k] = rr * hp[k]
            sl += team
        if not lbr:
            sprat_omp_barrier()
            sl = tid
            while sl < nslots:
                k0 = rnn_unit_bound(sl, nslots, hid, 32)
                k1 = rnn_unit_bound(sl + 1, nslots, hid, 32)
                u = k1 - k0
                rs = r + rnn_slot_offset(sl, nslots, hid, 32, True)
                rnn_gemv(rh, nb, hid, rs + rnn_panels_size(2 * u, hid), u,
                         gates + 3 * k0 + 2 * u, three_h, path)
                for b in range(nb):
                    g = gates + b * three_h + 3 * k0
                    xr = xw + (t * nb + b) * three_h + 3 * k0
                    hp = cur + b * hid + k0
                    hb = nxt + b * hid + k0
                    done = sprat_rnn_gru_out(path, g, xr, rbh + k0, hp, hb, u, u)
                    for k in range(done, u):
                        v = tanh32(g[2 * u + k] + xr[2 * u + k] + rbh[k0 + k])
                        hb[k] = v + g[k] * (hp[k] - v)
                sl += team
        if y != NULL:
            sl = tid
            while sl < nslots:
                k0 = rnn_unit_bound(sl, nslots, hid, 32)
                k1 = rnn_unit_bound(sl + 1, nslots, hid, 32)
                for b in range(nb):
                    memcpy(y + t * y_step + b * hid + k0, nxt + b * hid + k0,
                           (k1 - k0) * sizeof(float))
                sl += team
        sprat_omp_barrier()
        tmp = cur
        cur = nxt
        nxt = tmp
    if cur != h:
        sl = tid
        while sl < nslots:
            k0, k1 = rnn_unit_bound(sl, nslots, hid, 32), rnn_unit_bound(sl + 1, nslots, hid, 32)
            for b in range(nb):
                memcpy(h + b * hid + k0, cur + b * hid + k0, (k1 - k0) * sizeof(float))
            sl += team


def gru(const float[::1] x, const float[:, ::1] w, int w_mode, const float[:, ::1] r,
        const float[:, ::1] bias, const float[:, ::1] rbh, const float[::1] h0, float[::1] y,
        float[::1] y_h, float[:, ::1] xw, float[:, ::1] gates, float[:, ::1] rh,
        float[:, ::1] h, reverse, idx seq, idx nb, idx n_in, idx hid, bint lbr, bint par,
        int nt=1, idx units=0, float[:, ::1] h2=None, int path=2):
    """GRU-14 (layout 0, default activations) of every direction d, as one call.

    ``x`` (seq, nb, I) flat; per direction (rows of the 2-D arguments): ``w[d]`` W^T (I, 3H)
    (``w_mode`` W_T) or in ``linalg.pack_panels``' panels (W_PANELS, only where
    ``packed_gemm_available()``), ``r[d]`` R^T packed by ``rnn.pack_recurrence`` (its z, r
    columns, then its h columns), ``bias[d]`` (3H) = Wb + [Rbz, Rbr, 0], ``rbh[d]`` (H) =
    Rbh. ``h0`` (dirs, nb, H) flat, or empty for zeros. Outputs (each may be empty: not
    wanted): ``y`` (seq, dirs, nb, H), ``y_h`` (dirs, nb, H). Scratch rows per direction:
    ``xw`` (seq*nb*3H), ``gates`` (nb*3H), ``rh`` and ``h`` (nb*H). ``reverse``: a bool per
    direction; ``lbr``: linear_before_reset; ``par``: the two directions on two threads; else
    ``nt`` threads share each direction's input projection. ``units`` > 1: each direction in
    turn, its hidden units split in that many slots (multiples of 32 units) over as many
    threads (W, R, ``bias`` packed for that many slots by ``rnn.pack_weights``; scratch ``h2``
    as ``h``). ``path``: as ``lstm``'s. Raises ValueError on a bad mode, ``units`` or short
    operands."""
    cdef int dirs = w.shape[0]
    cdef idx state = nb * hid
    cdef idx three_h = 3 * hid
    cdef idx wpan = (three_h + SPRAT_PK_NR - 1) // SPRAT_PK_NR
    cdef idx nsl = units if units > 1 else 1
    cdef idx rsize = rnn_slot_offset(nsl, nsl, hid, 32, True)
    if w_mode not in (RNN_W_T, RNN_W_PANELS) or (w_mode == RNN_W_PANELS
                                                 and not sprat_pk_available()):
        raise ValueError(f"gru: bad w_mode {w_mode} (or no packed GEMM)")
    if (x.shape[0] < seq * nb * n_in
            or w.shape[1] < (wpan * SPRAT_PK_NR if w_mode == RNN_W_PANELS else three_h) * n_in
            or r.shape[0] < dirs or r.shape[1] < rsize or bias.shape[0] < dirs
            or bias.shape[1] < three_h or rbh.shape[0] < dirs or rbh.shape[1] < hid
            or xw.shape[0] < dirs or xw.shape[1] < seq * nb * three_h or gates.shape[0] < dirs
            or gates.shape[1] < nb * three_h or rh.shape[0] < dirs or rh.shape[1] < state
            or h.shape[0] < dirs or h.shape[1] < state
            or (h0.shape[0] and h0.shape[0] < dirs * state)
            or (y.shape[0] and y.shape[0] < seq * dirs * state)
            or (y_h.shape[0] and y_h.shape[0] < dirs * state)):
        raise ValueError("gru: operand or workspace too short for its shape")
    cdef bint rev[2]
    cdef const float* ph0 = cptr(h0)
    cdef float* py = mptr(y)
    cdef int d, tid, team
    rev[0] = bool(reverse[0])
    rev[1] = bool(reverse[1]) if dirs > 1 else False
    if units > 1:
        if h2 is None or h2.shape[0] < dirs or h2.shape[1] < state or hid < 32 * units:
            raise ValueError("gru: units needs h2 and 32 units per slot")
        for d in range(dirs):
            with nogil, parallel(num_threads=units):
                tid = threadid()
                team = openmp.omp_get_num_threads()
                rnn_gru_units(&x[0], &w[d, 0], w_mode, &r[d, 0], &bias[d, 0], &rbh[d, 0],
                              ph0 + d * state if ph0 != NULL else NULL, &h[d, 0], &h2[d, 0],
                              py + d * state if py != NULL else NULL, dirs * state,
                              &xw[d, 0], &gates[d, 0], &rh[d, 0], seq, nb, n_in, hid, rev[d],
                              lbr, tid, team, units, path)
    elif par and dirs == 2:
        for d in prange(2, nogil=True, num_threads=2, schedule="static", chunksize=1):
            rnn_gru_direction(&x[0], &w[d, 0], w_mode, &r[d, 0], &bias[d, 0], &rbh[d, 0],
                              ph0 + d * state if ph0 != NULL else NULL, &h[d, 0],
                              py + d * state if py != NULL else NULL, dirs * state,
                              &xw[d, 0], &gates[d, 0], &rh[d, 0], seq, nb, n_in, hid, rev[d],
                              lbr, False, path)
    else:
        with nogil:
            for d in range(dirs):
                rnn_project_all(w_mode, &x[0], &w[d, 0], &xw[d, 0], seq * nb, n_in, three_h,
                                nt)
                rnn_gru_direction(&x[0], &w[d, 0], w_mode, &r[d, 0], &bias[d, 0], &rbh[d, 0],
                                  ph0 + d * state if ph0 != NULL else NULL, &h[d, 0],
                                  py + d * state if py != NULL else NULL, dirs * state,
                                  &xw[d, 0], &gates[d, 0], &rh[d, 0], seq, nb, n_in, hid,
                                  rev[d], lbr, True, path)
    if y_h.shape[0]:
        memcpy(&y_h[0], &h[0, 0], dirs * state * sizeof(float))
