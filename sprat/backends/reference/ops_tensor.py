"""Reference kernels: tensor-manipulation ops. Source: ONNX operator spec, newest opset of each op.

Parameters that come from input contents (slice bounds, pads, target shapes, ...) are turned into
concrete values by the same helpers the shape functions use (``sprat.ir.shapes.tensor``).
Negative indices count from the end of their axis wherever the spec allows them.
"""

from __future__ import annotations

import numpy as np

from ...dtypes import to_numpy
from ...ir.shapes.elementwise import broadcast_shapes
from ...ir.shapes.reduce import norm_axis
from ...ir.shapes.tensor import (
    ints,
    pad_widths,
    range_length,
    reshape_target,
    slice_plan,
    split_sizes,
    squeeze_axes,
    unsqueeze_shape,
)


def _c(x):
    """A C-contiguous copy (np.ascontiguousarray would turn a 0-d array into 1-d)."""
    return np.array(x, order="C", copy=True)


def _wrap_indices(indices, dims):
    """Indices made non-negative (``i + dim`` for ``i < 0``); IndexError when out of range."""
    idx = np.asarray(indices).astype(np.int64)
    dims = np.asarray(dims, dtype=np.int64)
    if idx.size and (np.any(idx < -dims) or np.any(idx >= dims)):
        bad = idx[(idx < -dims) | (idx >= dims)].ravel()[0]
        raise IndexError(f"index {int(bad)} is out of bounds for a dim of size(s) {dims.tolist()}")
    return np.where(idx < 0, idx + dims, idx)


def _element_key(data, indices, axis):
    """Index tuple addressing ``data`` at ``indices`` along ``axis`` (Gather/ScatterElements)."""
    a = norm_axis(axis, data.ndim)
    idx = _wrap_indices(indices, data.shape[a])
    grid = np.indices(idx.shape, sparse=True)
    return tuple(idx if d == a else grid[d] for d in range(data.ndim))


_SCATTER_REDUCE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter(out, key, updates, reduction):
    if reduction == "none":
        out[key] = updates
    elif reduction in _SCATTER_REDUCE:
        _SCATTER_REDUCE[reduction].at(out, key, updates)
    else:
        raise ValueError(f"scatter reduction must be none/add/mul/max/min, got {reduction!r}")
    return out


# ---- concat, split, slice --------------------------------------------------------------------
def Concat(*inputs, axis):
    return np.concatenate(inputs, axis=norm_axis(axis, inputs[0].ndim))


def Split(input, split=None, axis=0, num_outputs=None):
    """Split-18: chunks from the ``split`` input, or ``num_outputs`` chunks (last smaller)."""
    a = norm_axis(axis, input.ndim)
    sizes = split_sizes(input.shape[a], split, num_outputs)
    bounds = np.cumsum([0] + sizes)
    sl = [slice(None)] * input.ndim
    outs = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        sl[a] = slice(int(lo), int(hi))
        outs.append(_c(input[tuple(sl)]))
    return tuple(outs)


def Slice(data, starts, ends, axes=None, steps=None):
    return _c(data[slice_plan(data.shape, starts, ends, axes, steps)])


# ---- gathers and scatters --------------------------------------------------------------------
def Gather(data, indices, axis=0):
    a = norm_axis(axis, data.ndim)
    return np.take(data, _wrap_indices(indices, data.shape[a]), axis=a)


def GatherElements(data, indices, axis=0):
    return data[_element_key(data, indices, axis)]


def _nd_key(data_shape, indices, batch_dims):
    """(batch index, per-dim indices) for GatherND/ScatterND over ``B x M`` index tuples."""
    k = indices.shape[-1]
    batch = int(np.prod(data_shape[:batch_dims], dtype=np.int64))
    per_batch = int(np.prod(indices.shape[batch_dims:-1], dtype=np.int64))
    idx = indices.reshape(batch, per_batch, k)
    idx = _wrap_indices(idx, data_shape[batch_dims:batch_dims + k])
    b = np.broadcast_to(np.arange(batch)[:, None], idx.shape[:2])
    return (b,) + tuple(idx[..., j] for j in range(k)), batch


def GatherND(data, indices, batch_dims=0):
    """GatherND-13: slices of ``data`` addressed by the last dim of ``indices``."""
    k = indices.shape[-1]
    key, batch = _nd_key(data.shape, indices, batch_dims)
    flat = data.reshape((batch,) + data.shape[batch_dims:])
    out = flat[key]
    return out.reshape(indices.shape[:-1] + data.shape[batch_dims + k:])


def ScatterND(data, indices, updates, reduction="none"):
    """ScatterND-18: a copy of ``data`` with slices replaced (or reduced) by ``updates``."""
    k = indices.shape[-1]
    out = np.array(data, copy=True)
    if k == 0:
        # NOTE: an empty index tuple addresses the whole tensor; updates apply in order.
        for u in updates.reshape((-1,) + data.shape):
            out = u.copy() if reduction == "none" else _SCATTER_REDUCE[reduction](out, u)
        return out
    key, _ = _nd_key(data.shape, indices, 0)
    key = key[1:]  # no batch dims: drop the (all-zero) batch index
    upd = updates.reshape(key[0].shape + data.shape[k:]).astype(data.dtype, copy=False)
    return _scatter(out, key, upd, reduction)


def ScatterElements(data, indices, updates, axis=0, reduction="none"):
    """ScatterElements-18: ``out[..., indices[i], ...] (op)= updates[i]`` along ``axis``."""
    out = np.array(data, copy=True)
    return _scatter(out, _element_key(data, indices, axis), updates, reduction)


# ---- reshapes --------------------------------------------------------------------------------
def Reshape(data, shape, allowzero=0):
    return np.reshape(data, reshape_target(data.shape, shape, allowzero)).copy()


def Transpose(data, perm=None):
    return _c(np.transpose(data, None if perm is None else list(perm)))


def Squeeze(data, axes=None):
    drop = squeeze_axes(data.shape, axes)
    return np.array(np.squeeze(data, axis=tuple(drop)), copy=True)


def Unsqueeze(data, axes):
    return np.reshape(data, unsqueeze_shape(data.shape, axes)).copy()


def Flatten(input, axis=1):
    a = axis + input.ndim if axis < 0 else axis
    lead = int(np.prod(input.shape[:a], dtype=np.int64))
    return np.reshape(input, (lead, -1) if lead else (0, int(np.prod(input.shape[a:])))).copy()


def Expand(input, shape):
    out = broadcast_shapes(input.shape, ints(shape))
    return np.broadcast_to(input, out).copy()


def Tile(input, repeats):
    return np.tile(input, ints(repeats))


# ---- generators ------------------------------------------------------------------------------
def Range(start, limit, delta):
    """Range-11: ``start + i * delta`` for ``i < max(ceil((limit - start) / delta), 0)``."""
    n = range_length(start, limit, delta)
    dt = np.asarray(start).dtype
    if dt.kind in "iu":
        return (np.asarray(start).item() + np.arange(n, dtype=np.int64) *
                np.asarray(delta).item()).astype(dt)
    return (np.asarray(start, np.float64) + np.arange(n) * np.asarray(delta, np.float64)).astype(dt)


def ConstantOfShape(input, value=None):
    value = np.zeros(1, np.float32) if value is None else np.asarray(value)
    return np.full(tuple(ints(input)), value.ravel()[0], dtype=value.dtype)


def EyeLike(input, dtype=None, k=0):
    dt = input.dtype if dtype is None else to_numpy(dtype)
    return np.eye(input.shape[0], input.shape[1], k=k, dtype=dt)


def Shape(data, start=0, end=None):
    """Shape-21: dims ``[start:end]`` (Python slice clamping is the spec's clamping)."""
    return np.array(data.shape[start:end], dtype=np.int64)


def Size(data):
    return np.array(data.size, dtype=np.int64)


# ---- padding, triangles, one-hot -------------------------------------------------------------
def Pad(data, pads, constant_value=None, axes=None, mode="constant"):
    """Pad-21. Negative pads crop; cropping is applied before padding."""
    widths = pad_widths(data.ndim, pads, axes)
    crop = tuple(slice(max(-b, 0), d - max(-e, 0)) for d, (b, e) in zip(data.shape, widths))
    x = data[crop]
    pos = [(max(b, 0), max(e, 0)) for b, e in widths]
    if mode == "constant":
        cv = 0
        if constant_value is not None and np.size(constant_value):
            cv = np.asarray(constant_value).ravel()[0]
        return np.pad(x, pos, mode="constant", constant_values=np.asarray(cv).astype(data.dtype))
    if mode not in ("reflect", "edge", "wrap"):
        raise ValueError(f"Pad mode {mode!r} is not constant/reflect/edge/wrap")
    return np.pad(x, pos, mode=mode)


def Trilu(input, k=None, upper=1):
    kk = 0 if k is None else int(np.asarray(k).ravel()[0])
    return np.triu(input, kk) if upper else np.tril(input, kk)


def OneHot(indices, depth, values, axis=-1):
    """OneHot-11: ``values[1]`` where the index matches (negative indices + depth), else
    ``values[0]``; out-of-range indices give an all-off row."""
    d = int(np.asarray(depth).ravel()[0])
    idx = np.asarray(indices).astype(np.int64)
    idx = np.where(idx < 0, idx + d, idx)
    a = norm_axis(axis, idx.ndim + 1, "OneHot axis")
    grid = np.arange(d).reshape((d,) + (1,) * (idx.ndim - a))
    hot = np.expand_dims(idx, a) == grid
    off, on = np.asarray(values).ravel()[:2]
    return np.where(hot, on, off).astype(values.dtype)


# ---- data-dependent --------------------------------------------------------------------------
def NonZero(X):
    x = np.asarray(X)
    x = x.reshape(1) if x.ndim == 0 else x  # NOTE: a scalar counts as shape (1,), like onnxruntime
    return np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)


def Compress(input, condition, axis=None):
    cond = np.asarray(condition).ravel().astype(bool)
    return np.compress(cond, input, axis=None if axis is None else norm_axis(axis, input.ndim))


def TopK(X, K, axis=-1, largest=1, sorted=1):
    """TopK-11: the k largest (or smallest) along ``axis``, ties broken by the lower index."""
    a = norm_axis(axis, X.ndim)
    k = int(np.asarray(K).ravel()[0])
    n = X.shape[a]
    if largest:
        # NOTE: a stable ascending sort of the flipped axis, read backwards, is descending with
        # the lower original index first among equals, for every dtype (no negation overflow).
        order = np.argsort(np.flip(X, a), axis=a, kind="stable")
        order = (n - 1) - np.flip(order, a)
    else:
        order = np.argsort(X, axis=a, kind="stable")
    idx = np.take(order, np.arange(k), axis=a).astype(np.int64)
    return np.take_along_axis(X, idx, axis=a), idx


def Unique(X, axis=None, sorted=1):
    """Unique-11: (Y, first-occurrence indices, inverse indices, counts); ``sorted=0`` keeps
    first-occurrence order."""
    a = None if axis is None else norm_axis(axis, X.ndim)
    data = X.ravel() if a is None else X
    y, first, inverse, counts = np.unique(data, return_index=True, return_inverse=True,
                                          return_counts=True, axis=a)
    inverse = inverse.ravel()
    if not sorted:
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        y = np.take(y, order, axis=0 if a is None else a)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    i64 = np.int64
    return y, first.astype(i64), inverse.astype(i64), counts.astype(i64)


OPS: dict = {fn.__name__: fn for fn in (
    Concat, Split, Slice, Gather, GatherElements, GatherND, ScatterND, ScatterElements,
    Reshape, Transpose, Squeeze, Unsqueeze, Flatten, Expand, Tile,
    Range, ConstantOfShape, EyeLike, Shape, Size, Pad, Trilu, OneHot,
    NonZero, Compress, TopK, Unique,
)}
