"""Shape functions: sampling and small normalisation ops.

GridSample-22, AffineGrid-20, Hardmax-13, Swish-24, LpNormalization-22, ReverseSequence-10,
CenterCropPad-18, Col2Im-18, CumProd-26, BitCast-26.
Source: the ONNX operator spec sections of those names.
"""

from __future__ import annotations

import numpy as np

from ...dtypes import to_numpy
from ...errors import ShapeError
from .reduce import cumsum, norm_axis
from .tensor import ints, known

_GS_MODES = ("linear", "bilinear", "nearest", "cubic", "bicubic")
_GS_PADDING = ("zeros", "border", "reflection")


def grid_sample(ins, align_corners=0, mode="linear", padding_mode="zeros"):
    """GridSample-22: X (N, C, D1..Dr) float, grid (N, H1..Hr, r) float -> (N, C, H1..Hr), X's dtype.

    Raises ShapeError for rank < 3, a grid whose batch or last dim does not match X, cubic mode
    with r != 2, or an unknown mode / padding_mode.
    """
    x, grid = ins[0], ins[1]
    if mode not in _GS_MODES:
        raise ShapeError(f"GridSample mode must be one of {_GS_MODES}, got {mode!r}")
    if padding_mode not in _GS_PADDING:
        raise ShapeError(f"GridSample padding_mode must be one of {_GS_PADDING}, "
                         f"got {padding_mode!r}")
    r = len(x.shape) - 2
    if r < 1:
        raise ShapeError(f"GridSample X needs shape (N, C, D1..Dr), got {tuple(x.shape)}")
    if len(grid.shape) != r + 2 or grid.shape[-1] != r or grid.shape[0] != x.shape[0]:
        raise ShapeError(f"GridSample grid shape {tuple(grid.shape)} does not fit X "
                         f"{tuple(x.shape)}: expected (N, H1..H{r}, {r})")
    return [((x.shape[0], x.shape[1]) + tuple(grid.shape[1:-1]), x.dtype)]


def affine_grid(ins, align_corners=0):
    """AffineGrid-20: theta (N, 2, 3) or (N, 3, 4), size int64 [N, C, H, W] or [N, C, D, H, W]
    (must be known) -> grid (N, H, W, 2) or (N, D, H, W, 3), theta's dtype.

    Raises ShapeError when size is unknown or does not fit theta.
    """
    theta = ins[0]
    size = ints(known(ins[1], "AffineGrid size"))
    r = len(size) - 2
    if r not in (2, 3) or tuple(theta.shape[1:]) != (r, r + 1) or theta.shape[0] != size[0]:
        raise ShapeError(f"AffineGrid theta {tuple(theta.shape)} does not fit size {size}")
    return [((size[0],) + tuple(size[2:]) + (r,), theta.dtype)]


def same_as_input(op):
    """A shape function giving one output of input 0's shape and dtype (axis checked if given)."""
    def fn(ins, axis=None, **_):
        if axis is not None:
            norm_axis(axis, len(ins[0].shape), f"{op} axis")
        return [(tuple(ins[0].shape), ins[0].dtype)]
    fn.__doc__ = f"{op}: output has the input's shape and dtype."
    return fn


def lp_normalization(ins, axis=-1, p=2):
    """LpNormalization-22: output like input; p must be 1 or 2 (ShapeError otherwise)."""
    if p not in (1, 2):
        raise ShapeError(f"LpNormalization p must be 1 or 2, got {p}")
    norm_axis(axis, len(ins[0].shape), "LpNormalization axis")
    return [(tuple(ins[0].shape), ins[0].dtype)]


def reverse_sequence(ins, batch_axis=1, time_axis=0):
    """ReverseSequence-10: input (rank >= 2), sequence_lens int64 (batch,) -> like input.

    Raises ShapeError for axes other than {0, 1} or a sequence_lens of the wrong length.
    """
    x, lens = ins[0], ins[1]
    if len(x.shape) < 2 or {batch_axis, time_axis} != {0, 1}:
        raise ShapeError(f"ReverseSequence needs rank >= 2 and batch/time axes 0 and 1, got "
                         f"rank {len(x.shape)}, batch_axis={batch_axis}, time_axis={time_axis}")
    if tuple(lens.shape) != (x.shape[batch_axis],):
        raise ShapeError(f"ReverseSequence sequence_lens shape {tuple(lens.shape)}, expected "
                         f"({x.shape[batch_axis]},)")
    return [(tuple(x.shape), x.dtype)]


def center_crop_pad(ins, axes=None):
    """CenterCropPad-18: input_data (any rank), shape int (len(axes), must be known) -> input's
    dtype, with each of ``axes`` (all when None) set to ``shape``.

    Raises ShapeError when shape is unknown, negative, or its length differs from the axes.
    """
    x = ins[0]
    rank = len(x.shape)
    target = ints(known(ins[1], "CenterCropPad shape"))
    axes = list(range(rank)) if axes is None else [
        norm_axis(a, rank, "CenterCropPad axis") for a in axes]
    if len(target) != len(axes) or min(target, default=0) < 0:
        raise ShapeError(f"CenterCropPad shape {target} does not fit axes {axes}")
    out = list(x.shape)
    for a, v in zip(axes, target):
        out[a] = v
    return [(tuple(out), x.dtype)]


def col2im(ins, dilations=None, pads=None, strides=None):
    """Col2Im-18: input (N, C * prod(block_shape), L), image_shape and block_shape int64 (r,)
    (both must be known) -> (N, C, *image_shape), input's dtype.

    Raises ShapeError when the inputs are unknown or L / the channel dim do not fit.
    """
    x = ins[0]
    img = ints(known(ins[1], "Col2Im image_shape"))
    blk = ints(known(ins[2], "Col2Im block_shape"))
    r = len(img)
    dil = [1] * r if dilations is None else list(dilations)
    pad = [0] * (2 * r) if pads is None else list(pads)
    std = [1] * r if strides is None else list(strides)
    if len(x.shape) != 3 or len(blk) != r or len(dil) != r or len(pad) != 2 * r or len(std) != r:
        raise ShapeError(f"Col2Im: input {tuple(x.shape)}, image_shape {img}, block_shape "
                         f"{blk} do not fit")
    k = int(np.prod(blk))
    n_pos = 1
    for d in range(r):
        n_pos *= (img[d] + pad[d] + pad[d + r] - dil[d] * (blk[d] - 1) - 1) // std[d] + 1
    if k <= 0 or x.shape[1] % k or x.shape[2] != n_pos:
        raise ShapeError(f"Col2Im: input {tuple(x.shape)} does not fit {k} block elements and "
                         f"{n_pos} positions")
    return [((x.shape[0], x.shape[1] // k) + tuple(img), x.dtype)]


def bit_cast(ins, to):
    """BitCast-26: input's shape, dtype ``to`` (a dtype code) of the same bit width.

    Raises ShapeError when the widths differ.
    """
    x = ins[0]
    dtype = to_numpy(to)
    if dtype.itemsize != np.dtype(x.dtype).itemsize:
        raise ShapeError(f"BitCast from {np.dtype(x.dtype)} to {dtype}: bit widths differ")
    return [(tuple(x.shape), dtype)]


SHAPES = {
    "GridSample": grid_sample,
    "AffineGrid": affine_grid,
    "Hardmax": same_as_input("Hardmax"),
    "Swish": same_as_input("Swish"),
    "LpNormalization": lp_normalization,
    "ReverseSequence": reverse_sequence,
    "CenterCropPad": center_crop_pad,
    "Col2Im": col2im,
    "CumProd": cumsum,              # same shape rule as CumSum: input's shape and dtype
    "BitCast": bit_cast,
}
