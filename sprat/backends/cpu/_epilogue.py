"""Fused epilogues: ``y = act(y + bias + residual)`` over blocks that are still in cache."""

from __future__ import annotations

import numpy as np

from ._jit import njit
from ._math import FAST, act_inplace

# NOTE: inner loops index slices with the bare loop variable: an index like ``o + c`` may be
# negative as far as Numba knows, so each access gets a wraparound select and the loop no
# longer vectorises (measured 5x on the depthwise conv).


# NOTE: rows as short as a conv's 8 output channels cost more in per-row slicing and
# activation dispatch than in arithmetic: the epilogues take the bias tiled ``g`` times
# (``tiled_bias``) and treat ``g`` rows as one contiguous run.
EPILOGUE_RUN = 1024  # floats per run of rows (bias tiled to about this length)


def tiled_bias(bias: np.ndarray) -> np.ndarray:
    """``bias`` (length m) repeated ``max(1, EPILOGUE_RUN // m)`` times, for the epilogues."""
    m = max(1, bias.size)
    return np.ascontiguousarray(np.tile(bias, max(1, EPILOGUE_RUN // m)), np.float32)


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def residual_act(y, res, has_res, code, a, b):
    """In place on the slice ``y``: ``y += res`` (a slice of the same length) when
    ``has_res``, then activation ``code`` (``act_inplace``)."""
    if has_res:
        for k in range(y.size):
            y[k] += res[k]
    if code != 0:
        act_inplace(y, code, a, b)


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def rows_inplace(y, y0, nrows, m, bias, res, has_res, code, a, b):
    """In place on the rows ``y[y0 : y0 + nrows*m]`` (flat, row length ``m``): add the bias,
    add ``res`` at the same flat positions when ``has_res``, then apply activation ``code``.
    ``bias`` is the row bias repeated ``g >= 1`` times (``tiled_bias``); ``g`` rows are one
    run, touched once while in L1."""
    g = max(1, bias.size // m)
    for r0 in range(0, nrows, g):
        n = min(g, nrows - r0) * m
        o = y0 + r0 * m
        run = y[o:o + n]
        if has_res:
            rr = res[o:o + n]
            for k in range(n):
                run[k] += bias[k] + rr[k]
        else:
            for k in range(n):
                run[k] += bias[k]
        if code != 0:
            act_inplace(run, code, a, b)


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def gather_rows(acc, a0, lda, y, y0, nrows, ncols, m, bias, res, has_res, code, a, b):
    """``y`` rows of ``ncols * m`` from ``acc`` rows of pitch ``lda`` (skips padding columns):
    ``y[y0 + (r*ncols + j)*m + c] = act(acc[a0 + r*lda + j*m + c] + bias[c] (+ res))``;
    ``bias`` tiled ``g >= 1`` times as for ``rows_inplace`` (``g`` columns per run)."""
    ln = ncols * m
    g = max(1, bias.size // m)
    for r in range(nrows):
        o = y0 + r * ln
        s = a0 + r * lda
        for j0 in range(0, ncols, g):
            n = min(g, ncols - j0) * m
            d = y[o + j0 * m:o + j0 * m + n]
            v = acc[s + j0 * m:s + j0 * m + n]
            if has_res:
                rr = res[o + j0 * m:o + j0 * m + n]
                for k in range(n):
                    d[k] = v[k] + bias[k] + rr[k]
            else:
                for k in range(n):
                    d[k] = v[k] + bias[k]
        if code != 0:
            act_inplace(y[o:o + ln], code, a, b)


def empty_f32() -> np.ndarray:
    """A zero-length float32 array: the placeholder for an absent residual."""
    return np.zeros(0, np.float32)
