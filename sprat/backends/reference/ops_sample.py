"""Reference kernels: sampling and small normalisation ops.

GridSample-22 (N-D; linear / nearest / cubic; zeros / border / reflection padding), AffineGrid-20,
Hardmax-13, Swish-24, LpNormalization-22, ReverseSequence-10, CenterCropPad-18, Col2Im-18,
CumProd-26, BitCast-26. Vectorised NumPy: GridSample
computes each output point's source coordinate per spatial dim, then sums ``2**r`` (linear),
``4**r`` (cubic) or 1 (nearest) gathered taps times their weights. Source: the ONNX operator
spec sections of those names and onnx's reference outputs (the conformance data).
"""

from __future__ import annotations

import itertools

import numpy as np

_CUBIC_A = -0.75


def _reflect(x, lo, hi):
    """``x`` reflected at the borders ``lo`` / ``hi`` (repeatedly) until inside [lo, hi]."""
    span = hi - lo
    if span <= 0:
        return np.full_like(x, lo)
    below = x < lo
    d = np.where(below, lo - x, x - hi)
    n = np.floor(d / span)
    r = d - n * span
    even = (n % 2) == 0
    lo_side = np.where(below, even, ~even)        # reflected value is measured from lo
    out = np.where(lo_side, lo + r, hi - r)
    return np.where((x < lo) | (x > hi), out, x).astype(x.dtype, copy=False)


def _cubic_weights(t):
    """Keys cubic (A = -0.75) weights of the 4 taps at offsets -1, 0, 1, 2 for fraction ``t``."""
    a = _CUBIC_A

    def far(d):                       # |d| in [1, 2)
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    def near(d):                      # |d| in [0, 1)
        return ((a + 2) * d - (a + 3)) * d * d + 1

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def grid_sample(X, grid, align_corners=0, mode="linear", padding_mode="zeros"):
    """GridSample-22.

    Args:
        X: (N, C, D1..Dr) float input.
        grid: (N, H1..Hr, r) normalised sample positions in [-1, 1]; ``grid[..., 0]`` indexes
            the last spatial dim Dr (x), ``grid[..., 1]`` Dr-1 (y), and so on.
        align_corners: 1: -1/1 are the centres of the corner pixels; 0: their outer edges.
        mode: "linear" ("bilinear"), "nearest" (round half to even) or "cubic" ("bicubic").
        padding_mode: "zeros" (outside taps are 0), "border" (clamped) or "reflection".

    Returns:
        (N, C, H1..Hr) in X's dtype.
    """
    n_batch, chans = X.shape[:2]
    dims = X.shape[2:]
    r = len(dims)
    out_sp = grid.shape[1:-1]
    if X.size == 0 or grid.size == 0:
        return np.zeros((n_batch, chans) + tuple(out_sp), dtype=X.dtype)
    ft = grid.dtype if grid.dtype.itemsize >= 4 else np.dtype(np.float32)
    g = grid.astype(ft, copy=False)
    coords = []                                   # per spatial dim k: (N, *out) float
    bounds = []
    for k, size in enumerate(dims):
        v = g[..., r - 1 - k]
        if align_corners:
            c = (v + 1) / 2 * (size - 1)
            lo, hi = 0.0, float(size - 1)
        else:
            c = ((v + 1) * size - 1) / 2
            lo, hi = -0.5, size - 0.5
        c = c.astype(ft, copy=False)
        if padding_mode == "border":
            # NOTE: only positions outside [lo, hi] are clamped (as onnxruntime does); that
            # matters for cubic, whose taps reach beyond the clamped range.
            outside = (c < lo) | (c > hi)
            c = np.where(outside, np.clip(c, 0, size - 1), c).astype(ft, copy=False)
        elif padding_mode == "reflection":
            c = _reflect(c, ft.type(lo), ft.type(hi))
        coords.append(c)
        bounds.append((lo, hi))

    def fetch_index(idx, k):
        """Integer tap positions along dim k -> (index into X, in-range mask)."""
        size = dims[k]
        valid = (idx >= 0) & (idx < size)
        if padding_mode == "reflection":
            lo, hi = bounds[k]
            idx = np.trunc(_reflect(idx.astype(np.float64), lo, hi)).astype(np.int64)
        return np.clip(idx, 0, size - 1), valid

    xt = np.moveaxis(X, 1, -1)                    # (N, D1..Dr, C)
    nidx = np.arange(n_batch).reshape((n_batch,) + (1,) * len(out_sp))
    acc_t = np.float64 if X.dtype == np.float64 else np.float32

    if mode == "nearest":
        taps = [[(np.rint(c).astype(np.int64), None)] for c in coords]
    else:
        taps = []
        for c in coords:
            base = np.floor(c)
            t = (c - base).astype(acc_t)
            base = base.astype(np.int64)
            if mode in ("linear", "bilinear"):
                taps.append([(base, 1 - t), (base + 1, t)])
            else:
                w = _cubic_weights(t)
                taps.append([(base + o, w[o + 1]) for o in (-1, 0, 1, 2)])
    fetched = [[fetch_index(i, k) + (w,) for i, w in taps[k]] for k in range(r)]

    out = np.zeros(tuple(nidx.shape[:1]) + tuple(out_sp) + (chans,), dtype=acc_t)
    for combo in itertools.product(*fetched):
        idx = tuple(p[0] for p in combo)
        vals = xt[(nidx,) + idx].astype(acc_t, copy=False)        # (N, *out, C)
        weight = None
        if padding_mode == "zeros":
            mask = combo[0][1]
            for p in combo[1:]:
                mask = mask & p[1]
            weight = mask.astype(acc_t)
        for p in combo:
            if p[2] is not None:
                weight = p[2] if weight is None else weight * p[2]
        out += vals if weight is None else vals * weight[..., None]
    return np.moveaxis(out, -1, 1).astype(X.dtype)


def affine_grid(theta, size, align_corners=0):
    """AffineGrid-20: theta (N, 2, 3) / (N, 3, 4), size [N, C, H, W] / [N, C, D, H, W] ->
    grid (N, H, W, 2) / (N, D, H, W, 3) with ``grid[n, ..., :] = theta[n] @ (x, y[, z], 1)``,
    where x runs along W, y along H, z along D over [-1, 1] (pixel centres unless
    ``align_corners``, then corner centres).
    """
    size = [int(s) for s in np.asarray(size).ravel()]
    sp = size[2:]
    r = len(sp)
    axes = []
    for s in sp:
        if align_corners:
            a = np.linspace(-1.0, 1.0, s) if s > 1 else np.full(s, -1.0)
        else:
            a = (np.arange(s) * 2.0 + 1.0) / s - 1.0
        axes.append(a)
    mesh = np.meshgrid(*axes, indexing="ij")                   # each (*sp), dims D, H, W
    base = np.stack(list(mesh[::-1]) + [np.ones(sp)], axis=-1)       # (*sp, r + 1): x, y[, z], 1
    base = base.reshape(-1, r + 1)
    th = theta.astype(np.float64)
    grid = np.einsum("pk,njk->npj", base, th)                  # (N, prod(sp), r)
    return grid.reshape([size[0]] + sp + [r]).astype(theta.dtype)


def hardmax(x, axis=-1):
    """Hardmax-13: 1 at the first maximum along ``axis``, 0 elsewhere (input's shape/dtype)."""
    axis = axis % x.ndim
    out = np.zeros_like(x)
    if x.size == 0:
        return out
    arg = np.expand_dims(np.argmax(x, axis=axis), axis)
    np.put_along_axis(out, arg, 1, axis=axis)
    return out


def swish(x, alpha=1.0):
    """Swish-24: ``x * sigmoid(alpha * x)`` (input's dtype; float16 computed in float32)."""
    xf = x.astype(np.float32) if x.dtype.itemsize < 4 else x
    with np.errstate(over="ignore"):
        y = xf / (1 + np.exp(-np.asarray(alpha, xf.dtype) * xf))
    return y.astype(x.dtype)


def lp_normalization(x, axis=-1, p=2):
    """LpNormalization-22: ``x / ||x||_p`` along ``axis`` (p 1 or 2); 0 where the norm is 0."""
    xf = x.astype(np.float32) if x.dtype.itemsize < 4 else x
    if p == 1:
        norm = np.abs(xf).sum(axis=axis, keepdims=True)
    elif p == 2:
        norm = np.sqrt((xf * xf).sum(axis=axis, keepdims=True))
    else:
        raise ValueError(f"LpNormalization p must be 1 or 2, got {p}")
    with np.errstate(invalid="ignore", divide="ignore"):
        y = np.where(norm == 0, 0, xf / norm)
    return y.astype(x.dtype)


def reverse_sequence(x, sequence_lens, batch_axis=1, time_axis=0):
    """ReverseSequence-10: for each batch entry b, reverse its first ``sequence_lens[b]`` time
    steps; the rest is copied. Raises ValueError for a length outside [0, time steps].
    """
    lens = np.asarray(sequence_lens).astype(np.int64)
    steps = x.shape[time_axis]
    if ((lens < 0) | (lens > steps)).any():
        raise ValueError(f"ReverseSequence sequence_lens {lens.tolist()} outside [0, {steps}]")
    t = np.arange(steps)
    # src[t, b] for time-major; transposed for batch-major
    src = np.where(t[:, None] < lens[None, :], lens[None, :] - 1 - t[:, None], t[:, None])
    if time_axis == 1:
        src = src.T
    src = src.reshape(src.shape + (1,) * (x.ndim - 2))
    return np.take_along_axis(x, src, axis=time_axis)


def center_crop_pad(input_data, shape, axes=None):
    """CenterCropPad-18: each of ``axes`` (all when None) cropped or zero-padded to ``shape``
    around the centre; an odd surplus puts the extra element / pad at the end.
    """
    rank = input_data.ndim
    axes = list(range(rank)) if axes is None else [a % rank for a in axes]
    target = [int(v) for v in np.asarray(shape).ravel()]
    out_shape = list(input_data.shape)
    src = [slice(None)] * rank
    dst = [slice(None)] * rank
    for a, want in zip(axes, target):
        have = input_data.shape[a]
        out_shape[a] = want
        if want < have:
            start = (have - want) // 2
            src[a] = slice(start, start + want)
        elif want > have:
            start = (want - have) // 2
            dst[a] = slice(start, start + have)
    out = np.zeros(out_shape, dtype=input_data.dtype)
    out[tuple(dst)] = input_data[tuple(src)]
    return out


def col2im(input, image_shape, block_shape, dilations=None, pads=None, strides=None):
    """Col2Im-18: input (N, C * prod(block_shape), L) -> image (N, C, *image_shape).

    Each column block is added back at its sliding-window position (overlaps sum), as
    ``torch.nn.functional.fold`` does; positions in the padding are dropped.
    """
    img = [int(v) for v in np.asarray(image_shape).ravel()]
    blk = [int(v) for v in np.asarray(block_shape).ravel()]
    r = len(img)
    dil = [1] * r if dilations is None else list(dilations)
    pad = [0] * (2 * r) if pads is None else list(pads)
    std = [1] * r if strides is None else list(strides)
    padded = [img[d] + pad[d] + pad[d + r] for d in range(r)]
    counts = [(padded[d] - dil[d] * (blk[d] - 1) - 1) // std[d] + 1 for d in range(r)]
    n_batch = input.shape[0]
    k_total = int(np.prod(blk))
    chans = input.shape[1] // k_total
    cols = input.reshape([n_batch, chans, k_total] + counts)
    acc_t = np.float32 if input.dtype.itemsize < 4 else input.dtype
    out = np.zeros([n_batch, chans] + padded, dtype=acc_t)
    for k, offs in enumerate(itertools.product(*[range(b) for b in blk])):
        sl = tuple(slice(o * dil[d], o * dil[d] + std[d] * (counts[d] - 1) + 1, std[d])
                   for d, o in enumerate(offs))
        out[(slice(None), slice(None)) + sl] += cols[:, :, k]
    crop = tuple(slice(pad[d], pad[d] + img[d]) for d in range(r))
    return out[(slice(None), slice(None)) + crop].astype(input.dtype)


def cum_prod(x, axis, exclusive=0, reverse=0):
    """CumProd-26: cumulative product of ``x`` along the scalar ``axis`` (input's shape/dtype);
    ``exclusive`` starts from 1 instead of the element itself, ``reverse`` runs backwards.
    """
    ax = int(np.asarray(axis).ravel()[0]) % x.ndim
    y = np.flip(x, ax) if reverse else x
    if exclusive:
        ones = np.ones_like(np.take(y, [0], axis=ax))
        head = np.take(y, np.arange(y.shape[ax] - 1), axis=ax)
        y = np.concatenate([ones, head], axis=ax)
    y = np.cumprod(y, axis=ax, dtype=x.dtype)
    return np.asarray(np.flip(y, ax) if reverse else y, order="C")


def bit_cast(x, to):
    """BitCast-26: the bytes of ``x`` reinterpreted as dtype code ``to`` (same bit width)."""
    from ...dtypes import to_numpy
    return np.asarray(x, order="C").view(to_numpy(to))


OPS = {
    "GridSample": grid_sample,
    "AffineGrid": affine_grid,
    "Hardmax": hardmax,
    "Swish": swish,
    "LpNormalization": lp_normalization,
    "ReverseSequence": reverse_sequence,
    "CenterCropPad": center_crop_pad,
    "Col2Im": col2im,
    "CumProd": cum_prod,
    "BitCast": bit_cast,
}
