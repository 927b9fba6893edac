"""Reduced-precision weights (``ScheduleConfig(precision="low")``): fp16 storage, fp32 compute.

A constant GEMM weight is stored as IEEE binary16 (half the bytes of fp32) and widened to fp32
on the fly, block by block, right before use; products and sums stay in fp32. This CPU has no
native fp16 arithmetic, and Numba no float16 type, so the weights are held as their ``uint16``
bit patterns and widened with integer ops (``h2f``, vectorised by LLVM on AVX2):

    bits32 = (h & 0x7fff) << 13 | (h & 0x8000) << 16;  value = bitcast_f32(bits32) * 2**112

which is exact for every finite binary16, subnormals included (an fp16 subnormal becomes an
fp32 subnormal that the multiply normalises); ``to_f16`` never stores an infinity or a NaN.

Two kernels: ``gemv_f16`` for one row (memory-bound: each weight element is widened as it is
read) and ``gemm_f16_blocks`` for more rows (a column panel of the weight widened into
per-thread scratch, then one BLAS call per panel).
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ._blas import sgemm
from ._epilogue import rows_inplace
from ._jit import njit
from ._math import FAST

F16_MAX = 65504.0
SCALE = np.float32(2.0 ** 112)


def to_f16(w: np.ndarray) -> np.ndarray:
    """float32 ``w`` as binary16 bit patterns (``uint16``, same shape), rounded to nearest.

    Raises ValueError when a value is not finite or beyond fp16's range (+-65504): such a
    weight stays fp32 (the caller checks ``f16_ok`` first)."""
    if not f16_ok(w):
        raise ValueError("weight has values outside the finite float16 range")
    return np.ascontiguousarray(w, dtype=np.float16).view(np.uint16)


def f16_ok(w: np.ndarray) -> bool:
    """Whether every value of ``w`` is finite and within fp16's range."""
    return bool(w.size == 0 or np.max(np.abs(w)) <= F16_MAX)


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST, inline="always")
def h2f(h):
    """One binary16 bit pattern (uint16) as float32 (exact for finite values)."""
    x = np.uint32(h)
    bits = ((x & np.uint32(0x7FFF)) << np.uint32(13)) | ((x & np.uint32(0x8000)) << np.uint32(16))
    return np.uint32(bits).view(np.float32) * SCALE


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def widen(h, out):
    """``out[:len(h)] = float32(h)`` for binary16 bits ``h`` (uint16)."""
    n = h.shape[0]
    o = out[:n]
    for i in range(n):
        o[i] = h2f(h[i])


@njit(cache=True, error_model="numpy", nogil=True, parallel=True, fastmath=FAST)
def gemv_f16(a, w, y, M, N, K, cb, nt, bias, has_bias, res, has_res, code, pa, pb, scratch):
    """``y[N] = act(a[K] @ widen(w[K, N]) (+ bias[N]) (+ res[N]))``: one row (M == 1).

    Flat C-contiguous arrays; the arguments are those of ``gemm_f16_blocks`` (``scratch``
    unused). Work items are column panels of ``cb`` columns; each weight row of a panel is
    widened as it is read and added, times ``a[k]``, into ``y``'s panel (which stays in L1)."""
    ncb = (N + cb - 1) // cb
    for t in prange(nt):
        for it in range(t * ncb // nt, (t + 1) * ncb // nt):
            n0 = it * cb
            w_ = min(N, n0 + cb) - n0
            yr = y[n0:n0 + w_]
            for j in range(w_):
                yr[j] = 0.0
            for k in range(K):
                hrow = w[k * N + n0:k * N + n0 + w_]
                av = a[k]
                for j in range(w_):
                    yr[j] += av * h2f(hrow[j])
            _finish(y, n0, w_, n0, bias, has_bias, res, has_res, code, pa, pb)


@njit(cache=True, error_model="numpy", nogil=True, parallel=True, fastmath=FAST)
def gemm_f16_blocks(a, w, y, M, N, K, cb, nt, bias, has_bias, res, has_res, code, pa, pb,
                    scratch):
    """As ``gemv_f16`` for any M: each column panel ``w[:, n0:n0+cb]`` is widened into
    ``scratch[t]`` (K * cb floats) and multiplied by BLAS (one thread per call)."""
    ncb = (N + cb - 1) // cb
    for t in prange(nt):
        buf_f = scratch[t]
        for it in range(t * ncb // nt, (t + 1) * ncb // nt):
            n0 = it * cb
            w_ = min(N, n0 + cb) - n0
            for k in range(K):
                widen(w[k * N + n0:k * N + n0 + w_], buf_f[k * w_:])
            sgemm(False, False, M, w_, K, 1.0, a, 0, K, buf_f, 0, w_, 0.0, y, n0, N)
            for m in range(M):
                _finish(y, m * N + n0, w_, n0, bias, has_bias, res, has_res, code, pa, pb)


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST, inline="always")
def _finish(y, o, w_, n0, bias, has_bias, res, has_res, code, pa, pb):
    """Epilogue of one output row segment ``y[o:o+w_]`` (columns n0..n0+w_); ``bias`` has N
    values (zeros when the node has none)."""
    if has_bias or has_res or code != 0:
        rows_inplace(y, o, 1, w_, bias[n0:n0 + w_], res, has_res, code, pa, pb)
