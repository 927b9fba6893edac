# Convolutions in NHWC with the fused epilogue (bias, then residual, then activation): the
# compiled half of ``conv.py`` and ``convtranspose.py``, which pick the algorithm, pack the
# weights and size the blocks and workspaces at prepare.
#
# Every array is flat, C-contiguous float32; NHWC offsets are computed explicitly
# (pixel ``(n, h, w)`` of an (N, H, W, C) map starts at ``((n*H + h)*W + w)*C``). Work is cut
# into blocks (of output rows, pixels or Winograd tiles); work slot ``t`` of ``nt`` walks the
# contiguous range of blocks ``[t*nb//nt, (t+1)*nb//nt)`` (in the direct, Winograd and
# blocked depthwise convs one block at a time, then what the others have left when it is done:
# ``sprat_take``) with its own row of each workspace, calls a one-thread GEMM per block and
# applies the epilogue while the block is in cache.
# With ``nt == 1`` a kernel runs on the calling thread, without a parallel region.

from cython.parallel cimport prange

cdef extern from *:
    # NOTE: a destination nothing else points into (C ``restrict``): loops that write several
    # outputs from several inputs (Winograd transforms, depthwise taps) then vectorise without
    # run-time overlap checks; GCC gives up on loops needing more than ten such checks
    ctypedef float* conv_dst "float *__restrict__"


def conv_view(a):
    """``a`` (a C-contiguous float32 ndarray: 1-D, or 2-D for a workspace) as a Cython typed
    memoryview object, which the entry points below take without a buffer request and format
    check: built once per binding of arrays, it makes a call of a small conv cheaper (five
    ndarray arguments cost 0.66 us a call to convert, five such views 0.23 us). Read-only
    arrays (weights mapped from a file) give read-only views. Raises ValueError (wrong
    dtype, layout or rank) as the entry points would."""
    cdef const float[::1] ro
    cdef float[::1] rw
    cdef float[:, ::1] ws
    if a.ndim == 2:
        ws = a
        return ws
    if a.flags.writeable:
        rw = a
        return rw
    ro = a
    return ro


cdef inline const float* conv_at(const float* p, idx offset) noexcept nogil:
    """``p + offset``, NULL for an absent operand (NULL)."""
    return p + offset if p != NULL else NULL


cdef inline idx conv_floordiv(idx a, idx b) noexcept nogil:
    """``a // b`` rounded towards minus infinity for ``b > 0`` (C's ``/`` truncates)."""
    return a // b if a >= 0 else -((-a + b - 1) // b)


cdef inline idx conv_col_edge(idx t, idx nt, idx M, idx unit) noexcept nogil:
    """The first output channel of slot ``t`` when ``M`` channels are split over ``nt`` slots
    in multiples of ``unit``, the last slot taking the rest (``t == nt``: M)."""
    return M if t >= nt else (t * M // nt) // unit * unit


cdef inline void conv_copy(float* d, const float* s, idx n) noexcept nogil:
    """``d[:n] = s[:n]`` for runs that do not overlap (a stem's 3-27 floats per window):
    ``copy_short``."""
    copy_short(<unsigned char*>d, <const unsigned char*>s, n * <idx>sizeof(float))


cdef inline void conv_zero(float* d, idx n) noexcept nogil:
    """``d[:n] = 0`` (short runs inline, as ``conv_copy``)."""
    if n > 16:
        memset(d, 0, n * sizeof(float))
    elif n >= 8:
        memset(d, 0, 8 * sizeof(float))
        memset(d + n - 8, 0, 8 * sizeof(float))
    elif n >= 4:
        memset(d, 0, 4 * sizeof(float))
        memset(d + n - 4, 0, 4 * sizeof(float))
    else:
        if n > 0:
            d[0] = 0
        if n > 1:
            d[1] = 0
        if n > 2:
            d[2] = 0


cdef void conv_check(const float[::1] x, idx nx, const float[::1] y, idx ny,
                     const float[::1] res, bint has_res, const float[::1] w, idx nw) except *:
    """Raise ValueError when an operand is shorter than the conv's geometry needs (a kernel
    bound to the wrong arrays would otherwise read or write past them)."""
    if x.shape[0] < nx or y.shape[0] < ny or w.shape[0] < nw or (has_res and res.shape[0] < ny):
        raise ValueError(f"conv: operands too short for the geometry (x {x.shape[0]} < {nx}, "
                         f"y {y.shape[0]} < {ny}, w {w.shape[0]} < {nw} or residual "
                         f"{res.shape[0]} < {ny})")


cdef void conv_check_ws(const float[:, ::1] buf, int nt, idx n) except *:
    """Raise ValueError unless the workspace ``buf`` has a row of at least ``n`` floats for
    each of the ``nt`` slots."""
    if buf.shape[0] < nt or buf.shape[1] < n:
        raise ValueError(f"conv: workspace ({buf.shape[0]}, {buf.shape[1]}) smaller than "
                         f"({nt}, {n})")


cdef void conv_check_slope(const float[::1] slope, int code, idx n, idx m) except *:
    """Raise ValueError unless PRelu's ``slope`` holds ``n`` floats (the bias's length, the
    ``m`` channels tiled or padded as the kernel takes them): the epilogue reads it alongside
    the bias."""
    if code == A_PRELU and (slope.shape[0] < n or slope.shape[0] < m):
        raise ValueError(f"conv: PRelu slope of {slope.shape[0]} floats, the epilogue reads "
                         f"{max(n, m)}")


cdef void conv_cols_inplace(float* y, idx nrows, idx m, idx ldy, const float* bias,
                            const float* res, bint has_res, int code, float a, float b,
                            const float* slope) noexcept nogil:
    """The epilogue on ``m`` columns of ``nrows`` rows of pitch ``ldy`` (one slot's share of
    the output channels): add ``bias`` (m floats), ``res`` at the same positions when
    ``has_res``, then activation ``code`` (PRelu: ``slope``, m floats)."""
    cdef idx r, k
    cdef float* d
    cdef const float* rr
    for r in range(nrows):
        d = y + r * ldy
        if has_res:
            rr = res + r * ldy
            for k in range(m):
                d[k] += bias[k] + rr[k]
        else:
            for k in range(m):
                d[k] += bias[k]
        act_slope(d, m, code, a, b, slope)


# ---- pointwise: 1x1, stride 1, no padding --------------------------------------------------

cdef void conv_pointwise_slot(idx t, idx nt, const float* x, const float* w, const float* bias,
                              idx nbias, const float* res, bint has_res, float* y, idx P,
                              idx C, idx M, idx G, idx blk, bint wt, bint split_m, int code,
                              float a, float b, const float* slope) noexcept nogil:
    """Slot ``t`` of ``nt``: blocks of ``blk`` pixels of ``y (P, M) = x (P, C) @ w`` per group,
    ``w`` packed (G, C/G, M/G) or (``wt``) the model's (M, C/G) weight read transposed. The
    slot takes a range of the blocks, or with ``split_m`` (one group) every block but a range
    of the output channels (multiples of 8; see ``conv_im2col_slot``)."""
    cdef idx cg = C // G
    cdef idx mg = M // G
    cdef idx nb = (P + blk - 1) // blk
    cdef idx bi, p0, rows, g, b0, b1, c0, c1
    if split_m:
        b0, b1 = 0, nb
        c0 = conv_col_edge(t, nt, M, 8)
        c1 = conv_col_edge(t + 1, nt, M, 8)
    else:
        b0, b1 = t * nb // nt, (t + 1) * nb // nt
        c0, c1 = 0, mg
    if c1 <= c0:
        return
    for bi in range(b0, b1):
        p0 = bi * blk
        rows = min(blk, P - p0)
        for g in range(G):
            if wt:
                sgemm(False, True, rows, c1 - c0, cg, 1.0, x + p0 * C + g * cg, C,
                      w + (g * mg + c0) * cg, cg, 0.0, y + p0 * M + g * mg + c0, M)
            else:  # NOTE: one to three pixels (a squeeze-excite 1x1 on a 1x1 map) as GEMVs
                dense_gemm_nn(rows, c1 - c0, cg, 1.0, x + p0 * C + g * cg, C,
                              w + g * cg * mg + c0, mg, y + p0 * M + g * mg + c0, M)
        if split_m:
            conv_cols_inplace(y + p0 * M + c0, rows, c1 - c0, M, bias + c0,
                              conv_at(res, p0 * M + c0), has_res, code, a, b,
                              conv_at(slope, c0))
        else:
            rows_inplace(y + p0 * M, rows, M, bias, nbias, conv_at(res, p0 * M), has_res, code,
                         a, b, slope)


cdef struct pw_call_t:
    # one ``conv_pointwise`` call's checked arguments (``PointwiseCall``)
    int nt
    const float* x
    const float* w
    const float* bias
    idx nbias
    const float* res
    bint has_res
    float* y
    idx P, C, M, G, blk
    bint wt, split_m
    int code
    float a, b
    const float* slope


cdef _pointwise_run(const pw_call_t* s):
    """A checked ``conv_pointwise`` call: its blocks over its slots."""
    cdef int t, nt = s.nt
    if nt <= 1:
        with nogil:
            conv_pointwise_slot(0, 1, s.x, s.w, s.bias, s.nbias, s.res, s.has_res, s.y, s.P,
                                s.C, s.M, s.G, s.blk, s.wt, False, s.code, s.a, s.b, s.slope)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        conv_pointwise_slot(t, nt, s.x, s.w, s.bias, s.nbias, s.res, s.has_res, s.y, s.P, s.C,
                            s.M, s.G, s.blk, s.wt, s.split_m, s.code, s.a, s.b, s.slope)


cdef class PointwiseCall(_BoundCall):
    """One ``conv_pointwise`` call with its arguments checked and bound once
    (``BOUND_CALLS``). Raises as ``conv_pointwise``."""
    cdef pw_call_t s

    def __call__(self):
        _pointwise_run(&self.s)


def conv_pointwise(int nt, const float[::1] x, const float[::1] w, const float[::1] bias,
                   const float[::1] res, bint has_res, float[::1] y, idx P, idx C, idx M, idx G,
                   idx blk, bint wt, bint split_m, int code, float a, float b,
                   const float[::1] slope, PointwiseCall into=None):
    """1x1 conv, stride 1, no padding, ``G`` groups: ``y (P, M) = act(x (P, C) @ w + bias
    (+ res))`` over the ``P`` pixels of NHWC maps, in blocks of ``blk`` pixels split over ``nt``
    slots (or, with ``split_m`` and one group, the output channels). ``w`` packed
    (G, C/G, M/G), or with ``wt`` the model's own (M, C/G) weight; ``bias`` the M biases tiled
    (``tiled_bias``), PRelu's ``slope`` tiled alike (empty for other activations). With
    ``into``: the checked arguments bound into that call object, nothing run. Raises
    ValueError on short operands or ``split_m`` with groups."""
    conv_check(x, P * C, y, P * M, res, has_res, w, C * M // G)
    conv_check_slope(slope, code, bias.shape[0], M)
    if blk < 1 or (split_m and G != 1):
        raise ValueError(f"conv_pointwise: blk {blk} < 1 or split_m with {G} groups")
    cdef pw_call_t s = pw_call_t(nt, &x[0], &w[0], &bias[0], bias.shape[0], cptr(res), has_res,
                                 &y[0], P, C, M, G, blk, wt, split_m, code, a, b, cptr(slope))
    if into is not None:
        into.s = s
        return
    _pointwise_run(&s)


# ---- pointwise with groups, register-blocked (AVX2): ShuffleNet's grouped 1x1 convs ---------
# Each group is a GEMM of K = C/G by N = M/G, a few dozen each: BLAS, called per group and
# block of pixels, packs both operands for a product it then finishes in microseconds (28x28
# maps of 136 channels in 4 groups: 44 GFLOP/s). Here the weight is packed once at prepare
# as (G, C/G, M/G rounded up to 8) (``conv.grouped_pack``); per group, blocks of up to 4
# vectors of 8 output channels x R pixels (R*NV <= 12 accumulators) start at the bias, each
# input value is broadcast once and multiplied into the block's NV weight vectors, and the
# residual and the activation are applied in registers before the one store; the group's last
# vector is masked. Work items are (block of pixels, group), pixel-major.

cdef extern from "simd/grouped.h":
    int SPRAT_GROUPED_SIMD
    void sprat_grouped_rows(float* y, const float* x, const float* w, const float* bias,
                            const float* slope, const float* res, idx C, idx M, idx G, idx g,
                            idx p0, idx p1, int code, float a, float b) noexcept nogil
    void sprat_grouped_k(float* y, const float* x, idx ldx, idx K, const float* w,
                         const float* bias, const float* slope, const float* res, idx M,
                         idx Mg, idx p0, idx p1, int code, float a, float b) noexcept nogil
    int SPRAT_GROUPED_MAX_TAPS
    int sprat_grouped_conv_row(float* y, const float* x, const float* w, const float* bias,
                               const float* slope, const float* res, idx H, idx W, idx C,
                               idx M, idx Cg, idx Mg, idx kh, idx kw, idx sh, idx sw, idx dh,
                               idx dw, idx ph, idx pw, idx oh, idx OW, int code, float a,
                               float b) noexcept nogil


#: whether this build has the register-blocked grouped 1x1 conv (``conv_pointwise_grouped``)
GROUPED_POINTWISE = bool(SPRAT_GROUPED_SIMD)


cdef void conv_grouped_items(const float* x, const float* w, const float* bias,
                             const float* slope, const float* res, float* y, idx P, idx C,
                             idx M, idx G, idx rows, int code, float a, float b, idx lo,
                             idx hi) noexcept nogil:
    """Items [lo, hi) of ``conv_pointwise_grouped``: item i is pixels [i // G * rows, ...) of
    group i % G; the activations without a register form then run over its outputs."""
    cdef idx i, g, p0, p1, p
    cdef idx mg = M // G
    for i in range(lo, hi):
        g = i % G
        p0 = (i // G) * rows
        p1 = min(P, p0 + rows)
        sprat_grouped_rows(y, x, w, bias, slope, res, C, M, G, g, p0, p1, code, a, b)
        if code != A_NONE and not sprat_act_in_regs(code):
            for p in range(p0, p1):
                act_inplace(y + p * M + g * mg, mg, code, a, b)


cdef struct gpw_call_t:
    # one ``conv_pointwise_grouped`` call's checked arguments (``GroupedPointwiseCall``)
    int nt
    const float* x
    const float* w
    const float* bias
    const float* slope
    const float* res
    float* y
    idx P, C, M, G, rows
    int code
    float a, b


cdef _grouped_pointwise_run(const gpw_call_t* s):
    """A checked ``conv_pointwise_grouped`` call: its items over its slots."""
    cdef idx items = ((s.P + s.rows - 1) // s.rows) * s.G
    cdef int t, nt = s.nt
    cdef sprat_slots slots
    if s.P <= 0:
        return
    if nt <= 1:
        with nogil:
            conv_grouped_items(s.x, s.w, s.bias, s.slope, s.res, s.y, s.P, s.C, s.M, s.G,
                               s.rows, s.code, s.a, s.b, 0, items)
        return
    sprat_slots_init(&slots, nt, items)
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        conv_grouped_taken(s.x, s.w, s.bias, s.slope, s.res, s.y, s.P, s.C, s.M, s.G, s.rows,
                           s.code, s.a, s.b, &slots, t)


cdef class GroupedPointwiseCall(_BoundCall):
    """One ``conv_pointwise_grouped`` call with its arguments checked and bound once
    (``BOUND_CALLS``). Raises as ``conv_pointwise_grouped``."""
    cdef gpw_call_t s

    def __call__(self):
        _grouped_pointwise_run(&self.s)


def conv_pointwise_grouped(int nt, const float[::1] x, const float[::1] w,
                           const float[::1] bias, const float[::1] res, bint has_res,
                           float[::1] y, idx P, idx C, idx M, idx G, idx rows, int code,
                           float a, float b, const float[::1] slope,
                           GroupedPointwiseCall into=None):
    """1x1 conv, stride 1, no padding, ``G`` > 1 groups by the register-blocked kernel:
    ``y (P, M) = act(x (P, C) @ blockdiag(w) + bias (+ res))`` over the ``P`` pixels of
    NHWC maps; ``w`` packed (G, C/G, Mgp) by ``conv.grouped_pack`` (Mgp = M/G rounded up to
    8, zero past M/G), ``bias`` M floats, PRelu's ``slope`` M floats (else empty). Work
    items (``rows`` pixels, one group) shared out by ``nt`` slots (``sprat_take``; each output
    is computed the same way whichever slot runs it). With ``into``: the checked arguments
    bound into that call object, nothing run. Raises ValueError on short operands or
    groups that do not divide C and M, RuntimeError on a build without it
    (``GROUPED_POINTWISE`` false)."""
    cdef idx mgp = ((M // G if G > 0 else 0) + 7) // 8 * 8
    if G < 2 or C % G or M % G or rows < 1:
        raise ValueError(f"conv_pointwise_grouped: G={G} must divide C={C} and M={M}, "
                         f"rows={rows} >= 1")
    conv_check(x, P * C, y, P * M, res, has_res, w, G * (C // G) * mgp)
    if bias.shape[0] < M:
        raise ValueError(f"conv_pointwise_grouped: bias {bias.shape[0]} < M = {M}")
    if code == A_PRELU and slope.shape[0] < M:
        raise ValueError(f"conv_pointwise_grouped: PRelu needs {M} slopes")
    if not SPRAT_GROUPED_SIMD:
        raise RuntimeError("conv_pointwise_grouped: this build has no AVX2 kernel; use "
                           "conv_pointwise")
    cdef gpw_call_t s = gpw_call_t(nt, cptr(x), &w[0], &bias[0], NULL, NULL, mptr(y), P, C,
                                   M, G, rows, code, a, b)
    if code == A_PRELU:
        s.slope = cptr(slope)
    if has_res:
        s.res = cptr(res)
    if into is not None:
        into.s = s
        return
    _grouped_pointwise_run(&s)


cdef void conv_grouped_taken(const float* x, const float* w, const float* bias,
                             const float* slope, const float* res, float* y, idx P, idx C,
                             idx M, idx G, idx rows, int code, float a, float b,
                             sprat_slots* slots, int t) noexcept nogil:
    """The items of ``conv_pointwise_grouped`` slot ``t`` runs (``sprat_take``)."""
    cdef idx it = sprat_take(slots, t)
    while it >= 0:
        conv_grouped_items(x, w, bias, slope, res, y, P, C, M, G, rows, code, a, b, it, it + 1)
        it = sprat_take(slots, t)


#: the most taps (kh * kw) ``conv_grouped_direct`` takes
GROUPED_MAX_TAPS = SPRAT_GROUPED_MAX_TAPS


cdef void conv_grouped_direct_items(const float* x, const float* w, const float* bias,
                                    const float* slope, const float* res, float* y, idx H,
                                    idx W, idx C, idx M, idx G, idx OH, idx OW, idx kh, idx kw,
                                    idx sh, idx sw, idx dh, idx dw, idx ph, idx pw, int code,
                                    float a, float b, idx lo, idx hi) noexcept nogil:
    """Items [lo, hi) of ``conv_grouped_direct``: item i is output row i // G (of the N*OH)
    of group i % G; the activations without a register form then run over its outputs."""
    cdef idx cg = C // G, mg = M // G
    cdef idx mgp = (mg + 7) // 8 * 8
    cdef idx i, g, r, n, oh, ow
    cdef float* yr
    for i in range(lo, hi):
        g = i % G
        r = i // G
        n = r // OH
        oh = r - n * OH
        yr = y + r * OW * M + g * mg
        sprat_grouped_conv_row(yr, x + n * H * W * C + g * cg, w + g * kh * kw * cg * mgp,
                               bias + g * mg, slope + g * mg if slope != NULL else NULL,
                               res + r * OW * M + g * mg if res != NULL else NULL, H, W, C, M,
                               cg, mg, kh, kw, sh, sw, dh, dw, ph, pw, oh, OW, code, a, b)
        if code != A_NONE and not sprat_act_in_regs(code):
            for ow in range(OW):
                act_inplace(yr + ow * M, mg, code, a, b)


cdef void conv_grouped_direct_taken(const float* x, const float* w, const float* bias,
                                    const float* slope, const float* res, float* y, idx H,
                                    idx W, idx C, idx M, idx G, idx OH, idx OW, idx kh, idx kw,
                                    idx sh, idx sw, idx dh, idx dw, idx ph, idx pw, int code,
                                    float a, float b, sprat_slots* slots, int t) noexcept nogil:
    """The items of ``conv_grouped_direct`` slot ``t`` runs (``sprat_take``)."""
    cdef idx it = sprat_take(slots, t)
    while it >= 0:
        conv_grouped_direct_items(x, w, bias, slope, res, y, H, W, C, M, G, OH, OW, kh, kw, sh,
                                  sw, dh, dw, ph, pw, code, a, b, it, it + 1)
        it = sprat_take(slots, t)


def conv_grouped_direct(int nt, const float[::1] x, const float[::1] w, const float[::1] bias,
                        const float[::1] res, bint has_res, float[::1] y, idx N, idx H, idx W,
                        idx C, idx M, idx G, idx OH, idx OW, idx kh, idx kw, idx sh, idx sw,
                        idx dh, idx dw, idx ph, idx pw, int code, float a, float b,
                        const float[::1] slope):
    """A conv of ``G`` > 1 groups of ``x`` (N, H, W, C) into ``y`` (N, OH, OW, M) read in
    place, without a patch matrix (``sprat_grouped_conv_row``): per output row and group, the
    grouped 1x1 kernel's tiles of pixels x 8-channel vectors summed over every tap inside the
    image (zero padding skipped), the bias, residual and a register-form activation in
    registers. ``w`` (G, kh, kw, C/G, Mgp) as ``conv.grouped_pack`` makes it from the
    (M, kh, kw, C/G) weight (Mgp = M/G rounded up to 8); ``bias`` M floats; PRelu's ``slope``
    M floats (else empty). Items (output row, group) shared out by ``nt`` slots
    (``sprat_take``). Raises ValueError on short operands, groups that do not divide C and
    M, or more than GROUPED_MAX_TAPS taps; RuntimeError on a build without it
    (``GROUPED_POINTWISE`` false)."""
    cdef idx mgp = ((M // G if G > 0 else 0) + 7) // 8 * 8
    if G < 2 or C % G or M % G or kh * kw > SPRAT_GROUPED_MAX_TAPS or min(sh, sw, dh, dw) < 1:
        raise ValueError(f"conv_grouped_direct: G={G} must divide C={C} and M={M}, at most "
                         f"{SPRAT_GROUPED_MAX_TAPS} taps ({kh}x{kw}), strides and dilations "
                         ">= 1")
    conv_check(x, N * H * W * C, y, N * OH * OW * M, res, has_res, w,
               G * kh * kw * (C // G) * mgp)
    if bias.shape[0] < M:
        raise ValueError(f"conv_grouped_direct: bias {bias.shape[0]} < M = {M}")
    if code == A_PRELU and slope.shape[0] < M:
        raise ValueError(f"conv_grouped_direct: PRelu needs {M} slopes")
    if not SPRAT_GROUPED_SIMD:
        raise RuntimeError("conv_grouped_direct: this build has no AVX2 kernel; use "
                           "conv_im2col")
    cdef const float* px = &x[0]
    cdef const float* pw_ = &w[0]
    cdef const float* pb_ = &bias[0]
    cdef const float* pr = cptr(res) if has_res else NULL
    cdef const float* ps = cptr(slope) if code == A_PRELU else NULL
    cdef float* py = &y[0]
    cdef idx items = N * OH * G
    cdef int t
    cdef sprat_slots slots
    if items <= 0 or OW <= 0:
        return
    if nt <= 1:
        with nogil:
            conv_grouped_direct_items(px, pw_, pb_, ps, pr, py, H, W, C, M, G, OH, OW, kh, kw,
                                      sh, sw, dh, dw, ph, pw, code, a, b, 0, items)
        return
    sprat_slots_init(&slots, nt, items)
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        conv_grouped_direct_taken(px, pw_, pb_, ps, pr, py, H, W, C, M, G, OH, OW, kh, kw, sh,
                                  sw, dh, dw, ph, pw, code, a, b, &slots, t)


# ---- pointwise with a channel scale (squeeze-and-excitation, ``_scale``) ------------------
# ``y = act((x * s) @ W + bias (+ res))`` with ``s`` one factor per input channel (per image,
# or one row for all): ``(x * s) W = x (diag(s) W)``, so either the weight's K rows are scaled
# (once per call and slot, into the slot's workspace; then the GEMM reads x in place) or each
# block of x's rows is scaled into the slot's workspace while it is in cache, right before its
# GEMM. ``conv.py`` picks the cheaper at prepare (``scale_weight_pays``); either way the Mul's
# pass over the whole map (read x, write x * s, read it again) is gone.

cdef struct conv_se_t:
    const float* x
    const float* s
    const float* w      # packed panels (``packed``) or the (C, M) pointwise weight
    const float* bias   # M floats (packed) or the tiled row bias (``nbias`` floats)
    idx nbias
    const float* res
    bint has_res
    float* y
    idx P, C, M, hw
    bint per_image, packed, scale_w, split_m, wt
    idx rb, cb          # rows x columns per work item (packed); pixels per block (BLAS: rb)
    int code
    float a, b
    const float* slope


cdef void conv_scale_rows(conv_dst d, const float* src, idx nrows, idx width, const float* s,
                          idx period) noexcept nogil:
    """``d[r, :] = src[r, :] * s[r % period]`` for ``nrows`` rows of ``width`` floats: the K
    rows of a (K, M) weight (``period`` = K), or of packed panels one after another."""
    cdef idx r, j
    cdef float f
    cdef const float* sr
    for r in range(nrows):
        f = s[r % period]
        sr = src + r * width
        for j in range(width):
            d[r * width + j] = sr[j] * f


cdef void conv_scale_pixels(conv_dst d, const float* x, idx p0, idx p1, idx C, const float* s,
                            idx hw, bint per_image) noexcept nogil:
    """``d[p - p0, :] = x[p, :] * s[image of p, :]`` for the pixels [p0, p1) of (P, C) maps of
    ``hw`` pixels each; ``s`` one row of C factors per image (``per_image``) or one for all."""
    cdef idx p, k
    cdef const float* sr
    cdef const float* xr
    for p in range(p0, p1):
        sr = s + (p // hw) * C if per_image else s
        xr = x + p * C
        for k in range(C):
            d[(p - p0) * C + k] = xr[k] * sr[k]


cdef void conv_se_packed(const conv_se_t* q, idx t, idx nt, float* ws) noexcept nogil:
    """Slot ``t`` of ``nt`` on the packed-weight GEMM: work items of ``rb`` rows x ``cb``
    columns as ``gemm_packed`` deals them out, the epilogue in registers."""
    cdef idx ncb = (q.M + q.cb - 1) // q.cb
    cdef idx items = ((q.P + q.rb - 1) // q.rb) * ncb
    cdef idx lo = t * items // nt
    cdef idx hi = (t + 1) * items // nt
    cdef idx it, m0, m1, n0, n1, r, pan0, pan1, last = -1
    cdef idx K = q.C
    cdef bint act_regs = sprat_act_in_regs(q.code)
    cdef const float* w = q.w
    cdef const float* a
    cdef sprat_pk_epi e
    if hi <= lo:
        return
    e.bias, e.slope, e.a, e.b = q.bias, q.slope, q.a, q.b
    e.code = q.code if act_regs else A_NONE
    e.ldr = e.rn = q.M
    if q.scale_w:
        # NOTE: only the panels of the column blocks this slot's items cover (a column split
        # of a small map gives each slot half of them)
        if hi - lo >= ncb or lo % ncb > (hi - 1) % ncb:
            pan0, pan1 = 0, (q.M + SPRAT_PK_NR - 1) // SPRAT_PK_NR
        else:
            pan0 = (lo % ncb) * q.cb // SPRAT_PK_NR
            pan1 = (min(q.M, ((hi - 1) % ncb + 1) * q.cb) + SPRAT_PK_NR - 1) // SPRAT_PK_NR
        conv_scale_rows(ws + pan0 * K * SPRAT_PK_NR, q.w + pan0 * K * SPRAT_PK_NR,
                        (pan1 - pan0) * K, SPRAT_PK_NR, q.s, K)
        w = ws
    for it in range(lo, hi):
        m0 = (it // ncb) * q.rb
        n0 = (it % ncb) * q.cb
        m1 = min(q.P, m0 + q.rb)
        n1 = min(q.M, n0 + q.cb)
        if q.scale_w:
            a = q.x + m0 * K
        else:
            if m0 != last:  # NOTE: items of one row block follow each other: scaled once
                conv_scale_pixels(ws, q.x, m0, m1, K, q.s, q.hw, q.per_image)
                last = m0
            a = ws
        e.res = q.res + m0 * q.M if q.has_res else NULL
        sprat_pk_gemm_epi(m1 - m0, n0, n1, K, a, K, w, q.y + m0 * q.M, q.M, &e)
        if not act_regs and q.code != A_NONE:
            for r in range(m0, m1):
                act_inplace(q.y + r * q.M + n0, n1 - n0, q.code, q.a, q.b)


cdef void conv_se_blas(const conv_se_t* q, idx t, idx nt, float* ws) noexcept nogil:
    """Slot ``t`` of ``nt`` on ``conv_pointwise_slot`` (BLAS, blocks of ``rb`` pixels)."""
    cdef idx nb = (q.P + q.rb - 1) // q.rb
    cdef idx bi, p0, rows, b0, b1
    if q.scale_w:
        conv_scale_rows(ws, q.w, q.C, q.M, q.s, q.C)
        conv_pointwise_slot(t, nt, q.x, ws, q.bias, q.nbias, q.res, q.has_res, q.y, q.P, q.C,
                            q.M, 1, q.rb, False, q.split_m, q.code, q.a, q.b, q.slope)
        return
    if q.split_m:
        b0, b1 = 0, nb
    else:
        b0, b1 = t * nb // nt, (t + 1) * nb // nt
    for bi in range(b0, b1):
        p0 = bi * q.rb
        rows = min(q.rb, q.P - p0)
        conv_scale_pixels(ws, q.x, p0, p0 + rows, q.C, q.s, q.hw, q.per_image)
        # NOTE: with split_m every slot scales every block and computes its channels of it
        conv_pointwise_slot(t if q.split_m else 0, nt if q.split_m else 1, ws, q.w, q.bias,
                            q.nbias, conv_at(q.res, p0 * q.M), q.has_res, q.y + p0 * q.M, rows,
                            q.C, q.M, 1, rows, q.wt, q.split_m, q.code, q.a, q.b, q.slope)


def conv_pointwise_scaled(int nt, const float[::1] x, const float[::1] s, bint per_image, idx hw,
                          const float[::1] w, bint packed, bint wt, bint scale_w,
                          const float[::1] bias, const float[::1] res, bint has_res,
                          float[::1] y, idx P, idx C, idx M, idx rb, idx cb, bint split_m,
                          float[:, ::1] ws, int code, float a, float b,
                          const float[::1] slope):
    """1x1 conv, stride 1, no padding, one group, of the scaled input:
    ``y (P, M) = act((x (P, C) * s) @ W + bias (+ res))``. ``s``: C floats, or with
    ``per_image`` C per image of ``hw`` pixels (P / hw rows). ``w``: the packed panels of
    ``gemm_packed`` (``packed``; work items of ``rb`` rows x ``cb`` columns, ``bias`` M
    floats, PRelu's ``slope`` M) or the (C, M) pointwise weight of ``conv_pointwise`` (with
    ``wt`` the model's (M, C); blocks of ``rb`` pixels, ``split_m``; ``bias`` and ``slope``
    tiled). ``scale_w``: scale the weight (each slot into its row of ``ws``: the weight's
    size), else x's rows (a row of ``ws`` holds ``rb`` pixels); not with ``per_image`` or
    ``wt``. Raises ValueError on short operands or
    workspace, a bad block size, or ``packed`` where ``packed_gemm_available()`` is false."""
    cdef idx wlen = ((M + SPRAT_PK_NR - 1) // SPRAT_PK_NR) * SPRAT_PK_NR * C if packed else C * M
    conv_check(x, P * C, y, P * M, res, has_res, w, wlen)
    conv_check_slope(slope, code, bias.shape[0], M)
    if (rb < 1 or cb < 1 or hw < 1 or P % hw or (scale_w and (per_image or wt))
            or (packed and wt)
            or s.shape[0] < (P // hw if per_image else 1) * C
            or (packed and (cb % SPRAT_PK_NR or not sprat_pk_mode()))):
        raise ValueError(f"conv_pointwise_scaled: bad blocks ({rb}, {cb}), images of {hw} "
                         f"pixels, {s.shape[0]} scale floats or packed weights unavailable")
    conv_check_ws(ws, nt, wlen if scale_w else rb * C)
    cdef conv_se_t q
    q.x, q.s, q.w, q.bias, q.nbias = &x[0], &s[0], &w[0], &bias[0], bias.shape[0]
    q.res, q.has_res, q.y = cptr(res), has_res, &y[0]
    q.P, q.C, q.M, q.hw = P, C, M, hw
    q.per_image, q.packed, q.scale_w, q.split_m, q.wt = per_image, packed, scale_w, split_m, wt
    q.rb, q.cb, q.code, q.a, q.b, q.slope = rb, cb, code, a, b, cptr(slope)
    cdef const conv_se_t* qp = &q
    cdef int t
    if nt <= 1:
        with nogil:
            if packed:
                conv_se_packed(qp, 0, 1, &ws[0, 0])
            else:
                conv_se_blas(qp, 0, 1, &ws[0, 0])
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        if packed:
            conv_se_packed(qp, t, nt, &ws[t, 0])
        else:
            conv_se_blas(qp, t, nt, &ws[t, 0])


# ---- shift-GEMM: stride 1, one group ---------------------------------------------------------

cdef void conv_shift_slot(idx t, idx nt, const float* x, const float* w, const float* bias,
                          idx nbias, const float* res, bint has_res, float* y, idx N, idx H,
                          idx W, idx C, idx M, idx OH, idx OW, idx kh, idx kw, idx dh, idx dw,
                          idx ph, idx pw, idx R, idx Wc, float* xb, float* acc, int code,
                          float a, float b, const float* slope) noexcept nogil:
    """Slot ``t`` of ``nt`` of a stride-1 conv as kh*kw accumulating GEMMs over shifted views.

    Blocks are ``R`` output rows by ``Wc`` output columns (``Wc < OW`` splits the rows of a
    narrow map, a 1-D conv's single row, among slots). Per block the input band (rows + halo,
    columns + halo) is copied into the scratch ``xb`` of row pitch ``wp = cols + (kw-1)*dw``
    pixels, zeros where it lies outside the image; the output over the padded width is then
    ``sum_ij xb[shift_ij : shift_ij + rows*wp] @ w[i, j]`` (plain GEMMs with lda = C, no patch
    matrix) into ``acc`` (rows*wp, M), and the epilogue drops each row's (kw-1)*dw junk
    columns. ``w`` packed (kh, kw, C, M). The floats after the band are read for junk columns
    only: the workspace starts zeroed so that they stay finite.
    """
    cdef idx nbh = (OH + R - 1) // R
    cdef idx nbw = (OW + Wc - 1) // Wc
    cdef idx nb = N * nbh * nbw
    cdef idx bi, n, hb, oh0, ow0, rows, cols, wp, band, r, ih, iw0, lo, hi, i, j, y0
    cdef float* row
    for bi in range(t * nb // nt, (t + 1) * nb // nt):
        n = bi // (nbh * nbw)
        hb = bi - n * nbh * nbw
        oh0 = (hb // nbw) * R
        ow0 = (hb % nbw) * Wc
        rows = min(R, OH - oh0)
        cols = min(Wc, OW - ow0)
        wp = cols + (kw - 1) * dw
        band = rows + (kh - 1) * dh
        iw0 = ow0 - pw  # input column of the band's first pixel
        lo = min(wp, max(0, -iw0))  # band pixels [lo, hi) lie inside the image
        hi = max(lo, min(wp, W - iw0))
        for r in range(band):
            ih = oh0 + r - ph
            row = xb + r * wp * C
            if ih < 0 or ih >= H:
                memset(row, 0, wp * C * sizeof(float))
                continue
            if lo > 0:
                memset(row, 0, lo * C * sizeof(float))
            if hi > lo:
                memcpy(row + lo * C, x + ((n * H + ih) * W + iw0 + lo) * C,
                       (hi - lo) * C * sizeof(float))
            if hi < wp:
                memset(row + hi * C, 0, (wp - hi) * C * sizeof(float))
        for i in range(kh):
            for j in range(kw):
                sgemm(False, False, rows * wp, M, C, 1.0, xb + (i * dh * wp + j * dw) * C, C,
                      w + (i * kw + j) * C * M, M, 0.0 if i == 0 and j == 0 else 1.0, acc, M)
        for r in range(rows):
            y0 = ((n * OH + oh0 + r) * OW + ow0) * M
            gather_rows(acc + r * wp * M, wp * M, y + y0, 1, cols, M, bias, nbias,
                        conv_at(res, y0), has_res, code, a, b, slope)


def conv_shift(int nt, const float[::1] x, const float[::1] w, const float[::1] bias,
               const float[::1] res, bint has_res, float[::1] y, idx N, idx H, idx W, idx C,
               idx M, idx OH, idx OW, idx kh, idx kw, idx dh, idx dw, idx ph, idx pw, idx R,
               idx Wc, float[:, ::1] xb, float[:, ::1] acc, int code, float a, float b,
               const float[::1] slope):
    """Stride-1, one-group conv of ``x`` (N, H, W, C) into ``y`` (N, OH, OW, M) by shift-GEMM
    (``conv_shift_slot``), blocks of ``R`` output rows by ``Wc`` columns split over ``nt``
    slots. Workspaces ``xb`` (nt, >= (band*wp + (kw-1)*dw)*C, zeroed) and ``acc``
    (nt, >= R*wp*M), ``wp = Wc + (kw-1)*dw``. ``bias`` and PRelu's ``slope`` (empty for other
    activations) tiled (``tiled_bias``). Raises ValueError on short operands."""
    conv_check(x, N * H * W * C, y, N * OH * OW * M, res, has_res, w, kh * kw * C * M)
    conv_check_slope(slope, code, bias.shape[0], M)
    if R < 1 or Wc < 1:
        raise ValueError(f"conv_shift: block of {R} rows by {Wc} columns")
    cdef idx wp = min(Wc, OW) + (kw - 1) * dw
    conv_check_ws(xb, nt, ((R + (kh - 1) * dh) * wp + (kw - 1) * dw) * C)
    conv_check_ws(acc, nt, R * wp * M)
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
            conv_shift_slot(0, 1, px, pw_, pb_, nbias, pr, has_res, py, N, H, W, C, M, OH, OW,
                            kh, kw, dh, dw, ph, pw, R, Wc, &xb[0, 0], &acc[0, 0], code, a, b, ps)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        conv_shift_slot(t, nt, px, pw_, pb_, nbias, pr, has_res, py, N, H, W, C, M, OH, OW,
                        kh, kw, dh, dw, ph, pw, R, Wc, &xb[t, 0], &acc[t, 0], code, a, b, ps)


# ---- narrow: few output channels ------------------------------------------------------------
# A one-group conv with fewer output channels than a packed panel's width (a segmentation mask,
# a heatmap, a detector's objectness map: 1-7 channels over a large map) wastes most of every
# GEMM tile and calls BLAS with N = M. Here each output value is a dot product over its window
# (kh*kw taps of C contiguous channels in NHWC, the last C % 8 masked), summed in 8 lanes
# across every tap and reduced once (``simd/narrow.c``): P pixels of a row x M channels of
# accumulators in registers (P from 8 for one channel to 2 for 5-7), weights loaded once per P
# pixels; border pixels one at a time with their taps clipped. Then the tiled epilogue per row.

cdef extern from "simd/narrow.h":
    int SPRAT_NARROW_SIMD
    int SPRAT_NARROW_MAX
    void sprat_narrow_rows(float* y, const float* x, const float* w, idx H, idx W, idx C, idx M,
                           idx OH, idx OW, idx kh, idx kw, idx sh, idx sw, idx dh, idx dw,
                           idx ph, idx pw, idx r0, idx r1) noexcept nogil


#: whether this build has ``conv_narrow`` (the avx2 build), and the most output channels it takes
NARROW_SIMD = bool(SPRAT_NARROW_SIMD)
NARROW_MAX_M = SPRAT_NARROW_MAX


cdef void conv_narrow_rows(idx r0, idx r1, const float* x, const float* w, const float* bias,
                           idx nbias, const float* res, bint has_res, float* y, idx H, idx W,
                           idx C, idx M, idx OH, idx OW, idx kh, idx kw, idx sh, idx sw, idx dh,
                           idx dw, idx ph, idx pw, int code, float a, float b,
                           const float* slope) noexcept nogil:
    """Output rows ``[r0, r1)`` (of the N*OH rows) of ``conv_narrow``, row by row: the sums,
    then bias, residual and activation while the row is in L1."""
    cdef idx r
    for r in range(r0, r1):
        sprat_narrow_rows(y, x, w, H, W, C, M, OH, OW, kh, kw, sh, sw, dh, dw, ph, pw, r, r + 1)
        rows_inplace(y + r * OW * M, OW, M, bias, nbias, conv_at(res, r * OW * M), has_res,
                     code, a, b, slope)


def conv_narrow(int nt, const float[::1] x, const float[::1] w, const float[::1] bias,
                const float[::1] res, bint has_res, float[::1] y, idx N, idx H, idx W, idx C,
                idx M, idx OH, idx OW, idx kh, idx kw, idx sh, idx sw, idx dh, idx dw, idx ph,
                idx pw, int code, float a, float b, const float[::1] slope):
    """One-group conv of ``x`` (N, H, W, C) into ``y`` (N, OH, OW, M) for ``M`` of 1 to
    NARROW_MAX_M output channels, each value a dot product over its window (no patch
    matrix, no GEMM). ``w`` is (M, kh, kw, C); ``bias`` and PRelu's ``slope`` (empty for the
    other activations) tiled (``tiled_bias``). Output rows are split over ``nt`` slots.
    Only call it when NARROW_SIMD. Raises ValueError on short operands or M outside
    1..NARROW_MAX_M."""
    if M < 1 or M > SPRAT_NARROW_MAX or not SPRAT_NARROW_SIMD:
        raise ValueError(f"conv_narrow: {M} output channels (1..{SPRAT_NARROW_MAX}) or a build "
                         "without it")
    conv_check(x, N * H * W * C, y, N * OH * OW * M, res, has_res, w, kh * kw * C * M)
    conv_check_slope(slope, code, bias.shape[0], M)
    cdef const float* px = &x[0]
    cdef const float* pw_ = &w[0]
    cdef const float* pb_ = &bias[0]
    cdef const float* pr = cptr(res)
    cdef const float* ps = cptr(slope)
    cdef float* py = &y[0]
    cdef idx nbias = bias.shape[0]
    cdef idx rows = N * OH
    cdef int t
    if nt <= 1:
        with nogil:
            conv_narrow_rows(0, rows, px, pw_, pb_, nbias, pr, has_res, py, H, W, C, M, OH, OW,
                             kh, kw, sh, sw, dh, dw, ph, pw, code, a, b, ps)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        conv_narrow_rows(t * rows // nt, (t + 1) * rows // nt, px, pw_, pb_, nbias, pr, has_res,
                         py, H, W, C, M, OH, OW, kh, kw, sh, sw, dh, dw, ph, pw, code, a, b, ps)


# ---- im2col: any stride, dilation, padding, groups -------------------------------------------

cdef inline void _im2col_taps(float* d, const float* xrow, idx W, idx C, idx iw0, idx kw, idx dw,
                              idx cg) noexcept nogil:
    """One kernel row of one window, tap by tap: ``cg`` channels of each pixel ``iw0 + j*dw``
    of the input row ``xrow`` (already offset to the group's first channel) into ``d``, zeros
    for the taps outside the image."""
    cdef idx j, iw
    for j in range(kw):
        iw = iw0 + j * dw
        if iw < 0 or iw >= W:
            conv_zero(d + j * cg, cg)
        else:
            conv_copy(d + j * cg, xrow + iw * C, cg)


cdef void _im2col_row(float* d, const float* x, idx n, idx H, idx W, idx C, idx kh, idx kw,
                      idx sh, idx sw, idx dh, idx dw, idx ph, idx pw, idx oh, idx ow0, idx ow1,
                      idx g, idx cg, idx kk) noexcept nogil:
    """Patch rows of the output pixels ``ow0 .. ow1`` of output row ``oh`` (image ``n``),
    group ``g``, into ``d`` (one row of ``kk = kh*kw*cg`` floats per pixel). With one group and
    no horizontal dilation a window's kw*C entries of one kernel row are one contiguous run of
    the input: the windows wholly inside the image are one copy each, only the edge windows go
    tap by tap."""
    cdef idx run = kw * cg
    cdef bint whole = cg == C and dw == 1
    cdef idx ow_lo = min(ow1, max(ow0, (pw + sw - 1) // sw))
    cdef idx ow_hi = max(ow_lo, min(ow1, conv_floordiv(W - kw + pw, sw) + 1))
    cdef idx i, ih, ow
    cdef float* d0
    cdef const float* xrow
    for i in range(kh):
        ih = oh * sh - ph + i * dh
        d0 = d + i * run
        if ih < 0 or ih >= H:
            for ow in range(ow0, ow1):
                conv_zero(d0 + (ow - ow0) * kk, run)
            continue
        xrow = x + (n * H + ih) * W * C + g * cg
        if whole:
            for ow in range(ow_lo, ow_hi):
                conv_copy(d0 + (ow - ow0) * kk, xrow + (ow * sw - pw) * C, run)
            for ow in range(ow0, ow_lo):
                _im2col_taps(d0 + (ow - ow0) * kk, xrow, W, C, ow * sw - pw, kw, 1, C)
            for ow in range(ow_hi, ow1):
                _im2col_taps(d0 + (ow - ow0) * kk, xrow, W, C, ow * sw - pw, kw, 1, C)
        else:
            for ow in range(ow0, ow1):
                _im2col_taps(d0 + (ow - ow0) * kk, xrow, W, C, ow * sw - pw, kw, dw, cg)


cdef void _im2col_pixels(float* col, const float* x, idx H, idx W, idx C, idx OH, idx OW,
                         idx kh, idx kw, idx sh, idx sw, idx dh, idx dw, idx ph, idx pw,
                         idx p0, idx p1, idx g, idx cg) noexcept nogil:
    """The patch matrix of the output pixels ``p0 .. p1`` (flat over N, OH, OW: a range may
    start and end inside a row and span images) for group ``g``, into ``col`` (p1-p0, kk)."""
    cdef idx kk = kh * kw * cg
    cdef idx per_image = OH * OW
    cdef idx p = p0
    cdef idx n, rem, oh, ow0, ow1
    while p < p1:
        n = p // per_image
        rem = p - n * per_image
        oh = rem // OW
        ow0 = rem - oh * OW
        ow1 = min(OW, ow0 + (p1 - p))
        _im2col_row(col + (p - p0) * kk, x, n, H, W, C, kh, kw, sh, sw, dh, dw, ph, pw, oh,
                    ow0, ow1, g, cg, kk)
        p += ow1 - ow0


cdef void conv_im2col_slot(idx t, idx nt, const float* x, const float* w, const float* bias,
                           idx nbias, const float* res, bint has_res, float* y, idx N, idx H,
                           idx W, idx C, idx M, idx G, idx OH, idx OW, idx kh, idx kw, idx sh,
                           idx sw, idx dh, idx dw, idx ph, idx pw, idx blk, bint split_m,
                           float* col, int code, float a, float b, const float* slope,
                           bint packed, bint grouped=False) noexcept nogil:
    """Slot ``t`` of ``nt`` of a general conv: per block of ``blk`` output pixels and per
    group, gather the (pixels, kh*kw*C/G) patch matrix into ``col`` and GEMM it with the packed
    weights (G, kh, kw, C/G, M/G) straight into ``y`` (ldc = M); then the epilogue. The slot
    takes a range of the blocks, or with ``split_m`` (one group) every block but a range of
    the output channels (multiples of 8): for few pixels against many channels each slot then
    reads half the weights and builds the (small) patch matrix itself. ``packed`` (one group,
    ``packed_gemm_available()``): ``w`` is the (kh*kw*C, M) weight as ``gemm_packed``'s panels,
    and the GEMM is ``sprat_pk_gemm`` (channel ranges then in multiples of the panel width).
    ``grouped`` (several groups, ``GROUPED_POINTWISE``): ``w`` is (G, kh*kw*C/G, M/G rounded up
    to 8) (``conv.grouped_pack``) and each group's product is the grouped 1x1 kernel's
    (``sprat_grouped_k``) over its patch matrix, the bias, residual and a register-form
    activation applied in registers; ``bias`` and ``slope`` then begin with the M plain
    values (a tiled row's first)."""
    cdef idx cg = C // G
    cdef idx mg = M // G
    cdef idx kk = kh * kw * cg
    cdef idx P = N * OH * OW
    cdef idx nb = (P + blk - 1) // blk
    cdef idx b0, b1, c0, c1, bi, p0, rows, g
    cdef idx unit = SPRAT_PK_NR if packed else 8
    cdef idx mgp = (mg + 7) // 8 * 8
    # NOTE: the packed GEMM applies the bias, residual and a register-form activation before
    # its stores (``sprat_pk_gemm_epi``): no second pass over the block
    cdef bint in_regs = packed and sprat_act_in_regs(code)
    cdef sprat_pk_epi e
    e.bias, e.slope, e.code, e.a, e.b = bias, slope, code, a, b
    e.ldr = e.rn = M
    if split_m:
        b0, b1 = 0, nb
        c0 = conv_col_edge(t, nt, M, unit)
        c1 = conv_col_edge(t + 1, nt, M, unit)
    else:
        b0, b1 = t * nb // nt, (t + 1) * nb // nt
        c0, c1 = 0, M
    if c1 <= c0:
        return
    for bi in range(b0, b1):
        p0 = bi * blk
        rows = min(blk, P - p0)
        for g in range(G):
            _im2col_pixels(col, x, H, W, C, OH, OW, kh, kw, sh, sw, dh, dw, ph, pw, p0,
                           p0 + rows, g, cg)
            if grouped:
                sprat_grouped_k(y + p0 * M + g * mg, col, kk, kk, w + g * kk * mgp,
                                bias + g * mg, slope + g * mg if code == A_PRELU else NULL,
                                conv_at(res, p0 * M + g * mg) if has_res else NULL, M, mg, 0,
                                rows, code, a, b)
            elif in_regs:
                e.res = conv_at(res, p0 * M) if has_res else NULL
                sprat_pk_gemm_epi(rows, c0, c1, kk, col, kk, w, y + p0 * M, M, &e)
            elif packed:
                sprat_pk_gemm(rows, c0, c1, kk, col, kk, w, y + p0 * M, M)
            else:
                # NOTE: a block of one to three pixels (a 1-D conv over a few frames) runs as
                # GEMVs (``dense_gemm_nn``): BLAS's setup cost more than the product there
                dense_gemm_nn(rows, c1 - c0 if split_m else mg, kk, 1.0, col, kk,
                              w + g * kk * mg + c0, mg, y + p0 * M + g * mg + c0, M)
        if grouped:
            if code != A_NONE and not sprat_act_in_regs(code):
                act_inplace(y + p0 * M, rows * M, code, a, b)
            continue
        if in_regs:
            continue
        if split_m:
            conv_cols_inplace(y + p0 * M + c0, rows, c1 - c0, M, bias + c0,
                              conv_at(res, p0 * M + c0), has_res, code, a, b,
                              conv_at(slope, c0))
        else:
            rows_inplace(y + p0 * M, rows, M, bias, nbias, conv_at(res, p0 * M), has_res, code,
                         a, b, slope)


def conv_im2col(int nt, const float[::1] x, const float[::1] w, const float[::1] bias,
                const float[::1] res, bint has_res, float[::1] y, idx N, idx H, idx W, idx C,
                idx M, idx G, idx OH, idx OW, idx kh, idx kw, idx sh, idx sw, idx dh, idx dw,
                idx ph, idx pw, idx blk, bint split_m, float[:, ::1] col, int code, float a,
                float b, const float[::1] slope, bint packed=False, bint grouped=False):
    """Any conv of ``x`` (N, H, W, C) into ``y`` (N, OH, OW, M) by patch matrix + GEMM
    (``conv_im2col_slot``), blocks of ``blk`` output pixels split over ``nt`` slots (or, with
    ``split_m`` and one group, the output channels); workspace ``col`` (nt, >= blk*kh*kw*C/G).
    ``bias``: the M biases tiled (``tiled_bias``), PRelu's ``slope`` alike (empty for other
    activations). ``packed``: ``w`` is the (kh*kw*C, M)
    weight as ``linalg.pack_panels`` makes it, for the packed-weight GEMM (one group; only
    where ``packed_gemm_available()``). ``grouped``: ``w`` is (G, kh*kw*C/G, M/G rounded up
    to 8) as ``conv.grouped_pack`` makes it, each group's GEMM the grouped 1x1 kernel's
    (several groups; only where ``GROUPED_POINTWISE``). Raises ValueError on short operands,
    ``split_m`` or ``packed`` with groups, ``grouped`` with one, or ``grouped`` where its
    kernel does not run."""
    if grouped and (G < 2 or split_m or packed or not SPRAT_GROUPED_SIMD):
        raise ValueError(f"conv_im2col: grouped with {G} groups, split_m or packed, or on a "
                         "build without the grouped kernel")
    conv_check(x, N * H * W * C, y, N * OH * OW * M, res, has_res, w,
               G * kh * kw * (C // G) * ((M // G + 7) // 8 * 8) if grouped
               else kh * kw * C * M // G)
    conv_check_slope(slope, code, bias.shape[0], M)
    conv_check_ws(col, nt, blk * kh * kw * C // G)
    if blk < 1 or ((split_m or packed) and G != 1):
        raise ValueError(f"conv_im2col: blk {blk} < 1 or split_m/packed with {G} groups")
    if packed and (not sprat_pk_mode()
                   or w.shape[0] < -(-M // SPRAT_PK_NR) * SPRAT_PK_NR * kh * kw * C):
        raise ValueError("conv_im2col: packed weights where the packed GEMM does not run, "
                         "or short panels")
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
            conv_im2col_slot(0, 1, px, pw_, pb_, nbias, pr, has_res, py, N, H, W, C, M, G, OH,
                             OW, kh, kw, sh, sw, dh, dw, ph, pw, blk, False, &col[0, 0], code, a,
                             b, ps, packed, grouped)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        conv_im2col_slot(t, nt, px, pw_, pb_, nbias, pr, has_res, py, N, H, W, C, M, G, OH, OW,
                         kh, kw, sh, sw, dh, dw, ph, pw, blk, split_m, &col[t, 0], code, a, b,
                         ps, packed, grouped)


# ---- direct conv on the packed weight (AVX-512F CPUs) -----------------------------------------
# A one-group conv without a patch matrix: each tap's rows of A are read where they lie in the
# input (row r of a tile at stride sw*C), the tile's accumulators kept in registers over all
# kh*kw taps (``sprat_pk_direct``). Horizontal padding is a band of padded input rows copied
# per block (vertical padding costs nothing: its taps are skipped). Against the patch matrix
# it saves writing and re-reading kh*kw copies of the input, and against Winograd it streams
# 9 C*M weight floats per block instead of 36 (``conv.winograd_pays``).

cdef void conv_direct_slot(idx t, idx nt, const float* x, const float* w, const float* bias,
                           const float* res, bint has_res, float* y, idx N, idx H, idx W,
                           idx C, idx M, idx OH, idx OW, idx kh, idx kw, idx sh, idx sw,
                           idx dh, idx dw, idx ph, idx pw, idx rows, bint split_m, idx wp,
                           float* band, int code, float a, float b,
                           const float* slope, sprat_slots* claim) noexcept nogil:
    """Slot ``t`` of ``nt`` of ``conv_direct``: the (image, block of ``rows`` output rows)
    items, all columns, as ``sprat_take`` gives them out (``claim``; NULL: the slot's
    contiguous range); or with ``split_m`` every item but a range of the output
    channels (multiples of the panel width). ``wp`` > 0: the padded input row's pixels (the
    band in ``band``); 0: the input itself (no horizontal padding)."""
    cdef idx nrb = (OH + rows - 1) // rows
    cdef idx items = N * nrb
    cdef idx i0, i1, c0, c1, it, n, oh0, oh1, lo, hi, r, p
    cdef bint in_regs = sprat_act_in_regs(code)
    cdef float* d
    cdef sprat_pk_epi e
    e.bias, e.slope, e.a, e.b = bias, slope, a, b
    e.code = code if in_regs else A_NONE
    e.ldr = e.rn = M
    if split_m:
        claim = NULL  # every item, a range of the channels
        i0, i1 = 0, items
        c0 = conv_col_edge(t, nt, M, SPRAT_PK_NR)
        c1 = conv_col_edge(t + 1, nt, M, SPRAT_PK_NR)
    else:
        i0, i1 = t * items // nt, (t + 1) * items // nt
        c0, c1 = 0, M
    if c1 <= c0:
        return
    if claim != NULL:
        i0, i1 = sprat_take(claim, <int>t), items
    it = i0
    while it >= 0 and it < i1:
        n = it // nrb
        oh0 = (it % nrb) * rows
        oh1 = min(OH, oh0 + rows)
        e.res = res + n * OH * OW * M if has_res else NULL
        if wp == 0:
            sprat_pk_direct(x + n * H * W * C, ph, W * C, ph, H, C, <int>kh, <int>kw, sh, sw,
                            dh, dw, oh0, oh1, OW, w, c0, c1, y + n * OH * OW * M, M, &e)
        else:
            # the padded rows [lo, hi] of the block that hold input rows
            lo = max(oh0 * sh, ph)
            hi = min((oh1 - 1) * sh + (kh - 1) * dh, ph + H - 1)
            for r in range(lo, hi + 1):
                d = band + (r - lo) * wp * C
                conv_zero(d, pw * C)
                conv_copy(d + pw * C, x + (n * H + r - ph) * W * C, W * C)
                conv_zero(d + (pw + W) * C, (wp - pw - W) * C)
            sprat_pk_direct(band, lo, wp * C, ph, H, C, <int>kh, <int>kw, sh, sw, dh, dw, oh0,
                            oh1, OW, w, c0, c1, y + n * OH * OW * M, M, &e)
        if not in_regs and code != A_NONE:
            for p in range(n * OH * OW + oh0 * OW, n * OH * OW + oh1 * OW):
                act_inplace(y + p * M + c0, c1 - c0, code, a, b)
        it = sprat_take(claim, <int>t) if claim != NULL else it + 1


cdef struct direct_call_t:
    # one ``conv_direct`` call's checked arguments (``DirectCall``)
    int nt
    const float* x
    const float* w
    const float* bias
    const float* res
    bint has_res
    float* y
    idx N, H, W, C, M, OH, OW, kh, kw, sh, sw, dh, dw, ph, pw, rows
    bint split_m
    idx wp
    float* band
    idx bstride
    int code
    float a, b
    const float* slope


cdef _direct_run(const direct_call_t* s):
    """A checked ``conv_direct`` call: its blocks over its slots."""
    cdef sprat_slots slots
    cdef int t, nt = s.nt
    if nt <= 1:
        with nogil:
            conv_direct_slot(0, 1, s.x, s.w, s.bias, s.res, s.has_res, s.y, s.N, s.H, s.W, s.C,
                             s.M, s.OH, s.OW, s.kh, s.kw, s.sh, s.sw, s.dh, s.dw, s.ph, s.pw,
                             s.rows, False, s.wp, s.band, s.code, s.a, s.b, s.slope, NULL)
        return
    sprat_slots_init(&slots, nt, s.N * ((s.OH + s.rows - 1) // s.rows))
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        conv_direct_slot(t, nt, s.x, s.w, s.bias, s.res, s.has_res, s.y, s.N, s.H, s.W, s.C,
                         s.M, s.OH, s.OW, s.kh, s.kw, s.sh, s.sw, s.dh, s.dw, s.ph, s.pw, s.rows,
                         s.split_m, s.wp, (s.band + t * s.bstride) if s.wp else NULL, s.code,
                         s.a, s.b, s.slope, &slots)


cdef class DirectCall(_BoundCall):
    """One ``conv_direct`` call with its arguments checked and bound once (``BOUND_CALLS``).
    Raises as ``conv_direct``."""
    cdef direct_call_t s

    def __call__(self):
        _direct_run(&self.s)


def conv_direct(int nt, const float[::1] x, const float[::1] w, const float[::1] bias,
                const float[::1] res, bint has_res, float[::1] y, idx N, idx H, idx W, idx C,
                idx M, idx OH, idx OW, idx kh, idx kw, idx sh, idx sw, idx dh, idx dw, idx ph,
                idx pw, idx rows, bint split_m, idx wp, float[:, ::1] band, int code, float a,
                float b, const float[::1] slope, DirectCall into=None):
    """A one-group conv of ``x`` (N, H, W, C) into ``y`` (N, OH, OW, M), tap by tap on the
    packed weight ``w`` (the (kh*kw*C, M) weight, K tap-major, as ``linalg.pack_panels`` makes
    it), without a patch matrix (``conv_direct_slot``, ``sprat_pk_direct``): + ``bias`` (M),
    + ``res`` (y's layout) when ``has_res``, activation ``code`` (PRelu: ``slope``, M floats).
    ``y`` may be ``res`` (in place: each tile reads its residual rows, then stores them).
    Items are blocks of ``rows`` output rows per image, which ``nt`` slots take
    (``sprat_take``; with ``split_m`` the output channels are split over them instead).
    ``wp``: pixels per padded input row (``pw`` zero pixels, the W of the input, zeros up to
    ``wp``) copied per block into ``band`` (nt, >= (rows-1)*sh
    + (kh-1)*dh + 1 padded rows of wp*C floats); 0 when no tap reads a column outside the
    input (``pw`` 0). Vertical padding ``ph``: the taps on rows outside the input are skipped.
    Only where ``packed_gemm_available()``. With ``into``: the checked arguments bound into
    that call object, nothing run. Raises ValueError on short operands or workspace, a
    geometry whose taps would read outside the input or the band, or where the packed GEMM
    does not run."""
    cdef idx span = (OW - 1) * sw + (kw - 1) * dw + 1
    conv_check(x, N * H * W * C, y, N * OH * OW * M, res, has_res, w,
               -(-M // SPRAT_PK_NR) * SPRAT_PK_NR * kh * kw * C)
    conv_check_slope(slope, code, M, M)
    if not sprat_pk_mode():
        raise ValueError("conv_direct: the packed GEMM does not run on this CPU")
    if (rows < 1 or kh < 1 or kw < 1 or sh < 1 or sw < 1 or dh < 1 or dw < 1 or ph < 0
            or pw < 0 or bias.shape[0] < M
            or (wp == 0 and (pw != 0 or span > W)) or (wp != 0 and (wp < pw + W or span > wp))):
        raise ValueError(f"conv_direct: bad geometry (rows {rows}, pads {ph}, {pw}, padded "
                         f"row {wp} for a span of {span} of {W} pixels) or short bias")
    if wp:
        conv_check_ws(band, nt, ((rows - 1) * sh + (kh - 1) * dh + 1) * wp * C)
    cdef direct_call_t s = direct_call_t(
        nt, &x[0], &w[0], &bias[0], cptr(res), has_res, &y[0], N, H, W, C, M, OH, OW, kh, kw,
        sh, sw, dh, dw, ph, pw, rows, split_m, wp, NULL, band.shape[1], code, a, b,
        cptr(slope))
    if wp:
        s.band = &band[0, 0]
    if into is not None:
        into.s = s
        return
    _direct_run(&s)


# ---- depthwise: group == C == M ----------------------------------------------------------------
# With horizontal stride 1, one output row (OW*C floats) is built tap by tap: each tap is a
# long contiguous multiply-add over (pixels x channels) against the tap's weights tiled ``seg``
# pixels long, so the loop vectorises fully even for 8 channels. ``seg`` pixels at a time keep
# the tiled weights small (``conv.depthwise_segment``).

cdef void _dw_tap(conv_dst yr, const float* x, const float* wt, idx C, idx xrow, idx tap,
                  idx off, idx ow0, idx ow1, idx seg) noexcept nogil:
    """``yr[ow*C + c] += x[(xrow + ow + off)*C + c] * w[tap, c]`` for ow in [ow0, ow1), in
    segments of ``seg`` pixels (``wt`` holds each tap's weights tiled ``seg`` times)."""
    cdef const float* ws = wt + tap * seg * C
    cdef const float* xs
    cdef idx o = ow0
    cdef idx m, k
    while o < ow1:
        m = (min(ow1, o + seg) - o) * C
        xs = x + (xrow + o + off) * C
        for k in range(m):  # vectorises: contiguous, yr restrict
            yr[o * C + k] += xs[k] * ws[k]
        o += seg


cdef void _dw_edges(float* yr, const float* x, const float* wt, idx C, idx xrow, idx i, idx kw,
                    idx OW, idx W, idx dw, idx pw, idx a0, idx a1, idx seg) noexcept nogil:
    """The taps of kernel row ``i`` on the output pixels outside the interior [a0, a1), tap
    by tap; each edge run is clipped to the pixels whose tap lies inside the row (on a row
    narrower than the kernel the left edge reaches past the right end, and back)."""
    cdef idx j, lo, hi
    for j in range(kw):
        lo = max(0, pw - j * dw)
        hi = min(OW, W + pw - j * dw)
        _dw_tap(yr, x, wt, C, xrow, i * kw + j, j * dw - pw, lo, min(a0, hi), seg)
        _dw_tap(yr, x, wt, C, xrow, i * kw + j, j * dw - pw, max(a1, lo), hi, seg)


cdef void _dw_interior3(conv_dst yr, const float* x, const float* wt, idx C, idx xrow, idx i,
                        idx dw, idx pw, idx a0, idx a1, idx seg) noexcept nogil:
    """The three taps of kernel row ``i`` of a 3-wide kernel on the interior pixels [a0, a1)
    (all three taps inside the image), in one pass."""
    cdef idx sc = seg * C
    cdef idx d = dw * C
    cdef const float* w0 = wt + i * 3 * sc
    cdef const float* xs
    cdef idx o = a0
    cdef idx m, k
    while o < a1:
        m = (min(a1, o + seg) - o) * C
        xs = x + (xrow + o - pw) * C
        for k in range(m):  # vectorises: contiguous, yr restrict
            yr[o * C + k] += xs[k] * w0[k] + xs[d + k] * w0[sc + k] + xs[2 * d + k] * w0[2 * sc + k]
        o += seg


cdef void _dw_interior5(conv_dst yr, const float* x, const float* wt, idx C, idx xrow, idx i,
                        idx dw, idx pw, idx a0, idx a1, idx seg) noexcept nogil:
    """The five taps of kernel row ``i`` of a 5-wide kernel on the interior pixels [a0, a1)."""
    cdef idx sc = seg * C
    cdef idx d = dw * C
    cdef const float* w0 = wt + i * 5 * sc
    cdef const float* xs
    cdef idx o = a0
    cdef idx m, k
    while o < a1:
        m = (min(a1, o + seg) - o) * C
        xs = x + (xrow + o - pw) * C
        for k in range(m):  # vectorises: contiguous, yr restrict
            yr[o * C + k] += (xs[k] * w0[k] + xs[d + k] * w0[sc + k]
                              + xs[2 * d + k] * w0[2 * sc + k] + xs[3 * d + k] * w0[3 * sc + k]
                              + xs[4 * d + k] * w0[4 * sc + k])
        o += seg


cdef void _dw_rows_s1(const float* x, const float* wt, const float* bt, float* y, idx lo, idx hi,
                      idx H, idx W, idx C, idx OH, idx OW, idx kh, idx kw, idx sh, idx dh,
                      idx dw, idx ph, idx pw, idx seg) noexcept nogil:
    """Output rows [lo, hi) (of N*OH) of a depthwise conv with horizontal stride 1 (any
    vertical stride ``sh``): each row starts as the tiled bias ``bt``, then every kernel row
    inside the image adds its taps; for 3- and 5-wide kernels the taps share one pass over the
    interior pixels (all taps inside the image), the edges go tap by tap."""
    cdef idx L = OW * C
    cdef idx q, n, oh, o, m, i, ih, xrow, a0, a1, j
    cdef float* yr
    for q in range(lo, hi):
        n = q // OH
        oh = q - n * OH
        yr = y + q * L
        o = 0
        while o < OW:
            m = (min(OW, o + seg) - o) * C
            memcpy(yr + o * C, bt, m * sizeof(float))
            o += seg
        for i in range(kh):
            ih = oh * sh - ph + i * dh
            if ih < 0 or ih >= H:
                continue
            xrow = (n * H + ih) * W
            if kw == 3 or kw == 5:
                a0 = min(OW, max(0, pw))
                a1 = max(a0, min(OW, W + pw - (kw - 1) * dw))
                _dw_edges(yr, x, wt, C, xrow, i, kw, OW, W, dw, pw, a0, a1, seg)
                if kw == 3:
                    _dw_interior3(yr, x, wt, C, xrow, i, dw, pw, a0, a1, seg)
                else:
                    _dw_interior5(yr, x, wt, C, xrow, i, dw, pw, a0, a1, seg)
            else:
                for j in range(kw):
                    _dw_tap(yr, x, wt, C, xrow, i * kw + j, j * dw - pw, max(0, pw - j * dw),
                            min(OW, W + pw - j * dw), seg)


cdef enum:
    # channels per register block of the strided depthwise kernel: four AVX accumulators,
    # enough independent multiply-adds per tap to hide their latency
    DW_LANES = 32


cdef inline void _dw_pixel_block(float* yo, const float* x, const float* w, const float* bias,
                                 idx n, idx oh, idx ow, idx H, idx W, idx C, idx kh, idx kw,
                                 idx sh, idx sw, idx dh, idx dw, idx ph, idx pw) noexcept nogil:
    """``DW_LANES`` channels of one output pixel: the bias plus every tap inside the image,
    summed in a local block (registers: fixed-size loops, fully unrolled and vectorised) and
    stored once; ``x``, ``w``, ``bias`` and ``yo`` start at the block's first channel."""
    cdef float acc[DW_LANES]
    cdef idx i, j, ih, iw, k
    cdef const float* xs
    cdef const float* wk
    for k in range(DW_LANES):
        acc[k] = bias[k]
    for i in range(kh):
        ih = oh * sh - ph + i * dh
        if ih < 0 or ih >= H:
            continue
        for j in range(kw):
            iw = ow * sw - pw + j * dw
            if iw < 0 or iw >= W:
                continue
            xs = x + ((n * H + ih) * W + iw) * C
            wk = w + (i * kw + j) * C
            for k in range(DW_LANES):
                acc[k] += xs[k] * wk[k]
    for k in range(DW_LANES):
        yo[k] = acc[k]


cdef void _dw_rows(const float* x, const float* w, const float* bias, float* y, idx lo, idx hi,
                   idx H, idx W, idx C, idx OH, idx OW, idx kh, idx kw, idx sh, idx sw, idx dh,
                   idx dw, idx ph, idx pw) noexcept nogil:
    """Output rows [lo, hi) of a depthwise conv with any stride. From ``DW_LANES`` channels on,
    each block of channels of a row is summed over its taps in registers (``_dw_pixel_block``;
    the weights of a block stay in L1 along the row); a last partial block overlaps the one
    before it (it recomputes a few channels, the same values). Fewer channels: each output
    pixel starts as the bias and accumulates kh*kw vector multiply-adds in place."""
    cdef idx q, n, oh, ow, i, j, ih, iw, c, c0
    cdef float* yo
    cdef const float* xs
    cdef const float* wk
    for q in range(lo, hi):
        n = q // OH
        oh = q - n * OH
        if C >= DW_LANES:
            c0 = 0
            while c0 < C:
                c0 = min(c0, C - DW_LANES)
                for ow in range(OW):
                    _dw_pixel_block(y + (q * OW + ow) * C + c0, x + c0, w + c0, bias + c0, n,
                                    oh, ow, H, W, C, kh, kw, sh, sw, dh, dw, ph, pw)
                c0 += DW_LANES
            continue
        for ow in range(OW):
            yo = y + (q * OW + ow) * C
            memcpy(yo, bias, C * sizeof(float))
            for i in range(kh):
                ih = oh * sh - ph + i * dh
                if ih < 0 or ih >= H:
                    continue
                for j in range(kw):
                    iw = ow * sw - pw + j * dw
                    if iw < 0 or iw >= W:
                        continue
                    xs = x + ((n * H + ih) * W + iw) * C
                    wk = w + (i * kw + j) * C
                    for c in range(C):
                        yo[c] += xs[c] * wk[c]


cdef void conv_depthwise_slot(idx t, idx nt, const float* x, const float* w, const float* wt,
                              const float* bias, const float* bt, const float* res,
                              bint has_res, float* y, idx N, idx H, idx W, idx C, idx OH,
                              idx OW, idx kh, idx kw, idx sh, idx sw, idx dh, idx dw, idx ph,
                              idx pw, idx seg, int code, float a, float b,
                              const float* st) noexcept nogil:
    """Slot ``t`` of ``nt`` (a range of the N*OH output rows) of a depthwise conv, then the
    residual and activation row by row (PRelu: slopes ``st`` tiled ``seg`` pixels long)."""
    cdef idx rows = N * OH
    cdef idx lo = t * rows // nt
    cdef idx hi = (t + 1) * rows // nt
    cdef idx L = OW * C
    cdef idx q, o
    # NOTE: a 5-wide kernel over 32+ channels sums its 25 taps in registers per pixel block
    # (``_dw_rows``) rather than in five passes over the output row: 0.76-0.83x the time on the
    # 5x5 stride-1 depthwise convs of EfficientNet-B0 and MobileNetV3 (3x3 ones are faster in
    # row passes: 1.08-1.18x the time in registers)
    if sw == 1 and (C < DW_LANES or kw != 5):
        _dw_rows_s1(x, wt, bt, y, lo, hi, H, W, C, OH, OW, kh, kw, sh, dh, dw, ph, pw, seg)
    else:
        _dw_rows(x, w, bias, y, lo, hi, H, W, C, OH, OW, kh, kw, sh, sw, dh, dw, ph, pw)
    if code == A_PRELU:
        for q in range(lo, hi):
            residual_act(y + q * L, conv_at(res, q * L), L, has_res, A_NONE, a, b)
            o = 0
            while o < OW:
                prelu_inplace(y + q * L + o * C, (min(OW, o + seg) - o) * C, st)
                o += seg
    elif has_res or code != A_NONE:
        for q in range(lo, hi):
            residual_act(y + q * L, conv_at(res, q * L), L, has_res, code, a, b)


def conv_depthwise(int nt, const float[::1] x, const float[::1] w, const float[::1] wt,
                   const float[::1] bias, const float[::1] bt, const float[::1] res,
                   bint has_res, float[::1] y, idx N, idx H, idx W, idx C, idx OH, idx OW,
                   idx kh, idx kw, idx sh, idx sw, idx dh, idx dw, idx ph, idx pw, idx seg,
                   int code, float a, float b, const float[::1] slope):
    """Depthwise conv (group == C == M) of ``x`` (N, H, W, C) into ``y`` (N, OH, OW, C), the
    output rows split over ``nt`` slots. ``w`` packed (kh, kw, C), ``bias`` (C); with
    horizontal stride 1 ``wt`` (kh*kw, seg, C) and ``bt`` (seg, C) hold the weights and bias
    tiled ``seg`` pixels long (empty otherwise); PRelu's ``slope`` (seg, C) tiled so at any
    stride (empty for other activations). Raises ValueError on short operands."""
    conv_check(x, N * H * W * C, y, N * OH * OW * C, res, has_res, w, kh * kw * C)
    conv_check_slope(slope, code, seg * C, C)
    if sw == 1 and (wt.shape[0] < kh * kw * seg * C or bt.shape[0] < seg * C):
        raise ValueError("conv_depthwise: tiled weights or bias too short")
    cdef const float* px = &x[0]
    cdef const float* pw_ = &w[0]
    cdef const float* pwt = cptr(wt)
    cdef const float* pb_ = &bias[0]
    cdef const float* pbt = cptr(bt)
    cdef const float* pr = cptr(res)
    cdef float* py = &y[0]
    cdef const float* ps = cptr(slope)
    cdef int t
    if nt <= 1:
        with nogil:
            conv_depthwise_slot(0, 1, px, pw_, pwt, pb_, pbt, pr, has_res, py, N, H, W, C, OH,
                                OW, kh, kw, sh, sw, dh, dw, ph, pw, seg, code, a, b, ps)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        conv_depthwise_slot(t, nt, px, pw_, pwt, pb_, pbt, pr, has_res, py, N, H, W, C, OH, OW,
                            kh, kw, sh, sw, dh, dw, ph, pw, seg, code, a, b, ps)


# ---- depthwise, register-blocked (AVX2): kernels 3 and 5 wide, horizontal stride 1 and 2 ------
# The layout of XNNPACK's and MLAS's depthwise micro-kernels, written afresh for NHWC rows:
# weights packed once at prepare as (C/8 blocks, kh, kw, 8 lanes) (``conv.depthwise_pack``),
# the lanes past C zero. Per output row, the pixels whose kw taps all lie inside the row (the
# interior) go in blocks of P = 8, 4, 2, 1 pixels; per block and per 8 channels, P accumulators
# start at the bias, each kernel row loads its kw weight vectors once and each input vector of
# the (P-1)*stride + kw wide window once, and adds it into every accumulator whose window holds
# it (1 load per 1.5-2.5 FMAs); the residual and the activation are applied in registers before
# the one store. The few border pixels go one at a time with their taps clipped to the row.
# Kernel rows outside the image are skipped (no padded copy). A last block of fewer than 8
# channels loads and stores masked. Work slots take ranges of (output row, column segment,
# channel tile) units (``conv.depthwise_split``).

cdef extern from "simd/depthwise.h":
    int SPRAT_DW_SIMD
    void sprat_dw_segment(idx W, idx OW, idx kw, idx sw, idx pw, idx cs, idx g, idx* s0,
                          idx* s1) noexcept nogil
    int sprat_dw_units(float* y, const float* x, const float* wp, const float* bp,
                       const float* sp, const float* res, idx H, idx W, idx C, idx OH, idx OW,
                       idx kh, idx kw,
                       idx sh, idx sw, idx dh, idx ph, idx pw, idx ct, idx cs, idx u0, idx u1,
                       int code, float a, float b) noexcept nogil
    int sprat_dw_units_q8(unsigned char* yq, const float* x, const float* wp,
                          const float* bp, const float* mult, idx H, idx W, idx C, idx OH,
                          idx OW, idx kh, idx kw, idx sh, idx sw, idx dh, idx ph, idx pw,
                          idx ct, idx u0, idx u1, float zp, float lo, float hi,
                          int is_signed, const float* post, idx pld) noexcept nogil


#: whether this build has the register-blocked depthwise kernel (``conv_depthwise_blocked``)
DEPTHWISE_BLOCKED = bool(SPRAT_DW_SIMD)


cdef void conv_dw_blocked_slot(idx t, idx nt, const float* x, const float* wp, const float* bp,
                               const float* res, bint has_res, float* y, idx N, idx H, idx W,
                               idx C, idx OH, idx OW, idx kh, idx kw, idx sh, idx sw, idx dh,
                               idx ph, idx pw, idx ct, idx cs, int code, float a, float b,
                               const float* sp, double* psum, float* rowsum,
                               sprat_slots* claim) noexcept nogil:
    """Slot ``t`` of ``nt``: an even range of the (output row, column segment, channel tile)
    units, or with ``claim`` (not NULL) the even chunks of them it holds
    (``sprat_slots_items``) as ``sprat_take`` gives them out; the activations without a
    register form (Tanh, Gelu) then run over those outputs. With ``psum`` (N*C doubles, the
    slot's own; NULL: none; not with ``claim``: the slots' sums would then change order from
    run to run) each unit's output pixels, still in cache, are summed per channel into it
    (``rowsum``: C floats of scratch), for ``_mean``."""
    cdef idx units = N * OH * cs * (((C + 7) // 8 + ct - 1) // ct)
    cdef idx nchunks, k
    if claim == NULL or psum != NULL:
        conv_dw_blocked_units(t * units // nt, (t + 1) * units // nt, x, wp, bp, res, has_res,
                              y, N, H, W, C, OH, OW, kh, kw, sh, sw, dh, ph, pw, ct, cs, code,
                              a, b, sp, psum, rowsum)
        return
    nchunks = sprat_slots_items(claim)
    k = sprat_take(claim, <int>t)
    while k >= 0:
        conv_dw_blocked_units(k * units // nchunks, (k + 1) * units // nchunks, x, wp, bp, res,
                              has_res, y, N, H, W, C, OH, OW, kh, kw, sh, sw, dh, ph, pw, ct,
                              cs, code, a, b, sp, NULL, NULL)
        k = sprat_take(claim, <int>t)


cdef void conv_dw_blocked_units(idx u0, idx u1, const float* x, const float* wp,
                                const float* bp, const float* res, bint has_res, float* y,
                                idx N, idx H, idx W, idx C, idx OH, idx OW, idx kh, idx kw,
                                idx sh, idx sw, idx dh, idx ph, idx pw, idx ct, idx cs,
                                int code, float a, float b, const float* sp, double* psum,
                                float* rowsum) noexcept nogil:
    """Units ``[u0, u1)`` of ``conv_dw_blocked_slot``: unit u is output row u // (cs*ntile),
    column segment (u // ntile) % cs (``sprat_dw_segment``), channel tile u % ntile (``ct``
    blocks of 8)."""
    cdef idx ntile = ((C + 7) // 8 + ct - 1) // ct
    cdef idx u, q, g, c0, c1, s0, s1, ow
    sprat_dw_units(y, x, wp, bp, sp, res if has_res else NULL, H, W, C, OH, OW, kh, kw, sh, sw,
                   dh, ph, pw, ct, cs, u0, u1, code, a, b)
    if psum != NULL:
        memset(psum, 0, N * C * sizeof(double))  # NOTE: one call per slot (no claim)
    if (code == A_NONE or sprat_act_in_regs(code)) and psum == NULL:
        return
    for u in range(u0, u1):
        q = u // (ntile * cs)
        g = (u // ntile) % cs
        c0 = (u % ntile) * ct * 8
        c1 = min(C, c0 + ct * 8)
        sprat_dw_segment(W, OW, kw, sw, pw, cs, g, &s0, &s1)
        if s0 >= s1:
            continue
        if code != A_NONE and not sprat_act_in_regs(code):
            for ow in range(s0, s1):
                act_inplace(y + (q * OW + ow) * C + c0, c1 - c0, code, a, b)
        if psum != NULL:
            conv_row_sums(psum + (q // OH) * C + c0, rowsum, y + (q * OW + s0) * C + c0,
                          s1 - s0, C, c1 - c0)


cdef void conv_row_sums(double* acc, conv_dst rowsum, const float* y, idx npix, idx pitch,
                        idx nc) noexcept nogil:
    """``acc[:nc] += sum over p < npix of y[p * pitch : p * pitch + nc]``: one output row's
    channel sums, in float32 over the row (vectorised, at most a few hundred terms), added
    to the float64 partial sums (a whole map's mean keeps float64's precision, as
    ``reduce_ori``'s global average pool does)."""
    # NOTE: 32 channels at a time in a fixed-size accumulator the compiler keeps in
    # registers (a row-long accumulator in memory costs a load and a store per 8 floats read:
    # the sum cost a 3x3 depthwise conv of 32 channels on 112x112 ~16% of its time)
    cdef float part[32]
    cdef idx p, c, c0, j
    for c0 in range(0, nc - nc % 32, 32):
        for j in range(32):
            part[j] = 0
        for p in range(npix):
            for j in range(32):
                part[j] += y[p * pitch + c0 + j]
        for j in range(32):
            acc[c0 + j] += part[j]
    c0 = nc - nc % 32
    if c0 == nc:
        return
    for c in range(c0, nc):
        rowsum[c] = 0
    for p in range(npix):
        for c in range(c0, nc):
            rowsum[c] += y[p * pitch + c]
    for c in range(c0, nc):
        acc[c] += rowsum[c]


cdef void conv_means(float* mean, const double* psum, idx nt, idx n, idx count) noexcept nogil:
    """``mean[:n] = psum[:n] / count`` (one slot)."""
    conv_means_strided(mean, psum, nt, n, n, count)


cdef void conv_means_strided(float* mean, const double* psum, idx nt, idx stride, idx n,
                             idx count) noexcept nogil:
    """``mean[:n] = sum over slots t < nt of psum[t * stride : t * stride + n] / count``."""
    cdef idx j, t
    cdef double v
    for j in range(n):
        v = 0
        for t in range(nt):
            v += psum[t * stride + j]
        mean[j] = <float>(v / count)


cdef struct dwb_call_t:
    # one ``conv_depthwise_blocked`` call's checked arguments (``DepthwiseBlockedCall``)
    const float* x
    const float* wp
    const float* bp
    const float* res
    bint has_res
    float* y
    idx N, H, W, C, OH, OW, kh, kw, sh, sw, dh, ph, pw, ct, cs
    int code
    float a, b
    const float* slope
    float* mean
    double* psum
    float* rowsum
    idx sstride, rstride, units
    int nt


cdef _dw_blocked_run(const dwb_call_t* s):
    """A checked ``conv_depthwise_blocked`` call: its units over its slots, then the fused
    mean."""
    cdef int t, nt = s.nt
    cdef sprat_slots slots
    if nt <= 1:
        with nogil:
            conv_dw_blocked_slot(0, 1, s.x, s.wp, s.bp, s.res, s.has_res, s.y, s.N, s.H, s.W,
                                 s.C, s.OH, s.OW, s.kh, s.kw, s.sh, s.sw, s.dh, s.ph, s.pw, s.ct,
                                 s.cs, s.code, s.a, s.b, s.slope, s.psum, s.rowsum, NULL)
            if s.psum != NULL:
                conv_means(s.mean, s.psum, 1, s.N * s.C, s.OH * s.OW)
        return
    sprat_slots_init(&slots, nt, min(s.units, SPRAT_CLAIM_PER_SLOT * nt))
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        conv_dw_blocked_slot(t, nt, s.x, s.wp, s.bp, s.res, s.has_res, s.y, s.N, s.H, s.W, s.C,
                             s.OH, s.OW, s.kh, s.kw, s.sh, s.sw, s.dh, s.ph, s.pw, s.ct, s.cs,
                             s.code, s.a, s.b, s.slope,
                             s.psum + t * s.sstride if s.psum != NULL else NULL,
                             s.rowsum + t * s.rstride if s.rowsum != NULL else NULL, &slots)
    if s.psum != NULL:
        with nogil:
            conv_means_strided(s.mean, s.psum, nt, s.sstride, s.N * s.C, s.OH * s.OW)


cdef class DepthwiseBlockedCall(_BoundCall):
    """One ``conv_depthwise_blocked`` call with its arguments checked and bound once
    (``BOUND_CALLS``). Raises as ``conv_depthwise_blocked``."""
    cdef dwb_call_t s

    def __call__(self):
        _dw_blocked_run(&self.s)


def conv_depthwise_blocked(int nt, const float[::1] x, const float[::1] wp, const float[::1] bp,
                           const float[::1] res, bint has_res, float[::1] y, idx N, idx H, idx W,
                           idx C, idx OH, idx OW, idx kh, idx kw, idx sh, idx sw, idx dh, idx ph,
                           idx pw, idx ct, idx cs, int code, float a, float b,
                           const float[::1] slope,
                           float[::1] mean=None, double[:, ::1] psum=None,
                           float[:, ::1] rowsum=None, DepthwiseBlockedCall into=None):
    """Depthwise conv (group == C == M) of ``x`` (N, H, W, C) into ``y`` (N, OH, OW, C) by the
    register-blocked kernel: ``kw`` 3 or 5, horizontal stride ``sw`` 1 or 2, horizontal
    dilation 1 (any ``kh``, vertical stride ``sh`` and dilation ``dh``); ``wp`` packed
    (ceil(C/8), kh, kw, 8) and ``bp`` (ceil(C/8)*8) zero past C (``conv.depthwise_pack``),
    PRelu's ``slope`` padded as ``bp`` (empty for other activations);
    units of (output row, one of ``cs`` column segments, ``ct`` blocks of 8 channels;
    ``conv.depthwise_split``) split evenly over ``nt`` slots.
    With ``mean`` (N*C floats; ``_mean``, a global average pool of ``y`` fused): ``mean[n, c]``
    = the average of ``y[n, :, :, c]``, summed per slot in the units' epilogue while each row is
    in cache (``psum`` (nt, >= N*C) and ``rowsum`` (nt, >= C) scratch), then added.
    With ``into``: the checked arguments bound into that call object, nothing run.
    Raises ValueError on short operands or an unsupported geometry, RuntimeError on a build
    without it (``DEPTHWISE_BLOCKED`` false)."""
    cdef idx cp = (C + 7) // 8 * 8
    conv_check(x, N * H * W * C, y, N * OH * OW * C, res, has_res, wp, kh * kw * cp)
    if bp.shape[0] < cp:
        raise ValueError(f"conv_depthwise_blocked: bias {bp.shape[0]} < {cp} (padded to 8)")
    conv_check_slope(slope, code, cp, C)
    if kw not in (3, 5) or sw not in (1, 2) or ct < 1 or cs < 1 or sh < 1 or dh < 1:
        raise ValueError(f"conv_depthwise_blocked: kw={kw}, sw={sw}, ct={ct}, cs={cs} not "
                         "supported (kw 3 or 5, sw 1 or 2, ct >= 1, cs >= 1)")
    if not SPRAT_DW_SIMD:
        raise RuntimeError("conv_depthwise_blocked: this build has no AVX2 kernel; use "
                           "conv_depthwise")
    cdef dwb_call_t s = dwb_call_t(&x[0], &wp[0], &bp[0], cptr(res), has_res, &y[0], N, H, W,
                                   C, OH, OW, kh, kw, sh, sw, dh, ph, pw, ct, cs, code, a, b,
                                   cptr(slope), NULL, NULL, NULL, 0, 0,
                                   N * OH * cs * (((C + 7) // 8 + ct - 1) // ct), nt)
    if mean is not None:
        if (mean.shape[0] < N * C or psum is None or rowsum is None or psum.shape[0] < nt
                or psum.shape[1] < N * C or rowsum.shape[0] < nt or rowsum.shape[1] < C):
            raise ValueError("conv_depthwise_blocked: mean, psum or rowsum too short")
        s.mean, s.psum, s.rowsum = &mean[0], &psum[0, 0], &rowsum[0, 0]
        s.sstride, s.rstride = psum.shape[1], rowsum.shape[1]
    if into is not None:
        into.s = s
        return
    _dw_blocked_run(&s)


# ---- Winograd F(4x4, 3x3) --------------------------------------------------------------------
# Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks" (CVPR 2016), F(4,3): a 4x4
# output tile from a 6x6 input tile d is Y = A^T [(G g G^T) * (B^T d B)] A. The transforms run
# over the channel axis (contiguous in NHWC), six vectors in, six (or four) out.

cdef void _wg_bt6(const float* d0, const float* d1, const float* d2, const float* d3,
                  const float* d4, const float* d5, conv_dst o0, conv_dst o1, conv_dst o2,
                  conv_dst o3, conv_dst o4, conv_dst o5, idx n) noexcept nogil:
    """o = B^T d for six vectors of ``n`` channels (element-wise over the channels)."""
    cdef idx k
    cdef float a0, a1, a2, a3, a4, a5
    for k in range(n):  # vectorises: the outputs are restrict
        a0 = d0[k]
        a1 = d1[k]
        a2 = d2[k]
        a3 = d3[k]
        a4 = d4[k]
        a5 = d5[k]
        o0[k] = <float>4.0 * a0 - <float>5.0 * a2 + a4
        o1[k] = -<float>4.0 * (a1 + a2) + a3 + a4
        o2[k] = <float>4.0 * (a1 - a2) - a3 + a4
        o3[k] = <float>2.0 * (a3 - a1) - a2 + a4
        o4[k] = <float>2.0 * (a1 - a3) - a2 + a4
        o5[k] = <float>4.0 * a1 - <float>5.0 * a3 + a5


cdef void _wg_at6(const float* m0, const float* m1, const float* m2, const float* m3,
                  const float* m4, const float* m5, conv_dst o0, conv_dst o1, conv_dst o2,
                  conv_dst o3, idx n) noexcept nogil:
    """o = A^T m for six vectors of ``n`` channels (element-wise over the channels)."""
    cdef idx k
    cdef float s12, d12, s34, d34
    for k in range(n):  # vectorises: the outputs are restrict
        s12 = m1[k] + m2[k]
        d12 = m1[k] - m2[k]
        s34 = m3[k] + m4[k]
        d34 = m3[k] - m4[k]
        o0[k] = m0[k] + s12 + s34
        o1[k] = d12 + <float>2.0 * d34
        o2[k] = s12 + <float>4.0 * s34
        o3[k] = d12 + <float>8.0 * d34 + m5[k]


cdef void _wg_input_tile(const float* x, idx n, idx H, idx W, idx C, idx ih0, idx iw0,
                         float* patch, float* tmp, float* v, idx tile, idx TB) noexcept nogil:
    """Copy the 6x6xC input tile at (ih0, iw0) (zeros outside the image) into ``patch``,
    transform it (B^T d B) and store position p at ``v[(p*TB + tile)*C : +C]``."""
    cdef idx r, q, ih, iw, i
    cdef idx st = TB * C
    cdef float* p
    cdef float* vo
    for r in range(6):
        ih = ih0 + r
        for q in range(6):
            iw = iw0 + q
            p = patch + (r * 6 + q) * C
            if ih < 0 or ih >= H or iw < 0 or iw >= W:
                memset(p, 0, C * sizeof(float))
            else:
                memcpy(p, x + ((n * H + ih) * W + iw) * C, C * sizeof(float))
    # rows: tmp[i][q] = sum_r BT[i][r] * patch[r][q]
    for q in range(6):
        p = patch + q * C
        _wg_bt6(p, p + 6 * C, p + 12 * C, p + 18 * C, p + 24 * C, p + 30 * C,
                tmp + q * C, tmp + (6 + q) * C, tmp + (12 + q) * C, tmp + (18 + q) * C,
                tmp + (24 + q) * C, tmp + (30 + q) * C, C)
    # columns: v[i][j] = sum_q tmp[i][q] * BT[j][q]
    for i in range(6):
        p = tmp + i * 6 * C
        vo = v + (i * 6 * TB + tile) * C
        _wg_bt6(p, p + C, p + 2 * C, p + 3 * C, p + 4 * C, p + 5 * C,
                vo, vo + st, vo + 2 * st, vo + 3 * st, vo + 4 * st, vo + 5 * st, C)


cdef void _wg_output_tile(const float* mo, idx tile, idx TB, idx M, const float* bias,
                          const float* res, bint has_res, float* y, idx ldy, idx c0, idx n,
                          idx OH, idx OW, idx oh0, idx ow0, float* tmp, float* out, int code,
                          float a, float b, const float* slope) noexcept nogil:
    """Inverse-transform tile ``tile`` of ``mo`` (36, TB, M), add the bias (+ residual), apply
    the activation (PRelu: ``slope``, M floats) and write the tile's in-image pixels of the
    4x4 output tile at (oh0, ow0)
    into channels ``c0 .. c0+M`` of ``y`` (``ldy`` channels per pixel; ``res`` alike)."""
    cdef idx st = TB * M
    cdef idx j, i, q, oh, ow, d, k
    cdef const float* m
    cdef float* p
    cdef float* dst
    cdef const float* src
    cdef const float* rr
    # rows: tmp[i][j] (i < 4, j < 6) = sum_p AT[i][p] * mo[p][j]
    for j in range(6):
        m = mo + (j * TB + tile) * M
        _wg_at6(m, m + 6 * st, m + 12 * st, m + 18 * st, m + 24 * st, m + 30 * st,
                tmp + j * M, tmp + (6 + j) * M, tmp + (12 + j) * M, tmp + (18 + j) * M, M)
    # columns: out[i][q] = sum_j tmp[i][j] * AT[q][j]
    for i in range(4):
        p = tmp + i * 6 * M
        _wg_at6(p, p + M, p + 2 * M, p + 3 * M, p + 4 * M, p + 5 * M,
                out + i * 4 * M, out + (i * 4 + 1) * M, out + (i * 4 + 2) * M,
                out + (i * 4 + 3) * M, M)
    for i in range(min(4, OH - oh0)):
        oh = oh0 + i
        for q in range(min(4, OW - ow0)):
            ow = ow0 + q
            d = ((n * OH + oh) * OW + ow) * ldy + c0
            dst = y + d
            src = out + (i * 4 + q) * M
            if has_res:
                rr = res + d
                for k in range(M):
                    dst[k] = src[k] + bias[k] + rr[k]
            else:
                for k in range(M):
                    dst[k] = src[k] + bias[k]
            act_slope(dst, M, code, a, b, slope)


cdef void conv_winograd_slot(idx t, idx nt, const float* x, const float* u, const float* bias,
                             const float* res, bint has_res, float* y, idx N, idx H, idx W,
                             idx C, idx M, idx OH, idx OW, idx ph, idx pw, idx TB,
                             bint split_m, bint packed, float* v, float* mo, float* pbuf,
                             float* obuf, int code, float a, float b,
                             const float* slope, sprat_slots* claim) noexcept nogil:
    """Slot ``t`` of ``nt`` of a 3x3 stride-1 conv by Winograd F(4,3): blocks of ``TB``
    tiles as ``sprat_take`` gives them out (``claim``; NULL: the slot's contiguous range), or
    with ``split_m`` every block but a range of the output channels (a small
    map has too few tiles to share out; each slot then transforms the whole input itself).
    Per block: input transform into ``v`` (36, TB, C), 36 GEMMs with ``u`` (36, C, M) into
    ``mo`` (36, TB, Mt), output transform + epilogue into ``y``. With ``packed`` each ``u[p]``
    is in the packed GEMM's panels (``conv.winograd_weights``: 36 blocks of C * Mp floats, Mp = M
    rounded up to SPRAT_PK_NR) and the GEMMs are ``sprat_pk_gemm``'s, which read ``v``'s rows
    in place (BLAS packed both operands on every call); channel splits then fall on panels.
    Scratch: ``pbuf`` 72*C (patch, transform), ``obuf`` 40*M."""
    cdef idx th = (OH + 3) // 4
    cdef idx tw = (OW + 3) // 4
    cdef idx per_image = th * tw
    cdef idx T = N * per_image
    cdef idx nblk = (T + TB - 1) // TB
    cdef idx b0, b1, c0, c1, mt, blk, t0, cnt, k, g, n, r, ti, tj, p
    cdef idx unit = SPRAT_PK_NR if packed else 8
    cdef idx mp = (M + SPRAT_PK_NR - 1) // SPRAT_PK_NR * SPRAT_PK_NR
    if split_m:
        claim = NULL  # every block, a range of the channels
        b0, b1 = 0, nblk
        c0 = conv_col_edge(t, nt, M, unit)
        c1 = conv_col_edge(t + 1, nt, M, unit)
    else:
        b0, b1 = t * nblk // nt, (t + 1) * nblk // nt
        c0, c1 = 0, M
    mt = c1 - c0
    if claim != NULL:
        b0, b1 = sprat_take(claim, <int>t), nblk
    blk = b0
    while blk >= 0 and blk < b1:
        t0 = blk * TB
        cnt = min(TB, T - t0)
        for k in range(cnt):
            g = t0 + k
            n = g // per_image
            r = g - n * per_image
            ti = r // tw
            tj = r - ti * tw
            _wg_input_tile(x, n, H, W, C, ti * 4 - ph, tj * 4 - pw, pbuf, pbuf + 36 * C, v, k,
                           TB)
        if packed:
            # NOTE: column j of the product lands at mo[p] + i * mt + j - c0
            for p in range(36):
                sprat_pk_gemm(cnt, c0, c1, C, v + p * TB * C, C, u + p * C * mp,
                              mo + p * TB * mt - c0, mt)
        else:
            for p in range(36):
                sgemm(False, False, cnt, mt, C, 1.0, v + p * TB * C, C, u + p * C * M + c0, M,
                      0.0, mo + p * TB * mt, mt)
        for k in range(cnt):
            g = t0 + k
            n = g // per_image
            r = g - n * per_image
            ti = r // tw
            tj = r - ti * tw
            _wg_output_tile(mo, k, TB, mt, bias + c0, res, has_res, y, M, c0, n, OH, OW, ti * 4,
                            tj * 4, obuf, obuf + 24 * M, code, a, b, conv_at(slope, c0))
        blk = sprat_take(claim, <int>t) if claim != NULL else blk + 1


def conv_winograd(int nt, const float[::1] x, const float[::1] u, const float[::1] bias,
                  const float[::1] res, bint has_res, float[::1] y, idx N, idx H, idx W, idx C,
                  idx M, idx OH, idx OW, idx ph, idx pw, idx TB, bint split_m, bint packed,
                  float[:, ::1] vbuf, float[:, ::1] mbuf, float[:, ::1] pbuf,
                  float[:, ::1] obuf, int code, float a, float b, const float[::1] slope):
    """3x3, stride 1, dilation 1, one-group conv of ``x`` (N, H, W, C) into ``y``
    (N, OH, OW, M) by Winograd F(4,3) (``conv_winograd_slot``), split over ``nt`` slots.
    ``u`` the transformed weights: (36, C, M), or with ``packed`` (``packed_gemm_available``
    only) ``conv.winograd_weights``' 36 blocks of panels; ``bias`` (M), PRelu's ``slope`` (M; empty
    for other activations). Workspaces (nt, ...): ``vbuf`` 36*TB*C, ``mbuf`` 36*TB*M,
    ``pbuf`` 72*C, ``obuf`` 40*M. Raises ValueError on short operands, or ``packed`` where
    the packed GEMM does not run."""
    if packed and not sprat_pk_mode():
        raise ValueError("conv_winograd: packed weights, but no packed GEMM on this build/CPU")
    conv_check(x, N * H * W * C, y, N * OH * OW * M, res, has_res, u,
               36 * C * ((M + SPRAT_PK_NR - 1) // SPRAT_PK_NR * SPRAT_PK_NR if packed else M))
    conv_check_slope(slope, code, M, M)
    conv_check_ws(vbuf, nt, 36 * TB * C)
    conv_check_ws(mbuf, nt, 36 * TB * M)
    conv_check_ws(pbuf, nt, 72 * C)
    conv_check_ws(obuf, nt, 40 * M)
    cdef const float* px = &x[0]
    cdef const float* pu = &u[0]
    cdef const float* pb_ = &bias[0]
    cdef const float* pr = cptr(res)
    cdef float* py = &y[0]
    cdef const float* ps = cptr(slope)
    cdef sprat_slots slots
    cdef int t
    if nt <= 1:
        with nogil:
            conv_winograd_slot(0, 1, px, pu, pb_, pr, has_res, py, N, H, W, C, M, OH, OW, ph,
                               pw, TB, split_m, packed, &vbuf[0, 0], &mbuf[0, 0], &pbuf[0, 0],
                               &obuf[0, 0], code, a, b, ps, NULL)
        return
    sprat_slots_init(&slots, nt, (N * ((OH + 3) // 4) * ((OW + 3) // 4) + TB - 1) // TB)
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        conv_winograd_slot(t, nt, px, pu, pb_, pr, has_res, py, N, H, W, C, M, OH, OW, ph, pw,
                           TB, split_m, packed, &vbuf[t, 0], &mbuf[t, 0], &pbuf[t, 0],
                           &obuf[t, 0], code, a, b, ps, &slots)


cdef enum:
    WG_MB = 64  # kernels (output channels) transformed together: the loops over them vectorise

WINOGRAD_WEIGHTS_SCRATCH = 63 * WG_MB  # float64 scratch per slot of conv_winograd_weights


cdef void _wg_g(const double* w0, const double* w1, const double* w2, double* o0, double* o1,
                double* o2, double* o3, double* o4, double* o5, idx n) noexcept nogil:
    """o = G (w0, w1, w2) for ``n`` kernels at once, G the 6x3 weight transform of F(4,3)
    (``conv.py``'s ``WINOGRAD_G``): rows (1/4, 0, 0), -(1, 1, 1)/6, -(1, -1, 1)/6,
    (1/24, 1/12, 1/6), (1/24, -1/12, 1/6), (0, 0, 1)."""
    cdef idx j
    cdef double s, e, h
    for j in range(n):
        s = w0[j] + w2[j]
        e = w0[j] * (1.0 / 24.0) + w2[j] * (1.0 / 6.0)
        h = w1[j] * (1.0 / 12.0)
        o0[j] = w0[j] * 0.25
        o1[j] = -(s + w1[j]) / 6.0
        o2[j] = -(s - w1[j]) / 6.0
        o3[j] = e + h
        o4[j] = e - h
        o5[j] = w2[j]


cdef void _wg_weights_block(const float* w, idx M, idx C, idx c, idx m0, idx mb, float* u,
                            double* buf, bint packed) noexcept nogil:
    """Kernels ``(m0 .. m0+mb, c)`` of ``w`` (M, C, 3, 3) -> ``u[p, c, m]`` (36, C, M), or
    with ``packed`` into ``conv_winograd``'s panels of each ``u[p]`` (C * Mp floats a p, Mp =
    M rounded up to SPRAT_PK_NR; the panel of columns m // NR, row c, column m % NR), in
    double. ``buf``: 63 * WG_MB doubles (9 taps, 18 of G w, 36 of G w G^T)."""
    cdef double* g = buf
    cdef double* t = buf + 9 * WG_MB
    cdef double* v = buf + 27 * WG_MB
    cdef idx j, k, l, i, p
    cdef const float* src
    cdef float* dst
    for j in range(mb):
        src = w + ((m0 + j) * C + c) * 9
        for k in range(9):
            g[k * WG_MB + j] = src[k]
    for l in range(3):  # columns of w: t[i][l] = (G w)[i, l]
        _wg_g(g + l * WG_MB, g + (3 + l) * WG_MB, g + (6 + l) * WG_MB, t + l * WG_MB,
              t + (3 + l) * WG_MB, t + (6 + l) * WG_MB, t + (9 + l) * WG_MB,
              t + (12 + l) * WG_MB, t + (15 + l) * WG_MB, mb)
    for i in range(6):  # rows of G w: v[i][j] = (G w G^T)[i, j]
        k = i * 3 * WG_MB
        l = i * 6 * WG_MB
        _wg_g(t + k, t + k + WG_MB, t + k + 2 * WG_MB, v + l, v + l + WG_MB,
              v + l + 2 * WG_MB, v + l + 3 * WG_MB, v + l + 4 * WG_MB, v + l + 5 * WG_MB, mb)
    cdef idx mp = (M + SPRAT_PK_NR - 1) // SPRAT_PK_NR * SPRAT_PK_NR
    cdef idx q, nq
    if packed:
        # NOTE: m0 is a multiple of WG_MB, itself of SPRAT_PK_NR: kernels q.. of the block
        # start a panel, whose row c takes NR of them in a row (a loop that vectorises; a
        # panel index per kernel made this store 3-4x the time of the unpacked one)
        for p in range(36):
            q = 0
            while q < mb:
                nq = min(<idx>SPRAT_PK_NR, mb - q)
                dst = u + p * C * mp + (m0 + q) * C + c * SPRAT_PK_NR
                for j in range(nq):
                    dst[j] = <float>v[p * WG_MB + q + j]
                q = q + SPRAT_PK_NR
        return
    for p in range(36):
        dst = u + (p * C + c) * M + m0
        for j in range(mb):
            dst[j] = <float>v[p * WG_MB + j]


cdef void _wg_weights_slot(idx t, idx nt, const float* w, idx M, idx C, float* u,
                           double* buf, bint packed) noexcept nogil:
    """Slot ``t`` of ``nt`` of ``conv_winograd_weights``: input channels
    ``[t*C//nt, (t+1)*C//nt)``."""
    cdef idx c, m0
    for c in range(t * C // nt, (t + 1) * C // nt):
        m0 = 0
        while m0 < M:
            _wg_weights_block(w, M, C, c, m0, min(<idx>WG_MB, M - m0), u, buf, packed)
            m0 = m0 + WG_MB


def conv_winograd_weights(int nt, const float[::1] w, idx M, idx C, float[::1] u,
                          double[:, ::1] buf, bint packed=False):
    """The F(4,3) weight transform: ``w`` (M, C, 3, 3) float32 -> ``u`` (36, C, M) float32,
    ``u[p, c, m] = (G w[m, c] G^T)[p // 6, p % 6]`` computed in double (Lavin & Gray 2016,
    §4), split over ``nt`` slots by input channel; with ``packed``, each ``u[p]`` in the
    packed GEMM's panels (36 * C * Mp floats, Mp = M rounded up to SPRAT_PK_NR; the columns
    past M are left as they are: zero them first). ``buf`` (nt, ``WINOGRAD_WEIGHTS_SCRATCH``)
    float64 scratch. Raises ValueError on short operands."""
    cdef idx mp = (M + SPRAT_PK_NR - 1) // SPRAT_PK_NR * SPRAT_PK_NR if packed else M
    if w.shape[0] < M * C * 9 or u.shape[0] < 36 * C * mp:
        raise ValueError(f"conv_winograd_weights: operands shorter than M={M}, C={C} need")
    if buf.shape[0] < nt or buf.shape[1] < 63 * WG_MB:
        raise ValueError("conv_winograd_weights: scratch smaller than (nt, 63 * 64)")
    cdef const float* pw = &w[0]
    cdef float* pu = &u[0]
    cdef int t
    if nt == 1:
        with nogil:
            _wg_weights_slot(0, 1, pw, M, C, pu, &buf[0, 0], packed)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        _wg_weights_slot(t, nt, pw, M, C, pu, &buf[t, 0], packed)


# ---- ConvTranspose, kernel == stride (non-overlapping upsampling) ------------------------------

cdef void _convt_scatter(const float* acc, float* y, const float* bias, const float* res,
                         bint has_res, idx n, idx h0, idx rows, idx W, idx M, idx kh, idx kw,
                         idx OH, idx OW, int code, float a, float b) noexcept nogil:
    """``acc`` (rows*W, kh*kw*M) -> ``y[n, h*kh + i, w*kw + j, :]`` plus bias, residual and
    activation. For one input pixel and kernel row ``i`` the kw*M values are one contiguous
    run in both ``acc`` and ``y`` (``bias`` holds the M biases repeated kw times)."""
    cdef idx L = kw * M
    cdef idx r, i, w, o, c
    cdef const float* s
    cdef float* d
    cdef const float* rr
    for r in range(rows):
        for i in range(kh):
            o = (n * OH + (h0 + r) * kh + i) * OW * M
            for w in range(W):
                s = acc + ((r * W + w) * kh + i) * L
                d = y + o + w * L
                if has_res:
                    rr = res + o + w * L
                    for c in range(L):
                        d[c] = s[c] + bias[c] + rr[c]
                else:
                    for c in range(L):
                        d[c] = s[c] + bias[c]
            if code != A_NONE:
                act_inplace(y + o, OW * M, code, a, b)


cdef void conv_transpose_slot(idx t, idx nt, const float* x, const float* w, const float* bias,
                              const float* res, bint has_res, float* y, idx N, idx H, idx W,
                              idx C, idx M, idx kh, idx kw, idx R, float* acc, int code, float a,
                              float b) noexcept nogil:
    """Slot ``t`` of ``nt``: per block of ``R`` input rows one GEMM (rows*W, C) @ (C, kh*kw*M)
    into ``acc``, then ``_convt_scatter``."""
    cdef idx OH = H * kh
    cdef idx OW = W * kw
    cdef idx nbh = (H + R - 1) // R
    cdef idx nb = N * nbh
    cdef idx K = kh * kw * M
    cdef idx bi, n, h0, rows
    for bi in range(t * nb // nt, (t + 1) * nb // nt):
        n = bi // nbh
        h0 = (bi - n * nbh) * R
        rows = min(R, H - h0)
        sgemm(False, False, rows * W, K, C, 1.0, x + (n * H + h0) * W * C, C, w, K, 0.0, acc, K)
        _convt_scatter(acc, y, bias, res, has_res, n, h0, rows, W, M, kh, kw, OH, OW, code, a,
                       b)


def conv_transpose(int nt, const float[::1] x, const float[::1] w, const float[::1] bias,
                   const float[::1] res, bint has_res, float[::1] y, idx N, idx H, idx W, idx C,
                   idx M, idx kh, idx kw, idx R, float[:, ::1] acc, int code, float a, float b):
    """ConvTranspose with kernel == stride, one group, no padding: ``x`` (N, H, W, C) into
    ``y`` (N, H*kh, W*kw, M), blocks of ``R`` input rows split over ``nt`` slots. ``w`` packed
    (C, kh, kw, M), ``bias`` (kw, M) (the biases tiled kw times); workspace ``acc``
    (nt, >= R*W*kh*kw*M). Raises ValueError on short operands."""
    conv_check(x, N * H * W * C, y, N * H * kh * W * kw * M, res, has_res, w, C * kh * kw * M)
    if bias.shape[0] < kw * M:
        raise ValueError("conv_transpose: the bias must be tiled kw times")
    conv_check_ws(acc, nt, R * W * kh * kw * M)
    cdef const float* px = &x[0]
    cdef const float* pw_ = &w[0]
    cdef const float* pb_ = &bias[0]
    cdef const float* pr = cptr(res)
    cdef float* py = &y[0]
    cdef int t
    if nt <= 1:
        with nogil:
            conv_transpose_slot(0, 1, px, pw_, pb_, pr, has_res, py, N, H, W, C, M, kh, kw, R,
                                &acc[0, 0], code, a, b)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        conv_transpose_slot(t, nt, px, pw_, pb_, pr, has_res, py, N, H, W, C, M, kh, kw, R,
                            &acc[t, 0], code, a, b)
