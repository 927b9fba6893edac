# Dense kernels: Gemm/MatMul with fused epilogues, fp16-weight GEMV/GEMM (precision="low"),
# fused attention, Softmax/LogSoftmax, LayerNormalization, BatchNormalization (a per-channel
# affine). The Python kernels that call them: ``linalg.py``, ``attention.py``, ``norm.py``.
# Included by kernels.pxi, after common.pxi.
#
# Every ``def`` takes flat C-contiguous float32 arrays (typed memoryviews) and a work-slot count
# ``nt``; the work items are split into ``nt`` equal ranges, one per OpenMP thread, or run on
# the calling thread when ``nt == 1``.

from cython.parallel cimport parallel, prange, threadid
from libc.math cimport logf, INFINITY

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    #if defined(__F16C__) && defined(__AVX2__) && defined(__FMA__)
    #include <immintrin.h>
    #define SPRAT_DENSE_F16C 1
    #endif

    /* One binary16 bit pattern as float32, exact for every finite half (subnormals too: an
       fp16 subnormal becomes an fp32 subnormal that the multiply by 2**112 normalises). */
    static inline float sprat_dense_h2f(uint16_t h) {
        uint32_t bits = ((uint32_t)(h & 0x7fffu) << 13) | ((uint32_t)(h & 0x8000u) << 16);
        float f;
        memcpy(&f, &bits, 4);
        return f * 5.192296858534828e+33f;
    }

    #ifdef SPRAT_DENSE_F16C
    /* eight binary16 bit patterns (unaligned) as eight floats: one vcvtph2ps */
    static inline __m256 sprat_dense_load8(const uint16_t* h) {
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)h));
    }
    #endif

    /* x * s + t rounded once, as an FMA: the AVX2 build contracts it to one vfmadd; the
       baseline has no FMA and computes it in double, where the product is exact (a tie of the
       two roundings, double then float, can still differ from a true FMA, rarely) */
    static inline float sprat_dense_fmaf(float x, float s, float t) {
    #ifdef __FMA__
        return x * s + t;
    #else
        return (float)((double)x * (double)s + (double)t);
    #endif
    }

    /* out[:n] = float32(h[:n]) */
    static void sprat_dense_widen(const uint16_t* h, float* out, Py_ssize_t n) {
        Py_ssize_t j = 0;
    #ifdef SPRAT_DENSE_F16C
        for (; j + 8 <= n; j += 8)
            _mm256_storeu_ps(out + j, sprat_dense_load8(h + j));
    #endif
        for (; j < n; j++)
            out[j] = sprat_dense_h2f(h[j]);
    }

    /* y[:n] += a0*w[0, :n] + a1*w[1, :n] + a2*w[2, :n] + a3*w[3, :n]: four fp16 weight rows
       (ldw apart) widened as they are read, y loaded and stored once for the four. */
    static void sprat_dense_axpy4_f16(float* y, const uint16_t* w, Py_ssize_t ldw,
                                      const float* a, Py_ssize_t n) {
        const uint16_t* w0 = w;
        const uint16_t* w1 = w + ldw;
        const uint16_t* w2 = w + 2 * ldw;
        const uint16_t* w3 = w + 3 * ldw;
        float a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3];
        Py_ssize_t j = 0;
    #ifdef SPRAT_DENSE_F16C
        __m256 v0 = _mm256_set1_ps(a0), v1 = _mm256_set1_ps(a1);
        __m256 v2 = _mm256_set1_ps(a2), v3 = _mm256_set1_ps(a3);
        for (; j + 8 <= n; j += 8) {
            __m256 acc = _mm256_loadu_ps(y + j);
            acc = _mm256_fmadd_ps(v0, sprat_dense_load8(w0 + j), acc);
            acc = _mm256_fmadd_ps(v1, sprat_dense_load8(w1 + j), acc);
            acc = _mm256_fmadd_ps(v2, sprat_dense_load8(w2 + j), acc);
            acc = _mm256_fmadd_ps(v3, sprat_dense_load8(w3 + j), acc);
            _mm256_storeu_ps(y + j, acc);
        }
    #endif
        for (; j < n; j++)
            y[j] += a0 * sprat_dense_h2f(w0[j]) + a1 * sprat_dense_h2f(w1[j])
                  + a2 * sprat_dense_h2f(w2[j]) + a3 * sprat_dense_h2f(w3[j]);
    }

    /* y[:n] += a0 * w[:n], one fp16 weight row */
    static void sprat_dense_axpy_f16(float* y, const uint16_t* w, float a0, Py_ssize_t n) {
        Py_ssize_t j = 0;
    #ifdef SPRAT_DENSE_F16C
        __m256 v0 = _mm256_set1_ps(a0);
        for (; j + 8 <= n; j += 8)
            _mm256_storeu_ps(y + j, _mm256_fmadd_ps(v0, sprat_dense_load8(w + j),
                                                    _mm256_loadu_ps(y + j)));
    #endif
        for (; j < n; j++)
            y[j] += a0 * sprat_dense_h2f(w[j]);
    }
    """
    float dense_fmaf "sprat_dense_fmaf" (float x, float s, float t) noexcept nogil
    void dense_widen "sprat_dense_widen" (const unsigned short* h, float* out,
                                          idx n) noexcept nogil
    void dense_axpy4_f16 "sprat_dense_axpy4_f16" (float* y, const unsigned short* w, idx ldw,
                                                  const float* a, idx n) noexcept nogil
    void dense_axpy_f16 "sprat_dense_axpy_f16" (float* y, const unsigned short* w, float a0,
                                                idx n) noexcept nogil


cdef inline float* dense_row(float[:, ::1] v, int t) noexcept nogil:
    """Row ``t`` of a per-slot scratch (nt, size); NULL when the rows are empty."""
    return &v[t, 0] if v.shape[1] > 0 else NULL


# NOTE: GCC vectorises a reduction with one vector accumulator (a chain of dependent adds, 4
# cycles each) and does not vectorise a NaN-aware max reduction at all. The reductions below
# keep DENSE_LANES partial results in a small array updated elementwise: that loop vectorises
# (four independent ymm accumulators in the AVX2 build, eight xmm in the baseline).
cdef enum:
    DENSE_LANES = 32


cdef inline float dense_rowmax(const float* x, idx n) noexcept nogil:
    """max of ``x[:n]`` (n >= 1), as ``fmax32``: a NaN met by an accumulator is kept."""
    cdef float acc[DENSE_LANES]
    cdef idx i, l
    cdef idx nv = n - n % DENSE_LANES
    cdef float m = x[0]
    cdef const float* xi
    if nv > 0:
        for l in range(DENSE_LANES):
            acc[l] = x[l]
        for i in range(1, nv // DENSE_LANES):
            xi = x + i * DENSE_LANES
            for l in range(DENSE_LANES):
                acc[l] = fmax32(acc[l], xi[l])
        for l in range(DENSE_LANES):
            m = fmax32(m, acc[l])
    for i in range(nv, n):
        m = fmax32(m, x[i])
    return m


cdef inline float dense_sum(const float* x, idx n) noexcept nogil:
    """sum of ``x[:n]`` in float32 (DENSE_LANES partial sums)."""
    cdef float acc[DENSE_LANES]
    cdef idx i, l
    cdef idx nv = n - n % DENSE_LANES
    cdef float s = <float>0.0
    cdef const float* xi
    for l in range(DENSE_LANES):
        acc[l] = <float>0.0
    for i in range(nv // DENSE_LANES):
        xi = x + i * DENSE_LANES
        for l in range(DENSE_LANES):
            acc[l] += xi[l]
    for l in range(DENSE_LANES):
        s += acc[l]
    for i in range(nv, n):
        s += x[i]
    return s


cdef inline float dense_sqdev(const float* x, float mean, idx n) noexcept nogil:
    """sum of ``(x[:n] - mean)**2`` in float32 (DENSE_LANES partial sums)."""
    cdef float acc[DENSE_LANES]
    cdef idx i, l
    cdef idx nv = n - n % DENSE_LANES
    cdef float s = <float>0.0
    cdef float d
    cdef const float* xi
    for l in range(DENSE_LANES):
        acc[l] = <float>0.0
    for i in range(nv // DENSE_LANES):
        xi = x + i * DENSE_LANES
        for l in range(DENSE_LANES):
            d = xi[l] - mean
            acc[l] += d * d
    for l in range(DENSE_LANES):
        s += acc[l]
    for i in range(nv, n):
        d = x[i] - mean
        s += d * d
    return s


cdef inline float dense_dot(const float* x, const float* y, idx n) noexcept nogil:
    """``x[:n] . y[:n]`` in float32 (DENSE_LANES partial sums)."""
    cdef float acc[DENSE_LANES]
    cdef idx i, l
    cdef idx nv = n - n % DENSE_LANES
    cdef float s = <float>0.0
    cdef const float* xi
    cdef const float* yi
    for l in range(DENSE_LANES):
        acc[l] = <float>0.0
    for i in range(nv // DENSE_LANES):
        xi = x + i * DENSE_LANES
        yi = y + i * DENSE_LANES
        for l in range(DENSE_LANES):
            acc[l] += xi[l] * yi[l]
    for l in range(DENSE_LANES):
        s += acc[l]
    for i in range(nv, n):
        s += x[i] * y[i]
    return s


# NOTE: GCC emits one vector per iteration for a plain elementwise loop (plus the loop's
# compare and branch, and alias checks); written as blocks of DENSE_LANES it emits four
# vectors per iteration, which is what LLVM (Numba) did by unrolling: 128 LayerNorm rows of
# 384, 13.1 us as plain loops, 11.3 us in blocks. The cheap passes below use these helpers.

cdef inline void dense_vmax(float* m, const float* x, idx n) noexcept nogil:
    """``m[:n] = fmax32(m[:n], x[:n])``."""
    cdef idx i, l
    cdef idx nv = n - n % DENSE_LANES
    cdef float* mi
    cdef const float* xi
    for i in range(nv // DENSE_LANES):
        mi = m + i * DENSE_LANES
        xi = x + i * DENSE_LANES
        for l in range(DENSE_LANES):
            mi[l] = fmax32(mi[l], xi[l])
    for i in range(nv, n):
        m[i] = fmax32(m[i], x[i])


cdef inline void dense_vmul(float* y, const float* s, idx n) noexcept nogil:
    """``y[:n] *= s[:n]``."""
    cdef idx i, l
    cdef idx nv = n - n % DENSE_LANES
    cdef float* yi
    cdef const float* si
    for i in range(nv // DENSE_LANES):
        yi = y + i * DENSE_LANES
        si = s + i * DENSE_LANES
        for l in range(DENSE_LANES):
            yi[l] *= si[l]
    for i in range(nv, n):
        y[i] *= s[i]


cdef inline void dense_scale(float* y, float s, idx n) noexcept nogil:
    """``y[:n] *= s``."""
    cdef idx i, l
    cdef idx nv = n - n % DENSE_LANES
    cdef float* yi
    for i in range(nv // DENSE_LANES):
        yi = y + i * DENSE_LANES
        for l in range(DENSE_LANES):
            yi[l] *= s
    for i in range(nv, n):
        y[i] *= s


# NOTE: BatchNormalization's ``x * s + b`` rounds once in both builds (``dense_fmaf``), as the
# AVX2 build and onnxruntime do: rounded twice, the baseline build's outputs moved a quantized
# MobileNet-v2's (test_quant_models) by one quantization step
cdef inline void dense_fma_vv(float* y, const float* x, const float* s, const float* b,
                              idx n) noexcept nogil:
    """``y[:n] = x[:n] * s[:n] + b[:n]``, one rounding."""
    cdef idx i, l
    cdef idx nv = n - n % DENSE_LANES
    cdef float* yi
    cdef const float* xi
    cdef const float* si
    cdef const float* bi
    for i in range(nv // DENSE_LANES):
        yi = y + i * DENSE_LANES
        xi = x + i * DENSE_LANES
        si = s + i * DENSE_LANES
        bi = b + i * DENSE_LANES
        for l in range(DENSE_LANES):
            yi[l] = dense_fmaf(xi[l], si[l], bi[l])
    for i in range(nv, n):
        y[i] = dense_fmaf(x[i], s[i], b[i])


cdef inline void dense_fma_ss(float* y, const float* x, float s, float b, idx n) noexcept nogil:
    """``y[:n] = x[:n] * s + b``, one rounding."""
    cdef idx i, l
    cdef idx nv = n - n % DENSE_LANES
    cdef float* yi
    cdef const float* xi
    for i in range(nv // DENSE_LANES):
        yi = y + i * DENSE_LANES
        xi = x + i * DENSE_LANES
        for l in range(DENSE_LANES):
            yi[l] = dense_fmaf(xi[l], s, b)
    for i in range(nv, n):
        y[i] = dense_fmaf(x[i], s, b)


cdef inline void dense_normalise(float* y, const float* x, float mean, float inv,
                                 const float* scale, const float* bias, idx n) noexcept nogil:
    """``y[:n] = (x[:n] - mean) * inv * scale[:n] + bias[:n]`` (LayerNormalization)."""
    cdef idx i, l
    cdef idx nv = n - n % DENSE_LANES
    cdef float* yi
    cdef const float* xi
    cdef const float* si
    cdef const float* bi
    for i in range(nv // DENSE_LANES):
        yi = y + i * DENSE_LANES
        xi = x + i * DENSE_LANES
        si = scale + i * DENSE_LANES
        bi = bias + i * DENSE_LANES
        for l in range(DENSE_LANES):
            yi[l] = (xi[l] - mean) * inv * si[l] + bi[l]
    for i in range(nv, n):
        y[i] = (x[i] - mean) * inv * scale[i] + bias[i]


cdef inline void dense_axpy4(float* y, const float* b, idx ldb, float a0, float a1, float a2,
                             float a3, idx n) noexcept nogil:
    """``y[:n] += a0*b[0, :n] + a1*b[1, :n] + a2*b[2, :n] + a3*b[3, :n]`` (rows ``ldb``
    apart): y is loaded and stored once for four rows of b."""
    cdef idx i, l
    cdef idx nv = n - n % DENSE_LANES
    cdef float* yi
    cdef const float* b0
    cdef const float* b1
    cdef const float* b2
    cdef const float* b3
    for i in range(nv // DENSE_LANES):
        yi = y + i * DENSE_LANES
        b0 = b + i * DENSE_LANES
        b1 = b0 + ldb
        b2 = b1 + ldb
        b3 = b2 + ldb
        for l in range(DENSE_LANES):
            yi[l] += a0 * b0[l] + a1 * b1[l] + a2 * b2[l] + a3 * b3[l]
    for i in range(nv, n):
        y[i] += a0 * b[i] + a1 * b[ldb + i] + a2 * b[2 * ldb + i] + a3 * b[3 * ldb + i]


cdef inline void dense_axpy(float* y, const float* b, float a0, idx n) noexcept nogil:
    """``y[:n] += a0 * b[:n]``."""
    cdef idx i, l
    cdef idx nv = n - n % DENSE_LANES
    cdef float* yi
    cdef const float* bi
    for i in range(nv // DENSE_LANES):
        yi = y + i * DENSE_LANES
        bi = b + i * DENSE_LANES
        for l in range(DENSE_LANES):
            yi[l] += a0 * bi[l]
    for i in range(nv, n):
        y[i] += a0 * b[i]


cdef enum:
    # NOTE: OpenBLAS packs B on every call, which is the whole cost with a few rows of A;
    # common.pxi's sgemm has its own loops for them, but GCC keeps those at one vector per
    # iteration (1 x 384 @ 384 x 1000: 41 us against Numba's 35); these run four rows of B per
    # pass in 32-lane blocks
    DENSE_FEW_ROWS = 3

#: rows up to which ``dense_gemm_nn`` runs GEMVs instead of BLAS (Python-visible)
FEW_ROWS = DENSE_FEW_ROWS


cdef void dense_gemm_nn(idx m, idx n, idx k, float alpha, const float* a, idx lda,
                        const float* b, idx ldb, float* c, idx ldc) noexcept nogil:
    """Row-major ``C (m, n) = alpha * A (m, k) @ B (k, n)`` (C not read): up to
    DENSE_FEW_ROWS rows as one GEMV per row (C's row in L1 takes four rows of B per pass),
    more through ``sgemm`` (BLAS)."""
    cdef idx i, p
    cdef idx k4 = k - k % 4
    cdef float* cr
    cdef const float* ar
    if m > DENSE_FEW_ROWS or n < 8:
        sgemm(False, False, m, n, k, alpha, a, lda, b, ldb, <float>0.0, c, ldc)
        return
    for i in range(m):
        cr = c + i * ldc
        ar = a + i * lda
        memset(cr, 0, n * sizeof(float))
        for p in range(k4 // 4):
            dense_axpy4(cr, b + 4 * p * ldb, ldb, alpha * ar[4 * p], alpha * ar[4 * p + 1],
                        alpha * ar[4 * p + 2], alpha * ar[4 * p + 3], n)
        for p in range(k4, k):
            dense_axpy(cr, b + p * ldb, alpha * ar[p], n)


# ---- Gemm / MatMul ----------------------------------------------------------------------------

cdef struct dense_gemm_t:
    # one batched GEMM with its epilogue, as ``gemm_blocks`` describes it
    const float* a
    const float* b
    float* y
    const idx* offs
    idx nbatch, M, N, K, lda, ldb, rb, cb
    bint ta, tb
    float alpha
    const float* c
    idx sm, sn
    float beta
    const float* res
    bint has_res
    int code
    float pa, pb
    const float* slope  # PRelu (code A_PRELU): one slope per column; NULL otherwise


cdef void dense_gemm_epilogue(const dense_gemm_t* g, float* y, const float* res, idx m0, idx m1,
                              idx n0, idx n1) noexcept nogil:
    """Rows m0..m1, columns n0..n1 of ``y`` (row pitch N): ``+= beta * C`` (C's element
    strides sm, sn; sm < 0: no C), ``+= res`` (same positions), then the activation (PRelu:
    the slopes of columns n0..n1)."""
    # NOTE: the row loops are inline and a block of whole rows (n0 = 0, n1 = N) takes the
    # activation in one call: a call per row cost more than the arithmetic on rows of 32-128
    # floats (a 1x1 conv 32x32x32 -> 64 with LeakyRelu: 52 us against 41 without)
    cdef idx w = n1 - n0
    cdef idx N = g.N
    cdef idx m, j, o
    cdef float v
    cdef float* yr
    cdef const float* rr
    cdef const float* sl = g.slope + n0 if g.code == A_PRELU else NULL
    for m in range(m0, m1):
        o = m * N + n0
        yr = y + o
        if g.sm >= 0:
            if g.sn == 0:  # one value of C per row (C is (M, 1) or a scalar)
                v = g.beta * g.c[m * g.sm]
                for j in range(w):
                    yr[j] += v
            else:
                dense_axpy(yr, g.c + m * g.sm + n0 * g.sn, g.beta, w)
        if g.has_res:
            rr = res + o
            for j in range(w):
                yr[j] += rr[j]
        if sl != NULL:
            for j in range(w):  # PRelu, as prelu_inplace
                v = yr[j]
                yr[j] = v * sl[j] if v < <float>0.0 else v
    if g.code == A_NONE or g.code == A_PRELU:
        return
    if w == N:
        act_inplace(y + m0 * N, (m1 - m0) * N, g.code, g.pa, g.pb)
        return
    for m in range(m0, m1):
        act_inplace(y + m * N + n0, w, g.code, g.pa, g.pb)


cdef void dense_gemm_items(const dense_gemm_t* g, idx lo, idx hi) noexcept nogil:
    """Work items [lo, hi) of ``gemm_blocks``: (batch, row block, column block) triples, each
    one single-threaded BLAS call and its epilogue while the block is in cache."""
    cdef idx nrb = (g.M + g.rb - 1) // g.rb
    cdef idx ncb = (g.N + g.cb - 1) // g.cb
    cdef idx it, bi, rem, m0, n0, m1, n1, ao, bo, yo
    for it in range(lo, hi):
        bi = it // (nrb * ncb)
        rem = it - bi * nrb * ncb
        m0 = (rem // ncb) * g.rb
        n0 = (rem % ncb) * g.cb
        m1 = min(g.M, m0 + g.rb)
        n1 = min(g.N, n0 + g.cb)
        ao = g.offs[3 * bi] + (m0 if g.ta else m0 * g.lda)
        bo = g.offs[3 * bi + 1] + (n0 * g.ldb if g.tb else n0)
        yo = g.offs[3 * bi + 2]
        if g.ta or g.tb:
            sgemm(g.ta, g.tb, m1 - m0, n1 - n0, g.K, g.alpha, g.a + ao, g.lda, g.b + bo, g.ldb,
                  <float>0.0, g.y + yo + m0 * g.N + n0, g.N)
        else:
            dense_gemm_nn(m1 - m0, n1 - n0, g.K, g.alpha, g.a + ao, g.lda, g.b + bo, g.ldb,
                          g.y + yo + m0 * g.N + n0, g.N)
        dense_gemm_epilogue(g, g.y + yo, g.res + yo if g.has_res else NULL, m0, m1, n0, n1)


def gemm_blocks(int nt, const float[::1] a, const float[::1] b, float[::1] y,
                const idx[:, ::1] offs, idx M, idx N, idx K, bint ta, bint tb, float alpha,
                idx lda, idx ldb, idx rb, idx cb, const float[::1] c, idx sm, idx sn,
                float beta, const float[::1] res, bint has_res, int code, float pa, float pb):
    """Batched GEMM with a fused epilogue (Gemm-13, MatMul-13 with NumPy batching).

    For each batch ``i`` (``offs[i] = (a_off, b_off, y_off)``, element offsets into the flat
    ``a``, ``b``, ``y``): ``Y_i (M, N) = act(alpha * op(A_i) @ op(B_i) + beta * C + res)``.
    ``ta``/``tb``: A stored (K, M) / B stored (N, K); ``lda``/``ldb`` their row pitches; Y's
    pitch is N. C is broadcast through the element strides ``sm``/``sn`` (``sm < 0``: no C);
    ``res`` (same layout as ``y``) is added when ``has_res``; then activation ``code`` (pa, pb).
    Work items are (batch, block of ``rb`` rows, block of ``cb`` columns), ``nt`` slots.
    Raises ValueError for PRelu (its slope vector is ``gemm_packed``'s)."""
    cdef dense_gemm_t g
    g.a, g.b, g.y = cptr(a), cptr(b), mptr(y)
    g.offs = &offs[0, 0]
    g.nbatch, g.M, g.N, g.K, g.lda, g.ldb, g.rb, g.cb = offs.shape[0], M, N, K, lda, ldb, rb, cb
    g.ta, g.tb, g.alpha = ta, tb, alpha
    g.c, g.sm, g.sn, g.beta = cptr(c), sm, sn, beta
    g.res, g.has_res, g.code, g.pa, g.pb = cptr(res), has_res, code, pa, pb
    g.slope = NULL
    if code == A_PRELU:
        raise ValueError("gemm_blocks: PRelu takes a slope vector (gemm_packed)")
    cdef const dense_gemm_t* gp = &g
    cdef idx items = g.nbatch * ((M + rb - 1) // rb) * ((N + cb - 1) // cb)
    cdef int t
    if M <= 0 or N <= 0:
        return
    if nt <= 1:
        with nogil:
            dense_gemm_items(gp, 0, items)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        dense_gemm_items(gp, t * items // nt, (t + 1) * items // nt)


cdef struct dense_pk_t:
    const float* a
    const float* packed
    float* y
    idx M, N, K, lda, rb, cb
    idx ldr             # the residual's columns (and pitch): N, or fewer (``res_cols``)


cdef void dense_pk_items(const dense_pk_t* p, const dense_gemm_t* g, idx lo, idx hi) noexcept nogil:
    """Work items [lo, hi) of ``gemm_packed``: (row block, column block) pairs, each the packed
    GEMM of the block and then its epilogue while the block is in cache. A bias row as C
    (``sm == 0``, ``sn == 1``, ``beta == 1``) or no C, the residual and the activations with a
    register form are applied by the micro-kernel before its stores; the other activations
    then run over the block."""
    # NOTE: a separate pass over the block cost a 1x1 conv 32x32x32 -> 64 with bias, residual
    # and PRelu 45% of its GEMM's time (the block had left L1); in registers it costs ~nothing
    cdef idx ncb = (p.N + p.cb - 1) // p.cb
    cdef idx it, m0, n0, m1, n1, m
    cdef bint in_regs = g.sm < 0 or (g.sm == 0 and g.sn == 1 and g.beta == 1)
    cdef bint act_regs = sprat_act_in_regs(g.code)
    cdef sprat_pk_epi e
    e.bias = g.c if g.sm == 0 else NULL
    e.slope = g.slope
    e.code = g.code if act_regs else A_NONE
    e.a, e.b = g.pa, g.pb
    e.ldr = e.rn = p.ldr
    for it in range(lo, hi):
        m0 = (it // ncb) * p.rb
        n0 = (it % ncb) * p.cb
        m1 = min(p.M, m0 + p.rb)
        n1 = min(p.N, n0 + p.cb)
        if not in_regs:
            sprat_pk_gemm(m1 - m0, n0, n1, p.K, p.a + m0 * p.lda, p.lda, p.packed,
                          p.y + m0 * p.N, p.N)
            dense_gemm_epilogue(g, p.y, g.res if g.has_res else NULL, m0, m1, n0, n1)
            continue
        e.res = g.res + m0 * p.ldr if g.has_res else NULL
        sprat_pk_gemm_epi(m1 - m0, n0, n1, p.K, p.a + m0 * p.lda, p.lda, p.packed,
                          p.y + m0 * p.N, p.N, &e)
        if act_regs or g.code == A_NONE:
            continue
        if n1 - n0 == p.N:
            act_inplace(p.y + m0 * p.N, (m1 - m0) * p.N, g.code, g.pa, g.pb)
        else:
            for m in range(m0, m1):
                act_inplace(p.y + m * p.N + n0, n1 - n0, g.code, g.pa, g.pb)


cdef struct pk_call_t:
    # one ``gemm_packed`` call's checked arguments (``GemmPackedCall``)
    dense_pk_t p
    dense_gemm_t g
    int nt


cdef _gemm_packed_run(const pk_call_t* s):
    """A checked ``gemm_packed`` call: its items over its slots."""
    cdef const dense_pk_t* pp = &s.p
    cdef const dense_gemm_t* gp = &s.g
    cdef idx items = ((s.p.M + s.p.rb - 1) // s.p.rb) * ((s.p.N + s.p.cb - 1) // s.p.cb)
    cdef int t, nt = s.nt
    if s.p.M <= 0 or s.p.N <= 0:
        return
    cdef sprat_slots slots
    if nt <= 1:
        with nogil:
            dense_pk_items(pp, gp, 0, items)
        return
    sprat_slots_init(&slots, nt, items)
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        dense_pk_taken(pp, gp, &slots, t)


cdef class GemmPackedCall(_BoundCall):
    """One ``gemm_packed`` call with its arguments checked and bound once (``BOUND_CALLS``):
    calling it runs the product without parsing them again (~1.7 us a call). Raises as
    ``gemm_packed``."""
    cdef pk_call_t s

    def __call__(self):
        _gemm_packed_run(&self.s)


def gemm_packed(int nt, const float[::1] a, const float[::1] packed, float[::1] y, idx M, idx N,
                idx K, idx lda, idx rb, idx cb, const float[::1] c, idx sm, idx sn, float beta,
                const float[::1] res, bint has_res, int code, float pa, float pb,
                const float[::1] slope=None, idx res_cols=0, GemmPackedCall into=None):
    """``Y (M, N) = act(A (M, K) @ W (K, N) + beta * C + res)`` with W pre-packed
    (``packed``: ceil(N / PACKED_NR) panels of K x PACKED_NR float32, 64-byte aligned, as
    ``sprat.backends.cpu.linalg.pack_panels`` makes them). A's rows have pitch ``lda``; Y's
    pitch is N. C is broadcast through the element strides ``sm``/``sn`` (``sm < 0``: no C);
    ``res`` (Y's layout) is added when ``has_res``; then activation ``code`` (pa, pb; PRelu:
    ``slope``, N floats, one per column). Work items are blocks of ``rb`` rows x ``cb``
    columns (``cb`` a multiple of PACKED_NR), which ``nt`` slots take (``sprat_take``: each
    output element is computed by one item, the same way whichever slot runs it: the result
    does not depend on the claiming order). ``y`` may be ``res`` (in place)
    where C is a bias row (``sm == 0``, ``sn == 1``, ``beta == 1``) or absent: each tile then
    adds to what ``y`` holds. ``res_cols`` (0 < res_cols < N, with ``has_res``): ``res`` is
    (M, res_cols), zero-padded to N columns (``_residual_pad``: a channel Pad fused into a
    1x1 conv's residual); only where C is a bias row or absent. Only call it when
    ``packed_gemm_available()``. With ``into``: the checked arguments bound into that call
    object, nothing run. Raises ValueError when PRelu's slope is missing or short, or
    on a narrow residual that is short or with another C."""
    cdef pk_call_t s
    cdef dense_pk_t p
    p.a, p.packed, p.y = cptr(a), cptr(packed), mptr(y)
    p.M, p.N, p.K, p.lda, p.rb, p.cb = M, N, K, lda, rb, cb
    p.ldr = N
    if res_cols and has_res:
        if not 0 < res_cols < N or res.shape[0] < M * res_cols or not (
                sm < 0 or (sm == 0 and sn == 1 and beta == 1)):
            raise ValueError(f"gemm_packed: a residual of {res_cols} columns needs 0 < "
                             f"res_cols < N = {N}, {M * res_cols} floats and no C but a bias "
                             "row")
        p.ldr = res_cols
    cdef dense_gemm_t g
    g.N, g.c, g.sm, g.sn, g.beta = N, cptr(c), sm, sn, beta
    g.res, g.has_res, g.code, g.pa, g.pb = cptr(res), has_res, code, pa, pb
    g.slope = NULL
    if code == A_PRELU:
        if slope is None or slope.shape[0] < N:
            raise ValueError(f"gemm_packed: PRelu needs {N} slopes")
        g.slope = &slope[0]
    s.p, s.g, s.nt = p, g, nt
    if into is not None:
        into.s = s
        return
    _gemm_packed_run(&s)


cdef void dense_pk_taken(const dense_pk_t* p, const dense_gemm_t* g, sprat_slots* slots,
                         int t) noexcept nogil:
    """The items of ``gemm_packed`` slot ``t`` runs (``sprat_take``)."""
    cdef idx it = sprat_take(slots, t)
    while it >= 0:
        dense_pk_items(p, g, it, it + 1)
        it = sprat_take(slots, t)


# ---- fp16 weights (precision="low") ---------------------------------------------------------
# A constant weight is held as IEEE binary16 bit patterns (uint16) and widened to float32 right
# before use (F16C ``vcvtph2ps`` in the AVX2 build, integer ops in the baseline); products and
# sums stay float32.

def widen_f16(const unsigned short[::1] h, float[::1] out):
    """``out[:len(h)] = float32(h)`` for binary16 bit patterns ``h`` (exact for finite values).
    Raises ValueError when ``out`` is shorter than ``h``."""
    if out.shape[0] < h.shape[0]:
        raise ValueError("widen_f16: out is shorter than h")
    if h.shape[0]:
        with nogil:
            dense_widen(&h[0], &out[0], h.shape[0])


cdef inline void dense_f16_finish(float* y, idx w, const float* bias, bint has_bias,
                                  const float* res, bint has_res, int code, float pa,
                                  float pb) noexcept nogil:
    """Epilogue of one output row segment ``y[:w]``: ``+= bias[:w]`` when ``has_bias``,
    ``+= res[:w]`` when ``has_res``, then the activation."""
    cdef idx j
    if has_bias:
        for j in range(w):
            y[j] += bias[j]
    residual_act(y, res, w, has_res, code, pa, pb)


cdef void dense_gemv_f16_items(const float* a, const unsigned short* w, float* y, idx N, idx K,
                               idx cb, idx lo, idx hi, const float* bias, bint has_bias,
                               const float* res, bint has_res, int code, float pa,
                               float pb) noexcept nogil:
    """Column panels [lo, hi) of ``gemv_f16``: the panel of ``y`` (``cb`` floats, in L1)
    accumulates four weight rows per pass."""
    cdef idx it, n0, wd, k, j
    cdef idx k4 = K - K % 4
    cdef float* yr
    for it in range(lo, hi):
        n0 = it * cb
        wd = min(N, n0 + cb) - n0
        yr = y + n0
        for j in range(wd):
            yr[j] = <float>0.0
        for k in range(0, k4, 4):
            dense_axpy4_f16(yr, w + k * N + n0, N, a + k, wd)
        for k in range(k4, K):
            dense_axpy_f16(yr, w + k * N + n0, a[k], wd)
        dense_f16_finish(yr, wd, bias + n0 if has_bias else NULL, has_bias,
                         res + n0 if has_res else NULL, has_res, code, pa, pb)


def gemv_f16(const float[::1] a, const unsigned short[::1] w, float[::1] y, idx M, idx N,
             idx K, idx cb, int nt, const float[::1] bias, bint has_bias, const float[::1] res,
             bint has_res, int code, float pa, float pb, float[:, ::1] scratch):
    """One row (M == 1): ``y[N] = act(a[K] @ widen(w[K, N]) (+ bias[N]) (+ res[N]))``.

    ``w`` the weight as fp16 bits (K, N) flat; the arguments are those of
    ``gemm_f16_blocks`` (``scratch`` unused). Work items are panels of ``cb`` columns; each
    weight element is widened as it is read (the product is memory-bound)."""
    cdef idx ncb = (N + cb - 1) // cb
    cdef const float* pa_ = cptr(a)
    cdef const unsigned short* pw = &w[0] if w.shape[0] else NULL
    cdef float* py = mptr(y)
    cdef const float* pbias = cptr(bias)
    cdef const float* pr = cptr(res)
    cdef int t
    if nt <= 1:
        with nogil:
            dense_gemv_f16_items(pa_, pw, py, N, K, cb, 0, ncb, pbias, has_bias, pr, has_res,
                                 code, pa, pb)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        dense_gemv_f16_items(pa_, pw, py, N, K, cb, t * ncb // nt, (t + 1) * ncb // nt, pbias,
                             has_bias, pr, has_res, code, pa, pb)


cdef void dense_gemm_f16_items(const float* a, const unsigned short* w, float* y, idx M, idx N,
                               idx K, idx cb, idx lo, idx hi, const float* bias, bint has_bias,
                               const float* res, bint has_res, int code, float pa, float pb,
                               float* buf) noexcept nogil:
    """Column panels [lo, hi) of ``gemm_f16_blocks``: widen ``w[:, n0:n0+cb]`` into ``buf``
    (K x cb floats, in L2), one product (``dense_gemm_nn``: BLAS from four rows), then the
    epilogue row by row."""
    cdef idx it, n0, wd, k, m
    for it in range(lo, hi):
        n0 = it * cb
        wd = min(N, n0 + cb) - n0
        for k in range(K):
            dense_widen(w + k * N + n0, buf + k * wd, wd)
        dense_gemm_nn(M, wd, K, <float>1.0, a, K, buf, wd, y + n0, N)
        if has_bias or has_res or code != A_NONE:
            for m in range(M):
                dense_f16_finish(y + m * N + n0, wd, bias + n0 if has_bias else NULL, has_bias,
                                 res + m * N + n0 if has_res else NULL, has_res, code, pa, pb)


def gemm_f16_blocks(const float[::1] a, const unsigned short[::1] w, float[::1] y, idx M, idx N,
                    idx K, idx cb, int nt, const float[::1] bias, bint has_bias,
                    const float[::1] res, bint has_res, int code, float pa, float pb,
                    float[:, ::1] scratch):
    """``y[M, N] = act(a[M, K] @ widen(w[K, N]) (+ bias[N]) (+ res[M, N]))`` for any M.

    Work items are panels of ``cb`` columns; ``scratch`` (nt, >= K * cb) float32 holds each
    slot's widened panel, multiplied by BLAS (one thread per call)."""
    cdef idx ncb = (N + cb - 1) // cb
    cdef const float* pa_ = cptr(a)
    cdef const unsigned short* pw = &w[0] if w.shape[0] else NULL
    cdef float* py = mptr(y)
    cdef const float* pbias = cptr(bias)
    cdef const float* pr = cptr(res)
    cdef int t
    if M <= 0 or N <= 0:
        return
    if nt <= 1:
        with nogil:
            dense_gemm_f16_items(pa_, pw, py, M, N, K, cb, 0, ncb, pbias, has_bias, pr,
                                 has_res, code, pa, pb, dense_row(scratch, 0))
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        dense_gemm_f16_items(pa_, pw, py, M, N, K, cb, t * ncb // nt, (t + 1) * ncb // nt,
                             pbias, has_bias, pr, has_res, code, pa, pb, dense_row(scratch, t))


# ---- Softmax ---------------------------------------------------------------------------------

cdef enum:
    DENSE_CHUNK = 512  # columns per work item of a softmax along a middle axis


cdef void dense_softmax_row(const float* x, float* y, idx n, bint log) noexcept nogil:
    """``y[:n]`` = softmax (or log-softmax) of ``x[:n]`` (``x`` may be ``y``)."""
    cdef float m = dense_rowmax(x, n)
    cdef float s = <float>0.0
    cdef float e, shift
    cdef idx i
    if log:
        for i in range(n):
            s += exp32(x[i] - m)
        shift = m + logf(s)
        for i in range(n):
            y[i] = x[i] - shift
    else:
        for i in range(n):
            e = exp32(x[i] - m)
            y[i] = e
            s += e
        dense_scale(y, <float>1.0 / s, n)


cdef inline void dense_softmax_block(const float* x, float* y, idx L, idx I, idx n,
                                     bint log) noexcept nogil:
    """Softmax (or log-softmax) along L of ``n <= DENSE_LANES`` adjacent columns of a (L, I)
    slab (``x``, ``y`` at the block's first column, rows I apart): the running max and the
    sums of the block stay in registers (``m``, ``s``) while the L rows stream past."""
    cdef float m[DENSE_LANES]
    cdef float s[DENSE_LANES]
    cdef idx k, l
    cdef float e
    cdef const float* xk
    cdef float* yk
    for l in range(n):
        m[l] = x[l]
        s[l] = <float>0.0
    for k in range(1, L):
        xk = x + k * I
        for l in range(n):
            m[l] = fmax32(m[l], xk[l])
    for k in range(L):
        xk = x + k * I
        yk = y + k * I
        if log:
            for l in range(n):
                s[l] += exp32(xk[l] - m[l])
        else:
            for l in range(n):
                e = exp32(xk[l] - m[l])
                yk[l] = e
                s[l] += e
    for l in range(n):
        s[l] = m[l] + logf(s[l]) if log else <float>1.0 / s[l]
    for k in range(L):
        xk = x + k * I
        yk = y + k * I
        if log:
            for l in range(n):
                yk[l] = xk[l] - s[l]
        else:
            for l in range(n):
                yk[l] *= s[l]


cdef void dense_softmax_cols(const float* x, float* y, idx lo, idx hi, idx L, idx I,
                             bint log) noexcept nogil:
    """Items [lo, hi) of a softmax of (O, L, I) along L, I > 1: an item is (o, chunk of up to
    DENSE_CHUNK columns), run as blocks of DENSE_LANES columns (each pass vectorised across
    the block's columns, ``dense_softmax_block``) and a narrower last block."""
    cdef idx nch = (I + DENSE_CHUNK - 1) // DENSE_CHUNK
    cdef idx it, o, i0, n, base, b
    for it in range(lo, hi):
        o = it // nch
        i0 = (it - o * nch) * DENSE_CHUNK
        n = min(<idx>DENSE_CHUNK, I - i0)
        base = o * L * I + i0
        # NOTE: the full blocks pass the constant DENSE_LANES: once inlined, their loops have
        # a known trip count and ``m``/``s`` live in four vector registers each
        for b in range(n // DENSE_LANES):
            dense_softmax_block(x + base + b * DENSE_LANES, y + base + b * DENSE_LANES, L, I,
                                DENSE_LANES, log)
        b = n - n % DENSE_LANES
        if b < n:
            dense_softmax_block(x + base + b, y + base + b, L, I, n - b, log)


cdef void dense_softmax_items(const float* x, float* y, idx lo, idx hi, idx L, idx I,
                              bint log) noexcept nogil:
    cdef idx r
    if I == 1:
        for r in range(lo, hi):
            dense_softmax_row(x + r * L, y + r * L, L, log)
    else:
        dense_softmax_cols(x, y, lo, hi, L, I, log)


cdef struct rows_call_t:
    # one ``softmax`` or ``layernorm`` call's arguments (``RowsCall``)
    int kind, nt
    const float* x
    float* y
    idx O, L, I
    bint log
    const float* scale
    const float* bias
    float eps


cdef _rows_run(const rows_call_t* s):
    """A ``softmax`` (kind 0) or ``layernorm`` (kind 1) call: its rows over its slots."""
    cdef idx items = s.O if s.kind == 1 or s.I == 1 else s.O * ((s.I + DENSE_CHUNK - 1)
                                                               // DENSE_CHUNK)
    cdef int t, nt = s.nt
    if s.L <= 0 or items <= 0:
        return
    if nt <= 1:
        with nogil:
            if s.kind == 1:
                dense_layernorm_rows(s.x, s.y, 0, items, s.L, s.scale, s.bias, s.eps)
            else:
                dense_softmax_items(s.x, s.y, 0, items, s.L, s.I, s.log)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        if s.kind == 1:
            dense_layernorm_rows(s.x, s.y, t * items // nt, (t + 1) * items // nt, s.L,
                                 s.scale, s.bias, s.eps)
        else:
            dense_softmax_items(s.x, s.y, t * items // nt, (t + 1) * items // nt, s.L, s.I,
                                s.log)


cdef class RowsCall(_BoundCall):
    """One ``softmax`` or ``layernorm`` call with its arguments bound once
    (``BOUND_CALLS``)."""
    cdef rows_call_t s

    def __call__(self):
        _rows_run(&self.s)


def softmax(const float[::1] x, float[::1] y, idx O, idx L, idx I, bint log, int nt,
            RowsCall into=None):
    """Softmax-13 (LogSoftmax-13 when ``log``) of ``x`` viewed (O, L, I), along L, into ``y``
    (same layout). Work items: rows when I == 1, else (o, 512-column chunk) pairs. With
    ``into``: the arguments bound into that call object, nothing run."""
    cdef rows_call_t s = rows_call_t(0, nt, cptr(x), mptr(y), O, L, I, log, NULL, NULL, 0.0)
    if into is not None:
        into.s = s
        return
    _rows_run(&s)


# ---- LayerNormalization, BatchNormalization --------------------------------------------------

cdef void dense_layernorm_rows(const float* x, float* y, idx lo, idx hi, idx D,
                               const float* scale, const float* bias, float eps) noexcept nogil:
    """Rows [lo, hi) of length D: two passes over the row (in L1) for the mean and the
    variance, then ``y = (x - mean) * inv * scale + bias``."""
    cdef idx r
    cdef float mean, v, inv
    cdef const float* xr
    cdef float* yr
    for r in range(lo, hi):
        xr = x + r * D
        yr = y + r * D
        mean = dense_sum(xr, D) / <float>D
        v = dense_sqdev(xr, mean, D)
        inv = <float>1.0 / sqrtf(v / <float>D + eps)
        dense_normalise(yr, xr, mean, inv, scale, bias, D)


def layernorm(const float[::1] x, float[::1] y, idx rows, idx D, const float[::1] scale,
              const float[::1] bias, float eps, int nt, RowsCall into=None):
    """LayerNormalization-17 over rows of length D (``x``, ``y``: (rows, D)):
    ``y = (x - mean) / sqrt(var + eps) * scale + bias``, ``scale``/``bias`` D floats each
    (float32 statistics). Work items are rows. With ``into``: the arguments bound into that
    call object, nothing run."""
    cdef rows_call_t s = rows_call_t(1, nt, cptr(x), mptr(y), rows, D, 1, False, cptr(scale),
                                     cptr(bias), eps)
    if into is not None:
        into.s = s
        return
    _rows_run(&s)


cdef void dense_affine_block(const float* x, float* y, const float* res, const float* s,
                             const float* b, idx C, idx I, bint has_res, int code, float pa,
                             float pb) noexcept nogil:
    """One (C, I) block (NCHW planes): ``y = act(x * s[c] + b[c] (+ res))``."""
    cdef idx c
    for c in range(C):
        dense_fma_ss(y + c * I, x + c * I, s[c], b[c], I)
    residual_act(y, res, C * I, has_res, code, pa, pb)


cdef void dense_affine_runs(const float* x, float* y, const float* res, idx lo_run, idx hi_run,
                            idx total, const float* st, const float* bt, idx L, bint has_res,
                            int code, float pa, float pb) noexcept nogil:
    """NHWC runs [lo_run, hi_run) of ``L`` floats (``st``/``bt``: scale and shift tiled over
    whole pixels): one contiguous pass each, so 24 channels do not pay a call per pixel."""
    cdef idx q, lo, n
    for q in range(lo_run, hi_run):
        lo = q * L
        n = min(L, total - lo)
        dense_fma_vv(y + lo, x + lo, st, bt, n)
        residual_act(y + lo, res + lo if has_res else NULL, n, has_res, code, pa, pb)


cdef void dense_affine_items(const float* x, float* y, const float* res, idx lo, idx hi,
                             idx O, idx C, idx I, const float* s, const float* b, idx L,
                             bint has_res, int code, float pa, float pb) noexcept nogil:
    """Items [lo, hi) of ``channel_affine``: NHWC runs of ``L`` floats (I == 1), else whole
    (C, I) blocks (``L == 0``) or single (o, channel) planes (``L == 1``)."""
    cdef idx q, o, c, off
    if I == 1:
        dense_affine_runs(x, y, res, lo, hi, O * C, s, b, L, has_res, code, pa, pb)
        return
    for q in range(lo, hi):
        if L == 0:  # NOTE: L == 0 marks items of whole (C, I) blocks
            off = q * C * I
            dense_affine_block(x + off, y + off, res + off if has_res else NULL, s, b, C, I,
                               has_res, code, pa, pb)
        else:
            c = q % C
            off = q * I
            dense_affine_block(x + off, y + off, res + off if has_res else NULL, s + c, b + c,
                               1, I, has_res, code, pa, pb)


def channel_affine(const float[::1] x, float[::1] y, idx O, idx C, idx I, const float[::1] s,
                   const float[::1] b, const float[::1] res, bint has_res, int code, float pa,
                   float pb, int nt):
    """``x`` viewed (O, C, I): ``y = act(x * s[c] + b[c] (+ res))`` (BatchNormalization folded
    at prepare; NHWC: I == 1, NCHW: O == N). ``s``/``b`` hold the C values repeated
    (``tiled_bias``): NHWC runs over as many pixels at once. Work items: NHWC runs, else (C, I)
    blocks, or single (o, channel) planes when there are fewer blocks than slots."""
    cdef const float* px = cptr(x)
    cdef float* py = mptr(y)
    cdef const float* pr = cptr(res)
    cdef const float* ps = cptr(s)
    cdef const float* pb_ = cptr(b)
    cdef idx L, items
    cdef int t
    if I == 1:
        L = s.shape[0]
        items = (O * C + L - 1) // L
    elif O >= nt:
        L, items = 0, O
    else:
        L, items = 1, O * C
    if items <= 0:
        return
    if nt <= 1:
        with nogil:
            dense_affine_items(px, py, pr, 0, items, O, C, I, ps, pb_, L, has_res, code, pa, pb)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        dense_affine_items(px, py, pr, t * items // nt, (t + 1) * items // nt, O, C, I, ps, pb_,
                           L, has_res, code, pa, pb)


# ---- Attention -------------------------------------------------------------------------------

cdef struct dense_attn_t:
    # one Attention-23 (3-D form), as ``attention`` describes it
    const float* q
    const float* k
    const float* v
    const float* mask
    bint has_mask
    float* y
    idx B, H, G, Sq, Skv, D, Dv, qb
    float scale
    idx mb, mh, mq
    bint packed
    int simd


cdef extern from *:
    """
    /* Attention's softmax on score rows in place: + the mask row (when not NULL), then the
       softmax, in explicit SIMD: the mask add and the max in one pass, exp(x - max) and its
       sum in a second, the scale by 1 / sum in a third (AVX-512: left to the caller, each
       row's 1 / sum in ``inv_out``).
       The Cython loops they replace spent a quarter of the kernel's time (vit_tiny's 197
       keys) in the scalar 32-lane reduction of dense_rowmax, run twice per row. simd: 2
       AVX-512F (sprat_attn_softmax16_rows), 1 AVX2 + FMA (sprat_attn_softmax8, a row at a
       time, exp as sprat_exp8), 0 none (the Cython loops). exp(x - max) is 0 below
       SPRAT_ATTN_EXP_MIN: the clamp of those exps gives exp(-87.3) = FLT_MIN, which the scale
       by 1 / sum makes subnormal, and the product P @ V over subnormals ran 11x slower (a
       BERT padding mask of -10000 on a quarter of 128 keys: 4.2 ms against 0.38 ms); the
       exps flushed weigh below 2e-35 of the row's largest (exp(0) = 1). NaN stays NaN. */
    #define SPRAT_ATTN_EXP_MIN -80.0f
    #if SPRAT_PK
    /* sprat_attn_softmax16 over ``rows`` rows of n (pitch n) at once, ``mask`` (or NULL) row
       i at mask + i * mq, a fully masked row set to zeros: each pass runs over a group of
       SPRAT_ATTN_GROUP rows before the next pass starts, so one row's horizontal max / sum
       (a chain of dependent shuffles) overlaps the next row's pass instead of stalling its
       own; two accumulators per pass. One row at a time cost 355 cycles a row of 197 keys,
       about 2.5x its vector work. */
    #define SPRAT_ATTN_GROUP 4
    /* exp(x) for x = score - max <= 0 (NaN stays NaN) as sprat_pk_exp computes it (the same
       reduction and polynomial) with n rounded by the 1.5 * 2^23 shift instead of
       vrndscaleps and 2^n applied by vscalefps instead of the exponent bits: 17 vector ops
       instead of 22, no clamps (x <= 0 cannot overflow; below SPRAT_ATTN_EXP_MIN the caller
       flushes the result to 0, so -inf or a huge negative x, whose n is not an integer here,
       never reaches a row) */
    __attribute__((target("avx512f"), always_inline))
    static inline __m512 sprat_attn_exp16(__m512 x) {
        const __m512 shift = _mm512_set1_ps(12582912.0f);
        __m512 n = _mm512_sub_ps(
            _mm512_fmadd_ps(x, _mm512_set1_ps(SPRAT_EXP_LOG2E), shift), shift);
        __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(SPRAT_EXP_LN2_HI), x);
        r = _mm512_fnmadd_ps(n, _mm512_set1_ps(SPRAT_EXP_LN2_LO), r);
        __m512 p = _mm512_set1_ps(SPRAT_EXP_P0);
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(SPRAT_EXP_P1));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(SPRAT_EXP_P2));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(SPRAT_EXP_P3));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(SPRAT_EXP_P4));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(SPRAT_EXP_P5));
        __m512 y = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r),
                                 _mm512_set1_ps(1.0f));
        return _mm512_scalef_ps(y, n);
    }
    __attribute__((target("avx512f")))
    static void sprat_attn_softmax16_rows(float* s, Py_ssize_t rows, Py_ssize_t n,
                                          const float* mask, Py_ssize_t mq, float* inv_out) {
        const Py_ssize_t nv = n - n % 16;
        const __mmask16 t = (__mmask16)((1u << (n % 16)) - 1);
        const __m512 ninf = _mm512_set1_ps(-INFINITY), lo = _mm512_set1_ps(SPRAT_ATTN_EXP_MIN);
        for (Py_ssize_t i0 = 0; i0 < rows; i0 += SPRAT_ATTN_GROUP) {
            int g = (int)(rows - i0 < SPRAT_ATTN_GROUP ? rows - i0 : SPRAT_ATTN_GROUP);
            float mx[SPRAT_ATTN_GROUP], inv[SPRAT_ATTN_GROUP];
            for (int r = 0; r < g; r++) {
                float* x = s + (i0 + r) * n;
                const float* mr = mask != NULL ? mask + (i0 + r) * mq : NULL;
                __m512 a0 = ninf, a1 = ninf;
                Py_ssize_t i = 0;
                for (; i < nv; i += 16) {
                    __m512 v = _mm512_loadu_ps(x + i);
                    if (mr != NULL) {
                        v = _mm512_add_ps(v, _mm512_loadu_ps(mr + i));
                        _mm512_storeu_ps(x + i, v);
                    }
                    if ((i / 16) & 1)
                        a1 = _mm512_max_ps(a1, v);
                    else
                        a0 = _mm512_max_ps(a0, v);
                }
                if (t) {
                    __m512 v = _mm512_maskz_loadu_ps(t, x + i);
                    if (mr != NULL) {
                        v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(t, mr + i));
                        _mm512_mask_storeu_ps(x + i, t, v);
                    }
                    a1 = _mm512_mask_max_ps(a1, t, a1, v);
                }
                mx[r] = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
            }
            for (int r = 0; r < g; r++) {
                float* x = s + (i0 + r) * n;
                if (mx[r] == -INFINITY) {
                    memset(x, 0, (size_t)n * sizeof(float));
                    inv[r] = 0.0f;
                    continue;
                }
                const __m512 vmax = _mm512_set1_ps(mx[r]);
                __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
                Py_ssize_t i = 0;
                for (; i < nv; i += 16) {
                    __m512 v = _mm512_sub_ps(_mm512_loadu_ps(x + i), vmax);
                    __m512 e = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, lo, _CMP_NLT_UQ),
                                                   sprat_attn_exp16(v));
                    _mm512_storeu_ps(x + i, e);
                    if ((i / 16) & 1)
                        s1 = _mm512_add_ps(s1, e);
                    else
                        s0 = _mm512_add_ps(s0, e);
                }
                if (t) {
                    __m512 v = _mm512_sub_ps(_mm512_maskz_loadu_ps(t, x + i), vmax);
                    __m512 e = _mm512_maskz_mov_ps(
                        _mm512_cmp_ps_mask(v, lo, _CMP_NLT_UQ) & t, sprat_attn_exp16(v));
                    _mm512_mask_storeu_ps(x + i, t, e);
                    s1 = _mm512_add_ps(s1, e);
                }
                inv[r] = 1.0f / _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
            }
            for (int r = 0; r < g; r++)
                inv_out[i0 + r] = inv[r];
        }
    }
    #endif
    #if defined(__AVX2__) && defined(__FMA__)
    #define SPRAT_ATTN_AVX2 1
    static inline float sprat_attn_hmax8(__m256 v) {
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
        return _mm_cvtss_f32(h);
    }
    static inline float sprat_attn_hsum8(__m256 v) {
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
        return _mm_cvtss_f32(h);
    }
    /* one row; returns 0 when its max is -inf (fully masked), with the mask added, for the
       caller's scalar path */
    static int sprat_attn_softmax8(float* r, const float* mrow, Py_ssize_t n) {
        Py_ssize_t i = 0;
        const __m256 ninf = _mm256_set1_ps(-INFINITY);
        __m256 vm = ninf;
        /* lanes [0, n - i) of the tail */
        const __m256i t = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n % 8)),
                                             _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        const __m256 tf = _mm256_castsi256_ps(t);
        for (; i + 8 <= n; i += 8) {
            __m256 x = _mm256_loadu_ps(r + i);
            if (mrow != NULL) {
                x = _mm256_add_ps(x, _mm256_loadu_ps(mrow + i));
                _mm256_storeu_ps(r + i, x);
            }
            vm = _mm256_max_ps(vm, x);
        }
        if (i < n) {
            __m256 x = _mm256_maskload_ps(r + i, t);
            if (mrow != NULL) {
                x = _mm256_add_ps(x, _mm256_maskload_ps(mrow + i, t));
                _mm256_maskstore_ps(r + i, t, x);
            }
            vm = _mm256_max_ps(vm, _mm256_blendv_ps(ninf, x, tf));
        }
        float m = sprat_attn_hmax8(vm);
        if (m == -INFINITY)
            return 0;
        const __m256 vmax = _mm256_set1_ps(m), lo = _mm256_set1_ps(SPRAT_ATTN_EXP_MIN);
        __m256 vs = _mm256_setzero_ps();
        for (i = 0; i + 8 <= n; i += 8) {
            __m256 x = _mm256_sub_ps(_mm256_loadu_ps(r + i), vmax);
            __m256 e = _mm256_and_ps(_mm256_cmp_ps(x, lo, _CMP_NLT_UQ), sprat_exp8(x));
            _mm256_storeu_ps(r + i, e);
            vs = _mm256_add_ps(vs, e);
        }
        if (i < n) {
            __m256 x = _mm256_sub_ps(_mm256_maskload_ps(r + i, t), vmax);
            __m256 e = _mm256_and_ps(_mm256_cmp_ps(x, lo, _CMP_NLT_UQ), sprat_exp8(x));
            _mm256_maskstore_ps(r + i, t, e);
            vs = _mm256_add_ps(vs, _mm256_and_ps(e, tf));
        }
        const __m256 inv = _mm256_set1_ps(1.0f / sprat_attn_hsum8(vs));
        for (i = 0; i + 8 <= n; i += 8)
            _mm256_storeu_ps(r + i, _mm256_mul_ps(_mm256_loadu_ps(r + i), inv));
        if (i < n)
            _mm256_maskstore_ps(r + i, t, _mm256_mul_ps(_mm256_maskload_ps(r + i, t), inv));
        return 1;
    }
    #endif
    #ifndef SPRAT_ATTN_AVX2
    #define SPRAT_ATTN_AVX2 0
    #endif
    /* K_h^T times scale as panels, the layout of sprat_pk_pack_t (panel p holds
       scale * src[p*NR + j, k] at [k][j], zero past n), one 16-key half-row per gather:
       sprat_pk_pack_t's scalar transposing copy (a scattered store per element) took 8 % of
       vit_tiny's attention. */
    #if SPRAT_PK
    __attribute__((target("avx512f")))
    static void sprat_attn_pack_kt16(const float* src, Py_ssize_t lds, Py_ssize_t n,
                                     Py_ssize_t kdim, float scale, float* dst) {
        const __m512i rows = _mm512_mullo_epi32(
            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
            _mm512_set1_epi32((int)lds));
        const __m512 vs = _mm512_set1_ps(scale);
        for (Py_ssize_t j0 = 0; j0 < n; j0 += SPRAT_PK_NR) {
            float* d = dst + (j0 / SPRAT_PK_NR) * kdim * SPRAT_PK_NR;
            for (Py_ssize_t h = 0; h < SPRAT_PK_NR; h += 16) {
                Py_ssize_t j = j0 + h;
                __mmask16 m = (__mmask16)(j >= n ? 0 : n - j >= 16 ? 0xFFFF
                                          : (1u << (n - j)) - 1);
                const float* s = src + (j < n ? j : 0) * lds;
                for (Py_ssize_t k = 0; k < kdim; k++) {
                    __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, rows, s + k, 4);
                    _mm512_storeu_ps(d + k * SPRAT_PK_NR + h, _mm512_mul_ps(v, vs));
                }
            }
        }
    }
    /* the same with 8-key gathers on AVX2 + FMA CPUs */
    __attribute__((target("avx2,fma")))
    static void sprat_attn_pack_kt8(const float* src, Py_ssize_t lds, Py_ssize_t n,
                                    Py_ssize_t kdim, float scale, float* dst) {
        const __m256i rows = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                                _mm256_set1_epi32((int)lds));
        const __m256 vs = _mm256_set1_ps(scale);
        for (Py_ssize_t j0 = 0; j0 < n; j0 += SPRAT_PK_NR) {
            float* d = dst + (j0 / SPRAT_PK_NR) * kdim * SPRAT_PK_NR;
            for (Py_ssize_t h = 0; h < SPRAT_PK_NR; h += 8) {
                Py_ssize_t j = j0 + h;
                int w = (int)(j >= n ? 0 : n - j >= 8 ? 8 : n - j);
                const __m256 m = _mm256_castsi256_ps(_mm256_cmpgt_epi32(
                    _mm256_set1_epi32(w), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
                const float* s = src + (j < n ? j : 0) * lds;
                for (Py_ssize_t k = 0; k < kdim; k++) {
                    __m256 v = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), s + k, rows, m, 4);
                    _mm256_storeu_ps(d + k * SPRAT_PK_NR + h, _mm256_mul_ps(v, vs));
                }
            }
        }
    }
    #endif
    /* K_h^T packed as the CPU's packed GEMM runs (sprat_pk_mode: 2 AVX-512F, 1 AVX2) */
    static void sprat_attn_pack_kt(const float* src, Py_ssize_t lds, Py_ssize_t n,
                                   Py_ssize_t kdim, float scale, float* dst) {
    #if SPRAT_PK
        if (sprat_pk_mode() == 2) {
            sprat_attn_pack_kt16(src, lds, n, kdim, scale, dst);
            return;
        }
        if (sprat_pk_mode() == 1) {
            sprat_attn_pack_kt8(src, lds, n, kdim, scale, dst);
            return;
        }
    #endif
        sprat_pk_pack_t(src, lds, n, kdim, 1, scale, dst);
    }
    /* sprat_attn_softmax over rows (see sprat_attn_softmax16_rows); 0 when this simd has no
       rows form (the caller runs sprat_attn_softmax row by row) */
    static int sprat_attn_softmax_rows(float* s, Py_ssize_t rows, Py_ssize_t n,
                                       const float* mask, Py_ssize_t mq, int simd,
                                       float* inv) {
    #if SPRAT_PK
        if (simd >= 2) {
            sprat_attn_softmax16_rows(s, rows, n, mask, mq, inv);
            return 1;
        }
    #endif
        (void)s; (void)rows; (void)n; (void)mask; (void)mq; (void)simd; (void)inv;
        return 0;
    }
    static int sprat_attn_softmax(float* r, const float* mrow, Py_ssize_t n, int simd) {
    #if defined(__AVX2__) && defined(__FMA__)
        if (simd >= 1)
            return sprat_attn_softmax8(r, mrow, n);
    #endif
        (void)r; (void)mrow; (void)n; (void)simd;
        return 0;
    }
    """
    int SPRAT_ATTN_AVX2
    int sprat_attn_softmax(float* r, const float* mrow, idx n, int simd) noexcept nogil
    int sprat_attn_softmax_rows(float* s, idx rows, idx n, const float* mask, idx mq,
                                int simd, float* inv) noexcept nogil
    void sprat_attn_pack_kt(const float* src, idx lds, idx n, idx kdim, float scale,
                            float* dst) noexcept nogil


def attention_simd() -> int:
    """The widest SIMD form of attention's softmax this build and CPU run: 2 AVX-512F, 1 AVX2
    + FMA, 0 none (the baseline build: Cython loops)."""
    if sprat_pk_available():
        return 2
    return 1 if SPRAT_ATTN_AVX2 else 0


cdef void dense_attn_softmax_row(float* r, const float* mrow, idx n, bint has_mask,
                                 int simd) noexcept nogil:
    """In place on one score row ``r[:n]``: ``+= mrow`` when ``has_mask``, then the softmax;
    a fully masked row (max -inf) gives zeros (Attention-23), not NaN. ``simd``: the form of
    ``sprat_attn_softmax`` to run (``attention_simd()`` or less), 0 for these loops."""
    cdef idx i
    cdef float m
    if simd > 0:
        if sprat_attn_softmax(r, mrow if has_mask else NULL, n, simd):
            return
        has_mask = False  # NOTE: sprat_attn_softmax added it
    if has_mask:
        for i in range(n):
            r[i] += mrow[i]
    m = dense_rowmax(r, n)
    if m == -INFINITY:
        for i in range(n):
            r[i] = <float>0.0
        return
    dense_softmax_row(r, r, n, False)


cdef void dense_attn_items(const dense_attn_t* g, idx lo, idx hi, float* s) noexcept nogil:
    """Work items [lo, hi): (batch, head, block of ``qb`` query rows) triples. Per item:
    ``S = scale * Q_blk @ K_h^T`` into the slot's scores (qb x Skv), mask and row softmax in
    cache, then ``Y_blk = S @ V_h`` straight into Y's columns of head h. Grouped heads read kv
    head h // G. With ``packed`` (AVX-512F or AVX2 + FMA): K_h^T (scaled) and V_h are packed
    into panels once per kv head a slot meets (``attention_scratch`` floats ahead of the
    scores) and both products run the packed micro-kernel; else one BLAS call each, reading
    the heads in place."""
    cdef idx hkv = g.H // g.G
    cdef idx Sq = g.Sq
    cdef idx Skv = g.Skv
    cdef idx D = g.D
    cdef idx Dv = g.Dv
    cdef idx nqb = (Sq + g.qb - 1) // g.qb
    cdef idx it, pi, b, h, kh, i, mo, q0, rows
    cdef idx packed_key = -1
    cdef idx pk = (Skv + SPRAT_PK_NR - 1) // SPRAT_PK_NR * SPRAT_PK_NR * D
    cdef idx pv = (Dv + SPRAT_PK_NR - 1) // SPRAT_PK_NR * SPRAT_PK_NR * Skv
    cdef float* kp = s
    cdef float* vp = s + pk
    cdef const float* qr
    cdef const float* kr
    cdef const float* vr
    cdef float* yr
    cdef float* inv
    cdef bint deferred
    if g.packed:
        s = s + pk + pv
    # NOTE: the SIMD softmax leaves P unnormalised and gives 1 / sum per row here; Y's row
    # (Dv values) is scaled after the product instead of P's (Skv values)
    inv = s + g.qb * Skv
    for it in range(lo, hi):
        pi = it // nqb
        q0 = (it - pi * nqb) * g.qb
        rows = min(g.qb, Sq - q0)
        b = pi // g.H
        h = pi - b * g.H
        kh = h // g.G
        qr = g.q + (b * Sq + q0) * g.H * D + h * D
        kr = g.k + b * Skv * hkv * D + kh * D
        vr = g.v + b * Skv * hkv * Dv + kh * Dv
        yr = g.y + (b * Sq + q0) * g.H * Dv + h * Dv
        if g.packed:
            if packed_key != b * hkv + kh:
                sprat_attn_pack_kt(kr, hkv * D, Skv, D, g.scale, kp)
                sprat_pk_pack_n(vr, hkv * Dv, Skv, Dv, vp)
                packed_key = b * hkv + kh
            sprat_pk_gemm(rows, 0, Skv, D, qr, g.H * D, kp, s, Skv)
        else:
            sgemm(False, True, rows, Skv, D, g.scale, qr, g.H * D, kr, hkv * D, <float>0.0, s,
                  Skv)
        mo = b * g.mb + h * g.mh + q0 * g.mq
        deferred = sprat_attn_softmax_rows(s, rows, Skv, g.mask + mo if g.has_mask else NULL,
                                           g.mq, g.simd, inv)
        if not deferred:
            for i in range(rows):
                dense_attn_softmax_row(s + i * Skv, g.mask + mo + i * g.mq if g.has_mask
                                       else NULL, Skv, g.has_mask, g.simd)
        if g.packed:
            sprat_pk_gemm(rows, 0, Dv, Skv, s, Skv, vp, yr, g.H * Dv)
        else:
            sgemm(False, False, rows, Dv, Skv, <float>1.0, s, Skv, vr, hkv * Dv, <float>0.0,
                  yr, g.H * Dv)
        if deferred:
            for i in range(rows):
                dense_scale(yr + i * g.H * Dv, inv[i], Dv)


def attention_scratch(idx Skv, idx D, idx Dv, idx qb, bint packed) -> int:
    """Floats of one slot's scratch for ``attention``: the scores (qb x Skv) and their rows'
    1 / sum (qb), and with ``packed`` the panels of K_h^T and V_h ahead of them."""
    cdef idx extra = 0
    if packed:
        extra = ((Skv + SPRAT_PK_NR - 1) // SPRAT_PK_NR * SPRAT_PK_NR * D
                 + (Dv + SPRAT_PK_NR - 1) // SPRAT_PK_NR * SPRAT_PK_NR * Skv)
    return extra + qb * Skv + qb


def attention(int nt, const float[::1] q, const float[::1] k, const float[::1] v,
              const float[::1] mask, bint has_mask, float[::1] y, idx B, idx H, idx G, idx Sq,
              idx Skv, idx D, idx Dv, float scale, idx mb, idx mh, idx mq, idx qb,
              bint packed, int simd, float[:, ::1] scratch):
    """Attention-23, 3-D form: Q (B, Sq, H*D), K (B, Skv, Hkv*D), V (B, Skv, Hkv*Dv) with
    Hkv = H / G, optional additive ``mask`` (element strides ``mb``/``mh``/``mq`` for batch,
    head and query row, 0 where broadcast; rows of Skv) -> Y (B, Sq, H*Dv):
    ``Y_h = softmax(scale * Q_h @ K_h^T + mask) @ V_h`` per head. Work items are the
    (batch, head, block of ``qb`` query rows) triples, split evenly over ``nt`` slots;
    ``scratch`` (nt, >= ``attention_scratch(...)``) float32, rows 64-byte aligned, holds each
    slot's scores (and packed K_h^T / V_h with ``packed``, only when
    ``packed_gemm_available()``); ``simd``: the softmax's form, at most ``attention_simd()``
    (ValueError above it)."""
    if simd < 0 or simd > attention_simd():
        raise ValueError(f"attention: simd {simd} is not run by this build and CPU")
    cdef dense_attn_t g
    g.q, g.k, g.v = cptr(q), cptr(k), cptr(v)
    g.mask, g.has_mask, g.y = cptr(mask), has_mask, mptr(y)
    g.B, g.H, g.G, g.Sq, g.Skv, g.D, g.Dv, g.qb = B, H, G, Sq, Skv, D, Dv, max(qb, 1)
    g.scale, g.mb, g.mh, g.mq, g.packed, g.simd = scale, mb, mh, mq, packed, simd
    cdef const dense_attn_t* gp = &g
    cdef idx items = B * H * ((Sq + g.qb - 1) // g.qb)
    cdef int t
    if items <= 0:
        return
    if nt <= 1:
        with nogil:
            dense_attn_items(gp, 0, items, dense_row(scratch, 0))
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        dense_attn_items(gp, t * items // nt, (t + 1) * items // nt, dense_row(scratch, t))
