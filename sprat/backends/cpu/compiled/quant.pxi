# Quantized convolution through the float32 conv kernels, exactly (``qconv.py`` picks the
# parts and packs the weights): the quantized input is widened to float32 ``x - x_zero_point``
# (``qconv_unpack``), one or more float32 convs compute integer-valued partial sums (exact while
# every partial sum stays within 2^24: ``qconv.py`` splits the input channels into parts until
# it does), and ``qconv_requant`` adds the parts as int32 with the int32 bias and requantises
# as the spec's reference does: ``saturate(round_half_even(float32(acc) * multiplier) + zp)``.
# One-group convs run on the int8 GEMM instead (``int8.pxi``: ``i8_im2col``, ``i8_gemm``);
# grouped and depthwise convs take this path.

from libc.math cimport nearbyintf


cdef void _qunpack_rows(const unsigned char* x, bint signed_, float zp, idx p0, idx p1, idx C,
                        idx c0, idx cs, float* y) noexcept nogil:
    """``y[p, :cs] = x[p, c0:c0+cs] - zp`` for pixels ``p0 .. p1`` (x bytes as uint8 or int8)."""
    cdef idx p, c
    cdef const unsigned char* xr
    cdef const signed char* sr
    cdef float* yr
    for p in range(p0, p1):
        yr = y + p * cs
        if signed_:
            sr = <const signed char*>(x + p * C + c0)
            for c in range(cs):
                yr[c] = <float>sr[c] - zp
        else:
            xr = x + p * C + c0
            for c in range(cs):
                yr[c] = <float>xr[c] - zp


def qconv_unpack(int nt, const unsigned char[::1] x, bint signed_, float zp, idx P, idx C,
                 idx c0, idx cs, float[::1] y):
    """``y (P, cs) = float32(x[:, c0:c0+cs]) - zp`` for ``x`` (P, C) the bytes of a uint8
    (``signed_`` False) or int8 map in NHWC: the conv input of one part, exact (|x - zp| <= 510).
    Raises ValueError on short operands."""
    if x.shape[0] < P * C or y.shape[0] < P * cs or c0 < 0 or c0 + cs > C:
        raise ValueError("qconv_unpack: operands too short or channel range out of bounds")
    cdef const unsigned char* px = &x[0] if P * C > 0 else NULL
    cdef float* py = &y[0] if P * cs > 0 else NULL
    cdef int t
    if P * C == 0:
        return
    if nt <= 1:
        with nogil:
            _qunpack_rows(px, signed_, zp, 0, P, C, c0, cs, py)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        _qunpack_rows(px, signed_, zp, t * P // nt, (t + 1) * P // nt, C, c0, cs, py)


cdef extern from *:
    """
    #include <math.h>
    #include <stdint.h>
    #if defined(__AVX2__)
    #include <immintrin.h>
    #endif
    #pragma GCC push_options
    #pragma GCC optimize("no-reciprocal-math", "no-associative-math", "fp-contract=off")
    /* y[m] = clamp(rint(float(t[m]) * mult[m]) + zp, lo, hi) for m < M, then with post (4 rows
       of pld floats: a, b, lo2, hi2 per channel; a quantized conv's fused lookup, ``qconv.py``)
       clamp(rint(y * a + b), lo2, hi2); stored as uint8, or int8 when is_signed. NOTE: each
       operation rounded as written (no FMA, true products): qconv.py's table check and the
       reference compute the same */
    static void sprat_q_out(const int32_t* t, Py_ssize_t M, const float* mult, float zp,
                            float lo, float hi, const float* post, Py_ssize_t pld, int is_signed,
                            unsigned char* y) {
        Py_ssize_t m = 0;
    #if defined(__AVX2__)
        const __m256 vz = _mm256_set1_ps(zp), vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
        for (; m + 8 <= M; m += 8) {
            __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i*)(t + m))),
                                     _mm256_loadu_ps(mult + m));
            f = _mm256_add_ps(_mm256_round_ps(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), vz);
            f = _mm256_min_ps(_mm256_max_ps(f, vlo), vhi);
            if (post != NULL) {
                f = _mm256_add_ps(_mm256_mul_ps(f, _mm256_loadu_ps(post + m)),
                                  _mm256_loadu_ps(post + pld + m));
                f = _mm256_round_ps(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                f = _mm256_min_ps(_mm256_max_ps(f, _mm256_loadu_ps(post + 2 * pld + m)),
                                  _mm256_loadu_ps(post + 3 * pld + m));
            }
            __m256i qi = _mm256_cvtps_epi32(f);
            __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(qi), _mm256_extracti128_si256(qi, 1));
            w = is_signed ? _mm_packs_epi16(w, w) : _mm_packus_epi16(w, w);
            _mm_storel_epi64((__m128i*)(y + m), w);
        }
    #endif
        for (; m < M; m++) {
            float v = nearbyintf((float)t[m] * mult[m]) + zp;
            v = v < lo ? lo : (v > hi ? hi : v);
            if (post != NULL) {
                v = nearbyintf(v * post[m] + post[pld + m]);
                v = v < post[2 * pld + m] ? post[2 * pld + m]
                    : (v > post[3 * pld + m] ? post[3 * pld + m] : v);
            }
            if (is_signed)
                ((int8_t*)y)[m] = (int8_t)(int32_t)v;
            else
                y[m] = (uint8_t)(int32_t)v;
        }
    }

    /* sprat_q_out over rows x M sums (t, row pitch M) into y (row pitch M bytes): 16 channels
       at a time across the rows (sprat_i8_finish_q8: the per-channel terms loaded once per 16
       channels of a depthwise conv's output row and kept in registers; the same operations,
       so the same bits); the channels past a multiple of 16 row by row. */
    static void sprat_q_out_rows(const int32_t* t, Py_ssize_t rows, Py_ssize_t M,
                                 const float* mult, float zp, float lo, float hi,
                                 const float* post, Py_ssize_t pld, int is_signed,
                                 unsigned char* y) {
        Py_ssize_t m = 0;
    #if defined(__AVX2__)
        /* NOTE: the integer GEMM's requantising epilogue (int8.pxi) without zero-point terms */
        if (M >= 16)
            m = sprat_i8_wide
                ? sprat_i8_finish_q8_512(t, M, rows, M, NULL, 0, NULL, NULL, y, M, mult, 1, NULL,
                                         zp, lo, hi, post, pld)
                : sprat_i8_finish_q8(t, M, rows, M, NULL, 0, NULL, NULL, y, M, mult, 1, NULL, zp,
                                     lo, hi, is_signed, post, pld);
    #endif
        if (m < M)
            for (Py_ssize_t r = 0; r < rows; r++)
                sprat_q_out(t + r * M + m, M - m, mult + m, zp, lo, hi,
                            post != NULL ? post + m : NULL, pld, is_signed, y + r * M + m);
    }
    #pragma GCC pop_options
    """
    void sprat_q_out(const int* t, idx M, const float* mult, float zp, float lo, float hi,
                     const float* post, idx pld, int is_signed, unsigned char* y) nogil
    void sprat_q_out_rows(const int* t, idx rows, idx M, const float* mult, float zp, float lo,
                          float hi, const float* post, idx pld, int is_signed,
                          unsigned char* y) nogil


cdef void _qrequant_rows(const float* acc, idx lda, int S, idx p0, idx p1, idx M,
                         const int* bias, const float* mult, float zp, float lo, float hi,
                         int kind, unsigned char* y8, int* y32, int* t,
                         const float* post) noexcept nogil:
    """Rows ``p0 .. p1`` of the epilogue (see ``qconv_requant``); ``t`` scratch of M ints."""
    cdef idx p, m, o
    cdef int s
    cdef float v
    cdef const float* a
    for p in range(p0, p1):
        o = p * M
        a = acc + o
        # NOTE: rounded, not truncated: exact sums are integers already; a Winograd sum
        # (``_qdq`` convs, float semantics) is the nearest integer's approximation
        for m in range(M):
            t[m] = bias[m] + <int>nearbyintf(a[m])
        for s in range(1, S):
            a = acc + s * lda + o
            for m in range(M):
                t[m] = t[m] + <int>nearbyintf(a[m])
        if kind == 2:
            for m in range(M):
                y32[o + m] = t[m]
        elif kind == 3:
            # NOTE: TflConv (``tflite.pxi``): ``mult`` holds the int32 multipliers, then shifts
            sprat_tfl_requant_row(t, M, <const int*>mult, <const int*>mult + M, NULL, <int>zp,
                                  <int>lo, <int>hi, y8 + o)
        else:
            sprat_q_out(t, M, mult, zp, lo, hi, post, M, kind == 1, y8 + o)


def qconv_requant(int nt, const float[:, ::1] acc, int S, idx P, idx M, const int[::1] bias,
                  const float[::1] mult, float zp, float lo, float hi, int kind,
                  unsigned char[::1] y8, int[::1] y32, int[:, ::1] scratch,
                  const float[::1] post):
    """The epilogue of a quantized conv over ``P`` pixels of ``M`` channels (NHWC):
    ``t = bias[m] + sum_s int32(acc[s, p*M + m])`` (``S`` parts, each integer-valued), then
    ``kind`` 2: ``y32 = t`` (ConvInteger); 0 / 1: ``y8`` (the bytes of a uint8 / int8 map) =
    ``clamp(round_half_even(float32(t) * mult[m]) + zp, lo, hi)`` (QLinearConv, ONNX
    QLinearConv-10 as onnxruntime requantises; ``lo``/``hi`` the type's range narrowed by a fused
    clamp); 3: ``y8 = clamp(MBQM(t, m[m], s[m]) + zp, lo, hi)``, TFLite's fixed-point
    requantisation (TflConv), ``mult`` then the float32 view of 2M int32: M multipliers ``m``,
    M shifts ``s``. Kinds 0 and 1, ``post`` not empty (4 M floats: a, b, lo2, hi2 per channel,
    a fused lookup): then ``clamp(round_half_even(y * a + b), lo2, hi2)``. ``scratch`` (nt,
    >= M) int32. Raises ValueError on short operands."""
    if post.shape[0] not in (0, 4 * M):
        raise ValueError("qconv_requant: post must hold 0 or 4 * M floats")
    if (acc.shape[0] < S or acc.shape[1] < P * M or bias.shape[0] < M or mult.shape[0] < M
            or scratch.shape[0] < max(nt, 1) or scratch.shape[1] < M
            or (kind == 2 and y32.shape[0] < P * M) or (kind != 2 and y8.shape[0] < P * M)):
        raise ValueError("qconv_requant: operands too short")
    if P * M == 0:
        return
    cdef const float* pa = &acc[0, 0]
    cdef idx lda = acc.shape[1]
    cdef const int* pb = &bias[0]
    cdef const float* pm = &mult[0]
    cdef unsigned char* p8 = &y8[0] if kind != 2 else NULL
    cdef int* p32 = &y32[0] if kind == 2 else NULL
    cdef const float* pp = &post[0] if post.shape[0] else NULL
    cdef int t
    if nt <= 1:
        with nogil:
            _qrequant_rows(pa, lda, S, 0, P, M, pb, pm, zp, lo, hi, kind, p8, p32,
                           &scratch[0, 0], pp)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        _qrequant_rows(pa, lda, S, t * P // nt, (t + 1) * P // nt, M, pb, pm, zp, lo, hi, kind,
                       p8, p32, &scratch[t, 0], pp)


# ---- QuantizeLinear / DequantizeLinear, per tensor ------------------------------------------

cdef extern from *:
    """
    #include <math.h>
    /* NOTE: x / s must stay a division (the spec's and the reference's): the build allows
       -freciprocal-math, which may turn a division by a loop invariant into a multiply by its
       reciprocal (off by an ulp, so off by one after rounding at a .5 boundary) */
    __attribute__((optimize("no-reciprocal-math")))
    static void sprat_quantize8(const float *x, unsigned char *y, Py_ssize_t n, float s,
                                float zp, float lo, float hi, int is_signed, int away) {
        Py_ssize_t i;
        /* NOTE: ``away``: TFLite's AffineQuantize rounds half away from zero (roundf), ONNX
           half to even (nearbyintf in the default rounding mode) */
        if (is_signed) {
            signed char *ys = (signed char *)y;
            for (i = 0; i < n; i++) {
                float v = (away ? roundf(x[i] / s) : nearbyintf(x[i] / s)) + zp;
                v = v < lo ? lo : v;
                v = v > hi ? hi : v;
                ys[i] = (signed char)(int)v;
            }
        } else {
            for (i = 0; i < n; i++) {
                float v = (away ? roundf(x[i] / s) : nearbyintf(x[i] / s)) + zp;
                v = v < lo ? lo : v;
                v = v > hi ? hi : v;
                y[i] = (unsigned char)(int)v;
            }
        }
    }
    """
    void sprat_quantize8(const float* x, unsigned char* y, idx n, float s, float zp, float lo,
                         float hi, int is_signed, int away) nogil


cdef void _dequantize8(const unsigned char* x, bint signed_, float* y, idx n, float zp,
                       float s) noexcept nogil:
    cdef idx i
    cdef const signed char* xs = <const signed char*>x
    if signed_:
        for i in range(n):
            y[i] = (<float>xs[i] - zp) * s
    else:
        for i in range(n):
            y[i] = (<float>x[i] - zp) * s


cdef struct q8_call_t:
    # one ``quantize8`` (kind 0) or ``dequantize8`` (kind 1) call's checked arguments
    int nt, kind
    const unsigned char* x
    unsigned char* y
    idx n
    float s, zp, lo, hi
    bint signed_, away


cdef _q8_run(const q8_call_t* a):
    """A checked ``quantize8`` / ``dequantize8`` call: equal parts over its slots."""
    cdef int t, nt = a.nt
    cdef idx n = a.n
    if n == 0:
        return
    if nt <= 1:
        with nogil:
            if a.kind == 0:
                sprat_quantize8(<const float*>a.x, a.y, n, a.s, a.zp, a.lo, a.hi, a.signed_,
                                a.away)
            else:
                _dequantize8(a.x, a.signed_, <float*>a.y, n, a.zp, a.s)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        if a.kind == 0:
            sprat_quantize8(<const float*>a.x + t * n // nt, a.y + t * n // nt,
                            (t + 1) * n // nt - t * n // nt, a.s, a.zp, a.lo, a.hi, a.signed_,
                            a.away)
        else:
            _dequantize8(a.x + t * n // nt, a.signed_, <float*>a.y + t * n // nt,
                         (t + 1) * n // nt - t * n // nt, a.zp, a.s)


cdef class Q8Call(_BoundCall):
    """One ``quantize8`` or ``dequantize8`` call with its arguments checked and bound once
    (``BOUND_CALLS``). Raises as the entry."""
    cdef q8_call_t a

    def __call__(self):
        _q8_run(&self.a)


def quantize8(int nt, const float[::1] x, unsigned char[::1] y, idx n, float s, float zp,
              bint signed_, bint away=False, Q8Call into=None):
    """QuantizeLinear per tensor: ``y = saturate(round_half_even(x / s) + zp)`` for ``n``
    values, ``y`` the bytes of a uint8 (``signed_`` False) or int8 tensor (ONNX
    QuantizeLinear-21); ``away``: rounding half away from zero instead (TFLite's QUANTIZE,
    reference/quantize.h AffineQuantize). With ``into``: the checked arguments bound into
    that call object, nothing run. Raises ValueError on short operands."""
    if x.shape[0] < n or y.shape[0] < n:
        raise ValueError("quantize8: operands too short")
    cdef q8_call_t a = q8_call_t(nt, 0, NULL, NULL, n, s, zp, -128.0 if signed_ else 0.0,
                                 127.0 if signed_ else 255.0, signed_, away)
    if n:
        a.x, a.y = <const unsigned char*>&x[0], &y[0]
    if into is not None:
        into.a = a
        return
    _q8_run(&a)


def dequantize8(int nt, const unsigned char[::1] x, float[::1] y, idx n, float zp, float s,
                bint signed_, Q8Call into=None):
    """DequantizeLinear per tensor: ``y = (x - zp) * s`` (float32) for ``n`` values, ``x`` the
    bytes of a uint8 (``signed_`` False) or int8 tensor (ONNX DequantizeLinear-21). With
    ``into``: the checked arguments bound into that call object, nothing run. Raises
    ValueError on short operands."""
    if x.shape[0] < n or y.shape[0] < n:
        raise ValueError("dequantize8: operands too short")
    cdef q8_call_t a = q8_call_t(nt, 1, NULL, NULL, n, s, zp, 0.0, 0.0, signed_, False)
    if n:
        a.x, a.y = &x[0], <unsigned char*>&y[0]
    if into is not None:
        into.a = a
        return
    _q8_run(&a)


# ---- QLinearLookup: a per-channel table over the 256 values of a uint8/int8 tensor -----------

cdef extern from *:
    """
    /* y[i] = table[x[i] ^ flip] for n bytes: one table of 256 bytes for every element. AVX2:
       32 bytes a step through the table's 16 rows of 16, each row picked by vpshufb from the
       low nibble where the high nibble matches (x ^ (h << 4) saturated by +0x70 sets bit 7,
       vpshufb's zero, on every other byte): 64 vector operations for 32 bytes, against a
       load, a dependent load and a store per byte (0.8 ns a byte, most of EfficientNet's
       SiLU tables) */
    static void sprat_lut256(const unsigned char *x, unsigned char *y, Py_ssize_t n,
                             const unsigned char *table, unsigned char flip) {
        Py_ssize_t i = 0;
    #if defined(__AVX2__)
        __m256i rows[16];
        for (int h = 0; h < 16; h++)
            rows[h] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(table + 16 * h)));
        const __m256i f = _mm256_set1_epi8((char)flip), sat = _mm256_set1_epi8(0x70);
        for (; i + 32 <= n; i += 32) {
            __m256i v = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(x + i)), f);
            __m256i r = _mm256_setzero_si256();
            for (int h = 0; h < 16; h++) {
                __m256i idx = _mm256_adds_epu8(
                    _mm256_xor_si256(v, _mm256_set1_epi8((char)(h << 4))), sat);
                r = _mm256_or_si256(r, _mm256_shuffle_epi8(rows[h], idx));
            }
            _mm256_storeu_si256((__m256i *)(y + i), r);
        }
    #endif
        for (; i < n; i++)
            y[i] = table[x[i] ^ flip];
    }
    """
    void sprat_lut256(const unsigned char* x, unsigned char* y, idx n,
                      const unsigned char* table, unsigned char flip) noexcept nogil


cdef void _lookup_rows(const unsigned char* x, unsigned char* y, const unsigned char* table,
                       idx tstride, idx o0, idx o1, idx C, idx inner,
                       unsigned char flip) noexcept nogil:
    cdef idx o, c, i, base
    cdef const unsigned char* tc
    cdef const unsigned char* xo
    cdef unsigned char* yo
    if inner == 1:  # NOTE: channels last (NHWC): one table row per element of a pixel
        for o in range(o0, o1):
            xo = x + o * C
            yo = y + o * C
            for c in range(C):
                yo[c] = table[c * tstride + (xo[c] ^ flip)]
        return
    for o in range(o0, o1):
        for c in range(C):
            tc = table + c * tstride
            base = (o * C + c) * inner
            for i in range(inner):
                y[base + i] = tc[x[base + i] ^ flip]


cdef struct lut_call_t:
    # one ``qlinear_lookup`` call's checked arguments (``LookupCall``)
    int nt
    const unsigned char* x
    unsigned char* y
    const unsigned char* table
    idx tstride, outer, C, inner
    unsigned char flip


cdef _lookup_run(const lut_call_t* a):
    """A checked ``qlinear_lookup`` call over its slots."""
    cdef idx n = a.outer * a.C * a.inner
    cdef int t, nt = a.nt
    if n == 0:
        return
    if a.tstride == 0:
        # NOTE: one table for every element: the flat bytes, split in equal parts
        if nt <= 1 or n < 4096:
            with nogil:
                sprat_lut256(a.x, a.y, n, a.table, a.flip)
            return
        for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
            sprat_lut256(a.x + t * n // nt, a.y + t * n // nt, (t + 1) * n // nt - t * n // nt,
                         a.table, a.flip)
        return
    if nt <= 1 or a.outer < nt:
        with nogil:
            _lookup_rows(a.x, a.y, a.table, a.tstride, 0, a.outer, a.C, a.inner, a.flip)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        _lookup_rows(a.x, a.y, a.table, a.tstride, t * a.outer // nt, (t + 1) * a.outer // nt,
                     a.C, a.inner, a.flip)


cdef class LookupCall(_BoundCall):
    """One ``qlinear_lookup`` call with its arguments checked and bound once
    (``BOUND_CALLS``). Raises as ``qlinear_lookup``."""
    cdef lut_call_t a

    def __call__(self):
        _lookup_run(&self.a)


def qlinear_lookup(int nt, const unsigned char[::1] x, unsigned char[::1] y,
                   const unsigned char[::1] table, idx outer, idx C, idx inner, bint signed_,
                   LookupCall into=None):
    """``y[o, c, i] = table[c, x[o, c, i] - min]`` over an (outer, C, inner) view of the bytes
    of a uint8 (``signed_`` False) or int8 tensor; ``table`` (C, 256), or (1, 256) for every
    channel. With ``into``: the checked arguments bound into that call object, nothing run.
    Raises ValueError on short operands."""
    cdef idx n = outer * C * inner
    if x.shape[0] < n or y.shape[0] < n or table.shape[0] < 256:
        raise ValueError("qlinear_lookup: operands too short")
    cdef lut_call_t a = lut_call_t(nt, NULL, NULL, &table[0],
                                   256 if table.shape[0] >= C * 256 and C > 1 else 0, outer,
                                   C, inner, 0x80 if signed_ else 0)
    if n:
        a.x, a.y = &x[0], &y[0]
    if into is not None:
        into.a = a
        return
    _lookup_run(&a)


# ---- QLinearAdd / QLinearMul (com.microsoft), same shapes ------------------------------------

cdef extern from *:
    """
    /* NOTE: the reference's float32 operations one by one: no fused multiply-add (the build
       allows contraction) and a true division by the output scale */
    __attribute__((optimize("no-reciprocal-math", "fp-contract=off", "no-associative-math")))
    static void sprat_qlinear_binary_b(const unsigned char *a, const unsigned char *b,
                                       Py_ssize_t bstep, unsigned char *y, Py_ssize_t n,
                                       int mul, int is_signed, float za, float sa, float zb,
                                       float sb, float sc, float zc) {
        Py_ssize_t i = 0;
        float lo = is_signed ? -128.0f : 0.0f, hi = is_signed ? 127.0f : 255.0f;
        const signed char *as = (const signed char *)a, *bs = (const signed char *)b;
    #if defined(__AVX2__)
        /* NOTE: the same operations 8 values a step (the loop below was not vectorised: a
           QLinearAdd of MobileNetV2's 56x56x24 took 0.7 ns a value) */
        const __m256 vza = _mm256_set1_ps(za), vsa = _mm256_set1_ps(sa);
        const __m256 vzb = _mm256_set1_ps(zb), vsb = _mm256_set1_ps(sb);
        const __m256 vsc = _mm256_set1_ps(sc), vzc = _mm256_set1_ps(zc);
        const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
        for (; i + 8 <= n; i += 8) {
            __m128i ab = _mm_loadl_epi64((const __m128i*)(a + i));
            __m128i bb = bstep ? _mm_loadl_epi64((const __m128i*)(b + i))
                               : _mm_set1_epi8((char)b[0]);
            __m256i ai = is_signed ? _mm256_cvtepi8_epi32(ab) : _mm256_cvtepu8_epi32(ab);
            __m256i bi = is_signed ? _mm256_cvtepi8_epi32(bb) : _mm256_cvtepu8_epi32(bb);
            __m256 u = _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(ai), vza), vsa);
            __m256 w = _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(bi), vzb), vsb);
            __m256 v = _mm256_div_ps(mul ? _mm256_mul_ps(u, w) : _mm256_add_ps(u, w), vsc);
            v = _mm256_add_ps(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                              vzc);
            v = _mm256_min_ps(_mm256_max_ps(v, vlo), vhi);
            __m256i q = _mm256_cvtps_epi32(v);
            __m128i h = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
            /* NOTE: within the type's range: the packs do not saturate */
            h = is_signed ? _mm_packs_epi16(h, h) : _mm_packus_epi16(h, h);
            _mm_storel_epi64((__m128i*)(y + i), h);
        }
    #endif
        for (; i < n; i++) {
            float u = ((is_signed ? (float)as[i] : (float)a[i]) - za) * sa;
            float w = ((is_signed ? (float)bs[i * bstep] : (float)b[i * bstep]) - zb) * sb;
            float v = nearbyintf((mul ? u * w : u + w) / sc) + zc;
            v = v < lo ? lo : v;
            v = v > hi ? hi : v;
            if (is_signed) ((signed char *)y)[i] = (signed char)(int)v;
            else y[i] = (unsigned char)(int)v;
        }
    }

    /* QLinearAdd / QLinearMul of two same-shaped operands; b's values advancing with a's */
    static void sprat_qlinear_binary(const unsigned char *a, const unsigned char *b,
                                     unsigned char *y, Py_ssize_t n, int mul, int is_signed,
                                     float za, float sa, float zb, float sb, float sc, float zc) {
        sprat_qlinear_binary_b(a, b, 1, y, n, mul, is_signed, za, sa, zb, sb, sc, zc);
    }
    """
    void sprat_qlinear_binary_b(const unsigned char* a, const unsigned char* b, idx bstep,
                                unsigned char* y, idx n, int mul, int is_signed, float za,
                                float sa, float zb, float sb, float sc, float zc) nogil
    void sprat_qlinear_binary(const unsigned char* a, const unsigned char* b, unsigned char* y,
                              idx n, int mul, int is_signed, float za, float sa, float zb,
                              float sb, float sc, float zc) nogil


cdef struct qbin_call_t:
    # one ``qlinear_binary`` (mid 0) or ``qlinear_binary_rows`` call's checked arguments
    int nt
    bint mul
    const unsigned char* a
    const unsigned char* b
    unsigned char* y
    idx n, outer, mid, inner
    bint signed_
    float za, sa, zb, sb, sc, zc


cdef _qbin_run(const qbin_call_t* s):
    """A checked ``qlinear_binary`` / ``qlinear_binary_rows`` call over its slots."""
    cdef int t, nt = s.nt
    cdef idx n = s.n, rows = s.outer * s.mid
    if n == 0:
        return
    if s.mid == 0:
        if nt <= 1:
            with nogil:
                sprat_qlinear_binary(s.a, s.b, s.y, n, s.mul, s.signed_, s.za, s.sa, s.zb, s.sb,
                                     s.sc, s.zc)
            return
        for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
            sprat_qlinear_binary(s.a + t * n // nt, s.b + t * n // nt, s.y + t * n // nt,
                                 (t + 1) * n // nt - t * n // nt, s.mul, s.signed_, s.za, s.sa,
                                 s.zb, s.sb, s.sc, s.zc)
        return
    if nt <= 1 or rows < nt:
        with nogil:
            _qbinary_rows(s.a, s.b, s.y, 0, rows, s.mid, s.inner, s.mul, s.signed_, s.za, s.sa,
                          s.zb, s.sb, s.sc, s.zc)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        _qbinary_rows(s.a, s.b, s.y, t * rows // nt, (t + 1) * rows // nt, s.mid, s.inner,
                      s.mul, s.signed_, s.za, s.sa, s.zb, s.sb, s.sc, s.zc)


cdef class QBinaryCall(_BoundCall):
    """One ``qlinear_binary`` or ``qlinear_binary_rows`` call with its arguments checked and
    bound once (``BOUND_CALLS``). Raises as the entry."""
    cdef qbin_call_t s

    def __call__(self):
        _qbin_run(&self.s)


def qlinear_binary(int nt, bint mul, const unsigned char[::1] a, const unsigned char[::1] b,
                   unsigned char[::1] y, idx n, bint signed_, float za, float sa, float zb,
                   float sb, float sc, float zc, QBinaryCall into=None):
    """com.microsoft QLinearAdd (``mul`` False) / QLinearMul of two same-shaped uint8 or int8
    (``signed_``) tensors of ``n`` values: ``y = saturate(round_half_even(((a - za) * sa
    (+|*) (b - zb) * sb) / sc) + zc)`` in float32, each operation rounded as written
    (onnxruntime's contrib-op definition; ``ops_contrib``). With ``into``: the checked
    arguments bound into that call object, nothing run. Raises ValueError on short
    operands."""
    if a.shape[0] < n or b.shape[0] < n or y.shape[0] < n:
        raise ValueError("qlinear_binary: operands too short")
    cdef qbin_call_t s = qbin_call_t(nt, mul, NULL, NULL, NULL, n, 0, 0, 0, signed_, za, sa,
                                     zb, sb, sc, zc)
    if n:
        s.a, s.b, s.y = &a[0], &b[0], &y[0]
    if into is not None:
        into.s = s
        return
    _qbin_run(&s)


cdef void _qbinary_rows(const unsigned char* a, const unsigned char* b, unsigned char* y,
                        idx r0, idx r1, idx mid, idx inner, bint mul, bint signed_, float za,
                        float sa, float zb, float sb, float sc, float zc) noexcept nogil:
    cdef idx r, o, m0, m1
    if inner == 1:
        # NOTE: one b value per run of ``mid`` values (a scalar operand: outer 1): each
        # outer row's part of [r0, r1) in one call, b held in a register
        o = r0 // mid
        while o * mid < r1:
            m0 = max(r0, o * mid)
            m1 = min(r1, (o + 1) * mid)
            sprat_qlinear_binary_b(a + m0, b + o, 0, y + m0, m1 - m0, mul, signed_, za, sa, zb,
                                   sb, sc, zc)
            o += 1
        return
    for r in range(r0, r1):
        sprat_qlinear_binary(a + r * inner, b + (r // mid) * inner, y + r * inner, inner, mul,
                             signed_, za, sa, zb, sb, sc, zc)


def qlinear_binary_rows(int nt, bint mul, const unsigned char[::1] a,
                        const unsigned char[::1] b, unsigned char[::1] y, idx outer, idx mid,
                        idx inner, bint signed_, float za, float sa, float zb, float sb,
                        float sc, float zc, QBinaryCall into=None):
    """``qlinear_binary`` with ``b`` broadcast over a middle run of axes: ``a`` and ``y``
    (outer, mid, inner) values, ``b`` (outer, 1, inner) (a squeeze-excite scale: a (N, H, W,
    C) map times (N, 1, 1, C)); each of the ``outer * mid`` rows of ``inner`` values is one
    ``qlinear_binary``, so the same bits. With ``into``: the checked arguments bound into that
    call object, nothing run. Raises ValueError on short operands."""
    cdef idx rows = outer * mid
    if a.shape[0] < rows * inner or y.shape[0] < rows * inner or b.shape[0] < outer * inner:
        raise ValueError("qlinear_binary_rows: operands too short")
    cdef qbin_call_t s = qbin_call_t(nt, mul, NULL, NULL, NULL, rows * inner, outer, mid,
                                     inner, signed_, za, sa, zb, sb, sc, zc)
    if rows * inner:
        s.a, s.b, s.y = &a[0], &b[0], &y[0]
    if into is not None:
        into.s = s
        return
    _qbin_run(&s)


cdef void _qgap_rows(const unsigned char* x, unsigned char* y, idx n0, idx n1, idx HW, idx C,
                     bint signed_, int bias, float scale, float yz, float lo, float hi,
                     int* acc) noexcept nogil:
    cdef idx n, p, c
    cdef const unsigned char* row
    cdef const signed char* srow
    cdef float f
    for n in range(n0, n1):
        for c in range(C):
            acc[c] = 0
        for p in range(HW):
            row = x + (n * HW + p) * C
            if signed_:
                srow = <const signed char*>row
                for c in range(C):
                    acc[c] += srow[c]
            else:
                for c in range(C):
                    acc[c] += row[c]
        for c in range(C):
            # NOTE: clamped to [lo - yz, hi - yz] before rounding (rint is monotonic and
            # keeps the integer bounds): MLAS's order, the same bytes
            f = <float>(acc[c] + bias) * scale
            f = min(max(f, lo - yz), hi - yz)
            if signed_:
                (<signed char*>y)[n * C + c] = <signed char>(<int>nearbyintf(f) + <int>yz)
            else:
                y[n * C + c] = <unsigned char>(<int>nearbyintf(f) + <int>yz)


cdef extern from *:
    """
    /* One QLinearSoftmax row of n 8-bit values at x (step ``inner``), as the reference kernel
       (``ops_contrib.qlinear_softmax``): e[k] = table[max - x[k]], the sum in 8 lanes (lane j
       the values k = j mod 8 in order) then ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))
       (``_sum8``: one add chain took 4 cycles a value), then y[k] = saturate(rint(e[k] / sum
       / ys) + yz); each operation rounded as written (no reciprocal, no reassociation: the
       reference's bits). ``e`` scratch of n + 8 floats. */
    __attribute__((optimize("no-reciprocal-math", "fp-contract=off", "no-associative-math")))
    static void sprat_qsoftmax_row(const unsigned char *x, Py_ssize_t inner, Py_ssize_t n,
                                   int in_signed, const float *table, float ys, float yz,
                                   int out_signed, float *e, unsigned char *y) {
        const signed char *xs = (const signed char *)x;
        int mx = -1000;
        for (Py_ssize_t k = 0; k < n; k++) {
            int v = in_signed ? (int)xs[k * inner] : (int)x[k * inner];
            mx = v > mx ? v : mx;
        }
        Py_ssize_t k0 = 0;
    #if defined(__AVX2__)
        if (inner == 1) {
            /* NOTE: 8 lookups a gather (one at a time, GCC moved each index out of a vector) */
            const __m256i vmx = _mm256_set1_epi32(mx);
            for (; k0 + 8 <= n; k0 += 8) {
                __m128i b = _mm_loadl_epi64((const __m128i*)(x + k0));
                __m256i v = in_signed ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
                _mm256_storeu_ps(e + k0, _mm256_i32gather_ps(table, _mm256_sub_epi32(vmx, v), 4));
            }
        }
    #endif
        for (Py_ssize_t k = k0; k < n; k++) {
            int v = in_signed ? (int)xs[k * inner] : (int)x[k * inner];
            e[k] = table[mx - v];
        }
        for (Py_ssize_t k = n; k < n + 8; k++)
            e[k] = 0.0f;
        float l[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    #if defined(__AVX2__)
        __m256 acc = _mm256_setzero_ps();
        for (Py_ssize_t k = 0; k < n; k += 8)
            acc = _mm256_add_ps(acc, _mm256_loadu_ps(e + k));
        _mm256_storeu_ps(l, acc);
    #else
        for (Py_ssize_t k = 0; k < n; k += 8)
            for (int j = 0; j < 8; j++)
                l[j] += e[k + j];
    #endif
        float sum = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
        float lo = out_signed ? -128.0f : 0.0f, hi = out_signed ? 127.0f : 255.0f;
        Py_ssize_t k = 0;
    #if defined(__AVX2__)
        if (inner == 1) {
            const __m256 vs = _mm256_set1_ps(sum), vys = _mm256_set1_ps(ys);
            const __m256 vyz = _mm256_set1_ps(yz), vlo = _mm256_set1_ps(lo);
            const __m256 vhi = _mm256_set1_ps(hi);
            for (; k + 8 <= n; k += 8) {
                __m256 v = _mm256_div_ps(_mm256_div_ps(_mm256_loadu_ps(e + k), vs), vys);
                v = _mm256_add_ps(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT |
                                                  _MM_FROUND_NO_EXC), vyz);
                v = _mm256_min_ps(_mm256_max_ps(v, vlo), vhi);
                __m256i q = _mm256_cvtps_epi32(v);
                __m128i h = _mm_packs_epi32(_mm256_castsi256_si128(q),
                                            _mm256_extracti128_si256(q, 1));
                h = out_signed ? _mm_packs_epi16(h, h) : _mm_packus_epi16(h, h);
                _mm_storel_epi64((__m128i*)(y + k), h);
            }
        }
    #endif
        for (; k < n; k++) {
            float v = nearbyintf(e[k] / sum / ys) + yz;
            v = v < lo ? lo : v;
            v = v > hi ? hi : v;
            if (out_signed) ((signed char *)y)[k * inner] = (signed char)(int)v;
            else y[k * inner] = (unsigned char)(int)v;
        }
    }
    """
    void sprat_qsoftmax_row(const unsigned char* x, idx inner, idx n, int in_signed,
                            const float* table, float ys, float yz, int out_signed, float* e,
                            unsigned char* y) noexcept nogil


cdef void _qsoftmax_rows(const unsigned char* x, unsigned char* y, idx r0, idx r1, idx n,
                         idx inner, bint in_signed, const float* table, float ys, float yz,
                         bint out_signed, float* e) noexcept nogil:
    cdef idx r, o, i, base
    for r in range(r0, r1):
        o = r // inner
        i = r - o * inner
        base = o * n * inner + i
        sprat_qsoftmax_row(x + base, inner, n, in_signed, table, ys, yz, out_signed, e, y + base)


def qlinear_softmax(int nt, const unsigned char[::1] x, unsigned char[::1] y, idx outer, idx n,
                    idx inner, bint in_signed, const float[::1] table, float ys, float yz,
                    bint out_signed, float[:, ::1] work):
    """com.microsoft QLinearSoftmax over an (outer, n, inner) view of the bytes of a uint8 or
    int8 (``in_signed``) tensor, along n: ``ops_contrib.qlinear_softmax``'s operations (the
    same bits), ``table`` its ``softmax_exp_table`` (256 floats), ``ys``, ``yz`` y's scale and
    zero point (int8 output with ``out_signed``). ``work`` (nt, n + 8) float32 scratch.
    Raises ValueError on short operands."""
    cdef idx rows = outer * inner
    if (x.shape[0] < rows * n or y.shape[0] < rows * n or table.shape[0] < 256
            or work.shape[0] < max(nt, 1) or work.shape[1] < n + 8):
        raise ValueError("qlinear_softmax: operands too short")
    if rows * n == 0:
        return
    cdef const unsigned char* px = &x[0]
    cdef unsigned char* py = &y[0]
    cdef const float* pt = &table[0]
    cdef int t
    if nt <= 1 or rows < nt:
        with nogil:
            _qsoftmax_rows(px, py, 0, rows, n, inner, in_signed, pt, ys, yz, out_signed,
                           &work[0, 0])
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        _qsoftmax_rows(px, py, t * rows // nt, (t + 1) * rows // nt, n, inner, in_signed, pt,
                       ys, yz, out_signed, &work[t, 0])


def qlinear_global_average_pool(int nt, const unsigned char[::1] x, unsigned char[::1] y,
                                idx N, idx HW, idx C, bint signed_, int xz, float scale,
                                int yz, int[::1] acc):
    """com.microsoft QLinearGlobalAveragePool over channels-last uint8 / int8 (``signed_``)
    ``x`` (N, HW, C) into ``y`` (N, C), as ``ops_contrib.qlinear_global_average_pool`` (MLAS's
    integer form): int32 sums per channel less ``xz * HW``, times float32 ``scale`` (x_scale /
    (y_scale * HW)), rounded half to even, plus ``yz``, saturated. ``acc``: C int32 per slot
    (scratch). Slots split the batch. Raises ValueError on short operands or sums that could
    leave int32 (HW * 255 >= 2^31)."""
    if x.shape[0] < N * HW * C or y.shape[0] < N * C or acc.shape[0] < nt * C:
        raise ValueError("qlinear_global_average_pool: operands too short")
    if HW >= (1 << 23):
        raise ValueError("qlinear_global_average_pool: image too large for int32 sums")
    if N * C == 0:
        return
    cdef float lo = -128.0 if signed_ else 0.0, hi = 127.0 if signed_ else 255.0
    cdef int bias = -xz * <int>HW
    cdef int t
    if nt <= 1 or N < nt:
        with nogil:
            _qgap_rows(&x[0], &y[0], 0, N, HW, C, signed_, bias, scale, yz, lo, hi, &acc[0])
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        _qgap_rows(&x[0], &y[0], t * N // nt, (t + 1) * N // nt, HW, C, signed_, bias, scale,
                   yz, lo, hi, &acc[t * C])


cdef extern from *:
    """
    #pragma GCC push_options
    #pragma GCC optimize("no-reciprocal-math", "no-associative-math", "fp-contract=off")
    /* Planes [p0, p1) (of N * C, each H x W bytes) of QLinearAveragePool: per output pixel the
       window's taps inside the map through ``table`` (x's byte -> its dequantized float32
       value, as double), summed in double (exact: every term is a multiple of one float32
       scale's ulp within 2^40 of it, so any order gives the same sum), divided by ``count``
       (per output pixel), rounded to float32, then quantized: rint(v / ys) + yz saturated to
       [lo, hi]. The reference's operations (``ops_contrib.qlinear_average_pool``) */
    static void sprat_qavgpool_planes(const unsigned char* x, unsigned char* y, Py_ssize_t p0,
                                      Py_ssize_t p1, Py_ssize_t H, Py_ssize_t W, Py_ssize_t OH,
                                      Py_ssize_t OW, Py_ssize_t kh, Py_ssize_t kw,
                                      Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t dh,
                                      Py_ssize_t dw, Py_ssize_t ph, Py_ssize_t pw,
                                      const double* table, const double* count, float ys,
                                      float yz, float lo, float hi, int is_signed) {
        for (Py_ssize_t p = p0; p < p1; p++) {
            const unsigned char* xp = x + p * H * W;
            unsigned char* yp = y + p * OH * OW;
            for (Py_ssize_t oy = 0; oy < OH; oy++)
                for (Py_ssize_t ox = 0; ox < OW; ox++) {
                    double s = 0.0;
                    for (Py_ssize_t i = 0; i < kh; i++) {
                        const Py_ssize_t iy = oy * sh - ph + i * dh;
                        if (iy < 0 || iy >= H)
                            continue;
                        const unsigned char* row = xp + iy * W;
                        for (Py_ssize_t j = 0; j < kw; j++) {
                            const Py_ssize_t ix = ox * sw - pw + j * dw;
                            if (ix >= 0 && ix < W)
                                s += table[row[ix]];
                        }
                    }
                    const float v = (float)(s / count[oy * OW + ox]);
                    float r = rintf(v / ys) + yz;
                    r = r < lo ? lo : (r > hi ? hi : r);
                    yp[oy * OW + ox] = is_signed ? (unsigned char)(signed char)(int)r
                                                 : (unsigned char)(int)r;
                }
        }
    }
    #pragma GCC pop_options
    """
    void _qavgpool_planes "sprat_qavgpool_planes" (
        const unsigned char* x, unsigned char* y, idx p0, idx p1, idx H, idx W, idx OH, idx OW,
        idx kh, idx kw, idx sh, idx sw, idx dh, idx dw, idx ph, idx pw, const double* table,
        const double* count, float ys, float yz, float lo, float hi, int is_signed) noexcept nogil


def qlinear_average_pool(int nt, const unsigned char[::1] x, unsigned char[::1] y, idx planes,
                         idx H, idx W, idx OH, idx OW, idx kh, idx kw, idx sh, idx sw, idx dh,
                         idx dw, idx ph, idx pw, const double[::1] table,
                         const double[::1] count, float ys, float yz, bint signed_):
    """com.microsoft QLinearAveragePool over ``planes`` (N * C) NCHW planes of uint8 / int8
    (``signed_``) bytes ``x`` (H x W each) into ``y`` (OH x OW each), 2-D windows (kh, kw),
    strides, dilations and leading pads: ``sprat_qavgpool_planes``. ``table`` (256 doubles,
    by byte) the dequantized values, ``count`` (OH * OW doubles) each window's divisor (as the
    reference counts it: AveragePool-22's ``count_include_pad``, ceil_mode); ``ys``, ``yz``: y's
    scale and zero point. Planes split over ``nt`` slots. Raises ValueError on short operands
    or a divisor of 0."""
    cdef idx i
    if (x.shape[0] < planes * H * W or y.shape[0] < planes * OH * OW or table.shape[0] < 256
            or count.shape[0] < OH * OW):
        raise ValueError("qlinear_average_pool: operands too short")
    for i in range(OH * OW):
        if not count[i] > 0:
            raise ValueError("qlinear_average_pool: a window with no taps to divide by")
    if planes * OH * OW == 0:
        return
    cdef float lo = -128.0 if signed_ else 0.0, hi = 127.0 if signed_ else 255.0
    cdef int t
    if nt <= 1:
        with nogil:
            _qavgpool_planes(&x[0], &y[0], 0, planes, H, W, OH, OW, kh, kw, sh, sw, dh, dw, ph,
                             pw, &table[0], &count[0], ys, yz, lo, hi, signed_)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        _qavgpool_planes(&x[0], &y[0], t * planes // nt, (t + 1) * planes // nt, H, W, OH, OW,
                         kh, kw, sh, sw, dh, dw, ph, pw, &table[0], &count[0], ys, yz, lo, hi,
                         signed_)


# ---- QLinearConv 1x1 in one pass: blocks of pixels widened, multiplied, requantised ----------

cdef void _qpointwise_slot(idx t, idx nt, const unsigned char* x, bint signed_, float xz,
                           const float* w, idx P, idx C, idx M, idx blk, const int* bias,
                           const float* mult, float zp, float lo, float hi, int kind,
                           unsigned char* y8, int* y32, float* xb, float* acc,
                           int* scr, const float* post) noexcept nogil:
    cdef idx nb = (P + blk - 1) // blk
    cdef idx bi, p0, rows
    for bi in range(t * nb // nt, (t + 1) * nb // nt):
        p0 = bi * blk
        rows = min(blk, P - p0)
        _qunpack_rows(x + p0 * C, signed_, xz, 0, rows, C, 0, C, xb)
        sgemm(False, False, rows, M, C, 1.0, xb, C, w, M, 0.0, acc, M)
        _qrequant_rows(acc, 0, 1, 0, rows, M, bias, mult, zp, lo, hi, kind,
                       y8 + p0 * M if kind != 2 else NULL, y32 + p0 * M if kind == 2 else NULL,
                       scr, post)


def qconv_pointwise(int nt, const unsigned char[::1] x, bint signed_, float xz,
                    const float[::1] w, idx P, idx C, idx M, idx blk, const int[::1] bias,
                    const float[::1] mult, float zp, float lo, float hi, int kind,
                    unsigned char[::1] y8, int[::1] y32, float[:, ::1] xbuf,
                    float[:, ::1] abuf, int[:, ::1] scratch, const float[::1] post):
    """A 1x1, stride-1, one-group quantized conv of ``x`` (P, C) (bytes of uint8/int8 NHWC)
    in one pass: per block of ``blk`` pixels, ``x - xz`` widened into ``xbuf``, one float32
    GEMM with ``w`` (C, M) (the integer weights minus their zero points) into ``abuf`` (exact:
    the caller checks the 2^24 bound, see ``qconv.py``) and the epilogue of ``qconv_requant``
    into ``y8`` / ``y32`` (``post`` as there), while the block is in cache. Workspaces (nt,
    ...): ``xbuf`` blk*C, ``abuf`` blk*M floats, ``scratch`` M ints. Raises ValueError on short
    operands."""
    if post.shape[0] not in (0, 4 * M):
        raise ValueError("qconv_pointwise: post must hold 0 or 4 * M floats")
    if (x.shape[0] < P * C or w.shape[0] < C * M or bias.shape[0] < M or mult.shape[0] < M
            or xbuf.shape[0] < nt or xbuf.shape[1] < blk * C or abuf.shape[0] < nt
            or abuf.shape[1] < blk * M or scratch.shape[0] < nt or scratch.shape[1] < M
            or (kind == 2 and y32.shape[0] < P * M) or (kind != 2 and y8.shape[0] < P * M)):
        raise ValueError("qconv_pointwise: operands too short")
    if P * M == 0:
        return
    cdef const unsigned char* px = &x[0]
    cdef const float* pw = &w[0]
    cdef const int* pb = &bias[0]
    cdef const float* pm = &mult[0]
    cdef unsigned char* p8 = &y8[0] if kind != 2 else NULL
    cdef int* p32 = &y32[0] if kind == 2 else NULL
    cdef const float* pp = &post[0] if post.shape[0] else NULL
    cdef int t
    if nt <= 1:
        with nogil:
            _qpointwise_slot(0, 1, px, signed_, xz, pw, P, C, M, blk, pb, pm, zp, lo, hi, kind,
                             p8, p32, &xbuf[0, 0], &abuf[0, 0], &scratch[0, 0], pp)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        _qpointwise_slot(t, nt, px, signed_, xz, pw, P, C, M, blk, pb, pm, zp, lo, hi, kind,
                         p8, p32, &xbuf[t, 0], &abuf[t, 0], &scratch[t, 0], pp)


# ---- QLinearConv depthwise, direct: register-blocked taps over float rows, requantised ------

cdef extern from *:
    """
    #include <string.h>
    #if defined(__AVX2__) && defined(__FMA__)
    #include <immintrin.h>
    #endif
    /* buf (Wp * C floats) = [pl zero pixels, x[0:W] - xz, pr zero pixels]: one input row of a
       depthwise conv widened once for the kh output rows that read it; the zero pixels are the
       padding (x's zero point minus itself), so the taps need no bounds. buf2 (may be NULL):
       a second copy, written in the same pass. */
    static void sprat_qdw_widen(const unsigned char* x, int is_signed, float xz, Py_ssize_t W,
                                Py_ssize_t C, Py_ssize_t pl, Py_ssize_t pr, float* buf,
                                float* buf2) {
        Py_ssize_t n = W * C, i = 0;
        float* o = buf + pl * C;
        float* o2 = buf2 != NULL ? buf2 + pl * C : NULL;
        memset(buf, 0, pl * C * sizeof(float));
        memset(o + n, 0, pr * C * sizeof(float));
        if (buf2 != NULL) {
            memset(buf2, 0, pl * C * sizeof(float));
            memset(o2 + n, 0, pr * C * sizeof(float));
        }
    #if defined(__AVX2__) && defined(__FMA__)
        __m256 vz = _mm256_set1_ps(xz);
        for (; i + 8 <= n; i += 8) {
            __m128i b = _mm_loadl_epi64((const __m128i*)(x + i));
            __m256i v = is_signed ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
            __m256 f = _mm256_sub_ps(_mm256_cvtepi32_ps(v), vz);
            _mm256_storeu_ps(o + i, f);
            if (o2 != NULL)
                _mm256_storeu_ps(o2 + i, f);
        }
    #endif
        for (; i < n; i++) {
            o[i] = (is_signed ? (float)((const signed char*)x)[i] : (float)x[i]) - xz;
            if (o2 != NULL)
                o2[i] = o[i];
        }
    }

    #if defined(__AVX2__) && defined(__FMA__)
    /* np (1..4) output pixels x nv (1 or 2) vectors of 8 channels from channel c: the sums over
       the taps of rows[i][(ow * sw + j * dw) * C + c] * w[(i * kw + j) * C + c], + bias, as
       int32 into t[ow * C + c]. NOTE: the accumulators stay in registers across the taps (the
       former kernel loaded and stored its float row for each tap); 4 x 16 is 8 of AVX2's 16 */
    static inline __attribute__((always_inline)) void sprat_qdw_block(
            const float* const* rows, int kh, int kw, Py_ssize_t C, Py_ssize_t sw,
            Py_ssize_t dw, const float* w, const int* bias, Py_ssize_t ow0, Py_ssize_t c,
            const int np, const int nv, int* t) {
        __m256 acc[4][2];
        for (int p = 0; p < np; p++)
            for (int v = 0; v < nv; v++)
                acc[p][v] = _mm256_setzero_ps();
        for (int i = 0; i < kh; i++) {
            if (rows[i] == NULL) continue;
            const float* r = rows[i] + ow0 * sw * C + c;
            for (int j = 0; j < kw; j++) {
                const float* q = r + j * dw * C;
                const float* wt = w + (i * kw + j) * C + c;
                for (int v = 0; v < nv; v++) {
                    __m256 wv = _mm256_loadu_ps(wt + 8 * v);
                    for (int p = 0; p < np; p++)
                        acc[p][v] = _mm256_fmadd_ps(_mm256_loadu_ps(q + p * sw * C + 8 * v), wv,
                                                    acc[p][v]);
                }
            }
        }
        for (int v = 0; v < nv; v++) {
            __m256i b = _mm256_loadu_si256((const __m256i*)(bias + c + 8 * v));
            for (int p = 0; p < np; p++)
                _mm256_storeu_si256((__m256i*)(t + (ow0 + p) * C + c + 8 * v),
                                    _mm256_add_epi32(_mm256_cvtps_epi32(acc[p][v]), b));
        }
    }
    #endif

    #if defined(__AVX2__) && defined(__FMA__) && defined(__GNUC__)
    /* sprat_qdw_block on AVX-512 (run when sprat_i8_wide, int8.pxi): vectors of 16 channels;
       the same exact integer sums (the order of the additions does not matter below 2^24) */
    __attribute__((target("avx512f")))
    static inline __attribute__((always_inline)) void sprat_qdw_block_512(
            const float* const* rows, int kh, int kw, Py_ssize_t C, Py_ssize_t sw,
            Py_ssize_t dw, const float* w, const int* bias, Py_ssize_t ow0, Py_ssize_t c,
            const int np, const int nv, int* t) {
        __m512 acc[4][2];
        for (int p = 0; p < np; p++)
            for (int v = 0; v < nv; v++)
                acc[p][v] = _mm512_setzero_ps();
        for (int i = 0; i < kh; i++) {
            if (rows[i] == NULL) continue;
            const float* r = rows[i] + ow0 * sw * C + c;
            for (int j = 0; j < kw; j++) {
                const float* q = r + j * dw * C;
                const float* wt = w + (i * kw + j) * C + c;
                for (int v = 0; v < nv; v++) {
                    __m512 wv = _mm512_loadu_ps(wt + 16 * v);
                    for (int p = 0; p < np; p++)
                        acc[p][v] = _mm512_fmadd_ps(_mm512_loadu_ps(q + p * sw * C + 16 * v), wv,
                                                    acc[p][v]);
                }
            }
        }
        for (int v = 0; v < nv; v++) {
            __m512i b = _mm512_loadu_si512((const void*)(bias + c + 16 * v));
            for (int p = 0; p < np; p++)
                _mm512_storeu_si512((void*)(t + (ow0 + p) * C + c + 16 * v),
                                    _mm512_add_epi32(_mm512_cvtps_epi32(acc[p][v]), b));
        }
    }

    /* The channels [0, C - C % 16) of sprat_qdw_row on AVX-512; returns that channel count */
    __attribute__((target("avx512f")))
    static Py_ssize_t sprat_qdw_row_512(const float* const* rows, int kh, int kw,
                                        Py_ssize_t OW, Py_ssize_t C, Py_ssize_t sw,
                                        Py_ssize_t dw, const float* w, const int* bias, int* t) {
        Py_ssize_t ow = 0;
        for (; ow + 4 <= OW; ow += 4) {
            Py_ssize_t c = 0;
            for (; c + 32 <= C; c += 32)
                sprat_qdw_block_512(rows, kh, kw, C, sw, dw, w, bias, ow, c, 4, 2, t);
            for (; c + 16 <= C; c += 16)
                sprat_qdw_block_512(rows, kh, kw, C, sw, dw, w, bias, ow, c, 4, 1, t);
        }
        for (; ow < OW; ow++) {
            Py_ssize_t c = 0;
            for (; c + 32 <= C; c += 32)
                sprat_qdw_block_512(rows, kh, kw, C, sw, dw, w, bias, ow, c, 1, 2, t);
            for (; c + 16 <= C; c += 16)
                sprat_qdw_block_512(rows, kh, kw, C, sw, dw, w, bias, ow, c, 1, 1, t);
        }
        return C - C % 16;
    }
    #endif

    /* One output row of a depthwise conv: t[ow * C + c] (int32) = bias[c] + the exact sum over
       the kh x kw taps (rows[i] NULL: tap row i outside the map) for ow < OW. */
    static void sprat_qdw_row(const float* const* rows, int kh, int kw, Py_ssize_t OW,
                              Py_ssize_t C, Py_ssize_t sw, Py_ssize_t dw, const float* w,
                              const int* bias, int* t) {
        Py_ssize_t ow = 0, c0 = 0;
    #if defined(__AVX2__) && defined(__FMA__)
        Py_ssize_t cw = 0;
    #if defined(__GNUC__)
        if (sprat_i8_wide)
            cw = sprat_qdw_row_512(rows, kh, kw, OW, C, sw, dw, w, bias, t);
    #endif
        for (; ow + 4 <= OW; ow += 4) {
            Py_ssize_t c = cw;
            for (; c + 16 <= C; c += 16)
                sprat_qdw_block(rows, kh, kw, C, sw, dw, w, bias, ow, c, 4, 2, t);
            for (; c + 8 <= C; c += 8)
                sprat_qdw_block(rows, kh, kw, C, sw, dw, w, bias, ow, c, 4, 1, t);
        }
        for (; ow < OW; ow++) {
            Py_ssize_t c = cw;
            for (; c + 16 <= C; c += 16)
                sprat_qdw_block(rows, kh, kw, C, sw, dw, w, bias, ow, c, 1, 2, t);
            for (; c + 8 <= C; c += 8)
                sprat_qdw_block(rows, kh, kw, C, sw, dw, w, bias, ow, c, 1, 1, t);
        }
        c0 = C - C % 8;
    #endif
        if (c0 == C)
            return;
        for (ow = 0; ow < OW; ow++)
            for (Py_ssize_t c = c0; c < C; c++) {
                float a = 0.0f;
                for (int i = 0; i < kh; i++) {
                    if (rows[i] == NULL) continue;
                    const float* r = rows[i] + ow * sw * C + c;
                    for (int j = 0; j < kw; j++)
                        a += r[j * dw * C] * w[(i * kw + j) * C + c];
                }
                t[ow * C + c] = bias[c] + (int)a;
            }
    }
    """
    void sprat_qdw_widen(const unsigned char* x, int is_signed, float xz, idx W, idx C, idx pl,
                         idx pr, float* buf, float* buf2) nogil
    void sprat_qdw_row(const float* const* rows, int kh, int kw, idx OW, idx C, idx sw, idx dw,
                       const float* w, const int* bias, int* t) nogil


cdef enum:
    QDW_MAX_TAPS = 64  # kernel rows a direct depthwise conv holds (span (kh-1)*dh + 1)


cdef void _qdw_widen_ring(const unsigned char* x, bint signed_, float xz, idx W, idx C,
                          idx pw, idx pr, idx wp, idx span, idx rows, idx key, idx ih,
                          float* fbuf, int* tags) noexcept nogil:
    """Input row ``ih`` (tag ``key``: its index among the N*H rows) widened into its slot of
    the ring (``ih % span``) unless there already; with ``rows == 2 * span`` (the blocked
    kernel's mirrored ring) also into slot ``ih % span + span``, so that any ``span``
    consecutive input rows lie at consecutive slots from ``ih_first % span``."""
    cdef idx slot = ih % span
    if tags[slot] == key:
        return
    sprat_qdw_widen(x, signed_, xz, W, C, pw, pr, fbuf + slot * wp,
                    fbuf + (slot + span) * wp if rows == 2 * span else NULL)
    tags[slot] = <int>key


cdef void _qdw_slot(idx t, idx nt, const unsigned char* x, bint signed_, float xz,
                    const float* w, idx N, idx H, idx W, idx C, idx OH, idx OW, idx kh, idx kw,
                    idx sh, idx sw, idx dh, idx dw, idx ph, idx pw, const int* bias,
                    const float* mult, float zp, float lo, float hi, int kind,
                    unsigned char* y8, int* y32, float* fbuf, int* ibuf,
                    const float* post, const float* wpk, const float* bpk,
                    idx ct, const float* mq, const float* mpost) noexcept nogil:
    cdef idx nr = N * OH
    cdef idx span = (kh - 1) * dh + 1
    cdef idx pr = max(<idx>0, (OW - 1) * sw + (kw - 1) * dw - pw - (W - 1))
    cdef idx wp = (pw + W + pr) * C
    cdef idx r, n, oh, i, ih, ih0, i0, i1, first, ow, o, c
    cdef int* tags = ibuf + OW * C
    cdef const float* rows[QDW_MAX_TAPS]
    cdef int* tout = ibuf
    cdef idx ring = 2 * span if wpk != NULL else span
    cdef float* ftmp = fbuf + ring * wp  # NOTE: the blocked kernel's float32 output row
    for i in range(span):
        tags[i] = -1
    for r in range(t * nr // nt, (t + 1) * nr // nt):
        n = r // OH
        oh = r - n * OH
        if wpk != NULL:
            # NOTE: the float32 conv's register-blocked kernel (simd/depthwise.c) over the
            # window of valid input rows, contiguous in the mirrored ring, padded columns
            # included (so every pixel is interior); its sums are exact integers in float32
            ih0 = oh * sh - ph
            i0 = (-ih0 + dh - 1) // dh if ih0 < 0 else 0
            i1 = (H - 1 - ih0) // dh + 1 if H - 1 - ih0 >= 0 else 0
            i1 = max(i0, min(i1, kh))
            first = ih0 + i0 * dh
            for i in range(i0, i1):
                ih = ih0 + i * dh
                _qdw_widen_ring(x + (n * H + ih) * W * C, signed_, xz, W, C, pw, pr, wp, span,
                                ring, n * H + ih, ih, fbuf, tags)
            o = r * OW * C
            if mq != NULL:
                # NOTE: bpk the float32 bias (exact: see qconv_depthwise), requantised in
                # registers
                sprat_dw_units_q8(y8 + o, fbuf + (first % span if i1 > i0 else 0) * wp, wpk,
                                  bpk, mq, (i1 - i0 - 1) * dh + 1 if i1 > i0 else 0,
                                  pw + W + pr, C, 1, OW, kh, kw, 1, sw, dh, i0 * dh, 0, ct, 0,
                                  ((C + 7) // 8 + ct - 1) // ct, zp, lo, hi, kind == 1, mpost,
                                  ((C + 7) // 8) * 8)
                continue
            sprat_dw_units(ftmp, fbuf + (first % span if i1 > i0 else 0) * wp, wpk, bpk, NULL,
                           NULL, (i1 - i0 - 1) * dh + 1 if i1 > i0 else 0, pw + W + pr, C, 1,
                           OW, kh, kw, 1, sw, dh, i0 * dh, 0, ct, 1, 0,
                           ((C + 7) // 8 + ct - 1) // ct, 0, 0.0, 0.0)
            for ow in range(OW):
                for c in range(C):
                    tout[ow * C + c] = <int>ftmp[ow * C + c] + bias[c]
        else:
            for i in range(kh):
                ih = oh * sh - ph + i * dh
                if ih < 0 or ih >= H:
                    rows[i] = NULL
                    continue
                # NOTE: a ring of the last ``span`` input rows, each widened once per slot
                _qdw_widen_ring(x + (n * H + ih) * W * C, signed_, xz, W, C, pw, pr, wp, span,
                                ring, n * H + ih, ih, fbuf, tags)
                rows[i] = fbuf + (ih % span) * wp
            sprat_qdw_row(rows, <int>kh, <int>kw, OW, C, sw, dw, w, bias, tout)
        o = r * OW * C
        if kind == 2:
            memcpy(y32 + o, tout, OW * C * sizeof(int))
            continue
        sprat_q_out_rows(tout, OW, C, mult, zp, lo, hi, post, C, kind == 1, y8 + o)


def qdw_workspace(idx W, idx C, idx OW, idx kh, idx kw, idx sw, idx dh, idx dw, idx pw,
                  bint blocked=False):
    """(floats, ints) per slot of ``qconv_depthwise``: the ring of widened input rows (with
    ``blocked``, mirrored, plus a float32 output row) and the int32 output row with the ring's
    tags; None when the kernel rows span more than it holds."""
    cdef idx span = (kh - 1) * dh + 1
    if span > QDW_MAX_TAPS or kh > QDW_MAX_TAPS:
        return None
    cdef idx pr = max(<idx>0, (OW - 1) * sw + (kw - 1) * dw - pw - (W - 1))
    if blocked:
        return 2 * span * (pw + W + pr) * C + OW * C, OW * C + span
    return span * (pw + W + pr) * C, OW * C + span


def qdw_blocked(idx kw, idx sw, idx dw):
    """Whether ``qconv_depthwise`` can sum the taps with the float32 conv's register-blocked
    kernel (``conv_depthwise_blocked``: this build has it, kernel 3 or 5 wide, horizontal
    stride 1 or 2, no horizontal dilation); its packed weights and bias are then given."""
    return bool(SPRAT_DW_SIMD) and kw in (3, 5) and sw in (1, 2) and dw == 1


def qconv_depthwise(int nt, const unsigned char[::1] x, bint signed_, float xz,
                    const float[::1] w, idx N, idx H, idx W, idx C, idx OH, idx OW, idx kh,
                    idx kw, idx sh, idx sw, idx dh, idx dw, idx ph, idx pw,
                    const int[::1] bias, const float[::1] mult, float zp, float lo, float hi,
                    int kind, unsigned char[::1] y8, int[::1] y32, float[:, ::1] fbuf,
                    int[:, ::1] ibuf, const float[::1] post, const float[::1] wpk=None,
                    const float[::1] bpk=None, idx ct=0, const float[::1] mq=None,
                    const float[::1] mpost=None):
    """A depthwise (group == C == M) quantized conv of ``x`` (N, H, W, C) into ``y`` (N, OH,
    OW, C), directly: each input row widened once to float32 ``x - xz`` (zero pixels for the
    padding) into a ring, then per output row the taps summed in registers (exact: the caller
    checks the 2^24 bound), ``w`` (kh, kw, C) the integer weights minus their zero points:
    with ``wpk`` (those weights packed by ``conv.depthwise_pack``; ``bpk``: ceil(C/8)*8
    zeros; ``ct``: 8-channel blocks per tile, ``conv.depthwise_split``), where ``qdw_blocked``
    allows, by the float32 conv's register-blocked kernel (up to 8 pixels x 8 channels, each
    input vector loaded once for the taps that read it), else 4 pixels x 16 channels at a
    time; then the epilogue of ``qconv_requant`` (``post`` as there). Output rows split over
    ``nt`` slots; workspaces (nt, ...) of the sizes ``qdw_workspace`` gives (``blocked`` when
    ``wpk`` is given): ``fbuf`` floats, ``ibuf`` ints. With ``mq`` (``mult`` padded to
    C8 = ceil(C/8)*8; kind 0 or 1, ``post`` empty: ``mpost`` holds its 4 rows padded to C8,
    or nothing) ``bpk`` is the bias as float32 and
    the blocked kernel requantises in registers: the caller checks that ``|bias| + the bound
    of the sums`` stays within 2^24, so the float32 sum is float32(acc + bias) exactly, as the
    spec computes it. Raises ValueError on short operands, a kernel taller than the kernel
    holds, or ``wpk`` where ``qdw_blocked`` does not allow."""
    cdef bint blocked = wpk is not None and wpk.shape[0] > 0
    if blocked and not qdw_blocked(kw, sw, dw):
        raise ValueError("qconv_depthwise: no blocked kernel for this shape in this build")
    if blocked and (wpk.shape[0] < ((C + 7) // 8) * 8 * kh * kw or bpk is None
                    or bpk.shape[0] < ((C + 7) // 8) * 8 or ct <= 0):
        raise ValueError("qconv_depthwise: packed weights, bias or tile too short")
    cdef bint fused = mq is not None and mq.shape[0] > 0
    if fused and (not blocked or kind == 2 or post.shape[0] or mq.shape[0] < ((C + 7) // 8) * 8
                  or (mpost is not None and mpost.shape[0] not in (0, 4 * ((C + 7) // 8) * 8))):
        raise ValueError("qconv_depthwise: mq needs the blocked kernel, kind 0 or 1, post "
                         "empty, ceil(C/8)*8 multipliers and mpost empty or 4 rows of them")
    sizes = qdw_workspace(W, C, OW, kh, kw, sw, dh, dw, pw, blocked)
    if sizes is None:
        raise ValueError("qconv_depthwise: the kernel's rows span more than it holds")
    if (x.shape[0] < N * H * W * C or w.shape[0] < kh * kw * C or bias.shape[0] < C
            or mult.shape[0] < C or fbuf.shape[0] < nt or fbuf.shape[1] < sizes[0]
            or ibuf.shape[0] < nt or ibuf.shape[1] < sizes[1]
            or post.shape[0] not in (0, 4 * C)
            or (kind == 2 and y32.shape[0] < N * OH * OW * C)
            or (kind != 2 and y8.shape[0] < N * OH * OW * C)):
        raise ValueError("qconv_depthwise: operands too short")
    if N * OH * OW * C == 0:
        return
    cdef const unsigned char* px = &x[0]
    cdef const float* pw_ = &w[0]
    cdef const int* pb = &bias[0]
    cdef const float* pm = &mult[0]
    cdef unsigned char* p8 = &y8[0] if kind != 2 else NULL
    cdef int* p32 = &y32[0] if kind == 2 else NULL
    cdef const float* pp = &post[0] if post.shape[0] else NULL
    cdef const float* pwk = &wpk[0] if blocked else NULL
    cdef const float* pbk = &bpk[0] if blocked else NULL
    cdef const float* pmq = &mq[0] if fused else NULL
    cdef const float* pmp = &mpost[0] if fused and mpost is not None and mpost.shape[0] else NULL
    cdef int t
    if nt <= 1:
        with nogil:
            _qdw_slot(0, 1, px, signed_, xz, pw_, N, H, W, C, OH, OW, kh, kw, sh, sw, dh, dw, ph,
                      pw, pb, pm, zp, lo, hi, kind, p8, p32, &fbuf[0, 0], &ibuf[0, 0], pp, pwk,
                      pbk, ct, pmq, pmp)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        _qdw_slot(t, nt, px, signed_, xz, pw_, N, H, W, C, OH, OW, kh, kw, sh, sw, dh, dw, ph,
                  pw, pb, pm, zp, lo, hi, kind, p8, p32, &fbuf[t, 0], &ibuf[t, 0], pp, pwk,
                  pbk, ct, pmq, pmp)


# ---- A fused lookup's channels that no second requantisation reproduces ----------------------

cdef extern from *:
    """
    /* Every channel of pixels [p0, p1) of y (rows of C bytes) through its own table (t: C
       tables of 256 bytes, indexed by the byte ^ flip), 8 channels a step: one 8-byte load
       and store, the eight lookups independent of each other (the byte loop stored after
       each lookup and reloaded the channel list: ~1 ns a byte, this ~0.3) */
    static void sprat_lut_channels(unsigned char* y, Py_ssize_t p0, Py_ssize_t p1,
                                   Py_ssize_t C, const unsigned char* t, unsigned char flip) {
        const uint64_t f8 = 0x0101010101010101ULL * flip;
        for (Py_ssize_t p = p0; p < p1; p++) {
            unsigned char* yr = y + p * C;
            Py_ssize_t c = 0;
            for (; c + 8 <= C; c += 8) {
                uint64_t v, o = 0;
                memcpy(&v, yr + c, 8);
                v ^= f8;
                const unsigned char* tc = t + c * 256;
                for (int i = 0; i < 8; i++)
                    o |= (uint64_t)tc[i * 256 + ((v >> (8 * i)) & 255)] << (8 * i);
                memcpy(yr + c, &o, 8);
            }
            for (; c < C; c++)
                yr[c] = t[c * 256 + (yr[c] ^ flip)];
        }
    }
    """
    void _lut_channels "sprat_lut_channels" (unsigned char* y, idx p0, idx p1, idx C,
                                             const unsigned char* t,
                                             unsigned char flip) noexcept nogil


cdef void _qlookup_channels_rows(unsigned char* y, idx p0, idx p1, idx C, const int* chans,
                                 idx k, const unsigned char* tables,
                                 unsigned char flip) noexcept nogil:
    """Pixels [p0, p1): the ``k`` channels ``chans`` through their tables; every channel in
    order (k == C, chans[i] == i: a BatchNormalization and HardSwish between quantized convs
    give each channel its own table) by ``sprat_lut_channels``."""
    cdef idx p, i
    cdef unsigned char* yr
    cdef bint every = k == C
    for i in range(k):
        if chans[i] != i:
            every = False
            break
    if every:
        _lut_channels(y, p0, p1, C, tables, flip)
        return
    for p in range(p0, p1):
        yr = y + p * C
        for i in range(k):
            yr[chans[i]] = tables[i * 256 + (yr[chans[i]] ^ flip)]


def qlookup_channels(int nt, unsigned char[::1] y, idx P, idx C, const int[::1] chans,
                     const unsigned char[::1] tables, bint signed_):
    """In place, for the ``k`` channels ``chans`` of ``y`` (P, C) (bytes of a uint8 map, or
    int8 with ``signed_``): ``y[p, chans[i]] = tables[i, y[p, chans[i]] - min]`` (``tables``
    (k, 256) bytes): the channels of a quantized conv's fused lookup that its epilogue left as
    the table's index (``qconv.py``). Raises ValueError on short operands."""
    cdef idx k = chans.shape[0]
    cdef idx i
    if y.shape[0] < P * C or tables.shape[0] < k * 256:
        raise ValueError("qlookup_channels: operands too short")
    for i in range(k):
        if chans[i] < 0 or chans[i] >= C:
            raise ValueError("qlookup_channels: channel out of range")
    if P * C == 0 or k == 0:
        return
    cdef unsigned char* py = &y[0]
    cdef const int* pc = &chans[0]
    cdef const unsigned char* pt = &tables[0]
    cdef unsigned char flip = 0x80 if signed_ else 0
    cdef int t
    if nt <= 1:
        with nogil:
            _qlookup_channels_rows(py, 0, P, C, pc, k, pt, flip)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        _qlookup_channels_rows(py, t * P // nt, (t + 1) * P // nt, C, pc, k, pt, flip)
