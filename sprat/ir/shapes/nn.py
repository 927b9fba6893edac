"""Shape functions: neural-network ops (conv, pooling, normalisation, resize, softmax, GEMM).

Each function takes the inputs' ``TensorInfo`` (None when an optional input is absent) and the
node's attributes with the ONNX spec defaults, and returns ``[(shape, dtype), ...]`` for every
output the op can have (callers use as many as the node has). Source: the ONNX operator spec
(onnx/docs/Operators.md), newest opset form of each op.

The window arithmetic (``conv_geometry``, ``pool_geometry``, ``conv_transpose_geometry``,
``resize_geometry``) is public so the kernels compute exactly the same pads and sizes.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import ShapeError
from .datadep import DataDependentShape

_F32 = np.dtype(np.float32)
_I64 = np.dtype(np.int64)


# ---- window geometry -------------------------------------------------------------------------

def _spatial_attr(value, n: int, default: int, name: str) -> list[int]:
    if value is None or len(value) == 0:
        return [default] * n
    if len(value) != n:
        raise ShapeError(f"{name} has {len(value)} values, expected {n} (one per spatial dim)")
    return [int(v) for v in value]


def _pads_attr(pads, n: int) -> tuple[list[int], list[int]]:
    if pads is None or len(pads) == 0:
        return [0] * n, [0] * n
    if len(pads) != 2 * n:
        raise ShapeError(f"pads has {len(pads)} values, expected {2 * n}")
    return [int(p) for p in pads[:n]], [int(p) for p in pads[n:]]


def conv_geometry(in_spatial, kernel, strides=None, dilations=None, pads=None,
                  auto_pad="NOTSET"):
    """Output size and pads of a Conv over ``in_spatial`` (ONNX Conv, auto_pad as onnxruntime).

    Returns ``(out_spatial, pads_begin, pads_end, strides, dilations)`` as lists of int.
    SAME_UPPER/SAME_LOWER: ``out = ceil(in / stride)`` and the total pad
    ``max(0, (out - 1) * stride + (k - 1) * dilation + 1 - in)`` is split with the extra pixel at
    the end (UPPER) or the beginning (LOWER). VALID: no pad. Raises ShapeError for an empty output.
    """
    n = len(in_spatial)
    kernel = [int(k) for k in kernel]
    strides = _spatial_attr(strides, n, 1, "strides")
    dilations = _spatial_attr(dilations, n, 1, "dilations")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begin, end, out = [], [], []
        for i in range(n):
            o = -(-in_spatial[i] // strides[i])
            span = (kernel[i] - 1) * dilations[i] + 1
            total = max(0, (o - 1) * strides[i] + span - in_spatial[i])
            small = total // 2
            b = small if auto_pad == "SAME_UPPER" else total - small
            begin.append(b)
            end.append(total - b)
            out.append(o)
    elif auto_pad in ("VALID", "NOTSET", ""):
        if auto_pad == "VALID":
            begin, end = [0] * n, [0] * n
        else:
            begin, end = _pads_attr(pads, n)
        out = [(in_spatial[i] + begin[i] + end[i] - (kernel[i] - 1) * dilations[i] - 1)
               // strides[i] + 1 for i in range(n)]
    else:
        raise ShapeError(f"unknown auto_pad {auto_pad!r}; expected NOTSET, SAME_UPPER, "
                         "SAME_LOWER or VALID")
    if any(o <= 0 for o in out):
        raise ShapeError(f"output spatial shape {out} is empty for input {list(in_spatial)}, "
                         f"kernel {kernel}, pads {begin + end}")
    return out, begin, end, strides, dilations


def pool_geometry(in_spatial, kernel, strides=None, dilations=None, pads=None,
                  auto_pad="NOTSET", ceil_mode=0):
    """Output size and pads of a pooling window (ONNX MaxPool/AveragePool/LpPool).

    Returns ``(out_spatial, pads_begin, pads_end, strides, dilations)``. With ``ceil_mode`` the
    output size is rounded up, but the last window must start inside the input or the begin pad
    (ONNX spec, as onnxruntime and PyTorch). SAME_*: the pad total follows onnxruntime, computed
    from the undilated kernel ``(ceil(in / s) - 1) * s + k - in``, then the output from the pads.
    """
    n = len(in_spatial)
    kernel = [int(k) for k in kernel]
    strides = _spatial_attr(strides, n, 1, "strides")
    dilations = _spatial_attr(dilations, n, 1, "dilations")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for i in range(n):
            target = -(-in_spatial[i] // strides[i])
            total = max(0, (target - 1) * strides[i] + kernel[i] - in_spatial[i])
            b = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            begin.append(b)
            end.append(total - b)
    elif auto_pad == "VALID":
        begin, end = [0] * n, [0] * n
    elif auto_pad in ("NOTSET", ""):
        begin, end = _pads_attr(pads, n)
    else:
        raise ShapeError(f"unknown auto_pad {auto_pad!r}; expected NOTSET, SAME_UPPER, "
                         "SAME_LOWER or VALID")
    out = []
    for i in range(n):
        span = in_spatial[i] + begin[i] + end[i] - (kernel[i] - 1) * dilations[i] - 1
        if ceil_mode:
            o = -(-span // strides[i]) + 1
            if (o - 1) * strides[i] >= in_spatial[i] + begin[i]:
                o -= 1
        else:
            o = span // strides[i] + 1
        out.append(o)
    if any(o <= 0 for o in out):
        raise ShapeError(f"output spatial shape {out} is empty for input {list(in_spatial)}, "
                         f"kernel {kernel}, pads {begin + end}")
    return out, begin, end, strides, dilations


def conv_transpose_geometry(in_spatial, kernel, strides=None, dilations=None, pads=None,
                            auto_pad="NOTSET", output_padding=None, output_shape=None):
    """Output size and pads of a ConvTranspose (ONNX ConvTranspose, as onnxruntime computes them).

    The full (uncropped) output is ``(in - 1) * s + (k - 1) * d + 1 + output_padding``; ``pads``
    crop it. With ``output_shape`` (spatial dims, or the full shape whose last dims are taken) or
    SAME_* (``output_shape`` defaulting to ``in * s``) the total crop is
    ``full - output_shape``, split as the spec says: SAME_UPPER crops the odd pixel at the end,
    SAME_LOWER and NOTSET at the beginning (onnxruntime 1.31 agrees).
    Returns ``(out_spatial, pads_begin, pads_end, strides, dilations, output_padding)``.
    """
    n = len(in_spatial)
    kernel = [int(k) for k in kernel]
    strides = _spatial_attr(strides, n, 1, "strides")
    dilations = _spatial_attr(dilations, n, 1, "dilations")
    out_pad = _spatial_attr(output_padding, n, 0, "output_padding")
    full = [(in_spatial[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 + out_pad[i]
            for i in range(n)]
    target = None
    if output_shape is not None and len(output_shape) > 0:
        if len(output_shape) < n:
            raise ShapeError(f"output_shape {list(output_shape)} has fewer than {n} dims")
        target = [int(v) for v in output_shape[-n:]]
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = [in_spatial[i] * strides[i] for i in range(n)]
    if target is not None:
        begin, end = [], []
        for i in range(n):
            total = max(0, full[i] - target[i])
            b = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            begin.append(b)
            end.append(total - b)
        out = target
    else:
        if auto_pad == "VALID":
            begin, end = [0] * n, [0] * n
        elif auto_pad in ("NOTSET", ""):
            begin, end = _pads_attr(pads, n)
        else:
            raise ShapeError(f"unknown auto_pad {auto_pad!r}")
        out = [full[i] - begin[i] - end[i] for i in range(n)]
    if any(o <= 0 for o in out):
        raise ShapeError(f"output spatial shape {out} is empty for input {list(in_spatial)}")
    return out, begin, end, strides, dilations, out_pad


def _kernel_shape(kernel_shape, w_shape) -> list[int]:
    if kernel_shape is None or len(kernel_shape) == 0:
        return [int(d) for d in w_shape[2:]]
    return [int(k) for k in kernel_shape]


# ---- conv family -----------------------------------------------------------------------------

def conv(ins, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
         strides=None):
    """Conv: X (N, C, *S), W (M, C/group, *K), B (M,) -> Y (N, M, *S_out). ONNX Conv-11."""
    x, w = ins[0], ins[1]
    if len(x.shape) < 3 or len(w.shape) != len(x.shape):
        raise ShapeError(f"Conv needs X and W of equal rank >= 3, got X {x.shape}, W {w.shape}")
    if x.shape[1] != w.shape[1] * group:
        raise ShapeError(f"Conv: X has {x.shape[1]} channels, W expects {w.shape[1]} x group "
                         f"{group}")
    if w.shape[0] % group:
        raise ShapeError(f"Conv: {w.shape[0]} output channels not divisible by group {group}")
    if len(ins) > 2 and ins[2] is not None and tuple(ins[2].shape) != (w.shape[0],):
        raise ShapeError(f"Conv: bias shape {ins[2].shape}, expected ({w.shape[0]},)")
    k = _kernel_shape(kernel_shape, w.shape)
    out, *_ = conv_geometry(x.shape[2:], k, strides, dilations, pads, auto_pad)
    return [((x.shape[0], w.shape[0], *out), x.dtype)]


def conv_transpose(ins, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                   output_padding=None, output_shape=None, pads=None, strides=None):
    """ConvTranspose-11: X (N, C, *S), W (C, M/group, *K) -> Y (N, M, *S_out)."""
    x, w = ins[0], ins[1]
    if len(x.shape) < 3 or len(w.shape) != len(x.shape):
        raise ShapeError(f"ConvTranspose needs X and W of equal rank >= 3, got X {x.shape}, "
                         f"W {w.shape}")
    if x.shape[1] != w.shape[0]:
        raise ShapeError(f"ConvTranspose: X has {x.shape[1]} channels, W has {w.shape[0]}")
    if x.shape[1] % group:
        raise ShapeError(f"ConvTranspose: {x.shape[1]} channels not divisible by group {group}")
    k = _kernel_shape(kernel_shape, w.shape)
    out, *_ = conv_transpose_geometry(x.shape[2:], k, strides, dilations, pads, auto_pad,
                                      output_padding, output_shape)
    return [((x.shape[0], w.shape[1] * group, *out), x.dtype)]


# ---- pooling ---------------------------------------------------------------------------------

def _pool_shape(x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode):
    if kernel_shape is None or len(kernel_shape) != len(x.shape) - 2:
        raise ShapeError(f"kernel_shape {kernel_shape} does not match input {x.shape}")
    out, *_ = pool_geometry(x.shape[2:], kernel_shape, strides, dilations, pads, auto_pad,
                            ceil_mode)
    return (x.shape[0], x.shape[1], *out)


def max_pool(ins, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=None, pads=None,
             storage_order=0, strides=None):
    """MaxPool-12: X (N, C, *S) -> Y (N, C, *S_out), Indices int64 of the same shape."""
    x = ins[0]
    s = _pool_shape(x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    return [(s, x.dtype), (s, _I64)]


def average_pool(ins, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None,
                 kernel_shape=None, pads=None, strides=None):
    """AveragePool-22: X (N, C, *S) -> Y (N, C, *S_out)."""
    x = ins[0]
    return [(_pool_shape(x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode),
             x.dtype)]


def lp_pool(ins, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=None, p=2,
            pads=None, strides=None):
    """LpPool-22: X (N, C, *S) -> Y (N, C, *S_out)."""
    x = ins[0]
    return [(_pool_shape(x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode),
             x.dtype)]


def global_pool(ins):
    """GlobalAveragePool / GlobalMaxPool / GlobalLpPool: (N, C, *S) -> (N, C, 1, ..., 1)."""
    x = ins[0]
    if len(x.shape) < 2:
        raise ShapeError(f"global pooling needs rank >= 2, got {x.shape}")
    return [((x.shape[0], x.shape[1]) + (1,) * (len(x.shape) - 2), x.dtype)]


def global_lp_pool(ins, p=2):
    return global_pool(ins)


# ---- normalisation ---------------------------------------------------------------------------

def batch_normalization(ins, epsilon=1e-5, momentum=0.9, training_mode=0):
    """BatchNormalization-15 (inference): X (N, C, ...) -> Y like X."""
    x = ins[0]
    if len(x.shape) < 2:
        raise ShapeError(f"BatchNormalization needs rank >= 2, got {x.shape}")
    c = x.shape[1]
    for name, t in zip(("scale", "B", "mean", "var"), ins[1:5]):
        if t is not None and tuple(t.shape) != (c,):
            raise ShapeError(f"BatchNormalization: {name} shape {t.shape}, expected ({c},)")
    if training_mode:
        return [(x.shape, x.dtype), ((c,), ins[3].dtype), ((c,), ins[4].dtype)]
    return [(x.shape, x.dtype)]


def instance_normalization(ins, epsilon=1e-5):
    """InstanceNormalization-6: X (N, C, *S) -> Y like X."""
    x = ins[0]
    if len(x.shape) < 3:
        raise ShapeError(f"InstanceNormalization needs rank >= 3, got {x.shape}")
    return [(x.shape, x.dtype)]


def layer_normalization(ins, axis=-1, epsilon=1e-5, stash_type=1):
    """LayerNormalization-17: Y like X; Mean, InvStdDev of shape X.shape[:axis] + (1,)*(r-axis)."""
    x = ins[0]
    r = len(x.shape)
    a = axis + r if axis < 0 else axis
    if not 0 <= a < r:
        raise ShapeError(f"axis {axis} out of range for rank {r}")
    stat = tuple(x.shape[:a]) + (1,) * (r - a)
    stat_dtype = _F32 if stash_type == 1 else x.dtype
    return [(x.shape, x.dtype), (stat, stat_dtype), (stat, stat_dtype)]


def lrn(ins, size=None, alpha=1e-4, beta=0.75, bias=1.0):
    """LRN-13: X (N, C, ...) -> Y like X."""
    return [(ins[0].shape, ins[0].dtype)]


# ---- softmax / GEMM --------------------------------------------------------------------------

def softmax(ins, axis=-1):
    """Softmax-13 / LogSoftmax-13: Y like X; ``axis`` must be in range."""
    r = len(ins[0].shape)
    if not -r <= axis < max(r, 1):
        raise ShapeError(f"axis {axis} out of range for rank {r}")
    return [(ins[0].shape, ins[0].dtype)]


def gemm(ins, alpha=1.0, beta=1.0, transA=0, transB=0):
    """Gemm-13: A (M, K) or (K, M), B (K, N) or (N, K), C broadcastable to (M, N) -> (M, N)."""
    a, b = ins[0], ins[1]
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise ShapeError(f"Gemm needs 2-D A and B, got {a.shape} and {b.shape}")
    m, ka = (a.shape[1], a.shape[0]) if transA else a.shape
    kb, n = (b.shape[1], b.shape[0]) if transB else b.shape
    if ka != kb:
        raise ShapeError(f"Gemm inner dims differ: A gives K={ka}, B gives K={kb}")
    c = ins[2] if len(ins) > 2 else None
    if c is not None:
        cs = tuple(c.shape)
        if len(cs) > 2 or any(d not in (1, t) for d, t in zip(cs[::-1], (n, m))):
            raise ShapeError(f"Gemm: C of shape {cs} does not broadcast to ({m}, {n})")
    return [((m, n), a.dtype)]


def broadcast_shapes(*shapes) -> tuple[int, ...]:
    """Numpy (multidirectional) broadcast of shapes; raises ShapeError when they do not fit."""
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise ShapeError(f"shapes {[tuple(s) for s in shapes]} do not broadcast") from None


def matmul(ins):
    """MatMul-13 (numpy.matmul semantics, 1-D operands promoted and the added dim removed)."""
    a, b = tuple(ins[0].shape), tuple(ins[1].shape)
    if len(a) == 0 or len(b) == 0:
        raise ShapeError("MatMul operands must have rank >= 1")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise ShapeError(f"MatMul inner dims differ: {a} @ {b}")
    batch = broadcast_shapes(a2[:-2], b2[:-2])
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return [(out, ins[0].dtype)]


def dropout(ins, seed=None):
    """Dropout-13 (inference): Y like data, mask bool like data."""
    x = ins[0]
    return [(x.shape, x.dtype), (x.shape, np.dtype(np.bool_))]


# ---- resize ----------------------------------------------------------------------------------

def _const(info, what: str):
    if info is None:
        return None
    if info.value is None:
        raise DataDependentShape(f"{what} must be known before running (a constant) to infer "
                                 "the shape")
    return np.asarray(info.value)


def resize_geometry(in_shape, scales=None, sizes=None, axes=None,
                    keep_aspect_ratio_policy="stretch"):
    """Output shape and per-axis scale of a Resize (ONNX Resize-19, onnxruntime arithmetic).

    ``scales``/``sizes`` are arrays over ``axes`` (all axes when None); an empty array counts as
    absent. From scales: ``out = floor(in * scale)`` in float32. From sizes: ``scale = out / in``;
    with keep_aspect_ratio_policy not_larger / not_smaller one scale (min / max over ``axes``) is
    used and ``out = round_half_up(in * scale)``. Returns ``(out_shape, scales)`` over all axes.
    Raises ShapeError when neither or both are given or lengths do not match.
    """
    r = len(in_shape)
    if scales is not None and np.asarray(scales).size == 0:
        scales = None
    if sizes is not None and np.asarray(sizes).size == 0:
        sizes = None
    if (scales is None) == (sizes is None):
        raise ShapeError("Resize needs exactly one of scales and sizes")
    axes = list(range(r)) if axes is None or len(axes) == 0 else [a + r if a < 0 else a
                                                                   for a in axes]
    out = [int(d) for d in in_shape]
    sc = [1.0] * r
    if scales is not None:
        scales = np.asarray(scales, dtype=np.float32).ravel()
        if scales.size != len(axes):
            raise ShapeError(f"scales has {scales.size} values for {len(axes)} axes")
        for a, s in zip(axes, scales):
            if s <= 0:
                raise ShapeError(f"scale {s} must be positive")
            sc[a] = float(s)
            # NOTE: float32 product, truncated, as onnxruntime (scale * dim in float).
            out[a] = int(np.float32(s) * np.float32(in_shape[a]))
        return out, sc
    sizes = np.asarray(sizes).ravel().astype(np.int64)
    if sizes.size != len(axes):
        raise ShapeError(f"sizes has {sizes.size} values for {len(axes)} axes")
    if keep_aspect_ratio_policy == "stretch":
        for a, s in zip(axes, sizes):
            out[a] = int(s)
            sc[a] = float(np.float32(s) / np.float32(in_shape[a]))
        return out, sc
    ratios = [np.float32(s) / np.float32(in_shape[a]) for a, s in zip(axes, sizes)]
    if keep_aspect_ratio_policy == "not_larger":
        scale = min(ratios)
    elif keep_aspect_ratio_policy == "not_smaller":
        scale = max(ratios)
    else:
        raise ShapeError(f"unknown keep_aspect_ratio_policy {keep_aspect_ratio_policy!r}")
    for a in axes:
        sc[a] = float(scale)
        out[a] = math.floor(float(np.float32(scale) * np.float32(in_shape[a])) + 0.5)
    return out, sc


def resize(ins, antialias=0, axes=None, coordinate_transformation_mode="half_pixel",
           cubic_coeff_a=-0.75, exclude_outside=0, extrapolation_value=0.0,
           keep_aspect_ratio_policy="stretch", mode="nearest", nearest_mode="round_prefer_floor"):
    """Resize-19: X, roi?, scales?, sizes? -> Y; needs scales/sizes as constants."""
    x = ins[0]
    scales = _const(ins[2], "Resize scales") if len(ins) > 2 else None
    sizes = _const(ins[3], "Resize sizes") if len(ins) > 3 else None
    out, _ = resize_geometry(x.shape, scales, sizes, axes, keep_aspect_ratio_policy)
    return [(tuple(out), x.dtype)]


def upsample(ins, mode="nearest"):
    """Upsample-9 (deprecated): X, scales -> Y, ``out = floor(in * scale)``."""
    x = ins[0]
    out, _ = resize_geometry(x.shape, _const(ins[1], "Upsample scales"))
    return [(tuple(out), x.dtype)]


# ---- depth / space ---------------------------------------------------------------------------

def depth_to_space(ins, blocksize=None, mode="DCR"):
    """DepthToSpace-13: (N, C, H, W) -> (N, C / b^2, H * b, W * b)."""
    n, c, h, w = ins[0].shape
    b = int(blocksize)
    if c % (b * b):
        raise ShapeError(f"DepthToSpace: {c} channels not divisible by blocksize^2 = {b * b}")
    return [((n, c // (b * b), h * b, w * b), ins[0].dtype)]


def space_to_depth(ins, blocksize=None, mode="DCR"):
    """SpaceToDepth-28: (N, C, H, W) -> (N, C * b^2, H / b, W / b); ``mode`` DCR or CRD."""
    if mode not in ("DCR", "CRD"):
        raise ShapeError(f"SpaceToDepth mode must be 'DCR' or 'CRD', got {mode!r}")
    n, c, h, w = ins[0].shape
    b = int(blocksize)
    if h % b or w % b:
        raise ShapeError(f"SpaceToDepth: H={h}, W={w} not divisible by blocksize {b}")
    return [((n, c * b * b, h // b, w // b), ins[0].dtype)]


def non_max_suppression(ins, center_point_box=0):
    """NonMaxSuppression-11(boxes (B, N, 4), scores (B, C, N), ...): int64 (num_selected, 3) —
    the count is data-dependent."""
    boxes, scores = ins[0], ins[1]
    if len(boxes.shape) != 3 or boxes.shape[2] != 4:
        raise ShapeError(f"NonMaxSuppression boxes must be (batches, boxes, 4), got {boxes.shape}")
    if len(scores.shape) != 3 or scores.shape[0] != boxes.shape[0] \
            or scores.shape[2] != boxes.shape[1]:
        raise ShapeError(f"NonMaxSuppression scores {scores.shape} do not match boxes "
                         f"{boxes.shape}: expected (batches, classes, boxes)")
    if center_point_box not in (0, 1):
        raise ShapeError(f"center_point_box must be 0 or 1, got {center_point_box}")
    raise DataDependentShape("NonMaxSuppression: the number of selected boxes is only known "
                             "while running")


SHAPES = {
    "NonMaxSuppression": non_max_suppression,
    "Conv": conv,
    "ConvTranspose": conv_transpose,
    "MaxPool": max_pool,
    "AveragePool": average_pool,
    "LpPool": lp_pool,
    "GlobalAveragePool": global_pool,
    "GlobalMaxPool": global_pool,
    "GlobalLpPool": global_lp_pool,
    "BatchNormalization": batch_normalization,
    "InstanceNormalization": instance_normalization,
    "LayerNormalization": layer_normalization,
    "LRN": lrn,
    "Softmax": softmax,
    "LogSoftmax": softmax,
    "Gemm": gemm,
    "MatMul": matmul,
    "Dropout": dropout,
    "Resize": resize,
    "Upsample": upsample,
    "DepthToSpace": depth_to_space,
    "SpaceToDepth": space_to_depth,
}
