# The shared part of the compiled kernels: float32 math that vectorises, the fused-activation
# epilogues and the single-threaded GEMM every kernel calls. Included by kernels.pxi.
#
# Math (float32, measured against float64 over dense grids): exp 1e-7 relative (Cephes ``expf``
# polynomial), tanh 4e-7 and erf 4e-7 relative (Eigen's rational approximations ``ptanh_float`` /
# ``perf_float``): only +, *, /, floor, min/max selects and a bit cast, which the C compiler
# vectorises (libm's expf is a call per element).
#
# Activation codes encode ``sprat.ir.fused`` activations as (code, a, b) (``_math.ACT``):
# one compiled epilogue serves them all, branching once per call, outside its loops. PRelu
# (``A_PRELU``) takes a slope per output channel instead of (a, b): only the epilogues that take
# a ``slope`` vector (the convs') apply it (``act_slope``).

from libc.math cimport INFINITY, fabsf, floorf, sqrtf
from libc.string cimport memcpy, memset

cimport openmp

ctypedef Py_ssize_t idx

cdef enum:
    A_NONE = 0
    A_RELU = 1
    A_CLIP = 2
    A_SIGMOID = 3
    A_HARDSIGMOID = 4
    A_HARDSWISH = 5
    A_LEAKYRELU = 6
    A_TANH = 7
    A_SILU = 8
    A_GELU = 9
    A_PRELU = 10


#: the activation codes, for the Python side (``_math.ACT`` must agree: tested)
ACT_CODES = {"Relu": A_RELU, "Clip": A_CLIP, "Sigmoid": A_SIGMOID, "HardSigmoid": A_HARDSIGMOID,
             "HardSwish": A_HARDSWISH, "LeakyRelu": A_LEAKYRELU, "Tanh": A_TANH, "Silu": A_SILU,
             "Gelu": A_GELU, "PRelu": A_PRELU}


cdef class _BoundCall:
    """The base of the call objects of ``bound`` (``BOUND_CALLS``): ``Cls(args, entry)`` calls
    ``entry(*args, into=self)``, which checks and parses the arguments and stores them in the
    subclass's struct instead of running; calling the object runs them. ``args`` (a tuple) is
    kept here, so the arrays its pointers read stay alive. Raises as ``entry(*args)``."""
    cdef readonly tuple args

    def __init__(self, args, entry):
        self.args = tuple(args)
        entry(*self.args, into=self)


cdef inline const float* cptr(const float[::1] v) noexcept nogil:
    """The first element of ``v``, NULL when it is empty (an absent residual, bias or table)."""
    return &v[0] if v.shape[0] > 0 else NULL


cdef inline float* mptr(float[::1] v) noexcept nogil:
    """The first element of the writable ``v``, NULL when it is empty."""
    return &v[0] if v.shape[0] > 0 else NULL


cdef inline void copy_short(unsigned char* d, const unsigned char* s, idx n) noexcept nogil:
    """``d[:n] = s[:n]`` (bytes) for runs that do not overlap. Short runs move as two
    overlapping fixed-size blocks, which the compiler inlines; a ``memcpy`` of a variable
    size is a library call per run (measured: a 3-channel 3x3 stem at 320x320 ~10 % faster,
    ``conv_copy``; NHWC SpaceToDepth of a 3-channel image ~2x NumPy's copy, ``copy_runs``)."""
    if n > 64:
        memcpy(d, s, n)
    elif n >= 32:
        memcpy(d, s, 32)
        memcpy(d + n - 32, s + n - 32, 32)
    elif n >= 16:
        memcpy(d, s, 16)
        memcpy(d + n - 16, s + n - 16, 16)
    elif n >= 8:
        memcpy(d, s, 8)
        memcpy(d + n - 8, s + n - 8, 8)
    elif n >= 4:
        memcpy(d, s, 4)
        memcpy(d + n - 4, s + n - 4, 4)
    else:
        while n > 0:
            n -= 1
            d[n] = s[n]


cdef inline float fmax32(float u, float v) noexcept nogil:
    """max as a select; NaN in u propagates (as Python's ``max(u, v)``)."""
    return v if v > u else u


cdef inline float fmin32(float u, float v) noexcept nogil:
    """min as a select; NaN in u propagates."""
    return v if v < u else u


cdef inline float bits_to_f32(int bits) noexcept nogil:
    cdef float f
    memcpy(&f, &bits, 4)
    return f


cdef extern from "simd/vecmath.h":
    # exp's clamps, ln 2 in two parts and polynomial, shared with the SIMD forms
    const float SPRAT_EXP_LO, SPRAT_EXP_HI, SPRAT_EXP_LOG2E, SPRAT_EXP_LN2_HI, SPRAT_EXP_LN2_LO
    const float SPRAT_EXP_P0, SPRAT_EXP_P1, SPRAT_EXP_P2, SPRAT_EXP_P3, SPRAT_EXP_P4
    const float SPRAT_EXP_P5
    # the activation codes the AVX2 kernels' tiles apply in registers (false in the baseline)
    bint sprat_act_in_regs(int code) noexcept nogil


cdef inline float exp32(float x) noexcept nogil:
    """exp(x); inputs clamped to [-87.3, 88.7] (so exp(-inf) = 1.2e-38, not 0)."""
    x = fmin32(fmax32(x, SPRAT_EXP_LO), SPRAT_EXP_HI)
    cdef float n = floorf(x * SPRAT_EXP_LOG2E + <float>0.5)
    cdef float r = x - n * SPRAT_EXP_LN2_HI - n * SPRAT_EXP_LN2_LO
    cdef float p = SPRAT_EXP_P0
    p = p * r + SPRAT_EXP_P1
    p = p * r + SPRAT_EXP_P2
    p = p * r + SPRAT_EXP_P3
    p = p * r + SPRAT_EXP_P4
    p = p * r + SPRAT_EXP_P5
    cdef float y = p * r * r + r + <float>1.0
    return y * bits_to_f32((<int>n + 127) << 23)


cdef inline float sigmoid32(float x) noexcept nogil:
    return <float>1.0 / (<float>1.0 + exp32(-x))


cdef inline float tanh32(float x) noexcept nogil:
    """tanh(x), Eigen's [13/6] rational approximation on [-7.9, 7.9]."""
    x = fmin32(fmax32(x, -<float>7.90531110763549805), <float>7.90531110763549805)
    cdef float x2 = x * x
    cdef float p = -<float>2.76076847742355e-16
    p = p * x2 + <float>2.00018790482477e-13
    p = p * x2 + -<float>8.60467152213735e-11
    p = p * x2 + <float>5.12229709037114e-08
    p = p * x2 + <float>1.48572235717979e-05
    p = p * x2 + <float>6.37261928875436e-04
    p = p * x2 + <float>4.89352455891786e-03
    cdef float q = <float>1.19825839466702e-06
    q = q * x2 + <float>1.18534705686654e-04
    q = q * x2 + <float>2.26843463243900e-03
    q = q * x2 + <float>4.89352518554385e-03
    return x * p / q


cdef inline float erf32(float x) noexcept nogil:
    """erf(x), Eigen's rational approximation on [-4, 4]."""
    x = fmin32(fmax32(x, -<float>4.0), <float>4.0)
    cdef float x2 = x * x
    cdef float p = -<float>2.72614225801306e-10
    p = p * x2 + <float>2.77068142495902e-08
    p = p * x2 + -<float>2.10102402082508e-06
    p = p * x2 + -<float>5.69250639462346e-05
    p = p * x2 + -<float>7.34990630326855e-04
    p = p * x2 + -<float>2.95459980854025e-03
    p = p * x2 + -<float>1.60960333262415e-02
    cdef float q = -<float>1.45660718464996e-05
    q = q * x2 + -<float>2.13374055278905e-04
    q = q * x2 + -<float>1.68282697438203e-03
    q = q * x2 + -<float>7.37332916720468e-03
    q = q * x2 + -<float>1.42647390514189e-02
    return x * p / q


cdef extern from *:
    """
    /* Work items of a parallel region shared out as pthreadpool does: each slot owns a
       contiguous range (the static split: its blocks follow one another, and the next op's
       share of a map is mostly the one this slot just wrote, still in its cache) and takes
       its items one at a time through an atomic cursor; a slot that finishes its range takes
       the next items of the others' (a slot slowed by another process on its core then hands
       part of its share over instead of holding the others up). Ranges on cache lines of
       their own; beyond SPRAT_MAX_SLOTS slots, slot t starts on range t % SPRAT_MAX_SLOTS. */
    #define SPRAT_MAX_SLOTS 64
    typedef struct { Py_ssize_t next, end; char pad[48]; } sprat_range;
    typedef struct { sprat_range r[SPRAT_MAX_SLOTS]; int n; } sprat_slots;
    static inline void sprat_slots_init(sprat_slots *s, int nt, Py_ssize_t items) {
        if (nt > SPRAT_MAX_SLOTS)
            nt = SPRAT_MAX_SLOTS;
        s->n = nt;
        for (int t = 0; t < nt; t++) {
            s->r[t].next = t * items / nt;
            s->r[t].end = (t + 1) * items / nt;
        }
    }
    /* how many items the slots share */
    static inline Py_ssize_t sprat_slots_items(const sprat_slots *s) {
        return s->r[s->n - 1].end;
    }
    /* the next item slot t takes: its own range's next, else another's; -1 when none is left */
    static inline Py_ssize_t sprat_take(sprat_slots *s, int t) {
        for (int k = 0; k < s->n; k++) {
            sprat_range *q = &s->r[(t % s->n + k) % s->n];
            if (__atomic_load_n(&q->next, __ATOMIC_RELAXED) < q->end) {
                Py_ssize_t it = __atomic_fetch_add(&q->next, 1, __ATOMIC_RELAXED);
                if (it < q->end)
                    return it;
            }
        }
        return -1;
    }
    """
    ctypedef struct sprat_slots:
        int n
    void sprat_slots_init(sprat_slots* s, int nt, idx items) noexcept nogil
    idx sprat_slots_items(const sprat_slots* s) noexcept nogil
    idx sprat_take(sprat_slots* s, int t) noexcept nogil


cdef enum:
    SPRAT_CLAIM_PER_SLOT = 4

#: work items per slot a parallel kernel whose slots take items one at a time (``sprat_take``)
#: is cut into, where its blocks stay large enough (``linalg.packed_blocks``,
#: ``conv.direct_blocks``, the blocked depthwise)
CLAIM_ITEMS = SPRAT_CLAIM_PER_SLOT


cdef extern from *:
    """
    /* AVX2 loops for the activations whose clamps and exp the C compiler cannot vectorise
       well: a select that keeps NaN (u > v ? u : v written NaN-safely) becomes compare + blend,
       where _mm256_max_ps(v, u) is one instruction with exactly the semantics of fmax32(u, v)
       (it returns its second operand when either is NaN). The same polynomial as exp32.
       Returns how many leading elements it did (a multiple of 8); 0 without AVX2. */
    #if defined(__AVX2__) && defined(__FMA__)
    #include <immintrin.h>
    static Py_ssize_t sprat_act8(float *y, Py_ssize_t n, int code, float a, float b) {
        Py_ssize_t i = 0, end = n & ~(Py_ssize_t)7;
        const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
        const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
        const __m256 half = _mm256_set1_ps(0.5f), sixth = _mm256_set1_ps(1.0f / 6.0f);
        switch (code) {
        case 2: /* Clip: fmin32(fmax32(v, a), b) */
            for (; i < end; i += 8) {
                __m256 v = _mm256_loadu_ps(y + i);
                _mm256_storeu_ps(y + i, _mm256_min_ps(vb, _mm256_max_ps(va, v)));
            }
            return end;
        case 3: /* Sigmoid */
            for (; i < end; i += 8) {
                __m256 v = _mm256_loadu_ps(y + i);
                __m256 e = sprat_exp8(_mm256_sub_ps(zero, v));
                _mm256_storeu_ps(y + i, _mm256_div_ps(one, _mm256_add_ps(one, e)));
            }
            return end;
        case 4: /* HardSigmoid: fmin32(fmax32(a*v + b, 0), 1) */
            for (; i < end; i += 8) {
                __m256 v = _mm256_fmadd_ps(va, _mm256_loadu_ps(y + i), vb);
                _mm256_storeu_ps(y + i, _mm256_min_ps(one, _mm256_max_ps(zero, v)));
            }
            return end;
        case 5: /* HardSwish: v * fmin32(fmax32(v/6 + 1/2, 0), 1) */
            for (; i < end; i += 8) {
                __m256 v = _mm256_loadu_ps(y + i);
                __m256 t = _mm256_fmadd_ps(v, sixth, half);
                t = _mm256_min_ps(one, _mm256_max_ps(zero, t));
                _mm256_storeu_ps(y + i, _mm256_mul_ps(v, t));
            }
            return end;
        case 8: /* SiLU */
            for (; i < end; i += 8) {
                __m256 v = _mm256_loadu_ps(y + i);
                __m256 e = sprat_exp8(_mm256_sub_ps(zero, v));
                _mm256_storeu_ps(y + i, _mm256_div_ps(v, _mm256_add_ps(one, e)));
            }
            return end;
        case 9: /* Gelu: v / 2 * (1 + erf(v / sqrt(2))) */
            for (; i < end; i += 8) {
                __m256 v = _mm256_loadu_ps(y + i);
                __m256 e = sprat_erf8(_mm256_mul_ps(v, _mm256_set1_ps(0.7071067811865476f)));
                _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(half, v),
                                                      _mm256_add_ps(one, e)));
            }
            return end;
        default:
            return 0;
        }
    }
    #else
    static Py_ssize_t sprat_act8(float *y, Py_ssize_t n, int code, float a, float b) {
        (void)y; (void)n; (void)code; (void)a; (void)b;
        return 0;
    }
    #endif
    """
    idx sprat_act8(float* y, idx n, int code, float a, float b) noexcept nogil


cdef void act_inplace(float* y, idx n, int code, float a, float b) noexcept nogil:
    """Activation ``code`` with params (a, b) on ``y[:n]`` in place (the AVX2 build runs the
    clamp- and exp-based ones through ``sprat_act8`` first, then the tail here)."""
    cdef idx i
    cdef float v, p
    cdef idx done = sprat_act8(y, n, code, a, b)
    y += done
    n -= done
    if code == A_RELU:
        # NOTE: (v + |v|) / 2 is exact and NaN-propagating
        for i in range(n):
            v = y[i]
            y[i] = (v + fabsf(v)) * <float>0.5
    elif code == A_CLIP:
        for i in range(n):
            y[i] = fmin32(fmax32(y[i], a), b)
    elif code == A_SIGMOID:
        for i in range(n):
            y[i] = sigmoid32(y[i])
    elif code == A_HARDSIGMOID:
        for i in range(n):
            y[i] = fmin32(fmax32(a * y[i] + b, <float>0.0), <float>1.0)
    elif code == A_HARDSWISH:
        for i in range(n):
            v = y[i]
            y[i] = v * fmin32(fmax32(v * <float>(<float>1.0 / <float>6.0) + <float>0.5, <float>0.0), <float>1.0)
    elif code == A_LEAKYRELU:
        for i in range(n):
            v = y[i]
            p = (v + fabsf(v)) * <float>0.5  # relu(v), exact; then v or a*v exactly
            y[i] = p + a * (v - p)
    elif code == A_TANH:
        for i in range(n):
            y[i] = tanh32(y[i])
    elif code == A_SILU:
        for i in range(n):
            v = y[i]
            y[i] = v * sigmoid32(v)
    elif code == A_GELU:
        for i in range(n):
            v = y[i]
            y[i] = <float>0.5 * v * (<float>1.0 + erf32(v * <float>0.7071067811865476))


cdef void prelu_inplace(float* y, idx n, const float* slope) noexcept nogil:
    """PRelu on ``y[:n]`` in place with one slope per element, ``slope[:n]``: ``v`` where
    ``v >= 0`` (and NaN), else ``slope * v`` (ONNX PRelu-16, as ``np.where(v < 0, v * s, v)``)."""
    cdef idx i
    cdef float v
    for i in range(n):  # NOTE: a select the compiler vectorises (compare + blend)
        v = y[i]
        y[i] = v * slope[i] if v < <float>0.0 else v


cdef inline void act_slope(float* y, idx n, int code, float a, float b,
                           const float* slope) noexcept nogil:
    """Activation ``code`` on ``y[:n]``; PRelu with the per-element slopes ``slope[:n]``."""
    if code == A_PRELU:
        prelu_inplace(y, n, slope)
    elif code != A_NONE:
        act_inplace(y, n, code, a, b)


cdef inline void residual_act(float* y, const float* res, idx n, bint has_res, int code,
                              float a, float b) noexcept nogil:
    """In place on ``y[:n]``: ``y += res[:n]`` when ``has_res``, then activation ``code``."""
    cdef idx k
    if has_res:
        for k in range(n):
            y[k] += res[k]
    if code != A_NONE:
        act_inplace(y, n, code, a, b)


cdef void rows_inplace(float* y, idx nrows, idx m, const float* bias, idx nbias,
                       const float* res, bint has_res, int code, float a, float b,
                       const float* slope) noexcept nogil:
    """In place on the rows ``y[: nrows*m]`` (row length ``m``): add the bias, add ``res`` at
    the same positions when ``has_res``, then activation ``code``. ``bias`` (``nbias``
    floats) is the row bias repeated ``g >= 1`` times (``tiled_bias``): ``g`` rows are one run,
    touched once while in L1. ``slope`` (PRelu; NULL otherwise) is tiled as ``bias``."""
    cdef idx g = max(1, nbias // m)
    cdef idx r0, n, k
    cdef float* run
    cdef const float* rr
    r0 = 0
    while r0 < nrows:
        n = min(g, nrows - r0) * m
        run = y + r0 * m
        if has_res:
            rr = res + r0 * m
            for k in range(n):
                run[k] += bias[k] + rr[k]
        else:
            for k in range(n):
                run[k] += bias[k]
        act_slope(run, n, code, a, b, slope)
        r0 += g


cdef void gather_rows(const float* acc, idx lda, float* y, idx nrows, idx ncols, idx m,
                      const float* bias, idx nbias, const float* res, bint has_res, int code,
                      float a, float b, const float* slope) noexcept nogil:
    """``y`` rows of ``ncols * m`` from ``acc`` rows of pitch ``lda`` (skips padding columns):
    ``y[(r*ncols + j)*m + c] = act(acc[r*lda + j*m + c] + bias[c] (+ res))``; ``bias`` (and
    PRelu's ``slope``, NULL otherwise) tiled ``g >= 1`` times as for ``rows_inplace``."""
    cdef idx ln = ncols * m
    cdef idx g = max(1, nbias // m)
    cdef idx r, j0, n, k
    cdef float* d
    cdef const float* v
    cdef const float* rr
    for r in range(nrows):
        j0 = 0
        while j0 < ncols:
            n = min(g, ncols - j0) * m
            d = y + r * ln + j0 * m
            v = acc + r * lda + j0 * m
            if has_res:
                rr = res + r * ln + j0 * m
                for k in range(n):
                    d[k] = v[k] + bias[k] + rr[k]
            else:
                for k in range(n):
                    d[k] = v[k] + bias[k]
            if code == A_PRELU:
                prelu_inplace(d, n, slope)
            j0 += g
        if code != A_NONE and code != A_PRELU:
            act_inplace(y + r * ln, ln, code, a, b)


def max_threads() -> int:
    """OpenMP's thread limit (OMP_NUM_THREADS, default: the CPUs this process may run on)."""
    return openmp.omp_get_max_threads()


# ---- GEMM -----------------------------------------------------------------------------------
# NumPy's own BLAS (OpenBLAS in NumPy's wheels), found at import by sprat's Python side and bound
# here as a function pointer: 64-bit integers (``scipy_cblas_sgemm64_``) or 32-bit ones.

ctypedef void (*sgemm64_t)(int, int, int, long long, long long, long long, float, const float*,
                           long long, const float*, long long, float, float*,
                           long long) noexcept nogil
ctypedef void (*sgemm32_t)(int, int, int, int, int, int, float, const float*, int, const float*,
                           int, float, float*, int) noexcept nogil

cdef sgemm64_t _sgemm64 = NULL
cdef sgemm32_t _sgemm32 = NULL

cdef enum:
    ROW_MAJOR = 101
    NO_TRANS = 111
    TRANS = 112
    # NOTE: OpenBLAS packs B on every call; with 1-3 rows of A that packing is the whole cost
    # (1 x 256 @ 256 x 258: 20 us in OpenBLAS, 6 us as a plain loop); such products run loops
    SMALL_M = 3
    SMALL_MIN_N = 8


def bind_blas(size_t address, bint ilp64):
    """Bind ``cblas_sgemm`` at ``address`` (64-bit integer interface when ``ilp64``); 0: no
    BLAS, GEMMs then run a slow portable loop."""
    global _sgemm64, _sgemm32
    _sgemm64 = <sgemm64_t>address if ilp64 else NULL
    _sgemm32 = <sgemm32_t>address if not ilp64 else NULL


ctypedef int (*blas_get_t)() noexcept nogil
ctypedef void (*blas_set_t)(int) noexcept nogil
cdef blas_get_t _blas_get = NULL
cdef blas_set_t _blas_set = NULL


def bind_blas_threads(size_t get, size_t set_):
    """Bind the BLAS's own thread-count functions (OpenBLAS's ``openblas_get_num_threads``
    / ``openblas_set_num_threads``) at these addresses for ``blas_hold_one``; 0: unbound."""
    global _blas_get, _blas_set
    _blas_get = <blas_get_t>get if get and set_ else NULL
    _blas_set = <blas_set_t>set_ if get and set_ else NULL


def blas_hold_one() -> int:
    """The bound BLAS's thread count, which is then set to 1 (-1: none bound). NOTE: called
    around every run (``threading.limits``): two ctypes calls cost ~1 us of it."""
    if _blas_get == NULL:
        return -1
    cdef int n = _blas_get()
    if n != 1:
        _blas_set(1)
    return n


def blas_restore(int n):
    """Give the bound BLAS back ``n`` threads (``blas_hold_one``'s count; <= 1: nothing)."""
    if n > 1 and _blas_set != NULL:
        _blas_set(n)


cdef void _small_nn(idx m, idx n, idx k, float alpha, const float* a, idx lda, const float* b,
                    idx ldb, float beta, float* c, idx ldc) noexcept nogil:
    """C = alpha * A @ B + beta * C for a few rows of A: each row of B read once."""
    cdef idx i, j, p
    cdef float av
    cdef float* cr
    cdef const float* br
    for i in range(m):
        cr = c + i * ldc
        if beta == <float>0.0:
            for j in range(n):
                cr[j] = <float>0.0
        elif beta != <float>1.0:
            for j in range(n):
                cr[j] *= beta
    for p in range(k):
        br = b + p * ldb
        for i in range(m):
            av = alpha * a[i * lda + p]
            cr = c + i * ldc
            for j in range(n):
                cr[j] += av * br[j]


cdef void _small_nt(idx m, idx n, idx k, float alpha, const float* a, idx lda, const float* b,
                    idx ldb, float beta, float* c, idx ldc) noexcept nogil:
    """C = alpha * A @ B^T + beta * C (B stored n x k) for a few rows: a dot per element."""
    cdef idx i, j, q
    cdef float acc
    cdef const float* ar
    cdef const float* br
    for i in range(m):
        ar = a + i * lda
        for j in range(n):
            br = b + j * ldb
            acc = <float>0.0
            for q in range(k):
                acc += ar[q] * br[q]
            c[i * ldc + j] = alpha * acc if beta == <float>0.0 else alpha * acc + beta * c[i * ldc + j]


cdef void _portable(bint ta, bint tb, idx m, idx n, idx k, float alpha, const float* a, idx lda,
                    const float* b, idx ldb, float beta, float* c, idx ldc) noexcept nogil:
    """Row-major GEMM as plain loops: only when no BLAS was found."""
    cdef idx i, j, p
    cdef float av
    for i in range(m):
        for j in range(n):
            c[i * ldc + j] = <float>0.0 if beta == <float>0.0 else beta * c[i * ldc + j]
        for p in range(k):
            av = alpha * (a[p * lda + i] if ta else a[i * lda + p])
            if tb:
                for j in range(n):
                    c[i * ldc + j] += av * b[j * ldb + p]
            else:
                for j in range(n):
                    c[i * ldc + j] += av * b[p * ldb + j]


cdef void sgemm(bint ta, bint tb, idx m, idx n, idx k, float alpha, const float* a, idx lda,
                const float* b, idx ldb, float beta, float* c, idx ldc) noexcept nogil:
    """Row-major ``C = alpha * op(A) @ op(B) + beta * C`` (``ta``/``tb``: the stored matrix is
    the transpose: A stored k x m, B stored n x k; leading dimensions in elements). With
    ``beta == 0`` C is not read. Runs on the calling thread (BLAS is held to one thread)."""
    cdef idx i, j
    if m <= 0 or n <= 0:
        return
    if k <= 0:
        for i in range(m):
            for j in range(n):
                c[i * ldc + j] = <float>0.0 if beta == <float>0.0 else beta * c[i * ldc + j]
        return
    if not ta and m <= SMALL_M and n >= SMALL_MIN_N:
        if tb:
            _small_nt(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
        else:
            _small_nn(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
        return
    if _sgemm64 != NULL:
        _sgemm64(ROW_MAJOR, TRANS if ta else NO_TRANS, TRANS if tb else NO_TRANS, m, n, k,
                 alpha, a, lda, b, ldb, beta, c, ldc)
    elif _sgemm32 != NULL:
        _sgemm32(ROW_MAJOR, TRANS if ta else NO_TRANS, TRANS if tb else NO_TRANS, <int>m,
                 <int>n, <int>k, alpha, a, <int>lda, b, <int>ldb, beta, c, <int>ldc)
    else:
        _portable(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)


def sgemm_flat(bint ta, bint tb, idx m, idx n, idx k, float alpha, const float[::1] a,
               idx a_off, idx lda, const float[::1] b, idx b_off, idx ldb, float beta,
               float[::1] c, idx c_off, idx ldc):
    """``sgemm`` on flat float32 arrays with element offsets (tests, Python-side kernels).
    Raises ValueError when an operand is too short for its matrix."""
    if m > 0 and n > 0 and k > 0:
        if a_off + ((k - 1) * lda + m if ta else (m - 1) * lda + k) > a.shape[0]:
            raise ValueError("sgemm: A is too short")
        if b_off + ((n - 1) * ldb + k if tb else (k - 1) * ldb + n) > b.shape[0]:
            raise ValueError("sgemm: B is too short")
    if m > 0 and n > 0 and c_off + (m - 1) * ldc + n > c.shape[0]:
        raise ValueError("sgemm: C is too short")
    with nogil:
        sgemm(ta, tb, m, n, k, alpha, &a[a_off] if a.shape[0] else NULL, lda,
              &b[b_off] if b.shape[0] else NULL, ldb, beta, &c[c_off], ldc)
