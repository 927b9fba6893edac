"""Fused epilogues: ``y = act(y + bias + residual)`` over blocks that are still in cache."""

from __future__ import annotations

# NOTE: inner loops index slices with the bare loop variable: an index like ``o + c`` may be
# negative as far as Numba knows, so each access gets a wraparound select and the loop no
# longer vectorises (measured 5x on the depthwise conv).
import numpy as np
from numba import njit

from ._math import FAST, act_inplace


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def rows_inplace(y, y0, nrows, m, bias, res, has_res, code, a, b):
    """In place on the rows ``y[y0 : y0 + nrows*m]`` (flat, row length ``m``):
    add ``bias`` (length m), add ``res`` at the same flat positions when ``has_res``, then apply
    activation ``code``. Works row by row so each row is touched once in L1."""
    for r in range(nrows):
        o = y0 + r * m
        row = y[o:o + m]
        if has_res:
            rr = res[o:o + m]
            for c in range(m):
                row[c] += bias[c] + rr[c]
        else:
            for c in range(m):
                row[c] += bias[c]
        if code != 0:
            act_inplace(row, code, a, b)


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def gather_rows(acc, a0, lda, y, y0, nrows, ncols, m, bias, res, has_res, code, a, b):
    """``y`` rows of ``ncols * m`` from ``acc`` rows of pitch ``lda`` (skips padding columns):
    ``y[y0 + (r*ncols + j)*m + c] = act(acc[a0 + r*lda + j*m + c] + bias[c] (+ res))``."""
    ln = ncols * m
    for r in range(nrows):
        o = y0 + r * ln
        s = a0 + r * lda
        row = y[o:o + ln]
        src = acc[s:s + ln]
        for j in range(ncols):
            d = row[j * m:(j + 1) * m]
            v = src[j * m:(j + 1) * m]
            if has_res:
                rr = res[o + j * m:o + (j + 1) * m]
                for c in range(m):
                    d[c] = v[c] + bias[c] + rr[c]
            else:
                for c in range(m):
                    d[c] = v[c] + bias[c]
        if code != 0:
            act_inplace(row, code, a, b)


def empty_f32() -> np.ndarray:
    """A zero-length float32 array: the placeholder for an absent residual."""
    return np.zeros(0, np.float32)
