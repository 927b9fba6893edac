# ---- GEMV over weights packed once (one to a few rows against a constant weight) ----------
# ``Y (m, N) = A (m, K) @ W (K, N)`` for m <= GV_MAX_ROWS, W packed once at prepare in
# ``packed.pxi``'s panels (``linalg.pack_panels``: panel p holds W[:, p*NR:(p+1)*NR] row after
# row, zero past N). With one row the product is memory-bound on W (two flops per weight
# float): what counts is streaming W at the memory system's rate. Panel after panel the packed
# weight is one contiguous stream; a work slot takes a contiguous range of panels, so with two
# threads each core streams its own half of the weights. Per panel the kernel keeps the row's
# 32 sums in several independent accumulator sets (K unrolled), so the FMA latency chain does
# not bound a weight panel already in L1/L2, and prefetches SPRAT_GV_PF floats (2 KiB) ahead.
# Squeeze-excite 1x1 convs on a 1x1 map, classifier heads and batch-1 fully-connected layers.
#
# onnxruntime's MLAS runs a one-row product with a packed B through its GEMM kernel with one
# row (and unpacked ones through its GEMV kernel, ``MlasGemvFloatKernel``); the shape here is
# the same idea: no packing of A, B streamed once.
#
# Paths: AVX-512F (``target`` attribute, in the avx2 build, taken when the CPU has it), AVX2 +
# FMA (the avx2 build), plain C (the baseline build; GCC vectorises the 32-wide rows with SSE).
# Included by kernels.pxi after packed.pxi and dense.pxi (its epilogue is the GEMMs').

from cython.parallel cimport prange

cdef extern from *:
    """
    #define SPRAT_GV_NR SPRAT_PK_NR
    #define SPRAT_GV_MAX_ROWS 4
    /* Prefetch distance in floats of the packed stream (2 KiB, 16 panel rows ahead), measured
       in EfficientNet-B0 at 1 thread (its 32 squeeze-excite convs and 1280 x 1000 head, weights
       from memory as in any model): none 1.30x the time of 512, 256 1.04x, 768 / 1536
       1.01-1.02x, 8192 1.11x; a second prefetch into L2 (T1) 2048-8192 floats ahead 1.15x */
    #define SPRAT_GV_PF 512
    /* out[r * NR + j] = sum_k a[r * lda + k] * p[k * NR + j] for r < mr, j < NR: one panel
       p (K x NR) of the packed weight. */
    static void sprat_gv_panel_c(int mr, Py_ssize_t K, const float* a, Py_ssize_t lda,
                                 const float* p, float* out) {
        float acc[SPRAT_GV_MAX_ROWS][SPRAT_GV_NR];
        _Pragma("GCC unroll 16")
        for (int r = 0; r < mr; r++)
            for (int j = 0; j < SPRAT_GV_NR; j++) acc[r][j] = 0.0f;
        for (Py_ssize_t k = 0; k < K; k++) {
            const float* pk = p + k * SPRAT_GV_NR;
            _Pragma("GCC unroll 16")
            for (int r = 0; r < mr; r++) {
                float av = a[r * lda + k];
                for (int j = 0; j < SPRAT_GV_NR; j++) acc[r][j] += av * pk[j];
            }
        }
        _Pragma("GCC unroll 16")
        for (int r = 0; r < mr; r++)
            for (int j = 0; j < SPRAT_GV_NR; j++) out[r * SPRAT_GV_NR + j] = acc[r][j];
    }

    #if defined(__AVX2__) && defined(__FMA__) && defined(__GNUC__) \
        && (defined(__x86_64__) || defined(__i386__))
    #include <immintrin.h>
    #define SPRAT_GV_SIMD 1
    /* mr rows, U steps of K per iteration, each with its own accumulators (4 ymm per row and
       step: one 32-wide panel row); mr, U constants in every caller, so the loops unroll */
    __attribute__((always_inline))
    static inline void sprat_gv_tile8(const int mr, const int U, Py_ssize_t K, const float* a,
                                      Py_ssize_t lda, const float* p, float* out) {
        __m256 x[SPRAT_GV_MAX_ROWS * 2][4];
        _Pragma("GCC unroll 16")
        for (int i = 0; i < mr * U; i++)
            _Pragma("GCC unroll 16")
            for (int q = 0; q < 4; q++) x[i][q] = _mm256_setzero_ps();
        Py_ssize_t k = 0;
        for (; k + U <= K; k += U) {
            _Pragma("GCC unroll 16")
            for (int u = 0; u < U; u++) {
                const float* pk = p + (k + u) * SPRAT_GV_NR;
                _mm_prefetch((const char*)(pk + SPRAT_GV_PF), _MM_HINT_T0);
                _mm_prefetch((const char*)(pk + SPRAT_GV_PF + 16), _MM_HINT_T0);
                __m256 b0 = _mm256_loadu_ps(pk), b1 = _mm256_loadu_ps(pk + 8);
                __m256 b2 = _mm256_loadu_ps(pk + 16), b3 = _mm256_loadu_ps(pk + 24);
                _Pragma("GCC unroll 16")
                for (int r = 0; r < mr; r++) {
                    __m256 av = _mm256_broadcast_ss(a + r * lda + k + u);
                    __m256* xr = x[r * U + u];
                    xr[0] = _mm256_fmadd_ps(av, b0, xr[0]);
                    xr[1] = _mm256_fmadd_ps(av, b1, xr[1]);
                    xr[2] = _mm256_fmadd_ps(av, b2, xr[2]);
                    xr[3] = _mm256_fmadd_ps(av, b3, xr[3]);
                }
            }
        }
        for (; k < K; k++) {
            const float* pk = p + k * SPRAT_GV_NR;
            _Pragma("GCC unroll 16")
            for (int r = 0; r < mr; r++) {
                __m256 av = _mm256_broadcast_ss(a + r * lda + k);
                _Pragma("GCC unroll 16")
                for (int q = 0; q < 4; q++)
                    x[r * U][q] = _mm256_fmadd_ps(av, _mm256_loadu_ps(pk + 8 * q), x[r * U][q]);
            }
        }
        _Pragma("GCC unroll 16")
        for (int r = 0; r < mr; r++)
            _Pragma("GCC unroll 16")
            for (int q = 0; q < 4; q++) {
                __m256 s = x[r * U][q];
                _Pragma("GCC unroll 16")
                for (int u = 1; u < U; u++) s = _mm256_add_ps(s, x[r * U + u][q]);
                _mm256_storeu_ps(out + r * SPRAT_GV_NR + 8 * q, s);
            }
    }

    static void sprat_gv_panel8(int mr, Py_ssize_t K, const float* a, Py_ssize_t lda,
                                const float* p, float* out) {
        switch (mr) {  /* 8 ymm accumulators for 1 and 2 rows, 12 and 16 for 3 and 4 */
        case 1: sprat_gv_tile8(1, 2, K, a, lda, p, out); break;
        case 2: sprat_gv_tile8(2, 1, K, a, lda, p, out); break;
        case 3: sprat_gv_tile8(3, 1, K, a, lda, p, out); break;
        default: sprat_gv_tile8(4, 1, K, a, lda, p, out); break;
        }
    }

    /* the same with 2 zmm per row and step */
    __attribute__((target("avx512f"), always_inline))
    static inline void sprat_gv_tile16(const int mr, const int U, Py_ssize_t K, const float* a,
                                       Py_ssize_t lda, const float* p, float* out) {
        __m512 x0[SPRAT_GV_MAX_ROWS * 4], x1[SPRAT_GV_MAX_ROWS * 4];
        _Pragma("GCC unroll 16")
        for (int i = 0; i < mr * U; i++) {
            x0[i] = _mm512_setzero_ps();
            x1[i] = _mm512_setzero_ps();
        }
        Py_ssize_t k = 0;
        for (; k + U <= K; k += U) {
            _Pragma("GCC unroll 16")
            for (int u = 0; u < U; u++) {
                const float* pk = p + (k + u) * SPRAT_GV_NR;
                _mm_prefetch((const char*)(pk + SPRAT_GV_PF), _MM_HINT_T0);
                _mm_prefetch((const char*)(pk + SPRAT_GV_PF + 16), _MM_HINT_T0);
                __m512 b0 = _mm512_loadu_ps(pk), b1 = _mm512_loadu_ps(pk + 16);
                _Pragma("GCC unroll 16")
                for (int r = 0; r < mr; r++) {
                    __m512 av = _mm512_set1_ps(a[r * lda + k + u]);
                    x0[r * U + u] = _mm512_fmadd_ps(av, b0, x0[r * U + u]);
                    x1[r * U + u] = _mm512_fmadd_ps(av, b1, x1[r * U + u]);
                }
            }
        }
        for (; k < K; k++) {
            const float* pk = p + k * SPRAT_GV_NR;
            __m512 b0 = _mm512_loadu_ps(pk), b1 = _mm512_loadu_ps(pk + 16);
            _Pragma("GCC unroll 16")
            for (int r = 0; r < mr; r++) {
                __m512 av = _mm512_set1_ps(a[r * lda + k]);
                x0[r * U] = _mm512_fmadd_ps(av, b0, x0[r * U]);
                x1[r * U] = _mm512_fmadd_ps(av, b1, x1[r * U]);
            }
        }
        _Pragma("GCC unroll 16")
        for (int r = 0; r < mr; r++) {
            __m512 s0 = x0[r * U], s1 = x1[r * U];
            _Pragma("GCC unroll 16")
            for (int u = 1; u < U; u++) {
                s0 = _mm512_add_ps(s0, x0[r * U + u]);
                s1 = _mm512_add_ps(s1, x1[r * U + u]);
            }
            _mm512_storeu_ps(out + r * SPRAT_GV_NR, s0);
            _mm512_storeu_ps(out + r * SPRAT_GV_NR + 16, s1);
        }
    }

    __attribute__((target("avx512f")))
    static void sprat_gv_panel16(int mr, Py_ssize_t K, const float* a, Py_ssize_t lda,
                                 const float* p, float* out) {
        switch (mr) {  /* 8 zmm accumulators for every row count (12 for 3 rows) */
        case 1: sprat_gv_tile16(1, 4, K, a, lda, p, out); break;
        case 2: sprat_gv_tile16(2, 2, K, a, lda, p, out); break;
        case 3: sprat_gv_tile16(3, 2, K, a, lda, p, out); break;
        default: sprat_gv_tile16(4, 1, K, a, lda, p, out); break;
        }
    }

    static int sprat_gv_512 = -1;
    static int sprat_gv_path(void) {  /* 2: AVX-512F, 1: AVX2 */
        if (sprat_gv_512 < 0) {
            __builtin_cpu_init();
            sprat_gv_512 = __builtin_cpu_supports("avx512f") ? 1 : 0;
        }
        return sprat_gv_512 ? 2 : 1;
    }
    #else
    #define SPRAT_GV_SIMD 0
    static int sprat_gv_path(void) { return 0; }
    #endif

    /* one panel on the given path (2: AVX-512F, 1: AVX2, 0: plain C); a path this build or
       CPU lacks falls back to the next one down */
    static void sprat_gv_panel(int path, int mr, Py_ssize_t K, const float* a, Py_ssize_t lda,
                               const float* p, float* out) {
    #if SPRAT_GV_SIMD
        if (path >= 2 && sprat_gv_path() == 2) { sprat_gv_panel16(mr, K, a, lda, p, out); return; }
        if (path >= 1) { sprat_gv_panel8(mr, K, a, lda, p, out); return; }
    #else
        (void)path;
    #endif
        sprat_gv_panel_c(mr, K, a, lda, p, out);
    }
    """
    int SPRAT_GV_MAX_ROWS
    int sprat_gv_path() noexcept nogil
    void sprat_gv_panel(int path, int mr, idx K, const float* a, idx lda, const float* p,
                        float* out) noexcept nogil


#: rows up to which ``gemv_packed`` runs
GV_MAX_ROWS = SPRAT_GV_MAX_ROWS


cdef struct gv_t:
    const float* a
    const float* packed
    idx M, K, lda
    int path
    const dense_gemm_t* e  # Y, N and the epilogue (C, residual, activation), as the GEMMs'


cdef void gv_panels(const gv_t* g, idx p0, idx p1) noexcept nogil:
    """Panels [p0, p1) of ``gemv_packed``: each panel's sums into Y, then the epilogue over
    the range's columns (``dense_gemm_epilogue``: + beta * C, + res, the activation)."""
    cdef float out[128]  # SPRAT_GV_MAX_ROWS x PACKED_NR
    cdef idx p, j, n0, w, r
    cdef idx kn = g.K * SPRAT_PK_NR
    cdef idx N = g.e.N
    cdef float* yr
    cdef const float* orow
    if p0 >= p1:
        return
    for p in range(p0, p1):
        n0 = p * SPRAT_PK_NR
        w = min(N - n0, SPRAT_PK_NR)
        sprat_gv_panel(g.path, <int>g.M, g.K, g.a, g.lda, g.packed + p * kn, out)
        for r in range(g.M):
            yr = g.e.y + r * N + n0
            orow = out + r * SPRAT_PK_NR
            for j in range(w):
                yr[j] = orow[j]
    dense_gemm_epilogue(g.e, g.e.y, g.e.res, 0, g.M, p0 * SPRAT_PK_NR,
                        min(N, p1 * SPRAT_PK_NR))


cdef struct gv_call_t:
    # one ``gemv_packed`` call's checked arguments (``GemvPackedCall``); g.e points at e
    gv_t g
    dense_gemm_t e
    idx npan
    int nslots


cdef _gemv_packed_run(gv_call_t* s):
    """A checked ``gemv_packed`` call: its panels over its slots."""
    cdef int t, nslots = s.nslots
    cdef idx npan = s.npan
    s.g.e = &s.e
    cdef const gv_t* gp = &s.g
    if nslots <= 1:
        with nogil:
            gv_panels(gp, 0, npan)
        return
    for t in prange(nslots, nogil=True, num_threads=nslots, schedule="static", chunksize=1):
        gv_panels(gp, t * npan // nslots, (t + 1) * npan // nslots)


cdef class GemvPackedCall(_BoundCall):
    """One ``gemv_packed`` call with its arguments checked and bound once (``BOUND_CALLS``).
    Raises as ``gemv_packed``."""
    cdef gv_call_t s

    def __call__(self):
        _gemv_packed_run(&self.s)


def gemv_packed(int nt, const float[::1] a, const float[::1] packed, float[::1] y, idx M,
                idx N, idx K, idx lda, const float[::1] c, idx sm, idx sn, float beta,
                const float[::1] res, bint has_res, int code, float pa, float pb,
                const float[::1] slope=None, int path=2, GemvPackedCall into=None):
    """``Y (M, N) = act(A (M, K) @ W (K, N) + beta * C + res)`` for 1 <= M <= GV_MAX_ROWS,
    W packed once into panels (``packed``: ceil(N / PACKED_NR) panels of K x PACKED_NR
    float32, ``linalg.pack_panels``). A's rows have pitch ``lda``; Y's pitch is N. C is read
    at ``c[r*sm + j*sn]`` (``sm < 0``: no C); ``res`` (Y's layout) is added when ``has_res``;
    then activation ``code`` (pa, pb; PRelu: ``slope``, N floats). ``nt`` slots, each a
    contiguous range of panels. ``path``: the fastest of 2 (AVX-512F), 1 (AVX2 + FMA), 0
    (plain C) that this build and CPU run (tests force the lower ones). With ``into``: the
    checked arguments bound into that call object, nothing run. Raises ValueError on a bad M
    or a short operand."""
    cdef gv_call_t s
    cdef idx npan = (N + SPRAT_PK_NR - 1) // SPRAT_PK_NR
    if M < 1 or M > SPRAT_GV_MAX_ROWS or N < 1 or K < 1:
        raise ValueError(f"gemv_packed: M={M}, N={N}, K={K}: need 1 <= M <= "
                         f"{SPRAT_GV_MAX_ROWS}, N >= 1, K >= 1")
    if (packed.shape[0] < npan * K * SPRAT_PK_NR or a.shape[0] < (M - 1) * lda + K
            or y.shape[0] < M * N or (has_res and res.shape[0] < M * N)):
        raise ValueError("gemv_packed: an operand is shorter than its shape")
    if sm >= 0 and c.shape[0] < (M - 1) * sm + (N - 1) * sn + 1:
        raise ValueError("gemv_packed: C is shorter than its broadcast")
    if sm >= 0 and sn not in (0, 1):
        raise ValueError(f"gemv_packed: C's column stride {sn}: need 0 or 1")
    s.e.slope = NULL
    if code == A_PRELU:
        if slope is None or slope.shape[0] < N:
            raise ValueError(f"gemv_packed: PRelu needs {N} slopes")
        s.e.slope = &slope[0]
    s.e.y, s.e.N = &y[0], N
    s.e.c, s.e.sm, s.e.sn, s.e.beta = cptr(c), sm, sn, beta
    s.e.res, s.e.has_res, s.e.code, s.e.pa, s.e.pb = cptr(res), has_res, code, pa, pb
    s.g.a, s.g.packed, s.g.M, s.g.K, s.g.lda, s.g.path = &a[0], &packed[0], M, K, lda, path
    s.npan, s.nslots = npan, <int>min(<idx>nt, npan)
    if into is not None:
        into.s = s
        return
    _gemv_packed_run(&s)
