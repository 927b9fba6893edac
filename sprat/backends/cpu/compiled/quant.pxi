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


cdef void _qrequant_rows(const float* acc, idx lda, int S, idx p0, idx p1, idx M,
                         const int* bias, const float* mult, float zp, float lo, float hi,
                         int kind, unsigned char* y8, int* y32, int* t) noexcept nogil:
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
        elif kind == 1:
            for m in range(M):
                v = nearbyintf(<float>t[m] * mult[m]) + zp
                v = fmin32(fmax32(v, lo), hi)
                (<signed char*>y8)[o + m] = <signed char><int>v
        else:
            for m in range(M):
                v = nearbyintf(<float>t[m] * mult[m]) + zp
                v = fmin32(fmax32(v, lo), hi)
                y8[o + m] = <unsigned char><int>v


def qconv_requant(int nt, const float[:, ::1] acc, int S, idx P, idx M, const int[::1] bias,
                  const float[::1] mult, float zp, float lo, float hi, int kind,
                  unsigned char[::1] y8, int[::1] y32, int[:, ::1] scratch):
    """The epilogue of a quantized conv over ``P`` pixels of ``M`` channels (NHWC):
    ``t = bias[m] + sum_s int32(acc[s, p*M + m])`` (``S`` parts, each integer-valued), then
    ``kind`` 2: ``y32 = t`` (ConvInteger); 0 / 1: ``y8`` (the bytes of a uint8 / int8 map) =
    ``clamp(round_half_even(float32(t) * mult[m]) + zp, lo, hi)`` (QLinearConv, ONNX
    QLinearConv-10 as onnxruntime requantises; ``lo``/``hi`` the type's range narrowed by a fused
    clamp); 3: ``y8 = clamp(MBQM(t, m[m], s[m]) + zp, lo, hi)``, TFLite's fixed-point
    requantisation (TflConv), ``mult`` then the float32 view of 2M int32: M multipliers ``m``,
    M shifts ``s``. ``scratch`` (nt, >= M) int32. Raises ValueError on short operands."""
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
    cdef int t
    if nt <= 1:
        with nogil:
            _qrequant_rows(pa, lda, S, 0, P, M, pb, pm, zp, lo, hi, kind, p8, p32,
                           &scratch[0, 0])
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        _qrequant_rows(pa, lda, S, t * P // nt, (t + 1) * P // nt, M, pb, pm, zp, lo, hi, kind,
                       p8, p32, &scratch[t, 0])


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


def quantize8(int nt, const float[::1] x, unsigned char[::1] y, idx n, float s, float zp,
              bint signed_, bint away=False):
    """QuantizeLinear per tensor: ``y = saturate(round_half_even(x / s) + zp)`` for ``n``
    values, ``y`` the bytes of a uint8 (``signed_`` False) or int8 tensor (ONNX
    QuantizeLinear-21); ``away``: rounding half away from zero instead (TFLite's QUANTIZE,
    reference/quantize.h AffineQuantize). Raises ValueError on short operands."""
    if x.shape[0] < n or y.shape[0] < n:
        raise ValueError("quantize8: operands too short")
    if n == 0:
        return
    cdef float lo = -128.0 if signed_ else 0.0
    cdef float hi = 127.0 if signed_ else 255.0
    cdef const float* px = &x[0]
    cdef unsigned char* py = &y[0]
    cdef int t
    if nt <= 1:
        with nogil:
            sprat_quantize8(px, py, n, s, zp, lo, hi, signed_, away)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        sprat_quantize8(px + t * n // nt, py + t * n // nt, (t + 1) * n // nt - t * n // nt, s,
                        zp, lo, hi, signed_, away)


def dequantize8(int nt, const unsigned char[::1] x, float[::1] y, idx n, float zp, float s,
                bint signed_):
    """DequantizeLinear per tensor: ``y = (x - zp) * s`` (float32) for ``n`` values, ``x`` the
    bytes of a uint8 (``signed_`` False) or int8 tensor (ONNX DequantizeLinear-21). Raises
    ValueError on short operands."""
    if x.shape[0] < n or y.shape[0] < n:
        raise ValueError("dequantize8: operands too short")
    if n == 0:
        return
    cdef const unsigned char* px = &x[0]
    cdef float* py = &y[0]
    cdef int t
    if nt <= 1:
        with nogil:
            _dequantize8(px, signed_, py, n, zp, s)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        _dequantize8(px + t * n // nt, signed_, py + t * n // nt,
                     (t + 1) * n // nt - t * n // nt, zp, s)


# ---- QLinearLookup: a per-channel table over the 256 values of a uint8/int8 tensor -----------

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


def qlinear_lookup(int nt, const unsigned char[::1] x, unsigned char[::1] y,
                   const unsigned char[::1] table, idx outer, idx C, idx inner, bint signed_):
    """``y[o, c, i] = table[c, x[o, c, i] - min]`` over an (outer, C, inner) view of the bytes
    of a uint8 (``signed_`` False) or int8 tensor; ``table`` (C, 256), or (1, 256) for every
    channel. Raises ValueError on short operands."""
    cdef idx n = outer * C * inner
    cdef idx tstride = 256 if table.shape[0] >= C * 256 and C > 1 else 0
    if x.shape[0] < n or y.shape[0] < n or table.shape[0] < 256:
        raise ValueError("qlinear_lookup: operands too short")
    if n == 0:
        return
    cdef const unsigned char* px = &x[0]
    cdef unsigned char* py = &y[0]
    cdef const unsigned char* pt = &table[0]
    cdef unsigned char flip = 0x80 if signed_ else 0
    cdef int t
    if nt <= 1 or outer < nt:
        with nogil:
            _lookup_rows(px, py, pt, tstride, 0, outer, C, inner, flip)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        _lookup_rows(px, py, pt, tstride, t * outer // nt, (t + 1) * outer // nt, C, inner, flip)


# ---- QLinearAdd / QLinearMul (com.microsoft), same shapes ------------------------------------

cdef extern from *:
    """
    /* NOTE: the reference's float32 operations one by one: no fused multiply-add (the build
       allows contraction) and a true division by the output scale */
    __attribute__((optimize("no-reciprocal-math", "fp-contract=off", "no-associative-math")))
    static void sprat_qlinear_binary(const unsigned char *a, const unsigned char *b,
                                     unsigned char *y, Py_ssize_t n, int mul, int is_signed,
                                     float za, float sa, float zb, float sb, float sc, float zc) {
        Py_ssize_t i;
        float lo = is_signed ? -128.0f : 0.0f, hi = is_signed ? 127.0f : 255.0f;
        const signed char *as = (const signed char *)a, *bs = (const signed char *)b;
        for (i = 0; i < n; i++) {
            float u = ((is_signed ? (float)as[i] : (float)a[i]) - za) * sa;
            float w = ((is_signed ? (float)bs[i] : (float)b[i]) - zb) * sb;
            float v = nearbyintf((mul ? u * w : u + w) / sc) + zc;
            v = v < lo ? lo : v;
            v = v > hi ? hi : v;
            if (is_signed) ((signed char *)y)[i] = (signed char)(int)v;
            else y[i] = (unsigned char)(int)v;
        }
    }
    """
    void sprat_qlinear_binary(const unsigned char* a, const unsigned char* b, unsigned char* y,
                              idx n, int mul, int is_signed, float za, float sa, float zb,
                              float sb, float sc, float zc) nogil


def qlinear_binary(int nt, bint mul, const unsigned char[::1] a, const unsigned char[::1] b,
                   unsigned char[::1] y, idx n, bint signed_, float za, float sa, float zb,
                   float sb, float sc, float zc):
    """com.microsoft QLinearAdd (``mul`` False) / QLinearMul of two same-shaped uint8 or int8
    (``signed_``) tensors of ``n`` values: ``y = saturate(round_half_even(((a - za) * sa
    (+|*) (b - zb) * sb) / sc) + zc)`` in float32, each operation rounded as written
    (onnxruntime's contrib-op definition; ``ops_contrib``). Raises ValueError on short
    operands."""
    if a.shape[0] < n or b.shape[0] < n or y.shape[0] < n:
        raise ValueError("qlinear_binary: operands too short")
    if n == 0:
        return
    cdef const unsigned char* pa = &a[0]
    cdef const unsigned char* pb = &b[0]
    cdef unsigned char* py = &y[0]
    cdef int t
    if nt <= 1:
        with nogil:
            sprat_qlinear_binary(pa, pb, py, n, mul, signed_, za, sa, zb, sb, sc, zc)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        sprat_qlinear_binary(pa + t * n // nt, pb + t * n // nt, py + t * n // nt,
                             (t + 1) * n // nt - t * n // nt, mul, signed_, za, sa, zb, sb, sc,
                             zc)


# ---- QLinearConv 1x1 in one pass: blocks of pixels widened, multiplied, requantised ----------

cdef void _qpointwise_slot(idx t, idx nt, const unsigned char* x, bint signed_, float xz,
                           const float* w, idx P, idx C, idx M, idx blk, const int* bias,
                           const float* mult, float zp, float lo, float hi, int kind,
                           unsigned char* y8, int* y32, float* xb, float* acc,
                           int* scr) noexcept nogil:
    cdef idx nb = (P + blk - 1) // blk
    cdef idx bi, p0, rows
    for bi in range(t * nb // nt, (t + 1) * nb // nt):
        p0 = bi * blk
        rows = min(blk, P - p0)
        _qunpack_rows(x + p0 * C, signed_, xz, 0, rows, C, 0, C, xb)
        sgemm(False, False, rows, M, C, 1.0, xb, C, w, M, 0.0, acc, M)
        _qrequant_rows(acc, 0, 1, 0, rows, M, bias, mult, zp, lo, hi, kind,
                       y8 + p0 * M if kind != 2 else NULL, y32 + p0 * M if kind == 2 else NULL,
                       scr)


def qconv_pointwise(int nt, const unsigned char[::1] x, bint signed_, float xz,
                    const float[::1] w, idx P, idx C, idx M, idx blk, const int[::1] bias,
                    const float[::1] mult, float zp, float lo, float hi, int kind,
                    unsigned char[::1] y8, int[::1] y32, float[:, ::1] xbuf,
                    float[:, ::1] abuf, int[:, ::1] scratch):
    """A 1x1, stride-1, one-group quantized conv of ``x`` (P, C) (bytes of uint8/int8 NHWC)
    in one pass: per block of ``blk`` pixels, ``x - xz`` widened into ``xbuf``, one float32
    GEMM with ``w`` (C, M) (the integer weights minus their zero points) into ``abuf`` (exact:
    the caller checks the 2^24 bound, see ``qconv.py``) and the epilogue of ``qconv_requant``
    into ``y8`` / ``y32``, while the block is in cache. Workspaces (nt, ...): ``xbuf`` blk*C,
    ``abuf`` blk*M floats, ``scratch`` M ints. Raises ValueError on short operands."""
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
    cdef int t
    if nt <= 1:
        with nogil:
            _qpointwise_slot(0, 1, px, signed_, xz, pw, P, C, M, blk, pb, pm, zp, lo, hi, kind,
                             p8, p32, &xbuf[0, 0], &abuf[0, 0], &scratch[0, 0])
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        _qpointwise_slot(t, nt, px, signed_, xz, pw, P, C, M, blk, pb, pm, zp, lo, hi, kind,
                         p8, p32, &xbuf[t, 0], &abuf[t, 0], &scratch[t, 0])


# ---- QLinearConv depthwise, direct: taps summed per output row, then requantised -------------

cdef extern from *:
    """
    #if defined(__AVX2__) && defined(__FMA__)
    #include <immintrin.h>
    #endif
    /* acc[ow * C + c] += (x[(ow * sw) * C + c] - xz) * w[c] for ow in [0, n): one tap of a
       depthwise conv over a run of output pixels whose input pixels all lie in the map. NOTE:
       8 channels at a time on AVX2 (bytes widened in registers); the compiler's vectorised
       loop over an unknown channel count cost ~1 ns a product at 8 channels */
    static void sprat_qdw_taps(const unsigned char *x, int is_signed, float xz, const float *w,
                               float *acc, Py_ssize_t n, Py_ssize_t C, Py_ssize_t sw) {
        for (Py_ssize_t o = 0; o < n; o++) {
            const unsigned char *xp = x + o * sw * C;
            float *a = acc + o * C;
            Py_ssize_t c = 0;
    #if defined(__AVX2__) && defined(__FMA__)
            __m256 vz = _mm256_set1_ps(xz);
            for (; c + 8 <= C; c += 8) {
                __m128i b = _mm_loadl_epi64((const __m128i *)(xp + c));
                __m256i i32 = is_signed ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
                __m256 v = _mm256_sub_ps(_mm256_cvtepi32_ps(i32), vz);
                _mm256_storeu_ps(a + c, _mm256_fmadd_ps(v, _mm256_loadu_ps(w + c),
                                                        _mm256_loadu_ps(a + c)));
            }
    #endif
            if (is_signed) {
                const signed char *sp = (const signed char *)xp;
                for (; c < C; c++) a[c] += ((float)sp[c] - xz) * w[c];
            } else {
                for (; c < C; c++) a[c] += ((float)xp[c] - xz) * w[c];
            }
        }
    }
    """
    void sprat_qdw_taps(const unsigned char* x, int is_signed, float xz, const float* w,
                        float* acc, idx n, idx C, idx sw) nogil


cdef void _qdw_slot(idx t, idx nt, const unsigned char* x, bint signed_, float xz,
                    const float* w, idx N, idx H, idx W, idx C, idx OH, idx OW, idx kh, idx kw,
                    idx sh, idx sw, idx dh, idx dw, idx ph, idx pw, const int* bias,
                    const float* mult, float zp, float lo, float hi, int kind,
                    unsigned char* y8, int* y32, float* acc, int* scr) noexcept nogil:
    cdef idx nr = N * OH
    cdef idx r, n, oh, i, j, ih, o, off, lo_, hi_
    for r in range(t * nr // nt, (t + 1) * nr // nt):
        n = r // OH
        oh = r - n * OH
        memset(acc, 0, OW * C * sizeof(float))
        for i in range(kh):
            ih = oh * sh - ph + i * dh
            if ih < 0 or ih >= H:
                continue
            for j in range(kw):
                # the output pixels whose tap j lands in the map: iw = ow * sw + off in [0, W)
                off = j * dw - pw
                lo_ = 0 if off >= 0 else (-off + sw - 1) // sw
                hi_ = (W - 1 - off) // sw + 1 if W - 1 - off >= 0 else 0
                if hi_ > OW:
                    hi_ = OW
                if hi_ > lo_:
                    sprat_qdw_taps(x + ((n * H + ih) * W + lo_ * sw + off) * C, signed_, xz,
                                   w + (i * kw + j) * C, acc + lo_ * C, hi_ - lo_, C, sw)
        o = r * OW * C
        _qrequant_rows(acc, 0, 1, 0, OW, C, bias, mult, zp, lo, hi, kind,
                       y8 + o if kind != 2 else NULL, y32 + o if kind == 2 else NULL, scr)


def qconv_depthwise(int nt, const unsigned char[::1] x, bint signed_, float xz,
                    const float[::1] w, idx N, idx H, idx W, idx C, idx OH, idx OW, idx kh,
                    idx kw, idx sh, idx sw, idx dh, idx dw, idx ph, idx pw,
                    const int[::1] bias, const float[::1] mult, float zp, float lo, float hi,
                    int kind, unsigned char[::1] y8, int[::1] y32, float[:, ::1] abuf,
                    int[:, ::1] scratch):
    """A depthwise (group == C == M) quantized conv of ``x`` (N, H, W, C) (bytes of uint8/int8
    NHWC) into ``y`` (N, OH, OW, C), directly: per output row the taps ``(x - xz) * w`` are
    summed in float32 (exact: the caller checks the 2^24 bound), ``w`` (kh, kw, C) the integer
    weights minus their zero points; then the epilogue of ``qconv_requant``. Output rows split
    over ``nt`` slots; workspaces (nt, ...): ``abuf`` OW*C floats, ``scratch`` C ints. Raises
    ValueError on short operands."""
    if (x.shape[0] < N * H * W * C or w.shape[0] < kh * kw * C or bias.shape[0] < C
            or mult.shape[0] < C or abuf.shape[0] < nt or abuf.shape[1] < OW * C
            or scratch.shape[0] < nt or scratch.shape[1] < C
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
    cdef int t
    if nt <= 1:
        with nogil:
            _qdw_slot(0, 1, px, signed_, xz, pw_, N, H, W, C, OH, OW, kh, kw, sh, sw, dh, dw, ph,
                      pw, pb, pm, zp, lo, hi, kind, p8, p32, &abuf[0, 0], &scratch[0, 0])
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        _qdw_slot(t, nt, px, signed_, xz, pw_, N, H, W, C, OH, OW, kh, kw, sh, sw, dh, dw, ph,
                  pw, pb, pm, zp, lo, hi, kind, p8, p32, &abuf[t, 0], &scratch[t, 0])
