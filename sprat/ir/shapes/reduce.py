"""Shape functions: reductions (Reduce*-18 form: axes as an optional second input), ArgMax/ArgMin,
CumSum. Source: ONNX operator spec, ReduceSum-13 / ReduceMean-18 / ArgMax-13 / CumSum-14.
"""

from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from .datadep import DataDependentShape

_I64 = np.dtype(np.int64)


def norm_axis(axis: int, rank: int, what: str = "axis") -> int:
    """``axis`` in ``[-rank, rank)`` made non-negative. Raises ShapeError when out of range."""
    axis = int(axis)
    if not -rank <= axis < rank:
        raise ShapeError(f"{what} {axis} is out of range for rank {rank} (expected "
                         f"[{-rank}, {rank - 1}])")
    return axis + rank if axis < 0 else axis


def reduce_axes(rank: int, axes, noop_with_empty_axes: int) -> tuple[int, ...] | None:
    """The sorted non-negative axes a reduction runs over; None means no reduction at all.

    ``axes`` is the axes input's contents (or None when the input is absent). Empty or absent
    axes reduce every axis, unless ``noop_with_empty_axes`` is set (then the op is identity).
    """
    if axes is None or np.size(axes) == 0:
        return None if noop_with_empty_axes else tuple(range(rank))
    out = sorted({norm_axis(a, rank, "reduction axis") for a in np.asarray(axes).ravel()})
    if len(out) != np.size(axes):
        raise ShapeError(f"reduction axes {np.asarray(axes).tolist()} repeat an axis")
    return tuple(out)


def reduced_shape(shape, axes, keepdims) -> tuple[int, ...]:
    if axes is None:
        return tuple(shape)
    if keepdims:
        return tuple(1 if k in axes else d for k, d in enumerate(shape))
    return tuple(d for k, d in enumerate(shape) if k not in axes)


def _axes_value(ins):
    a = ins[1] if len(ins) > 1 else None
    if a is None:
        return None
    if a.value is None:
        raise DataDependentShape("the reduction axes input must be known before running "
                         "(a constant or computable from shapes)")
    return a.value


def reduce(ins, keepdims=1, noop_with_empty_axes=0):
    """Reduce*(data, axes?): output dtype = input dtype."""
    x = ins[0]
    axes = reduce_axes(len(x.shape), _axes_value(ins), noop_with_empty_axes)
    return [(reduced_shape(x.shape, axes, keepdims), x.dtype)]


def arg_reduce(ins, axis=0, keepdims=1, select_last_index=0):
    """ArgMax/ArgMin-13: int64 indices; the reduced axis is kept as 1 or dropped."""
    x = ins[0]
    a = norm_axis(axis, len(x.shape))
    return [(reduced_shape(x.shape, (a,), keepdims), _I64)]


def cumsum(ins, exclusive=0, reverse=0):
    """CumSum-14(x, axis): same shape and dtype; axis is a scalar (or 1-element) tensor."""
    x, axis = ins[0], ins[1]
    if axis.size != 1:
        raise ShapeError(f"CumSum axis must be a scalar, got shape {axis.shape}")
    if axis.value is not None:
        norm_axis(int(np.asarray(axis.value).ravel()[0]), len(x.shape))
    return [(x.shape, x.dtype)]


_REDUCE = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
           "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")

SHAPES: dict = {
    **{op: reduce for op in _REDUCE},
    "ArgMax": arg_reduce,
    "ArgMin": arg_reduce,
    "CumSum": cumsum,
}
