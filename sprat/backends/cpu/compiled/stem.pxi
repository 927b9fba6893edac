# ---- direct conv for few input channels (CNN stems) ------------------------------------------
# The first conv of an image model has 1-4 input channels (3x3 / 7x7 / 6x6, stride 2 or 1):
# K = C*kh*kw is 27-196, too short for a GEMM to pay back its patch matrix (im2col writes and
# re-reads 27-147 floats per output pixel to make M of them). Here each output row is computed
# straight from the input: its C*kh input rows are copied, zero-padded, into a row buffer
# (planes, so the same code reads an NCHW or an NHWC input: the layout pass lets a stem read the
# model's NCHW input and drops the input Transpose), and a tile of R output pixels x NV*16
# output channels stays in registers while the C*kh*kw taps stream by: per tap NV weight
# vectors are loaded and each of the R input values is broadcast against them (MLAS's
# ``MlasConvNchwFloatKernel`` for NCHWc convs of an NCHW input works the same way: broadcast
# input x filter vectors, several outputs x filter blocks in registers). The epilogue (bias,
# residual, activation, PRelu) runs on the output row while it is in L1 (``rows_inplace``).
#
# One C body for every ISA through GCC's vector extensions (a 16-float vector: one zmm, two
# ymm or four xmm): compiled for AVX-512F with a target attribute in the avx2 build (taken
# when the CPU has it), natively (AVX2 + FMA) otherwise, and natively for the baseline build.

cdef extern from *:
    """
    #include <string.h>
    #if defined(__GNUC__)
    #define SPRAT_STEM_VEC 1
    #define SPRAT_STEM_MAX_ACC 24
    #define SPRAT_STEM_UNROLL _Pragma("GCC unroll 32")

    /* SPRAT_STEM_TILES(NAME, VT, VW) defines NAME(nv, R, ...), for the vector type VT of VW
       floats: ``y[o, 0:lanes]`` (row pitch ldy) for the ``ow`` outputs of one row and
       ``lanes`` <= nv*VW output channels: y[o, m] = sum_t rb[o*sw + off[t]] * w[t*wpitch + m]
       over ``taps`` taps. Tiles of R outputs; the row buffer ``rb`` is long enough that the
       last tile's extra outputs read zeros. nv and R are constants in every caller (the
       switches below) and the loops are unrolled, so the nv*R accumulators stay in
       registers. One macro, not one function per vector width: GCC keeps a vector type wider
       than the ISA's registers in memory. */
    #define SPRAT_STEM_TILES(NAME, VT, VW) \
    static inline __attribute__((always_inline)) void NAME( \
            const int nv, const int R, Py_ssize_t taps, const Py_ssize_t* off, \
            const float* rb, Py_ssize_t sw, const float* w, Py_ssize_t wpitch, Py_ssize_t ow, \
            float* y, Py_ssize_t ldy, Py_ssize_t lanes) { \
        for (Py_ssize_t o0 = 0; o0 < ow; o0 += R) { \
            VT acc[SPRAT_STEM_MAX_ACC]; \
            SPRAT_STEM_UNROLL for (int q = 0; q < nv * R; q++) acc[q] = (VT){0}; \
            const float* xb = rb + o0 * sw; \
            for (Py_ssize_t t = 0; t < taps; t++) { \
                const float* xp = xb + off[t]; \
                const float* wp = w + t * wpitch; \
                VT wv[4]; \
                SPRAT_STEM_UNROLL for (int v = 0; v < nv; v++) \
                    wv[v] = *(const VT*)(wp + v * VW); \
                SPRAT_STEM_UNROLL for (int p = 0; p < R; p++) { \
                    float s = xp[p * sw]; \
                    SPRAT_STEM_UNROLL for (int v = 0; v < nv; v++) acc[p * nv + v] += s * wv[v]; \
                } \
            } \
            Py_ssize_t np_ = ow - o0 < R ? ow - o0 : R; \
            float* yo = y + o0 * ldy; \
            if (np_ == R && lanes == nv * VW) { \
                SPRAT_STEM_UNROLL for (int p = 0; p < R; p++) \
                    SPRAT_STEM_UNROLL for (int v = 0; v < nv; v++) \
                        *(VT*)(yo + p * ldy + v * VW) = acc[p * nv + v]; \
            } else { \
                float tmp[SPRAT_STEM_MAX_ACC * VW]; \
                SPRAT_STEM_UNROLL for (int q = 0; q < nv * R; q++) *(VT*)(tmp + q * VW) = acc[q]; \
                for (Py_ssize_t p = 0; p < np_; p++) \
                    memcpy(yo + p * ldy, tmp + p * nv * VW, (size_t)lanes * sizeof(float)); \
            } \
        } \
    }

    /* Per ISA: vectors of VW floats, at most SUB lanes (SUB/VW vectors) per pass over a row,
       R = ACC/nv outputs per tile, the nv*R accumulators filling most of the registers
       (AVX-512: 24 of 32 zmm; AVX2: 12 of 16 ymm; SSE: 8 of 16 xmm). */
    #if defined(__AVX2__)
    typedef float sprat_svn __attribute__((vector_size(32), aligned(4)));
    #define SPRAT_STEM_VWN 8
    #define SPRAT_STEM_SUBN 32
    #define SPRAT_STEM_ACCN 12
    #else
    typedef float sprat_svn __attribute__((vector_size(16), aligned(4)));
    #define SPRAT_STEM_VWN 4
    #define SPRAT_STEM_SUBN 8
    #define SPRAT_STEM_ACCN 8
    #endif
    SPRAT_STEM_TILES(sprat_stem_tiles_nat, sprat_svn, SPRAT_STEM_VWN)

    #define SPRAT_STEM_ARGS taps, off, rb, sw, w + s0, wpitch, ow, y + s0, ldy, sl
    /* One output row, one block of ``lanes`` output channels (weights ``w``, ``wpitch``
       floats per tap), in passes of at most SUB lanes. */
    static void sprat_stem_row_nat(Py_ssize_t taps, const Py_ssize_t* off, const float* rb,
                                   Py_ssize_t sw, const float* w, Py_ssize_t wpitch,
                                   Py_ssize_t ow, float* y, Py_ssize_t ldy, Py_ssize_t lanes) {
        for (Py_ssize_t s0 = 0; s0 < lanes; s0 += SPRAT_STEM_SUBN) {
            Py_ssize_t sl = lanes - s0 < SPRAT_STEM_SUBN ? lanes - s0 : SPRAT_STEM_SUBN;
            switch ((sl + SPRAT_STEM_VWN - 1) / SPRAT_STEM_VWN) {
            case 1: sprat_stem_tiles_nat(1, SPRAT_STEM_ACCN, SPRAT_STEM_ARGS); break;
            case 2: sprat_stem_tiles_nat(2, SPRAT_STEM_ACCN / 2, SPRAT_STEM_ARGS); break;
    #if SPRAT_STEM_SUBN > 8
            case 3: sprat_stem_tiles_nat(3, SPRAT_STEM_ACCN / 3, SPRAT_STEM_ARGS); break;
            case 4: sprat_stem_tiles_nat(4, SPRAT_STEM_ACCN / 4, SPRAT_STEM_ARGS); break;
    #endif
            default: break;
            }
        }
    }
    #if SPRAT_PK
    typedef float sprat_sv16 __attribute__((vector_size(64), aligned(4)));
    SPRAT_STEM_TILES(sprat_stem_tiles_512, sprat_sv16, 16)
    __attribute__((target("avx512f")))
    static void sprat_stem_row_512(Py_ssize_t taps, const Py_ssize_t* off, const float* rb,
                                   Py_ssize_t sw, const float* w, Py_ssize_t wpitch,
                                   Py_ssize_t ow, float* y, Py_ssize_t ldy, Py_ssize_t lanes) {
        const Py_ssize_t s0 = 0, sl = lanes;
        switch ((lanes + 15) / 16) {
        case 1: sprat_stem_tiles_512(1, 24, SPRAT_STEM_ARGS); break;
        case 2: sprat_stem_tiles_512(2, 12, SPRAT_STEM_ARGS); break;
        case 3: sprat_stem_tiles_512(3, 8, SPRAT_STEM_ARGS); break;
        case 4: sprat_stem_tiles_512(4, 6, SPRAT_STEM_ARGS); break;
        default: break;
        }
    }
    /* SiLU (code 8) or Sigmoid (code 3) in place on y[0:n] on 16 lanes (the AVX2 build's
       sprat_act8 does 8), by the packed GEMM's register epilogue (packed.pxi: sprat_pk_act,
       the same lanes' results as sprat_act8). Returns how many leading elements it did (a
       multiple of 16). */
    __attribute__((target("avx512f")))
    static Py_ssize_t sprat_stem_act512(float* y, Py_ssize_t n, int code) {
        Py_ssize_t i = 0, end = n & ~(Py_ssize_t)15;
        const __m512 z = _mm512_setzero_ps();
        if (code == 8) {
            for (; i < end; i += 16)
                _mm512_storeu_ps(y + i, sprat_pk_act(_mm512_loadu_ps(y + i), 8, z, z, z));
        } else if (code == 3) {
            for (; i < end; i += 16)
                _mm512_storeu_ps(y + i, sprat_pk_act(_mm512_loadu_ps(y + i), 3, z, z, z));
        } else {
            return 0;
        }
        return end;
    }
    #else
    static Py_ssize_t sprat_stem_act512(float* y, Py_ssize_t n, int code) {
        (void)y; (void)n; (void)code;
        return 0;
    }
    #endif

    /* dst[c*pitch + k] = src[k*C + c] for k < n, c < C: the planes of n NHWC pixels (a
       constant C per case, so the interleaved loads vectorise) */
    #define SPRAT_STEM_PLANES(CC) \
        for (Py_ssize_t k = 0; k < n; k++) \
            for (int c = 0; c < CC; c++) dst[c * pitch + k] = src[k * CC + c];
    static void sprat_stem_planes(const float* restrict src, Py_ssize_t C, Py_ssize_t n,
                                  float* restrict dst, Py_ssize_t pitch) {
        switch (C) {
        case 1: SPRAT_STEM_PLANES(1) break;
        case 2: SPRAT_STEM_PLANES(2) break;
        case 3: SPRAT_STEM_PLANES(3) break;
        case 4: SPRAT_STEM_PLANES(4) break;
        default:
            for (Py_ssize_t k = 0; k < n; k++)
                for (Py_ssize_t c = 0; c < C; c++) dst[c * pitch + k] = src[k * C + c];
        }
    }

    /* 1: the AVX-512F instantiation runs (avx2 build on an AVX-512F CPU), 0: the native one */
    static int sprat_stem_wide(void) {
    #if SPRAT_PK
        return sprat_pk_available();
    #else
        return 0;
    #endif
    }
    /* The most outputs per tile of the wide or native instantiation (the row buffer covers
       the last tile's): 0 for a bad nv */
    static int sprat_stem_tile_r(int nv, int wide) {
        if (nv < 1 || nv > 4) return 0;
        return wide ? 24 : SPRAT_STEM_ACCN;
    }
    /* One output row of the block of nv*16 output channels whose first ``lanes`` are real */
    static void sprat_stem_row(int wide, int nv, Py_ssize_t taps, const Py_ssize_t* off,
                               const float* rb, Py_ssize_t sw, const float* w, Py_ssize_t ow,
                               float* y, Py_ssize_t ldy, Py_ssize_t lanes) {
    #if SPRAT_PK
        if (wide) { sprat_stem_row_512(taps, off, rb, sw, w, nv * 16, ow, y, ldy, lanes); return; }
    #endif
        (void)wide;
        sprat_stem_row_nat(taps, off, rb, sw, w, nv * 16, ow, y, ldy, lanes);
    }
    #else
    #define SPRAT_STEM_VEC 0
    static int sprat_stem_wide(void) { return 0; }
    static Py_ssize_t sprat_stem_act512(float* y, Py_ssize_t n, int code) {
        (void)y; (void)n; (void)code;
        return 0;
    }
    static void sprat_stem_planes(const float* src, Py_ssize_t C, Py_ssize_t n, float* dst,
                                  Py_ssize_t pitch) {
        (void)src; (void)C; (void)n; (void)dst; (void)pitch;
    }
    static int sprat_stem_tile_r(int nv, int wide) { (void)nv; (void)wide; return 0; }
    static void sprat_stem_row(int wide, int nv, Py_ssize_t taps, const Py_ssize_t* off,
                               const float* rb, Py_ssize_t sw, const float* w, Py_ssize_t ow,
                               float* y, Py_ssize_t ldy, Py_ssize_t lanes) {
        (void)wide; (void)nv; (void)taps; (void)off; (void)rb; (void)sw; (void)w; (void)ow;
        (void)y; (void)ldy; (void)lanes;
    }
    #endif
    """
    int SPRAT_STEM_VEC
    int sprat_stem_wide() noexcept nogil
    int sprat_stem_tile_r(int nv, int wide) noexcept nogil
    void sprat_stem_planes(const float* src, idx C, idx n, float* dst, idx pitch) noexcept nogil
    idx sprat_stem_act512(float* y, idx n, int code) noexcept nogil
    void sprat_stem_row(int wide, int nv, idx taps, const idx* off, const float* rb, idx sw,
                        const float* w, idx ow, float* y, idx ldy, idx lanes) noexcept nogil


cdef enum:
    STEM_TAPS = 256

#: taps (C*kh*kw) the direct stem kernel takes at most
STEM_MAX_TAPS = STEM_TAPS


def stem_wide_available() -> bool:
    """Whether ``conv_stem`` may run its AVX-512F instantiation (``wide``): the avx2 build on
    an AVX-512F CPU."""
    return bool(sprat_stem_wide())


def stem_tile(idx m, bint wide):
    """(nv, R) of ``conv_stem`` for ``m`` output channels, its ``wide`` (AVX-512F) or native
    instantiation: output
    channels per block ``nv*16`` (nv 1-4, the fewest blocks, then the least padding), and
    output pixels per register tile ``R``; (0, 0) where the kernel does not run (a compiler
    without vector extensions)."""
    cdef int nv, best = 4
    cdef idx cost, best_cost = -1
    if not SPRAT_STEM_VEC or m < 1:
        return 0, 0
    for nv in range(4, 0, -1):
        cost = (m + 16 * nv - 1) // (16 * nv) * 16 * nv  # lanes computed, padding included
        if best_cost < 0 or cost < best_cost:
            best, best_cost = nv, cost
    return best, sprat_stem_tile_r(best, wide)


cdef void conv_stem_slot(idx t, idx nt, const float* x, bint nchw, const float* w,
                         const float* bias, idx nbias, const float* res, bint has_res, float* y,
                         idx N, idx H, idx W, idx C, idx M, idx OH, idx OW, idx kh, idx kw,
                         idx sh, idx sw, idx dh, idx dw, idx ph, idx pw, int nv, idx wb,
                         float* rb, int code, float a, float b, const float* slope,
                         bint wide) noexcept nogil:
    """Slot ``t`` of ``nt``: the output rows [t*N*OH/nt, (t+1)*N*OH/nt) (see the header)."""
    cdef idx off[STEM_TAPS]
    cdef idx taps = C * kh * kw
    cdef idx lanes_blk = nv * 16
    cdef idx nblk = (M + lanes_blk - 1) // lanes_blk
    cdef idx rows = N * OH
    cdef idx c, i, j, r, n, oh, ih, lo, hi, mb, done
    cdef float* dst
    cdef float* yr
    for c in range(C):
        for i in range(kh):
            for j in range(kw):
                off[(c * kh + i) * kw + j] = (c * kh + i) * wb + j * dw
    # the columns [lo, hi) of the buffer hold input columns [0, W); the rest are zeros
    lo = min(pw, wb)
    hi = min(pw + W, wb)
    for r in range(t * rows // nt, (t + 1) * rows // nt):
        n = r // OH
        oh = r - n * OH
        # the buffer's row (c, i) holds input row oh*sh - ph + i*dh of channel c
        for i in range(kh):
            ih = oh * sh - ph + i * dh
            if ih < 0 or ih >= H or hi <= lo:
                for c in range(C):
                    memset(rb + (c * kh + i) * wb, 0, wb * sizeof(float))
                continue
            for c in range(C):
                dst = rb + (c * kh + i) * wb
                if lo > 0:
                    memset(dst, 0, lo * sizeof(float))
                if nchw:
                    memcpy(dst + lo, x + ((n * C + c) * H + ih) * W + (lo - pw),
                           (hi - lo) * sizeof(float))
                if hi < wb:
                    memset(dst + hi, 0, (wb - hi) * sizeof(float))
            if not nchw:
                sprat_stem_planes(x + ((n * H + ih) * W + (lo - pw)) * C, C, hi - lo,
                                  rb + i * wb + lo, kh * wb)
        yr = y + r * OW * M
        for mb in range(nblk):
            sprat_stem_row(wide, nv, taps, off, rb, sw, w + mb * taps * lanes_blk, OW,
                           yr + mb * lanes_blk, M, min(lanes_blk, M - mb * lanes_blk))
        if wide and (code == A_SILU or code == A_SIGMOID):
            # NOTE: on 16 lanes: the AVX2 loop made SiLU cost 0.75x the 3x3 conv before it
            rows_inplace(yr, OW, M, bias, nbias, conv_at(res, r * OW * M), has_res, A_NONE,
                         a, b, slope)
            done = sprat_stem_act512(yr, OW * M, code)
            act_inplace(yr + done, OW * M - done, code, a, b)
        else:
            rows_inplace(yr, OW, M, bias, nbias, conv_at(res, r * OW * M), has_res, code, a,
                         b, slope)


def conv_stem(int nt, const float[::1] x, bint nchw, const float[::1] w, const float[::1] bias,
              const float[::1] res, bint has_res, float[::1] y, idx N, idx H, idx W, idx C,
              idx M, idx OH, idx OW, idx kh, idx kw, idx sh, idx sw, idx dh, idx dw, idx ph,
              idx pw, int nv, idx wb, float[:, ::1] rb, int code, float a, float b,
              const float[::1] slope, bint wide):
    """Conv of ``x`` ((N, C, H, W) when ``nchw``, else (N, H, W, C)) into ``y`` (N, OH, OW, M)
    by the direct kernel for few input channels (see the header), one group. ``w``: the weight
    (M, C, kh, kw) as ``conv.stem_pack`` lays it out for ``nv`` (``stem_tile``); ``wb``: the
    row buffer's length, at least ``(OW + R - 2)*sw + (kw-1)*dw + 1`` for the tile's R;
    workspace ``rb`` (nt, >= C*kh*wb). ``bias`` the M biases tiled (``tiled_bias``), PRelu's
    ``slope`` alike (empty for other activations). ``wide``: the AVX-512F instantiation
    (``stem_wide_available``), else the build's native one. Output rows (N*OH) are split over
    ``nt`` slots. Raises ValueError on short operands, a bad ``nv``, too many taps, a row
    buffer too short for the tile, or ``wide`` where it does not run."""
    if wide and not sprat_stem_wide():
        raise ValueError("conv_stem: the AVX-512F instantiation does not run here")
    cdef idx r_ = sprat_stem_tile_r(nv, wide)
    cdef idx lanes_blk = nv * 16
    cdef idx nblk = (M + lanes_blk - 1) // lanes_blk if nv > 0 else 0
    conv_check(x, N * H * W * C, y, N * OH * OW * M, res, has_res, w, nblk * lanes_blk * C * kh * kw)
    conv_check_slope(slope, code, bias.shape[0], M)
    if r_ < 1 or C * kh * kw > STEM_TAPS or C * kh * kw < 1 \
            or wb < (OW + r_ - 2) * sw + (kw - 1) * dw + 1:
        raise ValueError(f"conv_stem: nv {nv}, {C * kh * kw} taps or row buffer {wb} does not "
                         f"fit this build's tile")
    conv_check_ws(rb, nt, C * kh * wb)
    cdef const float* px = &x[0]
    cdef const float* pw_ = &w[0]
    cdef const float* pb_ = &bias[0]
    cdef const float* pr = cptr(res)
    cdef float* py = &y[0]
    cdef idx nbias = bias.shape[0]
    cdef const float* ps = cptr(slope)
    cdef int t
    if nt <= 1:
        with nogil:
            conv_stem_slot(0, 1, px, nchw, pw_, pb_, nbias, pr, has_res, py, N, H, W, C, M, OH,
                           OW, kh, kw, sh, sw, dh, dw, ph, pw, nv, wb, &rb[0, 0], code, a, b, ps,
                           wide)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        conv_stem_slot(t, nt, px, nchw, pw_, pb_, nbias, pr, has_res, py, N, H, W, C, M, OH, OW,
                       kh, kw, sh, sw, dh, dw, ph, pw, nv, wb, &rb[t, 0], code, a, b, ps, wide)
