"""Shape functions: loss ops (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss).

Both ops take class scores ``(N, C, d1, ..., dk)`` (k >= 0) and integer class indices
``(N, d1, ..., dk)``, with an optional per-class weight ``(C,)``. The loss has the target's shape
with ``reduction="none"`` and is a scalar ``()`` with ``"sum"`` or ``"mean"``. Source: the ONNX
operator spec, NegativeLogLikelihoodLoss-22 and SoftmaxCrossEntropyLoss-13.
"""

from __future__ import annotations

import numpy as np

from ...errors import ShapeError

_REDUCTIONS = ("none", "sum", "mean")


def _loss_shape(op, ins, reduction) -> tuple[int, ...]:
    """Checks the inputs of a loss op and returns the loss's shape."""
    x, target = ins[0], ins[1]
    weight = ins[2] if len(ins) > 2 else None
    if reduction not in _REDUCTIONS:
        raise ShapeError(f"{op}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    if len(x.shape) < 2:
        raise ShapeError(f"{op}: scores need shape (N, C, d1..dk), got {tuple(x.shape)}")
    if np.dtype(x.dtype).kind != "f":
        raise ShapeError(f"{op}: scores must be floating point, got {np.dtype(x.dtype)}")
    want = (x.shape[0],) + tuple(x.shape[2:])
    if tuple(target.shape) != want:
        raise ShapeError(f"{op}: target shape {tuple(target.shape)}, expected {want} "
                         f"for scores {tuple(x.shape)}")
    if np.dtype(target.dtype) not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise ShapeError(f"{op}: target must be int32 or int64, got {np.dtype(target.dtype)}")
    if weight is not None and tuple(weight.shape) != (x.shape[1],):
        raise ShapeError(f"{op}: weight shape {tuple(weight.shape)}, expected ({x.shape[1]},)")
    return want if reduction == "none" else ()


def negative_log_likelihood_loss(ins, ignore_index=None, reduction="mean"):
    """NegativeLogLikelihoodLoss-22: input (N, C, *D) float, target (N, *D) int32/int64,
    weight (C,) optional -> loss (N, *D) for ``reduction="none"``, else () (dtype of input).

    Raises ShapeError for rank < 2, mismatched target/weight shapes or dtypes, or an unknown
    reduction.
    """
    shape = _loss_shape("NegativeLogLikelihoodLoss", ins, reduction)
    return [(shape, ins[0].dtype)]


def softmax_cross_entropy_loss(ins, ignore_index=None, reduction="mean"):
    """SoftmaxCrossEntropyLoss-13: scores (N, C, *D), labels (N, *D), weights (C,) optional ->
    output (N, *D) for ``reduction="none"``, else (); log_prob like scores.

    Raises ShapeError as :func:`negative_log_likelihood_loss` does.
    """
    shape = _loss_shape("SoftmaxCrossEntropyLoss", ins, reduction)
    x = ins[0]
    return [(shape, x.dtype), (tuple(x.shape), x.dtype)]


SHAPES = {
    "NegativeLogLikelihoodLoss": negative_log_likelihood_loss,
    "SoftmaxCrossEntropyLoss": softmax_cross_entropy_loss,
}
