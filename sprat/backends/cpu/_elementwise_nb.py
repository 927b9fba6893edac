"""Numba bodies of the elementwise kernels: a fused single pass per L1-sized chunk.

Binary ops run on a problem collapsed to three dims (O, M, I) (see elementwise.py): each
operand has a stride per dim, 0 where it broadcasts; the inner dim is contiguous (stride 1) or
broadcast (stride 0). Work items are (row, chunk of I) pairs split into ``nt`` slots; each chunk
is computed, then the residual is added and the activation applied while it is in L1.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ._epilogue import residual_act
from ._jit import njit
from ._math import (
    CLIP,
    FAST,
    HARDSIGMOID,
    HARDSWISH,
    LEAKYRELU,
    RELU,
    SIGMOID,
    SILU,
    TANH,
    act_inplace,
    erf32,
    exp32,
    fmax,
    fmin,
    tanh32,
)

CHUNK = 2048  # elements per work item: 8 KiB, several operands fit in L1

ADD, SUB, MUL, DIV, MAX, MIN, PRELU = range(7)
# unary-only codes continue after the activation codes of _math (1..8)
ERF, EXP, SQRT, ABS, NEG, GELU, GELU_TANH, RECIPROCAL, IDENTITY, POW2 = range(20, 30)


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def _vv(op, a, b, y, n):
    """y[:n] = op(a[:n], b[:n]) on slices (loop-variable indices vectorise; offsets do not)."""
    if op == ADD:
        for i in range(n):
            y[i] = a[i] + b[i]
    elif op == SUB:
        for i in range(n):
            y[i] = a[i] - b[i]
    elif op == MUL:
        for i in range(n):
            y[i] = a[i] * b[i]
    elif op == DIV:
        for i in range(n):
            y[i] = a[i] / b[i]
    elif op == MAX:
        for i in range(n):
            y[i] = fmax(a[i], b[i])
    elif op == MIN:
        for i in range(n):
            y[i] = fmin(a[i], b[i])
    elif op == PRELU:
        # NOTE: arithmetic, not a select: the select loads b conditionally (vmaskmovps)
        h = np.float32(0.5)
        for i in range(n):
            v = a[i]
            p = (v + abs(v)) * h
            y[i] = p + b[i] * (v - p)


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def _vs(op, a, s, y, n):
    """b is the scalar ``s``."""
    if op == ADD:
        for i in range(n):
            y[i] = a[i] + s
    elif op == SUB:
        for i in range(n):
            y[i] = a[i] - s
    elif op == MUL:
        for i in range(n):
            y[i] = a[i] * s
    elif op == DIV:
        for i in range(n):
            y[i] = a[i] / s
    elif op == MAX:
        for i in range(n):
            y[i] = fmax(a[i], s)
    elif op == MIN:
        for i in range(n):
            y[i] = fmin(a[i], s)
    elif op == PRELU:
        for i in range(n):
            v = a[i]
            y[i] = v if v >= 0 else v * s


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def _sv(op, s, b, y, n):
    """a is the scalar ``s``."""
    if op == ADD:
        for i in range(n):
            y[i] = s + b[i]
    elif op == SUB:
        for i in range(n):
            y[i] = s - b[i]
    elif op == MUL:
        for i in range(n):
            y[i] = s * b[i]
    elif op == DIV:
        for i in range(n):
            y[i] = s / b[i]
    elif op == MAX:
        for i in range(n):
            y[i] = fmax(s, b[i])
    elif op == MIN:
        for i in range(n):
            y[i] = fmin(s, b[i])
    elif op == PRELU:
        p = (s + abs(s)) * np.float32(0.5)
        for i in range(n):
            y[i] = p + b[i] * (s - p)


@njit(cache=True, error_model="numpy", nogil=True, inline="always")
def binary_item_count(dims):
    """Work items of ``binary_items`` over (O, M, I): rows shorter than a chunk are grouped
    ``CHUNK // I`` to an item, longer rows are split into chunks."""
    rows = dims[0] * dims[1]
    inner = dims[2]
    if inner >= CHUNK:
        return rows * ((inner + CHUNK - 1) // CHUNK)
    per = CHUNK // inner
    return (rows + per - 1) // per


@njit(cache=True, error_model="numpy", nogil=True, inline="always")
def _row(op, a, ao, sai, b, bo, sbi, ys, n):
    if sai != 0 and sbi != 0:
        _vv(op, a[ao:ao + n], b[bo:bo + n], ys, n)
    elif sai != 0:
        _vs(op, a[ao:ao + n], b[bo], ys, n)
    else:  # NOTE: prepare never makes both inner strides 0 (then I == 1, strides 1)
        _sv(op, a[ao], b[bo:bo + n], ys, n)


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def _row_broadcast_items(lo, hi, op, a, sa, b, sb, y, dims, res, has_res, code, pa, pb, tile):
    """Short rows where one operand is one row per outer index, repeated over the middle dim
    (an SE block's ``(N, H, W, C) * (N, 1, 1, C)``): that row is tiled once into ``tile`` (a
    CHUNK-float scratch), then each run of rows is one contiguous vector pass, with no per-row
    slicing."""
    m_ = dims[1]
    inner = dims[2]
    per = CHUNK // inner
    rows = dims[0] * m_
    a_rows = sb[1] == 0  # a varies over rows, b is the repeated row
    last = -1
    for it in range(lo, hi):
        r = it * per
        r_end = min(rows, r + per)
        while r < r_end:
            o = r // m_
            r1 = min(r_end, (o + 1) * m_)
            if o != last:
                src = b[o * sb[0]:o * sb[0] + inner] if a_rows else a[o * sa[0]:o * sa[0] + inner]
                for q in range(per):
                    tile[q * inner:(q + 1) * inner] = src
                last = o
            n = (r1 - r) * inner
            yo = r * inner
            ys = y[yo:yo + n]
            if a_rows:
                ao = o * sa[0] + (r - o * m_) * inner
                _vv(op, a[ao:ao + n], tile[:n], ys, n)
            else:
                bo = o * sb[0] + (r - o * m_) * inner
                _vv(op, tile[:n], b[bo:bo + n], ys, n)
            residual_act(ys, res[yo:yo + n], has_res, code, pa, pb)
            r = r1


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def binary_items(lo, hi, op, a, sa, b, sb, y, dims, res, has_res, code, pa, pb, tile):
    """Items [lo, hi) of ``binary`` (``binary_item_count``); ``sa``/``sb``/``dims`` are
    (O, M, I)-shaped int tuples, ``tile`` a scratch of CHUNK floats. Short rows (an SE block's
    per-channel scale: I = C) are grouped so that the residual and activation run once per
    group, not once per row."""
    m_ = dims[1]
    inner = dims[2]
    if inner < CHUNK and sa[2] == 1 and sb[2] == 1 and (
            (sa[1] == inner and sb[1] == 0) or (sa[1] == 0 and sb[1] == inner)):
        _row_broadcast_items(lo, hi, op, a, sa, b, sb, y, dims, res, has_res, code, pa, pb,
                             tile)
        return
    if inner < CHUNK:
        per = CHUNK // inner
        rows = dims[0] * m_
        for it in range(lo, hi):
            r0 = it * per
            r1 = min(rows, r0 + per)
            for r in range(r0, r1):
                o = r // m_
                m = r - o * m_
                yo = r * inner
                _row(op, a, o * sa[0] + m * sa[1], sa[2], b, o * sb[0] + m * sb[1], sb[2],
                     y[yo:yo + inner], inner)
            y0 = r0 * inner
            n = (r1 - r0) * inner
            residual_act(y[y0:y0 + n], res[y0:y0 + n], has_res, code, pa, pb)
        return
    nch = (inner + CHUNK - 1) // CHUNK
    for it in range(lo, hi):
        r = it // nch
        c0 = (it - r * nch) * CHUNK
        n = min(CHUNK, inner - c0)
        o = r // m_
        m = r - o * m_
        yo = r * inner + c0
        ys = y[yo:yo + n]
        _row(op, a, o * sa[0] + m * sa[1] + c0 * sa[2], sa[2], b,
             o * sb[0] + m * sb[1] + c0 * sb[2], sb[2], ys, n)
        residual_act(ys, res[yo:yo + n], has_res, code, pa, pb)


@njit(cache=True, error_model="numpy", nogil=True, parallel=True)
def binary_par(nt, op, a, sa, b, sb, y, dims, res, has_res, code, pa, pb, tiles):
    """``y = act(op(a, b) + res)`` over (O, M, I) with per-dim operand strides; ``nt`` slots,
    ``tiles`` (nt, CHUNK) scratch."""
    items = binary_item_count(dims)
    for t in prange(nt):
        binary_items(t * items // nt, (t + 1) * items // nt, op, a, sa, b, sb, y, dims, res,
                     has_res, code, pa, pb, tiles[t])


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def _unary_chunk(op, x, y, n, pa, pb):
    one = np.float32(1.0)
    half = np.float32(0.5)
    if op == ERF:
        for i in range(n):
            y[i] = erf32(x[i])
    elif op == EXP:
        for i in range(n):
            y[i] = exp32(x[i])
    elif op == SQRT:
        for i in range(n):
            y[i] = np.sqrt(x[i])
    elif op == ABS:
        for i in range(n):
            y[i] = abs(x[i])
    elif op == NEG:
        for i in range(n):
            y[i] = -x[i]
    elif op == RECIPROCAL:
        for i in range(n):
            y[i] = one / x[i]
    elif op == GELU:
        k = np.float32(0.7071067811865476)
        for i in range(n):
            v = x[i]
            y[i] = half * v * (one + erf32(v * k))
    elif op == GELU_TANH:
        k = np.float32(0.7978845608028654)
        c = np.float32(0.044715)
        for i in range(n):
            v = x[i]
            y[i] = half * v * (one + tanh32(k * (v + c * v * v * v)))
    elif op == POW2:
        for i in range(n):
            y[i] = x[i] * x[i]
    else:  # an activation code (or IDENTITY): copy, then act_inplace
        for i in range(n):
            y[i] = x[i]
        if op in (RELU, CLIP, SIGMOID, HARDSIGMOID, HARDSWISH, LEAKYRELU, TANH, SILU):
            act_inplace(y, op, pa, pb)


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def unary_items(lo, hi, op, x, y, size, pa, pb, res, has_res, code, qa, qb):
    for it in range(lo, hi):
        o = it * CHUNK
        n = min(CHUNK, size - o)
        ys = y[o:o + n]
        _unary_chunk(op, x[o:o + n], ys, n, pa, pb)
        residual_act(ys, res[o:o + n], has_res, code, qa, qb)


@njit(cache=True, error_model="numpy", nogil=True, parallel=True)
def unary_par(nt, op, x, y, size, pa, pb, res, has_res, code, qa, qb):
    """``y = act(op(x) + res)`` on flat arrays of ``size`` elements, ``nt`` slots."""
    items = (size + CHUNK - 1) // CHUNK
    for t in prange(nt):
        unary_items(t * items // nt, (t + 1) * items // nt, op, x, y, size, pa, pb, res,
                    has_res, code, qa, qb)
