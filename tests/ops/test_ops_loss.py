"""Shape functions and reference kernels of the loss ops against onnxruntime.

NegativeLogLikelihoodLoss (opset 22) and SoftmaxCrossEntropyLoss (opset 13): every reduction,
with and without weights, int32 and int64 targets, float32 and float64, ignore_index inside,
outside and below the class range, and k-dimensional inputs. Each case builds a single-node ONNX
model and compares sprat's inferred shapes/dtypes and the reference backend's values with
onnxruntime (tests/opcheck.py; tolerance there: max abs err <= 1e-4 * max(1, max|ref|)).
A few cases also run the full pipeline (convert -> .sprat -> Session on every backend).
"""

from __future__ import annotations

import numpy as np
import pytest
from opcheck import check_op, check_reference, randn

from sprat.backends.reference.ops_loss import (
    negative_log_likelihood_loss,
    softmax_cross_entropy_loss,
)
from sprat.errors import ShapeError
from sprat.ir.graph import Node
from sprat.ir.shapes import infer
from sprat.ir.tensorinfo import TensorInfo

NLL = "NegativeLogLikelihoodLoss"
SCE = "SoftmaxCrossEntropyLoss"
OPSETS = {NLL: 22, SCE: 13}

SHAPES = [(5, 4), (3, 5, 2), (2, 3, 4, 2, 3)]          # (N, C), (N, C, d1), (N, C, d1, d2, d3)
REDUCTIONS = ["none", "sum", "mean"]
# (ignore_index, whether some targets are set to it): None = attribute absent.
IGNORES = [None, 1, -1, -5, 7]


def _inputs(op, shape, dtype, tdtype, weighted, ignore_index, seed=0):
    """Scores (log-probabilities for NLL), targets with a few entries == ignore_index, weights."""
    rng = np.random.default_rng(seed)
    c = shape[1]
    x = randn(*shape, seed=seed + 1, dtype=dtype)
    if op == NLL:
        # NLL takes log-probabilities; any floats are valid, but keep them realistic
        x = (x - np.log(np.exp(x.astype(np.float64)).sum(axis=1, keepdims=True))).astype(dtype)
    t = rng.integers(0, c, size=(shape[0],) + shape[2:])
    if ignore_index is not None:
        mask = rng.random(t.shape) < 0.3
        mask.flat[0] = True
        t[mask] = ignore_index
    inputs = {"x": x, "t": t.astype(tdtype)}
    if weighted:
        inputs["w"] = rng.uniform(0.1, 2.0, size=c).astype(dtype)
    return inputs


def _attrs(reduction, ignore_index):
    attrs = {"reduction": reduction}
    if ignore_index is not None:
        attrs["ignore_index"] = ignore_index
    return attrs


@pytest.mark.parametrize("op", [NLL, SCE])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore_index", IGNORES)
def test_loss_float32_int64(op, shape, reduction, weighted, ignore_index):
    if ignore_index == 1 and shape[1] < 2:
        pytest.skip("class 1 does not exist")
    inputs = _inputs(op, shape, np.float32, np.int64, weighted, ignore_index)
    check_reference(op, inputs, _attrs(reduction, ignore_index), opset=OPSETS[op])


@pytest.mark.parametrize("op", [NLL, SCE])
@pytest.mark.parametrize("dtype,tdtype", [(np.float64, np.int64), (np.float64, np.int32),
                                          (np.float32, np.int32)])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_loss_dtypes(op, dtype, tdtype, reduction, weighted):
    inputs = _inputs(op, (4, 3, 5), dtype, tdtype, weighted, -1, seed=3)
    out = check_reference(op, inputs, _attrs(reduction, -1), opset=OPSETS[op])
    assert out[0].dtype == dtype


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_sce_log_prob(shape, reduction, weighted):
    inputs = _inputs(SCE, shape, np.float32, np.int64, weighted, 2, seed=5)
    out = check_reference(SCE, inputs, _attrs(reduction, 2), n_outputs=2, opset=13)
    assert out[1].shape == shape


@pytest.mark.parametrize("op", [NLL, SCE])
@pytest.mark.parametrize("weighted", [False, True])
def test_loss_mean_all_ignored_is_nan(op, weighted):
    # mean over no counted entry is 0 / 0: onnxruntime returns NaN, and so must sprat
    inputs = _inputs(op, (3, 4), np.float32, np.int64, weighted, None)
    inputs["t"][:] = 2
    out = check_reference(op, inputs, {"reduction": "mean", "ignore_index": 2},
                          opset=OPSETS[op])
    assert np.isnan(out[0])


def test_nll_mean_weighted_spec_example():
    # ONNX spec, NegativeLogLikelihoodLoss example 3: weighted mean = -1.57 (sum -1.1 example 2)
    x = np.array([[[1.0, 2.0], [2.0, 2.0], [3.0, 2.0]],
                  [[0.0, 1.0], [2.0, 2.0], [1.0, 2.0]]], dtype=np.float32)
    t = np.array([[2, 1], [0, 2]], dtype=np.int64)
    w = np.array([0.2, 0.3, 0.1], dtype=np.float32)
    got = negative_log_likelihood_loss(x, t, w, reduction="mean")
    np.testing.assert_allclose(got, -1.1 / 0.7, rtol=1e-6)
    got = negative_log_likelihood_loss(x, t, w, reduction="sum")
    np.testing.assert_allclose(got, -1.1, rtol=1e-6)
    assert got.shape == () and got.dtype == np.float32


def test_sce_matches_nll_of_log_softmax():
    x = randn(4, 5, 3, seed=9, dtype=np.float64)
    t = np.random.default_rng(9).integers(0, 5, size=(4, 3))
    loss, log_prob = softmax_cross_entropy_loss(x, t, reduction="none")
    np.testing.assert_allclose(np.exp(log_prob).sum(axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(loss, negative_log_likelihood_loss(log_prob, t, reduction="none"),
                               rtol=1e-12)


def test_float16_computes_in_float32():
    # onnxruntime rounds the float16 intermediates; sprat sums in float32 and rounds once, so
    # compare with a float32 computation of the same inputs, within float16's rounding (2^-11).
    inputs = _inputs(SCE, (6, 5, 4), np.float16, np.int64, True, 0, seed=11)
    loss, log_prob = softmax_cross_entropy_loss(inputs["x"], inputs["t"], inputs["w"],
                                                ignore_index=0)
    ref, ref_lp = softmax_cross_entropy_loss(inputs["x"].astype(np.float32), inputs["t"],
                                             inputs["w"].astype(np.float32), ignore_index=0)
    assert loss.dtype == np.float16 and log_prob.dtype == np.float16
    np.testing.assert_allclose(loss.astype(np.float32), ref, rtol=2.0 ** -11)
    np.testing.assert_allclose(log_prob.astype(np.float32), ref_lp, rtol=2.0 ** -11, atol=1e-7)


@pytest.mark.parametrize("fn", [negative_log_likelihood_loss, softmax_cross_entropy_loss])
def test_out_of_range_target_raises(fn):
    x = randn(3, 4)
    with pytest.raises(IndexError, match="outside"):
        fn(x, np.array([0, 4, 1]))
    with pytest.raises(IndexError, match="outside"):
        fn(x, np.array([0, -1, 1]), ignore_index=-2)
    fn(x, np.array([0, -1, 1]), ignore_index=-1)        # ignored: fine


@pytest.mark.parametrize("op", [NLL, SCE])
@pytest.mark.parametrize("x_shape,t_shape,t_dtype,w_shape,attrs,match", [
    ((4,), (4,), np.int64, None, {}, "N, C"),
    ((4, 3), (3,), np.int64, None, {}, "target shape"),
    ((4, 3, 2), (4, 3), np.int64, None, {}, "target shape"),
    ((4, 3), (4,), np.float32, None, {}, "int32 or int64"),
    ((4, 3), (4,), np.int64, (4,), {}, "weight shape"),
    ((4, 3), (4,), np.int64, None, {"reduction": "max"}, "reduction"),
])
def test_shape_errors(op, x_shape, t_shape, t_dtype, w_shape, attrs, match):
    ins = [TensorInfo(x_shape, np.dtype(np.float32)), TensorInfo(t_shape, np.dtype(t_dtype))]
    if w_shape is not None:
        ins.append(TensorInfo(w_shape, np.dtype(np.float32)))
    node = Node(op, "loss", list(range(len(ins))), [10, 11], attrs)
    with pytest.raises(ShapeError, match=match):
        infer(node, ins)


# ---- full pipeline ---------------------------------------------------------------------------

@pytest.mark.parametrize("op,shape,reduction,weighted,ignore_index", [
    (NLL, (5, 4), "mean", True, 1),
    (NLL, (2, 3, 4, 2), "none", False, -1),
    (SCE, (3, 5, 2), "sum", True, None),
    (SCE, (4, 3), "mean", False, -5),
])
def test_pipeline(op, shape, reduction, weighted, ignore_index):
    inputs = _inputs(op, shape, np.float32, np.int64, weighted, ignore_index, seed=7)
    n_outputs = 2 if op == SCE else 1
    check_op(op, inputs, _attrs(reduction, ignore_index), n_outputs=n_outputs,
             opset=OPSETS[op], const_inputs={"w"} & set(inputs))


def test_pipeline_dynamic_resize():
    inputs = _inputs(SCE, (3, 4, 2), np.float32, np.int64, True, 0, seed=8)
    other = _inputs(SCE, (5, 4, 3), np.float32, np.int64, True, 0, seed=9)
    check_op(SCE, inputs, {"reduction": "mean", "ignore_index": 0}, n_outputs=2, opset=13,
             dynamic=True, resize_to={"x": other["x"], "t": other["t"], "w": other["w"]})
