"""``sgemm`` callable from inside Numba kernels, bound to NumPy's own BLAS.

Why: the cpu backend runs every parallel loop on Numba's one thread pool and keeps BLAS at one
thread (DESIGN §4: OpenBLAS workers spinning next to Numba's starve both). A conv then splits its
output rows across Numba threads and each thread calls a single-threaded GEMM on its block and
runs the fused epilogue while the block is still in cache.

How: the address of NumPy's ``cblas_sgemm`` is found through threadpoolctl (the library NumPy
loaded), registered with LLVM under the fixed name ``sprat_cblas_sgemm`` and declared to Numba
as an external function with 64-bit integer arguments. Because the name and signature never
change, kernels compiled with ``cache=True`` stay valid. A 32-bit-integer BLAS (MKL LP64, a
system OpenBLAS) is reached through a small ``cfunc`` adapter; with no usable BLAS a slow
Numba GEMM is registered instead and a warning is logged.
"""

from __future__ import annotations

import logging

import llvmlite.binding as llvm
import numpy as np
from numba import cfunc, types

from ._jit import njit

log = logging.getLogger(__name__)

SYMBOL = "sprat_cblas_sgemm"
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112

_i32, _i64, _f32 = types.int32, types.int64, types.float32
_pf32 = types.CPointer(types.float32)
# cblas_sgemm(order, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
_SIG64 = types.void(_i32, _i32, _i32, _i64, _i64, _i64, _f32, _pf32, _i64, _pf32, _i64, _f32,
                    _pf32, _i64)
_SIG32 = types.void(_i32, _i32, _i32, _i32, _i32, _i32, _f32, _pf32, _i32, _pf32, _i32, _f32,
                    _pf32, _i32)
_cblas_sgemm = types.ExternalFunction(SYMBOL, _SIG64)

KIND = "none"  # which BLAS got bound: "ilp64", "lp64" or "numba" (slow fallback)
_keep = []  # keeps cfuncs alive


def _find_blas():
    """(address, is_ilp64, path) of NumPy's cblas_sgemm, or None (``blas.find_sgemm``)."""
    from .blas import find_sgemm

    return find_sgemm()


def _lp64_adapter(address):
    llvm.add_symbol("sprat_cblas_sgemm_lp64", address)
    inner = types.ExternalFunction("sprat_cblas_sgemm_lp64", _SIG32)

    @cfunc(_SIG64, nopython=True)
    def adapter(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        inner(order, ta, tb, np.int32(m), np.int32(n), np.int32(k), alpha, a, np.int32(lda),
              b, np.int32(ldb), beta, c, np.int32(ldc))

    return adapter


def _numba_fallback():
    from numba import carray

    @cfunc(_SIG64, nopython=True)
    def slow_sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        # row-major only (that is all sprat calls)
        A = carray(a, (m if ta == NO_TRANS else k) * lda)
        B = carray(b, (k if tb == NO_TRANS else n) * ldb)
        C = carray(c, m * ldc)
        for i in range(m):
            for j in range(n):
                C[i * ldc + j] = 0.0 if beta == 0.0 else beta * C[i * ldc + j]
            for p in range(k):
                av = alpha * (A[i * lda + p] if ta == NO_TRANS else A[p * lda + i])
                if tb == NO_TRANS:
                    for j in range(n):
                        C[i * ldc + j] += av * B[p * ldb + j]
                else:
                    for j in range(n):
                        C[i * ldc + j] += av * B[j * ldb + p]

    return slow_sgemm


def _bind():
    global KIND
    found = _find_blas()
    if found is not None and found[1]:
        llvm.add_symbol(SYMBOL, found[0])
        KIND = "ilp64"
        return
    if found is not None:
        adapter = _lp64_adapter(found[0])
        KIND = "lp64"
    else:
        adapter = _numba_fallback()
        KIND = "numba"
        log.warning("sprat cpu backend: no cblas_sgemm found in NumPy's BLAS; "
                    "using a slow Numba GEMM")
    _keep.append(adapter)
    llvm.add_symbol(SYMBOL, adapter.address)


_bind()


# NOTE: OpenBLAS packs B on every sgemm call; with 1-3 rows of A that packing is the whole cost
# (measured: 1 x 256 @ 256 x 258 took 20 us in OpenBLAS, 6 us as a Numba loop; 3 rows 30 vs
# 15 us; from 4 rows BLAS is faster). Such products (convs with a few output pixels, GEMV-like
# heads, SE blocks) run the loops below.
SMALL_M = 3
SMALL_MIN_N = 8


@njit(cache=True, error_model="numpy", nogil=True, fastmath=True)
def _small_nn(m, n, k, alpha, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc):
    """C = alpha * A @ B + beta * C for a few rows of A: each row of B is read once and
    added into the (L1-resident) rows of C."""
    al = np.float32(alpha)
    be = np.float32(beta)
    for i in range(m):
        cr = c[c_off + i * ldc:c_off + i * ldc + n]
        if beta == 0.0:
            for j in range(n):
                cr[j] = 0.0
        elif beta != 1.0:
            for j in range(n):
                cr[j] *= be
    for p in range(k):
        br = b[b_off + p * ldb:b_off + p * ldb + n]
        for i in range(m):
            av = al * a[a_off + i * lda + p]
            cr = c[c_off + i * ldc:c_off + i * ldc + n]
            for j in range(n):
                cr[j] += av * br[j]


@njit(cache=True, error_model="numpy", nogil=True, fastmath=True)
def _small_nt(m, n, k, alpha, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc):
    """C = alpha * A @ B^T + beta * C (B stored n x k) for a few rows: one dot product per
    element."""
    al = np.float32(alpha)
    be = np.float32(beta)
    for i in range(m):
        ar = a[a_off + i * lda:a_off + i * lda + k]
        cr = c[c_off + i * ldc:c_off + i * ldc + n]
        for j in range(n):
            br = b[b_off + j * ldb:b_off + j * ldb + k]
            acc = np.float32(0.0)
            for q in range(k):
                acc += ar[q] * br[q]
            cr[j] = al * acc if beta == 0.0 else al * acc + be * cr[j]


@njit(cache=True, error_model="numpy", nogil=True)
def sgemm(ta, tb, m, n, k, alpha, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc):
    """Row-major ``C = alpha * op(A) @ op(B) + beta * C`` on flat float32 arrays with offsets.

    ``a``, ``b``, ``c`` are 1-D C-contiguous float32 arrays (flat views of the operands); the
    matrices start at the given element offsets with leading dimensions ``lda``/``ldb``/``ldc``
    (row strides in elements). ``ta``/``tb`` True means the stored matrix is the transpose
    (A stored k x m, B stored n x k). With ``beta == 0`` C is not read. No bounds are checked:
    callers size the operands at prepare time. Runs on the calling thread (BLAS held to one).
    Products of at most ``SMALL_M`` rows of A (not transposed) run Numba loops instead.
    """
    if m <= 0 or n <= 0:
        return
    if k <= 0:
        cc = c[c_off:]
        for i in range(m):
            for j in range(n):
                cc[i * ldc + j] = 0.0 if beta == 0.0 else beta * cc[i * ldc + j]
        return
    if not ta and m <= SMALL_M and n >= SMALL_MIN_N:
        if tb:
            _small_nt(m, n, k, alpha, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc)
        else:
            _small_nn(m, n, k, alpha, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc)
        return
    _cblas_sgemm(ROW_MAJOR, TRANS if ta else NO_TRANS, TRANS if tb else NO_TRANS,
                 m, n, k, np.float32(alpha), a[a_off:].ctypes, lda, b[b_off:].ctypes, ldb,
                 np.float32(beta), c[c_off:].ctypes, ldc)
