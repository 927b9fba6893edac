# Elementwise kernels: a fused single pass per L1-sized chunk (see ``elementwise.py``).
#
# Binary ops run on a problem collapsed to three dims (O, M, I): each operand has a stride per
# dim, 0 where it broadcasts; the inner dim is contiguous (stride 1) or broadcast (stride 0).
# Work items are (row, chunk of I) pairs split into ``nt`` slots; each chunk is computed, then
# the residual is added and the activation applied while it is in L1.

from cython.parallel cimport prange

cdef enum:
    CHUNK_ = 2048  # elements per work item: 8 KiB, several operands fit in L1
    OP_ADD = 0
    OP_SUB = 1
    OP_MUL = 2
    OP_DIV = 3
    OP_MAX = 4
    OP_MIN = 5
    OP_PRELU = 6
    # unary-only codes continue after the activation codes (1..9)
    U_ERF = 20
    U_EXP = 21
    U_SQRT = 22
    U_ABS = 23
    U_NEG = 24
    U_GELU = 25
    U_GELU_TANH = 26
    U_RECIPROCAL = 27
    U_IDENTITY = 28
    U_POW2 = 29

CHUNK = CHUNK_
# the op codes, for the Python side (elementwise.py)
ADD, SUB, MUL, DIV, MAX, MIN, PRELU = OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_MAX, OP_MIN, OP_PRELU
ERF, EXP, SQRT, ABS, NEG, GELU, GELU_TANH, RECIPROCAL, IDENTITY, POW2 = (
    U_ERF, U_EXP, U_SQRT, U_ABS, U_NEG, U_GELU, U_GELU_TANH, U_RECIPROCAL, U_IDENTITY, U_POW2)


cdef void _vv(int op, const float* a, const float* b, float* y, idx n) noexcept nogil:
    """y[:n] = op(a[:n], b[:n])."""
    cdef idx i
    cdef float v, p
    if op == OP_ADD:
        for i in range(n):
            y[i] = a[i] + b[i]
    elif op == OP_SUB:
        for i in range(n):
            y[i] = a[i] - b[i]
    elif op == OP_MUL:
        for i in range(n):
            y[i] = a[i] * b[i]
    elif op == OP_DIV:
        for i in range(n):
            y[i] = a[i] / b[i]
    elif op == OP_MAX:
        for i in range(n):
            y[i] = fmax32(a[i], b[i])
    elif op == OP_MIN:
        for i in range(n):
            y[i] = fmin32(a[i], b[i])
    elif op == OP_PRELU:
        # NOTE: arithmetic, not a select: a select loads b conditionally (a masked load)
        for i in range(n):
            v = a[i]
            p = (v + fabsf(v)) * <float>0.5
            y[i] = p + b[i] * (v - p)


cdef void _vs(int op, const float* a, float s, float* y, idx n) noexcept nogil:
    """b is the scalar ``s``."""
    cdef idx i
    cdef float v
    if op == OP_ADD:
        for i in range(n):
            y[i] = a[i] + s
    elif op == OP_SUB:
        for i in range(n):
            y[i] = a[i] - s
    elif op == OP_MUL:
        for i in range(n):
            y[i] = a[i] * s
    elif op == OP_DIV:
        for i in range(n):
            y[i] = a[i] / s
    elif op == OP_MAX:
        for i in range(n):
            y[i] = fmax32(a[i], s)
    elif op == OP_MIN:
        for i in range(n):
            y[i] = fmin32(a[i], s)
    elif op == OP_PRELU:
        for i in range(n):
            v = a[i]
            y[i] = v if v >= 0 else v * s


cdef void _sv(int op, float s, const float* b, float* y, idx n) noexcept nogil:
    """a is the scalar ``s``."""
    cdef idx i
    cdef float p
    if op == OP_ADD:
        for i in range(n):
            y[i] = s + b[i]
    elif op == OP_SUB:
        for i in range(n):
            y[i] = s - b[i]
    elif op == OP_MUL:
        for i in range(n):
            y[i] = s * b[i]
    elif op == OP_DIV:
        for i in range(n):
            y[i] = s / b[i]
    elif op == OP_MAX:
        for i in range(n):
            y[i] = fmax32(s, b[i])
    elif op == OP_MIN:
        for i in range(n):
            y[i] = fmin32(s, b[i])
    elif op == OP_PRELU:
        p = (s + fabsf(s)) * <float>0.5
        for i in range(n):
            y[i] = p + b[i] * (s - p)


cdef inline void _row(int op, const float* a, idx sai, const float* b, idx sbi, float* y,
                      idx n) noexcept nogil:
    if sai != 0 and sbi != 0:
        _vv(op, a, b, y, n)
    elif sai != 0:
        _vs(op, a, b[0], y, n)
    else:  # NOTE: prepare never makes both inner strides 0 (then I == 1, strides 1)
        _sv(op, a[0], b, y, n)


cdef idx _binary_item_count(const idx* dims) noexcept nogil:
    """Work items over (O, M, I): rows shorter than a chunk are grouped ``CHUNK // I`` to an
    item, longer rows are split into chunks."""
    cdef idx rows = dims[0] * dims[1]
    cdef idx inner = dims[2]
    cdef idx per
    if rows == 0 or inner == 0:  # NOTE: an empty tensor: no work item
        return 0
    if inner >= CHUNK_:
        return rows * ((inner + CHUNK_ - 1) // CHUNK_)
    per = CHUNK_ // inner
    return (rows + per - 1) // per


def binary_item_count(dims) -> int:
    """``_binary_item_count`` of a (O, M, I) tuple."""
    cdef idx d[3]
    d[0], d[1], d[2] = dims
    return _binary_item_count(d)


cdef void _row_broadcast_items(idx lo, idx hi, int op, const float* a, const idx* sa,
                               const float* b, const idx* sb, float* y, const idx* dims,
                               const float* res, bint has_res, int code, float pa, float pb,
                               float* tile) noexcept nogil:
    """Short rows where one operand is one row per outer index, repeated over the middle dim
    (an SE block's ``(N, H, W, C) * (N, 1, 1, C)``): that row is tiled once into ``tile`` (a
    CHUNK-float scratch), then each run of rows is one contiguous vector pass."""
    cdef idx m_ = dims[1]
    cdef idx inner = dims[2]
    cdef idx per = CHUNK_ // inner
    cdef idx rows = dims[0] * m_
    cdef bint a_rows = sb[1] == 0  # a varies over rows, b is the repeated row
    cdef idx last = -1
    cdef idx it, r, r_end, o, r1, q, n, yo
    cdef const float* src
    for it in range(lo, hi):
        r = it * per
        r_end = min(rows, r + per)
        while r < r_end:
            o = r // m_
            r1 = min(r_end, (o + 1) * m_)
            if o != last:
                src = (b + o * sb[0]) if a_rows else (a + o * sa[0])
                for q in range(per):
                    memcpy(tile + q * inner, src, inner * sizeof(float))
                last = o
            n = (r1 - r) * inner
            yo = r * inner
            if a_rows:
                _vv(op, a + o * sa[0] + (r - o * m_) * inner, tile, y + yo, n)
            else:
                _vv(op, tile, b + o * sb[0] + (r - o * m_) * inner, y + yo, n)
            residual_act(y + yo, res + yo, n, has_res, code, pa, pb)
            r = r1


cdef void _binary_items(idx lo, idx hi, int op, const float* a, const idx* sa, const float* b,
                        const idx* sb, float* y, const idx* dims, const float* res,
                        bint has_res, int code, float pa, float pb, float* tile) noexcept nogil:
    """Items [lo, hi) of a binary op (``_binary_item_count``). Short rows (an SE block's
    per-channel scale: I = C) are grouped so that the residual and activation run once per
    group, not once per row."""
    cdef idx m_ = dims[1]
    cdef idx inner = dims[2]
    cdef idx per, rows, it, r0, r1, r, o, m, yo, y0, n, nch, c0
    if inner < CHUNK_ and sa[2] == 1 and sb[2] == 1 and (
            (sa[1] == inner and sb[1] == 0) or (sa[1] == 0 and sb[1] == inner)):
        _row_broadcast_items(lo, hi, op, a, sa, b, sb, y, dims, res, has_res, code, pa, pb,
                             tile)
        return
    if inner < CHUNK_:
        per = CHUNK_ // inner
        rows = dims[0] * m_
        for it in range(lo, hi):
            r0 = it * per
            r1 = min(rows, r0 + per)
            for r in range(r0, r1):
                o = r // m_
                m = r - o * m_
                _row(op, a + o * sa[0] + m * sa[1], sa[2], b + o * sb[0] + m * sb[1], sb[2],
                     y + r * inner, inner)
            y0 = r0 * inner
            residual_act(y + y0, res + y0, (r1 - r0) * inner, has_res, code, pa, pb)
        return
    nch = (inner + CHUNK_ - 1) // CHUNK_
    for it in range(lo, hi):
        r = it // nch
        c0 = (it - r * nch) * CHUNK_
        n = min(<idx>CHUNK_, inner - c0)
        o = r // m_
        m = r - o * m_
        yo = r * inner + c0
        _row(op, a + o * sa[0] + m * sa[1] + c0 * sa[2], sa[2],
             b + o * sb[0] + m * sb[1] + c0 * sb[2], sb[2], y + yo, n)
        residual_act(y + yo, res + yo, n, has_res, code, pa, pb)


cdef struct bin_call_t:
    # one ``binary`` call's checked arguments (``BinaryCall``)
    int nt, op
    const float* a
    idx sa[3]
    const float* b
    idx sb[3]
    float* y
    idx d[3]
    const float* res
    bint has_res
    int code
    float pa, pb
    float* tiles
    idx tstride, items


cdef _binary_run(const bin_call_t* s):
    """A checked ``binary`` call: its items over its slots."""
    cdef int t, nt = s.nt
    cdef idx items = s.items
    if items == 0:  # NOTE: an empty tensor (the short-row paths divide by the row length)
        return
    if nt <= 1:
        with nogil:
            _binary_items(0, items, s.op, s.a, s.sa, s.b, s.sb, s.y, s.d, s.res, s.has_res,
                          s.code, s.pa, s.pb, s.tiles)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        _binary_items(t * items // nt, (t + 1) * items // nt, s.op, s.a, s.sa, s.b, s.sb, s.y,
                      s.d, s.res, s.has_res, s.code, s.pa, s.pb, s.tiles + t * s.tstride)


cdef class BinaryCall(_BoundCall):
    """One ``binary`` call with its arguments checked and bound once (``BOUND_CALLS``)."""
    cdef bin_call_t s

    def __call__(self):
        _binary_run(&self.s)


def binary(int nt, int op, const float[::1] a, sa, const float[::1] b, sb, float[::1] y, dims,
           const float[::1] res, bint has_res, int code, float pa, float pb,
           float[:, ::1] tiles, BinaryCall into=None):
    """``y = act(op(a, b) + res)`` over (O, M, I) (``dims``) with per-dim operand strides
    ``sa``/``sb`` (3-tuples of elements, 0 where broadcast), on flat float32 arrays, split into
    ``nt`` work slots; ``tiles`` (nt, >= CHUNK) float32 scratch. With ``into``: the arguments
    bound into that call object, nothing run."""
    cdef bin_call_t s
    s.d[0], s.d[1], s.d[2] = dims
    s.sa[0], s.sa[1], s.sa[2] = sa
    s.sb[0], s.sb[1], s.sb[2] = sb
    s.items = _binary_item_count(s.d)
    s.nt, s.op, s.a, s.b, s.y = nt, op, cptr(a), cptr(b), mptr(y)
    s.res, s.has_res, s.code, s.pa, s.pb = cptr(res), has_res, code, pa, pb
    s.tiles = &tiles[0, 0] if s.items else NULL
    s.tstride = tiles.shape[1]
    if into is not None:
        into.s = s
        return
    _binary_run(&s)


cdef void _unary_chunk(int op, const float* x, float* y, idx n, float pa,
                       float pb) noexcept nogil:
    cdef idx i
    cdef float v
    if op == U_ERF:
        for i in range(n):
            y[i] = erf32(x[i])
    elif op == U_EXP:
        for i in range(n):
            y[i] = exp32(x[i])
    elif op == U_SQRT:
        for i in range(n):
            y[i] = sqrtf(x[i])
    elif op == U_ABS:
        for i in range(n):
            y[i] = fabsf(x[i])
    elif op == U_NEG:
        for i in range(n):
            y[i] = -x[i]
    elif op == U_RECIPROCAL:
        for i in range(n):
            y[i] = <float>1.0 / x[i]
    elif op == U_GELU:
        for i in range(n):
            v = x[i]
            y[i] = <float>0.5 * v * (<float>1.0 + erf32(v * <float>0.7071067811865476))
    elif op == U_GELU_TANH:
        for i in range(n):
            v = x[i]
            y[i] = <float>0.5 * v * (<float>1.0 + tanh32(
                <float>0.7978845608028654 * (v + <float>0.044715 * v * v * v)))
    elif op == U_POW2:
        for i in range(n):
            y[i] = x[i] * x[i]
    else:  # an activation code (or IDENTITY): copy, then act_inplace
        if x != y:
            memcpy(y, x, n * sizeof(float))
        if A_RELU <= op <= A_SILU:
            act_inplace(y, n, op, pa, pb)


cdef void _unary_items(idx lo, idx hi, int op, const float* x, float* y, idx size, float pa,
                       float pb, const float* res, bint has_res, int code, float qa,
                       float qb) noexcept nogil:
    cdef idx it, o, n
    for it in range(lo, hi):
        o = it * CHUNK_
        n = min(<idx>CHUNK_, size - o)
        _unary_chunk(op, x + o, y + o, n, pa, pb)
        residual_act(y + o, res + o, n, has_res, code, qa, qb)


cdef struct un_call_t:
    # one ``unary`` call's checked arguments (``UnaryCall``)
    int nt, op
    const float* x
    float* y
    idx size
    float pa, pb
    const float* res
    bint has_res
    int code
    float qa, qb


cdef _unary_run(const un_call_t* s):
    """A ``unary`` call: its chunks over its slots."""
    cdef idx items = (s.size + CHUNK_ - 1) // CHUNK_
    cdef int t, nt = s.nt
    if nt <= 1:
        with nogil:
            _unary_items(0, items, s.op, s.x, s.y, s.size, s.pa, s.pb, s.res, s.has_res, s.code,
                         s.qa, s.qb)
        return
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static", chunksize=1):
        _unary_items(t * items // nt, (t + 1) * items // nt, s.op, s.x, s.y, s.size, s.pa,
                     s.pb, s.res, s.has_res, s.code, s.qa, s.qb)


cdef class UnaryCall(_BoundCall):
    """One ``unary`` call with its arguments bound once (``BOUND_CALLS``)."""
    cdef un_call_t s

    def __call__(self):
        _unary_run(&self.s)


def unary(int nt, int op, const float[::1] x, float[::1] y, idx size, float pa, float pb,
          const float[::1] res, bint has_res, int code, float qa, float qb,
          UnaryCall into=None):
    """``y = act(op(x) + res)`` on flat float32 arrays of ``size`` elements (``x`` may be
    ``y``), split into ``nt`` work slots. With ``into``: the arguments bound into that call
    object, nothing run."""
    cdef un_call_t s = un_call_t(nt, op, cptr(x), mptr(y), size, pa, pb, cptr(res), has_res,
                                 code, qa, qb)
    if into is not None:
        into.s = s
        return
    _unary_run(&s)
