# Compiled kernels of the data-movement family: pooling, resize, reductions, pad rows, 6-D
# copies (depth/space) and tiled transposes. NHWC where a layout applies: the innermost loop runs
# over the channels of one pixel, contiguous, and vectorises.

from libc.math cimport pow as c_pow, sqrt
from libc.stdint cimport int64_t

cdef enum:
    RED_SUM = 0
    RED_MEAN = 1
    RED_MAX = 2
    RED_MIN = 3
    RED_CHUNK_ = 512

REDUCE_CHUNK = RED_CHUNK_
SUM, MEAN, MAX_, MIN_ = RED_SUM, RED_MEAN, RED_MAX, RED_MIN


# ---- MaxPool / AveragePool ---------------------------------------------------------------------

cdef extern from *:
    """
    /* One output pixel of a pool over NHWC floats, all C channels: the ni x nj taps at
       p + i * rs + j * cs (p: the window's first tap inside the map). The channels go in
       blocks of SPRAT_POOL_CB held in registers over every tap (one load per tap and vector,
       one store per output) instead of a pass over y per tap. is_max: the max (NaN in the
       first tap propagates, as fmax32), else the sum times inv; init: the value of a window
       without taps. */
    #define SPRAT_POOL_CB 32
    #define SPRAT_POOL_TAPS(N)                                                            \
        for (int c = 0; c < (N); c++) acc[c] = p[c0 + c];                                 \
        for (int i = 0; i < ni; i++)                                                      \
            for (int j = (i == 0); j < nj; j++) {                                         \
                const float *q = p + i * rs + j * cs + c0;                                \
                if (is_max)                                                               \
                    for (int c = 0; c < (N); c++) acc[c] = q[c] > acc[c] ? q[c] : acc[c]; \
                else                                                                      \
                    for (int c = 0; c < (N); c++) acc[c] += q[c];                         \
            }                                                                             \
        if (is_max)                                                                       \
            for (int c = 0; c < (N); c++) y[c0 + c] = acc[c];                             \
        else                                                                              \
            for (int c = 0; c < (N); c++) y[c0 + c] = acc[c] * inv;
    #if defined(__AVX2__)
    #include <immintrin.h>
    /* 8 x 8 channels in registers; max as _mm256_max_ps(q, acc), which returns acc when
       either is NaN: a NaN in the first tap propagates, as fmax32 */
    #define SPRAT_POOL_VEC(OP)                                                            \
        for (; c0 + 64 <= C; c0 += 64) {                                                  \
            __m256 a0 = _mm256_loadu_ps(p + c0), a1 = _mm256_loadu_ps(p + c0 + 8);        \
            __m256 a2 = _mm256_loadu_ps(p + c0 + 16), a3 = _mm256_loadu_ps(p + c0 + 24);  \
            __m256 a4 = _mm256_loadu_ps(p + c0 + 32), a5 = _mm256_loadu_ps(p + c0 + 40);  \
            __m256 a6 = _mm256_loadu_ps(p + c0 + 48), a7 = _mm256_loadu_ps(p + c0 + 56);  \
            for (int i = 0; i < ni; i++)                                                  \
                for (int j = (i == 0); j < nj; j++) {                                     \
                    const float *q = p + i * rs + j * cs + c0;                            \
                    a0 = OP(_mm256_loadu_ps(q), a0); a1 = OP(_mm256_loadu_ps(q + 8), a1); \
                    a2 = OP(_mm256_loadu_ps(q + 16), a2);                                 \
                    a3 = OP(_mm256_loadu_ps(q + 24), a3);                                 \
                    a4 = OP(_mm256_loadu_ps(q + 32), a4);                                 \
                    a5 = OP(_mm256_loadu_ps(q + 40), a5);                                 \
                    a6 = OP(_mm256_loadu_ps(q + 48), a6);                                 \
                    a7 = OP(_mm256_loadu_ps(q + 56), a7);                                 \
                }                                                                         \
            if (!is_max) {                                                                \
                a0 = _mm256_mul_ps(a0, vinv); a1 = _mm256_mul_ps(a1, vinv);               \
                a2 = _mm256_mul_ps(a2, vinv); a3 = _mm256_mul_ps(a3, vinv);               \
                a4 = _mm256_mul_ps(a4, vinv); a5 = _mm256_mul_ps(a5, vinv);               \
                a6 = _mm256_mul_ps(a6, vinv); a7 = _mm256_mul_ps(a7, vinv);               \
            }                                                                             \
            _mm256_storeu_ps(y + c0, a0); _mm256_storeu_ps(y + c0 + 8, a1);               \
            _mm256_storeu_ps(y + c0 + 16, a2); _mm256_storeu_ps(y + c0 + 24, a3);         \
            _mm256_storeu_ps(y + c0 + 32, a4); _mm256_storeu_ps(y + c0 + 40, a5);         \
            _mm256_storeu_ps(y + c0 + 48, a6); _mm256_storeu_ps(y + c0 + 56, a7);         \
        }                                                                                 \
        for (; c0 + 8 <= C; c0 += 8) {                                                    \
            __m256 a0 = _mm256_loadu_ps(p + c0);                                          \
            for (int i = 0; i < ni; i++)                                                  \
                for (int j = (i == 0); j < nj; j++)                                       \
                    a0 = OP(_mm256_loadu_ps(p + i * rs + j * cs + c0), a0);               \
            _mm256_storeu_ps(y + c0, is_max ? a0 : _mm256_mul_ps(a0, vinv));              \
        }                                                                                 \
        if (c0 < C) { /* the last C % 8 channels: masked (BlazeFace's 28, 42, 88) */     \
            const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(C - c0)),        \
                                                 _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); \
            __m256 a0 = _mm256_maskload_ps(p + c0, m);                                    \
            for (int i = 0; i < ni; i++)                                                  \
                for (int j = (i == 0); j < nj; j++)                                       \
                    a0 = OP(_mm256_maskload_ps(p + i * rs + j * cs + c0, m), a0);         \
            _mm256_maskstore_ps(y + c0, m, is_max ? a0 : _mm256_mul_ps(a0, vinv));        \
            c0 = C;                                                                       \
        }
    #endif
    static void sprat_pool_pixel(const float *p, Py_ssize_t rs, Py_ssize_t cs, int ni, int nj,
                                 Py_ssize_t C, int is_max, float inv, float init, float *y) {
        float acc[SPRAT_POOL_CB];
        Py_ssize_t c0 = 0;
        if (ni <= 0 || nj <= 0) {
            for (Py_ssize_t c = 0; c < C; c++) y[c] = init;
            return;
        }
    #if defined(__AVX2__)
        const __m256 vinv = _mm256_set1_ps(inv);
        if (is_max) { SPRAT_POOL_VEC(_mm256_max_ps) }
        else { SPRAT_POOL_VEC(_mm256_add_ps) }
    #endif
        for (; c0 + SPRAT_POOL_CB <= C; c0 += SPRAT_POOL_CB) {
            SPRAT_POOL_TAPS(SPRAT_POOL_CB)
        }
        if (c0 < C) {
            int n = (int)(C - c0);
            SPRAT_POOL_TAPS(n)
        }
    }
    """
    void sprat_pool_pixel(const float* p, idx rs, idx cs, int ni, int nj, idx C, int is_max,
                          float inv, float init, float* y) nogil


cdef void _pool_rows(const float* x, float* y, idx lo, idx hi, idx H, idx W, idx C, idx OH,
                     idx OW, idx kh, idx kw, idx sh, idx sw, idx dh, idx dw, idx ph, idx pw,
                     idx he, idx we, bint is_max, bint include_pad, int code, float a,
                     float b) noexcept nogil:
    """Output rows [lo, hi) (row q = (n, oh)) of a pool over NHWC ``x``; ``he``/``we``: the end
    of the padded extent (AveragePool with ``count_include_pad`` counts pads up to it)."""
    cdef idx q, n, oh, cnt_h, cnt_w, i, j, ih, iw, ow
    cdef int i0, i1, j0, j1
    cdef float init = -INFINITY if is_max else 0.0
    cdef float inv
    for q in range(lo, hi):
        n = q // OH
        oh = q - n * OH
        cnt_h = 0
        for i in range(kh):
            ih = oh * sh - ph + i * dh
            if (ih >= 0 and ih < H) or (include_pad and ih < he):
                cnt_h += 1
        # the taps' rows inside the map
        i0, i1 = 0, <int>kh
        while i0 < kh and oh * sh - ph + i0 * dh < 0:
            i0 += 1
        while i1 > i0 and oh * sh - ph + (i1 - 1) * dh >= H:
            i1 -= 1
        for ow in range(OW):
            j0, j1 = 0, <int>kw
            iw = ow * sw - pw
            if iw >= 0 and iw + (kw - 1) * dw < W:  # NOTE: inside the map: every tap counts
                cnt_w = kw
            else:
                cnt_w = 0
                for j in range(kw):
                    iw = ow * sw - pw + j * dw
                    if (iw >= 0 and iw < W) or (include_pad and iw < we):
                        cnt_w += 1
                while j0 < kw and ow * sw - pw + j0 * dw < 0:
                    j0 += 1
                while j1 > j0 and ow * sw - pw + (j1 - 1) * dw >= W:
                    j1 -= 1
            inv = 1.0 if is_max else <float>1.0 / <float>max(<idx>1, cnt_h * cnt_w)
            sprat_pool_pixel(x + ((n * H + oh * sh - ph + i0 * dh) * W + ow * sw - pw
                                  + j0 * dw) * C, dh * W * C, dw * C, i1 - i0, j1 - j0, C,
                             is_max, inv, init, y + (q * OW + ow) * C)
        if code != A_NONE:
            act_inplace(y + q * OW * C, OW * C, code, a, b)


cdef struct pool_call_t:
    # one ``pool2d`` call's arguments (``PoolCall``)
    const float* x
    float* y
    idx N, H, W, C, OH, OW, kh, kw, sh, sw, dh, dw, ph, pw, he, we
    bint is_max, include_pad
    int nt, code
    float a, b


cdef _pool_run(const pool_call_t* s):
    """A ``pool2d`` call: its output rows over its slots."""
    cdef idx rows = s.N * s.OH
    cdef int t, nt = s.nt
    if nt <= 1:
        with nogil:
            _pool_rows(s.x, s.y, 0, rows, s.H, s.W, s.C, s.OH, s.OW, s.kh, s.kw, s.sh, s.sw,
                       s.dh, s.dw, s.ph, s.pw, s.he, s.we, s.is_max, s.include_pad, s.code, s.a,
                       s.b)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        _pool_rows(s.x, s.y, t * rows // nt, (t + 1) * rows // nt, s.H, s.W, s.C, s.OH, s.OW,
                   s.kh, s.kw, s.sh, s.sw, s.dh, s.dw, s.ph, s.pw, s.he, s.we, s.is_max,
                   s.include_pad, s.code, s.a, s.b)


cdef class PoolCall(_BoundCall):
    """One ``pool2d`` call with its arguments bound once (``BOUND_CALLS``)."""
    cdef pool_call_t s

    def __call__(self):
        _pool_run(&self.s)


def pool2d(const float[::1] x, float[::1] y, idx N, idx H, idx W, idx C, idx OH, idx OW, idx kh,
           idx kw, idx sh, idx sw, idx dh, idx dw, idx ph, idx pw, idx he, idx we, bint is_max,
           bint include_pad, int nt, int code, float a, float b, PoolCall into=None):
    """MaxPool / AveragePool of NHWC float32 ``x`` (N, H, W, C) into ``y`` (N, OH, OW, C),
    window (kh, kw), strides, dilations, begin pads; output rows split over ``nt`` slots.
    With ``into``: the arguments bound into that call object, nothing run."""
    cdef pool_call_t s = pool_call_t(&x[0], &y[0], N, H, W, C, OH, OW, kh, kw, sh, sw, dh, dw,
                                     ph, pw, he, we, is_max, include_pad, nt, code, a, b)
    if into is not None:
        into.s = s
        return
    _pool_run(&s)


# ---- Resize (NHWC) -----------------------------------------------------------------------------

cdef void _nearest_rows(const float* x, float* y, idx lo, idx hi, idx H, idx W, idx C, idx OH,
                        idx OW, const int64_t* iy, const int64_t* ix) noexcept nogil:
    cdef idx q, n, src, ow
    for q in range(lo, hi):
        n = q // OH
        src = (n * H + iy[q - n * OH]) * W
        for ow in range(OW):
            memcpy(y + (q * OW + ow) * C, x + (src + ix[ow]) * C, C * sizeof(float))


def resize_nearest(const float[::1] x, float[::1] y, idx N, idx H, idx W, idx C, idx OH, idx OW,
                   const int64_t[::1] iy, const int64_t[::1] ix, int nt):
    """Nearest resize of NHWC ``x`` (N, H, W, C) to ``y`` (N, OH, OW, C): output row ``oh``
    reads input row ``iy[oh]``, column ``ow`` input column ``ix[ow]``."""
    cdef idx rows = N * OH
    cdef const float* px = &x[0]
    cdef float* py = &y[0]
    cdef const int64_t* piy = &iy[0]
    cdef const int64_t* pix = &ix[0]
    cdef int t
    if nt <= 1:
        with nogil:
            _nearest_rows(px, py, 0, rows, H, W, C, OH, OW, piy, pix)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        _nearest_rows(px, py, t * rows // nt, (t + 1) * rows // nt, H, W, C, OH, OW, piy, pix)


cdef void _linear_rows(const float* x, float* y, idx lo, idx hi, idx H, idx W, idx C, idx OH,
                       idx OW, const int64_t* y0, const int64_t* y1, const float* wy,
                       const int64_t* x0, const int64_t* x1,
                       const float* wx) noexcept nogil:
    cdef idx q, n, oh, r0, r1, ow, c
    cdef float a, b, d, e
    cdef const float* p00
    cdef const float* p01
    cdef const float* p10
    cdef const float* p11
    cdef float* yo
    for q in range(lo, hi):
        n = q // OH
        oh = q - n * OH
        r0 = (n * H + y0[oh]) * W
        r1 = (n * H + y1[oh]) * W
        b = wy[oh]
        a = <float>1.0 - b
        for ow in range(OW):
            d = wx[ow]
            e = <float>1.0 - d
            p00 = x + (r0 + x0[ow]) * C
            p01 = x + (r0 + x1[ow]) * C
            p10 = x + (r1 + x0[ow]) * C
            p11 = x + (r1 + x1[ow]) * C
            yo = y + (q * OW + ow) * C
            for c in range(C):
                yo[c] = a * (e * p00[c] + d * p01[c]) + b * (e * p10[c] + d * p11[c])


def resize_linear(const float[::1] x, float[::1] y, idx N, idx H, idx W, idx C, idx OH, idx OW,
                  const int64_t[::1] y0, const int64_t[::1] y1, const float[::1] wy,
                  const int64_t[::1] x0, const int64_t[::1] x1, const float[::1] wx,
                  int nt):
    """Bilinear resize of NHWC ``x`` to ``y``: output (oh, ow) blends input rows y0/y1 with
    weight ``wy`` (of y1) and columns x0/x1 with weight ``wx`` (of x1)."""
    cdef idx rows = N * OH
    cdef const float* px = &x[0]
    cdef float* py = &y[0]
    cdef int t
    if nt <= 1:
        with nogil:
            _linear_rows(px, py, 0, rows, H, W, C, OH, OW, &y0[0], &y1[0], &wy[0], &x0[0],
                         &x1[0], &wx[0])
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        _linear_rows(px, py, t * rows // nt, (t + 1) * rows // nt, H, W, C, OH, OW, &y0[0],
                     &y1[0], &wy[0], &x0[0], &x1[0], &wx[0])


# ---- Reduce{Sum,Mean,Max,Min} over one block of axes --------------------------------------------

cdef float _reduce_row(const float* xr, idx n, int op) noexcept nogil:
    """One reduction of ``n`` contiguous values (sums accumulate in float64)."""
    cdef double s = 0.0
    cdef float m
    cdef idx i
    if op == RED_SUM or op == RED_MEAN:
        for i in range(n):
            s += xr[i]
        return <float>(s / n if op == RED_MEAN else s)
    m = xr[0]
    if op == RED_MAX:
        for i in range(1, n):
            m = fmax32(m, xr[i])
    else:
        for i in range(1, n):
            m = fmin32(m, xr[i])
    return m


cdef extern from *:
    """
    /* y[i] = (float)(scale * sum over r < R of x[r * I + i]) for i < n, the sums in float64
       in row order (as a plain loop). Blocks of 32 columns are held in eight AVX registers
       over all R rows (one load per row and block, one store at the end) */
    static void sprat_colsum(const float *x, Py_ssize_t n, Py_ssize_t R, Py_ssize_t I,
                             double scale, float *y) {
        Py_ssize_t i = 0;
    #if defined(__AVX2__)
        const __m256d vs = _mm256_set1_pd(scale);
        for (; i + 32 <= n; i += 32) {
            __m256d a[8];
            for (int k = 0; k < 8; k++) a[k] = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4 * k));
            for (Py_ssize_t r = 1; r < R; r++) {
                const float *xr = x + r * I + i;
                a[0] = _mm256_add_pd(a[0], _mm256_cvtps_pd(_mm_loadu_ps(xr)));
                a[1] = _mm256_add_pd(a[1], _mm256_cvtps_pd(_mm_loadu_ps(xr + 4)));
                a[2] = _mm256_add_pd(a[2], _mm256_cvtps_pd(_mm_loadu_ps(xr + 8)));
                a[3] = _mm256_add_pd(a[3], _mm256_cvtps_pd(_mm_loadu_ps(xr + 12)));
                a[4] = _mm256_add_pd(a[4], _mm256_cvtps_pd(_mm_loadu_ps(xr + 16)));
                a[5] = _mm256_add_pd(a[5], _mm256_cvtps_pd(_mm_loadu_ps(xr + 20)));
                a[6] = _mm256_add_pd(a[6], _mm256_cvtps_pd(_mm_loadu_ps(xr + 24)));
                a[7] = _mm256_add_pd(a[7], _mm256_cvtps_pd(_mm_loadu_ps(xr + 28)));
            }
            for (int k = 0; k < 8; k++)
                _mm_storeu_ps(y + i + 4 * k, _mm256_cvtpd_ps(_mm256_mul_pd(a[k], vs)));
        }
        for (; i + 4 <= n; i += 4) {
            __m256d a0 = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
            for (Py_ssize_t r = 1; r < R; r++)
                a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm_loadu_ps(x + r * I + i)));
            _mm_storeu_ps(y + i, _mm256_cvtpd_ps(_mm256_mul_pd(a0, vs)));
        }
    #endif
        for (; i < n; i++) {
            double a0 = x[i];
            for (Py_ssize_t r = 1; r < R; r++) a0 += x[r * I + i];
            y[i] = (float)(a0 * scale);
        }
    }
    """
    void sprat_colsum(const float* x, idx n, idx R, idx I, double scale, float* y) nogil


cdef void _reduce_columns(const float* x, float* yr, idx n, idx R, idx I,
                          int op) noexcept nogil:
    """``yr[:n]`` = reduce over r of ``x[r*I : r*I + n]`` (sums in float64, ``sprat_colsum``)."""
    cdef idx i, r
    cdef const float* xr
    if op == RED_SUM or op == RED_MEAN:
        sprat_colsum(x, n, R, I, 1.0 / R if op == RED_MEAN else 1.0, yr)
        return
    memcpy(yr, x, n * sizeof(float))
    for r in range(1, R):
        xr = x + r * I
        if op == RED_MAX:
            for i in range(n):
                yr[i] = fmax32(yr[i], xr[i])
        else:
            for i in range(n):
                yr[i] = fmin32(yr[i], xr[i])


cdef void _reduce_items(const float* x, float* y, idx lo, idx hi, idx O, idx R, idx I,
                        int op) noexcept nogil:
    cdef idx it, o, i0, nch
    if I == 1:
        for o in range(lo, hi):
            y[o] = _reduce_row(x + o * R, R, op)
        return
    nch = (I + RED_CHUNK_ - 1) // RED_CHUNK_
    for it in range(lo, hi):
        o = it // nch
        i0 = (it - o * nch) * RED_CHUNK_
        _reduce_columns(x + o * R * I + i0, y + o * I + i0, min(<idx>RED_CHUNK_, I - i0), R, I,
                        op)


cdef void _column_range(const float* x, float* y, idx O, idx R, idx I, int op, idx c0,
                        idx c1) noexcept nogil:
    """Columns [c0, c1) of every one of the O (R, I) blocks of ``x`` reduced over R, in chunks
    of REDUCE_CHUNK columns (a max or min updates its outputs in L1)."""
    cdef idx o, i
    for o in range(O):
        i = c0
        while i < c1:
            _reduce_columns(x + o * R * I + i, y + o * I + i, min(<idx>RED_CHUNK_, c1 - i), R,
                            I, op)
            i += RED_CHUNK_


cdef void _sum_part(const float* x, idx r0, idx r1, idx O, idx R, idx I,
                    double* acc) noexcept nogil:
    """``acc[o*I + i]`` = sum over r in [r0, r1) of ``x[o, r, i]`` (float64)."""
    cdef idx o, r, i
    cdef const float* xr
    cdef double* ao
    for o in range(O):
        ao = acc + o * I
        for i in range(I):
            ao[i] = 0.0
        for r in range(r0, r1):
            xr = x + (o * R + r) * I
            for i in range(I):
                ao[i] += xr[i]


cdef struct reduce_call_t:
    # one ``reduce_ori`` call's arguments (``ReduceCall``)
    const float* x
    float* y
    idx O, R, I
    int op, nt
    double* acc
    idx astride, acap


cdef class ReduceCall(_BoundCall):
    """One ``reduce_ori`` call with its arguments bound once (``BOUND_CALLS``)."""
    cdef reduce_call_t s

    def __call__(self):
        _reduce_run(&self.s)


def reduce_ori(const float[::1] x, float[::1] y, idx O, idx R, idx I, int op, int nt,
               double[:, ::1] acc, ReduceCall into=None):
    """``y (O, I)`` = reduce over R of ``x (O, R, I)`` (float32; sums and means accumulate in
    float64); ``acc`` (nt, >= REDUCE_CHUNK) float64 scratch; work split over ``nt`` slots:
    ranges of columns when there are 32 a slot, else the (row, column chunk) items, or -- a
    sum or mean with fewer items than slots, of at most REDUCE_CHUNK outputs -- ranges of R
    into per-slot partial sums, added after. With ``into``: the arguments bound into that
    call object, nothing run."""
    cdef reduce_call_t s = reduce_call_t(&x[0], &y[0], O, R, I, op, nt, NULL, acc.shape[1],
                                         acc.shape[1])
    if acc.shape[0] and acc.shape[1]:
        s.acc = &acc[0, 0]
    if acc.shape[0] < nt:
        s.acap = 0  # NOTE: no partial sums per slot
    if into is not None:
        into.s = s
        return
    _reduce_run(&s)


cdef _reduce_run(const reduce_call_t* s):
    """A ``reduce_ori`` call: its work over its slots."""
    cdef const float* px = s.x
    cdef float* py = s.y
    cdef idx O = s.O, R = s.R, I = s.I
    cdef int op = s.op, nt = s.nt
    cdef idx items = O if I == 1 else O * ((I + RED_CHUNK_ - 1) // RED_CHUNK_)
    cdef int t
    cdef idx j
    cdef double v, scale
    if nt <= 1:
        with nogil:
            _reduce_items(px, py, 0, items, O, R, I, op)
        return
    if I >= 32 * nt:
        # NOTE: the columns split in blocks of 32 (a global pool of one image is one or a few
        # column chunks: 3 of 1280 channels left one slot twice the other's); the sums stay in
        # registers, in the same order as at one slot
        for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
            _column_range(px, py, O, R, I, op, t * (I // 32) // nt * 32,
                          I if t == nt - 1 else (t + 1) * (I // 32) // nt * 32)
        return
    if (items < nt and (op == RED_SUM or op == RED_MEAN) and O * I <= s.acap
            and R >= 4 * nt and I > 1):
        for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
            _sum_part(px, t * R // nt, (t + 1) * R // nt, O, R, I, s.acc + t * s.astride)
        scale = 1.0 / R if op == RED_MEAN else 1.0
        with nogil:
            for j in range(O * I):
                v = s.acc[j]
                for t in range(1, nt):
                    v = v + s.acc[t * s.astride + j]
                py[j] = <float>(v * scale)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        _reduce_items(px, py, t * items // nt, (t + 1) * items // nt, O, R, I, op)


# ---- Pad rows, 6-D copies, tiled transposes ------------------------------------------------------

def pad_rows(const float[:, ::1] x, float[:, ::1] y, idx b, float value):
    """``y[r] = [value] * b + x[r] + [value] * rest`` for every row r (float32)."""
    cdef idx rows = x.shape[0], n = x.shape[1], m = y.shape[1]
    cdef idx r, i
    cdef float* yr
    with nogil:
        for r in range(rows):
            yr = &y[r, 0]
            for i in range(b):
                yr[i] = value
            if n:
                memcpy(yr + b, &x[r, 0], n * sizeof(float))
            for i in range(b + n, m):
                yr[i] = value


cdef void _copy_runs_range(const unsigned char* src, unsigned char* dst, const idx* shape,
                           const idx* st, idx run, idx r0, idx r1) noexcept nogil:
    cdef idx r, c, d, a, b
    cdef const unsigned char* s
    cdef unsigned char* o
    for r in range(r0, r1):  # NOTE: r runs over the first two axes
        a, b = r // shape[1], r % shape[1]
        o = dst + r * shape[2] * shape[3] * run
        for c in range(shape[2]):
            s = src + a * st[0] + b * st[1] + c * st[2]
            for d in range(shape[3]):
                copy_short(o, s + d * st[3], run)
                o += run


def copy_runs(int nt, const unsigned char[::1] src, unsigned char[::1] dst,
              const idx[::1] shape, const idx[::1] strides, idx run):
    """A permuted copy whose innermost ``run`` bytes stay together (DepthToSpace /
    SpaceToDepth of NHWC data: each pixel's channels move as one): ``dst`` (C-contiguous,
    ``prod(shape) * run`` bytes) receives, in the index order of the 4 outer axes ``shape``,
    the run at byte offset ``sum(i[k] * strides[k])`` of ``src``. Slot ``t`` of ``nt`` copies
    an equal share of the first two axes. NOTE: NumPy's strided copy of runs of 6 floats
    (SpaceToDepth of a 3-channel image) went at ~2 ns an element. Raises ValueError when
    ``dst`` has another size, a stride is negative or a run lies outside ``src``."""
    cdef idx k, last = run, rows
    cdef int t
    if shape.shape[0] != 4 or strides.shape[0] != 4 or run <= 0:
        raise ValueError("copy_runs: 4 outer axes and a positive run")
    for k in range(4):
        if shape[k] <= 0 or strides[k] < 0:
            raise ValueError("copy_runs: the shape must be positive, the strides >= 0")
        last += (shape[k] - 1) * strides[k]
    if dst.shape[0] != shape[0] * shape[1] * shape[2] * shape[3] * run or last > src.shape[0]:
        raise ValueError("copy_runs: dst has the wrong size or a run lies outside src")
    rows = shape[0] * shape[1]
    if nt <= 1 or rows < nt:
        with nogil:
            _copy_runs_range(&src[0], &dst[0], &shape[0], &strides[0], run, 0, rows)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        _copy_runs_range(&src[0], &dst[0], &shape[0], &strides[0], run, t * rows // nt,
                         (t + 1) * rows // nt)


def copy6(const float[:, :, :, :, :, :] src, float[:, :, :, :, :, :] dst):
    """``dst[...] = src`` for two strided 6-D float32 arrays of one shape, looping in index
    order (the order of the side with the longer contiguous innermost axis is chosen by the
    caller, who transposes the other)."""
    cdef idx a, b, c, d, e, f
    with nogil:
        for a in range(dst.shape[0]):
            for b in range(dst.shape[1]):
                for c in range(dst.shape[2]):
                    for d in range(dst.shape[3]):
                        for e in range(dst.shape[4]):
                            for f in range(dst.shape[5]):
                                dst[a, b, c, d, e, f] = src[a, b, c, d, e, f]


cdef extern from *:
    """
    /* An 8x8 block of 4-byte elements transposed in registers (AVX: unpack, shuffle, permute):
       dst[j * ds + i] = src[i * ss + j]. The plain loop stores with a stride and does not
       vectorise. Returns 0 without AVX (the caller then runs the loop). */
    #if defined(__AVX2__)
    #include <immintrin.h>
    static int sprat_tr8x8(const unsigned int *src, Py_ssize_t ss, unsigned int *dst,
                           Py_ssize_t ds) {
        const float *s = (const float *)src;
        float *d = (float *)dst;
        __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + ss);
        __m256 r2 = _mm256_loadu_ps(s + 2 * ss), r3 = _mm256_loadu_ps(s + 3 * ss);
        __m256 r4 = _mm256_loadu_ps(s + 4 * ss), r5 = _mm256_loadu_ps(s + 5 * ss);
        __m256 r6 = _mm256_loadu_ps(s + 6 * ss), r7 = _mm256_loadu_ps(s + 7 * ss);
        __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
        __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
        __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
        __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
        __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
        __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
        __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
        __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
        _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
        _mm256_storeu_ps(d + ds, _mm256_permute2f128_ps(u1, u5, 0x20));
        _mm256_storeu_ps(d + 2 * ds, _mm256_permute2f128_ps(u2, u6, 0x20));
        _mm256_storeu_ps(d + 3 * ds, _mm256_permute2f128_ps(u3, u7, 0x20));
        _mm256_storeu_ps(d + 4 * ds, _mm256_permute2f128_ps(u0, u4, 0x31));
        _mm256_storeu_ps(d + 5 * ds, _mm256_permute2f128_ps(u1, u5, 0x31));
        _mm256_storeu_ps(d + 6 * ds, _mm256_permute2f128_ps(u2, u6, 0x31));
        _mm256_storeu_ps(d + 7 * ds, _mm256_permute2f128_ps(u3, u7, 0x31));
        return 1;
    }
    #else
    static int sprat_tr8x8(const unsigned int *src, Py_ssize_t ss, unsigned int *dst,
                           Py_ssize_t ds) {
        (void)src; (void)ss; (void)dst; (void)ds;
        return 0;
    }
    #endif
    """
    bint sprat_tr8x8(const unsigned int* src, idx ss, unsigned int* dst, idx ds) noexcept nogil


cdef void _swap_tiles(const unsigned int* x, unsigned int* y, idx lo, idx hi, idx A, idx B,
                      idx L, idx sa, idx sb) noexcept nogil:
    """Tiles [lo, hi) of the copy (N, A, B, L) -> (N, B, A, L) of 4-byte elements (L: the
    contiguous inner block); tiles are (n, a-tile, b-tile) with sides ``sa`` x ``sb``."""
    cdef idx ta = (A + sa - 1) // sa
    cdef idx tb = (B + sb - 1) // sb
    cdef idx t, n, r, a0, b0, a1, b1, base, a, b, s, d, a8, b8
    for t in range(lo, hi):
        n = t // (ta * tb)
        r = t - n * ta * tb
        a0 = (r // tb) * sa
        b0 = (r % tb) * sb
        a1 = min(A, a0 + sa)
        b1 = min(B, b0 + sb)
        base = n * A * B * L
        if L == 1:
            # NOTE: full 8x8 blocks in registers; the rest of the tile (edges) by the loops
            a8 = a0 + (a1 - a0) // 8 * 8
            b8 = b0 + (b1 - b0) // 8 * 8
            if a8 > a0 and b8 > b0 and sprat_tr8x8(x + base, B, y + base, A):
                for a in range(a0, a8, 8):
                    for b in range(b0, b8, 8):
                        sprat_tr8x8(x + base + a * B + b, B, y + base + b * A + a, A)
                _swap_edges(x, y, base, A, B, a0, a1, b0, b1, a8, b8)
                continue
            if sb >= sa:  # the inner loop runs along the tile's longer side
                for a in range(a0, a1):
                    s = base + a * B
                    d = base + a
                    for b in range(b0, b1):
                        y[d + b * A] = x[s + b]
            else:
                for b in range(b0, b1):
                    s = base + b
                    d = base + b * A
                    for a in range(a0, a1):
                        y[d + a] = x[s + a * B]
            continue
        for b in range(b0, b1):
            for a in range(a0, a1):
                memcpy(y + base + (b * A + a) * L, x + base + (a * B + b) * L, L * 4)


cdef void _swap_edges(const unsigned int* x, unsigned int* y, idx base, idx A, idx B, idx a0,
                      idx a1, idx b0, idx b1, idx a8, idx b8) noexcept nogil:
    """The elements of tile [a0, a1) x [b0, b1) outside its 8x8 blocks [a0, a8) x [b0, b8)."""
    cdef idx a, b
    for a in range(a0, a1):
        for b in range(b8 if a < a8 else b0, b1):
            y[base + b * A + a] = x[base + a * B + b]


cdef struct swap_call_t:
    # one ``swap_tiles`` (tiles) or ``swap_small`` call's arguments (``SwapCall``)
    int nt
    const unsigned int* x
    unsigned int* y
    idx total, A, B, L, sa, sb
    bint tiles


cdef _swap_run(const swap_call_t* s):
    """A ``swap_tiles`` or ``swap_small`` call: its tiles (blocks) over its slots."""
    cdef int t, nt = s.nt
    cdef idx total = s.total
    if nt <= 1:
        with nogil:
            if s.tiles:
                _swap_tiles(s.x, s.y, 0, total, s.A, s.B, s.L, s.sa, s.sb)
            else:
                _swap_small(s.x, s.y, 0, total, s.A, s.B)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        if s.tiles:
            _swap_tiles(s.x, s.y, t * total // nt, (t + 1) * total // nt, s.A, s.B, s.L, s.sa,
                        s.sb)
        else:
            _swap_small(s.x, s.y, t * total // nt, (t + 1) * total // nt, s.A, s.B)


cdef class SwapCall(_BoundCall):
    """One ``swap_tiles`` or ``swap_small`` call with its arguments bound once
    (``BOUND_CALLS``). Raises as the entry."""
    cdef swap_call_t s

    def __call__(self):
        _swap_run(&self.s)


def swap_tiles(int nt, const unsigned int[::1] x, unsigned int[::1] y, idx total, idx A, idx B,
               idx L, idx sa, idx sb, SwapCall into=None):
    """The transpose (N, A, B, L) -> (N, B, A, L) of flat 4-byte arrays in ``total`` tiles of
    ``sa`` x ``sb`` (``tensor.swap_tiles``), split over ``nt`` slots. With ``into``: the
    arguments bound into that call object, nothing run."""
    cdef swap_call_t s = swap_call_t(nt, &x[0], &y[0], total, A, B, L, sa, sb, True)
    if into is not None:
        into.s = s
        return
    _swap_run(&s)


cdef extern from *:
    """
    /* One (A, B) -> (B, A) block of 4-byte elements. Inlined with a constant A, the a loop
       unrolls and the compiler vectorises the b loop: A contiguous loads, stores interleaved
       by permutes (3-6x the time of the loop with A a variable, blocks of 136-1024 elements) */
    static inline __attribute__((always_inline)) void sprat_swap_block(
            const unsigned int* x, unsigned int* y, const Py_ssize_t A, Py_ssize_t B) {
        for (Py_ssize_t b = 0; b < B; b++)
            for (Py_ssize_t a = 0; a < A; a++)
                y[b * A + a] = x[a * B + b];
    }
    /* Blocks [n0, n1) of the copy (N, A, B) -> (N, B, A), A a constant for 2, 3, 4 and 8 */
    static void sprat_swap_blocks(const unsigned int* x, unsigned int* y, Py_ssize_t n0,
                                  Py_ssize_t n1, Py_ssize_t A, Py_ssize_t B) {
        for (Py_ssize_t n = n0; n < n1; n++) {
            const unsigned int* xs = x + n * A * B;
            unsigned int* ys = y + n * A * B;
            switch (A) {
            case 2: sprat_swap_block(xs, ys, 2, B); break;
            case 3: sprat_swap_block(xs, ys, 3, B); break;
            case 4: sprat_swap_block(xs, ys, 4, B); break;
            case 8: sprat_swap_block(xs, ys, 8, B); break;
            default: sprat_swap_block(xs, ys, A, B); break;
            }
        }
    }
    """
    void _swap_small "sprat_swap_blocks" (const unsigned int* x, unsigned int* y, idx n0,
                                          idx n1, idx A, idx B) noexcept nogil


def swap_small(int nt, const unsigned int[::1] x, unsigned int[::1] y, idx N, idx A, idx B,
               SwapCall into=None):
    """The transpose (N, A, B) -> (N, B, A) of flat 4-byte arrays, block after block (small
    A x B blocks: ``swap_tiles``'s tiles cost more than the copy there; A of 2, 3, 4 or 8 runs
    vectorised), split over ``nt`` slots. With ``into``: the checked arguments bound into that
    call object, nothing run. Raises ValueError on short arrays."""
    if x.shape[0] < N * A * B or y.shape[0] < N * A * B:
        raise ValueError("swap_small: arrays shorter than N*A*B")
    cdef swap_call_t s = swap_call_t(nt, &x[0], &y[0], N, A, B, 0, 0, 0, False)
    if into is not None:
        into.s = s
        return
    _swap_run(&s)


cdef extern from *:
    """
    /* Columns [b0, b1) of a whole (A, B) -> (B, A) block of bytes, A a constant (a quantized
       image's NCHW -> NHWC: 3 planes into pixels), or rows [a0, a1) of one with B a constant
       (NHWC -> NCHW: pixels of a few channels into planes): the loop over the constant
       side unrolls and the other vectorises, as sprat_swap_block's does; the functions
       return 0 for another constant (the caller's loop then) */
    static inline __attribute__((always_inline)) void sprat_swap_cols8(
            const unsigned char* x, unsigned char* y, const Py_ssize_t A, Py_ssize_t B,
            Py_ssize_t b0, Py_ssize_t b1) {
        for (Py_ssize_t b = b0; b < b1; b++)
            for (Py_ssize_t a = 0; a < A; a++)
                y[b * A + a] = x[a * B + b];
    }
    static inline __attribute__((always_inline)) void sprat_swap_rows8(
            const unsigned char* x, unsigned char* y, Py_ssize_t A, const Py_ssize_t B,
            Py_ssize_t a0, Py_ssize_t a1) {
        for (Py_ssize_t b = 0; b < B; b++)
            for (Py_ssize_t a = a0; a < a1; a++)
                y[b * A + a] = x[a * B + b];
    }
    #define SPRAT_SWAP8_CASES(F, X, Y, P, Q, R)                                              \
        switch (P) {                                                                     \
        case 2: F(X, Y, 2, Q, R); return 1;                                              \
        case 3: F(X, Y, 3, Q, R); return 1;                                              \
        case 4: F(X, Y, 4, Q, R); return 1;                                              \
        case 6: F(X, Y, 6, Q, R); return 1;                                              \
        case 8: F(X, Y, 8, Q, R); return 1;                                              \
        case 12: F(X, Y, 12, Q, R); return 1;                                            \
        case 16: F(X, Y, 16, Q, R); return 1;                                            \
        default: return 0;                                                               \
        }
    #define SPRAT_SWAP_COLS8(X, Y, A, Q, R) sprat_swap_cols8(X, Y, A, B, Q, R)
    #define SPRAT_SWAP_ROWS8(X, Y, Bc, Q, R) sprat_swap_rows8(X, Y, A, Bc, Q, R)
    static int sprat_swap_whole8(const unsigned char* x, unsigned char* y, Py_ssize_t A,
                                 Py_ssize_t B, Py_ssize_t b0, Py_ssize_t b1) {
        SPRAT_SWAP8_CASES(SPRAT_SWAP_COLS8, x, y, A, b0, b1)
    }
    static int sprat_swap_whole8_rows(const unsigned char* x, unsigned char* y, Py_ssize_t A,
                                      Py_ssize_t B, Py_ssize_t a0, Py_ssize_t a1) {
        SPRAT_SWAP8_CASES(SPRAT_SWAP_ROWS8, x, y, B, a0, a1)
    }
    """
    bint _swap_whole8 "sprat_swap_whole8" (const unsigned char* x, unsigned char* y, idx A,
                                            idx B, idx b0, idx b1) noexcept nogil
    bint _swap_whole8_rows "sprat_swap_whole8_rows" (const unsigned char* x, unsigned char* y,
                                                      idx A, idx B, idx a0,
                                                      idx a1) noexcept nogil


cdef void _swap_tiles8(const unsigned char* x, unsigned char* y, idx lo, idx hi, idx A, idx B,
                       idx L, idx sa, idx sb) noexcept nogil:
    """``_swap_tiles`` for 1-byte elements (a quantized map's NCHW -> NHWC and back). A tile
    spanning all of A or all of B, that side 2, 3, 4, 6, 8, 12 or 16, goes through
    ``sprat_swap_whole8`` / ``sprat_swap_whole8_rows``: a 224 x 224 image of 3 int8 channels
    took 0.13 ms by the byte loop below, 0.012 so."""
    cdef idx ta = (A + sa - 1) // sa
    cdef idx tb = (B + sb - 1) // sb
    cdef idx t, n, r, a0, b0, a1, b1, base, a, b, s, d
    for t in range(lo, hi):
        n = t // (ta * tb)
        r = t - n * ta * tb
        a0 = (r // tb) * sa
        b0 = (r % tb) * sb
        a1 = min(A, a0 + sa)
        b1 = min(B, b0 + sb)
        base = n * A * B * L
        if L == 1 and a0 == 0 and a1 == A and _swap_whole8(x + base, y + base, A, B, b0, b1):
            continue
        if (L == 1 and b0 == 0 and b1 == B
                and _swap_whole8_rows(x + base, y + base, A, B, a0, a1)):
            continue
        if L == 1:
            for b in range(b0, b1):
                s = base + b
                d = base + b * A
                for a in range(a0, a1):
                    y[d + a] = x[s + a * B]
            continue
        for b in range(b0, b1):
            for a in range(a0, a1):
                memcpy(y + base + (b * A + a) * L, x + base + (a * B + b) * L, L)


def swap_tiles8(int nt, const unsigned char[::1] x, unsigned char[::1] y, idx total, idx A,
                idx B, idx L, idx sa, idx sb):
    """``swap_tiles`` of flat 1-byte arrays (uint8 / int8 / bool). Raises ValueError on short
    operands."""
    cdef idx ta = (A + sa - 1) // sa if sa > 0 else 0
    cdef idx tb = (B + sb - 1) // sb if sb > 0 else 0
    if total <= 0:
        return
    if (sa <= 0 or sb <= 0 or ta * tb <= 0 or x.shape[0] < (total // (ta * tb)) * A * B * L
            or y.shape[0] < x.shape[0]):
        raise ValueError("swap_tiles8: operands too short or tiles empty")
    cdef const unsigned char* px = &x[0]
    cdef unsigned char* py = &y[0]
    cdef int t
    if nt <= 1:
        with nogil:
            _swap_tiles8(px, py, 0, total, A, B, L, sa, sb)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        _swap_tiles8(px, py, t * total // nt, (t + 1) * total // nt, A, B, L, sa, sb)


# ---- LRN across channels, NHWC ------------------------------------------------------------------


cdef void _lrn_rows(const float* x, float* y, idx r0, idx r1, idx C, idx lo, idx hi, double k,
                    double a, double beta, double* ps) noexcept nogil:
    """Pixels ``[r0, r1)`` of C channels each: ``y = x * (k + a * sum_window(x^2))^-beta``,
    the window ``[c - lo, c + hi]`` clipped to the channels, summed from prefix sums of the
    squares in ``ps`` (C + 1 doubles)."""
    cdef idx r, c, c0, c1
    cdef const float* xr
    cdef float* yr
    cdef double d, v
    for r in range(r0, r1):
        xr = x + r * C
        yr = y + r * C
        ps[0] = 0.0
        for c in range(C):
            v = xr[c]
            ps[c + 1] = ps[c] + v * v
        for c in range(C):
            c0 = c - lo if c >= lo else 0
            c1 = c + hi + 1 if c + hi + 1 < C else C
            d = k + a * (ps[c1] - ps[c0])
            if beta == 0.75:  # AlexNet's and GoogLeNet's: two square roots, no pow
                v = sqrt(d)
                yr[c] = <float>(xr[c] / (v * sqrt(v)))
            else:
                yr[c] = <float>(xr[c] * c_pow(d, -beta))


def lrn_nhwc(int nt, const float[::1] x, float[::1] y, idx rows, idx C, idx size, double bias,
             double alpha, double beta, double[:, ::1] scratch):
    """LRN-13 across the last (channel) axis of ``rows`` pixels of ``C`` channels, in double:
    ``y = x / (bias + alpha / size * sum(x^2 over [c - (size-1)//2, c + size-1 - (size-1)//2]))
    ^ beta``. ``scratch`` (nt, >= C + 1) float64. Raises ValueError on short operands."""
    if x.shape[0] < rows * C or y.shape[0] < rows * C or scratch.shape[0] < nt \
            or scratch.shape[1] < C + 1:
        raise ValueError("lrn_nhwc: operand or workspace too short for its shape")
    cdef idx lo = (size - 1) // 2
    cdef idx hi = size - 1 - lo
    cdef double a = alpha / size
    cdef const float* px = &x[0]
    cdef float* py = &y[0]
    cdef int t
    if nt <= 1:
        with nogil:
            _lrn_rows(px, py, 0, rows, C, lo, hi, bias, a, beta, &scratch[0, 0])
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        _lrn_rows(px, py, t * rows // nt, (t + 1) * rows // nt, C, lo, hi, bias, a, beta,
                  &scratch[t, 0])


# ---- Concat --------------------------------------------------------------------------------------

cdef void _concat_range(const size_t* parts, const int64_t* widths, idx n, idx total,
                        unsigned char* whole, idx lo, idx hi, bint split) noexcept nogil:
    """Bytes ``[lo, hi)`` of the concatenation ``whole``: its row ``r`` is part 0's row ``r``
    (``widths[0]`` bytes), then part 1's, ...; ``total`` the sum of the widths. Copies the
    parts into ``whole`` (Concat) or, with ``split``, ``whole`` into the parts (Split)."""
    cdef idx o = lo
    cdef idx r, pos, i, start, take
    cdef unsigned char* part
    while o < hi:
        r = o // total
        pos = o - r * total
        start = 0
        i = 0
        while start + widths[i] <= pos:
            start += widths[i]
            i += 1
        take = min(start + widths[i] - pos, hi - o)
        part = <unsigned char*>parts[i] + r * widths[i] + (pos - start)
        if split:
            memcpy(part, whole + o, take)
        else:
            memcpy(whole + o, part, take)
        o += take


cdef idx _concat_total(const size_t[::1] parts, const int64_t[::1] widths, idx nbytes,
                       idx outer) except -1:
    """The sum of ``widths``; raises ValueError unless there is one per part, none negative,
    and ``outer`` rows of that many bytes make ``nbytes``."""
    cdef idx total = 0
    cdef idx i
    if widths.shape[0] != parts.shape[0]:
        raise ValueError("concat_bytes: one width per part")
    for i in range(widths.shape[0]):
        if widths[i] < 0:
            raise ValueError("concat_bytes: negative width")
        total += widths[i]
    if nbytes != outer * total:
        raise ValueError(f"concat_bytes: whole of {nbytes} bytes, expected {outer} x {total}")
    return total


cdef struct concat_call_t:
    # one ``concat_bytes`` / ``split_bytes`` call's checked arguments (``ConcatCall``)
    int nt
    const size_t* parts
    const int64_t* widths
    idx n
    unsigned char* whole
    idx outer, total
    bint split


cdef _concat_run(const concat_call_t* s):
    """A checked concat or split: its bytes over its slots."""
    cdef idx T = s.outer * s.total
    cdef int t, nt = s.nt
    if T == 0:
        return
    if nt <= 1:
        with nogil:
            _concat_range(s.parts, s.widths, s.n, s.total, s.whole, 0, T, s.split)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        _concat_range(s.parts, s.widths, s.n, s.total, s.whole, t * T // nt, (t + 1) * T // nt,
                      s.split)


cdef _concat_bind(int nt, const size_t[::1] parts, const int64_t[::1] widths,
                  const unsigned char[::1] whole, idx outer, bint split, ConcatCall into):
    """Check and run (or bind into ``into``) ``concat_bytes`` / ``split_bytes``."""
    cdef idx total = _concat_total(parts, widths, whole.shape[0], outer)
    cdef concat_call_t s = concat_call_t(nt, NULL, NULL, parts.shape[0], NULL, outer, total,
                                         split)
    if whole.shape[0]:  # NOTE: outer * total bytes (``_concat_total``)
        s.parts, s.widths, s.whole = &parts[0], &widths[0], <unsigned char*>&whole[0]
    if into is not None:
        into.s = s
        return
    _concat_run(&s)


cdef class ConcatCall(_BoundCall):
    """One ``concat_bytes`` or ``split_bytes`` call with its arguments checked and bound once
    (``BOUND_CALLS``). Raises as the entry."""
    cdef concat_call_t s

    def __call__(self):
        _concat_run(&self.s)


def concat_bytes(int nt, const size_t[::1] parts, const int64_t[::1] widths,
                 unsigned char[::1] whole, idx outer, ConcatCall into=None):
    """Concat of C-contiguous arrays as bytes: ``whole`` holds ``outer`` rows, each the rows
    of the parts one after another (part ``i`` at address ``parts[i]``, rows of ``widths[i]``
    bytes). Slot ``t`` of ``nt`` copies bytes ``[t*T//nt, (t+1)*T//nt)`` of ``whole``
    (``T = outer * sum(widths)``), so the split is even whatever the axis. Raises ValueError
    when ``whole`` is not ``T`` bytes or a width is negative. With ``into``: the checked
    arguments bound into that call object, nothing run."""
    _concat_bind(nt, parts, widths, whole, outer, False, into)


def split_bytes(int nt, const size_t[::1] parts, const int64_t[::1] widths,
                const unsigned char[::1] whole, idx outer, ConcatCall into=None):
    """Split, the inverse of ``concat_bytes``: ``whole`` (read only) copied into the parts at
    the addresses ``parts`` (writable, C-contiguous). Raises ValueError as ``concat_bytes``."""
    _concat_bind(nt, parts, widths, whole, outer, True, into)

