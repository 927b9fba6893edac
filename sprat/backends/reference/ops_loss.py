"""Reference kernels: loss ops (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss).

Vectorised NumPy: the per-element loss is one ``take_along_axis`` over the class axis, the
per-element weight one fancy index into ``weight``; entries whose target equals ``ignore_index``
get loss 0 and weight 0, so they drop out of both the sum and the mean's denominator. Source:
the ONNX operator spec, NegativeLogLikelihoodLoss-22 and SoftmaxCrossEntropyLoss-13.
"""

from __future__ import annotations

import numpy as np


def _work_dtype(dtype: np.dtype) -> np.dtype:
    # NOTE: float16 has too little range and precision for the sums; compute in float32 and
    # round once at the end, as onnxruntime does for half types.
    return np.dtype(np.float32) if dtype.itemsize < 4 else dtype


def _nll(logp, target, weight, ignore_index, reduction, out_dtype):
    """Loss of log-probabilities ``logp`` (N, C, *D) against ``target`` (N, *D).

    Returns the loss in ``out_dtype``: (N, *D) for ``reduction="none"``, else a 0-d array.
    Raises IndexError for a target outside [0, C) that is not ``ignore_index`` and ValueError
    for an unknown reduction.
    """
    if reduction not in ("none", "sum", "mean"):
        raise ValueError(f"reduction must be none/sum/mean, got {reduction!r}")
    n_classes = logp.shape[1]
    target = np.asarray(target).astype(np.int64, copy=False)
    if ignore_index is None:
        ignored = np.zeros(target.shape, dtype=bool)
    else:
        ignored = target == ignore_index
    safe = np.where(ignored, 0, target)
    bad = (safe < 0) | (safe >= n_classes)
    if bad.any():
        first = int(safe[bad].ravel()[0])
        raise IndexError(f"target value {first} is outside [0, {n_classes}) "
                         f"and is not ignore_index ({ignore_index})")
    picked = np.take_along_axis(logp, safe[:, None], axis=1)[:, 0]
    loss = np.where(ignored, 0, -picked).astype(logp.dtype, copy=False)
    if weight is not None:
        w = np.where(ignored, 0, weight.astype(logp.dtype, copy=False)[safe])
        loss = loss * w
    elif reduction == "mean":
        w = (~ignored).astype(logp.dtype)
    if reduction == "none":
        return loss.astype(out_dtype, copy=False)
    total = loss.sum(dtype=logp.dtype)
    if reduction == "sum":
        return np.asarray(total, dtype=out_dtype)
    # NOTE: mean divides by the sum of the applied weights (1 per non-ignored entry without a
    # weight input); when every entry is ignored that is 0 / 0 = NaN, as onnxruntime gives.
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(total / w.sum(dtype=logp.dtype), dtype=out_dtype)


def negative_log_likelihood_loss(input, target, weight=None, ignore_index=None,
                                 reduction="mean"):
    """NegativeLogLikelihoodLoss-22.

    ``loss[n, *d] = -input[n, target[n, *d], *d] * weight[target[n, *d]]`` (weight 1 when
    absent; 0 where ``target == ignore_index``), then reduced: ``none`` keeps (N, *D), ``sum``
    sums, ``mean`` divides the sum by the sum of the applied weights.

    Args:
        input: (N, C, d1..dk) float log-probabilities.
        target: (N, d1..dk) int32/int64 class indices.
        weight: optional (C,) per-class weights, dtype of input.
    Returns: the loss, dtype of input. Raises IndexError for an out-of-range target.
    """
    work = _work_dtype(input.dtype)
    return _nll(input.astype(work, copy=False), target, weight, ignore_index, reduction,
                input.dtype)


def softmax_cross_entropy_loss(scores, labels, weights=None, ignore_index=None,
                               reduction="mean"):
    """SoftmaxCrossEntropyLoss-13: NegativeLogLikelihoodLoss of ``LogSoftmax(scores, axis=1)``.

    Args:
        scores: (N, C, d1..dk) float.
        labels: (N, d1..dk) int32/int64 class indices.
        weights: optional (C,) per-class weights, dtype of scores.
    Returns: (output, log_prob): the loss as in :func:`negative_log_likelihood_loss` and the
    log-probabilities (N, C, d1..dk), both dtype of scores.
    """
    work = _work_dtype(scores.dtype)
    x = scores.astype(work, copy=False)
    z = x - x.max(axis=1, keepdims=True)
    log_prob = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    loss = _nll(log_prob, labels, weights, ignore_index, reduction, scores.dtype)
    return loss, log_prob.astype(scores.dtype, copy=False)


OPS = {
    "NegativeLogLikelihoodLoss": negative_log_likelihood_loss,
    "SoftmaxCrossEntropyLoss": softmax_cross_entropy_loss,
}
