"""Reference kernels: neural-network ops (conv, pooling, normalisation, resize, softmax, GEMM).

Plain vectorised NumPy, written for clarity first: convolutions are im2col (a strided window
view) + ``np.matmul``; transposed convolutions are ``matmul`` + col2im as one accumulating slice
per kernel tap; pooling reduces a strided window view; Resize applies one 1-D interpolation per
resized axis. Every function follows the ONNX operator spec (newest opset form) and takes the
spec attributes as keyword arguments with the spec defaults. Window sizes and pads come from the
same functions the shape inference uses (``sprat.ir.shapes.nn``), so both always agree.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided, sliding_window_view

from ...ir.shapes.nn import (
    conv_geometry,
    conv_transpose_geometry,
    pool_geometry,
    resize_geometry,
)

# ---- helpers ---------------------------------------------------------------------------------

def _pad_spatial(x: np.ndarray, begin, end, value) -> np.ndarray:
    """Pad (or, for negative amounts, crop) the trailing ``len(begin)`` axes of ``x``."""
    nd = len(begin)
    lead = x.ndim - nd
    crop = tuple([slice(None)] * lead + [slice(max(0, -b), x.shape[lead + i] - max(0, -e))
                                         for i, (b, e) in enumerate(zip(begin, end))])
    x = x[crop]
    widths = [(0, 0)] * lead + [(max(0, b), max(0, e)) for b, e in zip(begin, end)]
    if any(w != (0, 0) for w in widths):
        x = np.pad(x, widths, constant_values=value)
    return x


def _windows(xp: np.ndarray, out, kernel, strides, dilations) -> np.ndarray:
    """Read-only view (N, C, *out, *kernel) of the windows of a padded (N, C, *S) array."""
    nd = len(out)
    sp_strides = xp.strides[2:]
    shape = xp.shape[:2] + tuple(out) + tuple(kernel)
    strides_ = (xp.strides[:2] + tuple(sp_strides[i] * strides[i] for i in range(nd))
                + tuple(sp_strides[i] * dilations[i] for i in range(nd)))
    return as_strided(xp, shape, strides_, writeable=False)


def _spatial_bias(b: np.ndarray, nd: int) -> np.ndarray:
    return b.reshape((1, -1) + (1,) * nd)


# ---- conv family -----------------------------------------------------------------------------

def conv(X, W, B=None, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
         strides=None):
    """Conv-11. X (N, C, *S), W (M, C/group, *K), optional B (M,) -> Y (N, M, *S_out).

    im2col: a strided view of the padded input, copied to (N, G, C/G * K, P) and multiplied by the
    weights as (G, M/G, C/G * K). Any spatial rank (1-D, 2-D, 3-D, ...).
    """
    n, c = X.shape[:2]
    m = W.shape[0]
    k = tuple(W.shape[2:])
    nd = len(k)
    out, pb, _, st, dl = conv_geometry(X.shape[2:], k, strides, dilations, pads, auto_pad)
    need = [(out[i] - 1) * st[i] + (k[i] - 1) * dl[i] + 1 for i in range(nd)]
    xp = _pad_spatial(X, pb, [need[i] - X.shape[2 + i] - pb[i] for i in range(nd)], 0)
    win = _windows(xp, out, k, st, dl)                          # (N, C, *out, *K)
    g = group
    cg, mg = c // g, m // g
    kk, pp = math.prod(k), math.prod(out)
    win = win.reshape((n, g, cg) + tuple(out) + k)
    perm = (0, 1, 2) + tuple(range(3 + nd, 3 + 2 * nd)) + tuple(range(3, 3 + nd))
    cols = win.transpose(perm).reshape(n, g, cg * kk, pp)       # copy: (N, G, C/G * K, P)
    y = np.matmul(W.reshape(1, g, mg, cg * kk), cols)           # (N, G, M/G, P)
    y = y.reshape((n, m) + tuple(out))
    if B is not None:
        y = y + _spatial_bias(B, nd)
    return y.astype(X.dtype, copy=False)


def conv_transpose(X, W, B=None, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                   output_padding=None, output_shape=None, pads=None, strides=None):
    """ConvTranspose-11. X (N, C, *S), W (C, M/group, *K), optional B (M,) -> Y (N, M, *S_out).

    Columns ``W^T @ X`` (N, G, M/G * K, P) are scattered into the uncropped output with one
    strided accumulating slice per kernel tap (col2im), then the pads are cropped.
    """
    n, c = X.shape[:2]
    in_sp = tuple(X.shape[2:])
    k = tuple(W.shape[2:])
    nd = len(k)
    g = group
    cg, mg = c // g, W.shape[1]
    m = mg * g
    out, pb, _, st, dl, _ = conv_transpose_geometry(in_sp, k, strides, dilations, pads, auto_pad,
                                                     output_padding, output_shape)
    kk, pp = math.prod(k), math.prod(in_sp)
    w = W.reshape(g, cg, mg * kk).transpose(0, 2, 1)            # (G, M/G * K, C/G)
    cols = np.matmul(w[None], X.reshape(n, g, cg, pp))          # (N, G, M/G * K, P)
    cols = cols.reshape((n, m) + k + in_sp)
    # NOTE: the buffer spans the pads plus the output, which can exceed the taps' extent when
    # output_shape asks for more than the full size (the extra cells stay zero).
    size = [max(pb[i] + out[i], (in_sp[i] - 1) * st[i] + (k[i] - 1) * dl[i] + 1) for i in range(nd)]
    buf = np.zeros((n, m) + tuple(size), dtype=np.result_type(X.dtype, W.dtype))
    for tap in np.ndindex(*k):
        dst = tuple(slice(tap[i] * dl[i], tap[i] * dl[i] + (in_sp[i] - 1) * st[i] + 1, st[i])
                    for i in range(nd))
        buf[(slice(None), slice(None)) + dst] += cols[(slice(None), slice(None)) + tap]
    y = buf[(slice(None), slice(None)) + tuple(slice(pb[i], pb[i] + out[i]) for i in range(nd))]
    if B is not None:
        y = y + _spatial_bias(B, nd)
    return np.ascontiguousarray(y, dtype=X.dtype)


# ---- pooling ---------------------------------------------------------------------------------

def _pool_setup(X, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode):
    out, pb, pe, st, dl = pool_geometry(X.shape[2:], kernel_shape, strides, dilations, pads,
                                        auto_pad, ceil_mode)
    k = [int(v) for v in kernel_shape]
    need = [(out[i] - 1) * st[i] + (k[i] - 1) * dl[i] + 1 for i in range(len(k))]
    return out, k, pb, pe, st, dl, need


def _lowest(dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return -np.inf
    return np.iinfo(dtype).min


def max_pool(X, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=None, pads=None,
             storage_order=0, strides=None):
    """MaxPool-12. X (N, C, *S) -> (Y like X's dtype, Indices int64), both (N, C, *S_out).

    Indices are flat positions in X (batch and channel included): row-major over the spatial dims
    with ``storage_order=0``, column-major with ``storage_order=1``. Ties pick the first element
    in window order (as onnxruntime).
    """
    n, c = X.shape[:2]
    sp = X.shape[2:]
    nd = len(sp)
    out, k, pb, _, st, dl, need = _pool_setup(X, kernel_shape, strides, dilations, pads,
                                              auto_pad, ceil_mode)
    xp = _pad_spatial(X, pb, [need[i] - sp[i] - pb[i] for i in range(nd)], _lowest(X.dtype))
    win = _windows(xp, out, k, st, dl).reshape((n, c) + tuple(out) + (-1,))
    arg = np.argmax(win, axis=-1)
    y = np.take_along_axis(win, arg[..., None], axis=-1)[..., 0]
    taps = np.unravel_index(arg, k)
    grids = np.meshgrid(*[np.arange(o) for o in out], indexing="ij")
    coords = [grids[i] * st[i] + taps[i] * dl[i] - pb[i] for i in range(nd)]
    order = range(nd) if storage_order == 0 else range(nd - 1, -1, -1)
    flat = np.zeros(arg.shape, dtype=np.int64)
    for i in order:
        flat = flat * sp[i] + coords[i]
    base = (np.arange(n * c, dtype=np.int64) * math.prod(sp)).reshape((n, c) + (1,) * nd)
    return y, flat + base


def average_pool(X, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None,
                 kernel_shape=None, pads=None, strides=None):
    """AveragePool-22. X (N, C, *S) -> Y (N, C, *S_out).

    The divisor counts the window's taps inside X, plus (``count_include_pad=1``) those in the
    explicit or SAME pads; taps in the extra ceil_mode overhang are never counted.
    """
    sp = X.shape[2:]
    nd = len(sp)
    out, k, pb, pe, st, dl, need = _pool_setup(X, kernel_shape, strides, dilations, pads,
                                               auto_pad, ceil_mode)
    end = [need[i] - sp[i] - pb[i] for i in range(nd)]
    xp = _pad_spatial(X, pb, end, 0)
    axes = tuple(range(-nd, 0))
    total = _windows(xp, out, k, st, dl).sum(axis=axes, dtype=np.float64)
    if count_include_pad:
        padded = tuple(sp[i] + pb[i] + pe[i] for i in range(nd))
        ones = _pad_spatial(np.ones((1, 1) + padded), [0] * nd,
                            [need[i] - padded[i] for i in range(nd)], 0)
    else:
        ones = _pad_spatial(np.ones((1, 1) + tuple(sp)), pb, end, 0)
    count = _windows(ones, out, k, st, dl).sum(axis=axes)
    return (total / count).astype(X.dtype)


def lp_pool(X, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=None, p=2, pads=None,
            strides=None):
    """LpPool-22. X (N, C, *S) -> Y = (sum over window of |x|^p)^(1/p); pads contribute 0."""
    sp = X.shape[2:]
    nd = len(sp)
    out, k, pb, _, st, dl, need = _pool_setup(X, kernel_shape, strides, dilations, pads,
                                              auto_pad, ceil_mode)
    xp = _pad_spatial(np.abs(X.astype(np.float64)) ** p, pb,
                      [need[i] - sp[i] - pb[i] for i in range(nd)], 0)
    s = _windows(xp, out, k, st, dl).sum(axis=tuple(range(-nd, 0)))
    return (s ** (1.0 / p)).astype(X.dtype)


def global_average_pool(X):
    """GlobalAveragePool-1: mean over all spatial dims, kept as size-1 dims."""
    return X.mean(axis=tuple(range(2, X.ndim)), keepdims=True, dtype=np.float64).astype(X.dtype)


def global_max_pool(X):
    """GlobalMaxPool-1: max over all spatial dims, kept as size-1 dims."""
    return X.max(axis=tuple(range(2, X.ndim)), keepdims=True)


def global_lp_pool(X, p=2):
    """GlobalLpPool-2: (sum |x|^p)^(1/p) over all spatial dims, kept as size-1 dims."""
    s = (np.abs(X.astype(np.float64)) ** p).sum(axis=tuple(range(2, X.ndim)), keepdims=True)
    return (s ** (1.0 / p)).astype(X.dtype)


# ---- normalisation ---------------------------------------------------------------------------

def batch_normalization(X, scale, B, input_mean, input_var, epsilon=1e-5, momentum=0.9,
                        training_mode=0):
    """BatchNormalization-15, inference form: Y = (X - mean) / sqrt(var + eps) * scale + B.

    Statistics are per channel (axis 1). ``training_mode=1`` is not supported (inference engine).
    """
    if training_mode:
        raise NotImplementedError("BatchNormalization training_mode=1 is not supported")
    shape = (1, -1) + (1,) * (X.ndim - 2)
    inv = scale.astype(np.float64) / np.sqrt(input_var.astype(np.float64) + epsilon)
    y = (X - input_mean.reshape(shape)) * inv.reshape(shape) + B.reshape(shape)
    return y.astype(X.dtype)


def instance_normalization(input, scale, B, epsilon=1e-5):
    """InstanceNormalization-6: per (n, c) over the spatial dims, biased variance."""
    axes = tuple(range(2, input.ndim))
    x = input.astype(np.float64)
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    shape = (1, -1) + (1,) * (input.ndim - 2)
    y = (x - mean) / np.sqrt(var + epsilon) * scale.reshape(shape) + B.reshape(shape)
    return y.astype(input.dtype)


def layer_normalization(X, Scale, B=None, axis=-1, epsilon=1e-5, stash_type=1):
    """LayerNormalization-17: normalise over dims ``axis..``; returns (Y, Mean, InvStdDev).

    Mean and InvStdDev have X's shape with the normalised dims set to 1, in float32 when
    ``stash_type=1``. Scale and B broadcast against the normalised dims.
    """
    a = axis % X.ndim
    axes = tuple(range(a, X.ndim))
    x = X.astype(np.float64)
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(var + epsilon)
    y = (x - mean) * inv * Scale
    if B is not None:
        y = y + B
    stat = np.float32 if stash_type == 1 else X.dtype
    return y.astype(X.dtype), mean.astype(stat), inv.astype(stat)


def lrn(X, alpha=1e-4, beta=0.75, bias=1.0, size=None):
    """LRN-13: across channels, Y = X / (bias + alpha / size * sum_window(X^2)) ^ beta.

    The window for channel c is [c - floor((size-1)/2), c + ceil((size-1)/2)], clipped to C.
    """
    size = int(size)
    lo = (size - 1) // 2
    hi = size - 1 - lo
    sq = X.astype(np.float64) ** 2
    widths = [(0, 0), (lo, hi)] + [(0, 0)] * (X.ndim - 2)
    sq = np.pad(sq, widths)
    s = sliding_window_view(sq, size, axis=1).sum(axis=-1)
    return (X / (bias + alpha / size * s) ** beta).astype(X.dtype)


# ---- softmax / GEMM --------------------------------------------------------------------------

def softmax(input, axis=-1):
    """Softmax-13: exp(x - max) / sum(exp(x - max)) along ``axis``."""
    e = np.exp(input - input.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(input.dtype, copy=False)


def log_softmax(input, axis=-1):
    """LogSoftmax-13: (x - max) - log(sum(exp(x - max))) along ``axis``."""
    z = input - input.max(axis=axis, keepdims=True)
    return (z - np.log(np.exp(z).sum(axis=axis, keepdims=True))).astype(input.dtype, copy=False)


def gemm(A, B, C=None, alpha=1.0, beta=1.0, transA=0, transB=0):
    """Gemm-13: Y = alpha * A' @ B' + beta * C, C broadcast to (M, N)."""
    a = A.T if transA else A
    b = B.T if transB else B
    y = np.matmul(a, b)
    if alpha != 1.0:
        y = y * np.asarray(alpha, dtype=y.dtype)
    if C is not None and beta != 0.0:
        y = y + (C if beta == 1.0 else C * np.asarray(beta, dtype=C.dtype))
    return y.astype(A.dtype, copy=False)


def matmul(A, B):
    """MatMul-13: numpy.matmul (batched, broadcast, 1-D operands promoted then squeezed)."""
    return np.matmul(A, B)


def dropout(data, ratio=None, training_mode=None, seed=None):
    """Dropout-13, inference: (a copy of data, an all-True mask). Training mode is refused."""
    if training_mode is not None and bool(np.asarray(training_mode)):
        raise NotImplementedError("Dropout with training_mode=True is not supported")
    return data.copy(), np.ones(data.shape, dtype=np.bool_)


# ---- resize ----------------------------------------------------------------------------------

def source_coords(mode, n_in, n_out, scale, roi_start=0.0, roi_end=1.0):
    """Source coordinate of each output index along one axis (float32, as onnxruntime)."""
    f = np.float32
    o = np.arange(n_out, dtype=f)
    s = f(scale)
    if mode == "half_pixel":
        return (o + f(0.5)) / s - f(0.5)
    if mode == "half_pixel_symmetric":
        adjustment = f(n_out) / (s * f(n_in))
        offset = f(n_in) / f(2) * (f(1) - adjustment)
        return offset + (o + f(0.5)) / s - f(0.5)
    if mode == "pytorch_half_pixel":
        if n_out <= 1:
            return np.zeros(n_out, dtype=f)
        return (o + f(0.5)) / s - f(0.5)
    if mode == "align_corners":
        if n_out == 1:
            return np.zeros(n_out, dtype=f)
        return o * f(n_in - 1) / f(n_out - 1)
    if mode == "asymmetric":
        return o / s
    if mode == "tf_crop_and_resize":
        a, b = f(roi_start), f(roi_end)
        if n_out == 1:
            return np.full(n_out, f(0.5) * (a + b) * f(n_in - 1), dtype=f)
        return a * f(n_in - 1) + o * (b - a) * f(n_in - 1) / f(n_out - 1)
    raise ValueError(f"unknown coordinate_transformation_mode {mode!r}")


def nearest_index(xo, nearest_mode):
    if nearest_mode == "round_prefer_floor":
        return np.ceil(xo - 0.5)
    if nearest_mode == "round_prefer_ceil":
        return np.floor(xo + 0.5)
    if nearest_mode == "floor":
        return np.floor(xo)
    if nearest_mode == "ceil":
        return np.ceil(xo)
    raise ValueError(f"unknown nearest_mode {nearest_mode!r}")


def _cubic_weights(t, a):
    """Keys cubic weights of the 4 taps at offsets -1, 0, 1, 2 for fractional position t."""
    def near(d):  # |d| <= 1
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):  # 1 < |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    return np.stack([far(1 + t), near(t), near(1 - t), far(2 - t)], axis=-1)


def _interp_matrix(xo, n_in, mode, cubic_coeff_a, exclude_outside):
    """(n_out, n_in) float64 interpolation matrix for linear or cubic, edge-clamped taps."""
    n_out = xo.shape[0]
    xo = xo.astype(np.float64)
    if mode == "linear":
        xc = np.clip(xo, 0, n_in - 1)
        i0 = np.floor(xc).astype(np.int64)
        t = xc - i0
        idx = np.stack([i0, i0 + 1], axis=-1)
        w = np.stack([1 - t, t], axis=-1)
    elif mode == "cubic":
        i0 = np.floor(xo).astype(np.int64)
        t = xo - i0
        idx = i0[:, None] + np.arange(-1, 3)[None, :]
        w = _cubic_weights(t, cubic_coeff_a)
        if exclude_outside:
            w = np.where((idx < 0) | (idx >= n_in), 0.0, w)
            w = w / w.sum(axis=-1, keepdims=True)
    else:
        raise ValueError(f"unknown Resize mode {mode!r}")
    mat = np.zeros((n_out, n_in))
    rows = np.repeat(np.arange(n_out), idx.shape[1])
    np.add.at(mat, (rows, np.clip(idx, 0, n_in - 1).ravel()), w.ravel())
    return mat


def _resize_axis(x, axis, n_out, scale, mode, ctm, nearest_mode, cubic_coeff_a, exclude_outside,
                 extrapolation_value, roi_start, roi_end):
    n_in = x.shape[axis]
    xo = source_coords(ctm, n_in, n_out, scale, roi_start, roi_end)
    if mode == "nearest":
        idx = np.clip(nearest_index(xo, nearest_mode), 0, n_in - 1).astype(np.intp)
        y = np.take(x, idx, axis=axis)
    else:
        mat = _interp_matrix(xo, n_in, mode, cubic_coeff_a, exclude_outside)
        y = np.moveaxis(np.tensordot(x, mat, axes=([axis], [1])), -1, axis)
    if ctm == "tf_crop_and_resize":
        outside = (xo < 0) | (xo > n_in - 1)
        if outside.any():
            shape = [1] * x.ndim
            shape[axis] = n_out
            y = np.where(outside.reshape(shape), extrapolation_value, y)
    return y


def resize(X, roi=None, scales=None, sizes=None, antialias=0, axes=None,
           coordinate_transformation_mode="half_pixel", cubic_coeff_a=-0.75, exclude_outside=0,
           extrapolation_value=0.0, keep_aspect_ratio_policy="stretch", mode="nearest",
           nearest_mode="round_prefer_floor"):
    """Resize-19 for modes nearest / linear / cubic and every coordinate_transformation_mode.

    Separable: one 1-D pass per resized axis (nearest: a gather; linear/cubic: a dense
    interpolation matrix with edge-clamped taps). ``roi`` is used by tf_crop_and_resize only
    (starts then ends, over ``axes``). ``antialias=1`` is not supported.
    """
    if antialias:
        raise NotImplementedError("Resize antialias=1 is not supported")
    r = X.ndim
    out, sc = resize_geometry(X.shape, scales, sizes, axes, keep_aspect_ratio_policy)
    ax = list(range(r)) if axes is None or len(axes) == 0 else [a % r for a in axes]
    starts, ends = [0.0] * r, [1.0] * r
    if coordinate_transformation_mode == "tf_crop_and_resize" and roi is not None and roi.size:
        roi = np.asarray(roi, dtype=np.float64).ravel()
        for i, a in enumerate(ax):
            starts[a], ends[a] = roi[i], roi[len(ax) + i]
    y = X if mode == "nearest" else X.astype(np.float64)
    for a in ax:
        identity = (out[a] == X.shape[a] and sc[a] == 1.0
                    and coordinate_transformation_mode != "tf_crop_and_resize")
        if identity:
            continue
        y = _resize_axis(y, a, out[a], sc[a], mode, coordinate_transformation_mode, nearest_mode,
                         cubic_coeff_a, exclude_outside, extrapolation_value, starts[a], ends[a])
    if X.dtype.kind in "iu" and mode != "nearest":
        info = np.iinfo(X.dtype)
        y = np.clip(np.rint(y), info.min, info.max)
    return np.ascontiguousarray(y, dtype=X.dtype)


def upsample(X, scales, mode="nearest"):
    """Upsample-9 (deprecated): Resize with asymmetric coordinates, ``out = floor(in * scale)``.

    The spec requires scales >= 1; nearest then takes the floor of the source coordinate
    (onnxruntime's "simple" rule, which would take the ceiling for a scale < 1). Mode
    ``linear`` (or the opset-7 spelling ``bilinear``) interpolates linearly.
    """
    scales = np.asarray(scales, dtype=np.float32).ravel()
    out, sc = resize_geometry(X.shape, scales)
    kind = "linear" if mode in ("linear", "bilinear") else "nearest"
    y = X if kind == "nearest" else X.astype(np.float64)
    for a in range(X.ndim):
        if out[a] == X.shape[a] and sc[a] == 1.0:
            continue
        rounding = "ceil" if sc[a] < 1.0 else "floor"
        y = _resize_axis(y, a, out[a], sc[a], kind, "asymmetric", rounding, -0.75, 0, 0.0,
                         0.0, 1.0)
    return np.ascontiguousarray(y, dtype=X.dtype)


# ---- depth / space ---------------------------------------------------------------------------

def depth_to_space(input, blocksize=None, mode="DCR"):
    """DepthToSpace-13: (N, C, H, W) -> (N, C/b^2, H*b, W*b); DCR (depth-column-row) or CRD."""
    n, c, h, w = input.shape
    b = int(blocksize)
    if mode == "DCR":
        t = input.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    elif mode == "CRD":
        t = input.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    else:
        raise ValueError(f"unknown DepthToSpace mode {mode!r}; expected DCR or CRD")
    return t.reshape(n, c // (b * b), h * b, w * b)


def space_to_depth(input, blocksize=None, mode="DCR"):
    """SpaceToDepth-28: (N, C, H, W) -> (N, C*b^2, H/b, W/b), the inverse of DepthToSpace in
    the same ``mode``: DCR (depth-column-row, the default) or CRD (column-row-depth)."""
    n, c, h, w = input.shape
    b = int(blocksize)
    t = input.reshape(n, c, h // b, b, w // b, b)
    if mode == "DCR":
        t = t.transpose(0, 3, 5, 1, 2, 4)
    elif mode == "CRD":
        t = t.transpose(0, 1, 3, 5, 2, 4)
    else:
        raise ValueError(f"unknown SpaceToDepth mode {mode!r}; expected DCR or CRD")
    return t.reshape(n, c * b * b, h // b, w // b)


def _corners(boxes, center_point_box):
    """(y1, x1, y2, x2) with y1 <= y2, x1 <= x2 of NonMaxSuppression boxes (N, 4)."""
    b = boxes.astype(np.float64)
    if center_point_box:
        xc, yc, w, h = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
        return yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2
    return (np.minimum(b[:, 0], b[:, 2]), np.minimum(b[:, 1], b[:, 3]),
            np.maximum(b[:, 0], b[:, 2]), np.maximum(b[:, 1], b[:, 3]))


def non_max_suppression(boxes, scores, max_output_boxes_per_class=None, iou_threshold=None,
                        score_threshold=None, center_point_box=0):
    """NonMaxSuppression-11: boxes (B, N, 4) as [y1, x1, y2, x2] (``center_point_box=0``, either
    corner order) or [x_center, y_center, width, height] (1); scores (B, C, N). Per batch and
    class: boxes with score > score_threshold (when given), by decreasing score (ties: lower
    index first), greedily kept unless their IoU with a kept box exceeds ``iou_threshold``,
    at most ``max_output_boxes_per_class`` (absent: 0). Returns int64 (num_selected, 3) rows
    [batch, class, box]."""
    limit = 0 if max_output_boxes_per_class is None or max_output_boxes_per_class.size == 0 \
        else max(int(max_output_boxes_per_class.reshape(-1)[0]), 0)
    iou_t = 0.0 if iou_threshold is None or iou_threshold.size == 0 \
        else float(iou_threshold.reshape(-1)[0])
    has_score_t = score_threshold is not None and score_threshold.size != 0
    score_t = float(score_threshold.reshape(-1)[0]) if has_score_t else 0.0
    rows = []
    for b in range(boxes.shape[0]):
        y1, x1, y2, x2 = _corners(boxes[b], center_point_box)
        area = (y2 - y1) * (x2 - x1)
        for c in range(scores.shape[1]):
            sc = scores[b, c]
            cand = np.arange(sc.shape[0])
            if has_score_t:
                cand = cand[sc[cand] > score_t]
            # NOTE: stable sort of -score: equal scores keep the lower box index first
            cand = cand[np.argsort(-sc[cand].astype(np.float64), kind="stable")]
            kept: list[int] = []
            for i in cand:
                if len(kept) >= limit:
                    break
                if kept:
                    k = np.array(kept)
                    ih = np.minimum(y2[i], y2[k]) - np.maximum(y1[i], y1[k])
                    iw = np.minimum(x2[i], x2[k]) - np.maximum(x1[i], x1[k])
                    inter = np.where((ih > 0) & (iw > 0), ih * iw, 0.0)
                    union = area[i] + area[k] - inter
                    valid = (inter > 0) & (area[i] > 0) & (area[k] > 0) & (union > 0)
                    iou = np.where(valid, inter / np.where(union > 0, union, 1.0), 0.0)
                    if np.any(iou > iou_t):
                        continue
                kept.append(int(i))
            rows += [(b, c, i) for i in kept]
    return np.array(rows, dtype=np.int64).reshape(-1, 3)


OPS = {
    "Conv": conv,
    "ConvTranspose": conv_transpose,
    "MaxPool": max_pool,
    "AveragePool": average_pool,
    "LpPool": lp_pool,
    "GlobalAveragePool": global_average_pool,
    "GlobalMaxPool": global_max_pool,
    "GlobalLpPool": global_lp_pool,
    "BatchNormalization": batch_normalization,
    "InstanceNormalization": instance_normalization,
    "LayerNormalization": layer_normalization,
    "LRN": lrn,
    "Softmax": softmax,
    "LogSoftmax": log_softmax,
    "Gemm": gemm,
    "MatMul": matmul,
    "Dropout": dropout,
    "Resize": resize,
    "Upsample": upsample,
    "DepthToSpace": depth_to_space,
    "SpaceToDepth": space_to_depth,
    "NonMaxSuppression": non_max_suppression,
}
