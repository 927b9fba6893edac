"""Reference kernels: reductions (Reduce*-18 form), ArgMax/ArgMin-13, CumSum-14.

Reductions keep the input dtype (sums of int32 stay int32, as onnxruntime does). A reduction
with ``noop_with_empty_axes`` and empty axes reduces over no axis: the elementwise part of the
reduction (square, abs, log, ...) still applies, as in onnx's reference implementation. A
reduction over an empty set gives the identity of the operation (0, 1, -inf for max, ...).
"""

from __future__ import annotations

import functools

import numpy as np

from ...ir.shapes.reduce import norm_axis, reduce_axes


def _axes(data, axes, noop_with_empty_axes):
    ax = reduce_axes(data.ndim, axes, noop_with_empty_axes)
    return () if ax is None else ax


def _lowest(dtype):
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _highest(dtype):
    return np.inf if dtype.kind == "f" else np.iinfo(dtype).max


def ReduceSum(data, axes=None, keepdims=1, noop_with_empty_axes=0):
    ax = _axes(data, axes, noop_with_empty_axes)
    return np.sum(data, axis=ax, keepdims=bool(keepdims), dtype=data.dtype)


def ReduceMean(data, axes=None, keepdims=1, noop_with_empty_axes=0):
    ax = _axes(data, axes, noop_with_empty_axes)
    s = np.sum(data, axis=ax, keepdims=bool(keepdims), dtype=data.dtype)
    n = int(np.prod([data.shape[a] for a in ax], dtype=np.int64))
    if data.dtype.kind in "iu":
        # NOTE: integer mean = integer division of the sum, truncated toward zero.
        return (np.trunc(s.astype(np.float64) / n) if n else s).astype(data.dtype)
    return (s / np.asarray(n, data.dtype)).astype(data.dtype, copy=False)


def ReduceMax(data, axes=None, keepdims=1, noop_with_empty_axes=0):
    ax = _axes(data, axes, noop_with_empty_axes)
    if data.dtype == np.bool_:
        return np.any(data, axis=ax, keepdims=bool(keepdims))
    return np.max(data, axis=ax, keepdims=bool(keepdims), initial=_lowest(data.dtype))


def ReduceMin(data, axes=None, keepdims=1, noop_with_empty_axes=0):
    ax = _axes(data, axes, noop_with_empty_axes)
    if data.dtype == np.bool_:
        return np.all(data, axis=ax, keepdims=bool(keepdims))
    return np.min(data, axis=ax, keepdims=bool(keepdims), initial=_highest(data.dtype))


def ReduceProd(data, axes=None, keepdims=1, noop_with_empty_axes=0):
    ax = _axes(data, axes, noop_with_empty_axes)
    return np.prod(data, axis=ax, keepdims=bool(keepdims), dtype=data.dtype)


def ReduceL1(data, axes=None, keepdims=1, noop_with_empty_axes=0):
    ax = _axes(data, axes, noop_with_empty_axes)
    return np.sum(np.abs(data), axis=ax, keepdims=bool(keepdims), dtype=data.dtype)


def ReduceL2(data, axes=None, keepdims=1, noop_with_empty_axes=0):
    ax = _axes(data, axes, noop_with_empty_axes)
    s = np.sum(np.square(data.astype(np.float64)), axis=ax, keepdims=bool(keepdims))
    return np.sqrt(s).astype(data.dtype)


def ReduceSumSquare(data, axes=None, keepdims=1, noop_with_empty_axes=0):
    ax = _axes(data, axes, noop_with_empty_axes)
    return np.sum(np.square(data), axis=ax, keepdims=bool(keepdims), dtype=data.dtype)


def ReduceLogSum(data, axes=None, keepdims=1, noop_with_empty_axes=0):
    ax = _axes(data, axes, noop_with_empty_axes)
    return np.log(np.sum(data, axis=ax, keepdims=bool(keepdims), dtype=data.dtype))


def ReduceLogSumExp(data, axes=None, keepdims=1, noop_with_empty_axes=0):
    ax = _axes(data, axes, noop_with_empty_axes)
    x = data.astype(np.float64)
    m = np.max(x, axis=ax, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0.0)
    s = np.log(np.sum(np.exp(x - m), axis=ax, keepdims=True)) + m
    if not keepdims:
        s = np.squeeze(s, axis=ax)
    return s.astype(data.dtype)


def _arg(data, axis, keepdims, select_last_index, fn):
    a = norm_axis(axis, data.ndim)
    if select_last_index:
        n = data.shape[a]
        idx = (n - 1) - fn(np.flip(data, axis=a), axis=a)
    else:
        idx = fn(data, axis=a)
    idx = idx.astype(np.int64)
    return np.expand_dims(idx, a) if keepdims else idx


def ArgMax(data, axis=0, keepdims=1, select_last_index=0):
    return _arg(data, axis, keepdims, select_last_index, np.argmax)


def ArgMin(data, axis=0, keepdims=1, select_last_index=0):
    return _arg(data, axis, keepdims, select_last_index, np.argmin)


def CumSum(x, axis, exclusive=0, reverse=0):
    """CumSum-14: running sum along ``axis`` (a scalar tensor), optionally exclusive/reversed."""
    a = norm_axis(int(np.asarray(axis).ravel()[0]), x.ndim)
    y = np.flip(x, a) if reverse else x
    out = np.cumsum(y, axis=a, dtype=x.dtype)
    if exclusive:
        dst = [slice(None)] * x.ndim
        src = [slice(None)] * x.ndim
        dst[a], src[a] = slice(1, None), slice(None, -1)
        shifted = np.zeros_like(out)
        shifted[tuple(dst)] = out[tuple(src)]
        out = shifted
    return np.array(np.flip(out, a) if reverse else out, order="C", copy=True)


def _quiet(fn):
    # NOTE: log(0) = -inf and overflow to inf are results, not events worth a warning.
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with np.errstate(all="ignore"):
            return np.asarray(fn(*args, **kwargs))

    return wrapper


OPS: dict = {fn.__name__: _quiet(fn) for fn in (
    ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2, ReduceSumSquare,
    ReduceLogSum, ReduceLogSumExp, ArgMax, ArgMin, CumSum,
)}
